/* vgpu.c — the vGPU provider: unit devices per GPU, matching an Allocate to
 * a pending container, the GPU choice, the per-container files libvcuda
 * reads, and the checkpoint; see vgpu.h. */
#include "vgpu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "flush.h"
#include "vgpu-internal.h"
#include "fs.h"
#include "log.h"
#include "tenant-fs.h"
#include "util.h"

#define CHECKPOINT_VERSION 1
#define CHECKPOINT_MAX (16u << 20)

static const char *const control_nodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
_Static_assert(ARRAY_SIZE(control_nodes) == VGPU_N_CONTROL, "control nodes");

const char *const vgpu_resource_label[2] = {"vcuda-core", "vcuda-memory"};

/* ------------------------------------------------------------ helpers */

/* A pod UID or container name used as a path component: no '/', no leading
 * '.', only the characters Kubernetes allows in either. */
bool vgpu_safe_component(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len >= VGPU_NAME_MAX || s[0] == '.')
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '.' || *p == '_'))
            return false;
    return true;
}

int vgpu_find_gpu(const struct vgpu *v, const char *uuid, size_t len)
{
    for (size_t i = 0; i < v->n; i++)
        if (strlen(v->gpus[i].uuid) == len && strncmp(v->gpus[i].uuid, uuid, len) == 0)
            return (int)i;
    return -1;
}

static uint64_t gpu_units(const struct gpu *g, enum vgpu_resource r)
{
    return r == VGPU_CORES ? VGPU_CORES_PER_GPU : g->mem_units;
}

void vgpu_recount(struct vgpu *v)
{
    for (size_t i = 0; i < v->n; i++)
        v->gpus[i].used_cores = v->gpus[i].used_mem = 0;
    for (size_t a = 0; a < v->n_as; a++) {
        const struct assign *as = v->as[a];
        for (size_t k = 0; k < as->n_gpus; k++) {
            struct gpu *g = &v->gpus[as->gpus[k]];
            g->used_cores += as->whole ? VGPU_CORES_PER_GPU : as->amount[VGPU_CORES];
            g->used_mem += as->whole ? g->mem_units : as->amount[VGPU_MEMORY];
        }
    }
}

static void free_units(const struct vgpu *v, size_t i, uint64_t *cores, uint64_t *mem)
{
    const struct gpu *g = &v->gpus[i];
    *cores = g->used_cores >= VGPU_CORES_PER_GPU ? 0 : VGPU_CORES_PER_GPU - g->used_cores;
    *mem = g->used_mem >= g->mem_units ? 0 : g->mem_units - g->used_mem;
}

void vgpu_gpu_free_units(const struct vgpu *v, size_t idx, uint64_t *cores, uint64_t *memory)
{
    free_units(v, idx, cores, memory);
}

size_t vgpu_gpu_count(const struct vgpu *v)
{
    return v ? v->n : 0;
}

int vgpu_gpu_get(const struct vgpu *v, size_t i, struct vgpu_gpu_info *ret)
{
    if (!v || i >= v->n)
        return -ENOENT;
    const struct gpu *g = &v->gpus[i];
    *ret = (struct vgpu_gpu_info){g->uuid,       g->healthy,  VGPU_CORES_PER_GPU, g->mem_units,
                                  g->used_cores, g->used_mem, v->unit_bytes};
    return 0;
}

size_t vgpu_assignment_count(const struct vgpu *v)
{
    return v->n_as;
}

/* Room for one more assignment. 0 or -ENOMEM. */
int vgpu_reserve_slot(struct vgpu *v)
{
    if (v->n_as < v->cap_as)
        return 0;
    size_t cap = v->cap_as ? v->cap_as * 2 : 16;
    struct assign **na = realloc(v->as, cap * sizeof(*na));
    if (!na)
        return -ENOMEM;
    v->as = na;
    v->cap_as = cap;
    return 0;
}

/* ------------------------------------------------------------ checkpoint */

/* The record of assignments is a snapshot (checkpoint.json: every assignment,
 * replaced atomically with fsync) plus a journal (checkpoint.journal: one JSON
 * line per change since the snapshot, {"set": assignment} or {"drop": {podUID,
 * container}}). An Allocate appends one line, so its cost does not grow with
 * the number of assignments, and its answer goes out once the line is in the
 * page cache: acceld killed at any point loses nothing. The line reaches the
 * disk through v->flusher (an fdatasync submitted without blocking the loop,
 * src/common/flush.h) within about one disk flush of the answer; see
 * docs/vgpu.md "Restart safety" for what a power loss in that window means.
 * Loading applies the journal over the snapshot; every record states the
 * whole outcome (set replaces, drop removes), so replaying lines that a
 * snapshot already holds changes nothing, and a crash between writing a
 * snapshot and emptying the journal is harmless. */

static json_t *assign_json(const struct vgpu *v, const struct assign *as)
{
    json_t *gpus = json_array();
    for (size_t k = 0; k < as->n_gpus; k++)
        json_array_append_new(gpus, json_string(v->gpus[as->gpus[k]].uuid));
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:b,s:b,s:b,s:o}", "podUID", as->pod_uid,
                          "namespace", as->ns, "pod", as->pod, "container", as->container, "cores",
                          (json_int_t)as->amount[VGPU_CORES], "memory",
                          (json_int_t)as->amount[VGPU_MEMORY], "coresDone", as->done[VGPU_CORES],
                          "memoryDone", as->done[VGPU_MEMORY], "whole", as->whole, "gpus", gpus);
    /* the IDs' sums as hex (JSON integers are signed 64-bit), and a directory kept by a
     * container that turned out to be another's than the one matched (vgpu-books.c) */
    static const char *const ids_key[2] = {"coreIds", "memoryIds"};
    for (int r = 0; o && r < 2; r++) {
        char hex[20];
        snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)as->ids[r]);
        if (as->ids[r])
            json_object_set_new(o, ids_key[r], json_string(hex));
    }
    if (o && as->own_dir)
        json_object_set_new(o, "dir", json_string(as->dir));
    return o;
}

/* Writes a snapshot of every assignment and empties the journal. */
int vgpu_checkpoint_write(struct vgpu *v)
{
    json_t *root = json_object(), *arr = json_array();
    if (!root || !arr) {
        json_decref(root);
        json_decref(arr);
        return -ENOMEM;
    }
    json_object_set_new(root, "version", json_integer(CHECKPOINT_VERSION));
    json_object_set_new(root, "assignments", arr);
    for (size_t a = 0; a < v->n_as; a++)
        json_array_append_new(arr, assign_json(v, v->as[a]));
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text)
        return -ENOMEM;
    int r = fs_write_atomic(v->checkpoint, text, strlen(text), 0600);
    free(text);
    if (r < 0) {
        log_error("cannot write the vGPU checkpoint %s: %s", v->checkpoint, strerror(-r));
        return r;
    }
    /* the snapshot holds everything: the journal's lines are redundant now
     * (replaying them would change nothing, so no fsync is needed here) */
    if (v->journal_fd >= 0 && ftruncate(v->journal_fd, 0) < 0)
        log_warn("cannot empty the vGPU journal %s: %s", v->journal_path, strerror(errno));
    else
        v->journal_records = 0;
    return 0;
}

/* Appends one record to the journal and has it flushed. A journal grown past
 * a few times the assignments is folded into a new snapshot first (rare: one
 * snapshot per hundreds of Allocates). */
static int journal_append(struct vgpu *v, const char *op, json_t *body)
{
    if (v->journal_fd < 0 || v->journal_records > 4 * v->n_as + 256) {
        json_decref(body);
        return vgpu_checkpoint_write(v);
    }
    json_t *rec = json_pack("{s:o}", op, body);
    char *line = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    if (!line)
        return -ENOMEM;
    size_t n = strlen(line);
    line[n] = '\n'; /* replaces the NUL: the line goes out in one write */
    off_t before = lseek(v->journal_fd, 0, SEEK_END);
    int r = fs_write_full(v->journal_fd, line, n + 1);
    free(line);
    /* a line cut by a failed write would glue itself to the next one */
    if (r < 0 && before >= 0 && ftruncate(v->journal_fd, before) < 0)
        log_warn("cannot cut the vGPU journal back after a failed write: %s", strerror(errno));
    if (r == 0)
        r = fs_flusher_sync(v->flusher, v->journal_fd);
    if (r < 0) {
        log_error("cannot append to the vGPU journal %s: %s", v->journal_path, strerror(-r));
        return r;
    }
    v->journal_records++;
    return 0;
}

