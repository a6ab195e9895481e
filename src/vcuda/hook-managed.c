/* hook-managed.c — managed memory charged for what is on the GPU, not for what was allocated.
 *
 * cuMemAllocManaged charges nothing on a device with CONCURRENT_MANAGED_ACCESS: the range is
 * remembered, one byte per 2 MiB page. A page is charged when it becomes device-resident the
 * way the driver decides it: a copy or memset reaching it, a kernel launched with a pointer into
 * the allocation (the whole allocation: which pages a kernel reads cannot be seen), an explicit
 * prefetch to the device. A prefetch to the CPU, a free, the context's destruction give back.
 *
 * Touching never fails on the GPU, so it never fails here: pages that would take the container
 * over its quota are kept on the host by advising the driver (cuMemAdvise
 * SET_PREFERRED_LOCATION = CPU and SET_ACCESSED_BY = the device: the device then maps them over
 * the bus instead of migrating them), and an explicit prefetch to the device moves only the
 * pages that fit. docs/vcuda.md, "Managed memory".
 *
 * Hot paths (launches, copies): one relaxed load while no managed allocation has pages that a
 * touch could still bring (none at all, or all on the GPU or kept on the host); else a lookup in
 * a sorted fixed table under a mutex held only around loads and stores, never across a driver
 * call, and no allocation. */
#include "log.h"
#include "util.h"
#include "vcuda.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PAGE (2ull << 20) /* the granularity the driver migrates and the emulator charges */
#define MAX_MANAGED 1024  /* tracked allocations; beyond, charged in full at allocation */
#define MAX_RUNS 32       /* address runs one call advises or prefetches */

enum { PG_HOST = 0, PG_DEVICE = 1, PG_KEPT = 2 /* advised to stay on the host */ };

struct managed {
    CUdeviceptr base;
    uint64_t size;
    uint64_t npages;
    uint64_t untouched; /* pages in PG_HOST */
    uint64_t charged;   /* bytes charged: pages in PG_DEVICE */
    CUcontext ctx;
    CUdevice dev;
    unsigned index;
    uint8_t *pages;
};

static pthread_mutex_t managed_lock = PTHREAD_MUTEX_INITIALIZER;
static struct managed *ranges[MAX_MANAGED]; /* sorted by base */
static size_t nranges;
atomic_uint vc_managed_live;
/* Tracked allocations with pages in PG_HOST: only these can change on a touch, so copies and
 * launches look nothing up while it is 0 (the steady state of a program whose managed memory
 * is all on the GPU or kept on the host). */
atomic_uint vc_managed_pending;

/* Changes m's untouched page count by delta, keeping vc_managed_pending in step. Lock held. */
static void untouched_add(struct managed *m, int64_t delta)
{
    bool was = m->untouched != 0;
    m->untouched = (uint64_t)((int64_t)m->untouched + delta);
    bool is = m->untouched != 0;
    if (is && !was)
        atomic_fetch_add_explicit(&vc_managed_pending, 1, memory_order_relaxed);
    else if (was && !is)
        atomic_fetch_sub_explicit(&vc_managed_pending, 1, memory_order_relaxed);
}

struct run {
    CUdeviceptr p;
    uint64_t len;
    CUdevice dev; /* the device the advice names */
};
struct runs {
    struct run r[MAX_RUNS];
    unsigned n;
};

/* Adds [p, p+len) of dev's memory to rs (merged with the last run when adjacent). False when
 * full. */
static bool runs_add(struct runs *rs, CUdeviceptr p, uint64_t len, CUdevice dev)
{
    struct run *last = rs->n ? &rs->r[rs->n - 1] : NULL;
    if (last && last->dev == dev && last->p + last->len == p) {
        last->len += len;
        return true;
    }
    if (rs->n == MAX_RUNS)
        return false;
    rs->r[rs->n++] = (struct run){p, len, dev};
    return true;
}

/* ---- the table (managed_lock held) ---- */

