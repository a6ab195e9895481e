/* mig-semantics — the MIG behaviours the emulator models (docs/emulator.md, "MIG"), checked
 * against whatever libnvidia-ml.so.1 the library path finds: NVIDIA's on a GPU machine
 * (tests/gpu/mig.sh), the emulator's in `meson test` (emu-mig-semantics).
 *
 * Read-only on every GPU: MIG mode, each GPU instance profile (ID, slices, instances, SMs,
 * engines, memory) and its placements, compared with the emulator's table for the board
 * (src/emu/mig-profiles.c) where it has one, else only printed ("record:" lines); the documented
 * errors of the profile calls; the MIG devices that exist (UUID form, name, parent).
 *
 * Changes only a GPU that is already in MIG mode, and only with its own instances: it never sets
 * a mode and never touches an instance it did not create. There it creates the smallest profile
 * where the driver chooses, checks the instance's ID against the emulator's rule, its compute
 * instance, its MIG device (UUID, name, memory) and CUDA on it (a child process with
 * CUDA_VISIBLE_DEVICES=MIG-<uuid>), the in-use and no-room errors, then destroys both. Without
 * root (NVML: "Requires privileged user") or without room it says SKIP for that part.
 *
 * Prints PASS / FAIL / SKIP / record: lines (run-all.sh counts them); exit 1 on a FAIL, 77 when
 * no GPU has MIG. libc + libdl; our nvml_api.h and cuda_api.h, and the emulator's mig-profiles.c.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_api.h"
#include "mig-profiles.h"
#include "nvml_api.h"

static int n_fail, n_pass;

static void verdict(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    ok ? n_pass++ : n_fail++;
}

#define EXPECT(call, want)                                                                         \
    do {                                                                                           \
        nvmlReturn_t r_ = (call);                                                                  \
        verdict(r_ == (want), "%s == %s (got %d)", #call, #want, (int)r_);                         \
    } while (0)

static void *lib;
#define FN(name) ((__typeof__(name) *)dlsym(lib, #name))

/* ---- CUDA on a MIG device, in a child ---- */

/* "count N mem MIB sms S" from a process with CUDA_VISIBLE_DEVICES=uuid; false when it failed. */
static bool cuda_on(const char *uuid, int *ret_count, unsigned long long *ret_mib, int *ret_sms)
{
    int p[2];
    if (pipe(p) < 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        setenv("CUDA_VISIBLE_DEVICES", uuid, 1);
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        if (!h)
            _exit(10);
        __typeof__(cuInit) *init = (__typeof__(cuInit) *)dlsym(h, "cuInit");
        __typeof__(cuDeviceGetCount) *cnt =
            (__typeof__(cuDeviceGetCount) *)dlsym(h, "cuDeviceGetCount");
        __typeof__(cuDeviceTotalMem_v2) *tot =
            (__typeof__(cuDeviceTotalMem_v2) *)dlsym(h, "cuDeviceTotalMem_v2");
        __typeof__(cuDeviceGetAttribute) *attr =
            (__typeof__(cuDeviceGetAttribute) *)dlsym(h, "cuDeviceGetAttribute");
        int n = 0, sms = 0;
        size_t mem = 0;
        if (!init || !cnt || !tot || !attr || init(0) != CUDA_SUCCESS || cnt(&n) != CUDA_SUCCESS)
            _exit(11);
        if (n > 0) {
            tot(&mem, 0);
            attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
        }
        char line[128];
        int len =
            snprintf(line, sizeof(line), "%d %llu %d\n", n, (unsigned long long)(mem >> 20), sms);
        if (write(p[1], line, (size_t)len) != len)
            _exit(12);
        _exit(0);
    }
    close(p[1]);
    char buf[128] = "";
    ssize_t r = read(p[0], buf, sizeof(buf) - 1);
    close(p[0]);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) || r <= 0)
        return false;
    return sscanf(buf, "%d %llu %d", ret_count, ret_mib, ret_sms) == 3;
}

/* ---- the read-only part ---- */

