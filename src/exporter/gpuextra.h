/*
 * gpuextra.h — per-GPU families beyond the basic sensors in accel-exporter: NVLink errors
 * (nvmlDeviceGetNvLinkErrorCounter, read per link and served per GPU and type, summed over the
 * links: 5 series per GPU where per link would be 90) with the number of active links, and MIG
 * mode (nvmlDeviceGetMigMode). NVLink is read every EXPORTER_EXTRA_NVLINK_EVERY rounds (up to
 * 108 calls a GPU, and the counters change rarely); MIG mode every round. A link that goes
 * inactive keeps its last counts in the sum, so the sum never goes back; a GPU whose calls
 * fail is left out.
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
