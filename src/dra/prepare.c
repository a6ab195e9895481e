/* prepare.c — NodePrepareResources / NodeUnprepareResources for one claim:
 * the claim's CDI spec (<cdi_dir>/accel-dra-<uid>.json, 0644, atomic), for
 * shares the claim's libvcuda files under <state_dir>/claims/<uid>/ (config
 * and ld.so.preload 0444, region/ writable), for MPS shares the claim's own
 * MPS control daemon (through cfg->mps), and the checkpoint
 * <state_dir>/dra-checkpoint.json (0600, atomic) that makes prepare
 * idempotent and lets unprepare work after a restart. See docs/dra.md. */
#define _GNU_SOURCE
#include "dra.h"

#include "cdi.h"
#include "fs.h"
#include "tenant-fs.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECKPOINT_NAME "dra-checkpoint.json"
#define CHECKPOINT_MAX (16u << 20)

struct dra_state {
    const struct dra_prepare_config *cfg;
    struct dra_prepared *claims;
    size_t n_claims;
};

static char *dup_str(json_t *o, const char *key);

/* ------------------------------------------------------------ a share's check record */

static void share_clear(struct dra_prepared *p)
{
    for (size_t i = 0; i < p->n_pods; i++) {
        free(p->pods[i].name);
        free(p->pods[i].uid);
    }
    free(p->pods);
    free(p->share_ns);
    free(p->share_name);
    free(p->share_uuids);
}

/* What the host-side check needs of a libvcuda share: its GPUs, caps and pods. */
static int share_record(struct dra_prepared *p, const struct dra_claim *c, const char *uuids,
                        unsigned n, unsigned cores, uint64_t memory)
{
    p->share = true;
    p->share_n = n;
    p->share_cores = cores;
    p->share_memory = memory;
    p->share_ns = strdup(c->namespace_);
    p->share_name = strdup(c->name);
    p->share_uuids = strdup(uuids);
    p->pods = calloc(c->n_pods ? c->n_pods : 1, sizeof(*p->pods));
    if (!p->share_ns || !p->share_name || !p->share_uuids || !p->pods)
        return -ENOMEM;
    for (size_t i = 0; i < c->n_pods; i++) {
        p->pods[i].name = strdup(c->pods[i].name);
        p->pods[i].uid = strdup(c->pods[i].uid);
        p->n_pods = i + 1;
        if (!p->pods[i].name || !p->pods[i].uid)
            return -ENOMEM;
    }
    return 0;
}

static json_t *share_to_json(const struct dra_prepared *p)
{
    json_t *pods = json_array();
    for (size_t i = 0; i < p->n_pods; i++)
        json_array_append_new(
            pods, json_pack("{s:s,s:s}", "name", p->pods[i].name, "uid", p->pods[i].uid));
    return json_pack("{s:s,s:s,s:s,s:i,s:i,s:I,s:o}", "namespace", p->share_ns, "name",
                     p->share_name, "uuids", p->share_uuids, "n", (int)p->share_n, "cores",
                     (int)p->share_cores, "memory", (json_int_t)p->share_memory, "pods", pods);
}

static int share_from_json(json_t *o, struct dra_prepared *p)
{
    json_t *nv = json_object_get(o, "n"), *cv = json_object_get(o, "cores"),
           *mv = json_object_get(o, "memory"), *pods = json_object_get(o, "pods");
    p->share = true;
    p->share_ns = dup_str(o, "namespace");
    p->share_name = dup_str(o, "name");
    p->share_uuids = dup_str(o, "uuids");
    if (!p->share_ns || !p->share_name || !p->share_uuids || !json_is_integer(nv) ||
        !json_is_integer(cv) || !json_is_integer(mv) || !json_is_array(pods) ||
        json_integer_value(nv) < 1 || json_integer_value(nv) > 32 || json_integer_value(cv) < 0 ||
        json_integer_value(cv) > 100 || json_integer_value(mv) < 0 || json_array_size(pods) > 256)
        return -EINVAL;
    p->share_n = (unsigned)json_integer_value(nv);
    p->share_cores = (unsigned)json_integer_value(cv);
    p->share_memory = (uint64_t)json_integer_value(mv);
    p->pods = calloc(json_array_size(pods) ? json_array_size(pods) : 1, sizeof(*p->pods));
    if (!p->pods)
        return -ENOMEM;
    for (size_t i = 0; i < json_array_size(pods); i++) {
        json_t *e = json_array_get(pods, i);
        p->pods[i].name = dup_str(e, "name");
        p->pods[i].uid = dup_str(e, "uid");
        p->n_pods = i + 1;
        if (!p->pods[i].name || !p->pods[i].uid)
            return -EINVAL;
    }
    return 0;
}

static void prepared_clear(struct dra_prepared *p)
{
    for (size_t i = 0; i < p->n_devices; i++) {
        struct dra_prepared_device *d = &p->devices[i];
        for (size_t j = 0; j < d->n_requests; j++)
            free(d->requests[j]);
        free(d->requests);
        free(d->pool);
        free(d->device);
        free(d->cdi_id);
        free(d->mig_gpu);
        free(d->mig_uuid);
    }
    free(p->devices);
    free(p->uid);
    free(p->mps_uuids);
    share_clear(p);
    memset(p, 0, sizeof(*p));
}

