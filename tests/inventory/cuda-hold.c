/*
 * cuda-hold — makes this process a GPU compute process that holds device memory, for checks
 * of NVML's running-process list: dlopens libcuda.so.1 (the driver's or the emulator's),
 * creates a context on the given device, allocates MIB MiB, prints "ready <pid>" and waits
 * until stdin closes. With NPROC > 1 it first forks into NPROC such processes (one line each):
 * the stride detection needs two processes to learn anything. libc-only, using our own
 * cuda_api.h.
 * Usage: cuda-hold DEVICE MIB [NPROC]
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_api.h"

#define LOAD(h, name)                                                                              \
    __typeof__(name) *p_##name = (__typeof__(name) *)dlsym(h, #name);                              \
    if (!p_##name) {                                                                               \
        fprintf(stderr, "cuda-hold: libcuda.so.1 lacks " #name "\n");                              \
        return 1;                                                                                  \
    }

int main(int argc, char **argv)
{
    void *h;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    CUresult r;
    char c;
    int nproc = argc > 3 ? atoi(argv[3]) : 1;
    bool child = false;

    if (argc < 3 || argc > 4 || nproc < 1 || nproc > 16) {
        fprintf(stderr, "usage: cuda-hold DEVICE MIB [NPROC]\n");
        return 2;
    }
    /* Fork before any CUDA call: a context does not survive fork. */
    for (int i = 1; i < nproc && !child; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("cuda-hold: fork");
            return 1;
        }
        child = pid == 0;
    }
    h = dlopen(getenv("ACCEL_CUDA_LIBRARY") ? getenv("ACCEL_CUDA_LIBRARY") : "libcuda.so.1",
               RTLD_NOW);
    if (!h) {
        fprintf(stderr, "cuda-hold: %s\n", dlerror());
        return 1;
    }
    LOAD(h, cuInit);
    LOAD(h, cuDeviceGet);
    LOAD(h, cuDevicePrimaryCtxRetain);
    LOAD(h, cuCtxSetCurrent);
    LOAD(h, cuMemAlloc_v2);
    if ((r = p_cuInit(0)) != CUDA_SUCCESS || (r = p_cuDeviceGet(&dev, atoi(argv[1]))) ||
        (r = p_cuDevicePrimaryCtxRetain(&ctx, dev)) || (r = p_cuCtxSetCurrent(ctx)) ||
        (r = p_cuMemAlloc_v2(&p, (size_t)atoi(argv[2]) << 20))) {
        fprintf(stderr, "cuda-hold: CUDA error %d\n", (int)r);
        return 1;
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    while (read(0, &c, 1) > 0)
        ;
    if (!child)
        while (wait(NULL) > 0)
            ;
    return 0;
}
