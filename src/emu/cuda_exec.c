/* cuda_exec.c — emulated libcuda.so.1: everything that runs on the GPU's timeline. Streams
 * (stream order, legacy default stream, per-thread default stream), events with real emulated
 * timestamps, modules from PTX, kernel launches, graphs and stream capture.
 *
 * A launch computes the kernel's duration (a `spin*` kernel: its first u64 parameter in SM
 * cycles at the GPU's SM clock; any other: ACCEL_EMU_KERNEL_US) and queues it on the GPU's
 * shared timeline (emu_state_submit_kind) after the stream's previous work; it returns at once.
 * Spin kernels are clock-bound beside other processes (their SM clock runs on while their
 * context is switched out), any other kernel work-bound (see emu_state_submit_kind).
 * Times kept here (streams, contexts, events) are on this process's clock of that GPU, which
 * runs behind the GPU's by the time it waited for other processes' time slices (state.h);
 * synchronization and queries turn them into GPU time when they ask (cuda_wall_of), and
 * synchronization sleeps until then, looking again on waking (other processes' work queued
 * meanwhile moves it later).
 *
 * Events: an event carries the completion time of the stream's work before it. An event
 * recorded right after work marks that work's end: it gets the stream's last completion time
 * at once. An event recorded after another event (or first on a stream) marks the start of
 * what comes next: it stays "pending" and moves to the start of the next work queued on that
 * stream, which is where the GPU front end reaches it; observed first (query, synchronize,
 * elapsed time, a stream waiting on it), it keeps the stream's last completion. So the pairs
 * [record start; launch; record end] measure each kernel's execution from its first time slice
 * to its end: exactly its run time when it had the GPU to itself, never its wait for its first
 * slice nor host-side delays between launches (libvcuda's compute pacing relies on this); the
 * other processes' slices in between count, as on a GPU. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda_emu.h"
#include "ptx.h"

/* What a node does: a kernel (func), a copy or memset, or graph memory (gm). */
enum gnode_kind { GN_WORK = 0, GN_ALLOC, GN_FREE };

struct CUgraphNode_st {
    enum gnode_kind kind;
    struct cuda_gm_block *gm; /* GN_ALLOC, GN_FREE: the allocation's block (held) */
    CUfunction func;          /* GN_WORK: NULL for a copy or memset node */
    bool has_cycles;
    uint64_t cycles; /* spin kernels: first parameter */
    /* copy (src) or memset (!src) */
    void *dst;
    const void *src;
    size_t n, elem;
    unsigned value;
};

struct CUgraph_st {
    uint32_t magic;
    size_t n, cap;
    struct CUgraphNode_st **nodes;
};

struct CUgraphExec_st {
    uint32_t magic;
    size_t n;
    struct CUgraphNode_st *nodes; /* copies: the graph may change or go after instantiation */
    struct cuda_gm_block **gm;    /* the allocation nodes' blocks (mapped at launch, upload) */
    size_t ngm;
};

static EMU_TLS struct CUstream_st pt_stream; /* per-thread default stream */
static void stream_unbind_all_locked(struct CUstream_st *s);
static uint64_t capture_ids;

#define NEED_CTX(c)                                                                                \
    struct CUctx_st *c;                                                                            \
    do {                                                                                           \
        CUresult r_ = cuda_need_ctx(&c);                                                           \
        if (r_)                                                                                    \
            return r_;                                                                             \
    } while (0)

