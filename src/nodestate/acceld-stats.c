/* acceld-stats.c — acceld's SLI counters and the acceld-stats.json format (writer and
 * strict reader, on jansson); see acceld-stats.h. */
#define _GNU_SOURCE
#include "acceld-stats.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"

/* From a fast Allocate answered from memory (well under a millisecond) to one
 * parked for its pod up to allocateWait (seconds). */
const double acceld_stats_buckets[ACCELD_STATS_NBUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

static const char *const kind_names[ACCELD_STATS_QUOTA_KINDS] = {"memory", "under_report",
                                                                 "compute"};
static const char *const action_names[ACCELD_STATS_ACTIONS] = {"none", "kill", "freeze"};

static const char *const mps_names[ACCELD_STATS_MPS_STATES] = {"none", "running", "fault", "down"};

const char *acceld_stats_mps_state_name(enum acceld_stats_mps_state m)
{
    return (unsigned)m < ACCELD_STATS_MPS_STATES ? mps_names[m] : "unknown";
}

const char *acceld_stats_quota_kind_name(enum acceld_stats_quota_kind k)
{
    return (unsigned)k < ACCELD_STATS_QUOTA_KINDS ? kind_names[k] : "unknown";
}

const char *acceld_stats_quota_action_name(enum acceld_stats_quota_action a)
{
    return (unsigned)a < ACCELD_STATS_ACTIONS ? action_names[a] : "unknown";
}

void acceld_stats_init(struct acceld_stats *s, double start_time)
{
    memset(s, 0, sizeof(*s));
    s->start_time = start_time;
    s->nbuckets = ACCELD_STATS_NBUCKETS;
    memcpy(s->bounds, acceld_stats_buckets, sizeof(acceld_stats_buckets));
}

/* ------------------------------------------------------------ counting */

static struct acceld_stats_resource *resource(struct acceld_stats *s, const char *name)
{
    for (size_t i = 0; i < s->n_resources; i++)
        if (strcmp(s->res[i].name, name) == 0)
            return &s->res[i];
    if (s->n_resources == ACCELD_STATS_MAX_RESOURCES || !*name ||
        strlen(name) >= ACCELD_STATS_NAME_MAX)
        return NULL;
    struct acceld_stats_resource *r = &s->res[s->n_resources++];
    memset(r, 0, sizeof(*r));
    memcpy(r->name, name, strlen(name) + 1);
    return r;
}

static struct acceld_stats_gpu *gpu(struct acceld_stats *s, const char *uuid)
{
    for (size_t i = 0; i < s->n_gpus; i++)
        if (strcmp(s->gpus[i].uuid, uuid) == 0)
            return &s->gpus[i];
    return NULL;
}

void acceld_stats_registration(struct acceld_stats *s, const char *res, bool ok)
{
    struct acceld_stats_resource *r = resource(s, res);
    if (!r)
        return;
    if (ok)
        r->reg_ok++;
    else
        r->reg_failed++;
    s->generation++;
}

void acceld_stats_allocate(struct acceld_stats *s, const char *res, bool ok, uint64_t duration_ns)
{
    struct acceld_stats_resource *r = resource(s, res);
    if (!r)
        return;
    double d = (double)duration_ns / 1e9;
    if (ok)
        r->alloc_ok++;
    else
        r->alloc_error++;
    r->alloc_sum += d;
    for (size_t i = 0; i < s->nbuckets; i++)
        if (d <= s->bounds[i])
            r->bucket[i]++;
    s->generation++;
}

void acceld_stats_device_init(struct acceld_stats *s, bool ok)
{
    if (ok)
        s->init_ok++;
    else
        s->init_failed++;
    s->generation++;
}

void acceld_stats_add_gpu(struct acceld_stats *s, unsigned index, const char *uuid)
{
    if (gpu(s, uuid) || s->n_gpus == ACCELD_STATS_MAX_GPUS || !*uuid ||
        strlen(uuid) >= ACCELD_STATS_UUID_MAX)
        return;
    struct acceld_stats_gpu *g = &s->gpus[s->n_gpus++];
    memset(g, 0, sizeof(*g));
    g->index = index;
    memcpy(g->uuid, uuid, strlen(uuid) + 1);
    g->has_state = true;
    g->healthy = true;
    s->generation++;
}

void acceld_stats_health(struct acceld_stats *s, const char *uuid, bool healthy)
{
    struct acceld_stats_gpu *g = gpu(s, uuid);
    if (!g)
        return;
    if (healthy)
        g->to_healthy++;
    else
        g->to_unhealthy++;
    s->generation++;
}

void acceld_stats_set_health_state(struct acceld_stats *s, const char *uuid, bool healthy,
                                   const char *reason)
{
    struct acceld_stats_gpu *g = gpu(s, uuid);
    char r[ACCELD_STATS_REASON_MAX] = ""; /* zeroed: the whole buffer is copied */
    size_t n = 0;
    if (!g)
        return;
    for (; !healthy && reason && reason[n] && n + 1 < sizeof(r); n++)
        r[n] = (unsigned char)reason[n] < 0x20 || (unsigned char)reason[n] > 0x7e ? '?' : reason[n];
    r[n] = '\0';
    if (!healthy && !n)
        snprintf(r, sizeof(r), "unknown");
    if (g->healthy == healthy && strcmp(g->reason, r) == 0)
        return;
    g->healthy = healthy;
    memcpy(g->reason, r, sizeof(r));
    s->generation++;
}

void acceld_stats_set_mps_state(struct acceld_stats *s, const char *uuid,
                                enum acceld_stats_mps_state state)
{
    struct acceld_stats_gpu *g = gpu(s, uuid);
    if (!g || (unsigned)state >= ACCELD_STATS_MPS_STATES || g->mps == state)
        return;
    g->mps = state;
    s->generation++;
}

void acceld_stats_set_mps_restarts(struct acceld_stats *s, const char *uuid, uint64_t restarts)
{
    struct acceld_stats_gpu *g = gpu(s, uuid);
    if (!g || g->mps_restarts == restarts)
        return;
    g->mps_restarts = restarts;
    s->generation++;
}

void acceld_stats_quota(struct acceld_stats *s, enum acceld_stats_quota_kind kind,
                        enum acceld_stats_quota_action action)
{
    if ((unsigned)kind >= ACCELD_STATS_QUOTA_KINDS || (unsigned)action >= ACCELD_STATS_ACTIONS)
        return;
    s->quota[kind][action]++;
    s->generation++;
}

/* ------------------------------------------------------------ writing */

static int add(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

static json_t *count(uint64_t v)
{
    return json_integer((json_int_t)v);
}

static json_t *to_json(const struct acceld_stats *s, double now)
{
    json_t *root = json_object(), *arr;
    int bad = !root;
    if (bad)
        return NULL;
    bad |= add(root, "version", json_integer(ACCELD_STATS_VERSION));
    bad |= add(root, "startTime", json_real(s->start_time));
    bad |= add(root, "writeTime", json_real(now));
    bad |= add(root, "deviceInit",
               json_pack("{s:o,s:o}", "ok", count(s->init_ok), "failed", count(s->init_failed)));
    bad |= add(root, "allocateBuckets", arr = json_array());
    for (size_t i = 0; arr && i < s->nbuckets; i++)
        bad |= json_array_append_new(arr, json_real(s->bounds[i]));
    bad |= add(root, "resources", arr = json_array());
    for (size_t i = 0; arr && i < s->n_resources; i++) {
        const struct acceld_stats_resource *r = &s->res[i];
        json_t *b = json_array();
        for (size_t k = 0; b && k < s->nbuckets; k++)
            bad |= json_array_append_new(b, count(r->bucket[k]));
        bad |= json_array_append_new(
            arr, json_pack("{s:s,s:{s:o,s:o},s:{s:o,s:o,s:o,s:o}}", "name", r->name,
                           "registrations", "ok", count(r->reg_ok), "failed", count(r->reg_failed),
                           "allocate", "ok", count(r->alloc_ok), "error", count(r->alloc_error),
                           "sum", json_real(r->alloc_sum), "buckets", b));
    }
    bad |= add(root, "gpus", arr = json_array());
    for (size_t i = 0; arr && i < s->n_gpus; i++) {
        const struct acceld_stats_gpu *g = &s->gpus[i];
        bad |= json_array_append_new(
            arr,
            json_pack("{s:I,s:s,s:o,s:o,s:o,s:b,s:s,s:s}", "index", (json_int_t)g->index, "uuid",
                      g->uuid, "toUnhealthy", count(g->to_unhealthy), "toHealthy",
                      count(g->to_healthy), "mpsRestarts", count(g->mps_restarts), "healthy",
                      /* no state (read from a version 1 file): acceld's default */
                      !g->has_state || g->healthy, "reason",
                      g->has_state && !g->healthy ? g->reason : "", "mps",
                      acceld_stats_mps_state_name(g->has_state ? g->mps : ACCELD_STATS_MPS_NONE)));
    }
    json_t *q = json_object();
    bad |= add(root, "quotaFindings", q);
    for (size_t k = 0; q && k < ACCELD_STATS_QUOTA_KINDS; k++) {
        json_t *o = json_object();
        bad |= add(q, kind_names[k], o);
        for (size_t a = 0; o && a < ACCELD_STATS_ACTIONS; a++)
            bad |= add(o, action_names[a], count(s->quota[k][a]));
    }
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

int acceld_stats_format(const struct acceld_stats *s, double now, char **ret, size_t *ret_len)
{
    json_t *root = to_json(s, now);
    char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(root);
    if (!text)
        return -ENOMEM;
    *ret_len = strlen(text);
    *ret = text;
    return 0;
}

int acceld_stats_write(const struct acceld_stats *s, const char *dir, double now)
{
    char path[4096], tmp[4096 + 8];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, ACCELD_STATS_FILE) >= sizeof(path))
        return -ENAMETOOLONG;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    char *text;
    size_t len;
    int r = acceld_stats_format(s, now, &text, &len);
    if (r < 0)
        return r;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT && (r = fs_mkdir_p(dir, 0755)) == 0)
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        r = r < 0 ? r : -errno;
        free(text);
        return r;
    }
    /* telemetry: no fsync (a crash loses at most the last second; a reader
     * never sees a torn file, only the old one or the new one) */
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            r = w < 0 ? -errno : -EIO;
            break;
        }
        off += (size_t)w;
    }
    free(text);
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    if (r < 0)
        unlink(tmp);
    return r;
}

