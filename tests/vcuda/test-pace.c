/* test-pace.c — the compute-share controller (pace.c, pace-flight.c) against a simulated clock
 * and a simulated GPU. The simulated GPU is one FIFO kernel timeline shared by every process, as
 * the emulator's is; a measurement is a kernel's own execution time, as CUDA events give it.
 * Processes are stepped in time order (a discrete-event simulation), so every run is
 * deterministic: no wall clock anywhere. Shares are computed from the simulated timeline, not
 * from the controller's own books. */
#include "pace-flight.h"
#include "pace.h"
#include "tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define US 1000ull
#define MS 1000000ull
#define SEC 1000000000ull

/* ---- simulated GPU: one FIFO timeline ---- */

struct interval {
    uint64_t start, end;
    uint64_t before; /* busy time of the container's earlier intervals */
};

struct sim_container {
    struct pace_shared shared;
    struct pace_slot slots[8];
    struct interval *iv; /* this container's kernels on the timeline, in start order */
    size_t n_iv, cap_iv;
};

enum workload {
    WL_SMALL, /* 50 µs kernels, launched asynchronously */
    WL_LONG,  /* 20 ms kernels, asynchronously */
    WL_GRAPH, /* graph launches of 1.5-4.5 ms, stream synchronized after each (graph replay) */
};

struct sim_proc {
    struct sim *sim;
    struct sim_container *c;
    struct pace_flight flight;
    struct pace_sampler sampler;
    enum workload wl;
    uint64_t now, start_at, stop_at;
    uint64_t end[PACE_FLIGHT_SLOTS], dur[PACE_FLIGHT_SLOTS];
    uint64_t n_launch;
    uint64_t last_end; /* of this process's latest kernel */
    bool started, dead;
};

struct sim {
    uint64_t gpu_free_at;
    uint64_t rng;
    struct sim_container c[2];
    struct sim_proc p[8];
    int n_proc;
};

static uint64_t rnd(struct sim *s, uint64_t bound)
{
    s->rng = s->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (s->rng >> 33) % bound;
}

static void add_interval(struct sim_container *c, uint64_t start, uint64_t end)
{
    if (c->n_iv == c->cap_iv) {
        c->cap_iv = c->cap_iv ? c->cap_iv * 2 : 4096;
        c->iv = realloc(c->iv, c->cap_iv * sizeof(*c->iv));
        if (!c->iv)
            abort();
    }
    uint64_t before = 0;
    if (c->n_iv)
        before = c->iv[c->n_iv - 1].before + c->iv[c->n_iv - 1].end - c->iv[c->n_iv - 1].start;
    c->iv[c->n_iv++] = (struct interval){start, end, before};
}

/* Busy time of the container in [0, t). Intervals come from one FIFO timeline, so they are
 * disjoint and sorted: binary search for the last one starting before t. */
static uint64_t busy_upto(const struct sim_container *c, uint64_t t)
{
    size_t lo = 0, hi = c->n_iv;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->iv[mid].start < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return 0;
    const struct interval *iv = &c->iv[lo - 1];
    return iv->before + (iv->end < t ? iv->end : t) - iv->start;
}

static uint64_t busy_in(const struct sim_container *c, uint64_t t0, uint64_t t1)
{
    return busy_upto(c, t1) - busy_upto(c, t0);
}

static double share_pct(const struct sim_container *c, uint64_t t0, uint64_t t1)
{
    return 100.0 * (double)busy_in(c, t0, t1) / (double)(t1 - t0);
}

/* Device busy counter as a process would read it: all containers' kernels up to now. */
static uint64_t device_busy(const struct sim *s, uint64_t now)
{
    return busy_in(&s->c[0], 0, now) + busy_in(&s->c[1], 0, now);
}

/* ---- the measurement callback pace-flight calls (CUDA events in the real hook) ---- */

static int sim_measure(void *ud, unsigned idx, bool wait, uint64_t *ret_ns)
{
    struct sim_proc *p = ud;
    if (p->end[idx] > p->now)
        return -EAGAIN; /* the simulator never blocks inside a step: see step() */
    *ret_ns = p->dur[idx];
    return 0;
}

static uint64_t next_duration(struct sim_proc *p)
{
    switch (p->wl) {
    case WL_SMALL:
        return 50 * US;
    case WL_LONG:
        return 20 * MS;
    case WL_GRAPH:
        return 1500 * US + rnd(p->sim, 3000) * US;
    }
    return 0;
}

static uintptr_t key_of(const struct sim_proc *p)
{
    return (uintptr_t)0x1000 + (uintptr_t)p->wl;
}

