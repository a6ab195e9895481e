/* fuzz-acceld-config.c — libFuzzer target for acceld's config parser
 * (src/agent/acceld-config.c): any bytes in, a config or a clean error out, and on
 * success every key formats and re-parses to the same value. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acceld-config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct acceld_config c, d;
    char err[512];
    acceld_config_defaults(&c);
    d = c;
    int r = acceld_config_parse(&c, (const char *)data, size, "fuzz", err, sizeof(err));
    if (r < 0) {
        /* a refused document leaves the config untouched and says why */
        if (memcmp(&c, &d, sizeof(c)) != 0 || err[0] == '\0')
            abort();
        return 0;
    }
    for (const struct acceld_config_key *k = acceld_config_keys; k->key; k++) {
        char buf[1024];
        struct acceld_config e = c;
        if (acceld_config_format(&c, k->key, buf, sizeof(buf)) < 0)
            abort();
        /* format must be lossless: the text parses back to the same value */
        if (acceld_config_set(&e, k->key, buf, err, sizeof(err)) < 0 ||
            acceld_config_key_differs(&c, &e, k->key))
            abort();
    }
    return 0;
}
