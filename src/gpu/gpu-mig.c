/*
 * gpu-mig.c — MIG through NVML: MIG devices, profiles, create/destroy, mig-minors. See
 * gpu-mig.h.
 */
#include "gpu-mig.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define NO_ID 0xFFFFFFFFu

static bool have_mig(const struct gpu_nvml *n)
{
    return n->nvmlDeviceGetMaxMigDeviceCount && n->nvmlDeviceGetMigDeviceHandleByIndex &&
           n->nvmlDeviceGetGpuInstanceId && n->nvmlDeviceGetComputeInstanceId &&
           n->nvmlDeviceGetGpuInstanceById && n->nvmlGpuInstanceGetInfo &&
           n->nvmlGpuInstanceGetComputeInstanceById && n->nvmlComputeInstanceGetInfo_v2 &&
           n->nvmlDeviceGetGpuInstanceProfileInfoV && n->nvmlDeviceGetUUID;
}

/* The profile with this ID (its info through the versioned call, which has the name). */
static int profile_by_id(struct gpu_nvml *nvml, nvmlDevice_t gpu, unsigned id,
                         struct gpu_mig_profile *ret)
{
    for (unsigned i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT; i++) {
        nvmlGpuInstanceProfileInfo_v2_t info = {.version = nvmlGpuInstanceProfileInfo_v2};
        if (nvml->nvmlDeviceGetGpuInstanceProfileInfoV(gpu, i, &info) != NVML_SUCCESS ||
            info.id != id)
            continue;
        memset(ret, 0, sizeof(*ret));
        ret->index = i;
        ret->id = info.id;
        ret->slices = info.sliceCount;
        ret->instances = info.instanceCount;
        ret->memory_mib = info.memorySizeMB;
        ret->sms = info.multiprocessorCount;
        /* "MIG 1g.10gb" -> "1g.10gb" */
        const char *name = strncmp(info.name, "MIG ", 4) == 0 ? info.name + 4 : info.name;
        snprintf(ret->name, sizeof(ret->name), "%.31s", name);
        return 0;
    }
    return -ENOENT;
}

/* Fills the GPU/compute instance facts of d (gi, ci set). */
static int describe(struct gpu_nvml *nvml, nvmlDevice_t gpu, struct gpu_mig_device *d)
{
    nvmlGpuInstance_t gi;
    nvmlComputeInstance_t ci;
    nvmlGpuInstanceInfo_t gii;
    nvmlComputeInstanceInfo_t cii;
    struct gpu_mig_profile p;
    nvmlReturn_t r = nvml->nvmlDeviceGetGpuInstanceById(gpu, d->gi, &gi);
    if (r == NVML_SUCCESS)
        r = nvml->nvmlGpuInstanceGetInfo(gi, &gii);
    if (r == NVML_SUCCESS)
        r = nvml->nvmlGpuInstanceGetComputeInstanceById(gi, d->ci, &ci);
    if (r == NVML_SUCCESS)
        r = nvml->nvmlComputeInstanceGetInfo_v2(ci, &cii);
    if (r != NVML_SUCCESS)
        return gpu_nvml_errno(r);
    d->gi_profile_id = gii.profileId;
    d->gi_start = gii.placement.start;
    d->gi_size = gii.placement.size;
    int e = profile_by_id(nvml, gpu, gii.profileId, &p);
    if (e < 0)
        return e;
    d->gi_slices = p.slices;
    d->ci_slices = cii.placement.size ? cii.placement.size : p.slices;
    if (d->ci_slices >= d->gi_slices)
        snprintf(d->profile, sizeof(d->profile), "%s", p.name);
    else
        snprintf(d->profile, sizeof(d->profile), "%uc.%.20s", d->ci_slices % 100, p.name);
    return 0;
}

