/* nvml.c — the emulated libnvidia-ml.so.1: initialization, error strings, system queries and
 * device handles. Device queries are in nvml-device.c, process queries in nvml-procs.c,
 * events in nvml-events.c. libc only.
 *
 * nvmlInit maps the machine named by $ACCEL_EMU_STATE; without one it fails the way NVML does
 * on a machine without the driver (NVML_ERROR_DRIVER_NOT_LOADED), with one line on stderr
 * saying what to do. Our own NVML loader (src/gpu/nvml.c) turns that line off with
 * accel_emu_nvml_quiet() and puts accel_emu_nvml_init_error() into its own error message, so
 * accelctl and acceld say it once; every other program gets the stderr line.
 *
 * Threads: any entry point from any thread, except that the nvmlShutdown which drops the
 * count to zero unmaps the machine and must not race with queries in flight on other
 * threads (NVML's own rule: shut down once the other threads are done with it). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvml_emu.h"
#include "state-mig.h"

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned init_count;     /* guarded by init_lock */
static bool init_quiet;         /* guarded by init_lock: no stderr line when init fails */
static char init_error[640];    /* guarded by init_lock: why the last init failed, "" if not */
static struct emu_state *state; /* set under init_lock; read with acquire */
static uint64_t util_window_ns = 1000000000ull;
static int64_t realtime_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC, at init */

#define DEV(i)                                                                                     \
    {                                                                                              \
        .index = i                                                                                 \
    }
static struct nvmlDevice_st devices[EMU_MAX_GPUS] = {
    DEV(0), DEV(1), DEV(2),  DEV(3),  DEV(4),  DEV(5),  DEV(6),  DEV(7),
    DEV(8), DEV(9), DEV(10), DEV(11), DEV(12), DEV(13), DEV(14), DEV(15),
};
#undef DEV
_Static_assert(EMU_MAX_GPUS == 16, "devices[] lists one handle per possible GPU");
/* MIG device handles: one per compute instance slot of every GPU (nvml-mig.c hands them out). */
static struct nvmlDevice_st mig_devices[EMU_MAX_GPUS][EMU_MIG_MAX_GI][EMU_MIG_MAX_CI];

struct emu_state *nvml_emu_state(void)
{
    return __atomic_load_n(&state, __ATOMIC_ACQUIRE);
}

uint64_t nvml_emu_util_window_ns(void)
{
    return util_window_ns;
}

nvmlDevice_t nvml_emu_handle(unsigned i)
{
    return &devices[i];
}

nvmlDevice_t nvml_emu_mig_handle(unsigned gpu, unsigned gi, unsigned ci, uint64_t serial)
{
    struct nvmlDevice_st *d = &mig_devices[gpu][gi][ci];
    d->index = gpu;
    d->mig = 1;
    d->gi = gi;
    d->ci = ci;
    __atomic_store_n(&d->serial, serial, __ATOMIC_RELEASE);
    return d;
}

bool nvml_emu_is_mig_handle(nvmlDevice_t dev)
{
    uintptr_t p = (uintptr_t)dev, base = (uintptr_t)mig_devices;
    return dev && p >= base && p < base + sizeof(mig_devices) &&
           (p - base) % sizeof(struct nvmlDevice_st) == 0;
}

unsigned nvml_emu_nvml_index(struct emu_state *st, unsigned i)
{
    unsigned n = 0;
    for (unsigned k = 0; k < i; k++)
        n += !emu_state_gpu_hidden(emu_state_gpu(st, k));
    return n;
}

