/*
 * podutil.h — per-process SM utilization for accel-exporter (docs/exporter.md, "Per-process
 * utilization"): NVML's per-process samples, nvmlDeviceGetProcessesUtilizationInfo where the
 * library has it, else nvmlDeviceGetProcessUtilization, asked each round only for the samples
 * newer than the newest one already seen (lastSeenTimeStamp), averaged per process.
 *
 * NVML lists a process only for the sample periods in which it used the SMs, and answers
 * NOT_FOUND when no period ended since lastSeenTimeStamp (the driver's periods are longer
 * than a fast --interval). So: a round with new samples replaces the figures; a round without
 * keeps them while the newest sample is younger than EXPORTER_UTIL_HOLD_US (a period has not
 * ended yet), then drops them (the GPU went idle). A process with no figure is idle: 0.
 *
 * Threads: the sampler thread only. No allocation.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "nvml.h"

#define EXPORTER_UTIL_MAX_PROCS 256
/* How long the last samples stand for the present when no newer one comes (NVML's periods
 * are at most about a second; the emulator's are ACCEL_EMU_UTIL_WINDOW_MS, 1 s by default). */
#define EXPORTER_UTIL_HOLD_US 3000000ull

struct exporter_util {
    unsigned long long last_seen_us; /* newest sample's timeStamp (CPU clock, µs); 0: none */
    bool supported;                  /* the last call was answered (SUCCESS or NOT_FOUND) */
    size_t n;
    struct {
        unsigned pid;
        double ratio; /* 0..1 */
    } p[EXPORTER_UTIL_MAX_PROCS];
};

/* One round for dev: now_us is the CPU clock (CLOCK_REALTIME, µs), interval_us the sampling
 * interval (the first round asks for the samples of the last interval). Returns 0, or
 * -EOPNOTSUPP when the library has neither call, or another -errno (the figures are then
 * dropped: no made-up values). */
int exporter_util_sample(struct gpu_nvml *nvml, nvmlDevice_t dev, struct exporter_util *u,
                         unsigned long long now_us, unsigned long long interval_us);

/* pid's SM utilization (0..1) in the last samples; 0 for a process with none. */
double exporter_util_of(const struct exporter_util *u, unsigned pid);