/* Oversleep: a loaded VM wakes a sleeper up to 150 µs late. */
static uint64_t slack(struct sim_proc *p)
{
    return 5 * US + rnd(p->sim, 150) * US;
}

/* Earliest completion among this process's launches in flight (UINT64_MAX if none). */
static uint64_t earliest_end(const struct sim_proc *p)
{
    uint64_t t = UINT64_MAX;
    for (unsigned i = 0; i < PACE_FLIGHT_SLOTS; i++)
        if (atomic_load(&p->flight.e[i].state) != 0 && p->end[i] < t)
            t = p->end[i];
    return t;
}

/* One step of a process at p->now: harvest, try one launch, decide when it runs next. This is
 * pace_flight_admit() unrolled so that other processes run while this one waits. */
static void step(struct sim_proc *p)
{
    struct sim *s = p->sim;
    pace_flight_harvest(&p->flight, sim_measure, p, false);
    if (p->sampler.at_ns == 0 || p->now - p->sampler.at_ns >= PACE_SAMPLE_NS)
        pace_observe_device(&p->c->shared, &p->sampler, p->now, device_busy(s, p->now));

    unsigned idx;
    uint64_t wait = 0;
    int r = pace_flight_begin(&p->flight, key_of(p), p->now, &idx, &wait);
    if (r == -EAGAIN) {
        p->now += (wait < PACE_MAX_SLEEP_NS ? wait : PACE_MAX_SLEEP_NS) + slack(p);
        return;
    }
    if (r == -EBUSY) {
        uint64_t t = earliest_end(p);
        p->now = (t == UINT64_MAX ? p->now + 50 * US : t) + slack(p);
        return;
    }
    REQUIRE_EQ_INT(r, 0);
    uint64_t d = next_duration(p);
    uint64_t start = s->gpu_free_at > p->now ? s->gpu_free_at : p->now;
    s->gpu_free_at = start + d;
    add_interval(p->c, start, start + d);
    p->end[idx] = start + d;
    p->dur[idx] = d;
    p->last_end = start + d;
    pace_flight_commit(&p->flight, idx);
    p->n_launch++;
    p->now += 4 * US; /* the launch call itself */
    if (p->wl == WL_GRAPH && p->last_end > p->now)
        p->now = p->last_end + 10 * US; /* cuStreamSynchronize */
}

static struct sim *sim_new(void)
{
    struct sim *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->rng = 42;
    return s;
}

static void sim_free(struct sim *s)
{
    for (int i = 0; i < s->n_proc; i++)
        pace_flight_fini(&s->p[i].flight);
    free(s->c[0].iv);
    free(s->c[1].iv);
    free(s);
}

static void sim_container(struct sim *s, int ci, unsigned limit, enum pace_policy pol)
{
    REQUIRE_EQ_INT(pace_shared_init(&s->c[ci].shared, limit, pol, 1 * SEC), 0);
}

static struct sim_proc *sim_proc(struct sim *s, int ci, enum workload wl, uint64_t start,
                                 uint64_t stop)
{
    REQUIRE(s->n_proc < 8);
    struct sim_proc *p = &s->p[s->n_proc];
    p->sim = s;
    p->c = &s->c[ci];
    p->wl = wl;
    p->now = p->start_at = start;
    p->stop_at = stop;
    int slot = 0;
    for (int i = 0; i < s->n_proc; i++)
        slot += s->p[i].c == p->c;
    REQUIRE_EQ_INT(pace_flight_init(&p->flight, &p->c->shared, &p->c->slots[slot]), 0);
    s->n_proc++;
    return p;
}

/* Runs every process until `until` (simulated ns after the 1 s origin). */
static void sim_run(struct sim *s, uint64_t until)
{
    for (;;) {
        struct sim_proc *next = NULL;
        for (int i = 0; i < s->n_proc; i++) {
            struct sim_proc *p = &s->p[i];
            if (!p->dead && p->now < p->stop_at && p->now < until && (!next || p->now < next->now))
                next = p;
        }
        if (!next)
            return;
        step(next);
    }
}

#define T0 (1 * SEC)

/* One container alone at limit, one process of the workload, 12 s: share over [2 s, 12 s]. */
static double single_share(unsigned limit, enum workload wl)
{
    struct sim *s = sim_new();
    sim_container(s, 0, limit, PACE_POLICY_HARD);
    sim_proc(s, 0, wl, T0, T0 + 12 * SEC);
    sim_run(s, T0 + 12 * SEC);
    double got = share_pct(&s->c[0], T0 + 2 * SEC, T0 + 12 * SEC);
    sim_free(s);
    return got;
}

