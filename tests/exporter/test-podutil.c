/* test-podutil.c — accel-exporter's per-process utilization (src/exporter/podutil.c) against a
 * scripted NVML: which lastSeenTimeStamp it asks with (the last interval first, then the newest
 * sample seen), averaging over the sample periods returned (a process missing from a period
 * was idle in it), samples not newer than asked dropped, NOT_FOUND keeping the figures for
 * EXPORTER_UTIL_HOLD_US then dropping them, the versioned call preferred and the old one used
 * when the library lacks it or refuses its struct version, and errors leaving no figures. */
#include <errno.h>
#include <string.h>

#include "nvml.h"
#include "podutil.h"
#include "tap.h"

/* The scripted answer: samples (pid, timestamp, smUtil) or an error. */
static struct {
    nvmlReturn_t ret, versioned_ret;
    unsigned n;
    struct {
        unsigned pid;
        unsigned long long ts;
        unsigned sm;
    } s[16];
    unsigned long long asked; /* the lastSeenTimeStamp of the last call */
    int old_calls, new_calls;
} nv;

static nvmlReturn_t old_call(nvmlDevice_t dev, nvmlProcessUtilizationSample_t *u, unsigned *cnt,
                             unsigned long long last)
{
    nv.old_calls++;
    nv.asked = last;
    if (nv.ret != NVML_SUCCESS)
        return nv.ret;
    if (*cnt < nv.n) {
        *cnt = nv.n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < nv.n; i++)
        u[i] = (nvmlProcessUtilizationSample_t){
            .pid = nv.s[i].pid, .timeStamp = nv.s[i].ts, .smUtil = nv.s[i].sm};
    *cnt = nv.n;
    return NVML_SUCCESS;
}

