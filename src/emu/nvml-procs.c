/* nvml-procs.c — the emulated NVML's process queries: running compute processes (the
 * processes holding memory on the GPU, with the record size `accel-emu init
 * --proc-info-stride` chose), MPS clients among them, graphics processes (none), and
 * per-process utilization samples (from the GPU timeline's busy intervals) in both the old
 * (nvmlDeviceGetProcessUtilization) and the versioned (nvmlDeviceGetProcessesUtilizationInfo)
 * form. */
#define _GNU_SOURCE
#include <string.h>

#include "nvml_emu.h"
#include "state-mig.h"
#include "state-mps.h"
#include "state-nvml.h"

/* The per-process utilization calls answer from the driver's own buffer of samples per GPU,
 * NVML_EMU_PROC_SAMPLE_BUF entries. NVIDIA's NVML 580.159.04 on an H200 (2026-11-26;
 * tests/gpu/nvml-semantics.c, "process utilization with no buffer"), asked with no buffer on
 * an idle GPU, answered INSUFFICIENT_SIZE with a count of 72, from
 * nvmlDeviceGetProcessUtilization and nvmlDeviceGetProcessesUtilizationInfo alike, and
 * libvcuda's 64-entry buffer got no sample there while its process was busy. Seen on that one
 * product and driver: another may keep a buffer of another size, so callers size theirs well
 * above it (the project's use 256). */
#define NVML_EMU_PROC_SAMPLE_BUF 72u

/* Writes the process list of the device in records of `stride` bytes: pid (u32 at 0),
 * usedGpuMemory (u64 at 8), then for 24 and 32: gpuInstanceId, computeInstanceId (u32 at 16,
 * 20), then for 32: usedGpuCcProtectedMemory (u64 at 24). Whole records are written,
 * padding included, as a driver copying its structs does.
 * MIG: a GPU's handle lists every process with the IDs of the instance it runs on (0xFFFFFFFF
 * for none); a MIG device's handle lists the processes on that compute instance ("In MIG
 * mode, if device handle is provided, the API returns aggregate information ... Per-instance
 * information can be queried by using specific MIG device handles"). */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *infoCount, void *infos,
                                      unsigned stride, bool mps_clients)
{
    unsigned gi, mig_gi = 0, mig_ci = 0;
    bool mig = nvml_emu_is_mig_handle(device);
    nvmlReturn_t r = mig ? nvml_emu_mig_device(device, NULL, &gi, &mig_gi, &mig_ci)
                         : nvml_emu_device(device, NULL, &gi);
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
    struct emu_mig_gi tab[EMU_MIG_MAX_GI];
    emu_state_mig_snapshot(nvml_emu_state(), gi, tab);
    if (mig) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (procs[i].mig_serial && procs[i].mig_serial == tab[mig_gi].ci[mig_ci].serial)
                procs[k++] = procs[i];
        n = k;
    }
    if (mps_clients) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (emu_state_mps_is_client(nvml_emu_state(), procs[i].pid))
                procs[k++] = procs[i];
        n = k;
    }
    if (n > *infoCount) {
        *infoCount = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char *rec = (unsigned char *)infos + i * stride;
        uint32_t pid = (uint32_t)procs[i].pid, gid = NVML_EMU_NO_INSTANCE;
        uint32_t cid = NVML_EMU_NO_INSTANCE;
        uint64_t used = procs[i].bytes, cc = 0;
        unsigned s, c;
        if (emu_mig_find_serial(tab, procs[i].mig_serial, &s, &c) == 0) {
            gid = tab[s].id;
            cid = tab[s].ci[c].id;
        }
        memset(rec, 0, stride);
        memcpy(rec, &pid, sizeof(pid));
        memcpy(rec + 8, &used, sizeof(used));
        if (stride >= 24) {
            memcpy(rec + 16, &gid, sizeof(gid));
            memcpy(rec + 20, &cid, sizeof(cid));
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
    return running_processes(device, infoCount, infos, 16, false);
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
    return running_processes(device, infoCount, infos, stride_now(), false);
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                  unsigned int *infoCount,
                                                                  nvmlProcessInfo_t *infos)
{
    return running_processes(device, infoCount, infos, stride_now(), false);
}

/* "Returns information about running processes on a device which are clients of the MPS
 * server" (NVML API reference): the processes holding memory on the GPU that count as MPS
 * clients (state-mps.h: a live server runs for their user); same records as the compute
 * list. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                     unsigned int *infoCount,
                                                                     nvmlProcessInfo_t *infos)
{
    return running_processes(device, infoCount, infos, stride_now(), true);
}

/* The emulator runs no graphics work: after the usual checks, an empty list (count 0,
 * SUCCESS), which is what the driver answers for a GPU with no graphics contexts. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                                   unsigned int *infoCount,
                                                                   nvmlProcessInfo_t *infos)
{
    nvmlReturn_t r = nvml_emu_device(device, NULL, NULL);
    if (r != NVML_SUCCESS)
        return r;
    if (!infoCount || (*infoCount > 0 && !infos))
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

/* A process's SM utilization: its busy share of the period, in percent. */
static unsigned sm_percent(const struct emu_proc_util *u, uint64_t span)
{
    uint64_t pct = (u->busy_ns * 100 + span / 2) / span;
    return (unsigned)(pct > 100 ? 100 : pct);
}

/* The processes busy on gpu in the last completed sample period, if it ends after
 * last_seen_us: their busy time in u[0..*ret_n), the period's length in *ret_span and its end
 * as a CPU timestamp in *ret_stamp_us. None → NOT_FOUND. */
static nvmlReturn_t busy_processes(unsigned gi, unsigned long long last_seen_us,
                                   struct emu_proc_util u[EMU_MAX_PROCS], size_t *ret_n,
                                   uint64_t *ret_span, uint64_t *ret_stamp_us)
{
    uint64_t t0, t1;
    nvml_emu_last_period(emu_state_now_ns(), &t0, &t1);
    uint64_t stamp_us = nvml_emu_mono_to_realtime_us(t1), span = t1 - t0;
    if (last_seen_us >= stamp_us || !span)
        return NVML_ERROR_NOT_FOUND;
    size_t n = 0;
    if (emu_state_util_by_proc(nvml_emu_state(), gi, t0, t1, u, EMU_MAX_PROCS, &n) < 0)
        return NVML_ERROR_UNKNOWN;
    if (n > EMU_MAX_PROCS)
        n = EMU_MAX_PROCS;
    /* Listed only where the share is non-zero in NVML's whole percent: a process busy for
     * 0.3 ms of a 100 ms period would otherwise be a sample of "non-zero utilization" that
     * says 0 %. */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sm_percent(&u[i], span) > 0)
            u[k++] = u[i];
    if (k == 0)
        return NVML_ERROR_NOT_FOUND;
    /* no more than the driver's buffer holds, so a caller's buffer of that size always fits */
    if (k > NVML_EMU_PROC_SAMPLE_BUF)
        k = NVML_EMU_PROC_SAMPLE_BUF;
    *ret_n = k;
    *ret_span = span;
    *ret_stamp_us = stamp_us;
    return NVML_SUCCESS;
}

