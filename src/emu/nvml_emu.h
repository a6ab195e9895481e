/* nvml_emu.h — internals of the emulated libnvidia-ml.so.1 (nvml*.c): the library's global
 * state (the mapped machine and NVML's init count), device handles, and the checks every
 * entry point starts with. The API's types and prototypes come from src/gpu/nvml_api.h.
 *
 * Handles: nvmlDevice_t points into a static array, one entry per possible GPU, so a handle
 * stays valid (and comparable) across nvmlShutdown/nvmlInit, as the real library's do.
 * Threads: every entry point may be called from any thread. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "nvml_api.h"
#include "state.h"

#define NVML_EMU_API __attribute__((visibility("default")))

/* What the emulated driver reports as its own versions: CUDA 13.0's driver branch. */
#define NVML_EMU_DRIVER_VERSION "580.65.06"
#define NVML_EMU_CUDA_VERSION 13000

/* NVML's value for "not in a MIG instance" in process and event records. */
#define NVML_EMU_NO_INSTANCE 0xFFFFFFFFu

/* A GPU's handle, or a MIG device's (mig 1: compute instance ci of GPU instance gi of GPU
 * index, valid while that instance's serial is the one the handle was given for: NVML's MIG
 * handles "remain invalid" once the instance is destroyed, and "may be reused"). */
struct nvmlDevice_st {
    unsigned index;
    unsigned mig;
    unsigned gi, ci;
    uint64_t serial;
};
struct nvmlGpuInstance_st {
    unsigned gpu, slot;
    uint64_t serial;
};
struct nvmlComputeInstance_st {
    unsigned gpu, gi, ci;
    uint64_t serial;
};

/* The mapped machine while NVML is initialized, else NULL. */
struct emu_state *nvml_emu_state(void);

/* Length in ns of the utilization sample period ($ACCEL_EMU_UTIL_WINDOW_MS, default 1000), read
 * at init. NVML samples in periods of 1/6 s to 1 s depending on the product; the emulator's
 * periods are aligned on multiples of it on CLOCK_MONOTONIC, so every process agrees on them. */
uint64_t nvml_emu_util_window_ns(void);

/* The last sample period completed at monotonic time now: [*ret_t0, *ret_t1). */
void nvml_emu_last_period(uint64_t now, uint64_t *ret_t0, uint64_t *ret_t1);

/* A monotonic ns time as NVML's CPU timestamp (wall-clock µs), with an offset fixed at init, so
 * the same instant always gives the same timestamp. */
uint64_t nvml_emu_mono_to_realtime_us(uint64_t mono_ns);

/* The handle of GPU i (no checks). */
nvmlDevice_t nvml_emu_handle(unsigned i);
/* The handle of MIG device (gpu, gi, ci), made valid for the instance with serial. */
nvmlDevice_t nvml_emu_mig_handle(unsigned gpu, unsigned gi, unsigned ci, uint64_t serial);

/* NVML's index of GPU i: its place among the GPUs the driver owns (a GPU bound to vfio-pci is
 * not one: docs/vfio.md). */
unsigned nvml_emu_nvml_index(struct emu_state *st, unsigned i);

/* A MIG device handle's checks: initialized, a MIG handle whose instance still exists, parent
 * not lost. On success the parent GPU, its index and the instance's slots (any may be NULL). A
 * GPU's own handle is NVML_ERROR_INVALID_ARGUMENT here. */
nvmlReturn_t nvml_emu_mig_device(nvmlDevice_t dev, struct emu_gpu **ret_gpu, unsigned *ret_index,
                                 unsigned *ret_gi, unsigned *ret_ci);
/* true when dev points at a MIG device handle (valid or not). */
bool nvml_emu_is_mig_handle(nvmlDevice_t dev);

/* The MIG devices of GPU gpu in NVML's order (by GPU instance ID, then compute instance ID):
 * their slots into gis/cis (room for EMU_MIG_MAX_GI * EMU_MIG_MAX_CI) and serials, from a
 * snapshot of the machine; returns how many (nvml-mig.c). */
unsigned nvml_emu_mig_list(struct emu_state *st, unsigned gpu, unsigned *gis, unsigned *cis,
                           uint64_t *serials);
/* The name of a MIG device: the GPU's name and its profile, "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
 * (nvml-mig.c). */
void nvml_emu_mig_name(const struct emu_gpu *g, unsigned gi, unsigned ci, char *buf, size_t len);

/* The checks of a per-device query: initialized (else UNINITIALIZED), a handle of this machine
 * whose GPU the driver owns (else INVALID_ARGUMENT; a GPU bound to vfio-pci is not), not lost
 * (else GPU_IS_LOST); a MIG device's handle is NOT_SUPPORTED (queries that answer for MIG
 * devices check for it first: nvml_emu_mig_device). On success *ret_gpu points into the
 * mapping and *ret_index is the GPU's index (either may be NULL). */
nvmlReturn_t nvml_emu_device(nvmlDevice_t dev, struct emu_gpu **ret_gpu, unsigned *ret_index);

/* The same, for a device that may be lost (events keep flowing from a lost GPU). */
nvmlReturn_t nvml_emu_device_any(nvmlDevice_t dev, struct emu_gpu **ret_gpu, unsigned *ret_index);

/* Copies s into buf of length len, NVML's way: INVALID_ARGUMENT for a NULL buf,
 * INSUFFICIENT_SIZE when s and its NUL do not fit (buf untouched). */
nvmlReturn_t nvml_emu_copy_string(const char *s, char *buf, unsigned int len);

/* Fills an nvmlPciInfo_t (v3 layout) for gpu g. */
void nvml_emu_pci_info(const struct emu_gpu *g, nvmlPciInfo_t *pci);

/* CLOCK_REALTIME in microseconds (NVML's CPU timestamps). */
uint64_t nvml_emu_realtime_us(void);