/* The facts of one MIG device handle. */
static int mig_handle(struct gpu_nvml *nvml, nvmlDevice_t gpu, nvmlDevice_t mig,
                      struct gpu_mig_device *d)
{
    memset(d, 0, sizeof(*d));
    nvmlReturn_t r = nvml->nvmlDeviceGetUUID(mig, d->uuid, sizeof(d->uuid));
    if (r == NVML_SUCCESS)
        r = nvml->nvmlDeviceGetGpuInstanceId(mig, &d->gi);
    if (r == NVML_SUCCESS)
        r = nvml->nvmlDeviceGetComputeInstanceId(mig, &d->ci);
    if (r != NVML_SUCCESS)
        return gpu_nvml_errno(r);
    nvmlMemory_t mem;
    if (nvml->nvmlDeviceGetMemoryInfo && nvml->nvmlDeviceGetMemoryInfo(mig, &mem) == NVML_SUCCESS) {
        d->memory_bytes = mem.total;
        d->memory_used_bytes = mem.used;
    }
    return describe(nvml, gpu, d);
}

/* How many MIG device indexes the GPU has (0 unless it is in MIG mode). */
static int max_devices(struct gpu_nvml *nvml, nvmlDevice_t gpu, unsigned *ret)
{
    if (!have_mig(nvml))
        return -EOPNOTSUPP;
    return gpu_nvml_errno(nvml->nvmlDeviceGetMaxMigDeviceCount(gpu, ret));
}

int gpu_mig_devices_into(struct gpu_nvml *nvml, nvmlDevice_t gpu, struct gpu_mig_device *out,
                         size_t cap, size_t *ret_n)
{
    unsigned max = 0;
    nvmlReturn_t r;
    int e = max_devices(nvml, gpu, &max);
    if (e < 0)
        return e;
    size_t n = 0;
    for (unsigned i = 0; i < max; i++) {
        nvmlDevice_t mig;
        struct gpu_mig_device d;
        r = nvml->nvmlDeviceGetMigDeviceHandleByIndex(gpu, i, &mig);
        if (r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT)
            continue; /* an empty index */
        e = r == NVML_SUCCESS ? mig_handle(nvml, gpu, mig, &d) : gpu_nvml_errno(r);
        if (e < 0)
            return e;
        if (n < cap)
            out[n] = d;
        n++;
    }
    *ret_n = n;
    return 0;
}

int gpu_mig_devices(struct gpu_nvml *nvml, nvmlDevice_t gpu, struct gpu_mig_device **ret,
                    size_t *ret_n)
{
    unsigned max = 0;
    int e = max_devices(nvml, gpu, &max);
    if (e < 0)
        return e;
    struct gpu_mig_device *v = calloc(max ? max : 1, sizeof(*v));
    size_t n = 0;
    if (!v)
        return -ENOMEM;
    e = gpu_mig_devices_into(nvml, gpu, v, max, &n);
    if (e < 0 || !n) {
        free(v);
        v = NULL;
    }
    if (e < 0)
        return e;
    *ret = v;
    *ret_n = n < max ? n : max;
    return 0;
}

int gpu_mig_profiles(struct gpu_nvml *nvml, nvmlDevice_t gpu, struct gpu_mig_profile *out,
                     size_t cap, size_t *ret_n)
{
    if (!nvml->nvmlDeviceGetGpuInstanceProfileInfoV ||
        !nvml->nvmlDeviceGetGpuInstancePossiblePlacements_v2)
        return -EOPNOTSUPP;
    size_t n = 0;
    for (unsigned i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT && n < cap; i++) {
        nvmlGpuInstanceProfileInfo_v2_t info = {.version = nvmlGpuInstanceProfileInfo_v2};
        if (nvml->nvmlDeviceGetGpuInstanceProfileInfoV(gpu, i, &info) != NVML_SUCCESS)
            continue; /* not on this board */
        struct gpu_mig_profile *p = &out[n];
        if (profile_by_id(nvml, gpu, info.id, p) < 0)
            continue;
        nvmlGpuInstancePlacement_t pl[GPU_MIG_MAX_PLACEMENTS];
        unsigned count = GPU_MIG_MAX_PLACEMENTS;
        nvmlReturn_t r =
            nvml->nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpu, info.id, pl, &count);
        if (r != NVML_SUCCESS)
            return gpu_nvml_errno(r);
        for (unsigned k = 0; k < count && k < GPU_MIG_MAX_PLACEMENTS; k++) {
            p->placements[k].start = pl[k].start;
            p->placements[k].size = pl[k].size;
        }
        p->n_placements = count < GPU_MIG_MAX_PLACEMENTS ? count : GPU_MIG_MAX_PLACEMENTS;
        n++;
    }
    *ret_n = n;
    return 0;
}

