/* hook-launch.c — the kernel and graph launch entry points (hooks.def, "launches"), paced to the
 * container's compute share.
 *
 * Unthrottled (limit 100 or none): one relaxed load of a cached mode, then the driver. Throttled:
 * the launch waits for the container's budget (pace-flight.c / pace.c), runs between two CUDA
 * events on its own stream, and its measured GPU time settles the charge later. Launches into a
 * stream that is being captured are not executed, so they pass through: the graph is paced when
 * it is launched. See docs/vcuda-compute.md. */
#include "log.h"
#include "pace-flight.h"
#include "pace.h"
#include "util.h"
#include "vcuda.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    MODE_UNKNOWN = 0, /* not decided yet (first launch, or after fork) */
    MODE_OFF,         /* no limit: straight through */
    MODE_ON,          /* paced */
};

static atomic_int launch_mode;

/* Per process (reset in a forked child): the launches in flight and their events. */
struct pacer {
    struct pace_flight flight;
    struct pace_sampler sampler; /* burst: guarded by sample_lock */
    pthread_mutex_t sample_lock;
    uint64_t dev_busy_ns;  /* burst: the device's busy time as integrated from NVML */
    uint64_t dev_read_ns;  /* when it was last read */
    nvmlDevice_t nvml_dev; /* NULL until found (burst mode, residency calibration) */
    bool nvml_failed;
    pthread_mutex_t nvml_lock; /* guards nvml_dev / nvml_failed while the handle is found */
    /* residency calibration (pace.h, struct pace_calib): calib under calib_lock (held only for
     * arithmetic); the fields after it belong to the one thread that set calib_polling */
    pthread_mutex_t calib_lock;
    struct pace_calib calib;
    atomic_int calib_polling;
    _Atomic uint64_t calib_snap_ns;   /* when the span total was last recorded */
    uint64_t calib_read_ns;           /* when NVML's samples were last read */
    unsigned long long calib_seen_us; /* the newest sample timestamp read */
    uint32_t host_pid;                /* this process as NVML names it; 0: not known yet */
    /* NVML's samples: an H200 (driver 580) asked with no buffer wanted 72 even when idle, and
     * refuses a smaller one (INSUFFICIENT_SIZE), as the exporter's 256 are not */
    nvmlProcessUtilizationSample_t calib_smp[256];
    int pidns; /* 0: not looked at, 1: the host's, 2: another */
    struct {
        CUcontext ctx; /* where start/end were created; NULL = none yet */
        CUevent start, end;
        bool measurable; /* both recorded around the launch */
    } ev[PACE_FLIGHT_SLOTS];
};

static struct pacer pacer;
static pthread_mutex_t pacer_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int pacer_ready;

static struct pace_shared *region_pace(void)
{
    return (struct pace_shared *)(void *)&vc.region.hdr->core_limit;
}

static struct pace_slot *slot_pace(void)
{
    return (struct pace_slot *)(void *)&vc.region.slots[vc.slot].gpu_time_ns;
}

_Static_assert(offsetof(struct vc_region_header, device_uuid) -
                       offsetof(struct vc_region_header, core_limit) ==
                   sizeof(struct pace_shared),
               "pace_shared overlays the header's compute-share fields exactly");
_Static_assert(offsetof(struct vc_region_slot, reserved) -
                       offsetof(struct vc_region_slot, gpu_time_ns) >=
                   sizeof(struct pace_slot),
               "pace_slot fits the slot's compute-share fields");

/* Decides once per process whether launches are paced. */
static int mode_slow(void)
{
    int mode = MODE_OFF;
    if (vc_ensure() < 0)
        return MODE_OFF; /* called from inside our own setup: decide on a later launch */
    if (vc.region.hdr && vc.slot >= 0) {
        int limit = vc.cfg.core_limit;
        if (limit > 0 && limit < 100) {
            mode = MODE_ON;
            atomic_store_explicit(&region_pace()->period_ns, PACE_PERIOD_NS, memory_order_relaxed);
        }
    }
    atomic_store_explicit(&launch_mode, mode, memory_order_release);
    return mode;
}

