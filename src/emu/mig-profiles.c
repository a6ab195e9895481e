/* mig-profiles.c — the MIG profile tables of the emulated boards and the placement arithmetic;
 * see mig-profiles.h for the sources. */
#include "mig-profiles.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MiB (1024ull * 1024ull)

/* Placements, in memory slices (`nvidia-smi mig -lgipp` in the MIG User Guide): 1g on any of
 * the first seven slices, 1g with twice the memory and 2g on even slices, 3g on halves, 4g and
 * 7g at 0. Every start is a multiple of the size and leaves room for the compute slices. */
#define P1                                                                                         \
    7,                                                                                             \
    {                                                                                              \
        0, 1, 2, 3, 4, 5, 6                                                                        \
    }
#define P1X2                                                                                       \
    4,                                                                                             \
    {                                                                                              \
        0, 2, 4, 6                                                                                 \
    }
#define P2                                                                                         \
    3,                                                                                             \
    {                                                                                              \
        0, 2, 4                                                                                    \
    }
#define P3                                                                                         \
    2,                                                                                             \
    {                                                                                              \
        0, 4                                                                                       \
    }
#define P0                                                                                         \
    1,                                                                                             \
    {                                                                                              \
        0                                                                                          \
    }

/* A100: SMs 14 per compute slice (98 of the 108 in MIG mode), engines as the guide's A100
 * table. Memory: the guide gives fractions of the board (1/8, 2/8, 4/8, full), not MiB; 0 here
 * means that fraction of the board's memory. */
static const struct emu_mig_gi_profile a100_40[] = {
    {0x0, 19, "1g.5gb", 1, 1, 7, 14, 1, 0, 0, 0, 0, 0, P1},
    {0x7, 20, "1g.5gb+me", 1, 1, 1, 14, 1, 1, 0, 1, 1, 0, P1},
    {0x9, 15, "1g.10gb", 1, 2, 4, 14, 1, 1, 0, 0, 0, 0, P1X2},
    {0x1, 14, "2g.10gb", 2, 2, 3, 28, 2, 1, 0, 0, 0, 0, P2},
    {0x2, 9, "3g.20gb", 3, 4, 2, 42, 3, 2, 0, 0, 0, 0, P3},
    {0x3, 5, "4g.20gb", 4, 4, 1, 56, 4, 2, 0, 0, 0, 0, P0},
    {0x4, 0, "7g.40gb", 7, 8, 1, 98, 7, 5, 0, 1, 1, 0, P0},
};
static const struct emu_mig_gi_profile a100_80[] = {
    {0x0, 19, "1g.10gb", 1, 1, 7, 14, 1, 0, 0, 0, 0, 0, P1},
    {0x7, 20, "1g.10gb+me", 1, 1, 1, 14, 1, 1, 0, 1, 1, 0, P1},
    {0x9, 15, "1g.20gb", 1, 2, 4, 14, 1, 1, 0, 0, 0, 0, P1X2},
    {0x1, 14, "2g.20gb", 2, 2, 3, 28, 2, 1, 0, 0, 0, 0, P2},
    {0x2, 9, "3g.40gb", 3, 4, 2, 42, 3, 2, 0, 0, 0, 0, P3},
    {0x3, 5, "4g.40gb", 4, 4, 1, 56, 4, 2, 0, 0, 0, 0, P0},
    {0x4, 0, "7g.80gb", 7, 8, 1, 98, 7, 5, 0, 1, 1, 0, P0},
};
/* H100 80GB HBM3: SMs, engines and memory as `nvidia-smi mig -lgip` lists them (9.75, 19.62,
 * 39.50, 79.25 GiB: 9984, 20096, 40448, 81152 MiB). */
