/* region.c — the shared usage region: mapping, process slots, the lock-free
 * reservation protocol and reclaiming dead processes' slots. See region.h and
 * docs/vcuda.md (the correctness argument). */
#include "region.h"

#include "pace.h"
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)

/* Writes the constant header fields; every attaching process writes the same
 * values, so a creator killed half-way is simply finished by the next one. The
 * magic goes last (CAS from 0) so a reader that sees it sees the rest. */
static int region_init_header(struct vc_region_header *h)
{
    uint64_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
    if (magic == 0) {
        h->abi_version = VC_REGION_ABI;
        h->header_size = VC_REGION_HEADER_SIZE;
        h->region_size = VC_REGION_SIZE;
        h->slot_count = VC_REGION_SLOTS;
        h->slot_size = VC_REGION_SLOT_SIZE;
        h->slot_offset = VC_REGION_HEADER_SIZE;
        h->device_count = VC_REGION_DEVICES;
        uint64_t zero = 0;
        __atomic_compare_exchange_n(&h->magic, &zero, VC_REGION_MAGIC, false, __ATOMIC_RELEASE,
                                    __ATOMIC_ACQUIRE);
        magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
    }
    if (magic != VC_REGION_MAGIC || h->abi_version != VC_REGION_ABI ||
        h->header_size != VC_REGION_HEADER_SIZE || h->slot_count != VC_REGION_SLOTS ||
        h->slot_size != VC_REGION_SLOT_SIZE || h->slot_offset != VC_REGION_HEADER_SIZE ||
        h->device_count != VC_REGION_DEVICES)
        return -EPROTO;
    return 0;
}

int vc_region_attach(const char *path, struct vc_region *ret)
{
    void *map;
    bool anonymous = !path || !*path;
    if (anonymous) {
        map = mmap(NULL, VC_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED)
            return -errno;
    } else {
        /* others may read (not write): the node's exporter, an unprivileged user, serves
         * the container's usage from it (docs/exporter.md, "vGPU usage regions") */
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0664);
        if (fd < 0)
            return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0) {
            int r = -errno;
            close(fd);
            return r;
        }
        if (!S_ISREG(st.st_mode)) {
            close(fd);
            return -EPROTO;
        }
        /* Growing to the same size from several processes at once is
         * harmless: the new bytes are zero either way. Never shrink. */
        if ((uint64_t)st.st_size < VC_REGION_SIZE && ftruncate(fd, (off_t)VC_REGION_SIZE) < 0) {
            int r = -errno;
            close(fd);
            return r;
        }
        map = mmap(NULL, VC_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        int e = errno;
        close(fd);
        if (map == MAP_FAILED)
            return -e;
    }
    int r = region_init_header(map);
    if (r < 0) {
        munmap(map, VC_REGION_SIZE);
        return r;
    }
    /* every field: the caller's struct may hold anything (own_busy above all) */
    *ret = (struct vc_region){
        .hdr = map,
        .slots = (struct vc_region_slot *)((char *)map + VC_REGION_HEADER_SIZE),
        .map_size = VC_REGION_SIZE,
        .anonymous = anonymous,
        .mine_slot = -1,
    };
    return 0;
}

void vc_region_detach(struct vc_region *r)
{
    if (!r || !r->hdr)
        return;
    munmap(r->hdr, r->map_size);
    r->hdr = NULL;
    r->slots = NULL;
}

uint64_t vc_proc_start_time(uint32_t pid)
{
    uint64_t t = 0; /* 0 = unknown: a slot's owner is then judged by kill() alone */
    proc_start_time((pid_t)pid, &t);
    return t;
}

static void raise_hwm(struct vc_region_header *h, uint32_t n)
{
    uint32_t cur = LOAD(&h->slot_hwm);
    while (cur < n && !__atomic_compare_exchange_n(&h->slot_hwm, &cur, n, false, __ATOMIC_SEQ_CST,
                                                   __ATOMIC_SEQ_CST))
        ;
}