static inline bool paced(void)
{
    int m = atomic_load_explicit(&launch_mode, memory_order_relaxed);
    if (VC_LIKELY(m == MODE_OFF))
        return false;
    if (VC_LIKELY(m == MODE_ON))
        return true;
    return mode_slow() == MODE_ON;
}

/* ---- the process's pacer ---- */

static struct pacer *pacer_get(void)
{
    if (VC_LIKELY(atomic_load_explicit(&pacer_ready, memory_order_acquire) == 1))
        return &pacer;
    pthread_mutex_lock(&pacer_lock);
    if (atomic_load_explicit(&pacer_ready, memory_order_relaxed) == 0) {
        /* First paced launch, or the first in a forked child (vc_launch_atfork_child): the
         * parent's launches and events are not ours. Its charges stay in its slot. */
        if (pacer.flight.est)
            pace_flight_fini(&pacer.flight);
        memset(&pacer, 0, sizeof(pacer));
        pthread_mutex_init(&pacer.sample_lock, NULL);
        pthread_mutex_init(&pacer.calib_lock, NULL);
        pthread_mutex_init(&pacer.nvml_lock, NULL);
        if (pace_flight_init(&pacer.flight, region_pace(), slot_pace()) == 0) {
            pacer.flight.limit_pct = (uint32_t)vc.cfg.core_limit; /* never the region's */
            atomic_store_explicit(&pacer_ready, 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&pacer_lock);
    return atomic_load_explicit(&pacer_ready, memory_order_acquire) == 1 ? &pacer : NULL;
}

static uint64_t clock_cb(void *ud)
{
    return mono_ns();
}

/* While a launch waits for budget, now and then look for dead processes of the container: what
 * they charged and never settled goes back into the budget (pace_slot_reclaim, from the reaper). */
#define REAP_INTERVAL_NS 1000000000ull
static _Atomic uint64_t last_reap_ns;

static void calib_poll(struct pacer *p);

static void sleep_cb(void *ud, uint64_t ns)
{
    calib_poll(ud);
    uint64_t now = mono_ns();
    uint64_t last = atomic_load_explicit(&last_reap_ns, memory_order_relaxed);
    if (now - last >= REAP_INTERVAL_NS &&
        atomic_compare_exchange_strong_explicit(&last_reap_ns, &last, now, memory_order_relaxed,
                                                memory_order_relaxed))
        vc_region_reap(&vc.region);
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
    /* the container's throttled time, for accel-exporter: the wall time actually slept */
    atomic_fetch_add_explicit(&region_pace()->throttled_ns, mono_ns() - now, memory_order_relaxed);
}

static CUresult elapsed(CUevent a, CUevent b, float *ms)
{
    if (vc_real.cuEventElapsedTime_v2)
        return vc_real.cuEventElapsedTime_v2(ms, a, b);
    if (vc_real.cuEventElapsedTime)
        return vc_real.cuEventElapsedTime(ms, a, b);
    return CUDA_ERROR_NOT_FOUND;
}

/* pace_measure_fn: the GPU time between entry idx's events. */
static int measure_cb(void *ud, unsigned idx, bool wait, uint64_t *ret_ns)
{
    struct pacer *p = ud;
    if (!p->ev[idx].measurable)
        return -EIO;
    CUresult r = vc_real.cuEventQuery(p->ev[idx].end);
    if (r == CUDA_ERROR_NOT_READY) {
        if (!wait)
            return -EAGAIN;
        r = vc_real.cuEventSynchronize(p->ev[idx].end);
    }
    if (r != CUDA_SUCCESS)
        return -EIO;
    float ms = 0;
    if (elapsed(p->ev[idx].start, p->ev[idx].end, &ms) != CUDA_SUCCESS || !(ms >= 0))
        return -EIO;
    uint64_t raw = (uint64_t)((double)ms * 1e6);
    pthread_mutex_lock(&p->calib_lock);
    pace_calib_span(&p->calib, raw);
    *ret_ns = pace_calib_apply(&p->calib, mono_ns(), raw);
    pthread_mutex_unlock(&p->calib_lock);
    return 0;
}

/* Entry idx's events exist in the current context. False when they cannot be made. */
static bool events_ready(struct pacer *p, unsigned idx)
{
    CUcontext cur = NULL;
    if (!vc_real.cuCtxGetCurrent || vc_real.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur)
        return false;
    if (p->ev[idx].ctx == cur)
        return true;
    if (p->ev[idx].ctx) {
        /* Made in another context (maybe destroyed with it): best effort. */
        vc_real.cuEventDestroy_v2(p->ev[idx].start);
        vc_real.cuEventDestroy_v2(p->ev[idx].end);
        p->ev[idx].ctx = NULL;
    }
    if (vc_real.cuEventCreate(&p->ev[idx].start, 0) != CUDA_SUCCESS)
        return false;
    if (vc_real.cuEventCreate(&p->ev[idx].end, 0) != CUDA_SUCCESS) {
        vc_real.cuEventDestroy_v2(p->ev[idx].start);
        return false;
    }
    p->ev[idx].ctx = cur;
    return true;
}

static CUresult record(CUevent ev, CUstream stream, bool ptsz)
{
    return ptsz ? vc_real.cuEventRecord_ptsz(ev, stream) : vc_real.cuEventRecord(ev, stream);
}

static bool capturing(CUstream stream, bool ptsz)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = ptsz ? vc_real.cuStreamIsCapturing_ptsz(stream, &st)
                      : vc_real.cuStreamIsCapturing(stream, &st);
    /* An error here (bad stream) is the launch's to report. */
    return r == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The container's first device (config order) as NVML names it; NULL when NVML cannot be used.
 * The first caller looks it up, once per process. */
static nvmlDevice_t nvml_device(struct pacer *p)
{
    pthread_mutex_lock(&p->nvml_lock);
    if (!p->nvml_dev && !p->nvml_failed) {
        p->nvml_failed = true;
        /* nvmlInit is reference counted: ours does not disturb the program's own use. */
        if (vc_nvml_ensure() == 0 && vc_real.nvmlInit_v2 && vc_real.nvmlInit_v2() == NVML_SUCCESS) {
            const char *uuid = vc.cfg.device_uuid[0]; /* the config's, not the region's */
            if (uuid[0] && vc_real.nvmlDeviceGetHandleByUUID)
                vc_real.nvmlDeviceGetHandleByUUID(uuid, &p->nvml_dev);
            else if (vc_real.nvmlDeviceGetHandleByIndex_v2)
                vc_real.nvmlDeviceGetHandleByIndex_v2(0, &p->nvml_dev);
            p->nvml_failed = p->nvml_dev == NULL;
        }
    }
    nvmlDevice_t d = p->nvml_dev;
    pthread_mutex_unlock(&p->nvml_lock);
    return d;
}

/* This process's pid as NVML reports it. In the host's pid namespace that is getpid(): that
 * namespace is the initial one, whose /proc/<pid>/ns/pid inode is the kernel's
 * PROC_PID_INIT_INO (0xEFFFFFFC = 4026531836). In a container's, the pid NVML's process list
 * gained when this process created its context (vc_host_pid, hook-ctx.c); until then 0 (no
 * calibration). Never from the usage region, which the tenant can write. */
static uint32_t own_host_pid(struct pacer *p)
{
    if (p->host_pid)
        return p->host_pid;
    if (!p->pidns) {
        char link[64] = "";
        ssize_t n = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
        p->pidns = n > 0 && strncmp(link, "pid:[4026531836]", (size_t)n) == 0 ? 1 : 2;
    }
    if (p->pidns == 1)
        return p->host_pid = (uint32_t)getpid();
    return p->host_pid = atomic_load_explicit(&vc_host_pid, memory_order_relaxed);
}

#define CALIB_SNAP_NS 20000000ull  /* the span total is recorded at most every 20 ms */
#define CALIB_READ_NS 100000000ull /* NVML's per-process samples are read at most every 100 ms */

/* Residency calibration: records the span total and feeds NVML's per-process samples of this
 * process to pace_calib (pace.h). NVML stamps a sample with the CPU time (µs, wall clock) of its
 * period's end; the span total is interpolated there. */
static void calib_poll(struct pacer *p)
{
    uint64_t now = mono_ns();
    if (now - atomic_load_explicit(&p->calib_snap_ns, memory_order_relaxed) < CALIB_SNAP_NS ||
        atomic_exchange_explicit(&p->calib_polling, 1, memory_order_acquire) != 0)
        return; /* too soon, or another thread is at it */
    atomic_store_explicit(&p->calib_snap_ns, now, memory_order_relaxed);
    pthread_mutex_lock(&p->calib_lock);
    pace_calib_snapshot(&p->calib, now);
    pthread_mutex_unlock(&p->calib_lock);
    uint32_t pid;
    if (now - p->calib_read_ns >= CALIB_READ_NS && (pid = own_host_pid(p)) != 0 &&
        vc_real.nvmlDeviceGetProcessUtilization && nvml_device(p)) {
        p->calib_read_ns = now;
        nvmlProcessUtilizationSample_t *smp = p->calib_smp;
        unsigned n = ARRAY_SIZE(p->calib_smp);
        uint64_t wall_us = now_ns(CLOCK_REALTIME) / 1000;
        /* without calib_lock: settling on other threads does not wait for NVML */
        nvmlReturn_t r =
            vc_real.nvmlDeviceGetProcessUtilization(p->nvml_dev, smp, &n, p->calib_seen_us);
        pthread_mutex_lock(&p->calib_lock);
        if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_FOUND) {
            static atomic_int said;
            if (atomic_exchange_explicit(&said, 1, memory_order_relaxed) == 0)
                log_debug("residency: nvmlDeviceGetProcessUtilization: error %d (count %u): "
                          "launches are charged their whole measured time",
                          (int)r, n);
        } else if (r == NVML_SUCCESS) {
            /* this process's samples, oldest first (a handful: insertion order) */
            for (unsigned k = 0; k < n; k++) {
                unsigned best = n;
                for (unsigned i = 0; i < n; i++)
                    if (smp[i].pid == pid && smp[i].timeStamp > p->calib_seen_us &&
                        (best == n || smp[i].timeStamp < smp[best].timeStamp))
                        best = i;
                if (best == n)
                    break;
                unsigned long long ts = smp[best].timeStamp;
                uint64_t ago_ns = wall_us > ts ? (wall_us - ts) * 1000 : 0;
                uint32_t before = p->calib.scale_ppm;
                pace_calib_sample(&p->calib, now > ago_ns ? now - ago_ns : 0, smp[best].smUtil);
                p->calib_seen_us = ts;
                if (p->calib.scale_ppm != before)
                    log_debug("residency: %u%% of the measured GPU time was this process's own "
                              "(NVML sample period %llu ms, pid %u)",
                              (p->calib.scale_ppm + 5000) / 10000,
                              (unsigned long long)(p->calib.period_ns / 1000000), pid);
            }
        }
        pthread_mutex_unlock(&p->calib_lock);
    }
    atomic_store_explicit(&p->calib_polling, 0, memory_order_release);
}

/* Burst mode: feeds the device's utilization to the controller once per sample window. The
 * device is the container's first (config order) as NVML names it. */
static void burst_sample(struct pacer *p, struct pace_shared *s)
{
    if (atomic_load_explicit(&s->policy, memory_order_relaxed) != PACE_POLICY_BURST)
        return;
    uint64_t now = mono_ns();
    if (p->sampler.at_ns && now - p->sampler.at_ns < PACE_SAMPLE_NS)
        return;
    if (pthread_mutex_trylock(&p->sample_lock) != 0)
        return; /* another thread is sampling */
    nvmlUtilization_t u;
    if (nvml_device(p) && vc_real.nvmlDeviceGetUtilizationRates &&
        vc_real.nvmlDeviceGetUtilizationRates(p->nvml_dev, &u) == NVML_SUCCESS) {
        /* NVML gives a percentage over its own recent window: integrate it into a counter. */
        if (p->dev_read_ns)
            p->dev_busy_ns += (now - p->dev_read_ns) * (u.gpu > 100 ? 100 : u.gpu) / 100;
        p->dev_read_ns = now;
        pace_observe_device(s, &p->sampler, now, p->dev_busy_ns);
    }
    pthread_mutex_unlock(&p->sample_lock);
}

/* The launch itself, behind a thunk so that every entry point shares one pacing path. */
struct launch {
    CUresult (*fn)(const struct launch *l);
    uintptr_t key; /* what the estimate is kept for: the CUfunction or CUgraphExec */
    CUstream stream;
    bool ptsz;
    const void *args;
};

/* The limit and policy come from the read-only config only. The region's copy
 * is for readers (agent, exporter) and is writable by the tenant: whatever it
 * says now is put back to the config's before each paced launch. */
static void limits_from_config(struct pace_shared *s)
{
    uint32_t want = (uint32_t)vc.cfg.core_limit, pol = (uint32_t)vc.cfg.core_policy;
    if (VC_LIKELY(atomic_load_explicit(&s->limit_pct, memory_order_relaxed) == want &&
                  atomic_load_explicit(&s->policy, memory_order_relaxed) == pol))
        return;
    atomic_store_explicit(&s->policy, pol, memory_order_relaxed);
    atomic_store_explicit(&s->limit_pct, want, memory_order_release);
    static atomic_int warned;
    if (atomic_exchange_explicit(&warned, 1, memory_order_relaxed) == 0)
        log_warn("the usage region's core_limit/core_policy were changed behind libvcuda's back; "
                 "restored from the config (%u%%)",
                 want);
}

static CUresult launch_paced(const struct launch *l)
{
    struct pacer *p = pacer_get();
    if (!p || capturing(l->stream, l->ptsz))
        return l->fn(l);
    limits_from_config(p->flight.shared);
    unsigned idx = pace_flight_admit(&p->flight, l->key, measure_cb, clock_cb, sleep_cb, p);
    bool timed =
        events_ready(p, idx) && record(p->ev[idx].start, l->stream, l->ptsz) == CUDA_SUCCESS;
    CUresult r = l->fn(l);
    if (r != CUDA_SUCCESS) {
        pace_flight_abort(&p->flight, idx);
        return r;
    }
    p->ev[idx].measurable = timed && record(p->ev[idx].end, l->stream, l->ptsz) == CUDA_SUCCESS;
    pace_flight_commit(&p->flight, idx);
    burst_sample(p, p->flight.shared);
    calib_poll(p);
    return r;
}

/* ---- entry points ---- */

struct kernel_args {
    CUfunction f;
    unsigned gx, gy, gz, bx, by, bz, shmem;
    CUstream stream;
    void **params, **extra;
};

static CUresult do_kernel(const struct launch *l)
{
    const struct kernel_args *a = l->args;
    return vc_real.cuLaunchKernel(a->f, a->gx, a->gy, a->gz, a->bx, a->by, a->bz, a->shmem,
                                  a->stream, a->params, a->extra);
}

static CUresult do_kernel_ptsz(const struct launch *l)
{
    const struct kernel_args *a = l->args;
    return vc_real.cuLaunchKernel_ptsz(a->f, a->gx, a->gy, a->gz, a->bx, a->by, a->bz, a->shmem,
                                       a->stream, a->params, a->extra);
}

static CUresult do_coop(const struct launch *l)
{
    const struct kernel_args *a = l->args;
    return vc_real.cuLaunchCooperativeKernel(a->f, a->gx, a->gy, a->gz, a->bx, a->by, a->bz,
                                             a->shmem, a->stream, a->params);
}

static CUresult do_coop_ptsz(const struct launch *l)
{
    const struct kernel_args *a = l->args;
    return vc_real.cuLaunchCooperativeKernel_ptsz(a->f, a->gx, a->gy, a->gz, a->bx, a->by, a->bz,
                                                  a->shmem, a->stream, a->params);
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                void **extra)
{
    VC_NEED_REAL(cuLaunchKernel);
    vc_managed_launch(f, kernelParams, extra);
    if (VC_LIKELY(!paced()))
        return vc_real.cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                      blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
    struct kernel_args a = {f,         gridDimX,       gridDimY, gridDimZ,     blockDimX, blockDimY,
                            blockDimZ, sharedMemBytes, hStream,  kernelParams, extra};
    return launch_paced(&(struct launch){do_kernel, (uintptr_t)f, hStream, false, &a});
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    VC_NEED_REAL(cuLaunchKernel_ptsz);
    vc_managed_launch(f, kernelParams, extra);
    if (VC_LIKELY(!paced()))
        return vc_real.cuLaunchKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                           blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
    struct kernel_args a = {f,         gridDimX,       gridDimY, gridDimZ,     blockDimX, blockDimY,
                            blockDimZ, sharedMemBytes, hStream,  kernelParams, extra};
    return launch_paced(&(struct launch){do_kernel_ptsz, (uintptr_t)f, hStream, true, &a});
}

struct ex_args {
    const CUlaunchConfig *config;
    CUfunction f;
    void **params, **extra;
};

static CUresult do_ex(const struct launch *l)
{
    const struct ex_args *a = l->args;
    return vc_real.cuLaunchKernelEx(a->config, a->f, a->params, a->extra);
}

static CUresult do_ex_ptsz(const struct launch *l)
{
    const struct ex_args *a = l->args;
    return vc_real.cuLaunchKernelEx_ptsz(a->config, a->f, a->params, a->extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                  void **extra)
{
    VC_NEED_REAL(cuLaunchKernelEx);
    vc_managed_launch(f, kernelParams, extra);
    if (VC_LIKELY(!paced()) || !config)
        return vc_real.cuLaunchKernelEx(config, f, kernelParams, extra);
    struct ex_args a = {config, f, kernelParams, extra};
    return launch_paced(&(struct launch){do_ex, (uintptr_t)f, config->hStream, false, &a});
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
{
    VC_NEED_REAL(cuLaunchKernelEx_ptsz);
    vc_managed_launch(f, kernelParams, extra);
    if (VC_LIKELY(!paced()) || !config)
        return vc_real.cuLaunchKernelEx_ptsz(config, f, kernelParams, extra);
    struct ex_args a = {config, f, kernelParams, extra};
    return launch_paced(&(struct launch){do_ex_ptsz, (uintptr_t)f, config->hStream, true, &a});
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams)
{
    VC_NEED_REAL(cuLaunchCooperativeKernel);
    vc_managed_launch(f, kernelParams, NULL);
    if (VC_LIKELY(!paced()))
        return vc_real.cuLaunchCooperativeKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                                 blockDimY, blockDimZ, sharedMemBytes, hStream,
                                                 kernelParams);
    struct kernel_args a = {f,         gridDimX,       gridDimY, gridDimZ,     blockDimX, blockDimY,
                            blockDimZ, sharedMemBytes, hStream,  kernelParams, NULL};
    return launch_paced(&(struct launch){do_coop, (uintptr_t)f, hStream, false, &a});
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes,
                                                CUstream hStream, void **kernelParams)
{
    VC_NEED_REAL(cuLaunchCooperativeKernel_ptsz);
    vc_managed_launch(f, kernelParams, NULL);
    if (VC_LIKELY(!paced()))
        return vc_real.cuLaunchCooperativeKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                                      blockDimY, blockDimZ, sharedMemBytes, hStream,
                                                      kernelParams);
    struct kernel_args a = {f,         gridDimX,       gridDimY, gridDimZ,     blockDimX, blockDimY,
                            blockDimZ, sharedMemBytes, hStream,  kernelParams, NULL};
    return launch_paced(&(struct launch){do_coop_ptsz, (uintptr_t)f, hStream, true, &a});
}

struct multi_args {
    CUDA_LAUNCH_PARAMS *list;
    unsigned n, flags;
};

static CUresult do_multi(const struct launch *l)
{
    const struct multi_args *a = l->args;
    return vc_real.cuLaunchCooperativeKernelMultiDevice(a->list, a->n, a->flags);
}

/* One budget per container: the launch is charged once, timed on the first device's stream
 * (the devices run it in lockstep, so that is the time each of them is busy). */
CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
                                                      unsigned int numDevices, unsigned int flags)
{
    VC_NEED_REAL(cuLaunchCooperativeKernelMultiDevice);
    for (unsigned i = 0; launchParamsList && i < numDevices; i++)
        vc_managed_launch(launchParamsList[i].function, launchParamsList[i].kernelParams, NULL);
    if (VC_LIKELY(!paced()) || !launchParamsList || numDevices == 0)
        return vc_real.cuLaunchCooperativeKernelMultiDevice(launchParamsList, numDevices, flags);
    struct multi_args a = {launchParamsList, numDevices, flags};
    return launch_paced(&(struct launch){do_multi, (uintptr_t)launchParamsList[0].function,
                                         launchParamsList[0].hStream, false, &a});
}

