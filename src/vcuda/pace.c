/* pace.c — the compute-share controller (see pace.h for the model). Pure logic over the shared
 * region's atomics: no CUDA, no clock, no allocation except pace_est_new(). */
#include "pace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define RLX memory_order_relaxed
#define ACQ memory_order_acquire
#define REL memory_order_release
#define ACQREL memory_order_acq_rel

/* GPU ns -> wall ns of the container's time at limit_pct. */
static uint64_t to_wall(uint64_t gpu_ns, uint32_t limit_pct)
{
    return gpu_ns * 100u / limit_pct;
}

int pace_shared_init(struct pace_shared *s, unsigned limit_pct, enum pace_policy policy,
                     uint64_t now_ns)
{
    if (limit_pct < 1 || limit_pct > 100)
        return -EINVAL;
    if (policy != PACE_POLICY_HARD && policy != PACE_POLICY_BURST)
        return -EINVAL;
    atomic_store_explicit(&s->tat_ns, now_ns, RLX);
    atomic_store_explicit(&s->measured_ns, 0, RLX);
    atomic_store_explicit(&s->launches, 0, RLX);
    atomic_store_explicit(&s->budget_ns, 0, RLX);
    atomic_store_explicit(&s->contended_until_ns, 0, RLX);
    atomic_store_explicit(&s->pending_ns, 0, RLX);
    atomic_store_explicit(&s->budget_time_ns, now_ns, RLX);
    atomic_store_explicit(&s->period_ns, PACE_PERIOD_NS, RLX);
    atomic_store_explicit(&s->policy, (uint32_t)policy, RLX);
    /* Last, with release: a reader that sees the limit sees the rest initialized. */
    atomic_store_explicit(&s->limit_pct, limit_pct, REL);
    return 0;
}

bool pace_contended(const struct pace_shared *s, uint64_t now_ns)
{
    if (atomic_load_explicit(&s->policy, RLX) != PACE_POLICY_BURST)
        return true;
    return atomic_load_explicit(&s->contended_until_ns, RLX) > now_ns;
}

static int64_t budget_at(uint64_t tat, uint64_t now_ns, uint32_t limit)
{
    /* Credit is capped at the bank, as pace_acquire() would cap it. */
    int64_t wall = (int64_t)(now_ns - tat);
    if (wall > (int64_t)PACE_BANK_NS)
        wall = (int64_t)PACE_BANK_NS;
    return wall * (int64_t)limit / 100;
}

int64_t pace_budget_ns(const struct pace_shared *s, uint64_t now_ns)
{
    uint32_t limit = atomic_load_explicit(&s->limit_pct, ACQ);
    if (limit == 0 || limit >= 100)
        return 0;
    return budget_at(atomic_load_explicit(&s->tat_ns, RLX), now_ns, limit);
}

int pace_acquire(struct pace_shared *s, struct pace_slot *slot, uint64_t now_ns, uint64_t est_ns,
                 uint64_t *ret_wait_ns)
{
    return pace_acquire_at(s, slot, atomic_load_explicit(&s->limit_pct, ACQ), now_ns, est_ns,
                           ret_wait_ns);
}

int pace_acquire_at(struct pace_shared *s, struct pace_slot *slot, uint32_t limit, uint64_t now_ns,
                    uint64_t est_ns, uint64_t *ret_wait_ns)
{
    if (limit == 0 || limit >= 100)
        return 0;

    bool burst = !pace_contended(s, now_ns);
    if (burst && atomic_load_explicit(&slot->pending_ns, RLX) >= PACE_BURST_DEPTH_NS)
        return -EBUSY;

    uint64_t floor = now_ns > PACE_BANK_NS ? now_ns - PACE_BANK_NS : 0;
    uint64_t tat = atomic_load_explicit(&s->tat_ns, RLX);
    uint64_t next;
    do {
        if (!burst && tat > now_ns) {
            *ret_wait_ns = tat - now_ns;
            return -EAGAIN;
        }
        next = (tat < floor ? floor : tat) + to_wall(est_ns, limit);
        /* A burst runs up debt only to the extent of one period: it was idle time. */
        if (burst && next > now_ns + PACE_PERIOD_NS)
            next = now_ns + PACE_PERIOD_NS;
    } while (!atomic_compare_exchange_weak_explicit(&s->tat_ns, &tat, next, RLX, RLX));

    /* After the charge: a death in between loses this estimate's credit (conservative), never
     * refunds what was not charged. */
    atomic_fetch_add_explicit(&slot->pending_ns, est_ns, RLX);
    atomic_fetch_add_explicit(&s->pending_ns, est_ns, RLX);
    atomic_fetch_add_explicit(&slot->launches, 1, RLX);
    atomic_fetch_add_explicit(&s->launches, 1, RLX);
    atomic_store_explicit(&s->budget_ns, budget_at(next, now_ns, limit), RLX);
    atomic_store_explicit(&s->budget_time_ns, now_ns, RLX);
    return 0;
}