/* The size check of both per-process utilization calls, before any sample is looked at: no
 * buffer, or one of fewer entries than the driver's sample buffer, is INSUFFICIENT_SIZE with
 * that buffer's size in *count, on an idle GPU as on a busy one. The reference asks callers
 * to "first determine the size of buffer required to hold the samples by invoking the function
 * with utilization set to NULL" and to allocate that many; the H200 sized that answer by its
 * buffer (72 when idle), not by the busy processes. For a buffer smaller than that the H200's
 * answer was not printed; INSUFFICIENT_SIZE is what libvcuda's 64 entries got there (no sample
 * ever, while busy), and the count is taken to be the same 72 as for no buffer. */
static bool too_small(const void *buf, unsigned *count)
{
    if (buf && *count >= NVML_EMU_PROC_SAMPLE_BUF)
        return false;
    *count = NVML_EMU_PROC_SAMPLE_BUF;
    return true;
}

/* "One utilization sample structure is returned per process running, that had some non-zero
 * utilization during the last sample period. It includes the CPU timestamp at which the samples
 * were recorded." and "Return only samples with timestamp greater than lastSeenTimeStamp"
 * (NVML API reference, nvmlDeviceGetProcessUtilization): one sample per process busy in the
 * last completed sample period, smUtil its busy share of that period, stamped with the period's
 * end. utilization NULL or processSamplesCount below the driver's buffer → INSUFFICIENT_SIZE
 * with that buffer's size (too_small); then none (or none newer than lastSeenTimeStamp) →
 * NOT_FOUND. */
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
    if (too_small(utilization, processSamplesCount))
        return NVML_ERROR_INSUFFICIENT_SIZE;
    struct emu_proc_util u[EMU_MAX_PROCS];
    size_t k = 0;
    uint64_t span = 0, stamp_us = 0;
    r = busy_processes(gi, lastSeenTimeStamp, u, &k, &span, &stamp_us);
    if (r != NVML_SUCCESS)
        return r;
    for (size_t i = 0; i < k; i++)
        utilization[i] = (nvmlProcessUtilizationSample_t){
            .pid = (unsigned)u[i].pid,
            .timeStamp = stamp_us,
            .smUtil = sm_percent(&u[i], span),
        };
    *processSamplesCount = (unsigned)k;
    return NVML_SUCCESS;
}

/* The versioned form (NVML API reference, nvmlDeviceGetProcessesUtilizationInfo): the same
 * samples as nvmlDeviceGetProcessUtilization, in nvmlProcessUtilizationInfo_v1_t records.
 * "version" must be nvmlProcessesUtilizationInfo_v1 (else ARGUMENT_VERSION_MISMATCH, as NVIDIA's
 * NVML 580.159.04 answered on an H200 for versions 0, 1 and the v2 encoding: nvml-semantics.c);
 * then procUtilArray NULL or processSamplesCount below the driver's buffer → INSUFFICIENT_SIZE
 * with that buffer's size in processSamplesCount (too_small; the H200 answered 72 with no
 * array, idle); samples not newer than lastSeenTimeStamp → NOT_FOUND. Memory, encoder,
 * decoder, JPEG and OFA activity are not modelled (0). */
NVML_EMU_API nvmlReturn_t
nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device, nvmlProcessesUtilizationInfo_t *info)
{
    unsigned gi;
    nvmlReturn_t r = nvml_emu_device(device, NULL, &gi);
    if (r != NVML_SUCCESS)
        return r;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlProcessesUtilizationInfo_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (too_small(info->procUtilArray, &info->processSamplesCount))
        return NVML_ERROR_INSUFFICIENT_SIZE;
    struct emu_proc_util u[EMU_MAX_PROCS];
    size_t k = 0;
    uint64_t span = 0, stamp_us = 0;
    r = busy_processes(gi, info->lastSeenTimeStamp, u, &k, &span, &stamp_us);
    if (r != NVML_SUCCESS)
        return r;
    for (size_t i = 0; i < k; i++)
        info->procUtilArray[i] = (nvmlProcessUtilizationInfo_v1_t){
            .timeStamp = stamp_us,
            .pid = (unsigned)u[i].pid,
            .smUtil = sm_percent(&u[i], span),
        };
    info->processSamplesCount = (unsigned)k;
    return NVML_SUCCESS;
}
