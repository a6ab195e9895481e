/* state-mig.c — MIG instances on the shared machine; see state-mig.h. The driver's rules come
 * from NVML's documentation (nvml.h, "Multi Instance GPU Management"): creation fails with
 * "insufficient resources" when the placement overlaps occupied memory slices (GPU instances)
 * or compute slices (compute instances) or the profile's instance count is reached; destroying a
 * GPU instance with compute instances, or an instance with processes on it, is "in use"; the
 * mode change is activated by a GPU reset that fails while the GPU is not idle
 * (nvmlDeviceSetMigMode's activationStatus). What was inferred (placement chosen when none is
 * asked for, instance IDs, UUIDs) is said where it is done and in docs/emulator.md. */
#include "state-mig.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util.h"

const struct emu_mig_board *emu_state_mig_board(const struct emu_gpu *g)
{
    return g ? emu_mig_board_find(g->name) : NULL;
}

int32_t emu_state_busy_pid_locked(struct emu_state *st, unsigned gpu)
{
    struct emu_shared *sh = emu_state_shared(st);
    emu_state_reclaim_lazily_locked(st);
    for (unsigned i = 0; i < EMU_MAX_PROCS; i++)
        if (sh->procs[i].pid && sh->procs[i].mem[gpu])
            return sh->procs[i].pid;
    return 0;
}

/* A live process with memory on any compute instance in [serials, serials + n) of gpu. */
static int32_t pid_on_locked(struct emu_state *st, unsigned gpu, const uint64_t *serials, size_t n)
{
    struct emu_shared *sh = emu_state_shared(st);
    emu_state_reclaim_lazily_locked(st);
    for (unsigned i = 0; i < EMU_MAX_PROCS; i++) {
        const struct emu_proc *p = &sh->procs[i];
        if (!p->pid || !p->mem[gpu] || !p->mig_serial[gpu])
            continue;
        for (size_t k = 0; k < n; k++)
            if (p->mig_serial[gpu] == serials[k])
                return p->pid;
    }
    return 0;
}

static void mig_clear(struct emu_gpu *g)
{
    memset(g->mig, 0, sizeof(g->mig));
}

int emu_state_mig_set_mode(struct emu_state *st, unsigned gpu, bool on, bool *ret_active,
                           int32_t *ret_busy_pid)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    if (!emu_state_mig_board(g))
        return -EOPNOTSUPP;
    emu_state_lock(st);
    g->mig_mode_pending = on;
    int32_t busy = 0;
    bool active = g->mig_mode == g->mig_mode_pending;
    if (!active) {
        busy = emu_state_busy_pid_locked(st, gpu);
        if (!busy) {
            g->mig_mode = g->mig_mode_pending;
            mig_clear(g);
            active = true;
        }
    }
    emu_state_unlock(st);
    if (ret_active)
        *ret_active = active;
    if (ret_busy_pid)
        *ret_busy_pid = busy;
    return 0;
}

int emu_state_gpu_reset(struct emu_state *st, unsigned gpu, int32_t *ret_busy_pid)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    int32_t busy = emu_state_busy_pid_locked(st, gpu);
    if (!busy) {
        g->mig_mode = g->mig_mode_pending;
        mig_clear(g);
    }
    emu_state_unlock(st);
    if (ret_busy_pid)
        *ret_busy_pid = busy;
    return busy ? -EBUSY : 0;
}

/* ---- GPU instances ---- */

static unsigned gi_mask(const struct emu_mig_gi *tab)
{
    unsigned m = 0;
    for (unsigned s = 0; s < EMU_MIG_MAX_GI; s++)
        if (tab[s].used)
            m |= emu_mig_bits(tab[s].start, tab[s].size);
    return m;
}

static unsigned gi_count(const struct emu_mig_gi *tab, unsigned profile)
{
    unsigned n = 0;
    for (unsigned s = 0; s < EMU_MIG_MAX_GI; s++)
        n += tab[s].used && tab[s].profile == profile;
    return n;
}