static void check_targets(enum workload wl, const char *name)
{
    static const unsigned limits[] = {10, 30, 50, 70};
    double mae = 0;
    for (unsigned i = 0; i < 4; i++) {
        double got = single_share(limits[i], wl);
        tap_diag("%s at %u%%: %.2f%%", name, limits[i], got);
        CHECK(got > limits[i] - 1.0 && got < limits[i] + 1.0);
        mae += (got > limits[i] ? got - limits[i] : limits[i] - got) / 4;
    }
    tap_diag("%s: mean absolute error %.2f points", name, mae);
}

TEST(converges_small_kernels)
{
    check_targets(WL_SMALL, "50us kernels");
}

TEST(converges_long_kernels)
{
    check_targets(WL_LONG, "20ms kernels");
}

TEST(converges_graphs_of_unknown_duration)
{
    check_targets(WL_GRAPH, "graphs");
}

TEST(many_processes_share_one_budget)
{
    struct sim *s = sim_new();
    sim_container(s, 0, 30, PACE_POLICY_HARD);
    sim_proc(s, 0, WL_SMALL, T0, UINT64_MAX);
    sim_proc(s, 0, WL_SMALL, T0 + 10 * MS, UINT64_MAX);
    sim_proc(s, 0, WL_LONG, T0 + 20 * MS, UINT64_MAX);
    sim_proc(s, 0, WL_GRAPH, T0 + 30 * MS, UINT64_MAX);
    sim_run(s, T0 + 12 * SEC);
    double got = share_pct(&s->c[0], T0 + 2 * SEC, T0 + 12 * SEC);
    tap_diag("4 processes at 30%%: %.2f%%", got);
    CHECK(got > 29.0 && got < 31.0);
    /* The region's books: the container total is the sum of its processes'. */
    uint64_t sum = 0;
    for (int i = 0; i < 4; i++)
        sum += atomic_load(&s->c[0].slots[i].measured_ns);
    CHECK_EQ_U64(sum, atomic_load(&s->c[0].shared.measured_ns));
    CHECK(atomic_load(&s->c[0].slots[0].launches) > 0 &&
          atomic_load(&s->c[0].slots[3].launches) > 0);
    sim_free(s);
}

static void two_containers(unsigned a, unsigned b, enum workload wa, enum workload wb)
{
    struct sim *s = sim_new();
    sim_container(s, 0, a, PACE_POLICY_HARD);
    sim_container(s, 1, b, PACE_POLICY_HARD);
    sim_proc(s, 0, wa, T0, UINT64_MAX);
    sim_proc(s, 1, wb, T0, UINT64_MAX);
    sim_run(s, T0 + 12 * SEC);
    double sa = share_pct(&s->c[0], T0 + 2 * SEC, T0 + 12 * SEC);
    double sb = share_pct(&s->c[1], T0 + 2 * SEC, T0 + 12 * SEC);
    double want = (double)a / b, got = sa / sb;
    tap_diag("%u/%u: %.2f%% / %.2f%%, ratio %.3f (target %.3f)", a, b, sa, sb, got, want);
    CHECK(got > want * 0.9 && got < want * 1.1);
    sim_free(s);
}

TEST(two_containers_10_90)
{
    two_containers(10, 90, WL_SMALL, WL_SMALL);
    two_containers(10, 90, WL_LONG, WL_SMALL);
}

TEST(two_containers_30_70)
{
    two_containers(30, 70, WL_SMALL, WL_SMALL);
    two_containers(30, 70, WL_GRAPH, WL_LONG);
}

/* Hard never goes above the limit over any window of a second, beyond the bank and one kernel. */
TEST(hard_never_above_limit)
{
    struct sim *s = sim_new();
    sim_container(s, 0, 30, PACE_POLICY_HARD);
    sim_proc(s, 0, WL_SMALL, T0, UINT64_MAX);
    sim_proc(s, 0, WL_LONG, T0, UINT64_MAX);
    sim_run(s, T0 + 10 * SEC);
    double worst = 0;
    for (uint64_t t = T0; t + SEC <= T0 + 10 * SEC; t += 100 * MS) {
        double got = share_pct(&s->c[0], t, t + SEC);
        worst = got > worst ? got : worst;
    }
    tap_diag("worst 1 s window at 30%%: %.2f%%", worst);
    /* 30 % + the bank's 20 ms x 30 % + one 20 ms kernel = 30 + 0.6 + 2 points */
    CHECK(worst <= 32.6);
    sim_free(s);
}

TEST(unlimited_is_not_paced)
{
    struct pace_shared sh;
    struct pace_slot slot = {0};
    REQUIRE_EQ_INT(pace_shared_init(&sh, 100, PACE_POLICY_HARD, T0), 0);
    uint64_t wait = 0;
    for (int i = 0; i < 1000; i++)
        CHECK_EQ_INT(pace_acquire(&sh, &slot, T0, 20 * MS, &wait), 0);
    CHECK(pace_unlimited(&sh));
    CHECK_EQ_U64(atomic_load(&sh.tat_ns), T0);
    CHECK_EQ_INT(pace_budget_ns(&sh, T0 + SEC), 0);
}

