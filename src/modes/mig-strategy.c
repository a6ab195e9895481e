/* mig-strategy.c — NVIDIA's MIG strategies over pgpu tables: the MIG devices of the GPUs in
 * MIG mode (src/gpu/gpu-mig.c), the rules of single and mixed, their capability nodes. See
 * mig-strategy.h. */
#include "mig-strategy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "gpu-mig.h"
#include "log.h"
#include "pgpu.h"
#include "util.h"

/* The MIG User Guide's mig-minors file; a few thousand lines on a real node. */
#define MIG_MINORS_MAX (1u << 20)

struct dev {
    struct gpu_mig_device mig;
    size_t gpu;
    char caps[2][40];
    size_t n_caps;
};

int mig_resource_name(const char *resource_name, const char *profile, char *out, size_t len)
{
    const char *slash = strchr(resource_name, '/');
    int n = snprintf(out, len, "%.*s/mig-%s", slash ? (int)(slash - resource_name) : 10,
                     slash ? resource_name : "nvidia.com", profile);
    if (n < 0 || (size_t)n >= len || n > 63)
        return -EINVAL;
    for (char *p = strchr(out, '/'); *p; p++)
        if (*p == '+')
            *p = '.';
    return 0;
}

/* The capability nodes of d from mig-minors (text NULL: none known). */
static void caps_of(struct dev *d, int minor, const char *text, size_t len)
{
    int gi_minor, ci_minor;
    if (!text || gpu_mig_minor(text, len, minor, (int)d->mig.gi, -1, &gi_minor) < 0 ||
        gpu_mig_minor(text, len, minor, (int)d->mig.gi, (int)d->mig.ci, &ci_minor) < 0)
        return;
    snprintf(d->caps[0], sizeof(d->caps[0]), "/dev/nvidia-caps/nvidia-cap%d", gi_minor);
    snprintf(d->caps[1], sizeof(d->caps[1]), "/dev/nvidia-caps/nvidia-cap%d", ci_minor);
    d->n_caps = 2;
}

static bool same_kind(const struct gpu_mig_device *a, const struct gpu_mig_device *b)
{
    return strcmp(a->profile, b->profile) == 0 && a->gi_slices == b->gi_slices &&
           a->ci_slices == b->ci_slices && a->memory_bytes == b->memory_bytes;
}

static struct pgpu_options options_of(const struct acceld_config *cfg, const char *tag)
{
    return (struct pgpu_options){.dev_root = cfg->dev_root,
                                 .strategy = cfg->strategy,
                                 .cdi_vendor = cfg->cdi_vendor,
                                 .cdi_class = cfg->cdi_class,
                                 .cdi_tag = tag && tag[0] ? tag : NULL};
}

/* One table of the devices of v whose profile is `profile` (NULL: all). */
static int add_table(struct mig_set *s, const struct acceld_config *cfg, const struct mig_gpu *gpus,
                     const struct dev *v, size_t n, const char *profile, const char *resource,
                     const char *tag)
{
    if (s->n == MIG_MAX_TABLES)
        return -E2BIG;
    struct pgpu_gpu_desc *d = calloc(n ? n : 1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (profile && strcmp(v[i].mig.profile, profile) != 0)
            continue;
        const struct mig_gpu *g = &gpus[v[i].gpu];
        d[k] = (struct pgpu_gpu_desc){.uuid = v[i].mig.uuid,
                                      .minor = g->minor,
                                      .numa_node = g->numa_node,
                                      .healthy = g->healthy,
                                      .parent_uuid = g->uuid,
                                      .n_extra = v[i].n_caps};
        for (size_t c = 0; c < v[i].n_caps; c++)
            d[k].extra_nodes[c] = v[i].caps[c];
        k++;
    }
    struct mig_table *t = &s->tables[s->n];
    snprintf(t->resource, sizeof(t->resource), "%s", resource);
    snprintf(t->cdi_tag, sizeof(t->cdi_tag), "%s", tag ? tag : "");
    struct pgpu_options o = options_of(cfg, t->cdi_tag);
    int r = pgpu_new(d, k, NULL, NULL, &o, &t->table);
    free(d);
    if (r == 0)
        s->n++;
    return r;
}

/* NVIDIA's rules for the strategy: 0, or -EINVAL with the message. */
static int check_rules(const struct acceld_config *cfg, const struct mig_gpu *gpus, size_t n_gpus,
                       const size_t *per_gpu, const struct dev *v, size_t n, size_t n_whole,
                       char *err, size_t errlen)
{
    bool single = cfg->mig_strategy == ACCELD_MIG_SINGLE;
    for (size_t g = 0; g < n_gpus; g++)
        if (single && per_gpu[g] == 0)
            return errbuf_printf(err, errlen,
                                 "migStrategy single: GPU %s is in MIG mode with no MIG device: "
                                 "create its instances (nvidia-smi mig -cgi ... -C), or use mixed",
                                 gpus[g].uuid),
                   -EINVAL;
    if (single && n_gpus && n_whole)
        return errbuf_printf(err, errlen,
                             "migStrategy single: %zu GPU(s) are in MIG mode and %zu are not: "
                             "every GPU of the node must be (NVIDIA's rule), or use mixed",
                             n_gpus, n_whole),
               -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (single && !same_kind(&v[i].mig, &v[0].mig))
            return errbuf_printf(err, errlen,
                                 "migStrategy single: MIG devices of two profiles (%s on GPU %s, "
                                 "%s on GPU %s): single needs one profile on every GPU; use "
                                 "mixed, or repartition",
                                 v[0].mig.profile, gpus[v[0].gpu].uuid, v[i].mig.profile,
                                 gpus[v[i].gpu].uuid),
                   -EINVAL;
        if (!single && v[i].mig.ci_slices < v[i].mig.gi_slices)
            return errbuf_printf(err, errlen,
                                 "migStrategy mixed: MIG device %s of GPU %s has profile %s (its "
                                 "compute instance does not fill its GPU instance), which no "
                                 "resource matches (NVIDIA's rule): give each GPU instance one "
                                 "compute instance that fills it (nvidia-smi mig -cgi ... -C)",
                                 v[i].mig.uuid, gpus[v[i].gpu].uuid, v[i].mig.profile),
                   -EINVAL;
    }
    return 0;
}

