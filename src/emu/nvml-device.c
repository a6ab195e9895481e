/* nvml-device.c — the emulated NVML's per-device queries: identity, PCI, memory, compute
 * capability, MIG, VBIOS, NUMA, topology and NVLink, utilization, sensors, modes, ECC.
 * Every value comes from the shared machine (state.h), so what `accel-emu set` or another
 * process's libcuda changes shows here at once. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "nvml_emu.h"
#include "state-mig.h"

#define CHECK_DEVICE(dev, g, idx)                                                                  \
    do {                                                                                           \
        nvmlReturn_t r_ = nvml_emu_device((dev), (g), (idx));                                      \
        if (r_ != NVML_SUCCESS)                                                                    \
            return r_;                                                                             \
    } while (0)

/* A GPU's or a MIG device's handle, for the queries that answer for both ("These overloaded
 * references can be used (with some restrictions) interchangeably with a GPU device handle",
 * nvmlDeviceIsMigDeviceHandle). *ret_mig: a MIG device, its instance slots in *ret_gi, *ret_ci. */
static nvmlReturn_t gpu_or_mig(nvmlDevice_t dev, struct emu_gpu **ret_gpu, unsigned *ret_index,
                               bool *ret_mig, unsigned *ret_gi, unsigned *ret_ci)
{
    *ret_mig = nvml_emu_is_mig_handle(dev);
    if (*ret_mig)
        return nvml_emu_mig_device(dev, ret_gpu, ret_index, ret_gi, ret_ci);
    return nvml_emu_device(dev, ret_gpu, ret_index);
}

/* The device's own error first (uninitialized, bad handle, lost), else err (for the memory
 * queries, which answer for MIG devices too). */
static nvmlReturn_t arg_error(nvmlDevice_t device, nvmlReturn_t err)
{
    bool mig;
    unsigned gi, ci;
    nvmlReturn_t r = gpu_or_mig(device, NULL, NULL, &mig, &gi, &ci);
    return r != NVML_SUCCESS ? r : err;
}

/* A MIG device's UUID is its own ("MIG-..."), "globally unique" (nvmlDeviceGetUUID). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct emu_gpu *g;
    bool mig;
    unsigned gi, ci;
    nvmlReturn_t r = gpu_or_mig(device, &g, NULL, &mig, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    char u[EMU_UUID_LEN];
    emu_state_lock(nvml_emu_state());
    memcpy(u, mig ? g->mig[gi].ci[ci].uuid : g->uuid, sizeof(u));
    emu_state_unlock(nvml_emu_state());
    u[sizeof(u) - 1] = '\0';
    return nvml_emu_copy_string(u, uuid, length);
}

/* "When used with MIG device handles the API returns MIG device names" (nvmlDeviceGetName). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct emu_gpu *g;
    bool mig;
    unsigned gi, ci;
    nvmlReturn_t r = gpu_or_mig(device, &g, NULL, &mig, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    if (!mig)
        return nvml_emu_copy_string(g->name, name, length);
    char n[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvml_emu_mig_name(g, gi, ci, n, sizeof(n));
    return nvml_emu_copy_string(n, name, length);
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial,
                                              unsigned int length)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    char s[sizeof(g->serial) + 1];
    snprintf(s, sizeof(s), "%.*s", (int)sizeof(g->serial), g->serial);
    return nvml_emu_copy_string(s, serial, length);
}

/* A GPU's place among the GPUs the driver owns; a MIG device's among its parent's, which
 * nvmlDeviceGetMigDeviceHandleByIndex takes back ("MIG device indices are unique within a
 * device", nvmlDeviceGetIndex). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    unsigned i, gi, ci;
    bool mig;
    nvmlReturn_t r = gpu_or_mig(device, NULL, &i, &mig, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_state *st = nvml_emu_state();
    if (!mig) {
        *index = nvml_emu_nvml_index(st, i);
        return NVML_SUCCESS;
    }
    unsigned gis[EMU_MIG_MAX_GI * EMU_MIG_MAX_CI], cis[EMU_MIG_MAX_GI * EMU_MIG_MAX_CI];
    uint64_t serials[EMU_MIG_MAX_GI * EMU_MIG_MAX_CI];
    unsigned n = nvml_emu_mig_list(st, i, gis, cis, serials);
    for (unsigned k = 0; k < n; k++)
        if (gis[k] == gi && cis[k] == ci) {
            *index = k;
            return NVML_SUCCESS;
        }
    return NVML_ERROR_INVALID_ARGUMENT; /* destroyed meanwhile */
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!minorNumber)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = g->minor;
    return NVML_SUCCESS;
}

