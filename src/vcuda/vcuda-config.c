/* vcuda-config.c — parsing of libvcuda's config file and environment; see vcuda-config.h
 * and docs/vcuda.md for the format. libc only: this runs inside every process
 * of a container, so no libyaml here. */
#include "vcuda-config.h"

#include "region.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void vc_config_init(struct vc_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->context_memory = VC_CONFIG_DEFAULT_CONTEXT_MEMORY;
    cfg->core_policy = VC_CORE_POLICY_HARD;
}

static int parse_devices(const char *v, struct vc_config *cfg, char *why, size_t whylen)
{
    int n = 0;
    const char *p = v;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && isspace((unsigned char)*p)) {
            p++;
            len--;
        }
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        if (len == 0 || len >= sizeof(cfg->device_uuid[0])) {
            snprintf(why, whylen, "device UUID %d is empty or longer than 63 characters", n + 1);
            return -EINVAL;
        }
        for (size_t i = 0; i < len; i++) {
            if (!isalnum((unsigned char)p[i]) && p[i] != '-' && p[i] != '_' && p[i] != ':') {
                snprintf(why, whylen, "device UUID %d has a character other than [A-Za-z0-9-_:]",
                         n + 1);
                return -EINVAL;
            }
        }
        if (n == VC_CONFIG_MAX_DEVICES) {
            snprintf(why, whylen, "more than %d devices", VC_CONFIG_MAX_DEVICES);
            return -EINVAL;
        }
        memcpy(cfg->device_uuid[n], p, len);
        cfg->device_uuid[n][len] = '\0';
        n++;
        if (!end)
            break;
        p = end + 1;
        if (!*p) {
            snprintf(why, whylen, "trailing comma");
            return -EINVAL;
        }
    }
    if (n == 0) {
        snprintf(why, whylen, "no device UUID");
        return -EINVAL;
    }
    cfg->device_count = n;
    return 0;
}

/* Applies one key/value to cfg. Returns 0 or -EINVAL with why filled in. */
static int apply(struct vc_config *cfg, const char *key, const char *val, char *why, size_t whylen)
{
    if (strcmp(key, "memory_limit") == 0) {
        uint64_t v;
        if (parse_size(val, &v) < 0) {
            snprintf(why, whylen, "memory_limit \"%.64s\" is not a size (e.g. 4Gi, 512Mi, 0)", val);
            return -EINVAL;
        }
        cfg->memory_limit = v;
    } else if (strcmp(key, "context_memory") == 0) {
        uint64_t v;
        if (parse_size(val, &v) < 0) {
            snprintf(why, whylen, "context_memory \"%.64s\" is not a size (e.g. 256Mi)", val);
            return -EINVAL;
        }
        cfg->context_memory = v;
    } else if (strcmp(key, "core_limit") == 0) {
        int v;
        if (parse_int(val, &v) < 0 || v < 1 || v > 100) {
            snprintf(why, whylen, "core_limit \"%.64s\" is not a percentage 1..100", val);
            return -EINVAL;
        }
        cfg->core_limit = v;
    } else if (strcmp(key, "core_policy") == 0) {
        if (strcmp(val, "hard") == 0)
            cfg->core_policy = VC_CORE_POLICY_HARD;
        else if (strcmp(val, "burst") == 0)
            cfg->core_policy = VC_CORE_POLICY_BURST;
        else {
            snprintf(why, whylen, "core_policy \"%.64s\" is neither hard nor burst", val);
            return -EINVAL;
        }
    } else if (strcmp(key, "region") == 0) {
        if (val[0] != '/' || strlen(val) >= sizeof(cfg->region)) {
            snprintf(why, whylen, "region must be an absolute path shorter than %zu bytes",
                     sizeof(cfg->region));
            return -EINVAL;
        }
        strcpy(cfg->region, val);
    } else if (strcmp(key, "devices") == 0) {
        return parse_devices(val, cfg, why, whylen);
    } else {
        snprintf(why, whylen, "unknown key \"%.64s\"", key);
        return -EINVAL;
    }
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int vc_config_parse(const char *text, size_t len, struct vc_config *cfg, char *err, size_t errlen)
{
    if (len > VC_CONFIG_MAX_SIZE)
        return errbuf_printf(err, errlen, "config is larger than %d bytes", VC_CONFIG_MAX_SIZE);
    if (memchr(text, '\0', len))
        return errbuf_printf(err, errlen, "config holds a NUL byte (not a text file?)");
    struct vc_config next = *cfg;
    unsigned seen = 0; /* bit per key index, to reject duplicates */
    static const char *const keys[] = {"memory_limit", "context_memory", "core_limit",
                                       "core_policy",  "region",         "devices"};
    size_t pos = 0;
    int lineno = 0;
    while (pos < len) {
        lineno++;
        size_t end = pos;
        while (end < len && text[end] != '\n')
            end++;
        char line[1024];
        if (end - pos >= sizeof(line))
            return errbuf_printf(err, errlen, "line %d: longer than %zu bytes", lineno,
                                 sizeof(line) - 1);
        memcpy(line, text + pos, end - pos);
        line[end - pos] = '\0';
        pos = end + 1;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq)
            return errbuf_printf(err, errlen, "line %d: expected key = value", lineno);
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        if (!*val)
            return errbuf_printf(err, errlen, "line %d: %s has no value", lineno, key);
        for (unsigned k = 0; k < ARRAY_SIZE(keys); k++) {
            if (strcmp(key, keys[k]) == 0) {
                if (seen & (1u << k))
                    return errbuf_printf(err, errlen, "line %d: %s given twice", lineno, key);
                seen |= 1u << k;
            }
        }
        char why[160];
        if (apply(&next, key, val, why, sizeof(why)) < 0)
            return errbuf_printf(err, errlen, "line %d: %s", lineno, why);
    }
    next.source = VC_CONFIG_SOURCE_FILE;
    *cfg = next;
    return 0;
}