/* A freshly created region is all zeroes plus the configured limit: that must work as is. */
TEST(zeroed_region_is_a_valid_start)
{
    struct pace_shared sh = {0};
    struct pace_slot slot = {0};
    atomic_store(&sh.limit_pct, 50);
    uint64_t wait = 0;
    CHECK_EQ_INT(pace_acquire(&sh, &slot, 5 * SEC, 1 * MS, &wait), 0);
    CHECK_EQ_U64(atomic_load(&sh.tat_ns), 5 * SEC - PACE_BANK_NS + 2 * MS);
    CHECK_EQ_INT(pace_budget_ns(&sh, 5 * SEC), (int64_t)(PACE_BANK_NS - 2 * MS) / 2);
    CHECK_EQ_INT(atomic_load(&sh.budget_ns), (int64_t)(PACE_BANK_NS - 2 * MS) / 2);
    CHECK(!pace_unlimited(&sh));
    struct pace_shared none = {0};
    CHECK(pace_unlimited(&none)); /* limit 0: not configured */
    CHECK_EQ_INT(pace_acquire(&none, &slot, 5 * SEC, 1 * MS, &wait), 0);
    CHECK_EQ_U64(atomic_load(&none.launches), 0);
}

TEST(bad_limits_rejected)
{
    struct pace_shared sh = {0};
    CHECK_EQ_INT(pace_shared_init(&sh, 0, PACE_POLICY_HARD, T0), -EINVAL);
    CHECK_EQ_INT(pace_shared_init(&sh, 101, PACE_POLICY_HARD, T0), -EINVAL);
    CHECK_EQ_INT(pace_shared_init(&sh, 50, (enum pace_policy)7, T0), -EINVAL);
    CHECK_EQ_INT(atomic_load(&sh.limit_pct), 0); /* unchanged */
}

/* The invariant the integration test also checks: at limit S, after settling, tat has moved by
 * exactly the measured GPU time x 100/S (plus what idle clipping added), and a launch is admitted
 * iff tat is not in the future. */
TEST(books_integrate_measured_time)
{
    struct pace_shared sh;
    struct pace_slot slot = {0};
    REQUIRE_EQ_INT(pace_shared_init(&sh, 25, PACE_POLICY_HARD, T0), 0);
    uint64_t wait = 0;
    CHECK_EQ_INT(pace_acquire(&sh, &slot, T0, 1 * MS, &wait), 0); /* estimate 1 ms */
    CHECK_EQ_U64(atomic_load(&sh.tat_ns), T0 + 4 * MS);
    CHECK_EQ_U64(atomic_load(&slot.pending_ns), 1 * MS);
    CHECK_EQ_INT(pace_acquire(&sh, &slot, T0 + 1 * MS, 1 * MS, &wait), -EAGAIN);
    CHECK_EQ_U64(wait, 3 * MS);
    pace_settle(&sh, &slot, 1 * MS, 3 * MS); /* it took 3 ms */
    CHECK_EQ_U64(atomic_load(&sh.tat_ns), T0 + 12 * MS);
    CHECK_EQ_U64(atomic_load(&slot.pending_ns), 0);
    CHECK_EQ_U64(atomic_load(&slot.measured_ns), 3 * MS);
    CHECK_EQ_U64(atomic_load(&sh.measured_ns), 3 * MS);
    CHECK_EQ_INT(pace_budget_ns(&sh, T0 + 2 * MS), -(int64_t)(10 * MS) / 4);
    CHECK_EQ_INT(pace_acquire(&sh, &slot, T0 + 12 * MS, 2 * MS, &wait), 0);
    /* Long idle: credit is capped at the bank. */
    CHECK_EQ_INT(pace_budget_ns(&sh, T0 + 10 * SEC), (int64_t)PACE_BANK_NS / 4);
}

