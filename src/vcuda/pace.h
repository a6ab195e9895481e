/* pace.h — the compute-share controller of libvcuda, as pure logic: no CUDA, no clock, no
 * globals. The caller (hook-launch.c) injects the time and the GPU-time measurements; the unit
 * tests inject a simulated clock and a simulated GPU.
 *
 * Model. A container with core limit S % may use S/100 of one GPU's time. Its whole state is a
 * "theoretical arrival time" `tat` in the shared usage region (a virtual-scheduling token bucket,
 * GCRA): every nanosecond of GPU time the container uses pushes `tat` forward by 100/S wall
 * nanoseconds, and a launch is admitted only when `tat` is not in the future. A launch is charged
 * an *estimate* of its GPU time when it is issued (so asynchronous launches cannot run ahead of
 * the budget) and *settled* when its measured GPU time arrives (CUDA events around the launch):
 * the estimate is replaced by the measurement. The books therefore integrate measured GPU busy
 * time exactly — an integral controller whose gain is 1 in units of the GPU's own time, so it
 * needs no per-GPU tuning (no SM counts) and holds the share for 50 µs kernels, 20 ms kernels and
 * graphs of unknown duration alike.
 *
 * Everything shared lives in two fixed-width, atomics-only structs placed in the region: one per
 * container (struct pace_shared), one per process slot (struct pace_slot). Each update is a single
 * atomic operation on one field, so a process killed at any instruction leaves the books off by at
 * most one launch's estimate, never locked; pace_slot_reclaim() refunds what a dead process had
 * charged for launches it never settled.
 *
 * Threads: every function may be called from any thread of any process sharing the region. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Control period: how often burst mode samples the device, and the bound on how long a burst
 * tenant keeps the GPU after another tenant appears. */
#define PACE_PERIOD_NS 100000000ull
/* Hard mode: wall time of credit a container may bank while idle or while a pacing sleep
 * overshoots. Small against any averaging window, large against timer slack. */
#define PACE_BANK_NS 20000000ull
/* Burst mode: GPU time a process may have in flight, so the device queue stays shallow and a
 * newcomer's kernels wait behind at most this much of ours. */
#define PACE_BURST_DEPTH_NS 10000000ull
/* Burst mode: each process compares the device's busy time with its container's over windows of
 * half a period, so a tenant that appears is seen within one period. Another tenant using at
 * least PACE_OTHER_PCT % of a window means contention; the container then stays at its limit for
 * PACE_HOLD_PERIODS periods after the last sighting. */
#define PACE_SAMPLE_NS (PACE_PERIOD_NS / 2)
#define PACE_OTHER_PCT 10u
#define PACE_HOLD_PERIODS 5u

enum pace_policy {
    PACE_POLICY_HARD = 0,  /* never above the limit */
    PACE_POLICY_BURST = 1, /* idle GPU time above the limit, back to it when others need it */
};

/* Per container, in the shared region (at vc_region_header.core_limit, offset 192). 128 bytes;
 * layout is ABI (docs/vcuda-compute.md). All zeroes plus a limit is a valid start state, so the
 * region's creator needs to do nothing but write the configured limit and policy. */
struct pace_shared {
    _Atomic uint32_t limit_pct;      /* 0: 1..100; 100 (or 0: not configured) = unlimited */
    _Atomic uint32_t policy;         /* 4: enum pace_policy */
    _Atomic int64_t budget_ns;       /* 8: credit in GPU ns at the last launch (< 0: debt) */
    _Atomic uint64_t budget_time_ns; /* 16: when budget_ns was computed */
    _Atomic uint64_t period_ns;      /* 24: PACE_PERIOD_NS, for readers */
    _Atomic uint64_t tat_ns;         /* 32: CLOCK_MONOTONIC ns; a launch is admitted when <= now */
    _Atomic uint64_t measured_ns;    /* 40: settled GPU time of all processes, ever */
    _Atomic uint64_t launches;       /* 48: paced launches of all processes, ever */
    _Atomic uint64_t contended_until_ns; /* 56: burst: held at the limit until this time */
    _Atomic uint64_t pending_ns;         /* 64: estimates charged, not settled, all processes */
    _Atomic uint64_t throttled_ns; /* 72: wall time launches of all processes slept waiting for
                                    * the budget, ever (read by accel-exporter) */
    uint64_t reserved[6];          /* 80 */
};

/* Per process, in the process's region slot (at vc_region_slot.gpu_time_ns, offset 144).
 * 32 bytes; zeroes are the start state. */
