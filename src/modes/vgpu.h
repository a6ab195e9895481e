/* vgpu.h — the vGPU provider: each GPU in vgpu mode shared between
 * containers through libvcuda, served as two resources (provider.h):
 * cores (`tencent.com/vcuda-core`, 100 units a GPU) and memory
 * (`tencent.com/vcuda-memory`, units of 256 MiB by default), GPU-Manager's
 * names and units.
 *
 * The kubelet calls Allocate per container and per resource, in either
 * order, without naming the pod. vgpu matches each call to a pending
 * container through a pod source (struct vgpu_pods: the API server's watch
 * cache in acceld, a table in tests): the first call for a container picks
 * the oldest pending pod+container that asks for exactly this amount and is
 * not assigned yet; the call for the other resource finds the same
 * assignment. The GPU is vgpu's choice (binpack or spread; a scheduler
 * extender's annotation wins), not the IDs the kubelet sent. Each assignment
 * gets a directory <state>/vgpu/<pod-uid>/<container>/ holding libvcuda's
 * config (read-only in the container at /etc/vcuda/config), the
 * /etc/ld.so.preload file and a writable region/ dir, and is kept in a
 * checkpoint (<state>/vgpu/checkpoint.json, atomic, 0600, plus the changes
 * since in checkpoint.journal, one line per Allocate) so a restarted acceld
 * hands out nothing twice. docs/vgpu.md has the whole flow.
 *
 * Threads: the event loop thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "provider.h"

#define VGPU_CORES_PER_GPU 100
#define VGPU_MAX_GPUS 64
#define VGPU_NAME_MAX 254 /* pod names are DNS subdomains (253) */
/* The annotation vgpu writes on the pod, per container:
 * <prefix><container> = <gpu uuid>; a scheduler extender writing the same
 * key before the pod starts chooses the GPU. */
#define VGPU_ANNOTATION_PREFIX "accel.dev/vgpu-"
/* Where a container sees its files. */
#define VGPU_CONTAINER_CONFIG "/etc/vcuda/config"
#define VGPU_CONTAINER_PRELOAD "/etc/ld.so.preload"
#define VGPU_CONTAINER_LIBRARY "/usr/local/vcuda/libvcuda.so"
#define VGPU_CONTAINER_REGION_DIR "/var/run/vcuda"

enum vgpu_resource { VGPU_CORES = 0, VGPU_MEMORY = 1 };
enum vgpu_policy { VGPU_BINPACK = 0, VGPU_SPREAD = 1 };

/* One container of a pending pod on this node that asks for vGPU resources.
 * Strings borrowed from the pod source until its next call. */
struct vgpu_pending {
    const char *pod_uid;
    const char *namespace;
    const char *pod_name;
    const char *container;
    int64_t created;        /* pod creation time: oldest first */
    uint64_t cores;         /* vcuda-core request, 0 = none */
    uint64_t memory;        /* vcuda-memory request in units, 0 = none */
    const char *chosen_gpu; /* a scheduler extender's GPU UUID for it, or NULL */
};

/* A pod as the watch cache sees it (vgpu_pods_ops.pod_state). */
enum vgpu_pod_state {
    VGPU_POD_UNKNOWN = 0, /* the cache cannot say (not in step) */
    VGPU_POD_PENDING,     /* Pending (its containers are being admitted or started) */
    VGPU_POD_RUNNING,     /* Running */
    VGPU_POD_DONE,        /* Succeeded or Failed, deleted, or not on this node */
};

/* The pods bound to this node, as the API server's watch cache sees them. */
struct vgpu_pods_ops {
    /* The pending containers asking for vGPU resources, oldest pod first.
     * 0, or -EAGAIN / -EHOSTUNREACH (the cache is not synced: the API server
     * is unreachable or refuses us) with why in err. */
    int (*pending)(void *self, const struct vgpu_pending **ret, size_t *n, char *err,
                   size_t errlen);
    /* Writes key=value on the pod (a PATCH, asynchronous; failures are
     * logged by the source: the checkpoint holds the assignment anyway). */
    void (*annotate)(void *self, const char *namespace, const char *pod_name, const char *key,
                     const char *value);
    /* Optional (NULL: the books rely on pod-resources alone). The pod with this uid. */
    enum vgpu_pod_state (*pod_state)(void *self, const char *pod_uid);
    /* Optional. The uid of namespace/name in the cache (borrowed until the cache changes), or
     * NULL. */
    const char *(*pod_uid)(void *self, const char *namespace, const char *pod_name);
    /* Optional. A first Allocate found no pending container for it: the cache may be behind
     * (a watch that lags or hangs without breaking): relist soon. */
    void (*doubt)(void *self);
};