nvmlReturn_t nvml_emu_mig_device(nvmlDevice_t dev, struct emu_gpu **ret_gpu, unsigned *ret_index,
                                 unsigned *ret_gi, unsigned *ret_ci)
{
    struct emu_state *st = nvml_emu_state();
    if (!st)
        return NVML_ERROR_UNINITIALIZED;
    if (!nvml_emu_is_mig_handle(dev) || !dev->mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_gpu *g = emu_state_gpu(st, dev->index);
    uint64_t serial = __atomic_load_n(&dev->serial, __ATOMIC_ACQUIRE);
    if (!g || dev->gi >= EMU_MIG_MAX_GI || dev->ci >= EMU_MIG_MAX_CI)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* the instance must still be the one the handle was given for */
    emu_state_lock(st);
    const struct emu_mig_gi *gi = &g->mig[dev->gi];
    bool live = gi->used && gi->ci[dev->ci].used && gi->ci[dev->ci].serial == serial;
    emu_state_unlock(st);
    if (!live || __atomic_load_n(&g->vfio, __ATOMIC_RELAXED))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (__atomic_load_n(&g->lost, __ATOMIC_RELAXED))
        return NVML_ERROR_GPU_IS_LOST;
    if (ret_gpu)
        *ret_gpu = g;
    if (ret_index)
        *ret_index = dev->index;
    if (ret_gi)
        *ret_gi = dev->gi;
    if (ret_ci)
        *ret_ci = dev->ci;
    return NVML_SUCCESS;
}

void nvml_emu_last_period(uint64_t now, uint64_t *ret_t0, uint64_t *ret_t1)
{
    uint64_t p = util_window_ns;
    uint64_t t1 = now / p * p;
    *ret_t1 = t1;
    *ret_t0 = t1 >= p ? t1 - p : 0;
}

uint64_t nvml_emu_mono_to_realtime_us(uint64_t mono_ns)
{
    return (uint64_t)((int64_t)mono_ns + realtime_offset_ns) / 1000ull;
}

uint64_t nvml_emu_realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000ull;
}

static nvmlReturn_t device_check(nvmlDevice_t dev, bool lost_ok, struct emu_gpu **ret_gpu,
                                 unsigned *ret_index)
{
    struct emu_state *st = nvml_emu_state();
    if (!st)
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t p = (uintptr_t)dev, base = (uintptr_t)devices;
    if (nvml_emu_is_mig_handle(dev)) {
        /* a MIG device answers only the queries that say so (they check it first) */
        nvmlReturn_t r = nvml_emu_mig_device(dev, NULL, NULL, NULL, NULL);
        return r == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : r;
    }
    if (!dev || p < base || p >= base + sizeof(devices) ||
        (p - base) % sizeof(struct nvmlDevice_st) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_gpu *g = emu_state_gpu(st, dev->index);
    /* a GPU bound to vfio-pci is not the nvidia driver's: NVML has no such device (NVML counts
     * the devices the driver has, nvmlDeviceGetCount_v2 "accessible devices"; NVIDIA's
     * passthrough guides unbind the GPU from nvidia before vfio-pci takes it, e.g. the
     * Confidential Computing deployment guide, "Binding the GPUs to VFIO"). Inferred from
     * those, not seen on a GPU yet: tests/gpu/vfio.sh records nvidia-smi -L's count beside the
     * functions bound to vfio-pci for a GPU run to confirm. */
    if (!g || __atomic_load_n(&g->vfio, __ATOMIC_RELAXED))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!lost_ok && __atomic_load_n(&g->lost, __ATOMIC_RELAXED))
        return NVML_ERROR_GPU_IS_LOST;
    if (ret_gpu)
        *ret_gpu = g;
    if (ret_index)
        *ret_index = dev->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvml_emu_device(nvmlDevice_t dev, struct emu_gpu **ret_gpu, unsigned *ret_index)
{
    return device_check(dev, false, ret_gpu, ret_index);
}

nvmlReturn_t nvml_emu_device_any(nvmlDevice_t dev, struct emu_gpu **ret_gpu, unsigned *ret_index)
{
    return device_check(dev, true, ret_gpu, ret_index);
}

nvmlReturn_t nvml_emu_copy_string(const char *s, char *buf, unsigned int len)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(s);
    if ((size_t)len < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

void nvml_emu_pci_info(const struct emu_gpu *g, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0",
             g->pci_domain & 0xffffu, g->pci_bus & 0xffu, g->pci_device & 0x1fu);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", g->pci_domain, g->pci_bus & 0xffu,
             g->pci_device & 0x1fu);
    pci->domain = g->pci_domain;
    pci->bus = g->pci_bus;
    pci->device = g->pci_device;
    pci->pciDeviceId = g->pci_device_id;
    /* subsystem: NVIDIA's vendor id with a board id derived from the device id */
    pci->pciSubSystemId = ((g->pci_device_id >> 16) + 0x100u) << 16 | 0x10deu;
}