int vgpu_journal_set(struct vgpu *v, const struct assign *as)
{
    json_t *o = assign_json(v, as);
    return o ? journal_append(v, "set", o) : -ENOMEM;
}

int vgpu_journal_drop(struct vgpu *v, const struct assign *as)
{
    json_t *o = json_pack("{s:s,s:s}", "podUID", as->pod_uid, "container", as->container);
    return o ? journal_append(v, "drop", o) : -ENOMEM;
}

void vgpu_set_flusher(struct vgpu *v, struct fs_flusher *f)
{
    v->flusher = f;
}

int vgpu_assign_paths(const struct vgpu *v, struct assign *as)
{
    int n = as->own_dir ? (int)strlen(as->dir)
                        : snprintf(as->dir, sizeof(as->dir), "%s/%s/%s", v->state_dir, as->pod_uid,
                                   as->container);
    if (n < 0 || (size_t)n >= sizeof(as->dir))
        return -ENAMETOOLONG;
    snprintf(as->config, sizeof(as->config), "%s/config", as->dir);
    snprintf(as->preload, sizeof(as->preload), "%s", v->preload);
    snprintf(as->region, sizeof(as->region), "%s/region", as->dir);
    size_t at = 0;
    as->visible[0] = '\0';
    for (size_t k = 0; k < as->n_gpus; k++)
        at += (size_t)snprintf(as->visible + at, sizeof(as->visible) - at, "%s%s", k ? "," : "",
                               v->gpus[as->gpus[k]].uuid);
    return 0;
}

/* A new share's directory: <state>/vgpu/<pod uid>/<container>, unless a share matched to that
 * container and since renamed to the one holding its IDs kept that path (that container mounts
 * it): then <container>_<n>, a name no container has (container names are DNS labels: no
 * '_'), recorded as the share's own (checkpoint "dir"). */
static int claim_dir(const struct vgpu *v, struct assign *as)
{
    for (unsigned k = 0; k < 64; k++) {
        int n = k ? snprintf(as->dir, sizeof(as->dir), "%s/%s/%s_%u", v->state_dir, as->pod_uid,
                             as->container, k)
                  : snprintf(as->dir, sizeof(as->dir), "%s/%s/%s", v->state_dir, as->pod_uid,
                             as->container);
        if (n < 0 || (size_t)n >= sizeof(as->dir))
            return -ENAMETOOLONG;
        bool taken = false;
        for (size_t a = 0; a < v->n_as && !taken; a++)
            taken = v->as[a] != as && strcmp(v->as[a]->dir, as->dir) == 0;
        if (!taken) {
            as->own_dir = k > 0;
            return 0;
        }
    }
    return -EEXIST;
}

static size_t config_text(const struct vgpu *v, const struct assign *as, char *conf, size_t cap);
static int files_in_place(struct vgpu *v, const struct assign *as, const char *conf, size_t n);

static const char *jstr(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* The index of the assignment of pod_uid's container, or -1. */
ssize_t vgpu_find_assign(const struct vgpu *v, const char *pod_uid, const char *container)
{
    for (size_t a = 0; a < v->n_as; a++)
        if (strcmp(v->as[a]->pod_uid, pod_uid) == 0 && strcmp(v->as[a]->container, container) == 0)
            return (ssize_t)a;
    return -1;
}

/* One assignment as the checkpoint and the journal write it: 0 (set in v,
 * replacing the container's earlier one), 1 (does not fit this node: dropped
 * with a line) or -ENOMEM. */
static int restore_one(struct vgpu *v, json_t *e)
{
    struct assign *as = calloc(1, sizeof(*as));
    if (!as)
        return -ENOMEM;
    snprintf(as->pod_uid, sizeof(as->pod_uid), "%s", jstr(e, "podUID"));
    snprintf(as->ns, sizeof(as->ns), "%s", jstr(e, "namespace"));
    snprintf(as->pod, sizeof(as->pod), "%s", jstr(e, "pod"));
    snprintf(as->container, sizeof(as->container), "%s", jstr(e, "container"));
    json_int_t c = json_integer_value(json_object_get(e, "cores"));
    json_int_t m = json_integer_value(json_object_get(e, "memory"));
    as->amount[VGPU_CORES] = c > 0 ? (uint64_t)c : 0;
    as->amount[VGPU_MEMORY] = m > 0 ? (uint64_t)m : 0;
    as->done[VGPU_CORES] = json_is_true(json_object_get(e, "coresDone"));
    as->done[VGPU_MEMORY] = json_is_true(json_object_get(e, "memoryDone"));
    as->whole = json_is_true(json_object_get(e, "whole"));
    static const char *const ids_key[2] = {"coreIds", "memoryIds"};
    for (int r = 0; r < 2; r++)
        as->ids[r] = strtoull(jstr(e, ids_key[r]), NULL, 16);
    as->epoch[VGPU_CORES] = as->epoch[VGPU_MEMORY] = v->epoch;
    const char *dir = jstr(e, "dir");
    json_t *gpus = json_object_get(e, "gpus"), *g;
    size_t k;
    bool ok = vgpu_safe_component(as->pod_uid) && vgpu_safe_component(as->container) &&
              json_is_array(gpus) && json_array_size(gpus) > 0 &&
              json_array_size(gpus) <= VGPU_MAX_GPUS;
    if (*dir) {
        /* a directory of its own: <state>/vgpu/<component>/<component>, nothing else */
        size_t sl = strlen(v->state_dir);
        char a[VGPU_PATH_MAX], *slash;
        ok = ok && strncmp(dir, v->state_dir, sl) == 0 && dir[sl] == '/' &&
             strlen(dir + sl + 1) < sizeof(a);
        if (ok) {
            snprintf(a, sizeof(a), "%s", dir + sl + 1);
            slash = strchr(a, '/');
            ok = slash && (*slash = '\0', vgpu_safe_component(a)) &&
                 vgpu_safe_component(slash + 1) && a[0] != '.';
        }
        as->own_dir = true;
        snprintf(as->dir, sizeof(as->dir), "%s", dir);
    }
    json_array_foreach(gpus, k, g)
    {
        const char *u = json_string_value(g);
        int gi = u ? vgpu_find_gpu(v, u, strlen(u)) : -1;
        if (gi < 0 || !ok) {
            ok = false;
            break;
        }
        as->gpus[as->n_gpus++] = (size_t)gi;
    }
    if (!ok || vgpu_assign_paths(v, as) < 0) {
        log_warn("vGPU checkpoint: dropping the assignment of %s/%s container %s: its GPU "
                 "is not on this node in vgpu mode, or the entry is malformed",
                 as->ns, as->pod, as->container);
        free(as);
        return 1;
    }
    ssize_t at = vgpu_find_assign(v, as->pod_uid, as->container);
    if (at >= 0) {
        free(v->as[at]);
        v->as[at] = as;
        return 0;
    }
    if (vgpu_reserve_slot(v) < 0) {
        free(as);
        return -ENOMEM;
    }
    v->as[v->n_as++] = as;
    return 0;
}

static int bad_checkpoint(const char *path, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen,
             "the vGPU checkpoint %s is not a version %d checkpoint (%s); move it away, with "
             "checkpoint.journal beside it, to start with no assignments (running containers "
             "then lose their record)",
             path, CHECKPOINT_VERSION, what);
    return -EINVAL;
}

/* Applies the journal's lines over what the snapshot restored. A last line
 * without its newline was cut by a crash of the machine before it reached the
 * disk (its Allocate may have been answered: see the comment at the top of
 * the checkpoint section); it is ignored with a line. Any other line that
 * does not parse is an error, as a broken snapshot is. */