/* Where the driver puts a GPU instance when asked for none: the highest free placement. The
 * MIG User Guide's example of `nvidia-smi mig -cgi 19,14,5` on an empty A100 got GPU instance
 * IDs 13, 5 and 1: slices 6, 4-5 and 0-3, each the highest placement still free (inferred from
 * that example; NVIDIA documents no rule). -1 when none is free. */
static int gi_pick(const struct emu_mig_gi_profile *p, unsigned mask)
{
    for (unsigned k = p->nstarts; k-- > 0;) {
        unsigned want = emu_mig_bits(p->starts[k], p->mem_slices);
        if (!(mask & want))
            return (int)p->starts[k];
    }
    return -1;
}

static bool mig_enabled(const struct emu_gpu *g, const struct emu_mig_board **ret_board)
{
    const struct emu_mig_board *b = emu_state_mig_board(g);
    *ret_board = b;
    return b && g->mig_mode;
}

/* Creates a GPU instance in table tab (a GPU's, or a copy of it) of board b; serials from
 * *serial_last. */
static int gi_create_in(struct emu_mig_gi *tab, const struct emu_mig_board *b, unsigned profile,
                        const struct emu_mig_placement *placement, uint64_t *serial_last,
                        unsigned *ret_slot)
{
    const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(b, profile);
    int start;
    unsigned slot = EMU_MIG_MAX_GI, mask = gi_mask(tab);
    if (!p)
        return -EINVAL;
    if (placement) {
        if (placement->size != p->mem_slices || !emu_mig_gi_start_ok(p, placement->start))
            return -EINVAL;
        if (mask & emu_mig_bits(placement->start, p->mem_slices))
            return -ENOSPC;
        start = (int)placement->start;
    } else {
        start = gi_pick(p, mask);
    }
    for (unsigned s = 0; s < EMU_MIG_MAX_GI && slot == EMU_MIG_MAX_GI; s++)
        if (!tab[s].used)
            slot = s;
    if (start < 0 || gi_count(tab, profile) >= p->instances || slot == EMU_MIG_MAX_GI)
        return -ENOSPC;
    struct emu_mig_gi *gi = &tab[slot];
    memset(gi, 0, sizeof(*gi));
    gi->id = (uint32_t)emu_mig_gi_id((unsigned)start, p->mem_slices);
    gi->profile = profile;
    gi->start = (uint32_t)start;
    gi->size = p->mem_slices;
    gi->serial = ++*serial_last;
    gi->used = 1; /* last: a half-made slot is an unused one */
    *ret_slot = slot;
    return 0;
}

int emu_state_mig_gi_create(struct emu_state *st, unsigned gpu, unsigned profile,
                            const struct emu_mig_placement *placement, unsigned *ret_slot,
                            uint64_t *ret_serial)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    const struct emu_mig_board *b;
    unsigned slot;
    int r = mig_enabled(g, &b) ? gi_create_in(g->mig, b, profile, placement,
                                              &emu_state_shared(st)->mig_serial_last, &slot)
                               : -EOPNOTSUPP;
    if (r == 0 && ret_slot)
        *ret_slot = slot;
    if (r == 0 && ret_serial)
        *ret_serial = g->mig[slot].serial;
    emu_state_unlock(st);
    return r;
}

static struct emu_mig_gi *gi_live(struct emu_gpu *g, unsigned slot, uint64_t serial)
{
    if (!g || slot >= EMU_MIG_MAX_GI || !g->mig[slot].used || g->mig[slot].serial != serial)
        return NULL;
    return &g->mig[slot];
}

int emu_state_mig_gi_destroy(struct emu_state *st, unsigned gpu, unsigned slot, uint64_t serial)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    struct emu_mig_gi *gi = gi_live(g, slot, serial);
    int r = 0;
    if (!gi) {
        r = -ENOENT;
    } else {
        for (unsigned c = 0; c < EMU_MIG_MAX_CI; c++)
            if (gi->ci[c].used)
                r = -EBUSY;
        if (r == 0)
            memset(gi, 0, sizeof(*gi));
    }
    emu_state_unlock(st);
    return r;
}

