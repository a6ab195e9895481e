/* fuzz-common-parse.c — libFuzzer target for src/common's parsers of user text (sizes,
 * durations, integers, log levels), which read config files, command lines and environment
 * variables. The first byte picks the parser; the rest is the text. Checks their promises on
 * every input: no read past the text (ASan), 0 / -EINVAL / -ERANGE only, the output untouched
 * on failure, and a parsed value that reads back the same once printed. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL 0x5eed5eed5eed5eedull

static void check_ret(int r)
{
    if (r != 0 && r != -EINVAL && r != -ERANGE)
        abort();
}

static void fuzz_u64(int (*parse)(const char *, uint64_t *), const char *s)
{
    uint64_t v = SENTINEL;
    int r = parse(s, &v);
    check_ret(r);
    if (r < 0 && v != SENTINEL)
        abort(); /* output touched on failure */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    /* an exact-size copy with its terminator, so ASan sees a read past the text */
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';

    switch (data[0] % 5) {
    case 0: {
        fuzz_u64(parse_size, s);
        uint64_t v, plain;
        char buf[32];
        /* plain digits mean bytes: parse_size and parse_u64 agree */
        if (parse_size(s, &v) == 0 && parse_u64(s, &plain) == 0 && v != plain)
            abort();
        if (parse_size(s, &v) == 0 && strlen(format_bytes(v, buf, sizeof(buf))) >= sizeof(buf))
            abort();
        break;
    }
    case 1:
        fuzz_u64(parse_duration_ns, s);
        break;
    case 2: {
        fuzz_u64(parse_u64, s);
        uint64_t v, back;
        char buf[32];
        if (parse_u64(s, &v) == 0) {
            snprintf(buf, sizeof(buf), "%" PRIu64, v);
            if (parse_u64(buf, &back) != 0 || back != v)
                abort();
        }
        break;
    }
    case 3: {
        int v = 0x5eed, back;
        char buf[32];
        int r = parse_int(s, &v);
        check_ret(r);
        if (r < 0 && v != 0x5eed)
            abort();
        if (r == 0) {
            snprintf(buf, sizeof(buf), "%d", v);
            if (parse_int(buf, &back) != 0 || back != v)
                abort();
        }
        break;
    }
    default: {
        enum log_level lvl = (enum log_level)99;
        int r = log_level_parse(s, &lvl);
        if (r != 0 && r != -EINVAL)
            abort();
        if (r < 0 && lvl != (enum log_level)99)
            abort();
        if (r == 0 && (lvl < LOG_LEVEL_ERROR || lvl > LOG_LEVEL_DEBUG))
            abort();
        break;
    }
    }
    free(s);
    return 0;
}
