/* spin.c — a PTX spin kernel timed with events, the same program on the emulator and on a
 * real GPU. The kernel loops on %clock64 until the number of SM cycles in its u64 parameter
 * has passed, so it runs cycles / SM clock: on accel-emu exactly, on a GPU within a few per
 * cent (the clock may sit below the maximum that CLOCK_RATE reports). Prints TAP; fails when
 * the measured time is not within 10 % of cycles / clock.
 *
 * Needs nothing but libc and libdl: the driver is dlopen'ed as "libcuda.so.1" and reached
 * through cuGetProcAddress_v2, as NVIDIA's runtime does. tests/gpu/spin.sh builds it with gcc
 * on a GPU machine; meson builds it with -DSPIN_EMU, which creates an emulated machine when
 * ACCEL_EMU_STATE is not set.
 *
 *   spin [milliseconds] [--blocks B] [--go] [--device N]
 *
 * --blocks B: a grid of B blocks of 1024 threads instead of one block of one thread; the
 * expected time is then waves x cycles / clock, waves = ceil(B / (resident blocks per SM x
 * MULTIPROCESSOR_COUNT)) (each block spins for the cycles; under MPS the count is the client's
 * share of the SMs). --go: after setup print "ready" and wait for a line on stdin before
 * launching (tests start several clients together). Line 2 names the SM count and the waves.
 * --repeat N: then N more launches of the same kernel, each waited for, and a comment line
 * "# repeat N p50 X p99 Y total Z" (ms, host clock from launch to completion: the latency a
 * caller sees, queueing behind other processes included) for bench/mps-sharing.py.
 * --gap MS: sleep MS milliseconds after each repeated launch (a duty cycle below 100 %, for
 * the exporter's per-process utilization test).
 * --device N: run on device N (default 0). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"

#ifdef SPIN_EMU
#include "state.h"
#endif

static const char ptx[] = ".version 7.0\n"
                          ".target sm_70\n"
                          ".address_size 64\n"
                          "\n"
                          ".visible .entry spin(\n"
                          "    .param .u64 spin_param_0\n"
                          ")\n"
                          "{\n"
                          "    .reg .pred %p<2>;\n"
                          "    .reg .b64 %rd<5>;\n"
                          "    ld.param.u64 %rd1, [spin_param_0];\n"
                          "    mov.u64 %rd2, %clock64;\n"
                          "$L_spin:\n"
                          "    mov.u64 %rd3, %clock64;\n"
                          "    sub.s64 %rd4, %rd3, %rd2;\n"
                          "    setp.lt.u64 %p1, %rd4, %rd1;\n"
                          "    @%p1 bra $L_spin;\n"
                          "    ret;\n"
                          "}\n";

static __typeof__(cuGetProcAddress_v2) *getproc;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *get(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (getproc(name, &fn, 12000, 0, &st) != CUDA_SUCCESS)
        return NULL;
    return fn;
}

static int fail(int n, const char *what, CUresult r)
{
    printf("not ok %d - %s (CUresult %d)\n", n, what, (int)r);
    return 1;
}

#define CALL(n, what, expr)                                                                        \
    do {                                                                                           \
        CUresult r_ = (expr);                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return fail(n, what, r_);                                                              \
    } while (0)

int main(int argc, char **argv)
{
    double want_ms = 200;
    unsigned blocks = 1, threads = 1;
    bool go = false;
    int repeat = 0, dev = 0;
    double gap_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--go") == 0) {
            go = true;
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            dev = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--gap") == 0 && i + 1 < argc) {
            gap_ms = atof(argv[++i]);
        } else if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) {
            blocks = (unsigned)atoi(argv[++i]);
            threads = 1024;
        } else {
            want_ms = atof(argv[i]);
        }
    }
    if (want_ms <= 0 || want_ms > 60000 || blocks < 1 || repeat < 0 || repeat > 100000 || dev < 0 ||
        !(gap_ms >= 0 && gap_ms <= 60000)) {
        fprintf(stderr, "usage: spin [milliseconds] [--blocks B] [--go] [--repeat N] [--gap MS] "
                        "[--device N]\n");
        return 2;
    }
#ifdef SPIN_EMU
    char dir[] = "/tmp/accel-spin-XXXXXX", path[64];
    bool own = false;
    if (!getenv("ACCEL_EMU_STATE")) {
        struct emu_config cfg;
        emu_config_init(&cfg);
        cfg.gpus = 1;
        cfg.model = "H100";
        if (!mkdtemp(dir))
            return 99;
        snprintf(path, sizeof(path), "%s/state", dir);
        if (emu_state_create(path, &cfg) < 0)
            return 99;
        setenv("ACCEL_EMU_STATE", path, 1);
        own = true;
    }
#endif
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("1..0 # SKIP no libcuda.so.1: %s\n", dlerror());
        return 77;
    }
    printf("1..2\n");
    getproc = (__typeof__(getproc))dlsym(lib, "cuGetProcAddress_v2");
    if (!getproc)
        return fail(1, "cuGetProcAddress_v2", CUDA_ERROR_NOT_FOUND);
    __typeof__(cuInit) *init = get("cuInit");
    __typeof__(cuDeviceGetAttribute) *attr = get("cuDeviceGetAttribute");
    __typeof__(cuDevicePrimaryCtxRetain) *retain = get("cuDevicePrimaryCtxRetain");
    __typeof__(cuCtxSetCurrent) *set_current = get("cuCtxSetCurrent");
    __typeof__(cuModuleLoadData) *load = get("cuModuleLoadData");
    __typeof__(cuModuleGetFunction) *getfn = get("cuModuleGetFunction");
    __typeof__(cuStreamCreate) *stream_create = get("cuStreamCreate");
    __typeof__(cuEventCreate) *event_create = get("cuEventCreate");
    __typeof__(cuEventRecord) *record = get("cuEventRecord");
    __typeof__(cuEventSynchronize) *event_sync = get("cuEventSynchronize");
    __typeof__(cuEventElapsedTime_v2) *elapsed = get("cuEventElapsedTime");
    __typeof__(cuLaunchKernel) *launch = get("cuLaunchKernel");
    __typeof__(cuEventDestroy_v2) *event_destroy = get("cuEventDestroy");
    __typeof__(cuStreamDestroy_v2) *stream_destroy = get("cuStreamDestroy");
    __typeof__(cuModuleUnload) *unload = get("cuModuleUnload");
    __typeof__(cuDevicePrimaryCtxRelease_v2) *release = get("cuDevicePrimaryCtxRelease");
    __typeof__(cuOccupancyMaxActiveBlocksPerMultiprocessor) *occupancy =
        get("cuOccupancyMaxActiveBlocksPerMultiprocessor");
    if (!init || !attr || !retain || !set_current || !load || !getfn || !stream_create ||
        !event_create || !record || !event_sync || !elapsed || !launch || !event_destroy ||
        !stream_destroy || !unload || !release || !occupancy)
        return fail(1, "driver entry points", CUDA_ERROR_NOT_FOUND);

    CUcontext ctx;
    CUmodule mod;
    CUfunction spin;
    CUstream s;
    CUevent e0, e1;
    int khz = 0;
    CALL(1, "cuInit", init(0));
    CALL(1, "clock rate", attr(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    CALL(1, "primary context", retain(&ctx, dev));
    CALL(1, "current context", set_current(ctx));
    CALL(1, "PTX module", load(&mod, ptx));
    CALL(1, "spin function", getfn(&spin, mod, "spin"));
    CALL(1, "stream", stream_create(&s, 0));
    CALL(1, "events", event_create(&e0, 0));
    CALL(1, "events", event_create(&e1, 0));
    printf("ok 1 - spin kernel loaded from PTX (SM clock %d kHz)\n", khz);

    uint64_t warm = (uint64_t)khz; /* 1 ms: the GPU leaves idle clocks, the JIT is done */
    void *wargs[] = {&warm};
    CALL(2, "warm-up launch", launch(spin, 1, 1, 1, 1, 1, 1, 0, s, wargs, NULL));
    /* an event after the warm-up: e0 below then marks the start of the timed kernel, not the
     * warm-up's end (on accel-emu an event recorded right after work takes that work's end,
     * which with --go may be long before the kernel runs) */
    CALL(2, "record", record(e1, s));
    int sms = 0, per_sm = 0;
    CALL(2, "SM count", attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CALL(2, "occupancy", occupancy(&per_sm, spin, (int)threads, 0));
    if (sms < 1 || per_sm < 1)
        return fail(2, "SM count or occupancy below 1", CUDA_ERROR_INVALID_VALUE);
    uint64_t room = (uint64_t)sms * (uint64_t)per_sm, waves = (blocks + room - 1) / room;
    uint64_t cycles = (uint64_t)(want_ms * khz);
    void *args[] = {&cycles};
    if (go) {
        char line[16];
        printf("# ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof(line), stdin))
            return fail(2, "no go line on stdin", CUDA_ERROR_INVALID_VALUE);
    }
    CALL(2, "record", record(e0, s));
    CALL(2, "launch", launch(spin, blocks, 1, 1, threads, 1, 1, 0, s, args, NULL));
    CALL(2, "record", record(e1, s));
    CALL(2, "synchronize", event_sync(e1));
    float ms = 0;
    CALL(2, "elapsed", elapsed(&ms, e0, e1));
    double expect = (double)cycles / khz * (double)waves;
    double err = (ms - expect) / expect;
    printf("%s 2 - %llu cycles x %llu wave(s) (%u blocks, %d SMs) took %.3f ms, "
           "expected %.3f ms (%+.2f %%)\n",
           err > -0.10 && err < 0.10 ? "ok" : "not ok", (unsigned long long)cycles,
           (unsigned long long)waves, blocks, sms, ms, expect, 100 * err);
    if (repeat > 0) {
        double *lat = calloc((size_t)repeat, sizeof(*lat));
        if (!lat)
            return 99;
        double t_all = now_ms();
        for (int i = 0; i < repeat; i++) {
            double t0 = now_ms();
            CALL(2, "launch", launch(spin, blocks, 1, 1, threads, 1, 1, 0, s, args, NULL));
            CALL(2, "record", record(e1, s));
            CALL(2, "synchronize", event_sync(e1));
            lat[i] = now_ms() - t0;
            if (gap_ms > 0) {
                struct timespec ts = {
                    (time_t)(gap_ms / 1000),
                    (long)((gap_ms - 1000 * (double)(time_t)(gap_ms / 1000)) * 1e6)};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                    ;
            }
        }
        t_all = now_ms() - t_all;
        qsort(lat, (size_t)repeat, sizeof(*lat), cmp_double);
        printf("# repeat %d p50 %.3f p99 %.3f total %.3f\n", repeat, lat[repeat / 2],
               lat[(repeat * 99 + 99) / 100 - 1], t_all);
        free(lat);
    }
    event_destroy(e0);
    event_destroy(e1);
    stream_destroy(s);
    unload(mod);
    release(dev);
#ifdef SPIN_EMU
    if (own) {
        unlink(path);
        rmdir(dir);
    }
#endif
    return err > -0.10 && err < 0.10 ? 0 : 1;
}
