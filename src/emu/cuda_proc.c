/* cuda_proc.c — cuGetProcAddress / cuGetProcAddress_v2: the driver's versioned symbol lookup,
 * with the ONE table of what the emulator exports.
 *
 * Each row says: base name, the CUDA version (1000 * major + 10 * minor) from which that
 * symbol is what a lookup of the base name returns, and the symbol. P rows are the per-thread
 * default stream variants (_ptds / _ptsz) returned when the caller asks with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. A lookup picks the row with the highest
 * version not above the requested one (cuMemAlloc at 12000 → cuMemAlloc_v2, since 3020).
 * The versions are the driver's, as its PFN typedefs name them (PFN_cuMemAlloc_v3020).
 *
 * The table lists every entry point of the CUDA 13 driver, the ones the emulator does not
 * implement included (marked): symbols are resolved in this library by name, so such a row
 * answers "not found" (a NULL pointer), never an older variant with another signature, and a
 * row can never point at the wrong code. Implementing an entry point needs no change here.
 * The look-up goes to glibc's dlsym directly, so a preloaded dlsym override never changes the
 * answers. */
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

/* clang-format off */
#define E(b, v, s) {#b, v, false, #s}
#define P(b, v, s) {#b, v, true, #s}
/* clang-format on */

static const struct proc_row rows[] = {
    E(cuArray3DCreate, 2000, cuArray3DCreate), /* not emulated */
    E(cuArray3DCreate, 3020, cuArray3DCreate_v2),
    E(cuArray3DGetDescriptor, 2000, cuArray3DGetDescriptor), /* not emulated */
    E(cuArray3DGetDescriptor, 3020, cuArray3DGetDescriptor_v2),
    E(cuArrayCreate, 2000, cuArrayCreate), /* not emulated */
    E(cuArrayCreate, 3020, cuArrayCreate_v2),
    E(cuArrayDestroy, 2000, cuArrayDestroy),
    E(cuArrayGetDescriptor, 2000, cuArrayGetDescriptor), /* not emulated */
    E(cuArrayGetDescriptor, 3020, cuArrayGetDescriptor_v2),
    E(cuArrayGetMemoryRequirements, 11060, cuArrayGetMemoryRequirements),   /* not emulated */
    E(cuArrayGetPlane, 11020, cuArrayGetPlane),                             /* not emulated */
    E(cuArrayGetSparseProperties, 11010, cuArrayGetSparseProperties),       /* not emulated */
    E(cuCheckpointProcessCheckpoint, 12080, cuCheckpointProcessCheckpoint), /* not emulated */
    E(cuCheckpointProcessGetRestoreThreadId, 12080,
      cuCheckpointProcessGetRestoreThreadId),                             /* not emulated */
    E(cuCheckpointProcessGetState, 12080, cuCheckpointProcessGetState),   /* not emulated */
    E(cuCheckpointProcessLock, 12080, cuCheckpointProcessLock),           /* not emulated */
    E(cuCheckpointProcessRestore, 12080, cuCheckpointProcessRestore),     /* not emulated */
    E(cuCheckpointProcessUnlock, 12080, cuCheckpointProcessUnlock),       /* not emulated */
    E(cuCoredumpGetAttribute, 12010, cuCoredumpGetAttribute),             /* not emulated */
    E(cuCoredumpGetAttributeGlobal, 12010, cuCoredumpGetAttributeGlobal), /* not emulated */
    E(cuCoredumpSetAttribute, 12010, cuCoredumpSetAttribute),             /* not emulated */
    E(cuCoredumpSetAttributeGlobal, 12010, cuCoredumpSetAttributeGlobal), /* not emulated */
    E(cuCtxAttach, 2000, cuCtxAttach),                                    /* not emulated */
    E(cuCtxCreate, 2000, cuCtxCreate),
    E(cuCtxCreate, 3020, cuCtxCreate_v2),
    E(cuCtxCreate, 11040, cuCtxCreate_v3),
    E(cuCtxCreate, 12050, cuCtxCreate_v4),
    E(cuCtxDestroy, 2000, cuCtxDestroy),
    E(cuCtxDestroy, 4000, cuCtxDestroy_v2),
    E(cuCtxDetach, 2000, cuCtxDetach), /* not emulated */
    E(cuCtxDisablePeerAccess, 4000, cuCtxDisablePeerAccess),
    E(cuCtxEnablePeerAccess, 4000, cuCtxEnablePeerAccess),
    E(cuCtxFromGreenCtx, 12040, cuCtxFromGreenCtx), /* not emulated */
    E(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion),
    E(cuCtxGetCacheConfig, 3020, cuCtxGetCacheConfig),
    E(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
    E(cuCtxGetDevResource, 12040, cuCtxGetDevResource), /* not emulated */
    E(cuCtxGetDevice, 2000, cuCtxGetDevice),
    E(cuCtxGetDevice, 13000, cuCtxGetDevice_v2),
    E(cuCtxGetExecAffinity, 11040, cuCtxGetExecAffinity), /* not emulated */
    E(cuCtxGetFlags, 7000, cuCtxGetFlags),
    E(cuCtxGetId, 12000, cuCtxGetId),
    E(cuCtxGetLimit, 3010, cuCtxGetLimit),
    E(cuCtxGetSharedMemConfig, 4020, cuCtxGetSharedMemConfig), /* not emulated */
    E(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange),
    E(cuCtxPopCurrent, 2000, cuCtxPopCurrent), /* not emulated */
    E(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
    E(cuCtxPushCurrent, 2000, cuCtxPushCurrent), /* not emulated */
    E(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
    E(cuCtxRecordEvent, 12050, cuCtxRecordEvent),                       /* not emulated */
    E(cuCtxResetPersistingL2Cache, 11000, cuCtxResetPersistingL2Cache), /* not emulated */
    E(cuCtxSetCacheConfig, 3020, cuCtxSetCacheConfig),
    E(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
    E(cuCtxSetFlags, 12010, cuCtxSetFlags), /* not emulated */
    E(cuCtxSetLimit, 3010, cuCtxSetLimit),
    E(cuCtxSetSharedMemConfig, 4020, cuCtxSetSharedMemConfig), /* not emulated */
    E(cuCtxSynchronize, 2000, cuCtxSynchronize),
    E(cuCtxSynchronize, 13000, cuCtxSynchronize_v2),
    E(cuCtxWaitEvent, 12050, cuCtxWaitEvent),                           /* not emulated */
    E(cuDestroyExternalMemory, 10000, cuDestroyExternalMemory),         /* not emulated */
    E(cuDestroyExternalSemaphore, 10000, cuDestroyExternalSemaphore),   /* not emulated */
    E(cuDevResourceGenerateDesc, 12040, cuDevResourceGenerateDesc),     /* not emulated */
    E(cuDevSmResourceSplitByCount, 12040, cuDevSmResourceSplitByCount), /* not emulated */
    E(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer),
    E(cuDeviceComputeCapability, 2000, cuDeviceComputeCapability),
    E(cuDeviceGet, 2000, cuDeviceGet),
    E(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
    E(cuDeviceGetByPCIBusId, 4010, cuDeviceGetByPCIBusId),
    E(cuDeviceGetCount, 2000, cuDeviceGetCount),
    E(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool),
    E(cuDeviceGetDevResource, 12040, cuDeviceGetDevResource),                 /* not emulated */
    E(cuDeviceGetExecAffinitySupport, 11040, cuDeviceGetExecAffinitySupport), /* not emulated */
    E(cuDeviceGetGraphMemAttribute, 11040, cuDeviceGetGraphMemAttribute),
    E(cuDeviceGetHostAtomicCapabilities, 13000,
      cuDeviceGetHostAtomicCapabilities),       /* not emulated */
    E(cuDeviceGetLuid, 10000, cuDeviceGetLuid), /* not emulated */
    E(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool),
    E(cuDeviceGetName, 2000, cuDeviceGetName),
    E(cuDeviceGetNvSciSyncAttributes, 10020, cuDeviceGetNvSciSyncAttributes),     /* not emulated */
    E(cuDeviceGetP2PAtomicCapabilities, 13000, cuDeviceGetP2PAtomicCapabilities), /* not emulated */
    E(cuDeviceGetP2PAttribute, 8000, cuDeviceGetP2PAttribute),
    E(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
    E(cuDeviceGetProperties, 2000, cuDeviceGetProperties), /* not emulated */
    E(cuDeviceGetTexture1DLinearMaxWidth, 11010,
      cuDeviceGetTexture1DLinearMaxWidth), /* not emulated */
    E(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
    E(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
    E(cuDeviceGraphMemTrim, 11040, cuDeviceGraphMemTrim),
    E(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
    E(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease),
    E(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
    E(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset),
    E(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
    E(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
    E(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags),
    E(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2),
    E(cuDeviceRegisterAsyncNotification, 12040,
      cuDeviceRegisterAsyncNotification), /* not emulated */
    E(cuDeviceSetGraphMemAttribute, 11040, cuDeviceSetGraphMemAttribute),
    E(cuDeviceSetMemPool, 11020, cuDeviceSetMemPool),
    E(cuDeviceTotalMem, 2000, cuDeviceTotalMem), /* not emulated */
    E(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
    E(cuDeviceUnregisterAsyncNotification, 12040,
      cuDeviceUnregisterAsyncNotification), /* not emulated */
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
    E(cuExternalMemoryGetMappedBuffer, 10000, cuExternalMemoryGetMappedBuffer), /* not emulated */
    E(cuExternalMemoryGetMappedMipmappedArray, 10000,
      cuExternalMemoryGetMappedMipmappedArray),                       /* not emulated */
    E(cuFlushGPUDirectRDMAWrites, 11030, cuFlushGPUDirectRDMAWrites), /* not emulated */
    E(cuFuncGetAttribute, 2020, cuFuncGetAttribute),
    E(cuFuncGetModule, 11000, cuFuncGetModule), /* not emulated */
    E(cuFuncGetName, 12030, cuFuncGetName),
    E(cuFuncGetParamInfo, 12040, cuFuncGetParamInfo),
    E(cuFuncIsLoaded, 12040, cuFuncIsLoaded), /* not emulated */
    E(cuFuncLoad, 12040, cuFuncLoad),         /* not emulated */
    E(cuFuncSetAttribute, 9000, cuFuncSetAttribute),
    E(cuFuncSetBlockShape, 2000, cuFuncSetBlockShape), /* not emulated */
    E(cuFuncSetCacheConfig, 3000, cuFuncSetCacheConfig),
    E(cuFuncSetSharedMemConfig, 4020, cuFuncSetSharedMemConfig), /* not emulated */
    E(cuFuncSetSharedSize, 2000, cuFuncSetSharedSize),           /* not emulated */
    E(cuGetErrorName, 6000, cuGetErrorName),
    E(cuGetErrorString, 6000, cuGetErrorString),
    E(cuGetExportTable, 3000, cuGetExportTable),
    E(cuGetProcAddress, 11030, cuGetProcAddress),
    E(cuGetProcAddress, 12000, cuGetProcAddress_v2),
    E(cuGraphAddBatchMemOpNode, 11070, cuGraphAddBatchMemOpNode),   /* not emulated */
    E(cuGraphAddChildGraphNode, 10000, cuGraphAddChildGraphNode),   /* not emulated */
    E(cuGraphAddDependencies, 10000, cuGraphAddDependencies),       /* not emulated */
    E(cuGraphAddDependencies, 12030, cuGraphAddDependencies_v2),    /* not emulated */
    E(cuGraphAddEmptyNode, 10000, cuGraphAddEmptyNode),             /* not emulated */
    E(cuGraphAddEventRecordNode, 11010, cuGraphAddEventRecordNode), /* not emulated */
    E(cuGraphAddEventWaitNode, 11010, cuGraphAddEventWaitNode),     /* not emulated */
    E(cuGraphAddExternalSemaphoresSignalNode, 11020,
      cuGraphAddExternalSemaphoresSignalNode), /* not emulated */
    E(cuGraphAddExternalSemaphoresWaitNode, 11020,
      cuGraphAddExternalSemaphoresWaitNode),          /* not emulated */
    E(cuGraphAddHostNode, 10000, cuGraphAddHostNode), /* not emulated */
    E(cuGraphAddKernelNode, 10000, cuGraphAddKernelNode),
    E(cuGraphAddKernelNode, 12000, cuGraphAddKernelNode_v2),
    E(cuGraphAddMemAllocNode, 11040, cuGraphAddMemAllocNode),
    E(cuGraphAddMemFreeNode, 11040, cuGraphAddMemFreeNode),
    E(cuGraphAddMemcpyNode, 10000, cuGraphAddMemcpyNode),                     /* not emulated */
    E(cuGraphAddMemsetNode, 10000, cuGraphAddMemsetNode),                     /* not emulated */
    E(cuGraphAddNode, 12020, cuGraphAddNode),                                 /* not emulated */
    E(cuGraphAddNode, 12030, cuGraphAddNode_v2),                              /* not emulated */
    E(cuGraphBatchMemOpNodeGetParams, 11070, cuGraphBatchMemOpNodeGetParams), /* not emulated */
    E(cuGraphBatchMemOpNodeSetParams, 11070, cuGraphBatchMemOpNodeSetParams), /* not emulated */
    E(cuGraphChildGraphNodeGetGraph, 10000, cuGraphChildGraphNodeGetGraph),   /* not emulated */
    E(cuGraphClone, 10000, cuGraphClone),                                     /* not emulated */
    E(cuGraphConditionalHandleCreate, 12030, cuGraphConditionalHandleCreate), /* not emulated */
    E(cuGraphCreate, 10000, cuGraphCreate),
    E(cuGraphDebugDotPrint, 11030, cuGraphDebugDotPrint), /* not emulated */
    E(cuGraphDestroy, 10000, cuGraphDestroy),
    E(cuGraphDestroyNode, 10000, cuGraphDestroyNode),                         /* not emulated */
    E(cuGraphEventRecordNodeGetEvent, 11010, cuGraphEventRecordNodeGetEvent), /* not emulated */
    E(cuGraphEventRecordNodeSetEvent, 11010, cuGraphEventRecordNodeSetEvent), /* not emulated */
    E(cuGraphEventWaitNodeGetEvent, 11010, cuGraphEventWaitNodeGetEvent),     /* not emulated */
    E(cuGraphEventWaitNodeSetEvent, 11010, cuGraphEventWaitNodeSetEvent),     /* not emulated */
    E(cuGraphExecBatchMemOpNodeSetParams, 11070,
      cuGraphExecBatchMemOpNodeSetParams), /* not emulated */
    E(cuGraphExecChildGraphNodeSetParams, 11010,
      cuGraphExecChildGraphNodeSetParams), /* not emulated */
    E(cuGraphExecDestroy, 10000, cuGraphExecDestroy),
    E(cuGraphExecEventRecordNodeSetEvent, 11010,
      cuGraphExecEventRecordNodeSetEvent),                                        /* not emulated */
    E(cuGraphExecEventWaitNodeSetEvent, 11010, cuGraphExecEventWaitNodeSetEvent), /* not emulated */
    E(cuGraphExecExternalSemaphoresSignalNodeSetParams, 11020,
      cuGraphExecExternalSemaphoresSignalNodeSetParams), /* not emulated */
    E(cuGraphExecExternalSemaphoresWaitNodeSetParams, 11020,
      cuGraphExecExternalSemaphoresWaitNodeSetParams),                           /* not emulated */
    E(cuGraphExecGetFlags, 12000, cuGraphExecGetFlags),                          /* not emulated */
    E(cuGraphExecHostNodeSetParams, 10020, cuGraphExecHostNodeSetParams),        /* not emulated */
    E(cuGraphExecKernelNodeSetParams, 10010, cuGraphExecKernelNodeSetParams),    /* not emulated */
    E(cuGraphExecKernelNodeSetParams, 12000, cuGraphExecKernelNodeSetParams_v2), /* not emulated */
    E(cuGraphExecMemcpyNodeSetParams, 10020, cuGraphExecMemcpyNodeSetParams),    /* not emulated */
    E(cuGraphExecMemsetNodeSetParams, 10020, cuGraphExecMemsetNodeSetParams),    /* not emulated */
    E(cuGraphExecNodeSetParams, 12020, cuGraphExecNodeSetParams),                /* not emulated */
    E(cuGraphExecUpdate, 10020, cuGraphExecUpdate),                              /* not emulated */
    E(cuGraphExecUpdate, 12000, cuGraphExecUpdate_v2),                           /* not emulated */
    E(cuGraphExternalSemaphoresSignalNodeGetParams, 11020,
      cuGraphExternalSemaphoresSignalNodeGetParams), /* not emulated */
    E(cuGraphExternalSemaphoresSignalNodeSetParams, 11020,
      cuGraphExternalSemaphoresSignalNodeSetParams), /* not emulated */
    E(cuGraphExternalSemaphoresWaitNodeGetParams, 11020,
      cuGraphExternalSemaphoresWaitNodeGetParams), /* not emulated */
    E(cuGraphExternalSemaphoresWaitNodeSetParams, 11020,
      cuGraphExternalSemaphoresWaitNodeSetParams), /* not emulated */
    E(cuGraphGetEdges, 10000, cuGraphGetEdges),    /* not emulated */
    E(cuGraphGetEdges, 12030, cuGraphGetEdges_v2), /* not emulated */
    E(cuGraphGetNodes, 10000, cuGraphGetNodes),
    E(cuGraphGetRootNodes, 10000, cuGraphGetRootNodes),           /* not emulated */
    E(cuGraphHostNodeGetParams, 10000, cuGraphHostNodeGetParams), /* not emulated */
    E(cuGraphHostNodeSetParams, 10000, cuGraphHostNodeSetParams), /* not emulated */
    E(cuGraphInstantiate, 10000, cuGraphInstantiate),
    E(cuGraphInstantiate, 11000, cuGraphInstantiate_v2),
    E(cuGraphInstantiate, 12000, cuGraphInstantiateWithFlags),
    E(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
    E(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams),
    P(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams_ptsz),
    E(cuGraphKernelNodeCopyAttributes, 11000, cuGraphKernelNodeCopyAttributes), /* not emulated */
    E(cuGraphKernelNodeGetAttribute, 11000, cuGraphKernelNodeGetAttribute),     /* not emulated */
    E(cuGraphKernelNodeGetParams, 10000, cuGraphKernelNodeGetParams),           /* not emulated */
    E(cuGraphKernelNodeGetParams, 12000, cuGraphKernelNodeGetParams_v2),        /* not emulated */
    E(cuGraphKernelNodeSetAttribute, 11000, cuGraphKernelNodeSetAttribute),     /* not emulated */
    E(cuGraphKernelNodeSetParams, 10000, cuGraphKernelNodeSetParams),           /* not emulated */
    E(cuGraphKernelNodeSetParams, 12000, cuGraphKernelNodeSetParams_v2),        /* not emulated */
    E(cuGraphLaunch, 10000, cuGraphLaunch),
    P(cuGraphLaunch, 10000, cuGraphLaunch_ptsz),
    E(cuGraphMemAllocNodeGetParams, 11040, cuGraphMemAllocNodeGetParams),
    E(cuGraphMemFreeNodeGetParams, 11040, cuGraphMemFreeNodeGetParams),
    E(cuGraphMemcpyNodeGetParams, 10000, cuGraphMemcpyNodeGetParams),        /* not emulated */
    E(cuGraphMemcpyNodeSetParams, 10000, cuGraphMemcpyNodeSetParams),        /* not emulated */
    E(cuGraphMemsetNodeGetParams, 10000, cuGraphMemsetNodeGetParams),        /* not emulated */
    E(cuGraphMemsetNodeSetParams, 10000, cuGraphMemsetNodeSetParams),        /* not emulated */
    E(cuGraphNodeFindInClone, 10000, cuGraphNodeFindInClone),                /* not emulated */
    E(cuGraphNodeGetDependencies, 10000, cuGraphNodeGetDependencies),        /* not emulated */
    E(cuGraphNodeGetDependencies, 12030, cuGraphNodeGetDependencies_v2),     /* not emulated */
    E(cuGraphNodeGetDependentNodes, 10000, cuGraphNodeGetDependentNodes),    /* not emulated */
    E(cuGraphNodeGetDependentNodes, 12030, cuGraphNodeGetDependentNodes_v2), /* not emulated */
    E(cuGraphNodeGetEnabled, 11060, cuGraphNodeGetEnabled),                  /* not emulated */
    E(cuGraphNodeGetType, 10000, cuGraphNodeGetType),
    E(cuGraphNodeSetEnabled, 11060, cuGraphNodeSetEnabled),            /* not emulated */
    E(cuGraphNodeSetParams, 12020, cuGraphNodeSetParams),              /* not emulated */
    E(cuGraphReleaseUserObject, 11030, cuGraphReleaseUserObject),      /* not emulated */
    E(cuGraphRemoveDependencies, 10000, cuGraphRemoveDependencies),    /* not emulated */
    E(cuGraphRemoveDependencies, 12030, cuGraphRemoveDependencies_v2), /* not emulated */
    E(cuGraphRetainUserObject, 11030, cuGraphRetainUserObject),        /* not emulated */
    E(cuGraphUpload, 11010, cuGraphUpload),
    P(cuGraphUpload, 11010, cuGraphUpload_ptsz),
    E(cuGraphicsMapResources, 3000, cuGraphicsMapResources),      /* not emulated */
    P(cuGraphicsMapResources, 7000, cuGraphicsMapResources_ptsz), /* not emulated */
    E(cuGraphicsResourceGetMappedMipmappedArray, 5000,
      cuGraphicsResourceGetMappedMipmappedArray), /* not emulated */
    E(cuGraphicsResourceGetMappedPointer, 3000,
      cuGraphicsResourceGetMappedPointer), /* not emulated */
    E(cuGraphicsResourceGetMappedPointer, 3020,
      cuGraphicsResourceGetMappedPointer_v2),                                 /* not emulated */
    E(cuGraphicsResourceSetMapFlags, 3000, cuGraphicsResourceSetMapFlags),    /* not emulated */
    E(cuGraphicsResourceSetMapFlags, 6050, cuGraphicsResourceSetMapFlags_v2), /* not emulated */
    E(cuGraphicsSubResourceGetMappedArray, 3000,
      cuGraphicsSubResourceGetMappedArray),                              /* not emulated */
    E(cuGraphicsUnmapResources, 3000, cuGraphicsUnmapResources),         /* not emulated */
    P(cuGraphicsUnmapResources, 7000, cuGraphicsUnmapResources_ptsz),    /* not emulated */
    E(cuGraphicsUnregisterResource, 3000, cuGraphicsUnregisterResource), /* not emulated */
    E(cuGreenCtxCreate, 12040, cuGreenCtxCreate),                        /* not emulated */
    E(cuGreenCtxDestroy, 12040, cuGreenCtxDestroy),                      /* not emulated */
    E(cuGreenCtxGetDevResource, 12040, cuGreenCtxGetDevResource),        /* not emulated */
    E(cuGreenCtxGetId, 12090, cuGreenCtxGetId),                          /* not emulated */
    E(cuGreenCtxRecordEvent, 12040, cuGreenCtxRecordEvent),              /* not emulated */
    E(cuGreenCtxStreamCreate, 12050, cuGreenCtxStreamCreate),            /* not emulated */
    E(cuGreenCtxWaitEvent, 12040, cuGreenCtxWaitEvent),                  /* not emulated */
    E(cuImportExternalMemory, 10000, cuImportExternalMemory),            /* not emulated */
    E(cuImportExternalSemaphore, 10000, cuImportExternalSemaphore),      /* not emulated */
    E(cuInit, 2000, cuInit),
    E(cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle),
    E(cuIpcGetEventHandle, 4010, cuIpcGetEventHandle), /* not emulated */
    E(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle),
    E(cuIpcOpenEventHandle, 4010, cuIpcOpenEventHandle), /* not emulated */
    E(cuIpcOpenMemHandle, 4010, cuIpcOpenMemHandle),
    E(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2),
    E(cuKernelGetAttribute, 12000, cuKernelGetAttribute), /* not emulated */
    E(cuKernelGetFunction, 12000, cuKernelGetFunction),
    E(cuKernelGetLibrary, 12050, cuKernelGetLibrary),         /* not emulated */
    E(cuKernelGetName, 12030, cuKernelGetName),               /* not emulated */
    E(cuKernelGetParamInfo, 12040, cuKernelGetParamInfo),     /* not emulated */
    E(cuKernelSetAttribute, 12000, cuKernelSetAttribute),     /* not emulated */
    E(cuKernelSetCacheConfig, 12000, cuKernelSetCacheConfig), /* not emulated */
    E(cuLaunch, 2000, cuLaunch),                              /* not emulated */
    E(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel),
    P(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel_ptsz),
    E(cuLaunchCooperativeKernelMultiDevice, 9000,
      cuLaunchCooperativeKernelMultiDevice),       /* not emulated */
    E(cuLaunchGrid, 2000, cuLaunchGrid),           /* not emulated */
    E(cuLaunchGridAsync, 2000, cuLaunchGridAsync), /* not emulated */
    E(cuLaunchHostFunc, 10000, cuLaunchHostFunc),
    P(cuLaunchHostFunc, 10000, cuLaunchHostFunc_ptsz),
    E(cuLaunchKernel, 4000, cuLaunchKernel),
    P(cuLaunchKernel, 7000, cuLaunchKernel_ptsz),
    E(cuLaunchKernelEx, 11060, cuLaunchKernelEx),
    P(cuLaunchKernelEx, 11060, cuLaunchKernelEx_ptsz),
    E(cuLibraryEnumerateKernels, 12040, cuLibraryEnumerateKernels), /* not emulated */
    E(cuLibraryGetGlobal, 12000, cuLibraryGetGlobal),
    E(cuLibraryGetKernel, 12000, cuLibraryGetKernel),
    E(cuLibraryGetKernelCount, 12040, cuLibraryGetKernelCount), /* not emulated */
    E(cuLibraryGetManaged, 12000, cuLibraryGetManaged),         /* not emulated */
    E(cuLibraryGetModule, 12000, cuLibraryGetModule),
    E(cuLibraryGetUnifiedFunction, 12000, cuLibraryGetUnifiedFunction), /* not emulated */
    E(cuLibraryLoadData, 12000, cuLibraryLoadData),
    E(cuLibraryLoadFromFile, 12000, cuLibraryLoadFromFile), /* not emulated */
    E(cuLibraryUnload, 12000, cuLibraryUnload),
    E(cuLinkAddData, 5050, cuLinkAddData),                        /* not emulated */
    E(cuLinkAddData, 6050, cuLinkAddData_v2),                     /* not emulated */
    E(cuLinkAddFile, 5050, cuLinkAddFile),                        /* not emulated */
    E(cuLinkAddFile, 6050, cuLinkAddFile_v2),                     /* not emulated */
    E(cuLinkComplete, 5050, cuLinkComplete),                      /* not emulated */
    E(cuLinkCreate, 5050, cuLinkCreate),                          /* not emulated */
    E(cuLinkCreate, 6050, cuLinkCreate_v2),                       /* not emulated */
    E(cuLinkDestroy, 5050, cuLinkDestroy),                        /* not emulated */
    E(cuLogsCurrent, 12090, cuLogsCurrent),                       /* not emulated */
    E(cuLogsDumpToFile, 12090, cuLogsDumpToFile),                 /* not emulated */
    E(cuLogsDumpToMemory, 12090, cuLogsDumpToMemory),             /* not emulated */
    E(cuLogsRegisterCallback, 12090, cuLogsRegisterCallback),     /* not emulated */
    E(cuLogsUnregisterCallback, 12090, cuLogsUnregisterCallback), /* not emulated */
    E(cuMemAddressFree, 10020, cuMemAddressFree),
    E(cuMemAddressReserve, 10020, cuMemAddressReserve),
    E(cuMemAdvise, 8000, cuMemAdvise),
    E(cuMemAdvise, 12020, cuMemAdvise_v2),
    E(cuMemAlloc, 2000, cuMemAlloc), /* not emulated */
    E(cuMemAlloc, 3020, cuMemAlloc_v2),
    E(cuMemAllocAsync, 11020, cuMemAllocAsync),
    P(cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz),
    E(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync),
    P(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz),
    E(cuMemAllocHost, 2000, cuMemAllocHost), /* not emulated */
    E(cuMemAllocHost, 3020, cuMemAllocHost_v2),
    E(cuMemAllocManaged, 6000, cuMemAllocManaged),
    E(cuMemAllocPitch, 2000, cuMemAllocPitch), /* not emulated */
    E(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    E(cuMemBatchDecompressAsync, 12060, cuMemBatchDecompressAsync),      /* not emulated */
    P(cuMemBatchDecompressAsync, 12060, cuMemBatchDecompressAsync_ptsz), /* not emulated */
    E(cuMemCreate, 10020, cuMemCreate),
    E(cuMemDiscardAndPrefetchBatchAsync, 13000,
      cuMemDiscardAndPrefetchBatchAsync), /* not emulated */
    P(cuMemDiscardAndPrefetchBatchAsync, 13000,
      cuMemDiscardAndPrefetchBatchAsync_ptsz),                     /* not emulated */
    E(cuMemDiscardBatchAsync, 13000, cuMemDiscardBatchAsync),      /* not emulated */
    P(cuMemDiscardBatchAsync, 13000, cuMemDiscardBatchAsync_ptsz), /* not emulated */
    E(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle),
    E(cuMemFree, 2000, cuMemFree), /* not emulated */
    E(cuMemFree, 3020, cuMemFree_v2),
    E(cuMemFreeAsync, 11020, cuMemFreeAsync),
    P(cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz),
    E(cuMemFreeHost, 2000, cuMemFreeHost),
    E(cuMemGetAccess, 10020, cuMemGetAccess),            /* not emulated */
    E(cuMemGetAddressRange, 2000, cuMemGetAddressRange), /* not emulated */
    E(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2),
    E(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
    E(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle),
    E(cuMemGetDefaultMemPool, 13000, cuMemGetDefaultMemPool),               /* not emulated */
    E(cuMemGetHandleForAddressRange, 11070, cuMemGetHandleForAddressRange), /* not emulated */
    E(cuMemGetInfo, 2000, cuMemGetInfo),                                    /* not emulated */
    E(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    E(cuMemGetMemPool, 13000, cuMemGetMemPool), /* not emulated */
    E(cuMemHostAlloc, 2020, cuMemHostAlloc),
    E(cuMemHostGetDevicePointer, 2020, cuMemHostGetDevicePointer), /* not emulated */
    E(cuMemHostGetDevicePointer, 3020, cuMemHostGetDevicePointer_v2),
    E(cuMemHostGetFlags, 2030, cuMemHostGetFlags),
    E(cuMemHostRegister, 4000, cuMemHostRegister),
    E(cuMemHostRegister, 6050, cuMemHostRegister_v2),
    E(cuMemHostUnregister, 4000, cuMemHostUnregister),
    E(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle),
    E(cuMemMap, 10020, cuMemMap),
    E(cuMemMapArrayAsync, 11010, cuMemMapArrayAsync),      /* not emulated */
    P(cuMemMapArrayAsync, 11010, cuMemMapArrayAsync_ptsz), /* not emulated */
    E(cuMemPoolCreate, 11020, cuMemPoolCreate),
    E(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
    E(cuMemPoolExportPointer, 11020, cuMemPoolExportPointer),                     /* not emulated */
    E(cuMemPoolExportToShareableHandle, 11020, cuMemPoolExportToShareableHandle), /* not emulated */
    E(cuMemPoolGetAccess, 11020, cuMemPoolGetAccess),                             /* not emulated */
    E(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute),
    E(cuMemPoolImportFromShareableHandle, 11020,
      cuMemPoolImportFromShareableHandle),                    /* not emulated */
    E(cuMemPoolImportPointer, 11020, cuMemPoolImportPointer), /* not emulated */
    E(cuMemPoolSetAccess, 11020, cuMemPoolSetAccess),         /* not emulated */
    E(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute),
    E(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo),
    E(cuMemPrefetchAsync, 8000, cuMemPrefetchAsync),
    P(cuMemPrefetchAsync, 8000, cuMemPrefetchAsync_ptsz),
    E(cuMemPrefetchAsync, 12020, cuMemPrefetchAsync_v2),
    P(cuMemPrefetchAsync, 12020, cuMemPrefetchAsync_v2_ptsz),
    E(cuMemPrefetchBatchAsync, 13000, cuMemPrefetchBatchAsync),      /* not emulated */
    P(cuMemPrefetchBatchAsync, 13000, cuMemPrefetchBatchAsync_ptsz), /* not emulated */
    E(cuMemRangeGetAttribute, 8000, cuMemRangeGetAttribute),         /* not emulated */
    E(cuMemRangeGetAttributes, 8000, cuMemRangeGetAttributes),       /* not emulated */
    E(cuMemRelease, 10020, cuMemRelease),
    E(cuMemRetainAllocationHandle, 11000, cuMemRetainAllocationHandle), /* not emulated */
    E(cuMemSetAccess, 10020, cuMemSetAccess),
    E(cuMemSetMemPool, 13000, cuMemSetMemPool), /* not emulated */
    E(cuMemUnmap, 10020, cuMemUnmap),
    E(cuMemcpy, 4000, cuMemcpy),
    P(cuMemcpy, 7000, cuMemcpy_ptds),
    E(cuMemcpy2D, 2000, cuMemcpy2D), /* not emulated */
    E(cuMemcpy2D, 3020, cuMemcpy2D_v2),
    P(cuMemcpy2D, 7000, cuMemcpy2D_v2_ptds),
    E(cuMemcpy2DAsync, 2000, cuMemcpy2DAsync), /* not emulated */
    E(cuMemcpy2DAsync, 3020, cuMemcpy2DAsync_v2),
    P(cuMemcpy2DAsync, 7000, cuMemcpy2DAsync_v2_ptsz),
    E(cuMemcpy2DUnaligned, 2000, cuMemcpy2DUnaligned), /* not emulated */
    E(cuMemcpy2DUnaligned, 3020, cuMemcpy2DUnaligned_v2),
    P(cuMemcpy2DUnaligned, 7000, cuMemcpy2DUnaligned_v2_ptds),
    E(cuMemcpy3D, 2000, cuMemcpy3D), /* not emulated */
    E(cuMemcpy3D, 3020, cuMemcpy3D_v2),
    P(cuMemcpy3D, 7000, cuMemcpy3D_v2_ptds),
    E(cuMemcpy3DAsync, 2000, cuMemcpy3DAsync), /* not emulated */
    E(cuMemcpy3DAsync, 3020, cuMemcpy3DAsync_v2),
    P(cuMemcpy3DAsync, 7000, cuMemcpy3DAsync_v2_ptsz),
    E(cuMemcpy3DBatchAsync, 12080, cuMemcpy3DBatchAsync),         /* not emulated */
    P(cuMemcpy3DBatchAsync, 12080, cuMemcpy3DBatchAsync_ptsz),    /* not emulated */
    E(cuMemcpy3DBatchAsync, 13000, cuMemcpy3DBatchAsync_v2),      /* not emulated */
    P(cuMemcpy3DBatchAsync, 13000, cuMemcpy3DBatchAsync_v2_ptsz), /* not emulated */
    E(cuMemcpy3DPeer, 4000, cuMemcpy3DPeer),                      /* not emulated */
    P(cuMemcpy3DPeer, 7000, cuMemcpy3DPeer_ptds),                 /* not emulated */
    E(cuMemcpy3DPeerAsync, 4000, cuMemcpy3DPeerAsync),            /* not emulated */
    P(cuMemcpy3DPeerAsync, 7000, cuMemcpy3DPeerAsync_ptsz),       /* not emulated */
    E(cuMemcpyAsync, 4000, cuMemcpyAsync),
    P(cuMemcpyAsync, 7000, cuMemcpyAsync_ptsz),
    E(cuMemcpyAtoA, 2000, cuMemcpyAtoA),                      /* not emulated */
    E(cuMemcpyAtoA, 3020, cuMemcpyAtoA_v2),                   /* not emulated */
    P(cuMemcpyAtoA, 7000, cuMemcpyAtoA_v2_ptds),              /* not emulated */
    E(cuMemcpyAtoD, 2000, cuMemcpyAtoD),                      /* not emulated */
    E(cuMemcpyAtoD, 3020, cuMemcpyAtoD_v2),                   /* not emulated */
    P(cuMemcpyAtoD, 7000, cuMemcpyAtoD_v2_ptds),              /* not emulated */
    E(cuMemcpyAtoH, 2000, cuMemcpyAtoH),                      /* not emulated */
    E(cuMemcpyAtoH, 3020, cuMemcpyAtoH_v2),                   /* not emulated */
    P(cuMemcpyAtoH, 7000, cuMemcpyAtoH_v2_ptds),              /* not emulated */
    E(cuMemcpyAtoHAsync, 2000, cuMemcpyAtoHAsync),            /* not emulated */
    E(cuMemcpyAtoHAsync, 3020, cuMemcpyAtoHAsync_v2),         /* not emulated */
    P(cuMemcpyAtoHAsync, 7000, cuMemcpyAtoHAsync_v2_ptsz),    /* not emulated */
    E(cuMemcpyBatchAsync, 12080, cuMemcpyBatchAsync),         /* not emulated */
    P(cuMemcpyBatchAsync, 12080, cuMemcpyBatchAsync_ptsz),    /* not emulated */
    E(cuMemcpyBatchAsync, 13000, cuMemcpyBatchAsync_v2),      /* not emulated */
    P(cuMemcpyBatchAsync, 13000, cuMemcpyBatchAsync_v2_ptsz), /* not emulated */
    E(cuMemcpyDtoA, 2000, cuMemcpyDtoA),                      /* not emulated */
    E(cuMemcpyDtoA, 3020, cuMemcpyDtoA_v2),                   /* not emulated */
    P(cuMemcpyDtoA, 7000, cuMemcpyDtoA_v2_ptds),              /* not emulated */
    E(cuMemcpyDtoD, 2000, cuMemcpyDtoD),                      /* not emulated */
    E(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2),
    P(cuMemcpyDtoD, 7000, cuMemcpyDtoD_v2_ptds),
    E(cuMemcpyDtoDAsync, 3000, cuMemcpyDtoDAsync), /* not emulated */
    E(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2),
    P(cuMemcpyDtoDAsync, 7000, cuMemcpyDtoDAsync_v2_ptsz),
    E(cuMemcpyDtoH, 2000, cuMemcpyDtoH), /* not emulated */
    E(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2),
    P(cuMemcpyDtoH, 7000, cuMemcpyDtoH_v2_ptds),
    E(cuMemcpyDtoHAsync, 2000, cuMemcpyDtoHAsync), /* not emulated */
    E(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2),
    P(cuMemcpyDtoHAsync, 7000, cuMemcpyDtoHAsync_v2_ptsz),
    E(cuMemcpyHtoA, 2000, cuMemcpyHtoA),                   /* not emulated */
    E(cuMemcpyHtoA, 3020, cuMemcpyHtoA_v2),                /* not emulated */
    P(cuMemcpyHtoA, 7000, cuMemcpyHtoA_v2_ptds),           /* not emulated */
    E(cuMemcpyHtoAAsync, 2000, cuMemcpyHtoAAsync),         /* not emulated */
    E(cuMemcpyHtoAAsync, 3020, cuMemcpyHtoAAsync_v2),      /* not emulated */
    P(cuMemcpyHtoAAsync, 7000, cuMemcpyHtoAAsync_v2_ptsz), /* not emulated */
    E(cuMemcpyHtoD, 2000, cuMemcpyHtoD),                   /* not emulated */
    E(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2),
    P(cuMemcpyHtoD, 7000, cuMemcpyHtoD_v2_ptds),
    E(cuMemcpyHtoDAsync, 2000, cuMemcpyHtoDAsync), /* not emulated */
    E(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2),
    P(cuMemcpyHtoDAsync, 7000, cuMemcpyHtoDAsync_v2_ptsz),
    E(cuMemcpyPeer, 4000, cuMemcpyPeer),
    P(cuMemcpyPeer, 7000, cuMemcpyPeer_ptds),
    E(cuMemcpyPeerAsync, 4000, cuMemcpyPeerAsync),
    P(cuMemcpyPeerAsync, 7000, cuMemcpyPeerAsync_ptsz),
    E(cuMemsetD16, 2000, cuMemsetD16), /* not emulated */
    E(cuMemsetD16, 3020, cuMemsetD16_v2),
    P(cuMemsetD16, 7000, cuMemsetD16_v2_ptds),
    E(cuMemsetD16Async, 3020, cuMemsetD16Async),
    P(cuMemsetD16Async, 7000, cuMemsetD16Async_ptsz),
    E(cuMemsetD2D16, 2000, cuMemsetD2D16),                /* not emulated */
    E(cuMemsetD2D16, 3020, cuMemsetD2D16_v2),             /* not emulated */
    P(cuMemsetD2D16, 7000, cuMemsetD2D16_v2_ptds),        /* not emulated */
    E(cuMemsetD2D16Async, 3020, cuMemsetD2D16Async),      /* not emulated */
    P(cuMemsetD2D16Async, 7000, cuMemsetD2D16Async_ptsz), /* not emulated */
    E(cuMemsetD2D32, 2000, cuMemsetD2D32),                /* not emulated */
    E(cuMemsetD2D32, 3020, cuMemsetD2D32_v2),
    P(cuMemsetD2D32, 7000, cuMemsetD2D32_v2_ptds),
    E(cuMemsetD2D32Async, 3020, cuMemsetD2D32Async),      /* not emulated */
    P(cuMemsetD2D32Async, 7000, cuMemsetD2D32Async_ptsz), /* not emulated */
    E(cuMemsetD2D8, 2000, cuMemsetD2D8),                  /* not emulated */
    E(cuMemsetD2D8, 3020, cuMemsetD2D8_v2),
    P(cuMemsetD2D8, 7000, cuMemsetD2D8_v2_ptds),
    E(cuMemsetD2D8Async, 3020, cuMemsetD2D8Async),      /* not emulated */
    P(cuMemsetD2D8Async, 7000, cuMemsetD2D8Async_ptsz), /* not emulated */
    E(cuMemsetD32, 2000, cuMemsetD32),                  /* not emulated */
    E(cuMemsetD32, 3020, cuMemsetD32_v2),
    P(cuMemsetD32, 7000, cuMemsetD32_v2_ptds),
    E(cuMemsetD32Async, 3020, cuMemsetD32Async),
    P(cuMemsetD32Async, 7000, cuMemsetD32Async_ptsz),
    E(cuMemsetD8, 2000, cuMemsetD8), /* not emulated */
    E(cuMemsetD8, 3020, cuMemsetD8_v2),
    P(cuMemsetD8, 7000, cuMemsetD8_v2_ptds),
    E(cuMemsetD8Async, 3020, cuMemsetD8Async),
    P(cuMemsetD8Async, 7000, cuMemsetD8Async_ptsz),
    E(cuMipmappedArrayCreate, 5000, cuMipmappedArrayCreate),
    E(cuMipmappedArrayDestroy, 5000, cuMipmappedArrayDestroy),
    E(cuMipmappedArrayGetLevel, 5000, cuMipmappedArrayGetLevel), /* not emulated */
    E(cuMipmappedArrayGetMemoryRequirements, 11060,
      cuMipmappedArrayGetMemoryRequirements), /* not emulated */
    E(cuMipmappedArrayGetSparseProperties, 11010,
      cuMipmappedArrayGetSparseProperties),                           /* not emulated */
    E(cuModuleEnumerateFunctions, 12040, cuModuleEnumerateFunctions), /* not emulated */
    E(cuModuleGetFunction, 2000, cuModuleGetFunction),
    E(cuModuleGetFunctionCount, 12040, cuModuleGetFunctionCount), /* not emulated */
    E(cuModuleGetGlobal, 2000, cuModuleGetGlobal),                /* not emulated */
    E(cuModuleGetGlobal, 3020, cuModuleGetGlobal_v2),
    E(cuModuleGetLoadingMode, 11070, cuModuleGetLoadingMode), /* not emulated */
    E(cuModuleGetSurfRef, 3000, cuModuleGetSurfRef),          /* not emulated */
    E(cuModuleGetTexRef, 2000, cuModuleGetTexRef),            /* not emulated */
    E(cuModuleLoad, 2000, cuModuleLoad),
    E(cuModuleLoadData, 2000, cuModuleLoadData),
    E(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx),
    E(cuModuleLoadFatBinary, 2000, cuModuleLoadFatBinary),
    E(cuModuleUnload, 2000, cuModuleUnload),
    E(cuMulticastAddDevice, 12010, cuMulticastAddDevice),           /* not emulated */
    E(cuMulticastBindAddr, 12010, cuMulticastBindAddr),             /* not emulated */
    E(cuMulticastBindMem, 12010, cuMulticastBindMem),               /* not emulated */
    E(cuMulticastCreate, 12010, cuMulticastCreate),                 /* not emulated */
    E(cuMulticastGetGranularity, 12010, cuMulticastGetGranularity), /* not emulated */
    E(cuMulticastUnbind, 12010, cuMulticastUnbind),                 /* not emulated */
    E(cuOccupancyAvailableDynamicSMemPerBlock, 10020,
      cuOccupancyAvailableDynamicSMemPerBlock), /* not emulated */
    E(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050,
      cuOccupancyMaxActiveBlocksPerMultiprocessor),
    E(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, 7000,
      cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags),              /* not emulated */
    E(cuOccupancyMaxActiveClusters, 11070, cuOccupancyMaxActiveClusters), /* not emulated */
    E(cuOccupancyMaxPotentialBlockSize, 6050, cuOccupancyMaxPotentialBlockSize),
    E(cuOccupancyMaxPotentialBlockSizeWithFlags, 7000,
      cuOccupancyMaxPotentialBlockSizeWithFlags), /* not emulated */
    E(cuOccupancyMaxPotentialClusterSize, 11070,
      cuOccupancyMaxPotentialClusterSize),       /* not emulated */
    E(cuParamSetSize, 2000, cuParamSetSize),     /* not emulated */
    E(cuParamSetTexRef, 2000, cuParamSetTexRef), /* not emulated */
    E(cuParamSetf, 2000, cuParamSetf),           /* not emulated */
    E(cuParamSeti, 2000, cuParamSeti),           /* not emulated */
    E(cuParamSetv, 2000, cuParamSetv),           /* not emulated */
    E(cuPointerGetAttribute, 4000, cuPointerGetAttribute),
    E(cuPointerGetAttributes, 7000, cuPointerGetAttributes),
    E(cuPointerSetAttribute, 6000, cuPointerSetAttribute),                      /* not emulated */
    E(cuSignalExternalSemaphoresAsync, 10000, cuSignalExternalSemaphoresAsync), /* not emulated */
    P(cuSignalExternalSemaphoresAsync, 10000,
      cuSignalExternalSemaphoresAsync_ptsz), /* not emulated */
    E(cuStreamAddCallback, 5000, cuStreamAddCallback),
    P(cuStreamAddCallback, 7000, cuStreamAddCallback_ptsz),
    E(cuStreamAttachMemAsync, 6000, cuStreamAttachMemAsync),      /* not emulated */
    P(cuStreamAttachMemAsync, 7000, cuStreamAttachMemAsync_ptsz), /* not emulated */
    E(cuStreamBatchMemOp, 8000, cuStreamBatchMemOp),              /* not emulated */
    P(cuStreamBatchMemOp, 8000, cuStreamBatchMemOp_ptsz),         /* not emulated */
    E(cuStreamBatchMemOp, 11070, cuStreamBatchMemOp_v2),          /* not emulated */
    P(cuStreamBatchMemOp, 11070, cuStreamBatchMemOp_v2_ptsz),     /* not emulated */
    E(cuStreamBeginCapture, 10000, cuStreamBeginCapture),
    P(cuStreamBeginCapture, 10000, cuStreamBeginCapture_ptsz),
    E(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2),
    P(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2_ptsz),
    E(cuStreamBeginCaptureToGraph, 12030, cuStreamBeginCaptureToGraph),      /* not emulated */
    P(cuStreamBeginCaptureToGraph, 12030, cuStreamBeginCaptureToGraph_ptsz), /* not emulated */
    E(cuStreamCopyAttributes, 11000, cuStreamCopyAttributes),                /* not emulated */
    P(cuStreamCopyAttributes, 11000, cuStreamCopyAttributes_ptsz),           /* not emulated */
    E(cuStreamCreate, 2000, cuStreamCreate),
    E(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
    E(cuStreamDestroy, 2000, cuStreamDestroy),
    E(cuStreamDestroy, 4000, cuStreamDestroy_v2),
    E(cuStreamEndCapture, 10000, cuStreamEndCapture),
    P(cuStreamEndCapture, 10000, cuStreamEndCapture_ptsz),
    E(cuStreamGetAttribute, 11000, cuStreamGetAttribute),      /* not emulated */
    P(cuStreamGetAttribute, 11000, cuStreamGetAttribute_ptsz), /* not emulated */
    E(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo),
    P(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo_ptsz),
    E(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2),
    P(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2_ptsz),
    E(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3),
    P(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3_ptsz),
    E(cuStreamGetCtx, 9020, cuStreamGetCtx),
    P(cuStreamGetCtx, 9020, cuStreamGetCtx_ptsz),
    E(cuStreamGetCtx, 12050, cuStreamGetCtx_v2),
    P(cuStreamGetCtx, 12050, cuStreamGetCtx_v2_ptsz),
    E(cuStreamGetDevice, 12080, cuStreamGetDevice),
    P(cuStreamGetDevice, 12080, cuStreamGetDevice_ptsz),
    E(cuStreamGetFlags, 5050, cuStreamGetFlags),
    P(cuStreamGetFlags, 7000, cuStreamGetFlags_ptsz),
    E(cuStreamGetGreenCtx, 12040, cuStreamGetGreenCtx), /* not emulated */
    E(cuStreamGetId, 12000, cuStreamGetId),
    P(cuStreamGetId, 12000, cuStreamGetId_ptsz),
    E(cuStreamGetPriority, 5050, cuStreamGetPriority),
    P(cuStreamGetPriority, 7000, cuStreamGetPriority_ptsz),
    E(cuStreamIsCapturing, 10000, cuStreamIsCapturing),
    P(cuStreamIsCapturing, 10000, cuStreamIsCapturing_ptsz),
    E(cuStreamQuery, 2000, cuStreamQuery),
    P(cuStreamQuery, 7000, cuStreamQuery_ptsz),
    E(cuStreamSetAttribute, 11000, cuStreamSetAttribute),      /* not emulated */
    P(cuStreamSetAttribute, 11000, cuStreamSetAttribute_ptsz), /* not emulated */
    E(cuStreamSynchronize, 2000, cuStreamSynchronize),
    P(cuStreamSynchronize, 7000, cuStreamSynchronize_ptsz),
    E(cuStreamUpdateCaptureDependencies, 11030,
      cuStreamUpdateCaptureDependencies), /* not emulated */
    P(cuStreamUpdateCaptureDependencies, 11030,
      cuStreamUpdateCaptureDependencies_ptsz), /* not emulated */
    E(cuStreamUpdateCaptureDependencies, 12030,
      cuStreamUpdateCaptureDependencies_v2), /* not emulated */
    P(cuStreamUpdateCaptureDependencies, 12030,
      cuStreamUpdateCaptureDependencies_v2_ptsz), /* not emulated */
    E(cuStreamWaitEvent, 3020, cuStreamWaitEvent),
    P(cuStreamWaitEvent, 7000, cuStreamWaitEvent_ptsz),
    E(cuStreamWaitValue32, 8000, cuStreamWaitValue32),                       /* not emulated */
    P(cuStreamWaitValue32, 8000, cuStreamWaitValue32_ptsz),                  /* not emulated */
    E(cuStreamWaitValue32, 11070, cuStreamWaitValue32_v2),                   /* not emulated */
    P(cuStreamWaitValue32, 11070, cuStreamWaitValue32_v2_ptsz),              /* not emulated */
    E(cuStreamWaitValue64, 9000, cuStreamWaitValue64),                       /* not emulated */
    P(cuStreamWaitValue64, 9000, cuStreamWaitValue64_ptsz),                  /* not emulated */
    E(cuStreamWaitValue64, 11070, cuStreamWaitValue64_v2),                   /* not emulated */
    P(cuStreamWaitValue64, 11070, cuStreamWaitValue64_v2_ptsz),              /* not emulated */
    E(cuStreamWriteValue32, 8000, cuStreamWriteValue32),                     /* not emulated */
    P(cuStreamWriteValue32, 8000, cuStreamWriteValue32_ptsz),                /* not emulated */
    E(cuStreamWriteValue32, 11070, cuStreamWriteValue32_v2),                 /* not emulated */
    P(cuStreamWriteValue32, 11070, cuStreamWriteValue32_v2_ptsz),            /* not emulated */
    E(cuStreamWriteValue64, 9000, cuStreamWriteValue64),                     /* not emulated */
    P(cuStreamWriteValue64, 9000, cuStreamWriteValue64_ptsz),                /* not emulated */
    E(cuStreamWriteValue64, 11070, cuStreamWriteValue64_v2),                 /* not emulated */
    P(cuStreamWriteValue64, 11070, cuStreamWriteValue64_v2_ptsz),            /* not emulated */
    E(cuSurfObjectCreate, 5000, cuSurfObjectCreate),                         /* not emulated */
    E(cuSurfObjectDestroy, 5000, cuSurfObjectDestroy),                       /* not emulated */
    E(cuSurfObjectGetResourceDesc, 5000, cuSurfObjectGetResourceDesc),       /* not emulated */
    E(cuSurfRefGetArray, 3000, cuSurfRefGetArray),                           /* not emulated */
    E(cuSurfRefSetArray, 3000, cuSurfRefSetArray),                           /* not emulated */
    E(cuTensorMapEncodeIm2col, 12000, cuTensorMapEncodeIm2col),              /* not emulated */
    E(cuTensorMapEncodeIm2colWide, 12080, cuTensorMapEncodeIm2colWide),      /* not emulated */
    E(cuTensorMapEncodeTiled, 12000, cuTensorMapEncodeTiled),                /* not emulated */
    E(cuTensorMapReplaceAddress, 12000, cuTensorMapReplaceAddress),          /* not emulated */
    E(cuTexObjectCreate, 5000, cuTexObjectCreate),                           /* not emulated */
    E(cuTexObjectDestroy, 5000, cuTexObjectDestroy),                         /* not emulated */
    E(cuTexObjectGetResourceDesc, 5000, cuTexObjectGetResourceDesc),         /* not emulated */
    E(cuTexObjectGetResourceViewDesc, 5000, cuTexObjectGetResourceViewDesc), /* not emulated */
    E(cuTexObjectGetTextureDesc, 5000, cuTexObjectGetTextureDesc),           /* not emulated */
    E(cuTexRefCreate, 2000, cuTexRefCreate),                                 /* not emulated */
    E(cuTexRefDestroy, 2000, cuTexRefDestroy),                               /* not emulated */
    E(cuTexRefGetAddress, 2000, cuTexRefGetAddress),                         /* not emulated */
    E(cuTexRefGetAddress, 3020, cuTexRefGetAddress_v2),                      /* not emulated */
    E(cuTexRefGetAddressMode, 2000, cuTexRefGetAddressMode),                 /* not emulated */
    E(cuTexRefGetArray, 2000, cuTexRefGetArray),                             /* not emulated */
    E(cuTexRefGetBorderColor, 8000, cuTexRefGetBorderColor),                 /* not emulated */
    E(cuTexRefGetFilterMode, 2000, cuTexRefGetFilterMode),                   /* not emulated */
    E(cuTexRefGetFlags, 2000, cuTexRefGetFlags),                             /* not emulated */
    E(cuTexRefGetFormat, 2000, cuTexRefGetFormat),                           /* not emulated */
    E(cuTexRefGetMaxAnisotropy, 5000, cuTexRefGetMaxAnisotropy),             /* not emulated */
    E(cuTexRefGetMipmapFilterMode, 5000, cuTexRefGetMipmapFilterMode),       /* not emulated */
    E(cuTexRefGetMipmapLevelBias, 5000, cuTexRefGetMipmapLevelBias),         /* not emulated */
    E(cuTexRefGetMipmapLevelClamp, 5000, cuTexRefGetMipmapLevelClamp),       /* not emulated */
    E(cuTexRefGetMipmappedArray, 5000, cuTexRefGetMipmappedArray),           /* not emulated */
    E(cuTexRefSetAddress, 2000, cuTexRefSetAddress),                         /* not emulated */
    E(cuTexRefSetAddress, 3020, cuTexRefSetAddress_v2),                      /* not emulated */
    E(cuTexRefSetAddress2D, 2020, cuTexRefSetAddress2D),                     /* not emulated */
    E(cuTexRefSetAddress2D, 3020, cuTexRefSetAddress2D_v2),                  /* not emulated */
    E(cuTexRefSetAddress2D, 4010, cuTexRefSetAddress2D_v3),                  /* not emulated */
    E(cuTexRefSetAddressMode, 2000, cuTexRefSetAddressMode),                 /* not emulated */
    E(cuTexRefSetArray, 2000, cuTexRefSetArray),                             /* not emulated */
    E(cuTexRefSetBorderColor, 8000, cuTexRefSetBorderColor),                 /* not emulated */
    E(cuTexRefSetFilterMode, 2000, cuTexRefSetFilterMode),                   /* not emulated */
    E(cuTexRefSetFlags, 2000, cuTexRefSetFlags),                             /* not emulated */
    E(cuTexRefSetFormat, 2000, cuTexRefSetFormat),                           /* not emulated */
    E(cuTexRefSetMaxAnisotropy, 5000, cuTexRefSetMaxAnisotropy),             /* not emulated */
    E(cuTexRefSetMipmapFilterMode, 5000, cuTexRefSetMipmapFilterMode),       /* not emulated */
    E(cuTexRefSetMipmapLevelBias, 5000, cuTexRefSetMipmapLevelBias),         /* not emulated */
    E(cuTexRefSetMipmapLevelClamp, 5000, cuTexRefSetMipmapLevelClamp),       /* not emulated */
    E(cuTexRefSetMipmappedArray, 5000, cuTexRefSetMipmappedArray),           /* not emulated */
    E(cuThreadExchangeStreamCaptureMode, 10010, cuThreadExchangeStreamCaptureMode),
    E(cuUserObjectCreate, 11030, cuUserObjectCreate),                            /* not emulated */
    E(cuUserObjectRelease, 11030, cuUserObjectRelease),                          /* not emulated */
    E(cuUserObjectRetain, 11030, cuUserObjectRetain),                            /* not emulated */
    E(cuWaitExternalSemaphoresAsync, 10000, cuWaitExternalSemaphoresAsync),      /* not emulated */
    P(cuWaitExternalSemaphoresAsync, 10000, cuWaitExternalSemaphoresAsync_ptsz), /* not emulated */
};

/* glibc's own dlsym. A library preloaded in front of the driver may override dlsym (libvcuda.so
 * does, answering the names it hooks with its wrappers): the driver's answers must be its own
 * functions, as a real driver's table is, so its look-ups must not go through such an override.
 * RTLD_NEXT from here skips every object loaded before this one, the preloads included. */
typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn real_dlsym(void)
{
    static dlsym_fn f;
    dlsym_fn r = __atomic_load_n(&f, __ATOMIC_ACQUIRE);
    if (r)
        return r;
    /* the version glibc 2.34+ defines, then the x86-64 and aarch64 base versions */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; !r && i < sizeof(versions) / sizeof(versions[0]); i++)
        r = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (!r)
        r = dlsym; /* not glibc: whatever dlsym there is */
    __atomic_store_n(&f, r, __ATOMIC_RELEASE);
    return r;
}

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
/* The stubs gen-stubs.py makes for entry points the emulator does not implement lie in their
 * own section; an implementation replaces its stub, and lies elsewhere. */
extern const char __start_emu_stubs_cuda[] __attribute__((weak));
extern const char __stop_emu_stubs_cuda[] __attribute__((weak));

static bool is_stub(const void *fn)
{
    const char *p = fn;
    return p && __start_emu_stubs_cuda && p >= __start_emu_stubs_cuda && p < __stop_emu_stubs_cuda;
}

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

/* NVIDIA's driver 580.159.04 (CUDA 13.0), seen on an NVIDIA H200 on 2026-11-26 (the probe
 * recorded in docs/emulator-cuda.md, "Answers corrected on a real GPU"), answers as this does:
 * a version above its own or an unknown flag is CUDA_ERROR_INVALID_VALUE with *pfn and the
 * status untouched; a lookup with no answer is CUDA_SUCCESS with *pfn NULL and the reason in
 * the status, given or not (also the CUDA driver API reference, cuGetProcAddress). */
EMU_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn || flags > 2 || version > EMU_CUDA_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    bool too_new = false;
    const struct proc_row *r =
        lookup(symbol, version, flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &too_new);
    void *h = r ? self_handle() : NULL;
    void *fn = h ? real_dlsym()(h, r->symbol) : NULL;
    if (is_stub(fn))
        fn = NULL; /* exported for interposers, but not emulated: the driver has no answer */
    *pfn = fn;
    if (status)
        *status = fn        ? CU_GET_PROC_ADDRESS_SUCCESS
                  : too_new ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}

/* The CUDA 11.3 form, with no status to carry the reason: a lookup with no answer is
 * CUDA_ERROR_NOT_FOUND with *pfn untouched (driver 580.159.04, as above; its CUDA 11
 * reference gives the same code). */
EMU_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    void *keep = pfn ? *pfn : NULL;
    CUresult r = cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
    if (r != CUDA_SUCCESS || *pfn)
        return r;
    *pfn = keep;
    return CUDA_ERROR_NOT_FOUND;
}
