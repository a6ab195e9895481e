/* hook-nvml.c — NVML's memory views (nvidia-smi, PyTorch's and other tools'
 * free-memory checks) report the container's quota: total = quota, used = the
 * container's use from the region, free = the rest. */
#include "vcuda.h"

#include <string.h>
#include <strings.h>

/* Region index of an NVML device: its UUID's place in the configured list (a device the list
 * does not name: VC_DEVICE_UNASSIGNED, shown with no memory), else NVML's index. -1 when
 * unknown. */
static int nvml_index(nvmlDevice_t device)
{
    if (vc.cfg.device_count > 0) {
        char uuid[96];
        if (vc_real.nvmlDeviceGetUUID &&
            vc_real.nvmlDeviceGetUUID(device, uuid, sizeof(uuid)) == NVML_SUCCESS)
            for (int i = 0; i < vc.cfg.device_count; i++)
                if (strcasecmp(uuid, vc.cfg.device_uuid[i]) == 0)
                    return i;
        return VC_DEVICE_UNASSIGNED;
    }
    unsigned idx;
    if (vc_real.nvmlDeviceGetIndex && vc_real.nvmlDeviceGetIndex(device, &idx) == NVML_SUCCESS &&
        idx < VC_REGION_DEVICES)
        return (int)idx;
    return -1;
}

#define VC_NVML_PREAMBLE(n)                                                                        \
    do {                                                                                           \
        if (vc_nvml_ensure() < 0)                                                                  \
            return NVML_ERROR_UNINITIALIZED;                                                       \
        if (!vc_real.n)                                                                            \
            return NVML_ERROR_FUNCTION_NOT_FOUND;                                                  \
        if (vc_ensure() < 0)                                                                       \
            return NVML_ERROR_UNINITIALIZED;                                                       \
    } while (0)

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    VC_NVML_PREAMBLE(nvmlDeviceGetMemoryInfo);
    nvmlReturn_t r = vc_real.nvmlDeviceGetMemoryInfo(device, memory);
    int index;
    if (r != NVML_SUCCESS || !memory || (index = nvml_index(device)) < 0 ||
        (!vc.cfg.memory_limit && index != VC_DEVICE_UNASSIGNED))
        return r;
    uint64_t f, t, u;
    vc_quota_view((unsigned)index, memory->free, memory->total, &f, &t, &u);
    memory->total = t;
    memory->free = f;
    memory->used = t - f;
    return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    VC_NVML_PREAMBLE(nvmlDeviceGetMemoryInfo_v2);
    nvmlReturn_t r = vc_real.nvmlDeviceGetMemoryInfo_v2(device, memory);
    int index;
    if (r != NVML_SUCCESS || !memory || (index = nvml_index(device)) < 0 ||
        (!vc.cfg.memory_limit && index != VC_DEVICE_UNASSIGNED))
        return r;
    uint64_t f, t, u;
    vc_quota_view((unsigned)index, memory->free, memory->total, &f, &t, &u);
    /* The driver's reservation is outside the quota: report none, so that
     * total = reserved + used + free holds. */
    memory->total = t;
    memory->reserved = 0;
    memory->free = f;
    memory->used = t - f;
    return r;
}
