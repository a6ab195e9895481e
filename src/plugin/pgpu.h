/* pgpu.h — the pGPU provider: whole GPUs as kubelet devices (ID = UUID).
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

#include "config.h"
#include "deviceplugin.pb-c.h"

#define PGPU_ID_MAX 64 /* kubelet device IDs are at most 63 characters */

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

/* The packed ListAndWatchResponse for the current generation (packed once per
 * generation). Borrowed until the next change. Returns 0 or -ENOMEM. */
int pgpu_list_bytes(struct pgpu *p, const uint8_t **ret_data, size_t *ret_len);

/* Allocate: every ID must be known, healthy and named once in the whole
 * request, else -EINVAL with a message naming the offending IDs (and nothing
 * changes); a request naming more IDs than the node has devices is refused
 * before any is looked at. Time is linear in the request's size (IDs are
 * hashed). *ret_resp is borrowed from
 * p: it lives in a buffer p reuses (Allocate is a hot path: no allocation
 * once that buffer is big enough) and is valid until the next pgpu_allocate,
 * pgpu_set_options or pgpu_free. Pack it before any of those. */
int pgpu_allocate(struct pgpu *p, const V1beta1__AllocateRequest *req,
                  V1beta1__AllocateResponse **ret_resp, char *err, size_t errlen);

/* GetPreferredAllocation (see policy.h). IDs unknown to us (or lost) still
 * take part, without topology. More container requests than devices, or a
 * container whose available or must-include list is longer than the node's
 * device count, is refused (-EINVAL) before any ID is looked at, so the
 * search is bounded by the node's size, not the request's. *ret_resp borrows strings from p and
 * req: free it (pgpu_prefer_response_free) before either goes away. Returns 0 or -EINVAL with a
 * message (size 0, too few devices...), -ENOMEM. */
int pgpu_prefer(const struct pgpu *p, const V1beta1__PreferredAllocationRequest *req,
                V1beta1__PreferredAllocationResponse **ret_resp, char *err, size_t errlen);
void pgpu_prefer_response_free(V1beta1__PreferredAllocationResponse *resp);

/* Writes the CDI spec for every GPU under dir (cdi strategy). 0 or -errno. */
int pgpu_write_cdi(const struct pgpu *p, const char *dir);
