/* stub-cuda.c — a do-nothing libcuda.so.1 for bench/vcuda-mem: allocations
 * hand out addresses and cost nothing, so the difference between a run with
 * and without libvcuda is libvcuda's own cost per call. */
#include "cuda_api.h"

#include <stdint.h>

#define STUB __attribute__((visibility("default")))

static _Thread_local CUcontext current;
static uint64_t next_ptr = 1ull << 40;

STUB CUresult cuInit(unsigned int f)
{
    (void)f;
    return CUDA_SUCCESS;
}

STUB CUresult cuDeviceGet(CUdevice *d, int o)
{
    *d = o;
    return CUDA_SUCCESS;
}

STUB CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    (void)d;
    *c = (CUcontext)(uintptr_t)0x1000;
    return CUDA_SUCCESS;
}

STUB CUresult cuCtxSetCurrent(CUcontext c)
{
    current = c;
    return CUDA_SUCCESS;
}

STUB CUresult cuCtxGetCurrent(CUcontext *c)
{
    *c = current;
    return CUDA_SUCCESS;
}

STUB CUresult cuCtxGetDevice(CUdevice *d)
{
    *d = 0;
    return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

STUB CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    *p = __atomic_fetch_add(&next_ptr, (n + 511) / 512 * 512, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

STUB CUresult cuMemFree_v2(CUdeviceptr p)
{
    (void)p;
    return CUDA_SUCCESS;
}

STUB CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    (void)d;
    *bytes = 80ull << 30;
    return CUDA_SUCCESS;
}