int dra_cdi_kind(const char *driver_name, char *buf, size_t len)
{
    if (snprintf(buf, len, "%s/claim", driver_name) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

/* A claim UID is a UUID; anything else must not become a path. */
static bool uid_ok(const char *uid)
{
    size_t n = strlen(uid);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((uid[i] >= '0' && uid[i] <= '9') || (uid[i] >= 'a' && uid[i] <= 'z') ||
              (uid[i] >= 'A' && uid[i] <= 'Z') || uid[i] == '-'))
            return false;
    return true;
}

/* buf = a/b */
static int join(char *buf, size_t len, const char *a, const char *b)
{
    if (snprintf(buf, len, "%s/%s", a, b) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

/* ------------------------------------------------------------ checkpoint */

/* ------------------------------------------------------------ a partition's instance */

static json_t *mig_to_json(const struct dra_prepared_device *d)
{
    return json_pack("{s:s,s:i,s:i,s:s}", "gpu", d->mig_gpu, "gi", (int)d->mig_gi, "ci",
                     (int)d->mig_ci, "uuid", d->mig_uuid);
}

static int mig_from_json(json_t *o, struct dra_prepared_device *d)
{
    json_t *gi = json_object_get(o, "gi"), *ci = json_object_get(o, "ci");
    d->mig_gpu = dup_str(o, "gpu");
    d->mig_uuid = dup_str(o, "uuid");
    if (!d->mig_gpu || !d->mig_uuid || !json_is_integer(gi) || !json_is_integer(ci) ||
        json_integer_value(gi) < 0 || json_integer_value(gi) > 64 || json_integer_value(ci) < 0 ||
        json_integer_value(ci) > 64)
        return -EINVAL;
    d->mig_gi = (unsigned)json_integer_value(gi);
    d->mig_ci = (unsigned)json_integer_value(ci);
    return 0;
}

/* Destroys the instances of p's partitions (already gone: fine). 0, or the first failure
 * with its message (the instance stays: a process still runs on it, unprepare is retried). */
static int mig_destroy_all(const struct dra_state *st, const struct dra_prepared *p, char *err,
                           size_t errlen)
{
    const struct dra_mig_ops *m = &st->cfg->mig;
    for (size_t i = 0; i < p->n_devices; i++) {
        const struct dra_prepared_device *d = &p->devices[i];
        if (!d->mig_gpu)
            continue;
        char why[256] = "";
        int r =
            m->destroy ? m->destroy(m->ctx, d->mig_gpu, d->mig_gi, why, sizeof(why)) : -EOPNOTSUPP;
        if (r < 0 && r != -ENOENT) {
            errbuf_printf(err, errlen,
                          "claim %s: cannot destroy MIG GPU instance %u of %s (%s): %s", p->uid,
                          d->mig_gi, d->mig_gpu, d->mig_uuid, why[0] ? why : strerror(-r));
            return r;
        }
    }
    return 0;
}

static json_t *prepared_to_json(const struct dra_prepared *p)
{
    json_t *devs = json_array();
    for (size_t i = 0; i < p->n_devices; i++) {
        const struct dra_prepared_device *d = &p->devices[i];
        json_t *reqs = json_array();
        for (size_t j = 0; j < d->n_requests; j++)
            json_array_append_new(reqs, json_string(d->requests[j]));
        json_t *dj = json_pack("{s:o,s:s,s:s,s:s}", "requests", reqs, "pool", d->pool, "device",
                               d->device, "cdi", d->cdi_id);
        if (dj && d->mig_gpu)
            json_object_set_new(dj, "mig", mig_to_json(d));
        json_array_append_new(devs, dj);
    }
    json_t *o = json_pack("{s:s,s:o}", "uid", p->uid, "devices", devs);
    if (o && p->share)
        json_object_set_new(o, "share", share_to_json(p));
    if (o && p->mps)
        json_object_set_new(o, "mps",
                            json_pack("{s:s,s:i,s:i,s:I}", "uuids", p->mps_uuids, "n",
                                      (int)p->mps_n, "cores", (int)p->mps_pct, "memory",
                                      (json_int_t)p->mps_mem));
    return o;
}

static int checkpoint_write(const struct dra_state *st)
{
    json_t *claims = json_array();
    for (size_t i = 0; i < st->n_claims; i++)
        json_array_append_new(claims, prepared_to_json(&st->claims[i]));
    json_t *root = json_pack("{s:i,s:o}", "version", 1, "claims", claims);
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!s)
        return -ENOMEM;
    char path[PATH_MAX];
    int r = join(path, sizeof(path), st->cfg->state_dir, CHECKPOINT_NAME);
    if (r == 0)
        r = fs_write_atomic(path, s, strlen(s), 0600);
    free(s);
    return r;
}

static char *dup_str(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static int prepared_from_json(json_t *o, struct dra_prepared *p)
{
    json_t *devs = json_object_get(o, "devices");
    p->uid = dup_str(o, "uid");
    if (!p->uid || !uid_ok(p->uid) || !json_is_array(devs))
        return -EINVAL;
    size_t n = json_array_size(devs);
    p->devices = n ? calloc(n, sizeof(*p->devices)) : NULL;
    if (n && !p->devices)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(devs, i);
        struct dra_prepared_device *pd = &p->devices[i];
        p->n_devices = i + 1;
        json_t *reqs = json_object_get(d, "requests");
        pd->pool = dup_str(d, "pool");
        pd->device = dup_str(d, "device");
        pd->cdi_id = dup_str(d, "cdi");
        if (!pd->pool || !pd->device || !pd->cdi_id || !json_is_array(reqs))
            return -EINVAL;
        json_t *mig = json_object_get(d, "mig");
        int e;
        if (mig && (e = mig_from_json(mig, pd)) < 0)
            return e;
        size_t nr = json_array_size(reqs);
        pd->requests = nr ? calloc(nr, sizeof(char *)) : NULL;
        if (nr && !pd->requests)
            return -ENOMEM;
        for (size_t j = 0; j < nr; j++) {
            pd->n_requests = j + 1;
            json_t *rq = json_array_get(reqs, j);
            if (!json_is_string(rq) || !(pd->requests[j] = strdup(json_string_value(rq))))
                return -EINVAL;
        }
    }
    json_t *share = json_object_get(o, "share");
    int r;
    if (share && (r = share_from_json(share, p)) < 0)
        return r;
    json_t *mps = json_object_get(o, "mps");
    if (mps) {
        json_t *nv = json_object_get(mps, "n"), *pv = json_object_get(mps, "cores"),
               *mv = json_object_get(mps, "memory");
        p->mps = true;
        p->mps_uuids = dup_str(mps, "uuids");
        if (!p->mps_uuids || !json_is_integer(nv) || !json_is_integer(pv) || !json_is_integer(mv) ||
            json_integer_value(nv) < 1 || json_integer_value(nv) > 32 ||
            json_integer_value(pv) < 1 || json_integer_value(pv) > 100 ||
            json_integer_value(mv) < 0)
            return -EINVAL;
        p->mps_n = (unsigned)json_integer_value(nv);
        p->mps_pct = (unsigned)json_integer_value(pv);
        p->mps_mem = (uint64_t)json_integer_value(mv);
    }
    return 0;
}

static int checkpoint_load(struct dra_state *st, char *err, size_t errlen)
{
    char path[PATH_MAX];
    int r = join(path, sizeof(path), st->cfg->state_dir, CHECKPOINT_NAME);
    if (r < 0)
        return r;
    char *data = NULL;
    size_t len = 0;
    r = fs_read_all(path, CHECKPOINT_MAX, &data, &len);
    if (r == -ENOENT)
        return 0;
    if (r < 0) {
        errbuf_printf(err, errlen, "cannot read %s: %s", path, strerror(-r));
        return r;
    }
    json_t *root = json_loadb(data, len, 0, NULL);
    free(data);
    json_t *claims = json_object_get(root, "claims");
    json_t *ver = json_object_get(root, "version");
    r = -EINVAL;
    if (!json_is_array(claims) || !json_is_integer(ver) || json_integer_value(ver) != 1)
        goto bad;
    size_t n = json_array_size(claims);
    st->claims = n ? calloc(n, sizeof(*st->claims)) : NULL;
    if (n && !st->claims) {
        r = -ENOMEM;
        goto bad;
    }
    for (size_t i = 0; i < n; i++) {
        st->n_claims = i + 1;
        if ((r = prepared_from_json(json_array_get(claims, i), &st->claims[i])) < 0)
            goto bad;
    }
    json_decref(root);
    return 0;
bad:
    json_decref(root);
    errbuf_printf(err, errlen,
                  "checkpoint %s is not a DRA checkpoint of version 1: move it away to start "
                  "over (prepared claims are then unknown to acceld)",
                  path);
    return r;
}

static struct dra_prepared *find(struct dra_state *st, const char *uid);
static int remove_claim_files(const struct dra_state *st, const char *uid);

/* What no prepared claim owns goes: temporary files of interrupted writes, and the specs and
 * directories of claims the checkpoint does not name. */
static void sweep(struct dra_state *st)
{
    char dir[PATH_MAX];
    fs_remove_stale_tmp(st->cfg->state_dir, "dra-");
    fs_remove_stale_tmp(st->cfg->cdi_dir, "accel-dra-");
    static const char spec_prefix[] = "accel-dra-";
    DIR *d = opendir(st->cfg->cdi_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char uid[80];
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, spec_prefix, sizeof(spec_prefix) - 1) != 0 || n < 16 ||
            strcmp(e->d_name + n - 5, ".json") != 0 ||
            n - 5 - (sizeof(spec_prefix) - 1) >= sizeof(uid))
            continue;
        memcpy(uid, e->d_name + sizeof(spec_prefix) - 1, n - 5 - (sizeof(spec_prefix) - 1));
        uid[n - 5 - (sizeof(spec_prefix) - 1)] = '\0';
        if (uid_ok(uid) && !find(st, uid))
            remove_claim_files(st, uid);
    }
    if (d)
        closedir(d);
    if (join(dir, sizeof(dir), st->cfg->state_dir, "claims") < 0 || !(d = opendir(dir)))
        return;
    while ((e = readdir(d))) {
        char sub[PATH_MAX];
        if (!uid_ok(e->d_name))
            continue;
        if (!find(st, e->d_name))
            remove_claim_files(st, e->d_name);
        else if (join(sub, sizeof(sub), dir, e->d_name) == 0)
            fs_remove_stale_tmp(sub, "");
    }
    closedir(d);
}