void cuda_sleep_until(uint64_t t_ns)
{
    if (t_ns <= emu_state_now_ns()) /* done already: no system call (the clock is vDSO) */
        return;
    struct timespec ts = {(time_t)(t_ns / 1000000000ull), (long)(t_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int32_t mps_group(void)
{
    pthread_mutex_lock(&cuda_lock);
    int32_t g = cuda_mps_group_locked();
    pthread_mutex_unlock(&cuda_lock);
    return g;
}

uint64_t cuda_wall_of(int dev, uint64_t t_ns, bool at_start)
{
    if (!t_ns || dev < 0)
        return t_ns;
    int32_t group = mps_group();
    /* never waited for another process (lags only grow): our clock is the GPU's, no lock */
    if (!emu_state_lag_hint(cuda_state, cuda_dev_gpu(dev), group))
        return t_ns;
    return emu_state_wall_ns(cuda_state, cuda_dev_gpu(dev), group, t_ns, at_start);
}

/* Other processes' work queued meanwhile may move the time later: look again on waking. */
void cuda_wait_for(int dev, uint64_t t_ns, bool at_start)
{
    for (;;) {
        uint64_t w = cuda_wall_of(dev, t_ns, at_start);
        if (w <= emu_state_now_ns())
            return;
        cuda_sleep_until(w);
    }
}

/* At thread exit, events still pending on its per-thread stream must not point at it. */
static pthread_key_t pt_key;
static pthread_once_t pt_key_once = PTHREAD_ONCE_INIT;

static void pt_stream_exit(void *unused)
{
    pthread_mutex_lock(&cuda_lock);
    stream_unbind_all_locked(&pt_stream);
    pthread_mutex_unlock(&cuda_lock);
}

static void pt_key_make(void)
{
    pthread_key_create(&pt_key, pt_stream_exit);
}

CUresult cuda_stream_resolve(CUstream h, bool per_thread, struct CUstream_st **ret)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    if (h == CU_STREAM_PER_THREAD || (!h && per_thread)) {
        if (pt_stream.ctx != c) {
            pthread_mutex_lock(&cuda_lock);
            stream_unbind_all_locked(&pt_stream);
            pthread_mutex_unlock(&cuda_lock);
            memset(&pt_stream, 0, sizeof(pt_stream));
            pt_stream.magic = EMU_MAGIC_STREAM;
            pt_stream.ctx = c;
            if (!cuda_static_program()) {
                pthread_once(&pt_key_once, pt_key_make);
                pthread_setspecific(pt_key, &pt_stream);
            }
        }
        *ret = &pt_stream;
        return CUDA_SUCCESS;
    }
    if (!h || h == CU_STREAM_LEGACY) {
        *ret = &c->null_stream;
        return CUDA_SUCCESS;
    }
    if (h->magic != EMU_MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    *ret = h;
    return CUDA_SUCCESS;
}

/* cuda_lock held. When work on s may start at the earliest: after s's own work, and for the
 * legacy stream's implicit synchronization, after the other side's work. */
static uint64_t not_before_locked(struct CUstream_st *s)
{
    struct CUctx_st *c = s->ctx;
    uint64_t t = s->last_end_ns;
    if (s == &c->null_stream) {
        for (struct CUstream_st *o = c->streams; o; o = o->next)
            if (!(o->flags & CU_STREAM_NON_BLOCKING) && o->last_end_ns > t)
                t = o->last_end_ns;
        if (pt_stream.ctx == c && pt_stream.last_end_ns > t)
            t = pt_stream.last_end_ns;
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && c->null_stream.last_end_ns > t) {
        t = c->null_stream.last_end_ns;
    }
    return t;
}

/* cuda_lock held. Fixes e's time where it is now. */
static void event_bind_locked(struct CUevent_st *e)
{
    struct CUstream_st *s = e->pend_stream;
    if (!s)
        return;
    for (struct CUevent_st **pp = &s->pending; *pp; pp = &(*pp)->pend_next)
        if (*pp == e) {
            *pp = e->pend_next;
            break;
        }
    e->pend_stream = NULL;
    e->pend_next = NULL;
}

/* cuda_lock held. Work starting at start was queued on s: its pending events move there. */
static void stream_bind_pending_locked(struct CUstream_st *s, uint64_t start)
{
    for (struct CUevent_st *e = s->pending, *n; e; e = n) {
        n = e->pend_next;
        if (start > e->time_ns)
            e->time_ns = start;
        e->at_start = true;
        e->pend_stream = NULL;
        e->pend_next = NULL;
    }
    s->pending = NULL;
}

static void stream_unbind_all_locked(struct CUstream_st *s)
{
    for (struct CUevent_st *e = s->pending, *n; e; e = n) {
        n = e->pend_next;
        e->pend_stream = NULL;
        e->pend_next = NULL;
    }
    s->pending = NULL;
}

/* ---- concurrency inside a context ----
 * Kernels of one context on different streams run side by side when the SMs they ask for are
 * free: a kernel needs min(SMs, ceil(blocks / blocks per SM)) SMs. This process remembers, per
 * GPU, its kernels still running (end, SMs) for the context that queued them last; a new kernel
 * may start at the first moment those leave it enough SMs (emu_state_submit_overlap decides
 * against the other processes' work). cuda_lock guards it. */
#define SM_TRACK 64
struct sm_track {
    struct CUctx_st *ctx;
    unsigned n;
    uint64_t end[SM_TRACK];
    uint32_t sms[SM_TRACK];
};
static struct sm_track sm_tracks[EMU_MAX_GPUS];
/* Per MIG device, the end of this process's work queued there (stream_submit_sms); cuda_lock. */
static uint64_t mig_busy_until[EMU_MAX_GPUS];

/* cuda_lock held. When `need` SMs of ctx's GPU are free for work that may start at t0 (>= now). */
static uint64_t sm_free_at_locked(struct CUctx_st *ctx, uint32_t need, uint64_t now, uint64_t t0)
{
    struct sm_track *tr = &sm_tracks[ctx->dev];
    uint32_t total = cuda_mps_sms_locked(cuda_dev_sms(ctx->dev));
    if (tr->ctx != ctx) {
        tr->ctx = ctx; /* another context's kernels never share the SMs with these */
        tr->n = 0;
        return UINT64_MAX;
    }
    unsigned k = 0; /* forget what has ended (not what ends before t0: other streams may start
                     * earlier) */
    for (unsigned i = 0; i < tr->n; i++)
        if (tr->end[i] > now) {
            tr->end[k] = tr->end[i];
            tr->sms[k++] = tr->sms[i];
        }
    tr->n = k;
    /* candidates: t0, then each end in turn */
    uint64_t cand = t0;
    for (;;) {
        uint64_t used = 0, next = UINT64_MAX;
        for (unsigned i = 0; i < tr->n; i++)
            if (tr->end[i] > cand) {
                used += tr->sms[i];
                if (tr->end[i] < next)
                    next = tr->end[i];
            }
        if (used + need <= total)
            return cand;
        if (next == UINT64_MAX)
            return UINT64_MAX;
        cand = next;
    }
}

static void sm_note_locked(struct CUctx_st *ctx, uint32_t sms, uint64_t end)
{
    struct sm_track *tr = &sm_tracks[ctx->dev];
    if (tr->ctx != ctx) {
        tr->ctx = ctx;
        tr->n = 0;
    }
    if (tr->n == SM_TRACK) { /* full: the oldest ending one leaves (its SMs count as free) */
        unsigned o = 0;
        for (unsigned i = 1; i < tr->n; i++)
            if (tr->end[i] < tr->end[o])
                o = i;
        tr->end[o] = tr->end[--tr->n];
        tr->sms[o] = tr->sms[tr->n];
    }
    tr->end[tr->n] = end;
    tr->sms[tr->n++] = sms;
}

/* Queues duration_ns of work (0: an event) on s; returns its start and end. sms: the SMs a
 * kernel asks for (it may run beside the context's other kernels); 0: whole-GPU work that runs
 * alone (graphs, host-ordered work). clock: spin kernels, bound by the SM clock rather than by
 * resident time (emu_state_submit_kind). */
static CUresult stream_submit_sms(struct CUstream_st *s, uint64_t duration_ns, uint32_t sms,
                                  bool clock, uint64_t *ret_start, uint64_t *ret_end)
{
    pthread_mutex_lock(&cuda_lock);
    uint64_t nb = not_before_locked(s), start, end;
    int32_t group = cuda_mps_group_locked();
    /* at most our clock on this GPU now (it runs behind the GPU's by the time we waited for
     * other processes' time slices) */
    uint64_t now = emu_state_now_ns();
    uint64_t lag = emu_state_lag_hint(cuda_state, cuda_dev_gpu(s->ctx->dev), group);
    now -= lag < now ? lag : now;
    uint64_t from = UINT64_MAX;
    if (sms && duration_ns)
        from = sm_free_at_locked(s->ctx, sms, now, nb > now ? nb : now);
    /* an MPS client's work runs beside the other clients' (each kernel on its own SMs), and
     * its events are reached without waiting for theirs */
    if (group && from == UINT64_MAX)
        from = nb > now ? nb : now;
    int r = 0;
    if (cuda_dev_mig(s->ctx->dev)) {
        /* A MIG compute instance runs beside the GPU's other instances, not in turns with them:
         * its work stays off the parent's shared timeline (NVML has no utilization in MIG mode)
         * and queues only behind this process's own on the device (docs/emulator-cuda.md). */
        uint64_t *busy = &mig_busy_until[s->ctx->dev];
        start = nb > now ? nb : now;
        if (from != UINT64_MAX)
            start = from > start ? from : start;
        else if (*busy > start)
            start = *busy;
        end = start + duration_ns;
        if (end > *busy)
            *busy = end;
    } else {
        /* the shared lock nests inside ours; nobody takes them the other way round */
        r = emu_state_submit_kind(cuda_state, cuda_dev_gpu(s->ctx->dev), nb, from, duration_ns,
                                  group, clock, &start, &end);
    }
    if (!r && duration_ns)
        sm_note_locked(s->ctx, sms ? sms : cuda_mps_sms_locked(cuda_dev_sms(s->ctx->dev)), end);
    if (!r && end > s->last_end_ns)
        s->last_end_ns = end;
    if (!r && end > s->ctx->last_end_ns)
        s->ctx->last_end_ns = end;
    if (!r && duration_ns) {
        stream_bind_pending_locked(s, start);
        s->work_since_event = true;
    }
    pthread_mutex_unlock(&cuda_lock);
    if (r < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (ret_start)
        *ret_start = start;
    if (ret_end)
        *ret_end = end;
    return CUDA_SUCCESS;
}

static uint64_t stream_done_at(struct CUstream_st *s)
{
    pthread_mutex_lock(&cuda_lock);
    uint64_t t = s->last_end_ns;
    pthread_mutex_unlock(&cuda_lock);
    return t;
}

static void stream_wait_done(struct CUstream_st *s)
{
    cuda_wait_for(s->ctx->dev, stream_done_at(s), false);
}

CUresult cuda_ctx_sync(struct CUctx_st *c)
{
    /* every stream of every thread, destroyed streams' queued work included */
    pthread_mutex_lock(&cuda_lock);
    uint64_t t = c->last_end_ns;
    pthread_mutex_unlock(&cuda_lock);
    cuda_wait_for(c->dev, t, false);
    cuda_pools_release_to_threshold(c->dev);
    return CUDA_SUCCESS;
}

CUresult cuda_sync_for_copy(bool per_thread)
{
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(NULL, per_thread, &s);
    if (r)
        return r;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&cuda_lock);
    uint64_t t = not_before_locked(s);
    pthread_mutex_unlock(&cuda_lock);
    cuda_wait_for(s->ctx->dev, t, false);
    return CUDA_SUCCESS;
}

void cuda_stream_list_free(struct CUctx_st *c)
{
    pthread_mutex_lock(&cuda_lock);
    struct CUstream_st *s = c->streams;
    c->streams = NULL;
    pthread_mutex_unlock(&cuda_lock);
    pthread_mutex_lock(&cuda_lock);
    stream_unbind_all_locked(&c->null_stream);
    if (pt_stream.ctx == c)
        stream_unbind_all_locked(&pt_stream);
    for (struct CUstream_st *o = s; o; o = o->next)
        stream_unbind_all_locked(o);
    pthread_mutex_unlock(&cuda_lock);
    while (s) {
        struct CUstream_st *n = s->next;
        s->magic = 0;
        free(s);
        s = n;
    }
}

/* ---- streams ---- */

EMU_API CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
    if (!ph || (flags & ~1u))
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    struct CUstream_st *s = calloc(1, sizeof(*s));
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = EMU_MAGIC_STREAM;
    s->flags = flags;
    s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
    s->ctx = c;
    pthread_mutex_lock(&cuda_lock);
    s->next = c->streams;
    c->streams = s;
    pthread_mutex_unlock(&cuda_lock);
    *ph = s;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
    return cuStreamCreateWithPriority(ph, flags, 0);
}

EMU_API CUresult cuStreamDestroy_v2(CUstream h)
{
    NEED_CTX(c);
    if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD || h->magic != EMU_MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUctx_st *owner = h->ctx;
    pthread_mutex_lock(&cuda_lock);
    struct CUstream_st **pp = &owner->streams;
    while (*pp && *pp != h)
        pp = &(*pp)->next;
    if (!*pp) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* queued work still runs on the GPU: the legacy stream inherits its completion so that
     * later legacy-stream work still comes after it */
    if (h->last_end_ns > owner->null_stream.last_end_ns && !(h->flags & CU_STREAM_NON_BLOCKING))
        owner->null_stream.last_end_ns = h->last_end_ns;
    *pp = h->next;
    h->magic = 0;
    stream_unbind_all_locked(h);
    pthread_mutex_unlock(&cuda_lock);
    free(h);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamDestroy(CUstream h)
{
    return cuStreamDestroy_v2(h);
}

static CUresult stream_sync(CUstream h, bool pt)
{
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    uint64_t t;
    if (s == &s->ctx->null_stream) {
        pthread_mutex_lock(&cuda_lock);
        t = not_before_locked(s); /* the legacy stream waits for the blocking streams */
        pthread_mutex_unlock(&cuda_lock);
    } else {
        t = stream_done_at(s);
    }
    cuda_wait_for(s->ctx->dev, t, false);
    cuda_pools_release_to_threshold(s->ctx->dev);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamSynchronize(CUstream h)
{
    return stream_sync(h, false);
}

EMU_API CUresult cuStreamSynchronize_ptsz(CUstream h)
{
    return stream_sync(h, true);
}

static CUresult stream_query(CUstream h, bool pt)
{
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    uint64_t w = cuda_wall_of(s->ctx->dev, stream_done_at(s), false);
    return emu_state_now_ns() >= w ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EMU_API CUresult cuStreamQuery(CUstream h)
{
    return stream_query(h, false);
}

EMU_API CUresult cuStreamQuery_ptsz(CUstream h)
{
    return stream_query(h, true);
}

static CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags, bool pt)
{
    if (!e || e->magic != EMU_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    pthread_mutex_lock(&cuda_lock);
    event_bind_locked(e);
    uint64_t t = e->time_ns;
    bool other = e->recorded && e->dev != s->ctx->dev, at_start = e->at_start;
    int edev = e->dev;
    pthread_mutex_unlock(&cuda_lock);
    if (other) { /* another GPU's clock: through GPU time, to ours (at most) */
        uint64_t w = cuda_wall_of(edev, t, at_start);
        uint64_t lag = emu_state_lag_hint(cuda_state, cuda_dev_gpu(s->ctx->dev), mps_group());
        t = w - (lag < w ? lag : w);
    }
    pthread_mutex_lock(&cuda_lock);
    if (e->recorded && t > s->last_end_ns)
        s->last_end_ns = t;
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags)
{
    return stream_wait_event(h, e, flags, false);
}

EMU_API CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int flags)
{
    return stream_wait_event(h, e, flags, true);
}

/* Streams get their id on first use; the legacy and per-thread streams have fixed ones. */
static unsigned long long stream_id(struct CUstream_st *s)
{
    static unsigned long long ids = 2;
    if (s == &s->ctx->null_stream)
        return 1;
    unsigned long long id = __atomic_load_n(&s->id, __ATOMIC_RELAXED);
    if (!id) {
        unsigned long long fresh = __atomic_add_fetch(&ids, 1, __ATOMIC_RELAXED);
        if (!__atomic_compare_exchange_n(&s->id, &id, fresh, false, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED))
            return id;
        id = fresh;
    }
    return id;
}

#define STREAM_GETTER(name, pt, type, expr)                                                        \
    EMU_API CUresult name(CUstream h, type *out)                                                   \
    {                                                                                              \
        if (!out)                                                                                  \
            return CUDA_ERROR_INVALID_VALUE;                                                       \
        struct CUstream_st *s;                                                                     \
        CUresult r = cuda_stream_resolve(h, pt, &s);                                               \
        if (r)                                                                                     \
            return r;                                                                              \
        *out = (expr);                                                                             \
        return CUDA_SUCCESS;                                                                       \
    }

STREAM_GETTER(cuStreamGetFlags, false, unsigned int, s->flags)
STREAM_GETTER(cuStreamGetFlags_ptsz, true, unsigned int, s->flags)
STREAM_GETTER(cuStreamGetPriority, false, int, s->priority)
STREAM_GETTER(cuStreamGetPriority_ptsz, true, int, s->priority)
STREAM_GETTER(cuStreamGetCtx, false, CUcontext, s->ctx)
STREAM_GETTER(cuStreamGetCtx_ptsz, true, CUcontext, s->ctx)
STREAM_GETTER(cuStreamGetDevice, false, CUdevice, s->ctx->dev)

/* CUDA 12.5: also the green context (the emulator has none). */
static CUresult stream_get_ctx2(CUstream h, CUcontext *ctx, CUgreenCtx *green, bool pt)
{
    if (!ctx && !green)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    if (ctx)
        *ctx = s->ctx;
    if (green)
        *green = NULL;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamGetCtx_v2(CUstream h, CUcontext *ctx, CUgreenCtx *green)
{
    return stream_get_ctx2(h, ctx, green, false);
}

EMU_API CUresult cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext *ctx, CUgreenCtx *green)
{
    return stream_get_ctx2(h, ctx, green, true);
}
STREAM_GETTER(cuStreamGetDevice_ptsz, true, CUdevice, s->ctx->dev)
STREAM_GETTER(cuStreamGetId, false, unsigned long long, stream_id(s))
STREAM_GETTER(cuStreamGetId_ptsz, true, unsigned long long, stream_id(s))

/* Host functions run in the calling thread once the stream's prior work is done: the
 * emulator has no driver thread, so the call blocks until then (documented). */
static CUresult host_func(CUstream h, CUhostFn fn, void *data, bool pt)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    stream_wait_done(s);
    fn(data);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *data)
{
    return host_func(h, fn, data, false);
}

EMU_API CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *data)
{
    return host_func(h, fn, data, true);
}

static CUresult add_callback(CUstream h, CUstreamCallback cb, void *data, unsigned flags, bool pt)
{
    if (!cb || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    stream_wait_done(s);
    cb(h, CUDA_SUCCESS, data);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void *data,
                                     unsigned int flags)
{
    return add_callback(h, cb, data, flags, false);
}

EMU_API CUresult cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void *data,
                                          unsigned int flags)
{
    return add_callback(h, cb, data, flags, true);
}

/* ---- events ---- */

EMU_API CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
    if (!ph || (flags & ~0x7u))
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    struct CUevent_st *e = calloc(1, sizeof(*e));
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = EMU_MAGIC_EVENT;
    e->flags = flags;
    *ph = e;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuEventDestroy_v2(CUevent e)
{
    if (!e || e->magic != EMU_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&cuda_lock);
    event_bind_locked(e);
    e->magic = 0;
    pthread_mutex_unlock(&cuda_lock);
    free(e);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuEventDestroy(CUevent e)
{
    return cuEventDestroy_v2(e);
}

static CUresult event_record(CUevent e, CUstream h, bool pt)
{
    if (!e || e->magic != EMU_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&cuda_lock);
    event_bind_locked(e); /* re-recording: forget the old position */
    e->time_ns = not_before_locked(s);
    e->recorded = true;
    e->at_start = false;
    e->dev = s->ctx->dev;
    if (!s->work_since_event) { /* a start marker: bound by the next work */
        e->pend_stream = s;
        e->pend_next = s->pending;
        s->pending = e;
    }
    s->work_since_event = false;
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuEventRecord(CUevent e, CUstream h)
{
    return event_record(e, h, false);
}

EMU_API CUresult cuEventRecord_ptsz(CUevent e, CUstream h)
{
    return event_record(e, h, true);
}

EMU_API CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int flags)
{
    if (flags & ~1u)
        return CUDA_ERROR_INVALID_VALUE;
    return event_record(e, h, false);
}

EMU_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned int flags)
{
    if (flags & ~1u)
        return CUDA_ERROR_INVALID_VALUE;
    return event_record(e, h, true);
}

/* Observing an event fixes its time (on its owner's clock). */
static bool event_time(CUevent e, uint64_t *t, int *dev, bool *at_start)
{
    pthread_mutex_lock(&cuda_lock);
    event_bind_locked(e);
    bool rec = e->recorded;
    *t = e->time_ns;
    *dev = e->dev;
    *at_start = e->at_start;
    pthread_mutex_unlock(&cuda_lock);
    return rec;
}

/* The GPU time the stream reaches e, by the GPU's schedule as it stands. */
static bool event_wall(CUevent e, uint64_t *ret)
{
    uint64_t t;
    int dev;
    bool at_start;
    if (!event_time(e, &t, &dev, &at_start))
        return false;
    *ret = cuda_wall_of(dev, t, at_start);
    return true;
}

EMU_API CUresult cuEventQuery(CUevent e)
{
    if (!e || e->magic != EMU_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t w;
    if (!event_wall(e, &w))
        return CUDA_SUCCESS; /* never recorded: complete, as the driver says */
    return emu_state_now_ns() >= w ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EMU_API CUresult cuEventSynchronize(CUevent e)
{
    if (!e || e->magic != EMU_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t t;
    int dev;
    bool at_start;
    if (event_time(e, &t, &dev, &at_start))
        cuda_wait_for(dev, t, at_start);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!a || !b || a->magic != EMU_MAGIC_EVENT || b->magic != EMU_MAGIC_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    /* GPU times: the span includes other processes' time slices, as on a real GPU */
    uint64_t ta, tb;
    if (!event_wall(a, &ta) || !event_wall(b, &tb))
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t now = emu_state_now_ns();
    if (now < ta || now < tb)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)(((double)tb - (double)ta) / 1e6);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    return cuEventElapsedTime_v2(ms, a, b);
}

EMU_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute a, CUfunction f)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f || f->magic != EMU_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    struct emu_gpu *g = emu_state_gpu(cuda_state, cuda_dev_gpu(cuda_func_dev(f)));
    switch ((int)a) {
    case 0:
        *pi = 1024;
        break; /* max threads per block */
    case 4:
        *pi = 32;
        break; /* registers */
    case 5:
    case 6:
        *pi = g ? (int)(g->cc_major * 10 + g->cc_minor) : 0;
        break;
    case 8:
        *pi = 48 * 1024;
        break; /* max dynamic shared */
    case 9:
        *pi = -1;
        break;
    default:
        if ((int)a < 0 || (int)a > 15)
            return CUDA_ERROR_INVALID_VALUE;
        *pi = 0;
    }
    return CUDA_SUCCESS;
}

EMU_API CUresult cuFuncGetName(const char **name, CUfunction f)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f || f->magic != EMU_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)
{
    if (!f || f->magic != EMU_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    return (int)a >= 0 && (int)a <= 15 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config)
{
    if (!f || f->magic != EMU_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

/* Resident blocks of `threads` threads per SM: the device's 2048 threads and 32 blocks per SM
 * (registers and shared memory are not modelled). */
static unsigned blocks_per_sm(uint64_t threads)
{
    uint64_t by_threads = 2048 / threads;
    return by_threads > 32 ? 32 : (unsigned)by_threads;
}

EMU_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block,
                                                             size_t smem)
{
    if (!n || block <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f || f->magic != EMU_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    *n = (int)blocks_per_sm((uint64_t)block);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, CUfunction f,
                                                  CUoccupancyB2DSize smem_of_block, size_t smem,
                                                  int block_limit)
{
    if (!min_grid || !block)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f || f->magic != EMU_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    int b = block_limit > 0 && block_limit < 1024 ? block_limit : 1024;
    *block = b;
    *min_grid = (int)cuda_mps_sms(cuda_dev_sms(cuda_func_dev(f))) * (2048 / b);
    return CUDA_SUCCESS;
}

/* ---- launches ---- */

/* The first u64 parameter of a spin kernel, from kernelParams or a packed `extra` buffer. */
/* The packed argument buffer of a launch's `extra` list (NULL, 0 when none or malformed). */
static const uint8_t *extra_buffer(void **extra, size_t *ret_size)
{
    const uint8_t *buf = NULL;
    size_t size = 0;
    for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
            size = *(size_t *)extra[i + 1];
        else
            return NULL;
    }
    *ret_size = buf ? size : 0;
    return buf;
}

static bool first_u64(CUfunction f, void **params, void **extra, uint64_t *ret)
{
    if (!f->nparams || f->param_size[0] < 8)
        return false;
    if (params && params[0]) {
        memcpy(ret, params[0], 8);
        return true;
    }
    size_t size = 0;
    const uint8_t *buf = extra_buffer(extra, &size);
    if (!buf || size < 8)
        return false;
    memcpy(ret, buf, 8);
    return true;
}

/* A spin kernel's duration: `waves` rounds of cycles / SM clock (see waves_of). */
static uint64_t duration_ns(CUfunction f, bool has_cycles, uint64_t cycles, int dev, uint64_t waves)
{
    if (!f->spin || !has_cycles)
        return cuda_kernel_ns;
    struct emu_gpu *g = emu_state_gpu(cuda_state, cuda_dev_gpu(dev));
    uint32_t mhz = g && g->sm_clock_mhz ? g->sm_clock_mhz : 1000;
    /* cycles / (MHz * 1e6) seconds, in ns: cycles * 1000 / MHz, without overflow */
    unsigned __int128 ns = (unsigned __int128)cycles * 1000u / mhz * (waves ? waves : 1);
    return ns > UINT64_MAX / 2 ? UINT64_MAX / 2 : (uint64_t)ns;
}

/* Rounds a grid needs: every block spins for the same cycles, and the SMs this process may
 * use (all, or its MPS share: cuda_mps.c) hold blocks_per_sm of them at a time, so a grid of
 * B blocks takes ceil(B / (blocks per SM x SMs)) rounds. A grid filling the GPU once runs
 * 100 / P times longer on P % of the SMs; a one-block kernel does not slow down. */
static uint64_t waves_of(int dev, uint64_t blocks, uint64_t threads)
{
    uint64_t room = (uint64_t)blocks_per_sm(threads) * cuda_mps_sms(cuda_dev_sms(dev));
    return (blocks + room - 1) / room;
}

/* Pointer-sized arguments that point into managed memory bring it to the GPU (cuda_mem.c). */
static void touch_managed_args(CUfunction f, void **params, void **extra)
{
    uint64_t vals[64];
    size_t n = 0;
    if (params) {
        for (unsigned i = 0; i < f->nparams && n < 64; i++)
            if (f->param_size[i] == 8 && params[i])
                memcpy(&vals[n++], params[i], 8);
    } else {
        size_t size = 0;
        const uint8_t *buf = extra_buffer(extra, &size);
        for (size_t off = 0; buf && off + 8 <= size && n < 64; off += 8)
            memcpy(&vals[n++], buf + off, 8);
    }
    cuda_mem_touch_args(vals, n);
}

static CUresult graph_add(struct CUgraph_st *g, CUfunction f, bool has, uint64_t cycles,
                          CUgraphNode *ret);
static CUresult graph_push(struct CUgraph_st *g, const struct CUgraphNode_st *tmpl,
                           CUgraphNode *ret);

/* A cooperative grid must be resident all at once: "The total number of blocks launched cannot
 * exceed the maximum number of blocks per multiprocessor as returned by
 * cuOccupancyMaxActiveBlocksPerMultiprocessor ... times the number of multiprocessors"
 * (CUDA Driver API, cuLaunchCooperativeKernel), else CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE. */
static bool coop_fits(int dev, uint64_t blocks, uint64_t threads)
{
    return cuda_dev(dev) &&
           blocks <= (uint64_t)blocks_per_sm(threads) * cuda_mps_sms(cuda_dev_sms(dev));
}

/* The SMs a grid occupies: all of them once it has blocks per SM x SMs blocks. */
static uint32_t sms_needed(int dev, uint64_t blocks, uint64_t threads)
{
    uint64_t total = cuda_mps_sms(cuda_dev_sms(dev)), per = blocks_per_sm(threads);
    uint64_t need = (blocks + per - 1) / per;
    return (uint32_t)(need < total ? need : total);
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, CUstream h, void **params, void **extra, bool pt,
                       bool coop)
{
    if (!f || f->magic != EMU_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz || (uint64_t)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (f->nparams && !params && !extra)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    if ((r = cuda_mps_fault(s->ctx->dev)) != CUDA_SUCCESS)
        return r;
    if (coop && !coop_fits(s->ctx->dev, (uint64_t)gx * gy * gz, (uint64_t)bx * by * bz))
        return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    uint64_t cycles = 0;
    bool has = first_u64(f, params, extra, &cycles);
    touch_managed_args(f, params, extra);
    if (s->capture)
        return graph_add(s->capture, f, has, cycles, NULL);
    return stream_submit_sms(
        s,
        duration_ns(f, has, cycles, s->ctx->dev,
                    waves_of(s->ctx->dev, (uint64_t)gx * gy * gz, (uint64_t)bx * by * bz)),
        sms_needed(s->ctx->dev, (uint64_t)gx * gy * gz, (uint64_t)bx * by * bz), f->spin && has,
        NULL, NULL);
}

EMU_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int smem, CUstream h, void **params, void **extra)
{
    return launch(f, gx, gy, gz, bx, by, bz, h, params, extra, false, false);
}

EMU_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int smem, CUstream h, void **params,
                                     void **extra)
{
    return launch(f, gx, gy, gz, bx, by, bz, h, params, extra, true, false);
}

EMU_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                           unsigned int gz, unsigned int bx, unsigned int by,
                                           unsigned int bz, unsigned int smem, CUstream h,
                                           void **params)
{
    return launch(f, gx, gy, gz, bx, by, bz, h, params, NULL, false, true);
}

EMU_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                unsigned int gz, unsigned int bx, unsigned int by,
                                                unsigned int bz, unsigned int smem, CUstream h,
                                                void **params)
{
    return launch(f, gx, gy, gz, bx, by, bz, h, params, NULL, true, true);
}

