/* vgpu-internal.h — the vGPU provider's state, shared by its two files: vgpu.c (devices,
 * matching an Allocate to a container, the GPU choice, the container's files, the
 * checkpoint) and vgpu-books.c (keeping the books in step with the kubelet: the reconcile
 * against pod-resources, the watch's frees, re-adoption from the container directories,
 * the kubelet's restarts). Nothing outside src/modes/vgpu*.c includes it.
 *
 * Threads: the event loop thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vgpu.h"

#define VGPU_PATH_MAX 1024
/* A unit ID is "<uuid>-<k>": the UUID leaves room for the unit number. */
#define VGPU_UUID_MAX (ACCELD_ID_MAX - 8)
#define VGPU_MAX_UNITS 999999 /* six digits after the dash */
#define VGPU_N_CONTROL 3      /* nvidiactl, nvidia-uvm, nvidia-uvm-tools */
/* Refused containers remembered (vgpu-books.c): a ring; one more pushes out the oldest. */
#define VGPU_REFUSALS 64

struct gpu {
    char uuid[VGPU_UUID_MAX];
    int minor;
    int numa;
    uint64_t mem_units;
    bool healthy;
    char node[32];
    size_t base[2]; /* index of its first unit in each resource's list */
    uint64_t used_cores, used_mem;
};

/* One container's share. */
struct assign {
    char pod_uid[VGPU_NAME_MAX];
    char ns[VGPU_NAME_MAX];
    char pod[VGPU_NAME_MAX];
    char container[VGPU_NAME_MAX];
    uint64_t amount[2]; /* cores, memory units requested */
    bool done[2];       /* this resource's Allocate answered */
    bool whole;         /* 100·k cores: k whole GPUs, no libvcuda */
    size_t gpus[VGPU_MAX_GPUS];
    size_t n_gpus;
    /* The IDs each resource's Allocate named, as vgpu_ids_hash sums them (0: not known, an
     * assignment from an older checkpoint): the kubelet's own record (pod-resources) names
     * the container holding these IDs, which is how the reconcile tells whose it is. */
    uint64_t ids[2];
    /* The kubelet session (struct vgpu.epoch) each resource's Allocate was answered in: a
     * kubelet restarted since has forgotten an admission it had not finished, and Allocates
     * that container's resources again (vgpu.c, matching). In memory only. */
    uint32_t epoch[2];
    uint64_t answered_ns; /* CLOCK_MONOTONIC of its last Allocate (0: restored) */
    /* a reconcile since the kubelet's last restart found no container holding its IDs: the
     * kubelet forgot it (it had not checkpointed the admission) and will Allocate again */
    bool unheld;
    bool told_held_twice; /* "has a share of its own too" logged once, not at every settling */
    /* a half share whose other call never came (or was taken for another container), its
     * primary answered (the mounts handed out): no candidate for any call, kept until a
     * settling finds no live container holding it (then freed) or one that does (its own) */
    bool abandoned;
    /* dir is not <state>/vgpu/<pod-uid>/<container>: the assignment was found to be another
     * container's than the one it was matched to (the reconcile), and kept its directory,
     * which that container mounts */
    bool own_dir;
    /* answer strings */
    char dir[VGPU_PATH_MAX];
    char config[VGPU_PATH_MAX + 16];
    char preload[VGPU_PATH_MAX + 16];
    char region[VGPU_PATH_MAX + 16];
    char visible[VGPU_MAX_GPUS * VGPU_UUID_MAX];
};

/* One resource's view: its own health flags and generation, so each of the
 * two endpoints learns of a health change. */
struct view {
    struct vgpu *v;
    enum vgpu_resource r;
    size_t count;
    bool healthy[VGPU_MAX_GPUS];
    uint64_t generation;
    uint32_t kubelet_restarts; /* seen by this endpoint (provider op kubelet_restarted) */
};

/* A container whose Allocate acceld refused: the kubelet fails its pod for good (no retry),
 * but the pod stays Pending in the watch cache until its Failed status arrives, and must not
 * be matched to the next identical pod's Allocate meanwhile. */
struct refusal {
    char pod_uid[VGPU_NAME_MAX];
    char container[VGPU_NAME_MAX];
};