static int journal_replay(struct vgpu *v, char *err, size_t errlen)
{
    char *text;
    size_t len;
    int r = fs_read_all(v->journal_path, CHECKPOINT_MAX, &text, &len);
    if (r == -ENOENT)
        return 0;
    if (r < 0) {
        snprintf(err, errlen, "cannot read the vGPU journal %s: %s", v->journal_path, strerror(-r));
        return r;
    }
    size_t at = 0, line = 0, applied = 0;
    while (at < len && r == 0) {
        char *nl = memchr(text + at, '\n', len - at);
        line++;
        if (!nl) {
            log_warn("vGPU journal %s: line %zu was cut short (the machine stopped while it "
                     "was written): ignored",
                     v->journal_path, line);
            break;
        }
        json_error_t je;
        json_t *rec = json_loadb(text + at, (size_t)(nl - (text + at)), 0, &je);
        json_t *set = json_object_get(rec, "set"), *drop = json_object_get(rec, "drop");
        if (json_is_object(set) && !drop) {
            r = restore_one(v, set);
            r = r > 0 ? 0 : r;
        } else if (json_is_object(drop) && !set) {
            ssize_t i = vgpu_find_assign(v, jstr(drop, "podUID"), jstr(drop, "container"));
            if (i >= 0) {
                free(v->as[i]);
                memmove(&v->as[i], &v->as[i + 1], (v->n_as - (size_t)i - 1) * sizeof(*v->as));
                v->n_as--;
            }
        } else {
            snprintf(err, errlen,
                     "the vGPU journal %s has a broken line %zu (%s); move it away, with "
                     "checkpoint.json beside it, to start with no assignments (running "
                     "containers then lose their record)",
                     v->journal_path, line, rec ? "neither set nor drop" : je.text);
            r = -EINVAL;
        }
        json_decref(rec);
        applied += r == 0;
        at = (size_t)(nl - text) + 1;
    }
    free(text);
    if (r == 0 && applied)
        log_info("vGPU journal: %zu change(s) applied over the snapshot", applied);
    return r;
}

/* Loads the snapshot, then the journal; entries that do not fit this node are
 * dropped with a line. A file that cannot be parsed is an error: acceld must
 * not forget shares it handed out (move it away to start empty). Then folds
 * both into a new snapshot, and rewrites the files of the assignments
 * restored (written without fsync: they are rebuilt here from the durable
 * record after any crash). */
static int checkpoint_load(struct vgpu *v, char *err, size_t errlen)
{
    char *text;
    size_t len;
    int r = fs_read_all(v->checkpoint, CHECKPOINT_MAX, &text, &len);
    if (r < 0 && r != -ENOENT) {
        snprintf(err, errlen, "cannot read the vGPU checkpoint %s: %s", v->checkpoint,
                 strerror(-r));
        return r;
    }
    bool had_record = r == 0 || access(v->journal_path, F_OK) == 0;
    if (r == 0) {
        json_error_t je;
        json_t *root = json_loadb(text, len, 0, &je);
        free(text);
        json_t *arr = json_object_get(root, "assignments");
        if (!root || !json_is_array(arr) ||
            json_integer_value(json_object_get(root, "version")) != CHECKPOINT_VERSION) {
            r = bad_checkpoint(v->checkpoint, root ? "wrong shape" : je.text, err, errlen);
            json_decref(root);
            return r;
        }
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e)
        {
            if ((r = restore_one(v, e)) < 0) {
                json_decref(root);
                return r;
            }
        }
        json_decref(root);
    }
    if ((r = journal_replay(v, err, errlen)) < 0)
        return r;
    /* A container between its two Allocates when acceld stopped: the kubelet's second call
     * found no acceld and failed the pod for good (it never calls again; a kubelet restart
     * admits it anew, both resources). Its share is freed, and its pod is no candidate for
     * the next identical pod's call while its Failed status is on its way. */
    for (size_t a = 0; a < v->n_as;) {
        struct assign *as = v->as[a];
        if (vgpu_complete(as)) {
            a++;
            continue;
        }
        vgpu_refusal_add(v, as->pod_uid, as->container);
        if (vgpu_abandon(v, as, "was between its two Allocates when acceld stopped")) {
            a++;
            continue;
        }
        log_warn("vGPU: %s/%s container %s was between its two Allocates when acceld stopped "
                 "(its admission failed): its share on %s is free again",
                 as->ns, as->pod, as->container, as->visible);
        if (!as->whole)
            vgpu_remove_files(as);
        memmove(&v->as[a], &v->as[a + 1], (v->n_as - a - 1) * sizeof(*v->as));
        v->n_as--;
        free(as);
    }
    vgpu_recount(v);
    log_info("vGPU checkpoint: %zu assignment(s) restored", v->n_as);
    for (size_t a = 0; a < v->n_as; a++) {
        const struct assign *as = v->as[a];
        if (!as->whole && (r = vgpu_files_rewrite(v, as)) < 0)
            log_warn("vGPU: cannot rewrite the files of %s/%s container %s under %s: %s", as->ns,
                     as->pod, as->container, as->dir, strerror(-r));
    }
    vgpu_books_check_load(v, had_record);
    v->journal_fd = open(v->journal_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (v->journal_fd < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot open the vGPU journal %s: %s", v->journal_path, strerror(-r));
        return r;
    }
    if ((r = vgpu_checkpoint_write(v)) < 0) {
        snprintf(err, errlen, "cannot write the vGPU checkpoint %s: %s", v->checkpoint,
                 strerror(-r));
        return r;
    }
    return 0;
}

/* ------------------------------------------------------------ files */

/* A container's files: <state>/vgpu/<pod-uid>/<container>/ with config and
 * region/ (0777: the container's user writes its usage region there), and
 * the one ld.so.preload of the state dir. Creating inodes is the costly part
 * of writing them (bench/fs-costs.py: ~0.15 ms each on a quiet ext4, ten times a
 * rename, and milliseconds on a loaded disk), so acceld keeps spares: .spare/<n>/c/ with an empty
 * config and region/, made ahead when no Allocate is coming (vgpu_spare_fill).
 * An Allocate fills in a spare's config and renames the spare into place:
 * .spare/<n> becomes the pod's directory for its first container (then c its
 * container's), and for the pod's next containers only .spare/<n>/c moves,
 * leaving a shell that the next fill completes. So an Allocate creates no
 * inode. Without a spare, or when the container's directory is there already
 * (a restart), the files are made in place. None is fsynced:
 * checkpoint_load rebuilds them from the checkpoint at every start. */

static size_t config_text(const struct vgpu *v, const struct assign *as, char *conf, size_t cap)
{
    const struct gpu *g = &v->gpus[as->gpus[0]];
    int n = snprintf(conf, cap,
                     "# written by acceld for %s/%s container %s\n"
                     "memory_limit = %llu\n"
                     "region = %s/usage\n"
                     "devices = %s\n",
                     as->ns, as->pod, as->container,
                     (unsigned long long)(as->amount[VGPU_MEMORY] * v->unit_bytes),
                     VGPU_CONTAINER_REGION_DIR, g->uuid);
    if (as->amount[VGPU_CORES] > 0 && as->amount[VGPU_CORES] < VGPU_CORES_PER_GPU)
        n += snprintf(conf + n, cap - (size_t)n, "core_limit = %llu\n",
                      (unsigned long long)as->amount[VGPU_CORES]);
    return (size_t)n;
}

int vgpu_files_rewrite(struct vgpu *v, const struct assign *as)
{
    char conf[2048];
    fs_remove_stale_tmp(as->dir, "");
    return files_in_place(v, as, conf, config_text(v, as, conf, sizeof(conf)));
}

/* The container's region dir: everything in it is the tenant's from the moment it is handed
 * out, so it gets a small tmpfs of its own (tenant_dir_make): what the tenant writes there
 * cannot fill the state dir's filesystem, and nothing of acceld's can be linked into it. */
static int make_region(struct vgpu *v, const char *region)
{
    enum tenant_dir_how how;
    int r = tenant_dir_make(region, &how);
    if (r == 0 && how == TENANT_DIR_PLAIN && !v->unbounded_said) {
        v->unbounded_said = true;
        log_warn("vGPU: cannot mount a tmpfs on the containers' region dirs (%s: %s): they are "
                 "plain directories on the state dir's filesystem, which a tenant can fill; run "
                 "acceld with CAP_SYS_ADMIN (privileged, as the Helm chart runs it)",
                 region, strerror(errno));
    }
    return r;
}

static int files_in_place(struct vgpu *v, const struct assign *as, const char *conf, size_t n)
{
    int r = make_region(v, as->region);
    return r < 0 ? r : fs_write_replace(as->config, conf, n, 0644);
}

static void spare_path(const struct vgpu *v, unsigned name, const char *sub, char *out, size_t len)
{
    snprintf(out, len, "%s/%u%s", v->spare_dir, name, sub);
}

/* Takes a spare for as: its config written, the spare renamed into place.
 * 0, or -errno (no spare, or the target exists: the caller makes the files
 * in place). */
