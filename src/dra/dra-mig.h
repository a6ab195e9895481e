/* dra-mig.h — acceld's DRA side for MIG partitions (dra.mig, docs/mig.md "DRA partitions"):
 * which GPUs are published as partitions (the GPUs of the DRA side in MIG mode), their
 * boards' profiles and placements from NVML, the instances prepare creates and unprepare
 * destroys (src/gpu/gpu-mig.c) with their capability nodes (mig-minors), the clean-up at
 * start of instances no checkpointed claim owns (a crash between a create and the checkpoint,
 * or instances made by hand: with dra.mig the DRA side owns the GPU's partitioning), and the
 * refusal when the API server drops partitionable devices.
 *
 * Threads: the loop's thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "acceld-config.h"
#include "dra.h"

struct gpu_nvml;
struct gpu_inventory;
struct dra_mig;

/* For each of the n GPUs (by UUID): when cfg->dra_mig and the GPU is in MIG mode, loads its
 * profiles and points gpus[i].mig_profiles at them (the
 * GPU is then published as partitions, exclusive whatever dra.sharing says). nvml NULL: none.
 * Returns 0 or -errno (logged). */
int dra_mig_new(struct gpu_nvml *nvml, const struct acceld_config *cfg, struct dra_gpu *gpus,
                size_t n, struct dra_mig **ret);
struct dra_mig *dra_mig_free(struct dra_mig *m); /* NULL ok */

/* How many GPUs are published as partitions. */
size_t dra_mig_count(const struct dra_mig *m);

/* The prepare side's ops (dra.h) over m. */
struct dra_mig_ops dra_mig_ops(struct dra_mig *m);

/* Destroys the MIG instances of the partitioned GPUs that no claim of st owns (logged each;
 * one still in use is left, with a warning). Returns how many were destroyed. */
size_t dra_mig_clean(struct dra_mig *m, const struct dra_state *st);

/* The API server does not keep partitionable devices (reason says how it showed): every
 * partitioned GPU leaves the slice (unpublished: not whole either, a GPU in MIG mode is no
 * use whole and its partitions may be in use), once, with an error line. */
void dra_mig_refuse(struct dra_mig *m, struct dra_gpu *gpus, size_t n, const char *reason);
/* The refusal, or NULL. Borrowed. */
const char *dra_mig_refusal(const struct dra_mig *m);