static const struct emu_mig_gi_profile h100_80[] = {
    {0x0, 19, "1g.10gb", 1, 1, 7, 16, 1, 1, 0, 1, 0, 9984, P1},
    {0x7, 20, "1g.10gb+me", 1, 1, 1, 16, 1, 1, 0, 1, 1, 9984, P1},
    {0x9, 15, "1g.20gb", 1, 2, 4, 26, 1, 1, 0, 1, 0, 20096, P1X2},
    {0x1, 14, "2g.20gb", 2, 2, 3, 32, 2, 2, 0, 2, 0, 20096, P2},
    {0x2, 9, "3g.40gb", 3, 4, 2, 60, 3, 3, 0, 3, 0, 40448, P3},
    {0x3, 5, "4g.40gb", 4, 4, 1, 64, 4, 4, 0, 4, 0, 40448, P0},
    {0x4, 0, "7g.80gb", 7, 8, 1, 132, 8, 7, 0, 7, 1, 81152, P0},
};
/* H200 141GB: the guide's H200 table (the H100's engines, 1/8 .. full memory); SMs as the
 * H100's (the same GH100 with 132 SMs: inferred, no -lgip of an H200 is published). */
static const struct emu_mig_gi_profile h200_141[] = {
    {0x0, 19, "1g.18gb", 1, 1, 7, 16, 1, 1, 0, 1, 0, 0, P1},
    {0x7, 20, "1g.18gb+me", 1, 1, 1, 16, 1, 1, 0, 1, 1, 0, P1},
    {0x9, 15, "1g.35gb", 1, 2, 4, 26, 1, 1, 0, 1, 0, 0, P1X2},
    {0x1, 14, "2g.35gb", 2, 2, 3, 32, 2, 2, 0, 2, 0, 0, P2},
    {0x2, 9, "3g.71gb", 3, 4, 2, 60, 3, 3, 0, 3, 0, 0, P3},
    {0x3, 5, "4g.71gb", 4, 4, 1, 64, 4, 4, 0, 4, 0, 0, P0},
    {0x4, 0, "7g.141gb", 7, 8, 1, 132, 8, 7, 0, 7, 1, 0, P0},
};

#define BOARD(name, mib, t)                                                                        \
    {                                                                                              \
        name, mib, sizeof(t) / sizeof(t[0]), t                                                     \
    }
static const struct emu_mig_board boards[] = {
    BOARD("NVIDIA A100-SXM4-40GB", 40960, a100_40),
    BOARD("NVIDIA A100-SXM4-80GB", 81920, a100_80),
    BOARD("NVIDIA H100 80GB HBM3", 81559, h100_80),
    BOARD("NVIDIA H200", 143771, h200_141),
};

const struct emu_mig_board *emu_mig_board_find(const char *gpu_name)
{
    for (size_t i = 0; gpu_name && i < sizeof(boards) / sizeof(boards[0]); i++)
        if (strcmp(gpu_name, boards[i].gpu_name) == 0)
            return &boards[i];
    return NULL;
}

const struct emu_mig_gi_profile *emu_mig_gi_by_index(const struct emu_mig_board *b, unsigned index)
{
    for (size_t i = 0; b && i < b->n; i++)
        if (b->profiles[i].index == index)
            return &b->profiles[i];
    return NULL;
}

const struct emu_mig_gi_profile *emu_mig_gi_by_id(const struct emu_mig_board *b, unsigned id)
{
    for (size_t i = 0; b && i < b->n; i++)
        if (b->profiles[i].id == id)
            return &b->profiles[i];
    return NULL;
}

const struct emu_mig_gi_profile *emu_mig_gi_by_name(const struct emu_mig_board *b, const char *name,
                                                    size_t len)
{
    if (!b || !name)
        return NULL;
    if (len >= 4 && strncasecmp(name, "MIG ", 4) == 0) {
        name += 4;
        len -= 4;
    }
    for (size_t i = 0; i < b->n; i++) {
        const char *n = b->profiles[i].name;
        if (strlen(n) == len && strncasecmp(n, name, len) == 0)
            return &b->profiles[i];
    }
    return NULL;
}

