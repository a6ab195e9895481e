/* acceld-config.h — acceld's settings: defaults, the YAML config file (libyaml) and
 * the command-line flags that override it.
 *
 * Every setting has one key (the YAML path, e.g. "health.recoverAfter") and
 * one flag; both go through acceld_config_set(), so a flag and a file line are
 * validated by the same code. Loading order: defaults, then the file, then the
 * flags (flag wins). The struct holds fixed-size strings only, so a config is
 * copied by assignment and compared field by field (SIGHUP reload).
 *
 * Any thread may use a config it owns; the agent keeps the live one on the
 * event loop thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"

#define ACCELD_PATH_MAX 512
#define ACCELD_NAME_MAX 128
#define ACCELD_MAX_XIDS 64
/* A config file larger than this is refused (it is a handful of lines). */
#define ACCELD_CONFIG_MAX_BYTES (1u << 20)
/* The socket's connection timeouts (docs/acceld.md, "Connections"). */
#define ACCELD_HANDSHAKE_TIMEOUT_DEFAULT_NS (10ull * 1000000000ull)
#define ACCELD_IDLE_TIMEOUT_DEFAULT_NS (120ull * 1000000000ull)

enum acceld_strategy {
    ACCELD_STRATEGY_ENVVAR = 0,
    ACCELD_STRATEGY_CDI = 1,
};

/* Which provider serves a GPU (docs/architecture.md, "Provider seam"). */
enum acceld_mode {
    ACCELD_MODE_PGPU = 0,
    ACCELD_MODE_VGPU = 1,
    ACCELD_MODE_DRA = 2,  /* the DRA driver gpu.accel.dev publishes the GPU (docs/dra.md) */
    ACCELD_MODE_VFIO = 3, /* bound to vfio-pci, served whole to VMs (docs/vfio.md) */
};

/* MIG devices in the device-plugin modes (migStrategy; NVIDIA's flag and key,
 * docs/mig.md). */
enum acceld_mig_strategy {
    ACCELD_MIG_NONE = 0,   /* whole GPUs, MIG ignored */
    ACCELD_MIG_SINGLE = 1, /* every GPU's MIG devices, one profile, as resourceName */
    ACCELD_MIG_MIXED = 2,  /* nvidia.com/mig-<profile> per profile */
};

/* DRA mode: how one GPU is published (dra.sharing, dra.gpuSharing). */
enum acceld_dra_sharing {
    ACCELD_DRA_EXCLUSIVE = 0, /* a whole GPU */
    ACCELD_DRA_SHARED = 1,    /* consumable memory + cores, libvcuda enforces them */
    ACCELD_DRA_MPS = 2,       /* consumable memory + cores, a per-claim MPS daemon enforces them */
};

/* DRA mode: the effect of an unhealthy device's taint (dra.taintEffect,
 * dra.fatalTaintEffect); NONE publishes no taint. */
enum acceld_taint_effect {
    ACCELD_TAINT_NONE = 0,
    ACCELD_TAINT_NO_SCHEDULE = 1,
    ACCELD_TAINT_NO_EXECUTE = 2,
};