static int claim_free_slot(struct vc_region *r, uint32_t pid, uint64_t start_time)
{
    for (uint32_t i = 0; i < VC_REGION_SLOTS; i++) {
        uint64_t expect = 0;
        if (LOAD_RELAXED(&r->slots[i].owner) != 0)
            continue;
        if (!__atomic_compare_exchange_n(&r->slots[i].owner, &expect, (uint64_t)pid, false,
                                         __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            continue;
        /* The hwm is raised before this slot ever holds a byte, so every scan
         * that could miss it runs before our first reservation (docs/vcuda.md). */
        raise_hwm(r->hdr, i + 1);
        STORE(&r->slots[i].start_time, start_time);
        /* A thread of an exiting owner may have added after the owner's exit
         * zeroed the slot: such leftovers are not ours. */
        for (unsigned d = 0; d < VC_REGION_DEVICES; d++)
            STORE(&r->slots[i].used[d], 0);
        return (int)i;
    }
    return -ENOSPC;
}

int vc_region_claim_slot(struct vc_region *r, uint32_t pid, uint64_t start_time)
{
    for (unsigned d = 0; d < VC_REGION_DEVICES; d++)
        __atomic_store_n(&r->mine[d], 0, __ATOMIC_RELAXED);
    int s = claim_free_slot(r, pid, start_time);
    if (s < 0 && vc_region_reap(r) > 0)
        s = claim_free_slot(r, pid, start_time);
    r->mine_slot = s;
    return s;
}

/* The compute-share state (pace.h) lives in the header's and the slots'
 * fields reserved for it. */
static struct pace_shared *region_pace(struct vc_region *r)
{
    return (struct pace_shared *)(void *)&r->hdr->core_limit;
}

static struct pace_slot *slot_pace(struct vc_region_slot *s)
{
    return (struct pace_slot *)(void *)&s->gpu_time_ns;
}

static void zero_slot(struct vc_region_slot *s)
{
    for (unsigned d = 0; d < VC_REGION_DEVICES; d++)
        STORE(&s->used[d], 0);
    STORE(&s->gpu_time_ns, 0);
    STORE(&s->launches, 0);
    for (unsigned i = 0; i < sizeof(s->pace_reserved) / sizeof(s->pace_reserved[0]); i++)
        STORE(&s->pace_reserved[i], 0);
    STORE(&s->start_time, 0);
}

void vc_region_release_slot(struct vc_region *r, int slot, uint32_t pid)
{
    if (!r || !r->hdr || slot < 0)
        return;
    struct vc_region_slot *s = &r->slots[slot];
    if ((LOAD(&s->owner) & VC_OWNER_PID_MASK) != pid || (LOAD(&s->owner) & VC_OWNER_RECLAIM))
        return;
    /* Our launches not measured yet stay charged to the container. */
    pace_slot_retire(region_pace(r), slot_pace(s));
    zero_slot(s);
    uint64_t expect = pid;
    __atomic_compare_exchange_n(&s->owner, &expect, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
}

static bool pid_alive(uint32_t pid, uint64_t start_time)
{
    if (pid == 0)
        return false;
    if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
        return false;
    /* Alive (or EPERM: exists under another uid). A reused pid shows another
     * start time; an unknown start time (0) cannot prove reuse. */
    if (start_time != 0) {
        uint64_t now = vc_proc_start_time(pid);
        if (now != 0 && now != start_time)
            return false;
    }
    return true;
}

/* A free slot still counting bytes (left by a thread of an exiting process
 * after its exit zeroed the slot) is zeroed under a reclaim mark, so no
 * claimer can start using it meanwhile. */
static void reap_free_leftovers(struct vc_region_slot *s, uint32_t me)
{
    bool any = false;
    for (unsigned d = 0; d < VC_REGION_DEVICES && !any; d++)
        any = LOAD_RELAXED(&s->used[d]) != 0;
    uint64_t expect = 0;
    if (!any || !__atomic_compare_exchange_n(&s->owner, &expect, VC_OWNER_RECLAIM | me, false,
                                             __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return;
    for (unsigned d = 0; d < VC_REGION_DEVICES; d++)
        STORE(&s->used[d], 0);
    STORE(&s->owner, 0);
}

int vc_region_reap(struct vc_region *r)
{
    if (!r || !r->hdr || r->anonymous)
        return 0;
    uint32_t me = (uint32_t)getpid();
    uint32_t hwm = LOAD(&r->hdr->slot_hwm);
    if (hwm > VC_REGION_SLOTS)
        hwm = VC_REGION_SLOTS;
    int reaped = 0;
    for (uint32_t i = 0; i < hwm; i++) {
        struct vc_region_slot *s = &r->slots[i];
        uint64_t owner = LOAD(&s->owner);
        if (owner == 0) {
            reap_free_leftovers(s, me);
            continue;
        }
        uint32_t pid = (uint32_t)(owner & VC_OWNER_PID_MASK);
        if (owner & VC_OWNER_RECLAIM) {
            /* Another reaper is at work; take over only if it died. */
            if (pid_alive(pid, 0))
                continue;
        } else if (pid == me || pid_alive(pid, LOAD(&s->start_time))) {
            continue;
        }
        uint64_t mine = VC_OWNER_RECLAIM | me;
        if (!__atomic_compare_exchange_n(&s->owner, &owner, mine, false, __ATOMIC_SEQ_CST,
                                         __ATOMIC_RELAXED))
            continue;
        /* Zeroing is idempotent: if we die here, the next reaper repeats it.
         * Until the owner word is 0 nobody else claims the slot. The dead
         * process's launches that were charged but never measured are
         * refunded to the container's compute budget first (exactly once). */
        pace_slot_reclaim(region_pace(r), slot_pace(s));
        zero_slot(s);
        STORE(&s->owner, 0);
        reaped++;
    }
    return reaped;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    sched_yield();
#endif
}

static inline uint64_t sat_add(uint64_t a, uint64_t b)
{
    uint64_t s;
    return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

uint64_t vc_region_used(const struct vc_region *r, unsigned dev)
{
    if (!r->hdr || dev >= VC_REGION_DEVICES)
        return 0;
    uint32_t hwm = LOAD(&r->hdr->slot_hwm);
    if (hwm > VC_REGION_SLOTS)
        hwm = VC_REGION_SLOTS;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < hwm; i++)
        sum = sat_add(sum, LOAD(&r->slots[i].used[dev]));
    return sum;
}

/* Ordering that makes a lowered slot recognizable: our own slot is raised
 * before mine[] and lowered after it, so slot < mine[] never happens unless
 * someone else wrote the slot. */
static void sub_sat(uint64_t *p, uint64_t bytes, int order)
{
    uint64_t cur = LOAD_RELAXED(p);
    uint64_t next;
    do {
        next = cur > bytes ? cur - bytes : 0;
    } while (!__atomic_compare_exchange_n(p, &cur, next, true, order, __ATOMIC_RELAXED));
}

/* Brackets an update of our own slot and mine[] (threads of this process
 * update them concurrently; heal() must not read them mid-update). */
static void own_begin(struct vc_region *r)
{
    __atomic_fetch_add(&r->own_busy, 1, __ATOMIC_SEQ_CST);
}

static void own_end(struct vc_region *r)
{
    __atomic_fetch_add(&r->own_gen, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&r->own_busy, 1, __ATOMIC_SEQ_CST);
}

/* Puts back what was taken from our slot behind our back. mine[] and the slot
 * are read as one snapshot: no own update in progress before and after, and
 * none completed in between; otherwise another thread is moving them and a
 * later call heals. The slot is set with a CAS, so a concurrent heal or update
 * is never added twice (an update that starts after the snapshot applies its
 * delta on top of the healed value). */
static void heal(struct vc_region *r, int slot, unsigned dev)
{
    if (slot != r->mine_slot || __atomic_load_n(&r->own_busy, __ATOMIC_SEQ_CST))
        return;
    uint64_t gen = __atomic_load_n(&r->own_gen, __ATOMIC_SEQ_CST);
    uint64_t want = __atomic_load_n(&r->mine[dev], __ATOMIC_SEQ_CST);
    uint64_t have = LOAD(&r->slots[slot].used[dev]);
    if (have >= want || __atomic_load_n(&r->own_busy, __ATOMIC_SEQ_CST) ||
        __atomic_load_n(&r->own_gen, __ATOMIC_SEQ_CST) != gen)
        return;
    if (__atomic_compare_exchange_n(&r->slots[slot].used[dev], &have, want, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED))
        __atomic_fetch_add(&r->tampered, 1, __ATOMIC_RELAXED);
}

void vc_region_charge(struct vc_region *r, int slot, unsigned dev, uint64_t bytes)
{
    if (slot < 0 || dev >= VC_REGION_DEVICES || bytes == 0)
        return;
    if (slot != r->mine_slot) {
        __atomic_fetch_add(&r->slots[slot].used[dev], bytes, __ATOMIC_SEQ_CST);
        return;
    }
    own_begin(r);
    __atomic_fetch_add(&r->slots[slot].used[dev], bytes, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&r->mine[dev], bytes, __ATOMIC_SEQ_CST);
    own_end(r);
}

void vc_region_release(struct vc_region *r, int slot, unsigned dev, uint64_t bytes)
{
    if (slot < 0 || dev >= VC_REGION_DEVICES || bytes == 0)
        return;
    if (slot != r->mine_slot) {
        sub_sat(&r->slots[slot].used[dev], bytes, __ATOMIC_RELEASE);
        return;
    }
    own_begin(r);
    sub_sat(&r->mine[dev], bytes, __ATOMIC_SEQ_CST);
    sub_sat(&r->slots[slot].used[dev], bytes, __ATOMIC_SEQ_CST);
    own_end(r);
}

int vc_region_reserve(struct vc_region *r, int slot, unsigned dev, uint64_t bytes, uint64_t limit)
{
    if (slot < 0 || dev >= VC_REGION_DEVICES)
        return -EINVAL;
    if (limit == 0) {
        vc_region_charge(r, slot, dev, bytes);
        return 0;
    }
    if (bytes > limit)
        return -ENOSPC;
    uint64_t *mine = &r->slots[slot].used[dev];
    heal(r, slot, dev);
    /* This process alone never goes over the limit, whatever the shared
     * counters say (they can be lowered by anyone who can write the file). */
    bool own = slot == r->mine_slot;
    if (own && sat_add(__atomic_load_n(&r->mine[dev], __ATOMIC_RELAXED), bytes) > limit)
        return -ENOSPC;
    /* A racer can make us fail while both of us would not fit, and never
     * succeed while we would not. When the others alone leave room, we lost a
     * race with a reservation that was itself backing off: try again a few
     * times before calling it out of memory. */
    for (int attempt = 0; attempt < 32; attempt++) {
        /* seq_cst RMW: a full barrier, so the scan below cannot be ordered
         * before our claim is visible to every other scanner. */
        if (own)
            own_begin(r);
        __atomic_fetch_add(mine, bytes, __ATOMIC_SEQ_CST);
        uint64_t sum = vc_region_used(r, dev);
        if (sum <= limit) {
            if (own) {
                __atomic_fetch_add(&r->mine[dev], bytes, __ATOMIC_SEQ_CST);
                own_end(r);
            }
            return 0;
        }
        sub_sat(mine, bytes, __ATOMIC_RELEASE);
        if (own)
            own_end(r);
        uint64_t others = vc_region_used(r, dev);
        if (sat_add(others, bytes) > limit)
            return -ENOSPC;
        /* Contention: back off a little (spread by slot) and retry. */
        for (int i = 0; i < (attempt + 1) * (8 + slot % 8); i++)
            cpu_relax();
    }
    return -ENOSPC;
}

int vc_region_audit(const struct vc_region *r, unsigned dev, const struct vc_audit_proc *procs,
                    size_t nprocs, uint64_t slack, struct vc_audit_finding *ret, size_t max)
{
    if (!r || !r->hdr || dev >= VC_REGION_DEVICES)
        return -EINVAL;
    const struct vc_region_header *h = r->hdr;
    if (LOAD(&h->magic) != VC_REGION_MAGIC || h->abi_version != VC_REGION_ABI ||
        h->slot_count != VC_REGION_SLOTS || h->slot_size != VC_REGION_SLOT_SIZE)
        return -EPROTO;
    int n = 0;
    for (size_t i = 0; i < nprocs; i++) {
        int slot = -1;
        uint64_t held = 0;
        /* Every slot, not only below slot_hwm: the hwm is writable too. */
        for (uint32_t k = 0; k < VC_REGION_SLOTS; k++) {
            uint64_t owner = LOAD(&r->slots[k].owner);
            if (owner && !(owner & VC_OWNER_RECLAIM) &&
                (uint32_t)(owner & VC_OWNER_PID_MASK) == procs[i].pid) {
                slot = (int)k;
                held = LOAD(&r->slots[k].used[dev]);
                break;
            }
        }
        if (procs[i].used_bytes <= held || procs[i].used_bytes - held <= slack)
            continue;
        if ((size_t)n < max)
            ret[n] = (struct vc_audit_finding){procs[i].pid, slot, held, procs[i].used_bytes};
        n++;
    }
    return n;
}
