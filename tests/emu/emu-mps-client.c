/* emu-mps-client — a CUDA process for the MPS limit tests: dlopens libcuda.so.1 (the
 * emulator's, by library path), creates a context on DEVICE, allocates each MIB in turn
 * (keeping what succeeded), and prints one line per allocation ("ok" or "error N") and then
 * "total BYTES" from cuMemGetInfo. Not a test itself.
 * Usage: emu-mps-client DEVICE MIB... */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_api.h"

#define LOAD(h, name) __typeof__(name) *p_##name = (__typeof__(name) *)dlsym(h, #name)

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: emu-mps-client DEVICE MIB...\n");
        return 2;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "emu-mps-client: %s\n", dlerror());
        return 1;
    }
    LOAD(h, cuInit);
    LOAD(h, cuDeviceGet);
    LOAD(h, cuCtxCreate_v2);
    LOAD(h, cuMemAlloc_v2);
    LOAD(h, cuMemGetInfo_v2);
    CUdevice dev;
    CUcontext ctx;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (!p_cuInit || !p_cuDeviceGet || !p_cuCtxCreate_v2 || !p_cuMemAlloc_v2 ||
        !p_cuMemGetInfo_v2 || (r = p_cuInit(0)) != CUDA_SUCCESS ||
        (r = p_cuDeviceGet(&dev, atoi(argv[1]))) != CUDA_SUCCESS ||
        (r = p_cuCtxCreate_v2(&ctx, 0, dev)) != CUDA_SUCCESS) {
        fprintf(stderr, "emu-mps-client: CUDA setup failed (CUresult %d)\n", (int)r);
        return 1;
    }
    for (int i = 2; i < argc; i++) {
        CUdeviceptr p;
        r = p_cuMemAlloc_v2(&p, (size_t)atoi(argv[i]) << 20);
        if (r == CUDA_SUCCESS)
            printf("ok\n");
        else
            printf("error %d\n", (int)r);
    }
    size_t free_b = 0, total = 0;
    if (p_cuMemGetInfo_v2(&free_b, &total) != CUDA_SUCCESS)
        return 1;
    printf("total %zu\n", total);
    return 0;
}