/* How many more of profile p fit in the memory slices mask (greedy at the driver's choice of
 * placement: placements are aligned blocks, so this is the most that fit). */
static unsigned gi_room(const struct emu_mig_gi_profile *p, unsigned mask, unsigned have)
{
    unsigned n = 0;
    int s;
    while (have + n < p->instances && (s = gi_pick(p, mask)) >= 0) {
        mask |= emu_mig_bits((unsigned)s, p->mem_slices);
        n++;
    }
    return n;
}

int emu_state_mig_gi_remaining(struct emu_state *st, unsigned gpu, unsigned profile,
                               unsigned *ret_count)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    const struct emu_mig_board *b;
    const struct emu_mig_gi_profile *p = NULL;
    int r = 0;
    if (!mig_enabled(g, &b))
        r = -EOPNOTSUPP;
    else if (!(p = emu_mig_gi_by_index(b, profile)))
        r = -EINVAL;
    else
        *ret_count = gi_room(p, gi_mask(g->mig), gi_count(g->mig, profile));
    emu_state_unlock(st);
    return r;
}

/* ---- compute instances ---- */

static unsigned ci_mask(const struct emu_mig_gi *gi)
{
    unsigned m = 0;
    for (unsigned c = 0; c < EMU_MIG_MAX_CI; c++)
        if (gi->ci[c].used)
            m |= emu_mig_bits(gi->ci[c].start, gi->ci[c].size);
    return m;
}

static unsigned ci_count(const struct emu_mig_gi *gi, unsigned profile)
{
    unsigned n = 0;
    for (unsigned c = 0; c < EMU_MIG_MAX_CI; c++)
        n += gi->ci[c].used && gi->ci[c].profile == profile;
    return n;
}

/* The lowest free placement (inferred: NVIDIA documents no rule for compute instances). */
static int ci_pick(const struct emu_mig_ci_profile *p, unsigned mask)
{
    for (unsigned k = 0; k < p->nstarts; k++)
        if (!(mask & emu_mig_bits(p->starts[k], p->slices)))
            return (int)p->starts[k];
    return -1;
}

/* splitmix64, as state.c's UUIDs: reproducible from the machine's seed */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A MIG device's UUID, "MIG-" and a version-4-looking UUID derived from the machine's seed, the
 * GPU and the instance's serial: every instance created gets a new one, as the driver gives a
 * re-created instance a new UUID ("UUIDs are immutable for the lifetime of a MIG device",
 * nvmlDeviceGetUUID). */
