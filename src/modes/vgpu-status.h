/* vgpu-status.h — what `accelctl vgpu` shows: acceld writes
 * <stateDir>/vgpu/status.json (atomically, 0644) at start and after each
 * host-side check pass. It holds every GPU in vgpu mode with the units handed
 * out, every assignment with its limits and its usage at the last pass (from
 * libvcuda's region and from NVML), and the pass's findings. docs/vgpu.md
 * ("accelctl vgpu") describes the fields.
 *
 * Threads: the event loop thread only. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "hostcheck.h"
#include "vgpu.h"

#define VGPU_STATUS_VERSION 1
#define VGPU_STATUS_FILE "status.json" /* under <stateDir>/vgpu/ */

/* The last VGPU_STATUS_RECENT findings of every pass (a ring, copied
 * strings), so the status file still shows a finding after its process is
 * gone. Zero-initialised (calloc) is empty. */
#define VGPU_STATUS_RECENT 32
struct vgpu_status_recent {
    struct vgpu_status_entry {
        int64_t time;
        char kind[24];
        char ns[VGPU_NAME_MAX], pod[VGPU_NAME_MAX], container[VGPU_NAME_MAX];
        char gpu[96];
        unsigned pid;
        char action[160];
        char message[1024];
    } e[VGPU_STATUS_RECENT];
    size_t next, n;
};

/* One check pass as the status file records it (all borrowed for the call;
 * targets, usage: n entries, usage may be NULL before the first pass). */
struct vgpu_status_pass {
    int64_t time; /* seconds since the epoch; 0: no pass yet */
    const struct hostcheck_target *targets;
    const struct hostcheck_usage *usage;
    size_t n;
    const struct hostcheck_finding *findings;
    size_t n_findings;
    const char *action;   /* vgpu.overQuotaAction's name */
    uint64_t interval_ms; /* vgpu.checkInterval */
    /* Optional: the pass's findings are added to it, and it is written as
     * recentFindings, newest first. */
    struct vgpu_status_recent *recent;
};

/* One line for the log and the Kubernetes Event: what the finding says and
 * what was done about it. */
void vgpu_status_describe(const struct hostcheck_finding *f, const struct hostcheck_target *t,
                          char *buf, size_t len);

/* Writes <state_dir>/vgpu/status.json. Returns 0 or -errno. */
int vgpu_status_write(const struct vgpu *v, const char *state_dir,
                      const struct vgpu_status_pass *pass);
