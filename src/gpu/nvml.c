/*
 * nvml.c — the NVML loader: dlopen, symbol table, init/shutdown, error mapping, and the
 * running-process query with run-time detection of the process-info record stride.
 */
#include "nvml.h"
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sym {
    const char *name;
    size_t offset; /* of the member in struct gpu_nvml */
    bool required;
};

#define SYM(n, req)                                                                                \
    {                                                                                              \
#n, offsetof(struct gpu_nvml, n), req                                                      \
    }

static const struct sym syms[] = {
    SYM(nvmlInit_v2, true),
    SYM(nvmlShutdown, true),
    SYM(nvmlErrorString, true),
    SYM(nvmlDeviceGetCount_v2, true),
    SYM(nvmlDeviceGetHandleByIndex_v2, true),
    SYM(nvmlInitWithFlags, false),
    SYM(nvmlSystemGetDriverVersion, false),
    SYM(nvmlSystemGetNVMLVersion, false),
    SYM(nvmlSystemGetCudaDriverVersion, false),
    SYM(nvmlSystemGetCudaDriverVersion_v2, false),
    SYM(nvmlDeviceGetHandleByUUID, false),
    SYM(nvmlDeviceGetHandleByPciBusId_v2, false),
    SYM(nvmlDeviceGetUUID, false),
    SYM(nvmlDeviceGetName, false),
    SYM(nvmlDeviceGetSerial, false),
    SYM(nvmlDeviceGetIndex, false),
    SYM(nvmlDeviceGetMinorNumber, false),
    SYM(nvmlDeviceGetPciInfo_v3, false),
    SYM(nvmlDeviceGetMemoryInfo, false),
    SYM(nvmlDeviceGetMemoryInfo_v2, false),
    SYM(nvmlDeviceGetCudaComputeCapability, false),
    SYM(nvmlDeviceGetMigMode, false),
    SYM(nvmlDeviceGetVbiosVersion, false),
    SYM(nvmlDeviceGetNumaNodeId, false),
    SYM(nvmlDeviceGetTopologyCommonAncestor, false),
    SYM(nvmlDeviceGetNvLinkState, false),
    SYM(nvmlDeviceGetNvLinkRemotePciInfo_v2, false),
    SYM(nvmlDeviceGetUtilizationRates, false),
    SYM(nvmlDeviceGetProcessUtilization, false),
    SYM(nvmlDeviceGetProcessesUtilizationInfo, false),
    SYM(nvmlDeviceGetComputeRunningProcesses, false),
    SYM(nvmlDeviceGetComputeRunningProcesses_v2, false),
    SYM(nvmlDeviceGetComputeRunningProcesses_v3, false),
    SYM(nvmlDeviceGetTemperature, false),
    SYM(nvmlDeviceGetTemperatureThreshold, false),
    SYM(nvmlDeviceGetPowerUsage, false),
    SYM(nvmlDeviceGetClockInfo, false),
    SYM(nvmlDeviceGetMaxClockInfo, false),
    SYM(nvmlDeviceGetComputeMode, false),
    SYM(nvmlDeviceGetPersistenceMode, false),
    SYM(nvmlDeviceGetTotalEccErrors, false),
    SYM(nvmlEventSetCreate, false),
    SYM(nvmlDeviceRegisterEvents, false),
    SYM(nvmlDeviceGetSupportedEventTypes, false),
    SYM(nvmlEventSetWait_v2, false),
    SYM(nvmlEventSetFree, false),
    SYM(nvmlDeviceGetMPSComputeRunningProcesses_v3, false),
    SYM(nvmlDeviceGetGraphicsRunningProcesses_v3, false),
    SYM(nvmlDeviceGetPowerManagementLimit, false),
    SYM(nvmlDeviceGetEnforcedPowerLimit, false),
    SYM(nvmlDeviceGetTotalEnergyConsumption, false),
    SYM(nvmlDeviceGetFanSpeed, false),
    SYM(nvmlDeviceGetPerformanceState, false),
    SYM(nvmlDeviceGetCurrentClocksEventReasons, false),
    SYM(nvmlDeviceGetEccMode, false),
    SYM(nvmlDeviceGetRemappedRows, false),
    SYM(nvmlDeviceGetPcieReplayCounter, false),
    SYM(nvmlDeviceGetNvLinkErrorCounter, false),
    SYM(nvmlDeviceGetMaxMigDeviceCount, false),
    SYM(nvmlDeviceGetMigDeviceHandleByIndex, false),
    SYM(nvmlDeviceGetDeviceHandleFromMigDeviceHandle, false),
    SYM(nvmlDeviceGetGpuInstanceId, false),
    SYM(nvmlDeviceGetComputeInstanceId, false),
    SYM(nvmlDeviceGetGpuInstanceProfileInfoV, false),
    SYM(nvmlDeviceGetGpuInstancePossiblePlacements_v2, false),
    SYM(nvmlDeviceCreateGpuInstanceWithPlacement, false),
    SYM(nvmlGpuInstanceDestroy, false),
    SYM(nvmlDeviceGetGpuInstanceById, false),
    SYM(nvmlGpuInstanceGetInfo, false),
    SYM(nvmlGpuInstanceGetComputeInstanceProfileInfo, false),
    SYM(nvmlGpuInstanceCreateComputeInstance, false),
    SYM(nvmlComputeInstanceDestroy, false),
    SYM(nvmlGpuInstanceGetComputeInstances, false),
    SYM(nvmlGpuInstanceGetComputeInstanceById, false),
    SYM(nvmlComputeInstanceGetInfo_v2, false),
};

