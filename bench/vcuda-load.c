/* vcuda-load.c — a GPU workload for the compute-share benchmark, the integration test and the
 * real-GPU script: spin kernels of a chosen length launched asynchronously, or CUDA graphs of
 * them replayed with a synchronize after each, for a time or a count. It reaches the driver the
 * way NVIDIA's runtime does (dlopen("libcuda.so.1"), entry points by dlsym), so under
 * LD_PRELOAD=libvcuda.so every launch goes through libvcuda's hooks. libc + libdl only: it builds
 * on a GPU machine with gcc alone and runs on the emulator or a real driver alike.
 *
 *   vcuda-load [--graph] [--work] [--kernel-us N] [--nodes K] [--seconds S] [--warmup S]
 *              [--launches N] [--depth K] [--sync-every K] [--overhead N] [--api NAME]
 *
 * --work launches a kernel that is not a spin kernel (`work`, empty) instead: the emulator runs
 * it for ACCEL_EMU_KERNEL_US (the caller sets it to --kernel-us) as work-bound time, which
 * another process's time slices stretch, where a spin kernel is clock-bound
 * (docs/emulator-cuda.md, "Time slicing between processes"). Emulator only: on a real GPU the
 * empty kernel takes microseconds.
 *
 * --marks: SIGUSR1 marks the start of a measuring window and SIGTERM ends the run (instead of
 * killing it); the line then adds window_kernel_ms (the kernels launched in the window times
 * their length: the GPU time they stand for, as a rate on a real GPU measures it) and
 * window_seconds.
 *
 * --api picks the entry point kernels go through: kernel (cuLaunchKernel, the default),
 * kernel_ptsz, ex (cuLaunchKernelEx), ex_ptsz, coop (cuLaunchCooperativeKernel), coop_ptsz; with
 * --graph: graph (cuGraphLaunch, the default) or graph_ptsz. The _ptsz forms use the per-thread
 * default stream.
 *
 * Kernels are launched asynchronously with at most --depth (default 16) in flight: before
 * launch i the program waits for the event it recorded after launch i - K, as a framework that
 * runs ahead of the GPU does, so the queue never drains while the host waits. --sync-every K
 * instead synchronizes the stream after every K launches (the queue drains each time).
 *
 * Prints one line: mode=... launches=N kernels=N seconds=T rate=kernels/s [launch_ns=...].
 * --overhead N times N launches of empty spin kernels (0 cycles) and reports the mean cost of
 * one cuLaunchKernel call in launch_ns. */
#include "cuda_api.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A kernel that spins for its first parameter in SM clock cycles. The emulator runs any kernel
 * named spin* for that many cycles at its SM clock; a real GPU runs this PTX. */
static const char spin_ptx[] = ".version 7.0\n"
                               ".target sm_70\n"
                               ".address_size 64\n"
                               ".visible .entry spin(.param .u64 cycles)\n"
                               "{\n"
                               "    .reg .u64 %rd<5>;\n"
                               "    .reg .pred %p;\n"
                               "    ld.param.u64 %rd1, [cycles];\n"
                               "    mov.u64 %rd2, %clock64;\n"
                               "LOOP:\n"
                               "    mov.u64 %rd3, %clock64;\n"
                               "    sub.u64 %rd4, %rd3, %rd2;\n"
                               "    setp.lt.u64 %p, %rd4, %rd1;\n"
                               "    @%p bra LOOP;\n"
                               "    ret;\n"
                               "}\n"
                               ".visible .entry work(.param .u64 unused)\n"
                               "{\n"
                               "    ret;\n"
                               "}\n";

#define FN(n) static __typeof__(n) *p_##n
FN(cuInit);
FN(cuDeviceGet);
FN(cuDeviceGetAttribute);
FN(cuDevicePrimaryCtxRetain);
FN(cuCtxSetCurrent);
FN(cuModuleLoadData);
FN(cuModuleGetFunction);
FN(cuStreamCreate);
FN(cuStreamSynchronize);
FN(cuLaunchKernel);
FN(cuStreamBeginCapture_v2);
FN(cuStreamEndCapture);
FN(cuGraphInstantiateWithFlags);
FN(cuGraphLaunch);
FN(cuCtxSynchronize);
FN(cuLaunchKernel_ptsz);
FN(cuLaunchKernelEx);
FN(cuLaunchKernelEx_ptsz);
FN(cuLaunchCooperativeKernel);
FN(cuLaunchCooperativeKernel_ptsz);
FN(cuGraphLaunch_ptsz);
FN(cuStreamSynchronize_ptsz);
FN(cuEventCreate);
FN(cuEventDestroy_v2);
FN(cuGraphDestroy);
FN(cuGraphExecDestroy);
FN(cuStreamDestroy_v2);
FN(cuModuleUnload);
FN(cuDevicePrimaryCtxRelease_v2);
FN(cuEventRecord);
FN(cuEventSynchronize);

