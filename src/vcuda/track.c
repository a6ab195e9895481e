/* track.c — sharded hash of live objects; see track.h. Linear probing with
 * backward-shift deletion (no tombstones), grown at 50 % load. */
#include "track.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SHARDS 16
#define INITIAL_CAP 256

struct shard {
    pthread_mutex_t lock;
    struct vc_track_entry *tab;
    uint32_t cap; /* power of two, or 0 before first use */
    uint32_t count;
} __attribute__((aligned(64)));

static struct shard shards[SHARDS] = {
#define S                                                                                          \
    {                                                                                              \
        .lock = PTHREAD_MUTEX_INITIALIZER                                                          \
    }
    S, S, S, S, S, S, S, S, S, S, S, S, S, S, S, S,
#undef S
};

static inline uint64_t mix(uint32_t kind, uint64_t key)
{
    uint64_t h = key ^ ((uint64_t)kind << 59);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static int shard_grow(struct shard *s)
{
    uint32_t ncap = s->cap ? s->cap * 2 : INITIAL_CAP;
    struct vc_track_entry *nt = calloc(ncap, sizeof(*nt));
    if (!nt)
        return -ENOMEM;
    for (uint32_t i = 0; i < s->cap; i++) {
        struct vc_track_entry *e = &s->tab[i];
        if (!e->kind)
            continue;
        uint32_t j = (uint32_t)(mix(e->kind, e->key) >> 4) & (ncap - 1);
        while (nt[j].kind)
            j = (j + 1) & (ncap - 1);
        nt[j] = *e;
    }
    free(s->tab);
    s->tab = nt;
    s->cap = ncap;
    return 0;
}

int vc_track_put(const struct vc_track_entry *e)
{
    uint64_t h = mix(e->kind, e->key);
    struct shard *s = &shards[h & (SHARDS - 1)];
    pthread_mutex_lock(&s->lock);
    if ((s->count + 1) * 2 > s->cap && shard_grow(s) < 0) {
        pthread_mutex_unlock(&s->lock);
        return -ENOMEM;
    }
    uint32_t j = (uint32_t)(h >> 4) & (s->cap - 1);
    while (s->tab[j].kind) {
        if (s->tab[j].kind == e->kind && s->tab[j].key == e->key) {
            pthread_mutex_unlock(&s->lock);
            return -EEXIST;
        }
        j = (j + 1) & (s->cap - 1);
    }
    s->tab[j] = *e;
    s->count++;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* Removes slot j of s, shifting later members of the probe run back. */
static void shard_remove_at(struct shard *s, uint32_t j)
{
    uint32_t mask = s->cap - 1;
    uint32_t i = j;
    for (;;) {
        s->tab[i].kind = 0;
        uint32_t k = i;
        for (;;) {
            k = (k + 1) & mask;
            if (!s->tab[k].kind) {
                s->count--;
                return;
            }
            uint32_t home = (uint32_t)(mix(s->tab[k].kind, s->tab[k].key) >> 4) & mask;
            /* k may move to i when its home is not cyclically in (i, k]. */
            if (i <= k ? (home <= i || home > k) : (home <= i && home > k))
                break;
        }
        s->tab[i] = s->tab[k];
        i = k;
    }
}

int vc_track_take(uint32_t kind, uint64_t key, struct vc_track_entry *ret)
{
    uint64_t h = mix(kind, key);
    struct shard *s = &shards[h & (SHARDS - 1)];
    pthread_mutex_lock(&s->lock);
    if (s->cap) {
        uint32_t j = (uint32_t)(h >> 4) & (s->cap - 1);
        while (s->tab[j].kind) {
            if (s->tab[j].kind == kind && s->tab[j].key == key) {
                *ret = s->tab[j];
                shard_remove_at(s, j);
                pthread_mutex_unlock(&s->lock);
                return 0;
            }
            j = (j + 1) & (s->cap - 1);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return -ENOENT;
}

int vc_track_take_ctx(uint64_t ctx, void (*fn)(const struct vc_track_entry *e, void *u), void *u)
{
    int n = 0;
    for (int i = 0; i < SHARDS; i++) {
        struct shard *s = &shards[i];
        uint32_t j = 0;
        for (;;) {
            /* Collect a batch under the lock, call fn outside it. Removal
             * shifts a later entry into j, so j is looked at again. */
            struct vc_track_entry got[32];
            int ngot = 0;
            pthread_mutex_lock(&s->lock);
            while (j < s->cap && ngot < 32) {
                if (s->tab[j].kind && s->tab[j].ctx == ctx) {
                    got[ngot++] = s->tab[j];
                    shard_remove_at(s, j);
                } else {
                    j++;
                }
            }
            bool done = j >= s->cap;
            pthread_mutex_unlock(&s->lock);
            for (int k = 0; k < ngot; k++)
                if (fn)
                    fn(&got[k], u);
            n += ngot;
            if (done)
                break;
        }
    }
    return n;
}

void vc_track_reset(void)
{
    for (int i = 0; i < SHARDS; i++) {
        struct shard *s = &shards[i];
        pthread_mutex_init(&s->lock, NULL);
        free(s->tab);
        s->tab = NULL;
        s->cap = 0;
        s->count = 0;
    }
}

uint64_t vc_track_count(void)
{
    uint64_t n = 0;
    for (int i = 0; i < SHARDS; i++) {
        pthread_mutex_lock(&shards[i].lock);
        n += shards[i].count;
        pthread_mutex_unlock(&shards[i].lock);
    }
    return n;
}
