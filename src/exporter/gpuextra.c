/*
 * gpuextra.c — NVLink error counters and MIG mode per GPU (gpuextra.h).
 */
#include "gpuextra.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The label values of nvmlNvLinkErrorCounter_t, in its order. */
static const char *const nvlink_types[NVML_NVLINK_ERROR_COUNT] = {"replay", "recovery", "crc_flit",
                                                                  "crc_data", "ecc_data"};

struct extra_gpu {
    char uuid[96];
    bool mig_ok;
    unsigned mig_current, mig_pending;
    uint32_t links; /* bit l: link l active at the last read */
    uint32_t seen;  /* bit l: link l's counters read at least once (kept in the sums) */
    uint32_t bad[NVML_NVLINK_MAX_LINKS]; /* bit t: counter t of link l unreadable */
    unsigned long long nvlink[NVML_NVLINK_MAX_LINKS][NVML_NVLINK_ERROR_COUNT];
};

struct exporter_extra {
    unsigned ngpus;
    struct extra_gpu g[];
};

int exporter_extra_new(unsigned ngpus, struct exporter_extra **ret)
{
    struct exporter_extra *x = calloc(1, sizeof(*x) + ngpus * sizeof(x->g[0]));
    if (!x)
        return -ENOMEM;
    x->ngpus = ngpus;
    *ret = x;
    return 0;
}

struct exporter_extra *exporter_extra_free(struct exporter_extra *x)
{
    free(x);
    return NULL;
}

void exporter_extra_sample(struct exporter_extra *x, struct gpu_nvml *n, unsigned i,
                           nvmlDevice_t dev, const char *uuid, uint64_t round)
{
    if (i >= x->ngpus)
        return;
    struct extra_gpu *g = &x->g[i];
    snprintf(g->uuid, sizeof(g->uuid), "%s", uuid);
    g->mig_ok = n->nvmlDeviceGetMigMode &&
                n->nvmlDeviceGetMigMode(dev, &g->mig_current, &g->mig_pending) == NVML_SUCCESS;
    if (round % EXPORTER_EXTRA_NVLINK_EVERY != 0)
        return;
    g->links = 0;
    if (!n->nvmlDeviceGetNvLinkState || !n->nvmlDeviceGetNvLinkErrorCounter)
        return;
    for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
        nvmlEnableState_t active;
        nvmlReturn_t r = n->nvmlDeviceGetNvLinkState(dev, l, &active);
        if (r == NVML_ERROR_NOT_SUPPORTED && l == 0)
            return; /* no NVLink on this GPU */
        if (r != NVML_SUCCESS || active != NVML_FEATURE_ENABLED)
            continue;
        g->bad[l] = 0;
        for (unsigned t = 0; t < NVML_NVLINK_ERROR_COUNT; t++)
            if (n->nvmlDeviceGetNvLinkErrorCounter(dev, l, (nvmlNvLinkErrorCounter_t)t,
                                                   &g->nvlink[l][t]) != NVML_SUCCESS)
                g->bad[l] |= 1u << t;
        g->links |= 1u << l;
        g->seen |= 1u << l;
    }
}

static const char *esc(const char *v, char *out, size_t len)
{
    size_t o = 0;
    for (; *v && o + 3 < len; v++) {
        if (*v == '\\' || *v == '"' || *v == '\n')
            out[o++] = '\\';
        out[o++] = *v == '\n' ? 'n' : *v;
    }
    out[o] = '\0';
    return out;
}

void exporter_extra_render(const struct exporter_extra *x, const struct exporter_sli_out *o)
{
    void *c = o->ctx;
    char u[200];
    if (o->family(c, "accel_gpu_nvlink_errors_total", "counter",
                  "NVLink data-link errors of the GPU, summed over its links, by type (replay, "
                  "recovery, crc_flit, crc_data, ecc_data), since the driver loaded or the "
                  "counters were reset."))
        for (unsigned i = 0; i < x->ngpus; i++) {
            const struct extra_gpu *g = &x->g[i];
            if (!g->seen)
                continue;
            esc(g->uuid, u, sizeof(u));
            for (unsigned t = 0; t < NVML_NVLINK_ERROR_COUNT; t++) {
                unsigned long long sum = 0;
                bool any = false;
                for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++)
                    if ((g->seen & (1u << l)) && !(g->bad[l] & (1u << t))) {
                        sum += g->nvlink[l][t];
                        any = true;
                    }
                if (any)
                    o->print(c,
                             "accel_gpu_nvlink_errors_total{gpu=\"%u\",uuid=\"%s\",type=\"%s\"} "
                             "%llu\n",
                             i, u, nvlink_types[t], sum);
            }
        }
    if (o->family(c, "accel_gpu_nvlink_links_active", "gauge",
                  "NVLink links of the GPU that are up (nvmlDeviceGetNvLinkState); GPUs with "
                  "NVLink only."))
        for (unsigned i = 0; i < x->ngpus; i++)
            if (x->g[i].seen)
                o->print(c, "accel_gpu_nvlink_links_active{gpu=\"%u\",uuid=\"%s\"} %d\n", i,
                         esc(x->g[i].uuid, u, sizeof(u)), __builtin_popcount(x->g[i].links));
    if (o->family(c, "accel_gpu_mig_mode", "gauge",
                  "1 while MIG is enabled on the GPU, 0 while disabled (GPUs that support MIG "
                  "only)."))
        for (unsigned i = 0; i < x->ngpus; i++)
            if (x->g[i].mig_ok)
                o->print(c, "accel_gpu_mig_mode{gpu=\"%u\",uuid=\"%s\"} %d\n", i,
                         esc(x->g[i].uuid, u, sizeof(u)),
                         x->g[i].mig_current == NVML_DEVICE_MIG_ENABLE);
    if (o->family(c, "accel_gpu_mig_mode_pending", "gauge",
                  "The MIG mode the GPU takes at its next reset (1 enabled, 0 disabled)."))
        for (unsigned i = 0; i < x->ngpus; i++)
            if (x->g[i].mig_ok)
                o->print(c, "accel_gpu_mig_mode_pending{gpu=\"%u\",uuid=\"%s\"} %d\n", i,
                         esc(x->g[i].uuid, u, sizeof(u)),
                         x->g[i].mig_pending == NVML_DEVICE_MIG_ENABLE);
}