static void *lib;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "vcuda-load: %s not found in libcuda.so.1\n", name);
        exit(2);
    }
    return p;
}

#define LOAD(n) p_##n = (__typeof__(p_##n))sym(#n)
/* Only needed for some --api choices: checked where used. */
#define LOAD_OPT(n) p_##n = (__typeof__(p_##n))dlsym(lib, #n)

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "vcuda-load: %s failed: CUDA error %d\n", what, (int)r);
        exit(1);
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *api = "";
static volatile sig_atomic_t mark_req, stop_req;

static void on_mark(int sig)
{
    (void)sig;
    mark_req = 1;
}

static void on_stop(int sig)
{
    (void)sig;
    stop_req = 1;
}
static CUfunction spin;
static CUstream stream;
static int sms = 1;

/* One kernel launch through the entry point --api names. */
static CUresult launch(void **params)
{
    bool ptsz = strstr(api, "_ptsz") != NULL;
    CUstream s = ptsz ? NULL : stream; /* _ptsz: the per-thread default stream */
    if (!strncmp(api, "ex", 2)) {
        CUlaunchConfig cfg = {.gridDimX = (unsigned)sms,
                              .gridDimY = 1,
                              .gridDimZ = 1,
                              .blockDimX = 32,
                              .blockDimY = 1,
                              .blockDimZ = 1,
                              .hStream = s};
        return ptsz ? p_cuLaunchKernelEx_ptsz(&cfg, spin, params, NULL)
                    : p_cuLaunchKernelEx(&cfg, spin, params, NULL);
    }
    if (!strncmp(api, "coop", 4))
        return ptsz
                   ? p_cuLaunchCooperativeKernel_ptsz(spin, (unsigned)sms, 1, 1, 32, 1, 1, 0, s,
                                                      params)
                   : p_cuLaunchCooperativeKernel(spin, (unsigned)sms, 1, 1, 32, 1, 1, 0, s, params);
    return ptsz ? p_cuLaunchKernel_ptsz(spin, (unsigned)sms, 1, 1, 32, 1, 1, 0, s, params, NULL)
                : p_cuLaunchKernel(spin, (unsigned)sms, 1, 1, 32, 1, 1, 0, s, params, NULL);
}

