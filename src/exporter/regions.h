/*
 * regions.h — vGPU usage per container for accel-exporter (docs/exporter.md, "vGPU usage
 * regions"): with --state-dir, the sampler reads acceld's assignment list
 * (<state-dir>/vgpu/status.json, src/modes/vgpu-status.c: namespace, pod, container, GPU,
 * cores and memory limit, all set by acceld) and each container's usage region
 * (<state-dir>/vgpu/<pod-uid>/<container>/region/usage, src/vcuda/region.h: memory used per
 * device, GPU time and throttled time, written by libvcuda inside the container).
 *
 * Both are outside input. The region is writable by the tenant: it is read with pread (never
 * mapped: a file truncated under a mapping would kill the exporter with SIGBUS), every size
 * and count in it is checked against the ABI's constants before use, and its figures are the
 * tenant's word (the limits come from status.json, which only acceld writes). status.json is
 * read again only when it changed, and a bad one keeps the last good list (one log line).
 *
 * Threads: the sampler thread only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORTER_VGPU_MAX_ASSIGN 1024       /* assignments kept from status.json */
#define EXPORTER_VGPU_MAX_STATUS (4u << 20) /* bytes of status.json read at most */
#define EXPORTER_VGPU_NAME 254              /* label values: Kubernetes names are shorter */

/* One container's use of one GPU, as read from its region. */
struct exporter_region_usage {
    bool has_device;   /* the region lists the GPU */
    bool first_device; /* it is the region's device 0 (the one pacing measures) */
    uint64_t memory_used;
    uint64_t gpu_time_ns;  /* the container's, all processes, ever */
    uint64_t throttled_ns; /* the container's, all processes, ever */
};

/* Parses a region's bytes (as read from offset 0; len may be less than the file when only
 * the slots up to its high-water mark were read) for gpu_uuid. Returns 0, or -EPROTO when
 * the bytes are not a region of this ABI (bad magic, version, sizes or counts; too short). */
int exporter_region_parse(const unsigned char *buf, size_t len, const char *gpu_uuid,
                          struct exporter_region_usage *ret);

/* One assignment of status.json. */
struct exporter_vgpu_assign {
    char ns[EXPORTER_VGPU_NAME], pod[EXPORTER_VGPU_NAME], pod_uid[EXPORTER_VGPU_NAME];
    char container[EXPORTER_VGPU_NAME], gpu_uuid[96];
    uint64_t cores; /* percent of one GPU */
    uint64_t memory_bytes;
    bool whole;    /* whole GPUs: no libvcuda, no region, no limits */
    bool complete; /* both resources' Allocates answered ("complete"; absent: true) */
};

/* Parses status.json text strictly: version 1, assignments an array of objects whose names
 * are printable ASCII (pod UID and container also usable as path components), cores
 * 0..100, memoryBytes >= 0, whole and complete booleans where present, no duplicate (pod
 * UID, container, GPU); whole-GPU assignments included (flagged). Writes up to cap
 * assignments to a (more: -E2BIG) and their count to *ret_n. Returns 0 or -EINVAL with the
 * reason (and its JSON path) in err. */
int exporter_vgpu_status_parse(const char *text, size_t len, struct exporter_vgpu_assign *a,
                               size_t cap, size_t *ret_n, char *err, size_t errlen);

struct exporter_vgpu;

/* Reads state_dir/vgpu from now on. Returns 0 or -ENOMEM/-ENAMETOOLONG. */
int exporter_vgpu_new(const char *state_dir, struct exporter_vgpu **ret);
struct exporter_vgpu *exporter_vgpu_free(struct exporter_vgpu *v);

/* Reads status.json (when changed) and every assignment's region. */
void exporter_vgpu_refresh(struct exporter_vgpu *v);

/* Where the families go (as struct exporter_sli_out, plus the exporter's index of a GPU
 * UUID: -1 for a GPU it does not serve, whose series are left out). */
struct exporter_vgpu_out {
    bool (*family)(void *ctx, const char *name, const char *type, const char *help);
    void (*print)(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    int (*gpu_index)(void *ctx, const char *uuid);
    void *ctx;
};
void exporter_vgpu_render(const struct exporter_vgpu *v, const struct exporter_vgpu_out *out);
