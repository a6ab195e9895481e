/*
 * gpu-inventory-print — prints gpu_inventory_load's view of this machine and each GPU's
 * compute processes as key=value lines. libc-only, so it builds on a GPU test machine without
 * the agent's libraries; tests/gpu/inventory.sh compares its output with nvidia-smi.
 * Usage: gpu-inventory-print [NVML_LIBRARY [SYSFS_ROOT]]
 */
#include <stdio.h>

#include "inventory.h"

int main(int argc, char **argv)
{
    struct gpu_inventory_options o = {
        .nvml_path = argc > 1 ? argv[1] : NULL,
        .sysfs_root = argc > 2 ? argv[2] : NULL,
    };
    struct gpu_nvml *nvml = NULL;
    struct gpu_inventory *inv = NULL;
    char err[512];

    if (gpu_nvml_open(o.nvml_path, &nvml, err, sizeof(err)) < 0 ||
        gpu_inventory_load(&o, nvml, &inv, err, sizeof(err)) < 0) {
        fprintf(stderr, "gpu-inventory-print: %s\n", err);
        gpu_nvml_free(nvml);
        return 1;
    }
    printf("driver_version=%s\ncuda_driver_version=%d\ncount=%d\n", inv->driver_version,
           inv->cuda_driver_version, inv->count);
    for (int i = 0; i < inv->count; i++) {
        const struct gpu_device *d = &inv->devices[i];
        nvmlDevice_t h;
        struct gpu_process procs[64];
        size_t n = 0;
        int r;

        printf("gpu.%d.uuid=%s\ngpu.%d.name=%s\ngpu.%d.memory_total_bytes=%llu\n"
               "gpu.%d.pci_bus_id=%s\ngpu.%d.minor=%d\ngpu.%d.numa_node=%d\ngpu.%d.cc=%d.%d\n"
               "gpu.%d.mig=%d\ngpu.%d.vbios=%s\ngpu.%d.healthy=%d\ngpu.%d.error=%s\n",
               i, d->uuid, i, d->name, i, (unsigned long long)d->memory_total_bytes, i,
               d->pci_bus_id, i, d->minor, i, d->numa_node, i, d->cc_major, d->cc_minor, i,
               d->mig_enabled, i, d->vbios, i, d->healthy, i, d->error);
        for (int j = 0; j < inv->count; j++) {
            const struct gpu_link *l = gpu_inventory_link(inv, i, j);
            printf("gpu.%d.link.%d=%s,%d\n", i, j, gpu_link_kind_name(l->pcie), l->nvlinks);
        }
        if (nvml->nvmlDeviceGetHandleByIndex_v2((unsigned int)i, &h) != NVML_SUCCESS)
            continue;
        r = gpu_nvml_running_processes(nvml, h, procs, 64, &n);
        printf("gpu.%d.processes_rc=%d\n", i, r);
        for (size_t k = 0; r == 0 && k < n; k++)
            printf("gpu.%d.process.%u=%llu\n", i, procs[k].pid,
                   (unsigned long long)procs[k].used_memory_bytes);
        printf("gpu.%d.process_stride=%d\n", i, gpu_nvml_process_stride(nvml));
    }
    gpu_inventory_free(inv);
    gpu_nvml_free(nvml);
    return 0;
}
