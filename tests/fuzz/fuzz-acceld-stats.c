/* fuzz-acceld-stats.c — libFuzzer target for src/nodestate/acceld-stats.c's reader of
 * acceld-stats.json (acceld's SLI file, which accel-exporter reads from the host's state
 * directory). Checks: 0, -EINVAL (with a message) or -ENOMEM only, *ret untouched on
 * failure; on success every table within its bounds, every string NUL-terminated and
 * printable, a GPU's reason there exactly while it is unhealthy, the buckets increasing and their
 * counts cumulative and within ok + error; and what acceld_stats_format writes from it parses back
 * to the same stats. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acceld-stats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_label(const char *s, size_t max)
{
    const char *end = memchr(s, 0, max);
    if (!end || end == s)
        abort();
    for (; s < end; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            abort();
}

static void check(const struct acceld_stats *s)
{
    if (s->nbuckets < 1 || s->nbuckets > ACCELD_STATS_MAX_BUCKETS ||
        s->n_resources > ACCELD_STATS_MAX_RESOURCES || s->n_gpus > ACCELD_STATS_MAX_GPUS)
        abort();
    for (size_t k = 0; k < s->nbuckets; k++)
        if (!(s->bounds[k] > 0) || (k && !(s->bounds[k] > s->bounds[k - 1])))
            abort();
    for (size_t i = 0; i < s->n_resources; i++) {
        const struct acceld_stats_resource *r = &s->res[i];
        check_label(r->name, sizeof(r->name));
        for (size_t j = 0; j < i; j++)
            if (strcmp(s->res[j].name, r->name) == 0)
                abort();
        for (size_t k = 0; k < s->nbuckets; k++)
            if ((k && r->bucket[k] < r->bucket[k - 1]) ||
                r->bucket[k] > r->alloc_ok + r->alloc_error)
                abort();
        if (!(r->alloc_sum >= 0))
            abort();
    }
    for (size_t i = 0; i < s->n_gpus; i++) {
        const struct acceld_stats_gpu *g = &s->gpus[i];
        check_label(g->uuid, sizeof(g->uuid));
        /* version 2's state: a reason exactly while unhealthy, a known MPS state */
        if (g->has_state && (g->healthy ? g->reason[0] != '\0'
                                        : (check_label(g->reason, sizeof(g->reason)), false)))
            abort();
        if (g->has_state && (unsigned)g->mps >= ACCELD_STATS_MPS_STATES)
            abort();
        for (size_t j = 0; j < i; j++)
            if (strcmp(s->gpus[j].uuid, s->gpus[i].uuid) == 0)
                abort();
    }
}

static bool same(const struct acceld_stats *a, const struct acceld_stats *b)
{
    if (a->start_time != b->start_time || a->write_time != b->write_time ||
        a->init_ok != b->init_ok || a->init_failed != b->init_failed ||
        a->nbuckets != b->nbuckets || a->n_resources != b->n_resources || a->n_gpus != b->n_gpus ||
        memcmp(a->quota, b->quota, sizeof(a->quota)) != 0)
        return false;
    for (size_t k = 0; k < a->nbuckets; k++)
        if (a->bounds[k] != b->bounds[k])
            return false;
    for (size_t i = 0; i < a->n_resources; i++) {
        const struct acceld_stats_resource *x = &a->res[i], *y = &b->res[i];
        if (strcmp(x->name, y->name) || x->reg_ok != y->reg_ok || x->reg_failed != y->reg_failed ||
            x->alloc_ok != y->alloc_ok || x->alloc_error != y->alloc_error ||
            x->alloc_sum != y->alloc_sum ||
            memcmp(x->bucket, y->bucket, a->nbuckets * sizeof(x->bucket[0])) != 0)
            return false;
    }
    for (size_t i = 0; i < a->n_gpus; i++) {
        const struct acceld_stats_gpu *x = &a->gpus[i], *y = &b->gpus[i];
        if (x->index != y->index || strcmp(x->uuid, y->uuid) ||
            x->to_unhealthy != y->to_unhealthy || x->to_healthy != y->to_healthy ||
            x->mps_restarts != y->mps_restarts)
            return false;
        /* a version 1 GPU has no state; written back it reads as version 2's default */
        if (x->has_state && (!y->has_state || x->healthy != y->healthy ||
                             strcmp(x->reason, y->reason) || x->mps != y->mps))
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct acceld_stats s, before, again;
    char err[512];
    if (size > ACCELD_STATS_MAX_BYTES)
        return 0;
    memset(&s, 0x6b, sizeof(s));
    before = s;
    err[0] = '\0';
    int r = acceld_stats_parse((const char *)data, size, &s, err, sizeof(err));
    if (r < 0) {
        if ((r != -EINVAL && r != -ENOMEM) || (r == -EINVAL && !err[0]))
            abort();
        if (memcmp(&s, &before, sizeof(s)) != 0)
            abort();
        return 0;
    }
    if (r != 0)
        abort();
    check(&s);
    char *text;
    size_t len;
    if (acceld_stats_format(&s, s.write_time, &text, &len) < 0)
        return 0; /* out of memory */
    memset(&again, 0, sizeof(again));
    r = acceld_stats_parse(text, len, &again, err, sizeof(err));
    free(text);
    if (r == -ENOMEM)
        return 0;
    if (r != 0 || !same(&s, &again))
        abort();
    return 0;
}
