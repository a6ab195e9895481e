/* hook-mem.c — device memory accounting: every producer of device memory
 * (plain, pitched, managed, stream-ordered and pool allocations, VMM handles,
 * arrays) reserves its bytes against the quota before the driver is called,
 * rolls back when the driver fails and gives the bytes back on free; and the
 * memory views (cuMemGetInfo, cuDeviceTotalMem) report the quota.
 *
 * Pools: a pool's charge is what it holds, max(live allocations, the pool's
 * own reserved size as the driver reports it), so memory freed into a pool
 * stays charged until the pool trims or gives it back. A driver may grow a
 * pool by more than was asked (its own chunks): that growth must fit the
 * quota too, or the allocation is undone and refused. */
#include "vcuda.h"

#include "cuda_array.h"
#include "log.h"
#include "track.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- devices and the current context ---------------------------------- */

#define MAX_ORDINALS 64
static int ordinal_index[MAX_ORDINALS]; /* region index + 1; 0 = not looked up yet */

static void format_uuid(const CUuuid *u, char *buf, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

int vc_device_uuid(CUdevice dev, char *buf, size_t len)
{
    CUuuid u;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (vc_real.cuDeviceGetUuid_v2)
        r = vc_real.cuDeviceGetUuid_v2(&u, dev);
    else if (vc_real.cuDeviceGetUuid)
        r = vc_real.cuDeviceGetUuid(&u, dev);
    if (r != CUDA_SUCCESS)
        return -ENODEV;
    format_uuid(&u, buf, len);
    return 0;
}

int vc_device_index(CUdevice dev, unsigned *ret_index)
{
    if (dev < 0)
        return -EINVAL;
    if (vc.cfg.device_count == 0) {
        if ((unsigned)dev >= VC_REGION_DEVICES)
            return -ERANGE;
        *ret_index = (unsigned)dev;
        return 0;
    }
    if (dev >= MAX_ORDINALS) {
        *ret_index = VC_DEVICE_UNASSIGNED;
        return 0;
    }
    int cached = __atomic_load_n(&ordinal_index[dev], __ATOMIC_RELAXED);
    if (VC_LIKELY(cached > 0)) {
        *ret_index = (unsigned)(cached - 1);
        return 0;
    }
    /* Look the ordinal's UUID up in the configured list (once per ordinal). A device the
     * list does not name was not assigned to this container (a runtime that exposes every
     * GPU, NVIDIA_VISIBLE_DEVICES=all): its quota is 0, whatever memory_limit says (issue 22,
     * F4). So is one whose UUID cannot be read. */
    unsigned index = VC_DEVICE_UNASSIGNED;
    char s[64];
    if (vc_device_uuid(dev, s, sizeof(s)) == 0) {
        for (int i = 0; i < vc.cfg.device_count; i++)
            if (strcasecmp(vc.cfg.device_uuid[i], s) == 0)
                index = (unsigned)i;
        if (index == VC_DEVICE_UNASSIGNED)
            log_warn("device %d (%s) is not assigned to this container (its config lists %d "
                     "device(s)): no memory and no context on it",
                     dev, s, vc.cfg.device_count);
    } else {
        log_warn("device %d: its UUID cannot be read, so it cannot be matched to the configured "
                 "devices: no memory and no context on it",
                 dev);
    }
    __atomic_store_n(&ordinal_index[dev], (int)index + 1, __ATOMIC_RELAXED);
    *ret_index = index;
    return 0;
}

/* Contexts are few and change rarely: cache the last one per thread. A
 * destroyed context bumps ctx_generation so a recycled handle is looked up
 * again. */
static atomic_uint ctx_generation = 1;
static __thread struct {
    CUcontext ctx;
    unsigned gen;
    unsigned index;
    CUdevice dev;
} cur_cache;

static CUresult current_full(CUcontext *ret_ctx, CUdevice *ret_dev, unsigned *ret_index)
{
    CUcontext ctx = NULL;
    if (!vc_real.cuCtxGetCurrent || !vc_real.cuCtxGetDevice)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = vc_real.cuCtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    unsigned gen = atomic_load_explicit(&ctx_generation, memory_order_acquire);
    if (VC_LIKELY(cur_cache.ctx == ctx && cur_cache.gen == gen)) {
        *ret_ctx = ctx;
        *ret_dev = cur_cache.dev;
        *ret_index = cur_cache.index;
        return CUDA_SUCCESS;
    }
    CUdevice dev;
    r = vc_real.cuCtxGetDevice(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned index;
    if (vc_device_index(dev, &index) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    cur_cache.ctx = ctx;
    cur_cache.gen = gen;
    cur_cache.index = index;
    cur_cache.dev = dev;
    *ret_ctx = ctx;
    *ret_dev = dev;
    *ret_index = index;
    return CUDA_SUCCESS;
}

CUresult vc_current(CUcontext *ret_ctx, unsigned *ret_index)
{
    CUdevice dev;
    return current_full(ret_ctx, &dev, ret_index);
}

/* ---- reservations -------------------------------------------------------- */

int vc_mem_reserve(unsigned index, uint64_t bytes)
{
    if (VC_UNLIKELY(vc.fail_closed || vc.slot < 0 || index == VC_DEVICE_UNASSIGNED))
        return -EPERM;
    uint64_t limit = vc.cfg.memory_limit;
    if (VC_LIKELY(vc_region_reserve(&vc.region, vc.slot, index, bytes, limit) == 0))
        return 0;
    /* Before saying no: dead processes and pools that shrank give back. */
    int reaped = vc_region_reap(&vc.region);
    vc_pools_refresh();
    (void)reaped;
    return vc_region_reserve(&vc.region, vc.slot, index, bytes, limit);
}

void vc_mem_release(unsigned index, uint64_t bytes)
{
    vc_region_release(&vc.region, vc.slot, index, bytes);
}

CUresult vc_mem_oom(unsigned index, uint64_t bytes, const char *what)
{
    char req[32], used[32], quota[32];
    if (vc.fail_closed || vc.slot < 0) {
        log_error("%s: denied %s on device %u: no usable quota configuration (see earlier error)",
                  what, format_bytes(bytes, req, sizeof(req)), index);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (index == VC_DEVICE_UNASSIGNED) {
        log_warn("%s: denied %s: the device is not assigned to this container (quota 0)", what,
                 format_bytes(bytes, req, sizeof(req)));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    log_warn("%s: out of memory: request %s on device %u, container uses %s of its %s quota", what,
             format_bytes(bytes, req, sizeof(req)), index,
             format_bytes(vc_region_used(&vc.region, index), used, sizeof(used)),
             format_bytes(vc.cfg.memory_limit, quota, sizeof(quota)));
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static void release_entry(const struct vc_track_entry *e, void *u);

/* ---- pools ------------------------------------------------------------- */

#define MAX_POOLS 64
struct pool_rec {
    CUmemoryPool pool; /* NULL = free record */
    unsigned index;
    uint64_t charge; /* bytes reserved in the region for this pool */
    uint64_t live;   /* bytes of allocations from it not yet freed (incl. in flight) */
    unsigned busy;   /* allocations between their reservation and pool_settle */
};
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER; /* VMM reference counts */
static struct pool_rec pools[MAX_POOLS];
static int pool_records; /* records in use (pool_lock; read relaxed by the synchronizations) */

static struct pool_rec *pool_find_locked(CUmemoryPool pool, unsigned index, bool create)
{
    struct pool_rec *empty = NULL;
    for (int i = 0; i < MAX_POOLS; i++) {
        if (pools[i].pool == pool)
            return &pools[i];
        if (!pools[i].pool && !empty)
            empty = &pools[i];
    }
    if (!create || !empty)
        return NULL;
    __atomic_add_fetch(&pool_records, 1, __ATOMIC_RELAXED);
    empty->pool = pool;
    empty->index = index;
    empty->charge = 0;
    empty->live = 0;
    empty->busy = 0;
    return empty;
}

/* Makes a pool's charge max(live, held) where held is what the driver says the pool holds now
 * (unknown → live). Growth past the charge is reserved against the quota; when it does not fit,
 * strict (an allocation settling what it made the pool take) leaves the charge alone and fails
 * with -ENOSPC, for the caller to undo. Otherwise (a free, a trim, a view) growth that no
 * allocation is settling is charged as it is, since the driver already holds it; while one is,
 * it is left to that allocation. */
static int pool_settle(CUmemoryPool pool, bool strict)
{
    uint64_t held = 0;
    bool known = vc_real.cuMemPoolGetAttribute &&
                 vc_real.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &held) ==
                     CUDA_SUCCESS;
    int r = 0;
    pthread_mutex_lock(&pool_lock);
    struct pool_rec *p = pool_find_locked(pool, 0, false);
    if (p) {
        uint64_t target = p->live;
        if (known && held > target)
            target = held;
        if (target > p->charge) {
            uint64_t more = target - p->charge;
            if (vc_region_reserve(&vc.region, vc.slot, p->index, more, vc.cfg.memory_limit) == 0)
                p->charge = target;
            else if (strict || p->busy)
                r = -ENOSPC;
            else {
                vc_region_charge(&vc.region, vc.slot, p->index, more);
                p->charge = target;
            }
        } else if (target < p->charge) {
            vc_region_release(&vc.region, vc.slot, p->index, p->charge - target);
            p->charge = target;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    return r;
}

static void pool_reconcile(CUmemoryPool pool)
{
    (void)pool_settle(pool, false);
}

void vc_pools_refresh(void)
{
    vc_graph_refresh(); /* graph memory too: it is pool memory of the graphs' own */
    CUmemoryPool list[MAX_POOLS];
    int n = 0;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i].pool && pools[i].charge > pools[i].live)
            list[n++] = pools[i].pool;
    pthread_mutex_unlock(&pool_lock);
    for (int i = 0; i < n; i++)
        pool_reconcile(list[i]);
}

/* Reserves what an allocation of size from pool needs beyond the pool's
 * current charge (which it was before: *ret_before), and marks an allocation
 * in flight until pool_alloc_done. 0, -ENOSPC, or -EMFILE when the pool cannot
 * be tracked (then the caller accounts the allocation on its own). */
static int pool_alloc_begin(CUmemoryPool pool, unsigned index, uint64_t size, uint64_t *ret_before)
{
    pthread_mutex_lock(&pool_lock);
    struct pool_rec *p = pool_find_locked(pool, index, true);
    if (!p) {
        pthread_mutex_unlock(&pool_lock);
        return -EMFILE;
    }
    *ret_before = p->charge;
    uint64_t want = p->live + size;
    if (want > p->charge) {
        uint64_t need = want - p->charge;
        int r = vc_region_reserve(&vc.region, vc.slot, p->index, need, vc.cfg.memory_limit);
        if (r < 0) {
            pthread_mutex_unlock(&pool_lock);
            return r;
        }
        p->charge += need;
    }
    p->live += size;
    p->busy++;
    pthread_mutex_unlock(&pool_lock);
    return 0;
}

static void pool_alloc_done(CUmemoryPool pool)
{
    pthread_mutex_lock(&pool_lock);
    struct pool_rec *p = pool_find_locked(pool, 0, false);
    if (p && p->busy)
        p->busy--;
    pthread_mutex_unlock(&pool_lock);
}

static void pool_alloc_end(CUmemoryPool pool, uint64_t size)
{
    pthread_mutex_lock(&pool_lock);
    struct pool_rec *p = pool_find_locked(pool, 0, false);
    if (p)
        p->live = p->live > size ? p->live - size : 0;
    pthread_mutex_unlock(&pool_lock);
}

static void pool_forget(CUmemoryPool pool)
{
    pthread_mutex_lock(&pool_lock);
    struct pool_rec *p = pool_find_locked(pool, 0, false);
    if (p) {
        vc_region_release(&vc.region, vc.slot, p->index, p->charge);
        memset(p, 0, sizeof(*p));
        __atomic_sub_fetch(&pool_records, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&pool_lock);
}

void vc_mem_atfork_child(void)
{
    pthread_mutex_init(&pool_lock, NULL);
    pthread_mutex_init(&vmm_lock, NULL);
    memset(pools, 0, sizeof(pools));
    pool_records = 0;
    memset(ordinal_index, 0, sizeof(ordinal_index));
    vc_managed_atfork_child();
}

/* ---- tracking helpers --------------------------------------------------- */

static void release_entry(const struct vc_track_entry *e, void *u)
{
    (void)u;
    if (e->pool) {
        pool_alloc_end((CUmemoryPool)(uintptr_t)e->pool, e->size);
        pool_reconcile((CUmemoryPool)(uintptr_t)e->pool);
    } else {
        vc_mem_release(e->dev, e->size);
    }
}

static void track(uint32_t kind, uint64_t key, uint64_t size, unsigned index, CUcontext ctx,
                  CUmemoryPool pool)
{
    struct vc_track_entry e = {
        .key = key,
        .size = size,
        .ctx = (uint64_t)(uintptr_t)ctx,
        .pool = (uint64_t)(uintptr_t)pool,
        .kind = kind,
        .dev = index,
    };
    if (vc_track_put(&e) < 0) {
        /* Cannot remember it (no memory, or the driver reused a live handle
         * we missed the free of): keep it charged rather than undercount. */
        log_warn("cannot track a device allocation; its %" PRIu64 " bytes stay charged", size);
    }
}

/* Frees go in three steps: take the entry out of the table before the driver
 * frees (so a new allocation that reuses the address at once can be
 * recorded), call the driver, then give the bytes back only if the driver
 * freed (else put the entry back). The quota never sees the bytes free while
 * the driver still holds them. */
struct pending_free {
    struct vc_track_entry e;
    bool had;
};

static struct pending_free free_begin(uint32_t kind, uint64_t key)
{
    struct pending_free f = {.had = false};
    if (key)
        f.had = vc_track_take(kind, key, &f.e) == 0;
    return f;
}

static CUresult free_end(struct pending_free *f, CUresult r)
{
    if (f->had) {
        if (r == CUDA_SUCCESS)
            release_entry(&f->e, NULL);
        else
            vc_track_put(&f->e);
    }
    return r;
}

void vc_ctx_gone(CUcontext ctx)
{
    atomic_fetch_add_explicit(&ctx_generation, 1, memory_order_acq_rel);
    vc_track_take_ctx((uint64_t)(uintptr_t)ctx, release_entry, NULL);
    vc_managed_ctx_gone(ctx);
}

/* ---- plain, pitched and managed allocations ---------------------------- */

/* The driver hands out device memory in units of at least 512 bytes (its
 * allocation alignment), so that is what an allocation costs at least:
 * otherwise many tiny allocations would hold far more than they are charged. */
#define ALLOC_UNIT 512ull
static inline uint64_t round_alloc(uint64_t n)
{
    return n > UINT64_MAX - (ALLOC_UNIT - 1) ? UINT64_MAX
                                             : (n + ALLOC_UNIT - 1) / ALLOC_UNIT * ALLOC_UNIT;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    VC_PREAMBLE(cuMemAlloc_v2);
    CUcontext ctx;
    unsigned index;
    if (bytesize == 0 || vc_current(&ctx, &index) != CUDA_SUCCESS)
        return vc_real.cuMemAlloc_v2(dptr, bytesize); /* the driver reports the error */
    uint64_t charge = round_alloc(bytesize);
    if (vc_mem_reserve(index, charge) < 0)
        return vc_mem_oom(index, charge, "cuMemAlloc");
    CUresult r = vc_real.cuMemAlloc_v2(dptr, bytesize);
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, charge);
        return r;
    }
    track(VC_TRACK_DPTR, *dptr, charge, index, ctx, NULL);
    return r;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    VC_PREAMBLE(cuMemAlloc);
    CUcontext ctx;
    unsigned index;
    if (bytesize == 0 || vc_current(&ctx, &index) != CUDA_SUCCESS)
        return vc_real.cuMemAlloc(dptr, bytesize);
    uint64_t charge = round_alloc(bytesize);
    if (vc_mem_reserve(index, charge) < 0)
        return vc_mem_oom(index, charge, "cuMemAlloc");
    CUresult r = vc_real.cuMemAlloc(dptr, bytesize);
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, charge);
        return r;
    }
    track(VC_TRACK_DPTR, *dptr, charge, index, ctx, NULL);
    return r;
}

/* Managed memory is charged for what is on the device (hook-managed.c): nothing here where
 * the device migrates pages on demand (CONCURRENT_MANAGED_ACCESS). Where it does not (older
 * GPUs, where the driver places managed memory on the device at allocation), or when the
 * allocation cannot be tracked, it is charged in full at allocation. */
static bool migrates_on_demand(CUdevice *ret_dev)
{
    int v = 0;
    return vc_real.cuCtxGetDevice && vc_real.cuCtxGetDevice(ret_dev) == CUDA_SUCCESS &&
           vc_real.cuDeviceGetAttribute &&
           vc_real.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
                                        *ret_dev) == CUDA_SUCCESS &&
           v == 1;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    VC_PREAMBLE(cuMemAllocManaged);
    CUcontext ctx;
    unsigned index;
    CUdevice dev;
    if (bytesize == 0 || vc_current(&ctx, &index) != CUDA_SUCCESS)
        return vc_real.cuMemAllocManaged(dptr, bytesize, flags);
    if (migrates_on_demand(&dev)) {
        CUresult r = vc_real.cuMemAllocManaged(dptr, bytesize, flags);
        if (r != CUDA_SUCCESS || vc_managed_track(*dptr, bytesize, ctx, dev, index))
            return r;
        /* cannot follow its pages: charged in full, as below */
        uint64_t charge = round_alloc(bytesize);
        if (vc_mem_reserve(index, charge) < 0) {
            vc_real.cuMemFree_v2(*dptr);
            return vc_mem_oom(index, charge, "cuMemAllocManaged");
        }
        track(VC_TRACK_DPTR, *dptr, charge, index, ctx, NULL);
        return r;
    }
    uint64_t charge = round_alloc(bytesize);
    if (vc_mem_reserve(index, charge) < 0)
        return vc_mem_oom(index, charge, "cuMemAllocManaged");
    CUresult r = vc_real.cuMemAllocManaged(dptr, bytesize, flags);
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, charge);
        return r;
    }
    track(VC_TRACK_DPTR, *dptr, charge, index, ctx, NULL);
    return r;
}

