/* test-regions.c — accel-exporter's region reader (src/exporter/regions.c) against regions
 * written by libvcuda's own code (src/vcuda/region.c, pace.c), so the two sides of the ABI
 * cannot drift apart: memory reserved and released through slots, GPU time settled by the
 * pacer, the throttled time, the device found by UUID; and every header check refusing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pace.h"
#include "region.h"
#include "regions.h"
#include "tap.h"

static unsigned char buf[VC_REGION_SIZE];

/* The region's bytes as the exporter reads them: header, then the slots up to the mark. */
static size_t read_back(const char *path)
{
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    close(fd);
    REQUIRE(n == (ssize_t)sizeof buf);
    return (size_t)n;
}

TEST(reads_what_libvcuda_writes)
{
    char path[512];
    snprintf(path, sizeof path, "%s/usage", tap_tmpdir());
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(path, &r), 0);
    /* as vcuda.c does at attach: the config's device UUIDs */
    snprintf(r.hdr->device_uuid[0], sizeof r.hdr->device_uuid[0], "GPU-aaaa");
    snprintf(r.hdr->device_uuid[1], sizeof r.hdr->device_uuid[1], "GPU-bbbb");
    int a = vc_region_claim_slot(&r, 100, 0), b = vc_region_claim_slot(&r, 101, 0);
    int c = vc_region_claim_slot(&r, 102, 0);
    REQUIRE(a >= 0 && b >= 0 && c >= 0);
    CHECK_EQ_INT(vc_region_reserve(&r, a, 0, 64 << 20, 0), 0);
    CHECK_EQ_INT(vc_region_reserve(&r, b, 0, 32 << 20, 0), 0);
    CHECK_EQ_INT(vc_region_reserve(&r, b, 1, 8 << 20, 0), 0);
    CHECK_EQ_INT(vc_region_reserve(&r, c, 0, 500 << 20, 0), 0);
    vc_region_release(&r, b, 0, 16 << 20);
    vc_region_release_slot(&r, c, 102); /* an exited process: nothing of it counts */
    struct pace_shared *ps = (struct pace_shared *)(void *)&r.hdr->core_limit;
    struct pace_slot *sl = (struct pace_slot *)(void *)&r.slots[a].gpu_time_ns;
    REQUIRE_EQ_INT(pace_shared_init(ps, 30, PACE_POLICY_HARD, 1), 0);
    uint64_t wait = 0;
    REQUIRE_EQ_INT(pace_acquire(ps, sl, 1, 1000, &wait), 0);
    pace_settle(ps, sl, 1000, 2500000000ull);
    atomic_fetch_add(&ps->throttled_ns, 750000000ull); /* what hook-launch.c's sleeps add */

    size_t len = read_back(path);
    struct exporter_region_usage u;
    REQUIRE_EQ_INT(exporter_region_parse(buf, len, "GPU-aaaa", &u), 0);
    CHECK(u.has_device && u.first_device);
    CHECK_EQ_U64(u.memory_used, vc_region_used(&r, 0));
    CHECK_EQ_U64(u.memory_used, (64 << 20) + (16 << 20));
    CHECK_EQ_U64(u.gpu_time_ns, 2500000000ull);
    CHECK_EQ_U64(u.throttled_ns, 750000000ull);
    REQUIRE_EQ_INT(exporter_region_parse(buf, len, "GPU-bbbb", &u), 0);
    CHECK(u.has_device && !u.first_device);
    CHECK_EQ_U64(u.memory_used, 8 << 20);
    REQUIRE_EQ_INT(exporter_region_parse(buf, len, "GPU-bbb", &u), 0);
    CHECK(!u.has_device && u.memory_used == 0);
    REQUIRE_EQ_INT(exporter_region_parse(buf, len, "GPU-bbbb0", &u), 0);
    CHECK(!u.has_device);
    /* only the slots under the mark need reading */
    uint32_t hwm = r.hdr->slot_hwm;
    CHECK_EQ_INT(exporter_region_parse(buf, VC_REGION_HEADER_SIZE + hwm * VC_REGION_SLOT_SIZE,
                                       "GPU-aaaa", &u),
                 0);
    CHECK_EQ_INT(exporter_region_parse(buf, VC_REGION_HEADER_SIZE + (hwm - 1) * VC_REGION_SLOT_SIZE,
                                       "GPU-aaaa", &u),
                 -EPROTO);
    vc_region_detach(&r);
}

TEST(refuses_a_header_that_is_not_the_abi)
{
    static const size_t fields[] = {
        offsetof(struct vc_region_header, magic),
        offsetof(struct vc_region_header, abi_version),
        offsetof(struct vc_region_header, header_size),
        offsetof(struct vc_region_header, region_size),
        offsetof(struct vc_region_header, slot_count),
        offsetof(struct vc_region_header, slot_size),
        offsetof(struct vc_region_header, slot_offset),
        offsetof(struct vc_region_header, device_count),
        offsetof(struct vc_region_header, slot_hwm),
    };
    char path[512];
    snprintf(path, sizeof path, "%s/usage2", tap_tmpdir());
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(path, &r), 0);
    vc_region_detach(&r);
    size_t len = read_back(path);
    struct exporter_region_usage u;
    REQUIRE_EQ_INT(exporter_region_parse(buf, len, "GPU-x", &u), 0);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        unsigned char keep[4];
        memcpy(keep, buf + fields[i], 4);
        uint32_t bad = 0x7fff0001u;
        memcpy(buf + fields[i], &bad, 4);
        memset(&u, 0x5a, sizeof u);
        CHECK_EQ_INT(exporter_region_parse(buf, len, "GPU-x", &u), -EPROTO);
        CHECK_EQ_U64(u.memory_used, 0x5a5a5a5a5a5a5a5aull); /* untouched on failure */
        memcpy(buf + fields[i], keep, 4);
    }
    CHECK_EQ_INT(exporter_region_parse(buf, VC_REGION_HEADER_SIZE - 1, "GPU-x", &u), -EPROTO);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