static CUresult launch_ex(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra,
                          bool pt)
{
    if (!cfg || (cfg->numAttrs && !cfg->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    bool coop = false;
    for (unsigned i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
            coop = cfg->attrs[i].value.cooperative != 0;
    return launch(f, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX, cfg->blockDimY,
                  cfg->blockDimZ, cfg->hStream, params, extra, pt, coop);
}

EMU_API CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params,
                                  void **extra)
{
    return launch_ex(cfg, f, params, extra, false);
}

EMU_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params,
                                       void **extra)
{
    return launch_ex(cfg, f, params, extra, true);
}

/* ---- graphs and stream capture ---- */

static CUresult graph_add(struct CUgraph_st *g, CUfunction f, bool has, uint64_t cycles,
                          CUgraphNode *ret)
{
    struct CUgraphNode_st n = {.func = f, .has_cycles = has, .cycles = cycles};
    return graph_push(g, &n, ret);
}

CUresult cuda_graph_add_mem(struct CUgraph_st *g, void *dst, const void *src, size_t n,
                            unsigned value, size_t elem)
{
    struct CUgraphNode_st node = {.dst = dst, .src = src, .n = n, .elem = elem, .value = value};
    return graph_push(g, &node, NULL);
}

CUresult cuda_graph_add_gm(struct CUgraph_st *g, struct cuda_gm_block *b, bool alloc)
{
    struct CUgraphNode_st node = {.kind = alloc ? GN_ALLOC : GN_FREE, .gm = b};
    return graph_push(g, &node, NULL);
}

/* A copy or memset node, when its graph runs. */
static void run_mem_node(const struct CUgraphNode_st *n)
{
    if (n->src) {
        memmove(n->dst, n->src, n->n);
    } else if (n->elem == 1) {
        memset(n->dst, (int)(n->value & 0xff), n->n);
    } else {
        uint8_t *p = n->dst;
        for (size_t i = 0; i < n->n; i++)
            memcpy(p + i * n->elem, &n->value, n->elem); /* little-endian: the low bytes */
    }
}

static struct CUgraph_st *graph_of(CUgraph g)
{
    return g && g->magic == EMU_MAGIC_GRAPH ? g : NULL;
}

EMU_API CUresult cuGraphCreate(CUgraph *pg, unsigned int flags)
{
    if (!pg || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraph_st *g = calloc(1, sizeof(*g));
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = EMU_MAGIC_GRAPH;
    *pg = g;
    return CUDA_SUCCESS;
}

/* The nodes in the order they were added (NULL nodes: just the count, as the driver does). */
EMU_API CUresult cuGraphGetNodes(CUgraph hg, CUgraphNode *nodes, size_t *n)
{
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cuda_lock);
    struct CUgraph_st *g = graph_of(hg);
    if (!g) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (nodes) {
        size_t i = 0;
        for (; i < g->n && i < *n; i++)
            nodes[i] = g->nodes[i];
        for (size_t j = i; j < *n; j++)
            nodes[j] = NULL;
        *n = i;
    } else {
        *n = g->n;
    }
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuGraphDestroy(CUgraph hg)
{
    struct CUgraph_st *g = graph_of(hg);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < g->n; i++) {
        if (g->nodes[i]->gm)
            cuda_gm_block_drop(g->nodes[i]->gm);
        free(g->nodes[i]);
    }
    free(g->nodes);
    g->magic = 0;
    free(g);
    return CUDA_SUCCESS;
}

static CUresult graph_push(struct CUgraph_st *g, const struct CUgraphNode_st *tmpl,
                           CUgraphNode *ret)
{
    pthread_mutex_lock(&cuda_lock);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        struct CUgraphNode_st **n = realloc(g->nodes, cap * sizeof(*n));
        if (!n)
            goto out;
        g->nodes = n;
        g->cap = cap;
    }
    struct CUgraphNode_st *node = malloc(sizeof(*node));
    if (!node)
        goto out;
    *node = *tmpl;
    g->nodes[g->n++] = node;
    if (ret)
        *ret = node;
    r = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

static CUresult add_kernel_node(CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
                                CUfunction f, void **params, void **extra)
{
    struct CUgraph_st *g = graph_of(hg);
    if (!pn || !g || (ndeps && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    if (!f || f->magic != EMU_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t cycles = 0;
    bool has = first_u64(f, params, extra, &cycles);
    /* nodes run in the order added: the emulated GPU runs one kernel at a time anyway, and a
     * dependency is always added before its dependents */
    return graph_add(g, f, has, cycles, pn);
}

EMU_API CUresult cuGraphAddKernelNode(CUgraphNode *pn, CUgraph g, const CUgraphNode *deps,
                                      size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return add_kernel_node(pn, g, deps, ndeps, p->func, p->kernelParams, p->extra);
}

EMU_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *pn, CUgraph g, const CUgraphNode *deps,
                                         size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return add_kernel_node(pn, g, deps, ndeps, p->func, p->kernelParams, p->extra);
}

static CUresult instantiate(CUgraphExec *pe, CUgraph hg)
{
    struct CUgraph_st *g = graph_of(hg);
    if (!pe || !g)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof(*e));
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&cuda_lock);
    e->nodes = calloc(g->n ? g->n : 1, sizeof(*e->nodes));
    e->gm = calloc(g->n ? g->n : 1, sizeof(*e->gm));
    if (e->nodes && e->gm) {
        for (size_t i = 0; i < g->n; i++) {
            e->nodes[i] = *g->nodes[i];
            if (e->nodes[i].kind == GN_ALLOC)
                e->gm[e->ngm++] = e->nodes[i].gm;
        }
        e->n = g->n;
    }
    pthread_mutex_unlock(&cuda_lock);
    if (!e->nodes || !e->gm) {
        free(e->nodes);
        free(e->gm);
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* the executable graph names the blocks too (free nodes' blocks are their allocations') */
    for (size_t i = 0; i < e->n; i++)
        if (e->nodes[i].gm)
            cuda_gm_block_hold(e->nodes[i].gm);
    e->magic = EMU_MAGIC_EXEC;
    *pe = e;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph g, unsigned long long flags)
{
    return instantiate(pe, g);
}

EMU_API CUresult cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph g, CUgraphNode *err, char *log,
                                       size_t logsize)
{
    if (log && logsize)
        log[0] = 0;
    return instantiate(pe, g);
}

EMU_API CUresult cuGraphInstantiate(CUgraphExec *pe, CUgraph g, CUgraphNode *err, char *log,
                                    size_t logsize)
{
    return cuGraphInstantiate_v2(pe, g, err, log, logsize);
}

EMU_API CUresult cuGraphInstantiateWithParams(CUgraphExec *pe, CUgraph g,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = instantiate(pe, g);
    p->result_out = r ? CUDA_GRAPH_INSTANTIATE_ERROR : CUDA_GRAPH_INSTANTIATE_SUCCESS;
    p->hErrNode_out = NULL;
    if (r == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) {
        r = cuGraphUpload(*pe, p->hUploadStream);
        if (r != CUDA_SUCCESS) {
            cuGraphExecDestroy(*pe);
            *pe = NULL;
        }
    }
    return r;
}

EMU_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *pe, CUgraph g,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return cuGraphInstantiateWithParams(pe, g, p);
}