/* ------------------------------------------------------------ reading */

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt,
                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* Refuses keys outside allowed (NULL-terminated) and missing ones. */
static int keys(json_t *o, const char *path, const char *const *allowed, char *err, size_t errlen)
{
    if (!json_is_object(o))
        return fail(err, errlen, "%s: must be an object", path);
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        const char *const *a = allowed;
        while (*a && strcmp(*a, k) != 0)
            a++;
        if (!*a)
            return fail(err, errlen, "%s: unknown key \"%.64s\"", path, k);
    }
    for (const char *const *a = allowed; *a; a++)
        if (!json_object_get(o, *a))
            return fail(err, errlen, "%s: \"%s\" is missing", path, *a);
    return 0;
}

static int get_count(json_t *o, const char *key, const char *path, uint64_t *ret, char *err,
                     size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(err, errlen, "%s.%s: must be an integer of at least 0", path, key);
    *ret = (uint64_t)json_integer_value(v);
    return 0;
}

static int get_real(json_t *o, const char *key, const char *path, double *ret, char *err,
                    size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
        return fail(err, errlen, "%s.%s: must be a finite number of at least 0", path, key);
    *ret = json_number_value(v);
    return 0;
}

/* A label value: printable ASCII, 1..max-1 bytes. */
static int get_label(json_t *o, const char *key, const char *path, char *out, size_t max, char *err,
                     size_t errlen)
{
    json_t *v = json_object_get(o, key);
    const char *s = json_string_value(v);
    size_t n = s ? json_string_length(v) : 0;
    if (!s || n == 0 || n >= max)
        return fail(err, errlen, "%s.%s: must be a string of 1 to %zu bytes", path, key, max - 1);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return fail(err, errlen, "%s.%s: only printable ASCII is allowed", path, key);
    memcpy(out, s, n + 1);
    return 0;
}

