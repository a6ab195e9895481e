/* policy.c — preferred-allocation search; see policy.h for the ranking. */
#include "policy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A set's rank packed into one integer so sets compare with `>`: NVLinks
 * (bits 40+), switch pairs (27-39), host-bridge-or-closer pairs (14-26),
 * NUMA-or-closer pairs (1-13). Pair counts stay below 8192 for up to 128 GPUs. */
#define SHIFT_NVLINK 40
#define SHIFT_SWITCH 27
#define SHIFT_HB 14
#define SHIFT_NUMA 1

static enum policy_pcie pcie_level(const struct policy_topo *t, int a, int b)
{
    if (a < 0 || b < 0 || a >= t->n || b >= t->n)
        return POLICY_PCIE_FAR;
    enum policy_pcie l = t->pcie ? (enum policy_pcie)t->pcie[a * t->n + b] : POLICY_PCIE_FAR;
    if (l > POLICY_PCIE_SWITCH)
        l = POLICY_PCIE_FAR;
    /* Link queries failed or said "across sockets": the NUMA nodes still tell. */
    if (l == POLICY_PCIE_FAR && t->numa && t->numa[a] >= 0 && t->numa[a] == t->numa[b])
        l = POLICY_PCIE_NUMA;
    return l;
}

uint64_t policy_pair_score(const struct policy_topo *t, int a, int b)
{
    uint64_t s = 0;
    if (a >= 0 && b >= 0 && a < t->n && b < t->n && t->nvlinks) {
        int l = t->nvlinks[a * t->n + b];
        if (l > 0)
            s += (uint64_t)(l & 0xffffff) << SHIFT_NVLINK;
    }
    switch (pcie_level(t, a, b)) {
    case POLICY_PCIE_SWITCH:
        /* a switch pair is also under one host bridge */
        s += 1ull << SHIFT_SWITCH;
        __attribute__((fallthrough));
    case POLICY_PCIE_HOSTBRIDGE:
        s += 1ull << SHIFT_HB;
        __attribute__((fallthrough));
    case POLICY_PCIE_NUMA:
        s += 1ull << SHIFT_NUMA;
        break;
    case POLICY_PCIE_FAR:
        break;
    }
    return s;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static size_t sort_unique(int *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(int), cmp_int);
    size_t m = 1;
    for (size_t i = 1; i < n; i++)
        if (v[i] != v[m - 1])
            v[m++] = v[i];
    return m;
}