/* The compute instance profile that fills a GPU instance of `slices` compute slices. */
static int filling_ci_profile(struct gpu_nvml *nvml, nvmlGpuInstance_t gi, unsigned slices,
                              unsigned *ret_id)
{
    for (unsigned i = 0; i < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; i++) {
        nvmlComputeInstanceProfileInfo_t info;
        if (nvml->nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, i, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info) == NVML_SUCCESS &&
            info.sliceCount == slices) {
            *ret_id = info.id;
            return 0;
        }
    }
    return -ENOENT;
}

static int nvml_fail(struct gpu_nvml *nvml, nvmlReturn_t r, const char *what, char *err,
                     size_t errlen)
{
    errbuf_printf(err, errlen, "%s: %s", what, gpu_nvml_strerror(nvml, r));
    return gpu_nvml_errno(r);
}

int gpu_mig_create(struct gpu_nvml *nvml, nvmlDevice_t gpu, unsigned profile_id, unsigned start,
                   unsigned size, struct gpu_mig_device *ret, char *err, size_t errlen)
{
    if (!have_mig(nvml) || !nvml->nvmlDeviceCreateGpuInstanceWithPlacement ||
        !nvml->nvmlGpuInstanceCreateComputeInstance || !nvml->nvmlGpuInstanceDestroy ||
        !nvml->nvmlGpuInstanceGetComputeInstanceProfileInfo)
        return errbuf_printf(err, errlen, "this NVML has no MIG instance calls"), -EOPNOTSUPP;
    struct gpu_mig_profile p;
    if (profile_by_id(nvml, gpu, profile_id, &p) < 0)
        return errbuf_printf(err, errlen, "the GPU has no MIG profile %u", profile_id), -ENOENT;
    nvmlGpuInstancePlacement_t pl = {start, size};
    nvmlGpuInstance_t gi;
    nvmlComputeInstance_t ci;
    nvmlGpuInstanceInfo_t gii;
    nvmlComputeInstanceInfo_t cii;
    unsigned ci_profile;
    nvmlReturn_t r = nvml->nvmlDeviceCreateGpuInstanceWithPlacement(gpu, profile_id, &pl, &gi);
    if (r != NVML_SUCCESS) {
        char what[96];
        snprintf(what, sizeof(what), "creating a %s GPU instance at memory slice %u", p.name,
                 start);
        return nvml_fail(nvml, r, what, err, errlen);
    }
    int e = filling_ci_profile(nvml, gi, p.slices, &ci_profile);
    if (e < 0) {
        errbuf_printf(err, errlen, "no compute instance profile fills a %s GPU instance", p.name);
        nvml->nvmlGpuInstanceDestroy(gi);
        return e;
    }
    r = nvml->nvmlGpuInstanceCreateComputeInstance(gi, ci_profile, &ci);
    if (r == NVML_SUCCESS)
        r = nvml->nvmlGpuInstanceGetInfo(gi, &gii);
    if (r == NVML_SUCCESS)
        r = nvml->nvmlComputeInstanceGetInfo_v2(ci, &cii);
    if (r != NVML_SUCCESS) {
        e = nvml_fail(nvml, r, "creating its compute instance", err, errlen);
        nvml->nvmlGpuInstanceDestroy(gi); /* destroys nothing while a CI exists: below */
        return e;
    }
    e = gpu_mig_find(nvml, gpu, gii.id, cii.id, ret);
    if (e < 0) {
        errbuf_printf(err, errlen, "the new MIG device (GPU instance %u) is not listed by NVML",
                      gii.id);
        if (nvml->nvmlComputeInstanceDestroy)
            nvml->nvmlComputeInstanceDestroy(ci);
        nvml->nvmlGpuInstanceDestroy(gi);
        return e;
    }
    return 0;
}