uint64_t emu_mig_gi_bytes(const struct emu_mig_board *b, const struct emu_mig_gi_profile *p,
                          uint64_t memory_total)
{
    if (p->mem_mib && memory_total == b->memory_mib * MiB)
        return p->mem_mib * MiB;
    return memory_total / MiB * p->mem_slices / EMU_MIG_MEM_SLICES * MiB;
}

int emu_mig_gi_id(unsigned start, unsigned mem_slices)
{
    if (mem_slices != 1 && mem_slices != 2 && mem_slices != 4 && mem_slices != 8)
        return -1;
    if (start % mem_slices || start + mem_slices > EMU_MIG_MEM_SLICES)
        return -1;
    return (int)(EMU_MIG_MEM_SLICES / mem_slices - 1 + start / mem_slices);
}

bool emu_mig_gi_start_ok(const struct emu_mig_gi_profile *p, unsigned start)
{
    for (unsigned i = 0; i < p->nstarts; i++)
        if (p->starts[i] == start)
            return true;
    return false;
}

/* Compute instance profiles by the size of their GPU instance (`nvidia-smi mig -lcip` and
 * `-lcipp` on each GPU instance size): every size up to the GPU instance's, except 3c in a 4g;
 * placements on multiples of the size (3c on halves of a 7g). */
static const struct {
    unsigned gi_slices;
    struct emu_mig_ci_profile p[5];
    size_t n;
} ci_tables[] = {
    {1, {{EMU_MIG_CI_1_SLICE, 1, 1, {0}}}, 1},
    {2, {{EMU_MIG_CI_1_SLICE, 1, 2, {0, 1}}, {EMU_MIG_CI_2_SLICE, 2, 1, {0}}}, 2},
    {3,
     {{EMU_MIG_CI_1_SLICE, 1, 3, {0, 1, 2}},
      {EMU_MIG_CI_2_SLICE, 2, 1, {0}},
      {EMU_MIG_CI_3_SLICE, 3, 1, {0}}},
     3},
    {4,
     {{EMU_MIG_CI_1_SLICE, 1, 4, {0, 1, 2, 3}},
      {EMU_MIG_CI_2_SLICE, 2, 2, {0, 2}},
      {EMU_MIG_CI_4_SLICE, 4, 1, {0}}},
     3},
    {7,
     {{EMU_MIG_CI_1_SLICE, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {EMU_MIG_CI_2_SLICE, 2, 3, {0, 2, 4}},
      {EMU_MIG_CI_3_SLICE, 3, 2, {0, 4}},
      {EMU_MIG_CI_4_SLICE, 4, 1, {0}},
      {EMU_MIG_CI_7_SLICE, 7, 1, {0}}},
     5},
};

size_t emu_mig_ci_profiles(unsigned gi_slices, struct emu_mig_ci_profile *out)
{
    for (size_t i = 0; i < sizeof(ci_tables) / sizeof(ci_tables[0]); i++)
        if (ci_tables[i].gi_slices == gi_slices) {
            memcpy(out, ci_tables[i].p, ci_tables[i].n * sizeof(*out));
            return ci_tables[i].n;
        }
    return 0;
}

bool emu_mig_ci_profile(unsigned gi_slices, unsigned index, struct emu_mig_ci_profile *ret)
{
    struct emu_mig_ci_profile p[5];
    size_t n = emu_mig_ci_profiles(gi_slices, p);
    for (size_t i = 0; i < n; i++)
        if (p[i].index == index) {
            *ret = p[i];
            return true;
        }
    return false;
}

unsigned emu_mig_ci_sms(const struct emu_mig_gi_profile *p, unsigned ci_slices)
{
    if (ci_slices >= p->compute_slices)
        return p->sms;
    return p->sms * ci_slices / p->compute_slices;
}

void emu_mig_ci_name(const struct emu_mig_gi_profile *p, unsigned ci_slices, char *buf, size_t len)
{
    if (ci_slices >= p->compute_slices)
        snprintf(buf, len, "%s", p->name);
    else
        snprintf(buf, len, "%uc.%s", ci_slices, p->name);
}
