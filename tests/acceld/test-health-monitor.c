/* test-health-monitor.c — the NVML event thread against an injected NVML
 * table: every wait asks NVML for HEALTH_WAIT_MS (one long wait, not a short
 * poll); a GPU lost without any event is found by the probe after a wait that
 * timed out, and a wait that fails with GPU_IS_LOST or delivers XID 79 makes
 * the thread probe at once (before its next wait); stopping a monitor whose
 * thread is inside a wait leaves the thread to end alone (it frees the
 * monitor), and one whose thread naps (no event set) is woken and joined.
 * Nothing here measures time: the fake records the order of the calls. */
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "health.h"
#include "nvml.h"
#include "tap.h"

#define NGPU 2

enum inject { INJECT_NONE, INJECT_WAIT_LOST, INJECT_XID79, INJECT_XID_ON_LOST, INJECT_BLOCK };

static atomic_bool lost[NGPU];
static atomic_uint waits; /* wait calls so far */
static atomic_uint max_wait_ms;
static atomic_int inject;      /* what the next wait returns */
static atomic_uint inject_at;  /* the wait call that returned it */
static atomic_uint lost_probe; /* waits done when a probe first saw GPU 1 lost */
static atomic_bool blocked;    /* a wait is blocked (INJECT_BLOCK) */
static atomic_bool release;    /* ends the blocked wait */
static atomic_uint set_frees;  /* nvmlEventSetFree calls */
static const char *const uuids[NGPU] = {"GPU-fake-0", "GPU-fake-1"};

static nvmlDevice_t handle(unsigned i)
{
    return (nvmlDevice_t)(uintptr_t)(0x1000 + i);
}