struct vgpu_pods {
    const struct vgpu_pods_ops *ops;
    void *self;
};

struct vgpu_gpu_desc {
    const char *uuid;
    int minor;
    int numa_node;
    uint64_t memory_bytes;
    bool healthy;
};

struct vgpu_options {
    const char *state_dir;      /* <state>/vgpu/ holds the checkpoint and the dirs */
    const char *library;        /* host path of libvcuda.so (--vcuda-library) */
    const char *dev_root;       /* where the control nodes are looked for ("/dev") */
    uint64_t memory_unit_bytes; /* 256 MiB */
    enum vgpu_policy policy;
};

struct vgpu;

/* Loads the checkpoint if there is one (assignments of GPUs no longer here
 * are dropped with a log line). pods is borrowed. Returns 0, -EINVAL (bad
 * GPU description or options: message in err), -errno. */
int vgpu_new(const struct vgpu_gpu_desc *gpus, size_t n, const struct vgpu_options *opts,
             const struct vgpu_pods *pods, struct vgpu **ret, char *err, size_t errlen);
struct vgpu *vgpu_free(struct vgpu *v);

/* Has the journal's appends flushed through f (borrowed, freed after v stops
 * being used for Allocate, before vgpu_free; NULL: fdatasync before each
 * answer). */
struct fs_flusher;
void vgpu_set_flusher(struct vgpu *v, struct fs_flusher *f);

/* Spare container directories (vgpu.c "files"): an Allocate takes one
 * instead of creating its files; fill makes up to max of the missing ones
 * and returns how many are still missing, with *ret_err (optional) 0 or the
 * -errno that stopped it (-ENOSPC: the filesystem is down to the reserve
 * below, which spares never take). The hook (NULL: none) is called
 * when an Allocate took one, so the agent can fill again once Allocates
 * stop coming. */
#define VGPU_SPARES 128
#define VGPU_SPARE_INODES 4 /* <n>/, c/, c/config, c/region/ */
#define VGPU_SPARE_RESERVE_INODES 1024
#define VGPU_SPARE_RESERVE_BYTES (16ull << 20)
size_t vgpu_spare_fill(struct vgpu *v, size_t max, int *ret_err);
void vgpu_set_spare_hook(struct vgpu *v, void (*fn)(void *ctx), void *ctx);

/* Sets the pod source (borrowed; ops NULL: none, every Allocate is refused
 * saying acceld has no API server connection). Allocates are answered (ready) once the
 * source has listed the pods (pending() answers) and, with set_podres_done, the first
 * reconcile has run. */
void vgpu_set_pods(struct vgpu *v, const struct vgpu_pods *pods);

/* The start's reconcile is done (or cannot be): the provider is ready once the pod source is
 * too. Until then Allocates wait (provider -EAGAIN) and the resources are not registered. */
void vgpu_set_books_ready(struct vgpu *v, bool ready);

/* The provider of one resource over v (two providers share v). */
struct acceld_provider vgpu_provider(struct vgpu *v, enum vgpu_resource r);

/* The books follow the kubelet (vgpu-books.c; docs/vgpu.md, "Keeping the books").
 *
 * A container the kubelet has now, from the pod-resources API's List, with the vGPU device
 * IDs it holds of each resource summed by vgpu_ids_hash (0 and 0: none of them). */
struct vgpu_live {
    const char *ns, *pod, *container; /* borrowed */
    uint64_t ids[2];  /* the sum of vgpu_id_hash over the IDs of each resource it holds */
    size_t n_ids[2];  /* how many (0: none of that resource) */
    uint64_t gpus[2]; /* bit g: an ID of the resource names GPU g */
    bool other[2];    /* an ID of the resource names no GPU of ours */
};
/* The term one ID adds to a container's sum (order does not matter: IDs are summed). */
uint64_t vgpu_id_hash(const char *id);
void vgpu_live_init(struct vgpu_live *l, const char *ns, const char *pod, const char *container);
/* Counts one of the container's IDs of resource r (any string: IDs of other GPUs count too). */
void vgpu_live_add_id(const struct vgpu *v, struct vgpu_live *l, enum vgpu_resource r,
                      const char *id);
