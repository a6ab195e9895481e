/* static-dlopen.c — a statically linked program (gcc -static) that dlopens the emulated
 * libcuda.so.1 and uses what lives in its thread-local variables: the context stack (create,
 * push, pop, set), the per-thread default stream (a launch on CU_STREAM_PER_THREAD and its
 * synchronize), the stream-capture mode, and all of it again from a second thread. Before the
 * emulator's TLS used the initial-exec model this crashed in cuda_ctx.c on the first context
 * (see EMU_TLS in src/emu/cuda_emu.h). Prints TAP; needs ACCEL_EMU_STATE and LD_LIBRARY_PATH
 * naming build/src/emu (run by the test emu-static-dlopen). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"

static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                          ".visible .entry spin(.param .u64 p)\n{\n ret;\n}\n";

static __typeof__(cuInit) *p_cuInit;
static __typeof__(cuDeviceGet) *p_cuDeviceGet;
static __typeof__(cuCtxCreate_v2) *p_cuCtxCreate;
static __typeof__(cuCtxGetCurrent) *p_cuCtxGetCurrent;
static __typeof__(cuCtxSetCurrent) *p_cuCtxSetCurrent;
static __typeof__(cuCtxPushCurrent_v2) *p_cuCtxPushCurrent;
static __typeof__(cuCtxPopCurrent_v2) *p_cuCtxPopCurrent;
static __typeof__(cuCtxDestroy_v2) *p_cuCtxDestroy;
static __typeof__(cuModuleLoadData) *p_cuModuleLoadData;
static __typeof__(cuModuleGetFunction) *p_cuModuleGetFunction;
static __typeof__(cuLaunchKernel) *p_cuLaunchKernel;
static __typeof__(cuStreamSynchronize) *p_cuStreamSynchronize;
static __typeof__(cuThreadExchangeStreamCaptureMode) *p_cuThreadExchangeStreamCaptureMode;

static int n_test, failed;

static void ok(int cond, const char *what)
{
    printf("%sok %d - %s\n", cond ? "" : "not ", ++n_test, what);
    fflush(stdout);
    failed |= !cond;
}

static CUcontext ctx;
static CUfunction fn;

/* Everything that touches this thread's TLS in the emulated driver. */
static void use_thread_state(const char *who)
{
    char what[128];
    CUcontext cur = NULL;
    snprintf(what, sizeof(what), "%s: cuCtxSetCurrent + cuCtxGetCurrent", who);
    ok(p_cuCtxSetCurrent(ctx) == CUDA_SUCCESS && p_cuCtxGetCurrent(&cur) == CUDA_SUCCESS &&
           cur == ctx,
       what);
    CUcontext popped = NULL;
    snprintf(what, sizeof(what), "%s: push and pop", who);
    ok(p_cuCtxPushCurrent(ctx) == CUDA_SUCCESS && p_cuCtxPopCurrent(&popped) == CUDA_SUCCESS &&
           popped == ctx,
       what);
    uint64_t cycles = 1000;
    void *args[] = {&cycles};
    snprintf(what, sizeof(what), "%s: launch on the per-thread default stream and wait", who);
    ok(p_cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, args, NULL) ==
               CUDA_SUCCESS &&
           p_cuStreamSynchronize(CU_STREAM_PER_THREAD) == CUDA_SUCCESS,
       what);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    snprintf(what, sizeof(what), "%s: capture mode is per thread", who);
    ok(p_cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS &&
           mode == CU_STREAM_CAPTURE_MODE_GLOBAL,
       what);
}

static void *thread_main(void *arg)
{
    use_thread_state("second thread");
    return arg;
}

#define LOAD(var, name)                                                                            \
    do {                                                                                           \
        *(void **)&var = dlsym(h, name);                                                           \
        if (!var) {                                                                                \
            printf("not ok 1 - dlsym %s\n", name);                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    printf("1..12\n");
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("not ok 1 - dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    LOAD(p_cuInit, "cuInit");
    LOAD(p_cuDeviceGet, "cuDeviceGet");
    LOAD(p_cuCtxCreate, "cuCtxCreate_v2");
    LOAD(p_cuCtxGetCurrent, "cuCtxGetCurrent");
    LOAD(p_cuCtxSetCurrent, "cuCtxSetCurrent");
    LOAD(p_cuCtxPushCurrent, "cuCtxPushCurrent_v2");
    LOAD(p_cuCtxPopCurrent, "cuCtxPopCurrent_v2");
    LOAD(p_cuCtxDestroy, "cuCtxDestroy_v2");
    LOAD(p_cuModuleLoadData, "cuModuleLoadData");
    LOAD(p_cuModuleGetFunction, "cuModuleGetFunction");
    LOAD(p_cuLaunchKernel, "cuLaunchKernel");
    LOAD(p_cuStreamSynchronize, "cuStreamSynchronize");
    LOAD(p_cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
    CUdevice dev;
    ok(p_cuInit(0) == CUDA_SUCCESS && p_cuDeviceGet(&dev, 0) == CUDA_SUCCESS, "cuInit");
    ok(p_cuCtxCreate(&ctx, 0, dev) == CUDA_SUCCESS, "cuCtxCreate (the first TLS access)");
    CUmodule mod;
    ok(p_cuModuleLoadData(&mod, ptx) == CUDA_SUCCESS &&
           p_cuModuleGetFunction(&fn, mod, "spin") == CUDA_SUCCESS,
       "module and function");
    if (failed)
        return 1;
    use_thread_state("main thread");
    pthread_t t;
    ok(pthread_create(&t, NULL, thread_main, NULL) == 0 && pthread_join(t, NULL) == 0,
       "second thread ran");
    return failed;
}
