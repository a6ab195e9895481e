/* pace-flight.h — one process's launches in flight between being charged and being measured,
 * as pure logic over pace.h. The CUDA side (hook-launch.c) owns a pair of events per entry and
 * tells this module, through a callback, whether entry i's GPU time is known yet; the unit tests
 * plug a simulated GPU in the same place, so the rules below are the ones that run for real:
 *
 *   - a launch whose GPU time was never measured (first launch of a kernel or graph) is charged 0
 *     and is a "probe"; while a probe is in flight no other unmeasured launch is admitted, so an
 *     asynchronous burst of unknown work cannot run past the budget;
 *   - at most PACE_FLIGHT_SLOTS launches are in flight per process;
 *   - settling a measurement also teaches the estimate table.
 *
 * Threads: any thread may call any function; entries are claimed by a compare-and-swap on their
 * state, and no lock is held while the callback talks to the driver. */
#pragma once

#include "pace.h"

#include <stdbool.h>
#include <stdint.h>

#define PACE_FLIGHT_SLOTS 64u

struct pace_flight_entry {
    _Atomic uint32_t state; /* enum in pace-flight.c */
    uint32_t probe;
    uint64_t est_ns;
    uintptr_t key;
    uint64_t seq; /* launch order */
};

struct pace_flight {
    struct pace_shared *shared; /* borrowed: the container's state in the region */
    struct pace_slot *slot;     /* borrowed: this process's slot */
    struct pace_est_table *est; /* owned */
    uint32_t limit_pct;         /* the process's own limit (config); 0 = the shared copy's */
    _Atomic uint32_t probes;    /* unmeasured launches in flight */
    _Atomic uint32_t inflight;  /* entries claimed */
    _Atomic uint64_t seq;       /* launches begun */
    struct pace_flight_entry e[PACE_FLIGHT_SLOTS];
};

/* Is entry idx's GPU time known? 0 and *ret_ns when it is; -EAGAIN when not yet (with wait
 * true: only after blocking until it is, or on error); any other -errno: it can never be
 * measured (the entry is settled at its estimate). */
typedef int (*pace_measure_fn)(void *userdata, unsigned idx, bool wait, uint64_t *ret_ns);

/* 0 or -ENOMEM. shared/slot must outlive f. */
int pace_flight_init(struct pace_flight *f, struct pace_shared *shared, struct pace_slot *slot);
/* Settles nothing (call pace_flight_drain first if the events are still valid); frees the
 * estimate table. */
void pace_flight_fini(struct pace_flight *f);

/* Claims an entry for a launch of key at now_ns and charges it. 0: *ret_idx is the entry, record
 * the events and launch, then pace_flight_commit() (or pace_flight_abort() if the launch failed).
 * -EAGAIN: over budget, retry after at most *ret_wait_ns (harvest first). -EBUSY: wait for a
 * launch in flight to be measured (pace_flight_harvest with wait), then retry. */
int pace_flight_begin(struct pace_flight *f, uintptr_t key, uint64_t now_ns, unsigned *ret_idx,
                      uint64_t *ret_wait_ns);
void pace_flight_commit(struct pace_flight *f, unsigned idx);
/* The launch did not happen: its charge is refunded. */
void pace_flight_abort(struct pace_flight *f, unsigned idx);

/* Settles committed entries oldest first, up to the first whose GPU time is not known yet (work
 * on a stream completes in order, so asking about younger launches would be wasted driver
 * calls). With wait, blocks (through the callback) on that first unfinished one. Returns how
 * many were settled. */
unsigned pace_flight_harvest(struct pace_flight *f, pace_measure_fn measure, void *userdata,
                             bool wait);
/* Maintenance of entry idx's per-entry resources (the hook's events): claims it if it is free,
 * so no launch can use it until pace_flight_unhold(). False when it is in use. */
bool pace_flight_hold(struct pace_flight *f, unsigned idx);
void pace_flight_unhold(struct pace_flight *f, unsigned idx);

/* Blocks until nothing is in flight (process exit, context teardown). */
void pace_flight_drain(struct pace_flight *f, pace_measure_fn measure, void *userdata);

/* The whole admission loop for one launch, with injected clock and sleep, for callers that have
 * nothing better to do while they wait. Returns the claimed entry's index. */
typedef uint64_t (*pace_clock_fn)(void *userdata);
typedef void (*pace_sleep_fn)(void *userdata, uint64_t ns);
unsigned pace_flight_admit(struct pace_flight *f, uintptr_t key, pace_measure_fn measure,
                           pace_clock_fn clock, pace_sleep_fn sleep, void *userdata);

/* Longest single sleep inside pace_flight_admit(): measurements that arrive meanwhile can move
 * the budget, so the waiter looks again at least this often. */
#define PACE_MAX_SLEEP_NS 2000000ull