/* Adds a signed wall-time correction to tat (two's complement wraps exactly). */
static void tat_adjust(struct pace_shared *s, uint64_t plus_gpu, uint64_t minus_gpu, uint32_t limit)
{
    if (plus_gpu > minus_gpu)
        atomic_fetch_add_explicit(&s->tat_ns, to_wall(plus_gpu - minus_gpu, limit), RLX);
    else if (minus_gpu > plus_gpu)
        atomic_fetch_sub_explicit(&s->tat_ns, to_wall(minus_gpu - plus_gpu, limit), RLX);
}

void pace_settle(struct pace_shared *s, struct pace_slot *slot, uint64_t est_ns,
                 uint64_t measured_ns)
{
    uint32_t limit = atomic_load_explicit(&s->limit_pct, ACQ);
    if (limit == 0 || limit >= 100)
        return;
    tat_adjust(s, measured_ns, est_ns, limit);
    atomic_fetch_sub_explicit(&slot->pending_ns, est_ns, RLX);
    atomic_fetch_sub_explicit(&s->pending_ns, est_ns, RLX);
    atomic_fetch_add_explicit(&slot->measured_ns, measured_ns, RLX);
    atomic_fetch_add_explicit(&s->measured_ns, measured_ns, RLX);
}

/* Saturating: a death between a slot's and the container's update leaves the container's sum
 * short of the slot's, and a wrapped sum would read as huge. */
static void pending_sub(struct pace_shared *s, uint64_t x)
{
    uint64_t cur = atomic_load_explicit(&s->pending_ns, RLX);
    while (!atomic_compare_exchange_weak_explicit(&s->pending_ns, &cur, cur > x ? cur - x : 0, RLX,
                                                  RLX))
        ;
}

uint64_t pace_slot_reclaim(struct pace_shared *s, struct pace_slot *slot)
{
    uint64_t pending = atomic_exchange_explicit(&slot->pending_ns, 0, ACQREL);
    uint32_t limit = atomic_load_explicit(&s->limit_pct, ACQ);
    if (pending && limit > 0 && limit < 100) {
        tat_adjust(s, 0, pending, limit);
        pending_sub(s, pending);
    }
    return pending;
}

uint64_t pace_slot_retire(struct pace_shared *s, struct pace_slot *slot)
{
    uint64_t pending = atomic_exchange_explicit(&slot->pending_ns, 0, ACQREL);
    if (pending)
        pending_sub(s, pending);
    return pending;
}

bool pace_observe_device(struct pace_shared *s, struct pace_sampler *smp, uint64_t now_ns,
                         uint64_t dev_busy_ns)
{
    if (atomic_load_explicit(&s->policy, RLX) != PACE_POLICY_BURST || pace_unlimited(s))
        return false;
    if (smp->at_ns != 0 && now_ns - smp->at_ns < PACE_SAMPLE_NS)
        return false;
    uint64_t measured = atomic_load_explicit(&s->measured_ns, RLX);
    struct pace_sampler prev = *smp;
    *smp =
        (struct pace_sampler){.at_ns = now_ns, .measured_ns = measured, .dev_busy_ns = dev_busy_ns};
    if (prev.at_ns == 0 || now_ns <= prev.at_ns || dev_busy_ns < prev.dev_busy_ns)
        return true; /* first sample (or the counter restarted): nothing to compare yet */

    uint64_t window = now_ns - prev.at_ns;
    uint64_t dev = dev_busy_ns - prev.dev_busy_ns;
    uint64_t own = measured - prev.measured_ns + atomic_load_explicit(&s->pending_ns, RLX);
    if (dev <= own || (dev - own) * 100u < (uint64_t)PACE_OTHER_PCT * window)
        return true;

    uint64_t until = now_ns + PACE_HOLD_PERIODS * PACE_PERIOD_NS;
    uint64_t old = atomic_exchange_explicit(&s->contended_until_ns, until, RLX);
    if (old <= now_ns) {
        /* Entering the limit: forgive the burst's debt so the next launch is paced at the limit
         * from now on rather than waiting out time that was idle when it was used. */
        uint64_t tat = atomic_load_explicit(&s->tat_ns, RLX);
        while (tat > now_ns &&
               !atomic_compare_exchange_weak_explicit(&s->tat_ns, &tat, now_ns, RLX, RLX))
            ;
    }
    return true;
}