int dra_state_new(const struct dra_prepare_config *cfg, struct dra_state **ret, char *err,
                  size_t errlen)
{
    struct dra_state *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->cfg = cfg;
    int r = checkpoint_load(st, err, errlen);
    if (r < 0) {
        dra_state_free(st);
        return r;
    }
    sweep(st);
    *ret = st;
    return 0;
}

struct dra_state *dra_state_free(struct dra_state *st)
{
    if (!st)
        return NULL;
    for (size_t i = 0; i < st->n_claims; i++)
        prepared_clear(&st->claims[i]);
    free(st->claims);
    free(st);
    return NULL;
}

size_t dra_state_count(const struct dra_state *st)
{
    return st->n_claims;
}

const struct dra_prepared *dra_state_get(const struct dra_state *st, size_t i)
{
    return i < st->n_claims ? &st->claims[i] : NULL;
}

static struct dra_prepared *find(struct dra_state *st, const char *uid)
{
    for (size_t i = 0; i < st->n_claims; i++)
        if (strcmp(st->claims[i].uid, uid) == 0)
            return &st->claims[i];
    return NULL;
}

const struct dra_prepared *dra_state_find(const struct dra_state *st, const char *uid)
{
    return find((struct dra_state *)st, uid);
}

/* ------------------------------------------------------------ files */

