/*
 * bench-inventory — cost of src/gpu's calls that sit on the agent's and exporter's paths:
 *   load      gpu_inventory_load (8 GPUs, NVLink pairs) with a borrowed NVML handle
 *   procs     gpu_nvml_running_processes, stride already known (the per-scrape cost)
 *   detect    the first call of a fresh handle (two filled buffers, stride detection)
 * NVML here is the in-tree fake (tests/inventory/fake-nvml.c), so the figures are our own
 * overhead, not the driver's. Usage: bench-inventory FAKE_NVML_SO
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inventory.h"
#include "util.h"

static double per_op_ns(uint64_t t0, int n)
{
    return (double)(mono_ns() - t0) / n;
}

int main(int argc, char **argv)
{
    struct gpu_nvml *nvml = NULL;
    struct gpu_process procs[64];
    nvmlDevice_t dev;
    char err[512];
    size_t n = 0;
    uint64_t t0;
    int iters;

    if (argc != 2) {
        fprintf(stderr, "usage: bench-inventory FAKE_NVML_SO\n");
        return 2;
    }
    setenv("FAKE_NVML_GPUS", "8", 1);
    setenv("FAKE_NVML_NVLINK", "pairs", 1);
    setenv("FAKE_NVML_PROCS", "16", 1);
    if (gpu_nvml_open(argv[1], &nvml, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench-inventory: %s\n", err);
        return 1;
    }

    iters = 2000;
    t0 = mono_ns();
    for (int i = 0; i < iters; i++) {
        struct gpu_inventory *inv = NULL;
        if (gpu_inventory_load(NULL, nvml, &inv, err, sizeof(err)) < 0 || inv->count != 8) {
            fprintf(stderr, "bench-inventory: load failed: %s\n", err);
            return 1;
        }
        gpu_inventory_free(inv);
    }
    printf("load    8 GPUs        %10.0f ns/op\n", per_op_ns(t0, iters));

    nvml->nvmlDeviceGetHandleByIndex_v2(0, &dev);
    iters = 20000;
    t0 = mono_ns();
    for (int i = 0; i < iters; i++) {
        nvml->proc_stride = 0; /* forget the stride: every call detects */
        if (gpu_nvml_running_processes(nvml, dev, procs, 64, &n) < 0 || n != 16)
            return 1;
    }
    printf("detect  16 processes  %10.0f ns/op\n", per_op_ns(t0, iters));

    iters = 200000;
    t0 = mono_ns();
    for (int i = 0; i < iters; i++)
        if (gpu_nvml_running_processes(nvml, dev, procs, 64, &n) < 0 || n != 16)
            return 1;
    printf("procs   16 processes  %10.0f ns/op  (stride %d known)\n", per_op_ns(t0, iters),
           gpu_nvml_process_stride(nvml));

    gpu_nvml_free(nvml);
    return 0;
}