static size_t upper_locked(CUdeviceptr p) /* first index with base > p */
{
    size_t lo = 0, hi = nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranges[mid]->base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct managed *find_locked(CUdeviceptr p)
{
    size_t i = upper_locked(p);
    if (!i)
        return NULL;
    struct managed *m = ranges[i - 1];
    return p - m->base < m->size ? m : NULL;
}

static bool insert_locked(struct managed *m)
{
    if (nranges == MAX_MANAGED)
        return false;
    size_t i = upper_locked(m->base);
    memmove(&ranges[i + 1], &ranges[i], (nranges - i) * sizeof(*ranges));
    ranges[i] = m;
    nranges++;
    atomic_fetch_add_explicit(&vc_managed_live, 1, memory_order_relaxed);
    if (m->untouched)
        atomic_fetch_add_explicit(&vc_managed_pending, 1, memory_order_relaxed);
    return true;
}

static void remove_at_locked(size_t i)
{
    if (ranges[i]->untouched)
        atomic_fetch_sub_explicit(&vc_managed_pending, 1, memory_order_relaxed);
    memmove(&ranges[i], &ranges[i + 1], (nranges - i - 1) * sizeof(*ranges));
    nranges--;
    atomic_fetch_sub_explicit(&vc_managed_live, 1, memory_order_relaxed);
}

/* Reserves up to want pages on index: all of them, else as many as the quota leaves. Returns
 * the pages reserved. Only atomics on the region: safe under managed_lock. */
static uint64_t reserve_pages(unsigned index, uint64_t want)
{
    if (!want || vc.fail_closed || vc.slot < 0)
        return 0;
    uint64_t limit = vc.cfg.memory_limit;
    if (vc_region_reserve(&vc.region, vc.slot, index, want * PAGE, limit) == 0)
        return want;
    uint64_t used = vc_region_used(&vc.region, index);
    uint64_t k = used >= limit ? 0 : (limit - used) / PAGE;
    if (k > want)
        k = want;
    /* other processes of the container may take some meanwhile: a few tries, fewer each time */
    for (int tries = 0; k && tries < 8; tries++, k = k * 3 / 4)
        if (vc_region_reserve(&vc.region, vc.slot, index, k * PAGE, limit) == 0)
            return k;
    return 0;
}

/* Makes pages [first, last] of m device-resident as far as the quota allows, in address order;
 * the pages that do not fit are kept on the host (their runs go to keep, to be advised). With
 * also_kept (an explicit prefetch) pages kept earlier are tried again; those that now fit go to
 * unkeep (their advice is taken back). */
static void bring_locked(struct managed *m, uint64_t first, uint64_t last, bool also_kept,
                         struct runs *keep, struct runs *unkeep)
{
    uint64_t want = 0;
    for (uint64_t pg = first; pg <= last; pg++)
        want += m->pages[pg] == PG_HOST || (also_kept && m->pages[pg] == PG_KEPT);
    if (!want)
        return;
    uint64_t got = reserve_pages(m->index, want);
    for (uint64_t pg = first; pg <= last; pg++) {
        uint8_t st = m->pages[pg];
        if (st == PG_DEVICE || (st == PG_KEPT && !also_kept))
            continue;
        CUdeviceptr p = m->base + pg * PAGE;
        if (got) {
            if (st == PG_KEPT && unkeep && !runs_add(unkeep, p, PAGE, m->dev)) {
                continue; /* no room to take its advice back: it stays kept */
            }
            got--;
            m->pages[pg] = PG_DEVICE;
            m->charged += PAGE;
            if (st == PG_HOST)
                untouched_add(m, -1);
        } else if (st == PG_HOST && runs_add(keep, p, PAGE, m->dev)) {
            m->pages[pg] = PG_KEPT;
            untouched_add(m, -1);
        }
    }
    if (got) /* reserved for pages that could not be recorded */
        vc_region_release(&vc.region, vc.slot, m->index, got * PAGE);
}

static CUresult advise(CUdeviceptr p, uint64_t len, CUmem_advise a, CUdevice dev)
{
    return vc_real.cuMemAdvise ? vc_real.cuMemAdvise(p, len, a, dev) : CUDA_ERROR_NOT_FOUND;
}

/* Driver calls for what bring_locked decided (managed_lock not held). */
static void apply(const struct runs *keep, const struct runs *unkeep)
{
    for (unsigned i = 0; i < keep->n; i++) {
        CUresult r = advise(keep->r[i].p, keep->r[i].len, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                            CU_DEVICE_CPU);
        if (r == CUDA_SUCCESS)
            r = advise(keep->r[i].p, keep->r[i].len, CU_MEM_ADVISE_SET_ACCESSED_BY, keep->r[i].dev);
        if (r != CUDA_SUCCESS)
            log_warn("managed memory over the quota could not be kept on the host (cuMemAdvise: "
                     "%d); the GPU may hold more than the container is charged",
                     (int)r);
    }
    if (keep->n) {
        char b[32];
        uint64_t sum = 0;
        for (unsigned i = 0; i < keep->n; i++)
            sum += keep->r[i].len;
        log_info("managed memory: %s over the quota kept on the host (mapped for the device)",
                 format_bytes(sum, b, sizeof(b)));
    }
    for (unsigned i = 0; unkeep && i < unkeep->n; i++) {
        advise(unkeep->r[i].p, unkeep->r[i].len, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
               CU_DEVICE_CPU);
        advise(unkeep->r[i].p, unkeep->r[i].len, CU_MEM_ADVISE_UNSET_ACCESSED_BY, unkeep->r[i].dev);
    }
}

/* ---- allocation and free ---- */

bool vc_managed_track(CUdeviceptr base, uint64_t size, CUcontext ctx, CUdevice dev, unsigned index)
{
    struct managed *m = calloc(1, sizeof(*m));
    uint64_t npages = (size + PAGE - 1) / PAGE;
    uint8_t *pages = calloc(npages ? npages : 1, 1);
    if (!m || !pages) {
        free(m);
        free(pages);
        return false;
    }
    *m = (struct managed){.base = base,
                          .size = size,
                          .npages = npages,
                          .untouched = npages,
                          .ctx = ctx,
                          .dev = dev,
                          .index = index,
                          .pages = pages};
    pthread_mutex_lock(&managed_lock);
    bool ok = insert_locked(m);
    pthread_mutex_unlock(&managed_lock);
    if (!ok) {
        free(pages);
        free(m);
    }
    return ok;
}

static void forget(struct managed *m)
{
    if (m->charged)
        vc_region_release(&vc.region, vc.slot, m->index, m->charged);
    free(m->pages);
    free(m);
}

struct managed *vc_managed_take(CUdeviceptr base)
{
    if (!atomic_load_explicit(&vc_managed_live, memory_order_relaxed))
        return NULL;
    pthread_mutex_lock(&managed_lock);
    struct managed *m = find_locked(base);
    if (m && m->base == base)
        remove_at_locked(upper_locked(base) - 1);
    else
        m = NULL;
    pthread_mutex_unlock(&managed_lock);
    return m;
}

CUresult vc_managed_free_end(struct managed *m, CUresult r)
{
    if (!m)
        return r;
    if (r == CUDA_SUCCESS) {
        forget(m);
        return r;
    }
    pthread_mutex_lock(&managed_lock);
    bool back = insert_locked(m);
    pthread_mutex_unlock(&managed_lock);
    if (!back)
        forget(m); /* cannot happen: its slot was free a moment ago */
    return r;
}

void vc_managed_ctx_gone(CUcontext ctx)
{
    struct managed *gone[64];
    for (;;) {
        size_t n = 0;
        pthread_mutex_lock(&managed_lock);
        for (size_t i = nranges; i-- > 0 && n < 64;)
            if (ranges[i]->ctx == ctx) {
                gone[n++] = ranges[i];
                remove_at_locked(i);
            }
        pthread_mutex_unlock(&managed_lock);
        for (size_t i = 0; i < n; i++)
            forget(gone[i]);
        if (n < 64)
            return;
    }
}

void vc_managed_atfork_child(void)
{
    /* The parent's managed memory and its charges are the parent's: its records go. */
    pthread_mutex_init(&managed_lock, NULL);
    for (size_t i = 0; i < nranges; i++) {
        free(ranges[i]->pages);
        free(ranges[i]);
    }
    nranges = 0;
    atomic_store_explicit(&vc_managed_live, 0, memory_order_relaxed);
    atomic_store_explicit(&vc_managed_pending, 0, memory_order_relaxed);
}

/* ---- touches: copies, memsets ---- */

void vc_managed_touch_slow(CUdeviceptr p, uint64_t len)
{
    if (!len)
        return;
    struct runs keep = {.n = 0};
    pthread_mutex_lock(&managed_lock);
    struct managed *m = find_locked(p);
    if (m && m->untouched) {
        uint64_t end = p - m->base + len;
        if (end > m->size || end < len)
            end = m->size;
        bring_locked(m, (p - m->base) / PAGE, (end - 1) / PAGE, false, &keep, NULL);
    }
    pthread_mutex_unlock(&managed_lock);
    apply(&keep, NULL);
}

/* ---- launches ---- */

/* Which parameters of a kernel are 8 bytes (the pointers among them), from cuFuncGetParamInfo
 * (CUDA 12.4), cached per function in a small direct-mapped table (a seqlock per entry: no
 * lock, no allocation on a launch). */
#define FN_CACHE 256
#define FN_PARAMS 64
struct fn_info {
    atomic_uint seq; /* odd while being written */
    _Atomic(uintptr_t) fn;
    uint32_t n; /* 8-byte parameters */
    uint8_t idx[FN_PARAMS];
    uint32_t off[FN_PARAMS];
};
static struct fn_info fn_cache[FN_CACHE];

static struct fn_info *fn_slot(CUfunction f)
{
    uintptr_t h = (uintptr_t)f;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    return &fn_cache[(h >> 40) % FN_CACHE];
}

/* The 8-byte parameters of f into idx/off; false when the driver cannot say. */
static bool param_info(CUfunction f, uint32_t *ret_n, uint8_t *idx, uint32_t *off)
{
    struct fn_info *e = fn_slot(f);
    unsigned s0 = atomic_load_explicit(&e->seq, memory_order_acquire);
    if (!(s0 & 1) && atomic_load_explicit(&e->fn, memory_order_relaxed) == (uintptr_t)f) {
        uint32_t n = e->n;
        n = n > FN_PARAMS ? FN_PARAMS : n;
        memcpy(idx, e->idx, n);
        memcpy(off, e->off, n * sizeof(*off));
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&e->seq, memory_order_relaxed) == s0) {
            *ret_n = n;
            return true;
        }
    }
    if (!vc_real.cuFuncGetParamInfo)
        return false;
    uint32_t n = 0;
    for (size_t i = 0; i < 255 && n < FN_PARAMS; i++) {
        size_t o = 0, sz = 0;
        CUresult r = vc_real.cuFuncGetParamInfo(f, i, &o, &sz);
        if (r == CUDA_ERROR_INVALID_VALUE)
            break; /* "paramIndex must be less than the number of parameters" */
        if (r != CUDA_SUCCESS)
            return false;
        if (sz == 8 && o <= UINT32_MAX) {
            idx[n] = (uint8_t)i;
            off[n++] = (uint32_t)o;
        }
    }
    *ret_n = n;
    unsigned s = atomic_load_explicit(&e->seq, memory_order_relaxed);
    if (!(s & 1) && atomic_compare_exchange_strong_explicit(
                        &e->seq, &s, s + 1, memory_order_acquire, memory_order_relaxed)) {
        atomic_store_explicit(&e->fn, (uintptr_t)f, memory_order_relaxed);
        e->n = n;
        memcpy(e->idx, idx, n);
        memcpy(e->off, off, n * sizeof(*off));
        atomic_store_explicit(&e->seq, s + 2, memory_order_release);
    }
    return true;
}

