/* fuzz-vcuda-config.c — libvcuda's config file parser (src/vcuda/vcuda-config.c):
 * the file comes from outside the library (the agent, or whatever a broken
 * node left at /etc/vcuda/config). Properties: never crashes, an error leaves
 * the config untouched, a success gives values within their documented
 * ranges. */
#include "vcuda-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vc_config cfg, before;
    vc_config_init(&cfg);
    cfg.memory_limit = 777;
    before = cfg;
    char err[256];
    int r = vc_config_parse((const char *)data, size, &cfg, err, sizeof(err));
    if (r < 0) {
        if (memcmp(&cfg, &before, sizeof(cfg)) != 0 || err[0] == '\0')
            abort();
        return 0;
    }
    if (cfg.core_limit < 0 || cfg.core_limit > 100 ||
        (cfg.core_policy != 0 && cfg.core_policy != 1))
        abort();
    if (cfg.region[0] && cfg.region[0] != '/')
        abort();
    if (cfg.device_count < 0 || cfg.device_count > VC_CONFIG_MAX_DEVICES)
        abort();
    for (int i = 0; i < cfg.device_count; i++)
        if (strlen(cfg.device_uuid[i]) == 0 || strlen(cfg.device_uuid[i]) > 63)
            abort();
    return 0;
}
