/*
 * fake-nvml.c — a tiny libc-only stand-in for libnvidia-ml, dlopened by the inventory and
 * loader tests. Its machine is described by environment variables read at nvmlInit_v2:
 *   FAKE_NVML_GPUS=N         number of GPUs (default 2, at most 8)
 *   FAKE_NVML_LOST=I         GPU I answers NVML_ERROR_GPU_IS_LOST to every device query
 *   FAKE_NVML_INIT_FAIL=1    nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED
 *   FAKE_NVML_TOPO_FAIL=1    nvmlDeviceGetTopologyCommonAncestor fails
 *   FAKE_NVML_NVLINK=pairs   GPUs 2k and 2k+1 share 4 active NVLinks
 *   FAKE_NVML_PROCS=K        K compute processes per GPU (pid 4000+k, (k+1) MiB each)
 *   FAKE_NVML_STRIDE=S       process-info record size written (16, 24 or 32; default 24)
 * Topology: GPUs of a pair sit behind one PCIe switch, GPUs 0-3 and 4-7 on one NUMA node.
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "nvml_api.h"

#define MAX_GPUS 8

struct nvmlDevice_st {
    int index;
};

static struct nvmlDevice_st devices[MAX_GPUS];
static int ngpus, lost = -1, procs, stride = 24;
static int init_fail, topo_fail, nvlink_pairs, initialized;

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

nvmlReturn_t nvmlInit_v2(void)
{
    ngpus = env_int("FAKE_NVML_GPUS", 2);
    if (ngpus < 0 || ngpus > MAX_GPUS)
        ngpus = MAX_GPUS;
    lost = env_int("FAKE_NVML_LOST", -1);
    procs = env_int("FAKE_NVML_PROCS", 0);
    stride = env_int("FAKE_NVML_STRIDE", 24);
    init_fail = env_int("FAKE_NVML_INIT_FAIL", 0);
    topo_fail = env_int("FAKE_NVML_TOPO_FAIL", 0);
    nvlink_pairs = getenv("FAKE_NVML_NVLINK") && strcmp(getenv("FAKE_NVML_NVLINK"), "pairs") == 0;
    if (init_fail)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    for (int i = 0; i < MAX_GPUS; i++)
        devices[i].index = i;
    initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    default:
        return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if ((unsigned int)snprintf(version, length, "580.65.06") >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    *v = 13000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    *count = (unsigned int)ngpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (index >= (unsigned int)ngpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

/* Common prologue of device queries: validates the handle, reports a lost GPU. */
#define DEV(d)                                                                                     \
    do {                                                                                           \
        if (!(d) || (d) < devices || (d) >= devices + ngpus)                                       \
            return NVML_ERROR_INVALID_ARGUMENT;                                                    \
        if ((d)->index == lost)                                                                    \
            return NVML_ERROR_GPU_IS_LOST;                                                         \
    } while (0)

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    DEV(d);
    if ((unsigned int)snprintf(uuid, length, "GPU-fa4e0000-0000-4000-8000-00000000000%d",
                               d->index) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
    DEV(d);
    snprintf(name, length, "Fake H100 80GB");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    DEV(d);
    m->total = 80ull << 30;
    m->used = (unsigned long long)procs << 20;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

static unsigned int bus_of(int i)
{
    return 0x1a + 0x10 * (unsigned int)i;
}

static void fill_pci(int i, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    pci->bus = bus_of(i);
    pci->pciDeviceId = 0x233010de;
    /* Upper-case, 8-digit domain, as the driver writes it. */
    snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", bus_of(i));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", bus_of(i));
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    DEV(d);
    fill_pci(d->index, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{
    DEV(d);
    *minor = (unsigned int)d->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    DEV(d);
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}

/* GPU 1 has MIG on; the last GPU is not MIG-capable. */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pending)
{
    DEV(d);
    if (d->index == ngpus - 1 && ngpus > 2)
        return NVML_ERROR_NOT_SUPPORTED;
    *cur = *pending = d->index == 1 ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char *version, unsigned int length)
{
    DEV(d);
    snprintf(version, length, "96.00.99.00.0%d", d->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node)
{
    DEV(d);
    *node = (unsigned int)(d->index / 2);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b,
                                                 nvmlGpuTopologyLevel_t *level)
{
    DEV(a);
    DEV(b);
    if (topo_fail)
        return NVML_ERROR_UNKNOWN;
    if (a == b)
        *level = NVML_TOPOLOGY_INTERNAL;
    else if (a->index / 2 == b->index / 2)
        *level = NVML_TOPOLOGY_SINGLE;
    else if (a->index / 4 == b->index / 4)
        *level = NVML_TOPOLOGY_NODE;
    else
        *level = NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, nvmlEnableState_t *on)
{
    DEV(d);
    if (!nvlink_pairs)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    *on = link < 4 && (d->index ^ 1) < ngpus ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link,
                                                 nvmlPciInfo_t *pci)
{
    DEV(d);
    if (!nvlink_pairs || link >= 4 || (d->index ^ 1) >= ngpus)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_pci(d->index ^ 1, pci);
    return NVML_SUCCESS;
}

/* Writes `procs` records of `stride` bytes, whatever the caller's struct is. */
static nvmlReturn_t running(nvmlDevice_t d, unsigned int *count, void *infos)
{
    unsigned char *p = infos;

    DEV(d);
    if (*count < (unsigned int)procs || (!infos && procs > 0)) {
        *count = (unsigned int)procs;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int k = 0; k < procs; k++) {
        unsigned char rec[32];
        unsigned int pid = 4000u + (unsigned int)k, none = 0xffffffffu;
        unsigned long long used = (unsigned long long)(k + 1) << 20, zero = 0;
        memset(rec, 0, sizeof(rec));
        memcpy(rec, &pid, 4);
        memcpy(rec + 8, &used, 8);
        if (stride >= 24) {
            memcpy(rec + 16, &none, 4);
            memcpy(rec + 20, &none, 4);
        }
        if (stride >= 32)
            memcpy(rec + 24, &zero, 8);
        memcpy(p + (size_t)k * (size_t)stride, rec, (size_t)stride);
    }
    *count = (unsigned int)procs;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    return running(d, count, infos);
}