TEST(dead_process_budget_recovered)
{
    struct pace_shared sh;
    struct pace_slot alive = {0}, dead = {0};
    REQUIRE_EQ_INT(pace_shared_init(&sh, 50, PACE_POLICY_HARD, T0), 0);
    uint64_t wait = 0;
    /* The dead one charged 3 launches of 2 ms and was killed before measuring any. */
    CHECK_EQ_INT(pace_acquire(&sh, &dead, T0, 2 * MS, &wait), 0);
    CHECK_EQ_INT(pace_acquire(&sh, &dead, T0 + 4 * MS, 2 * MS, &wait), 0);
    CHECK_EQ_INT(pace_acquire(&sh, &dead, T0 + 8 * MS, 2 * MS, &wait), 0);
    CHECK_EQ_INT(pace_acquire(&sh, &alive, T0 + 12 * MS, 1 * MS, &wait), 0);
    CHECK_EQ_U64(atomic_load(&sh.tat_ns), T0 + 14 * MS);
    CHECK_EQ_INT(pace_acquire(&sh, &alive, T0 + 13 * MS, 1 * MS, &wait), -EAGAIN);
    CHECK_EQ_U64(wait, 1 * MS);
    CHECK_EQ_U64(pace_slot_reclaim(&sh, &dead), 6 * MS);
    CHECK_EQ_U64(pace_slot_reclaim(&sh, &dead), 0); /* once only */
    CHECK_EQ_U64(atomic_load(&sh.tat_ns), T0 + 2 * MS);
    CHECK_EQ_U64(atomic_load(&sh.pending_ns), 1 * MS); /* the live one's */
    CHECK_EQ_INT(pace_acquire(&sh, &alive, T0 + 13 * MS, 1 * MS, &wait), 0);

    /* In a running simulation: a process killed mid-run leaves charges behind; reclaiming them
     * gives the survivor the container's full share again. */
    struct sim *s = sim_new();
    sim_container(s, 0, 40, PACE_POLICY_HARD);
    struct sim_proc *victim = sim_proc(s, 0, WL_LONG, T0, UINT64_MAX);
    sim_proc(s, 0, WL_SMALL, T0, UINT64_MAX);
    uint64_t t = T0 + 3 * SEC;
    sim_run(s, t);
    while (atomic_load(&s->c[0].slots[0].pending_ns) == 0 && t < T0 + 4 * SEC)
        sim_run(s, t += 100 * US);
    victim->dead = true; /* no more steps: its launches in flight are never settled */
    uint64_t pending = atomic_load(&s->c[0].slots[0].pending_ns);
    tap_diag("victim died with %.1f ms charged unsettled", pending / 1e6);
    CHECK(pending > 0);
    uint64_t tat = atomic_load(&s->c[0].shared.tat_ns);
    CHECK_EQ_U64(pace_slot_reclaim(&s->c[0].shared, &s->c[0].slots[0]), pending);
    CHECK_EQ_U64(atomic_load(&s->c[0].shared.tat_ns), tat - pending * 100 / 40);
    CHECK_EQ_U64(atomic_load(&s->c[0].shared.pending_ns),
                 atomic_load(&s->c[0].slots[1].pending_ns));
    sim_run(s, T0 + 10 * SEC);
    double got = share_pct(&s->c[0], T0 + 4 * SEC, T0 + 10 * SEC);
    tap_diag("survivor alone after reclaim: %.2f%% at 40%%", got);
    CHECK(got > 39.0 && got < 41.0);
    sim_free(s);
}

/* A clean exit keeps the charges of unsettled launches (their work ran) and clears the sums. */
TEST(clean_exit_retires_pending)
{
    struct pace_shared sh;
    struct pace_slot a = {0}, b = {0};
    REQUIRE_EQ_INT(pace_shared_init(&sh, 50, PACE_POLICY_HARD, T0), 0);
    uint64_t wait = 0;
    CHECK_EQ_INT(pace_acquire(&sh, &a, T0, 3 * MS, &wait), 0);
    CHECK_EQ_INT(pace_acquire(&sh, &b, T0 + 6 * MS, 1 * MS, &wait), 0);
    uint64_t tat = atomic_load(&sh.tat_ns);
    CHECK_EQ_U64(pace_slot_retire(&sh, &a), 3 * MS);
    CHECK_EQ_U64(atomic_load(&sh.tat_ns), tat);
    CHECK_EQ_U64(atomic_load(&sh.pending_ns), 1 * MS);
    CHECK_EQ_U64(atomic_load(&a.pending_ns), 0);
    /* A sum that lost an update (a death between the two) saturates instead of wrapping. */
    atomic_store(&sh.pending_ns, 0);
    CHECK_EQ_U64(pace_slot_reclaim(&sh, &b), 1 * MS);
    CHECK_EQ_U64(atomic_load(&sh.pending_ns), 0);
}