static void ci_uuid(struct emu_mig_ci *ci, uint64_t seed, unsigned gpu)
{
    uint64_t s =
        seed * 0x100000001b3ull ^ ((uint64_t)gpu << 56) ^ ci->serial * 0x2545f4914f6cdd1dull;
    uint64_t a = mix64(&s), b = mix64(&s);
    uint8_t *u = ci->uuid_bytes;
    for (int k = 0; k < 8; k++) {
        u[k] = (uint8_t)(a >> (8 * k));
        u[8 + k] = (uint8_t)(b >> (8 * k));
    }
    u[6] = (uint8_t)((u[6] & 0x0f) | 0x40);
    u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
    snprintf(ci->uuid, sizeof(ci->uuid),
             "MIG-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
}

/* Creates a compute instance in GPU instance gi (of profile gp), on GPU gpu of a machine with
 * seed (its UUID); serials from *serial_last. */
static int ci_create_in(struct emu_mig_gi *gi, const struct emu_mig_gi_profile *gp,
                        unsigned profile, const struct emu_mig_placement *placement,
                        uint64_t *serial_last, uint64_t seed, unsigned gpu, unsigned *ret_slot)
{
    struct emu_mig_ci_profile p;
    int start;
    unsigned slot = EMU_MIG_MAX_CI, mask = ci_mask(gi), id = 0;
    if (!emu_mig_ci_profile(gp->compute_slices, profile, &p))
        return -EINVAL;
    if (placement) {
        bool listed = false;
        for (unsigned k = 0; k < p.nstarts; k++)
            listed |= p.starts[k] == placement->start;
        if (placement->size != p.slices || !listed)
            return -EINVAL;
        if (mask & emu_mig_bits(placement->start, p.slices))
            return -ENOSPC;
        start = (int)placement->start;
    } else {
        start = ci_pick(&p, mask);
    }
    /* the lowest free ID (nvidia-smi's examples number a GPU instance's compute instances 0, 1,
     * 2 in creation order) */
    for (bool taken = true; taken && id < EMU_MIG_MAX_CI; id += taken) {
        taken = false;
        for (unsigned c = 0; c < EMU_MIG_MAX_CI; c++)
            taken |= gi->ci[c].used && gi->ci[c].id == id;
    }
    for (unsigned c = 0; c < EMU_MIG_MAX_CI && slot == EMU_MIG_MAX_CI; c++)
        if (!gi->ci[c].used)
            slot = c;
    if (start < 0 || ci_count(gi, profile) >= p.nstarts || slot == EMU_MIG_MAX_CI ||
        id >= EMU_MIG_MAX_CI)
        return -ENOSPC;
    struct emu_mig_ci *ci = &gi->ci[slot];
    memset(ci, 0, sizeof(*ci));
    ci->id = id;
    ci->profile = profile;
    ci->start = (uint32_t)start;
    ci->size = p.slices;
    ci->serial = ++*serial_last;
    ci_uuid(ci, seed, gpu);
    ci->used = 1;
    *ret_slot = slot;
    return 0;
}

int emu_state_mig_ci_create(struct emu_state *st, unsigned gpu, unsigned gi_slot,
                            uint64_t gi_serial, unsigned profile,
                            const struct emu_mig_placement *placement, unsigned *ret_slot,
                            uint64_t *ret_serial)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    struct emu_shared *sh = emu_state_shared(st);
    struct emu_mig_gi *gi = gi_live(g, gi_slot, gi_serial);
    const struct emu_mig_board *b = emu_state_mig_board(g);
    const struct emu_mig_gi_profile *gp = gi && b ? emu_mig_gi_by_index(b, gi->profile) : NULL;
    unsigned slot;
    int r =
        gp ? ci_create_in(gi, gp, profile, placement, &sh->mig_serial_last, sh->seed, gpu, &slot)
           : -ENOENT;
    if (r == 0 && ret_slot)
        *ret_slot = slot;
    if (r == 0 && ret_serial)
        *ret_serial = gi->ci[slot].serial;
    emu_state_unlock(st);
    return r;
}

int emu_state_mig_create_default(struct emu_state *st, unsigned gpu, const unsigned *profiles,
                                 size_t n, unsigned *ret_gi, unsigned *ret_ci, size_t *ret_failed)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g || n > EMU_MIG_MAX_GI)
        return -EINVAL;
    emu_state_lock(st);
    struct emu_shared *sh = emu_state_shared(st);
    const struct emu_mig_board *b;
    struct emu_mig_gi tab[EMU_MIG_MAX_GI];
    uint64_t serial = sh->mig_serial_last;
    int r = mig_enabled(g, &b) ? 0 : -EOPNOTSUPP;
    size_t k = 0;
    /* on a copy of the table: the machine changes only when every one fits */
    memcpy(tab, g->mig, sizeof(tab));
    for (; r == 0 && k < n; k++) {
        const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(b, profiles[k]);
        struct emu_mig_ci_profile cp[5];
        size_t ncp = p ? emu_mig_ci_profiles(p->compute_slices, cp) : 0;
        r = ncp ? gi_create_in(tab, b, profiles[k], NULL, &serial, &ret_gi[k]) : -EINVAL;
        if (r == 0) /* the compute instance that fills it: the last, largest profile */
            r = ci_create_in(&tab[ret_gi[k]], p, cp[ncp - 1].index, NULL, &serial, sh->seed, gpu,
                             &ret_ci[k]);
    }
    if (r == 0) {
        memcpy(g->mig, tab, sizeof(tab));
        sh->mig_serial_last = serial;
    } else if (ret_failed) {
        *ret_failed = k - 1;
    }
    emu_state_unlock(st);
    return r;
}

