/*
 * inventory.h — one call that returns the node's GPUs, their properties and the link
 * between every two of them. This API is a contract: acceld, accelctl and the exporter code
 * against it (fields may be added, none renamed).
 *
 * Sources: NVML for everything but NUMA, which comes from sysfs
 * (<sysfs_root>/bus/pci/devices/<bus id>/numa_node) with NVML's nvmlDeviceGetNumaNodeId as
 * the fallback when sysfs has no entry. docs/inventory.md says where each field comes from.
 *
 * A GPU whose queries fail is listed as unhealthy with the reason; the others still load.
 * Threads: gpu_inventory_load may run on any thread; an inventory is immutable once loaded.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvml.h"

enum gpu_link_kind {
    GPU_LINK_UNKNOWN = 0,
    GPU_LINK_SYSTEM,     /* across sockets (SMP interconnect) */
    GPU_LINK_NODE,       /* same NUMA node, different host bridges */
    GPU_LINK_HOSTBRIDGE, /* same host bridge */
    GPU_LINK_MULTIPLE,   /* several PCIe switches */
    GPU_LINK_SINGLE,     /* one PCIe switch */
    GPU_LINK_BOARD,      /* same board (multi-GPU card) */
    GPU_LINK_SELF,
};

struct gpu_link {
    enum gpu_link_kind pcie;
    int nvlinks; /* count of active NVLinks between the two */
};

struct gpu_device {
    int index;
    char uuid[96];
    char name[96];
    uint64_t memory_total_bytes;
    char pci_bus_id[32];    /* "0000:3b:00.0" (normalized lower-case, 4-digit domain) */
    int minor;              /* /dev/nvidiaN; -1 unknown */
    int numa_node;          /* -1 unknown */
    int cc_major, cc_minor; /* compute capability; -1 unknown */
    int mig_enabled;        /* 0/1, -1 unknown */
    char vbios[64];
    bool healthy;    /* false when the GPU's queries failed / GPU_IS_LOST */
    char error[160]; /* why not healthy, "" otherwise */
};

struct gpu_inventory {
    char driver_version[64];
    int cuda_driver_version; /* e.g. 13000; 0 unknown */
    int count;
    struct gpu_device *devices;
    struct gpu_link *links; /* count*count matrix: links[i*count+j] */
};

struct gpu_inventory_options {
    const char *nvml_path;  /* NULL = default (see gpu_nvml_open) */
    const char *sysfs_root; /* NULL = "/sys" */
};

/* Loads the inventory. nvml is borrowed; when NULL, NVML is opened from opts->nvml_path for
 * the duration of the call. Returns 0, or -errno with one line in err (no NVML, device count
 * unavailable, out of memory); *ret untouched on failure. Per-GPU failures are not errors:
 * the GPU is reported unhealthy. opts may be NULL. */
int gpu_inventory_load(const struct gpu_inventory_options *opts, struct gpu_nvml *nvml,
                       struct gpu_inventory **ret, char *err, size_t errlen);

/* Accepts NULL; returns NULL. */
struct gpu_inventory *gpu_inventory_free(struct gpu_inventory *inv);

/* The device with this UUID, or NULL. Borrowed from inv. */
const struct gpu_device *gpu_inventory_find_uuid(const struct gpu_inventory *inv, const char *uuid);

/* The link between devices i and j (indexes into inv->devices), or NULL when out of range. */
const struct gpu_link *gpu_inventory_link(const struct gpu_inventory *inv, int i, int j);

/* "SYS", "NODE", "PHB", "PXB", "PIX", "BOARD", "X", "unknown" (nvidia-smi topo's words). */
const char *gpu_link_kind_name(enum gpu_link_kind k);

/* NVML's "00000000:3B:00.0" (or any "[dom:]bus:dev.fn" in hex) → "0000:3b:00.0". Returns 0,
 * or -EINVAL for anything else (out untouched). out must hold at least 13 bytes. */
int gpu_pci_bus_id_normalize(const char *in, char *out, size_t outlen);

/* Parses a sysfs numa_node file's contents ("0\n", "-1\n"): 0 and the node (-1 = unknown),
 * or -EINVAL for anything else. */
int gpu_parse_numa_node(const char *text, size_t len, int *ret_node);