TEST(burst_uses_idle_gpu_and_falls_back_within_a_period)
{
    struct sim *s = sim_new();
    sim_container(s, 0, 30, PACE_POLICY_BURST);
    sim_container(s, 1, 60, PACE_POLICY_HARD);
    sim_proc(s, 0, WL_SMALL, T0, UINT64_MAX);
    uint64_t t_new = T0 + 3 * SEC;
    sim_proc(s, 1, WL_SMALL, t_new, UINT64_MAX);
    sim_run(s, t_new);
    double alone = share_pct(&s->c[0], T0 + 1 * SEC, t_new);
    tap_diag("burst at 30%% alone: %.2f%%", alone);
    CHECK(alone > 90.0);
    CHECK(!pace_contended(&s->c[0].shared, t_new));

    /* Step the simulation until the burst container is held at its limit. */
    uint64_t t = t_new;
    while (!pace_contended(&s->c[0].shared, t) && t < t_new + 2 * PACE_PERIOD_NS) {
        t += 1 * MS;
        sim_run(s, t);
    }
    tap_diag("held at the limit %.1f ms after the second tenant appeared", (t - t_new) / 1e6);
    CHECK(t - t_new <= PACE_PERIOD_NS);
    sim_run(s, T0 + 8 * SEC);
    double a = share_pct(&s->c[0], t_new + PACE_PERIOD_NS, T0 + 8 * SEC);
    double b = share_pct(&s->c[1], t_new + PACE_PERIOD_NS, T0 + 8 * SEC);
    tap_diag("after: burst container %.2f%%, newcomer %.2f%% (60%% hard)", a, b);
    CHECK(a < 31.5);
    CHECK(b > 58.5);
    sim_free(s);
}

TEST(burst_goes_back_to_idle_time_when_alone_again)
{
    struct sim *s = sim_new();
    sim_container(s, 0, 30, PACE_POLICY_BURST);
    sim_container(s, 1, 50, PACE_POLICY_HARD);
    sim_proc(s, 0, WL_SMALL, T0, UINT64_MAX);
    sim_proc(s, 1, WL_SMALL, T0, T0 + 2 * SEC); /* leaves at 2 s */
    sim_run(s, T0 + 5 * SEC);
    double during = share_pct(&s->c[0], T0 + 1 * SEC, T0 + 2 * SEC);
    double after = share_pct(&s->c[0], T0 + 3 * SEC, T0 + 5 * SEC);
    tap_diag("burst at 30%%: %.2f%% with a tenant, %.2f%% after it left", during, after);
    CHECK(during < 31.5);
    CHECK(after > 90.0);
    sim_free(s);
}

TEST(estimates_learn_and_probe_once)
{
    struct pace_est_table *t = pace_est_new();
    REQUIRE(t);
    uint64_t ns = 0;
    CHECK_EQ_INT(pace_est_lookup(t, 0x42, &ns), -ENOENT);
    pace_est_learn(t, 0x42, 400);
    CHECK_EQ_INT(pace_est_lookup(t, 0x42, &ns), 0);
    CHECK_EQ_U64(ns, 400);
    pace_est_learn(t, 0x42, 800);
    CHECK_EQ_INT(pace_est_lookup(t, 0x42, &ns), 0);
    CHECK_EQ_U64(ns, 500);
    CHECK_EQ_INT(pace_est_lookup(t, 0, &ns), -ENOENT);
    /* Thousands of keys: never fails, recent keys are found. */
    for (uintptr_t k = 1; k <= 5000; k++)
        pace_est_learn(t, k * 64, k);
    CHECK_EQ_INT(pace_est_lookup(t, 5000 * 64, &ns), 0);
    CHECK_EQ_U64(ns, 5000);
    pace_est_free(t);

    /* pace-flight: the first launch of a kernel is a probe; a second unmeasured one waits. */
    struct pace_shared sh;
    struct pace_slot slot = {0};
    struct pace_flight f;
    REQUIRE_EQ_INT(pace_shared_init(&sh, 50, PACE_POLICY_HARD, T0), 0);
    REQUIRE_EQ_INT(pace_flight_init(&f, &sh, &slot), 0);
    unsigned i1, i2;
    uint64_t wait;
    CHECK_EQ_INT(pace_flight_begin(&f, 0x77, T0, &i1, &wait), 0);
    pace_flight_commit(&f, i1);
    CHECK_EQ_INT(pace_flight_begin(&f, 0x88, T0, &i2, &wait), -EBUSY);
    pace_flight_abort(&f, i1); /* launch failed: refunded, probe released */
    CHECK_EQ_INT(pace_flight_begin(&f, 0x88, T0, &i2, &wait), 0);
    pace_flight_commit(&f, i2);
    CHECK_EQ_U64(atomic_load(&sh.launches), 2);
    pace_flight_fini(&f);
}

/* pace_flight_admit: the loop the hook runs, with a fake clock that the sleeps advance. */
struct fake {
    uint64_t now;
    uint64_t slept;
    uint64_t done_at[PACE_FLIGHT_SLOTS];
};

