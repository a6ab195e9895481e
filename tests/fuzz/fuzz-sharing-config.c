/* fuzz-sharing-config.c — libFuzzer target for the sharing config parser
 * (src/modes/sharing-config.c): any bytes in, a config or a clean error out; a
 * refused document leaves the output untouched; an accepted one resolves
 * against a small fake inventory without crashing. Every input is parsed
 * both alone and as acceld's config file (SHARING_PARSE_OTHER_KEYS), where
 * other top-level keys are left to config.c. */
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sharing-config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sharing_config c, d;
    char err[512];
    memset(&c, 0x33, sizeof(c));
    d = c;
    int r = sharing_config_parse_ex(&c, (const char *)data, size, "fuzz", SHARING_PARSE_OTHER_KEYS,
                                    err, sizeof(err));
    if (r < 0 && (memcmp(&c, &d, sizeof(c)) != 0 || err[0] == '\0'))
        abort();
    memset(&c, 0x33, sizeof(c));
    int strict = sharing_config_parse(&c, (const char *)data, size, "fuzz", err, sizeof(err));
    if (strict == 0 && r < 0)
        abort(); /* what the strict parser takes, acceld's file takes too */
    r = strict;
    if (r < 0) {
        if (memcmp(&c, &d, sizeof(c)) != 0 || err[0] == '\0')
            abort();
        return 0;
    }
    static const struct sharing_gpu gpus[] = {
        {0, "GPU-0", 8, 0}, {1, "GPU-1", 6, 0}, {2, "GPU-2", 9, 0}};
    for (size_t i = 0; i < 3; i++) {
        const struct sharing_resource *res;
        unsigned n;
        r = sharing_config_resolve(&c, gpus, 3, i, &res, &n, err, sizeof(err));
        if (r == 0) {
            char buf[SHARING_NAME_MAX + 16];
            if (n < 1 || n > sharing_replicas_max(gpus[i].cc_major, 0))
                abort();
            sharing_resource_advertised(&c, res, buf, sizeof(buf));
        } else if (r != -ENOENT && r != -EINVAL) {
            abort();
        }
    }
    return 0;
}
