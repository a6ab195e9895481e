/* partition.c — MIG partitions through DRA (dra.mig, docs/mig.md "DRA partitions"): the
 * node's pool with partitionable devices (KEP-4815, resource.k8s.io/v1 sharedCounters and
 * consumesCounters) and the names of its partition devices.
 *
 * A GPU in MIG mode is published as one device per placement of each of its board's GPU
 * instance profiles. Its counter set ("<gpu>-counters") has one counter per memory slice
 * ("memory-slice-N", 1 each), the compute slices ("compute-slices"), and for a profile that
 * has fewer instances than placements (the media-extension ones) its instance count
 * ("profile-<id>-instances"); a partition consumes the memory slices of its placement, its
 * compute slices and, where counted, one instance. So the scheduler never allocates two
 * partitions that NVML could not create side by side: overlapping memory slices, more compute
 * slices than the GPU has, a second media extension. Shapes and limits are the v1 API's
 * (ResourceSliceSpec: devices or sharedCounters in one slice, at most 8 counter sets, 32
 * counters a set, 64 devices a slice once one consumes counters or has taints; Device:
 * consumesCounters). */
#include "dra.h"
#include "dra-json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 128         /* ResourceSliceMaxDevices */
#define MAX_DEVICES_COUNTERS 64 /* ... when a device has taints or consumes counters */
#define MAX_COUNTER_SETS 8      /* ResourceSliceMaxCounterSets */
#define MAX_MEMORY_SLICES 16

int dra_partition_name(const struct dra_gpu *g, const struct dra_mig_profile *p, unsigned start,
                       char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s-mig-%s-%u", g->name, p->name, start);
    if (n < 0 || (size_t)n >= len || n > 63)
        return -ENAMETOOLONG;
    for (char *c = buf; *c; c++)
        if (*c == '.' || *c == '+')
            *c = '-';
    return 0;
}

int dra_partition_find(const struct dra_gpu *gpus, size_t n, const char *name,
                       const struct dra_gpu **ret_gpu, const struct dra_mig_profile **ret_profile,
                       unsigned *ret_start, unsigned *ret_size)
{
    char buf[128];
    for (size_t i = 0; i < n; i++) {
        const struct dra_gpu *g = &gpus[i];
        for (size_t k = 0; k < g->n_mig_profiles; k++) {
            const struct dra_mig_profile *p = &g->mig_profiles[k];
            for (unsigned j = 0; j < p->n_placements; j++) {
                if (dra_partition_name(g, p, p->placements[j].start, buf, sizeof(buf)) == 0 &&
                    strcmp(buf, name) == 0) {
                    *ret_gpu = g;
                    *ret_profile = p;
                    *ret_start = p->placements[j].start;
                    *ret_size = p->placements[j].size;
                    return 0;
                }
            }
        }
    }
    return -ENOENT;
}

static json_t *counter(uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    return json_pack("{s:s}", "value", buf);
}

/* The GPU's memory and compute slices: what its largest placements cover. */
static void slices_of(const struct dra_gpu *g, unsigned *ret_memory, unsigned *ret_compute)
{
    unsigned mem = 0, compute = 0;
    for (size_t k = 0; k < g->n_mig_profiles; k++) {
        const struct dra_mig_profile *p = &g->mig_profiles[k];
        compute = p->slices > compute ? p->slices : compute;
        for (unsigned j = 0; j < p->n_placements; j++) {
            unsigned end = p->placements[j].start + p->placements[j].size;
            mem = end > mem ? end : mem;
        }
    }
    *ret_memory = mem > MAX_MEMORY_SLICES ? MAX_MEMORY_SLICES : mem;
    *ret_compute = compute;
}

static bool counted(const struct dra_mig_profile *p)
{
    return p->instances < p->n_placements;
}

static void set_name(const struct dra_gpu *g, char *buf, size_t len)
{
    snprintf(buf, len, "%s-counters", g->name);
}

