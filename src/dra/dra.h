/* dra.h — the DRA kubelet plugin (resource.k8s.io/v1, kubelet dra v1 and
 * v1beta1): the ResourceClaim model and its JSON parser (claim.c), the
 * claim-source seam the API client will fill (claim.c has a source backed by
 * JSON files), NodePrepare/NodeUnprepare with CDI specs, libvcuda configs and
 * a checkpoint (prepare.c), the registration + DRA gRPC service on the event
 * loop (dra-plugin.c) and the ResourceSlice renderer (slice.c). See docs/dra.md.
 *
 * Threads: everything runs on the event loop's thread (the claim source is
 * called from it too; a source that goes to the network answers from a cache
 * or fails fast). Errors: 0 or -errno, with a message in err where given. */
#pragma once

#include "evloop.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ----------------------------------------------------------------- claims */

/* One entry of status.allocation.devices.results. Strings owned by the claim. */
struct dra_result {
    char *request;
    char *driver;
    char *pool;
    char *device;
    char *share_id;  /* NULL when not a shared allocation */
    bool has_memory; /* consumedCapacity.memory given */
    uint64_t memory; /* bytes */
    bool has_cores;  /* consumedCapacity.cores given */
    uint64_t cores;  /* percent of the GPU's compute, 1..100 */
};

/* A pod the claim is reserved for (status.reservedFor, resource "pods"): the pods whose
 * containers use it, which the host-side check maps processes to through their cgroups. */
struct dra_consumer {
    char *name;
    char *uid;
};

struct dra_claim {
    char *namespace_;
    char *name;
    char *uid;
    struct dra_result *results;
    size_t n_results;
    struct dra_consumer *pods; /* status.reservedFor's pods; entries of other kinds skipped */
    size_t n_pods;
};

void dra_claim_free(struct dra_claim *c); /* NULL ok */

/* Parses one ResourceClaim as `kubectl get resourceclaim -o json` prints it
 * (metadata.{namespace,name,uid}, status.allocation.devices.results[],
 * status.reservedFor[] of resource "pods" — at most 256, names and uids checked).
 * A claim without status.allocation is an error (not allocated yet).
 * Returns 0, -EINVAL (message in err) or -ENOMEM. */
int dra_claim_parse(const char *json, size_t len, struct dra_claim **ret, char *err, size_t errlen);

/* A Kubernetes resource.Quantity as an integer: "4Gi", "300M", "30", "1k".
 * Fractions and milli-units are refused (memory and percent are whole
 * numbers here). Returns 0 or -EINVAL / -ERANGE. */
int dra_quantity_parse(const char *s, uint64_t *ret);

/* Where ResourceClaims come from. get() fills *ret (owned by the caller) for
 * the claim namespace/name and must check that its uid is uid; on failure it
 * returns -errno with a message in err (e.g. API server unreachable). */
struct dra_claim_source {
    int (*get)(void *ctx, const char *namespace_, const char *name, const char *uid,
               struct dra_claim **ret, char *err, size_t errlen);
    void *ctx;
};

/* An asynchronous claim reader (the API server): start() begins reading
 * namespace/name and calls done exactly once, later, from the loop: with the
 * claim (ownership passes to done; its uid checked against uid) or with
 * claim NULL and -errno plus a message. cancel() stops a read that has not
 * called done yet (done is then never called). Strings are copied. */
typedef void (*dra_fetch_done_fn)(void *user_data, struct dra_claim *claim, int error,
                                  const char *message);
struct dra_claim_fetcher {
    int (*start)(void *ctx, const char *namespace_, const char *name, const char *uid,
                 dra_fetch_done_fn done, void *user_data, void **ret_handle);
    void (*cancel)(void *ctx, void *handle);
    void *ctx;
};

/* A source reading <dir>/<namespace>_<name>.json (ResourceClaim JSON). The
 * test stand-in for the API client; dir is borrowed. */
struct dra_claim_source dra_claim_source_dir(const char *dir);

/* ---------------------------------------------------------------- devices */

/* A GPU instance profile of a MIG-capable board (dra.mig, docs/mig.md): a
 * partition device is published for each of its placements. */