/* The argument buffer of a launch given through extra (CU_LAUNCH_PARAM_BUFFER_POINTER). */
static const uint8_t *extra_buffer(void **extra, size_t *ret_size)
{
    const uint8_t *buf = NULL;
    size_t size = 0;
    for (unsigned i = 0; extra && i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
            size = *(const size_t *)extra[i + 1];
    }
    *ret_size = buf ? size : 0;
    return buf;
}

/* Brings the whole of every managed allocation that one of vals points into (all of the
 * device's when everything is set). */
static void bring_values(const uint64_t *vals, size_t n, bool everything, unsigned index)
{
    struct runs keep = {.n = 0};
    pthread_mutex_lock(&managed_lock);
    for (size_t i = 0; i < (everything ? nranges : n); i++) {
        struct managed *m = everything ? ranges[i] : find_locked((CUdeviceptr)vals[i]);
        if (m && m->untouched && (!everything || m->index == index))
            bring_locked(m, 0, m->npages - 1, false, &keep, NULL);
    }
    pthread_mutex_unlock(&managed_lock);
    apply(&keep, NULL);
}

void vc_managed_launch_slow(CUfunction f, void **params, void **extra)
{
    uint64_t vals[FN_PARAMS];
    size_t n = 0;
    uint8_t idx[FN_PARAMS];
    uint32_t off[FN_PARAMS], np = 0;
    size_t size = 0;
    const uint8_t *buf = params ? NULL : extra_buffer(extra, &size);
    bool known = param_info(f, &np, idx, off);
    if (params && known) {
        for (uint32_t i = 0; i < np; i++)
            if (params[idx[i]])
                memcpy(&vals[n++], params[idx[i]], 8);
    } else if (buf && known) {
        for (uint32_t i = 0; i < np; i++)
            if ((uint64_t)off[i] + 8 <= size)
                memcpy(&vals[n++], buf + off[i], 8);
    } else if (buf) {
        /* no layout from the driver: every aligned 8 bytes of the buffer */
        for (size_t o = 0; o + 8 <= size && n < FN_PARAMS; o += 8)
            memcpy(&vals[n++], buf + o, 8);
    } else if (params) {
        /* no layout from the driver (before CUDA 12.4) and no way to count the parameters:
         * the launch may use any managed memory of its device */
        CUcontext ctx;
        unsigned index;
        if (vc_current(&ctx, &index) == CUDA_SUCCESS)
            bring_values(NULL, 0, true, index);
        return;
    }
    bring_values(vals, n, false, 0);
}