/* The driver picks the pitch; reserve with the usual 512-byte alignment and
 * settle on the real pitch * height afterwards (more: reserve the rest or
 * undo; less: give back). */
#define PITCH_GUESS 512u

static int pitch_settle(unsigned index, uint64_t reserved, uint64_t actual)
{
    if (actual > reserved)
        return vc_mem_reserve(index, actual - reserved);
    vc_mem_release(index, reserved - actual);
    return 0;
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    VC_PREAMBLE(cuMemAllocPitch_v2);
    CUcontext ctx;
    unsigned index;
    uint64_t guess;
    if (WidthInBytes == 0 || Height == 0 || vc_current(&ctx, &index) != CUDA_SUCCESS ||
        __builtin_mul_overflow((WidthInBytes + PITCH_GUESS - 1) / PITCH_GUESS * PITCH_GUESS, Height,
                               &guess))
        return vc_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (vc_mem_reserve(index, guess) < 0)
        return vc_mem_oom(index, guess, "cuMemAllocPitch");
    CUresult r = vc_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, guess);
        return r;
    }
    uint64_t actual = (uint64_t)*pPitch * Height;
    if (pitch_settle(index, guess, actual) < 0) {
        vc_real.cuMemFree_v2(*dptr);
        vc_mem_release(index, guess);
        return vc_mem_oom(index, actual, "cuMemAllocPitch");
    }
    track(VC_TRACK_DPTR, *dptr, actual, index, ctx, NULL);
    return r;
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                 unsigned int WidthInBytes, unsigned int Height,
                                 unsigned int ElementSizeBytes)
{
    VC_PREAMBLE(cuMemAllocPitch);
    CUcontext ctx;
    unsigned index;
    uint64_t guess =
        (uint64_t)((WidthInBytes + PITCH_GUESS - 1) / PITCH_GUESS * PITCH_GUESS) * Height;
    if (WidthInBytes == 0 || Height == 0 || vc_current(&ctx, &index) != CUDA_SUCCESS)
        return vc_real.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (vc_mem_reserve(index, guess) < 0)
        return vc_mem_oom(index, guess, "cuMemAllocPitch");
    CUresult r = vc_real.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, guess);
        return r;
    }
    uint64_t actual = (uint64_t)*pPitch * Height;
    if (pitch_settle(index, guess, actual) < 0) {
        if (vc_real.cuMemFree)
            vc_real.cuMemFree(*dptr);
        vc_mem_release(index, guess);
        return vc_mem_oom(index, actual, "cuMemAllocPitch");
    }
    track(VC_TRACK_DPTR, *dptr, actual, index, ctx, NULL);
    return r;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    VC_PREAMBLE(cuMemFree_v2);
    struct managed *m = vc_managed_take(dptr);
    if (m)
        return vc_managed_free_end(m, vc_real.cuMemFree_v2(dptr));
    struct pending_free pf = free_begin(VC_TRACK_DPTR, dptr);
    return free_end(&pf, vc_real.cuMemFree_v2(dptr));
}

CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr)
{
    VC_PREAMBLE(cuMemFree);
    struct managed *m = vc_managed_take(dptr);
    if (m)
        return vc_managed_free_end(m, vc_real.cuMemFree(dptr));
    struct pending_free pf = free_begin(VC_TRACK_DPTR, dptr);
    return free_end(&pf, vc_real.cuMemFree(dptr));
}

/* ---- stream-ordered allocations and pools -------------------------------- */

typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*alloc_pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);

/* An allocation whose pool growth did not fit: free it on its stream, wait until the free has
 * happened (the driver cannot give back memory whose free it has not seen complete: CUDA driver
 * API, cuMemPoolTrimTo), and trim the pool back to what it was charged before. Not waited for on
 * a stream being captured (a synchronize would end the capture): there the pool keeps what it
 * took, charged, until it trims. */
static void pool_undo(CUmemoryPool pool, uint64_t keep, CUdeviceptr dptr, uint64_t charged,
                      CUstream stream, bool ptsz)
{
    struct pending_free pf = free_begin(VC_TRACK_DPTR, dptr);
    CUresult r =
        ptsz ? vc_real.cuMemFreeAsync_ptsz(dptr, stream) : vc_real.cuMemFreeAsync(dptr, stream);
    if (r == CUDA_SUCCESS) {
        CUstream s = ptsz && !stream ? CU_STREAM_PER_THREAD : stream;
        CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        if (vc_real.cuStreamIsCapturing && vc_real.cuStreamIsCapturing(s, &cap) == CUDA_SUCCESS &&
            cap == CU_STREAM_CAPTURE_STATUS_NONE && vc_real.cuStreamSynchronize &&
            vc_real.cuStreamSynchronize(s) == CUDA_SUCCESS && vc_real.cuMemPoolTrimTo)
            vc_real.cuMemPoolTrimTo(pool, keep);
    }
    pool_alloc_done(pool);
    if (!pf.had && r == CUDA_SUCCESS) { /* never tracked (track() warned) */
        pool_alloc_end(pool, charged);
        pool_reconcile(pool);
    }
    free_end(&pf, r); /* gives the allocation back and settles the pool on what it still holds */
}