static void profiles(nvmlDevice_t d, unsigned i, const char *name, bool mig_on)
{
    const struct emu_mig_board *b = emu_mig_board_find(name);
    if (!b)
        printf("record: GPU %u (%s): no emulator table for this board: printing only\n", i, name);
    nvmlGpuInstanceProfileInfo_t info;
    unsigned seen = 0;
    for (unsigned p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++) {
        nvmlReturn_t r = FN(nvmlDeviceGetGpuInstanceProfileInfo)(d, p, &info);
        const struct emu_mig_gi_profile *e = b ? emu_mig_gi_by_index(b, p) : NULL;
        if (r == NVML_ERROR_NOT_SUPPORTED) {
            if (b)
                verdict(!e, "GPU %u profile %u: not offered, as in the emulator's table", i, p);
            continue;
        }
        if (r != NVML_SUCCESS) {
            verdict(false, "GPU %u profile %u: nvmlDeviceGetGpuInstanceProfileInfo answered %d", i,
                    p, (int)r);
            continue;
        }
        seen++;
        nvmlGpuInstancePlacement_t pl[16];
        unsigned n = 16;
        nvmlReturn_t rp = FN(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(d, info.id, pl, &n);
        char places[128] = "";
        for (unsigned k = 0; rp == NVML_SUCCESS && k < n && k < 16; k++)
            snprintf(places + strlen(places), sizeof(places) - strlen(places), "%s%u", k ? "," : "",
                     pl[k].start);
        printf("record: GPU %u profile %u: ID %u, %u slices, %u instances, %u SMs, CE %u DEC %u "
               "ENC %u JPEG %u OFA %u, %llu MiB, placements {%s}:%u (answer %d)\n",
               i, p, info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount,
               info.copyEngineCount, info.decoderCount, info.encoderCount, info.jpegCount,
               info.ofaCount, info.memorySizeMB, places, rp == NVML_SUCCESS && n ? pl[0].size : 0,
               (int)rp);
        if (!b)
            continue;
        verdict(e != NULL, "GPU %u profile %u is in the emulator's table", i, p);
        if (!e)
            continue;
        verdict(info.id == e->id && info.sliceCount == e->compute_slices &&
                    info.instanceCount == e->instances,
                "GPU %u %s: ID %u, %u slices, %u instances (emulator %u, %u, %u)", i, e->name,
                info.id, info.sliceCount, info.instanceCount, e->id, e->compute_slices,
                e->instances);
        verdict(info.multiprocessorCount == e->sms, "GPU %u %s: %u SMs (emulator %u)", i, e->name,
                info.multiprocessorCount, e->sms);
        verdict(info.copyEngineCount == e->ce && info.decoderCount == e->dec &&
                    info.encoderCount == e->enc && info.jpegCount == e->jpeg &&
                    info.ofaCount == e->ofa,
                "GPU %u %s: engines CE %u DEC %u ENC %u JPEG %u OFA %u (emulator %u %u %u %u %u)",
                i, e->name, info.copyEngineCount, info.decoderCount, info.encoderCount,
                info.jpegCount, info.ofaCount, e->ce, e->dec, e->enc, e->jpeg, e->ofa);
        if (e->mem_mib)
            verdict(info.memorySizeMB == e->mem_mib, "GPU %u %s: %llu MiB (emulator %u)", i,
                    e->name, info.memorySizeMB, e->mem_mib);
        bool same = rp == NVML_SUCCESS && n == e->nstarts;
        for (unsigned k = 0; same && k < n; k++)
            same = pl[k].start == e->starts[k] && pl[k].size == e->mem_slices;
        verdict(same, "GPU %u %s: placements {%s}, as the emulator's", i, e->name, places);
    }
    verdict(seen > 0, "GPU %u: profiles listed (%u)", i, seen);
    EXPECT(FN(nvmlDeviceGetGpuInstanceProfileInfo)(d, NVML_GPU_INSTANCE_PROFILE_COUNT, &info),
           NVML_ERROR_INVALID_ARGUMENT);
    /* what the versioned call answers with MIG mode off (documented: NOT_SUPPORTED) */
    nvmlGpuInstanceProfileInfo_v2_t v2 = {.version = nvmlGpuInstanceProfileInfo_v2};
    nvmlReturn_t rv = FN(nvmlDeviceGetGpuInstanceProfileInfoV)(d, 0, &v2);
    if (mig_on) {
        verdict(rv == NVML_SUCCESS && strncmp(v2.name, "MIG ", 4) == 0,
                "GPU %u: profile info V with MIG on: %d, name '%s'", i, (int)rv, v2.name);
    } else {
        verdict(rv == NVML_ERROR_NOT_SUPPORTED, "GPU %u: profile info V with MIG off: %d", i,
                (int)rv);
        nvmlGpuInstance_t gi;
        EXPECT(FN(nvmlDeviceCreateGpuInstance)(d, 19, &gi), NVML_ERROR_NOT_SUPPORTED);
    }
    unsigned max = 99;
    EXPECT(FN(nvmlDeviceGetMaxMigDeviceCount)(d, &max), NVML_SUCCESS);
    verdict(mig_on ? max >= 1 : max == 0, "GPU %u: max MIG devices %u with MIG %s", i, max,
            mig_on ? "on" : "off");
}

/* The MIG devices that exist (read-only). */
static void mig_devices(nvmlDevice_t d, unsigned i, const char *name)
{
    for (unsigned k = 0; k < 7; k++) {
        nvmlDevice_t m, parent;
        nvmlReturn_t r = FN(nvmlDeviceGetMigDeviceHandleByIndex)(d, k, &m);
        if (r == NVML_ERROR_NOT_FOUND)
            continue;
        if (r != NVML_SUCCESS) {
            verdict(false, "GPU %u MIG device %u: %d", i, k, (int)r);
            continue;
        }
        char uuid[96] = "", mname[96] = "";
        unsigned gi = 99, ci = 99, is = 0;
        FN(nvmlDeviceGetUUID)(m, uuid, sizeof(uuid));
        FN(nvmlDeviceGetName)(m, mname, sizeof(mname));
        FN(nvmlDeviceGetGpuInstanceId)(m, &gi);
        FN(nvmlDeviceGetComputeInstanceId)(m, &ci);
        FN(nvmlDeviceIsMigDeviceHandle)(m, &is);
        printf("record: GPU %u MIG device %u: %s, '%s', GPU instance %u, compute instance %u\n", i,
               k, uuid, mname, gi, ci);
        verdict(strncmp(uuid, "MIG-", 4) == 0 && strlen(uuid) == 40,
                "GPU %u MIG device %u: UUID MIG-<uuid> (%s)", i, k, uuid);
        verdict(strncmp(mname, name, strlen(name)) == 0 && strstr(mname, " MIG ") != NULL,
                "GPU %u MIG device %u: named '<GPU> MIG <profile>' ('%s')", i, k, mname);
        verdict(is == 1, "GPU %u MIG device %u: a MIG device handle", i, k);
        verdict(FN(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(m, &parent) == NVML_SUCCESS &&
                    parent == d,
                "GPU %u MIG device %u: its parent is the GPU", i, k);
    }
}

/* ---- the part that changes a GPU already in MIG mode ---- */

static void instances(nvmlDevice_t d, unsigned i, const char *name)
{
    const struct emu_mig_board *b = emu_mig_board_find(name);
    nvmlGpuInstanceProfileInfo_t info;
    if (FN(nvmlDeviceGetGpuInstanceProfileInfo)(d, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &info) !=
        NVML_SUCCESS) {
        printf("SKIP GPU %u: no 1-slice profile\n", i);
        return;
    }
    unsigned left = 0;
    nvmlReturn_t r = FN(nvmlDeviceGetGpuInstanceRemainingCapacity)(d, info.id, &left);
    if (r == NVML_ERROR_NO_PERMISSION) {
        printf("SKIP GPU %u: creating MIG instances needs root (NVML_ERROR_NO_PERMISSION)\n", i);
        return;
    }
    if (r != NVML_SUCCESS || left == 0) {
        printf("SKIP GPU %u: no room for a 1-slice GPU instance (answer %d, %u left): nothing "
               "created, nothing of anyone else's touched\n",
               i, (int)r, left);
        return;
    }
    nvmlGpuInstance_t gi, again;
    r = FN(nvmlDeviceCreateGpuInstance)(d, info.id, &gi);
    verdict(r == NVML_SUCCESS, "GPU %u: create a 1-slice GPU instance (%d)", i, (int)r);
    if (r != NVML_SUCCESS)
        return;
    nvmlGpuInstanceInfo_t gii;
    EXPECT(FN(nvmlGpuInstanceGetInfo)(gi, &gii), NVML_SUCCESS);
    printf("record: GPU %u: the driver put it at %u:%u, GPU instance ID %u\n", i,
           gii.placement.start, gii.placement.size, gii.id);
    verdict((int)gii.id == emu_mig_gi_id(gii.placement.start, gii.placement.size),
            "GPU %u: GPU instance ID %u is the emulator's numbering of placement %u:%u (%d)", i,
            gii.id, gii.placement.start, gii.placement.size,
            emu_mig_gi_id(gii.placement.start, gii.placement.size));
    unsigned left2 = 0;
    EXPECT(FN(nvmlDeviceGetGpuInstanceRemainingCapacity)(d, info.id, &left2), NVML_SUCCESS);
    verdict(left2 == left - 1, "GPU %u: remaining capacity %u -> %u", i, left, left2);
    /* the placement is taken now */
    EXPECT(FN(nvmlDeviceCreateGpuInstanceWithPlacement)(d, info.id, &gii.placement, &again),
           NVML_ERROR_INSUFFICIENT_RESOURCES);

    nvmlComputeInstanceProfileInfo_t cinfo;
    nvmlComputeInstance_t ci;
    EXPECT(FN(nvmlGpuInstanceGetComputeInstanceProfileInfo)(
               gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
               NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cinfo),
           NVML_SUCCESS);
    r = FN(nvmlGpuInstanceCreateComputeInstance)(gi, cinfo.id, &ci);
    verdict(r == NVML_SUCCESS, "GPU %u: its compute instance (%d)", i, (int)r);
    if (r == NVML_SUCCESS) {
        nvmlComputeInstanceInfo_t cii;
        EXPECT(FN(nvmlComputeInstanceGetInfo_v2)(ci, &cii), NVML_SUCCESS);
        verdict(cii.id == 0 && cii.placement.start == 0,
                "GPU %u: the first compute instance is ID 0 at slice 0 (%u at %u)", i, cii.id,
                cii.placement.start);
        EXPECT(FN(nvmlGpuInstanceDestroy)(gi), NVML_ERROR_IN_USE);
        /* its MIG device */
        nvmlDevice_t m = NULL;
        for (unsigned k = 0; k < 7; k++) {
            nvmlDevice_t x;
            unsigned id = 99, cid = 99;
            if (FN(nvmlDeviceGetMigDeviceHandleByIndex)(d, k, &x) == NVML_SUCCESS &&
                FN(nvmlDeviceGetGpuInstanceId)(x, &id) == NVML_SUCCESS && id == gii.id &&
                FN(nvmlDeviceGetComputeInstanceId)(x, &cid) == NVML_SUCCESS && cid == cii.id)
                m = x;
        }
        verdict(m != NULL, "GPU %u: the new MIG device is listed", i);
        if (m) {
            char uuid[96] = "", mname[96] = "";
            nvmlMemory_t mem = {0};
            FN(nvmlDeviceGetUUID)(m, uuid, sizeof(uuid));
            FN(nvmlDeviceGetName)(m, mname, sizeof(mname));
            FN(nvmlDeviceGetMemoryInfo)(m, &mem);
            printf("record: GPU %u: MIG device %s '%s', memory total %llu B (profile %llu MiB)\n",
                   i, uuid, mname, mem.total, info.memorySizeMB);
            const struct emu_mig_gi_profile *e = b ? emu_mig_gi_by_index(b, 0) : NULL;
            if (e) {
                char want[160];
                snprintf(want, sizeof(want), "%s MIG %s", name, e->name);
                verdict(strcmp(mname, want) == 0, "GPU %u: MIG device named '%s' ('%s')", i, want,
                        mname);
            }
            int count = -1, sms = -1;
            unsigned long long mib = 0;
            if (cuda_on(uuid, &count, &mib, &sms)) {
                printf("record: GPU %u: CUDA on %s: %d device(s), %llu MiB, %d SMs\n", i, uuid,
                       count, mib, sms);
                verdict(count == 1, "GPU %u: CUDA_VISIBLE_DEVICES=MIG-<uuid>: one device", i);
                verdict(sms == (int)cinfo.multiprocessorCount,
                        "GPU %u: CUDA's SM count on it is the compute instance's (%d, %u)", i, sms,
                        cinfo.multiprocessorCount);
            } else {
                printf("SKIP GPU %u: no CUDA driver to run on the MIG device\n", i);
            }
        }
        EXPECT(FN(nvmlComputeInstanceDestroy)(ci), NVML_SUCCESS);
    }
    EXPECT(FN(nvmlGpuInstanceDestroy)(gi), NVML_SUCCESS);
    EXPECT(FN(nvmlGpuInstanceGetInfo)(gi, &gii), NVML_ERROR_INVALID_ARGUMENT);
}

int main(void)
{
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        printf("SKIP no libnvidia-ml.so.1: %s\n", dlerror());
        return 77;
    }
    static const char *const need[] = {"nvmlInit_v2",
                                       "nvmlDeviceGetCount_v2",
                                       "nvmlDeviceGetMigMode",
                                       "nvmlDeviceGetGpuInstanceProfileInfo",
                                       "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                                       "nvmlDeviceCreateGpuInstance",
                                       "nvmlGpuInstanceCreateComputeInstance",
                                       "nvmlDeviceGetMigDeviceHandleByIndex"};
    for (size_t k = 0; k < sizeof(need) / sizeof(need[0]); k++)
        if (!dlsym(lib, need[k])) {
            printf("FAIL libnvidia-ml.so.1 lacks %s\n", need[k]);
            return 1;
        }
    if (FN(nvmlInit_v2)() != NVML_SUCCESS) {
        printf("FAIL nvmlInit_v2\n");
        return 1;
    }
    unsigned count = 0, capable = 0;
    FN(nvmlDeviceGetCount_v2)(&count);
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t d;
        char name[96] = "";
        unsigned cur = 9, pend = 9;
        if (FN(nvmlDeviceGetHandleByIndex_v2)(i, &d) != NVML_SUCCESS)
            continue;
        FN(nvmlDeviceGetName)(d, name, sizeof(name));
        nvmlReturn_t r = FN(nvmlDeviceGetMigMode)(d, &cur, &pend);
        printf("record: GPU %u (%s): nvmlDeviceGetMigMode %d, current %u, pending %u\n", i, name,
               (int)r, cur, pend);
        if (r == NVML_ERROR_NOT_SUPPORTED) {
            nvmlGpuInstanceProfileInfo_t info;
            EXPECT(FN(nvmlDeviceGetGpuInstanceProfileInfo)(d, 0, &info), NVML_ERROR_NOT_SUPPORTED);
            continue;
        }
        verdict(r == NVML_SUCCESS && cur <= 1 && pend <= 1, "GPU %u: MIG mode read", i);
        capable++;
        profiles(d, i, name, cur == NVML_DEVICE_MIG_ENABLE);
        if (cur == NVML_DEVICE_MIG_ENABLE) {
            mig_devices(d, i, name);
            instances(d, i, name);
        } else {
            printf("SKIP GPU %u: MIG mode is off: instances not tried (this never changes a "
                   "card's mode)\n",
                   i);
        }
    }
    FN(nvmlShutdown)();
    if (!capable) {
        printf("SKIP no GPU here supports MIG\n");
        return 77;
    }
    printf("# %d PASS, %d FAIL\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
