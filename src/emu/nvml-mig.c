/* nvml-mig.c — the emulated NVML's MIG entry points: the mode, GPU instance profiles and
 * placements, GPU and compute instances (create, list, look up, destroy), and MIG device
 * handles. The instances live in the shared machine (state-mig.h), so what accel-emu or
 * another process creates shows here at once; the geometry is mig-profiles.h's.
 *
 * Return codes follow nvml.h's documentation of each call ("Multi Instance GPU Management");
 * where it leaves a choice open the answer is marked "inferred" and listed in docs/emulator.md,
 * "MIG". Handles: nvmlGpuInstance_t and nvmlComputeInstance_t point into static arrays, one
 * entry per instance slot, and hold the serial of the instance they were given for: once that
 * instance is destroyed the handle is invalid (INVALID_ARGUMENT), as NVML documents ("the GPU
 * instance handle would become invalid"), and a later lookup of the slot's new instance reuses
 * the entry ("Handles may be reused"). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "nvml_emu.h"
#include "state-mig.h"

#define MiB (1024ull * 1024ull)
#define MIG_DEVICES_MAX (EMU_MIG_MAX_GI * EMU_MIG_MAX_CI)

static struct nvmlGpuInstance_st gpu_instances[EMU_MAX_GPUS][EMU_MIG_MAX_GI];
static struct nvmlComputeInstance_st compute_instances[EMU_MAX_GPUS][EMU_MIG_MAX_GI]
                                                      [EMU_MIG_MAX_CI];

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        nvmlReturn_t r_ = (expr);                                                                  \
        if (r_ != NVML_SUCCESS)                                                                    \
            return r_;                                                                             \
    } while (0)

static nvmlReturn_t from_errno(int r)
{
    switch (r) {
    case 0:
        return NVML_SUCCESS;
    case -EOPNOTSUPP:
        return NVML_ERROR_NOT_SUPPORTED;
    case -EINVAL:
    case -ENOENT:
        return NVML_ERROR_INVALID_ARGUMENT;
    case -ENOSPC:
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    case -EBUSY:
        return NVML_ERROR_IN_USE;
    default:
        return NVML_ERROR_UNKNOWN;
    }
}

static nvmlGpuInstance_t gi_handle(unsigned gpu, unsigned slot, uint64_t serial)
{
    struct nvmlGpuInstance_st *h = &gpu_instances[gpu][slot];
    h->gpu = gpu;
    h->slot = slot;
    __atomic_store_n(&h->serial, serial, __ATOMIC_RELEASE);
    return h;
}

static nvmlComputeInstance_t ci_handle(unsigned gpu, unsigned gi, unsigned ci, uint64_t serial)
{
    struct nvmlComputeInstance_st *h = &compute_instances[gpu][gi][ci];
    h->gpu = gpu;
    h->gi = gi;
    h->ci = ci;
    __atomic_store_n(&h->serial, serial, __ATOMIC_RELEASE);
    return h;
}

/* A GPU that is MIG-capable, with its board table and a snapshot of its instances. */
struct gpu_ctx {
    struct emu_state *st;
    struct emu_gpu *g;
    unsigned index;
    const struct emu_mig_board *b;
    struct emu_mig_gi tab[EMU_MIG_MAX_GI];
};

static nvmlReturn_t gpu_ctx(nvmlDevice_t device, struct gpu_ctx *c)
{
    CHECK(nvml_emu_device(device, &c->g, &c->index));
    c->st = nvml_emu_state();
    c->b = emu_state_mig_board(c->g);
    emu_state_mig_snapshot(c->st, c->index, c->tab);
    return NVML_SUCCESS;
}

