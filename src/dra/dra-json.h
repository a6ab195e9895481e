/* dra-json.h — the JSON pieces of a ResourceSlice shared by slice.c (one GPU's device) and
 * partition.c (the pool with MIG partitions and their counters). Internal to src/dra. */
#pragma once

#include <jansson.h>

#include "dra.h"

/* One whole GPU as a v1 Device (attributes, capacity, taint); see slice.c. New reference. */
json_t *dra_gpu_device_json(const char *driver_name, const struct dra_gpu *g);

/* The taint of an unhealthy GPU's devices, or NULL (healthy, or effect None). New reference. */
json_t *dra_gpu_taints_json(const char *driver_name, const struct dra_gpu *g);
