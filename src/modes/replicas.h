/* replicas.h — the time-slicing and MPS providers: each GPU selected by the
 * sharing config (sharing-config.h) is advertised as `replicas` devices with IDs
 * `<uuid>::<n>` (NVIDIA's form), served through the provider seam
 * (provider.h; replicas_provider). One struct replicas serves one advertised
 * resource name (a rename gives another).
 *
 * Time-slicing: Allocate answers the GPUs' device nodes and
 * NVIDIA_VISIBLE_DEVICES (or the CDI names); no caps.
 *
 * MPS: every GPU has one control daemon per request size k it can be asked
 * for (k = 1 only under failRequestsGreaterThanOne, else 1..replicas), run by
 * the supervisor (mps-supervisor.h) with defaults k/n of the SMs and memory.
 * A container asking for k replicas of one GPU gets that daemon's pipe
 * directory (env and mount), the daemon's own /dev/shm, the GPU's device nodes, and
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / CUDA_MPS_PINNED_DEVICE_MEM_LIMIT equal
 * to the daemon's defaults (docs/mps.md, "The cap rule"). A GPU's replicas
 * are Healthy only while the GPU is healthy and every one of its daemons is.
 *
 * Threads: the event loop thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acceld-config.h"
#include "provider.h"

/* Container path of an MPS daemon's pipe directory (its log directory stays acceld's). */
#define REPLICAS_MPS_PIPE_PATH "/run/accel-mps/pipe"

struct replicas_gpu_desc {
    const char *uuid;
    int minor;     /* /dev/nvidia<minor> */
    int numa_node; /* -1 unknown */
    bool healthy;
    unsigned replicas;  /* >= 1 */
    uint64_t mem_bytes; /* MPS pinned memory base; 0 unknown (no memory cap) */
};

struct replicas_options {
    bool mps;
    bool fail_requests_greater_than_one;
    const char *resource; /* advertised name, for messages */
    const char *dev_root;
    enum acceld_strategy strategy;
    const char *cdi_vendor;
    const char *cdi_class; /* the spec's class (docs/mps.md, "CDI") */
};

struct replicas;

int replicas_new(const struct replicas_gpu_desc *gpus, size_t n,
                 const struct replicas_options *opts, struct replicas **ret);
struct replicas *replicas_free(struct replicas *s);

size_t replicas_gpu_count(const struct replicas *s);
const char *replicas_gpu_uuid(const struct replicas *s, size_t gpu);
unsigned replicas_gpu_replicas(const struct replicas *s, size_t gpu);
/* MPS: the largest request size a daemon is run for (1 or replicas). */
unsigned replicas_max_request(const struct replicas *s, size_t gpu);

/* MPS: the daemon for (gpu, k)'s host directories (copied): its pipe directory and its own
 * /dev/shm (NULL: the host's, where acceld could not make one). */
int replicas_set_mps_dirs(struct replicas *s, size_t gpu, unsigned k, const char *pipe_dir,
                          const char *shm_dir);
/* MPS: the daemon for (gpu, k) is healthy or not. Returns true when the
 * device list changed (all of the GPU's replicas at once). */
bool replicas_set_daemon_health(struct replicas *s, size_t gpu, unsigned k, bool healthy);

struct acceld_provider replicas_provider(struct replicas *s);

/* Writes the CDI spec (one device per GPU, named by UUID) under dir. */
int replicas_write_cdi(const struct replicas *s, const char *dir);
