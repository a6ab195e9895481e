/* bench-emu-cuda.c — what the emulated libcuda.so.1 costs the host: a kernel launch (queueing
 * on the shared timeline), an event pair with its elapsed time, a cuMemAlloc/cuMemFree pair
 * (charging the shared state), a cuMemGetInfo (summing every process's charges). Creates its
 * own emulated machine in a temporary directory; needs build/src/emu on LD_LIBRARY_PATH.
 *
 *   LD_LIBRARY_PATH=build/src/emu build/bench/bench-emu-cuda [iterations] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "state.h"

static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                          ".visible .entry k()\n{\n ret;\n}\n";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define LOOKUP(var, name)                                                                          \
    __typeof__(var) *p_##var = NULL;                                                               \
    getproc(name, (void **)&p_##var, 12080, 0, NULL);                                              \
    if (!p_##var) {                                                                                \
        fprintf(stderr, "no %s\n", name);                                                          \
        return 1;                                                                                  \
    }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    if (n <= 0)
        return 2;
    char dir[] = "/tmp/accel-bench-emu-XXXXXX", path[64];
    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/state", dir);
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 1;
    if (emu_state_create(path, &cfg) < 0)
        return 1;
    setenv("ACCEL_EMU_STATE", path, 1);
    setenv("ACCEL_EMU_KERNEL_US", "1", 1);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    __typeof__(cuGetProcAddress_v2) *getproc =
        (__typeof__(getproc))dlsym(lib, "cuGetProcAddress_v2");
    LOOKUP(cuInit, "cuInit");
    LOOKUP(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    LOOKUP(cuCtxSetCurrent, "cuCtxSetCurrent");
    LOOKUP(cuModuleLoadData, "cuModuleLoadData");
    LOOKUP(cuModuleGetFunction, "cuModuleGetFunction");
    LOOKUP(cuLaunchKernel, "cuLaunchKernel");
    LOOKUP(cuCtxSynchronize, "cuCtxSynchronize");
    LOOKUP(cuEventCreate, "cuEventCreate");
    LOOKUP(cuEventRecord, "cuEventRecord");
    LOOKUP(cuEventElapsedTime_v2, "cuEventElapsedTime");
    LOOKUP(cuMemAlloc_v2, "cuMemAlloc");
    LOOKUP(cuMemFree_v2, "cuMemFree");
    LOOKUP(cuMemGetInfo_v2, "cuMemGetInfo");
    CUcontext ctx;
    CUmodule mod;
    CUfunction k;
    CUevent e0, e1;
    if (p_cuInit(0) || p_cuDevicePrimaryCtxRetain(&ctx, 0) || p_cuCtxSetCurrent(ctx) ||
        p_cuModuleLoadData(&mod, ptx) || p_cuModuleGetFunction(&k, mod, "k") ||
        p_cuEventCreate(&e0, 0) || p_cuEventCreate(&e1, 0))
        return 1;

    double t = now_s();
    for (int i = 0; i < n; i++)
        p_cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    double launch = (now_s() - t) / n;
    p_cuCtxSynchronize();

    t = now_s();
    float ms;
    for (int i = 0; i < n; i++) {
        p_cuEventRecord(e0, NULL);
        p_cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        p_cuEventRecord(e1, NULL);
    }
    double paced = (now_s() - t) / n;
    p_cuCtxSynchronize();
    p_cuEventElapsedTime_v2(&ms, e0, e1);

    CUdeviceptr d;
    t = now_s();
    for (int i = 0; i < n; i++) {
        p_cuMemAlloc_v2(&d, 1 << 20);
        p_cuMemFree_v2(d);
    }
    double alloc = (now_s() - t) / n;

    size_t fr, tot;
    t = now_s();
    for (int i = 0; i < n; i++)
        p_cuMemGetInfo_v2(&fr, &tot);
    double info = (now_s() - t) / n;

    printf("iterations                          %d\n", n);
    printf("cuLaunchKernel                      %.2f us\n", launch * 1e6);
    printf("record + launch + record            %.2f us (last pair: %.4f ms, kernel 1 us)\n",
           paced * 1e6, ms);
    printf("cuMemAlloc + cuMemFree (1 MiB)      %.2f us\n", alloc * 1e6);
    printf("cuMemGetInfo                        %.2f us\n", info * 1e6);
    unlink(path);
    rmdir(dir);
    return 0;
}
