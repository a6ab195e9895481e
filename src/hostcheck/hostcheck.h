/* hostcheck.h — the host-side check of every shared mode (vGPU containers, DRA shares):
 * what NVML says each container's processes really hold and use on the GPUs, against the
 * container's quota and share, whatever libvcuda's region says.
 *
 * libvcuda enforces quotas inside the container, where a tenant can bypass it (a static
 * binary, dlvsym to the driver, LD_AUDIT) or lower its region's counters. This check reads the
 * driver's own figures through NVML, so no tenant can hide from it: each process on a GPU is
 * mapped to its pod through <procRoot>/<pid>/cgroup (kube_cgroup_read), grouped with the
 * targets of that pod on that GPU, and the group's total is compared with the sum of their
 * memory limits plus HOSTCHECK_SLACK per process (the driver rounds allocations up;
 * libvcuda's quota already includes each context's charge). Every GPU of the node is looked
 * at: a process of a pod with targets on a GPU none of its targets names is a finding
 * (HOSTCHECK_FOREIGN_GPU). Each target's usage region is audited too (vc_region_audit over a
 * copy read with pread from the region's directory, never a mapping; hostcheck-region.c): a
 * process NVML sees holding more than its slot says is reported as under-reporting, and a
 * region that is a symlink, a hard link, not a regular file, short or garbage while the
 * container runs processes on the GPU is a finding about that container, never a crash.
 *
 * Over quota: the caller logs the finding; with HOSTCHECK_ACTION_KILL the offending process
 * gets SIGKILL — the group's process whose slot under-reports the most (one that bypasses
 * libvcuda has no slot at all), else its largest; a process on a foreign GPU is killed too.
 *
 * Threads: any single thread (no shared state; NVML is thread-safe). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvml.h"
#include "region.h"

/* Per process: the driver's rounding of allocations and of the context. */
#define HOSTCHECK_SLACK (2ull << 20)
/* The usage region's file name in a target's region directory (libvcuda's config names it). */
#define HOSTCHECK_REGION_FILE "usage"

enum hostcheck_action { HOSTCHECK_ACTION_NONE = 0, HOSTCHECK_ACTION_KILL = 1 };

/* One container's share on one GPU (strings borrowed for the call). */
struct hostcheck_target {
    const char *pod_uid;
    const char *ns;
    const char *pod;
    const char *container;
    const char *gpu_uuid;
    uint64_t memory_limit; /* bytes */
    /* Host path of its usage-region directory, or NULL: a directory acceld made and handed to
     * the container, so everything inside it is the tenant's; the check opens the directory
     * (O_NOFOLLOW) and reads HOSTCHECK_REGION_FILE in it relative to that fd only. */
    const char *region_dir;
    unsigned region_dev; /* the GPU's device index in the region */
    unsigned cores;      /* its share, % of the GPU's SMs (compute check; 0: none) */
    /* Its container's runtime id (status.containerStatuses[].containerID without the
     * "containerd://"), or NULL/"" when unknown: processes whose cgroup names it are
     * checked against this container's limit alone and reported on it. */
    const char *container_id;
    /* A whole GPU given to the pod (no quota, no share): not checked itself, but its
     * processes there are not on a foreign GPU. */
    bool whole;
};

/* What one target's container uses now (hostcheck_options.usage). */
struct hostcheck_usage {
    uint64_t nvml_bytes;   /* NVML's figure for its group's processes on its GPU */
    unsigned nvml_procs;   /* how many processes */
    bool region_ok;        /* its usage region exists and could be read */
    uint64_t region_bytes; /* what libvcuda's region says the container holds */
};

/* The compute half: what it remembers between passes (NVML's last sample
 * time per GPU, each container's or pod's utilization in its last
 * HOSTCHECK_COMPUTE_WINDOW passes with samples, the cgroups it duty-cycles).
 * hostcheck_state_free thaws them all.
 *
 * Under HOSTCHECK_COMPUTE_FREEZE a finding starts a duty cycle on the offending
 * process's cgroup (its container's): frozen duty of every freeze_ms period,
 * running the rest, with duty = 1 - cores / (its utilization when free), so
 * that even a process that bypasses libvcuda gets its share and no more.
 * Every later pass re-estimates its utilization when free from what it
 * measured while cycled (util / (1 - duty), at most 100 %) and sets the duty
 * again; the cycle ends (thawed) once that is within the share, or when the
 * container is gone. */