/* A live GPU instance handle: its GPU's context and slot. */
static nvmlReturn_t gi_ctx(nvmlGpuInstance_t h, struct gpu_ctx *c, unsigned *ret_slot)
{
    struct emu_state *st = nvml_emu_state();
    if (!st)
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)gpu_instances;
    if (!h || p < base || p >= base + sizeof(gpu_instances) || (p - base) % sizeof(*h))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (h->gpu >= emu_state_gpu_count(st) || h->slot >= EMU_MIG_MAX_GI)
        return NVML_ERROR_INVALID_ARGUMENT;
    CHECK(gpu_ctx(nvml_emu_handle(h->gpu), c));
    const struct emu_mig_gi *gi = &c->tab[h->slot];
    if (!gi->used || gi->serial != __atomic_load_n(&h->serial, __ATOMIC_ACQUIRE) || !c->b)
        return NVML_ERROR_INVALID_ARGUMENT;
    *ret_slot = h->slot;
    return NVML_SUCCESS;
}

static nvmlReturn_t ci_ctx(nvmlComputeInstance_t h, struct gpu_ctx *c, unsigned *ret_gi,
                           unsigned *ret_ci)
{
    struct emu_state *st = nvml_emu_state();
    if (!st)
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)compute_instances;
    if (!h || p < base || p >= base + sizeof(compute_instances) || (p - base) % sizeof(*h))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (h->gpu >= emu_state_gpu_count(st) || h->gi >= EMU_MIG_MAX_GI || h->ci >= EMU_MIG_MAX_CI)
        return NVML_ERROR_INVALID_ARGUMENT;
    CHECK(gpu_ctx(nvml_emu_handle(h->gpu), c));
    const struct emu_mig_gi *gi = &c->tab[h->gi];
    if (!gi->used || !gi->ci[h->ci].used ||
        gi->ci[h->ci].serial != __atomic_load_n(&h->serial, __ATOMIC_ACQUIRE) || !c->b)
        return NVML_ERROR_INVALID_ARGUMENT;
    *ret_gi = h->gi;
    *ret_ci = h->ci;
    return NVML_SUCCESS;
}

unsigned nvml_emu_mig_list(struct emu_state *st, unsigned gpu, unsigned *gis, unsigned *cis,
                           uint64_t *serials)
{
    struct emu_mig_gi tab[EMU_MIG_MAX_GI];
    if (emu_state_mig_snapshot(st, gpu, tab) < 0)
        return 0;
    size_t n = emu_mig_order(tab, gis, cis, MIG_DEVICES_MAX);
    for (size_t k = 0; k < n; k++)
        serials[k] = tab[gis[k]].ci[cis[k]].serial;
    return (unsigned)n;
}

void nvml_emu_mig_name(const struct emu_gpu *g, unsigned gi, unsigned ci, char *buf, size_t len)
{
    const struct emu_mig_gi_profile *p =
        emu_mig_gi_by_index(emu_state_mig_board(g), g->mig[gi].profile);
    char n[64] = "?";
    if (p)
        emu_mig_ci_name(p, g->mig[gi].ci[ci].size, n, sizeof(n));
    snprintf(buf, len, "%s MIG %s", g->name, n);
}

/* ---- mode ------------------------------------------------------------------------------ */

/* The activation is a GPU reset: it fails with IN_USE while processes run on the GPU, and the
 * mode stays pending ("if device unbind fails because the device isn't idle, NVML_ERROR_IN_USE
 * would be returned", nvmlDeviceSetMigMode). The emulator has no permission model (NVML
 * requires root): any caller may set it. */
NVML_EMU_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                               nvmlReturn_t *activationStatus)
{
    struct gpu_ctx c;
    CHECK(gpu_ctx(device, &c));
    if (!activationStatus || mode > NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.b)
        return NVML_ERROR_NOT_SUPPORTED;
    bool active;
    int32_t busy;
    CHECK(from_errno(emu_state_mig_set_mode(c.st, c.index, mode, &active, &busy)));
    *activationStatus = active ? NVML_SUCCESS : NVML_ERROR_IN_USE;
    return NVML_SUCCESS;
}

/* ---- GPU instance profiles ------------------------------------------------------------- */

/* nvmlDeviceGetGpuInstanceProfileInfo: any profile index up to the count is NOT_SUPPORTED when
 * the board lacks it, past the count INVALID_ARGUMENT ("invoking it on profile values starting
 * from 0, until the API returns NVML_ERROR_INVALID_ARGUMENT"). needs_mode: the V call's
 * documentation says NOT_SUPPORTED when MIG mode is not enabled; the unversioned one's only
 * when the device has no MIG. */