static CUresult alloc_stream_ordered(alloc_async_fn fa, alloc_pool_fn fp, bool ptsz,
                                     CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                     CUstream stream)
{
    CUcontext ctx;
    CUdevice dev;
    unsigned index;
    const char *what = fa ? "cuMemAllocAsync" : "cuMemAllocFromPoolAsync";
    if (size == 0 || current_full(&ctx, &dev, &index) != CUDA_SUCCESS)
        return fa ? fa(dptr, size, stream) : fp(dptr, size, pool, stream);
    /* Captured, it is an allocation node of the graph: an address now, memory only when the
     * graph is launched, charged then (hook-graph.c). Nothing to charge or track here. */
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    CUstream s = ptsz && !stream ? CU_STREAM_PER_THREAD : stream;
    if (vc_real.cuStreamIsCapturing && vc_real.cuStreamIsCapturing(s, &cap) == CUDA_SUCCESS &&
        cap == CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return fa ? fa(dptr, size, stream) : fp(dptr, size, pool, stream);
    if (!pool && vc_real.cuDeviceGetMemPool &&
        vc_real.cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS)
        pool = NULL;
    /* A pool grows by whole 512-byte units at least: charge those. */
    uint64_t units = ((uint64_t)size + 511) / 512 * 512, before = 0;
    int rr = pool ? pool_alloc_begin(pool, index, units, &before) : -EMFILE;
    if (rr == -ENOSPC) {
        vc_region_reap(&vc.region);
        vc_pools_refresh();
        rr = pool_alloc_begin(pool, index, units, &before);
    }
    if (rr == -EMFILE) {
        /* Untracked pool: account the allocation on its own. */
        pool = NULL;
        rr = vc_mem_reserve(index, size);
    }
    if (rr < 0)
        return vc_mem_oom(index, size, what);
    uint64_t charged = pool ? units : size;
    CUresult r = fa ? fa(dptr, size, stream) : fp(dptr, size, pool, stream);
    if (r != CUDA_SUCCESS) {
        if (pool) {
            pool_alloc_end(pool, charged);
            pool_alloc_done(pool);
            pool_reconcile(pool);
        } else {
            vc_mem_release(index, charged);
        }
        return r;
    }
    /* Stream-ordered memory belongs to its pool, not to the context. */
    track(VC_TRACK_DPTR, *dptr, charged, index, NULL, pool);
    if (!pool)
        return r;
    /* What the pool took for it (the driver's chunks, maybe more than asked) must fit too. */
    if (pool_settle(pool, true) < 0) {
        vc_region_reap(&vc.region);
        vc_pools_refresh();
        if (pool_settle(pool, true) < 0) {
            pool_undo(pool, before, *dptr, charged, stream, ptsz);
            *dptr = 0;
            return vc_mem_oom(index, size, what);
        }
    }
    pool_alloc_done(pool);
    return r;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    VC_PREAMBLE(cuMemAllocAsync);
    return alloc_stream_ordered(vc_real.cuMemAllocAsync, NULL, false, dptr, bytesize, NULL,
                                hStream);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    VC_PREAMBLE(cuMemAllocAsync_ptsz);
    return alloc_stream_ordered(vc_real.cuMemAllocAsync_ptsz, NULL, true, dptr, bytesize, NULL,
                                hStream);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{
    VC_PREAMBLE(cuMemAllocFromPoolAsync);
    if (!pool)
        return vc_real.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
    return alloc_stream_ordered(NULL, vc_real.cuMemAllocFromPoolAsync, false, dptr, bytesize, pool,
                                hStream);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream)
{
    VC_PREAMBLE(cuMemAllocFromPoolAsync_ptsz);
    if (!pool)
        return vc_real.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream);
    return alloc_stream_ordered(NULL, vc_real.cuMemAllocFromPoolAsync_ptsz, true, dptr, bytesize,
                                pool, hStream);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    VC_PREAMBLE(cuMemFreeAsync);
    struct pending_free pf = free_begin(VC_TRACK_DPTR, dptr);
    return free_end(&pf, vc_real.cuMemFreeAsync(dptr, hStream));
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    VC_PREAMBLE(cuMemFreeAsync_ptsz);
    struct pending_free pf = free_begin(VC_TRACK_DPTR, dptr);
    return free_end(&pf, vc_real.cuMemFreeAsync_ptsz(dptr, hStream));
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    VC_PREAMBLE(cuMemPoolCreate);
    CUresult r = vc_real.cuMemPoolCreate(pool, poolProps);
    unsigned index;
    if (r == CUDA_SUCCESS && poolProps && poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
        vc_device_index(poolProps->location.id, &index) == 0) {
        pthread_mutex_lock(&pool_lock);
        pool_find_locked(*pool, index, true);
        pthread_mutex_unlock(&pool_lock);
    }
    return r;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
    VC_PREAMBLE(cuMemPoolDestroy);
    CUresult r = vc_real.cuMemPoolDestroy(pool);
    if (r == CUDA_SUCCESS)
        pool_forget(pool);
    return r;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    VC_PREAMBLE(cuMemPoolTrimTo);
    CUresult r = vc_real.cuMemPoolTrimTo(pool, minBytesToKeep);
    if (r == CUDA_SUCCESS)
        pool_reconcile(pool);
    return r;
}

/* A synchronization is where a pool holding more than its release threshold gives memory back
 * to the driver ("the allocator will try to release memory back to the OS on the next call to
 * stream, event or context synchronize": CU_MEMPOOL_ATTR_RELEASE_THRESHOLD): after one, the
 * pools that hold more than their live allocations are settled on what they still hold, so the
 * quota (and the container's other processes) get it back at once. A process without pools
 * pays one relaxed load. */
static inline CUresult synced(CUresult r)
{
    if (r == CUDA_SUCCESS && __atomic_load_n(&pool_records, __ATOMIC_RELAXED) > 0)
        vc_pools_refresh();
    return r;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    VC_NEED_REAL(cuStreamSynchronize); /* no setup of ours: nothing here is charged */
    return synced(vc_real.cuStreamSynchronize(hStream));
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    VC_NEED_REAL(cuStreamSynchronize_ptsz); /* no setup of ours: nothing here is charged */
    return synced(vc_real.cuStreamSynchronize_ptsz(hStream));
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    VC_NEED_REAL(cuEventSynchronize); /* no setup of ours: nothing here is charged */
    return synced(vc_real.cuEventSynchronize(hEvent));
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    VC_NEED_REAL(cuCtxSynchronize); /* no setup of ours: nothing here is charged */
    return synced(vc_real.cuCtxSynchronize());
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    VC_NEED_REAL(cuCtxSynchronize_v2); /* no setup of ours: nothing here is charged */
    return synced(vc_real.cuCtxSynchronize_v2(ctx));
}

/* ---- virtual memory management ----------------------------------------- */

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    VC_PREAMBLE(cuMemCreate);
    unsigned index;
    /* Only device-located memory is charged (host/NUMA locations are not GPU memory). */
    if (size == 0 || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        vc_device_index(prop->location.id, &index) < 0)
        return vc_real.cuMemCreate(handle, size, prop, flags);
    if (vc_mem_reserve(index, size) < 0)
        return vc_mem_oom(index, size, "cuMemCreate");
    CUresult r = vc_real.cuMemCreate(handle, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, size);
        return r;
    }
    struct vc_track_entry e = {
        .key = *handle, .size = size, .kind = VC_TRACK_VMM, .dev = index, .link = 1};
    if (vc_track_put(&e) < 0)
        log_warn("cannot track a VMM handle; its %zu bytes stay charged", size);
    return r;
}

