/* nvml-procs.c — the emulated NVML's process queries: running compute processes (the
 * processes holding memory on the GPU, with the record size `accel-emu init
 * --proc-info-stride` chose) and per-process utilization samples (from the GPU timeline's
 * busy intervals). */
#define _GNU_SOURCE
#include <string.h>

#include "nvml_emu.h"
#include "state-nvml.h"

/* Writes the process list of the device in records of `stride` bytes: pid (u32 at 0),
 * usedGpuMemory (u64 at 8), then for 24 and 32: gpuInstanceId, computeInstanceId (u32 at 16,
 * 20), then for 32: usedGpuCcProtectedMemory (u64 at 24). Whole records are written,
 * padding included, as a driver copying its structs does. */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *infoCount, void *infos,
                                      unsigned stride)
{
    unsigned gi;
    nvmlReturn_t r = nvml_emu_device(device, NULL, &gi);
    if (r != NVML_SUCCESS)
        return r;
    if (!infoCount || (*infoCount > 0 && !infos))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_proc_mem procs[EMU_MAX_PROCS];
    size_t n = 0;
    if (emu_state_procs(nvml_emu_state(), gi, procs, EMU_MAX_PROCS, &n) < 0)
        return NVML_ERROR_UNKNOWN;
    if (n > EMU_MAX_PROCS)
        n = EMU_MAX_PROCS;
    if (n > *infoCount) {
        *infoCount = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char *rec = (unsigned char *)infos + i * stride;
        uint32_t pid = (uint32_t)procs[i].pid, none = NVML_EMU_NO_INSTANCE;
        uint64_t used = procs[i].bytes, cc = 0;
        memset(rec, 0, stride);
        memcpy(rec, &pid, sizeof(pid));
        memcpy(rec + 8, &used, sizeof(used));
        if (stride >= 24) {
            memcpy(rec + 16, &none, sizeof(none));
            memcpy(rec + 20, &none, sizeof(none));
        }
        if (stride >= 32)
            memcpy(rec + 24, &cc, sizeof(cc));
    }
    *infoCount = (unsigned)n;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                               unsigned int *infoCount,
                                                               nvmlProcessInfo_v1_t *infos)
{
    return running_processes(device, infoCount, infos, 16);
}

static unsigned stride_now(void)
{
    struct emu_state *st = nvml_emu_state();
    return st ? emu_state_proc_info_stride(st) : 24;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                  unsigned int *infoCount,
                                                                  nvmlProcessInfo_v2_t *infos)
{
    return running_processes(device, infoCount, infos, stride_now());
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                  unsigned int *infoCount,
                                                                  nvmlProcessInfo_t *infos)
{
    return running_processes(device, infoCount, infos, stride_now());
}

/* "One utilization sample structure is returned per process running, that had some non-zero
 * utilization during the last sample period. It includes the CPU timestamp at which the samples
 * were recorded." and "Return only samples with timestamp greater than lastSeenTimeStamp"
 * (NVML API reference, nvmlDeviceGetProcessUtilization): one sample per process busy in the
 * last completed sample period, smUtil its busy share of that period, stamped with the period's
 * end. None (or none newer than lastSeenTimeStamp) → NOT_FOUND. utilization NULL (or too small)
 * → INSUFFICIENT_SIZE with the count needed, as NVML does. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
    unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp)
{
    unsigned gi;
    nvmlReturn_t r = nvml_emu_device(device, NULL, &gi);
    if (r != NVML_SUCCESS)
        return r;
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;

    uint64_t t0, t1;
    nvml_emu_last_period(emu_state_now_ns(), &t0, &t1);
    uint64_t stamp_us = nvml_emu_mono_to_realtime_us(t1), span = t1 - t0;
    if (lastSeenTimeStamp >= stamp_us || !span)
        return NVML_ERROR_NOT_FOUND;

    struct emu_proc_util u[EMU_MAX_PROCS];
    size_t n = 0;
    if (emu_state_util_by_proc(nvml_emu_state(), gi, t0, t1, u, EMU_MAX_PROCS, &n) < 0)
        return NVML_ERROR_UNKNOWN;
    if (n > EMU_MAX_PROCS)
        n = EMU_MAX_PROCS;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (u[i].busy_ns)
            u[k++] = u[i];
    if (k == 0)
        return NVML_ERROR_NOT_FOUND;
    if (!utilization || *processSamplesCount < k) {
        *processSamplesCount = (unsigned)k;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (size_t i = 0; i < k; i++) {
        uint64_t pct = (u[i].busy_ns * 100 + span / 2) / span;
        utilization[i] = (nvmlProcessUtilizationSample_t){
            .pid = (unsigned)u[i].pid,
            .timeStamp = stamp_us,
            .smUtil = (unsigned)(pct > 100 ? 100 : pct),
        };
    }
    *processSamplesCount = (unsigned)k;
    return NVML_SUCCESS;
}