static int spare_take(struct vgpu *v, const struct assign *as, const char *conf, size_t n)
{
    if (!v->n_spares)
        return -ENOENT;
    char pod_spare[VGPU_PATH_MAX + 48], ctr_spare[VGPU_PATH_MAX + 48], path[VGPU_PATH_MAX + 64];
    unsigned name = v->spares[v->n_spares - 1];
    spare_path(v, name, "", pod_spare, sizeof(pod_spare));
    spare_path(v, name, "/c", ctr_spare, sizeof(ctr_spare));
    snprintf(path, sizeof(path), "%s/config", ctr_spare);
    /* in place, not tmp + rename: no reader can see the spare before the
     * renames below, and a tmp file would cost the inode the spare saves */
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = fs_write_full(fd, conf, n);
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r < 0)
        return r;
    char pod_dir[VGPU_PATH_MAX], moved[VGPU_PATH_MAX + 8];
    snprintf(pod_dir, sizeof(pod_dir), "%s", as->dir);
    char *slash = strrchr(pod_dir, '/');
    if (!slash)
        return -EINVAL;
    *slash = '\0';
    bool shell = false;
    /* the pod's first container: the spare becomes the pod's directory (a directory is
     * renamed onto a path only where nothing, or an empty directory, is) */
    if (rename(pod_spare, pod_dir) == 0) {
        snprintf(moved, sizeof(moved), "%s/c", pod_dir);
        if (rename(moved, as->dir) < 0) {
            r = -errno;
            rename(pod_dir, pod_spare); /* as it was */
            return r;
        }
    } else if (errno == EEXIST || errno == ENOTEMPTY) {
        if (rename(ctr_spare, as->dir) < 0)
            return -errno;
        shell = true;
    } else {
        return -errno;
    }
    v->n_spares--;
    if (shell)
        v->shells[v->n_shells++] = name;
    if (v->spare_hook)
        v->spare_hook(v->spare_ctx);
    return 0;
}

static int write_files(struct vgpu *v, const struct assign *as)
{
    char conf[2048];
    size_t n = config_text(v, as, conf, sizeof(conf));
    if (spare_take(v, as, conf, n) == 0)
        return 0;
    return files_in_place(v, as, conf, n);
}

/* Makes one spare: a shell completed, or a new one. 0 or -errno. */
static int spare_make(struct vgpu *v)
{
    char dir[VGPU_PATH_MAX + 48], path[VGPU_PATH_MAX + 64];
    bool shell = v->n_shells > 0;
    unsigned name = shell ? v->shells[v->n_shells - 1] : v->spare_seq++;
    spare_path(v, name, "/c", dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/region", dir);
    int r = make_region(v, path);
    if (r == 0) {
        snprintf(path, sizeof(path), "%s/config", dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || fchmod(fd, 0644) < 0)
            r = -errno;
        if (fd >= 0)
            close(fd);
    }
    if (r < 0)
        return r;
    if (shell)
        v->n_shells--;
    v->spares[v->n_spares++] = name;
    return 0;
}

/* -ENOSPC when making one more spare would leave the filesystem fewer than the reserve
 * of inodes or bytes the essential files need (checkpoint, journal, configs). */
static int spare_room(const struct vgpu *v)
{
    struct statvfs st;
    if (statvfs(v->spare_dir, &st) < 0)
        return 0; /* unknown: making the spare will tell */
    /* f_files 0: the filesystem has no inode limit (btrfs reports so) */
    if (st.f_files && st.f_favail < VGPU_SPARE_INODES + VGPU_SPARE_RESERVE_INODES)
        return -ENOSPC;
    if ((uint64_t)st.f_bavail * st.f_frsize < VGPU_SPARE_RESERVE_BYTES)
        return -ENOSPC;
    return 0;
}

size_t vgpu_spare_fill(struct vgpu *v, size_t max, int *ret_err)
{
    int r = 0;
    for (size_t k = 0; k < max && v->n_spares < VGPU_SPARES && r == 0; k++)
        if ((r = spare_room(v)) == 0)
            r = spare_make(v);
    if (ret_err)
        *ret_err = r;
    return VGPU_SPARES - v->n_spares;
}

void vgpu_set_spare_hook(struct vgpu *v, void (*fn)(void *ctx), void *ctx)
{
    v->spare_hook = fn;
    v->spare_ctx = ctx;
}

/* Removes the spares' tree: each spare's region tmpfs unmounted first (a mount point stops
 * the removal), then the rest without following anything. */
static void remove_spares(const char *spare_dir)
{
    DIR *d = opendir(spare_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char p[VGPU_PATH_MAX + 300];
            snprintf(p, sizeof(p), "%s/%s/c/region", spare_dir, e->d_name);
            tenant_dir_remove(p);
        }
        closedir(d);
    }
    tenant_dir_remove(spare_dir);
}

/* The spares left by an earlier run are removed (their count is unknown) and the preload
 * file written; the new spares come after the checkpoint (vgpu_new), so that they never
 * take the inodes or space the essential files need. 0 or -errno. */
static int spares_start(struct vgpu *v, char *err, size_t errlen)
{
    v->spares = calloc(VGPU_SPARES, sizeof(*v->spares));
    v->shells = calloc(VGPU_SPARES, sizeof(*v->shells));
    if (!v->spares || !v->shells)
        return -ENOMEM;
    remove_spares(v->spare_dir);
    int r = fs_mkdir_p(v->spare_dir, 0755);
    if (r < 0) {
        snprintf(err, errlen, "cannot create %s: %s", v->spare_dir, strerror(-r));
        return r;
    }
    char pre[VGPU_PATH_MAX];
    int n = snprintf(pre, sizeof(pre), "%s\n", VGPU_CONTAINER_LIBRARY);
    if ((r = fs_write_atomic(v->preload, pre, (size_t)n, 0644)) < 0) {
        snprintf(err, errlen, "cannot write %s: %s", v->preload, strerror(-r));
        return r;
    }
    return 0;
}

void vgpu_remove_files(const struct assign *as)
{
    /* whatever the container left there (files, directories, links), with its tmpfs */
    int r = tenant_dir_remove(as->region);
    if (r < 0)
        log_warn("vGPU: cannot remove %s/%s container %s's region dir %s: %s", as->ns, as->pod,
                 as->container, as->region, strerror(-r));
    unlink(as->config);
    fs_remove_stale_tmp(as->dir, ""); /* an interrupted config write: else rmdir fails */
    /* a container's own ld.so.preload, as acceld wrote before it shared one */
    char legacy[VGPU_PATH_MAX + 32];
    snprintf(legacy, sizeof(legacy), "%s/ld.so.preload", as->dir);
    unlink(legacy);
    rmdir(as->dir);
    char pod_dir[VGPU_PATH_MAX];
    snprintf(pod_dir, sizeof(pod_dir), "%s", as->dir);
    char *slash = strrchr(pod_dir, '/');
    if (slash) {
        *slash = '\0';
        rmdir(pod_dir); /* only when empty: other containers of the pod keep it */
    }
}

/* ------------------------------------------------------------ matching */

static bool fits(const struct vgpu *v, size_t i, uint64_t cores, uint64_t mem)
{
    uint64_t fc, fm;
    free_units(v, i, &fc, &fm);
    return v->gpus[i].healthy && fc >= cores && fm >= mem;
}

/* Picks the GPU(s) for p. Returns 0 or -ENOSPC with a message naming the
 * largest fit. */