static nvmlReturn_t gi_profile(nvmlDevice_t device, unsigned profile, bool needs_mode,
                               struct gpu_ctx *c, const struct emu_mig_gi_profile **ret)
{
    CHECK(gpu_ctx(device, c));
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!c->b || (needs_mode && !c->g->mig_mode))
        return NVML_ERROR_NOT_SUPPORTED;
    *ret = emu_mig_gi_by_index(c->b, profile);
    return *ret ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device,
                                                              unsigned int profile,
                                                              nvmlGpuInstanceProfileInfo_t *info)
{
    struct gpu_ctx c;
    const struct emu_mig_gi_profile *p;
    CHECK(gi_profile(device, profile, false, &c, &p));
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof(*info));
    info->id = p->id;
    info->isP2pSupported = 0; /* nvidia-smi mig -lgip: "P2P No" */
    info->sliceCount = p->compute_slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->sms;
    info->copyEngineCount = p->ce;
    info->decoderCount = p->dec;
    info->encoderCount = p->enc;
    info->jpegCount = p->jpeg;
    info->ofaCount = p->ofa;
    info->memorySizeMB = emu_mig_gi_bytes(c.b, p, c.g->memory_total) / MiB;
    return NVML_SUCCESS;
}

/* Version 2 or 3 (both 152 bytes); another version is INVALID_ARGUMENT ("If ... info->version
 * are invalid", nvmlDeviceGetGpuInstanceProfileInfoV). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    struct gpu_ctx c;
    CHECK(gpu_ctx(device, &c));
    if (!info || (info->version != nvmlGpuInstanceProfileInfo_v2 &&
                  info->version != nvmlGpuInstanceProfileInfo_v3))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned v = info->version;
    const struct emu_mig_gi_profile *p;
    CHECK(gi_profile(device, profile, true, &c, &p));
    nvmlGpuInstanceProfileInfo_t v1;
    CHECK(nvmlDeviceGetGpuInstanceProfileInfo(device, profile, &v1));
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    snprintf(name, sizeof(name), "MIG %s", p->name);
/* the fields v2 and v3 share, at their own offsets */
#define FILL(dst)                                                                                  \
    do {                                                                                           \
        memset((dst), 0, sizeof(*(dst)));                                                          \
        (dst)->version = v;                                                                        \
        (dst)->id = v1.id;                                                                         \
        (dst)->sliceCount = v1.sliceCount;                                                         \
        (dst)->instanceCount = v1.instanceCount;                                                   \
        (dst)->multiprocessorCount = v1.multiprocessorCount;                                       \
        (dst)->copyEngineCount = v1.copyEngineCount;                                               \
        (dst)->decoderCount = v1.decoderCount;                                                     \
        (dst)->encoderCount = v1.encoderCount;                                                     \
        (dst)->jpegCount = v1.jpegCount;                                                           \
        (dst)->ofaCount = v1.ofaCount;                                                             \
        (dst)->memorySizeMB = v1.memorySizeMB;                                                     \
        memcpy((dst)->name, name, sizeof(name));                                                   \
    } while (0)
    if (v == nvmlGpuInstanceProfileInfo_v2) {
        FILL(info);
        info->isP2pSupported = v1.isP2pSupported;
    } else {
        FILL((nvmlGpuInstanceProfileInfo_v3_t *)info); /* capabilities 0: no P2P, no graphics */
    }
#undef FILL
    return NVML_SUCCESS;
}

/* A profile by its ID (the create and list calls' argument): INVALID_ARGUMENT for an ID the
 * board does not have (inferred: the documentation lists both "profileId invalid" and
 * "profileId isn't supported"). needs_mode: NOT_SUPPORTED unless MIG mode is enabled. */