EMU_API CUresult cuGraphExecDestroy(CUgraphExec e)
{
    if (!e || e->magic != EMU_MAGIC_EXEC)
        return CUDA_ERROR_INVALID_VALUE;
    e->magic = 0;
    /* the blocks' memory stays mapped until a trim (struct cuda_gm_block) */
    for (size_t i = 0; i < e->n; i++)
        if (e->nodes[i].gm)
            cuda_gm_block_drop(e->nodes[i].gm);
    free(e->nodes);
    free(e->gm);
    free(e);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuGraphNodeGetType(CUgraphNode n, CUgraphNodeType *type)
{
    if (!n || !type)
        return CUDA_ERROR_INVALID_VALUE;
    switch (n->kind) {
    case GN_ALLOC:
        *type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
        break;
    case GN_FREE:
        *type = CU_GRAPH_NODE_TYPE_MEM_FREE;
        break;
    default:
        *type = n->func  ? CU_GRAPH_NODE_TYPE_KERNEL
                : n->src ? CU_GRAPH_NODE_TYPE_MEMCPY
                         : CU_GRAPH_NODE_TYPE_MEMSET;
    }
    return CUDA_SUCCESS;
}

EMU_API CUresult cuGraphAddMemAllocNode(CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps,
                                        size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct CUgraph_st *g = graph_of(hg);
    if (!pn || !g || !p || (ndeps && !deps) || !p->bytesize ||
        p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    struct cuda_gm_block *b;
    CUresult r = cuda_gm_block_new(p->poolProps.location.id, p->bytesize, &b);
    if (r)
        return r;
    struct CUgraphNode_st node = {.kind = GN_ALLOC, .gm = b};
    r = graph_push(g, &node, pn);
    if (r) {
        cuda_gm_block_drop(b);
        return r;
    }
    p->dptr = cuda_gm_block_va(b);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuGraphAddMemFreeNode(CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps,
                                       size_t ndeps, CUdeviceptr dptr)
{
    struct CUgraph_st *g = graph_of(hg);
    struct cuda_gm_block *b = cuda_gm_block_find(dptr);
    if (!pn || !g || (ndeps && !deps) || !b)
        return CUDA_ERROR_INVALID_VALUE;
    cuda_gm_block_hold(b);
    struct CUgraphNode_st node = {.kind = GN_FREE, .gm = b};
    CUresult r = graph_push(g, &node, pn);
    if (r)
        cuda_gm_block_drop(b);
    return r;
}

EMU_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode n, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    if (!n || !p || n->kind != GN_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    memset(p, 0, sizeof(*p));
    p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->poolProps.location.id = cuda_gm_block_dev(n->gm);
    p->bytesize = cuda_gm_block_bytes(n->gm);
    p->dptr = cuda_gm_block_va(n->gm);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode n, CUdeviceptr *dptr)
{
    if (!n || !dptr || n->kind != GN_FREE)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = cuda_gm_block_va(n->gm);
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec e, CUstream h, bool pt)
{
    if (!e || e->magic != EMU_MAGIC_EXEC)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    /* the graph's kernels run back to back: one item on the timeline, clock-bound when every
     * kernel in it is a spin kernel */
    uint64_t total = 0;
    bool clock = true;
    for (size_t i = 0; i < e->n; i++) {
        const struct CUgraphNode_st *n = &e->nodes[i];
        if (n->func && n->func->magic != EMU_MAGIC_FUNC)
            return CUDA_ERROR_INVALID_HANDLE; /* its module was unloaded */
    }
    /* graph memory is mapped at launch, when an upload has not done it (cuda_gm_map) */
    r = cuda_gm_map(e->gm, e->ngm);
    if (r)
        return r;
    for (size_t i = 0; i < e->n; i++) {
        const struct CUgraphNode_st *n = &e->nodes[i];
        if (n->kind != GN_WORK)
            cuda_gm_set_live(n->gm, n->kind == GN_ALLOC);
        else if (n->func) {
            total += duration_ns(n->func, n->has_cycles, n->cycles, s->ctx->dev, 1);
            clock = clock && n->func->spin && n->has_cycles;
        } else
            run_mem_node(n); /* at once, like any asynchronous copy */
    }
    return total ? stream_submit_sms(s, total, 0, clock, NULL, NULL) : CUDA_SUCCESS;
}

EMU_API CUresult cuGraphLaunch(CUgraphExec e, CUstream h)
{
    return graph_launch(e, h, false);
}

EMU_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream h)
{
    return graph_launch(e, h, true);
}

EMU_API CUresult cuGraphUpload(CUgraphExec e, CUstream h)
{
    if (!e || e->magic != EMU_MAGIC_EXEC)
        return CUDA_ERROR_INVALID_VALUE;
    return cuda_gm_map(e->gm, e->ngm); /* "performing all mappings for that graph immediately" */
}

EMU_API CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream h)
{
    return cuGraphUpload(e, h);
}

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool pt)
{
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    if (s == &s->ctx->null_stream)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
    if (s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    CUgraph g;
    r = cuGraphCreate(&g, 0);
    if (r)
        return r;
    pthread_mutex_lock(&cuda_lock);
    s->capture = g;
    s->capture_id = ++capture_ids;
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode)
{
    return begin_capture(h, mode, false);
}

EMU_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode)
{
    return begin_capture(h, mode, true);
}