static int choose(const struct vgpu *v, const struct vgpu_pending *p, struct assign *as, char *err,
                  size_t errlen)
{
    uint64_t c = p->cores, m = p->memory;
    if (c >= VGPU_CORES_PER_GPU && c % VGPU_CORES_PER_GPU == 0) {
        size_t k = c / VGPU_CORES_PER_GPU, got = 0;
        as->whole = true;
        for (size_t i = 0; i < v->n && got < k; i++)
            if (v->gpus[i].healthy && v->gpus[i].used_cores == 0 && v->gpus[i].used_mem == 0)
                as->gpus[got++] = i;
        if (got == k) {
            as->n_gpus = k;
            return 0;
        }
        snprintf(err, errlen,
                 "%s/%s container %s asks for %llu cores (%zu whole GPUs) but only %zu healthy "
                 "GPU(s) in vgpu mode are wholly free on this node",
                 p->namespace, p->pod_name, p->container, (unsigned long long)c, k, got);
        return -ENOSPC;
    }
    if (c > VGPU_CORES_PER_GPU) {
        snprintf(err, errlen,
                 "%s/%s container %s asks for %llu cores: more than one GPU (100) must be a "
                 "multiple of 100 (whole GPUs); ask for at most 100 or a multiple of 100",
                 p->namespace, p->pod_name, p->container, (unsigned long long)c);
        return -EINVAL;
    }
    if (p->chosen_gpu) {
        int i = vgpu_find_gpu(v, p->chosen_gpu, strlen(p->chosen_gpu));
        if (i < 0 || !fits(v, (size_t)i, c, m)) {
            snprintf(err, errlen,
                     "%s/%s container %s: the scheduler extender chose GPU %s, which %s",
                     p->namespace, p->pod_name, p->container, p->chosen_gpu,
                     i < 0 ? "is not a vgpu-mode GPU of this node"
                           : "is unhealthy or has too little free");
            return -ENOSPC;
        }
        as->gpus[0] = (size_t)i;
        as->n_gpus = 1;
        return 0;
    }
    int best = -1;
    uint64_t best_c = 0, best_m = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (!fits(v, i, c, m))
            continue;
        uint64_t fc, fm;
        free_units(v, i, &fc, &fm);
        bool better = best < 0 ||
                      (v->policy == VGPU_BINPACK ? (fc < best_c || (fc == best_c && fm < best_m))
                                                 : (fc > best_c || (fc == best_c && fm > best_m)));
        if (better) {
            best = (int)i;
            best_c = fc;
            best_m = fm;
        }
    }
    if (best >= 0) {
        as->gpus[0] = (size_t)best;
        as->n_gpus = 1;
        return 0;
    }
    /* the largest fit: the healthy GPU with the most free memory (then cores) */
    int big = -1;
    uint64_t bc = 0, bm = 0;
    for (size_t i = 0; i < v->n; i++) {
        uint64_t fc, fm;
        free_units(v, i, &fc, &fm);
        if (v->gpus[i].healthy && (big < 0 || fm > bm || (fm == bm && fc > bc))) {
            big = (int)i;
            bc = fc;
            bm = fm;
        }
    }
    if (big < 0)
        snprintf(err, errlen,
                 "%s/%s container %s asks for %llu cores and %llu memory units but no GPU in "
                 "vgpu mode on this node is healthy",
                 p->namespace, p->pod_name, p->container, (unsigned long long)c,
                 (unsigned long long)m);
    else
        snprintf(err, errlen,
                 "%s/%s container %s asks for %llu cores and %llu memory units (%llu MiB) on one "
                 "GPU, but no healthy GPU has that free; the largest fit is %llu cores and %llu "
                 "units (%llu MiB) on GPU %s",
                 p->namespace, p->pod_name, p->container, (unsigned long long)c,
                 (unsigned long long)m, (unsigned long long)(m * v->unit_bytes >> 20),
                 (unsigned long long)bc, (unsigned long long)bm,
                 (unsigned long long)(bm * v->unit_bytes >> 20), v->gpus[big].uuid);
    return -ENOSPC;
}

bool vgpu_complete(const struct assign *as)
{
    return (as->done[VGPU_CORES] || !as->amount[VGPU_CORES]) &&
           (as->done[VGPU_MEMORY] || !as->amount[VGPU_MEMORY]);
}

void vgpu_drop(struct vgpu *v, size_t i, bool remove_files)
{
    struct assign *as = v->as[i];
    if (remove_files && !as->whole)
        vgpu_remove_files(as);
    memmove(&v->as[i], &v->as[i + 1], (v->n_as - i - 1) * sizeof(*v->as));
    v->n_as--;
    vgpu_journal_drop(v, as); /* logged if it fails: the next reconcile drops it again */
    free(as);
    vgpu_recount(v);
    vgpu_changed(v);
}

void vgpu_changed(struct vgpu *v)
{
    if (v->change_hook)
        v->change_hook(v->change_ctx);
}

void vgpu_set_hooks(struct vgpu *v, void (*changed)(void *ctx), void (*doubt)(void *ctx), void *ctx)
{
    v->change_hook = changed;
    v->doubt_hook = doubt;
    v->change_ctx = ctx;
}

/* Whether as's Allocate of r was answered in this kubelet session (the kubelet has not
 * restarted since). */
/* A half share whose other call will not come: its pod is no candidate (the caller refuses
 * it). One whose primary resource was answered handed out the mounts: a container may run
 * with them, its other call taken for another container's, so it is kept, no candidate for
 * any call, until a settling tells (vgpu-books.c); returns true then. Otherwise false: the
 * caller frees it. */
bool vgpu_abandon(struct vgpu *v, struct assign *as, const char *what)
{
    enum vgpu_resource p = as->amount[VGPU_CORES] ? VGPU_CORES : VGPU_MEMORY;
    if (!as->done[p])
        return false;
    as->abandoned = true;
    log_warn("vGPU: %s/%s container %s %s: its share on %s is no candidate for any call, and "
             "is freed once the kubelet's List shows no container holding it",
             as->ns, as->pod, as->container, what, as->visible);
    if (v->doubt_hook)
        v->doubt_hook(v->change_ctx); /* a settling soon */
    return true;
}

static bool answered_now(const struct vgpu *v, const struct assign *as, enum vgpu_resource r)
{
    return as->done[r] && as->epoch[r] == v->epoch;
}

/* The kubelet allocates every resource of a container before it moves to the
 * next container; so when a new container's first Allocate comes, an
 * assignment of this kubelet session still waiting for its second resource
 * will never get it (that admission failed). Dropping it frees its share and
 * keeps it from catching another container's call. One from before a kubelet
 * restart stays: the kubelet admits that container again. */
static void drop_abandoned(struct vgpu *v)
{
    for (size_t a = 0; a < v->n_as;) {
        struct assign *as = v->as[a];
        if (vgpu_complete(as) || as->abandoned ||
            !(answered_now(v, as, VGPU_CORES) || answered_now(v, as, VGPU_MEMORY))) {
            a++;
            continue;
        }
        vgpu_refusal_add(v, as->pod_uid, as->container);
        if (vgpu_abandon(v, as, "never got its second Allocate")) {
            a++;
            continue;
        }
        log_warn("vGPU: %s/%s container %s never got its second Allocate (its admission "
                 "failed): its share on %s is free again",
                 as->ns, as->pod, as->container, as->visible);
        vgpu_drop(v, a, true);
    }
}

/* False when the pod source answers and no longer lists as's container as
 * pending (its admission failed, or it was deleted): then a call must not be
 * taken as as's second one. Without an answer, the checkpoint is trusted. */
static bool still_pending(struct vgpu *v, const struct assign *as)
{
    const struct vgpu_pending *list;
    size_t n;
    char why[64];
    if (!v->pods.ops || v->pods.ops->pending(v->pods.self, &list, &n, why, sizeof(why)) < 0)
        return true;
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i].pod_uid, as->pod_uid) == 0 &&
            strcmp(list[i].container, as->container) == 0)
            return true;
    return false;
}

/* The second call for a container in this kubelet session: the assignment whose other
 * resource was answered in it and that waits for r (not answered in it: never, or before a
 * kubelet restart), of a container still pending and not refused. */
static struct assign *second_call(struct vgpu *v, enum vgpu_resource r, uint64_t amount)
{
    enum vgpu_resource o = r == VGPU_CORES ? VGPU_MEMORY : VGPU_CORES;
    for (size_t a = 0; a < v->n_as; a++) {
        struct assign *x = v->as[a];
        if (!x->abandoned && !answered_now(v, x, r) && answered_now(v, x, o) &&
            x->amount[r] == amount && !vgpu_refused(v, x->pod_uid, x->container) &&
            still_pending(v, x))
            return x;
    }
    return NULL;
}

/* The container a container's first Allocate (amount of r) is for: the oldest pending
 * container that asks for exactly that, was not refused, and has had nothing answered in
 * this kubelet session: one with no assignment (a new one, *ret_as NULL), or one whose
 * assignment the kubelet forgot in a restart and admits again (*ret_as it): one still
 * waiting for a resource, or a complete one a reconcile since found no container holding.
 * Returns its index in list, or -1. */