/* A MIG device's is its parent GPU's (inferred: a MIG device has no PCI function of its own). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct emu_gpu *g;
    bool mig;
    unsigned gi, ci;
    nvmlReturn_t r = gpu_or_mig(device, &g, NULL, &mig, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvml_emu_pci_info(g, pci);
    return NVML_SUCCESS;
}

/* used = everything charged by live processes (allocations and context overheads alike, as
 * the emulated libcuda charges them); reserved memory is not modelled (0). */
/* Physical total; used = what processes hold plus what the driver reserves ("Sum of Reserved
 * and Allocated device memory", NVML API reference, nvmlMemory_t::used; v2 likewise includes
 * `reserved` in `used`). */
static nvmlReturn_t mem_info(nvmlDevice_t device, uint64_t *ret_total, uint64_t *ret_used,
                             uint64_t *ret_reserved)
{
    unsigned i, gi, ci;
    struct emu_gpu *g;
    bool mig;
    nvmlReturn_t r = gpu_or_mig(device, &g, &i, &mig, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    struct emu_state *st = nvml_emu_state();
    if (mig) {
        /* "Per-instance information can be queried by using specific MIG device handles": the
         * GPU instance's memory (its compute instances share it) and what processes on it hold */
        struct emu_mig_gi tab[EMU_MIG_MAX_GI];
        emu_state_mig_snapshot(st, i, tab);
        const struct emu_mig_board *b = emu_state_mig_board(g);
        const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(b, tab[gi].profile);
        if (!p)
            return NVML_ERROR_UNKNOWN;
        *ret_total = emu_mig_gi_bytes(b, p, g->memory_total);
        *ret_used = emu_state_mig_gi_used(st, i, gi);
        *ret_reserved = 0;
        if (*ret_used > *ret_total)
            *ret_used = *ret_total;
        return NVML_SUCCESS;
    }
    if (emu_state_mem_info(st, i, ret_used, ret_total) < 0)
        return NVML_ERROR_UNKNOWN;
    *ret_reserved = g->memory_reserved;
    *ret_used += g->memory_reserved;
    if (*ret_used > *ret_total)
        *ret_used = *ret_total;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (!memory)
        return arg_error(device, NVML_ERROR_INVALID_ARGUMENT);
    uint64_t total, used, reserved;
    nvmlReturn_t r = mem_info(device, &total, &used, &reserved);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

/* A version other than nvmlMemory_v2 is NVML_ERROR_FUNCTION_NOT_FOUND, not the
 * ARGUMENT_VERSION_MISMATCH the newer versioned calls answer: NVIDIA's NVML picks this call's
 * implementation by the version and finds none for another. Seen on an NVIDIA H200, driver
 * 580.159.04, 2026-11-26 (tests/gpu/nvml-semantics.sh: versions 1 and 2; a probe the same day:
 * 0, the v1 and v3 encodings of this size, the v2 encoding of another size); a bad handle is
 * INVALID_ARGUMENT first there too. Version 2: also NVIDIA/nvidia-settings#78 (driver 510). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (!memory)
        return arg_error(device, NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != nvmlMemory_v2)
        return arg_error(device, NVML_ERROR_FUNCTION_NOT_FOUND);
    uint64_t total, used, reserved;
    nvmlReturn_t r = mem_info(device, &total, &used, &reserved);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                             int *minor)
{
    struct emu_gpu *g;
    bool mig;
    unsigned gi, ci;
    nvmlReturn_t r = gpu_or_mig(device, &g, NULL, &mig, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)g->cc_major;
    *minor = (int)g->cc_minor;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                               unsigned int *pendingMode)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!emu_state_mig_board(g))
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = g->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = g->mig_mode_pending ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version,
                                                    unsigned int length)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    /* Made-up versions in the format real boards report, one per architecture. */
    const char *v = "99.00.00.00.01";
    if (g->cc_major == 9)
        v = "96.00.99.00.01";
    else if (g->cc_major == 8 && g->cc_minor == 0)
        v = "92.00.45.00.06";
    else if (g->cc_major == 8)
        v = "95.04.5B.00.01";
    else if (g->cc_major == 7)
        v = "90.04.96.00.A0";
    return nvml_emu_copy_string(v, version, length);
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!node)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->numa_node < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned)g->numa_node;
    return NVML_SUCCESS;
}

/* ---- topology and NVLink -------------------------------------------------------------- */