struct acceld_config {
    char plugin_dir[ACCELD_PATH_MAX];    /* devicePluginDir */
    char resource_name[ACCELD_NAME_MAX]; /* resourceName */
    char nvml_library[ACCELD_PATH_MAX];  /* nvmlLibrary; "" = $ACCEL_NVML_LIBRARY or soname */
    char sysfs_root[ACCELD_PATH_MAX];    /* sysfsRoot */
    char dev_root[ACCELD_PATH_MAX];      /* devRoot */
    char state_dir[ACCELD_PATH_MAX];     /* stateDir */
    enum log_level log_level;            /* logLevel */
    bool no_register;                    /* noRegister */
    enum acceld_strategy strategy;       /* deviceListStrategy */
    char cdi_dir[ACCELD_PATH_MAX];       /* cdi.dir */
    char cdi_vendor[ACCELD_NAME_MAX];    /* cdi.vendor */
    char cdi_class[ACCELD_NAME_MAX];     /* cdi.class */
    int ignored_xids[ACCELD_MAX_XIDS];   /* health.ignoredXids */
    size_t n_ignored_xids;
    uint64_t recover_after_ns;                  /* health.recoverAfter; 0 = never */
    uint64_t handshake_timeout_ns;              /* server.handshakeTimeout */
    uint64_t idle_timeout_ns;                   /* server.idleTimeout */
    enum acceld_mode mode;                      /* mode: the node's default */
    char node_name[256];                        /* nodeName; "" = $NODE_NAME */
    char kubeconfig[ACCELD_PATH_MAX];           /* kubeconfig; "" = in-cluster */
    char vcuda_library[ACCELD_PATH_MAX];        /* vcudaLibrary: host path given to containers */
    char proc_root[ACCELD_PATH_MAX];            /* procRoot */
    char pod_resources_socket[ACCELD_PATH_MAX]; /* podResourcesSocket */
    char vgpu_core_resource[ACCELD_NAME_MAX];   /* vgpu.coreResource */
    char vgpu_memory_resource[ACCELD_NAME_MAX]; /* vgpu.memoryResource */
    uint64_t vgpu_memory_unit;                  /* vgpu.memoryUnit, bytes */
    int vgpu_policy;                            /* vgpu.policy: 0 binpack, 1 spread */
    bool vgpu_over_quota_kill;                  /* vgpu.overQuotaAction: kill (else none) */
    uint64_t vgpu_check_interval_ns;            /* vgpu.checkInterval; 0 = never */
    uint64_t allocate_wait_ns;      /* allocateWait: how long an Allocate waits for its pod */
    bool vgpu_compute_freeze;       /* vgpu.computeAction: freeze (else none) */
    uint64_t vgpu_freeze_period_ns; /* vgpu.freezePeriod */
    char vgpu_cgroup_root[ACCELD_PATH_MAX];    /* vgpu.cgroupRoot */
    char gpu_modes[ACCELD_PATH_MAX];           /* gpuModes: "SEL=MODE,..." (SEL: index or UUID) */
    char dra_registry_dir[ACCELD_PATH_MAX];    /* dra.registryDir */
    char dra_plugin_dir[ACCELD_PATH_MAX];      /* dra.pluginDir; "" = <kubelet>/plugins/<driver> */
    enum acceld_dra_sharing dra_sharing;       /* dra.sharing */
    uint64_t dra_claim_wait_ns;                /* dra.claimWait */
    bool dra_over_quota_kill;                  /* dra.overQuotaAction: kill (else none) */
    uint64_t dra_check_interval_ns;            /* dra.checkInterval; 0 = never */
    char dra_gpu_sharing[ACCELD_PATH_MAX];     /* dra.gpuSharing: "SEL=exclusive|shared|mps,..." */
    enum acceld_taint_effect dra_taint_effect; /* dra.taintEffect (unhealthy GPU) */
    enum acceld_taint_effect dra_fatal_taint_effect; /* dra.fatalTaintEffect (fatal XID, lost) */
    char mps_control[ACCELD_PATH_MAX];               /* mpsControl; "" = found on PATH */
    enum acceld_mig_strategy mig_strategy;           /* migStrategy (also NVIDIA's flags.) */
    char vfio_bind[ACCELD_PATH_MAX];                 /* vfio.bind: "" | "all" | PCI addresses */
    char vfio_resource_names[ACCELD_PATH_MAX];       /* vfio.resourceNames: "DEVICEID=NAME,..." */
    bool dra_mig;                                    /* dra.mig: MIG partitions (KEP-4815) */
    /* The file holds NVIDIA's device-plugin sections (version, sharing, flags,
     * resources): acceld.c parses them with sharing-config.c. Not a key. */
    bool nvidia_sharing;
};

/* One key the config knows: its YAML path and its flag (without "--"). */
struct acceld_config_key {
    const char *key;
    const char *flag;
    const char *help;
};