int gpu_nvml_open(const char *path, struct gpu_nvml **ret, char *err, size_t errlen)
{
    struct gpu_nvml *nvml;
    const char *dlerr;
    nvmlReturn_t r;

    if (!path) {
        const char *env = getenv(GPU_NVML_LIBRARY_ENV);
        path = env && *env ? env : GPU_NVML_DEFAULT_LIBRARY;
    }

    nvml = calloc(1, sizeof(*nvml));
    if (!nvml) {
        errbuf_printf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    snprintf(nvml->path, sizeof(nvml->path), "%s", path);

    dlerror();
    nvml->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!nvml->dl) {
        dlerr = dlerror();
        if (!dlerr)
            dlerr = "unknown error";
        /* dlerror() usually starts with the path already; don't print it twice. */
        if (strncmp(dlerr, path, strlen(path)) == 0)
            errbuf_printf(
                err, errlen,
                "NVML not found: %s; is the NVIDIA driver installed? set %s to use another "
                "library",
                dlerr, GPU_NVML_LIBRARY_ENV);
        else
            errbuf_printf(err, errlen,
                          "NVML not found: %s: %s; is the NVIDIA driver installed? set %s to use "
                          "another library",
                          path, dlerr, GPU_NVML_LIBRARY_ENV);
        free(nvml);
        return -ENOENT;
    }

    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *fn = dlsym(nvml->dl, syms[i].name);
        if (!fn && syms[i].required) {
            errbuf_printf(err, errlen, "%s is not a usable NVML library: it lacks %s", path,
                          syms[i].name);
            dlclose(nvml->dl);
            free(nvml);
            return -ENOSYS;
        }
        memcpy((char *)nvml + syms[i].offset, &fn, sizeof(fn));
    }

    /* accel-emu's NVML says why it failed through these (a real NVML has neither): the reason
     * goes into our one error line instead of a second line of its own on stderr. */
    void (*emu_quiet)(void) = (void (*)(void))dlsym(nvml->dl, "accel_emu_nvml_quiet");
    const char *(*emu_why)(void) =
        (const char *(*)(void))dlsym(nvml->dl, "accel_emu_nvml_init_error");
    if (emu_quiet && emu_why)
        emu_quiet();
    r = nvml->nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        const char *why = emu_quiet && emu_why ? emu_why() : NULL;
        if (why)
            errbuf_printf(err, errlen, "NVML initialisation failed (%s, the GPU emulator): %s",
                          path, why);
        else
            errbuf_printf(err, errlen,
                          "NVML initialisation failed (%s): %s; is the NVIDIA driver loaded?", path,
                          nvml->nvmlErrorString(r) ? nvml->nvmlErrorString(r) : "unknown error");
        dlclose(nvml->dl);
        free(nvml);
        return -EIO;
    }
    nvml->initialized = true;
    *ret = nvml;
    return 0;
}