static uint64_t fake_clock(void *ud)
{
    return ((struct fake *)ud)->now;
}

static void fake_sleep(void *ud, uint64_t ns)
{
    struct fake *f = ud;
    f->now += ns;
    f->slept += ns;
}

static int fake_measure(void *ud, unsigned idx, bool wait, uint64_t *ret_ns)
{
    struct fake *f = ud;
    if (f->done_at[idx] > f->now) {
        if (!wait)
            return -EAGAIN;
        f->now = f->done_at[idx];
    }
    *ret_ns = 1 * MS;
    return 0;
}

TEST(admit_loop_paces_a_serial_launcher)
{
    struct pace_shared sh;
    struct pace_slot slot = {0};
    struct pace_flight f;
    struct fake fk = {.now = T0};
    REQUIRE_EQ_INT(pace_shared_init(&sh, 20, PACE_POLICY_HARD, T0), 0);
    REQUIRE_EQ_INT(pace_flight_init(&f, &sh, &slot), 0);
    /* 100 launches of 1 ms kernels at 20 %: they take 100 x 5 ms of wall time, less the bank. */
    for (int i = 0; i < 100; i++) {
        unsigned idx = pace_flight_admit(&f, 0x99, fake_measure, fake_clock, fake_sleep, &fk);
        fk.done_at[idx] = fk.now + 1 * MS;
        pace_flight_commit(&f, idx);
    }
    pace_flight_drain(&f, fake_measure, &fk);
    CHECK_EQ_INT(atomic_load(&f.inflight), 0);
    CHECK_EQ_U64(atomic_load(&slot.measured_ns), 100 * MS);
    tap_diag("100 x 1 ms at 20%%: %.1f ms of wall time", (fk.now - T0) / 1e6);
    CHECK(fk.now - T0 >= 99 * 5 * MS - PACE_BANK_NS);
    CHECK(fk.now - T0 <= 100 * 5 * MS + 2 * MS);
    pace_flight_fini(&f);
}

/* ---- residency calibration (pace_calib) ---- */

/* One process for secs seconds from T0: a launch every 40 ms whose events span span_ns (its own
 * 20 ms plus what it waited for other contexts' slices), settled 2 ms after it ends; the span
 * total recorded every 20 ms; an NVML sample at the end of every period_ns saying the process
 * was busy pct % of it. Returns the calibrator. */
static void calib_run(struct pace_calib *c, uint64_t secs, uint64_t span_ns, unsigned pct,
                      uint64_t period_ns)
{
    uint64_t next_launch = T0, next_snap = T0, next_sample = T0 + period_ns;
    for (uint64_t t = T0; t <= T0 + secs * SEC; t += 1 * MS) {
        if (t >= next_launch + span_ns + 2 * MS) {
            pace_calib_span(c, span_ns);
            next_launch += 40 * MS;
        }
        if (t >= next_snap) {
            pace_calib_snapshot(c, t);
            next_snap += 20 * MS;
        }
        if (t >= next_sample) {
            pace_calib_sample(c, next_sample, pct);
            next_sample += period_ns;
        }
    }
}

TEST(calib_charges_only_the_resident_share_of_spans)
{
    /* spans of 38 ms for 20 ms of own work, 25 launches a second: busy 50 % of the time, spans
     * 95 % of it; NVML says 50 % */
    struct pace_calib c = {0};
    CHECK_EQ_U64(pace_calib_apply(&c, T0, 38 * MS), 38 * MS); /* nothing known yet: in full */
    calib_run(&c, 10, 38 * MS, 50, SEC);
    uint64_t at = T0 + 10 * SEC, got = pace_calib_apply(&c, at, 38 * MS);
    tap_diag("scale %u ppm: a 38 ms span is charged %.2f ms", c.scale_ppm, got / 1e6);
    CHECK(got >= 19 * MS && got <= 21 * MS);
    CHECK_EQ_U64(c.period_ns, SEC);
    /* no sample for longer than PACE_CAL_STALE_NS: spans count in full again */
    CHECK_EQ_U64(pace_calib_apply(&c, c.scale_at_ns + PACE_CAL_STALE_NS + 1, 38 * MS), 38 * MS);
}

TEST(calib_learns_short_sample_periods)
{
    struct pace_calib c = {0};
    calib_run(&c, 4, 30 * MS, 25, SEC / 6 + 1);
    CHECK_EQ_U64(c.period_ns, SEC / 6 + 1);
    uint64_t got = pace_calib_apply(&c, T0 + 4 * SEC, 30 * MS);
    tap_diag("1/6 s periods: a 30 ms span is charged %.2f ms", got / 1e6);
    /* busy 25 % of the time, spans 75 %: a third of each span */
    CHECK(got >= 9 * MS && got <= 11 * MS);
}

