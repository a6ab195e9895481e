/*
 * nvml.h — loads libnvidia-ml at run time and hands out its functions as a table.
 *
 * NVML is never linked: gpu_nvml_open() dlopens the library named by the caller, by
 * $ACCEL_NVML_LIBRARY, or "libnvidia-ml.so.1" (the real driver's or the emulator's), resolves
 * the entry points the suite uses and calls nvmlInit_v2. Members of struct gpu_nvml are named
 * after the NVML functions they point to (nvml->nvmlDeviceGetCount_v2(&n)); required ones are
 * never NULL, optional ones (marked below) are NULL when the library lacks them.
 *
 * Tests may fill a zeroed struct gpu_nvml with their own functions instead of opening a
 * library; gpu_nvml_free() then neither shuts NVML down nor dlcloses anything.
 *
 * Threads: NVML itself is thread-safe; so are these functions once opened (the detected
 * process-info stride is cached with atomics).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvml_api.h"

#define GPU_NVML_DEFAULT_LIBRARY "libnvidia-ml.so.1"
#define GPU_NVML_LIBRARY_ENV "ACCEL_NVML_LIBRARY"

#define GPU_NVML_FN(name) __typeof__(name) *name

struct gpu_nvml {
    void *dl;         /* dlopen handle; NULL for an injected table */
    bool initialized; /* nvmlInit_v2 succeeded: gpu_nvml_free calls nvmlShutdown */
    char path[256];   /* what was opened */

    /* Required. */
    GPU_NVML_FN(nvmlInit_v2);
    GPU_NVML_FN(nvmlShutdown);
    GPU_NVML_FN(nvmlErrorString);
    GPU_NVML_FN(nvmlDeviceGetCount_v2);
    GPU_NVML_FN(nvmlDeviceGetHandleByIndex_v2);

    /* Optional: NULL when the library does not export them. */
    GPU_NVML_FN(nvmlInitWithFlags);
    GPU_NVML_FN(nvmlSystemGetDriverVersion);
    GPU_NVML_FN(nvmlSystemGetNVMLVersion);
    GPU_NVML_FN(nvmlSystemGetCudaDriverVersion);
    GPU_NVML_FN(nvmlSystemGetCudaDriverVersion_v2);
    GPU_NVML_FN(nvmlDeviceGetHandleByUUID);
    GPU_NVML_FN(nvmlDeviceGetHandleByPciBusId_v2);
    GPU_NVML_FN(nvmlDeviceGetUUID);
    GPU_NVML_FN(nvmlDeviceGetName);
    GPU_NVML_FN(nvmlDeviceGetSerial);
    GPU_NVML_FN(nvmlDeviceGetIndex);
    GPU_NVML_FN(nvmlDeviceGetMinorNumber);
    GPU_NVML_FN(nvmlDeviceGetPciInfo_v3);
    GPU_NVML_FN(nvmlDeviceGetMemoryInfo);
    GPU_NVML_FN(nvmlDeviceGetMemoryInfo_v2);
    GPU_NVML_FN(nvmlDeviceGetCudaComputeCapability);
    GPU_NVML_FN(nvmlDeviceGetMigMode);
    GPU_NVML_FN(nvmlDeviceGetVbiosVersion);
    GPU_NVML_FN(nvmlDeviceGetNumaNodeId);
    GPU_NVML_FN(nvmlDeviceGetTopologyCommonAncestor);
    GPU_NVML_FN(nvmlDeviceGetNvLinkState);
    GPU_NVML_FN(nvmlDeviceGetNvLinkRemotePciInfo_v2);
    GPU_NVML_FN(nvmlDeviceGetUtilizationRates);
    GPU_NVML_FN(nvmlDeviceGetProcessUtilization);
    GPU_NVML_FN(nvmlDeviceGetProcessesUtilizationInfo);
    GPU_NVML_FN(nvmlDeviceGetComputeRunningProcesses);
    GPU_NVML_FN(nvmlDeviceGetComputeRunningProcesses_v2);
    GPU_NVML_FN(nvmlDeviceGetComputeRunningProcesses_v3);
    GPU_NVML_FN(nvmlDeviceGetTemperature);
    GPU_NVML_FN(nvmlDeviceGetTemperatureThreshold);
    GPU_NVML_FN(nvmlDeviceGetPowerUsage);
    GPU_NVML_FN(nvmlDeviceGetClockInfo);
    GPU_NVML_FN(nvmlDeviceGetMaxClockInfo);
    GPU_NVML_FN(nvmlDeviceGetComputeMode);
    GPU_NVML_FN(nvmlDeviceGetPersistenceMode);
    GPU_NVML_FN(nvmlDeviceGetTotalEccErrors);
    GPU_NVML_FN(nvmlEventSetCreate);
    GPU_NVML_FN(nvmlDeviceRegisterEvents);
    GPU_NVML_FN(nvmlDeviceGetSupportedEventTypes);
    GPU_NVML_FN(nvmlEventSetWait_v2);
    GPU_NVML_FN(nvmlEventSetFree);
    GPU_NVML_FN(nvmlDeviceGetMPSComputeRunningProcesses_v3);
    GPU_NVML_FN(nvmlDeviceGetGraphicsRunningProcesses_v3);
    GPU_NVML_FN(nvmlDeviceGetPowerManagementLimit);
    GPU_NVML_FN(nvmlDeviceGetEnforcedPowerLimit);
    GPU_NVML_FN(nvmlDeviceGetTotalEnergyConsumption);
    GPU_NVML_FN(nvmlDeviceGetFanSpeed);
    GPU_NVML_FN(nvmlDeviceGetPerformanceState);
    GPU_NVML_FN(nvmlDeviceGetCurrentClocksEventReasons);
    GPU_NVML_FN(nvmlDeviceGetEccMode);
    GPU_NVML_FN(nvmlDeviceGetRemappedRows);
    GPU_NVML_FN(nvmlDeviceGetPcieReplayCounter);
    GPU_NVML_FN(nvmlDeviceGetNvLinkErrorCounter);
    /* MIG (docs/mig.md): MIG devices, profiles, GPU and compute instances. */
    GPU_NVML_FN(nvmlDeviceGetMaxMigDeviceCount);
    GPU_NVML_FN(nvmlDeviceGetMigDeviceHandleByIndex);
    GPU_NVML_FN(nvmlDeviceGetDeviceHandleFromMigDeviceHandle);
    GPU_NVML_FN(nvmlDeviceGetGpuInstanceId);
    GPU_NVML_FN(nvmlDeviceGetComputeInstanceId);
    GPU_NVML_FN(nvmlDeviceGetGpuInstanceProfileInfoV);
    GPU_NVML_FN(nvmlDeviceGetGpuInstancePossiblePlacements_v2);
    GPU_NVML_FN(nvmlDeviceCreateGpuInstanceWithPlacement);
    GPU_NVML_FN(nvmlGpuInstanceDestroy);
    GPU_NVML_FN(nvmlDeviceGetGpuInstanceById);
    GPU_NVML_FN(nvmlGpuInstanceGetInfo);
    GPU_NVML_FN(nvmlGpuInstanceGetComputeInstanceProfileInfo);
    GPU_NVML_FN(nvmlGpuInstanceCreateComputeInstance);
    GPU_NVML_FN(nvmlComputeInstanceDestroy);
    GPU_NVML_FN(nvmlGpuInstanceGetComputeInstances);
    GPU_NVML_FN(nvmlGpuInstanceGetComputeInstanceById);
    GPU_NVML_FN(nvmlComputeInstanceGetInfo_v2);

    /* Process-info stride detected by gpu_nvml_running_processes (0 = not yet known) and the
     * entry point it was detected for; accessed atomically. */
    int proc_stride;
    int proc_call; /* enum gpu_nvml_proc_call */
};