int emu_state_mig_ci_destroy(struct emu_state *st, unsigned gpu, unsigned gi_slot, unsigned ci_slot,
                             uint64_t serial, int32_t *ret_busy_pid)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g || gi_slot >= EMU_MIG_MAX_GI || ci_slot >= EMU_MIG_MAX_CI)
        return -EINVAL;
    emu_state_lock(st);
    struct emu_mig_gi *gi = &g->mig[gi_slot];
    struct emu_mig_ci *ci = &gi->ci[ci_slot];
    int r = 0;
    int32_t busy = 0;
    if (!gi->used || !ci->used || ci->serial != serial)
        r = -ENOENT;
    else if ((busy = pid_on_locked(st, gpu, &ci->serial, 1)))
        r = -EBUSY;
    else
        memset(ci, 0, sizeof(*ci));
    emu_state_unlock(st);
    if (ret_busy_pid)
        *ret_busy_pid = busy;
    return r;
}

int emu_state_mig_destroy_all(struct emu_state *st, unsigned gpu, int32_t *ret_busy_pid)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    uint64_t serials[EMU_MIG_MAX_GI * EMU_MIG_MAX_CI];
    size_t n = 0;
    for (unsigned s = 0; s < EMU_MIG_MAX_GI; s++)
        for (unsigned c = 0; g->mig[s].used && c < EMU_MIG_MAX_CI; c++)
            if (g->mig[s].ci[c].used)
                serials[n++] = g->mig[s].ci[c].serial;
    int32_t busy = pid_on_locked(st, gpu, serials, n);
    if (!busy)
        mig_clear(g);
    emu_state_unlock(st);
    if (ret_busy_pid)
        *ret_busy_pid = busy;
    return busy ? -EBUSY : 0;
}

int emu_state_mig_ci_remaining(struct emu_state *st, unsigned gpu, unsigned gi_slot,
                               uint64_t gi_serial, unsigned profile, unsigned *ret_count)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    struct emu_mig_gi *gi = gi_live(g, gi_slot, gi_serial);
    const struct emu_mig_board *b = emu_state_mig_board(g);
    const struct emu_mig_gi_profile *gp = gi && b ? emu_mig_gi_by_index(b, gi->profile) : NULL;
    struct emu_mig_ci_profile p;
    int r = 0;
    if (!gp) {
        r = -ENOENT;
    } else if (!emu_mig_ci_profile(gp->compute_slices, profile, &p)) {
        r = -EINVAL;
    } else {
        unsigned mask = ci_mask(gi), n = 0, have = ci_count(gi, profile);
        int s;
        while (have + n < p.nstarts && (s = ci_pick(&p, mask)) >= 0) {
            mask |= emu_mig_bits((unsigned)s, p.slices);
            n++;
        }
        *ret_count = n;
    }
    emu_state_unlock(st);
    return r;
}

/* ---- lookups ---- */

int emu_state_mig_snapshot(struct emu_state *st, unsigned gpu,
                           struct emu_mig_gi out[EMU_MIG_MAX_GI])
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    memcpy(out, g->mig, sizeof(g->mig));
    emu_state_unlock(st);
    return 0;
}

