/*
 * status.h — the exporter's status page at `/`: one server-rendered HTML page (no scripts, no
 * external assets) with each GPU's health, utilization, memory, temperature, power, recent
 * XIDs and the pods on it, for people without Grafana.
 *
 * The sampler thread fills a status_gpu per GPU from its snapshot (accel-exporter.c); a request
 * for `/` copies the last set under the exporter's lock and renders it here, so the page, like
 * /metrics, never calls NVML.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define STATUS_RECENT_XIDS 8 /* the last XIDs kept per GPU */
#define STATUS_MAX_PODS 16   /* containers listed per GPU; more are counted */

struct status_xid {
    unsigned xid;
    time_t when; /* wall-clock seconds */
};

/* The recent XIDs of one GPU: a ring, x[(n - 1) % STATUS_RECENT_XIDS] is the newest. */
struct status_xids {
    unsigned n; /* XIDs seen in all; the last min(n, STATUS_RECENT_XIDS) are kept */
    struct status_xid x[STATUS_RECENT_XIDS];
};

struct status_pod {
    char namespace_[64], pod[254], container[64]; /* "" where pod-resources cannot say */
    char pod_uid[40], container_id[72];           /* from /proc/<pid>/cgroup */
    uint64_t memory_bytes;
};

struct status_gpu {
    unsigned index;
    char uuid[96], name[96];
    bool util_ok, mem_ok, temp_ok, power_ok, ecc_ok, remap_ok, reasons_ok;
    double utilization; /* 0..1 */
    uint64_t memory_used, memory_total;
    unsigned temperature; /* celsius */
    double power_watts;
    unsigned long long ecc_uncorrected, clock_event_reasons;
    bool remap_pending, remap_failed;
    struct status_xids xids;
    unsigned npods, pods_dropped;
    struct status_pod pods[STATUS_MAX_PODS];
};

/* Records one XID in a ring of recent XIDs. */
void status_note_xid(struct status_xids *r, unsigned xid, time_t when);

/* The GPU's health: "ok", or "degraded" with *reason set (a static string) to the first of:
 * a fatal XID among the recent ones (see docs/runbooks.md), no answer from NVML (utilization,
 * memory, temperature and power all unread), a failed or pending row remap, uncorrectable ECC
 * errors, thermal slowdown. */
const char *status_health(const struct status_gpu *g, const char **reason);

/* Writes the page for n GPUs to f. host: the node's name; driver: its driver version; now:
 * when the snapshot was taken (wall clock). Returns 0, or -1 when f reported an error. */
int status_render(FILE *f, const struct status_gpu *g, unsigned n, const char *host,
                  const char *driver, time_t now);
