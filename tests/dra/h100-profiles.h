/* h100-profiles.h — an H100 80GB's GPU instance profiles as the DRA side gets them from NVML
 * (the MIG User Guide's table, as the emulator has it: src/emu/mig-profiles.c), for the tests
 * of MIG partitions (test-partition.c, dra-slice-dump.c). */
#pragma once

#include "dra.h"

static const struct dra_mig_profile h100_profiles[] = {
    {19,
     "1g.10gb",
     1,
     7,
     9984ull << 20,
     16,
     7,
     {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
    {20,
     "1g.10gb+me",
     1,
     1,
     9984ull << 20,
     16,
     7,
     {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
    {15, "1g.20gb", 1, 4, 20096ull << 20, 26, 4, {{0, 2}, {2, 2}, {4, 2}, {6, 2}}},
    {14, "2g.20gb", 2, 3, 20096ull << 20, 32, 3, {{0, 2}, {2, 2}, {4, 2}}},
    {9, "3g.40gb", 3, 2, 40448ull << 20, 60, 2, {{0, 4}, {4, 4}}},
    {5, "4g.40gb", 4, 1, 40448ull << 20, 64, 1, {{0, 4}}},
    {0, "7g.80gb", 7, 1, 81152ull << 20, 132, 1, {{0, 8}}},
};
#define H100_N_PROFILES (sizeof(h100_profiles) / sizeof(h100_profiles[0]))