/* ---- prefetch ---- */

/* The driver's prefetch of [p, p+count) (u: the rest of its arguments). */
typedef CUresult (*prefetch_fn)(CUdeviceptr p, size_t count, const void *u);

static CUresult vc_managed_prefetch(CUdeviceptr p, size_t count, bool to_device, prefetch_fn call,
                                    const void *u)
{
    if (!atomic_load_explicit(&vc_managed_live, memory_order_relaxed) || !count)
        return call(p, count, u);
    if (!to_device) {
        CUresult r = call(p, count, u);
        if (r != CUDA_SUCCESS)
            return r;
        pthread_mutex_lock(&managed_lock);
        struct managed *m = find_locked(p);
        if (m) {
            uint64_t end = p - m->base + count, back = 0;
            if (end > m->size || end < count)
                end = m->size;
            for (uint64_t pg = (p - m->base) / PAGE; pg <= (end - 1) / PAGE; pg++)
                if (m->pages[pg] == PG_DEVICE) {
                    m->pages[pg] = PG_HOST;
                    untouched_add(m, 1);
                    back += PAGE;
                }
            m->charged -= back;
            if (back)
                vc_region_release(&vc.region, vc.slot, m->index, back);
        }
        pthread_mutex_unlock(&managed_lock);
        return r;
    }
    struct runs keep = {.n = 0}, unkeep = {.n = 0}, go = {.n = 0};
    bool whole = true;
    pthread_mutex_lock(&managed_lock);
    struct managed *m = find_locked(p);
    if (m) {
        uint64_t end = p - m->base + count;
        if (end > m->size || end < count)
            end = m->size;
        uint64_t first = (p - m->base) / PAGE, last = (end - 1) / PAGE;
        bring_locked(m, first, last, true, &keep, &unkeep);
        for (uint64_t pg = first; pg <= last; pg++) {
            if (m->pages[pg] != PG_DEVICE) {
                whole = false;
                continue;
            }
            CUdeviceptr a = m->base + pg * PAGE, b = a + PAGE;
            a = a < p ? p : a;
            b = b > p + count ? p + count : b;
            if (!runs_add(&go, a, b - a, m->dev))
                break; /* a prefetch is a hint: the rest is left where it is */
        }
    }
    pthread_mutex_unlock(&managed_lock);
    apply(&keep, &unkeep);
    if (!m || whole)
        return call(p, count, u);
    /* Only what fits goes to the device; cuMemPrefetchAsync documents no out-of-memory error,
     * so the rest stays on the host and the call still succeeds. */
    CUresult r = CUDA_SUCCESS;
    for (unsigned i = 0; i < go.n && r == CUDA_SUCCESS; i++)
        r = call(go.r[i].p, go.r[i].len, u);
    return r;
}

