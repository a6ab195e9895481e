/* mig-strategy.h — MIG devices in the device-plugin modes (docs/mig.md): NVIDIA's migStrategy
 * (its k8s-device-plugin's flag --mig-strategy and config key flags.migStrategy, with its
 * rules):
 *
 * - none: MIG is ignored; a GPU in MIG mode is served whole like any other (acceld.c).
 * - single: every MIG device of the node's MIG GPUs on resourceName (nvidia.com/gpu); every
 *   GPU in MIG mode must have MIG devices, all of one profile, and no GPU may be out of MIG
 *   mode beside them — else acceld refuses to start, as NVIDIA's plugin does.
 * - mixed: one resource per profile, <domain of resourceName>/mig-<profile> ("+" written
 *   "."): nvidia.com/mig-1g.10gb; GPUs out of MIG mode stay whole on resourceName. A MIG
 *   device whose compute instance does not fill its GPU instance ("1c.2g.20gb") matches no
 *   resource: refused at start, as NVIDIA's plugin does.
 *
 * Each resource is a pgpu table (pgpu.h): ID = the MIG device's UUID (MIG-...), Allocate =
 * NVIDIA_VISIBLE_DEVICES=MIG-<uuid>,... (or the CDI names <vendor>/<class>=MIG-<uuid>), the
 * parent GPU's /dev/nvidiaN, the GPU and compute instance's capability nodes
 * /dev/nvidia-caps/nvidia-cap<N> (minors from <procRoot>/driver/nvidia-caps/mig-minors) and
 * the control nodes; health = the parent GPU's (an XID on it marks every MIG device of it).
 *
 * Threads: the event loop thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "acceld-config.h"
#include "nvml.h"

#define MIG_MAX_TABLES 16

struct pgpu;

/* A GPU of the pgpu mode that is in MIG mode. Strings borrowed during mig_set_new. */
struct mig_gpu {
    const char *uuid;
    nvmlDevice_t handle;
    int minor;
    int numa_node;
    bool healthy;
};

struct mig_table {
    char resource[ACCELD_NAME_MAX]; /* nvidia.com/gpu (single), nvidia.com/mig-1g.10gb */
    char cdi_tag[ACCELD_NAME_MAX];  /* "" (single: the resourceName's spec), "mig-1g.10gb" */
    struct pgpu *table;
};

struct mig_set {
    struct mig_table tables[MIG_MAX_TABLES];
    size_t n;
    size_t n_devices;
};

/* The tables of cfg->mig_strategy (single or mixed) for these GPUs; n_whole is how many GPUs
 * of the pgpu mode are not in MIG mode (single refuses them). Returns 0, or -EINVAL (a
 * configuration NVIDIA's rules refuse: message in err), other -errno. */
int mig_set_new(struct gpu_nvml *nvml, const struct acceld_config *cfg, const struct mig_gpu *gpus,
                size_t n, size_t n_whole, struct mig_set **ret, char *err, size_t errlen);
struct mig_set *mig_set_free(struct mig_set *s); /* NULL ok; returns NULL */

/* SIGHUP: the options of every table again (dev root, strategy, CDI names). 0 or -errno. */
int mig_set_reconfigure(struct mig_set *s, const struct acceld_config *cfg);
/* Writes every table's CDI spec under dir. 0 or -errno. */
int mig_set_write_cdi(const struct mig_set *s, const char *dir);

/* The resource of a MIG profile under the mixed strategy: "<domain>/mig-<profile>" with '+'
 * as '.', domain that of resource_name. 0 or -EINVAL (not a valid resource name). */
int mig_resource_name(const char *resource_name, const char *profile, char *out, size_t len);
