/* emu-hold — a CUDA process for tests: dlopens libcuda.so.1 (the emulator's, by library
 * path), creates a context on DEVICE (which charges the context overhead, making this process
 * one the emulated NVML and MPS daemon list), allocates MIB MiB, prints "ready PID" and holds
 * all of it until stdin closes; an "alloc MIB" line allocates more and answers "ok" or
 * "error N". Not a test itself.
 * Usage: emu-hold DEVICE MIB */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_api.h"

#define LOAD(h, name) __typeof__(name) *p_##name = (__typeof__(name) *)dlsym(h, #name)

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: emu-hold DEVICE MIB\n");
        return 2;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "emu-hold: %s\n", dlerror());
        return 1;
    }
    LOAD(h, cuInit);
    LOAD(h, cuDeviceGet);
    LOAD(h, cuCtxCreate_v2);
    LOAD(h, cuMemAlloc_v2);
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr ptr;
    size_t mib = (size_t)atoi(argv[2]);
    if (!p_cuInit || !p_cuDeviceGet || !p_cuCtxCreate_v2 || !p_cuMemAlloc_v2 ||
        p_cuInit(0) != CUDA_SUCCESS || p_cuDeviceGet(&dev, atoi(argv[1])) != CUDA_SUCCESS ||
        p_cuCtxCreate_v2(&ctx, 0, dev) != CUDA_SUCCESS ||
        (mib && p_cuMemAlloc_v2(&ptr, mib << 20) != CUDA_SUCCESS)) {
        fprintf(stderr, "emu-hold: CUDA setup failed\n");
        return 1;
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    /* "alloc MIB" lines allocate more and answer "ok" or "error N"; other lines are ignored */
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        if (strncmp(line, "alloc ", 6) != 0)
            continue;
        CUdeviceptr more;
        CUresult r = p_cuMemAlloc_v2(&more, (size_t)atoi(line + 6) << 20);
        if (r == CUDA_SUCCESS)
            printf("ok\n");
        else
            printf("error %d\n", (int)r);
        fflush(stdout);
    }
    return 0;
}
