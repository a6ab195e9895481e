/*
 * podutil.c — per-process SM utilization from NVML's samples (see podutil.h for the rules on
 * lastSeenTimeStamp, missing samples and idle processes).
 */
#include "podutil.h"

#include <errno.h>
#include <string.h>

/* Samples kept per call: NVML returns up to one per process per sample period since
 * lastSeenTimeStamp, so several per process when a round spans several periods. */
#define UTIL_SAMPLES (EXPORTER_UTIL_MAX_PROCS * 4)

struct util_acc {
    unsigned pid;
    unsigned sum, k;
};

/* Adds one sample to the per-process sums; returns false when the table is full. */
static bool acc_add(struct util_acc *a, size_t *n, unsigned pid, unsigned sm)
{
    size_t j = 0;
    while (j < *n && a[j].pid != pid)
        j++;
    if (j == *n) {
        if (*n == EXPORTER_UTIL_MAX_PROCS)
            return false;
        a[j].pid = pid;
        a[j].sum = a[j].k = 0;
        (*n)++;
    }
    a[j].sum += sm > 100 ? 100 : sm;
    a[j].k++;
    return true;
}

/* No sample period ended since the last one seen: the last figures stand for
 * EXPORTER_UTIL_HOLD_US after their newest sample, then the GPU counts as idle. */
static int nothing_new(struct exporter_util *u, unsigned long long now_us, unsigned long long since)
{
    u->supported = true;
    if (!u->last_seen_us || now_us > u->last_seen_us + EXPORTER_UTIL_HOLD_US) {
        u->n = 0;
        if (!u->last_seen_us)
            u->last_seen_us = since;
    }
    return 0;
}

int exporter_util_sample(struct gpu_nvml *nvml, nvmlDevice_t dev, struct exporter_util *u,
                         unsigned long long now_us, unsigned long long interval_us)
{
    static nvmlProcessUtilizationInfo_v1_t info[UTIL_SAMPLES];
    static nvmlProcessUtilizationSample_t old[UTIL_SAMPLES];
    static struct util_acc acc[EXPORTER_UTIL_MAX_PROCS];
    unsigned long long since = u->last_seen_us;
    if (!since) /* first round: the last interval only, not the driver's whole buffer */
        since = now_us > interval_us ? now_us - interval_us : 0;
    unsigned cnt = 0;
    nvmlReturn_t r;
    bool versioned = nvml->nvmlDeviceGetProcessesUtilizationInfo != NULL;
    if (versioned) {
        nvmlProcessesUtilizationInfo_t q = {
            .version = nvmlProcessesUtilizationInfo_v1,
            .processSamplesCount = UTIL_SAMPLES,
            .lastSeenTimeStamp = since,
            .procUtilArray = info,
        };
        r = nvml->nvmlDeviceGetProcessesUtilizationInfo(dev, &q);
        /* an older driver exports the symbol but not this struct version */
        if (r == NVML_ERROR_ARGUMENT_VERSION_MISMATCH || r == NVML_ERROR_FUNCTION_NOT_FOUND ||
            r == NVML_ERROR_NOT_SUPPORTED)
            versioned = false;
        else
            cnt = q.processSamplesCount;
    }
    if (!versioned) {
        if (!nvml->nvmlDeviceGetProcessUtilization) {
            u->n = 0;
            u->supported = false;
            return -EOPNOTSUPP;
        }
        cnt = UTIL_SAMPLES;
        r = nvml->nvmlDeviceGetProcessUtilization(dev, old, &cnt, since);
    }
    if (r == NVML_ERROR_NOT_FOUND)
        return nothing_new(u, now_us, since);
    if (r != NVML_SUCCESS) {
        u->n = 0;
        u->supported = false;
        return gpu_nvml_errno(r);
    }
    if (cnt > UTIL_SAMPLES)
        cnt = UTIL_SAMPLES;
    size_t n = 0, nper = 0;
    unsigned long long newest = u->last_seen_us, periods[64];
    unsigned maxk = 0;
    for (unsigned i = 0; i < cnt; i++) {
        unsigned long long ts = versioned ? info[i].timeStamp : old[i].timeStamp;
        unsigned pid = versioned ? info[i].pid : old[i].pid;
        unsigned sm = versioned ? info[i].smUtil : old[i].smUtil;
        if (ts <= since) /* a driver that ignores lastSeenTimeStamp: never count twice */
            continue;
        if (ts > newest)
            newest = ts;
        acc_add(acc, &n, pid, sm);
        size_t t = 0;
        while (t < nper && periods[t] != ts)
            t++;
        if (t == nper && nper < sizeof periods / sizeof periods[0])
            periods[nper++] = ts;
    }
    for (size_t j = 0; j < n; j++)
        if (acc[j].k > maxk)
            maxk = acc[j].k;
    /* a process missing from a period was idle in it: divide by the periods, not its samples */
    unsigned div = nper > maxk ? (unsigned)nper : maxk;
    if (n == 0) /* only samples already counted (a driver ignoring lastSeenTimeStamp) */
        return nothing_new(u, now_us, since);
    u->supported = true;
    u->last_seen_us = newest ? newest : since;
    u->n = n;
    for (size_t j = 0; j < n; j++) {
        u->p[j].pid = acc[j].pid;
        u->p[j].ratio = div ? acc[j].sum / (100.0 * div) : 0;
    }
    return 0;
}

double exporter_util_of(const struct exporter_util *u, unsigned pid)
{
    for (size_t j = 0; j < u->n; j++)
        if (u->p[j].pid == pid)
            return u->p[j].ratio;
    return 0;
}
