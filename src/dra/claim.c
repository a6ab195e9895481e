/* claim.c — ResourceClaim JSON (resource.k8s.io/v1) to struct dra_claim, the
 * Quantity parser for consumed capacity, and the JSON-file claim source.
 * Outside data: fuzzed by tests/fuzz/fuzz-dra-claim.c. */
#include "dra.h"

#include "fs.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLAIM_MAX_BYTES (1u << 20)
/* resource.k8s.io/v1 caps a claim's results at 32 devices per request and
 * the allocation at AllocationResultsMaxSize = 32. */
#define CLAIM_MAX_RESULTS 32

static void result_clear(struct dra_result *r)
{
    free(r->request);
    free(r->driver);
    free(r->pool);
    free(r->device);
    free(r->share_id);
}

/* at most this many pods in status.reservedFor (the API's ResourceClaimReservedForMaxSize) */
#define CLAIM_MAX_PODS 256

static void consumers_free(struct dra_consumer *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(p[i].name);
        free(p[i].uid);
    }
    free(p);
}

void dra_claim_free(struct dra_claim *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_results; i++)
        result_clear(&c->results[i]);
    free(c->results);
    consumers_free(c->pods, c->n_pods);
    free(c->namespace_);
    free(c->name);
    free(c->uid);
    free(c);
}

int dra_quantity_parse(const char *s, uint64_t *ret)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"Ki", 1ull << 10},
        {"Mi", 1ull << 20},
        {"Gi", 1ull << 30},
        {"Ti", 1ull << 40},
        {"Pi", 1ull << 50},
        {"Ei", 1ull << 60},
        {"k", 1000ull},
        {"M", 1000000ull},
        {"G", 1000000000ull},
        {"T", 1000000000000ull},
        {"P", 1000000000000000ull},
        {"E", 1000000000000000000ull},
        {"", 1},
    };
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return -ERANGE;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(p, units[i].suffix) == 0) {
            if (v && units[i].mult > UINT64_MAX / v)
                return -ERANGE;
            *ret = v * units[i].mult;
            return 0;
        }
    }
    return -EINVAL;
}

static const char *get_str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int dup_field(json_t *obj, const char *key, bool required, char **out, const char *what,
                     char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (!required)
            return 0;
        errbuf_printf(err, errlen, "%s: missing %s", what, key);
        return -EINVAL;
    }
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 253 ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        errbuf_printf(err, errlen, "%s: %s must be a non-empty string of at most 253 bytes", what,
                      key);
        return -EINVAL;
    }
    *out = strdup(json_string_value(v));
    return *out ? 0 : -ENOMEM;
}

static int parse_capacity(json_t *cc, const char *key, bool *has, uint64_t *val, size_t idx,
                          char *err, size_t errlen)
{
    json_t *v = json_object_get(cc, key);
    if (!v)
        return 0;
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (!s || dra_quantity_parse(s, val) < 0) {
        errbuf_printf(err, errlen,
                      "results[%zu].consumedCapacity.%s: not a whole quantity (e.g. 4Gi, 30)", idx,
                      key);
        return -EINVAL;
    }
    *has = true;
    return 0;
}

static int parse_result(json_t *o, size_t idx, struct dra_result *r, char *err, size_t errlen)
{
    char what[48];
    snprintf(what, sizeof(what), "results[%zu]", idx);
    if (!json_is_object(o)) {
        errbuf_printf(err, errlen, "%s: not an object", what);
        return -EINVAL;
    }
    int e;
    if ((e = dup_field(o, "request", true, &r->request, what, err, errlen)) < 0 ||
        (e = dup_field(o, "driver", true, &r->driver, what, err, errlen)) < 0 ||
        (e = dup_field(o, "pool", true, &r->pool, what, err, errlen)) < 0 ||
        (e = dup_field(o, "device", true, &r->device, what, err, errlen)) < 0 ||
        (e = dup_field(o, "shareID", false, &r->share_id, what, err, errlen)) < 0)
        return e;
    json_t *cc = json_object_get(o, "consumedCapacity");
    if (cc && !json_is_null(cc)) {
        if (!json_is_object(cc)) {
            errbuf_printf(err, errlen, "%s.consumedCapacity: not an object", what);
            return -EINVAL;
        }
        if ((e = parse_capacity(cc, "memory", &r->has_memory, &r->memory, idx, err, errlen)) < 0 ||
            (e = parse_capacity(cc, "cores", &r->has_cores, &r->cores, idx, err, errlen)) < 0)
            return e;
        if (r->has_cores && (r->cores < 1 || r->cores > 100)) {
            errbuf_printf(err, errlen, "%s.consumedCapacity.cores: %llu is not a percentage 1..100",
                          what, (unsigned long long)r->cores);
            return -EINVAL;
        }
    }
    return 0;
}

/* A pod name (DNS subdomain) or uid ([A-Za-z0-9-]): they name Events and are compared with
 * the uids /proc/<pid>/cgroup carries. */
static bool consumer_ok(const char *s, bool uid)
{
    size_t n = strlen(s);
    if (n == 0 || n > (uid ? 64 : 253))
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              (!uid && *p == '.') || (uid && *p >= 'A' && *p <= 'Z')))
            return false;
    return true;
}