struct hostcheck_state;
enum hostcheck_compute_action { HOSTCHECK_COMPUTE_NONE = 0, HOSTCHECK_COMPUTE_FREEZE = 1 };
int hostcheck_state_new(struct hostcheck_state **ret);
struct hostcheck_state *hostcheck_state_free(struct hostcheck_state *s);
/* Toggles the cycles whose phase ends at or before now_ms (monotonic): a
 * frozen cgroup is thawed for the rest of its period, a running one frozen.
 * Returns the next moment one toggles (UINT64_MAX: none cycling). */
uint64_t hostcheck_cycle(struct hostcheck_state *s, uint64_t now_ms);
/* How many cgroups are being duty-cycled. */
size_t hostcheck_cycling(const struct hostcheck_state *s);

/* Over its share: the mean, over the last HOSTCHECK_COMPUTE_WINDOW passes with samples, of
 * the summed smUtil of a container's (or a pod's) processes more than
 * HOSTCHECK_COMPUTE_TOLERANCE points above its cores, once the window holds at least
 * HOSTCHECK_COMPUTE_STRIKES passes. A sliding window, not a count of passes in a row that one
 * pass within the share resets: bursts that alternate with quiet passes are seen by their
 * mean. A finding empties the window (a persisting overuse is reported every few passes, not
 * every pass). */
#define HOSTCHECK_COMPUTE_TOLERANCE 10
#define HOSTCHECK_COMPUTE_STRIKES 3
#define HOSTCHECK_COMPUTE_WINDOW 6
/* A cgroup is never frozen more than this of each period (per mille): it
 * must still make progress, and answer signals. */
#define HOSTCHECK_MAX_DUTY_PM 950
/* A GPU NVML has no utilization sample of for this long (µs) is idle. */
#define HOSTCHECK_IDLE_US 2000000ull

struct hostcheck_options {
    const char *proc_root; /* NULL: "/proc" */
    enum hostcheck_action action;
    /* Optional, n entries (one per target): filled with each target's usage.
     * NVML's figure is its group's (pod and GPU), the same on each of the
     * group's targets. */
    struct hostcheck_usage *usage;
    /* The compute check runs when state is set: per-process utilization
     * (nvmlDeviceGetProcessUtilization, the samples since the last pass)
     * summed per container (processes known by its runtime id) against its
     * cores, and per pod and GPU against the sum of its cores. */
    struct hostcheck_state *state;
    enum hostcheck_compute_action compute_action;
    const char *cgroup_root; /* the cgroup v2 mount (NULL: "/sys/fs/cgroup") */
    uint64_t freeze_ms;      /* the duty cycle's period */
    uint64_t now_ms;         /* monotonic time of the pass (freeze deadlines) */
    /* Look at every GPU of the node (nvmlDeviceGetCount_v2) for processes of the targets'
     * pods on GPUs none of their targets names (HOSTCHECK_FOREIGN_GPU). */
    bool all_gpus;
};

enum hostcheck_kind {
    HOSTCHECK_OVER_QUOTA = 0, /* the group's NVML total exceeds its quota */
    HOSTCHECK_UNDER_REPORT,   /* a process holds more than its region slot says */
    HOSTCHECK_OVER_SHARE,     /* the group's SM utilization above its cores, over the window */
    HOSTCHECK_FOREIGN_GPU,    /* a process of the pod on a GPU it was not given */
    HOSTCHECK_REGION_BAD,     /* its usage region is not one (while it runs on the GPU) */
};