static unsigned long long arg_u64(const char *s, const char *opt)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end) {
        fprintf(stderr, "vcuda-load: %s wants a number, not '%s'\n", opt, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    bool graph = false, work = false, marks = false;
    uint64_t kernel_us = 50, nodes = 10, seconds = 5, max_launches = 0, sync_every = 0, warmup = 0;
    uint64_t depth = 16;
    uint64_t overhead = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--graph")) {
            graph = true;
            continue;
        }
        if (!strcmp(a, "--work")) {
            work = true;
            continue;
        }
        if (!strcmp(a, "--marks")) {
            struct sigaction sa = {.sa_handler = on_mark};
            sigaction(SIGUSR1, &sa, NULL);
            sa.sa_handler = on_stop;
            sigaction(SIGTERM, &sa, NULL);
            marks = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "usage: vcuda-load [--graph] [--work] [--kernel-us N] [--nodes K] "
                            "[--seconds S] [--warmup S] [--launches N] [--sync-every K] "
                            "[--overhead N]\n");
            return 2;
        }
        if (!strcmp(a, "--kernel-us"))
            kernel_us = arg_u64(v, a);
        else if (!strcmp(a, "--nodes"))
            nodes = arg_u64(v, a);
        else if (!strcmp(a, "--seconds"))
            seconds = arg_u64(v, a);
        else if (!strcmp(a, "--warmup"))
            warmup = arg_u64(v, a);
        else if (!strcmp(a, "--launches"))
            max_launches = arg_u64(v, a);
        else if (!strcmp(a, "--sync-every"))
            sync_every = arg_u64(v, a);
        else if (!strcmp(a, "--depth"))
            depth = arg_u64(v, a);
        else if (!strcmp(a, "--api"))
            api = v;
        else if (!strcmp(a, "--overhead"))
            overhead = arg_u64(v, a);
        else {
            fprintf(stderr, "vcuda-load: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (nodes == 0 || nodes > 1000)
        nodes = 10;

    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "vcuda-load: %s\n", dlerror());
        return 2;
    }
    LOAD(cuInit);
    LOAD(cuDeviceGet);
    LOAD(cuDeviceGetAttribute);
    LOAD(cuDevicePrimaryCtxRetain);
    LOAD(cuCtxSetCurrent);
    LOAD(cuModuleLoadData);
    LOAD(cuModuleGetFunction);
    LOAD(cuStreamCreate);
    LOAD(cuStreamSynchronize);
    LOAD(cuLaunchKernel);
    LOAD(cuStreamBeginCapture_v2);
    LOAD(cuStreamEndCapture);
    LOAD(cuGraphInstantiateWithFlags);
    LOAD(cuGraphLaunch);
    LOAD(cuCtxSynchronize);
    LOAD_OPT(cuLaunchKernel_ptsz);
    LOAD_OPT(cuLaunchKernelEx);
    LOAD_OPT(cuLaunchKernelEx_ptsz);
    LOAD_OPT(cuLaunchCooperativeKernel);
    LOAD_OPT(cuLaunchCooperativeKernel_ptsz);
    LOAD_OPT(cuGraphLaunch_ptsz);
    LOAD_OPT(cuStreamSynchronize_ptsz);
    /* the entry points --api asks for must exist */
    static const char *const need[][2] = {
        {"kernel_ptsz", "cuLaunchKernel_ptsz"},
        {"ex", "cuLaunchKernelEx"},
        {"ex_ptsz", "cuLaunchKernelEx_ptsz"},
        {"coop", "cuLaunchCooperativeKernel"},
        {"coop_ptsz", "cuLaunchCooperativeKernel_ptsz"},
        {"graph_ptsz", "cuGraphLaunch_ptsz"},
        {"graph_ptsz", "cuStreamSynchronize_ptsz"},
        {"kernel_ptsz", "cuStreamSynchronize_ptsz"},
        {"ex_ptsz", "cuStreamSynchronize_ptsz"},
        {"coop_ptsz", "cuStreamSynchronize_ptsz"},
    };
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
        if (!strcmp(api, need[i][0]))
            (void)sym(need[i][1]);
    LOAD(cuEventCreate);
    LOAD(cuEventDestroy_v2);
    LOAD(cuGraphDestroy);
    LOAD(cuGraphExecDestroy);
    LOAD(cuStreamDestroy_v2);
    LOAD(cuModuleUnload);
    LOAD(cuDevicePrimaryCtxRelease_v2);
    LOAD(cuEventRecord);
    LOAD(cuEventSynchronize);

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    int clock_khz = 0;
    check(p_cuInit(0), "cuInit");
    check(p_cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(p_cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev), "clock rate");
    check(p_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "SMs");
    check(p_cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(p_cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(p_cuModuleLoadData(&mod, spin_ptx), "cuModuleLoadData");
    check(p_cuModuleGetFunction(&spin, mod, work ? "work" : "spin"), "cuModuleGetFunction");
    check(p_cuStreamCreate(&stream, 0), "cuStreamCreate");

    /* One block per SM: the whole GPU is busy while a kernel runs. */
    uint64_t per_kernel_us = graph ? (kernel_us + nodes - 1) / nodes : kernel_us;
    uint64_t cycles = per_kernel_us * (uint64_t)clock_khz / 1000u;
    void *params[] = {&cycles};

    if (overhead) {
        uint64_t zero = 0;
        void *zp[] = {&zero};
        check(p_cuLaunchKernel(spin, (unsigned)sms, 1, 1, 32, 1, 1, 0, stream, zp, NULL),
              "warm-up");
        check(p_cuStreamSynchronize(stream), "sync");
        uint64_t t0 = now_ns();
        for (uint64_t i = 0; i < overhead; i++)
            check(p_cuLaunchKernel(spin, (unsigned)sms, 1, 1, 32, 1, 1, 0, stream, zp, NULL),
                  "cuLaunchKernel");
        uint64_t t1 = now_ns();
        check(p_cuStreamSynchronize(stream), "sync");
        printf("mode=overhead launches=%llu launch_ns=%.1f\n", (unsigned long long)overhead,
               (double)(t1 - t0) / (double)overhead);
        p_cuStreamDestroy_v2(stream);
        p_cuModuleUnload(mod);
        p_cuDevicePrimaryCtxRelease_v2(dev);
        return 0;
    }

    CUgraphExec exec = NULL;
    CUgraph g = NULL;
    if (graph) {
        check(p_cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "begin capture");
        for (uint64_t i = 0; i < nodes; i++)
            check(p_cuLaunchKernel(spin, (unsigned)sms, 1, 1, 32, 1, 1, 0, stream, params, NULL),
                  "captured launch");
        check(p_cuStreamEndCapture(stream, &g), "end capture");
        check(p_cuGraphInstantiateWithFlags(&exec, g, 0), "instantiate");
    }

    CUevent ring[256];
    if (depth > 256)
        depth = 256;
    if (sync_every)
        depth = 0;
    for (uint64_t i = 0; i < depth; i++)
        check(p_cuEventCreate(&ring[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");

    /* --warmup S: S seconds run first and are not counted (libvcuda's pacing settles in) */
    uint64_t launches = 0, t0 = now_ns() + warmup * 1000000000ull, first = 0;
    uint64_t deadline = t0 + seconds * 1000000000ull;
    bool counting = warmup == 0 || max_launches;
    uint64_t mark_launches = 0, mark_t = 0, stop_t = 0;
    for (;;) {
        if (mark_req && !mark_t) {
            mark_launches = launches;
            mark_t = now_ns();
        }
        if (stop_req) {
            stop_t = now_ns();
            break;
        }
        bool ptsz = strstr(api, "_ptsz") != NULL;
        if (graph && ptsz) {
            check(p_cuGraphLaunch_ptsz(exec, NULL), "cuGraphLaunch_ptsz");
            check(p_cuStreamSynchronize_ptsz(NULL), "sync");
        } else if (graph) {
            check(p_cuGraphLaunch(exec, stream), "cuGraphLaunch");
            check(p_cuStreamSynchronize(stream), "sync");
        } else {
            if (depth && launches >= depth)
                check(p_cuEventSynchronize(ring[launches % depth]), "cuEventSynchronize");
            check(launch(params), "launch");
            if (depth)
                check(p_cuEventRecord(ring[launches % depth], ptsz ? CU_STREAM_PER_THREAD : stream),
                      "cuEventRecord");
            if (sync_every && (launches + 1) % sync_every == 0)
                check(ptsz ? p_cuStreamSynchronize_ptsz(NULL) : p_cuStreamSynchronize(stream),
                      "sync");
        }
        launches++;
        uint64_t now = now_ns();
        if (!counting && now >= t0) {
            counting = true;
            first = launches;
            t0 = now;
        }
        if (max_launches ? launches >= max_launches : now >= deadline)
            break;
    }
    check(p_cuCtxSynchronize(), "cuCtxSynchronize");
    if (max_launches)
        t0 -= warmup * 1000000000ull;
    double secs = (double)(now_ns() - t0) / 1e9;
    uint64_t kernels = graph ? (launches - first) * nodes : launches - first;
    printf("mode=%s launches=%llu kernels=%llu seconds=%.3f rate=%.1f", graph ? "graph" : "kernel",
           (unsigned long long)(launches - first), (unsigned long long)kernels, secs,
           (double)kernels / secs);
    if (marks && mark_t && stop_t > mark_t) {
        uint64_t win = launches - mark_launches;
        printf(" window_kernel_ms=%.3f window_seconds=%.3f",
               (double)(graph ? win * nodes : win) * (double)per_kernel_us / 1000.0,
               (double)(stop_t - mark_t) / 1e9);
    }
    printf("\n");
    for (uint64_t i = 0; i < depth; i++)
        p_cuEventDestroy_v2(ring[i]);
    if (graph) {
        p_cuGraphExecDestroy(exec);
        p_cuGraphDestroy(g);
    }
    p_cuStreamDestroy_v2(stream);
    p_cuModuleUnload(mod);
    p_cuDevicePrimaryCtxRelease_v2(dev);
    return 0;
}
