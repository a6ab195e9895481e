/* pgpu.h — the pGPU provider: whole GPUs as kubelet devices (ID = UUID),
 * served through the provider seam (provider.h; pgpu_provider). The same
 * table serves every kind of device handed out whole: MIG devices (ID = the
 * MIG device's UUID, health = its GPU's: docs/mig.md) and GPUs bound to
 * vfio-pci (ID = PCI address, the VFIO group's nodes and KubeVirt's env:
 * vfio.h, docs/vfio.md) — only the device nodes, the env name and the common
 * nodes differ.
 *
 * Owns the device table with each GPU's health, the topology in policy form,
 * and everything Allocate needs, computed once at start (DeviceSpecs for the
 * GPU's /dev/nvidiaN and the control nodes found under the dev root, CDI
 * names), so that Allocate and GetPreferredAllocation never call NVML and
 * only look up and copy pointers.
 *
 * Threads: the event loop thread only (the health thread reports through the
 * loop, see health.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acceld-config.h"
#include "provider.h"

#define PGPU_ID_MAX ACCELD_ID_MAX

#define PGPU_MAX_EXTRA_NODES 2

/* One device as the inventory describes it. Strings borrowed during pgpu_new. */
struct pgpu_gpu_desc {
    const char *uuid; /* the device ID */
    int minor;        /* /dev/nvidia<minor>; -1: none (a VFIO GPU) */
    int numa_node;    /* -1 unknown */
    bool healthy;
    /* the GPU whose health events this device follows (a MIG device's
     * parent); NULL: uuid itself */
    const char *parent_uuid;
    /* more device nodes, host path = container path (a MIG device's
     * /dev/nvidia-caps/nvidia-capN, a VFIO group's /dev/vfio/<group>) */
    const char *extra_nodes[PGPU_MAX_EXTRA_NODES];
    size_t n_extra;
};

struct pgpu_options {
    const char *dev_root; /* where to look for device nodes ("/dev") */
    enum acceld_strategy strategy;
    const char *cdi_vendor; /* "nvidia.com" */
    const char *cdi_class;  /* "gpu" */
    /* the env that gets the IDs (envvar strategy); NULL:
     * NVIDIA_VISIBLE_DEVICES (VFIO: PCI_RESOURCE_NVIDIA_COM_<NAME>) */
    const char *env_key;
    /* NULL: the NVIDIA control nodes found under dev_root; else these
     * (container path = host path), whether present or not */
    const char *const *common_nodes;
    size_t n_common;
    const char *permissions; /* of every node; NULL: "rw" */
    /* the CDI spec's file is accel-<vendor>-<class>-<cdi_tag>.json (NULL:
     * accel-<vendor>-<class>.json): one per resource of a kind */
    const char *cdi_tag;
};

struct pgpu;

/* gpus: n entries; pcie/nvlinks: n*n (enum policy_pcie / NVLink counts) or
 * NULL when unknown (the policy then uses NUMA nodes alone). Copies all it
 * needs. Returns 0, -EINVAL (an ID over 63 characters or a duplicate UUID),
 * -ENOMEM. */
int pgpu_new(const struct pgpu_gpu_desc *gpus, size_t n, const uint8_t *pcie, const int *nvlinks,
             const struct pgpu_options *opts, struct pgpu **ret);
struct pgpu *pgpu_free(struct pgpu *p);

/* Re-applies options (SIGHUP): dev root, strategy, CDI names. Returns 0 or -errno
 * (then nothing changed). */
int pgpu_set_options(struct pgpu *p, const struct pgpu_options *opts);

size_t pgpu_count(const struct pgpu *p);
/* Index of the GPU with this UUID, or -1. */
int pgpu_find(const struct pgpu *p, const char *uuid);
const char *pgpu_id(const struct pgpu *p, size_t idx);
bool pgpu_healthy(const struct pgpu *p, size_t idx);
/* Sets one GPU's health; returns true when it changed (the device list then
 * has a new generation). */
bool pgpu_set_healthy(struct pgpu *p, size_t idx, bool healthy);
/* Sets the health of every device that follows the GPU gpu_uuid (itself, or
 * its MIG devices); returns true when one changed. */
bool pgpu_set_gpu_healthy(struct pgpu *p, const char *gpu_uuid, bool healthy);
/* Bumped on every change of the device list. */
uint64_t pgpu_generation(const struct pgpu *p);

/* The provider (provider.h) over p: Allocate answers the GPUs' device
 * nodes, the control nodes found under the dev root, and
 * NVIDIA_VISIBLE_DEVICES=<uuids> (envvar strategy) or the CDI names (cdi);
 * the answer lives in a block p reuses (no allocation once warm).
 * GetPreferredAllocation follows the topology policy (policy.h); IDs unknown
 * to p still take part, without topology. */
struct acceld_provider pgpu_provider(struct pgpu *p);

/* Writes the CDI spec for every GPU under dir (cdi strategy). 0 or -errno. */
int pgpu_write_cdi(const struct pgpu *p, const char *dir);