/* ---- init / shutdown ------------------------------------------------------------------ */

static uint64_t env_ms(const char *name, uint64_t def_ms)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def_ms;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x == 0 || x > 3600000)
        return def_ms;
    return x;
}

static nvmlReturn_t init_locked(void)
{
    if (init_count > 0) {
        init_count++;
        return NVML_SUCCESS;
    }
    struct emu_state *st = NULL;
    char err[512];
    int r = emu_state_open_env_err(&st, err, sizeof(err));
    if (r < 0) {
        if (r == -ENXIO)
            snprintf(init_error, sizeof(init_error),
                     "no emulated machine: set ACCEL_EMU_STATE to a file made by `accel-emu init`");
        else
            snprintf(init_error, sizeof(init_error),
                     "no emulated machine: ACCEL_EMU_STATE=%s; set ACCEL_EMU_STATE to a file "
                     "made by `accel-emu init`",
                     err);
        if (!init_quiet)
            fprintf(stderr, "accel-emu: %s\n", init_error);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    init_error[0] = '\0';
    util_window_ns = env_ms("ACCEL_EMU_UTIL_WINDOW_MS", 1000) * 1000000ull;
    struct timespec rt, mono;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    realtime_offset_ns = ((int64_t)rt.tv_sec - (int64_t)mono.tv_sec) * 1000000000ll +
                         ((int64_t)rt.tv_nsec - (int64_t)mono.tv_nsec);
    __atomic_store_n(&state, st, __ATOMIC_RELEASE);
    init_count = 1;
    return NVML_SUCCESS;
}

/* Not NVML's: for our loader only (see the top of the file). Any thread, before nvmlInit. */
NVML_EMU_API void accel_emu_nvml_quiet(void);
NVML_EMU_API void accel_emu_nvml_quiet(void)
{
    pthread_mutex_lock(&init_lock);
    init_quiet = true;
    pthread_mutex_unlock(&init_lock);
}

/* Why the last nvmlInit failed, or NULL when it did not. The text stays valid until the next
 * nvmlInit; read it from the thread that called nvmlInit, before any other thread inits. */
NVML_EMU_API const char *accel_emu_nvml_init_error(void);
NVML_EMU_API const char *accel_emu_nvml_init_error(void)
{
    return init_error[0] ? init_error : NULL;
}

NVML_EMU_API nvmlReturn_t nvmlInit_v2(void)
{
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t r = init_locked();
    pthread_mutex_unlock(&init_lock);
    return r;
}

/* The pre-v2 name; same behaviour. */
NVML_EMU_API nvmlReturn_t nvmlInit(void);
NVML_EMU_API nvmlReturn_t nvmlInit(void)
{
    return nvmlInit_v2();
}

NVML_EMU_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    if (flags & ~(unsigned)(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH))
        return NVML_ERROR_INVALID_ARGUMENT;
    return nvmlInit_v2();
}

NVML_EMU_API nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t r = NVML_SUCCESS;
    if (init_count == 0) {
        r = NVML_ERROR_UNINITIALIZED;
    } else if (--init_count == 0) {
        struct emu_state *st = __atomic_exchange_n(&state, NULL, __ATOMIC_ACQ_REL);
        emu_state_close(st);
    }
    pthread_mutex_unlock(&init_lock);
    return r;
}

NVML_EMU_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
        return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
        return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
        return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
        return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
        return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
        return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE:
        return "In use by another client";
    case NVML_ERROR_MEMORY:
        return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
        return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
        return "ECC not supported for vGPU";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
        return "Insufficient Resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
        return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
        return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED:
        return "Deprecated";
    case NVML_ERROR_NOT_READY:
        return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND:
        return "GPU not found";
    case NVML_ERROR_INVALID_STATE:
        return "Invalid state";
    default:
        return "Unknown Error";
    }
}