size_t emu_mig_order(const struct emu_mig_gi *tab, unsigned *gis, unsigned *cis, size_t max)
{
    size_t n = 0;
    for (unsigned gid = 0; gid < 2 * EMU_MIG_MEM_SLICES; gid++) /* IDs 0-14 */
        for (unsigned s = 0; s < EMU_MIG_MAX_GI; s++) {
            if (!tab[s].used || tab[s].id != gid)
                continue;
            for (unsigned cid = 0; cid < EMU_MIG_MAX_CI; cid++)
                for (unsigned c = 0; c < EMU_MIG_MAX_CI; c++)
                    if (tab[s].ci[c].used && tab[s].ci[c].id == cid && n < max) {
                        gis[n] = s;
                        cis[n++] = c;
                    }
        }
    return n;
}

int emu_mig_find_serial(const struct emu_mig_gi *tab, uint64_t serial, unsigned *ret_gi,
                        unsigned *ret_ci)
{
    for (unsigned s = 0; serial && s < EMU_MIG_MAX_GI; s++)
        for (unsigned c = 0; tab[s].used && c < EMU_MIG_MAX_CI; c++)
            if (tab[s].ci[c].used && tab[s].ci[c].serial == serial) {
                if (ret_gi)
                    *ret_gi = s;
                if (ret_ci)
                    *ret_ci = c;
                return 0;
            }
    return -ENOENT;
}

int emu_state_mig_find_uuid(struct emu_state *st, const char *uuid, unsigned *ret_gpu,
                            unsigned *ret_gi, unsigned *ret_ci, uint64_t *ret_serial)
{
    if (!uuid || strncasecmp(uuid, "MIG-", 4) != 0)
        return -ENOENT;
    int r = -ENOENT;
    emu_state_lock(st);
    for (unsigned i = 0; r && i < emu_state_gpu_count(st); i++) {
        const struct emu_gpu *g = emu_state_gpu(st, i);
        for (unsigned s = 0; r && s < EMU_MIG_MAX_GI; s++)
            for (unsigned c = 0; r && g->mig[s].used && c < EMU_MIG_MAX_CI; c++) {
                const struct emu_mig_ci *ci = &g->mig[s].ci[c];
                if (ci->used && strcasecmp(ci->uuid, uuid) == 0) {
                    *ret_gpu = i;
                    *ret_gi = s;
                    *ret_ci = c;
                    *ret_serial = ci->serial;
                    r = 0;
                }
            }
    }
    emu_state_unlock(st);
    return r;
}

static uint64_t gi_used_locked(struct emu_shared *sh, unsigned gpu, const struct emu_mig_gi *gi)
{
    uint64_t used = 0;
    for (unsigned i = 0; i < EMU_MAX_PROCS; i++) {
        const struct emu_proc *p = &sh->procs[i];
        if (!p->pid || !p->mig_serial[gpu])
            continue;
        for (unsigned c = 0; c < EMU_MIG_MAX_CI; c++)
            if (gi->ci[c].used && gi->ci[c].serial == p->mig_serial[gpu])
                used += p->mem[gpu];
    }
    return used;
}

uint64_t emu_state_mig_gi_used(struct emu_state *st, unsigned gpu, unsigned gi_slot)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g || gi_slot >= EMU_MIG_MAX_GI)
        return 0;
    emu_state_lock(st);
    emu_state_reclaim_lazily_locked(st);
    uint64_t used =
        g->mig[gi_slot].used ? gi_used_locked(emu_state_shared(st), gpu, &g->mig[gi_slot]) : 0;
    emu_state_unlock(st);
    return used;
}

int emu_mig_room_locked(struct emu_shared *sh, unsigned gpu, uint64_t serial, uint64_t bytes)
{
    const struct emu_gpu *g = &sh->gpus[gpu];
    unsigned s, c;
    const struct emu_mig_board *b = emu_state_mig_board(g);
    if (!b || emu_mig_find_serial(g->mig, serial, &s, &c) < 0)
        return -ENODEV;
    const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(b, g->mig[s].profile);
    if (!p)
        return -ENODEV;
    uint64_t limit = emu_mig_gi_bytes(b, p, g->memory_total);
    uint64_t used = gi_used_locked(sh, gpu, &g->mig[s]);
    return bytes > limit || used > limit - bytes ? -ENOMEM : 0;
}

