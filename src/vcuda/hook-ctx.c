/* hook-ctx.c — a context's own device memory: charged when a context is
 * created or a device's primary context is first retained, released when it is
 * destroyed, with everything allocated in it (the driver frees those with the
 * context).
 *
 * The charge is measured: the configured context_memory is reserved before the
 * driver is called (the estimate that must fit), then settled to what the
 * device's used memory grew by across the creation, as NVML reports it. When
 * NVML cannot tell (no NVML, no growth, an implausible figure), the configured
 * figure stays. See docs/vcuda.md, "Context memory", for the limits. */
#include "vcuda.h"

#include "pace.h"
#include "track.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* ---- measuring ---- */

/* What NVML says about the device of CUDA ordinal dev: this process's own
 * memory (*ret_mine, UINT64_MAX when NVML does not list this pid: another pid
 * namespace, or nothing held yet — see own_bytes) and the device's used bytes
 * (*ret_used, UINT64_MAX when unknown). nvmlInit is reference counted: ours
 * does not disturb the program's own use. */
struct dev_sample {
    uint64_t mine, used;
    /* NVML's compute-process list as it answered (records of a size it does not tell) */
    unsigned nprocs;
    bool procs_ok;
    unsigned char procs[64 * 32];
};

/* The pid NVML names this process by, once a context creation showed it (pace_host_pid); 0
 * until then. Compute pacing reads it (hook-launch.c); a forked child learns its own. */
atomic_uint vc_host_pid;

/* This pid's usedGpuMemory in a process list of n records whose size NVML
 * does not tell (16, 24 or 32 bytes across drivers: docs/inventory.md); pid
 * at 0 and usedGpuMemory at 8 in all of them. Every size that finds the pid
 * must agree, else UINT64_MAX. */
static uint64_t own_bytes(const unsigned char *buf, size_t buflen, unsigned n, uint32_t pid)
{
    static const size_t strides[] = {16, 24, 32};
    uint64_t found = UINT64_MAX;
    for (size_t k = 0; k < sizeof(strides) / sizeof(strides[0]); k++) {
        for (unsigned i = 0; i < n && (i + 1) * strides[k] <= buflen; i++) {
            uint32_t p;
            uint64_t used;
            memcpy(&p, buf + i * strides[k], sizeof(p));
            if (p != pid)
                continue;
            memcpy(&used, buf + i * strides[k] + 8, sizeof(used));
            if (found != UINT64_MAX && found != used)
                return UINT64_MAX;
            found = used;
            break;
        }
    }
    return found;
}

static struct dev_sample device_sample(CUdevice dev)
{
    struct dev_sample smp = {.mine = UINT64_MAX, .used = UINT64_MAX};
    static atomic_int state; /* 0 not tried, 1 usable, -1 not available */
    int st = atomic_load_explicit(&state, memory_order_acquire);
    if (st < 0)
        return smp;
    if (st == 0) {
        bool ok = vc_nvml_ensure() == 0 && vc_real.nvmlInit_v2 && vc_real.nvmlDeviceGetMemoryInfo &&
                  vc_real.nvmlDeviceGetHandleByUUID && vc_real.nvmlInit_v2() == NVML_SUCCESS;
        atomic_store_explicit(&state, ok ? 1 : -1, memory_order_release);
        if (!ok)
            return smp;
    }
    char s[64];
    if (vc_device_uuid(dev, s, sizeof(s)) < 0)
        return smp;
    nvmlDevice_t h;
    if (vc_real.nvmlDeviceGetHandleByUUID(s, &h) != NVML_SUCCESS)
        return smp;
    nvmlMemory_t m;
    if (vc_real.nvmlDeviceGetMemoryInfo(h, &m) == NVML_SUCCESS)
        smp.used = m.used;
    unsigned char *buf = smp.procs;
    unsigned n = 64;
    if (vc_real.nvmlDeviceGetComputeRunningProcesses &&
        vc_real.nvmlDeviceGetComputeRunningProcesses(h, &n, (void *)buf) == NVML_SUCCESS) {
        smp.nprocs = n;
        smp.procs_ok = true;
        smp.mine = own_bytes(buf, sizeof(smp.procs), n, vc.pid);
        if (smp.mine == UINT64_MAX && smp.used != UINT64_MAX)
            smp.mine = UINT64_MAX - 1; /* listed nothing for us: 0 held, if NVML sees our pid */
    }
    return smp;
}

/* No context takes more than this: a larger growth was someone else's. */
#define CTX_MEASURE_MAX (16ull << 30)

/* After a successful creation: settles the reserved estimate to the measured
 * growth (before = device_sample() taken before the call). This process's own
 * figure is preferred (other processes' allocations do not move it); the
 * device's used memory is the fallback (they do); the configured figure the
 * last. Returns the charge. */