static CUresult do_graph(const struct launch *l)
{
    return vc_real.cuGraphLaunch((CUgraphExec)l->key, l->stream);
}

static CUresult do_graph_ptsz(const struct launch *l)
{
    return vc_real.cuGraphLaunch_ptsz((CUgraphExec)l->key, l->stream);
}

/* A graph launch maps its memory nodes' memory when it is not mapped yet: that must fit the
 * quota first (hook-graph.c). */
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    VC_NEED_REAL(cuGraphLaunch);
    struct vc_graph_pending gp;
    CUresult r = vc_graph_map_begin(hGraphExec, "cuGraphLaunch (graph memory)", &gp);
    if (VC_UNLIKELY(r != CUDA_SUCCESS))
        return r;
    if (VC_LIKELY(!paced()))
        r = vc_real.cuGraphLaunch(hGraphExec, hStream);
    else
        r = launch_paced(&(struct launch){do_graph, (uintptr_t)hGraphExec, hStream, false, NULL});
    vc_graph_map_end(&gp, r);
    return r;
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    VC_NEED_REAL(cuGraphLaunch_ptsz);
    struct vc_graph_pending gp;
    CUresult r = vc_graph_map_begin(hGraphExec, "cuGraphLaunch (graph memory)", &gp);
    if (VC_UNLIKELY(r != CUDA_SUCCESS))
        return r;
    if (VC_LIKELY(!paced()))
        r = vc_real.cuGraphLaunch_ptsz(hGraphExec, hStream);
    else
        r = launch_paced(
            &(struct launch){do_graph_ptsz, (uintptr_t)hGraphExec, hStream, true, NULL});
    vc_graph_map_end(&gp, r);
    return r;
}