/* ---- the hooks: copies and memsets that reach managed memory, prefetches ---- */

#define TOUCH(p, len)                                                                              \
    do {                                                                                           \
        if (VC_UNLIKELY(atomic_load_explicit(&vc_managed_pending, memory_order_relaxed)))          \
            vc_managed_touch_slow((p), (len));                                                     \
    } while (0)

#define HOOK(name, params, args, touches)                                                          \
    CUresult CUDAAPI name params                                                                   \
    {                                                                                              \
        VC_NEED_REAL(name);                                                                        \
        touches;                                                                                   \
        return vc_real.name args;                                                                  \
    }

static inline uint64_t times(size_t n, unsigned k)
{
    return n > UINT64_MAX / k ? UINT64_MAX : (uint64_t)n * k;
}

/* cuMemcpy and cuMemcpyDtoD: both sides may be managed */
HOOK(cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), TOUCH(d, n); TOUCH(s, n))
HOOK(cuMemcpy_ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), TOUCH(d, n); TOUCH(s, n))
HOOK(cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st),
     TOUCH(d, n);
     TOUCH(s, n))
HOOK(cuMemcpyAsync_ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st),
     TOUCH(d, n);
     TOUCH(s, n))
HOOK(cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), TOUCH(d, n); TOUCH(s, n))
HOOK(cuMemcpyDtoD_v2_ptds, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n), TOUCH(d, n);
     TOUCH(s, n))