static uint64_t ctx_settle(CUdevice dev, unsigned index, uint64_t reserved,
                           struct dev_sample before)
{
    struct dev_sample after = device_sample(dev);
    if (before.procs_ok && after.procs_ok &&
        !atomic_load_explicit(&vc_host_pid, memory_order_relaxed)) {
        uint32_t hp = pace_host_pid(before.procs, before.nprocs, after.procs, after.nprocs,
                                    sizeof(after.procs), vc.pid);
        if (hp)
            atomic_store_explicit(&vc_host_pid, hp, memory_order_relaxed);
    }
    uint64_t measured = 0;
    uint64_t b0 = before.mine == UINT64_MAX - 1 ? 0 : before.mine;
    if (after.mine < UINT64_MAX - 1 && before.mine != UINT64_MAX && after.mine > b0)
        measured = after.mine - b0;
    else if (after.used != UINT64_MAX && before.used != UINT64_MAX && after.used > before.used)
        measured = after.used - before.used;
    if (measured == 0 || measured > CTX_MEASURE_MAX)
        return reserved;
    if (measured > reserved)
        vc_region_charge(&vc.region, vc.slot, index, measured - reserved); /* already held */
    else
        vc_mem_release(index, reserved - measured);
    return measured;
}

#define MAX_ORDINALS 64

/* Our own view of each primary context's retain count: the first retain
 * charges, the last release (or a reset) gives back. */
static pthread_mutex_t prim_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int refs;
    bool charged;
    unsigned index;
    uint64_t bytes; /* what is charged for it */
    CUcontext ctx;
} prim[MAX_ORDINALS];

void vc_ctx_atfork_child(void)
{
    atomic_store_explicit(&vc_host_pid, 0, memory_order_relaxed);
    pthread_mutex_init(&prim_lock, NULL);
    memset(prim, 0, sizeof(prim));
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxRetain);
    unsigned index;
    int di = vc_device_index(dev, &index);
    /* A device not assigned to the container has a quota of 0: no context either, even one
     * that would not be charged (context_memory = 0), since a context also runs kernels. */
    if (di == 0 && index == VC_DEVICE_UNASSIGNED)
        return vc_mem_oom(index, vc.cfg.context_memory,
                          "cuDevicePrimaryCtxRetain (context memory)");
    if (di < 0 || dev >= MAX_ORDINALS)
        return vc_real.cuDevicePrimaryCtxRetain(pctx, dev);
    uint64_t bytes = vc.cfg.context_memory;
    bool charged_now = false;
    /* The first retain charges the context's memory. The reservation is made
     * outside the lock (it may refresh pools, a driver call); a racer that
     * charged first makes us give ours back and count a reference. */
    for (;;) {
        pthread_mutex_lock(&prim_lock);
        if (prim[dev].charged || !bytes) {
            prim[dev].refs++;
            pthread_mutex_unlock(&prim_lock);
            break;
        }
        pthread_mutex_unlock(&prim_lock);
        if (vc_mem_reserve(index, bytes) < 0)
            return vc_mem_oom(index, bytes, "cuDevicePrimaryCtxRetain (context memory)");
        pthread_mutex_lock(&prim_lock);
        if (!prim[dev].charged) {
            prim[dev].charged = true;
            prim[dev].index = index;
            prim[dev].bytes = bytes;
            prim[dev].refs++;
            charged_now = true;
            pthread_mutex_unlock(&prim_lock);
            break;
        }
        pthread_mutex_unlock(&prim_lock);
        vc_mem_release(index, bytes);
    }

    struct dev_sample before = {.mine = UINT64_MAX, .used = UINT64_MAX};
    if (charged_now)
        before = device_sample(dev);
    CUresult r = vc_real.cuDevicePrimaryCtxRetain(pctx, dev);
    uint64_t charge = r == CUDA_SUCCESS && charged_now ? ctx_settle(dev, index, bytes, before) : 0;

    pthread_mutex_lock(&prim_lock);
    if (charged_now && r == CUDA_SUCCESS)
        prim[dev].bytes = charge;
    if (r != CUDA_SUCCESS) {
        prim[dev].refs--;
        if (charged_now && prim[dev].refs == 0) {
            vc_mem_release(index, bytes);
            prim[dev].charged = false;
        }
    } else {
        prim[dev].ctx = *pctx;
    }
    pthread_mutex_unlock(&prim_lock);
    return r;
}