int mig_set_new(struct gpu_nvml *nvml, const struct acceld_config *cfg, const struct mig_gpu *gpus,
                size_t n_gpus, size_t n_whole, struct mig_set **ret, char *err, size_t errlen)
{
    struct mig_set *s = calloc(1, sizeof(*s));
    struct dev *v = NULL;
    size_t n = 0, *per_gpu = calloc(n_gpus ? n_gpus : 1, sizeof(size_t));
    char *minors = NULL;
    size_t minors_len = 0;
    int r = s && per_gpu ? 0 : -ENOMEM;
    if (errlen)
        err[0] = '\0';
    char path[ACCELD_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/driver/nvidia-caps/mig-minors", cfg->proc_root);
    if (n_gpus && fs_read_all(path, MIG_MINORS_MAX, &minors, &minors_len) < 0) {
        minors = NULL;
        log_warn("MIG: no %s: MIG devices are handed their GPU's /dev/nvidiaN without their "
                 "capability nodes (/dev/nvidia-caps)",
                 path);
    }
    for (size_t g = 0; r == 0 && g < n_gpus; g++) {
        struct gpu_mig_device *m = NULL;
        size_t k = 0;
        r = gpu_mig_devices(nvml, gpus[g].handle, &m, &k);
        if (r < 0) {
            errbuf_printf(err, errlen, "MIG: cannot list the MIG devices of GPU %s: %s",
                          gpus[g].uuid, strerror(-r));
            break;
        }
        struct dev *nv = k ? realloc(v, (n + k) * sizeof(*v)) : v;
        if (k && !nv) {
            free(m);
            r = -ENOMEM;
            break;
        }
        v = nv;
        for (size_t i = 0; i < k; i++) {
            struct dev *d = &v[n++];
            memset(d, 0, sizeof(*d));
            d->mig = m[i];
            d->gpu = g;
            caps_of(d, gpus[g].minor, minors, minors_len);
            if (minors && !d->n_caps)
                log_warn("MIG: %s has no lines for GPU instance %u / compute instance %u of "
                         "GPU %d: %s gets its GPU's node only",
                         path, d->mig.gi, d->mig.ci, gpus[g].minor, d->mig.uuid);
        }
        per_gpu[g] = k;
        if (!k && cfg->mig_strategy == ACCELD_MIG_MIXED)
            log_warn("MIG: GPU %s is in MIG mode with no MIG device: nothing of it is served",
                     gpus[g].uuid);
        free(m);
    }
    if (r == 0)
        r = check_rules(cfg, gpus, n_gpus, per_gpu, v, n, n_whole, err, errlen);
    if (r == 0 && cfg->mig_strategy == ACCELD_MIG_SINGLE && n) {
        r = add_table(s, cfg, gpus, v, n, NULL, cfg->resource_name, NULL);
    } else if (r == 0 && cfg->mig_strategy == ACCELD_MIG_MIXED) {
        for (size_t i = 0; r == 0 && i < n; i++) {
            bool seen = false;
            for (size_t j = 0; j < i; j++)
                seen |= strcmp(v[j].mig.profile, v[i].mig.profile) == 0;
            if (seen)
                continue;
            char resource[ACCELD_NAME_MAX], tag[ACCELD_NAME_MAX];
            if (mig_resource_name(cfg->resource_name, v[i].mig.profile, resource,
                                  sizeof(resource)) < 0) {
                errbuf_printf(err, errlen, "MIG: profile %s makes no valid resource name",
                              v[i].mig.profile);
                r = -EINVAL;
                break;
            }
            snprintf(tag, sizeof(tag), "%s", strchr(resource, '/') + 1);
            r = add_table(s, cfg, gpus, v, n, v[i].mig.profile, resource, tag);
        }
    }
    if (r < 0 && !err[0])
        errbuf_printf(err, errlen, "MIG: %s", strerror(-r));
    if (r == 0)
        s->n_devices = n;
    free(v);
    free(per_gpu);
    free(minors);
    if (r < 0) {
        mig_set_free(s);
        return r;
    }
    *ret = s;
    return 0;
}

struct mig_set *mig_set_free(struct mig_set *s)
{
    if (!s)
        return NULL;
    for (size_t i = 0; i < s->n; i++)
        pgpu_free(s->tables[i].table);
    free(s);
    return NULL;
}

int mig_set_reconfigure(struct mig_set *s, const struct acceld_config *cfg)
{
    for (size_t i = 0; s && i < s->n; i++) {
        struct pgpu_options o = options_of(cfg, s->tables[i].cdi_tag);
        int r = pgpu_set_options(s->tables[i].table, &o);
        if (r < 0)
            return r;
    }
    return 0;
}

int mig_set_write_cdi(const struct mig_set *s, const char *dir)
{
    for (size_t i = 0; s && i < s->n; i++) {
        int r = pgpu_write_cdi(s->tables[i].table, dir);
        if (r < 0)
            return r;
    }
    return 0;
}
