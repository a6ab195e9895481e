/* mig-profiles.h — the MIG geometry of the emulated models: which GPU instance profiles a board
 * offers (names, NVML profile indexes and IDs, compute and memory slices, SMs, engines, memory,
 * placements), the compute instance profiles inside a GPU instance, and the placement rules the
 * driver applies. Pure data and arithmetic (no state, no I/O): the emulated NVML, the shared
 * state's MIG operations (state-mig.h), accel-emu and its parsers use it.
 *
 * Sources (docs/emulator.md, "MIG", has the whole list and what was inferred):
 *   - NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles": the profiles of the
 *     A100-SXM4-40GB and -80GB, H100 80GB and H200 141GB, their fractions of memory and SMs,
 *     engines and instance counts; "Getting Started with MIG": `nvidia-smi mig -lgip` and
 *     `-lgipp` output (profile IDs 19/20/15/14/9/5/0, placements such as {0,4}:4 for 3g).
 *   - nvml.h (NVML API reference, "Multi Instance GPU Management"): the profile indexes
 *     NVML_GPU_INSTANCE_PROFILE_* and NVML_COMPUTE_INSTANCE_PROFILE_*.
 *   - A published `nvidia-smi mig -lgip` of an H100 80GB HBM3 (per-profile SM counts 16, 16,
 *     26, 32, 60, 64, 132 and memory 9.75, 19.62, 39.50, 79.25 GiB).
 * Threads: everything here is read-only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EMU_MIG_MEM_SLICES 8     /* memory slices of a MIG-capable board (A100, H100, H200) */
#define EMU_MIG_COMPUTE_SLICES 7 /* compute slices (GPCs) usable in MIG mode */
#define EMU_MIG_MAX_GI 7         /* GPU instances at once: seven 1g */
#define EMU_MIG_MAX_CI 7         /* compute instances in one GPU instance: seven 1c in a 7g */
#define EMU_MIG_MAX_PLACEMENTS 7

/* NVML's profile indexes (nvml.h), as the emulator uses them. */
#define EMU_MIG_GI_1_SLICE 0x0
#define EMU_MIG_GI_2_SLICE 0x1
#define EMU_MIG_GI_3_SLICE 0x2
#define EMU_MIG_GI_4_SLICE 0x3
#define EMU_MIG_GI_7_SLICE 0x4
#define EMU_MIG_GI_1_SLICE_REV1 0x7 /* 1g with media extensions (+me) */
#define EMU_MIG_GI_1_SLICE_REV2 0x9 /* 1g with twice the memory */
#define EMU_MIG_GI_PROFILE_COUNT 0x12
#define EMU_MIG_CI_1_SLICE 0x0
#define EMU_MIG_CI_2_SLICE 0x1
#define EMU_MIG_CI_3_SLICE 0x2
#define EMU_MIG_CI_4_SLICE 0x3
#define EMU_MIG_CI_7_SLICE 0x4
#define EMU_MIG_CI_PROFILE_COUNT 0x9

/* One GPU instance profile of a board (one row of `nvidia-smi mig -lgip`). */
struct emu_mig_gi_profile {
    unsigned index;          /* NVML_GPU_INSTANCE_PROFILE_* */
    unsigned id;             /* nvmlGpuInstanceProfileInfo_t.id: the ID nvidia-smi shows */
    const char *name;        /* "1g.10gb" (nvidia-smi prints "MIG 1g.10gb") */
    unsigned compute_slices; /* sliceCount */
    unsigned mem_slices;     /* memory slices a placement covers (placement size) */
    unsigned instances;      /* instanceCount */
    unsigned sms;            /* multiprocessorCount */
    unsigned ce, dec, enc, jpeg, ofa;
    unsigned mem_mib; /* memorySizeMB on the board as shipped */
    unsigned nstarts; /* the possible placements: start, in memory slices */
    unsigned starts[EMU_MIG_MAX_PLACEMENTS];
};

/* A board's table. */
struct emu_mig_board {
    const char *gpu_name; /* the emulated model's name (state.c's model table) */
    uint64_t memory_mib;  /* the model's memory as shipped (scaling with --memory) */
    size_t n;
    const struct emu_mig_gi_profile *profiles;
};

/* One compute instance profile inside a GPU instance of `gi_slices` compute slices. */
struct emu_mig_ci_profile {
    unsigned index;  /* NVML_COMPUTE_INSTANCE_PROFILE_* */
    unsigned slices; /* sliceCount */
    unsigned nstarts;
    unsigned starts[EMU_MIG_MAX_PLACEMENTS]; /* compute slice within the GPU instance */
};

/* The slices [start, start + size) as a bit mask (all of them for a range past the board: a
 * damaged table never shifts out of range). */
static inline unsigned emu_mig_bits(unsigned start, unsigned size)
{
    if (start >= EMU_MIG_MEM_SLICES || size > EMU_MIG_MEM_SLICES - start)
        return (1u << EMU_MIG_MEM_SLICES) - 1;
    return ((1u << size) - 1) << start;
}

/* The table of the model named gpu_name (an emu_gpu's name), NULL when it has no MIG. */
const struct emu_mig_board *emu_mig_board_find(const char *gpu_name);

/* Profile lookups in a board's table; NULL when the board has none. */
const struct emu_mig_gi_profile *emu_mig_gi_by_index(const struct emu_mig_board *b, unsigned index);
const struct emu_mig_gi_profile *emu_mig_gi_by_id(const struct emu_mig_board *b, unsigned id);
/* "1g.10gb" or "MIG 1g.10gb" (any case). */
const struct emu_mig_gi_profile *emu_mig_gi_by_name(const struct emu_mig_board *b, const char *name,
                                                    size_t len);

/* Bytes of a GPU instance of profile p on a GPU with memory_total bytes: the profile's memory as
 * shipped when the GPU has the model's memory, else its share (mem_slices / 8) of memory_total,
 * in whole MiB (an `init --memory` board). */
uint64_t emu_mig_gi_bytes(const struct emu_mig_board *b, const struct emu_mig_gi_profile *p,
                          uint64_t memory_total);

/* GPU instance ID of a placement: the driver numbers the placements of a board's memory as a
 * binary tree (whole 0; halves 1-2; quarters 3-6; eighths 7-14). -1 for a size that is not a
 * power of two up to 8. */
int emu_mig_gi_id(unsigned start, unsigned mem_slices);

/* true when start is one of p's placements. */
bool emu_mig_gi_start_ok(const struct emu_mig_gi_profile *p, unsigned start);

/* The compute instance profiles of a GPU instance with gi_slices compute slices, in profile
 * index order, into out (room for 5); returns how many. */
size_t emu_mig_ci_profiles(unsigned gi_slices, struct emu_mig_ci_profile *out);
/* One of them by NVML profile index; false when the GPU instance has no such profile. */
bool emu_mig_ci_profile(unsigned gi_slices, unsigned index, struct emu_mig_ci_profile *ret);

/* The SMs of a compute instance of ci_slices in a GPU instance of profile p: all of p's for a
 * compute instance that fills it, else the proportional share, rounded down. */
unsigned emu_mig_ci_sms(const struct emu_mig_gi_profile *p, unsigned ci_slices);

/* The name of a compute instance profile (or MIG device): "3g.40gb" when it fills its GPU
 * instance, else "1c.3g.40gb". */
void emu_mig_ci_name(const struct emu_mig_gi_profile *p, unsigned ci_slices, char *buf, size_t len);
