/* cuda_mem.c — emulated libcuda.so.1: device memory and everything that produces or moves it.
 *
 * Device memory is host memory: per process and GPU, one memfd "arena" the size of the GPU,
 * mapped MAP_SHARED | MAP_NORESERVE (pages exist only once written, so an 80 GiB GPU costs no
 * RAM) and carved by a first-fit allocator. Device pointers are plain addresses, so copies
 * really move bytes, and an IPC handle names (pid, memfd, offset) that another process maps
 * through /proc/<pid>/fd. Every device allocation is charged to its GPU and this process in
 * the shared state (state.h) by the 2 MiB pages it occupies (see "Pages" below); host memory is
 * not. VMM handles (cuMemCreate) are memfds of their own, mapped into ranges reserved with
 * PROT_NONE. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_array.h"
#include "cuda_emu.h"

#define ALIGN 512ull         /* cuMemAlloc alignment; also the pitch unit */
#define GRANULE (2ull << 20) /* VMM granularity */
#define ROUND_UP(x, a) (((x) + (a)-1) / (a) * (a))

enum alloc_kind {
    K_DEVICE,
    K_MANAGED,
    K_POOL,      /* handed out by a pool */
    K_POOL_FREE, /* cached by a pool: charged, not valid for the user */
    K_ARRAY,     /* backing of an array / mipmapped array */
    K_HOST,      /* cuMemAllocHost / cuMemHostAlloc */
    K_HOSTREG,   /* cuMemHostRegister */
    K_IPC,       /* opened IPC handle */
    K_VMM,       /* cuMemMap'ed range */
    K_GRAPH,     /* a graph allocation's mapped memory (struct cuda_gm_block) */
};

struct alloc {
    CUdeviceptr ptr;
    uint64_t size;    /* as the program sees it (cuMemGetAddressRange, copy bounds) */
    uint64_t span;    /* arena-carved blocks: bytes carved (size, or whole pages from 2 MiB) */
    uint64_t charged; /* bytes charged to dev in the shared state */
    int dev;
    enum alloc_kind kind;
    struct CUmemPoolHandle_st *pool;
    void *map_base; /* K_IPC: the mapping to munmap (page aligned) */
    size_t map_len;
    struct vmm_handle *vmm;
    struct cuda_gm_block *gm; /* K_GRAPH */
    int prot;                 /* K_VMM: access set by cuMemSetAccess */
    unsigned host_flags;      /* K_HOST: cuMemHostAlloc flags */
    uint64_t id;
    /* The context it was made in, which frees it when destroyed; NULL for what belongs to the
     * device, not to a context (pools' blocks, VMM mappings), as with the driver. */
    struct CUctx_st *ctx;
    void *array;       /* K_ARRAY: the CUarray_st / CUmipmappedArray_st it backs */
    uint8_t *resident; /* K_MANAGED: per 2 MiB page, PG_* bits (on the GPU = charged) */
};

struct extent {
    uint64_t off, len;
};

struct arena {
    int fd;
    uint8_t *base;
    uint64_t size;
    struct extent *free;
    size_t nfree, cap;
    uint32_t *page_refs; /* per GRANULE page: live allocations in it (charged while > 0) */
};

/* A VMM handle. NVIDIA's driver frees an allocation once every mapping is unmapped and every
 * reference to it is released, "including its shareable counterparts" (cuMemRelease, CUDA
 * driver API, Virtual Memory Management). The emulator keeps that within a process: a handle
 * imported from a file descriptor of this process's own allocation (the same memfd) holds
 * that allocation (owner), which stays charged until the import and its mappings are gone
 * too. Not modelled: a descriptor alone keeping the memory (it is uncharged once the handles
 * and mappings are gone), and charges across processes (an import of another process's
 * allocation is charged to its owner only). */
struct vmm_handle {
    uint32_t magic;
    int fd;
    int dev;
    uint64_t size;
    uint64_t charged;
    int maps;
    bool released;
    dev_t st_dev; /* the memfd, to know an import of this process's own allocation */
    ino_t st_ino;
    struct vmm_handle *owner; /* an import of our own allocation: that allocation */
    unsigned holders;         /* imports holding this allocation */
    struct vmm_handle *next;  /* every live handle of the process */
};
#define VMM_MAGIC 0x564d4d31u

struct reservation {
    CUdeviceptr base;
    uint64_t size;
    void *map;
    size_t map_len;
};

static struct arena arenas[EMU_MAX_GPUS];
static struct alloc **allocs;
static size_t nallocs, allocs_cap;
static uint64_t next_id = 1;
static struct reservation *resv;
static size_t nresv;
static struct CUmemPoolHandle_st *default_pool[EMU_MAX_GPUS], *current_pool[EMU_MAX_GPUS];
static struct CUmemPoolHandle_st *pools;

/* ---- registry (sorted by ptr; cuda_lock held) ---- */

static size_t reg_upper(CUdeviceptr p) /* first index with ptr > p */
{
    size_t lo = 0, hi = nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (allocs[mid]->ptr <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct alloc *reg_find(CUdeviceptr p)
{
    size_t i = reg_upper(p);
    if (!i)
        return NULL;
    struct alloc *a = allocs[i - 1];
    return p < a->ptr + (a->size ? a->size : 1) ? a : NULL;
}

static int reg_add(struct alloc *a)
{
    if (nallocs == allocs_cap) {
        size_t cap = allocs_cap ? allocs_cap * 2 : 64;
        struct alloc **n = realloc(allocs, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        allocs = n;
        allocs_cap = cap;
    }
    size_t i = reg_upper(a->ptr);
    memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof(*allocs));
    allocs[i] = a;
    nallocs++;
    a->id = next_id++;
    return 0;
}

static void reg_del(struct alloc *a)
{
    for (size_t i = reg_upper(a->ptr); i-- > 0;)
        if (allocs[i] == a) {
            memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof(*allocs));
            nallocs--;
            return;
        }
}

static bool range_ok_locked(const struct alloc *a, CUdeviceptr p, size_t len)
{
    return a && a->kind != K_POOL_FREE && p + len <= a->ptr + a->size &&
           (a->kind != K_VMM || (a->prot & PROT_WRITE));
}

/* ---- managed memory: charged for what is resident ----
 * cuMemAllocManaged reserves address space only (its own anonymous mapping, usable from the
 * host, any size: "device memory oversubscription is possible" where
 * CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS is 1). A 2 MiB page comes to the GPU, and is
 * charged, when something on the GPU touches it: a copy or memset reaching it, a kernel
 * launched with a pointer into the allocation (all of it: the emulator cannot see which pages a
 * kernel reads), a prefetch to the device. A prefetch to the CPU sends pages back. When the GPU
 * is full, a touched page that does not fit stays in host memory (uncharged), as the driver
 * evicts or maps remotely instead of failing. A page whose preferred location is the CPU and
 * that the device is advised to access (cuMemAdvise SET_PREFERRED_LOCATION + SET_ACCESSED_BY)
 * is mapped for the GPU where it is: a touch leaves it on the host (only a prefetch moves it).
 * cuda_lock held for all of these. */

/* a->resident[page] bits */
#define PG_ON_GPU 1u   /* resident on the GPU, charged */
#define PG_PREF_CPU 2u /* preferred location: the CPU */
#define PG_ACCESSED 4u /* accessed by the allocation's device (mapped there) */
#define PG_REMOTE (PG_PREF_CPU | PG_ACCESSED)

/* touch: brought by an access (advised pages stay where they are); else a prefetch. */
static void managed_bring_locked(struct alloc *a, CUdeviceptr p, size_t len, bool touch)
{
    uint64_t first = (p - a->ptr) / GRANULE, last = (p + len - 1 - a->ptr) / GRANULE;
    for (uint64_t pg = first; pg <= last; pg++) {
        uint8_t st = a->resident[pg];
        if ((st & PG_ON_GPU) || (touch && (st & PG_REMOTE) == PG_REMOTE))
            continue;
        if (emu_state_mem_charge(cuda_state, cuda_dev_gpu(a->dev), GRANULE) == 0)
            a->resident[pg] = (uint8_t)(st | PG_ON_GPU);
    }
}

static void managed_evict_locked(struct alloc *a, CUdeviceptr p, size_t len)
{
    uint64_t first = (p - a->ptr) / GRANULE, last = (p + len - 1 - a->ptr) / GRANULE;
    uint64_t back = 0;
    for (uint64_t pg = first; pg <= last; pg++)
        if (a->resident[pg] & PG_ON_GPU) {
            a->resident[pg] &= (uint8_t)~PG_ON_GPU;
            back += GRANULE;
        }
    if (back)
        emu_state_mem_uncharge(cuda_state, cuda_dev_gpu(a->dev), back);
}

/* A launch passes these 8-byte values to a kernel: any that points into managed memory brings
 * that allocation to the GPU. */
static unsigned managed_live; /* managed allocations alive (atomic): launches skip the lookup
                               * when there are none */

void cuda_mem_touch_args(const uint64_t *vals, size_t n)
{
    if (!n || !__atomic_load_n(&managed_live, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&cuda_lock);
    for (size_t i = 0; i < n; i++) {
        struct alloc *a = reg_find((CUdeviceptr)vals[i]);
        if (a && a->kind == K_MANAGED)
            managed_bring_locked(a, a->ptr, a->size, true);
    }
    pthread_mutex_unlock(&cuda_lock);
}

/* Checks a device range for a copy or memset; a managed range comes to the GPU. */
bool cuda_ptr_valid(CUdeviceptr p, size_t len)
{
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find(p);
    bool ok = range_ok_locked(a, p, len);
    if (ok && a->kind == K_MANAGED && len)
        managed_bring_locked(a, p, len, true);
    pthread_mutex_unlock(&cuda_lock);
    return ok;
}

/* ---- arenas ---- */

static int arena_init(int dev)
{
    struct arena *ar = &arenas[dev];
    if (ar->base)
        return 0;
    uint64_t size = ROUND_UP(emu_state_gpu(cuda_state, cuda_dev_gpu(dev))->memory_total, GRANULE);
    char name[32];
    snprintf(name, sizeof(name), "accel-emu-gpu%d", dev);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)size) < 0) {
        int r = -errno;
        close(fd);
        return r;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (m == MAP_FAILED) {
        int r = -errno;
        close(fd);
        return r;
    }
    ar->free = malloc(16 * sizeof(*ar->free));
    ar->page_refs = calloc(size / GRANULE, sizeof(*ar->page_refs));
    if (!ar->free || !ar->page_refs) {
        free(ar->free);
        free(ar->page_refs);
        ar->free = NULL;
        ar->page_refs = NULL;
        munmap(m, size);
        close(fd);
        return -ENOMEM;
    }
    ar->cap = 16;
    ar->nfree = 1;
    /* offset 0 stays unused so that no device pointer equals the arena's first byte */
    ar->free[0] = (struct extent){ALIGN, size - ALIGN};
    ar->fd = fd;
    ar->base = m;
    ar->size = size;
    return 0;
}