struct vgpu {
    struct gpu gpus[VGPU_MAX_GPUS];
    size_t n;
    struct view views[2];
    char (*ids[2])[ACCELD_ID_MAX];
    uint16_t *id_gpu[2];  /* unit index -> GPU index */
    uint64_t *id_hash[2]; /* unit index -> its term of vgpu_ids_hash */

    char state_dir[VGPU_PATH_MAX];
    char checkpoint[VGPU_PATH_MAX + 32];
    char journal_path[VGPU_PATH_MAX + 32];
    int journal_fd;             /* checkpoint.journal, O_APPEND; -1 before vgpu_new opens it */
    size_t journal_records;     /* lines in it since the last snapshot */
    struct fs_flusher *flusher; /* borrowed; NULL: fdatasync in place */
    char preload[VGPU_PATH_MAX + 16]; /* <state>/vgpu/ld.so.preload, shared by all */
    char spare_dir[VGPU_PATH_MAX + 32];
    unsigned *spares; /* names of the ready spares (a stack) */
    size_t n_spares;
    unsigned *shells; /* names of spares whose container directory was taken */
    size_t n_shells;
    unsigned spare_seq;
    void (*spare_hook)(void *ctx);
    void *spare_ctx;
    bool unbounded_said;            /* the warning that region dirs cannot be bounded, given once */
    void (*change_hook)(void *ctx); /* the books changed (vgpu_set_hooks) */
    void (*doubt_hook)(void *ctx);  /* an Allocate found no pod for it */
    void *change_ctx;
    char library[VGPU_PATH_MAX];
    uint64_t unit_bytes;
    enum vgpu_policy policy;
    char common_paths[VGPU_N_CONTROL][32];
    size_t n_common;
    struct vgpu_pods pods;

    struct assign **as; /* in creation order */
    size_t n_as, cap_as;

    uint32_t epoch;   /* the kubelet's session: 1, bumped by each restart seen */
    bool books_ready; /* the start's reconcile has run (vgpu_set_books_ready) */
    struct refusal refused[VGPU_REFUSALS];
    size_t n_refused, next_refused;
    /* the start found the record missing or a GPU over-committed: the first reconcile says
     * what it made of it */
    bool record_lost;
    bool overcommit_reported;
    bool dirs_swept; /* a reconcile looked for directories no share owns */

    /* Allocate's answer (borrowed by the transport until the next call) */
    struct acceld_kv env;
    struct acceld_mount mounts[4];
    struct acceld_devnode nodes[VGPU_MAX_GPUS + VGPU_N_CONTROL];
};

extern const char *const vgpu_resource_label[2];

/* vgpu.c, for vgpu-books.c */
int vgpu_find_gpu(const struct vgpu *v, const char *uuid, size_t len);
bool vgpu_safe_component(const char *s);
void vgpu_recount(struct vgpu *v);
bool vgpu_complete(const struct assign *as);
int vgpu_assign_paths(const struct vgpu *v, struct assign *as);
int vgpu_reserve_slot(struct vgpu *v);
/* The index of the assignment of pod_uid's container, or -1. */
ssize_t vgpu_find_assign(const struct vgpu *v, const char *pod_uid, const char *container);
int vgpu_journal_set(struct vgpu *v, const struct assign *as);
int vgpu_journal_drop(struct vgpu *v, const struct assign *as);
int vgpu_checkpoint_write(struct vgpu *v);
/* Rewrites as's config and makes its region dir (as at every start). 0 or -errno. */
int vgpu_files_rewrite(struct vgpu *v, const struct assign *as);
bool vgpu_abandon(struct vgpu *v, struct assign *as, const char *what);
void vgpu_remove_files(const struct assign *as);
/* Removes assignment i from the books (journaled; its files removed when remove_files). */
void vgpu_drop(struct vgpu *v, size_t i, bool remove_files);
void vgpu_changed(struct vgpu *v);

/* vgpu-books.c, for vgpu.c */
bool vgpu_refused(const struct vgpu *v, const char *pod_uid, const char *container);
void vgpu_refusal_add(struct vgpu *v, const char *pod_uid, const char *container);
/* Forgets refusals of containers no longer in the pending list. */
void vgpu_refusals_prune(struct vgpu *v, const struct vgpu_pending *list, size_t n);
/* After the checkpoint is loaded: says loudly what cannot be right (a GPU over-committed; no
 * record while container directories exist) for the first reconcile to settle. */
void vgpu_books_check_load(struct vgpu *v, bool had_record);