NVML_EMU_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                              nvmlDevice_t device2,
                                                              nvmlGpuTopologyLevel_t *pathInfo)
{
    struct emu_gpu *g;
    unsigned j;
    CHECK_DEVICE(device1, &g, NULL);
    CHECK_DEVICE(device2, NULL, &j);
    if (!pathInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pathInfo = (nvmlGpuTopologyLevel_t)g->topo[j];
    return NVML_SUCCESS;
}

/* The GPU's links are numbered 0..N-1 and handed to its peers in index order: the first
 * nvlinks[0] links go to GPU 0, the next nvlinks[1] to GPU 1, ... Links past the last one
 * in use are inactive. Returns the peer of `link`, -1 for an inactive link. */
static int link_peer(const struct emu_gpu *g, unsigned count, unsigned link, unsigned *ret_total)
{
    unsigned total = 0;
    int peer = -1;
    for (unsigned j = 0; j < count; j++) {
        if (peer < 0 && link >= total && link < total + g->nvlinks[j])
            peer = (int)j;
        total += g->nvlinks[j];
    }
    *ret_total = total;
    return peer;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                   nvmlEnableState_t *isActive)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!isActive || link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned total;
    int peer = link_peer(g, emu_state_gpu_count(nvml_emu_state()), link, &total);
    if (total == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *isActive = peer >= 0 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* The error counters of an active link: those `accel-emu set` gave its link
 * (nvlink_link=, default 0), 0 on every other link. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                          nvmlNvLinkErrorCounter_t counter,
                                                          unsigned long long *counterValue)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!counterValue || link >= NVML_NVLINK_MAX_LINKS || (unsigned)counter >= 5)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned total;
    int peer = link_peer(g, emu_state_gpu_count(nvml_emu_state()), link, &total);
    if (total == 0 || peer < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *counterValue = link == __atomic_load_n(&g->nvlink_error_link, __ATOMIC_RELAXED)
                        ? __atomic_load_n(&g->nvlink_errors[counter], __ATOMIC_RELAXED)
                        : 0;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device,
                                                              unsigned int link, nvmlPciInfo_t *pci)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!pci || link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_state *st = nvml_emu_state();
    unsigned total;
    int peer = link_peer(g, emu_state_gpu_count(st), link, &total);
    if (total == 0 || peer < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    nvml_emu_pci_info(emu_state_gpu(st, (unsigned)peer), pci);
    return NVML_SUCCESS;
}

/* ---- utilization ---------------------------------------------------------------------- */

/* gpu: "Percent of time over the past sample period during which one or more kernels was
 * executing on the GPU" (NVML API reference, nvmlUtilization_t): the busy fraction of the last
 * completed sample period (ACCEL_EMU_UTIL_WINDOW_MS, default 1 s), from the timeline's
 * busy-interval records. memory: memory traffic is not modelled (0). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                        nvmlUtilization_t *utilization)
{
    unsigned i;
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, &i);
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* "On MIG-enabled GPUs, querying device utilization rates is not currently supported"
     * (nvmlDeviceGetUtilizationRates) */
    if (__atomic_load_n(&g->mig_mode, __ATOMIC_RELAXED))
        return NVML_ERROR_NOT_SUPPORTED;
    uint64_t t0, t1, busy = 0;
    nvml_emu_last_period(emu_state_now_ns(), &t0, &t1);
    if (emu_state_busy_ns(nvml_emu_state(), i, t0, t1, 0, &busy, NULL) < 0)
        return NVML_ERROR_UNKNOWN;
    uint64_t span = t1 - t0;
    unsigned pct = span ? (unsigned)((busy * 100 + span / 2) / span) : 0;
    utilization->gpu = pct > 100 ? 100 : pct;
    utilization->memory = 0;
    return NVML_SUCCESS;
}

/* ---- sensors and modes ---------------------------------------------------------------- */

NVML_EMU_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                   nvmlTemperatureSensors_t sensorType,
                                                   unsigned int *temp)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!temp || sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = __atomic_load_n(&g->temperature_c, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}