HOOK(cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st),
     TOUCH(d, n);
     TOUCH(s, n))
HOOK(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st),
     (d, s, n, st), TOUCH(d, n);
     TOUCH(s, n))
HOOK(cuMemcpyHtoD_v2, (CUdeviceptr d, const void *s, size_t n), (d, s, n), TOUCH(d, n))
HOOK(cuMemcpyHtoD_v2_ptds, (CUdeviceptr d, const void *s, size_t n), (d, s, n), TOUCH(d, n))
HOOK(cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void *s, size_t n, CUstream st), (d, s, n, st),
     TOUCH(d, n))
HOOK(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr d, const void *s, size_t n, CUstream st),
     (d, s, n, st), TOUCH(d, n))
HOOK(cuMemcpyDtoH_v2, (void *d, CUdeviceptr s, size_t n), (d, s, n), TOUCH(s, n))
HOOK(cuMemcpyDtoH_v2_ptds, (void *d, CUdeviceptr s, size_t n), (d, s, n), TOUCH(s, n))
HOOK(cuMemcpyDtoHAsync_v2, (void *d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st),
     TOUCH(s, n))
HOOK(cuMemcpyDtoHAsync_v2_ptsz, (void *d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st),
     TOUCH(s, n))
HOOK(cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n), TOUCH(d, n))
HOOK(cuMemsetD8_v2_ptds, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n), TOUCH(d, n))
HOOK(cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n), TOUCH(d, times(n, 2)))
HOOK(cuMemsetD16_v2_ptds, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n),
     TOUCH(d, times(n, 2)))