/* Removes everything prepare may have written for uid. */
static int remove_claim_files(const struct dra_state *st, const char *uid)
{
    char path[PATH_MAX];
    int r = -ENAMETOOLONG;
    if (snprintf(path, sizeof(path), "%s/accel-dra-%s.json", st->cfg->cdi_dir, uid) >=
        (int)sizeof(path))
        return r;
    /* The spec first: once it is gone no new container can get the claim. */
    if (unlink(path) < 0 && errno != ENOENT)
        return -errno;
    if (snprintf(path, sizeof(path), "%s/claims/%s", st->cfg->state_dir, uid) >= (int)sizeof(path))
        return r;
    /* the region is the tenant's: its tmpfs unmounted, everything removed through dir fds,
     * following nothing (a symlink it left is removed, never what it names) */
    char region[PATH_MAX + 8];
    snprintf(region, sizeof(region), "%s/region", path);
    if ((r = tenant_dir_remove(region)) < 0)
        return r;
    return tenant_dir_remove(path);
}

static const struct dra_gpu *gpu_by_name(const struct dra_prepare_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_gpus; i++)
        if (strcmp(cfg->gpus[i].name, name) == 0)
            return &cfg->gpus[i];
    return NULL;
}

static json_t *node_list(const char *const *nodes, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:s}", "path", nodes[i]));
    return a;
}

static json_t *mount(const char *host, const char *ctr, bool ro)
{
    return json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", host, "containerPath", ctr, "options",
                     ro ? "ro" : "rw", "nosuid", "nodev", "bind");
}

/* What one claim resolves to before anything is written. */
struct plan {
    const struct dra_gpu *gpu[32];
    const struct dra_result *res[32];
    const char *device[32]; /* the result's device name (a partition's, or the GPU's) */
    /* a MIG partition: its profile and placement, and the instance made for it */
    const struct dra_mig_profile *mig[32];
    unsigned mig_start[32], mig_size[32];
    struct dra_mig_made made[32];
    bool mig_made[32];
    size_t n;
    bool share;
    bool mps;                           /* the shares are of MPS GPUs */
    const struct dra_result *share_res; /* the capacity every share consumes */
    char uuids[32 * 64];                /* the GPUs, comma-separated */
};

static int make_plan(const struct dra_state *st, const struct dra_claim *c, struct plan *pl,
                     char *err, size_t errlen)
{
    const struct dra_prepare_config *cfg = st->cfg;
    memset(pl, 0, sizeof(*pl));
    size_t whole = 0;
    for (size_t i = 0; i < c->n_results; i++) {
        const struct dra_result *r = &c->results[i];
        if (strcmp(r->driver, cfg->driver_name) != 0)
            continue; /* another driver's device */
        if (strcmp(r->pool, cfg->pool_name) != 0) {
            errbuf_printf(err, errlen,
                          "claim %s: device %s is in pool %s, this node's pool is %s: the claim "
                          "was allocated for another node",
                          c->uid, r->device, r->pool, cfg->pool_name);
            return -EINVAL;
        }
        const struct dra_gpu *g = gpu_by_name(cfg, r->device);
        const struct dra_mig_profile *mp = NULL;
        unsigned mstart = 0, msize = 0;
        if (g && g->n_mig_profiles) {
            g = NULL; /* a partitioned GPU is published as its partitions only */
        } else if (!g &&
                   dra_partition_find(cfg->gpus, cfg->n_gpus, r->device, &g, &mp, &mstart,
                                      &msize) == 0 &&
                   (r->share_id || r->has_memory || r->has_cores)) {
            errbuf_printf(err, errlen,
                          "claim %s: MIG partition %s is not shared: request it whole (no "
                          "capacity)",
                          c->uid, r->device);
            return -EINVAL;
        }
        if (!g) {
            errbuf_printf(err, errlen, "claim %s: device %s is not a GPU of this node", c->uid,
                          r->device);
            return -ENODEV;
        }
        /* an MPS GPU is always a share: its daemon caps the claim (100 %
         * and no memory limit when the claim consumed no capacity) */
        bool share = !mp && (g->mps || r->share_id || r->has_memory || r->has_cores);
        if (share && pl->share && pl->mps != g->mps) {
            errbuf_printf(err, errlen,
                          "claim %s mixes MPS and vGPU shares (%s); one container gets either "
                          "an MPS daemon or libvcuda: use separate claims",
                          c->uid, g->name);
            return -EINVAL;
        }
        if (g->mps && r->has_cores && (r->cores < 1 || r->cores > 100)) {
            errbuf_printf(err, errlen,
                          "claim %s: consumes %llu cores of %s; an MPS share takes 1 to 100 %%",
                          c->uid, (unsigned long long)r->cores, g->name);
            return -EINVAL;
        }
        if (share) {
            if (r->has_memory && r->memory > g->memory) {
                errbuf_printf(err, errlen, "claim %s: consumes %llu bytes of %s, which has %llu",
                              c->uid, (unsigned long long)r->memory, g->name,
                              (unsigned long long)g->memory);
                return -EINVAL;
            }
            if (pl->share_res &&
                (pl->share_res->has_memory != r->has_memory || pl->share_res->memory != r->memory ||
                 pl->share_res->has_cores != r->has_cores || pl->share_res->cores != r->cores)) {
                errbuf_printf(err, errlen,
                              "claim %s: its shares consume different capacities; libvcuda "
                              "applies one limit to every device of a container: use one claim "
                              "per share",
                              c->uid);
                return -EINVAL;
            }
            pl->share = true;
            pl->mps = g->mps;
            pl->share_res = r;
        } else {
            whole++;
        }
        size_t j = 0;
        while (j < pl->n && strcmp(pl->device[j], r->device) != 0)
            j++;
        if (j < pl->n)
            continue; /* same device for a second request: one CDI device */
        if (pl->n == sizeof(pl->gpu) / sizeof(pl->gpu[0])) {
            errbuf_printf(err, errlen, "claim %s: more than %zu GPUs", c->uid, pl->n);
            return -E2BIG;
        }
        pl->gpu[pl->n] = g;
        pl->res[pl->n] = r;
        pl->device[pl->n] = r->device;
        pl->mig[pl->n] = mp;
        pl->mig_start[pl->n] = mstart;
        pl->mig_size[pl->n] = msize;
        pl->n++;
        if (pl->n > 1)
            strcat(pl->uuids, ",");
        strncat(pl->uuids, g->uuid, 63);
    }
    if (pl->share && whole) {
        errbuf_printf(err, errlen,
                      "claim %s mixes whole GPUs and shares; libvcuda would limit both: use "
                      "separate claims",
                      c->uid);
        return -EINVAL;
    }
    return 0;
}

