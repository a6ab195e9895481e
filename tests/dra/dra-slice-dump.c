/* dra-slice-dump.c — prints ResourceSlices rendered by src/dra/slice.c, one
 * JSON document per line, for tests/dra/test_k8s_schema.py to validate as
 * resource.k8s.io/v1: shared and whole GPUs, healthy, unhealthy and fatal,
 * with and without a NUMA node, and a pool with no device left; then the
 * slices of a pool with MIG partitions (src/dra/partition.c: three H100s in
 * MIG mode, one of them unhealthy, beside a whole GPU): devices consuming
 * counters in slices of at most 64, and the counter sets in a slice of their
 * own. */
#include "dra.h"
#include "h100-profiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dump(const char *slice, int64_t gen, const struct dra_gpu *g, size_t n)
{
    char *s = NULL;
    if (dra_slice_render("gpu.accel.dev", "node-a", slice, gen, g, n, &s) < 0)
        return 1;
    for (char *p = s; *p; p++)
        if (*p == '\n')
            *p = ' ';
    printf("%s\n", s);
    free(s);
    return 0;
}

static int dump_pool(const struct dra_gpu *g, size_t n)
{
    struct dra_slice_out *out = NULL;
    size_t k = 0;
    if (dra_pool_render("gpu.accel.dev", "node-a", 3, g, n, &out, &k) < 0)
        return 1;
    for (size_t i = 0; i < k; i++) {
        for (char *p = out[i].json; *p; p++)
            if (*p == '\n')
                *p = ' ';
        printf("%s\n", out[i].json);
    }
    dra_pool_free(out, k);
    return 0;
}

int main(void)
{
    const struct dra_gpu gpus[] = {
        {.name = "gpu-0",
         .uuid = "GPU-8f1f0c3e-7a6b-4c1e-9d2a-0b1c2d3e4f50",
         .dev_node = "/dev/nvidia0",
         .memory = 80ull << 30,
         .product = "NVIDIA H100 80GB HBM3",
         .architecture = "Hopper",
         .cc_major = 9,
         .cc_minor = 0,
         .driver_version = "550.54.15",
         .numa_node = 0,
         .pci_bus_id = "0000:3b:00.0",
         .mig_capable = true,
         .shared = true,
         .healthy = true},
        {.name = "gpu-1",
         .uuid = "GPU-9f1f0c3e-7a6b-4c1e-9d2a-0b1c2d3e4f51",
         .dev_node = "/dev/nvidia1",
         .memory = 40ull << 30,
         .product = "NVIDIA A100-SXM4-40GB",
         .architecture = "Ampere",
         .cc_major = 8,
         .cc_minor = 0,
         .driver_version = "535.104.05",
         .numa_node = -1,
         .pci_bus_id = "0000:86:00.0",
         .healthy = false},
        {.name = "gpu-2",
         .uuid = "GPU-af1f0c3e-7a6b-4c1e-9d2a-0b1c2d3e4f52",
         .dev_node = "/dev/nvidia2",
         .memory = 24ull << 30,
         .product = "NVIDIA L4",
         .architecture = "Ada Lovelace",
         .cc_major = 8,
         .cc_minor = 9,
         .driver_version = "550.54.15",
         .numa_node = 1,
         .pci_bus_id = "0000:af:00.0",
         .mps = true,
         .healthy = false,
         .fatal = true},
    };
    struct dra_gpu mig[4];
    for (size_t i = 0; i < 4; i++) {
        mig[i] = gpus[0];
        mig[i].shared = false;
        if (i < 3) {
            mig[i].mig_profiles = h100_profiles;
            mig[i].n_mig_profiles = H100_N_PROFILES;
        }
    }
    mig[1].name = "gpu-1";
    mig[1].healthy = false;
    mig[2].name = "gpu-2";
    mig[3].name = "gpu-3";
    return dump("node-a-gpu.accel.dev", 1, gpus, 3) || dump("node-a-gpu.accel.dev", 2, gpus, 1) ||
           dump("node-a-gpu.accel.dev", 7, NULL, 0) || dump_pool(mig, 4);
}
