/* fuzz-proc-stat.c — libFuzzer target for src/common/proc.c's reader of /proc/<pid>/stat text,
 * whose comm field is whatever name a process gave itself. The input is the file's text, not
 * NUL-terminated. Checks the parser's promises: no read past the text (ASan), 0 or -EPROTO
 * only, the output untouched on failure, and a success that does not depend on what follows
 * the text. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL 0x5eed5eed5eed5eedull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    /* an exact-size copy, so ASan sees any read past the text; one spare byte for below */
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    if (size)
        memcpy(s, data, size);
    uint64_t v = SENTINEL;
    int r = proc_parse_start_time(s, size, &v);
    if (r != 0 && r != -EPROTO)
        abort();
    if (r < 0 && v != SENTINEL)
        abort(); /* output touched on failure */
    if (r == 0) {
        /* the number ended inside the text: a further line cannot change it */
        uint64_t again = SENTINEL;
        s[size] = '\n';
        if (proc_parse_start_time(s, size + 1, &again) != 0 || again != v)
            abort();
    }
    free(s);
    return 0;
}
