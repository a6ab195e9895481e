/* vcuda-config.h — libvcuda's configuration: the agent's file (/etc/vcuda/config,
 * fixed at build time, mounted read-only), which the environment may only
 * tighten; without it (standalone use) $VCUDA_CONFIG or the VCUDA_*
 * environment. Format and rules: docs/vcuda.md.
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
    VC_CONFIG_SOURCE_FILE,  /* a standalone file ($VCUDA_CONFIG) */
    VC_CONFIG_SOURCE_AGENT, /* the agent's file at the built-in path */
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

/* The agent's config path libvcuda.so reads (config-path.c): fixed when the
 * library is built (meson option vcuda_config_path, default
 * VC_CONFIG_DEFAULT_PATH). Nothing at run time changes it: a tenant controls
 * its process's environment, so no variable may point the library elsewhere.
 * Tests build a second library (libvcuda-agenttest.so) whose path lies in the
 * build tree. */
extern const char vc_config_agent_path[];

/* The whole policy (docs/vcuda.md, "Configuration"):
 *  - the agent's file at agent_path exists: it is the configuration; a
 *    VCUDA_* variable may only tighten it (lower memory or core limit, larger
 *    context charge, hard policy); any other variable set, VCUDA_CONFIG
 *    included, is ignored and named in note. A file that cannot be read or
 *    parsed is an error (the caller fails closed).
 *  - no agent file (standalone use): the file named by VCUDA_CONFIG when it
 *    exists (a broken one is an error), else the environment.
 * getenv_fn is getenv in the library (injectable for tests). note (may be
 * NULL) gets "" or what was ignored. Returns 0 or -errno with err filled. */
int vc_config_load(const char *agent_path, char *(*getenv_fn)(const char *), struct vc_config *ret,
                   char *err, size_t errlen, char *note, size_t notelen);
