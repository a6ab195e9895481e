/* acceld-stats.h — acceld's own SLIs (docs/exporter.md, "The agent's SLIs"): counters the
 * agent keeps in memory since it started, and the file that carries them to
 * accel-exporter, <stateDir>/acceld-stats.json.
 *
 * What is counted: Register calls per resource (ok / failed), Allocate calls per
 * resource (ok / error) and their latency as a histogram (fixed buckets, seconds,
 * from the request's arrival to its answer, a parked Allocate included), device
 * initialisation per GPU at start (ok / failed), health transitions per GPU (to
 * unhealthy / to healthy), MPS control daemon restarts per GPU, and the host-side
 * vGPU check's findings by kind and action.
 *
 * The file is telemetry: it is replaced atomically (tmp + rename) but never
 * fsynced, and a reader that finds it bad keeps what it had. Its format is
 * defined once here (acceld_stats_format / acceld_stats_parse), so the writer and
 * the exporter's reader cannot drift apart; the parser refuses anything it does
 * not know (unknown keys, a newer version, counters that do not add up).
 *
 * Threads: the counting functions on acceld's event loop only (no locking; no
 * allocation, so Allocate's hot path stays allocation-free). Formatting and
 * parsing touch only their arguments: any thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ACCELD_STATS_FILE "acceld-stats.json"
/* Version 2 adds each GPU's current health, its reason and its MPS daemon state; the
 * reader takes version 1 files too (then has_state is false for every GPU). */
#define ACCELD_STATS_VERSION 2
#define ACCELD_STATS_REASON_MAX 128 /* a GPU's unhealthy reason, with its NUL */
#define ACCELD_STATS_MAX_RESOURCES 16
#define ACCELD_STATS_MAX_GPUS 64
#define ACCELD_STATS_MAX_BUCKETS 32
#define ACCELD_STATS_NAME_MAX 128 /* a resource name, with its NUL */
#define ACCELD_STATS_UUID_MAX 96
/* A bigger file is refused unread (a full one is under 32 KiB). */
#define ACCELD_STATS_MAX_BYTES (256u << 10)
/* acceld rewrites the file at most once a second when something changed, and at
 * least this often anyway, so a reader can tell a live agent from a dead one. */
#define ACCELD_STATS_HEARTBEAT_NS (10ull * 1000000000ull)

/* The Allocate latency buckets acceld uses (upper bounds, seconds). */
#define ACCELD_STATS_NBUCKETS 14
extern const double acceld_stats_buckets[ACCELD_STATS_NBUCKETS];

enum acceld_stats_quota_kind {
    ACCELD_STATS_QUOTA_MEMORY = 0,   /* a group's NVML memory over its quota */
    ACCELD_STATS_QUOTA_UNDER_REPORT, /* a process holding more than its region slot says */
    ACCELD_STATS_QUOTA_COMPUTE,      /* SM utilization over its cores, pass after pass */
    ACCELD_STATS_QUOTA_KINDS
};
enum acceld_stats_quota_action {
    ACCELD_STATS_ACTION_NONE = 0, /* reported only */
    ACCELD_STATS_ACTION_KILL,     /* SIGKILL sent */
    ACCELD_STATS_ACTION_FREEZE,   /* cgroup frozen */
    ACCELD_STATS_ACTIONS
};
/* The label values ("memory", "under_report", "compute"; "none", "kill", "freeze"). */
const char *acceld_stats_quota_kind_name(enum acceld_stats_quota_kind k);
const char *acceld_stats_quota_action_name(enum acceld_stats_quota_action a);

struct acceld_stats_resource {
    char name[ACCELD_STATS_NAME_MAX];
    uint64_t reg_ok, reg_failed;
    uint64_t alloc_ok, alloc_error;
    /* cumulative, as Prometheus exposes them: bucket[i] counts the calls that took at
     * most bounds[i] seconds; calls slower than the last bound are only in the count
     * (alloc_ok + alloc_error) */
    uint64_t bucket[ACCELD_STATS_MAX_BUCKETS];
    double alloc_sum; /* seconds, all calls */
};

