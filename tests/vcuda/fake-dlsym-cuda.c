/* fake-dlsym-cuda.c — a libcuda.so.1 whose cuGetProcAddress finds its entry points by name through
 * dlsym(RTLD_DEFAULT), as a driver that does not bind its own symbols would. Under
 * LD_PRELOAD=libvcuda.so that lookup answers with libvcuda's wrapper, the case
 * hooked_variant() in src/vcuda/driver.c passes through. Used by test-vcuda-dlsym-driver. */
#define _GNU_SOURCE
#include "cuda_api.h"

#include <dlfcn.h>

#define FAKE_API __attribute__((visibility("default")))

FAKE_API CUresult CUDAAPI cuInit(unsigned int flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    (void)dptr;
    (void)bytesize;
    return CUDA_ERROR_OUT_OF_MEMORY;
}

FAKE_API CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                              cuuint64_t flags,
                                              CUdriverProcAddressQueryResult *symbolStatus)
{
    (void)cudaVersion;
    (void)flags;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = dlsym(RTLD_DEFAULT, symbol);
    if (symbolStatus)
        *symbolStatus = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