static json_t *counter_set(const struct dra_gpu *g)
{
    unsigned mem, compute;
    char name[96];
    slices_of(g, &mem, &compute);
    json_t *c = json_object();
    for (unsigned s = 0; s < mem; s++) {
        snprintf(name, sizeof(name), "memory-slice-%u", s);
        json_object_set_new(c, name, counter(1));
    }
    json_object_set_new(c, "compute-slices", counter(compute));
    for (size_t k = 0; k < g->n_mig_profiles; k++) {
        if (!counted(&g->mig_profiles[k]))
            continue;
        snprintf(name, sizeof(name), "profile-%u-instances", g->mig_profiles[k].id);
        json_object_set_new(c, name, counter(g->mig_profiles[k].instances));
    }
    set_name(g, name, sizeof(name));
    return json_pack("{s:s,s:o}", "name", name, "counters", c);
}

static json_t *partition(const char *driver, const struct dra_gpu *g,
                         const struct dra_mig_profile *p, unsigned start, unsigned size)
{
    char name[128], set[96];
    if (dra_partition_name(g, p, start, name, sizeof(name)) < 0)
        return NULL;
    /* the whole GPU's attributes (product, architecture, NUMA, ...), then the partition's */
    json_t *whole = dra_gpu_device_json(driver, g);
    json_t *attrs = json_incref(json_object_get(whole, "attributes"));
    json_decref(whole);
    json_object_del(attrs, "uuid");
    json_object_set_new(attrs, "parentUUID", json_pack("{s:s}", "string", g->uuid));
    json_object_set_new(attrs, "shared", json_pack("{s:b}", "bool", 0));
    json_object_set_new(attrs, "sharing", json_pack("{s:s}", "string", "mig"));
    json_object_set_new(attrs, "profile", json_pack("{s:s}", "string", p->name));
    json_object_set_new(attrs, "placementStart", json_pack("{s:i}", "int", (int)start));
    json_object_set_new(attrs, "placementSize", json_pack("{s:i}", "int", (int)size));
    json_t *cons = json_object();
    for (unsigned s = start; s < start + size && s < MAX_MEMORY_SLICES; s++) {
        char c[32];
        snprintf(c, sizeof(c), "memory-slice-%u", s);
        json_object_set_new(cons, c, counter(1));
    }
    json_object_set_new(cons, "compute-slices", counter(p->slices));
    if (counted(p)) {
        char c[48];
        snprintf(c, sizeof(c), "profile-%u-instances", p->id);
        json_object_set_new(cons, c, counter(1));
    }
    set_name(g, set, sizeof(set));
    json_t *d = json_pack("{s:s,s:o,s:{s:o,s:o},s:[{s:s,s:o}]}", "name", name, "attributes", attrs,
                          "capacity", "memory", counter(p->memory), "multiprocessors",
                          counter(p->sms), "consumesCounters", "counterSet", set, "counters", cons);
    json_t *taints = dra_gpu_taints_json(driver, g);
    if (d && taints)
        json_object_set_new(d, "taints", taints);
    else
        json_decref(taints);
    return d;
}

void dra_pool_free(struct dra_slice_out *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        free(s[i].json);
    free(s);
}

/* One slice of the pool: devices or counter sets (the other NULL). */
static int slice(struct dra_slice_out *out, const char *driver, const char *node, const char *name,
                 int64_t generation, size_t count, json_t *devices, json_t *sets, bool partitions)
{
    snprintf(out->name, sizeof(out->name), "%s", name);
    out->partitions = partitions;
    json_t *spec = json_pack("{s:s,s:s,s:{s:s,s:I,s:I}}", "driver", driver, "nodeName", node,
                             "pool", "name", node, "generation", (json_int_t)generation,
                             "resourceSliceCount", (json_int_t)count);
    if (devices)
        json_object_set(spec, "devices", devices);
    if (sets)
        json_object_set(spec, "sharedCounters", sets);
    json_t *root = json_pack("{s:s,s:s,s:{s:s},s:o}", "apiVersion", "resource.k8s.io/v1", "kind",
                             "ResourceSlice", "metadata", "name", name, "spec", spec);
    out->json = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    return out->json ? 0 : -ENOMEM;
}

