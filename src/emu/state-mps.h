/* state-mps.h — the MPS section of the emulated machine (struct emu_mps_daemon in state.h):
 * the emulated nvidia-cuda-mps-control publishes its settings here; the emulated libcuda (a
 * later issue wires MPS mode) and tests read them. Any thread, any process. */
#pragma once

#include "state.h"

/* Takes a slot for a daemon on cfg->pipe_dir (the slot of a dead daemon on the same
 * directory, else a free one) and writes cfg into it. -ENOSPC when all slots belong to live
 * daemons; -EINVAL for a NULL argument. */
int emu_state_mps_claim(struct emu_state *st, const struct emu_mps_daemon *cfg, int *ret_slot);
/* Replaces the slot's content with cfg (under the lock: readers see the old or new whole). */
void emu_state_mps_publish(struct emu_state *st, int slot, const struct emu_mps_daemon *cfg);
/* Frees the slot (the daemon is stopping). */
void emu_state_mps_release(struct emu_state *st, int slot);
/* Copies the settings of the live daemon on pipe_dir: the daemon started there, else (the
 * directory bind-mounted elsewhere, as a container sees it) the live daemon whose pid
 * pipe_dir/nvidia-cuda-mps-control.pid names. -ENOENT when there is none. */
int emu_state_mps_find(struct emu_state *st, const char *pipe_dir, struct emu_mps_daemon *ret);
/* Whether process pid (as seen from the caller's pid namespace) counts as an MPS client: the
 * emulator has no MPS connection, so, as `get_client_list` in mps-control.c, a process is a
 * client while a live server of a live daemon runs for its user. */
bool emu_state_mps_is_client(struct emu_state *st, int32_t pid);

/* Records this process as a client of MPS server (else daemon) `group` (0: none). */
void emu_state_set_mps_group(struct emu_state *st, int32_t group);

/* A fatal XID on gpu (emu_state_mps_fatal_xid says which): every MPS client with memory on that
 * GPU is hit, and its server is in the fault state while any hit client lives (NVIDIA MPS
 * guide, "Error Containment"). Called by emu_state_inject_xid. */
bool emu_state_mps_fatal_xid(uint64_t xid);
void emu_state_mps_fault(struct emu_state *st, unsigned gpu);

/* The fault state as a client of `group` on gpu sees it, dead hit clients forgotten first:
 * 1 when pid itself was hit, 2 when another client of group was (the server refuses new
 * clients), 0 otherwise. */
int emu_state_mps_fault_of(struct emu_state *st, unsigned gpu, int32_t group, int32_t pid);
