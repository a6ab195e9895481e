/* pace-flight.c — a process's launches between charge and measurement (see pace-flight.h). */
#include "pace-flight.h"

#include <errno.h>
#include <string.h>

enum {
    ENTRY_FREE = 0,
    ENTRY_FILLING,  /* claimed by pace_flight_begin, launch being issued */
    ENTRY_INFLIGHT, /* launched, waiting for its measurement */
    ENTRY_SETTLING, /* a harvester is asking the driver about it */
};

#define RLX memory_order_relaxed
#define ACQ memory_order_acquire
#define REL memory_order_release

int pace_flight_init(struct pace_flight *f, struct pace_shared *shared, struct pace_slot *slot)
{
    struct pace_est_table *est = pace_est_new();
    if (!est)
        return -ENOMEM;
    memset(f, 0, sizeof(*f));
    f->shared = shared;
    f->slot = slot;
    f->est = est;
    return 0;
}

void pace_flight_fini(struct pace_flight *f)
{
    f->est = pace_est_free(f->est);
}

static bool claim(struct pace_flight_entry *e, uint32_t from, uint32_t to)
{
    return atomic_compare_exchange_strong_explicit(&e->state, &from, to, ACQ, RLX);
}

int pace_flight_begin(struct pace_flight *f, uintptr_t key, uint64_t now_ns, unsigned *ret_idx,
                      uint64_t *ret_wait_ns)
{
    uint64_t est = 0;
    bool probe = pace_est_lookup(f->est, key, &est) < 0;
    if (probe) {
        /* One unmeasured launch at a time: its charge is 0, so a second one would be free. */
        uint32_t none = 0;
        if (!atomic_compare_exchange_strong_explicit(&f->probes, &none, 1, RLX, RLX))
            return -EBUSY;
        est = 0;
    }

    unsigned idx = PACE_FLIGHT_SLOTS;
    for (unsigned i = 0; i < PACE_FLIGHT_SLOTS; i++)
        if (claim(&f->e[i], ENTRY_FREE, ENTRY_FILLING)) {
            idx = i;
            break;
        }
    int r = -EBUSY;
    if (idx < PACE_FLIGHT_SLOTS)
        r = f->limit_pct
                ? pace_acquire_at(f->shared, f->slot, f->limit_pct, now_ns, est, ret_wait_ns)
                : pace_acquire(f->shared, f->slot, now_ns, est, ret_wait_ns);
    if (r < 0) {
        if (idx < PACE_FLIGHT_SLOTS)
            atomic_store_explicit(&f->e[idx].state, ENTRY_FREE, REL);
        if (probe)
            atomic_store_explicit(&f->probes, 0, RLX);
        return r;
    }
    struct pace_flight_entry *e = &f->e[idx];
    e->probe = probe;
    e->est_ns = est;
    e->key = key;
    e->seq = atomic_fetch_add_explicit(&f->seq, 1, RLX);
    atomic_fetch_add_explicit(&f->inflight, 1, RLX);
    *ret_idx = idx;
    return 0;
}

void pace_flight_commit(struct pace_flight *f, unsigned idx)
{
    atomic_store_explicit(&f->e[idx].state, ENTRY_INFLIGHT, REL);
}

static void release(struct pace_flight *f, struct pace_flight_entry *e)
{
    if (e->probe)
        atomic_store_explicit(&f->probes, 0, RLX);
    atomic_fetch_sub_explicit(&f->inflight, 1, RLX);
    atomic_store_explicit(&e->state, ENTRY_FREE, REL);
}

void pace_flight_abort(struct pace_flight *f, unsigned idx)
{
    struct pace_flight_entry *e = &f->e[idx];
    pace_settle(f->shared, f->slot, e->est_ns, 0);
    release(f, e);
}

/* The committed entry launched first, claimed for settling; PACE_FLIGHT_SLOTS if none. */
static unsigned claim_oldest(struct pace_flight *f)
{
    for (;;) {
        unsigned best = PACE_FLIGHT_SLOTS;
        for (unsigned i = 0; i < PACE_FLIGHT_SLOTS; i++)
            if (atomic_load_explicit(&f->e[i].state, ACQ) == ENTRY_INFLIGHT &&
                (best == PACE_FLIGHT_SLOTS || f->e[i].seq < f->e[best].seq))
                best = i;
        if (best == PACE_FLIGHT_SLOTS || claim(&f->e[best], ENTRY_INFLIGHT, ENTRY_SETTLING))
            return best;
        /* another thread took it: look again */
    }
}

unsigned pace_flight_harvest(struct pace_flight *f, pace_measure_fn measure, void *userdata,
                             bool wait)
{
    unsigned settled = 0;
    for (unsigned n = 0; n < PACE_FLIGHT_SLOTS; n++) {
        unsigned i = claim_oldest(f);
        if (i == PACE_FLIGHT_SLOTS)
            break;
        struct pace_flight_entry *e = &f->e[i];
        uint64_t ns = 0;
        int r = measure(userdata, i, wait, &ns);
        if (r == -EAGAIN) {
            atomic_store_explicit(&e->state, ENTRY_INFLIGHT, REL);
            break;
        }
        wait = false; /* block at most once per call */
        if (r < 0) {
            /* Never measurable (context gone, event error): keep the estimate as the charge. */
            pace_settle(f->shared, f->slot, e->est_ns, e->est_ns);
        } else {
            pace_settle(f->shared, f->slot, e->est_ns, ns);
            pace_est_learn(f->est, e->key, ns);
        }
        release(f, e);
        settled++;
    }
    return settled;
}

bool pace_flight_hold(struct pace_flight *f, unsigned idx)
{
    return claim(&f->e[idx], ENTRY_FREE, ENTRY_FILLING);
}

void pace_flight_unhold(struct pace_flight *f, unsigned idx)
{
    atomic_store_explicit(&f->e[idx].state, ENTRY_FREE, REL);
}

void pace_flight_drain(struct pace_flight *f, pace_measure_fn measure, void *userdata)
{
    while (atomic_load_explicit(&f->inflight, ACQ) > 0)
        if (pace_flight_harvest(f, measure, userdata, true) == 0)
            break; /* only entries other threads are filling: theirs to finish */
}

unsigned pace_flight_admit(struct pace_flight *f, uintptr_t key, pace_measure_fn measure,
                           pace_clock_fn clock, pace_sleep_fn sleep, void *userdata)
{
    for (;;) {
        unsigned idx;
        uint64_t wait = 0;
        pace_flight_harvest(f, measure, userdata, false);
        int r = pace_flight_begin(f, key, clock(userdata), &idx, &wait);
        if (r == 0)
            return idx;
        if (r == -EAGAIN) {
            sleep(userdata, wait < PACE_MAX_SLEEP_NS ? wait : PACE_MAX_SLEEP_NS);
        } else if (pace_flight_harvest(f, measure, userdata, true) == 0) {
            /* Busy with entries other threads still fill: give them a moment. */
            sleep(userdata, 50000);
        }
    }
}
