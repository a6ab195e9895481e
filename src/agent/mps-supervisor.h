/* mps-supervisor.h — runs and watches one MPS control daemon (`nvidia-cuda-mps-control -f`)
 * per MPS GPU set, on the agent's event loop (docs/mps.md, "Supervisor").
 *
 * Per set it owns: the set's directory RUN_DIR/mps-<set name>/ with pipe/, log/ and shm/ (a
 * tmpfs: the daemon's /dev/shm, and its clients'), the daemon it started (its own child,
 * watched and signalled through a pidfd only: no pid is ever read from the pipe directory,
 * which the set's containers can write), and the control front end processes it runs to talk
 * to that daemon. It never blocks the loop: every front end is a child whose exit is watched
 * through a pidfd, with a reply deadline; a daemon that does not answer before the deadline
 * (hung, SIGSTOPped) counts as dead, is SIGKILLed and restarted with backoff. Every probe also
 * reads each server's active thread percentage and pinned memory limits and the daemon's
 * defaults (a client can change them through the pipe directory) and puts back any above the
 * set's caps, without the set going unhealthy. Health changes go to the callback, one call
 * per transition per set.
 *
 * Threads: every function runs on the loop's thread (or before the loop runs). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "evloop.h"

struct mps_sup;

/* One MPS GPU set: one control daemon whose CUDA_VISIBLE_DEVICES is visible_devices (UUIDs
 * separated by commas; the MPS guide recommends UUIDs) with these defaults. */
struct mps_sup_set_cfg {
    const char *name;            /* [A-Za-z0-9._-]+, names the set's directory; copied */
    const char *visible_devices; /* copied */
    unsigned device_count;       /* devices in visible_devices; each gets pinned_mem_bytes */
    unsigned thread_pct;         /* set_default_active_thread_percentage, 1..100 */
    uint64_t pinned_mem_bytes;   /* set_default_device_pinned_mem_limit, 0: not set */
};

/* healthy: the daemon answers and has the set's defaults. why: what happened (static or
 * valid for the call only). */
typedef void (*mps_sup_health_cb)(struct mps_sup *sup, size_t set, bool healthy, const char *why,
                                  void *user_data);
/* A client lifted caps and they were put back: server's (0: the daemon's defaults); what: which
 * and to what (valid for the call only). */
typedef void (*mps_sup_caps_cb)(struct mps_sup *sup, size_t set, pid_t server, const char *what,
                                void *user_data);

struct mps_sup_opts {
    const char *control_path;   /* the front end; NULL: "nvidia-cuda-mps-control" found on PATH */
    const char *run_dir;        /* created if missing */
    uint64_t probe_interval_ns; /* 0: 5 s; a daemon running servers: at most every 1 s */
    uint64_t reply_timeout_ns;  /* a front end's deadline; 0: 5 s */
    uint64_t backoff_min_ns;    /* first restart delay, doubled per failure; 0: 1 s */
    uint64_t backoff_max_ns;    /* 0: 60 s */
    uint64_t stop_timeout_ns;   /* mps_sup_stop's bound before SIGKILL; 0: 5 s */
    mps_sup_health_cb health_cb;
    mps_sup_caps_cb caps_cb; /* optional */
    void *user_data;
};

/* Checks the settings and creates the directories; starts nothing. -EINVAL for a bad set
 * (name, percentage, no devices), -ENOMEM, or a mkdir error. */
int mps_sup_new(struct ev_loop *loop, const struct mps_sup_opts *opts,
                const struct mps_sup_set_cfg *sets, size_t n_sets, struct mps_sup **ret);
/* Starts every set's daemon (asynchronously: health comes through the callback). A daemon
 * an earlier acceld left running (found through acceld's own record, never the pipe
 * directory's pid file) is killed first. */
int mps_sup_start(struct mps_sup *sup);
/* Stops every daemon: `quit` through the front end, then SIGKILL after stop_timeout_ns.
 * Blocks the caller for at most about twice stop_timeout_ns (shutdown only). No callbacks. */
void mps_sup_stop(struct mps_sup *sup);
/* Stops without blocking the loop: each daemon is told to quit (the front end's `quit`) and
 * its exit is awaited on its pidfd, SIGKILL after stop_timeout_ns. Returns 0: cb runs (from
 * the loop) once every daemon is gone, and may free sup; 1: none was running, nothing to wait
 * for (cb is not called); -EINVAL. No restart or health report happens meanwhile. */
typedef void (*mps_sup_stopped_cb)(struct mps_sup *sup, void *user_data);
int mps_sup_stop_async(struct mps_sup *sup, mps_sup_stopped_cb cb, void *user_data);
/* Stops (as mps_sup_stop) and frees. NULL ok; returns NULL. */
struct mps_sup *mps_sup_free(struct mps_sup *sup);

/* The set's daemon pid (0 when none runs), pipe and log directories, and health. */
pid_t mps_sup_daemon_pid(const struct mps_sup *sup, size_t set);
const char *mps_sup_pipe_dir(const struct mps_sup *sup, size_t set);
const char *mps_sup_log_dir(const struct mps_sup *sup, size_t set);
/* The set's own /dev/shm for its clients (a tmpfs bound on its daemon's /dev/shm), or NULL
 * where acceld may not mount (its clients then need the host's /dev/shm). */
const char *mps_sup_shm_dir(const struct mps_sup *sup, size_t set);
/* How many times a client's lifted caps (or changed defaults) were put back. */
unsigned mps_sup_caps_restored(const struct mps_sup *sup, size_t set);
bool mps_sup_healthy(const struct mps_sup *sup, size_t set);
/* Restarts so far for the set (tests and accelctl). */
unsigned mps_sup_restarts(const struct mps_sup *sup, size_t set);
