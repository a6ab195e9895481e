/* dra-mig.c — MIG partitions for acceld's DRA side: profiles from NVML, the create/destroy
 * ops prepare calls, the clean-up of instances no claim owns, the refusal. See dra-mig.h. */
#include "dra-mig.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "gpu-mig.h"
#include "log.h"
#include "nvml.h"
#include "util.h"

#define MAX_PROFILES 24
#define MIG_MINORS_MAX (1u << 20)

struct mig_gpu {
    struct dra_gpu *g; /* borrowed from the DRA side */
    nvmlDevice_t handle;
    struct dra_mig_profile profiles[MAX_PROFILES];
    size_t n_profiles;
};

struct dra_mig {
    struct gpu_nvml *nvml;
    char minors[PATH_MAX]; /* <procRoot>/driver/nvidia-caps/mig-minors */
    struct mig_gpu *gpus;
    size_t n;
    char refusal[512];
};

static int load_profiles(struct dra_mig *m, struct mig_gpu *mg)
{
    struct gpu_mig_profile p[MAX_PROFILES];
    size_t n = 0;
    int r = gpu_mig_profiles(m->nvml, mg->handle, p, MAX_PROFILES, &n);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        struct dra_mig_profile *d = &mg->profiles[mg->n_profiles++];
        memset(d, 0, sizeof(*d));
        d->id = p[i].id;
        snprintf(d->name, sizeof(d->name), "%s", p[i].name);
        d->slices = p[i].slices;
        d->instances = p[i].instances;
        d->memory = p[i].memory_mib << 20;
        d->sms = p[i].sms;
        d->n_placements = p[i].n_placements;
        for (unsigned k = 0; k < p[i].n_placements && k < DRA_MIG_MAX_PLACEMENTS; k++) {
            d->placements[k].start = p[i].placements[k].start;
            d->placements[k].size = p[i].placements[k].size;
        }
    }
    return 0;
}

int dra_mig_new(struct gpu_nvml *nvml, const struct acceld_config *cfg, struct dra_gpu *gpus,
                size_t n, struct dra_mig **ret)
{
    struct dra_mig *m = calloc(1, sizeof(*m));
    if (!m || !(m->gpus = calloc(n ? n : 1, sizeof(*m->gpus)))) {
        free(m);
        return -ENOMEM;
    }
    m->nvml = nvml;
    snprintf(m->minors, sizeof(m->minors), "%s/driver/nvidia-caps/mig-minors", cfg->proc_root);
    for (size_t i = 0; cfg->dra_mig && nvml && i < n; i++) {
        struct dra_gpu *g = &gpus[i];
        unsigned cur = 0, pending = 0;
        nvmlDevice_t h;
        if (!nvml->nvmlDeviceGetHandleByUUID ||
            nvml->nvmlDeviceGetHandleByUUID(g->uuid, &h) != NVML_SUCCESS ||
            !nvml->nvmlDeviceGetMigMode || nvml->nvmlDeviceGetMigMode(h, &cur, &pending) != 0 ||
            cur != NVML_DEVICE_MIG_ENABLE) {
            if (g->mig_capable)
                log_info("dra: GPU %s is published whole: dra.mig publishes GPUs in MIG mode "
                         "as partitions (nvidia-smi -i N -mig 1, then a GPU reset)",
                         g->uuid);
            continue;
        }
        struct mig_gpu *mg = &m->gpus[m->n];
        mg->g = g;
        mg->handle = h;
        int r = load_profiles(m, mg);
        if (r < 0 || !mg->n_profiles) {
            log_error("dra: GPU %s is in MIG mode and its profiles cannot be read (%s): it is "
                      "published whole",
                      g->uuid, r < 0 ? strerror(-r) : "none");
            mg->n_profiles = 0;
            continue;
        }
        if (g->shared || g->mps)
            log_warn("dra: GPU %s is published as MIG partitions (dra.mig): its dra.sharing %s "
                     "does not apply (a partition is exclusive)",
                     g->uuid, g->mps ? "mps" : "shared");
        g->shared = g->mps = false;
        g->mig_profiles = mg->profiles;
        g->n_mig_profiles = mg->n_profiles;
        m->n++;
        size_t parts = 0;
        for (size_t k = 0; k < mg->n_profiles; k++)
            parts += mg->profiles[k].n_placements;
        log_info("dra: GPU %s (%s) published as %zu MIG partitions of %zu profiles", g->uuid,
                 g->name, parts, mg->n_profiles);
    }
    *ret = m;
    return 0;
}

struct dra_mig *dra_mig_free(struct dra_mig *m)
{
    if (!m)
        return NULL;
    free(m->gpus);
    free(m);
    return NULL;
}

size_t dra_mig_count(const struct dra_mig *m)
{
    return m ? m->n : 0;
}

static struct mig_gpu *by_uuid(struct dra_mig *m, const char *uuid)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->gpus[i].g->uuid, uuid) == 0)
            return &m->gpus[i];
    return NULL;
}