static ssize_t first_call(const struct vgpu *v, enum vgpu_resource r, uint64_t amount,
                          const struct vgpu_pending *list, size_t n, struct assign **ret_as)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t want = r == VGPU_CORES ? list[i].cores : list[i].memory;
        if (want != amount || vgpu_refused(v, list[i].pod_uid, list[i].container))
            continue;
        ssize_t a = vgpu_find_assign(v, list[i].pod_uid, list[i].container);
        if (a < 0) {
            *ret_as = NULL;
            return (ssize_t)i;
        }
        struct assign *x = v->as[a];
        if (x->abandoned || answered_now(v, x, VGPU_CORES) || answered_now(v, x, VGPU_MEMORY) ||
            (vgpu_complete(x) && !x->unheld) || x->amount[r] != amount)
            continue;
        *ret_as = x;
        return (ssize_t)i;
    }
    return -1;
}

/* The first call for a container (first_call). A new container gets its GPU and files; one
 * admitted again keeps its GPU, directory and share. *ret_fresh: a new assignment. */
static int match_new(struct vgpu *v, enum vgpu_resource r, uint64_t amount, struct assign **ret,
                     bool *ret_fresh, char *err, size_t errlen)
{
    const char *res = vgpu_resource_label[r];
    if (!v->pods.ops) {
        snprintf(err, errlen,
                 "cannot tell which pod this Allocate of %llu %s is for: acceld has no API "
                 "server connection (give --kubeconfig, or run in-cluster with NODE_NAME set)",
                 (unsigned long long)amount, res);
        return -EHOSTUNREACH;
    }
    const struct vgpu_pending *list;
    size_t n;
    char why[512];
    int r2 = v->pods.ops->pending(v->pods.self, &list, &n, why, sizeof(why));
    if (r2 < 0) {
        snprintf(err, errlen,
                 "cannot tell which pod this Allocate of %llu %s is for: the API server's pod "
                 "list is not available (%s); acceld does not guess",
                 (unsigned long long)amount, res, why);
        /* the watch may come back in step: the transport waits up to allocateWait, and
         * meanwhile asks for a LIST now and then rather than wait out the watch's backoff
         * (three failed LISTs in a row back off 3.5 s, past a 3 s allocateWait) */
        if (v->pods.ops->doubt)
            v->pods.ops->doubt(v->pods.self);
        return -EAGAIN;
    }
    if (!v->books_ready) {
        snprintf(err, errlen,
                 "cannot answer this Allocate of %llu %s yet: acceld has not reconciled its "
                 "records with the kubelet's pod-resources List since it started",
                 (unsigned long long)amount, res);
        return -EAGAIN;
    }
    vgpu_refusals_prune(v, list, n);
    drop_abandoned(v);
    struct assign *again = NULL;
    ssize_t at = first_call(v, r, amount, list, n, &again);
    if (at < 0) {
        snprintf(err, errlen,
                 "no pending pod on this node has a container asking for exactly %llu %s that is "
                 "not assigned yet (is the pod bound to this node, and is the watch of the API "
                 "server current?)",
                 (unsigned long long)amount, res);
        /* the pod may not have reached the watch cache yet: the transport
         * tries again until allocateWait has passed, then sends err; the
         * cache may be behind a watch that lags or hangs: relist */
        if (v->pods.ops->doubt)
            v->pods.ops->doubt(v->pods.self);
        if (v->doubt_hook)
            v->doubt_hook(v->change_ctx);
        return -EAGAIN;
    }
    const struct vgpu_pending *p = &list[at];
    if (again) {
        log_info("vGPU: %s/%s container %s is admitted again (the kubelet restarted): it keeps "
                 "its share on %s",
                 again->ns, again->pod, again->container, again->visible);
        again->unheld = false;
        *ret = again;
        *ret_fresh = false;
        return 0;
    }
    if (!vgpu_safe_component(p->pod_uid) || !vgpu_safe_component(p->container) ||
        strlen(p->namespace) >= VGPU_NAME_MAX || strlen(p->pod_name) >= VGPU_NAME_MAX) {
        snprintf(err, errlen, "pod %s/%s: its UID or container name cannot name a directory",
                 p->namespace, p->pod_name);
        return -EINVAL;
    }
    struct assign *as = calloc(1, sizeof(*as));
    if (!as)
        return -ENOMEM;
    snprintf(as->pod_uid, sizeof(as->pod_uid), "%s", p->pod_uid);
    snprintf(as->ns, sizeof(as->ns), "%s", p->namespace);
    snprintf(as->pod, sizeof(as->pod), "%s", p->pod_name);
    snprintf(as->container, sizeof(as->container), "%s", p->container);
    as->amount[VGPU_CORES] = p->cores;
    as->amount[VGPU_MEMORY] = p->memory;
    int rc = choose(v, p, as, err, errlen);
    if (rc == 0 && (rc = claim_dir(v, as)) < 0)
        snprintf(err, errlen, "pod %s/%s: no directory name is free for container %s", p->namespace,
                 p->pod_name, p->container);
    if (rc == 0)
        rc = vgpu_assign_paths(v, as);
    if (rc == 0 && !as->whole) {
        rc = write_files(v, as);
        if (rc < 0) {
            snprintf(err, errlen, "cannot write the vGPU files of %s/%s container %s under %s: %s",
                     p->namespace, p->pod_name, p->container, as->dir, strerror(-rc));
            vgpu_remove_files(as);
        }
    }
    if (rc == 0)
        rc = vgpu_reserve_slot(v);
    if (rc < 0) {
        /* the kubelet fails this pod for good: it is no candidate for the next pod's call
         * while its Failed status is on its way */
        vgpu_refusal_add(v, p->pod_uid, p->container);
        free(as);
        return rc;
    }
    v->as[v->n_as++] = as;
    vgpu_recount(v);
    char key[VGPU_NAME_MAX + 32];
    snprintf(key, sizeof(key), "%s%s", VGPU_ANNOTATION_PREFIX, as->container);
    v->pods.ops->annotate(v->pods.self, as->ns, as->pod, key, as->visible);
    *ret = as;
    *ret_fresh = true;
    return 0;
}

/* The sum of the IDs' terms (vgpu_id_hash, precomputed per unit). */
static uint64_t request_ids(const struct vgpu *v, enum vgpu_resource r,
                            const struct acceld_alloc_req *req)
{
    uint64_t h = 0;
    for (size_t i = 0; i < req->n_devs; i++)
        h += v->id_hash[r][req->devs[i]];
    return h ? h : 1;
}

static int vgpu_allocate(void *self, const struct acceld_alloc_req *reqs, size_t n,
                         struct acceld_alloc *out, char *err, size_t errlen)
{
    struct view *w = self;
    struct vgpu *v = w->v;
    enum vgpu_resource r = w->r;
    if (n != 1) {
        snprintf(err, errlen,
                 "an Allocate of %s names %zu containers; the kubelet sends one per call and "
                 "acceld matches each to its pod one at a time",
                 vgpu_resource_label[r], n);
        return -EINVAL;
    }
    uint64_t amount = reqs[0].n_devs;
    struct assign *as = second_call(v, r, amount);
    bool fresh = false;
    if (!as) {
        int rc = match_new(v, r, amount, &as, &fresh, err, errlen);
        if (rc < 0) {
            if (rc != -EAGAIN)
                log_warn("vGPU Allocate refused: %s", err);
            return rc;
        }
    }
    struct assign saved = *as;
    as->done[r] = true;
    as->epoch[r] = v->epoch;
    as->ids[r] = request_ids(v, r, &reqs[0]);
    as->answered_ns = mono_ns();
    if (vgpu_journal_set(v, as) < 0) {
        if (fresh) {
            vgpu_remove_files(as);
            free(as);
            v->n_as--;
            vgpu_recount(v);
        } else {
            *as = saved;
        }
        vgpu_refusal_add(v, saved.pod_uid, saved.container);
        snprintf(err, errlen, "cannot record the vGPU assignment in %s; check the state dir",
                 v->checkpoint);
        return -EIO;
    }
    vgpu_changed(v);
    log_info("vGPU: %s/%s container %s: %llu %s on %s%s", as->ns, as->pod, as->container,
             (unsigned long long)amount, vgpu_resource_label[r], as->visible,
             as->whole ? " (whole GPUs, no limits)" : "");