EMU_API CUresult cuStreamBeginCapture(CUstream h)
{
    return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}

EMU_API CUresult cuStreamBeginCapture_ptsz(CUstream h)
{
    return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

static CUresult end_capture(CUstream h, CUgraph *pg, bool pt)
{
    if (!pg)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    pthread_mutex_lock(&cuda_lock);
    struct CUgraph_st *g = s->capture;
    s->capture = NULL;
    pthread_mutex_unlock(&cuda_lock);
    if (!g)
        return CUDA_ERROR_ILLEGAL_STATE;
    *pg = g;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamEndCapture(CUstream h, CUgraph *pg)
{
    return end_capture(h, pg, false);
}

EMU_API CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *pg)
{
    return end_capture(h, pg, true);
}

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus *st, bool pt)
{
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    *st = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps,
                             bool pt)
{
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(h, pt, &s);
    if (r)
        return r;
    pthread_mutex_lock(&cuda_lock);
    *st = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (s->capture) {
        if (id)
            *id = s->capture_id;
        if (graph)
            *graph = s->capture;
        /* nodes are chained in the order added: the last one is the only dependency */
        if (deps)
            *deps =
                s->capture->n ? (const CUgraphNode *)&s->capture->nodes[s->capture->n - 1] : NULL;
        if (edges)
            *edges = NULL;
        if (ndeps)
            *ndeps = s->capture->n ? 1 : 0;
    }
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(h, st, id, NULL, NULL, NULL, NULL, false);
}

EMU_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(h, st, id, NULL, NULL, NULL, NULL, true);
}

EMU_API CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                           CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(h, st, id, graph, deps, NULL, ndeps, false);
}

EMU_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus *st,
                                                cuuint64_t *id, CUgraph *graph,
                                                const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(h, st, id, graph, deps, NULL, ndeps, true);
}

EMU_API CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                           CUgraph *graph, const CUgraphNode **deps,
                                           const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(h, st, id, graph, deps, edges, ndeps, false);
}

EMU_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *st,
                                                cuuint64_t *id, CUgraph *graph,
                                                const CUgraphNode **deps,
                                                const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(h, st, id, graph, deps, edges, ndeps, true);
}

/* Capture modes only matter for which calls a capture forbids in other threads; the emulator
 * forbids none, so the mode is kept per thread and handed back. */
static EMU_TLS CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

EMU_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st)
{
    return is_capturing(h, st, false);
}

EMU_API CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *st)
{
    return is_capturing(h, st, true);
}