struct hostcheck_finding {
    enum hostcheck_kind kind;
    size_t target;    /* index of the (first) assignment of the group */
    unsigned pid;     /* the offending process (host pid); REGION_BAD: one of its processes */
    uint64_t used;    /* OVER_QUOTA: the group's total; UNDER_REPORT, FOREIGN_GPU: NVML's
                         figure for the process; OVER_SHARE: the group's SM utilization, % */
    uint64_t limit;   /* OVER_QUOTA: the group's quota; UNDER_REPORT: the slot's figure;
                         OVER_SHARE: the group's cores; FOREIGN_GPU: 0 */
    int slot;         /* UNDER_REPORT: its slot, -1 for none */
    bool killed;      /* SIGKILL was sent */
    int kill_errno;   /* kill() failed with this (0: not tried or succeeded) */
    bool frozen;      /* OVER_SHARE: its container's cgroup is duty-cycled */
    int freeze_errno; /* freezing failed with this */
    unsigned duty_pm; /* frozen this much of each period (per mille) */
    int region_errno; /* REGION_BAD: why (hostcheck_region_read's -errno, positive) */
    char gpu[96];     /* the GPU the finding is about (FOREIGN_GPU: the one it was not given) */
};

/* One pass over every GPU named by targets (and, with all_gpus, every other GPU of the
 * node). Writes up to max findings to ret and the number found (possibly more than max) to
 * *ret_n. Returns 0 or -errno of the first GPU that could not be read (the others are still
 * checked; findings are valid). */
int hostcheck_run(struct gpu_nvml *nvml, const struct hostcheck_target *targets, size_t n,
                  const struct hostcheck_options *opts, struct hostcheck_finding *ret, size_t max,
                  size_t *ret_n);

/* "none" / "kill" → action; -EINVAL otherwise. */
int hostcheck_action_parse(const char *s, enum hostcheck_action *ret);
const char *hostcheck_action_name(enum hostcheck_action a);

/* The finding's kind as status files name it: "overQuota", "underReport", "overShare",
 * "foreignGpu", "regionInvalid". */
const char *hostcheck_kind_name(enum hostcheck_kind k);
/* The family acceld-stats.json counts the kind in, which keeps its three: 0 memory (a process
 * on a foreign GPU included), 1 under-report (an invalid region included), 2 compute — the
 * order of enum acceld_stats_quota_kind (src/nodestate/acceld-stats.h). */
int hostcheck_stats_family(enum hostcheck_kind k);
/* What was done about f, for people; keys names the config keys' prefix ("vgpu", "dra"). */
void hostcheck_action_text(const struct hostcheck_finding *f, const char *keys, char *buf,
                           size_t len);
/* One line for the log and the Kubernetes Event: what the finding says and what was done
 * about it. t: the targets of the pass. */
void hostcheck_describe(const struct hostcheck_finding *f, const struct hostcheck_target *t,
                        const char *keys, char *buf, size_t len);

/* ---- the usage region, read as hostile input (hostcheck-region.c) ---- */

/* A private copy of a container's usage region: view.hdr / view.slots point into buf, so
 * vc_region_used and vc_region_audit read it like a mapping that cannot change or fault. */
struct hostcheck_region {
    void *buf;
    struct vc_region view;
};

/* Checks a region's bytes (len of them) and copies them: 0, or -EPROTO (short, or not a
 * compatible region header), -EAGAIN (no magic yet: being created), -ENOMEM. Every header field is
 * bounds-checked; slot contents are numbers and stay the tenant's word. ret is untouched on
 * failure. */
int hostcheck_region_parse(const void *bytes, size_t len, struct hostcheck_region *ret);
/* Reads HOSTCHECK_REGION_FILE below the directory dirfd (tenant_open_file: no symlink, no
 * hard link, a regular file on the directory's filesystem) with pread, and parses it.
 * Returns 0, -ENOENT (no region yet), -EAGAIN (being created), -ELOOP (a symlink), -EPROTO
 * (not a regular file, or not a region), -EMLINK, -EXDEV, -ENOMEM or -errno. */
int hostcheck_region_read_at(int dirfd, struct hostcheck_region *ret);
/* The same from the region directory's path: the directory is opened with O_NOFOLLOW, the
 * file only relative to it. */
int hostcheck_region_read(const char *region_dir, struct hostcheck_region *ret);
void hostcheck_region_free(struct hostcheck_region *r);
