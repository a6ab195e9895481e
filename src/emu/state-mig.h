/* state-mig.h — MIG on the shared machine: the mode (current and pending, made current by a GPU
 * reset), GPU instances and compute instances created and destroyed with the driver's rules
 * (placements, capacity, in use), and which processes run on them. The emulated NVML
 * (nvml-mig.c) and `accel-emu set|reset|mig` change them; the emulated libcuda binds a process
 * to the compute instance it uses (emu_state_mig_bind), so that its charges count against that
 * instance's memory (emu_state_mem_charge). The geometry comes from mig-profiles.h.
 *
 * Errors: -EOPNOTSUPP the GPU has no MIG, or MIG mode is not enabled; -EINVAL a profile or a
 * placement the GPU (instance) does not offer; -ENOENT the instance is gone (a handle's serial
 * no longer names it); -ENOSPC no room (the driver's "insufficient resources"); -EBUSY in use
 * (processes, or compute instances in a GPU instance).
 * Threads: any thread of any process; each call takes the machine's lock. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mig-profiles.h"
#include "state.h"

struct emu_mig_placement {
    unsigned start, size;
};

/* The board table of GPU g (NULL: g has no MIG). */
const struct emu_mig_board *emu_state_mig_board(const struct emu_gpu *g);

/* Sets MIG mode: the pending mode becomes `on`, then the driver's activation is tried, a GPU
 * reset, which succeeds when no process holds memory on the GPU: the current mode becomes the
 * pending one and every MIG instance is gone (*ret_active true). Otherwise the mode stays
 * pending (*ret_active false) and *ret_busy_pid names a process in the way.
 * -EOPNOTSUPP for a GPU without MIG. */
int emu_state_mig_set_mode(struct emu_state *st, unsigned gpu, bool on, bool *ret_active,
                           int32_t *ret_busy_pid);
/* A GPU reset: the pending MIG mode becomes current and every MIG instance is gone. -EBUSY
 * (with *ret_busy_pid) while a process holds memory on the GPU. */
int emu_state_gpu_reset(struct emu_state *st, unsigned gpu, int32_t *ret_busy_pid);

/* Creates a GPU instance of the profile with NVML index `profile` at placement (NULL: where the
 * driver puts it: the highest free placement). Its slot and serial in *ret_slot, *ret_serial. */
int emu_state_mig_gi_create(struct emu_state *st, unsigned gpu, unsigned profile,
                            const struct emu_mig_placement *placement, unsigned *ret_slot,
                            uint64_t *ret_serial);
/* -EBUSY while it has compute instances. */
int emu_state_mig_gi_destroy(struct emu_state *st, unsigned gpu, unsigned slot, uint64_t serial);
/* Creates a compute instance of NVML compute profile `profile` in GPU instance (gi_slot,
 * gi_serial), at placement (NULL: the lowest free one); its ID is the lowest free one. */
int emu_state_mig_ci_create(struct emu_state *st, unsigned gpu, unsigned gi_slot,
                            uint64_t gi_serial, unsigned profile,
                            const struct emu_mig_placement *placement, unsigned *ret_slot,
                            uint64_t *ret_serial);
/* What `nvidia-smi mig -cgi P,... -C` makes: for each of the n NVML profile indexes a GPU
 * instance where the driver puts it and the compute instance that fills it; their slots into
 * ret_gi[k], ret_ci[k]. All or nothing, under one hold of the lock: on failure nothing changes
 * and *ret_failed (may be NULL) is the entry that did not fit. */
int emu_state_mig_create_default(struct emu_state *st, unsigned gpu, const unsigned *profiles,
                                 size_t n, unsigned *ret_gi, unsigned *ret_ci, size_t *ret_failed);
/* -EBUSY (with *ret_busy_pid, may be NULL) while a process has memory on it. */
int emu_state_mig_ci_destroy(struct emu_state *st, unsigned gpu, unsigned gi_slot, unsigned ci_slot,
                             uint64_t serial, int32_t *ret_busy_pid);
/* Every compute and GPU instance of gpu, or nothing (-EBUSY, *ret_busy_pid) while a process has
 * memory on any of them. */
int emu_state_mig_destroy_all(struct emu_state *st, unsigned gpu, int32_t *ret_busy_pid);

/* How many more instances of a profile fit now (NVML's remaining capacity). */
int emu_state_mig_gi_remaining(struct emu_state *st, unsigned gpu, unsigned profile,
                               unsigned *ret_count);
int emu_state_mig_ci_remaining(struct emu_state *st, unsigned gpu, unsigned gi_slot,
                               uint64_t gi_serial, unsigned profile, unsigned *ret_count);

/* A consistent copy of gpu's MIG table. */
int emu_state_mig_snapshot(struct emu_state *st, unsigned gpu,
                           struct emu_mig_gi out[EMU_MIG_MAX_GI]);
/* The MIG devices (compute instances) of a table in NVML's order, by GPU instance ID then
 * compute instance ID (inferred: NVML documents only that the indexes are unique): their slots
 * into gis/cis, at most max; returns how many. */
size_t emu_mig_order(const struct emu_mig_gi *tab, unsigned *gis, unsigned *cis, size_t max);
/* The compute instance with this serial in a table: 0 and its slots, or -ENOENT. */
int emu_mig_find_serial(const struct emu_mig_gi *tab, uint64_t serial, unsigned *ret_gi,
                        unsigned *ret_ci);
/* The MIG device (compute instance) with this UUID ("MIG-...", any case) on any GPU. */
int emu_state_mig_find_uuid(struct emu_state *st, const char *uuid, unsigned *ret_gpu,
                            unsigned *ret_gi, unsigned *ret_ci, uint64_t *ret_serial);
/* Memory used on GPU instance gi_slot: the charges of live processes on its compute
 * instances. */
uint64_t emu_state_mig_gi_used(struct emu_state *st, unsigned gpu, unsigned gi_slot);

/* The calling process will run on compute instance `serial` of gpu: its charges there count
 * against that instance. -ENOENT when it is gone; -ENOSPC when no process slot is free; -EBUSY
 * when the process holds memory on gpu elsewhere. */
int emu_state_mig_bind(struct emu_state *st, unsigned gpu, uint64_t serial);

/* With the lock held: a live process holding memory on gpu (0: none). */
int32_t emu_state_busy_pid_locked(struct emu_state *st, unsigned gpu);
/* With the lock held (emu_state_mem_charge): 0 when bytes more fit in the GPU instance of
 * compute instance `serial`, -ENOMEM when not, -ENODEV when it is gone. */
int emu_mig_room_locked(struct emu_shared *sh, unsigned gpu, uint64_t serial, uint64_t bytes);
/* emu_state_validate's part for a GPU's MIG fields (pure). */
int emu_mig_validate_gpu(const struct emu_gpu *g, unsigned i, uint64_t serial_last, char *err,
                         size_t errlen);
