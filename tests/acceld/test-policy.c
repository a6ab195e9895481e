/* test-policy.c — the preferred-allocation policy on hand-built topologies:
 * an 8-GPU, 2-socket node with NVLink pairs (0-1, 2-3, 4-5, 6-7), PCIe
 * switches per pair and NUMA node 0 for GPUs 0-3, 1 for 4-7. */
#include <errno.h>
#include <string.h>

#include "policy.h"
#include "tap.h"

#define N 8
static uint8_t pcie[N * N];
static int nvl[N * N];
static int numa[N] = {0, 0, 0, 0, 1, 1, 1, 1};

static void build_node(void)
{
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) {
            uint8_t l = POLICY_PCIE_FAR;
            if (i / 2 == j / 2)
                l = POLICY_PCIE_SWITCH;
            else if (i / 4 == j / 4)
                l = POLICY_PCIE_NUMA;
            pcie[i * N + j] = i == j ? POLICY_PCIE_SWITCH : l;
            nvl[i * N + j] = (i != j && i / 2 == j / 2) ? 4 : 0;
        }
    }
}

static struct policy_topo topo(void)
{
    build_node();
    return (struct policy_topo){N, pcie, nvl, numa};
}

static bool same(const int *a, const int *b, size_t n)
{
    return memcmp(a, b, n * sizeof(int)) == 0;
}

TEST(pair_with_nvlink_wins)
{
    struct policy_topo t = topo();
    int avail[] = {0, 2, 3, 5, 6};
    int out[2];
    REQUIRE_EQ_INT(policy_prefer(&t, avail, 5, NULL, 0, 2, out), 0);
    CHECK(same(out, (int[]){2, 3}, 2));
}

TEST(must_include_is_honoured)
{
    struct policy_topo t = topo();
    int avail[] = {0, 1, 2, 3, 4, 5, 6, 7};
    int must[] = {5};
    int out[2];
    REQUIRE_EQ_INT(policy_prefer(&t, avail, 8, must, 1, 2, out), 0);
    CHECK(same(out, (int[]){4, 5}, 2));
    /* must outside avail is still included */
    int avail2[] = {0, 1, 4};
    int must2[] = {6};
    REQUIRE_EQ_INT(policy_prefer(&t, avail2, 3, must2, 1, 2, out), 0);
    CHECK(same(out, (int[]){4, 6}, 2)); /* same NUMA node beats across sockets */
}

TEST(four_stay_on_one_socket)
{
    struct policy_topo t = topo();
    int avail[] = {0, 1, 2, 4, 5, 6, 7};
    int out[4];
    REQUIRE_EQ_INT(policy_prefer(&t, avail, 7, NULL, 0, 4, out), 0);
    CHECK(same(out, (int[]){4, 5, 6, 7}, 4));
}

TEST(numa_beats_across_sockets_without_links)
{
    struct policy_topo t = {N, NULL, NULL, numa};
    int avail[] = {0, 4, 5, 2};
    int out[2];
    REQUIRE_EQ_INT(policy_prefer(&t, avail, 4, NULL, 0, 2, out), 0);
    CHECK(same(out, (int[]){0, 2}, 2)); /* both pairs are same-NUMA: lowest indices */
    int avail2[] = {0, 4, 5};
    REQUIRE_EQ_INT(policy_prefer(&t, avail2, 3, NULL, 0, 2, out), 0);
    CHECK(same(out, (int[]){4, 5}, 2));
}

TEST(single_gpu_packs_into_broken_pair)
{
    struct policy_topo t = topo();
    /* 1's NVLink partner 0 is taken: take 1 and keep the 2-3 pair whole */
    int avail[] = {1, 2, 3};
    int out[1];
    REQUIRE_EQ_INT(policy_prefer(&t, avail, 3, NULL, 0, 1, out), 0);
    CHECK_EQ_INT(out[0], 1);
}

TEST(deterministic_regardless_of_input_order)
{
    struct policy_topo t = topo();
    int a1[] = {7, 3, 1, 6, 0, 2};
    int a2[] = {0, 1, 2, 3, 6, 7};
    int a3[] = {2, 2, 6, 0, 7, 1, 3, 3};
    int o1[3], o2[3], o3[3];
    REQUIRE_EQ_INT(policy_prefer(&t, a1, 6, NULL, 0, 3, o1), 0);
    REQUIRE_EQ_INT(policy_prefer(&t, a2, 6, NULL, 0, 3, o2), 0);
    REQUIRE_EQ_INT(policy_prefer(&t, a3, 8, NULL, 0, 3, o3), 0);
    CHECK(same(o1, o2, 3));
    CHECK(same(o1, o3, 3));
    for (int i = 0; i < 10; i++) {
        int o[3];
        policy_prefer(&t, a1, 6, NULL, 0, 3, o);
        CHECK(same(o, o1, 3));
    }
}

TEST(unknown_gpus_still_answer)
{
    struct policy_topo t = topo();
    /* 100 and 101 have no topology (e.g. lost GPUs); the answer is unaligned
     * but complete */
    int avail[] = {101, 100, 3};
    int out[3];
    REQUIRE_EQ_INT(policy_prefer(&t, avail, 3, NULL, 0, 3, out), 0);
    CHECK(same(out, (int[]){3, 100, 101}, 3));
    struct policy_topo none = {0, NULL, NULL, NULL};
    int avail2[] = {5, 1, 3};
    int out2[2];
    REQUIRE_EQ_INT(policy_prefer(&none, avail2, 3, NULL, 0, 2, out2), 0);
    CHECK(same(out2, (int[]){1, 3}, 2));
}

TEST(bad_sizes_change_nothing)
{
    struct policy_topo t = topo();
    int avail[] = {0, 1};
    int must[] = {0, 1};
    int out[3] = {-7, -7, -7};
    CHECK_EQ_INT(policy_prefer(&t, avail, 2, NULL, 0, 0, out), -EINVAL);
    CHECK_EQ_INT(policy_prefer(&t, avail, 2, NULL, 0, 3, out), -EINVAL);
    CHECK_EQ_INT(policy_prefer(&t, avail, 2, must, 2, 1, out), -EINVAL);
    CHECK_EQ_INT(out[0], -7);
    CHECK_EQ_INT(policy_prefer(&t, avail, 2, must, 2, 2, out), 0);
    CHECK(same(out, (int[]){0, 1}, 2));
}

TEST(large_search_uses_greedy_and_answers)
{
    /* 64 GPUs, 16 NVLink groups of 4: C(64,16) is far beyond the exhaustive
     * cap; greedy must still return a full NVLink group pair set. */
    enum { M = 64 };
    static uint8_t p[M * M];
    static int l[M * M];
    static int nn[M];
    for (int i = 0; i < M; i++) {
        nn[i] = i / 32;
        for (int j = 0; j < M; j++) {
            p[i * M + j] = i / 4 == j / 4 ? POLICY_PCIE_SWITCH : POLICY_PCIE_FAR;
            l[i * M + j] = (i != j && i / 4 == j / 4) ? 2 : 0;
        }
    }
    struct policy_topo t = {M, p, l, nn};
    int avail[M];
    for (int i = 0; i < M; i++)
        avail[i] = M - 1 - i;
    int must[] = {9};
    int out[4];
    REQUIRE_EQ_INT(policy_prefer(&t, avail, M, must, 1, 4, out), 0);
    CHECK(same(out, (int[]){8, 9, 10, 11}, 4));
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