int emu_state_mig_bind(struct emu_state *st, unsigned gpu, uint64_t serial)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    int r = 0;
    struct emu_proc *p;
    if (emu_mig_find_serial(g->mig, serial, NULL, NULL) < 0)
        r = -ENOENT;
    else if (!(p = emu_state_self_slot_locked(st, true)))
        r = -ENOSPC;
    else if (p->mem[gpu] && p->mig_serial[gpu] != serial)
        r = -EBUSY;
    else
        p->mig_serial[gpu] = serial;
    emu_state_unlock(st);
    return r;
}

/* ---- validation ---- */

#define BAD(...) (errbuf_printf(err, errlen, __VA_ARGS__), -EPROTO)

static int validate_cis(const struct emu_mig_gi *gi, const struct emu_mig_gi_profile *gp,
                        unsigned i, unsigned s, uint64_t serial_last, char *err, size_t errlen)
{
    unsigned mask = 0, ids = 0;
    for (unsigned c = 0; c < EMU_MIG_MAX_CI; c++) {
        const struct emu_mig_ci *ci = &gi->ci[c];
        if (ci->used > 1)
            return BAD("GPU %u: MIG GPU instance slot %u: compute instance slot %u used %u", i, s,
                       c, ci->used);
        if (!ci->used)
            continue;
        struct emu_mig_ci_profile p = {0};
        bool listed = false;
        if (emu_mig_ci_profile(gp->compute_slices, ci->profile, &p))
            for (unsigned k = 0; k < p.nstarts; k++)
                listed |= p.starts[k] == ci->start;
        unsigned want = listed ? emu_mig_bits(ci->start, p.slices) : 0;
        if (!listed || ci->size != p.slices || (mask & want) || ci->id >= EMU_MIG_MAX_CI ||
            (ids & (1u << ci->id)) || !ci->serial || ci->serial > serial_last ||
            !memchr(ci->uuid, 0, sizeof(ci->uuid)))
            return BAD("GPU %u: MIG GPU instance slot %u: compute instance slot %u is malformed "
                       "(profile %u, placement %u:%u, ID %u)",
                       i, s, c, ci->profile, ci->start, ci->size, ci->id);
        mask |= want;
        ids |= 1u << ci->id;
    }
    return 0;
}

int emu_mig_validate_gpu(const struct emu_gpu *g, unsigned i, uint64_t serial_last, char *err,
                         size_t errlen)
{
    const struct emu_mig_board *b = emu_state_mig_board(g);
    if (!b && (g->mig_mode || g->mig_mode_pending))
        return BAD("GPU %u: MIG mode %u/%u on a GPU without MIG", i, g->mig_mode,
                   g->mig_mode_pending);
    unsigned mask = 0;
    for (unsigned s = 0; s < EMU_MIG_MAX_GI; s++) {
        const struct emu_mig_gi *gi = &g->mig[s];
        if (gi->used > 1)
            return BAD("GPU %u: MIG GPU instance slot %u used %u", i, s, gi->used);
        if (!gi->used)
            continue;
        if (!b || !g->mig_mode)
            return BAD("GPU %u: a MIG GPU instance while MIG mode is off", i);
        const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(b, gi->profile);
        unsigned want = p ? emu_mig_bits(gi->start, p->mem_slices) : 0;
        if (!p || gi->size != p->mem_slices || !emu_mig_gi_start_ok(p, gi->start) ||
            (mask & want) || (int)gi->id != emu_mig_gi_id(gi->start, gi->size) || !gi->serial ||
            gi->serial > serial_last)
            return BAD("GPU %u: MIG GPU instance slot %u is malformed (profile %u, placement "
                       "%u:%u, ID %u)",
                       i, s, gi->profile, gi->start, gi->size, gi->id);
        mask |= want;
        int r = validate_cis(gi, p, i, s, serial_last, err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}