static int parse_resource(json_t *o, size_t i, struct acceld_stats *s, char *err, size_t errlen)
{
    static const char *const top[] = {"name", "registrations", "allocate", NULL};
    static const char *const reg[] = {"ok", "failed", NULL};
    static const char *const alloc[] = {"ok", "error", "sum", "buckets", NULL};
    struct acceld_stats_resource *r = &s->res[i];
    char path[64], sub[96];
    int e;
    snprintf(path, sizeof(path), "resources[%zu]", i);
    if ((e = keys(o, path, top, err, errlen)) < 0 ||
        (e = get_label(o, "name", path, r->name, sizeof(r->name), err, errlen)) < 0)
        return e;
    for (size_t k = 0; k < i; k++)
        if (strcmp(s->res[k].name, r->name) == 0)
            return fail(err, errlen, "%s.name: \"%s\" is listed twice", path, r->name);
    json_t *g = json_object_get(o, "registrations");
    snprintf(sub, sizeof(sub), "%s.registrations", path);
    if ((e = keys(g, sub, reg, err, errlen)) < 0 ||
        (e = get_count(g, "ok", sub, &r->reg_ok, err, errlen)) < 0 ||
        (e = get_count(g, "failed", sub, &r->reg_failed, err, errlen)) < 0)
        return e;
    json_t *a = json_object_get(o, "allocate");
    snprintf(sub, sizeof(sub), "%s.allocate", path);
    if ((e = keys(a, sub, alloc, err, errlen)) < 0 ||
        (e = get_count(a, "ok", sub, &r->alloc_ok, err, errlen)) < 0 ||
        (e = get_count(a, "error", sub, &r->alloc_error, err, errlen)) < 0 ||
        (e = get_real(a, "sum", sub, &r->alloc_sum, err, errlen)) < 0)
        return e;
    if (r->alloc_ok > UINT64_MAX - r->alloc_error)
        return fail(err, errlen, "%s: ok + error overflows", sub);
    uint64_t total = r->alloc_ok + r->alloc_error;
    json_t *b = json_object_get(a, "buckets");
    if (!json_is_array(b) || json_array_size(b) != s->nbuckets)
        return fail(err, errlen, "%s.buckets: must be an array of %zu counts (allocateBuckets)",
                    sub, s->nbuckets);
    for (size_t k = 0; k < s->nbuckets; k++) {
        json_t *v = json_array_get(b, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return fail(err, errlen, "%s.buckets[%zu]: must be an integer of at least 0", sub, k);
        r->bucket[k] = (uint64_t)json_integer_value(v);
        if ((k && r->bucket[k] < r->bucket[k - 1]) || r->bucket[k] > total)
            return fail(err, errlen,
                        "%s.buckets[%zu]: cumulative counts must not decrease nor exceed ok + "
                        "error (%llu)",
                        sub, k, (unsigned long long)total);
    }
    return 0;
}

/* Version 2's current state of a GPU: healthy, reason ("" exactly when healthy), mps. */
static int parse_gpu_state(json_t *o, const char *path, struct acceld_stats_gpu *g, char *err,
                           size_t errlen)
{
    json_t *h = json_object_get(o, "healthy"), *m = json_object_get(o, "mps");
    json_t *r = json_object_get(o, "reason");
    if (!json_is_boolean(h))
        return fail(err, errlen, "%s.healthy: must be true or false", path);
    g->healthy = json_is_true(h);
    if (!json_is_string(r))
        return fail(err, errlen, "%s.reason: must be a string", path);
    if (g->healthy && json_string_length(r) != 0)
        return fail(err, errlen, "%s.reason: must be \"\" while healthy", path);
    if (!g->healthy) {
        int e = get_label(o, "reason", path, g->reason, sizeof(g->reason), err, errlen);
        if (e < 0)
            return e;
    }
    const char *ms = json_string_value(m);
    g->mps = ACCELD_STATS_MPS_STATES;
    for (size_t k = 0; ms && k < ACCELD_STATS_MPS_STATES; k++)
        if (strcmp(ms, mps_names[k]) == 0 && json_string_length(m) == strlen(mps_names[k]))
            g->mps = (enum acceld_stats_mps_state)k;
    if (g->mps == ACCELD_STATS_MPS_STATES)
        return fail(err, errlen, "%s.mps: must be \"none\", \"running\", \"fault\" or \"down\"",
                    path);
    g->has_state = true;
    return 0;
}

static int parse_gpu(json_t *o, size_t i, int version, struct acceld_stats *s, char *err,
                     size_t errlen)
{
    static const char *const top1[] = {"index",     "uuid",        "toUnhealthy",
                                       "toHealthy", "mpsRestarts", NULL};
    static const char *const top2[] = {"index",     "uuid",        "toUnhealthy",
                                       "toHealthy", "mpsRestarts", "healthy",
                                       "reason",    "mps",         NULL};
    struct acceld_stats_gpu *g = &s->gpus[i];
    char path[64];
    uint64_t index;
    int e;
    snprintf(path, sizeof(path), "gpus[%zu]", i);
    if ((e = keys(o, path, version == 1 ? top1 : top2, err, errlen)) < 0 ||
        (version >= 2 && (e = parse_gpu_state(o, path, g, err, errlen)) < 0) ||
        (e = get_count(o, "index", path, &index, err, errlen)) < 0 ||
        (e = get_label(o, "uuid", path, g->uuid, sizeof(g->uuid), err, errlen)) < 0 ||
        (e = get_count(o, "toUnhealthy", path, &g->to_unhealthy, err, errlen)) < 0 ||
        (e = get_count(o, "toHealthy", path, &g->to_healthy, err, errlen)) < 0 ||
        (e = get_count(o, "mpsRestarts", path, &g->mps_restarts, err, errlen)) < 0)
        return e;
    if (index > 4095)
        return fail(err, errlen, "%s.index: must be at most 4095", path);
    g->index = (unsigned)index;
    for (size_t k = 0; k < i; k++)
        if (strcmp(s->gpus[k].uuid, g->uuid) == 0)
            return fail(err, errlen, "%s.uuid: \"%s\" is listed twice", path, g->uuid);
    return 0;
}

static int parse_root(json_t *root, struct acceld_stats *s, char *err, size_t errlen)
{
    static const char *const top[] = {"version",    "startTime",       "writeTime",
                                      "deviceInit", "allocateBuckets", "resources",
                                      "gpus",       "quotaFindings",   NULL};
    static const char *const init[] = {"ok", "failed", NULL};
    static const char *const actions[] = {"none", "kill", "freeze", NULL};
    static const char *const kinds[] = {"memory", "under_report", "compute", NULL};
    int e;
    if (!json_is_object(root))
        return fail(err, errlen, "the top level must be an object");
    json_t *v = json_object_get(root, "version");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 1 ||
              json_integer_value(v) > ACCELD_STATS_VERSION))
        return fail(err, errlen, "version: this reader knows versions 1 to %d only",
                    ACCELD_STATS_VERSION);
    int version = v ? (int)json_integer_value(v) : 0;
    if ((e = keys(root, "(top)", top, err, errlen)) < 0 ||
        (e = get_real(root, "startTime", "(top)", &s->start_time, err, errlen)) < 0 ||
        (e = get_real(root, "writeTime", "(top)", &s->write_time, err, errlen)) < 0)
        return e;
    json_t *di = json_object_get(root, "deviceInit");
    if ((e = keys(di, "deviceInit", init, err, errlen)) < 0 ||
        (e = get_count(di, "ok", "deviceInit", &s->init_ok, err, errlen)) < 0 ||
        (e = get_count(di, "failed", "deviceInit", &s->init_failed, err, errlen)) < 0)
        return e;
    json_t *b = json_object_get(root, "allocateBuckets");
    if (!json_is_array(b) || json_array_size(b) < 1 ||
        json_array_size(b) > ACCELD_STATS_MAX_BUCKETS)
        return fail(err, errlen, "allocateBuckets: must be an array of 1 to %d bounds",
                    ACCELD_STATS_MAX_BUCKETS);
    s->nbuckets = json_array_size(b);
    for (size_t k = 0; k < s->nbuckets; k++) {
        json_t *x = json_array_get(b, k);
        double d = json_number_value(x);
        if (!json_is_number(x) || !isfinite(d) || d <= 0 || (k && d <= s->bounds[k - 1]))
            return fail(err, errlen,
                        "allocateBuckets[%zu]: bounds must be finite, above 0 and increasing", k);
        s->bounds[k] = d;
    }
    json_t *res = json_object_get(root, "resources");
    if (!json_is_array(res) || json_array_size(res) > ACCELD_STATS_MAX_RESOURCES)
        return fail(err, errlen, "resources: must be an array of at most %d",
                    ACCELD_STATS_MAX_RESOURCES);
    s->n_resources = json_array_size(res);
    for (size_t i = 0; i < s->n_resources; i++)
        if ((e = parse_resource(json_array_get(res, i), i, s, err, errlen)) < 0)
            return e;
    json_t *gpus = json_object_get(root, "gpus");
    if (!json_is_array(gpus) || json_array_size(gpus) > ACCELD_STATS_MAX_GPUS)
        return fail(err, errlen, "gpus: must be an array of at most %d", ACCELD_STATS_MAX_GPUS);
    s->n_gpus = json_array_size(gpus);
    for (size_t i = 0; i < s->n_gpus; i++)
        if ((e = parse_gpu(json_array_get(gpus, i), i, version, s, err, errlen)) < 0)
            return e;
    json_t *q = json_object_get(root, "quotaFindings");
    if ((e = keys(q, "quotaFindings", kinds, err, errlen)) < 0)
        return e;
    for (size_t k = 0; k < ACCELD_STATS_QUOTA_KINDS; k++) {
        char path[64];
        json_t *o = json_object_get(q, kind_names[k]);
        snprintf(path, sizeof(path), "quotaFindings.%s", kind_names[k]);
        if ((e = keys(o, path, actions, err, errlen)) < 0)
            return e;
        for (size_t a = 0; a < ACCELD_STATS_ACTIONS; a++)
            if ((e = get_count(o, action_names[a], path, &s->quota[k][a], err, errlen)) < 0)
                return e;
    }
    return 0;
}

int acceld_stats_parse(const char *data, size_t len, struct acceld_stats *ret, char *err,
                       size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fail(err, errlen, "not valid JSON: line %d column %d: %s", je.line, je.column,
                    je.text);
    struct acceld_stats *s = malloc(sizeof(*s));
    if (!s) {
        json_decref(root);
        return -ENOMEM;
    }
    memset(s, 0, sizeof(*s));
    int r = parse_root(root, s, err, errlen);
    json_decref(root);
    if (r == 0)
        *ret = *s;
    free(s);
    return r;
}

int acceld_stats_read(const char *path, struct acceld_stats *ret, char *err, size_t errlen)
{
    char *data;
    size_t len;
    int r = fs_read_all(path, ACCELD_STATS_MAX_BYTES, &data, &len);
    if (r < 0) {
        snprintf(err, errlen, "%s", r == -EFBIG ? "larger than 256 KiB" : strerror(-r));
        return r;
    }
    r = acceld_stats_parse(data, len, ret, err, errlen);
    free(data);
    return r;
}