struct pace_slot {
    _Atomic uint64_t measured_ns; /* 0: settled GPU time of this process */
    _Atomic uint64_t launches;    /* 8: paced launches of this process */
    _Atomic uint64_t pending_ns;  /* 16: estimates charged for launches not settled yet */
    _Atomic uint64_t reserved;    /* 24 */
};

_Static_assert(sizeof(struct pace_shared) == 128, "pace_shared is ABI");
_Static_assert(__builtin_offsetof(struct pace_shared, tat_ns) == 32, "pace_shared is ABI");
_Static_assert(__builtin_offsetof(struct pace_shared, measured_ns) == 40, "pace_shared is ABI");
_Static_assert(__builtin_offsetof(struct pace_shared, throttled_ns) == 72, "pace_shared is ABI");
_Static_assert(sizeof(struct pace_slot) == 32, "pace_slot is ABI");

/* Sets up a container's state (the region's creator does this once). limit_pct outside 1..100
 * gives -EINVAL and changes nothing. */
int pace_shared_init(struct pace_shared *s, unsigned limit_pct, enum pace_policy policy,
                     uint64_t now_ns);

/* True when launches go straight through: limit 100 (or a region that never set one). */
static inline bool pace_unlimited(const struct pace_shared *s)
{
    uint32_t l = atomic_load_explicit(&s->limit_pct, memory_order_relaxed);
    return l == 0 || l >= 100;
}

/* Admission of one launch issued at now_ns whose GPU time is estimated at est_ns (0 when
 * unknown). On 0 the launch is charged (call pace_settle() with the same est_ns once its GPU
 * time is measured). -EAGAIN: not admitted, *ret_wait_ns says how long until it could be (the
 * caller sleeps at most that, harvests measurements, and retries). -EBUSY (burst only): this
 * process has PACE_BURST_DEPTH_NS in flight; wait for one of its launches to finish. */
int pace_acquire(struct pace_shared *s, struct pace_slot *slot, uint64_t now_ns, uint64_t est_ns,
                 uint64_t *ret_wait_ns);

/* pace_acquire at the caller's own limit_pct instead of the shared copy (which the tenant can
 * write): libvcuda passes the config's. */
int pace_acquire_at(struct pace_shared *s, struct pace_slot *slot, uint32_t limit_pct,
                    uint64_t now_ns, uint64_t est_ns, uint64_t *ret_wait_ns);

/* A charged launch's GPU time is known: replace its estimate by the measurement. */
void pace_settle(struct pace_shared *s, struct pace_slot *slot, uint64_t est_ns,
                 uint64_t measured_ns);

/* The slot's process is dead: refund the estimates it charged and never settled. Safe to call
 * more than once and concurrently (each nanosecond is refunded once). Returns what was refunded. */
uint64_t pace_slot_reclaim(struct pace_shared *s, struct pace_slot *slot);

/* The slot's process exits cleanly with launches still unsettled: their estimates stay charged
 * (the work ran or is running) and leave the in-flight sum. Returns what was retired. */
uint64_t pace_slot_retire(struct pace_shared *s, struct pace_slot *slot);

/* Burst mode, per process (not shared): where the last device sample was taken. Zeroed = none. */
struct pace_sampler {
    uint64_t at_ns;
    uint64_t measured_ns;
    uint64_t dev_busy_ns;
};

/* Burst mode: dev_busy_ns is a counter of the device's busy time as this process sees it (any
 * origin; only differences are used). Once per PACE_SAMPLE_NS it subtracts what the container
 * itself used over the same window — counting everything still in flight as used, so work not
 * measured yet is never mistaken for another tenant's — and when another tenant used at least
 * PACE_OTHER_PCT % holds the container at its limit, dropping the debt its burst ran up so the
 * limit applies from the next launch. Returns true when it took a sample. No-op in hard mode. */
bool pace_observe_device(struct pace_shared *s, struct pace_sampler *smp, uint64_t now_ns,
                         uint64_t dev_busy_ns);

/* Whether burst mode is held at the limit now. */
bool pace_contended(const struct pace_shared *s, uint64_t now_ns);

/* The container's credit in GPU ns at now_ns: positive = could launch that much now, negative =
 * debt still to be waited out. 0 when unlimited. */
int64_t pace_budget_ns(const struct pace_shared *s, uint64_t now_ns);

/* Per-process table of GPU-time estimates keyed by what was launched (a CUfunction, a
 * CUgraphExec): lock-free, fixed size, never allocates after pace_est_new(). Entries are hints —
 * a lost update under a race only costs a less accurate estimate, which settling corrects. */