struct gpu_nvml *gpu_nvml_free(struct gpu_nvml *nvml)
{
    if (!nvml)
        return NULL;
    if (nvml->dl) {
        if (nvml->initialized)
            nvml->nvmlShutdown();
        dlclose(nvml->dl);
        free(nvml);
    }
    /* An injected table belongs to the caller. */
    return NULL;
}

const char *gpu_nvml_strerror(const struct gpu_nvml *nvml, nvmlReturn_t r)
{
    const char *s = NULL;

    if (nvml && nvml->nvmlErrorString)
        s = nvml->nvmlErrorString(r);
    if (s)
        return s;
    switch (r) {
    case NVML_SUCCESS:
        return "success";
    case NVML_ERROR_NOT_SUPPORTED:
        return "not supported";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "insufficient size";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return "function not found";
    default:
        return "NVML error";
    }
}

int gpu_nvml_errno(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS:
        return 0;
    case NVML_ERROR_UNINITIALIZED:
        return -EPIPE;
    case NVML_ERROR_INVALID_ARGUMENT:
        return -EINVAL;
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return -EOPNOTSUPP;
    case NVML_ERROR_NO_PERMISSION:
        return -EPERM;
    case NVML_ERROR_NOT_FOUND:
        return -ENOENT;
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return -ENOSPC;
    case NVML_ERROR_TIMEOUT:
        return -ETIMEDOUT;
    case NVML_ERROR_GPU_IS_LOST:
        return -ENODEV;
    case NVML_ERROR_MEMORY:
        return -ENOMEM;
    case NVML_ERROR_IN_USE:
        return -EBUSY;
    case NVML_ERROR_NO_DATA:
        return -ENODATA;
    default:
        return -EIO;
    }
}

/* ---- running processes ---------------------------------------------------------------- */

/* Record layouts seen in the wild, largest first. Every one starts with the pid (u32 at 0)
 * and the used memory (u64 at 8), so once the stride is known both fields are found. */
#define PROC_MAX_STRIDE 32
static const int proc_strides[] = {32, 24, 16};

#define FILL_A 0xA5
#define FILL_B 0x5A
#define DETECT_TRIES 3

/* The three entry points take different struct pointers but the driver treats the buffer as
 * raw records of its own layout; each is called through its own type (no function-pointer
 * casts). Returns NVML_ERROR_FUNCTION_NOT_FOUND when the library lacks the entry point. */
static nvmlReturn_t proc_call(const struct gpu_nvml *nvml, int call, nvmlDevice_t dev,
                              unsigned int *count, void *buf)
{
    switch (call) {
    case GPU_NVML_PROC_CALL_V3:
        if (nvml->nvmlDeviceGetComputeRunningProcesses_v3)
            return nvml->nvmlDeviceGetComputeRunningProcesses_v3(dev, count, buf);
        break;
    case GPU_NVML_PROC_CALL_V2:
        if (nvml->nvmlDeviceGetComputeRunningProcesses_v2)
            return nvml->nvmlDeviceGetComputeRunningProcesses_v2(dev, count, buf);
        break;
    case GPU_NVML_PROC_CALL_V1:
        if (nvml->nvmlDeviceGetComputeRunningProcesses)
            return nvml->nvmlDeviceGetComputeRunningProcesses(dev, count, buf);
        break;
    case GPU_NVML_PROC_CALL_MPS_V3:
        if (nvml->nvmlDeviceGetMPSComputeRunningProcesses_v3)
            return nvml->nvmlDeviceGetMPSComputeRunningProcesses_v3(dev, count, buf);
        break;
    }
    return NVML_ERROR_FUNCTION_NOT_FOUND;
}

static bool proc_call_exists(const struct gpu_nvml *nvml, int call)
{
    switch (call) {
    case GPU_NVML_PROC_CALL_V3:
        return nvml->nvmlDeviceGetComputeRunningProcesses_v3 != NULL;
    case GPU_NVML_PROC_CALL_V2:
        return nvml->nvmlDeviceGetComputeRunningProcesses_v2 != NULL;
    case GPU_NVML_PROC_CALL_V1:
        return nvml->nvmlDeviceGetComputeRunningProcesses != NULL;
    case GPU_NVML_PROC_CALL_MPS_V3:
        return nvml->nvmlDeviceGetMPSComputeRunningProcesses_v3 != NULL;
    }
    return false;
}

