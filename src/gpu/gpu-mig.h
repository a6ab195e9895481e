/*
 * gpu-mig.h — MIG through NVML (docs/mig.md): a GPU's MIG devices, its board's GPU instance
 * profiles and their placements, creating and destroying a GPU instance with the compute
 * instance that fills it, and the minors of the MIG capability device nodes.
 *
 * Sources: nvml.h / NVML API reference, "Multi Instance GPU Management" (the calls and their
 * structs: src/gpu/nvml_api.h); NVIDIA's MIG User Guide ("Device Nodes and Capabilities":
 * /proc/driver/nvidia-caps/mig-minors maps "gpu<minor>/gi<id>/access" and
 * "gpu<minor>/gi<id>/ci<id>/access" to the minors of /dev/nvidia-caps/nvidia-cap<N>, the nodes
 * a process needs to use a MIG device). A profile's name is NVIDIA's: "1g.10gb" for a compute
 * instance filling its GPU instance, "1c.2g.20gb" for one that does not (the MIG User Guide's
 * "<C>c.<G>g.<M>gb").
 *
 * Any thread (NVML is thread-safe). Every call needs the optional MIG entry points of struct
 * gpu_nvml: -EOPNOTSUPP without them.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvml.h"

#define GPU_MIG_NAME_MAX 32
#define GPU_MIG_MAX_PLACEMENTS 8

/* One MIG device: a compute instance and its GPU instance. */
struct gpu_mig_device {
    char uuid[96];                  /* "MIG-..." */
    unsigned gi, ci;                /* GPU / compute instance IDs */
    unsigned gi_profile_id;         /* the GPU instance profile's ID (19 for 1g.10gb) */
    unsigned gi_start, gi_size;     /* its placement, in memory slices */
    unsigned ci_slices, gi_slices;  /* compute slices of the CI and of its GI */
    char profile[GPU_MIG_NAME_MAX]; /* "1g.10gb", "1c.2g.20gb", "1g.10gb+me" */
    uint64_t memory_bytes;          /* its memory (NVML's total on the MIG device handle) */
    uint64_t memory_used_bytes;     /* in use now (0 when NVML cannot tell) */
};

/* A GPU instance profile of a board, with where it can be placed. */
struct gpu_mig_profile {
    unsigned index; /* NVML_GPU_INSTANCE_PROFILE_* */
    unsigned id;    /* the ID create takes */
    char name[GPU_MIG_NAME_MAX];
    unsigned slices;     /* compute slices */
    unsigned instances;  /* how many fit on an empty GPU */
    uint64_t memory_mib; /* NVML's memorySizeMB */
    unsigned sms;        /* multiprocessors */
    unsigned n_placements;
    struct {
        unsigned start, size; /* memory slices */
    } placements[GPU_MIG_MAX_PLACEMENTS];
};

/* The MIG devices of gpu (in MIG mode): *ret (NULL when none) owned by the caller (free).
 * Returns 0, -EOPNOTSUPP (MIG calls missing, or the GPU is not in MIG mode), other -errno. */
int gpu_mig_devices(struct gpu_nvml *nvml, nvmlDevice_t gpu, struct gpu_mig_device **ret,
                    size_t *ret_n);
/* The same into out[0..cap) without allocating (a scrape); *ret_n is how many there are (more
 * than cap: only cap filled). */
int gpu_mig_devices_into(struct gpu_nvml *nvml, nvmlDevice_t gpu, struct gpu_mig_device *out,
                         size_t cap, size_t *ret_n);

/* The board's GPU instance profiles that can be created (NVML answers the profile info; the
 * graphics and media-engine variants included), up to cap. Returns 0 or -errno. */
int gpu_mig_profiles(struct gpu_nvml *nvml, nvmlDevice_t gpu, struct gpu_mig_profile *out,
                     size_t cap, size_t *ret_n);

/* Creates a GPU instance of profile_id at placement start (size memory slices) and the compute
 * instance filling it; fills *ret (its IDs, UUID, profile). On any failure nothing is left
 * created and -errno comes back with NVML's error in err. */
int gpu_mig_create(struct gpu_nvml *nvml, nvmlDevice_t gpu, unsigned profile_id, unsigned start,
                   unsigned size, struct gpu_mig_device *ret, char *err, size_t errlen);

/* Destroys GPU instance gi and every compute instance in it. -ENOENT when there is none with
 * that ID (already gone), -EBUSY while a process runs on it, other -errno with err. */
int gpu_mig_destroy(struct gpu_nvml *nvml, nvmlDevice_t gpu, unsigned gi, char *err, size_t errlen);

/* The MIG device of GPU instance gi, compute instance ci, or -ENOENT. */
int gpu_mig_find(struct gpu_nvml *nvml, nvmlDevice_t gpu, unsigned gi, unsigned ci,
                 struct gpu_mig_device *ret);

/* mig-minors text ("gpu0/gi1/access 12\n..."): the minor of GPU gpu_minor's GPU instance gi
 * (ci < 0) or of its compute instance ci. Returns 0, -ENOENT (no such line) or -EINVAL (a
 * malformed line before it: the whole text is refused). */
int gpu_mig_minor(const char *text, size_t len, int gpu_minor, int gi, int ci, int *ret_minor);
