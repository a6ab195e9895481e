/*
 * gpuextra.h — per-GPU families beyond the basic sensors in accel-exporter: NVLink error
 * counters per link (nvmlDeviceGetNvLinkErrorCounter) and MIG mode (nvmlDeviceGetMigMode).
 * NVLink counters are read every EXPORTER_EXTRA_NVLINK_EVERY rounds (they are many calls and
 * change rarely); MIG mode every round. A GPU or link whose call fails is left out.
 *
 * Threads: the sampler thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "nvml.h"
#include "sli.h"

#define EXPORTER_EXTRA_NVLINK_EVERY 5

struct exporter_extra;

int exporter_extra_new(unsigned ngpus, struct exporter_extra **ret);
struct exporter_extra *exporter_extra_free(struct exporter_extra *x);

/* Reads GPU i (uuid borrowed for the call, copied). round: the sampler's round number. */
void exporter_extra_sample(struct exporter_extra *x, struct gpu_nvml *nvml, unsigned i,
                           nvmlDevice_t dev, const char *uuid, uint64_t round);

void exporter_extra_render(const struct exporter_extra *x, const struct exporter_sli_out *out);