#define DRA_MIG_MAX_PLACEMENTS 8
struct dra_mig_profile {
    unsigned id;        /* NVML's profile ID (create takes it) */
    char name[32];      /* "1g.10gb", "1g.10gb+me" */
    unsigned slices;    /* compute slices */
    unsigned instances; /* at most this many at once (NVML's instanceCount) */
    uint64_t memory;    /* bytes */
    unsigned sms;       /* multiprocessors */
    unsigned n_placements;
    struct {
        unsigned start, size; /* memory slices */
    } placements[DRA_MIG_MAX_PLACEMENTS];
};

/* One GPU the driver publishes: the device name in the slice and what a
 * container needs to use it. Borrowed strings. */
struct dra_gpu {
    const char *name;     /* DNS label in the slice, e.g. gpu-0 */
    const char *uuid;     /* GPU-... */
    const char *dev_node; /* /dev/nvidia0 */
    uint64_t memory;      /* bytes */
    int minor;
    /* inventory facts for the slice */
    const char *product;
    const char *architecture;
    int cc_major, cc_minor;
    const char *driver_version;
    int numa_node; /* -1 unknown */
    const char *pci_bus_id;
    bool mig_capable;
    bool shared; /* vGPU share: consumable capacity, libvcuda enforces it */
    bool mps;    /* MPS share: consumable capacity, a per-claim MPS daemon enforces it */
    bool healthy;
    bool fatal; /* unhealthy with a fatal XID: NoExecute */
    /* the effect of an unhealthy device's taint (dra.taintEffect,
     * dra.fatalTaintEffect): NULL the default (NoSchedule; NoExecute when
     * fatal), "" no taint */
    const char *taint_effect;
    const char *fatal_taint_effect;
    /* dra.mig: the GPU (in MIG mode) is published as partitions, one device
     * per placement of each profile, consuming its shared counters
     * (KEP-4815), instead of whole; n_mig_profiles 0: whole */
    const struct dra_mig_profile *mig_profiles;
    size_t n_mig_profiles;
    bool unpublished; /* in no slice (its partitions refused by the API server) */
};

/* ---------------------------------------------------------- MIG partitions */

/* A partition's device name: "<gpu>-mig-<profile, '.' and '+' as '-'>-<start>"
 * (gpu-0-mig-1g-10gb-3). 0 or -ENAMETOOLONG. */
int dra_partition_name(const struct dra_gpu *g, const struct dra_mig_profile *p, unsigned start,
                       char *buf, size_t len);

/* The partition device named name among gpus: its GPU, profile and placement.
 * 0 or -ENOENT. */
int dra_partition_find(const struct dra_gpu *gpus, size_t n, const char *name,
                       const struct dra_gpu **ret_gpu, const struct dra_mig_profile **ret_profile,
                       unsigned *ret_start, unsigned *ret_size);

/* One rendered ResourceSlice of the pool. */
struct dra_slice_out {
    char name[256];
    char *json;      /* owned */
    bool partitions; /* it has sharedCounters or consumesCounters */
};

/* Renders the node's pool: devices (whole GPUs and partitions) in slices of
 * at most 128 (64 as soon as one device has taints or consumes counters),
 * the partitioned GPUs' counter sets in slices of their own (a v1 slice has
 * devices or sharedCounters, at most 8 sets), every slice with pool
 * {name = node, generation, resourceSliceCount = the number of slices}. Names:
 * "<node>-<driver>" (the first devices), "<node>-<driver>-<k>" (more),
 * "<node>-<driver>-counters[-<k>]". No GPU: no slice. Returns 0 or -errno;
 * *ret owned (dra_pool_free). */
int dra_pool_render(const char *driver_name, const char *node_name, int64_t generation,
                    const struct dra_gpu *gpus, size_t n_gpus, struct dra_slice_out **ret,
                    size_t *ret_n);
void dra_pool_free(struct dra_slice_out *s, size_t n);

/* True when the API server kept what a partitioned slice needs: the slice it
 * answered (JSON) still has the sent one's sharedCounters and every
 * consumesCounters (an API server without DRAPartitionableDevices drops them
 * on write). */
bool dra_slice_kept_partitions(const char *sent, const char *answered, size_t answered_len);

/* The effect of g's taint: NULL when it has none (healthy, or effect None). */
const char *dra_gpu_taint_effect(const struct dra_gpu *g);

/* ---------------------------------------------------------------- prepare */