/* The capability nodes of the new instance (none when mig-minors is not there or lacks it). */
static void caps(struct dra_mig *m, const struct mig_gpu *mg, struct dra_mig_made *made)
{
    char *text = NULL;
    size_t len = 0;
    int gi, ci;
    made->n_caps = 0;
    if (fs_read_all(m->minors, MIG_MINORS_MAX, &text, &len) < 0)
        return;
    if (gpu_mig_minor(text, len, mg->g->minor, (int)made->gi, -1, &gi) == 0 &&
        gpu_mig_minor(text, len, mg->g->minor, (int)made->gi, (int)made->ci, &ci) == 0) {
        snprintf(made->caps[0], sizeof(made->caps[0]), "/dev/nvidia-caps/nvidia-cap%d", gi);
        snprintf(made->caps[1], sizeof(made->caps[1]), "/dev/nvidia-caps/nvidia-cap%d", ci);
        made->n_caps = 2;
    }
    free(text);
}

static int op_create(void *ctx, const char *gpu_uuid, unsigned profile_id, unsigned start,
                     unsigned size, struct dra_mig_made *ret, char *err, size_t errlen)
{
    struct dra_mig *m = ctx;
    struct mig_gpu *mg = by_uuid(m, gpu_uuid);
    if (!mg)
        return errbuf_printf(err, errlen, "GPU %s is not published as MIG partitions", gpu_uuid),
               -ENODEV;
    struct gpu_mig_device d;
    int r = gpu_mig_create(m->nvml, mg->handle, profile_id, start, size, &d, err, errlen);
    if (r < 0)
        return r;
    memset(ret, 0, sizeof(*ret));
    snprintf(ret->uuid, sizeof(ret->uuid), "%s", d.uuid);
    ret->gi = d.gi;
    ret->ci = d.ci;
    caps(m, mg, ret);
    log_info("dra: MIG %s created on GPU %s at memory slice %u: GPU instance %u, %s", d.profile,
             gpu_uuid, start, d.gi, d.uuid);
    return 0;
}

static int op_destroy(void *ctx, const char *gpu_uuid, unsigned gi, char *err, size_t errlen)
{
    struct dra_mig *m = ctx;
    struct mig_gpu *mg = by_uuid(m, gpu_uuid);
    nvmlDevice_t h;
    if (mg)
        h = mg->handle;
    else if (!m->nvml || !m->nvml->nvmlDeviceGetHandleByUUID ||
             m->nvml->nvmlDeviceGetHandleByUUID(gpu_uuid, &h) != NVML_SUCCESS)
        return -ENOENT; /* the GPU is gone, and its instances with it */
    int r = gpu_mig_destroy(m->nvml, h, gi, err, errlen);
    if (r == 0)
        log_info("dra: MIG GPU instance %u of GPU %s destroyed", gi, gpu_uuid);
    return r;
}

struct dra_mig_ops dra_mig_ops(struct dra_mig *m)
{
    return (struct dra_mig_ops){op_create, op_destroy, m};
}

static bool owned(const struct dra_state *st, const char *uuid, unsigned gi)
{
    for (size_t i = 0; i < dra_state_count(st); i++) {
        const struct dra_prepared *p = dra_state_get(st, i);
        for (size_t d = 0; d < p->n_devices; d++)
            if (p->devices[d].mig_gpu && strcmp(p->devices[d].mig_gpu, uuid) == 0 &&
                p->devices[d].mig_gi == gi)
                return true;
    }
    return false;
}

size_t dra_mig_clean(struct dra_mig *m, const struct dra_state *st)
{
    size_t gone = 0;
    for (size_t i = 0; m && i < m->n; i++) {
        struct mig_gpu *mg = &m->gpus[i];
        struct gpu_mig_device *v = NULL;
        size_t n = 0;
        if (gpu_mig_devices(m->nvml, mg->handle, &v, &n) < 0)
            continue;
        for (size_t k = 0; k < n; k++) {
            char err[256] = "";
            if (owned(st, mg->g->uuid, v[k].gi))
                continue;
            int r = gpu_mig_destroy(m->nvml, mg->handle, v[k].gi, err, sizeof(err));
            if (r == 0 || r == -ENOENT) {
                gone += r == 0;
                log_warn("dra: MIG GPU instance %u (%s, %s) of GPU %s belongs to no prepared "
                         "claim: destroyed (dra.mig owns the GPU's partitions)",
                         v[k].gi, v[k].profile, v[k].uuid, mg->g->uuid);
            } else {
                log_error("dra: MIG GPU instance %u (%s) of GPU %s belongs to no prepared claim "
                          "and cannot be destroyed (%s): claims for partitions over it will "
                          "fail until it is gone",
                          v[k].gi, v[k].profile, mg->g->uuid, err);
            }
        }
        free(v);
    }
    return gone;
}

void dra_mig_refuse(struct dra_mig *m, struct dra_gpu *gpus, size_t n, const char *reason)
{
    if (!m || m->refusal[0] || !m->n)
        return;
    snprintf(m->refusal, sizeof(m->refusal), "%s", reason);
    for (size_t i = 0; i < n; i++)
        if (gpus[i].n_mig_profiles)
            gpus[i].unpublished = true;
    log_error("dra: MIG partitions refused: %s. The API server needs partitionable devices "
              "(resource.k8s.io/v1 sharedCounters and consumesCounters, Kubernetes 1.36+, feature "
              "gate DRAPartitionableDevices on the API server and the scheduler): the %zu GPU(s) "
              "in MIG mode are withdrawn from the slice; turn the gate on, or dra.mig off, and "
              "restart acceld",
              reason, m->n);
}

const char *dra_mig_refusal(const struct dra_mig *m)
{
    return m && m->refusal[0] ? m->refusal : NULL;
}