static nvmlReturn_t gi_profile_id(nvmlDevice_t device, unsigned id, bool needs_mode,
                                  struct gpu_ctx *c, const struct emu_mig_gi_profile **ret)
{
    CHECK(gpu_ctx(device, c));
    if (!c->b || (needs_mode && !c->g->mig_mode))
        return NVML_ERROR_NOT_SUPPORTED;
    *ret = emu_mig_gi_by_id(c->b, id);
    return *ret ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* Every placement of the profile "regardless of whether MIG is enabled or not"; a NULL array asks
 * for the count; an array shorter than the list is INSUFFICIENT_SIZE with the count (inferred:
 * NVML says only that it "must be large enough"). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,
    unsigned int *count)
{
    struct gpu_ctx c;
    const struct emu_mig_gi_profile *p;
    CHECK(gi_profile_id(device, profileId, false, &c, &p));
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (placements && *count < p->nstarts) {
        *count = p->nstarts;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned k = 0; placements && k < p->nstarts; k++)
        placements[k] = (nvmlGpuInstancePlacement_t){p->starts[k], p->mem_slices};
    *count = p->nstarts;
    return NVML_SUCCESS;
}

/* The unversioned name: the same answer (nvml.h maps it to _v2). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,
    unsigned int *count);
NVML_EMU_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,
    unsigned int *count)
{
    return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                                    unsigned int profileId,
                                                                    unsigned int *count)
{
    struct gpu_ctx c;
    const struct emu_mig_gi_profile *p;
    CHECK(gi_profile_id(device, profileId, true, &c, &p));
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    return from_errno(emu_state_mig_gi_remaining(c.st, c.index, p->index, count));
}

/* ---- GPU instances --------------------------------------------------------------------- */

static nvmlReturn_t gi_create(nvmlDevice_t device, unsigned int profileId,
                              const nvmlGpuInstancePlacement_t *placement,
                              nvmlGpuInstance_t *gpuInstance, bool with_placement)
{
    struct gpu_ctx c;
    const struct emu_mig_gi_profile *p;
    CHECK(gi_profile_id(device, profileId, true, &c, &p));
    if (!gpuInstance || (with_placement && !placement))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_mig_placement pl;
    if (placement)
        pl = (struct emu_mig_placement){placement->start, placement->size};
    unsigned slot;
    uint64_t serial;
    CHECK(from_errno(
        emu_state_mig_gi_create(c.st, c.index, p->index, placement ? &pl : NULL, &slot, &serial)));
    *gpuInstance = gi_handle(c.index, slot, serial);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                                      nvmlGpuInstance_t *gpuInstance)
{
    return gi_create(device, profileId, NULL, gpuInstance, false);
}

NVML_EMU_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t *placement,
    nvmlGpuInstance_t *gpuInstance)
{
    return gi_create(device, profileId, placement, gpuInstance, true);
}

/* IN_USE while it has compute instances ("processes ... or compute instances are active"). */
NVML_EMU_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    struct gpu_ctx c;
    unsigned slot;
    CHECK(gi_ctx(gpuInstance, &c, &slot));
    return from_errno(emu_state_mig_gi_destroy(c.st, c.index, slot, c.tab[slot].serial));
}

/* The GPU instances of a profile; the array must hold the profile's instance count (NVML:
 * "the buffer must be large enough to accommodate the instances supported by the profile"). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                                    nvmlGpuInstance_t *gpuInstances,
                                                    unsigned int *count)
{
    struct gpu_ctx c;
    const struct emu_mig_gi_profile *p;
    CHECK(gi_profile_id(device, profileId, true, &c, &p));
    if (!gpuInstances || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (unsigned gid = 0; gid < 16; gid++)
        for (unsigned s = 0; s < EMU_MIG_MAX_GI; s++)
            if (c.tab[s].used && c.tab[s].id == gid && c.tab[s].profile == p->index &&
                n < p->instances)
                gpuInstances[n++] = gi_handle(c.index, s, c.tab[s].serial);
    *count = n;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                       nvmlGpuInstance_t *gpuInstance)
{
    struct gpu_ctx c;
    CHECK(gpu_ctx(device, &c));
    if (!gpuInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!c.b || !c.g->mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned s = 0; s < EMU_MIG_MAX_GI; s++)
        if (c.tab[s].used && c.tab[s].id == id) {
            *gpuInstance = gi_handle(c.index, s, c.tab[s].serial);
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

NVML_EMU_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                                 nvmlGpuInstanceInfo_t *info)
{
    struct gpu_ctx c;
    unsigned slot;
    CHECK(gi_ctx(gpuInstance, &c, &slot));
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct emu_mig_gi *gi = &c.tab[slot];
    const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(c.b, gi->profile);
    info->device = nvml_emu_handle(c.index);
    info->id = gi->id;
    info->profileId = p ? p->id : 0;
    info->placement = (nvmlGpuInstancePlacement_t){gi->start, gi->size};
    return NVML_SUCCESS;
}

/* ---- compute instance profiles --------------------------------------------------------- */

