/*
 * cost.h — cost per job in accel-exporter (docs/exporter.md, "Cost per job"): counters that
 * make a pod's GPU cost a multiplication in PromQL.
 *
 *  - GPU-seconds allocated, per container and GPU, by resource and share: each sampling round
 *    adds (round length) × (the share of the GPU the container holds), the share being 1 for a
 *    whole GPU and (replica IDs held) / (replicas the GPU has for that resource) for a
 *    time-sliced or MPS replica (the replicas from the kubelet's GetAllocatableResources);
 *  - energy, per container and GPU: each round's energy delta of the GPU (NVML's energy
 *    counter) split by the SM utilization of the container's processes (NVML's per-process
 *    samples; the last ones kept while NVML has nothing newer, up to 2 s and only while their
 *    process runs); with no process busy, split by the allocation shares (each container's
 *    once per GPU; by share / total where they add up to more than 1); what nobody holds is
 *    counted as unattributed, so the parts add up to the GPU's energy;
 *  - with a price table (cost.currency, cost.gpuHourPrice), money: GPU-seconds × price / 3600.
 *
 * vGPU containers (tencent.com/vcuda-core) are taken from acceld's <stateDir>/vgpu/status.json
 * (its assignments: GPU, namespace, pod, container, cores), read at most every 5 s: their
 * share is cores / 100 (a whole-GPU assignment counts 1 on the GPU the file names).
 *
 * The counters live in a fixed table made at start (no allocation while sampling); a
 * container's series stays while it is seen and for an hour after, so its counters only grow
 * until the exporter restarts.
 *
 * Threads: the sampler thread only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "expconfig.h"
#include "nvml.h"
#include "podres.h"
#include "sli.h"

#define EXPORTER_COST_MAX_SERIES 1024  /* per table (allocation, energy) */
#define EXPORTER_COST_MAX_REPLICAS 256 /* (resource, GPU) pairs with replicas */
#define EXPORTER_COST_MAX_VGPU 1024    /* vGPU assignments kept from status.json */
#define EXPORTER_COST_VGPU_RESOURCE "tencent.com/vcuda-core"
#define EXPORTER_COST_VGPU_MAX_BYTES (4u << 20) /* a bigger status.json is refused */
#define EXPORTER_COST_KEEP_NS (3600ull * 1000000000ull)
/* per-process utilization older than this no longer splits a GPU's energy */
#define EXPORTER_COST_UTIL_MAX_AGE_NS (2ull * 1000000000ull)

struct exporter_cost;

/* One GPU's inputs for a round (all borrowed for the call). */
struct exporter_cost_gpu {
    const char *uuid;
    nvmlDevice_t dev;
    bool energy_ok;
    unsigned long long energy_mj;
    size_t nprocs;
    const struct gpu_process *procs;
    const struct podres_entry *const *names; /* per process; NULL = not named */
};

/* cfg (borrowed, must outlive c): the price table. Returns 0 or -ENOMEM. */
int exporter_cost_new(const struct exporter_config *cfg, unsigned ngpus,
                      struct exporter_cost **ret);
struct exporter_cost *exporter_cost_free(struct exporter_cost *c);

/* Asks the kubelet's GetAllocatableResources how many replica IDs each GPU has per resource
 * (at most timeout_ms). Returns 0, or -errno / -EPROTO / -EIO (the last good answer is kept). */
int exporter_cost_allocatable(struct exporter_cost *c, const char *socket_path,
                              unsigned timeout_ms);
/* The decoder of a GetAllocatableResources answer (len bytes of protobuf): 0 or -EPROTO. */
int exporter_cost_parse_allocatable(struct exporter_cost *c, const uint8_t *msg, size_t len);

/* Reads vGPU assignments from state_dir/vgpu/status.json from now on (copied; "" = off). */
int exporter_cost_set_state_dir(struct exporter_cost *c, const char *state_dir);
/* The decoder of status.json (len bytes): 0 (the assignments replaced) or -EINVAL (kept). */
int exporter_cost_parse_vgpu(struct exporter_cost *c, const char *data, size_t len);

/* One sampling round at now_ns (CLOCK_MONOTONIC). pr: the last pod-resources List, NULL when
 * it failed (nothing is allocated then: no GPU-seconds, energy by utilization of named
 * processes only). */
void exporter_cost_round(struct exporter_cost *c, struct gpu_nvml *nvml,
                         const struct exporter_cost_gpu *gpus, unsigned ngpus,
                         const struct podres *pr, uint64_t now_ns);

void exporter_cost_render(const struct exporter_cost *c, const struct exporter_sli_out *out);