static void arena_give(struct arena *ar, uint64_t off, uint64_t len);
static void arena_insert(struct arena *ar, uint64_t off, uint64_t len);

/* Where len bytes fit in the free extent e: whole pages for a block of a page or more (placed on
 * a page boundary), inside one page for a smaller one. UINT64_MAX when they do not fit. */
static uint64_t extent_fit(const struct extent *e, uint64_t len)
{
    uint64_t off = e->off;
    if (len >= GRANULE)
        off = ROUND_UP(off, GRANULE);
    else if (off / GRANULE != (off + len - 1) / GRANULE)
        off = ROUND_UP(off, GRANULE); /* would straddle two pages: start the next one */
    return off + len <= e->off + e->len ? off : UINT64_MAX;
}

static int arena_take(struct arena *ar, uint64_t len, uint64_t *ret_off)
{
    for (size_t i = 0; i < ar->nfree; i++) {
        struct extent *e = &ar->free[i];
        uint64_t off = extent_fit(e, len);
        if (off == UINT64_MAX)
            continue;
        struct extent was = *e;
        memmove(e, e + 1, (ar->nfree - i - 1) * sizeof(*e));
        ar->nfree--;
        /* the gaps before and after stay free (never written: nothing to punch) */
        if (off > was.off)
            arena_insert(ar, was.off, off - was.off);
        if (off + len < was.off + was.len)
            arena_insert(ar, off + len, was.off + was.len - off - len);
        *ret_off = off;
        return 0;
    }
    return -ENOMEM;
}

/* ---- pages: what an allocation costs on the GPU ----
 * The driver carves device memory in 2 MiB pages (the granularity cuMemGetAllocationGranularity
 * reports, and the step in which NVML's used memory moves on hardware): a block of 2 MiB or more
 * takes whole pages of its own, smaller blocks share pages. The GPU is charged per page in use:
 * the first block in a page charges it, the last one out gives it back. */

/* Bytes newly charged if [off, off + len) were taken: pages nothing lives in yet. */
static uint64_t pages_new_bytes(const struct arena *ar, uint64_t off, uint64_t len)
{
    uint64_t n = 0;
    for (uint64_t pg = off / GRANULE; pg <= (off + len - 1) / GRANULE; pg++)
        n += ar->page_refs[pg] == 0;
    return n * GRANULE;
}

static void pages_hold(struct arena *ar, uint64_t off, uint64_t len)
{
    for (uint64_t pg = off / GRANULE; pg <= (off + len - 1) / GRANULE; pg++)
        ar->page_refs[pg]++;
}

/* Drops [off, off + len)'s hold on its pages; returns the bytes of the pages now empty. */
static uint64_t pages_drop(struct arena *ar, uint64_t off, uint64_t len)
{
    uint64_t n = 0;
    for (uint64_t pg = off / GRANULE; pg <= (off + len - 1) / GRANULE; pg++)
        if (ar->page_refs[pg] && --ar->page_refs[pg] == 0)
            n++;
    return n * GRANULE;
}