/* A compute instance profile of a GPU instance: past the count (or another engine profile than
 * the shared one) INVALID_ARGUMENT, a size the GPU instance does not offer NOT_SUPPORTED. The
 * profile's ID is its index (`nvidia-smi mig -lcip` lists IDs 0-4 for 1c-7c). */
static nvmlReturn_t ci_profile(nvmlGpuInstance_t h, unsigned profile, struct gpu_ctx *c,
                               unsigned *ret_slot, const struct emu_mig_gi_profile **ret_gp,
                               struct emu_mig_ci_profile *ret)
{
    CHECK(gi_ctx(h, c, ret_slot));
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *ret_gp = emu_mig_gi_by_index(c->b, c->tab[*ret_slot].profile);
    if (!*ret_gp)
        return NVML_ERROR_UNKNOWN;
    return emu_mig_ci_profile((*ret_gp)->compute_slices, profile, ret) ? NVML_SUCCESS
                                                                       : NVML_ERROR_NOT_SUPPORTED;
}

static void ci_info_fill(const struct emu_mig_gi_profile *gp, const struct emu_mig_ci_profile *p,
                         nvmlComputeInstanceProfileInfo_t *info)
{
    memset(info, 0, sizeof(*info));
    info->id = p->index;
    info->sliceCount = p->slices;
    info->instanceCount = p->nstarts;
    info->multiprocessorCount = emu_mig_ci_sms(gp, p->slices);
    /* the engines other than SMs are the GPU instance's, shared by its compute instances
     * (NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) */
    info->sharedCopyEngineCount = gp->ce;
    info->sharedDecoderCount = gp->dec;
    info->sharedEncoderCount = gp->enc;
    info->sharedJpegCount = gp->jpeg;
    info->sharedOfaCount = gp->ofa;
}

/* Both profile info calls: the profile, then the engine profile (only the shared one) and the
 * output. */
static nvmlReturn_t ci_profile_info(nvmlGpuInstance_t h, unsigned profile, unsigned eng,
                                    const void *info, const struct emu_mig_gi_profile **ret_gp,
                                    struct emu_mig_ci_profile *ret)
{
    struct gpu_ctx c;
    unsigned slot;
    CHECK(ci_profile(h, profile, &c, &slot, ret_gp, ret));
    return info && eng == NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED ? NVML_SUCCESS
                                                                      : NVML_ERROR_INVALID_ARGUMENT;
}

NVML_EMU_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t *info)
{
    const struct emu_mig_gi_profile *gp;
    struct emu_mig_ci_profile p;
    CHECK(ci_profile_info(gpuInstance, profile, engProfile, info, &gp, &p));
    ci_info_fill(gp, &p, info);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t *info)
{
    const struct emu_mig_gi_profile *gp;
    struct emu_mig_ci_profile p;
    CHECK(ci_profile_info(gpuInstance, profile, engProfile, info, &gp, &p));
    unsigned v = info->version;
    if (v != nvmlComputeInstanceProfileInfo_v2 && v != nvmlComputeInstanceProfileInfo_v3)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlComputeInstanceProfileInfo_t v1;
    ci_info_fill(gp, &p, &v1);
    char n[64];
    emu_mig_ci_name(gp, p.slices, n, sizeof(n));
    /* v2 and v3 share their layout up to the name; v3 adds capabilities (0: no graphics) */
    size_t size = v == nvmlComputeInstanceProfileInfo_v3
                      ? sizeof(nvmlComputeInstanceProfileInfo_v3_t)
                      : sizeof(*info);
    memset(info, 0, size);
    info->version = v;
    memcpy(&info->id, &v1, sizeof(v1));
    snprintf(info->name, sizeof(info->name), "MIG %s", n);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, unsigned int *count)
{
    struct gpu_ctx c;
    unsigned slot;
    const struct emu_mig_gi_profile *gp;
    struct emu_mig_ci_profile p;
    CHECK(ci_profile(gpuInstance, profileId, &c, &slot, &gp, &p));
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    return from_errno(
        emu_state_mig_ci_remaining(c.st, c.index, slot, c.tab[slot].serial, profileId, count));
}

