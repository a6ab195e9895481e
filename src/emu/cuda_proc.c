/* cuda_proc.c — cuGetProcAddress / cuGetProcAddress_v2: the driver's versioned symbol lookup,
 * with the ONE table of what the emulator exports.
 *
 * Each row says: base name, the CUDA version (1000 * major + 10 * minor) from which that
 * symbol is what a lookup of the base name returns, and the symbol. P rows are the per-thread
 * default stream variants (_ptds / _ptsz) returned when the caller asks with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. A lookup picks the row with the highest
 * version not above the requested one (cuMemAlloc at 12000 → cuMemAlloc_v2, since 3020).
 * The versions are the driver's, as its PFN typedefs name them (PFN_cuMemAlloc_v3020);
 * symbols are resolved in this library by name, so a row can never point at the wrong code. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "cuda_emu.h"

struct proc_row {
    const char *base;
    int version;
    bool per_thread;
    const char *symbol;
};

#define E(b, v, s)                                                                                 \
    {                                                                                              \
#b, v, false, #s                                                                           \
    }
#define P(b, v, s)                                                                                 \
    {                                                                                              \
#b, v, true, #s                                                                            \
    }

static const struct proc_row rows[] = {
    E(cuArray3DCreate, 3020, cuArray3DCreate_v2),
    E(cuArray3DGetDescriptor, 3020, cuArray3DGetDescriptor_v2),
    E(cuArrayCreate, 3020, cuArrayCreate_v2),
    E(cuArrayDestroy, 2000, cuArrayDestroy),
    E(cuArrayGetDescriptor, 3020, cuArrayGetDescriptor_v2),
    E(cuCtxCreate, 2000, cuCtxCreate),
    E(cuCtxCreate, 3020, cuCtxCreate_v2),
    E(cuCtxCreate, 11040, cuCtxCreate_v3),
    E(cuCtxCreate, 12050, cuCtxCreate_v4),
    E(cuCtxDestroy, 2000, cuCtxDestroy),
    E(cuCtxDestroy, 4000, cuCtxDestroy_v2),
    E(cuCtxDisablePeerAccess, 4000, cuCtxDisablePeerAccess),
    E(cuCtxEnablePeerAccess, 4000, cuCtxEnablePeerAccess),
    E(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion),
    E(cuCtxGetCacheConfig, 3020, cuCtxGetCacheConfig),
    E(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
    E(cuCtxGetDevice, 2000, cuCtxGetDevice),
    E(cuCtxGetFlags, 7000, cuCtxGetFlags),
    E(cuCtxGetId, 12000, cuCtxGetId),
    E(cuCtxGetLimit, 3010, cuCtxGetLimit),
    E(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange),
    E(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
    E(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
    E(cuCtxSetCacheConfig, 3020, cuCtxSetCacheConfig),
    E(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
    E(cuCtxSetLimit, 3010, cuCtxSetLimit),
    E(cuCtxSynchronize, 2000, cuCtxSynchronize),
    E(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer),
    E(cuDeviceComputeCapability, 2000, cuDeviceComputeCapability),
    E(cuDeviceGet, 2000, cuDeviceGet),
    E(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
    E(cuDeviceGetByPCIBusId, 4010, cuDeviceGetByPCIBusId),
    E(cuDeviceGetCount, 2000, cuDeviceGetCount),
    E(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool),
    E(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool),
    E(cuDeviceGetName, 2000, cuDeviceGetName),
    E(cuDeviceGetP2PAttribute, 8000, cuDeviceGetP2PAttribute),
    E(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
    E(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
    E(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
    E(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
    E(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease),
    E(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
    E(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset),
    E(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
    E(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
    E(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags),
    E(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2),
    E(cuDeviceSetMemPool, 11020, cuDeviceSetMemPool),
    E(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
    E(cuDriverGetVersion, 2020, cuDriverGetVersion),
    E(cuEventCreate, 2000, cuEventCreate),
    E(cuEventDestroy, 2000, cuEventDestroy),
    E(cuEventDestroy, 4000, cuEventDestroy_v2),
    E(cuEventElapsedTime, 2000, cuEventElapsedTime),
    E(cuEventElapsedTime, 12080, cuEventElapsedTime_v2),
    E(cuEventQuery, 2000, cuEventQuery),
    E(cuEventRecord, 2000, cuEventRecord),
    P(cuEventRecord, 7000, cuEventRecord_ptsz),
    E(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags),
    P(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags_ptsz),
    E(cuEventSynchronize, 2000, cuEventSynchronize),
    E(cuFuncGetAttribute, 2020, cuFuncGetAttribute),
    E(cuFuncGetName, 12030, cuFuncGetName),
    E(cuFuncSetAttribute, 9000, cuFuncSetAttribute),
    E(cuFuncSetCacheConfig, 3000, cuFuncSetCacheConfig),
    E(cuGetErrorName, 6000, cuGetErrorName),
    E(cuGetErrorString, 6000, cuGetErrorString),
    E(cuGetExportTable, 3000, cuGetExportTable),
    E(cuGetProcAddress, 11030, cuGetProcAddress),
    E(cuGetProcAddress, 12000, cuGetProcAddress_v2),
    E(cuGraphAddKernelNode, 10000, cuGraphAddKernelNode),
    E(cuGraphAddKernelNode, 12000, cuGraphAddKernelNode_v2),
    E(cuGraphCreate, 10000, cuGraphCreate),
    E(cuGraphDestroy, 10000, cuGraphDestroy),
    E(cuGraphExecDestroy, 10000, cuGraphExecDestroy),
    E(cuGraphInstantiate, 10000, cuGraphInstantiate),
    E(cuGraphInstantiate, 11000, cuGraphInstantiate_v2),
    E(cuGraphInstantiate, 12000, cuGraphInstantiateWithFlags),
    E(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
    E(cuGraphLaunch, 10000, cuGraphLaunch),
    P(cuGraphLaunch, 10000, cuGraphLaunch_ptsz),
    E(cuGraphUpload, 11010, cuGraphUpload),
    P(cuGraphUpload, 11010, cuGraphUpload_ptsz),
    E(cuInit, 2000, cuInit),
    E(cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle),
    E(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle),
    E(cuIpcOpenMemHandle, 4010, cuIpcOpenMemHandle),
    E(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2),
    E(cuKernelGetFunction, 12000, cuKernelGetFunction),
    E(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel),
    P(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel_ptsz),
    E(cuLaunchHostFunc, 10000, cuLaunchHostFunc),
    P(cuLaunchHostFunc, 10000, cuLaunchHostFunc_ptsz),
    E(cuLaunchKernel, 4000, cuLaunchKernel),
    P(cuLaunchKernel, 7000, cuLaunchKernel_ptsz),
    E(cuLaunchKernelEx, 11060, cuLaunchKernelEx),
    P(cuLaunchKernelEx, 11060, cuLaunchKernelEx_ptsz),
    E(cuLibraryGetKernel, 12000, cuLibraryGetKernel),
    E(cuLibraryGetModule, 12000, cuLibraryGetModule),
    E(cuLibraryLoadData, 12000, cuLibraryLoadData),
    E(cuLibraryUnload, 12000, cuLibraryUnload),
    E(cuMemAddressFree, 10020, cuMemAddressFree),
    E(cuMemAddressReserve, 10020, cuMemAddressReserve),
    E(cuMemAdvise, 8000, cuMemAdvise),
    E(cuMemAdvise, 12020, cuMemAdvise_v2),
    E(cuMemAlloc, 3020, cuMemAlloc_v2),
    E(cuMemAllocAsync, 11020, cuMemAllocAsync),
    P(cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz),
    E(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync),
    P(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz),
    E(cuMemAllocHost, 3020, cuMemAllocHost_v2),
    E(cuMemAllocManaged, 6000, cuMemAllocManaged),
    E(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    E(cuMemCreate, 10020, cuMemCreate),
    E(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle),
    E(cuMemFree, 3020, cuMemFree_v2),
    E(cuMemFreeAsync, 11020, cuMemFreeAsync),
    P(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz),
    E(cuMemFreeHost, 2000, cuMemFreeHost),
    E(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2),
    E(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
    E(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    E(cuMemHostAlloc, 2020, cuMemHostAlloc),
    E(cuMemHostGetDevicePointer, 3020, cuMemHostGetDevicePointer_v2),
    E(cuMemHostGetFlags, 2030, cuMemHostGetFlags),
    E(cuMemHostRegister, 4000, cuMemHostRegister),
    E(cuMemHostRegister, 6050, cuMemHostRegister_v2),
    E(cuMemHostUnregister, 4000, cuMemHostUnregister),
    E(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle),
    E(cuMemMap, 10020, cuMemMap),
    E(cuMemPoolCreate, 11020, cuMemPoolCreate),
    E(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
    E(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute),
    E(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute),
    E(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo),
    E(cuMemPrefetchAsync, 8000, cuMemPrefetchAsync),
    P(cuMemPrefetchAsync, 8000, cuMemPrefetchAsync_ptsz),
    E(cuMemPrefetchAsync, 12020, cuMemPrefetchAsync_v2),
    P(cuMemPrefetchAsync, 12020, cuMemPrefetchAsync_v2_ptsz),
    E(cuMemRelease, 10020, cuMemRelease),
    E(cuMemSetAccess, 10020, cuMemSetAccess),
    E(cuMemUnmap, 10020, cuMemUnmap),
    E(cuMemcpy, 4000, cuMemcpy),
    P(cuMemcpy, 7000, cuMemcpy_ptds),
    E(cuMemcpy2D, 3020, cuMemcpy2D_v2),
    P(cuMemcpy2D, 7000, cuMemcpy2D_v2_ptds),
    E(cuMemcpy2DAsync, 3020, cuMemcpy2DAsync_v2),
    P(cuMemcpy2DAsync, 7000, cuMemcpy2DAsync_v2_ptsz),
    E(cuMemcpy2DUnaligned, 3020, cuMemcpy2DUnaligned_v2),
    P(cuMemcpy2DUnaligned, 7000, cuMemcpy2DUnaligned_v2_ptds),
    E(cuMemcpy3D, 3020, cuMemcpy3D_v2),
    P(cuMemcpy3D, 7000, cuMemcpy3D_v2_ptds),
    E(cuMemcpy3DAsync, 3020, cuMemcpy3DAsync_v2),
    P(cuMemcpy3DAsync, 7000, cuMemcpy3DAsync_v2_ptsz),
    E(cuMemcpyAsync, 4000, cuMemcpyAsync),
    P(cuMemcpyAsync, 7000, cuMemcpyAsync_ptsz),
    E(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2),
    P(cuMemcpyDtoD, 7000, cuMemcpyDtoD_v2_ptds),
    E(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2),
    P(cuMemcpyDtoDAsync, 7000, cuMemcpyDtoDAsync_v2_ptsz),
    E(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2),
    P(cuMemcpyDtoH, 7000, cuMemcpyDtoH_v2_ptds),
    E(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2),
    P(cuMemcpyDtoHAsync, 7000, cuMemcpyDtoHAsync_v2_ptsz),
    E(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2),
    P(cuMemcpyHtoD, 7000, cuMemcpyHtoD_v2_ptds),
    E(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2),
    P(cuMemcpyHtoDAsync, 7000, cuMemcpyHtoDAsync_v2_ptsz),
    E(cuMemcpyPeer, 4000, cuMemcpyPeer),
    P(cuMemcpyPeer, 7000, cuMemcpyPeer_ptds),
    E(cuMemcpyPeerAsync, 4000, cuMemcpyPeerAsync),
    P(cuMemcpyPeerAsync, 7000, cuMemcpyPeerAsync_ptsz),
    E(cuMemsetD16, 3020, cuMemsetD16_v2),
    P(cuMemsetD16, 7000, cuMemsetD16_v2_ptds),
    E(cuMemsetD16Async, 3020, cuMemsetD16Async),
    P(cuMemsetD16Async, 7000, cuMemsetD16Async_ptsz),
    E(cuMemsetD2D32, 3020, cuMemsetD2D32_v2),
    P(cuMemsetD2D32, 7000, cuMemsetD2D32_v2_ptds),
    E(cuMemsetD2D8, 3020, cuMemsetD2D8_v2),
    P(cuMemsetD2D8, 7000, cuMemsetD2D8_v2_ptds),
    E(cuMemsetD32, 3020, cuMemsetD32_v2),
    P(cuMemsetD32, 7000, cuMemsetD32_v2_ptds),
    E(cuMemsetD32Async, 3020, cuMemsetD32Async),
    P(cuMemsetD32Async, 7000, cuMemsetD32Async_ptsz),
    E(cuMemsetD8, 3020, cuMemsetD8_v2),
    P(cuMemsetD8, 7000, cuMemsetD8_v2_ptds),
    E(cuMemsetD8Async, 3020, cuMemsetD8Async),
    P(cuMemsetD8Async, 7000, cuMemsetD8Async_ptsz),
    E(cuMipmappedArrayCreate, 5000, cuMipmappedArrayCreate),
    E(cuMipmappedArrayDestroy, 5000, cuMipmappedArrayDestroy),
    E(cuModuleGetFunction, 2000, cuModuleGetFunction),
    E(cuModuleGetGlobal, 3020, cuModuleGetGlobal_v2),
    E(cuModuleLoad, 2000, cuModuleLoad),
    E(cuModuleLoadData, 2000, cuModuleLoadData),
    E(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx),
    E(cuModuleLoadFatBinary, 2000, cuModuleLoadFatBinary),
    E(cuModuleUnload, 2000, cuModuleUnload),
    E(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, cuOccupancyMaxActiveBlocksPerMultiprocessor),
    E(cuOccupancyMaxPotentialBlockSize, 6050, cuOccupancyMaxPotentialBlockSize),
    E(cuPointerGetAttribute, 4000, cuPointerGetAttribute),
    E(cuPointerGetAttributes, 7000, cuPointerGetAttributes),
    E(cuStreamAddCallback, 5000, cuStreamAddCallback),
    P(cuStreamAddCallback, 7000, cuStreamAddCallback_ptsz),
    E(cuStreamBeginCapture, 10000, cuStreamBeginCapture),
    P(cuStreamBeginCapture, 10000, cuStreamBeginCapture_ptsz),
    E(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2),
    P(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2_ptsz),
    E(cuStreamCreate, 2000, cuStreamCreate),
    E(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
    E(cuStreamDestroy, 2000, cuStreamDestroy),
    E(cuStreamDestroy, 4000, cuStreamDestroy_v2),
    E(cuStreamEndCapture, 10000, cuStreamEndCapture),
    P(cuStreamEndCapture, 10000, cuStreamEndCapture_ptsz),
    E(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo),
    P(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo_ptsz),
    E(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2),
    P(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2_ptsz),
    E(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3),
    P(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3_ptsz),
    E(cuStreamGetCtx, 9020, cuStreamGetCtx),
    P(cuStreamGetCtx, 9020, cuStreamGetCtx_ptsz),
    E(cuStreamGetDevice, 12080, cuStreamGetDevice),
    P(cuStreamGetDevice, 12080, cuStreamGetDevice_ptsz),
    E(cuStreamGetFlags, 5050, cuStreamGetFlags),
    P(cuStreamGetFlags, 7000, cuStreamGetFlags_ptsz),
    E(cuStreamGetId, 12000, cuStreamGetId),
    P(cuStreamGetId, 12000, cuStreamGetId_ptsz),
    E(cuStreamGetPriority, 5050, cuStreamGetPriority),
    P(cuStreamGetPriority, 7000, cuStreamGetPriority_ptsz),
    E(cuStreamIsCapturing, 10000, cuStreamIsCapturing),
    P(cuStreamIsCapturing, 10000, cuStreamIsCapturing_ptsz),
    E(cuStreamQuery, 2000, cuStreamQuery),
    P(cuStreamQuery, 7000, cuStreamQuery_ptsz),
    E(cuStreamSynchronize, 2000, cuStreamSynchronize),
    P(cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz),
    E(cuStreamWaitEvent, 3020, cuStreamWaitEvent),
    P(cuStreamWaitEvent, 7000, cuStreamWaitEvent_ptsz),
    E(cuThreadExchangeStreamCaptureMode, 10010, cuThreadExchangeStreamCaptureMode),
};

static void *self_handle(void)
{
    static void *h;
    void *cur = __atomic_load_n(&h, __ATOMIC_ACQUIRE);
    if (cur)
        return cur;
    Dl_info info;
    if (!dladdr((void *)&self_handle, &info) || !info.dli_fname)
        return NULL;
    /* RTLD_NOLOAD: we are loaded; this only takes a reference to ourselves */
    cur = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    void *expected = NULL;
    if (cur && !__atomic_compare_exchange_n(&h, &expected, cur, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
        dlclose(cur);
        cur = expected;
    }
    return cur;
}

/* The row to use for (symbol, version, flags), or NULL; *ret_too_new says a row exists but only
 * for newer versions. */
static const struct proc_row *lookup(const char *symbol, int version, bool per_thread,
                                     bool *ret_too_new)
{
    const struct proc_row *best = NULL, *best_pt = NULL;
    bool known = false;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct proc_row *r = &rows[i];
        if (strcmp(r->base, symbol) != 0)
            continue;
        known = true;
        if (r->version > version)
            continue;
        if (r->per_thread) {
            if (!best_pt || r->version >= best_pt->version)
                best_pt = r;
        } else if (!best || r->version >= best->version) {
            best = r;
        }
    }
    *ret_too_new = known && !best && !best_pt;
    if (per_thread && best_pt)
        return best_pt;
    return best;
}

EMU_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn || flags > 2)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    bool too_new = false;
    const struct proc_row *r =
        lookup(symbol, version, flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &too_new);
    void *h = r ? self_handle() : NULL;
    void *fn = h ? dlsym(h, r->symbol) : NULL;
    if (!fn) {
        if (status)
            *status = too_new ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                              : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