/* The MPS control daemons of MPS claims (one per claim, its defaults the
 * claim's caps: docs/dra.md, "MPS shares"). start() starts the claim's daemon
 * for the GPUs uuids (comma-separated, n of them) with default active thread
 * percentage pct and default pinned device memory limit mem_bytes per GPU (0:
 * none), or finds it started; it fills the daemon's host pipe directory and
 * the claim's own /dev/shm (the daemon's; the host's "/dev/shm" where acceld
 * may not mount one) (len bytes each). The daemon comes up asynchronously; ready()
 * says whether it answers with its defaults (1), not yet (0, why says what
 * happened last, may be ""). stop() stops it and removes its directories
 * (unknown uid: nothing). Called on the loop's thread. */
struct dra_mps_ops {
    int (*start)(void *ctx, const char *uid, const char *uuids, unsigned n, unsigned pct,
                 uint64_t mem_bytes, char *ret_pipe, char *ret_shm, size_t len, char *err,
                 size_t errlen);
    int (*ready)(void *ctx, const char *uid, char *why, size_t whylen);
    void (*stop)(void *ctx, const char *uid);
    void *ctx;
};

/* A MIG device prepare made for a partition. */
struct dra_mig_made {
    char uuid[96];
    unsigned gi, ci;
    char caps[2][48]; /* its /dev/nvidia-caps nodes (0 or 2) */
    size_t n_caps;
};

/* MIG instances for partition devices (dra.mig). create() makes the GPU
 * instance of profile_id at placement start (size memory slices) on the GPU
 * gpu_uuid and the compute instance filling it, all or nothing; destroy()
 * destroys GPU instance gi and its compute instances (-ENOENT: already
 * gone). 0 or -errno with a message in err. Called on the loop's thread. */
struct dra_mig_ops {
    int (*create)(void *ctx, const char *gpu_uuid, unsigned profile_id, unsigned start,
                  unsigned size, struct dra_mig_made *ret, char *err, size_t errlen);
    int (*destroy)(void *ctx, const char *gpu_uuid, unsigned gi, char *err, size_t errlen);
    void *ctx;
};

struct dra_prepare_config {
    const char *driver_name;          /* gpu.accel.dev */
    const char *pool_name;            /* the node name */
    const char *cdi_dir;              /* /var/run/cdi */
    const char *state_dir;            /* checkpoint + per-claim configs and regions */
    const char *vcuda_library;        /* host path of libvcuda.so */
    const char *const *control_nodes; /* /dev/nvidiactl, ... in every claim's spec */
    size_t n_control_nodes;
    const struct dra_gpu *gpus;
    size_t n_gpus;
    struct dra_mps_ops mps; /* start NULL: MPS claims are refused */
    struct dra_mig_ops mig; /* create NULL: partition claims are refused */
};

/* Container path of an MPS claim's daemon's pipe directory: the device-plugin
 * MPS mode's (src/modes/replicas.h); its log directory stays acceld's. */
#define DRA_CONTAINER_MPS_PIPE "/run/accel-mps/pipe"

/* Container paths of a share's files: the vGPU mode's (src/modes/vgpu.h),
 * so a container looks the same whichever mode served it. */
#define DRA_CONTAINER_VCUDA "/usr/local/vcuda/libvcuda.so"
#define DRA_CONTAINER_CONFIG "/etc/vcuda/config"
#define DRA_CONTAINER_PRELOAD "/etc/ld.so.preload"
#define DRA_CONTAINER_REGION_DIR "/var/run/vcuda"

/* One device of a prepared claim (the kubelet's Device message). */
struct dra_prepared_device {
    char **requests;
    size_t n_requests;
    char *pool;
    char *device;
    char *cdi_id;
    /* a MIG partition: the instance prepare created (checkpointed, so that
     * unprepare destroys it after a restart) */
    char *mig_gpu; /* the GPU's UUID; NULL: not a partition */
    unsigned mig_gi, mig_ci;
    char *mig_uuid; /* the MIG device's */
};

struct dra_prepared {
    char *uid;
    struct dra_prepared_device *devices;
    size_t n_devices;
    /* a libvcuda share: what the host-side check compares its pods' processes with
     * (checkpointed; a checkpoint written before issue 22 has none: share_n 0) */
    bool share;
    char *share_ns;            /* the claim's namespace (its pods') */
    char *share_name;          /* the claim's name */
    char *share_uuids;         /* its GPUs, comma-separated */
    unsigned share_n;          /* how many */
    unsigned share_cores;      /* % per GPU, 0: none consumed */
    uint64_t share_memory;     /* bytes per GPU, 0: none consumed */
    struct dra_consumer *pods; /* the pods it was reserved for at prepare */
    size_t n_pods;
    /* an MPS claim: its daemon's GPUs and caps (checkpointed, so that a
     * restarted acceld starts the daemon again) */
    bool mps;
    char *mps_uuids; /* comma-separated */
    unsigned mps_n;
    unsigned mps_pct;
    uint64_t mps_mem; /* bytes per GPU, 0: none */
};

