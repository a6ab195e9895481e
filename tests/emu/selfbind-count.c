/* selfbind-count.c — a stand-in for libvcuda.so in test-selfbind.c: an LD_PRELOAD library
 * exporting a few driver and NVML entry points under their real names, and (selfbind-dlsym.c)
 * a dlsym that answers those names with its own functions, as libvcuda's does. Each one counts
 * its calls and forwards to the next definition (the emulator's). Only the program's own calls
 * may reach it: the emulated libraries' calls to their own exports, and the pointers their
 * cuGetProcAddress hands out, must stay inside them, as a real driver's do. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "cuda_api.h"
#include "nvml_api.h"

enum {
    C_PCI_BUS_ID,
    C_PRIMARY_RELEASE_V2,
    C_GET_PROC_ADDRESS_V2,
    C_MEM_ALLOC_V2,
    C_CAN_ACCESS_PEER,
    C_NVML_INIT_V2,
    C_NVML_COUNT_V2,
    C_NVML_HANDLE_V2,
    C_N,
};

static const char *const names[C_N] = {
    [C_PCI_BUS_ID] = "cuDeviceGetPCIBusId",
    [C_PRIMARY_RELEASE_V2] = "cuDevicePrimaryCtxRelease_v2",
    [C_GET_PROC_ADDRESS_V2] = "cuGetProcAddress_v2",
    [C_MEM_ALLOC_V2] = "cuMemAlloc_v2",
    [C_CAN_ACCESS_PEER] = "cuDeviceCanAccessPeer",
    [C_NVML_INIT_V2] = "nvmlInit_v2",
    [C_NVML_COUNT_V2] = "nvmlDeviceGetCount_v2",
    [C_NVML_HANDLE_V2] = "nvmlDeviceGetHandleByIndex_v2",
};

static atomic_ulong counts[C_N];

/* Calls that reached this library under the entry point's name; ULONG_MAX for a name it does
 * not export. The test finds this function with dlsym(RTLD_DEFAULT). */
unsigned long selfbind_count(const char *name);
unsigned long selfbind_count(const char *name)
{
    for (int i = 0; i < C_N; i++)
        if (strcmp(names[i], name) == 0)
            return atomic_load_explicit(&counts[i], memory_order_relaxed);
    return (unsigned long)-1;
}

void *selfbind_real_dlsym(void *h, const char *name); /* selfbind-dlsym.c */

/* The definition after ours in the global scope: the emulated library's export. */
static void *next(int i)
{
    atomic_fetch_add_explicit(&counts[i], 1, memory_order_relaxed);
    return selfbind_real_dlsym(RTLD_NEXT, names[i]);
}

#define FORWARD(i, fn, err, ...)                                                                   \
    do {                                                                                           \
        __typeof__(fn) *n_ = (__typeof__(fn) *)next(i);                                            \
        return n_ ? n_(__VA_ARGS__) : (err);                                                       \
    } while (0)

CUresult CUDAAPI cuDeviceGetPCIBusId(char *busid, int len, CUdevice dev)
{
    FORWARD(C_PCI_BUS_ID, cuDeviceGetPCIBusId, CUDA_ERROR_NOT_INITIALIZED, busid, len, dev);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    FORWARD(C_PRIMARY_RELEASE_V2, cuDevicePrimaryCtxRelease_v2, CUDA_ERROR_NOT_INITIALIZED, dev);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *status)
{
    FORWARD(C_GET_PROC_ADDRESS_V2, cuGetProcAddress_v2, CUDA_ERROR_NOT_INITIALIZED, symbol, pfn,
            version, flags, status);
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    FORWARD(C_MEM_ALLOC_V2, cuMemAlloc_v2, CUDA_ERROR_NOT_INITIALIZED, dptr, bytes);
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    FORWARD(C_CAN_ACCESS_PEER, cuDeviceCanAccessPeer, CUDA_ERROR_NOT_INITIALIZED, can, dev, peer);
}

nvmlReturn_t nvmlInit_v2(void)
{
    __typeof__(nvmlInit_v2) *n = (__typeof__(nvmlInit_v2) *)next(C_NVML_INIT_V2);
    return n ? n() : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    FORWARD(C_NVML_COUNT_V2, nvmlDeviceGetCount_v2, NVML_ERROR_UNINITIALIZED, count);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    FORWARD(C_NVML_HANDLE_V2, nvmlDeviceGetHandleByIndex_v2, NVML_ERROR_UNINITIALIZED, index,
            device);
}