/* status.reservedFor: the pods the claim is reserved for (other consumers skipped). */
static int parse_reserved(json_t *status, struct dra_claim *c, char *err, size_t errlen)
{
    json_t *rf = json_object_get(status, "reservedFor");
    if (!rf || json_is_null(rf))
        return 0;
    if (!json_is_array(rf) || json_array_size(rf) > CLAIM_MAX_PODS) {
        errbuf_printf(err, errlen, "status.reservedFor: not an array of at most %d entries",
                      CLAIM_MAX_PODS);
        return -EINVAL;
    }
    c->pods = calloc(json_array_size(rf) ? json_array_size(rf) : 1, sizeof(*c->pods));
    if (!c->pods)
        return -ENOMEM;
    size_t i;
    json_t *e;
    json_array_foreach(rf, i, e)
    {
        const char *res = get_str(e, "resource"), *grp = get_str(e, "apiGroup");
        if (!res || strcmp(res, "pods") != 0 || (grp && grp[0]))
            continue;
        char *name = NULL, *uid = NULL;
        int r = dup_field(e, "name", true, &name, "status.reservedFor", err, errlen);
        if (r == 0)
            r = dup_field(e, "uid", true, &uid, "status.reservedFor", err, errlen);
        if (r == 0 && (!consumer_ok(name, false) || !consumer_ok(uid, true))) {
            errbuf_printf(err, errlen, "status.reservedFor[%zu]: not a pod's name and uid", i);
            r = -EINVAL;
        }
        if (r < 0) {
            free(name);
            free(uid);
            return r;
        }
        c->pods[c->n_pods++] = (struct dra_consumer){name, uid};
    }
    return 0;
}

int dra_claim_parse(const char *json, size_t len, struct dra_claim **ret, char *err, size_t errlen)
{
    if (len > CLAIM_MAX_BYTES) {
        errbuf_printf(err, errlen, "ResourceClaim: larger than %u bytes", CLAIM_MAX_BYTES);
        return -EINVAL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        errbuf_printf(err, errlen, "ResourceClaim: invalid JSON at line %d: %s", jerr.line,
                      jerr.text);
        return -EINVAL;
    }
    int r = -EINVAL;
    struct dra_claim *c = calloc(1, sizeof(*c));
    if (!c) {
        r = -ENOMEM;
        goto out;
    }
    const char *kind = get_str(root, "kind");
    if (!json_is_object(root) || (kind && strcmp(kind, "ResourceClaim") != 0)) {
        errbuf_printf(err, errlen, "not a ResourceClaim object");
        goto out;
    }
    json_t *meta = json_object_get(root, "metadata");
    if (!json_is_object(meta)) {
        errbuf_printf(err, errlen, "ResourceClaim: missing metadata");
        goto out;
    }
    if ((r = dup_field(meta, "namespace", true, &c->namespace_, "metadata", err, errlen)) < 0 ||
        (r = dup_field(meta, "name", true, &c->name, "metadata", err, errlen)) < 0 ||
        (r = dup_field(meta, "uid", true, &c->uid, "metadata", err, errlen)) < 0)
        goto out;
    r = -EINVAL;
    json_t *alloc = json_object_get(json_object_get(root, "status"), "allocation");
    if (!json_is_object(alloc)) {
        errbuf_printf(err, errlen,
                      "ResourceClaim %s/%s has no status.allocation: not allocated (yet)",
                      c->namespace_, c->name);
        goto out;
    }
    json_t *results = json_object_get(json_object_get(alloc, "devices"), "results");
    if (results && !json_is_array(results)) {
        errbuf_printf(err, errlen, "status.allocation.devices.results: not an array");
        goto out;
    }
    size_t n = results ? json_array_size(results) : 0;
    if (n > CLAIM_MAX_RESULTS) {
        errbuf_printf(err, errlen, "status.allocation.devices.results: more than %d entries",
                      CLAIM_MAX_RESULTS);
        goto out;
    }
    if (n) {
        c->results = calloc(n, sizeof(*c->results));
        if (!c->results) {
            r = -ENOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        c->n_results = i + 1;
        if ((r = parse_result(json_array_get(results, i), i, &c->results[i], err, errlen)) < 0)
            goto out;
    }
    if ((r = parse_reserved(json_object_get(root, "status"), c, err, errlen)) < 0)
        goto out;
    *ret = c;
    c = NULL;
    r = 0;
out:
    dra_claim_free(c);
    json_decref(root);
    return r;
}

/* ------------------------------------------------------------ file source */

static int dir_get(void *ctx, const char *ns, const char *name, const char *uid,
                   struct dra_claim **ret, char *err, size_t errlen)
{
    const char *dir = ctx;
    char path[PATH_MAX];
    if (strchr(ns, '/') || strchr(name, '/') ||
        snprintf(path, sizeof(path), "%s/%s_%s.json", dir, ns, name) >= (int)sizeof(path)) {
        errbuf_printf(err, errlen, "claim %s/%s: invalid name", ns, name);
        return -EINVAL;
    }
    char *data = NULL;
    size_t len = 0;
    int r = fs_read_all(path, CLAIM_MAX_BYTES, &data, &len);
    if (r < 0) {
        errbuf_printf(err, errlen, "cannot read ResourceClaim %s/%s from %s: %s", ns, name, path,
                      strerror(-r));
        return r;
    }
    struct dra_claim *c = NULL;
    r = dra_claim_parse(data, len, &c, err, errlen);
    free(data);
    if (r < 0)
        return r;
    if (strcmp(c->uid, uid) != 0 || strcmp(c->namespace_, ns) != 0 || strcmp(c->name, name) != 0) {
        errbuf_printf(err, errlen,
                      "ResourceClaim %s/%s has uid %s, the kubelet asked for %s: the claim was "
                      "replaced; retry",
                      ns, name, c->uid, uid);
        dra_claim_free(c);
        return -ESTALE;
    }
    *ret = c;
    return 0;
}

struct dra_claim_source dra_claim_source_dir(const char *dir)
{
    return (struct dra_claim_source){.get = dir_get, .ctx = (void *)dir};
}