int gpu_mig_destroy(struct gpu_nvml *nvml, nvmlDevice_t gpu, unsigned gi_id, char *err,
                    size_t errlen)
{
    if (!have_mig(nvml) || !nvml->nvmlGpuInstanceDestroy || !nvml->nvmlComputeInstanceDestroy ||
        !nvml->nvmlGpuInstanceGetComputeInstances)
        return errbuf_printf(err, errlen, "this NVML has no MIG instance calls"), -EOPNOTSUPP;
    nvmlGpuInstance_t gi;
    nvmlReturn_t r = nvml->nvmlDeviceGetGpuInstanceById(gpu, gi_id, &gi);
    if (r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT)
        return -ENOENT;
    if (r != NVML_SUCCESS)
        return nvml_fail(nvml, r, "finding the GPU instance", err, errlen);
    for (unsigned i = 0; i < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; i++) {
        nvmlComputeInstanceProfileInfo_t info;
        nvmlComputeInstance_t cis[8];
        unsigned n = 8;
        if (nvml->nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, i, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info) != NVML_SUCCESS ||
            nvml->nvmlGpuInstanceGetComputeInstances(gi, info.id, cis, &n) != NVML_SUCCESS)
            continue;
        for (unsigned k = 0; k < n && k < 8; k++) {
            r = nvml->nvmlComputeInstanceDestroy(cis[k]);
            if (r != NVML_SUCCESS)
                return nvml_fail(nvml, r, "destroying a compute instance", err, errlen);
        }
    }
    r = nvml->nvmlGpuInstanceDestroy(gi);
    if (r != NVML_SUCCESS)
        return nvml_fail(nvml, r, "destroying the GPU instance", err, errlen);
    return 0;
}

int gpu_mig_find(struct gpu_nvml *nvml, nvmlDevice_t gpu, unsigned gi, unsigned ci,
                 struct gpu_mig_device *ret)
{
    struct gpu_mig_device *v = NULL;
    size_t n = 0;
    int r = gpu_mig_devices(nvml, gpu, &v, &n);
    if (r < 0)
        return r;
    r = -ENOENT;
    for (size_t i = 0; i < n; i++) {
        if (v[i].gi == gi && v[i].ci == ci) {
            *ret = v[i];
            r = 0;
            break;
        }
    }
    free(v);
    return r;
}

/* "gpu<a>/gi<b>[/ci<c>]/access <minor>": 0 and its numbers (ci -1 when absent), -EINVAL for a
 * malformed line, 1 for a line of another form ("config 1", "monitor 2"). */
static int minor_line(const char *s, size_t len, int *gpu, int *gi, int *ci, int *minor)
{
    char line[128];
    if (len >= sizeof(line))
        return -EINVAL;
    memcpy(line, s, len);
    line[len] = '\0';
    if (strncmp(line, "gpu", 3) != 0)
        return 1; /* config, monitor */
    int a, b, c = -1, m, used = 0;
    if (sscanf(line, "gpu%d/gi%d/access %d%n", &a, &b, &m, &used) == 3 && used == (int)len) {
    } else if (used = 0, sscanf(line, "gpu%d/gi%d/ci%d/access %d%n", &a, &b, &c, &m, &used) == 4 &&
                             used == (int)len) {
    } else {
        return -EINVAL;
    }
    if (a < 0 || b < 0 || m < 0 || (c < -1))
        return -EINVAL;
    *gpu = a;
    *gi = b;
    *ci = c;
    *minor = m;
    return 0;
}

int gpu_mig_minor(const char *text, size_t len, int gpu_minor, int gi, int ci, int *ret_minor)
{
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - (text + pos)) : len - pos;
        if (l > 0) {
            int a, b, c, m;
            int r = minor_line(text + pos, l, &a, &b, &c, &m);
            if (r < 0)
                return r;
            if (r == 0 && a == gpu_minor && b == gi && c == (ci < 0 ? -1 : ci)) {
                *ret_minor = m;
                return 0;
            }
        }
        pos += l + 1;
    }
    return -ENOENT;
}