static nvmlReturn_t new_call(nvmlDevice_t dev, nvmlProcessesUtilizationInfo_t *q)
{
    nv.new_calls++;
    if (nv.versioned_ret != NVML_SUCCESS)
        return nv.versioned_ret;
    if (q->version != nvmlProcessesUtilizationInfo_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nv.asked = q->lastSeenTimeStamp;
    if (nv.ret != NVML_SUCCESS)
        return nv.ret;
    if (q->processSamplesCount < nv.n) {
        q->processSamplesCount = nv.n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < nv.n; i++)
        q->procUtilArray[i] = (nvmlProcessUtilizationInfo_v1_t){
            .pid = nv.s[i].pid, .timeStamp = nv.s[i].ts, .smUtil = nv.s[i].sm};
    q->processSamplesCount = nv.n;
    return NVML_SUCCESS;
}

static void script(nvmlReturn_t r, unsigned n, const unsigned (*s)[3])
{
    nv.ret = r;
    nv.n = n;
    for (unsigned i = 0; i < n; i++) {
        nv.s[i].pid = s[i][0];
        nv.s[i].ts = s[i][1];
        nv.s[i].sm = s[i][2];
    }
}

static bool near(double a, double b)
{
    return a - b < 1e-9 && b - a < 1e-9;
}

static void rounds(struct gpu_nvml *n)
{
    static struct exporter_util u;
    memset(&u, 0, sizeof u);
    /* first round at t=10 s, interval 1 s: asks for the samples after 9 s */
    script(NVML_SUCCESS, 3,
           (const unsigned[][3]){{1, 9500000, 80}, {2, 9500000, 10}, {3, 9000000, 99}});
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 10000000, 1000000), 0);
    CHECK_EQ_U64(nv.asked, 9000000);
    CHECK(near(exporter_util_of(&u, 1), 0.8) && near(exporter_util_of(&u, 2), 0.1));
    CHECK(near(exporter_util_of(&u, 3), 0)); /* not newer than asked: dropped */
    CHECK(near(exporter_util_of(&u, 4), 0)); /* no sample: idle */
    /* next round: from the newest seen; two periods, pid 2 in one only (idle in the other) */
    script(NVML_SUCCESS, 3,
           (const unsigned[][3]){{1, 10000000, 60}, {1, 10500000, 40}, {2, 10500000, 30}});
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 11000000, 1000000), 0);
    CHECK_EQ_U64(nv.asked, 9500000);
    CHECK(near(exporter_util_of(&u, 1), 0.5));
    CHECK(near(exporter_util_of(&u, 2), 0.15));
    /* two periods, each process busy in one: each counts half */
    script(NVML_SUCCESS, 2, (const unsigned[][3]){{1, 10600000, 60}, {2, 10700000, 40}});
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 11000000, 1000000), 0);
    CHECK_EQ_U64(nv.asked, 10500000);
    CHECK(near(exporter_util_of(&u, 1), 0.3) && near(exporter_util_of(&u, 2), 0.2));
    script(NVML_SUCCESS, 3,
           (const unsigned[][3]){{1, 10800000, 50}, {1, 10900000, 50}, {2, 10900000, 30}});
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 11000000, 1000000), 0);
    CHECK_EQ_U64(nv.asked, 10700000);
    /* no period ended since: the figures stand */
    script(NVML_ERROR_NOT_FOUND, 0, NULL);
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 11200000, 1000000), 0);
    CHECK_EQ_U64(nv.asked, 10900000);
    CHECK(near(exporter_util_of(&u, 1), 0.5) && near(exporter_util_of(&u, 2), 0.15));
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 10900000 + EXPORTER_UTIL_HOLD_US - 1, 1000000),
                 0);
    CHECK(near(exporter_util_of(&u, 1), 0.5));
    /* ... until the newest sample is older than the hold: idle */
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 10900000 + EXPORTER_UTIL_HOLD_US + 1, 1000000),
                 0);
    CHECK(near(exporter_util_of(&u, 1), 0));
    /* a driver answering only samples already counted: like NOT_FOUND, the hold then idle */
    script(NVML_SUCCESS, 2, (const unsigned[][3]){{1, 14000000, 90}, {2, 14000000, 90}});
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 14100000, 1000000), 0);
    CHECK(near(exporter_util_of(&u, 1), 0.9));
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 14200000, 1000000), 0);
    CHECK_EQ_U64(nv.asked, 14000000);
    CHECK(near(exporter_util_of(&u, 1), 0.9));
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 14000000 + EXPORTER_UTIL_HOLD_US + 1, 1000000),
                 0);
    CHECK(near(exporter_util_of(&u, 1), 0) && u.supported);
    /* a failing call leaves no figures */
    script(NVML_SUCCESS, 1, (const unsigned[][3]){{1, 20000000, 70}});
    CHECK_EQ_INT(exporter_util_sample(n, NULL, &u, 20000000, 1000000), 0);
    CHECK(near(exporter_util_of(&u, 1), 0.7));
    script(NVML_ERROR_GPU_IS_LOST, 0, NULL);
    CHECK(exporter_util_sample(n, NULL, &u, 21000000, 1000000) < 0);
    CHECK(near(exporter_util_of(&u, 1), 0) && !u.supported);
}

TEST(versioned_call_preferred)
{
    struct gpu_nvml n = {0};
    memset(&nv, 0, sizeof nv);
    n.nvmlDeviceGetProcessesUtilizationInfo = new_call;
    n.nvmlDeviceGetProcessUtilization = old_call;
    rounds(&n);
    CHECK(nv.new_calls > 0);
    CHECK_EQ_INT(nv.old_calls, 0);
}

TEST(old_call_without_the_versioned_one)
{
    struct gpu_nvml n = {0};
    memset(&nv, 0, sizeof nv);
    n.nvmlDeviceGetProcessUtilization = old_call;
    rounds(&n);
    CHECK(nv.old_calls > 0);
}

TEST(old_call_when_the_version_is_refused)
{
    struct gpu_nvml n = {0};
    memset(&nv, 0, sizeof nv);
    nv.versioned_ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    n.nvmlDeviceGetProcessesUtilizationInfo = new_call;
    n.nvmlDeviceGetProcessUtilization = old_call;
    rounds(&n);
    CHECK(nv.old_calls > 0);
}

TEST(neither_call)
{
    struct gpu_nvml n = {0};
    struct exporter_util u = {0};
    CHECK_EQ_INT(exporter_util_sample(&n, NULL, &u, 1000000, 1000000), -EOPNOTSUPP);
    CHECK(!u.supported);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
