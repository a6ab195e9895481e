/*
 * fuzz-gpu-parse — libFuzzer target for src/gpu's parsers of outside data: PCI bus IDs as
 * NVML writes them (gpu_pci_bus_id_normalize), sysfs numa_node files (gpu_parse_numa_node)
 * and the process records a driver writes (gpu_nvml_running_processes' stride detection,
 * fed by a fake entry point that writes the input's bytes), and PCI sysfs text
 * (pci-sysfs.h: id files, driver and iommu_group link targets, addresses, and the resource
 * name made from a PCI ID name), and the MIG capability minors
 * (/proc/driver/nvidia-caps/mig-minors, gpu_mig_minor). Its corpus
 * (tests/fuzz/corpus/gpu-parse/) is replayed in every build by tests/fuzz/replay.c.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-mig.h"
#include "inventory.h"
#include "nvml.h"
#include "pci-sysfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The fake driver: reports `count` records and writes `len` bytes of `bytes`; every other
 * call also flips the last written byte, as a changing field would. */
static struct {
    const uint8_t *bytes;
    size_t len;
    unsigned int count;
    int calls;
} drv;

static nvmlReturn_t fake_procs(nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_t *infos)
{
    unsigned char *p = (unsigned char *)infos;

    if (*count < drv.count) {
        *count = drv.count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(p, drv.bytes, drv.len);
    if (drv.len > 0 && (drv.calls++ & 1))
        p[drv.len - 1] ^= 0x01;
    *count = drv.count;
    return NVML_SUCCESS;
}

static void fuzz_process_records(const uint8_t *data, size_t size)
{
    struct gpu_nvml nvml;
    struct gpu_process procs[GPU_NVML_MAX_PROCS];
    size_t n = 12345;
    int r;

    if (size < 2)
        return;
    memset(&nvml, 0, sizeof(nvml));
    nvml.nvmlDeviceGetComputeRunningProcesses_v3 = fake_procs;
    drv.count = data[0] | (unsigned int)(data[1] & 0x01) << 8; /* 0..511 */
    drv.bytes = data + 2;
    drv.len = size - 2;
    if (drv.len > (size_t)GPU_NVML_MAX_PROCS * 32)
        drv.len = (size_t)GPU_NVML_MAX_PROCS * 32;
    drv.calls = 0;
    r = gpu_nvml_running_processes(&nvml, NULL, procs, GPU_NVML_MAX_PROCS, &n);
    if (r == 0 && n > GPU_NVML_MAX_PROCS)
        abort();
    if (r == 0 && n != drv.count)
        abort();
    int s = gpu_nvml_process_stride(&nvml);
    if (s != 0 && s != 16 && s != 24 && s != 32)
        abort();
}

static void fuzz_pci_sysfs(const uint8_t *data, size_t size)
{
    const char *t = (const char *)data;
    unsigned v = 777;
    if (gpu_pci_parse_hex(t, size, &v) == 0) {
        if (v > 0xffffffu)
            abort();
    } else if (v != 777) {
        abort(); /* failure leaves the output untouched */
    }
    size_t n = 0;
    const char *name = gpu_pci_link_name(t, size, &n);
    if (name && (n == 0 || name < t || name + n > t + size || memchr(name, '/', n)))
        abort();
    int g = -5;
    if (gpu_pci_parse_group(t, size, &g) == 0 ? g < 0 : g != -5)
        abort();
    char *s = malloc(size + 1), out[64];
    if (!s)
        return;
    memcpy(s, data, size);
    s[size] = '\0';
    if (gpu_pci_valid_bdf(s)) {
        char norm[32];
        /* a sysfs address is its own normal form */
        if (gpu_pci_bus_id_normalize(s, norm, sizeof(norm)) != 0 || strcmp(norm, s) != 0)
            abort();
    }
    if (gpu_pci_resource_name(s, out, sizeof(out)) == 0) {
        for (const char *p = out; *p; p++)
            if (!((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
                abort();
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char out[32], *s;
    int node = 1234;

    /* The bus-id parser takes a C string, as NVML's buffers are. */
    s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    memset(out, 'X', sizeof(out));
    if (gpu_pci_bus_id_normalize(s, out, sizeof(out)) == 0) {
        /* Always the canonical shape "dddd:bb:dd.f". */
        if (strlen(out) != 12 || out[4] != ':' || out[7] != ':' || out[10] != '.')
            abort();
        char again[32];
        if (gpu_pci_bus_id_normalize(out, again, sizeof(again)) != 0 || strcmp(out, again) != 0)
            abort(); /* normalizing is idempotent */
    }
    free(s);

    if (gpu_parse_numa_node((const char *)data, size, &node) == 0) {
        if (node < -1 || node > 65535)
            abort();
    } else if (node != 1234) {
        abort(); /* failure leaves the output untouched */
    }

    fuzz_process_records(data, size);
    fuzz_pci_sysfs(data, size);
    for (int ci = -1; ci < 2; ci++) {
        int m = -7;
        int r = gpu_mig_minor((const char *)data, size, 0, 1, ci, &m);
        if (r == 0 ? m < 0 : (m != -7 || (r != -ENOENT && r != -EINVAL)))
            abort();
    }
    return 0;
}
