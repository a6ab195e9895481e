/* pgpu.h — the pGPU provider: whole GPUs as kubelet devices (ID = UUID),
 * served through the provider seam (provider.h; pgpu_provider).
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

/* One GPU as the inventory describes it. Strings borrowed during pgpu_new. */
struct pgpu_gpu_desc {
    const char *uuid;
    int minor;     /* /dev/nvidia<minor> */
    int numa_node; /* -1 unknown */
    bool healthy;
};

struct pgpu_options {
    const char *dev_root; /* where to look for device nodes ("/dev") */
    enum acceld_strategy strategy;
    const char *cdi_vendor; /* "nvidia.com" */
    const char *cdi_class;  /* "gpu" */
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