static int write_share_files(const struct dra_state *st, const struct dra_claim *c,
                             const struct plan *pl, char *dir, size_t dirlen)
{
    char path[PATH_MAX];
    int r;
    if (snprintf(dir, dirlen, "%s/claims/%s", st->cfg->state_dir, c->uid) >= (int)dirlen)
        return -ENAMETOOLONG;
    /* processes of the container write their usage there, whatever their uid: a tmpfs of
     * its own (tenant_dir_make), so what they write there fills only it */
    enum tenant_dir_how how;
    if ((r = join(path, sizeof(path), dir, "region")) < 0 || (r = tenant_dir_make(path, &how)) < 0)
        return r;
    char uuids[32 * 64] = "";
    for (size_t i = 0; i < pl->n; i++) {
        if (strlen(uuids) + strlen(pl->gpu[i]->uuid) + 2 > sizeof(uuids))
            return -E2BIG;
        if (i)
            strcat(uuids, ",");
        strcat(uuids, pl->gpu[i]->uuid);
    }
    char core[48] = "";
    if (pl->share_res->has_cores)
        snprintf(core, sizeof(core), "core_limit = %llu\n",
                 (unsigned long long)pl->share_res->cores);
    /* memory_limit is exactly the consumed capacity (0 = none consumed: unlimited) */
    char conf[4096];
    int n = snprintf(conf, sizeof(conf),
                     "# written by acceld for ResourceClaim %s/%s (uid %s)\n"
                     "memory_limit = %llu\n"
                     "%s"
                     "region = " DRA_CONTAINER_REGION_DIR "/usage\n"
                     "devices = %s\n",
                     c->namespace_, c->name, c->uid,
                     (unsigned long long)(pl->share_res->has_memory ? pl->share_res->memory : 0),
                     core, uuids);
    if (n < 0 || n >= (int)sizeof(conf))
        return -E2BIG;
    if ((r = join(path, sizeof(path), dir, "config")) < 0 ||
        (r = fs_write_atomic(path, conf, strlen(conf), 0444)) < 0)
        return r;
    const char preload[] = DRA_CONTAINER_VCUDA "\n";
    if ((r = join(path, sizeof(path), dir, "ld.so.preload")) < 0 ||
        (r = fs_write_atomic(path, preload, strlen(preload), 0444)) < 0)
        return r;
    return 0;
}

/* The MPS claim's env: its daemon's directories (container paths) and the
 * caps, exactly the consumed capacity; the daemon has them as its defaults,
 * so lowering is all the container can do with these variables. */