/* ---- estimates ---- */

#define EST_SLOTS 512u /* power of two */
#define EST_PROBE 8u

struct pace_est {
    _Atomic uintptr_t key;
    _Atomic uint64_t ns;
};

struct pace_est_table {
    struct pace_est e[EST_SLOTS];
};

static uint32_t est_home(uintptr_t key)
{
    uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 40) & (EST_SLOTS - 1);
}

struct pace_est_table *pace_est_new(void)
{
    return calloc(1, sizeof(struct pace_est_table));
}

struct pace_est_table *pace_est_free(struct pace_est_table *t)
{
    free(t);
    return NULL;
}

int pace_est_lookup(const struct pace_est_table *t, uintptr_t key, uint64_t *ret_ns)
{
    if (!key)
        return -ENOENT;
    uint32_t h = est_home(key);
    for (uint32_t i = 0; i < EST_PROBE; i++) {
        const struct pace_est *e = &t->e[(h + i) & (EST_SLOTS - 1)];
        uintptr_t k = atomic_load_explicit(&e->key, ACQ);
        if (k == key) {
            uint64_t ns = atomic_load_explicit(&e->ns, RLX);
            if (!ns)
                return -ENOENT; /* claimed, first measurement not stored yet */
            *ret_ns = ns;
            return 0;
        }
        if (k == 0)
            return -ENOENT;
    }
    return -ENOENT;
}

void pace_est_learn(struct pace_est_table *t, uintptr_t key, uint64_t measured_ns)
{
    if (!key)
        return;
    if (!measured_ns)
        measured_ns = 1; /* 0 means "unknown" in the table */
    uint32_t h = est_home(key);
    struct pace_est *e = NULL;
    for (uint32_t i = 0; i < EST_PROBE && !e; i++) {
        struct pace_est *c = &t->e[(h + i) & (EST_SLOTS - 1)];
        uintptr_t k = atomic_load_explicit(&c->key, ACQ);
        if (k == key)
            e = c;
        else if (k == 0 && atomic_compare_exchange_strong_explicit(&c->key, &k, key, ACQREL, ACQ))
            e = c;
        else if (k == key) /* lost the race to ourselves from another thread */
            e = c;
    }
    if (!e) {
        /* Neighbourhood full: the home slot changes owner (a cache, not a map). */
        e = &t->e[h];
        atomic_store_explicit(&e->ns, 0, RLX);
        atomic_store_explicit(&e->key, key, REL);
    }
    uint64_t old = atomic_load_explicit(&e->ns, RLX);
    /* Moving average with weight 1/4: follows a changed workload within a few launches while
     * one outlier moves it little; settling corrects whatever it gets wrong. */
    uint64_t next = old ? old - old / 4 + measured_ns / 4 : measured_ns;
    if (!next)
        next = 1;
    atomic_store_explicit(&e->ns, next, RLX);
}

/* ---- residency calibration ---- */

void pace_calib_span(struct pace_calib *c, uint64_t raw_ns)
{
    c->raw_ns += raw_ns;
}

void pace_calib_snapshot(struct pace_calib *c, uint64_t now_ns)
{
    if (c->hist_n) {
        unsigned last = (c->hist_next + PACE_CAL_HIST - 1) % PACE_CAL_HIST;
        if (now_ns <= c->hist_t[last])
            return; /* time must move forward */
    }
    c->hist_t[c->hist_next] = now_ns;
    c->hist_raw[c->hist_next] = c->raw_ns;
    c->hist_next = (c->hist_next + 1) % PACE_CAL_HIST;
    if (c->hist_n < PACE_CAL_HIST)
        c->hist_n++;
}

/* raw_ns at t, interpolated between the snapshots around it; false when t is outside them. */
static bool raw_at(const struct pace_calib *c, uint64_t t, uint64_t *ret)
{
    unsigned first = (c->hist_next + PACE_CAL_HIST - c->hist_n) % PACE_CAL_HIST;
    for (unsigned k = 0; k + 1 < c->hist_n; k++) {
        unsigned a = (first + k) % PACE_CAL_HIST, b = (a + 1) % PACE_CAL_HIST;
        if (t < c->hist_t[a] || t > c->hist_t[b])
            continue;
        uint64_t span = c->hist_t[b] - c->hist_t[a], d = c->hist_raw[b] - c->hist_raw[a];
        *ret = c->hist_raw[a] + (span ? (uint64_t)((double)d * (double)(t - c->hist_t[a]) /
                                                    (double)span)
                                      : 0);
        return true;
    }
    /* just after the newest snapshot: what it says (spans settle after their work anyway) */
    unsigned last = (c->hist_next + PACE_CAL_HIST - 1) % PACE_CAL_HIST;
    if (c->hist_n && t > c->hist_t[last] && t - c->hist_t[last] <= PACE_CAL_SNAP_GAP_NS) {
        *ret = c->hist_raw[last];
        return true;
    }
    return false;
}