static int copy_records(const unsigned char *buf, unsigned int n, int stride,
                        struct gpu_process *procs, size_t cap, size_t *ret_n)
{
    if (n > cap) {
        *ret_n = n;
        return -ENOSPC;
    }
    for (unsigned int i = 0; i < n; i++) {
        const unsigned char *rec = buf + (size_t)i * (size_t)stride;
        uint32_t pid;
        uint64_t used;
        memcpy(&pid, rec, sizeof(pid));
        memcpy(&used, rec + 8, sizeof(used));
        procs[i].pid = pid;
        procs[i].used_memory_bytes = used;
    }
    *ret_n = n;
    return 0;
}

/* Every record i < n has its pid non-zero and its pid and used-memory bytes written. */
static bool records_plausible(const unsigned char *a, const unsigned char *b, unsigned int n,
                              int stride)
{
    for (unsigned int i = 0; i < n; i++) {
        size_t at = (size_t)i * (size_t)stride;
        uint32_t pid;
        if (memcmp(a + at, b + at, 4) != 0 || memcmp(a + at + 8, b + at + 8, 8) != 0)
            return false;
        memcpy(&pid, a + at, sizeof(pid));
        if (pid == 0)
            return false;
    }
    return true;
}

static int nominal_stride(int call)
{
    return call == GPU_NVML_PROC_CALL_V1 ? 16 : 24;
}

/*
 * Finds the stride the driver writes with. The call is made twice into buffers pre-filled
 * with two different byte patterns: a byte the driver wrote holds the same value in both,
 * a byte it did not write differs. The written extent E is one past the last equal byte.
 *
 *  - Exact: every layout ends with a field drivers write (usedGpuMemory, computeInstanceId,
 *    usedGpuCcProtectedMemory), so normally E = n * stride. With n >= 2 and a known stride
 *    that divides E exactly (and plausible records), the stride is certain: *ret_certain.
 *  - Range: a driver that leaves trailing fields unwritten gives
 *    (n-1) * stride + 16 <= E <= n * stride. A single candidate is used; several are
 *    resolved by the entry point's nominal layout. Not certain: not cached.
 *  - One process: its pid and memory sit at offsets 0 and 8 in every layout, so it is read
 *    whatever the stride; nothing is cached.
 * Counts that differ between the two calls (a process came or went) are retried.
 */
static int detect_stride(const struct gpu_nvml *nvml, int call, nvmlDevice_t dev, unsigned char *a,
                         unsigned char *b, int *ret_stride, bool *ret_certain, unsigned int *ret_n,
                         nvmlReturn_t *ret_nvml)
{
    const size_t len = (size_t)GPU_NVML_MAX_PROCS * PROC_MAX_STRIDE;
    const size_t nstrides = sizeof(proc_strides) / sizeof(proc_strides[0]);

    for (int attempt = 0; attempt < DETECT_TRIES; attempt++) {
        unsigned int na = GPU_NVML_MAX_PROCS, nb = GPU_NVML_MAX_PROCS;
        int candidate = 0, candidates = 0;
        nvmlReturn_t r;
        size_t extent = 0;

        memset(a, FILL_A, len);
        memset(b, FILL_B, len);
        r = proc_call(nvml, call, dev, &na, a);
        if (r != NVML_SUCCESS) {
            *ret_nvml = r;
            *ret_n = na;
            return -EIO;
        }
        r = proc_call(nvml, call, dev, &nb, b);
        if (r != NVML_SUCCESS) {
            *ret_nvml = r;
            *ret_n = nb;
            return -EIO;
        }
        if (na != nb)
            continue;
        if (na > GPU_NVML_MAX_PROCS)
            return -EPROTO;
        *ret_n = na;
        *ret_certain = false;
        if (na == 0) {
            *ret_stride = 0;
            return 0;
        }
        for (size_t i = len; i > 0; i--)
            if (a[i - 1] == b[i - 1]) {
                extent = i;
                break;
            }
        if (na == 1) {
            if (extent < 16 || extent > PROC_MAX_STRIDE || !records_plausible(a, b, 1, 16))
                continue;
            *ret_stride = 16; /* any stride reads one record */
            return 0;
        }
        for (size_t k = 0; k < nstrides; k++) {
            int st = proc_strides[k];
            if (extent == (size_t)na * (size_t)st && records_plausible(a, b, na, st)) {
                *ret_stride = st;
                *ret_certain = true;
                return 0;
            }
        }
        for (size_t k = 0; k < nstrides; k++) {
            size_t st = (size_t)proc_strides[k];
            if (extent >= (na - 1) * st + 16 && extent <= na * st &&
                records_plausible(a, b, na, (int)st)) {
                candidates++;
                if (candidate == 0 || proc_strides[k] == nominal_stride(call))
                    candidate = proc_strides[k];
            }
        }
        if (candidates == 1 || (candidates > 1 && candidate == nominal_stride(call))) {
            *ret_stride = candidate;
            return 0;
        }
    }
    return -EPROTO;
}