static nvmlReturn_t fake_by_uuid(const char *uuid, nvmlDevice_t *dev)
{
    for (unsigned i = 0; i < NGPU; i++) {
        if (strcmp(uuid, uuids[i]) != 0)
            continue;
        if (atomic_load(&lost[i]))
            return NVML_ERROR_GPU_IS_LOST;
        *dev = handle(i);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t fake_meminfo(nvmlDevice_t dev, nvmlMemory_t *mem)
{
    unsigned i = (unsigned)((uintptr_t)dev - 0x1000);
    if (i >= NGPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!atomic_load(&lost[i])) {
        memset(mem, 0, sizeof(*mem));
        return NVML_SUCCESS;
    }
    unsigned zero = 0;
    if (i == 1)
        atomic_compare_exchange_strong(&lost_probe, &zero, atomic_load(&waits));
    return NVML_ERROR_GPU_IS_LOST;
}

/* each monitor gets a set of its own: a thread an earlier test left in its wait frees its
 * own set, which is not counted */
static atomic_uint set_gen;

static nvmlReturn_t fake_set_create(nvmlEventSet_t *set)
{
    *set = (nvmlEventSet_t)(uintptr_t)(0x42 + atomic_fetch_add(&set_gen, 1) + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t fake_set_free(nvmlEventSet_t set)
{
    if ((uintptr_t)set == 0x42 + atomic_load(&set_gen))
        atomic_fetch_add(&set_frees, 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t fake_register(nvmlDevice_t dev, unsigned long long types, nvmlEventSet_t set)
{
    return NVML_SUCCESS;
}

static nvmlReturn_t fake_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int ms)
{
    unsigned n = atomic_fetch_add(&waits, 1) + 1;
    unsigned prev = atomic_load(&max_wait_ms);
    while (ms > prev && !atomic_compare_exchange_weak(&max_wait_ms, &prev, ms))
        ;
    int what = atomic_exchange(&inject, INJECT_NONE);
    if (what == INJECT_BLOCK) {
        /* a wait NVML does not end early: only the test ends it */
        atomic_store(&blocked, true);
        while (!atomic_load(&release)) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        return NVML_ERROR_TIMEOUT;
    }
    if (what == INJECT_XID_ON_LOST) {
        /* another event of GPU 1, already lost: NVML names its old handle */
        data->device = handle(1);
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = 48;
        return NVML_SUCCESS;
    }
    if (what != INJECT_NONE) {
        /* GPU 1 falls off the bus at this very call */
        atomic_store(&lost[1], true);
        atomic_store(&inject_at, n);
        if (what == INJECT_WAIT_LOST)
            return NVML_ERROR_GPU_IS_LOST;
        data->device = handle(1);
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = 79;
        return NVML_SUCCESS;
    }
    struct timespec ts = {0, 1000000}; /* a short wait keeps the test quick */
    nanosleep(&ts, NULL);
    return NVML_ERROR_TIMEOUT;
}

static struct gpu_nvml fake = {
    .nvmlDeviceGetHandleByUUID = fake_by_uuid,
    .nvmlDeviceGetMemoryInfo = fake_meminfo,
    .nvmlEventSetCreate = fake_set_create,
    .nvmlEventSetFree = fake_set_free,
    .nvmlDeviceRegisterEvents = fake_register,
    .nvmlEventSetWait_v2 = fake_wait,
};

static void reset(void)
{
    for (unsigned i = 0; i < NGPU; i++)
        atomic_store(&lost[i], false);
    atomic_store(&waits, 0);
    atomic_store(&max_wait_ms, 0);
    atomic_store(&inject, INJECT_NONE);
    atomic_store(&inject_at, 0);
    atomic_store(&lost_probe, 0);
    atomic_store(&blocked, false);
    atomic_store(&release, false);
    atomic_store(&set_frees, 0);
}

/* Per GPU: the last LOST/BACK seen, and whether an XID 79 came. */
struct seen {
    int state[NGPU]; /* 0 none, HEALTH_EV_LOST, HEALTH_EV_BACK */
    bool xid79[NGPU];
    int xid48_gpu; /* the GPU the XID 48 record named; -2: none came */
};

static bool drain(struct health_monitor *m, struct seen *s)
{
    struct health_event ev;
    while (health_monitor_read(m, &ev) == 1) {
        if (ev.kind == HEALTH_EV_XID && ev.data == 48)
            s->xid48_gpu = ev.gpu;
        if (ev.gpu < 0 || ev.gpu >= NGPU)
            continue;
        if (ev.kind == HEALTH_EV_LOST || ev.kind == HEALTH_EV_BACK)
            s->state[ev.gpu] = (int)ev.kind;
        if (ev.kind == HEALTH_EV_XID && ev.data == 79)
            s->xid79[ev.gpu] = true;
    }
    return true;
}

static struct health_monitor *start(struct seen *s)
{
    reset();
    memset(s, 0, sizeof(*s));
    s->xid48_gpu = -2;
    struct health_monitor *m = NULL;
    size_t warnings = 99;
    if (health_monitor_start(&fake, (const char *const *)uuids, NGPU, &m, &warnings) < 0)
        return NULL;
    /* the first probe reports every GPU either way */
    if (!TAP_WAIT_UNTIL(
            drain(m, s) && s->state[0] == HEALTH_EV_BACK && s->state[1] == HEALTH_EV_BACK, 10000))
        return health_monitor_stop(m, NULL);
    return m;
}

TEST(lost_without_event_found_by_probe)
{
    struct seen s;
    struct health_monitor *m = start(&s);
    REQUIRE(m);
    atomic_store(&lost[0], true);
    CHECK(TAP_WAIT_UNTIL(drain(m, &s) && s.state[0] == HEALTH_EV_LOST, 10000));
    CHECK_EQ_INT(s.state[1], HEALTH_EV_BACK);
    /* every wait asks for the long wait: nothing polls */
    CHECK_EQ_INT(atomic_load(&max_wait_ms), HEALTH_WAIT_MS);
    atomic_store(&lost[0], false);
    CHECK(TAP_WAIT_UNTIL(drain(m, &s) && s.state[0] == HEALTH_EV_BACK, 10000));
    health_monitor_stop(m, NULL);
}

TEST(wait_gpu_is_lost_probes_at_once)
{
    struct seen s;
    struct health_monitor *m = start(&s);
    REQUIRE(m);
    atomic_store(&inject, INJECT_WAIT_LOST);
    CHECK(TAP_WAIT_UNTIL(drain(m, &s) && s.state[1] == HEALTH_EV_LOST, 10000));
    CHECK_EQ_INT(s.state[0], HEALTH_EV_BACK);
    /* the probe that found it ran right after the failed wait, before another */
    CHECK_NE_INT(atomic_load(&inject_at), 0);
    CHECK_EQ_INT(atomic_load(&lost_probe), atomic_load(&inject_at));
    health_monitor_stop(m, NULL);
}

TEST(xid79_probes_at_once)
{
    struct seen s;
    struct health_monitor *m = start(&s);
    REQUIRE(m);
    atomic_store(&inject, INJECT_XID79);
    CHECK(TAP_WAIT_UNTIL(drain(m, &s) && s.state[1] == HEALTH_EV_LOST, 10000));
    CHECK(s.xid79[1]);
    CHECK(!s.xid79[0]);
    CHECK_NE_INT(atomic_load(&inject_at), 0);
    CHECK_EQ_INT(atomic_load(&lost_probe), atomic_load(&inject_at));
    /* a later event of the lost GPU is still its own, not every GPU's */
    atomic_store(&inject, INJECT_XID_ON_LOST);
    CHECK(TAP_WAIT_UNTIL(drain(m, &s) && s.xid48_gpu != -2, 10000));
    CHECK_EQ_INT(s.xid48_gpu, 1);
    health_monitor_stop(m, NULL);
}

TEST(stop_leaves_a_thread_inside_a_wait)
{
    struct seen s;
    struct health_monitor *m = start(&s);
    REQUIRE(m);
    atomic_store(&inject, INJECT_BLOCK);
    REQUIRE(TAP_WAIT_UNTIL(atomic_load(&blocked), 10000));
    bool busy = false;
    /* returns while the wait goes on (a join here would never end: release comes after) */
    health_monitor_stop(m, &busy);
    CHECK(busy);
    CHECK_EQ_INT(atomic_load(&set_frees), 0);
    atomic_store(&release, true);
    /* the thread ends its wait, sees the stop and frees the monitor (its event set) */
    CHECK(TAP_WAIT_UNTIL(atomic_load(&set_frees) == 1, 10000));
}

TEST(stop_wakes_a_napping_thread)
{
    /* no event set: the thread naps HEALTH_WAIT_MS between probes, on its eventfd */
    struct gpu_nvml probe_only = fake;
    probe_only.nvmlEventSetCreate = NULL;
    reset();
    struct health_monitor *m = NULL;
    size_t warnings = 0;
    REQUIRE(health_monitor_start(&probe_only, (const char *const *)uuids, NGPU, &m, &warnings) ==
            0);
    CHECK_EQ_INT(warnings, NGPU);
    struct seen s = {.xid48_gpu = -2};
    CHECK(TAP_WAIT_UNTIL(drain(m, &s) && s.state[1] == HEALTH_EV_BACK, 10000));
    bool busy = true;
    health_monitor_stop(m, &busy);
    CHECK(!busy); /* woken and joined, not left in a nap */
    CHECK_EQ_INT(atomic_load(&waits), 0);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