/* Fixed thresholds for every emulated GPU (celsius); tests compare the temperature that
 * `accel-emu set N temperature=...` gives against them. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device,
                                                            nvmlTemperatureThresholds_t type,
                                                            unsigned int *temp)
{
    static const unsigned int thresholds[] = {
        [NVML_TEMPERATURE_THRESHOLD_SHUTDOWN] = 92,
        [NVML_TEMPERATURE_THRESHOLD_SLOWDOWN] = 89,
        [NVML_TEMPERATURE_THRESHOLD_MEM_MAX] = 95,
        [NVML_TEMPERATURE_THRESHOLD_GPU_MAX] = 87,
    };
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    (void)g;
    if (!temp || (unsigned)type >= sizeof thresholds / sizeof thresholds[0])
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = thresholds[type];
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!power)
        return NVML_ERROR_INVALID_ARGUMENT;
    *power = __atomic_load_n(&g->power_mw, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}

/* Extra entry points NVML has and tools use (not in nvml_api.h yet). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device,
                                                            unsigned int *limit);
NVML_EMU_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device,
                                                            unsigned int *limit)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!limit)
        return NVML_ERROR_INVALID_ARGUMENT;
    *limit = __atomic_load_n(&g->power_limit_mw, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}

/* The limit the driver enforces: the emulator has one limit, so the management limit. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

/* Millijoules since the counter started: the banked value plus the current power draw
 * integrated since it was banked (state.h, energy_mj). The first read starts the clock. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                              unsigned long long *energy)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!energy)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_state *st = nvml_emu_state();
    uint64_t now = emu_state_now_ns();
    emu_state_lock(st);
    if (!g->energy_stamp_ns)
        g->energy_stamp_ns = now;
    uint64_t dt = now > g->energy_stamp_ns ? now - g->energy_stamp_ns : 0;
    *energy = g->energy_mj + (uint64_t)g->power_mw * dt / 1000000000ULL;
    emu_state_unlock(st);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                 unsigned long long *reasons)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = __atomic_load_n(&g->clocks_event_reasons, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}

/* The emulator applies ECC mode changes at once: pending always equals current. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                               nvmlEnableState_t *pending)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    bool off = __atomic_load_n(&g->ecc_disabled, __ATOMIC_RELAXED) != 0;
    *current = *pending = off ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                                    unsigned int *uncRows, unsigned int *isPending,
                                                    unsigned int *failureOccurred)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_state *st = nvml_emu_state();
    emu_state_lock(st);
    *corrRows = g->remapped_corr;
    *uncRows = g->remapped_unc;
    *isPending = g->remap_pending;
    *failureOccurred = g->remap_failure;
    emu_state_unlock(st);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!value)
        return NVML_ERROR_INVALID_ARGUMENT;
    *value = __atomic_load_n(&g->pcie_replays, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed);
NVML_EMU_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!speed)
        return NVML_ERROR_INVALID_ARGUMENT;
    *speed = __atomic_load_n(&g->fan_percent, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, unsigned int *pState);
NVML_EMU_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, unsigned int *pState)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!pState)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pState = __atomic_load_n(&g->pstate, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}

static nvmlReturn_t clock_of(nvmlDevice_t device, nvmlClockType_t type, bool max,
                             unsigned int *clock)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!clock)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t sm = max ? g->sm_clock_max_mhz : __atomic_load_n(&g->sm_clock_mhz, __ATOMIC_RELAXED);
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *clock = sm;
        break;
    case NVML_CLOCK_MEM:
        *clock = __atomic_load_n(&g->mem_clock_mhz, __ATOMIC_RELAXED);
        break;
    case NVML_CLOCK_VIDEO:
        *clock = sm * 6 / 7; /* video clocks run a little below graphics on real boards */
        break;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                 unsigned int *clock)
{
    return clock_of(device, type, false, clock);
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                    unsigned int *clock)
{
    return clock_of(device, type, true, clock);
}

/* "Retrieves the current compute mode for the device or MIG device": a MIG device's is its
 * parent's (the emulator keeps one per GPU). */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    struct emu_gpu *g;
    bool mig;
    unsigned gi, ci;
    nvmlReturn_t r = gpu_or_mig(device, &g, NULL, &mig, &gi, &ci);
    if (r != NVML_SUCCESS)
        return r;
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = (nvmlComputeMode_t)__atomic_load_n(&g->compute_mode, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}

/* The emulated driver stays loaded for as long as the state file exists: persistence on. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    CHECK_DEVICE(device, NULL, NULL);
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

/* Volatile and aggregate counts are the same: the emulated GPU never reboots. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                      nvmlMemoryErrorType_t errorType,
                                                      nvmlEccCounterType_t counterType,
                                                      unsigned long long *eccCounts)
{
    struct emu_gpu *g;
    CHECK_DEVICE(device, &g, NULL);
    if (!eccCounts || (counterType != NVML_VOLATILE_ECC && counterType != NVML_AGGREGATE_ECC))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct emu_state *st = nvml_emu_state();
    emu_state_lock(st);
    bool vol = counterType == NVML_VOLATILE_ECC;
    uint64_t sbe = vol ? g->ecc_vol_single_bit : g->ecc_single_bit;
    uint64_t dbe = vol ? g->ecc_vol_double_bit : g->ecc_double_bit;
    emu_state_unlock(st);
    if (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED)
        *eccCounts = sbe;
    else if (errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        *eccCounts = dbe;
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}
