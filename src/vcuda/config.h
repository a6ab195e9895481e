/* config.h — libvcuda's configuration: the file at $VCUDA_CONFIG (default
 * /etc/vcuda/config, written by the agent, mounted read-only) or, when no file
 * exists, the VCUDA_* environment. A present file wins over the environment so
 * a container user cannot raise their own limit. Format: docs/vcuda.md.
 *
 * Pure parsing here (no globals); vcuda.c loads it once and caches it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VC_CONFIG_DEFAULT_PATH "/etc/vcuda/config"
#define VC_CONFIG_MAX_DEVICES 16
#define VC_CONFIG_MAX_SIZE 65536
/* Device memory a CUDA context holds by itself, when not configured. */
#define VC_CONFIG_DEFAULT_CONTEXT_MEMORY (256ull << 20)

enum vc_config_source {
    VC_CONFIG_SOURCE_NONE = 0, /* neither file nor environment: no limits */
    VC_CONFIG_SOURCE_ENV,
    VC_CONFIG_SOURCE_FILE,
};

struct vc_config {
    enum vc_config_source source;
    uint64_t memory_limit;   /* bytes per device, 0 = unlimited */
    uint64_t context_memory; /* bytes charged per context */
    int core_limit;          /* 1..100 (100 = unlimited), 0 = not configured */
    int core_policy;         /* enum vc_core_policy (region.h) */
    char region[512];        /* path of the shared usage region, "" = private */
    int device_count;        /* UUIDs given (0 = every visible device, by ordinal) */
    char device_uuid[VC_CONFIG_MAX_DEVICES][64];
};

/* Sets the defaults: no limits, default context memory, no region. */
void vc_config_init(struct vc_config *cfg);

/* Parses the config file text (len bytes, need not be NUL-terminated) into
 * *cfg, which holds the defaults or earlier values. On error cfg is unchanged
 * and err (errlen bytes) says which line and why. Returns 0 or -EINVAL. */
int vc_config_parse(const char *text, size_t len, struct vc_config *cfg, char *err, size_t errlen);

/* Applies VCUDA_MEMORY_LIMIT, VCUDA_CORE_LIMIT, VCUDA_CORE_POLICY, VCUDA_REGION,
 * VCUDA_CONTEXT_MEMORY, VCUDA_DEVICES read through getenv_fn (getenv in the
 * library; injectable for tests). Same error contract as vc_config_parse. */
int vc_config_from_env(char *(*getenv_fn)(const char *), struct vc_config *cfg, char *err,
                       size_t errlen);

/* The whole policy: the file at path (NULL = $VCUDA_CONFIG or the default)
 * when it exists, else the environment. An existing file that cannot be read
 * or parsed is an error (the caller fails closed). Returns 0 or -errno. */
int vc_config_load(const char *path, struct vc_config *ret, char *err, size_t errlen);