/* The state of a GPU's MPS control daemons (the supervisor's sets on it). */
enum acceld_stats_mps_state {
    ACCELD_STATS_MPS_NONE = 0, /* no MPS on this GPU */
    ACCELD_STATS_MPS_RUNNING,  /* every daemon answers with its defaults */
    ACCELD_STATS_MPS_FAULT,    /* a daemon runs but does not answer right (hung, wrong defaults) */
    ACCELD_STATS_MPS_DOWN,     /* a daemon is not running (waiting for its restart) */
    ACCELD_STATS_MPS_STATES
};
/* "none", "running", "fault", "down" (the file's values and the exporter's label). */
const char *acceld_stats_mps_state_name(enum acceld_stats_mps_state m);

struct acceld_stats_gpu {
    unsigned index; /* NVML index */
    char uuid[ACCELD_STATS_UUID_MAX];
    uint64_t to_unhealthy, to_healthy; /* to_healthy: recoveries (health.recoverAfter) */
    uint64_t mps_restarts;
    /* version 2: the current state (false in a version 1 file: unknown) */
    bool has_state;
    bool healthy;
    char reason[ACCELD_STATS_REASON_MAX]; /* why unhealthy, printable ASCII; "" when healthy */
    enum acceld_stats_mps_state mps;
};

struct acceld_stats {
    double start_time; /* Unix seconds, when the agent started */
    double write_time; /* Unix seconds, when the file was written (set by format) */
    uint64_t init_ok, init_failed;
    size_t nbuckets;
    double bounds[ACCELD_STATS_MAX_BUCKETS];
    size_t n_resources;
    struct acceld_stats_resource res[ACCELD_STATS_MAX_RESOURCES];
    size_t n_gpus;
    struct acceld_stats_gpu gpus[ACCELD_STATS_MAX_GPUS];
    uint64_t quota[ACCELD_STATS_QUOTA_KINDS][ACCELD_STATS_ACTIONS];
    uint64_t generation; /* in memory only: bumped by every change */
};

/* Zeroes s, with acceld's buckets and start_time (Unix seconds). */
void acceld_stats_init(struct acceld_stats *s, double start_time);

/* Counting (the loop thread). A resource or GPU beyond the table's size is not
 * counted (the tables hold more than acceld serves). */
void acceld_stats_registration(struct acceld_stats *s, const char *resource, bool ok);
void acceld_stats_allocate(struct acceld_stats *s, const char *resource, bool ok,
                           uint64_t duration_ns);
void acceld_stats_device_init(struct acceld_stats *s, bool ok);
/* Declares a GPU (so its series exist at zero from the start). */
void acceld_stats_add_gpu(struct acceld_stats *s, unsigned index, const char *uuid);
void acceld_stats_health(struct acceld_stats *s, const char *uuid, bool healthy);
/* Sets the GPU's current health and reason (NULL or "" when healthy; bytes outside
 * printable ASCII become '?', a longer one is cut). Counts nothing. */
void acceld_stats_set_health_state(struct acceld_stats *s, const char *uuid, bool healthy,
                                   const char *reason);
/* Sets the GPU's MPS daemon state. */
void acceld_stats_set_mps_state(struct acceld_stats *s, const char *uuid,
                                enum acceld_stats_mps_state state);
/* Sets the GPU's MPS daemon restarts (the supervisor's own counts, summed). */
void acceld_stats_set_mps_restarts(struct acceld_stats *s, const char *uuid, uint64_t restarts);
void acceld_stats_quota(struct acceld_stats *s, enum acceld_stats_quota_kind kind,
                        enum acceld_stats_quota_action action);

/* The file's JSON for s, with write_time now (Unix seconds). *ret is owned by
 * the caller (free). Returns 0 or -ENOMEM. */
int acceld_stats_format(const struct acceld_stats *s, double now, char **ret, size_t *ret_len);
/* Formats s and replaces DIR/acceld-stats.json (tmp + rename, no fsync; the
 * directory is created if missing). Returns 0 or -errno. */
int acceld_stats_write(const struct acceld_stats *s, const char *dir, double now);

/* Parses the file's JSON (len bytes, any NUL refused) into *ret (untouched on
 * failure). Returns 0, or -EINVAL with err set to what is wrong (a JSON path and
 * the reason), -ENOMEM. */
int acceld_stats_parse(const char *data, size_t len, struct acceld_stats *ret, char *err,
                       size_t errlen);
/* Reads and parses path (at most ACCELD_STATS_MAX_BYTES). -errno of the read
 * with err set, or as acceld_stats_parse. */
int acceld_stats_read(const char *path, struct acceld_stats *ret, char *err, size_t errlen);