int gpu_nvml_running_processes(struct gpu_nvml *nvml, nvmlDevice_t dev, struct gpu_process *procs,
                               size_t cap, size_t *ret_n)
{
    return gpu_nvml_list_processes(nvml, dev, GPU_NVML_PROCS_COMPUTE, procs, cap, ret_n);
}

int gpu_nvml_list_processes(struct gpu_nvml *nvml, nvmlDevice_t dev, enum gpu_nvml_proc_list list,
                            struct gpu_process *procs, size_t cap, size_t *ret_n)
{
    static const int compute_calls[] = {GPU_NVML_PROC_CALL_V3, GPU_NVML_PROC_CALL_V2,
                                        GPU_NVML_PROC_CALL_V1};
    static const int mps_calls[] = {GPU_NVML_PROC_CALL_MPS_V3};
    const bool mps = list == GPU_NVML_PROCS_MPS;
    const int *calls = mps ? mps_calls : compute_calls;
    const size_t ncalls = mps ? 1 : sizeof(compute_calls) / sizeof(compute_calls[0]);
    unsigned char a[GPU_NVML_MAX_PROCS * PROC_MAX_STRIDE];
    unsigned char b[GPU_NVML_MAX_PROCS * PROC_MAX_STRIDE];
    int stride = __atomic_load_n(&nvml->proc_stride, __ATOMIC_ACQUIRE);
    int call =
        mps ? GPU_NVML_PROC_CALL_MPS_V3 : __atomic_load_n(&nvml->proc_call, __ATOMIC_RELAXED);
    bool any = false;
    int last = -EOPNOTSUPP;

    /* Known layout: one call. */
    if (stride > 0 && proc_call_exists(nvml, call)) {
        unsigned int n = GPU_NVML_MAX_PROCS;
        nvmlReturn_t r = proc_call(nvml, call, dev, &n, a);
        if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
            *ret_n = n;
            return -ENOSPC;
        }
        if (r != NVML_SUCCESS)
            return gpu_nvml_errno(r);
        return copy_records(a, n, stride, procs, cap, ret_n);
    }

    for (size_t c = 0; c < ncalls; c++) {
        nvmlReturn_t r = NVML_SUCCESS;
        unsigned int n = 0;
        int s = 0, rc;
        bool certain = false;

        if (!proc_call_exists(nvml, calls[c]))
            continue;
        any = true;
        rc = detect_stride(nvml, calls[c], dev, a, b, &s, &certain, &n, &r);
        if (rc == -EIO) {
            /* An older library may export a name it does not implement: try the next. */
            if (r == NVML_ERROR_FUNCTION_NOT_FOUND || r == NVML_ERROR_NOT_SUPPORTED) {
                last = gpu_nvml_errno(r);
                continue;
            }
            if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
                *ret_n = n;
                return -ENOSPC;
            }
            return gpu_nvml_errno(r);
        }
        if (rc < 0)
            return rc;
        if (certain) {
            if (!mps)
                __atomic_store_n(&nvml->proc_call, calls[c], __ATOMIC_RELAXED);
            __atomic_store_n(&nvml->proc_stride, s, __ATOMIC_RELEASE);
        }
        return copy_records(a, n, s, procs, cap, ret_n);
    }
    return any ? last : -EOPNOTSUPP;
}

int gpu_nvml_process_stride(const struct gpu_nvml *nvml)
{
    return __atomic_load_n(&nvml->proc_stride, __ATOMIC_ACQUIRE);
}