/* ---- system --------------------------------------------------------------------------- */

NVML_EMU_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!nvml_emu_state())
        return NVML_ERROR_UNINITIALIZED;
    return nvml_emu_copy_string(NVML_EMU_DRIVER_VERSION, version, length);
}

/* Like NVIDIA's, this one answers without nvmlInit: it describes the library itself. */
NVML_EMU_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    char v[64];
    snprintf(v, sizeof(v), "%d.%s", NVML_EMU_CUDA_VERSION / 1000, NVML_EMU_DRIVER_VERSION);
    return nvml_emu_copy_string(v, version, length);
}

/* The CUDA version asks the driver, so it needs nvmlInit: NVIDIA's answered
 * NVML_ERROR_UNINITIALIZED before init (seen on an NVIDIA H200, driver 580.159.04, 2026-11-26,
 * tests/gpu/nvml-semantics.sh). */
NVML_EMU_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (!nvml_emu_state())
        return NVML_ERROR_UNINITIALIZED;
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = NVML_EMU_CUDA_VERSION;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---- handles -------------------------------------------------------------------------- */

NVML_EMU_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    struct emu_state *st = nvml_emu_state();
    if (!st)
        return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = nvml_emu_nvml_index(st, emu_state_gpu_count(st));
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
NVML_EMU_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

/* A handle for GPU i, or GPU_IS_LOST when it fell off the bus (as NVML answers). */
static nvmlReturn_t handle_of(struct emu_state *st, unsigned i, nvmlDevice_t *device)
{
    const struct emu_gpu *g = emu_state_gpu(st, i);
    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* bound to vfio-pci, or no device node in this container: not the driver's to show */
    if (emu_state_gpu_hidden(g))
        return NVML_ERROR_NOT_FOUND;
    if (__atomic_load_n(&g->lost, __ATOMIC_RELAXED))
        return NVML_ERROR_GPU_IS_LOST;
    *device = &devices[i];
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    struct emu_state *st = nvml_emu_state();
    if (!st)
        return NVML_ERROR_UNINITIALIZED;
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* NVML's index counts only the GPUs the nvidia driver owns (and this container sees) */
    for (unsigned i = 0, n = 0; i < emu_state_gpu_count(st); i++) {
        if (emu_state_gpu_hidden(emu_state_gpu(st, i)))
            continue;
        if (n++ == index)
            return handle_of(st, i, device);
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
NVML_EMU_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    struct emu_state *st = nvml_emu_state();
    if (!st)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < emu_state_gpu_count(st); i++)
        if (strcmp(emu_state_gpu(st, i)->uuid, uuid) == 0)
            return handle_of(st, i, device);
    /* "The UUID of the target GPU or MIG instance" (nvmlDeviceGetHandleByUUID) */
    unsigned gpu, gi, ci;
    uint64_t serial;
    if (strncmp(uuid, "MIG-", 4) == 0 &&
        emu_state_mig_find_uuid(st, uuid, &gpu, &gi, &ci, &serial) == 0 &&
        strcmp(emu_state_gpu(st, gpu)->mig[gi].ci[ci].uuid, uuid) == 0) {
        nvmlDevice_t parent;
        nvmlReturn_t r = handle_of(st, gpu, &parent);
        if (r != NVML_SUCCESS)
            return r;
        *device = nvml_emu_mig_handle(gpu, gi, ci, serial);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId,
                                                           nvmlDevice_t *device)
{
    struct emu_state *st = nvml_emu_state();
    if (!st)
        return NVML_ERROR_UNINITIALIZED;
    if (!pciBusId || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* "00000000:18:00.0" or the legacy "0000:18:00.0", any case; not a UUID */
    if (strncasecmp(pciBusId, "GPU-", 4) == 0)
        return NVML_ERROR_NOT_FOUND;
    int i = emu_state_find_gpu(st, pciBusId);
    if (i < 0)
        return NVML_ERROR_NOT_FOUND;
    return handle_of(st, (unsigned)i, device);
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device);
NVML_EMU_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}
