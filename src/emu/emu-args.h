/* emu-args.h — parsing of accel-emu's command-line values: GPU references, NUMA lists, NVLink
 * modes and `set` assignments. Pure (no I/O); every function leaves its outputs untouched on
 * failure and writes a one-line reason naming the bad text into err. A parser of outside data
 * with its own fuzz target (tests/fuzz/fuzz-emu-args.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mig-profiles.h"
#include "state.h"

/* "7" → 7 when 7 < gpu_count; anything else is a UUID or PCI bus id the caller looks up
 * (-ENOENT here). -EINVAL (with err) for a number out of range. */
int emu_args_gpu_index(const char *s, unsigned gpu_count, unsigned *ret, char *err, size_t errlen);

/* "0,0,1,1": exactly `want` comma-separated NUMA node ids, each -1 (none) .. 1023. */
int emu_args_numa(const char *s, unsigned want, int *ret, char *err, size_t errlen);

/* "all" | "none" | "pairs". */
int emu_args_nvlink(const char *s, enum emu_nvlink_mode *ret, char *err, size_t errlen);
/* `init --mode`: the state file's permission bits in octal (`0600`, `660`), at most 0777 and
 * with owner read and write (the creator must be able to use it). */
int emu_args_mode(const char *s, unsigned *ret, char *err, size_t errlen);

/* `init --iommu-groups`: "per-gpu" (each GPU its own group: *ret false) or "shared" (GPUs 2k and
 * 2k+1 share one: *ret true). */
int emu_args_iommu_groups(const char *s, bool *ret, char *err, size_t errlen);

/* `accel-emu mig GPU create PROFILE[,PROFILE...]`: a comma-separated list of board b's GPU
 * instance profiles, each a name ("1g.10gb", "MIG 1g.10gb", any case) or a profile ID ("19"), as
 * `nvidia-smi mig -cgi` takes them; at most max (and EMU_MIG_MAX_GI) entries. Their NVML
 * profile indexes into ret, the count into *ret_n. */
int emu_args_mig_profiles(const char *s, const struct emu_mig_board *b, unsigned *ret, size_t max,
                          size_t *ret_n, char *err, size_t errlen);

/* What `accel-emu set GPU k=v ...` changes. */
enum {
    EMU_SET_TEMPERATURE = 1u << 0,
    EMU_SET_POWER = 1u << 1,
    EMU_SET_POWER_LIMIT = 1u << 2,
    EMU_SET_SM_CLOCK = 1u << 3,
    EMU_SET_MEM_CLOCK = 1u << 4,
    EMU_SET_FAN = 1u << 5,
    EMU_SET_PSTATE = 1u << 6,
    EMU_SET_COMPUTE_MODE = 1u << 7,
    EMU_SET_MIG = 1u << 8,
    EMU_SET_CLOCKS_EVENT_REASONS = 1u << 9,
    EMU_SET_ENERGY = 1u << 10,
    EMU_SET_ECC_MODE = 1u << 11,
    EMU_SET_REMAPPED_CORR = 1u << 12,
    EMU_SET_REMAPPED_UNC = 1u << 13,
    EMU_SET_REMAP_PENDING = 1u << 14,
    EMU_SET_REMAP_FAILURE = 1u << 15,
    EMU_SET_PCIE_REPLAYS = 1u << 16,
    EMU_SET_ECC_VOLATILE_CLEAR = 1u << 17,
    EMU_SET_TIMESLICE = 1u << 18,
    EMU_SET_NVLINK_ERROR_LINK = 1u << 19,
    EMU_SET_NVLINK_ERRORS = 1u << 20, /* nvlink_errors_mask says which */
};
struct emu_set_req {
    uint32_t mask;
    uint32_t temperature_c, power_mw, power_limit_mw, sm_clock_mhz, mem_clock_mhz;
    uint32_t fan_percent, pstate, compute_mode, mig_mode;
    uint64_t clocks_event_reasons, energy_mj;
    uint32_t ecc_disabled, remapped_corr, remapped_unc, remap_pending, remap_failure;
    uint32_t pcie_replays;
    uint32_t timeslice_us; /* 0: the default */
    uint32_t nvlink_error_link;
    uint32_t nvlink_errors_mask; /* bit c: nvlink_errors[c] set */
    uint32_t nvlink_errors[5];
};

/* Adds one "key=value" to req: temperature=C (0-200), power=W and power_limit=W (0-2000,
 * decimals allowed), sm_clock=MHz and mem_clock=MHz (1-10000), fan=% (0-100), pstate=0-15,
 * compute_mode=default|exclusive_process|prohibited (or 0|2|3), mig=on|off,
 * clocks_event_reasons=N (NVML's bit mask, decimal or 0x hex), energy=J (the energy counter
 * restarts from J joules), ecc_mode=on|off, remapped_corr=N, remapped_unc=N (0-65535),
 * remap_pending=0|1, remap_failure=0|1, pcie_replays=N (0-4294967295), ecc_volatile=clear,
 * timeslice=US (1-EMU_TIMESLICE_MAX_US, or default: the time slice between processes),
 * nvlink_link=L (0-17: the link the NVLink error counters below are on; the others read 0),
 * nvlink_replay=N, nvlink_recovery=N, nvlink_crc_flit=N, nvlink_crc_data=N, nvlink_ecc_data=N
 * (0-4294967295). */
int emu_args_set(const char *kv, struct emu_set_req *req, char *err, size_t errlen);
/* The keys above, for help text. */
extern const char *const emu_args_set_keys;

/* Applies req to g (call with the state lock held). sm_clock above the GPU's maximum, and mig on
 * a GPU without MIG, are refused (-ERANGE) before anything changes. MIG mode itself is not
 * applied here: it goes through the driver's activation (emu_state_mig_set_mode). */
int emu_args_set_apply(struct emu_gpu *g, const struct emu_set_req *req, char *err, size_t errlen);
