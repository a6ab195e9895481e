/* state-nvml.h — part B's additions to the shared state (state.h): the operations behind
 * `accel-emu xid|ecc|lose|restore|set` and the settings the emulated NVML reads (process-info
 * stride, ECC counts). Kept out of state.c so the two halves of the emulator merge cleanly.
 * Any thread, any process. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "state.h"

/* XID NVIDIA uses for "GPU has fallen off the bus". */
#define EMU_XID_FALLEN_OFF_BUS 79

/* Bytes per process-info entry NVML's _v2/_v3 process queries write: 16, 24 or 32. */
unsigned emu_state_proc_info_stride(struct emu_state *st);
/* -EINVAL unless stride is 16, 24 or 32. */
int emu_state_set_proc_info_stride(struct emu_state *st, unsigned stride);

/* Posts an XID event on gpu. -EINVAL for a bad gpu. */
int emu_state_inject_xid(struct emu_state *st, unsigned gpu, uint64_t xid);
/* Counts one ECC error (single- or double-bit) on gpu and posts its NVML event. */
int emu_state_inject_ecc(struct emu_state *st, unsigned gpu, bool double_bit);
/* Marks gpu lost (fallen off the bus: XID 79 is posted) or present again. Losing a lost GPU
 * or restoring a present one changes nothing and posts nothing. */
int emu_state_set_lost(struct emu_state *st, unsigned gpu, bool lost);

/* Binds gpu to vfio-pci (on) or back to the nvidia driver: NVML and CUDA stop (start) seeing it.
 * The kernel's unbind waits for the driver's users, and a GPU with MIG instances is not left
 * half-configured: -EBUSY while a process holds memory on it (*ret_busy_pid), -ENOTEMPTY while
 * it has MIG instances. Binding a bound GPU (or unbinding an unbound one) changes nothing. */
int emu_state_set_vfio(struct emu_state *st, unsigned gpu, bool on, int32_t *ret_busy_pid);
/* Adds (on) or removes a function beside gpu in its IOMMU group: EMU_PCI_FN_AUDIO or
 * EMU_PCI_FN_BRIDGE. */
int emu_state_set_pci_function(struct emu_state *st, unsigned gpu, unsigned fn, bool on);