int dra_pool_render(const char *driver, const char *node, int64_t generation,
                    const struct dra_gpu *gpus, size_t n_gpus, struct dra_slice_out **ret,
                    size_t *ret_n)
{
    if (!driver || !node || generation < 0)
        return -EINVAL;
    json_t *devs = json_array(), *sets = json_array();
    bool strict = false; /* a device with taints or counters: 64 a slice */
    int r = -ENOMEM;
    for (size_t i = 0; devs && sets && i < n_gpus; i++) {
        const struct dra_gpu *g = &gpus[i];
        if (g->unpublished)
            continue;
        strict |= dra_gpu_taint_effect(g) != NULL;
        if (!g->n_mig_profiles) {
            json_array_append_new(devs, dra_gpu_device_json(driver, g));
            continue;
        }
        strict = true;
        json_array_append_new(sets, counter_set(g));
        for (size_t k = 0; k < g->n_mig_profiles; k++) {
            const struct dra_mig_profile *p = &g->mig_profiles[k];
            for (unsigned j = 0; j < p->n_placements; j++) {
                json_t *d = partition(driver, g, p, p->placements[j].start, p->placements[j].size);
                if (!d) {
                    r = -EINVAL;
                    goto out;
                }
                json_array_append_new(devs, d);
            }
        }
    }
    if (!devs || !sets)
        goto out;
    size_t per = strict ? MAX_DEVICES_COUNTERS : MAX_DEVICES;
    size_t n_dev = (json_array_size(devs) + per - 1) / per;
    size_t n_set = (json_array_size(sets) + MAX_COUNTER_SETS - 1) / MAX_COUNTER_SETS;
    size_t total = n_dev + n_set;
    struct dra_slice_out *out = calloc(total ? total : 1, sizeof(*out));
    if (!out)
        goto out;
    char base[260], name[340];
    snprintf(base, sizeof(base), "%.128s-%.128s", node, driver);
    r = 0;
    for (size_t k = 0; r == 0 && k < n_dev; k++) {
        json_t *chunk = json_array();
        for (size_t i = k * per; i < json_array_size(devs) && i < (k + 1) * per; i++)
            json_array_append(chunk, json_array_get(devs, i));
        k ? snprintf(name, sizeof(name), "%s-%zu", base, k)
          : snprintf(name, sizeof(name), "%s", base);
        r = slice(&out[k], driver, node, name, generation, total, chunk, NULL, n_set > 0);
        json_decref(chunk);
    }
    for (size_t k = 0; r == 0 && k < n_set; k++) {
        json_t *chunk = json_array();
        for (size_t i = k * MAX_COUNTER_SETS;
             i < json_array_size(sets) && i < (k + 1) * MAX_COUNTER_SETS; i++)
            json_array_append(chunk, json_array_get(sets, i));
        k ? snprintf(name, sizeof(name), "%s-counters-%zu", base, k)
          : snprintf(name, sizeof(name), "%s-counters", base);
        r = slice(&out[n_dev + k], driver, node, name, generation, total, NULL, chunk, true);
        json_decref(chunk);
    }
    if (r < 0) {
        dra_pool_free(out, total);
        goto out;
    }
    *ret = out;
    *ret_n = total;
out:
    json_decref(devs);
    json_decref(sets);
    return r;
}

/* Every consumesCounters entry of every device, or sharedCounters, as compact JSON. */
static char *partition_fields(json_t *slice)
{
    json_t *spec = json_object_get(slice, "spec"), *keep = json_array();
    size_t i;
    json_t *d;
    json_array_append(keep, json_object_get(spec, "sharedCounters")
                                ? json_object_get(spec, "sharedCounters")
                                : json_null());
    json_array_foreach(json_object_get(spec, "devices"), i, d)
    {
        json_t *c = json_object_get(d, "consumesCounters");
        json_array_append(keep, c ? c : json_null());
    }
    char *s = json_dumps(keep, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(keep);
    return s;
}

bool dra_slice_kept_partitions(const char *sent, const char *answered, size_t answered_len)
{
    json_t *a = json_loads(sent, 0, NULL), *b = json_loadb(answered, answered_len, 0, NULL);
    char *sa = a ? partition_fields(a) : NULL, *sb = b ? partition_fields(b) : NULL;
    bool same = sa && sb && strcmp(sa, sb) == 0;
    free(sa);
    free(sb);
    json_decref(a);
    json_decref(b);
    return same;
}