int vc_config_from_env(char *(*getenv_fn)(const char *), struct vc_config *cfg, char *err,
                       size_t errlen)
{
    static const struct {
        const char *env, *key;
    } map[] = {
        {"VCUDA_MEMORY_LIMIT", "memory_limit"},
        {"VCUDA_CONTEXT_MEMORY", "context_memory"},
        {"VCUDA_CORE_LIMIT", "core_limit"},
        {"VCUDA_CORE_POLICY", "core_policy"},
        {"VCUDA_REGION", "region"},
        {"VCUDA_DEVICES", "devices"},
    };
    struct vc_config next = *cfg;
    bool any = false;
    for (size_t i = 0; i < ARRAY_SIZE(map); i++) {
        const char *v = getenv_fn(map[i].env);
        if (!v || !*v)
            continue;
        char val[1024];
        if (strlen(v) >= sizeof(val))
            return errbuf_printf(err, errlen, "%s: longer than %zu bytes", map[i].env,
                                 sizeof(val) - 1);
        strcpy(val, v);
        char why[160];
        if (apply(&next, map[i].key, trim(val), why, sizeof(why)) < 0)
            return errbuf_printf(err, errlen, "%s: %s", map[i].env, why);
        any = true;
    }
    next.source = any ? VC_CONFIG_SOURCE_ENV : VC_CONFIG_SOURCE_NONE;
    *cfg = next;
    return 0;
}

/* Reads and parses the file at path into *cfg. -ENOENT when there is no file
 * (nothing written to err); any other failure is an error naming the file. */
static int load_file(const char *path, struct vc_config *cfg, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int r = -errno;
        if (r != -ENOENT)
            errbuf_printf(err, errlen, "%s: %s", path, strerror(-r));
        return r;
    }
    char *buf = malloc(VC_CONFIG_MAX_SIZE + 1);
    if (!buf) {
        close(fd);
        errbuf_printf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, VC_CONFIG_MAX_SIZE + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int r = -errno;
            free(buf);
            close(fd);
            errbuf_printf(err, errlen, "%s: %s", path, strerror(-r));
            /* ENOENT cannot come from read(2); keep "no file" distinct anyway */
            return r == -ENOENT ? -EIO : r;
        }
        if (n == 0 || len + (size_t)n > VC_CONFIG_MAX_SIZE) {
            len += (size_t)n;
            break;
        }
        len += (size_t)n;
    }
    close(fd);
    char why[256];
    int r = vc_config_parse(buf, len, cfg, why, sizeof(why));
    free(buf);
    if (r < 0)
        return errbuf_printf(err, errlen, "%s: %s", path, why);
    return 0;
}

