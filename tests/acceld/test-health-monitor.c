/* test-health-monitor.c — the NVML event thread against an injected NVML
 * table: a GPU lost without any event is found by the periodic probe, and a
 * wait that fails with GPU_IS_LOST or delivers XID 79 makes the thread probe
 * at once (before its next wait), so a lost GPU does not wait for the next
 * probe interval. Nothing here measures time: the fake records the order of
 * the calls. */
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "health.h"
#include "nvml.h"
#include "tap.h"

#define NGPU 2

enum inject { INJECT_NONE, INJECT_WAIT_LOST, INJECT_XID79, INJECT_XID_ON_LOST };

static atomic_bool lost[NGPU];
static atomic_uint waits; /* wait calls so far */
static atomic_uint max_wait_ms;
static atomic_int inject;      /* what the next wait returns */
static atomic_uint inject_at;  /* the wait call that returned it */
static atomic_uint lost_probe; /* waits done when a probe first saw GPU 1 lost */
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

static nvmlReturn_t fake_set_create(nvmlEventSet_t *set)
{
    *set = (nvmlEventSet_t)(uintptr_t)0x42;
    return NVML_SUCCESS;
}

static nvmlReturn_t fake_set_free(nvmlEventSet_t set)
{
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
        return health_monitor_stop(m);
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
    /* no wait outlasts the probe interval, so a silent loss is found within it */
    CHECK_LE_INT(atomic_load(&max_wait_ms), HEALTH_PROBE_INTERVAL_NS / 1000000);
    atomic_store(&lost[0], false);
    CHECK(TAP_WAIT_UNTIL(drain(m, &s) && s.state[0] == HEALTH_EV_BACK, 10000));
    health_monitor_stop(m);
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
    health_monitor_stop(m);
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
    health_monitor_stop(m);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