TEST(calib_never_charges_more_than_the_span)
{
    /* NVML says busier than the spans (its rounding, work outside paced launches): in full */
    struct pace_calib c = {0};
    calib_run(&c, 6, 20 * MS, 90, SEC);
    CHECK_EQ_U64(c.scale_ppm, 1000000);
    CHECK_EQ_U64(pace_calib_apply(&c, T0 + 6 * SEC, 20 * MS), 20 * MS);
}

TEST(calib_has_a_floor)
{
    struct pace_calib c = {0};
    calib_run(&c, 8, 38 * MS, 1, SEC);
    CHECK_EQ_U64(c.scale_ppm, PACE_CAL_MIN_PPM);
}

TEST(calib_period_is_at_least_a_sixth_of_a_second)
{
    /* samples closer than NVML's shortest period (1/6 s) do not shrink it below that */
    struct pace_calib c = {0};
    pace_calib_sample(&c, T0, 10);
    pace_calib_sample(&c, T0 + 10 * MS, 10);
    CHECK_EQ_U64(c.period_ns, PACE_CAL_MIN_PERIOD_NS);
    /* out of order or repeated: ignored */
    pace_calib_sample(&c, T0 + 5 * MS, 10);
    CHECK_EQ_U64(c.last_end_ns, T0 + 10 * MS);
}

TEST(calib_without_span_history_learns_nothing)
{
    /* samples but no snapshots (the process never polled): no window can be measured */
    struct pace_calib c = {0};
    for (int i = 1; i <= 10; i++) {
        pace_calib_span(&c, 38 * MS);
        pace_calib_sample(&c, T0 + (uint64_t)i * SEC, 50);
    }
    CHECK_EQ_U64(c.scale_ppm, 0);
    CHECK_EQ_U64(pace_calib_apply(&c, T0 + 10 * SEC, 38 * MS), 38 * MS);
}

/* ---- which pid NVML names us by (pace_host_pid) ---- */

/* NVML process records of stride bytes: pid at 0, usedGpuMemory at 8, the rest as a v3 record
 * has it (instance ids "not applicable": 0xFFFFFFFF). */
static size_t records(unsigned char *buf, size_t stride, const uint32_t *pids, unsigned n)
{
    memset(buf, 0, 64 * 32);
    for (unsigned i = 0; i < n; i++) {
        uint64_t used = (512ull + i) << 20;
        uint32_t na = 0xFFFFFFFFu;
        memcpy(buf + i * stride, &pids[i], 4);
        memcpy(buf + i * stride + 8, &used, 8);
        if (stride >= 24) {
            memcpy(buf + i * stride + 16, &na, 4);
            memcpy(buf + i * stride + 20, &na, 4);
        }
    }
    return 64 * 32;
}

TEST(host_pid_is_the_one_the_driver_listed_when_our_context_came)
{
    static const size_t strides[] = {16, 24, 32};
    unsigned char b[64 * 32], a[64 * 32];
    for (size_t k = 0; k < 3; k++) {
        size_t st = strides[k];
        uint32_t before[] = {4101, 9000}, after[] = {4101, 9000, 123456};
        records(b, st, before, 2);
        size_t len = records(a, st, after, 3);
        /* in a container: our pid (7) is not listed; the newcomer is us */
        CHECK_EQ_INT(pace_host_pid(b, 2, a, 3, len, 7), 123456);
        /* the same namespace as the driver's: our own pid */
        uint32_t same[] = {4101, 9000, 7};
        records(a, st, same, 3);
        CHECK_EQ_INT(pace_host_pid(b, 2, a, 3, len, 7), 7);
        /* two newcomers (another container made a context meanwhile): not known */
        uint32_t two[] = {4101, 123456, 9000, 123999};
        records(a, st, two, 4);
        CHECK_EQ_INT(pace_host_pid(b, 2, a, 4, len, 7), 0);
        /* none new (the list did not change): not known */
        records(a, st, before, 2);
        CHECK_EQ_INT(pace_host_pid(b, 2, a, 2, len, 7), 0);
        /* the first context on the GPU: before is empty */
        uint32_t one[] = {555};
        records(a, st, one, 1);
        CHECK_EQ_INT(pace_host_pid(b, 0, a, 1, len, 7), 555);
    }
    /* records that hold no plausible pid at any size: not known */
    memset(a, 0xff, sizeof(a));
    CHECK_EQ_INT(pace_host_pid(b, 0, a, 2, sizeof(a), 7), 0);
    /* more records than fit: not known */
    CHECK_EQ_INT(pace_host_pid(b, 0, a, 300, sizeof(a), 7), 0);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