    /* One answer, the primary resource's (cores when asked for, else memory), carries
     * everything: the env, the device nodes and the mounts; the other is empty, as
     * GPU-Manager's memory answer is. The container's GPU is then the one its mounts name
     * even when its other call was taken for another container's (the two calls of one
     * container can be matched to two shares: "Which pod an Allocate is for" in
     * docs/vgpu.md): the kubelet keeps the first value of an env name it meets across a
     * container's resources, in map order, logging "Environment variable has conflicting
     * setting" (pkg/kubelet/cm/devicemanager/manager.go, deviceRunContainerOptions), so two
     * answers naming two GPUs would give it either (fault campaign: a container ran on the
     * GPU of a share freed under it). GPU-Manager's vcuda-memory Allocate answers an empty
     * ContainerAllocateResponse too (pkg/server/vmemory.go). */
    out[0] = (struct acceld_alloc){0};
    enum vgpu_resource primary = as->amount[VGPU_CORES] ? VGPU_CORES : VGPU_MEMORY;
    if (r != primary)
        return 0;
    v->env = (struct acceld_kv){"NVIDIA_VISIBLE_DEVICES", as->visible};
    out[0].envs = &v->env;
    out[0].n_envs = 1;
    size_t nn = 0;
    for (size_t k = 0; k < as->n_gpus; k++) {
        const char *node = v->gpus[as->gpus[k]].node;
        v->nodes[nn++] = (struct acceld_devnode){node, node, "rw"};
    }
    for (size_t i = 0; i < v->n_common; i++)
        v->nodes[nn++] = (struct acceld_devnode){v->common_paths[i], v->common_paths[i], "rw"};
    out[0].devices = v->nodes;
    out[0].n_devices = nn;
    if (!as->whole) {
        v->mounts[0] = (struct acceld_mount){VGPU_CONTAINER_LIBRARY, v->library, true};
        v->mounts[1] = (struct acceld_mount){VGPU_CONTAINER_CONFIG, as->config, true};
        v->mounts[2] = (struct acceld_mount){VGPU_CONTAINER_PRELOAD, as->preload, true};
        v->mounts[3] = (struct acceld_mount){VGPU_CONTAINER_REGION_DIR, as->region, false};
        out[0].mounts = v->mounts;
        out[0].n_mounts = 4;
    }
    return 0;
}

/* ------------------------------------------------------------ provider ops */

static size_t op_count(void *self)
{
    return ((struct view *)self)->count;
}

static void op_device(void *self, size_t idx, struct acceld_device *out)
{
    struct view *w = self;
    size_t g = w->v->id_gpu[w->r][idx];
    *out = (struct acceld_device){w->v->ids[w->r][idx], w->healthy[g], w->v->gpus[g].numa};
}

/* "<uuid>-<k>": the UUID is looked up among the node's GPUs (at most
 * VGPU_MAX_GPUS), k parsed; no scan of anything the request controls. */
static int op_find(void *self, const char *id)
{
    struct view *w = self;
    const char *dash = strrchr(id, '-');
    if (!dash || !dash[1] || strlen(dash + 1) > 6)
        return -1;
    uint64_t k = 0;
    for (const char *p = dash + 1; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        k = k * 10 + (uint64_t)(*p - '0');
    }
    if (dash[1] == '0' && dash[2])
        return -1; /* one spelling per ID */
    int g = vgpu_find_gpu(w->v, id, (size_t)(dash - id));
    if (g < 0 || k >= gpu_units(&w->v->gpus[g], w->r))
        return -1;
    return (int)(w->v->gpus[g].base[w->r] + k);
}

/* GetPreferredAllocation: the IDs of the GPU the Allocate will choose, so
 * that the kubelet's own count of free IDs per GPU matches acceld's. The
 * container is found as Allocate finds it, without recording anything: an
 * assignment waiting for this resource (its other resource came first), else
 * the pending container that asks for exactly this amount, whose GPU
 * choose() picks by policy. When neither is known (no pod source, no match),
 * the least loaded GPUs first. must_include IDs always come first. */
