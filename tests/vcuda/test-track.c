/* Unit tests for libvcuda's allocation tracker (track.c): exact records,
 * growth, removal keeping probe chains intact, per-context sweeps, threads. */
#include "tap.h"
#include "track.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

static struct vc_track_entry entry(uint32_t kind, uint64_t key, uint64_t size, uint64_t ctx)
{
    return (struct vc_track_entry){.key = key, .size = size, .ctx = ctx, .kind = kind, .dev = 1};
}

TEST(track_put_take)
{
    vc_track_reset();
    struct vc_track_entry e = entry(VC_TRACK_DPTR, 0x1000, 512, 7), got;
    REQUIRE_EQ_INT(vc_track_put(&e), 0);
    CHECK_EQ_INT(vc_track_put(&e), -EEXIST);
    /* same key, other kind: another object */
    struct vc_track_entry v = entry(VC_TRACK_VMM, 0x1000, 4096, 0);
    CHECK_EQ_INT(vc_track_put(&v), 0);
    CHECK_EQ_U64(vc_track_count(), 2);
    REQUIRE_EQ_INT(vc_track_take(VC_TRACK_DPTR, 0x1000, &got), 0);
    CHECK_EQ_U64(got.size, 512);
    CHECK_EQ_U64(got.ctx, 7);
    CHECK_EQ_INT(got.dev, 1);
    CHECK_EQ_INT(vc_track_take(VC_TRACK_DPTR, 0x1000, &got), -ENOENT);
    CHECK_EQ_INT(vc_track_take(VC_TRACK_VMM, 0x1000, &got), 0);
    CHECK_EQ_U64(got.size, 4096);
    CHECK_EQ_U64(vc_track_count(), 0);
}

/* Many keys (growth), removed in a scattered order: every one is found
 * exactly once, so deletion never breaks another key's probe chain. */
TEST(track_many_keys)
{
    vc_track_reset();
    const int n = 50000;
    for (int i = 0; i < n; i++) {
        struct vc_track_entry e =
            entry(VC_TRACK_DPTR, 0x7f0000000000ull + (uint64_t)i * 512, (uint64_t)i + 1, 0);
        REQUIRE_EQ_INT(vc_track_put(&e), 0);
    }
    CHECK_EQ_U64(vc_track_count(), (uint64_t)n);
    int bad = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int i = pass; i < n; i += 3) {
            struct vc_track_entry got;
            if (vc_track_take(VC_TRACK_DPTR, 0x7f0000000000ull + (uint64_t)i * 512, &got) != 0 ||
                got.size != (uint64_t)i + 1)
                bad++;
        }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_U64(vc_track_count(), 0);
}

static uint64_t swept_bytes;
static void sum(const struct vc_track_entry *e, void *u)
{
    (void)u;
    swept_bytes += e->size;
}

TEST(track_take_ctx)
{
    vc_track_reset();
    for (int i = 0; i < 1000; i++) {
        struct vc_track_entry e = entry(VC_TRACK_DPTR, (uint64_t)i * 4096, 10, i % 2 ? 0xA : 0xB);
        REQUIRE_EQ_INT(vc_track_put(&e), 0);
    }
    swept_bytes = 0;
    CHECK_EQ_INT(vc_track_take_ctx(0xA, sum, NULL), 500);
    CHECK_EQ_U64(swept_bytes, 5000);
    CHECK_EQ_U64(vc_track_count(), 500);
    CHECK_EQ_INT(vc_track_take_ctx(0xA, sum, NULL), 0);
    struct vc_track_entry got;
    CHECK_EQ_INT(vc_track_take(VC_TRACK_DPTR, 0, &got), 0); /* 0 % 2 == 0: ctx B, kept */
    vc_track_reset();
    CHECK_EQ_U64(vc_track_count(), 0);
}

static void *churn(void *arg)
{
    uint64_t base = (uint64_t)(uintptr_t)arg << 32;
    for (int round = 0; round < 20; round++) {
        for (uint64_t i = 0; i < 2000; i++) {
            struct vc_track_entry e = entry(VC_TRACK_DPTR, base + i, i, 0);
            if (vc_track_put(&e) != 0)
                return (void *)1;
        }
        for (uint64_t i = 0; i < 2000; i++) {
            struct vc_track_entry got;
            if (vc_track_take(VC_TRACK_DPTR, base + i, &got) != 0 || got.size != i)
                return (void *)1;
        }
    }
    return NULL;
}

TEST(track_threads)
{
    vc_track_reset();
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, (void *)(i + 1));
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += r != NULL;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_U64(vc_track_count(), 0);
    vc_track_reset();
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
