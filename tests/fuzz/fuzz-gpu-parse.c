/*
 * fuzz-gpu-parse — libFuzzer target for src/gpu's parsers of outside data: PCI bus IDs as
 * NVML writes them (gpu_pci_bus_id_normalize) and sysfs numa_node files
 * (gpu_parse_numa_node). Its corpus (tests/fuzz/corpus/fuzz-gpu-parse/) is replayed in every
 * build by tests/inventory/fuzz-replay.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "inventory.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    return 0;
}