static bool contains(const int *v, size_t n, int x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

/* Number of k-subsets of n, saturating at cap+1. */
static uint64_t choose_capped(size_t n, size_t k, uint64_t cap)
{
    if (k > n)
        return 0;
    if (k > n - k)
        k = n - k;
    uint64_t c = 1;
    for (size_t i = 1; i <= k; i++) {
        c = c * (n - k + i) / i;
        if (c > cap)
            return cap + 1;
    }
    return c;
}

struct search {
    const struct policy_topo *t;
    const int *must;
    size_t n_must;
    const int *cand;
    size_t n_cand;
    size_t k;
};

/* Rank of must ∪ {cand[pick[0..k-1]]}: inside score, and the ties to the
 * candidates left out (lower is better, so it is returned separately). */
static void rank_set(const struct search *s, const size_t *pick, uint64_t *ret_in,
                     uint64_t *ret_out)
{
    uint64_t in = 0, out = 0;
    for (size_t i = 0; i < s->n_must; i++)
        for (size_t j = i + 1; j < s->n_must; j++)
            in += policy_pair_score(s->t, s->must[i], s->must[j]);
    for (size_t a = 0; a < s->k; a++) {
        int g = s->cand[pick[a]];
        for (size_t i = 0; i < s->n_must; i++)
            in += policy_pair_score(s->t, g, s->must[i]);
        for (size_t b = a + 1; b < s->k; b++)
            in += policy_pair_score(s->t, g, s->cand[pick[b]]);
    }
    /* Ties to the leftovers: walk the candidates, skipping the picked ones
     * (pick is ascending). */
    size_t p = 0;
    for (size_t c = 0; c < s->n_cand; c++) {
        if (p < s->k && pick[p] == c) {
            p++;
            continue;
        }
        for (size_t a = 0; a < s->k; a++)
            out += policy_pair_score(s->t, s->cand[c], s->cand[pick[a]]);
        for (size_t i = 0; i < s->n_must; i++)
            out += policy_pair_score(s->t, s->cand[c], s->must[i]);
    }
    *ret_in = in;
    *ret_out = out;
}

static bool better(uint64_t in, uint64_t out, uint64_t best_in, uint64_t best_out)
{
    return in > best_in || (in == best_in && out < best_out);
}

/* Every k-subset in lexicographic order; the first best one wins ties, which
 * is the one with the lowest indices. */
static void search_exhaustive(const struct search *s, size_t *pick, size_t *best)
{
    uint64_t best_in = 0, best_out = UINT64_MAX;
    bool have = false;
    for (size_t i = 0; i < s->k; i++)
        pick[i] = i;
    for (;;) {
        uint64_t in, out;
        rank_set(s, pick, &in, &out);
        if (!have || better(in, out, best_in, best_out)) {
            have = true;
            best_in = in;
            best_out = out;
            memcpy(best, pick, s->k * sizeof(*pick));
        }
        /* next combination */
        size_t i = s->k;
        while (i > 0 && pick[i - 1] == s->n_cand - s->k + i - 1)
            i--;
        if (i == 0)
            break;
        pick[i - 1]++;
        for (size_t j = i; j < s->k; j++)
            pick[j] = pick[j - 1] + 1;
    }
}

/* Greedy: add, one at a time, the candidate that adds the most to the set
 * (lowest index on ties). Used only for very large searches. */
static void search_greedy(const struct search *s, size_t *best)
{
    bool *used = calloc(s->n_cand ? s->n_cand : 1, sizeof(bool));
    for (size_t step = 0; step < s->k; step++) {
        size_t pick = SIZE_MAX;
        uint64_t pick_gain = 0;
        for (size_t c = 0; c < s->n_cand; c++) {
            if (used && used[c])
                continue;
            uint64_t gain = 0;
            for (size_t i = 0; i < s->n_must; i++)
                gain += policy_pair_score(s->t, s->cand[c], s->must[i]);
            for (size_t a = 0; a < step; a++)
                gain += policy_pair_score(s->t, s->cand[c], s->cand[best[a]]);
            if (pick == SIZE_MAX || gain > pick_gain) {
                pick = c;
                pick_gain = gain;
            }
        }
        best[step] = pick;
        if (used)
            used[pick] = true;
        else
            break; /* out of memory: cannot track; fall back below */
    }
    if (!used)
        for (size_t i = 0; i < s->k; i++)
            best[i] = i;
    free(used);
}

int policy_prefer(const struct policy_topo *topo, const int *avail, size_t n_avail, const int *must,
                  size_t n_must, size_t size, int *ret_out)
{
    int r = -ENOMEM;
    int *m = malloc((n_must ? n_must : 1) * sizeof(int));
    int *cand = malloc((n_avail ? n_avail : 1) * sizeof(int));
    size_t *pick = malloc((size ? size : 1) * sizeof(size_t));
    size_t *best = malloc((size ? size : 1) * sizeof(size_t));
    if (!m || !cand || !pick || !best)
        goto out;
    if (n_must)
        memcpy(m, must, n_must * sizeof(int));
    n_must = sort_unique(m, n_must);
    size_t n_cand = 0;
    for (size_t i = 0; i < n_avail; i++)
        if (!contains(m, n_must, avail[i]))
            cand[n_cand++] = avail[i];
    n_cand = sort_unique(cand, n_cand);

    r = -EINVAL;
    if (size == 0 || size < n_must || size - n_must > n_cand)
        goto out;
    struct search s = {topo, m, n_must, cand, n_cand, size - n_must};
    if (s.k > 0) {
        if (choose_capped(n_cand, s.k, POLICY_EXHAUSTIVE_MAX) <= POLICY_EXHAUSTIVE_MAX)
            search_exhaustive(&s, pick, best);
        else
            search_greedy(&s, best);
    }
    for (size_t i = 0; i < n_must; i++)
        ret_out[i] = m[i];
    for (size_t i = 0; i < s.k; i++)
        ret_out[n_must + i] = cand[best[i]];
    sort_unique(ret_out, size);
    r = 0;
out:
    free(m);
    free(cand);
    free(pick);
    free(best);
    return r;
}