/* VMM memory lives until its last reference is gone. NVIDIA's driver API
 * reference (Virtual Memory Management, cuMemRelease and cuMemUnmap,
 * https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html) says the
 * allocation is freed only once every mapping of it is unmapped and every
 * reference to the handle, shared ones included, is released; a handle may be
 * released while mappings made with it remain. So the charge follows the same
 * count: +1 at create, map and retain, -1 at release and unmap, given back at
 * 0. Handles we never charged (imported, host) have no record and are left
 * alone. */
/* Adds delta to handle's references; at 0 the bytes go back. Call after the
 * driver succeeded. */
static void vmm_ref(uint64_t handle, int delta)
{
    struct vc_track_entry e;
    pthread_mutex_lock(&vmm_lock);
    if (vc_track_take(VC_TRACK_VMM, handle, &e) == 0) {
        e.link = delta < 0 && e.link < (uint64_t)-delta ? 0 : e.link + (uint64_t)(int64_t)delta;
        if (e.link == 0)
            vc_mem_release(e.dev, e.size);
        else
            vc_track_put(&e);
    }
    pthread_mutex_unlock(&vmm_lock);
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    VC_PREAMBLE(cuMemRelease);
    CUresult r = vc_real.cuMemRelease(handle);
    if (r == CUDA_SUCCESS)
        vmm_ref(handle, -1);
    return r;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    VC_PREAMBLE(cuMemRetainAllocationHandle);
    CUresult r = vc_real.cuMemRetainAllocationHandle(handle, addr);
    if (r == CUDA_SUCCESS && handle)
        vmm_ref(*handle, +1);
    return r;
}