static int op_prefer(void *self, const struct acceld_prefer_req *req, const char **out, char *err,
                     size_t errlen)
{
    struct view *w = self;
    struct vgpu *v = w->v;
    enum vgpu_resource r = w->r;
    bool target[VGPU_MAX_GPUS] = {false};
    const struct assign *x = second_call(v, r, req->size);
    const struct vgpu_pending *list;
    size_t n;
    char why[256];
    if (!x && v->pods.ops && v->pods.ops->pending(v->pods.self, &list, &n, why, sizeof(why)) == 0) {
        struct assign *again = NULL;
        ssize_t i = first_call(v, r, req->size, list, n, &again);
        x = again;
        if (i >= 0 && !again) {
            struct assign *tmp = calloc(1, sizeof(*tmp));
            if (!tmp)
                return -ENOMEM;
            char e2[256];
            if (choose(v, &list[i], tmp, e2, sizeof(e2)) == 0)
                for (size_t k = 0; k < tmp->n_gpus; k++)
                    target[tmp->gpus[k]] = true;
            free(tmp); /* a container that fits nowhere: any IDs, Allocate says why */
        }
    }
    for (size_t k = 0; x && k < x->n_gpus; k++)
        target[x->gpus[k]] = true;
    /* GPU order: the target ones, then by free units of r, most first */
    size_t order[VGPU_MAX_GPUS], no = 0;
    for (size_t i = 0; i < v->n; i++)
        if (target[i])
            order[no++] = i;
    size_t rest = no;
    for (size_t i = 0; i < v->n; i++)
        if (!target[i])
            order[no++] = i;
    for (size_t i = rest; i < no; i++)
        for (size_t j = i + 1; j < no; j++) {
            uint64_t ci, mi, cj, mj;
            free_units(v, order[i], &ci, &mi);
            free_units(v, order[j], &cj, &mj);
            if ((r == VGPU_CORES ? cj : mj) > (r == VGPU_CORES ? ci : mi)) {
                size_t t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        }
    size_t got = 0;
    for (size_t i = 0; i < req->n_must_include && got < req->size; i++)
        out[got++] = req->must_include[i];
    for (size_t g = 0; g < no && got < req->size; g++)
        for (size_t i = 0; i < req->n_available && got < req->size; i++) {
            int u = op_find(self, req->available[i]);
            if (u < 0 || v->id_gpu[r][u] != order[g])
                continue;
            bool dup = false;
            for (size_t k = 0; k < got && !dup; k++)
                dup = strcmp(out[k], req->available[i]) == 0;
            if (!dup)
                out[got++] = req->available[i];
        }
    if (got < req->size) {
        snprintf(err, errlen, "only %zu of the %zu %s IDs asked for are available", got, req->size,
                 vgpu_resource_label[r]);
        return -EINVAL;
    }
    return 0;
}

static uint64_t op_generation(void *self)
{
    return ((struct view *)self)->generation;
}

static bool op_set_gpu_health(void *self, const char *uuid, bool healthy)
{
    struct view *w = self;
    int g = vgpu_find_gpu(w->v, uuid, strlen(uuid));
    if (g < 0)
        return false;
    w->v->gpus[g].healthy = healthy; /* both views agree; each reports its own change */
    if (w->healthy[g] == healthy)
        return false;
    w->healthy[g] = healthy;
    w->generation++;
    return true;
}

/* Ready once the pods are listed (the first LIST of the watch) and the start's reconcile ran:
 * an Allocate can then be matched, and nothing it hands out is a lost record's share. */
static bool op_ready(void *self, char *why, size_t whylen)
{
    struct vgpu *v = ((struct view *)self)->v;
    const struct vgpu_pending *list;
    size_t n;
    char e[256];
    if (!v->pods.ops) {
        snprintf(why, whylen, "no API server connection");
        return true; /* never better: Allocates are refused saying so */
    }
    if (v->pods.ops->pending(v->pods.self, &list, &n, e, sizeof(e)) < 0) {
        snprintf(why, whylen, "the pods of this node are not listed yet (%s)", e);
        return false;
    }
    if (!v->books_ready) {
        snprintf(why, whylen, "the records are not reconciled with the kubelet yet");
        return false;
    }
    return true;
}

/* Both endpoints see a kubelet restart: the session moves on once per restart. */
static void op_kubelet_restarted(void *self)
{
    struct view *w = self;
    struct vgpu *v = w->v;
    w->kubelet_restarts++;
    uint32_t most = v->views[0].kubelet_restarts > v->views[1].kubelet_restarts
                        ? v->views[0].kubelet_restarts
                        : v->views[1].kubelet_restarts;
    if (most + 1 != v->epoch) {
        v->epoch = most + 1;
        for (size_t a = 0; a < v->n_as; a++)
            v->as[a]->unheld = false; /* the next reconcile looks again */
        log_info("vGPU: the kubelet restarted: containers it had not finished admitting are "
                 "admitted again with their shares");
    }
}

static const struct acceld_provider_ops vgpu_ops = {
    .count = op_count,
    .device = op_device,
    .find = op_find,
    .generation = op_generation,
    .prefer = op_prefer,
    .allocate = vgpu_allocate,
    .set_gpu_health = op_set_gpu_health,
    .ready = op_ready,
    .kubelet_restarted = op_kubelet_restarted,
};

void vgpu_set_books_ready(struct vgpu *v, bool ready)
{
    v->books_ready = ready;
}

void vgpu_set_pods(struct vgpu *v, const struct vgpu_pods *pods)
{
    v->pods = pods ? *pods : (struct vgpu_pods){0};
}

struct acceld_provider vgpu_provider(struct vgpu *v, enum vgpu_resource r)
{
    return (struct acceld_provider){&vgpu_ops, &v->views[r]};
}

/* ------------------------------------------------------------ lifecycle */

int vgpu_new(const struct vgpu_gpu_desc *gpus, size_t n, const struct vgpu_options *opts,
             const struct vgpu_pods *pods, struct vgpu **ret, char *err, size_t errlen)
{
    if (n > VGPU_MAX_GPUS) {
        snprintf(err, errlen, "%zu GPUs in vgpu mode; at most %d", n, VGPU_MAX_GPUS);
        return -EINVAL;
    }
    if (opts->memory_unit_bytes < (1u << 20)) {
        snprintf(err, errlen, "the vGPU memory unit must be at least 1 MiB");
        return -EINVAL;
    }
    if (strlen(opts->state_dir) + 8 >= VGPU_PATH_MAX || strlen(opts->library) >= VGPU_PATH_MAX ||
        opts->library[0] != '/') {
        snprintf(err, errlen, "the state dir or the libvcuda path is too long or not absolute");
        return -EINVAL;
    }
    struct vgpu *v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    v->journal_fd = -1;
    v->epoch = 1;
    v->books_ready = true; /* the agent says otherwise until its first reconcile */
    v->n = n;
    v->unit_bytes = opts->memory_unit_bytes;
    v->policy = opts->policy;
    snprintf(v->state_dir, sizeof(v->state_dir), "%s/vgpu", opts->state_dir);
    snprintf(v->checkpoint, sizeof(v->checkpoint), "%s/checkpoint.json", v->state_dir);
    snprintf(v->journal_path, sizeof(v->journal_path), "%s/checkpoint.journal", v->state_dir);
    snprintf(v->preload, sizeof(v->preload), "%s/ld.so.preload", v->state_dir);
    snprintf(v->spare_dir, sizeof(v->spare_dir), "%s/.spare", v->state_dir);
    snprintf(v->library, sizeof(v->library), "%s", opts->library);
    if (pods)
        v->pods = *pods;
    size_t total[2] = {0, 0};
    int r = -EINVAL;
    for (size_t i = 0; i < n; i++) {
        struct gpu *g = &v->gpus[i];
        if (!gpus[i].uuid || !gpus[i].uuid[0] || strlen(gpus[i].uuid) >= sizeof(g->uuid) ||
            vgpu_find_gpu(v, gpus[i].uuid, strlen(gpus[i].uuid)) >= 0) {
            snprintf(err, errlen, "GPU %zu: UUID empty, repeated or longer than %d characters", i,
                     VGPU_UUID_MAX - 1);
            goto fail;
        }
        snprintf(g->uuid, sizeof(g->uuid), "%s", gpus[i].uuid);
        g->minor = gpus[i].minor;
        g->numa = gpus[i].numa_node;
        g->healthy = gpus[i].healthy;
        g->mem_units = gpus[i].memory_bytes / v->unit_bytes;
        if (g->mem_units > VGPU_MAX_UNITS) {
            snprintf(err, errlen,
                     "GPU %s: %llu memory units of %llu bytes is over the %d a GPU may have; "
                     "raise vgpu.memoryUnit",
                     g->uuid, (unsigned long long)g->mem_units, (unsigned long long)v->unit_bytes,
                     VGPU_MAX_UNITS);
            goto fail;
        }
        snprintf(g->node, sizeof(g->node), "/dev/nvidia%d", g->minor);
        for (int k = 0; k < 2; k++) {
            g->base[k] = total[k];
            total[k] += gpu_units(g, (enum vgpu_resource)k);
        }
    }
    r = -ENOMEM;
    for (int k = 0; k < 2; k++) {
        v->views[k] =
            (struct view){.v = v, .r = (enum vgpu_resource)k, .count = total[k], .generation = 1};
        for (size_t i = 0; i < n; i++)
            v->views[k].healthy[i] = v->gpus[i].healthy;
        v->ids[k] = calloc(total[k] ? total[k] : 1, sizeof(*v->ids[k]));
        v->id_gpu[k] = calloc(total[k] ? total[k] : 1, sizeof(*v->id_gpu[k]));
        v->id_hash[k] = calloc(total[k] ? total[k] : 1, sizeof(*v->id_hash[k]));
        if (!v->ids[k] || !v->id_gpu[k] || !v->id_hash[k])
            goto fail;
        for (size_t i = 0; i < n; i++)
            for (uint64_t u = 0; u < gpu_units(&v->gpus[i], (enum vgpu_resource)k); u++) {
                size_t at = v->gpus[i].base[k] + u;
                char num[24];
                int ln = snprintf(num, sizeof(num), "-%llu", (unsigned long long)u);
                size_t lu = strlen(v->gpus[i].uuid);
                memcpy(v->ids[k][at], v->gpus[i].uuid, lu); /* ≤ 55 + 7 < 64: checked above */
                memcpy(v->ids[k][at] + lu, num, (size_t)ln + 1);
                v->id_gpu[k][at] = (uint16_t)i;
                v->id_hash[k][at] = vgpu_id_hash(v->ids[k][at]);
            }
    }
    for (size_t i = 0; i < VGPU_N_CONTROL; i++) {
        char host[VGPU_PATH_MAX + 32];
        snprintf(host, sizeof(host), "%s/%s", opts->dev_root, control_nodes[i]);
        if (access(host, F_OK) == 0)
            snprintf(v->common_paths[v->n_common++], sizeof(v->common_paths[0]), "/dev/%s",
                     control_nodes[i]);
    }
    if ((r = fs_mkdir_p(v->state_dir, 0755)) < 0) {
        snprintf(err, errlen, "cannot create %s: %s", v->state_dir, strerror(-r));
        goto fail;
    }
    /* what an interrupted atomic write left (checkpoint, preload, status) */
    fs_remove_stale_tmp(v->state_dir, "");
    if ((r = spares_start(v, err, errlen)) < 0 || (r = checkpoint_load(v, err, errlen)) < 0)
        goto fail;
    /* the spares last: the essential files are written by now */
    vgpu_spare_fill(v, VGPU_SPARES, NULL);
    *ret = v;
    return 0;
fail:
    vgpu_free(v);
    return r;
}

struct vgpu *vgpu_free(struct vgpu *v)
{
    if (!v)
        return NULL;
    if (v->journal_fd >= 0)
        close(v->journal_fd);
    free(v->spares);
    free(v->shells);
    for (size_t a = 0; a < v->n_as; a++)
        free(v->as[a]);
    free(v->as);
    for (int k = 0; k < 2; k++) {
        free(v->ids[k]);
        free(v->id_gpu[k]);
        free(v->id_hash[k]);
    }
    free(v);
    return NULL;
}

int vgpu_assignment_get(const struct vgpu *v, size_t i, struct vgpu_assignment_info *ret)
{
    if (!v || i >= v->n_as)
        return -ENOENT;
    const struct assign *as = v->as[i];
    *ret = (struct vgpu_assignment_info){as->pod_uid,
                                         as->ns,
                                         as->pod,
                                         as->container,
                                         as->n_gpus ? v->gpus[as->gpus[0]].uuid : "",
                                         as->amount[VGPU_CORES],
                                         as->amount[VGPU_MEMORY] * v->unit_bytes,
                                         as->region,
                                         as->whole,
                                         vgpu_complete(as)};
    return 0;
}