void pace_calib_sample(struct pace_calib *c, uint64_t end_ns, unsigned busy_pct)
{
    if (end_ns <= c->last_end_ns)
        return;
    if (c->last_end_ns) {
        /* NVML: "The sample period may be between 1 second and 1/6 second" */
        uint64_t gap = end_ns - c->last_end_ns;
        if (gap < PACE_CAL_MIN_PERIOD_NS)
            gap = PACE_CAL_MIN_PERIOD_NS;
        if (!c->period_ns || gap < c->period_ns)
            c->period_ns = gap;
    }
    c->last_end_ns = end_ns;
    if (busy_pct > 100)
        busy_pct = 100;
    /* the first period's length is not known yet: its end only starts the first window */
    if (c->period_ns)
        c->busy_ns += c->period_ns * busy_pct / 100;
    else
        c->point_t = 0;

    uint64_t raw;
    if (!raw_at(c, end_ns, &raw)) {
        c->point_t = 0; /* the snapshots do not reach back: start a new window */
        return;
    }
    if (!c->point_t || raw < c->point_raw) {
        c->point_t = end_ns;
        c->point_raw = raw;
        c->point_busy = c->busy_ns;
        return;
    }
    uint64_t window = PACE_CAL_WINDOW_NS > c->period_ns ? PACE_CAL_WINDOW_NS : c->period_ns;
    uint64_t len = end_ns - c->point_t;
    if (len < window)
        return;
    uint64_t draw = raw - c->point_raw, dbusy = c->busy_ns - c->point_busy;
    c->point_t = end_ns;
    c->point_raw = raw;
    c->point_busy = c->busy_ns;
    if (draw < len / 100 || draw < 1000000)
        return; /* hardly any work in the window: nothing to learn from */
    uint64_t ratio = dbusy >= draw ? 1000000u : dbusy * 1000000u / draw;
    uint64_t next = c->scale_ppm ? (c->scale_ppm + ratio) / 2 : ratio;
    if (next < PACE_CAL_MIN_PPM)
        next = PACE_CAL_MIN_PPM;
    c->scale_ppm = (uint32_t)next;
    c->scale_at_ns = end_ns;
}

uint64_t pace_calib_apply(const struct pace_calib *c, uint64_t now_ns, uint64_t raw_ns)
{
    if (!c->scale_ppm || now_ns > c->scale_at_ns + PACE_CAL_STALE_NS)
        return raw_ns;
    return (uint64_t)((double)raw_ns * c->scale_ppm / 1e6);
}

/* ---- which pid NVML names us by ---- */

#define PID_MAX_LIMIT 4194304u /* the kernel's largest pid_max (64-bit) */

/* The pids of n records of stride bytes in buf into out; false when one is not a plausible
 * pid or the records do not fit. */
static bool pid_list(const unsigned char *buf, size_t buflen, unsigned n, size_t stride,
                     uint32_t *out)
{
    if ((size_t)n * stride > buflen)
        return false;
    for (unsigned i = 0; i < n; i++) {
        uint32_t p;
        memcpy(&p, buf + i * stride, sizeof(p));
        if (p == 0 || p > PID_MAX_LIMIT)
            return false;
        out[i] = p;
    }
    return true;
}

static bool has_pid(const uint32_t *list, unsigned n, uint32_t p)
{
    for (unsigned i = 0; i < n; i++)
        if (list[i] == p)
            return true;
    return false;
}

uint32_t pace_host_pid(const unsigned char *before, unsigned nb, const unsigned char *after,
                       unsigned na, size_t buflen, uint32_t self)
{
    static const size_t strides[] = {24, 16, 32};
    uint32_t b[256], a[256];
    if (nb > 256 || na > 256 || !after || (nb && !before))
        return 0;
    for (size_t k = 0; k < sizeof(strides) / sizeof(strides[0]); k++) {
        if (!pid_list(before, buflen, nb, strides[k], b) ||
            !pid_list(after, buflen, na, strides[k], a))
            continue;
        if (has_pid(a, na, self))
            return self;
        uint32_t found = 0;
        for (unsigned i = 0; i < na; i++) {
            if (has_pid(b, nb, a[i]) || a[i] == found)
                continue;
            if (found)
                return 0; /* two newcomers: which is us is not known */
            found = a[i];
        }
        return found;
    }
    return 0;
}
