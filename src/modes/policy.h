/* policy.h — the preferred-allocation policy (GetPreferredAllocation) on
 * plain data: which `size` GPUs out of the available ones to hand a pod.
 *
 * GPUs are small integers (the inventory index). The topology says, for each
 * pair, how many NVLinks join them and how close they sit on PCIe. A set is
 * ranked, in this order: most NVLinks inside the set; then most pairs under
 * one PCIe switch; then most pairs under one host bridge; then most pairs on
 * one NUMA node; then (packing) the fewest ties to the GPUs left behind, so a
 * small request takes a GPU from an already broken-up group; then the lowest
 * indices. The answer depends only on the input sets, not their order.
 *
 * Pure functions, no allocation beyond a scratch array, any thread. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* How close two GPUs are on PCIe (higher is closer). */
enum policy_pcie {
    POLICY_PCIE_FAR = 0,        /* across sockets, or unknown */
    POLICY_PCIE_NUMA = 1,       /* same NUMA node */
    POLICY_PCIE_HOSTBRIDGE = 2, /* same host bridge */
    POLICY_PCIE_SWITCH = 3,     /* same PCIe switch (or board) */
};

struct policy_topo {
    int n;               /* GPUs 0..n-1 have topology; others count as unknown */
    const uint8_t *pcie; /* n*n enum policy_pcie, [i*n+j]; NULL = unknown */
    const int *nvlinks;  /* n*n NVLink count between i and j; NULL = none known */
    const int *numa;     /* n NUMA node per GPU, -1 unknown; used where pcie is FAR */
};

/* Exhaustive search is used while the number of candidate sets is at most
 * this; above it a greedy pick (deterministic too) takes over. */
#define POLICY_EXHAUSTIVE_MAX 20000

/* Picks size GPUs: every one of must (n_must) plus the best of avail.
 * Duplicates in the inputs are ignored. ret_out receives size GPU numbers in
 * ascending order. Returns 0, or -EINVAL when size is 0, smaller than the
 * must-include set or larger than what is available (ret_out untouched). */
int policy_prefer(const struct policy_topo *topo, const int *avail, size_t n_avail, const int *must,
                  size_t n_must, size_t size, int *ret_out);

/* Score of one pair (exposed for tests and `accelctl`-style explanations):
 * NVLinks in the high bits, then PCIe closeness. */
uint64_t policy_pair_score(const struct policy_topo *topo, int a, int b);
