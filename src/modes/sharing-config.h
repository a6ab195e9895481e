/* sharing-config.h — the GPU-sharing config: NVIDIA's device-plugin format
 * (`version: v1`, `sharing.timeSlicing` / `sharing.mps`) plus acceld's own
 * per-GPU replica counts, parsed with libyaml into a fixed-size struct; the
 * replica limits by compute capability; replica device IDs `<uuid>::<n>`; the
 * MPS caps a request of k replicas out of n gets (docs/mps.md).
 *
 * Pure functions with no global state: any thread may call them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHARING_NAME_MAX 128
#define SHARING_DEV_MAX 96
#define SHARING_MAX_RESOURCES 16
#define SHARING_MAX_DEVICES 64
#define SHARING_CONFIG_MAX_BYTES (1u << 20)
/* MPS client limits per device (NVIDIA MPS guide, "Considerations" /
 * "Limitations": 48 client CUDA contexts per device on Volta (compute
 * capability 7.0) and later, 16 before). A replica is one client at least. */
#define SHARING_REPLICAS_MAX_VOLTA 48
#define SHARING_REPLICAS_MAX_PRE_VOLTA 16

enum sharing_mode {
    SHARING_NONE = 0, /* no sharing section: one device per GPU */
    SHARING_TIME_SLICING = 1,
    SHARING_MPS = 2,
};

enum sharing_devices {
    SHARING_DEVICES_ALL = 0,   /* devices: all (or absent) */
    SHARING_DEVICES_COUNT = 1, /* devices: N — the first N GPUs */
    SHARING_DEVICES_LIST = 2,  /* devices: [index | UUID, ...] */
};

/* acceld's own key `perGpuReplicas: {<index|UUID>: N}` on a resource entry. */
struct sharing_gpu_replicas {
    char gpu[SHARING_DEV_MAX];
    unsigned replicas;
    unsigned long line;
};

struct sharing_resource {
    char name[SHARING_NAME_MAX];   /* fully qualified, e.g. nvidia.com/gpu */
    char rename[SHARING_NAME_MAX]; /* "" = not renamed */
    unsigned replicas;
    enum sharing_devices devices;
    unsigned count; /* SHARING_DEVICES_COUNT */
    char list[SHARING_MAX_DEVICES][SHARING_DEV_MAX];
    size_t n_list;
    struct sharing_gpu_replicas per_gpu[SHARING_MAX_DEVICES];
    size_t n_per_gpu;
    unsigned long line; /* the entry's line, for later errors */
};

struct sharing_config {
    enum sharing_mode mode;
    bool rename_by_default;
    bool fail_requests_greater_than_one;
    struct sharing_resource res[SHARING_MAX_RESOURCES];
    size_t n_res;
};

/* One GPU as resolve sees it. */
struct sharing_gpu {
    unsigned index;
    const char *uuid; /* borrowed */
    int cc_major, cc_minor;
};

/* Parses a whole NVIDIA-format config file (`flags` and top-level
 * `resources` are NVIDIA's other sections: accepted and ignored here).
 * Returns 0 and fills *out, or -EINVAL with "name:line: what, what to do" in
 * err; *out is untouched on error. */
int sharing_config_parse(struct sharing_config *out, const char *data, size_t len, const char *name,
                         char *err, size_t errlen);
int sharing_config_load_file(struct sharing_config *out, const char *path, char *err,
                             size_t errlen);
/* The same for acceld's config file, which may hold acceld's own keys next to
 * NVIDIA's sections: with SHARING_PARSE_OTHER_KEYS unknown top-level keys are
 * left to acceld's parser (config.c) instead of refused. */
#define SHARING_PARSE_OTHER_KEYS 1u
int sharing_config_parse_ex(struct sharing_config *out, const char *data, size_t len,
                            const char *name, unsigned flags, char *err, size_t errlen);
int sharing_config_load_file_ex(struct sharing_config *out, const char *path, unsigned flags,
                                char *err, size_t errlen);

/* The most replicas a GPU of this compute capability may have. */
unsigned sharing_replicas_max(int cc_major, int cc_minor);

/* The resource entry and replica count that apply to gpu, or -ENOENT when
 * no entry selects it (it stays an unshared GPU). -EINVAL when the count
 * exceeds the GPU's limit or a list entry names no GPU (err says which). */
int sharing_config_resolve(const struct sharing_config *c, const struct sharing_gpu *gpus,
                           size_t n_gpus, size_t which, const struct sharing_resource **ret_res,
                           unsigned *ret_replicas, char *err, size_t errlen);

/* The resource name a shared entry is advertised under: rename, else
 * name + ".shared" under renameByDefault, else name. */
void sharing_resource_advertised(const struct sharing_config *c, const struct sharing_resource *r,
                                 char *buf, size_t len);

/* Replica device IDs as NVIDIA's plugin writes them: "<uuid>::<n>". */
int sharing_replica_id(const char *uuid, unsigned n, char *buf, size_t len);
/* Splits an ID back; -EINVAL when it is not one. uuid gets the GPU part. */
int sharing_replica_id_parse(const char *id, char *uuid, size_t len, unsigned *ret_n);

/* The MPS caps for k replicas of an n-replica GPU (docs/mps.md, "Cap rule"):
 * thread percentage floor(100·k/n) (at least 1), memory floor(mem·k/n). */
int sharing_mps_caps(unsigned k, unsigned n, uint64_t mem_bytes, unsigned *ret_pct,
                     uint64_t *ret_mem);