static void primary_released(CUdevice dev, bool reset)
{
    if (dev < 0 || dev >= MAX_ORDINALS)
        return;
    CUcontext gone = NULL;
    pthread_mutex_lock(&prim_lock);
    if (!reset && prim[dev].refs > 0)
        prim[dev].refs--;
    if (prim[dev].refs == 0 || reset) {
        gone = prim[dev].ctx;
        /* After a reset a still-retained primary context comes back on next
         * use, so its own memory stays charged while references remain. */
        if (prim[dev].refs == 0 && prim[dev].charged) {
            vc_mem_release(prim[dev].index, prim[dev].bytes);
            prim[dev].charged = false;
        }
    }
    pthread_mutex_unlock(&prim_lock);
    if (gone)
        vc_ctx_gone(gone);
}

/* After the driver released (reset = false) or reset a primary context: on
 * success, give back what it held. Returns the driver's result. */
static CUresult primary_done(CUresult r, CUdevice dev, bool reset)
{
    if (r == CUDA_SUCCESS)
        primary_released(dev, reset);
    return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxRelease_v2);
    vc_launch_ctx_closing(NULL);
    return primary_done(vc_real.cuDevicePrimaryCtxRelease_v2(dev), dev, false);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxRelease);
    vc_launch_ctx_closing(NULL);
    return primary_done(vc_real.cuDevicePrimaryCtxRelease(dev), dev, false);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxReset_v2);
    vc_launch_ctx_closing(NULL);
    return primary_done(vc_real.cuDevicePrimaryCtxReset_v2(dev), dev, true);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxReset);
    vc_launch_ctx_closing(NULL);
    return primary_done(vc_real.cuDevicePrimaryCtxReset(dev), dev, true);
}

/* Context creation: reserve before, track the context (keyed by itself, so
 * vc_ctx_gone releases it along with its allocations). */
static int ctx_begin(CUdevice dev, unsigned *ret_index)
{
    if (vc_device_index(dev, ret_index) < 0)
        return 1; /* not ours to account: pass through */
    if (*ret_index == VC_DEVICE_UNASSIGNED)
        return -1; /* quota 0: no context (see cuDevicePrimaryCtxRetain) */
    if (vc.cfg.context_memory && vc_mem_reserve(*ret_index, vc.cfg.context_memory) < 0)
        return -1;
    return 0;
}

static CUresult ctx_end(CUresult r, CUdevice dev, unsigned index, struct dev_sample before,
                        CUcontext *pctx)
{
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, vc.cfg.context_memory);
        return r;
    }
    uint64_t charge =
        vc.cfg.context_memory ? ctx_settle(dev, index, vc.cfg.context_memory, before) : 0;
    struct vc_track_entry e = {
        .key = (uint64_t)(uintptr_t)*pctx,
        .size = charge,
        .ctx = (uint64_t)(uintptr_t)*pctx,
        .kind = VC_TRACK_CTX,
        .dev = index,
    };
    if (vc.cfg.context_memory)
        vc_track_put(&e);
    return r;
}

#define CTX_CREATE(fn, dev, ...)                                                                   \
    do {                                                                                           \
        unsigned index;                                                                            \
        int b = ctx_begin(dev, &index);                                                            \
        if (b > 0)                                                                                 \
            return vc_real.fn(__VA_ARGS__);                                                        \
        if (b < 0)                                                                                 \
            return vc_mem_oom(index, vc.cfg.context_memory, #fn " (context memory)");              \
        struct dev_sample before = {.mine = UINT64_MAX, .used = UINT64_MAX};                       \
        if (vc.cfg.context_memory)                                                                 \
            before = device_sample(dev);                                                           \
        return ctx_end(vc_real.fn(__VA_ARGS__), dev, index, before, pctx);                         \
    } while (0)

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    VC_PREAMBLE(cuCtxCreate_v2);
    CTX_CREATE(cuCtxCreate_v2, dev, pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    VC_PREAMBLE(cuCtxCreate);
    CTX_CREATE(cuCtxCreate, dev, pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    VC_PREAMBLE(cuCtxCreate_v3);
    CTX_CREATE(cuCtxCreate_v3, dev, pctx, paramsArray, numParams, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    VC_PREAMBLE(cuCtxCreate_v4);
    CTX_CREATE(cuCtxCreate_v4, dev, pctx, ctxCreateParams, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    VC_PREAMBLE(cuCtxDestroy_v2);
    vc_launch_ctx_closing(ctx);
    CUresult r = vc_real.cuCtxDestroy_v2(ctx);
    if (r == CUDA_SUCCESS && ctx)
        vc_ctx_gone(ctx);
    return r;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    VC_PREAMBLE(cuCtxDestroy);
    vc_launch_ctx_closing(ctx);
    CUresult r = vc_real.cuCtxDestroy(ctx);
    if (r == CUDA_SUCCESS && ctx)
        vc_ctx_gone(ctx);
    return r;
}