/* Sharing VMM memory through a shareable handle (issue 22, F5c). The driver frees an allocation
 * only when "all outstanding references to the handle (including its shareable counterparts)"
 * are released (cuMemRelease), so an exported file descriptor, and every copy of it in this or
 * another process, keeps the memory; libvcuda cannot count those copies. So:
 *  - an allocation this process created and exported stays charged to it until it exits
 *    (one reference never given back);
 *  - an imported handle is charged like a creation while it holds memory: what its mappings
 *    reach (the driver tells no import's size), reserved before each cuMemMap that reaches
 *    further, refused with CUDA_ERROR_OUT_OF_MEMORY when it does not fit, given back with the
 *    last reference (the handle and its mappings), on the device the driver says the memory
 *    is on.
 * Memory shared between two processes, or imported back into its own exporter, is therefore
 * counted by each holder: the evidence that another holder is charged would live in the
 * writable region, where a tenant could forge it (docs/vcuda.md, "What is charged"). */
CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    VC_PREAMBLE(cuMemExportToShareableHandle);
    CUresult r = vc_real.cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
    if (r != CUDA_SUCCESS)
        return r;
    struct vc_track_entry e;
    pthread_mutex_lock(&vmm_lock);
    if (vc_track_take(VC_TRACK_VMM, handle, &e) == 0) {
        if (!(e.flags & VC_TRACK_VMM_EXPORTED)) {
            e.flags |= VC_TRACK_VMM_EXPORTED;
            e.link++;
        }
        vc_track_put(&e);
    }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    VC_PREAMBLE(cuMemImportFromShareableHandle);
    CUresult r = vc_real.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
    if (r != CUDA_SUCCESS || !handle)
        return r;
    /* Where the memory is: the driver's answer; else the current context's device. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    unsigned index;
    CUcontext ctx;
    if (vc_real.cuMemGetAllocationPropertiesFromHandle &&
        vc_real.cuMemGetAllocationPropertiesFromHandle(&prop, *handle) == CUDA_SUCCESS) {
        if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return r; /* host memory: not charged */
        if (vc_device_index(prop.location.id, &index) < 0)
            return r;
    } else if (vc_current(&ctx, &index) != CUDA_SUCCESS) {
        index = 0;
    }
    struct vc_track_entry e = {.key = *handle,
                               .kind = VC_TRACK_VMM,
                               .dev = index,
                               .link = 1,
                               .flags = VC_TRACK_VMM_IMPORTED};
    pthread_mutex_lock(&vmm_lock);
    struct vc_track_entry old;
    if (vc_track_take(VC_TRACK_VMM, *handle, &old) == 0) {
        /* the driver handed out a handle this process already holds: one more reference */
        old.link++;
        e = old;
    }
    if (vc_track_put(&e) < 0)
        log_warn("cannot track an imported VMM handle; mapping it is refused");
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

/* Before a mapping of an imported handle: charges what the mapping reaches beyond what the
 * import is already charged for. 0, or -ENOSPC when that does not fit the quota (nothing
 * charged). A handle we do not track, or one made by cuMemCreate (charged in full), needs
 * nothing. */