struct dra_state;

/* Loads the checkpoint (<state_dir>/dra-checkpoint.json) if any. cfg and what
 * it points to are borrowed and must outlive the state. A corrupt checkpoint
 * is an error (-EINVAL, message in err): nothing is guessed. Then removes what
 * no prepared claim owns: the temporary files of interrupted writes, and the
 * CDI specs and claims/<uid>/ directories of claims the checkpoint does not
 * name (prepare records a claim before it writes a file of it). */
int dra_state_new(const struct dra_prepare_config *cfg, struct dra_state **ret, char *err,
                  size_t errlen);
struct dra_state *dra_state_free(struct dra_state *st);

/* Prepares one claim: an already prepared uid whose files are all there gets
 * its checkpointed answer again; otherwise the claim is read from src, its
 * results for this driver resolved to GPUs, the checkpoint written, then the
 * per-share files and the claim's CDI spec. On failure nothing of the claim
 * is left on disk and -errno is returned with the message for the claim's
 * entry in err.
 * *ret is borrowed from the state (valid until the claim is unprepared). */
int dra_prepare(struct dra_state *st, const struct dra_claim_source *src, const char *namespace_,
                const char *name, const char *uid, const struct dra_prepared **ret, char *err,
                size_t errlen);

/* Undoes dra_prepare for uid: removes the CDI spec, stops an MPS claim's
 * daemon, removes the claim's files and then its checkpoint entry. An unknown
 * uid succeeds, having removed any file named after it. */
int dra_unprepare(struct dra_state *st, const char *uid, char *err, size_t errlen);

/* Number of prepared claims; the i-th (borrowed). */
size_t dra_state_count(const struct dra_state *st);
/* The prepared claim with this uid, or NULL (borrowed). */
const struct dra_prepared *dra_state_find(const struct dra_state *st, const char *uid);
const struct dra_prepared *dra_state_get(const struct dra_state *st, size_t i);
/* Whether uid is prepared with all its files there (dra_prepare answers it from the
 * checkpoint without reading the claim). */
bool dra_state_prepared(const struct dra_state *st, const char *uid);

/* The CDI kind of claim devices: "<driver_name>/claim". */
int dra_cdi_kind(const char *driver_name, char *buf, size_t len);

/* ----------------------------------------------------------------- plugin */

struct dra_plugin_config {
    const char *driver_name;          /* gpu.accel.dev */
    const char *registry_dir;         /* /var/lib/kubelet/plugins_registry */
    const char *plugin_dir;           /* /var/lib/kubelet/plugins/<driver name> */
    struct dra_state *state;          /* borrowed */
    struct dra_claim_source source;   /* used when fetcher.start is NULL */
    struct dra_claim_fetcher fetcher; /* the API server: claims read asynchronously */
    /* after every prepare or unprepare that changed the state (optional) */
    void (*on_change)(void *user_data);
    void *on_change_data;
    /* SLIs (optional, with on_change_data): each claim of every
     * NodePrepareResources reply (ok: prepared, not an error entry) and the
     * time from the call's arrival to its reply; each NotifyRegistrationStatus */
    void (*on_prepared)(void *user_data, bool ok, uint64_t duration_ns);
    void (*on_registration)(void *user_data, bool registered);
    /* the devices whose health the resource-health stream reports (borrowed;
     * n_gpus 0: the service answers with an empty list) and their pool */
    const struct dra_gpu *gpus;
    size_t n_gpus;
    const char *pool_name;
    /* MPS claims (optional: ready NULL, every prepared claim is usable at
     * once): a prepare reply waits until mps.ready() says each prepared claim
     * is usable, at most mps_ready_wait_ns (0: 10 s); a claim still not usable
     * then gets an error (and is unprepared if this call prepared it). */
    struct dra_mps_ops mps;
    uint64_t mps_ready_wait_ns;
    /* true: the registration socket is served only once dra_plugin_register is called
     * (acceld: after its first ResourceSlice is published, so that the kubelet never
     * registers a driver that cannot prepare yet); false: at once */
    bool defer_registration;
};

