/* test-health.c — the loop-side health decisions: fatal and ignored XIDs,
 * double-bit ECC, lost GPUs, and recovery after the quiet period (or never). */
#include "health.h"
#include "tap.h"

#define S 1000000000ull

static struct acceld_config cfg(void)
{
    struct acceld_config c;
    acceld_config_defaults(&c);
    return c;
}

TEST(fatal_xid_marks_unhealthy)
{
    struct acceld_config c = cfg();
    struct health_gpu g = {.healthy = true};
    bool ign = true;
    struct health_event ev = {0, HEALTH_EV_XID, 79};
    CHECK(health_apply(&g, &ev, &c, 10 * S, &ign));
    CHECK(!ign);
    CHECK(!g.healthy);
    CHECK_EQ_U64(g.last_fatal_ns, 10 * S);
    CHECK_EQ_STR(g.reason, "XID 79");
    /* a second fatal event: no change of state, but the quiet period restarts */
    CHECK(!health_apply(&g, &ev, &c, 12 * S, NULL));
    CHECK_EQ_U64(g.last_fatal_ns, 12 * S);
}

TEST(ignored_xid_changes_nothing)
{
    struct acceld_config c = cfg();
    struct health_gpu g = {.healthy = true};
    bool ign = false;
    struct health_event ev = {0, HEALTH_EV_XID, 43};
    CHECK(!health_apply(&g, &ev, &c, 1 * S, &ign));
    CHECK(ign);
    CHECK(g.healthy);
    CHECK_EQ_U64(g.last_fatal_ns, 0);
    /* an empty ignore list makes 43 fatal */
    char err[128];
    REQUIRE_EQ_INT(acceld_config_set(&c, "health.ignoredXids", "", err, sizeof(err)), 0);
    CHECK(health_apply(&g, &ev, &c, 1 * S, &ign));
    CHECK(!g.healthy);
}

TEST(ecc_and_lost)
{
    struct acceld_config c = cfg();
    struct health_gpu g = {.healthy = true};
    struct health_event ecc = {0, HEALTH_EV_ECC_DBE, 0};
    CHECK(health_apply(&g, &ecc, &c, 1 * S, NULL));
    CHECK(!g.healthy);
    struct health_gpu h = {.healthy = true};
    struct health_event lost = {0, HEALTH_EV_LOST, 15};
    CHECK(health_apply(&h, &lost, &c, 1 * S, NULL));
    CHECK(h.lost);
    /* lost: no recovery however long, until NVML answers again */
    CHECK(!health_recovered(&h, 5 * S, 100 * S));
    struct health_event back = {0, HEALTH_EV_BACK, 0};
    CHECK(!health_apply(&h, &back, &c, 101 * S, NULL));
    CHECK(!h.healthy);
    CHECK(!h.lost);
    CHECK(health_recovered(&h, 5 * S, 101 * S));
    CHECK(h.healthy);
}

TEST(recovery_after_quiet_period)
{
    struct acceld_config c = cfg();
    struct health_gpu g = {.healthy = true};
    struct health_event ev = {0, HEALTH_EV_XID, 48};
    health_apply(&g, &ev, &c, 10 * S, NULL);
    CHECK(!health_recovered(&g, 30 * S, 39 * S));
    CHECK(!g.healthy);
    CHECK(health_recovered(&g, 30 * S, 40 * S));
    CHECK(g.healthy);
    CHECK(!health_recovered(&g, 30 * S, 80 * S)); /* already healthy: no change */
    health_apply(&g, &ev, &c, 100 * S, NULL);
    CHECK(!health_recovered(&g, 0, 10000 * S)); /* 0 = never */
    CHECK(!g.healthy);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