static int vmm_import_reach(CUmemGenericAllocationHandle handle, uint64_t end)
{
    struct vc_track_entry h;
    pthread_mutex_lock(&vmm_lock);
    bool imported = vc_track_take(VC_TRACK_VMM, handle, &h) == 0;
    if (imported)
        vc_track_put(&h);
    pthread_mutex_unlock(&vmm_lock);
    if (!imported || !(h.flags & VC_TRACK_VMM_IMPORTED) || end <= h.size)
        return 0;
    /* Reserved outside the lock (a refusal first reaps and refreshes pools: driver calls),
     * then committed: only what the import does not reach by now is kept, so two threads
     * mapping one import at once charge its reach once. */
    uint64_t want = end - h.size;
    if (vc_mem_reserve(h.dev, want) < 0)
        return -ENOSPC;
    uint64_t keep = 0;
    pthread_mutex_lock(&vmm_lock);
    if (vc_track_take(VC_TRACK_VMM, handle, &h) == 0) {
        if (end > h.size) {
            keep = end - h.size;
            h.size = end;
        }
        vc_track_put(&h);
    }
    pthread_mutex_unlock(&vmm_lock);
    if (keep < want)
        vc_mem_release(h.dev, want - keep);
    return 0;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    VC_PREAMBLE(cuMemMap);
    if (vmm_import_reach(handle, (uint64_t)offset + size) < 0) {
        struct vc_track_entry h = {.dev = 0};
        pthread_mutex_lock(&vmm_lock);
        if (vc_track_take(VC_TRACK_VMM, handle, &h) == 0)
            vc_track_put(&h);
        pthread_mutex_unlock(&vmm_lock);
        return vc_mem_oom(h.dev, size, "cuMemMap (imported memory)");
    }
    /* A mapping the driver refuses keeps what it reserved: the import's reach only grows (a
     * concurrent mapping may rely on it), and is given back with the handle. */
    CUresult r = vc_real.cuMemMap(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS)
        return r;
    struct vc_track_entry m = {.key = ptr, .size = size, .kind = VC_TRACK_VMM_MAP, .link = handle};
    pthread_mutex_lock(&vmm_lock);
    struct vc_track_entry h;
    bool charged = vc_track_take(VC_TRACK_VMM, handle, &h) == 0;
    if (charged) {
        h.link++;
        vc_track_put(&h);
        if (vc_track_put(&m) < 0)
            log_warn("cannot track a VMM mapping; its memory stays charged");
    }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    VC_PREAMBLE(cuMemUnmap);
    CUresult r = vc_real.cuMemUnmap(ptr, size);
    if (r != CUDA_SUCCESS)
        return r;
    /* One call may unmap several adjacent mappings: walk them by their sizes. */
    CUdeviceptr p = ptr;
    while (p < ptr + size) {
        struct vc_track_entry m;
        pthread_mutex_lock(&vmm_lock);
        int t = vc_track_take(VC_TRACK_VMM_MAP, p, &m);
        pthread_mutex_unlock(&vmm_lock);
        if (t < 0 || m.size == 0)
            break; /* a mapping of memory we never charged */
        vmm_ref(m.link, -1);
        p += m.size;
    }
    return r;
}

/* ---- arrays ------------------------------------------------------------- */

/* What a W x H x D array will take on the device, charged before the driver tells us better:
 * the layout rule the emulator also allocates by (cuda_array.h). 0 on overflow. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, unsigned channels, CUarray_format f)
{
    /* block-compressed and planar formats take at most 4 bytes per element */
    uint64_t elem = gpu_cuda_format_bytes((int)f), bytes = 0;
    if (gpu_cuda_array_bytes(w, h, d, (elem ? elem : 4) * (channels ? channels : 1), NULL, &bytes) <
        0)
        return 0;
    return bytes;
}

/* The driver's own figure for an array, where it has one (CUDA 11.6+:
 * cuArrayGetMemoryRequirements, found through the driver's cuGetProcAddress
 * so no export of ours depends on it). 0 = unknown. */
struct array_req {
    size_t size;
    size_t alignment;
    unsigned int reserved[4];
};
typedef CUresult (*array_req_fn)(struct array_req *, void *, CUdevice);

static uint64_t driver_array_bytes(const char *fn_name, void *array)
{
    static array_req_fn fns[2];
    static atomic_int looked[2];
    int which = strcmp(fn_name, "cuArrayGetMemoryRequirements") == 0 ? 0 : 1;
    if (!atomic_load_explicit(&looked[which], memory_order_acquire)) {
        void *p = NULL;
        if (vc_real.cuGetProcAddress_v2 &&
            vc_real.cuGetProcAddress_v2(fn_name, &p, 11060, 0, NULL) != CUDA_SUCCESS)
            p = NULL;
        fns[which] = (array_req_fn)p;
        atomic_store_explicit(&looked[which], 1, memory_order_release);
    }
    CUdevice dev;
    struct array_req req = {0};
    if (!fns[which] || !vc_real.cuCtxGetDevice || vc_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        fns[which](&req, array, dev) != CUDA_SUCCESS)
        return 0;
    return req.size;
}

static CUresult array_charged(const char *what, uint64_t bytes, CUarray *pHandle,
                              CUresult (*call)(CUarray *, const void *), const void *desc)
{
    CUcontext ctx;
    unsigned index;
    if (bytes == 0 || vc_current(&ctx, &index) != CUDA_SUCCESS)
        return call(pHandle, desc);
    if (vc_mem_reserve(index, bytes) < 0)
        return vc_mem_oom(index, bytes, what);
    CUresult r = call(pHandle, desc);
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, bytes);
        return r;
    }
    uint64_t actual = driver_array_bytes("cuArrayGetMemoryRequirements", *pHandle);
    if (actual && actual != bytes) {
        if (pitch_settle(index, bytes, actual) < 0) {
            vc_real.cuArrayDestroy(*pHandle);
            vc_mem_release(index, bytes);
            return vc_mem_oom(index, actual, what);
        }
        bytes = actual;
    }
    track(VC_TRACK_ARRAY, (uint64_t)(uintptr_t)*pHandle, bytes, index, ctx, NULL);
    return r;
}

static CUresult call_array_v2(CUarray *p, const void *d)
{
    return vc_real.cuArrayCreate_v2(p, d);
}
static CUresult call_array_v1(CUarray *p, const void *d)
{
    return vc_real.cuArrayCreate(p, d);
}
static CUresult call_array3d_v2(CUarray *p, const void *d)
{
    return vc_real.cuArray3DCreate_v2(p, d);
}
static CUresult call_array3d_v1(CUarray *p, const void *d)
{
    return vc_real.cuArray3DCreate(p, d);
}

CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    VC_PREAMBLE(cuArrayCreate_v2);
    uint64_t b = d ? array_bytes(d->Width, d->Height, 1, d->NumChannels, d->Format) : 0;
    return array_charged("cuArrayCreate", b, pHandle, call_array_v2, d);
}

CUresult CUDAAPI cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *d)
{
    VC_PREAMBLE(cuArrayCreate);
    uint64_t b = d ? array_bytes(d->Width, d->Height, 1, d->NumChannels, d->Format) : 0;
    return array_charged("cuArrayCreate", b, pHandle, call_array_v1, d);
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    VC_PREAMBLE(cuArray3DCreate_v2);
    uint64_t b = d ? array_bytes(d->Width, d->Height, d->Depth, d->NumChannels, d->Format) : 0;
    return array_charged("cuArray3DCreate", b, pHandle, call_array3d_v2, d);
}