NVML_EMU_API nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    nvmlComputeInstancePlacement_t *placements, unsigned int *count)
{
    struct gpu_ctx c;
    unsigned slot;
    const struct emu_mig_gi_profile *gp;
    struct emu_mig_ci_profile p;
    CHECK(ci_profile(gpuInstance, profileId, &c, &slot, &gp, &p));
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (placements && *count < p.nstarts) {
        *count = p.nstarts;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned k = 0; placements && k < p.nstarts; k++)
        placements[k] = (nvmlComputeInstancePlacement_t){p.starts[k], p.slices};
    *count = p.nstarts;
    return NVML_SUCCESS;
}

/* ---- compute instances ----------------------------------------------------------------- */

static nvmlReturn_t ci_create(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                              const nvmlComputeInstancePlacement_t *placement,
                              nvmlComputeInstance_t *computeInstance, bool with_placement)
{
    struct gpu_ctx c;
    unsigned slot, ci;
    const struct emu_mig_gi_profile *gp;
    struct emu_mig_ci_profile p;
    CHECK(ci_profile(gpuInstance, profileId, &c, &slot, &gp, &p));
    if (!computeInstance || (with_placement && !placement))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_mig_placement pl;
    if (placement)
        pl = (struct emu_mig_placement){placement->start, placement->size};
    uint64_t serial;
    CHECK(from_errno(emu_state_mig_ci_create(c.st, c.index, slot, c.tab[slot].serial, profileId,
                                             placement ? &pl : NULL, &ci, &serial)));
    *computeInstance = ci_handle(c.index, slot, ci, serial);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t *computeInstance)
{
    return ci_create(gpuInstance, profileId, NULL, computeInstance, false);
}

NVML_EMU_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    const nvmlComputeInstancePlacement_t *placement, nvmlComputeInstance_t *computeInstance)
{
    return ci_create(gpuInstance, profileId, placement, computeInstance, true);
}

/* IN_USE while a process holds memory on it ("processes (e.g. CUDA application) are active on
 * the compute instance"). */
NVML_EMU_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    struct gpu_ctx c;
    unsigned gi, ci;
    CHECK(ci_ctx(computeInstance, &c, &gi, &ci));
    return from_errno(
        emu_state_mig_ci_destroy(c.st, c.index, gi, ci, c.tab[gi].ci[ci].serial, NULL));
}

