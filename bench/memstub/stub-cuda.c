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

/* For the managed-memory launch rows: a device that migrates managed pages on demand, kernels
 * of two 8-byte parameters, launches and advice that do nothing. */
STUB CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)a;
    (void)d;
    *v = 1;
    return CUDA_SUCCESS;
}

STUB CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags)
{
    (void)flags;
    *p = __atomic_fetch_add(&next_ptr, (n + (2u << 20) - 1) / (2u << 20) * (2u << 20),
                            __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

STUB CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise a, CUdevice d)
{
    (void)p;
    (void)n;
    (void)a;
    (void)d;
    return CUDA_SUCCESS;
}

STUB CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *off, size_t *size)
{
    (void)f;
    if (i >= 2)
        return CUDA_ERROR_INVALID_VALUE;
    *off = i * 8;
    if (size)
        *size = 8;
    return CUDA_SUCCESS;
}

STUB CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                             CUstream s, void **params, void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shm, (void)s;
    (void)params, (void)extra;
    return CUDA_SUCCESS;
}