CUresult CUDAAPI cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
{
    VC_PREAMBLE(cuArray3DCreate);
    uint64_t b = d ? array_bytes(d->Width, d->Height, d->Depth, d->NumChannels, d->Format) : 0;
    return array_charged("cuArray3DCreate", b, pHandle, call_array3d_v1, d);
}

CUresult CUDAAPI cuArrayDestroy(CUarray hArray)
{
    VC_PREAMBLE(cuArrayDestroy);
    struct pending_free pf = free_begin(VC_TRACK_ARRAY, (uint64_t)(uintptr_t)hArray);
    return free_end(&pf, vc_real.cuArrayDestroy(hArray));
}

/* A mipmap chain: each level halves every dimension (down to 1); the depth of
 * a layered or cubemap array is a layer count and does not shrink. */
static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    uint64_t w = d->Width, h = d->Height, dep = d->Depth, total = 0;
    bool layers = d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP);
    for (unsigned l = 0; l < (levels ? levels : 1); l++) {
        uint64_t b = array_bytes(w, h, dep, d->NumChannels, d->Format);
        if (b == 0 || __builtin_add_overflow(total, b, &total))
            return 0;
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        if (!layers)
            dep = dep > 1 ? dep / 2 : dep;
    }
    return total;
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                        unsigned int numMipmapLevels)
{
    VC_PREAMBLE(cuMipmappedArrayCreate);
    CUcontext ctx;
    unsigned index;
    uint64_t bytes = d ? mipmap_bytes(d, numMipmapLevels) : 0;
    if (bytes == 0 || vc_current(&ctx, &index) != CUDA_SUCCESS)
        return vc_real.cuMipmappedArrayCreate(pHandle, d, numMipmapLevels);
    if (vc_mem_reserve(index, bytes) < 0)
        return vc_mem_oom(index, bytes, "cuMipmappedArrayCreate");
    CUresult r = vc_real.cuMipmappedArrayCreate(pHandle, d, numMipmapLevels);
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, bytes);
        return r;
    }
    uint64_t actual = driver_array_bytes("cuMipmappedArrayGetMemoryRequirements", *pHandle);
    if (actual && actual != bytes) {
        if (pitch_settle(index, bytes, actual) < 0) {
            vc_real.cuMipmappedArrayDestroy(*pHandle);
            vc_mem_release(index, bytes);
            return vc_mem_oom(index, actual, "cuMipmappedArrayCreate");
        }
        bytes = actual;
    }
    track(VC_TRACK_MIPMAP, (uint64_t)(uintptr_t)*pHandle, bytes, index, ctx, NULL);
    return r;
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    VC_PREAMBLE(cuMipmappedArrayDestroy);
    struct pending_free pf = free_begin(VC_TRACK_MIPMAP, (uint64_t)(uintptr_t)h);
    return free_end(&pf, vc_real.cuMipmappedArrayDestroy(h));
}

/* ---- views -------------------------------------------------------------- */

void vc_quota_view(unsigned index, uint64_t real_free, uint64_t real_total, uint64_t *ret_free,
                   uint64_t *ret_total, uint64_t *ret_used)
{
    if (index == VC_DEVICE_UNASSIGNED) {
        *ret_free = *ret_total = 0;
        if (ret_used)
            *ret_used = 0;
        return;
    }
    uint64_t limit = vc.cfg.memory_limit;
    uint64_t total = limit && limit < real_total ? limit : real_total;
    /* Views may be polled: look for dead processes at most every 100 ms
     * (each live slot costs a kill(2) and a /proc read). */
    static _Atomic uint64_t last_reap;
    uint64_t now = mono_ns(), last = atomic_load_explicit(&last_reap, memory_order_relaxed);
    if (now - last >= 100000000ull &&
        atomic_compare_exchange_strong_explicit(&last_reap, &last, now, memory_order_relaxed,
                                                memory_order_relaxed))
        vc_region_reap(&vc.region);
    vc_pools_refresh();
    uint64_t used = vc_region_used(&vc.region, index);
    uint64_t free_ = used >= total ? 0 : total - used;
    if (free_ > real_free)
        free_ = real_free;
    *ret_free = free_;
    *ret_total = total;
    if (ret_used)
        *ret_used = used > total ? total : used;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
{
    VC_PREAMBLE(cuMemGetInfo_v2);
    CUresult r = vc_real.cuMemGetInfo_v2(free, total);
    CUcontext ctx;
    unsigned index;
    if (r != CUDA_SUCCESS || !free || !total || !vc.cfg.memory_limit ||
        vc_current(&ctx, &index) != CUDA_SUCCESS)
        return r;
    uint64_t f, t;
    vc_quota_view(index, *free, *total, &f, &t, NULL);
    *free = f;
    *total = t;
    return r;
}

CUresult CUDAAPI cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    VC_PREAMBLE(cuMemGetInfo);
    CUresult r = vc_real.cuMemGetInfo(free, total);
    CUcontext ctx;
    unsigned index;
    if (r != CUDA_SUCCESS || !free || !total || !vc.cfg.memory_limit ||
        vc_current(&ctx, &index) != CUDA_SUCCESS)
        return r;
    uint64_t f, t;
    vc_quota_view(index, *free, *total, &f, &t, NULL);
    *free = f > UINT32_MAX ? UINT32_MAX : (unsigned int)f;
    *total = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
    return r;
}

/* A device's total as the container sees it: the quota where it is below the real total, 0 on
 * a device not assigned to the container. */
static uint64_t quota_total(CUdevice dev, uint64_t real_total)
{
    unsigned index;
    if (vc_device_index(dev, &index) == 0 && index == VC_DEVICE_UNASSIGNED)
        return 0;
    uint64_t limit = vc.cfg.memory_limit;
    return limit && limit < real_total ? limit : real_total;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    VC_PREAMBLE(cuDeviceTotalMem_v2);
    CUresult r = vc_real.cuDeviceTotalMem_v2(bytes, dev);
    if (r == CUDA_SUCCESS && bytes)
        *bytes = (size_t)quota_total(dev, *bytes);
    return r;
}

CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    VC_PREAMBLE(cuDeviceTotalMem);
    CUresult r = vc_real.cuDeviceTotalMem(bytes, dev);
    if (r == CUDA_SUCCESS && bytes)
        *bytes = (unsigned int)quota_total(dev, *bytes);
    return r;
}