NVML_EMU_API nvmlReturn_t
nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                   nvmlComputeInstance_t *computeInstances, unsigned int *count)
{
    struct gpu_ctx c;
    unsigned slot;
    const struct emu_mig_gi_profile *gp;
    struct emu_mig_ci_profile p;
    CHECK(ci_profile(gpuInstance, profileId, &c, &slot, &gp, &p));
    if (!computeInstances || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct emu_mig_gi *gi = &c.tab[slot];
    unsigned n = 0;
    for (unsigned id = 0; id < EMU_MIG_MAX_CI; id++)
        for (unsigned k = 0; k < EMU_MIG_MAX_CI; k++)
            if (gi->ci[k].used && gi->ci[k].id == id && gi->ci[k].profile == profileId &&
                n < p.nstarts)
                computeInstances[n++] = ci_handle(c.index, slot, k, gi->ci[k].serial);
    *count = n;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(
    nvmlGpuInstance_t gpuInstance, unsigned int id, nvmlComputeInstance_t *computeInstance)
{
    struct gpu_ctx c;
    unsigned slot;
    CHECK(gi_ctx(gpuInstance, &c, &slot));
    if (!computeInstance)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct emu_mig_gi *gi = &c.tab[slot];
    for (unsigned k = 0; k < EMU_MIG_MAX_CI; k++)
        if (gi->ci[k].used && gi->ci[k].id == id) {
            *computeInstance = ci_handle(c.index, slot, k, gi->ci[k].serial);
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t ci_info(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info,
                            bool placement)
{
    struct gpu_ctx c;
    unsigned gi, ci;
    CHECK(ci_ctx(computeInstance, &c, &gi, &ci));
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct emu_mig_ci *x = &c.tab[gi].ci[ci];
    info->device = nvml_emu_handle(c.index);
    info->gpuInstance = gi_handle(c.index, gi, c.tab[gi].serial);
    info->id = x->id;
    info->profileId = x->profile;
    if (placement)
        info->placement = (nvmlComputeInstancePlacement_t){x->start, x->size};
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                        nvmlComputeInstanceInfo_t *info)
{
    return ci_info(computeInstance, info, true);
}

/* The first version of the struct ended before the placement: the first 24 bytes. */
NVML_EMU_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                                     nvmlComputeInstanceInfo_t *info);
NVML_EMU_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                                     nvmlComputeInstanceInfo_t *info)
{
    return ci_info(computeInstance, info, false);
}

/* ---- MIG device handles ---------------------------------------------------------------- */

NVML_EMU_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                      unsigned int *isMigDevice)
{
    bool mig = nvml_emu_is_mig_handle(device);
    CHECK(mig ? nvml_emu_mig_device(device, NULL, NULL, NULL, NULL)
              : nvml_emu_device(device, NULL, NULL));
    if (!isMigDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = mig;
    return NVML_SUCCESS;
}

/* A GPU's own handle has no instance IDs: NOT_SUPPORTED ("if this query is not supported by the
 * device"; inferred). */
static nvmlReturn_t instance_id(nvmlDevice_t device, unsigned int *id, bool compute)
{
    struct emu_gpu *g;
    unsigned gi, ci;
    if (!nvml_emu_is_mig_handle(device)) {
        CHECK(nvml_emu_device(device, NULL, NULL));
        return id ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    }
    CHECK(nvml_emu_mig_device(device, &g, NULL, &gi, &ci));
    if (!id)
        return NVML_ERROR_INVALID_ARGUMENT;
    emu_state_lock(nvml_emu_state());
    *id = compute ? g->mig[gi].ci[ci].id : g->mig[gi].id;
    emu_state_unlock(nvml_emu_state());
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, false);
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, true);
}

/* "Returns zero if MIG is not supported or enabled"; otherwise one MIG device per compute
 * slice: 7. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct emu_gpu *g;
    CHECK(nvml_emu_device(device, &g, NULL));
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = emu_state_mig_board(g) && g->mig_mode ? EMU_MIG_COMPUTE_SLICES : 0;
    return NVML_SUCCESS;
}

/* MIG mode off: NOT_SUPPORTED; an index past the maximum: INVALID_ARGUMENT; none at that index:
 * NOT_FOUND. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                              unsigned int index,
                                                              nvmlDevice_t *migDevice)
{
    struct emu_gpu *g;
    unsigned i;
    CHECK(nvml_emu_device(device, &g, &i));
    if (!migDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!emu_state_mig_board(g) || !g->mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= EMU_MIG_COMPUTE_SLICES)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned gis[MIG_DEVICES_MAX], cis[MIG_DEVICES_MAX];
    uint64_t serials[MIG_DEVICES_MAX];
    unsigned n = nvml_emu_mig_list(nvml_emu_state(), i, gis, cis, serials);
    if (index >= n)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = nvml_emu_mig_handle(i, gis[index], cis[index], serials[index]);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                       nvmlDevice_t *device)
{
    unsigned i;
    CHECK(nvml_emu_mig_device(migDevice, NULL, &i, NULL, NULL));
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = nvml_emu_handle(i);
    return NVML_SUCCESS;
}