static void arena_give(struct arena *ar, uint64_t off, uint64_t len)
{
    /* punch the pages out: freed device memory gives its RAM back */
    fallocate(ar->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
    arena_insert(ar, off, len);
}

/* Adds [off, off + len) to the free list, merged with its neighbours. */
static void arena_insert(struct arena *ar, uint64_t off, uint64_t len)
{
    size_t i = 0;
    while (i < ar->nfree && ar->free[i].off < off)
        i++;
    bool merge_prev = i > 0 && ar->free[i - 1].off + ar->free[i - 1].len == off;
    bool merge_next = i < ar->nfree && off + len == ar->free[i].off;
    if (merge_prev && merge_next) {
        ar->free[i - 1].len += len + ar->free[i].len;
        memmove(&ar->free[i], &ar->free[i + 1], (ar->nfree - i - 1) * sizeof(*ar->free));
        ar->nfree--;
    } else if (merge_prev) {
        ar->free[i - 1].len += len;
    } else if (merge_next) {
        ar->free[i].off = off;
        ar->free[i].len += len;
    } else {
        if (ar->nfree == ar->cap) {
            struct extent *n = realloc(ar->free, ar->cap * 2 * sizeof(*n));
            if (!n)
                return; /* the range is lost to this process: harmless, never double-used */
            ar->free = n;
            ar->cap *= 2;
        }
        memmove(&ar->free[i + 1], &ar->free[i], (ar->nfree - i) * sizeof(*ar->free));
        ar->free[i] = (struct extent){off, len};
        ar->nfree++;
    }
}

/* cuda_lock held. Carves bytes (at least min_len; rounded to 512 bytes, or to whole pages from
 * one page up and for pool blocks) from the arena and charges dev for the pages it starts
 * using. */
static CUresult dev_alloc_locked(int dev, uint64_t bytes, enum alloc_kind kind,
                                 struct CUmemPoolHandle_st *pool, uint64_t min_len,
                                 struct alloc **ret)
{
    if (arena_init(dev) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct arena *ar = &arenas[dev];
    uint64_t len = ROUND_UP(bytes ? bytes : 1, ALIGN);
    if (len < min_len)
        len = ROUND_UP(min_len, ALIGN);
    uint64_t user_len = len;
    if (len >= GRANULE || kind == K_POOL)
        len = ROUND_UP(len, GRANULE); /* pools grow by whole pages, as big blocks do */
    /* an MPS client's pinned memory limit (cuda_mps.c) */
    if (!cuda_mps_charge_locked(dev, len))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct alloc *a = calloc(1, sizeof(*a));
    if (!a) {
        cuda_mps_uncharge_locked(dev, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t off;
    if (arena_take(ar, len, &off) < 0) {
        cuda_mps_uncharge_locked(dev, len);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t charge = pages_new_bytes(ar, off, len);
    if (charge && emu_state_mem_charge(cuda_state, cuda_dev_gpu(dev), charge) < 0) {
        arena_insert(ar, off, len); /* never written: nothing to punch */
        cuda_mps_uncharge_locked(dev, len);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pages_hold(ar, off, len);
    a->ptr = (CUdeviceptr)(uintptr_t)(arenas[dev].base + off);
    a->size = kind == K_POOL ? len : user_len; /* a pool block is its pages */
    a->span = len;
    a->charged = charge; /* what this block's pages cost when it was made (informational) */
    a->dev = dev;
    a->kind = kind;
    a->pool = pool;
    a->ctx = kind == K_POOL ? NULL : cuda_current();
    if (reg_add(a) < 0) {
        uint64_t back = pages_drop(ar, off, len);
        arena_give(ar, off, len);
        if (back)
            emu_state_mem_uncharge(cuda_state, cuda_dev_gpu(dev), back);
        cuda_mps_uncharge_locked(dev, len);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ret = a;
    return CUDA_SUCCESS;
}

static void dev_free_locked(struct alloc *a)
{
    reg_del(a);
    if (a->kind == K_MANAGED) {
        managed_evict_locked(a, a->ptr, a->size);
        munmap((void *)(uintptr_t)a->ptr, a->span);
        free(a->resident);
        free(a);
        __atomic_sub_fetch(&managed_live, 1, __ATOMIC_RELAXED);
        return;
    }
    struct arena *ar = &arenas[a->dev];
    uint64_t off = (uint64_t)((uint8_t *)(uintptr_t)a->ptr - ar->base);
    uint64_t back = pages_drop(ar, off, a->span);
    arena_give(ar, off, a->span);
    if (back)
        emu_state_mem_uncharge(cuda_state, cuda_dev_gpu(a->dev), back);
    cuda_mps_uncharge_locked(a->dev, a->span);
    free(a);
}

/* cuda_lock held. A managed allocation: address space only, nothing charged yet. */
static CUresult managed_alloc_locked(int dev, uint64_t bytes, struct alloc **ret)
{
    uint64_t span = ROUND_UP(bytes ? bytes : 1, GRANULE);
    struct alloc *a = calloc(1, sizeof(*a));
    uint8_t *res = calloc(span / GRANULE, 1);
    void *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (!a || !res || m == MAP_FAILED) {
        if (m != MAP_FAILED)
            munmap(m, span);
        free(res);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->ptr = (CUdeviceptr)(uintptr_t)m;
    a->size = ROUND_UP(bytes ? bytes : 1, ALIGN);
    a->span = span;
    a->dev = dev;
    a->kind = K_MANAGED;
    a->resident = res;
    a->ctx = cuda_current();
    if (reg_add(a) < 0) {
        munmap(m, span);
        free(res);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    __atomic_add_fetch(&managed_live, 1, __ATOMIC_RELAXED);
    *ret = a;
    return CUDA_SUCCESS;
}

CUresult cuda_dev_alloc(int dev, uint64_t bytes, int kind, struct CUmemPoolHandle_st *pool,
                        CUdeviceptr *ret)
{
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a;
    CUresult r = kind ? managed_alloc_locked(dev, bytes, &a)
                      : dev_alloc_locked(dev, bytes, K_DEVICE, pool, 0, &a);
    if (!r)
        *ret = a->ptr;
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

/* ---- graph memory (allocation nodes) ----
 *
 * What NVIDIA documents (CUDA C++ Programming Guide, "Graph Memory Nodes"), and the emulator
 * does:
 *  - "CUDA assigns virtual addresses for the graph allocation at node creation time", fixed
 *    for the node's life: a block reserves its range (no memory) when the node is made;
 *  - "Physical memory cannot be allocated or mapped during graph instantiation ... Mapping is
 *    done instead during graph launch. Calling cudaGraphUpload can separate out the cost of
 *    allocation from the launch by performing all mappings for that graph immediately":
 *    cuda_gm_map at launch and upload charges the GPU for the blocks not mapped yet, or fails
 *    CUDA_ERROR_OUT_OF_MEMORY with nothing changed;
 *  - "Physical mappings for a graph are retained between launches", and "destroying a graph
 *    which contains memory nodes (even if their allocations are free) will not immediately
 *    return physical memory": a block stays mapped and charged until cuDeviceGraphMemTrim,
 *    which "will unmap and release any physical memory reserved by graph memory nodes that is
 *    not actively in use. Allocations that have not been freed and graphs that are scheduled
 *    or running are considered to be actively using the physical memory";
 *  - a graph allocation lives from the launch reaching its node to a free node, cuMemFreeAsync
 *    or cuMemFree: the block's live flag;
 *  - the attributes: RESERVED_MEM_CURRENT "the amount of physical memory reserved by the driver
 *    for graph allocations in the current process", USED_MEM_CURRENT the part "currently
 *    mapped by at least one graph", and their high watermarks.
 * Not modelled: "multiple graphs may use the same physical memory for distinct allocations if
 * they will not run simultaneously" (an optimization the driver may make: here every block has
 * memory of its own); a trim waiting for graphs still running (memory nodes take effect at
 * once here, so only live allocations keep a block). */
#define GM_VA(p) ((void *)(uintptr_t)(p))

struct cuda_gm_block {
    CUdeviceptr va;
    uint64_t bytes, size; /* asked for; reserved and charged (whole 2 MiB pages) */
    int dev;
    void *map; /* the address reservation */
    size_t map_len;
    struct alloc *mapped; /* registry entry while memory backs it */
    bool live;
    unsigned holders; /* nodes (in graphs and executable graphs) that name it */
    struct cuda_gm_block *next;
};
static struct cuda_gm_block *gm_blocks;
static uint64_t gm_used_high[EMU_MAX_GPUS], gm_reserved_high[EMU_MAX_GPUS];

static void gm_unmap_locked(struct cuda_gm_block *b)
{
    struct alloc *a = b->mapped;
    mmap(GM_VA(b->va), b->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
         -1, 0);
    reg_del(a);
    emu_state_mem_uncharge(cuda_state, cuda_dev_gpu(b->dev), a->charged);
    cuda_mps_uncharge_locked(b->dev, a->charged);
    free(a);
    b->mapped = NULL;
}

/* cuda_lock held: a block named by no node, unmapped and not live goes, address and all. */
static void gm_gone_locked(struct cuda_gm_block *b)
{
    if (b->holders || b->mapped || b->live)
        return;
    for (struct cuda_gm_block **pp = &gm_blocks; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    munmap(b->map, b->map_len);
    free(b);
}

static CUresult gm_free_locked(struct cuda_gm_block *b)
{
    if (!b->live)
        return CUDA_ERROR_INVALID_VALUE;
    b->live = false;
    return CUDA_SUCCESS;
}

CUresult cuda_gm_block_new(int dev, uint64_t bytes, struct cuda_gm_block **ret)
{
    if (!bytes || !cuda_dev_valid(dev))
        return CUDA_ERROR_INVALID_VALUE;
    struct cuda_gm_block *b = calloc(1, sizeof(*b));
    if (!b)
        return CUDA_ERROR_OUT_OF_MEMORY;
    b->bytes = bytes;
    b->size = ROUND_UP(bytes, GRANULE);
    b->dev = dev;
    b->map_len = b->size + GRANULE;
    b->map = mmap(NULL, b->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (b->map == MAP_FAILED) {
        free(b);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    b->va = ROUND_UP((uintptr_t)b->map, GRANULE);
    b->holders = 1;
    pthread_mutex_lock(&cuda_lock);
    b->next = gm_blocks;
    gm_blocks = b;
    pthread_mutex_unlock(&cuda_lock);
    *ret = b;
    return CUDA_SUCCESS;
}

CUdeviceptr cuda_gm_block_va(const struct cuda_gm_block *b)
{
    return b->va;
}

uint64_t cuda_gm_block_bytes(const struct cuda_gm_block *b)
{
    return b->bytes;
}

int cuda_gm_block_dev(const struct cuda_gm_block *b)
{
    return b->dev;
}

struct cuda_gm_block *cuda_gm_block_find(CUdeviceptr va)
{
    pthread_mutex_lock(&cuda_lock);
    struct cuda_gm_block *b = gm_blocks;
    while (b && b->va != va)
        b = b->next;
    pthread_mutex_unlock(&cuda_lock);
    return b;
}

void cuda_gm_block_hold(struct cuda_gm_block *b)
{
    pthread_mutex_lock(&cuda_lock);
    b->holders++;
    pthread_mutex_unlock(&cuda_lock);
}

void cuda_gm_block_drop(struct cuda_gm_block *b)
{
    pthread_mutex_lock(&cuda_lock);
    if (b->holders)
        b->holders--;
    gm_gone_locked(b);
    pthread_mutex_unlock(&cuda_lock);
}

static uint64_t gm_sum_locked(int dev, bool used_only)
{
    uint64_t sum = 0;
    for (struct cuda_gm_block *b = gm_blocks; b; b = b->next)
        if (b->dev == dev && b->mapped && (!used_only || b->holders || b->live))
            sum += b->size;
    return sum;
}

static void gm_high_locked(int dev)
{
    uint64_t u = gm_sum_locked(dev, true), r = gm_sum_locked(dev, false);
    if (u > gm_used_high[dev])
        gm_used_high[dev] = u;
    if (r > gm_reserved_high[dev])
        gm_reserved_high[dev] = r;
}

/* cuda_lock held: backs b with memory, charged. */
static CUresult gm_map_one_locked(struct cuda_gm_block *b)
{
    struct alloc *a = calloc(1, sizeof(*a));
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!cuda_mps_charge_locked(b->dev, b->size)) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (emu_state_mem_charge(cuda_state, cuda_dev_gpu(b->dev), b->size) < 0) {
        cuda_mps_uncharge_locked(b->dev, b->size);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->ptr = b->va;
    a->size = b->bytes;
    a->charged = b->size;
    a->dev = b->dev;
    a->kind = K_GRAPH;
    a->gm = b;
    a->id = next_id++;
    if (mmap(GM_VA(b->va), b->size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED ||
        reg_add(a) < 0) {
        mmap(GM_VA(b->va), b->size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
        emu_state_mem_uncharge(cuda_state, cuda_dev_gpu(b->dev), b->size);
        cuda_mps_uncharge_locked(b->dev, b->size);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    b->mapped = a;
    return CUDA_SUCCESS;
}

CUresult cuda_gm_map(struct cuda_gm_block *const *blocks, size_t n)
{
    struct cuda_gm_block **now = calloc(n ? n : 1, sizeof(*now));
    if (!now)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t k = 0;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&cuda_lock);
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        if (blocks[i]->mapped)
            continue;
        r = gm_map_one_locked(blocks[i]);
        if (r == CUDA_SUCCESS)
            now[k++] = blocks[i];
    }
    if (r != CUDA_SUCCESS) /* nothing changed: what this call mapped goes back */
        while (k-- > 0)
            gm_unmap_locked(now[k]);
    else
        for (size_t i = 0; i < n; i++)
            gm_high_locked(blocks[i]->dev);
    pthread_mutex_unlock(&cuda_lock);
    free(now);
    return r;
}

void cuda_gm_set_live(struct cuda_gm_block *b, bool live)
{
    pthread_mutex_lock(&cuda_lock);
    b->live = live;
    gm_high_locked(b->dev);
    pthread_mutex_unlock(&cuda_lock);
}

static void cuda_gm_trim(int dev)
{
    pthread_mutex_lock(&cuda_lock);
    for (struct cuda_gm_block *b = gm_blocks, *next; b; b = next) {
        next = b->next;
        if (b->dev != dev || !b->mapped || b->live)
            continue;
        gm_unmap_locked(b);
        gm_gone_locked(b);
    }
    pthread_mutex_unlock(&cuda_lock);
}

static CUresult cuda_gm_attr(int dev, CUgraphMem_attribute attr, uint64_t *value, bool reset)
{
    pthread_mutex_lock(&cuda_lock);
    CUresult r = CUDA_SUCCESS;
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
        *value = gm_sum_locked(dev, true);
        r = reset ? CUDA_ERROR_INVALID_VALUE : r;
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        *value = gm_sum_locked(dev, false);
        r = reset ? CUDA_ERROR_INVALID_VALUE : r;
        break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        if (reset) /* "High watermark can only be reset to zero": it starts again from now */
            gm_used_high[dev] = gm_sum_locked(dev, true);
        *value = gm_used_high[dev];
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        if (reset)
            gm_reserved_high[dev] = gm_sum_locked(dev, false);
        *value = gm_reserved_high[dev];
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

static CUresult gm_device_ok(CUdevice device)
{
    CUresult r = cuda_check_init();
    if (r)
        return r;
    return cuda_dev_valid(device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EMU_API CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    CUresult r = gm_device_ok(device);
    if (r == CUDA_SUCCESS)
        cuda_gm_trim(device);
    return r;
}

/* The two attribute entry points: a valid device, then the attribute read (or reset). */
static CUresult gm_attr_call(CUdevice device, CUgraphMem_attribute attr, void *value, bool reset)
{
    CUresult r = gm_device_ok(device);
    if (r)
        return r;
    if (!value || (reset && *(uint64_t *)value != 0)) /* a high watermark resets to 0 only */
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t v;
    return cuda_gm_attr(device, attr, reset ? &v : (uint64_t *)value, reset);
}

EMU_API CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                              void *value)
{
    return gm_attr_call(device, attr, value, false);
}

EMU_API CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                              void *value)
{
    return gm_attr_call(device, attr, value, true);
}

CUresult cuda_dev_free(CUdeviceptr p)
{
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find(p);
    if (a && a->kind == K_GRAPH && a->ptr == p) {
        CUresult r = gm_free_locked(a->gm);
        pthread_mutex_unlock(&cuda_lock);
        return r;
    }
    if (!a || a->ptr != p || (a->kind != K_DEVICE && a->kind != K_MANAGED)) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    dev_free_locked(a);
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

/* cuCtxDestroy, the last release of a primary context, cuDevicePrimaryCtxReset: what was made
 * in ctx goes with it, as on the driver — device, managed and pitched memory, arrays (their
 * handles too), host allocations and registrations, opened IPC mappings — and its charges come
 * back. Pools' memory and VMM handles belong to the device, not to a context, and stay. The
 * context's work is already finished (ctx_free synchronizes first). */
void cuda_mem_ctx_destroy(struct CUctx_st *ctx)
{
    pthread_mutex_lock(&cuda_lock);
    /* from the end: removing entry i leaves the entries before it where they are */
    for (size_t i = nallocs; i-- > 0;) {
        struct alloc *a = allocs[i];
        if (a->ctx != ctx)
            continue;
        switch (a->kind) {
        case K_ARRAY:
            /* arrays and mipmapped arrays both start with their magic */
            *(uint32_t *)a->array = 0;
            free(a->array);
            dev_free_locked(a);
            break;
        case K_HOST:
            reg_del(a);
            munmap((void *)(uintptr_t)a->ptr, a->size);
            free(a);
            break;
        case K_IPC:
            reg_del(a);
            munmap(a->map_base, a->map_len);
            free(a);
            break;
        case K_HOSTREG:
            reg_del(a);
            free(a);
            break;
        default:
            dev_free_locked(a);
        }
    }
    pthread_mutex_unlock(&cuda_lock);
}

#define NEED_CTX(c)                                                                                \
    struct CUctx_st *c;                                                                            \
    do {                                                                                           \
        CUresult r_ = cuda_need_ctx(&c);                                                           \
        if (r_)                                                                                    \
            return r_;                                                                             \
    } while (0)

EMU_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    if (!dptr || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    return cuda_dev_alloc(c->dev, bytes, 0, NULL, dptr);
}

EMU_API CUresult cuMemFree_v2(CUdeviceptr p)
{
    NEED_CTX(c);
    if (!p)
        return CUDA_SUCCESS;
    /* the real driver synchronizes before freeing: pending kernels may still use it */
    cuda_ctx_sync(c);
    return cuda_dev_free(p);
}

EMU_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                    unsigned int elem)
{
    if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    size_t p = ROUND_UP(width, ALIGN);
    CUresult r = cuda_dev_alloc(c->dev, (uint64_t)p * height, 0, NULL, dptr);
    if (!r)
        *pitch = p;
    return r;
}

EMU_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    if (!dptr || !bytes || (flags != 1 && flags != 2))
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    return cuda_dev_alloc(c->dev, bytes, 1, NULL, dptr);
}

EMU_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find(p);
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (a && a->kind != K_POOL_FREE && a->kind != K_HOST && a->kind != K_HOSTREG) {
        if (base)
            *base = a->ptr;
        if (size)
            *size = a->size;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

/* ---- host memory (pinned in the real driver; never charged) ---- */

static CUresult host_alloc(void **pp, size_t bytes, unsigned flags)
{
    if (!pp || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    size_t len = ROUND_UP(bytes, 4096);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct alloc *a = calloc(1, sizeof(*a));
    if (!a) {
        munmap(m, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->ptr = (CUdeviceptr)(uintptr_t)m;
    a->size = len;
    a->dev = c->dev;
    a->kind = K_HOST;
    a->host_flags = flags;
    a->ctx = c;
    pthread_mutex_lock(&cuda_lock);
    int r = reg_add(a);
    pthread_mutex_unlock(&cuda_lock);
    if (r < 0) {
        munmap(m, len);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = m;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemAllocHost_v2(void **pp, size_t bytes)
{
    return host_alloc(pp, bytes, 0);
}

EMU_API CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
    if (flags & ~0x7u)
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytes, flags);
}

/* Takes the host record of kind that starts exactly at p out of the registry;
 * NULL when p is not the start of one. The caller frees the record. */
static struct alloc *host_take(void *p, enum alloc_kind kind)
{
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find((CUdeviceptr)(uintptr_t)p);
    if (a && a->kind == kind && a->ptr == (CUdeviceptr)(uintptr_t)p)
        reg_del(a);
    else
        a = NULL;
    pthread_mutex_unlock(&cuda_lock);
    return a;
}

EMU_API CUresult cuMemFreeHost(void *p)
{
    NEED_CTX(c);
    struct alloc *a = host_take(p, K_HOST);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    munmap(p, a->size);
    free(a);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find((CUdeviceptr)(uintptr_t)p);
    bool ok = a && a->kind == K_HOST;
    if (ok)
        *flags = a->host_flags;
    pthread_mutex_unlock(&cuda_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned int flags)
{
    if (!dptr || flags)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find((CUdeviceptr)(uintptr_t)p);
    bool ok = a && (a->kind == K_HOST || a->kind == K_HOSTREG);
    pthread_mutex_unlock(&cuda_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
    if (!p || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    struct alloc *a = calloc(1, sizeof(*a));
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->ptr = (CUdeviceptr)(uintptr_t)p;
    a->size = bytes;
    a->dev = c->dev;
    a->kind = K_HOSTREG;
    a->ctx = c;
    pthread_mutex_lock(&cuda_lock);
    struct alloc *o = reg_find(a->ptr);
    size_t i = reg_upper(a->ptr);
    bool overlap = o || (i < nallocs && allocs[i]->ptr < a->ptr + bytes);
    int r = overlap ? -EEXIST : reg_add(a);
    pthread_mutex_unlock(&cuda_lock);
    if (r < 0) {
        free(a);
        return r == -EEXIST ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemHostRegister(void *p, size_t bytes, unsigned int flags)
{
    return cuMemHostRegister_v2(p, bytes, flags);
}

EMU_API CUresult cuMemHostUnregister(void *p)
{
    NEED_CTX(c);
    struct alloc *a = host_take(p, K_HOSTREG);
    if (!a)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    free(a);
    return CUDA_SUCCESS;
}

/* ---- pointer attributes ---- */

static CUresult ptr_attr(void *data, int attr, CUdeviceptr p)
{
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find(p);
    if (!a || a->kind == K_POOL_FREE) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct alloc c = *a;
    pthread_mutex_unlock(&cuda_lock);
    bool host = c.kind == K_HOST || c.kind == K_HOSTREG;
    switch (attr) {
    case 1: /* context: the one it was made in */
        *(CUcontext *)data = c.ctx ? c.ctx : cuda_current();
        break;
    case 2: /* memory type */
        *(unsigned int *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case 3: /* device pointer */
        *(CUdeviceptr *)data = p;
        break;
    case 4: /* host pointer */
        if (!host && c.kind != K_MANAGED)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)p;
        break;
    case 6: /* sync memops */
        *(unsigned int *)data = 1;
        break;
    case 7: /* buffer id */
        *(unsigned long long *)data = c.id;
        break;
    case 8: /* is managed */
        *(unsigned int *)data = c.kind == K_MANAGED;
        break;
    case 9: /* device ordinal */
        *(int *)data = c.dev;
        break;
    case 11: /* range start */
        *(CUdeviceptr *)data = c.ptr;
        break;
    case 12: /* range size */
        *(size_t *)data = c.size;
        break;
    case 13: /* mapped */
        *(unsigned int *)data = 1;
        break;
    case 17: /* mempool */
        *(CUmemoryPool *)data = c.pool;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

EMU_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuda_check_init();
    if (r)
        return r;
    return ptr_attr(data, (int)attr, p);
}

EMU_API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                        CUdeviceptr p)
{
    if (!attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuda_check_init();
    if (r)
        return r;
    for (unsigned i = 0; i < n; i++) {
        r = ptr_attr(data[i], (int)attrs[i], p);
        if (r == CUDA_ERROR_INVALID_VALUE && attrs[i] == 2)
            *(unsigned int *)data[i] = 0; /* unknown memory: type 0, as the driver reports */
        else if (r)
            return r;
    }
    return CUDA_SUCCESS;
}

/* ---- copies and memset: bytes really move ---- */

/* Set by an asynchronous copy or memset on a capturing stream: the operation, once checked,
 * becomes a node of that graph instead of running (cleared by DEF_COPY after each call). */
static EMU_TLS struct CUgraph_st *capturing_into;

static CUresult copy(void *dst, const void *src, size_t n)
{
    if (!n)
        return CUDA_SUCCESS;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    if (capturing_into)
        return cuda_graph_add_mem(capturing_into, dst, src, n, 0, 0);
    memmove(dst, src, n);
    return CUDA_SUCCESS;
}

#define DP(p) ((void *)(uintptr_t)(p))

/* A device range a copy or memset may name: memory the emulator knows, or, for one being
 * captured, a graph allocation's addresses (backed only when the graph runs). */
static bool dev_range_ok(CUdeviceptr p, size_t n)
{
    if (cuda_ptr_valid(p, n))
        return true;
    if (!capturing_into)
        return false;
    pthread_mutex_lock(&cuda_lock);
    bool ok = false;
    for (struct cuda_gm_block *b = gm_blocks; b && !ok; b = b->next)
        ok = p >= b->va && p + n <= b->va + b->bytes;
    pthread_mutex_unlock(&cuda_lock);
    return ok;
}

static CUresult copy_checked(CUdeviceptr dst_dev, bool dst_is_dev, CUdeviceptr src_dev,
                             bool src_is_dev, void *dst, const void *src, size_t n)
{
    if (dst_is_dev && !dev_range_ok(dst_dev, n))
        return CUDA_ERROR_INVALID_VALUE;
    if (src_is_dev && !dev_range_ok(src_dev, n))
        return CUDA_ERROR_INVALID_VALUE;
    return copy(dst, src, n);
}

/* Synchronous copies wait for the work queued before them (legacy stream semantics). */
#define SYNC_COPY(pt)                                                                              \
    do {                                                                                           \
        CUresult r_ = cuda_sync_for_copy(pt);                                                      \
        if (r_)                                                                                    \
            return r_;                                                                             \
    } while (0)

/* Asynchronous copies are done at once: kernels do not touch memory in the emulator, so
 * doing the copy early cannot be observed. On a capturing stream, 1D copies and memsets are
 * recorded into the graph (and done when it is launched); 2D/3D ones are refused. */
#define ASYNC_COPY(stream, pt)                                                                     \
    do {                                                                                           \
        struct CUstream_st *s_;                                                                    \
        CUresult r_ = cuda_stream_resolve(stream, pt, &s_);                                        \
        if (r_)                                                                                    \
            return r_;                                                                             \
        capturing_into = s_->capture;                                                              \
    } while (0)

#define DEF_COPY(name, pt, args, sync, chk)                                                        \
    EMU_API CUresult name args                                                                     \
    {                                                                                              \
        NEED_CTX(c_);                                                                              \
        (void)c_;                                                                                  \
        sync;                                                                                      \
        CUresult r_ = chk;                                                                         \
        capturing_into = NULL;                                                                     \
        return r_;                                                                                 \
    }

DEF_COPY(cuMemcpyHtoD_v2, false, (CUdeviceptr d, const void *h, size_t n), SYNC_COPY(false),
         copy_checked(d, true, 0, false, DP(d), h, n))
DEF_COPY(cuMemcpyHtoD_v2_ptds, true, (CUdeviceptr d, const void *h, size_t n), SYNC_COPY(true),
         copy_checked(d, true, 0, false, DP(d), h, n))
DEF_COPY(cuMemcpyDtoH_v2, false, (void *h, CUdeviceptr d, size_t n), SYNC_COPY(false),
         copy_checked(0, false, d, true, h, DP(d), n))
DEF_COPY(cuMemcpyDtoH_v2_ptds, true, (void *h, CUdeviceptr d, size_t n), SYNC_COPY(true),
         copy_checked(0, false, d, true, h, DP(d), n))
DEF_COPY(cuMemcpyDtoD_v2, false, (CUdeviceptr d, CUdeviceptr s, size_t n), SYNC_COPY(false),
         copy_checked(d, true, s, true, DP(d), DP(s), n))
DEF_COPY(cuMemcpyDtoD_v2_ptds, true, (CUdeviceptr d, CUdeviceptr s, size_t n), SYNC_COPY(true),
         copy_checked(d, true, s, true, DP(d), DP(s), n))
DEF_COPY(cuMemcpy, false, (CUdeviceptr d, CUdeviceptr s, size_t n), SYNC_COPY(false),
         copy(DP(d), DP(s), n))
DEF_COPY(cuMemcpy_ptds, true, (CUdeviceptr d, CUdeviceptr s, size_t n), SYNC_COPY(true),
         copy(DP(d), DP(s), n))
DEF_COPY(cuMemcpyHtoDAsync_v2, false, (CUdeviceptr d, const void *h, size_t n, CUstream s),
         ASYNC_COPY(s, false), copy_checked(d, true, 0, false, DP(d), h, n))
DEF_COPY(cuMemcpyHtoDAsync_v2_ptsz, true, (CUdeviceptr d, const void *h, size_t n, CUstream s),
         ASYNC_COPY(s, true), copy_checked(d, true, 0, false, DP(d), h, n))
DEF_COPY(cuMemcpyDtoHAsync_v2, false, (void *h, CUdeviceptr d, size_t n, CUstream s),
         ASYNC_COPY(s, false), copy_checked(0, false, d, true, h, DP(d), n))
DEF_COPY(cuMemcpyDtoHAsync_v2_ptsz, true, (void *h, CUdeviceptr d, size_t n, CUstream s),
         ASYNC_COPY(s, true), copy_checked(0, false, d, true, h, DP(d), n))
DEF_COPY(cuMemcpyDtoDAsync_v2, false, (CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s),
         ASYNC_COPY(s, false), copy_checked(d, true, src, true, DP(d), DP(src), n))
DEF_COPY(cuMemcpyDtoDAsync_v2_ptsz, true, (CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s),
         ASYNC_COPY(s, true), copy_checked(d, true, src, true, DP(d), DP(src), n))
DEF_COPY(cuMemcpyAsync, false, (CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s),
         ASYNC_COPY(s, false), copy(DP(d), DP(src), n))
DEF_COPY(cuMemcpyAsync_ptsz, true, (CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s),
         ASYNC_COPY(s, true), copy(DP(d), DP(src), n))
DEF_COPY(cuMemcpyPeer, false,
         (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n), SYNC_COPY(false),
         copy_checked(d, true, src, true, DP(d), DP(src), n))
DEF_COPY(cuMemcpyPeerAsync, false,
         (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
         ASYNC_COPY(s, false), copy_checked(d, true, src, true, DP(d), DP(src), n))

static uint8_t *array_base(CUarray a)
{
    return a && a->magic == EMU_MAGIC_ARRAY ? (uint8_t *)(uintptr_t)a->base : NULL;
}

/* One operand of a 2D or 3D copy: base address, row pitch and rows per slice (an array's own
 * layout overrides the pitch and height the caller gave). */
static CUresult copy_operand(int type, const void *host, CUdeviceptr dev, CUarray arr, size_t pitch,
                             size_t height, const uint8_t **ret_base, size_t *ret_pitch,
                             size_t *ret_height)
{
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        *ret_base = host;
        break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        *ret_base = DP(dev);
        break;
    case CU_MEMORYTYPE_ARRAY:
        *ret_base = array_base(arr);
        if (*ret_base) {
            pitch = arr->row_bytes;
            height = arr->desc.Height ? arr->desc.Height : 1;
        }
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    *ret_pitch = pitch;
    *ret_height = height;
    return *ret_base ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult copy2d(const CUDA_MEMCPY2D *p)
{
    if (capturing_into)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    const uint8_t *src, *dst;
    size_t sp, dp, rows;
    CUresult r = copy_operand(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch,
                              0, &src, &sp, &rows);
    if (!r)
        r = copy_operand(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch, 0,
                         &dst, &dp, &rows);
    if (r)
        return r;
    if (p->Height > 1 && (sp < p->WidthInBytes || dp < p->WidthInBytes))
        return CUDA_ERROR_INVALID_VALUE;
    if (!p->WidthInBytes || !p->Height)
        return CUDA_SUCCESS;
    const uint8_t *s0 = src + p->srcY * sp + p->srcXInBytes;
    uint8_t *d0 = (uint8_t *)dst + p->dstY * dp + p->dstXInBytes;
    size_t span_s = (p->Height - 1) * sp + p->WidthInBytes;
    size_t span_d = (p->Height - 1) * dp + p->WidthInBytes;
    if (p->srcMemoryType != CU_MEMORYTYPE_HOST &&
        !cuda_ptr_valid((CUdeviceptr)(uintptr_t)s0, span_s))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->dstMemoryType != CU_MEMORYTYPE_HOST &&
        !cuda_ptr_valid((CUdeviceptr)(uintptr_t)d0, span_d))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t y = 0; y < p->Height; y++)
        memmove(d0 + y * dp, s0 + y * sp, p->WidthInBytes);
    return CUDA_SUCCESS;
}

DEF_COPY(cuMemcpy2D_v2, false, (const CUDA_MEMCPY2D *p), SYNC_COPY(false), copy2d(p))
DEF_COPY(cuMemcpy2D_v2_ptds, true, (const CUDA_MEMCPY2D *p), SYNC_COPY(true), copy2d(p))
DEF_COPY(cuMemcpy2DUnaligned_v2, false, (const CUDA_MEMCPY2D *p), SYNC_COPY(false), copy2d(p))
DEF_COPY(cuMemcpy2DAsync_v2, false, (const CUDA_MEMCPY2D *p, CUstream s), ASYNC_COPY(s, false),
         copy2d(p))
DEF_COPY(cuMemcpy2DAsync_v2_ptsz, true, (const CUDA_MEMCPY2D *p, CUstream s), ASYNC_COPY(s, true),
         copy2d(p))

static CUresult copy3d(const CUDA_MEMCPY3D *p)
{
    if (capturing_into)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!p || p->srcLOD || p->dstLOD)
        return CUDA_ERROR_INVALID_VALUE;
    const uint8_t *src, *dst;
    size_t sp, sh, dp, dh;
    CUresult r = copy_operand(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcPitch,
                              p->srcHeight, &src, &sp, &sh);
    if (!r)
        r = copy_operand(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstPitch,
                         p->dstHeight, &dst, &dp, &dh);
    if (r)
        return r;
    size_t w = p->WidthInBytes, h = p->Height, d = p->Depth;
    if (!w || !h || !d)
        return CUDA_SUCCESS;
    if ((h > 1 || d > 1) && (sp < w || dp < w))
        return CUDA_ERROR_INVALID_VALUE;
    if (d > 1 && (sh < h || dh < h))
        return CUDA_ERROR_INVALID_VALUE;
    const uint8_t *s0 = src + (p->srcZ * sh + p->srcY) * sp + p->srcXInBytes;
    uint8_t *d0 = (uint8_t *)dst + (p->dstZ * dh + p->dstY) * dp + p->dstXInBytes;
    size_t span_s = ((d - 1) * sh + (h - 1)) * sp + w, span_d = ((d - 1) * dh + (h - 1)) * dp + w;
    if (p->srcMemoryType != CU_MEMORYTYPE_HOST &&
        !cuda_ptr_valid((CUdeviceptr)(uintptr_t)s0, span_s))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->dstMemoryType != CU_MEMORYTYPE_HOST &&
        !cuda_ptr_valid((CUdeviceptr)(uintptr_t)d0, span_d))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t z = 0; z < d; z++)
        for (size_t y = 0; y < h; y++)
            memmove(d0 + (z * dh + y) * dp, s0 + (z * sh + y) * sp, w);
    return CUDA_SUCCESS;
}

DEF_COPY(cuMemcpy3D_v2, false, (const CUDA_MEMCPY3D *p), SYNC_COPY(false), copy3d(p))
DEF_COPY(cuMemcpy3D_v2_ptds, true, (const CUDA_MEMCPY3D *p), SYNC_COPY(true), copy3d(p))
DEF_COPY(cuMemcpy3DAsync_v2, false, (const CUDA_MEMCPY3D *p, CUstream s), ASYNC_COPY(s, false),
         copy3d(p))
DEF_COPY(cuMemcpy3DAsync_v2_ptsz, true, (const CUDA_MEMCPY3D *p, CUstream s), ASYNC_COPY(s, true),
         copy3d(p))

/* Advice is checked and moves nothing. For managed pages two pieces are kept (cuMemAdvise,
 * CUDA driver API, Unified Addressing): the preferred location ("If the data is already in its
 * preferred location and the faulting processor can establish a mapping without requiring the
 * data to be migrated, then data migration will be avoided") and whether the allocation's device
 * is set to access it ("causes the data to always be mapped in the specified processor's page
 * tables"): a page preferring the CPU and mapped for the device is not migrated by a touch. */
static CUresult managed_advise(CUdeviceptr p, size_t count, CUmem_advise advice, bool cpu, int dev)
{
    if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find(p);
    bool ok = count && range_ok_locked(a, p, count);
    if (ok && a->kind == K_MANAGED) {
        uint8_t set = 0, clear = 0;
        if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION && cpu)
            set = PG_PREF_CPU;
        else if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION)
            clear = PG_PREF_CPU;
        else if (advice == CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION)
            clear = PG_PREF_CPU;
        else if (advice == CU_MEM_ADVISE_SET_ACCESSED_BY && !cpu && dev == a->dev)
            set = PG_ACCESSED;
        else if (advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY && !cpu && dev == a->dev)
            clear = PG_ACCESSED;
        uint64_t first = (p - a->ptr) / GRANULE, last = (p + count - 1 - a->ptr) / GRANULE;
        for (uint64_t pg = first; pg <= last; pg++)
            a->resident[pg] = (uint8_t)((a->resident[pg] & ~clear) | set);
    }
    pthread_mutex_unlock(&cuda_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A prefetch moves the managed pages of the range: to the GPU (charged) or to the CPU
 * (CU_DEVICE_CPU, -1: given back). Other memory is accepted and stays. */
static CUresult prefetch(CUdeviceptr p, size_t count, bool to_cpu, CUstream hs, bool pt)
{
    NEED_CTX(c);
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(hs, pt, &s);
    if (r)
        return r;
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find(p);
    bool ok = count && range_ok_locked(a, p, count);
    if (ok && a->kind == K_MANAGED) {
        if (to_cpu)
            managed_evict_locked(a, p, count);
        else
            managed_bring_locked(a, p, count, false);
    }
    pthread_mutex_unlock(&cuda_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t count, CUdevice dst, CUstream s)
{
    return prefetch(p, count, dst == CU_DEVICE_CPU, s, false);
}

EMU_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t count, CUdevice dst, CUstream s)
{
    return prefetch(p, count, dst == CU_DEVICE_CPU, s, true);
}

EMU_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t count, CUmemLocation loc,
                                       unsigned int flags, CUstream s)
{
    return prefetch(p, count, loc.type != CU_MEM_LOCATION_TYPE_DEVICE, s, false);
}

EMU_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t count, CUmemLocation loc,
                                            unsigned int flags, CUstream s)
{
    return prefetch(p, count, loc.type != CU_MEM_LOCATION_TYPE_DEVICE, s, true);
}

EMU_API CUresult cuMemAdvise(CUdeviceptr p, size_t count, CUmem_advise advice, CUdevice dev)
{
    NEED_CTX(c);
    return managed_advise(p, count, advice, dev == CU_DEVICE_CPU, dev);
}

EMU_API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t count, CUmem_advise advice, CUmemLocation loc)
{
    NEED_CTX(c);
    return managed_advise(p, count, advice, loc.type != CU_MEM_LOCATION_TYPE_DEVICE, loc.id);
}

static CUresult memset_n(CUdeviceptr d, unsigned v, size_t elem, size_t n, size_t pitch,
                         size_t height)
{
    size_t row = n * elem;
    if (!pitch)
        pitch = row;
    if (height && (pitch < row))
        return CUDA_ERROR_INVALID_VALUE;
    if (!row || !height)
        return CUDA_SUCCESS;
    if (!dev_range_ok(d, (height - 1) * pitch + row))
        return CUDA_ERROR_INVALID_VALUE;
    if (capturing_into) {
        if (height != 1)
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        return cuda_graph_add_mem(capturing_into, DP(d), NULL, n, v, elem);
    }
    for (size_t y = 0; y < height; y++) {
        uint8_t *p = (uint8_t *)DP(d) + y * pitch;
        if (elem == 1) {
            memset(p, (int)(v & 0xff), n);
        } else if (elem == 2) {
            uint16_t x = (uint16_t)v;
            for (size_t i = 0; i < n; i++)
                memcpy(p + 2 * i, &x, 2);
        } else {
            uint32_t x = v;
            for (size_t i = 0; i < n; i++)
                memcpy(p + 4 * i, &x, 4);
        }
    }
    return CUDA_SUCCESS;
}

DEF_COPY(cuMemsetD8_v2, false, (CUdeviceptr d, unsigned char v, size_t n), SYNC_COPY(false),
         memset_n(d, v, 1, n, 0, 1))
DEF_COPY(cuMemsetD8_v2_ptds, true, (CUdeviceptr d, unsigned char v, size_t n), SYNC_COPY(true),
         memset_n(d, v, 1, n, 0, 1))
DEF_COPY(cuMemsetD16_v2, false, (CUdeviceptr d, unsigned short v, size_t n), SYNC_COPY(false),
         memset_n(d, v, 2, n, 0, 1))
DEF_COPY(cuMemsetD32_v2, false, (CUdeviceptr d, unsigned int v, size_t n), SYNC_COPY(false),
         memset_n(d, v, 4, n, 0, 1))
DEF_COPY(cuMemsetD32_v2_ptds, true, (CUdeviceptr d, unsigned int v, size_t n), SYNC_COPY(true),
         memset_n(d, v, 4, n, 0, 1))
DEF_COPY(cuMemsetD8Async, false, (CUdeviceptr d, unsigned char v, size_t n, CUstream s),
         ASYNC_COPY(s, false), memset_n(d, v, 1, n, 0, 1))
DEF_COPY(cuMemsetD8Async_ptsz, true, (CUdeviceptr d, unsigned char v, size_t n, CUstream s),
         ASYNC_COPY(s, true), memset_n(d, v, 1, n, 0, 1))
DEF_COPY(cuMemsetD16Async, false, (CUdeviceptr d, unsigned short v, size_t n, CUstream s),
         ASYNC_COPY(s, false), memset_n(d, v, 2, n, 0, 1))
DEF_COPY(cuMemsetD32Async, false, (CUdeviceptr d, unsigned int v, size_t n, CUstream s),
         ASYNC_COPY(s, false), memset_n(d, v, 4, n, 0, 1))
DEF_COPY(cuMemsetD32Async_ptsz, true, (CUdeviceptr d, unsigned int v, size_t n, CUstream s),
         ASYNC_COPY(s, true), memset_n(d, v, 4, n, 0, 1))
DEF_COPY(cuMemsetD2D8_v2, false, (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h),
         SYNC_COPY(false), memset_n(d, v, 1, w, pitch, h))
DEF_COPY(cuMemsetD2D32_v2, false, (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h),
         SYNC_COPY(false), memset_n(d, v, 4, w, pitch, h))

/* ---- arrays ---- */

/* Bytes one level of an array occupies, laid out as the driver lays it out (cuda_array.h: the
 * rule libvcuda charges by). desc_ok has bounded every size, so this cannot overflow. */
static uint64_t level_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned lvl, size_t *ret_row)
{
    size_t w = d->Width >> lvl, h = d->Height >> lvl, z = d->Depth >> lvl;
    w = w ? w : 1;
    h = d->Height ? (h ? h : 1) : 1;
    z = d->Depth ? (z ? z : 1) : 1;
    uint64_t row = 0, bytes = 0;
    gpu_cuda_array_bytes(w, h, z, (uint64_t)gpu_cuda_format_bytes(d->Format) * d->NumChannels, &row,
                         &bytes);
    if (ret_row)
        *ret_row = row;
    return bytes;
}

static bool desc_ok(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    return d->Width && gpu_cuda_format_bytes(d->Format) &&
           (d->NumChannels == 1 || d->NumChannels == 2 || d->NumChannels == 4) &&
           d->Width <= (1u << 17) && d->Height <= (1u << 17) && d->Depth <= (1u << 14);
}

static CUresult array_new(const CUDA_ARRAY3D_DESCRIPTOR *d, CUarray *ret)
{
    if (!ret || !d || !desc_ok(d))
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    struct CUarray_st *a = calloc(1, sizeof(*a));
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->desc = *d;
    uint64_t bytes = level_bytes(d, 0, &a->row_bytes);
    pthread_mutex_lock(&cuda_lock);
    struct alloc *al;
    CUresult r = dev_alloc_locked(c->dev, bytes, K_ARRAY, NULL, bytes, &al);
    if (!r)
        al->array = a;
    pthread_mutex_unlock(&cuda_lock);
    if (r) {
        free(a);
        return r;
    }
    a->magic = EMU_MAGIC_ARRAY;
    a->base = al->ptr;
    a->bytes = bytes;
    *ret = a;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuArrayCreate_v2(CUarray *ret, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {d->Width, d->Height, 0, d->Format, d->NumChannels, 0};
    return array_new(&d3, ret);
}

EMU_API CUresult cuArray3DCreate_v2(CUarray *ret, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    return array_new(d, ret);
}

static CUresult backing_free(CUdeviceptr base)
{
    pthread_mutex_lock(&cuda_lock);
    struct alloc *al = reg_find(base);
    if (al && al->kind == K_ARRAY)
        dev_free_locked(al);
    pthread_mutex_unlock(&cuda_lock);
    return al ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EMU_API CUresult cuArrayDestroy(CUarray a)
{
    NEED_CTX(c);
    if (!a || a->magic != EMU_MAGIC_ARRAY)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = backing_free(a->base);
    a->magic = 0;
    free(a);
    return r;
}

EMU_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray a)
{
    if (!d || !a || a->magic != EMU_MAGIC_ARRAY)
        return CUDA_ERROR_INVALID_HANDLE;
    d->Width = a->desc.Width;
    d->Height = a->desc.Height;
    d->Format = a->desc.Format;
    d->NumChannels = a->desc.NumChannels;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray a)
{
    if (!d || !a || a->magic != EMU_MAGIC_ARRAY)
        return CUDA_ERROR_INVALID_HANDLE;
    *d = a->desc;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *ret, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                        unsigned int levels)
{
    if (!ret || !d || !desc_ok(d) || levels < 1 || levels > 18)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    uint64_t bytes = 0;
    for (unsigned l = 0; l < levels; l++)
        bytes += level_bytes(d, l, NULL);
    struct CUmipmappedArray_st *m = calloc(1, sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&cuda_lock);
    struct alloc *al;
    CUresult r = dev_alloc_locked(c->dev, bytes, K_ARRAY, NULL, bytes, &al);
    if (!r)
        al->array = m;
    pthread_mutex_unlock(&cuda_lock);
    if (r) {
        free(m);
        return r;
    }
    m->magic = EMU_MAGIC_ARRAY + 1;
    m->levels = levels;
    m->base = al->ptr;
    m->bytes = bytes;
    *ret = m;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray m)
{
    NEED_CTX(c);
    if (!m || m->magic != EMU_MAGIC_ARRAY + 1)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = backing_free(m->base);
    m->magic = 0;
    free(m);
    return r;
}

/* ---- IPC ---- */

struct ipc_wire {
    char magic[8]; /* "ACCEMIPC" */
    int32_t pid;
    int32_t fd;
    uint64_t offset, size;
    int32_t dev;
    uint32_t pad;
    uint64_t start;
    char rest[16];
};
_Static_assert(sizeof(struct ipc_wire) == CU_IPC_HANDLE_SIZE, "IPC handle is 64 bytes");

EMU_API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find(p);
    if (!a || (a->kind != K_DEVICE && a->kind != K_POOL)) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct ipc_wire w = {.magic = "ACCEMIPC"};
    w.pid = (int32_t)getpid();
    w.fd = arenas[a->dev].fd;
    w.offset = (uint64_t)((uint8_t *)(uintptr_t)a->ptr - arenas[a->dev].base);
    w.size = a->size;
    w.dev = a->dev;
    pthread_mutex_unlock(&cuda_lock);
    memcpy(h, &w, sizeof(w));
    return CUDA_SUCCESS;
}

EMU_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h, unsigned int flags)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    struct ipc_wire w;
    memcpy(&w, &h, sizeof(w));
    if (memcmp(w.magic, "ACCEMIPC", 8) || w.pid <= 0 || w.fd < 0 || !w.size)
        return CUDA_ERROR_INVALID_VALUE;
    if (w.pid == getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* as the driver: not in the exporting process */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", w.pid, w.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t base_off = w.offset / page * page, delta = w.offset - base_off;
    size_t len = (size_t)(delta + w.size);
    void *m =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, (off_t)base_off);
    close(fd);
    if (m == MAP_FAILED)
        return CUDA_ERROR_MAP_FAILED;
    struct alloc *a = calloc(1, sizeof(*a));
    if (!a) {
        munmap(m, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->ptr = (CUdeviceptr)(uintptr_t)((uint8_t *)m + delta);
    a->size = w.size;
    a->dev = c->dev;
    a->kind = K_IPC; /* not charged again: the exporter holds it */
    a->map_base = m;
    a->map_len = len;
    a->ctx = c;
    pthread_mutex_lock(&cuda_lock);
    int r = reg_add(a);
    pthread_mutex_unlock(&cuda_lock);
    if (r < 0) {
        munmap(m, len);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = a->ptr;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle h, unsigned int flags)
{
    return cuIpcOpenMemHandle_v2(dptr, h, flags);
}

EMU_API CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find(p);
    if (!a || a->kind != K_IPC || a->ptr != p) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    reg_del(a);
    pthread_mutex_unlock(&cuda_lock);
    munmap(a->map_base, a->map_len);
    free(a);
    return CUDA_SUCCESS;
}

/* ---- virtual memory management ---- */

static struct vmm_handle *vmm_of(CUmemGenericAllocationHandle h)
{
    struct vmm_handle *v = (struct vmm_handle *)(uintptr_t)h;
    return v && v->magic == VMM_MAGIC ? v : NULL;
}

EMU_API CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    if (!gran || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *gran = GRANULE;
    return CUDA_SUCCESS;
}

static struct vmm_handle *vmm_handles; /* cuda_lock */

/* cuda_lock held. Frees v once it is released, unmapped and held by no import; then lets its
 * owner go the same way. */
static void vmm_put(struct vmm_handle *v)
{
    if (!v->released || v->maps || v->holders)
        return;
    for (struct vmm_handle **pp = &vmm_handles; *pp; pp = &(*pp)->next)
        if (*pp == v) {
            *pp = v->next;
            break;
        }
    close(v->fd);
    if (v->charged)
        emu_state_mem_uncharge(cuda_state, cuda_dev_gpu(v->dev), v->charged);
    struct vmm_handle *owner = v->owner;
    v->magic = 0;
    free(v);
    if (owner) {
        owner->holders--;
        vmm_put(owner);
    }
}

/* cuda_lock held. Records a new handle as live; its memfd's identity for imports. */
static void vmm_link(struct vmm_handle *v)
{
    struct stat st;
    if (fstat(v->fd, &st) == 0) {
        v->st_dev = st.st_dev;
        v->st_ino = st.st_ino;
    }
    v->next = vmm_handles;
    vmm_handles = v;
}

EMU_API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!h || !prop || !size || size % GRANULE || prop->type != 1 || prop->location.type != 1)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    int dev = prop->location.id;
    if (!cuda_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct vmm_handle *v = calloc(1, sizeof(*v));
    if (!v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    v->fd = memfd_create("accel-emu-vmm", MFD_CLOEXEC);
    if (v->fd < 0 || ftruncate(v->fd, (off_t)size) < 0) {
        if (v->fd >= 0)
            close(v->fd);
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (emu_state_mem_charge(cuda_state, cuda_dev_gpu(dev), size) < 0) {
        close(v->fd);
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v->magic = VMM_MAGIC;
    v->dev = dev;
    v->size = size;
    v->charged = size;
    pthread_mutex_lock(&cuda_lock);
    vmm_link(v);
    pthread_mutex_unlock(&cuda_lock);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct vmm_handle *v = vmm_of(h);
    if (!v || v->released) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    v->released = true; /* the memory goes once the last mapping is gone too */
    vmm_put(v);
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                              CUmemAllocationHandleType type,
                                              unsigned long long flags)
{
    if (!out || (int)type != 1)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct vmm_handle *v = vmm_of(h);
    int fd = v ? fcntl(v->fd, F_DUPFD_CLOEXEC, 0) : -1;
    pthread_mutex_unlock(&cuda_lock);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
                                                CUmemAllocationHandleType type)
{
    if (!h || (int)type != 1)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    int fd = (int)(intptr_t)os_handle;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct vmm_handle *v = calloc(1, sizeof(*v));
    if (!v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    v->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (v->fd < 0) {
        free(v);
        return CUDA_ERROR_INVALID_VALUE;
    }
    v->magic = VMM_MAGIC;
    v->dev = c->dev;
    v->size = (uint64_t)st.st_size; /* imported: the exporter is charged */
    pthread_mutex_lock(&cuda_lock);
    /* this process's own allocation: the import holds it (struct vmm_handle) */
    for (struct vmm_handle *o = vmm_handles; o; o = o->next)
        if (!o->owner && o->st_dev == st.st_dev && o->st_ino == st.st_ino) {
            v->owner = o;
            v->dev = o->dev;
            o->holders++;
            break;
        }
    vmm_link(v);
    pthread_mutex_unlock(&cuda_lock);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle h)
{
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct vmm_handle *v = vmm_of(h);
    int dev = v ? v->dev : -1;
    pthread_mutex_unlock(&cuda_lock);
    if (dev < 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(prop, 0, sizeof(*prop));
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = dev;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; /* all it exports */
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    if (!ptr || !size || size % GRANULE || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    if (alignment < GRANULE)
        alignment = GRANULE;
    size_t len = size + alignment;
    void *m = mmap(DP(addr), len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t base = ROUND_UP((uintptr_t)m, alignment);
    pthread_mutex_lock(&cuda_lock);
    struct reservation *n = realloc(resv, (nresv + 1) * sizeof(*n));
    if (!n) {
        pthread_mutex_unlock(&cuda_lock);
        munmap(m, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    resv = n;
    resv[nresv++] = (struct reservation){base, size, m, len};
    pthread_mutex_unlock(&cuda_lock);
    *ptr = base;
    return CUDA_SUCCESS;
}

static struct reservation *resv_find(CUdeviceptr p, size_t len)
{
    for (size_t i = 0; i < nresv; i++)
        if (p >= resv[i].base && p + len <= resv[i].base + resv[i].size)
            return &resv[i];
    return NULL;
}

EMU_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct reservation *r = resv_find(ptr, size);
    if (!r || r->base != ptr || r->size != size) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    munmap(r->map, r->map_len);
    *r = resv[--nresv];
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle h, unsigned long long flags)
{
    if (!size || size % GRANULE || offset % GRANULE || flags)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    pthread_mutex_lock(&cuda_lock);
    struct vmm_handle *v = vmm_of(h);
    CUresult r = CUDA_SUCCESS;
    struct alloc *a = NULL;
    if (!v || offset + size > v->size || !resv_find(ptr, size)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct alloc *o = reg_find(ptr);
    size_t i = reg_upper(ptr);
    if (o || (i < nallocs && allocs[i]->ptr < ptr + size)) {
        r = CUDA_ERROR_ALREADY_MAPPED;
        goto out;
    }
    a = calloc(1, sizeof(*a));
    if (!a) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    /* inaccessible until cuMemSetAccess, as on the GPU */
    if (mmap(DP(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, v->fd,
             (off_t)offset) == MAP_FAILED) {
        free(a);
        r = CUDA_ERROR_MAP_FAILED;
        goto out;
    }
    a->ptr = ptr;
    a->size = size;
    a->dev = v->dev;
    a->kind = K_VMM;
    a->vmm = v;
    if (reg_add(a) < 0) {
        mmap(DP(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
             0);
        free(a);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    v->maps++;
out:
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

EMU_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    NEED_CTX(c);
    cuda_ctx_sync(c);
    pthread_mutex_lock(&cuda_lock);
    CUresult r = CUDA_SUCCESS;
    CUdeviceptr p = ptr;
    while (p < ptr + size) {
        struct alloc *a = reg_find(p);
        if (!a || a->kind != K_VMM || a->ptr != p || a->ptr + a->size > ptr + size) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        mmap(DP(a->ptr), a->size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
        reg_del(a);
        p = a->ptr + a->size;
        a->vmm->maps--;
        vmm_put(a->vmm);
        free(a);
    }
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

EMU_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    if (!desc || !count || !size)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != 1 || !cuda_dev_valid(desc[i].location.id) ||
            desc[i].flags < 0 || desc[i].flags > 3 || desc[i].flags == 2)
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].flags == 3)
            prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags == 1 && prot == PROT_NONE)
            prot = PROT_READ;
    }
    pthread_mutex_lock(&cuda_lock);
    CUresult r = CUDA_SUCCESS;
    for (CUdeviceptr p = ptr; p < ptr + size;) {
        struct alloc *a = reg_find(p);
        if (!a || a->kind != K_VMM) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        CUdeviceptr end = a->ptr + a->size < ptr + size ? a->ptr + a->size : ptr + size;
        mprotect(DP(p), end - p, prot);
        a->prot = prot;
        p = end;
    }
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

/* ---- stream-ordered allocation: pools ---- */

static struct CUmemPoolHandle_st *pool_new(int dev)
{
    struct CUmemPoolHandle_st *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->magic = EMU_MAGIC_POOL;
    p->dev = dev;
    p->next = pools;
    pools = p;
    return p;
}

static struct CUmemPoolHandle_st *pool_of(CUmemoryPool p)
{
    return p && p->magic == EMU_MAGIC_POOL ? p : NULL;
}

/* cuda_lock held. Makes the pool's reservation its blocks in whole chunks of
 * cuda_pool_granularity: the GPU (and an MPS client's limit) is charged for the chunks beyond
 * what the blocks' own pages cost, and given back what is no longer needed. -ENOMEM (nothing
 * changed) when a growth does not fit. With the default 2 MiB granularity the reservation is
 * the blocks exactly. Larger chunks (ACCEL_EMU_POOL_GRANULARITY) model what an NVIDIA H200
 * (driver 580.159.04, 2026-11-26, tests/gpu/vcuda-memory.sh) did: its default pool held 64 MiB
 * after a 60 MiB cuMemAllocAsync and 32 MiB around one live 512-byte allocation (32 MiB chunks
 * fit both); NVIDIA documents only that "the OS allocations may happen at different
 * granularity from the user allocations" (cuMemPoolTrimTo). */
static int pool_fit_locked(struct CUmemPoolHandle_st *p)
{
    uint64_t want = ROUND_UP(p->held, cuda_pool_granularity);
    uint64_t extra = want - p->held;
    if (extra > p->extra) {
        uint64_t more = extra - p->extra;
        if (!cuda_mps_charge_locked(p->dev, more))
            return -ENOMEM;
        if (emu_state_mem_charge(cuda_state, cuda_dev_gpu(p->dev), more) < 0) {
            cuda_mps_uncharge_locked(p->dev, more);
            return -ENOMEM;
        }
    } else if (extra < p->extra) {
        uint64_t less = p->extra - extra;
        emu_state_mem_uncharge(cuda_state, cuda_dev_gpu(p->dev), less);
        cuda_mps_uncharge_locked(p->dev, less);
    }
    p->extra = extra;
    p->reserved = want;
    if (p->reserved > p->held_high)
        p->held_high = p->reserved;
    return 0;
}

/* cuda_lock held. Releases cached blocks until the pool reserves at most keep bytes (or has
 * none cached); the chunks left empty go back with them. */
static void pool_trim_locked(struct CUmemPoolHandle_st *p, uint64_t keep)
{
    struct emu_pool_block **bp = &p->free_blocks;
    while (*bp && p->reserved > keep) {
        struct emu_pool_block *b = *bp;
        *bp = b->next;
        struct alloc *a = reg_find(b->ptr);
        if (a && a->kind == K_POOL_FREE) {
            p->held -= a->size;
            dev_free_locked(a);
            (void)pool_fit_locked(p); /* shrinks: cannot fail */
        }
        free(b);
    }
}

void cuda_pools_release_to_threshold(int dev)
{
    pthread_mutex_lock(&cuda_lock);
    for (struct CUmemPoolHandle_st *p = pools; p; p = p->next)
        if (p->dev == dev && p->reserved > p->release_threshold)
            pool_trim_locked(p, p->release_threshold);
    pthread_mutex_unlock(&cuda_lock);
}

/* cuda_lock held. A new block of len bytes for the pool, its chunks reserved. */
static CUresult pool_grow_locked(struct CUmemPoolHandle_st *p, uint64_t len, struct alloc **ret)
{
    struct alloc *a = NULL;
    CUresult r = dev_alloc_locked(p->dev, len, K_POOL, p, 0, &a);
    if (r)
        return r;
    p->held += a->size;
    if (pool_fit_locked(p) < 0) {
        p->held -= a->size;
        dev_free_locked(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ret = a;
    return CUDA_SUCCESS;
}

static CUresult pool_alloc(struct CUmemPoolHandle_st *p, size_t bytes, CUdeviceptr *ret)
{
    uint64_t len = ROUND_UP(bytes, ALIGN);
    pthread_mutex_lock(&cuda_lock);
    CUresult r = CUDA_SUCCESS;
    struct alloc *a = NULL;
    for (struct emu_pool_block **bp = &p->free_blocks; *bp; bp = &(*bp)->next) {
        struct emu_pool_block *b = *bp;
        /* reuse a cached block that is not wastefully large */
        if (b->size >= len && b->size <= 2 * len) {
            a = reg_find(b->ptr);
            *bp = b->next;
            free(b);
            break;
        }
    }
    if (!a) {
        r = pool_grow_locked(p, len, &a);
        if (r == CUDA_ERROR_OUT_OF_MEMORY && p->free_blocks) {
            pool_trim_locked(p, 0); /* cached blocks are given back before failing */
            r = pool_grow_locked(p, len, &a);
        }
        if (r)
            goto out;
    }
    a->kind = K_POOL;
    p->in_use += a->size;
    if (p->in_use > p->used_high)
        p->used_high = p->in_use;
    *ret = a->ptr;
out:
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

static struct CUmemPoolHandle_st *dev_pool_locked(int dev)
{
    if (!default_pool[dev])
        default_pool[dev] = pool_new(dev);
    if (!current_pool[dev])
        current_pool[dev] = default_pool[dev];
    return current_pool[dev];
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream hs,
                            bool pt)
{
    if (!dptr || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_CTX(c);
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(hs, pt, &s);
    if (r)
        return r;
    if (pool && !pool_of(pool))
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture) {
        /* captured: an allocation node, addresses now, memory when the graph is launched
         * ("Graph Memory Nodes": stream capture of cudaMallocAsync) */
        struct cuda_gm_block *b;
        r = cuda_gm_block_new(pool ? pool->dev : s->ctx->dev, bytes, &b);
        if (r)
            return r;
        r = cuda_graph_add_gm(s->capture, b, true);
        if (r) {
            cuda_gm_block_drop(b);
            return r;
        }
        *dptr = cuda_gm_block_va(b);
        return CUDA_SUCCESS;
    }
    if (!pool) {
        pthread_mutex_lock(&cuda_lock);
        pool = dev_pool_locked(s->ctx->dev);
        pthread_mutex_unlock(&cuda_lock);
        if (!pool)
            return CUDA_ERROR_OUT_OF_MEMORY;
    } else if (!pool_of(pool)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    return pool_alloc(pool, bytes, dptr);
}

EMU_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    return alloc_async(dptr, bytes, NULL, s, false);
}

EMU_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    return alloc_async(dptr, bytes, NULL, s, true);
}

EMU_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                         CUstream s)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, bytes, pool, s, false);
}

EMU_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                              CUstream s)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, bytes, pool, s, true);
}

static CUresult free_async(CUdeviceptr p, CUstream hs, bool pt)
{
    NEED_CTX(c);
    struct CUstream_st *s;
    CUresult r = cuda_stream_resolve(hs, pt, &s);
    if (r)
        return r;
    struct cuda_gm_block *gb = s->capture ? cuda_gm_block_find(p) : NULL;
    if (gb) { /* captured free of a graph allocation: a free node */
        cuda_gm_block_hold(gb);
        r = cuda_graph_add_gm(s->capture, gb, false);
        if (r)
            cuda_gm_block_drop(gb);
        return r;
    }
    pthread_mutex_lock(&cuda_lock);
    struct alloc *a = reg_find(p);
    if (!a || a->ptr != p || (a->kind != K_POOL && a->kind != K_DEVICE && a->kind != K_GRAPH)) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (a->kind == K_GRAPH) { /* a graph allocation freed outside a graph */
        CUresult gr = gm_free_locked(a->gm);
        pthread_mutex_unlock(&cuda_lock);
        return gr;
    }
    if (a->kind == K_DEVICE) { /* cuMemFreeAsync of cuMemAlloc memory is allowed */
        dev_free_locked(a);
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_SUCCESS;
    }
    struct emu_pool_block *b = malloc(sizeof(*b));
    if (!b) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct CUmemPoolHandle_st *pool = a->pool;
    a->kind = K_POOL_FREE; /* the pool keeps it, still charged, until trimmed */
    pool->in_use -= a->size;
    b->ptr = a->ptr;
    b->size = a->size;
    b->next = pool->free_blocks;
    pool->free_blocks = b;
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    return free_async(p, s, false);
}

EMU_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    return free_async(p, s, true);
}

EMU_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!pool || !props || props->allocType != 1 || props->location.type != 1)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuda_check_init();
    if (r)
        return r;
    if (!cuda_dev_valid(props->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&cuda_lock);
    struct CUmemPoolHandle_st *p = pool_new(props->location.id);
    pthread_mutex_unlock(&cuda_lock);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = p;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    pthread_mutex_lock(&cuda_lock);
    struct CUmemPoolHandle_st *p = pool_of(pool);
    if (!p || p == default_pool[p->dev]) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pool_trim_locked(p, 0);
    if (current_pool[p->dev] == p)
        current_pool[p->dev] = default_pool[p->dev];
    /* blocks still handed out keep pointing at it: keep the object, mark it dead */
    p->magic = 0;
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    pthread_mutex_lock(&cuda_lock);
    struct CUmemPoolHandle_st *p = pool_of(pool);
    if (p)
        pool_trim_locked(p, keep);
    pthread_mutex_unlock(&cuda_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cuda_lock);
    struct CUmemPoolHandle_st *p = pool_of(pool);
    CUresult r = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p) {
        switch ((int)attr) {
        case 1:
        case 2:
        case 3:
            break; /* reuse policies: accepted */
        case 4:
            p->release_threshold = *(uint64_t *)value;
            break;
        case 6:
            p->held_high = p->reserved;
            break; /* reset high-water marks */
        case 8:
            p->used_high = p->in_use;
            break;
        default:
            r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

EMU_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cuda_lock);
    struct CUmemPoolHandle_st *p = pool_of(pool);
    CUresult r = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p) {
        switch ((int)attr) {
        case 1:
        case 2:
        case 3:
            *(int *)value = 1;
            break;
        case 4:
            *(uint64_t *)value = p->release_threshold;
            break;
        case 5:
            *(uint64_t *)value = p->reserved;
            break;
        case 6:
            *(uint64_t *)value = p->held_high;
            break;
        case 7:
            *(uint64_t *)value = p->in_use;
            break;
        case 8:
            *(uint64_t *)value = p->used_high;
            break;
        default:
            r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

EMU_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuda_check_init();
    if (r)
        return r;
    if (!cuda_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&cuda_lock);
    dev_pool_locked(dev);
    *pool = default_pool[dev];
    pthread_mutex_unlock(&cuda_lock);
    return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EMU_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuda_check_init();
    if (r)
        return r;
    if (!cuda_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&cuda_lock);
    *pool = dev_pool_locked(dev);
    pthread_mutex_unlock(&cuda_lock);
    return *pool ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EMU_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUresult r = cuda_check_init();
    if (r)
        return r;
    if (!cuda_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&cuda_lock);
    struct CUmemPoolHandle_st *p = pool_of(pool);
    if (p && p->dev == dev)
        current_pool[dev] = p;
    pthread_mutex_unlock(&cuda_lock);
    return p && p->dev == dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* per-thread default stream variants of the copies above */
DEF_COPY(cuMemcpy2DUnaligned_v2_ptds, true, (const CUDA_MEMCPY2D *p), SYNC_COPY(true), copy2d(p))
DEF_COPY(cuMemcpyPeer_ptds, true,
         (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n), SYNC_COPY(true),
         copy_checked(d, true, src, true, DP(d), DP(src), n))
DEF_COPY(cuMemcpyPeerAsync_ptsz, true,
         (CUdeviceptr d, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
         ASYNC_COPY(s, true), copy_checked(d, true, src, true, DP(d), DP(src), n))
DEF_COPY(cuMemsetD16_v2_ptds, true, (CUdeviceptr d, unsigned short v, size_t n), SYNC_COPY(true),
         memset_n(d, v, 2, n, 0, 1))
DEF_COPY(cuMemsetD16Async_ptsz, true, (CUdeviceptr d, unsigned short v, size_t n, CUstream s),
         ASYNC_COPY(s, true), memset_n(d, v, 2, n, 0, 1))
DEF_COPY(cuMemsetD2D8_v2_ptds, true,
         (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h), SYNC_COPY(true),
         memset_n(d, v, 1, w, pitch, h))
DEF_COPY(cuMemsetD2D32_v2_ptds, true,
         (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h), SYNC_COPY(true),
         memset_n(d, v, 4, w, pitch, h))
