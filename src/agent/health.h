/* health.h — GPU health for acceld: the NVML event thread and the decisions
 * the event loop takes on what it reports.
 *
 * The monitor thread blocks in nvmlEventSetWait_v2 on one event set with
 * every GPU registered for XID critical errors and double-bit ECC errors,
 * and between events probes each GPU with a cheap NVML query to notice a GPU
 * that fell off the bus (GPU_IS_LOST) or came back. XID 79 (fallen off the
 * bus) and a wait that fails with GPU_IS_LOST trigger a probe at once. It never touches the
 * loop's data: it writes fixed-size struct health_event records to a pipe
 * the loop watches (health_monitor_fd) and that is all.
 *
 * The loop applies each event to that GPU's struct health_gpu with
 * health_apply() (ignored XIDs, lost, fatal), and a timer calls
 * health_recovered() to bring a GPU back after health.recoverAfter without a
 * fatal event while its NVML queries succeed. Those two are pure functions. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acceld-config.h"

enum health_kind {
    HEALTH_EV_XID = 1,     /* data: the XID */
    HEALTH_EV_ECC_DBE = 2, /* double-bit ECC error */
    HEALTH_EV_LOST = 3,    /* NVML says GPU_IS_LOST (or the handle is gone) */
    HEALTH_EV_BACK = 4,    /* NVML queries succeed again after LOST */
};

/* One record on the pipe; 16 bytes, so a write is atomic. */
struct health_event {
    int32_t gpu; /* inventory index; -1 = every GPU (an event NVML did not attribute) */
    uint32_t kind;
    uint64_t data;
};

/* Loop-side state of one GPU. */
struct health_gpu {
    bool healthy;
    bool lost;              /* NVML queries fail: cannot recover until they succeed */
    uint64_t last_fatal_ns; /* CLOCK_MONOTONIC of the last fatal event */
    char reason[192];       /* why it is unhealthy, for logs */
};

/* Applies ev to s at time now_ns. Returns true when s->healthy changed.
 * *ret_ignored (optional) is set when the event was an ignored XID. */
bool health_apply(struct health_gpu *s, const struct health_event *ev,
                  const struct acceld_config *cfg, uint64_t now_ns, bool *ret_ignored);

/* True when an unhealthy GPU may be marked healthy again: recovery is on
 * (recover_after_ns > 0), NVML answers for it, and no fatal event came for
 * recover_after_ns. Sets s->healthy when so. */
bool health_recovered(struct health_gpu *s, uint64_t recover_after_ns, uint64_t now_ns);

struct gpu_nvml;
struct health_monitor;

/* How often a running monitor probes each GPU, and the longest one wait
 * lasts (the bound on how long health_monitor_stop takes). A GPU that is
 * lost without any event (no XID 79, no GPU_IS_LOST from the wait) is found
 * by the probe: the interval keeps that under the 100 ms the issue asks for
 * end to end. One probe is one cheap NVML query per GPU (memory info), so
 * 8 GPUs cost 160 queries a second. */
#define HEALTH_PROBE_INTERVAL_NS (50ull * 1000000ull)
#define HEALTH_WAIT_MS 50

/* Starts the thread for the n GPUs with these UUIDs (index = position).
 * nvml is borrowed and must outlive the monitor. A GPU whose events cannot
 * be registered is still probed; *ret_warnings (optional) counts them.
 * Returns 0 or -errno. */
int health_monitor_start(struct gpu_nvml *nvml, const char *const *uuids, size_t n,
                         struct health_monitor **ret, size_t *ret_warnings);
/* The pipe's read end (non-blocking) for the event loop. */
int health_monitor_fd(const struct health_monitor *m);
/* Reads one record. Returns 1 (got one), 0 (none pending) or -errno. */
int health_monitor_read(struct health_monitor *m, struct health_event *ret_ev);
/* Stops and joins the thread, closes the pipe. NULL ok; returns NULL. */
struct health_monitor *health_monitor_stop(struct health_monitor *m);