/* Opens NVML: path NULL → $ACCEL_NVML_LIBRARY if set and non-empty, else
 * "libnvidia-ml.so.1". On failure returns -ENOENT (no library), -ENOSYS (a required symbol
 * is missing) or -EIO (nvmlInit_v2 failed), writes one line saying why and what to do into
 * err (when errlen > 0), and leaves *ret untouched. */
int gpu_nvml_open(const char *path, struct gpu_nvml **ret, char *err, size_t errlen);

/* Shuts NVML down and closes the library. Accepts NULL; returns NULL. */
struct gpu_nvml *gpu_nvml_free(struct gpu_nvml *nvml);

/* nvmlErrorString when available, else a short fixed description. Never NULL; borrowed. */
const char *gpu_nvml_strerror(const struct gpu_nvml *nvml, nvmlReturn_t r);

/* nvmlReturn_t → -errno (NOT_SUPPORTED → -EOPNOTSUPP, GPU_IS_LOST → -ENODEV, ...). */
int gpu_nvml_errno(nvmlReturn_t r);

enum gpu_nvml_proc_call {
    GPU_NVML_PROC_CALL_NONE = 0,
    GPU_NVML_PROC_CALL_V1,     /* nvmlDeviceGetComputeRunningProcesses */
    GPU_NVML_PROC_CALL_V2,     /* ..._v2 */
    GPU_NVML_PROC_CALL_V3,     /* ..._v3 */
    GPU_NVML_PROC_CALL_MPS_V3, /* nvmlDeviceGetMPSComputeRunningProcesses_v3 */
};

/* Which process list: the compute list (with MPS, the MPS server) or the MPS clients. */
enum gpu_nvml_proc_list {
    GPU_NVML_PROCS_COMPUTE = 0,
    GPU_NVML_PROCS_MPS,
};

struct gpu_process {
    unsigned int pid;
    uint64_t used_memory_bytes; /* UINT64_MAX when NVML cannot tell (no permission, WDDM) */
};

/* Compute processes running on dev: pid and device memory used, whatever record layout the
 * driver writes (see docs/inventory.md, "process-info stride"). Fills up to cap entries of
 * procs and sets *ret_n to the number of processes. Returns 0; -ENOSPC when more than cap
 * processes run (*ret_n then holds how many, procs is unspecified); -EPROTO when no consistent
 * stride could be found; -EOPNOTSUPP when the library has none of the three calls; other
 * -errno from gpu_nvml_errno(). No allocation: scratch space is on the stack, so at most
 * GPU_NVML_MAX_PROCS processes are reported. */
#define GPU_NVML_MAX_PROCS 256
int gpu_nvml_running_processes(struct gpu_nvml *nvml, nvmlDevice_t dev, struct gpu_process *procs,
                               size_t cap, size_t *ret_n);

/* The same for a chosen list. GPU_NVML_PROCS_MPS uses nvmlDeviceGetMPSComputeRunningProcesses_v3
 * (-EOPNOTSUPP without it); its records have the compute list's layout, so a stride learnt on
 * either list serves both. */
int gpu_nvml_list_processes(struct gpu_nvml *nvml, nvmlDevice_t dev, enum gpu_nvml_proc_list list,
                            struct gpu_process *procs, size_t cap, size_t *ret_n);

/* The stride (16, 24 or 32 bytes) detected with certainty and cached, or 0 (see
 * docs/inventory.md: one process, or trailing fields a driver leaves unwritten, teach nothing). */
int gpu_nvml_process_stride(const struct gpu_nvml *nvml);