struct pace_est_table;

struct pace_est_table *pace_est_new(void);
struct pace_est_table *pace_est_free(struct pace_est_table *t);
/* 0 and *ret_ns, or -ENOENT when key has never been measured (key 0 is never stored). */
int pace_est_lookup(const struct pace_est_table *t, uintptr_t key, uint64_t *ret_ns);
/* Folds a measurement into key's estimate (moving average; the first sets it). */
void pace_est_learn(struct pace_est_table *t, uintptr_t key, uint64_t measured_ns);

/* Residency calibration, per process (not shared). On a GPU that time-slices the contexts of
 * different processes, the events around a launch also span the other contexts' slices: the
 * measurement over-charges the container by the time it was not resident (seen on an H200:
 * 8192^2 matmuls measured 21.5 ms alone and 46-48 ms beside one other busy process;
 * docs/vcuda-compute.md "On a time-sliced GPU"). NVML's per-process samples say how much of
 * each sample period the process itself was busy. Over windows of at least PACE_CAL_WINDOW_NS
 * (and one sample period; a period is the shortest gap between two of the process's samples, at
 * least 1/6 s), the ratio of that busy time to the spans the process measured in the
 * same window is the share of its spans it was resident; every span is then settled at span x
 * that ratio (a moving average, at most 1: a span is never charged more than itself, and at
 * least PACE_CAL_MIN_PPM). Without samples for PACE_CAL_STALE_NS the spans count in full again.
 * The caller feeds it: every settled span (pace_calib_span), the span total now and then
 * (pace_calib_snapshot, so a window's spans are read at the sample periods' ends), and each
 * sample period's end with this process's busy percent in it (pace_calib_sample). */
#define PACE_CAL_WINDOW_NS 1000000000ull
#define PACE_CAL_STALE_NS 5000000000ull
#define PACE_CAL_MIN_PPM 50000u
#define PACE_CAL_HIST 64u
#define PACE_CAL_MIN_PERIOD_NS 166666666ull
/* a period end this soon after the newest snapshot of the span total takes that snapshot */
#define PACE_CAL_SNAP_GAP_NS 100000000ull

struct pace_calib {
    uint64_t raw_ns;                 /* spans settled by this process, ever */
    uint64_t hist_t[PACE_CAL_HIST];  /* snapshots of raw_ns: when (CLOCK_MONOTONIC ns) ... */
    uint64_t hist_raw[PACE_CAL_HIST]; /* ... and how much */
    unsigned hist_n, hist_next;
    uint64_t period_ns;      /* the sample period: the shortest gap between two period ends */
    uint64_t last_end_ns;    /* the last period end seen (any process's sample) */
    uint64_t busy_ns;        /* this process's busy time from the samples, ever */
    uint64_t point_t;        /* the window's start: a period end, 0 = none yet */
    uint64_t point_raw, point_busy;
    uint32_t scale_ppm;      /* 0: none yet; else the spans' resident share, parts per million */
    uint64_t scale_at_ns;    /* the period end it was computed at */
};

/* A launch's span was measured. */
void pace_calib_span(struct pace_calib *c, uint64_t raw_ns);
/* Records raw_ns at now_ns (call every few tens of ms; the oldest snapshot is overwritten). */
void pace_calib_snapshot(struct pace_calib *c, uint64_t now_ns);
/* A sample period ended at end_ns (CLOCK_MONOTONIC ns); busy_pct: this process's busy share of
 * it (0 when NVML listed no sample of it). Call once per period end, in increasing order. */
void pace_calib_sample(struct pace_calib *c, uint64_t end_ns, unsigned busy_pct);
/* What a span of raw_ns is charged at now_ns. */
uint64_t pace_calib_apply(const struct pace_calib *c, uint64_t now_ns, uint64_t raw_ns);

/* The pid NVML names this process by (it lists host pids; a container's process has another
 * one): from NVML's compute-process lists of the device just before and just after this process
 * created a context there — nb / na records each of a size NVML does not tell (16, 24 or 32
 * bytes across drivers, pid at offset 0; the first size at which every record of both lists
 * holds a plausible pid is used). self when the after-list has it (the same pid namespace);
 * else the one pid the after-list has and the before-list lacks; 0 when that is not exactly one
 * (another process made a context meanwhile) or the lists cannot be read. Nothing a tenant can
 * write enters it: only the driver's answers. */
uint32_t pace_host_pid(const unsigned char *before, unsigned nb, const unsigned char *after,
                       unsigned na, size_t buflen, uint32_t self);
