/* vgpu-check.h — the memory half of vGPU mode's host-side check: what NVML
 * says each container's processes really hold on its GPU, against the
 * container's quota, whatever libvcuda's region says.
 *
 * libvcuda enforces quotas inside the container, where a tenant can bypass
 * it (a static binary, dlvsym to the driver) or lower its region's counters.
 * This check reads the driver's own figures through NVML, so no tenant can
 * hide from it: each process on a vGPU GPU is mapped to its pod through
 * <procRoot>/<pid>/cgroup (kube_cgroup_read), grouped with the assignments of
 * that pod on that GPU, and the group's total is compared with the sum of
 * their memory limits plus VGPU_CHECK_SLACK per process (the driver rounds
 * allocations up; libvcuda's quota already includes each context's charge).
 * Each assignment's usage region is audited too (vc_region_audit): a process
 * NVML sees holding more than its slot says is reported as under-reporting.
 *
 * Over quota: the caller logs the finding; with VGPU_OVER_QUOTA_KILL the
 * offending process gets SIGKILL — the group's process whose slot
 * under-reports the most (one that bypasses libvcuda has no slot at all),
 * else its largest.
 *
 * Threads: any single thread (no shared state; NVML is thread-safe). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvml.h"

/* Per process: the driver's rounding of allocations and of the context. */
#define VGPU_CHECK_SLACK (2ull << 20)

enum vgpu_over_quota_action { VGPU_OVER_QUOTA_NONE = 0, VGPU_OVER_QUOTA_KILL = 1 };

/* One container's share on one GPU (strings borrowed for the call). */
struct vgpu_check_target {
    const char *pod_uid;
    const char *ns;
    const char *pod;
    const char *container;
    const char *gpu_uuid;
    uint64_t memory_limit; /* bytes */
    const char *region;    /* host path of its usage region file, or NULL */
    unsigned region_dev;   /* the GPU's device index in the region */
    unsigned cores;        /* its vcuda-core share, % of the GPU (compute check) */
    /* Its container's runtime id (status.containerStatuses[].containerID without the
     * "containerd://"), or NULL/"" when unknown: processes whose cgroup names it are
     * checked against this container's limit alone and reported on it. */
    const char *container_id;
};

/* What one target's container uses now (vgpu_check_options.usage). */
struct vgpu_check_usage {
    uint64_t nvml_bytes;   /* NVML's figure for its group's processes on its GPU */
    unsigned nvml_procs;   /* how many processes */
    bool region_ok;        /* its usage region exists and could be read */
    uint64_t region_bytes; /* what libvcuda's region says the container holds */
};

/* The compute half: what it remembers between passes (NVML's last sample
 * time per GPU, how many passes in a row each container or pod used more
 * than its share, the cgroups it duty-cycles). vgpu_check_state_free thaws
 * them all.
 *
 * Under VGPU_COMPUTE_FREEZE a finding starts a duty cycle on the offending
 * process's cgroup (its container's): frozen duty of every freeze_ms period,
 * running the rest, with duty = 1 - cores / (its utilization when free), so
 * that even a process that bypasses libvcuda gets its share and no more.
 * Every later pass re-estimates its utilization when free from what it
 * measured while cycled (util / (1 - duty), at most 100 %) and sets the duty
 * again; the cycle ends (thawed) once that is within the share, or when the
 * container is gone. */
struct vgpu_check_state;
enum vgpu_compute_action { VGPU_COMPUTE_NONE = 0, VGPU_COMPUTE_FREEZE = 1 };
int vgpu_check_state_new(struct vgpu_check_state **ret);
struct vgpu_check_state *vgpu_check_state_free(struct vgpu_check_state *s);
/* Toggles the cycles whose phase ends at or before now_ms (monotonic): a
 * frozen cgroup is thawed for the rest of its period, a running one frozen.
 * Returns the next moment one toggles (UINT64_MAX: none cycling). */
uint64_t vgpu_check_cycle(struct vgpu_check_state *s, uint64_t now_ms);
/* How many cgroups are being duty-cycled. */
size_t vgpu_check_cycling(const struct vgpu_check_state *s);

/* Over its share: the summed smUtil of a container's (or a pod's) processes
 * more than this many points above its cores, ... */
#define VGPU_CHECK_COMPUTE_TOLERANCE 10
/* ... in this many passes with samples in a row. */
#define VGPU_CHECK_COMPUTE_STRIKES 3
/* A cgroup is never frozen more than this of each period (per mille): it
 * must still make progress, and answer signals. */
#define VGPU_CHECK_MAX_DUTY_PM 950
/* A GPU NVML has no utilization sample of for this long (µs) is idle. */
#define VGPU_CHECK_IDLE_US 2000000ull

struct vgpu_check_options {
    const char *proc_root; /* NULL: "/proc" */
    enum vgpu_over_quota_action action;
    /* Optional, n entries (one per target): filled with each target's usage.
     * NVML's figure is its group's (pod and GPU), the same on each of the
     * group's targets. */
    struct vgpu_check_usage *usage;
    /* The compute check runs when state is set: per-process utilization
     * (nvmlDeviceGetProcessUtilization, the samples since the last pass)
     * summed per container (processes known by its runtime id) against its
     * cores, and per pod and GPU against the sum of its cores. */
    struct vgpu_check_state *state;
    enum vgpu_compute_action compute_action;
    const char *cgroup_root; /* the cgroup v2 mount (NULL: "/sys/fs/cgroup") */
    uint64_t freeze_ms;      /* the duty cycle's period */
    uint64_t now_ms;         /* monotonic time of the pass (freeze deadlines) */
};

enum vgpu_check_kind {
    VGPU_CHECK_OVER_QUOTA = 0, /* the group's NVML total exceeds its quota */
    VGPU_CHECK_UNDER_REPORT,   /* a process holds more than its region slot says */
    VGPU_CHECK_OVER_SHARE,     /* the group's SM utilization above its cores, pass after pass */
};

struct vgpu_check_finding {
    enum vgpu_check_kind kind;
    size_t target;    /* index of the (first) assignment of the group */
    unsigned pid;     /* the offending process (host pid) */
    uint64_t used;    /* OVER_QUOTA: the group's total; UNDER_REPORT: NVML's figure;
                         OVER_SHARE: the group's SM utilization, % */
    uint64_t limit;   /* OVER_QUOTA: the group's quota; UNDER_REPORT: the slot's figure;
                         OVER_SHARE: the group's cores */
    int slot;         /* UNDER_REPORT: its slot, -1 for none */
    bool killed;      /* SIGKILL was sent */
    int kill_errno;   /* kill() failed with this (0: not tried or succeeded) */
    bool frozen;      /* OVER_SHARE: its container's cgroup is duty-cycled */
    int freeze_errno; /* freezing failed with this */
    unsigned duty_pm; /* frozen this much of each period (per mille) */
};

/* One pass over every GPU named by targets. Writes up to max findings to ret
 * and the number found (possibly more than max) to *ret_n. Returns 0 or
 * -errno of the first GPU that could not be read (the others are still
 * checked; findings are valid). */
int vgpu_check_run(struct gpu_nvml *nvml, const struct vgpu_check_target *targets, size_t n,
                   const struct vgpu_check_options *opts, struct vgpu_check_finding *ret,
                   size_t max, size_t *ret_n);

/* "none" / "kill" → action; -EINVAL otherwise. */
int vgpu_over_quota_action_parse(const char *s, enum vgpu_over_quota_action *ret);
const char *vgpu_over_quota_action_name(enum vgpu_over_quota_action a);