/* The table of every key, NULL-terminated. */
extern const struct acceld_config_key acceld_config_keys[];

void acceld_config_defaults(struct acceld_config *cfg);

/* Sets one key from its text value ("health.ignoredXids" takes "13,31,43").
 * On error writes a message naming the key into err and leaves cfg unchanged.
 * Returns 0, -ENOENT (unknown key) or -EINVAL (bad value). */
int acceld_config_set(struct acceld_config *cfg, const char *key, const char *value, char *err,
                      size_t errlen);

/* Parses a YAML document (data, len) and applies it on top of cfg. name is
 * used in messages ("FILE:LINE: key: what is wrong"). On error cfg is left
 * unchanged. Unknown keys, duplicate keys, aliases and wrong shapes are errors.
 * Returns 0 or -EINVAL (-ENOMEM when out of memory). */
int acceld_config_parse(struct acceld_config *cfg, const char *data, size_t len, const char *name,
                        char *err, size_t errlen);

/* Reads path and applies it like acceld_config_parse. Returns 0 or -errno. */
int acceld_config_load_file(struct acceld_config *cfg, const char *path, char *err, size_t errlen);

/* True when the two configs differ in the given key. */
bool acceld_config_key_differs(const struct acceld_config *a, const struct acceld_config *b,
                               const char *key);

/* Writes the value of key as text into buf (for logs and `--print-config`).
 * Returns 0 or -ENOENT. */
int acceld_config_format(const struct acceld_config *cfg, const char *key, char *buf, size_t len);

/* True when xid is in the ignore list. */
bool acceld_config_xid_ignored(const struct acceld_config *cfg, int xid);

/* The mode of the GPU with this inventory index and UUID: the first
 * gpuModes entry naming its index or UUID, else the node's mode. */
enum acceld_mode acceld_config_gpu_mode(const struct acceld_config *cfg, int index,
                                        const char *uuid);
/* The same, also matching entries that name its PCI address (bdf as sysfs
 * writes it, NULL: none). */
enum acceld_mode acceld_config_gpu_mode_at(const struct acceld_config *cfg, int index,
                                           const char *uuid, const char *bdf);
const char *acceld_mode_name(enum acceld_mode m);
/* The mode of a GPU NVML does not see (bound to vfio-pci) by its PCI address
 * as sysfs names it ("0000:18:00.0"): the first gpuModes entry naming that
 * address (any case), else the node's mode. */
enum acceld_mode acceld_config_pci_mode(const struct acceld_config *cfg, const char *bdf);
const char *acceld_mig_strategy_name(enum acceld_mig_strategy s);
/* vfio.bind names this GPU (its PCI address, or "all"). */
bool acceld_config_vfio_bind(const struct acceld_config *cfg, const char *bdf);
/* The resource vfio.resourceNames gives the PCI device id (e.g. 0x2330) into
 * buf: 1 when an entry names it, 0 when none does. */
int acceld_config_vfio_name(const struct acceld_config *cfg, unsigned device_id, char *buf,
                            size_t len);
/* True when every GPU is DRA's whatever the node has: mode dra and no
 * gpuModes entry naming another mode (acceld then runs the DRA side alone). */
bool acceld_config_dra_only(const struct acceld_config *cfg);

/* DRA mode: how the GPU with this inventory index and UUID is published: the
 * first dra.gpuSharing entry naming it, else dra.sharing. */
enum acceld_dra_sharing acceld_config_dra_sharing(const struct acceld_config *cfg, int index,
                                                  const char *uuid);
/* The same, true for ACCELD_DRA_SHARED (a libvcuda share). */
bool acceld_config_dra_shared(const struct acceld_config *cfg, int index, const char *uuid);
/* "NoSchedule", "NoExecute" or "None". */
const char *acceld_taint_effect_name(enum acceld_taint_effect e);

/* The socket file name this config serves in the plugin dir, e.g.
 * "accel-nvidia.com-gpu.sock" (bare name, as sent in Register). */
void acceld_config_socket_name(const struct acceld_config *cfg, char *buf, size_t len);