/* ---- for the rest of libvcuda ---- */

void vc_launch_atfork_child(void)
{
    /* The mode is re-decided with the child's slot; the pacer starts over (pacer_get). */
    atomic_store_explicit(&launch_mode, MODE_UNKNOWN, memory_order_relaxed);
    atomic_store_explicit(&pacer_ready, 0, memory_order_relaxed);
    pthread_mutex_init(&pacer_lock, NULL);
}

void vc_launch_exit(void)
{
    /* Most programs synchronize before they exit: their last launches are done, and settling
     * them makes the region's measured time whole. What is still running stays charged at its
     * estimate (pace_slot_retire, at the slot's release). */
    if (atomic_load_explicit(&pacer_ready, memory_order_acquire) == 1)
        pace_flight_harvest(&pacer.flight, measure_cb, &pacer, false);
}

void vc_launch_ctx_closing(CUcontext ctx)
{
    if (atomic_load_explicit(&pacer_ready, memory_order_acquire) != 1)
        return;
    struct pacer *p = &pacer;
    /* Settle what has finished while its events can still be read, then drop the events made
     * in that context (all of them for ctx NULL) before the driver frees the context under
     * them; launches in flight keep theirs and are settled at their estimate if they fail. */
    pace_flight_harvest(&p->flight, measure_cb, p, false);
    for (unsigned i = 0; i < PACE_FLIGHT_SLOTS; i++) {
        if (!p->ev[i].ctx || (ctx && p->ev[i].ctx != ctx) || !pace_flight_hold(&p->flight, i))
            continue;
        vc_real.cuEventDestroy_v2(p->ev[i].start);
        vc_real.cuEventDestroy_v2(p->ev[i].end);
        p->ev[i].ctx = NULL;
        pace_flight_unhold(&p->flight, i);
    }
}