struct dra_plugin;

/* Serves the DRA endpoint (<plugin_dir>/dra.sock) and the registration
 * socket (<registry_dir>/<driver_name>-reg.sock) on loop, and watches the
 * registry dir: when the registration socket disappears (the kubelet or an
 * admin wiped the dir) it is created again, which the kubelet's plugin
 * watcher sees as a new plugin (a deletion while the path still names the
 * socket this process bound is not: that was a stale file replaced at
 * start). A restarted kubelet finds the socket that is still there and
 * registers it again by itself. */
int dra_plugin_new(struct ev_loop *loop, const struct dra_plugin_config *cfg,
                   struct dra_plugin **ret);
struct dra_plugin *dra_plugin_free(struct dra_plugin *p);
/* Serves the registration socket (defer_registration); once is enough, later calls do
 * nothing. 0 or -errno. */
int dra_plugin_register(struct dra_plugin *p);
/* Whether the registration socket is served (readiness for accelctl and the SLIs). */
bool dra_plugin_registration_served(const struct dra_plugin *p);
/* The devices' health changed (cfg.gpus[i].healthy): every open
 * NodeWatchResources stream (dra-health v1alpha1) gets the full list again. */
void dra_plugin_health_changed(struct dra_plugin *p);
/* An MPS claim's daemon came up (or went down): replies waiting for it are
 * checked again. */
void dra_plugin_claims_changed(struct dra_plugin *p);
/* Open NodeWatchResources streams (tests, accelctl). */
size_t dra_plugin_health_watchers(const struct dra_plugin *p);
/* Registration results received from the kubelet (NotifyRegistrationStatus). */
bool dra_plugin_registered(const struct dra_plugin *p);

/* ----------------------------------------------------------------- slices */

/* Renders the node's ResourceSlice (resource.k8s.io/v1) for gpus as JSON:
 * metadata.name/generateName left to the caller's choice of name, spec.driver,
 * spec.nodeName, spec.pool {name = node, generation, resourceSliceCount 1},
 * one device per GPU with attributes, capacity, and for shared GPUs
 * allowMultipleAllocations + requestPolicy; taints on unhealthy GPUs.
 * *ret_json owned by the caller (free). */
int dra_slice_render(const char *driver_name, const char *node_name, const char *slice_name,
                     int64_t generation, const struct dra_gpu *gpus, size_t n_gpus,
                     char **ret_json);

/* What the API server's ResourceSliceList (body) means for the node's slice
 * `name` of driver on node: items of another driver or node are ignored;
 * ours (the first item named `name`, kept only when keep_ours) is described
 * by its pool generation, resourceVersion and canonical spec; every other
 * item of this node and driver is stale (to delete). */
struct dra_slice_list {
    char **stale; /* names */
    size_t n_stale;
    bool have_ours;
    int64_t ours_generation; /* >= 0 */
    char *ours_rv;
    char *ours_spec;        /* dra_slice_spec_canonical's form */
    int64_t max_generation; /* the highest pool generation among them (0 if none) */
    /* every slice of this node and driver, in list order (a pool of several
     * slices: dra_pool_render) */
    struct dra_slice_item {
        char *name;
        int64_t generation; /* >= 0 */
        char *rv;           /* "" when the server gave none */
        char *spec;         /* dra_slice_spec_canonical's form */
    } * items;
    size_t n_items;
    char *list_rv; /* the list's metadata.resourceVersion (a watch starts there); NULL
                      when it has none */
};

/* Returns 0, -EINVAL (not a list: message in err) or -ENOMEM. On success
 * the caller clears *ret with dra_slice_list_clear. */
int dra_slice_list_parse(const char *body, size_t len, const char *driver, const char *node,
                         const char *name, bool keep_ours, struct dra_slice_list *ret, char *err,
                         size_t errlen);
void dra_slice_list_clear(struct dra_slice_list *l);

/* The spec of a ResourceSlice (JSON text) as compact, key-sorted JSON
 * without the fields the server fills in (a taint's timeAdded): two slices
 * need no update when these are equal. *ret owned (free). -EINVAL: no spec. */
int dra_slice_spec_canonical(const char *slice_json, size_t len, char **ret);