/* An Allocate that ends within this of a List may not be in it yet. */
#define VGPU_RECONCILE_GRACE_NS (2ull * 1000000000ull)

struct vgpu_reconcile_result {
    size_t freed;     /* shares no live container holds, of gone or terminal pods */
    size_t adopted;   /* live containers' shares the books had lost, taken back */
    size_t renamed;   /* shares found to be another container's than they were matched to */
    size_t orphans;   /* directories of no share removed */
    size_t unmatched; /* live containers holding vGPU IDs the books cannot place */
    size_t waiting;   /* shares of gone pods kept for now: answered less than the grace ago */
};

/* Settles the books against live (the kubelet's List, taken at now_ns, CLOCK_MONOTONIC):
 * a share whose IDs a live container holds is that container's (renamed if it was matched
 * to another; its directory stays where the container mounts it); a complete share no live
 * container holds, answered more than VGPU_RECONCILE_GRACE_NS before, is freed and its
 * directory removed; a share still waiting for its second Allocate is kept while its pod is
 * pending; a live container holding vGPU IDs the books do not know is adopted back from its
 * directory (the config acceld wrote names its GPU) or the GPU its IDs name (never from the
 * pod's annotation: its author can write it, issue 22 F3); directories no share
 * owns are removed. Every change is journaled. Returns 0 or -errno. */
int vgpu_reconcile(struct vgpu *v, const struct vgpu_live *live, size_t n, uint64_t now_ns,
                   struct vgpu_reconcile_result *ret);
/* Without pod-resources: frees the shares of pods the watch cache says are gone or terminal
 * (never a pending or running pod's), and half shares whose other call never came. Returns
 * the number freed. */
size_t vgpu_reconcile_pods(struct vgpu *v);
/* Whether the books hold a share of the pod with this uid. */
bool vgpu_has_pod(const struct vgpu *v, const char *pod_uid);
/* changed(ctx) after every change of the books (an Allocate, a free, a reconcile); doubt(ctx)
 * when a container's first Allocate found no pending container for it (the books may hold a
 * share the kubelet forgot and admits again: worth a reconcile). Either may be NULL. */
void vgpu_set_hooks(struct vgpu *v, void (*changed)(void *ctx), void (*doubt)(void *ctx),
                    void *ctx);
/* Whether the start found the record missing or a GPU over-committed: the books must be
 * settled with pod-resources before an Allocate is answered. */
bool vgpu_books_need_list(const struct vgpu *v);

/* Inspection (tests, logs). */
size_t vgpu_assignment_count(const struct vgpu *v);
/* Free cores and memory units on GPU idx. */
void vgpu_gpu_free_units(const struct vgpu *v, size_t idx, uint64_t *cores, uint64_t *memory);

/* One GPU as accelctl sees it: its units and how many are handed out. */
struct vgpu_gpu_info {
    const char *uuid; /* borrowed from v */
    bool healthy;
    uint64_t cores, memory_units;           /* all of it */
    uint64_t used_cores, used_memory_units; /* handed out (whole GPUs count in full) */
    uint64_t unit_bytes;                    /* bytes per memory unit */
};
size_t vgpu_gpu_count(const struct vgpu *v);
/* GPU i (vgpu_new's order); -ENOENT past the last. */
int vgpu_gpu_get(const struct vgpu *v, size_t i, struct vgpu_gpu_info *ret);

/* One assignment as the host-side check and accelctl see it; strings borrowed
 * from v until its next change. */
struct vgpu_assignment_info {
    const char *pod_uid, *ns, *pod, *container;
    const char *gpu_uuid;  /* its (first) GPU */
    uint64_t cores;        /* core limit, % of the GPU */
    uint64_t memory_bytes; /* memory limit */
    const char *region;    /* host dir of its usage region (the file is "usage" in it) */
    bool whole;            /* whole GPUs, no libvcuda limits */
    bool complete;         /* both resources' Allocates answered */
};
/* Assignment i (creation order); -ENOENT past the last. */
int vgpu_assignment_get(const struct vgpu *v, size_t i, struct vgpu_assignment_info *ret);
