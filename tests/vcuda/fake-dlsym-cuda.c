/* fake-dlsym-cuda.c — a libcuda.so.1 for testing how libvcuda's cuGetProcAddress treats the
 * pointers a driver hands out (test-vcuda-dlsym-driver.c). FAKE_CUDA_MODE picks how its
 * cuGetProcAddress_v2 answers:
 *   unset          the entry point by name through dlsym(RTLD_DEFAULT), as a driver that does
 *                  not bind its own symbols would: under LD_PRELOAD=libvcuda.so that finds
 *                  libvcuda's wrapper, which hooked_variant() passes through;
 *   "exports"      the address of its own exported variant (what NVIDIA's driver and the
 *                  emulator do): libvcuda maps it to its wrapper of that variant;
 *   "trampolines"  a private function of its own, none of its exports: libvcuda must pick the
 *                  variant by (name, version, flags) from its own table.
 * Each export records its name in fake_cuda_last_call, so a test can tell which variant a
 * wrapper ended up calling. */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))

FAKE_API const char *fake_cuda_last_call;

FAKE_API CUresult CUDAAPI cuInit(unsigned int flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}

/* The exports are aliases of local functions, so their addresses can be taken here without
 * going through the (interposed) dynamic symbols. */
#define EXPORT_ALIAS(name, impl)                                                                   \
    extern __typeof__(impl) name FAKE_API __attribute__((alias(#impl)));

static CUresult impl_alloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    (void)dptr;
    (void)bytesize;
    fake_cuda_last_call = "cuMemAlloc_v2";
    return CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT_ALIAS(cuMemAlloc_v2, impl_alloc_v2)

static CUresult impl_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    (void)dptr, (void)bytesize, (void)s;
    fake_cuda_last_call = "cuMemAllocAsync";
    return CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT_ALIAS(cuMemAllocAsync, impl_alloc_async)

static CUresult impl_alloc_async_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    (void)dptr, (void)bytesize, (void)s;
    fake_cuda_last_call = "cuMemAllocAsync_ptsz";
    return CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT_ALIAS(cuMemAllocAsync_ptsz, impl_alloc_async_ptsz)

static CUresult impl_memcpy(CUdeviceptr dst, const void *src, size_t n)
{
    (void)dst, (void)src, (void)n;
    fake_cuda_last_call = "cuMemcpyHtoD_v2";
    return CUDA_SUCCESS;
}
EXPORT_ALIAS(cuMemcpyHtoD_v2, impl_memcpy)

/* Private entry points: what a driver could hand out instead of its exports. */
static CUresult tramp_alloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return impl_alloc_v2(dptr, bytesize);
}
static CUresult tramp_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return impl_alloc_async(dptr, bytesize, s);
}
static CUresult tramp_alloc_async_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return impl_alloc_async_ptsz(dptr, bytesize, s);
}
static CUresult tramp_memcpy(CUdeviceptr dst, const void *src, size_t n)
{
    return impl_memcpy(dst, src, n);
}

static const struct {
    const char *base;
    bool ptsz;
    void *export, *tramp;
} table[] = {
    {"cuMemAlloc", false, (void *)impl_alloc_v2, (void *)tramp_alloc_v2},
    {"cuMemAllocAsync", false, (void *)impl_alloc_async, (void *)tramp_alloc_async},
    {"cuMemAllocAsync", true, (void *)impl_alloc_async_ptsz, (void *)tramp_alloc_async_ptsz},
    {"cuMemcpyHtoD", false, (void *)impl_memcpy, (void *)tramp_memcpy},
};

FAKE_API CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                              cuuint64_t flags,
                                              CUdriverProcAddressQueryResult *symbolStatus)
{
    (void)cudaVersion;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    const char *mode = getenv("FAKE_CUDA_MODE");
    *pfn = NULL;
    if (!mode) {
        *pfn = dlsym(RTLD_DEFAULT, symbol);
    } else {
        bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
            if (strcmp(table[i].base, symbol) == 0 && (!table[i].ptsz || per_thread))
                *pfn = strcmp(mode, "trampolines") == 0 ? table[i].tramp : table[i].export;
    }
    if (symbolStatus)
        *symbolStatus = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