static int mps_env(json_t *env, const struct plan *pl)
{
    char v[32 * 48 + 64];
    unsigned pct = pl->share_res->has_cores ? (unsigned)pl->share_res->cores : 100;
    json_array_append_new(env, json_string("CUDA_MPS_PIPE_DIRECTORY=" DRA_CONTAINER_MPS_PIPE));
    snprintf(v, sizeof(v), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%u", pct);
    json_array_append_new(env, json_string(v));
    uint64_t mem = pl->share_res->has_memory ? pl->share_res->memory : 0;
    if (mem) {
        /* NVIDIA's format, "0=1G,1=512MB": the container's device ordinals, which
         * follow NVIDIA_VISIBLE_DEVICES, i.e. the claim's device order */
        size_t len = (size_t)snprintf(v, sizeof(v), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=");
        for (size_t i = 0; i < pl->n; i++)
            len += (size_t)snprintf(v + len, sizeof(v) - len, "%s%zu=%lluM", i ? "," : "", i,
                                    (unsigned long long)(mem >> 20));
        if (len >= sizeof(v))
            return -E2BIG;
        json_array_append_new(env, json_string(v));
    }
    return 0;
}

static int write_spec(const struct dra_state *st, const struct dra_claim *c, const struct plan *pl,
                      const char *share_dir, const char *mps_pipe, const char *mps_shm)
{
    const struct dra_prepare_config *cfg = st->cfg;
    char kind[300], path[PATH_MAX], name[300];
    int r = dra_cdi_kind(cfg->driver_name, kind, sizeof(kind));
    if (r < 0)
        return r;
    json_t *devices = json_array();
    char visible[32 * 64 + 32] = "NVIDIA_VISIBLE_DEVICES=";
    for (size_t i = 0; i < pl->n; i++) {
        snprintf(name, sizeof(name), "%s-%s", c->uid, pl->device[i]);
        /* a partition: its MIG device's UUID, its GPU's node and its capability nodes */
        const struct dra_mig_made *m = pl->mig_made[i] ? &pl->made[i] : NULL;
        const char *node[] = {pl->gpu[i]->dev_node, m ? m->caps[0] : NULL, m ? m->caps[1] : NULL};
        const char *id = m ? m->uuid : pl->gpu[i]->uuid;
        json_array_append_new(devices,
                              json_pack("{s:s,s:{s:o}}", "name", name, "containerEdits",
                                        "deviceNodes", node_list(node, 1 + (m ? m->n_caps : 0))));
        if (strlen(visible) + strlen(id) + 2 > sizeof(visible)) {
            json_decref(devices);
            return -E2BIG;
        }
        if (i)
            strcat(visible, ",");
        strcat(visible, id);
    }
    json_t *edits = json_pack("{s:o,s:[s]}", "deviceNodes",
                              node_list(cfg->control_nodes, cfg->n_control_nodes), "env", visible);
    if (pl->mps) {
        json_t *mounts = json_array();
        json_array_append_new(mounts, mount(mps_pipe, DRA_CONTAINER_MPS_PIPE, false));
        /* MPS clients and their server share memory through /dev/shm: the claim's daemon's
         * own tmpfs, never the host's (issue 22, F7); no log dir (the root daemon writes
         * there: a directory a container can write is one where it plants symlinks) */
        json_array_append_new(mounts, mount(mps_shm, "/dev/shm", false));
        json_object_set_new(edits, "mounts", mounts);
        if ((r = mps_env(json_object_get(edits, "env"), pl)) < 0) {
            json_decref(edits);
            json_decref(devices);
            return r;
        }
    } else if (pl->share) {
        char conf[PATH_MAX], pre[PATH_MAX], region[PATH_MAX];
        snprintf(conf, sizeof(conf), "%s/config", share_dir);
        snprintf(pre, sizeof(pre), "%s/ld.so.preload", share_dir);
        snprintf(region, sizeof(region), "%s/region", share_dir);
        json_t *mounts = json_array();
        json_array_append_new(mounts, mount(cfg->vcuda_library, DRA_CONTAINER_VCUDA, true));
        json_array_append_new(mounts, mount(conf, DRA_CONTAINER_CONFIG, true));
        json_array_append_new(mounts, mount(pre, DRA_CONTAINER_PRELOAD, true));
        json_array_append_new(mounts, mount(region, DRA_CONTAINER_REGION_DIR, false));
        /* the config sits at libvcuda's own path, where the environment cannot loosen it: no
         * VCUDA_CONFIG (libvcuda warned "VCUDA_CONFIG ignored" in every such container) */
        json_object_set_new(edits, "mounts", mounts);
    }
    json_t *spec = json_pack("{s:s,s:s,s:o,s:o}", "cdiVersion", CDI_SPEC_VERSION, "kind", kind,
                             "devices", devices, "containerEdits", edits);
    char *s = spec ? json_dumps(spec, JSON_INDENT(2)) : NULL;
    json_decref(spec);
    if (!s)
        return -ENOMEM;
    if ((r = fs_mkdir_p(cfg->cdi_dir, 0755)) == 0 &&
        (r = snprintf(path, sizeof(path), "%s/accel-dra-%s.json", cfg->cdi_dir, c->uid) >=
                     (int)sizeof(path)
                 ? -ENAMETOOLONG
                 : 0) == 0)
        r = fs_write_atomic(path, s, strlen(s), 0644);
    free(s);
    return r;
}

static int record(struct dra_state *st, const struct dra_claim *c, const struct plan *pl,
                  struct dra_prepared **ret)
{
    char kind[300];
    int r = dra_cdi_kind(st->cfg->driver_name, kind, sizeof(kind));
    if (r < 0)
        return r;
    struct dra_prepared *n = realloc(st->claims, (st->n_claims + 1) * sizeof(*n));
    if (!n)
        return -ENOMEM;
    st->claims = n;
    struct dra_prepared *p = &st->claims[st->n_claims];
    memset(p, 0, sizeof(*p));
    p->uid = strdup(c->uid);
    p->devices = pl->n ? calloc(pl->n, sizeof(*p->devices)) : NULL;
    if (!p->uid || (pl->n && !p->devices))
        goto nomem;
    for (size_t i = 0; i < pl->n; i++) {
        struct dra_prepared_device *d = &p->devices[i];
        p->n_devices = i + 1;
        d->requests = calloc(c->n_results, sizeof(char *));
        if (!d->requests)
            goto nomem;
        for (size_t k = 0; k < c->n_results; k++) {
            const struct dra_result *res = &c->results[k];
            if (strcmp(res->driver, st->cfg->driver_name) == 0 &&
                strcmp(res->device, pl->device[i]) == 0) {
                if (!(d->requests[d->n_requests++] = strdup(res->request)))
                    goto nomem;
            }
        }
        d->pool = strdup(st->cfg->pool_name);
        d->device = strdup(pl->device[i]);
        if (asprintf(&d->cdi_id, "%s=%s-%s", kind, c->uid, pl->device[i]) < 0)
            d->cdi_id = NULL;
        if (!d->pool || !d->device || !d->cdi_id)
            goto nomem;
        if (pl->mig_made[i]) {
            d->mig_gi = pl->made[i].gi;
            d->mig_ci = pl->made[i].ci;
            if (!(d->mig_gpu = strdup(pl->gpu[i]->uuid)) ||
                !(d->mig_uuid = strdup(pl->made[i].uuid)))
                goto nomem;
        }
    }
    if (pl->share && !pl->mps &&
        share_record(p, c, pl->uuids, (unsigned)pl->n,
                     pl->share_res->has_cores ? (unsigned)pl->share_res->cores : 0,
                     pl->share_res->has_memory ? pl->share_res->memory : 0) < 0)
        goto nomem;
    if (pl->mps) {
        p->mps = true;
        p->mps_n = (unsigned)pl->n;
        p->mps_pct = pl->share_res->has_cores ? (unsigned)pl->share_res->cores : 100;
        p->mps_mem = pl->share_res->has_memory ? pl->share_res->memory : 0;
        if (!(p->mps_uuids = strdup(pl->uuids)))
            goto nomem;
    }
    st->n_claims++;
    *ret = p;
    return 0;
nomem:
    prepared_clear(p);
    return -ENOMEM;
}

/* The instances of the plan's partitions, all or none (those made are destroyed again). */
static void mig_undo(const struct dra_state *st, struct plan *pl)
{
    const struct dra_mig_ops *m = &st->cfg->mig;
    for (size_t i = 0; i < pl->n; i++) {
        char why[256];
        if (pl->mig_made[i] && m->destroy)
            m->destroy(m->ctx, pl->gpu[i]->uuid, pl->made[i].gi, why, sizeof(why));
        pl->mig_made[i] = false;
    }
}

static int mig_create_all(const struct dra_state *st, struct plan *pl, const char *uid, char *err,
                          size_t errlen)
{
    const struct dra_mig_ops *m = &st->cfg->mig;
    for (size_t i = 0; i < pl->n; i++) {
        if (!pl->mig[i])
            continue;
        char why[256] = "";
        int r = m->create ? m->create(m->ctx, pl->gpu[i]->uuid, pl->mig[i]->id, pl->mig_start[i],
                                      pl->mig_size[i], &pl->made[i], why, sizeof(why))
                          : -EOPNOTSUPP;
        if (r < 0) {
            errbuf_printf(err, errlen, "claim %s: cannot create MIG partition %s on GPU %s: %s",
                          uid, pl->device[i], pl->gpu[i]->uuid,
                          why[0]      ? why
                          : m->create ? strerror(-r)
                                      : "no MIG here");
            mig_undo(st, pl);
            return r;
        }
        pl->mig_made[i] = true;
    }
    return 0;
}

/* Whether what prepare writes for p is all there (a crash may have left the checkpoint
 * ahead of the files, or an unprepare may have removed them before it was cut short). */
static bool files_ok(const struct dra_state *st, const struct dra_prepared *p)
{
    char path[PATH_MAX];
    if (p->n_devices == 0)
        return true; /* nothing of ours in the claim: no files */
    if (snprintf(path, sizeof(path), "%s/accel-dra-%s.json", st->cfg->cdi_dir, p->uid) >=
            (int)sizeof(path) ||
        access(path, F_OK) != 0)
        return false;
    static const char *const share_files[] = {"config", "ld.so.preload", "region"};
    for (size_t i = 0; p->share && i < sizeof(share_files) / sizeof(share_files[0]); i++)
        if (snprintf(path, sizeof(path), "%s/claims/%s/%s", st->cfg->state_dir, p->uid,
                     share_files[i]) >= (int)sizeof(path) ||
            access(path, F_OK) != 0)
            return false;
    return true;
}

bool dra_state_prepared(const struct dra_state *st, const char *uid)
{
    const struct dra_prepared *p = dra_state_find(st, uid);
    return p && files_ok(st, p);
}

static void forget(struct dra_state *st, struct dra_prepared *p)
{
    size_t i = (size_t)(p - st->claims);
    prepared_clear(p);
    memmove(&st->claims[i], &st->claims[i + 1], (st->n_claims - i - 1) * sizeof(*p));
    st->n_claims--;
}

/* The order makes prepare and unprepare safe to cut at any point: the checkpoint names a
 * claim before any file of it is written (prepare) and until every file of it is removed
 * (unprepare), so no file of a claim exists that the checkpoint does not name (dra_state_new
 * removes any such file left by an older acceld), and a claim the checkpoint names whose
 * files are not all there is prepared again (files_ok) instead of answered "prepared". */
int dra_prepare(struct dra_state *st, const struct dra_claim_source *src, const char *ns,
                const char *name, const char *uid, const struct dra_prepared **ret, char *err,
                size_t errlen)
{
    struct dra_prepared *have = find(st, uid);
    if (have && files_ok(st, have)) {
        *ret = have;
        return 0;
    }
    if (!uid_ok(uid)) {
        errbuf_printf(err, errlen, "claim uid \"%s\" is not a UID", uid);
        return -EINVAL;
    }
    struct dra_claim *c = NULL;
    int r = src->get(src->ctx, ns, name, uid, &c, err, errlen);
    if (r < 0)
        return r;
    struct plan pl;
    char share_dir[PATH_MAX] = "", mps_pipe[PATH_MAX] = "", mps_shm[PATH_MAX] = "";
    bool mps_started = false;
    if ((r = make_plan(st, c, &pl, err, errlen)) < 0)
        goto out;
    /* a claim whose files went missing is prepared again from the claim as it is now (its
     * MIG instances destroyed first: the plan may place them anew) */
    have = find(st, uid);
    if (have && (r = mig_destroy_all(st, have, err, errlen)) < 0)
        goto out;
    if (have)
        forget(st, have);
    /* MIG instances before the record, which names them (one no claim names is destroyed at
     * start: dra_mig_clean); nothing of ours in the claim (only other drivers' devices): no
     * instance, no file, an empty answer, still checkpointed so the answer stays the same */
    if (pl.n > 0 && (r = mig_create_all(st, &pl, uid, err, errlen)) < 0)
        goto out;
    /* the record before any file (see above) */
    struct dra_prepared *p = NULL;
    if ((r = record(st, c, &pl, &p)) < 0) {
        errbuf_printf(err, errlen, "claim %s: out of memory", uid);
        mig_undo(st, &pl);
        goto out;
    }
    if ((r = checkpoint_write(st)) < 0) {
        errbuf_printf(err, errlen, "claim %s: cannot write the checkpoint in %s: %s", uid,
                      st->cfg->state_dir, strerror(-r));
        forget(st, p);
        mig_undo(st, &pl);
        /* the checkpoint may still name it (from before): its files go, the kubelet retries */
        remove_claim_files(st, uid);
        goto out;
    }
    if (pl.n == 0)
        goto done;
    if (pl.mps) {
        const struct dra_mps_ops *m = &st->cfg->mps;
        char why[256] = "";
        r = m->start ? m->start(m->ctx, uid, pl.uuids, (unsigned)pl.n,
                                pl.share_res->has_cores ? (unsigned)pl.share_res->cores : 100,
                                pl.share_res->has_memory ? pl.share_res->memory : 0, mps_pipe,
                                mps_shm, sizeof(mps_pipe), why, sizeof(why))
                     : -EOPNOTSUPP;
        if (r < 0) {
            errbuf_printf(err, errlen, "claim %s: cannot start its MPS control daemon: %s", uid,
                          why[0]     ? why
                          : m->start ? strerror(-r)
                                     : "no MPS supervisor here");
            goto undo;
        }
        mps_started = true;
    } else if (pl.share && (r = write_share_files(st, c, &pl, share_dir, sizeof(share_dir))) < 0) {
        errbuf_printf(err, errlen, "claim %s: cannot write its libvcuda files under %s: %s", uid,
                      st->cfg->state_dir, strerror(-r));
        goto undo;
    }
    if ((r = write_spec(st, c, &pl, share_dir, mps_pipe, mps_shm)) < 0) {
        errbuf_printf(err, errlen, "claim %s: cannot write its CDI spec in %s: %s", uid,
                      st->cfg->cdi_dir, strerror(-r));
        goto undo;
    }
done:
    *ret = find(st, uid);
    goto out;
undo:
    /* the files first, the record after (the same order as unprepare) */
    remove_claim_files(st, uid);
    if (mps_started && st->cfg->mps.stop)
        st->cfg->mps.stop(st->cfg->mps.ctx, uid);
    mig_undo(st, &pl);
    if ((p = find(st, uid))) {
        forget(st, p);
        checkpoint_write(st); /* failing, the record stays: unprepare or a retry fixes it */
    }
out:
    dra_claim_free(c);
    return r;
}

int dra_unprepare(struct dra_state *st, const char *uid, char *err, size_t errlen)
{
    struct dra_prepared *p = find(st, uid);
    if (!p && !uid_ok(uid))
        return 0; /* no file can be named after it */
    /* an unknown uid too: a prepare cut short before its record (an older acceld wrote the
     * files first) may have left files, and only this call will ever name them */
    int r = remove_claim_files(st, uid);
    if (r < 0) {
        errbuf_printf(err, errlen, "claim %s: cannot remove its files: %s", uid, strerror(-r));
        return r;
    }
    /* after the spec: no new container can get the daemon's directories */
    if ((!p || p->mps) && st->cfg->mps.stop)
        st->cfg->mps.stop(st->cfg->mps.ctx, uid);
    if (!p)
        return 0;
    /* its partitions' instances: kept (and the claim) while a process still runs on one */
    if ((r = mig_destroy_all(st, p, err, errlen)) < 0)
        return r;
    size_t i = (size_t)(p - st->claims);
    struct dra_prepared gone = *p;
    memmove(&st->claims[i], &st->claims[i + 1], (st->n_claims - i - 1) * sizeof(*p));
    st->n_claims--;
    if ((r = checkpoint_write(st)) < 0) {
        /* keep it: the kubelet retries and the files are already gone */
        st->claims[st->n_claims++] = gone;
        errbuf_printf(err, errlen, "claim %s: cannot write the checkpoint in %s: %s", uid,
                      st->cfg->state_dir, strerror(-r));
        return r;
    }
    prepared_clear(&gone);
    return 0;
}