HOOK(cuMemsetD32_v2, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n), TOUCH(d, times(n, 4)))
HOOK(cuMemsetD32_v2_ptds, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n),
     TOUCH(d, times(n, 4)))
HOOK(cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream st), (d, v, n, st),
     TOUCH(d, n))
HOOK(cuMemsetD8Async_ptsz, (CUdeviceptr d, unsigned char v, size_t n, CUstream st), (d, v, n, st),
     TOUCH(d, n))
HOOK(cuMemsetD16Async, (CUdeviceptr d, unsigned short v, size_t n, CUstream st), (d, v, n, st),
     TOUCH(d, times(n, 2)))
HOOK(cuMemsetD16Async_ptsz, (CUdeviceptr d, unsigned short v, size_t n, CUstream st), (d, v, n, st),
     TOUCH(d, times(n, 2)))
HOOK(cuMemsetD32Async, (CUdeviceptr d, unsigned int v, size_t n, CUstream st), (d, v, n, st),
     TOUCH(d, times(n, 4)))
HOOK(cuMemsetD32Async_ptsz, (CUdeviceptr d, unsigned int v, size_t n, CUstream st), (d, v, n, st),
     TOUCH(d, times(n, 4)))

/* A 2D/3D operand in device or unified memory: the bytes it spans, as the copy reaches them. */
static void touch_operand(CUmemorytype type, CUdeviceptr dev, size_t x, size_t y, size_t z,
                          size_t pitch, size_t height, size_t w, size_t h, size_t d)
{
    if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || !w || !h || !d)
        return;
    unsigned __int128 off = ((unsigned __int128)z * height + y) * pitch + x;
    unsigned __int128 span = ((unsigned __int128)(d - 1) * height + (h - 1)) * pitch + w;
    if (off + span <= UINT64_MAX)
        TOUCH(dev + (uint64_t)off, (uint64_t)span);
}

static void touch_2d(const CUDA_MEMCPY2D *c)
{
    if (!c)
        return;
    touch_operand(c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, 0, c->srcPitch, 0,
                  c->WidthInBytes, c->Height, 1);
    touch_operand(c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, 0, c->dstPitch, 0,
                  c->WidthInBytes, c->Height, 1);
}

static void touch_3d(const CUDA_MEMCPY3D *c)
{
    if (!c)
        return;
    touch_operand(c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch,
                  c->srcHeight, c->WidthInBytes, c->Height, c->Depth);
    touch_operand(c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch,
                  c->dstHeight, c->WidthInBytes, c->Height, c->Depth);
}

#define TOUCH_2D(c)                                                                                \
    do {                                                                                           \
        if (VC_UNLIKELY(atomic_load_explicit(&vc_managed_pending, memory_order_relaxed)))          \
            touch_2d(c);                                                                           \
    } while (0)
#define TOUCH_3D(c)                                                                                \
    do {                                                                                           \
        if (VC_UNLIKELY(atomic_load_explicit(&vc_managed_pending, memory_order_relaxed)))          \
            touch_3d(c);                                                                           \
    } while (0)

HOOK(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *c), (c), TOUCH_2D(c))
HOOK(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *c), (c), TOUCH_2D(c))
HOOK(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *c), (c), TOUCH_2D(c))
HOOK(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *c), (c), TOUCH_2D(c))
HOOK(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *c, CUstream st), (c, st), TOUCH_2D(c))
HOOK(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *c, CUstream st), (c, st), TOUCH_2D(c))
HOOK(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *c), (c), TOUCH_3D(c))
HOOK(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *c), (c), TOUCH_3D(c))
HOOK(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *c, CUstream st), (c, st), TOUCH_3D(c))
HOOK(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D *c, CUstream st), (c, st), TOUCH_3D(c))