static void note_ignored(char *note, size_t notelen, const char *env, const char *agent_path)
{
    if (!note || !notelen)
        return;
    size_t used = strnlen(note, notelen);
    if (used + 1 < notelen)
        snprintf(note + used, notelen - used,
                 "%s ignored: %s is in force and the environment may only lower its limits; ", env,
                 agent_path);
}

/* The agent's file is in force: a VCUDA_* variable may only make it stricter
 * (a lower memory or core limit, a larger context charge, hard instead of
 * burst). Anything else is ignored and named in note. */
static void tighten_from_env(char *(*getenv_fn)(const char *), const char *agent_path,
                             struct vc_config *cfg, char *note, size_t notelen)
{
    static const struct {
        const char *env, *key;
    } map[] = {
        {"VCUDA_MEMORY_LIMIT", "memory_limit"},
        {"VCUDA_CONTEXT_MEMORY", "context_memory"},
        {"VCUDA_CORE_LIMIT", "core_limit"},
        {"VCUDA_CORE_POLICY", "core_policy"},
        {"VCUDA_REGION", "region"},
        {"VCUDA_DEVICES", "devices"},
        {"VCUDA_CONFIG", NULL},
    };
    for (size_t i = 0; i < ARRAY_SIZE(map); i++) {
        const char *v = getenv_fn(map[i].env);
        if (!v || !*v)
            continue;
        struct vc_config t = *cfg;
        char val[1024], why[160];
        bool tighter = false;
        if (map[i].key && strlen(v) < sizeof(val)) {
            strcpy(val, v);
            if (apply(&t, map[i].key, trim(val), why, sizeof(why)) == 0) {
                int cur_core = cfg->core_limit ? cfg->core_limit : 100;
                if (strcmp(map[i].key, "memory_limit") == 0)
                    tighter = t.memory_limit != 0 &&
                              (cfg->memory_limit == 0 || t.memory_limit < cfg->memory_limit);
                else if (strcmp(map[i].key, "context_memory") == 0)
                    tighter = t.context_memory > cfg->context_memory;
                else if (strcmp(map[i].key, "core_limit") == 0)
                    tighter = t.core_limit < cur_core;
                else if (strcmp(map[i].key, "core_policy") == 0)
                    tighter = t.core_policy == VC_CORE_POLICY_HARD &&
                              cfg->core_policy != VC_CORE_POLICY_HARD;
            }
        }
        if (tighter) {
            *cfg = t;
            continue;
        }
        note_ignored(note, notelen, map[i].env, agent_path);
    }
}

int vc_config_load(const char *agent_path, char *(*getenv_fn)(const char *), struct vc_config *ret,
                   char *err, size_t errlen, char *note, size_t notelen)
{
    if (note && notelen)
        note[0] = '\0';
    struct vc_config cfg;
    vc_config_init(&cfg);
    /* The agent's file, where it exists, is the authority: a file that cannot
     * be read or parsed is an error (the caller fails closed), never a reason
     * to look elsewhere. */
    int r = load_file(agent_path, &cfg, err, errlen);
    if (r == 0) {
        cfg.source = VC_CONFIG_SOURCE_AGENT;
        tighten_from_env(getenv_fn, agent_path, &cfg, note, notelen);
        *ret = cfg;
        return 0;
    }
    if (r != -ENOENT)
        return r;
    /* No agent: standalone use. $VCUDA_CONFIG when it exists, else the environment. */
    const char *path = getenv_fn("VCUDA_CONFIG");
    if (path && *path) {
        r = load_file(path, &cfg, err, errlen);
        if (r == 0) {
            *ret = cfg;
            return 0;
        }
        if (r != -ENOENT)
            return r;
    }
    r = vc_config_from_env(getenv_fn, &cfg, err, errlen);
    if (r < 0)
        return r;
    *ret = cfg;
    return 0;
}