/* 2D memsets: h rows of w elements of k bytes, pitch apart */
static void touch_rows(CUdeviceptr d, size_t pitch, size_t w, unsigned k, size_t h)
{
    if (!w || !h)
        return;
    unsigned __int128 span = (unsigned __int128)(h - 1) * pitch + (unsigned __int128)w * k;
    TOUCH(d, span > UINT64_MAX ? UINT64_MAX : (uint64_t)span);
}
#define TOUCH_ROWS(d, pitch, w, k, h) touch_rows(d, pitch, w, k, h)

HOOK(cuMemsetD2D8_v2, (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h),
     (d, pitch, v, w, h), TOUCH_ROWS(d, pitch, w, 1, h))
HOOK(cuMemsetD2D8_v2_ptds, (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h),
     (d, pitch, v, w, h), TOUCH_ROWS(d, pitch, w, 1, h))
HOOK(cuMemsetD2D32_v2, (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h),
     (d, pitch, v, w, h), TOUCH_ROWS(d, pitch, w, 4, h))
HOOK(cuMemsetD2D32_v2_ptds, (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h),
     (d, pitch, v, w, h), TOUCH_ROWS(d, pitch, w, 4, h))
HOOK(cuMemsetD2D8Async,
     (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream st),
     (d, pitch, v, w, h, st), TOUCH_ROWS(d, pitch, w, 1, h))
HOOK(cuMemsetD2D8Async_ptsz,
     (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream st),
     (d, pitch, v, w, h, st), TOUCH_ROWS(d, pitch, w, 1, h))
HOOK(cuMemsetD2D32Async,
     (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream st),
     (d, pitch, v, w, h, st), TOUCH_ROWS(d, pitch, w, 4, h))
HOOK(cuMemsetD2D32Async_ptsz,
     (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream st),
     (d, pitch, v, w, h, st), TOUCH_ROWS(d, pitch, w, 4, h))

struct pf_dev {
    CUdevice dev;
    CUstream s;
};
struct pf_loc {
    CUmemLocation loc;
    unsigned int flags;
    CUstream s;
};

static CUresult pf(CUdeviceptr p, size_t n, const void *u)
{
    const struct pf_dev *a = u;
    return vc_real.cuMemPrefetchAsync(p, n, a->dev, a->s);
}
static CUresult pf_ptsz(CUdeviceptr p, size_t n, const void *u)
{
    const struct pf_dev *a = u;
    return vc_real.cuMemPrefetchAsync_ptsz(p, n, a->dev, a->s);
}
static CUresult pf_v2(CUdeviceptr p, size_t n, const void *u)
{
    const struct pf_loc *a = u;
    return vc_real.cuMemPrefetchAsync_v2(p, n, a->loc, a->flags, a->s);
}
static CUresult pf_v2_ptsz(CUdeviceptr p, size_t n, const void *u)
{
    const struct pf_loc *a = u;
    return vc_real.cuMemPrefetchAsync_v2_ptsz(p, n, a->loc, a->flags, a->s);
}

CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr p, size_t count, CUdevice dst, CUstream s)
{
    VC_NEED_REAL(cuMemPrefetchAsync);
    return vc_managed_prefetch(p, count, dst != CU_DEVICE_CPU, pf, &(struct pf_dev){dst, s});
}

CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t count, CUdevice dst, CUstream s)
{
    VC_NEED_REAL(cuMemPrefetchAsync_ptsz);
    return vc_managed_prefetch(p, count, dst != CU_DEVICE_CPU, pf_ptsz, &(struct pf_dev){dst, s});
}

CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr p, size_t count, CUmemLocation loc,
                                       unsigned int flags, CUstream s)
{
    VC_NEED_REAL(cuMemPrefetchAsync_v2);
    return vc_managed_prefetch(p, count, loc.type == CU_MEM_LOCATION_TYPE_DEVICE, pf_v2,
                               &(struct pf_loc){loc, flags, s});
}

CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t count, CUmemLocation loc,
                                            unsigned int flags, CUstream s)
{
    VC_NEED_REAL(cuMemPrefetchAsync_v2_ptsz);
    return vc_managed_prefetch(p, count, loc.type == CU_MEM_LOCATION_TYPE_DEVICE, pf_v2_ptsz,
                               &(struct pf_loc){loc, flags, s});
}
