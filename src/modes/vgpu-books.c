/* vgpu-books.c — keeps vGPU mode's books (the assignments of vgpu.c) in step with the
 * kubelet: the reconcile against the pod-resources List (whose IDs each live container
 * holds), the frees the watch cache alone can justify, re-adoption of live containers whose
 * record was lost (from the directory acceld wrote for them, or the GPU their IDs name), the
 * containers whose Allocate was refused, and what the start finds wrong with the record. See
 * vgpu.h ("The books follow the kubelet") and docs/vgpu.md, "Keeping the books".
 *
 * The rule every path keeps: a directory is removed only with the share it belongs to, and a
 * share only when no live container holds its IDs (the kubelet's own record) or, without
 * that record, when the watch cache says its pod is gone or terminal. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"
#include "log.h"
#include "util.h"
#include "vgpu-internal.h"

/* ------------------------------------------------------------ IDs */

uint64_t vgpu_id_hash(const char *id)
{
    /* FNV-1a, then splitmix64's finalizer: the sum of many terms stays well spread */
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

/* ------------------------------------------------------------ refusals */

bool vgpu_refused(const struct vgpu *v, const char *pod_uid, const char *container)
{
    for (size_t i = 0; i < v->n_refused; i++)
        if (strcmp(v->refused[i].pod_uid, pod_uid) == 0 &&
            strcmp(v->refused[i].container, container) == 0)
            return true;
    return false;
}

void vgpu_refusal_add(struct vgpu *v, const char *pod_uid, const char *container)
{
    if (vgpu_refused(v, pod_uid, container))
        return;
    struct refusal *f = &v->refused[v->next_refused];
    v->next_refused = (v->next_refused + 1) % VGPU_REFUSALS;
    if (v->n_refused < VGPU_REFUSALS)
        v->n_refused++;
    snprintf(f->pod_uid, sizeof(f->pod_uid), "%s", pod_uid);
    snprintf(f->container, sizeof(f->container), "%s", container);
}

void vgpu_refusals_prune(struct vgpu *v, const struct vgpu_pending *list, size_t n)
{
    /* a refused pod leaves the pending list once its status changes (Failed), or it is
     * deleted: then it cannot be matched anyway, and the entry goes */
    size_t kept = 0;
    struct refusal keep[VGPU_REFUSALS];
    for (size_t i = 0; i < v->n_refused; i++) {
        bool pending = false;
        for (size_t k = 0; k < n && !pending; k++)
            pending = strcmp(list[k].pod_uid, v->refused[i].pod_uid) == 0 &&
                      strcmp(list[k].container, v->refused[i].container) == 0;
        if (pending)
            keep[kept++] = v->refused[i];
    }
    if (kept == v->n_refused)
        return;
    memcpy(v->refused, keep, kept * sizeof(keep[0]));
    v->n_refused = kept;
    v->next_refused = kept % VGPU_REFUSALS;
}

/* ------------------------------------------------------------ the start */

/* Whether <state>/vgpu holds a pod directory (a container's files), spares aside. */
static bool any_container_dir(const struct vgpu *v)
{
    DIR *d = opendir(v->state_dir);
    struct dirent *e;
    bool any = false;
    while (d && !any && (e = readdir(d)))
        any = e->d_name[0] != '.' && e->d_type == DT_DIR;
    if (d)
        closedir(d);
    return any;
}

void vgpu_books_check_load(struct vgpu *v, bool had_record)
{
    if (!had_record && any_container_dir(v)) {
        v->record_lost = true;
        log_error("vGPU: the checkpoint (%s and its journal) is missing, but container "
                  "directories are under %s: their shares are taken back from the kubelet's "
                  "pod-resources List and those directories before any Allocate is answered",
                  v->checkpoint, v->state_dir);
    }
    for (size_t i = 0; i < v->n; i++) {
        const struct gpu *g = &v->gpus[i];
        if (g->used_cores <= VGPU_CORES_PER_GPU && g->used_mem <= g->mem_units)
            continue;
        v->overcommit_reported = true;
        log_error("vGPU: the checkpoint over-commits GPU %s (%llu of %d cores, %llu of %llu "
                  "memory units): the kubelet's pod-resources List settles which of its "
                  "shares live containers hold; nothing more is handed out on it meanwhile",
                  g->uuid, (unsigned long long)g->used_cores, VGPU_CORES_PER_GPU,
                  (unsigned long long)g->used_mem, (unsigned long long)g->mem_units);
    }
}

/* ------------------------------------------------------------ the reconcile */

static bool same_container(const struct assign *x, const struct vgpu_live *c)
{
    return strcmp(x->ns, c->ns) == 0 && strcmp(x->pod, c->pod) == 0 &&
           strcmp(x->container, c->container) == 0;
}

/* Whether c holds x's IDs: the IDs of a resource both know agree (the kubelet gives an ID to
 * one container at a time); or, for a share whose IDs are not known (an older checkpoint),
 * c is the container it was matched to and nothing known disagrees. */
/* c's sum for resource r as an assignment records it (0: none; a sum of 0 is 1, as vgpu.c
 * records it) */
static uint64_t live_ids(const struct vgpu_live *c, int r)
{
    return c->n_ids[r] ? (c->ids[r] ? c->ids[r] : 1) : 0;
}

static bool holds(const struct assign *x, const struct vgpu_live *c)
{
    bool by_ids = false, conflict = false;
    for (int r = 0; r < 2; r++) {
        uint64_t h = live_ids(c, r);
        if (x->ids[r] && h) {
            by_ids |= x->ids[r] == h;
            conflict |= x->ids[r] != h;
        }
    }
    /* every resource both know must agree: a new container may be handed IDs of one
     * resource that a gone one held (the kubelet reuses freed IDs), never all of them */
    if (conflict)
        return false;
    return by_ids || (same_container(x, c) && (c->n_ids[0] || c->n_ids[1]));
}

/* The resource whose Allocate answer carries a container's mounts and device nodes (vgpu.c:
 * cores when it asks for cores, else memory): the share its IDs name is the one the container
 * mounts. */
static enum vgpu_resource live_primary(const struct vgpu_live *c)
{
    return c->n_ids[VGPU_CORES] ? VGPU_CORES : VGPU_MEMORY;
}

static enum vgpu_resource share_primary(const struct assign *x)
{
    return x->amount[VGPU_CORES] ? VGPU_CORES : VGPU_MEMORY;
}

/* Whether a live container holds IDs of resource r with this sum. */
static bool held_by_any(const struct vgpu_live *live, size_t n, int r, uint64_t ids)
{
    for (size_t i = 0; i < n; i++)
        if (live_ids(&live[i], r) == ids)
            return true;
    return false;
}

/* The share c mounts: the one its primary resource's IDs name (acceld records the IDs of
 * every answer in the share it matched, so one such share is the one whose answer c got,
 * whatever its other resource says: c's second call may have been taken for another
 * container's while another container's call completed this share). Several: the kubelet
 * handed c IDs a gone container held (an identical request gets the same free IDs): those
 * whose other resource's IDs disagree and are held by another live container are not c's,
 * and of the rest the one matched to c itself is. -1: none, or no single one (then the plain
 * rule decides). */
static ssize_t primary_holder(const struct vgpu *v, const struct vgpu_live *c,
                              const struct vgpu_live *live, size_t n)
{
    enum vgpu_resource rp = live_primary(c), ro = rp == VGPU_CORES ? VGPU_MEMORY : VGPU_CORES;
    uint64_t hp = live_ids(c, rp), ho = live_ids(c, ro);
    ssize_t any = -1, found = -1, own = -1;
    size_t n_any = 0, n_found = 0, n_own = 0;
    for (size_t a = 0; hp && a < v->n_as; a++) {
        const struct assign *x = v->as[a];
        if (x->ids[rp] != hp)
            continue;
        any = (ssize_t)a;
        n_any++;
        if (x->ids[ro] && ho && x->ids[ro] != ho && held_by_any(live, n, ro, x->ids[ro]))
            continue;
        found = (ssize_t)a;
        n_found++;
        if (same_container(x, c)) {
            own = (ssize_t)a;
            n_own++;
        }
    }
    if (n_any == 1)
        return any;
    if (n_found == 1)
        return found;
    return n_own == 1 ? own : -1;
}

static enum vgpu_pod_state pod_state(const struct vgpu *v, const char *uid)
{
    return v->pods.ops && v->pods.ops->pod_state ? v->pods.ops->pod_state(v->pods.self, uid)
                                                 : VGPU_POD_UNKNOWN;
}

/* A share held by c but matched to another container: it is c's, and keeps its directory
 * (c mounts it). Returns true when renamed. */
static bool rename_to(struct vgpu *v, struct assign *x, const struct vgpu_live *c)
{
    const char *uid = v->pods.ops && v->pods.ops->pod_uid
                          ? v->pods.ops->pod_uid(v->pods.self, c->ns, c->pod)
                          : NULL;
    if (!uid || !vgpu_safe_component(uid) || !vgpu_safe_component(c->container) ||
        strlen(c->ns) >= VGPU_NAME_MAX || strlen(c->pod) >= VGPU_NAME_MAX) {
        log_warn("vGPU: the share on %s matched to %s/%s container %s is held by %s/%s container "
                 "%s, whose pod the watch cache does not know yet: renamed at a later reconcile",
                 x->visible, x->ns, x->pod, x->container, c->ns, c->pod, c->container);
        return false;
    }
    ssize_t other = vgpu_find_assign(v, uid, c->container);
    if (other >= 0 && v->as[other] != x) {
        if (x->told_held_twice)
            return false;
        x->told_held_twice = true;
        log_warn("vGPU: %s/%s container %s holds the share on %s matched to %s/%s container %s "
                 "and has a share of its own too: left as is until one of them is freed",
                 c->ns, c->pod, c->container, x->visible, x->ns, x->pod, x->container);
        return false;
    }
    log_warn("vGPU: the share on %s matched to %s/%s container %s is held by %s/%s container "
             "%s (the kubelet's record of its IDs): it is that container's now, directory %s "
             "kept",
             x->visible, x->ns, x->pod, x->container, c->ns, c->pod, c->container, x->dir);
    vgpu_journal_drop(v, x);
    x->own_dir = true; /* keeps <state>/vgpu/<old uid>/<old container>/ */
    snprintf(x->pod_uid, sizeof(x->pod_uid), "%s", uid);
    snprintf(x->ns, sizeof(x->ns), "%s", c->ns);
    snprintf(x->pod, sizeof(x->pod), "%s", c->pod);
    snprintf(x->container, sizeof(x->container), "%s", c->container);
    vgpu_journal_set(v, x);
    if (v->pods.ops) {
        char key[VGPU_NAME_MAX + 32];
        snprintf(key, sizeof(key), "%s%s", VGPU_ANNOTATION_PREFIX, x->container);
        v->pods.ops->annotate(v->pods.self, x->ns, x->pod, key, x->visible);
    }
    return true;
}

/* ---- re-adoption */

/* What a container directory's config says (acceld wrote it: config_text in vgpu.c). */
struct dir_conf {
    char ns[VGPU_NAME_MAX], pod[VGPU_NAME_MAX], container[VGPU_NAME_MAX];
    char gpu[VGPU_UUID_MAX];
};

static bool read_conf(const char *dir, struct dir_conf *ret)
{
    char path[VGPU_PATH_MAX + 16], *text = NULL;
    size_t len;
    snprintf(path, sizeof(path), "%s/config", dir);
    if (fs_read_all(path, 4096, &text, &len) < 0)
        return false;
    memset(ret, 0, sizeof(*ret));
    bool ok = sscanf(text, "# written by acceld for %253[^/]/%253s container %253s", ret->ns,
                     ret->pod, ret->container) == 3;
    const char *dev = strstr(text, "\ndevices = ");
    if (ok && dev)
        sscanf(dev, "\ndevices = %55[^,\n]", ret->gpu);
    free(text);
    return ok;
}

static bool dir_owned(const struct vgpu *v, const char *dir)
{
    for (size_t a = 0; a < v->n_as; a++)
        if (strcmp(v->as[a]->dir, dir) == 0)
            return true;
    return false;
}

/* Calls fn for every container directory under <state>/vgpu (<pod>/<container>/) that no
 * share owns. */
static void for_orphan_dirs(struct vgpu *v, void (*fn)(struct vgpu *v, const char *dir, void *ud),
                            void *ud)
{
    DIR *d = opendir(v->state_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || e->d_type != DT_DIR || !vgpu_safe_component(e->d_name))
            continue;
        char pod[VGPU_PATH_MAX + 300];
        snprintf(pod, sizeof(pod), "%s/%s", v->state_dir, e->d_name);
        DIR *p = opendir(pod);
        struct dirent *c;
        while (p && (c = readdir(p))) {
            char dir[VGPU_PATH_MAX];
            if (c->d_name[0] == '.' || c->d_type != DT_DIR || !vgpu_safe_component(c->d_name) ||
                snprintf(dir, sizeof(dir), "%s/%s", pod, c->d_name) >= (int)sizeof(dir))
                continue;
            if (!dir_owned(v, dir))
                fn(v, dir, ud);
        }
        if (p)
            closedir(p);
        /* a pod directory left empty (its last container's share freed) */
        rmdir(pod);
    }
    if (d)
        closedir(d);
}

struct adopt_ctx {
    const struct vgpu_live *c;
    char dir[VGPU_PATH_MAX];
    struct dir_conf conf;
    bool found;
};

static void find_dir_of(struct vgpu *v, const char *dir, void *ud)
{
    struct adopt_ctx *a = ud;
    struct dir_conf conf;
    if (a->found || !read_conf(dir, &conf) || strcmp(conf.ns, a->c->ns) != 0 ||
        strcmp(conf.pod, a->c->pod) != 0 || strcmp(conf.container, a->c->container) != 0)
        return;
    a->found = true;
    a->conf = conf;
    snprintf(a->dir, sizeof(a->dir), "%s", dir);
}

/* The GPU of an adopted share: its directory's config (acceld's own file), else the GPU its
 * IDs name (GetPreferredAllocation steers the kubelet to the chosen GPU's). Never the pod's
 * annotation: a pod's author writes its annotations (issue 22, F3). */
static size_t adopt_gpus(const struct vgpu *v, const struct vgpu_live *c, const struct adopt_ctx *a,
                         size_t *gpus)
{
    if (a->found && a->conf.gpu[0]) {
        int g = vgpu_find_gpu(v, a->conf.gpu, strlen(a->conf.gpu));
        if (g >= 0) {
            gpus[0] = (size_t)g;
            return 1;
        }
    }
    enum vgpu_resource r = c->n_ids[VGPU_CORES] ? VGPU_CORES : VGPU_MEMORY;
    if (c->other[r])
        return 0;
    size_t n = 0;
    for (size_t g = 0; g < v->n; g++)
        if (c->gpus[r] & (1ull << g))
            gpus[n++] = g;
    /* a share less than whole GPUs is on one GPU: IDs of several tell nothing */
    return n == 1 || c->n_ids[VGPU_CORES] >= VGPU_CORES_PER_GPU ? n : 0;
}

/* A live container holding vGPU IDs that no share of the books holds: its share is taken
 * back (the record was lost, or cut short by a crash). Returns true when adopted. */
static bool adopt(struct vgpu *v, const struct vgpu_live *c, uint64_t now_ns)
{
    struct adopt_ctx a = {.c = c};
    for_orphan_dirs(v, find_dir_of, &a);
    const char *uid = v->pods.ops && v->pods.ops->pod_uid
                          ? v->pods.ops->pod_uid(v->pods.self, c->ns, c->pod)
                          : NULL;
    char dir_uid[VGPU_NAME_MAX] = "";
    if (a.found) {
        /* <state>/vgpu/<uid>/<container> */
        const char *end = strrchr(a.dir, '/');
        const char *start = end;
        while (start > a.dir && start[-1] != '/')
            start--;
        snprintf(dir_uid, sizeof(dir_uid), "%.*s", (int)(end - start), start);
    }
    if (!uid)
        uid = dir_uid[0] ? dir_uid : NULL;
    if (!uid || !vgpu_safe_component(uid) || !vgpu_safe_component(c->container) ||
        strlen(c->ns) >= VGPU_NAME_MAX || strlen(c->pod) >= VGPU_NAME_MAX ||
        vgpu_find_assign(v, uid, c->container) >= 0 || vgpu_reserve_slot(v) < 0)
        return false;
    struct assign *x = calloc(1, sizeof(*x));
    if (!x)
        return false;
    snprintf(x->pod_uid, sizeof(x->pod_uid), "%s", uid);
    snprintf(x->ns, sizeof(x->ns), "%s", c->ns);
    snprintf(x->pod, sizeof(x->pod), "%s", c->pod);
    snprintf(x->container, sizeof(x->container), "%s", c->container);
    /* the kubelet's count of IDs is the container's request */
    x->amount[VGPU_CORES] = c->n_ids[VGPU_CORES];
    x->amount[VGPU_MEMORY] = c->n_ids[VGPU_MEMORY];
    for (int r = 0; r < 2; r++) {
        x->done[r] = x->amount[r] > 0;
        x->epoch[r] = v->epoch;
        x->ids[r] = live_ids(c, r);
    }
    uint64_t cores = x->amount[VGPU_CORES];
    x->whole = cores >= VGPU_CORES_PER_GPU && cores % VGPU_CORES_PER_GPU == 0;
    x->n_gpus = adopt_gpus(v, c, &a, x->gpus);
    if (x->whole && x->n_gpus > cores / VGPU_CORES_PER_GPU)
        x->n_gpus = cores / VGPU_CORES_PER_GPU;
    x->answered_ns = now_ns;
    if (a.found) {
        char derived[3 * VGPU_PATH_MAX];
        snprintf(derived, sizeof(derived), "%s/%s/%s", v->state_dir, uid, c->container);
        x->own_dir = strcmp(derived, a.dir) != 0;
        snprintf(x->dir, sizeof(x->dir), "%s", a.dir);
    }
    if (x->n_gpus == 0 || vgpu_assign_paths(v, x) < 0) {
        log_error("vGPU: %s/%s container %s holds vGPU IDs (%zu cores, %zu memory units) that "
                  "no record names, and neither its directory nor its pod tells its GPU: its "
                  "share cannot be accounted for",
                  c->ns, c->pod, c->container, c->n_ids[VGPU_CORES], c->n_ids[VGPU_MEMORY]);
        free(x);
        return false;
    }
    if (!x->whole && !a.found && vgpu_files_rewrite(v, x) < 0)
        log_warn("vGPU: cannot write the files of the adopted share of %s/%s container %s", c->ns,
                 c->pod, c->container);
    v->as[v->n_as++] = x;
    vgpu_journal_set(v, x);
    log_warn("vGPU: %s/%s container %s holds %zu cores and %zu memory units that no record "
             "named: its share on %s is taken back (%s)",
             c->ns, c->pod, c->container, c->n_ids[VGPU_CORES], c->n_ids[VGPU_MEMORY], x->visible,
             a.found ? "from its directory" : "from its IDs");
    return true;
}

static void remove_orphan(struct vgpu *v, const char *dir, void *ud)
{
    size_t *n = ud;
    log_info("vGPU: %s belongs to no share: removed", dir);
    struct assign gone = {0};
    snprintf(gone.dir, sizeof(gone.dir), "%s", dir);
    snprintf(gone.config, sizeof(gone.config), "%s/config", dir);
    snprintf(gone.region, sizeof(gone.region), "%s/region", dir);
    vgpu_remove_files(&gone);
    (*n)++;
}

int vgpu_reconcile(struct vgpu *v, const struct vgpu_live *live, size_t n, uint64_t now_ns,
                   struct vgpu_reconcile_result *ret)
{
    struct vgpu_reconcile_result res = {0};
    size_t *holder = calloc(v->n_as ? v->n_as : 1, sizeof(size_t));
    size_t *holders = calloc(v->n_as ? v->n_as : 1, sizeof(size_t));
    bool *placed = calloc(n ? n : 1, sizeof(bool));
    if (!holder || !holders || !placed) {
        free(holder);
        free(holders);
        free(placed);
        return -ENOMEM;
    }
    bool have_pods = v->pods.ops && v->pods.ops->pod_state;
    /* who holds what: the kubelet's record of the IDs. A container holds the share its primary
     * resource's IDs name (primary_holder), and learns its other resource's IDs; a share only
     * its other resource's IDs name, whose own primary was never answered, was that
     * container's second call taken for a new one: folded in (no container mounts its
     * directory: the mounts come with the primary answer). Otherwise every resource both
     * know must agree (holds). */
    ssize_t *primary = malloc((n ? n : 1) * sizeof(*primary));
    bool *fold = calloc(v->n_as ? v->n_as : 1, sizeof(bool));
    if (!primary || !fold) {
        free(holder);
        free(holders);
        free(placed);
        free(primary);
        free(fold);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        primary[i] = primary_holder(v, &live[i], live, n);
        if (primary[i] >= 0) {
            holder[primary[i]] = i;
            holders[primary[i]]++;
            placed[i] = true;
        }
    }
    for (size_t a = 0; a < v->n_as; a++) {
        struct assign *x = v->as[a];
        enum vgpu_resource xp = share_primary(x), xo = xp == VGPU_CORES ? VGPU_MEMORY : VGPU_CORES;
        for (size_t i = 0; i < n; i++) {
            if (primary[i] >= 0 && (size_t)primary[i] != a && !x->done[xp] && x->ids[xo] &&
                x->ids[xo] == live_ids(&live[i], xo))
                fold[a] = true;
            else if (primary[i] < 0 && holds(x, &live[i])) {
                holder[a] = i;
                holders[a]++;
                placed[i] = true;
            }
        }
        fold[a] = fold[a] && !holders[a];
    }
    /* a container the plain rule finds holding several shares (every ID a gone container
     * held, handed to it again) holds the one matched to it, when there is one */
    for (size_t i = 0; i < n; i++) {
        if (primary[i] >= 0)
            continue;
        size_t n_held = 0, n_own = 0;
        for (size_t a = 0; a < v->n_as; a++)
            if (holders[a] == 1 && holder[a] == i) {
                n_held++;
                n_own += same_container(v->as[a], &live[i]);
            }
        if (n_held < 2 || n_own != 1)
            continue;
        for (size_t a = 0; a < v->n_as; a++)
            if (holders[a] == 1 && holder[a] == i && !same_container(v->as[a], &live[i]))
                holders[a] = 0;
    }
    /* the primary holders learn the container's other resource (its IDs, and its amount:
     * the kubelet's count is the request) */
    for (size_t i = 0; i < n; i++) {
        if (primary[i] < 0)
            continue;
        struct assign *x = v->as[primary[i]];
        bool changed = false;
        for (int r = 0; r < 2; r++) {
            uint64_t h = live_ids(&live[i], r);
            if (h && (x->ids[r] != h || !x->done[r])) {
                if (x->done[r] && x->ids[r])
                    log_warn("vGPU: %s/%s container %s holds the share on %s by its %s; its %s "
                             "are other IDs than that share was answered (a call taken for a "
                             "container the kubelet then failed): the share takes them",
                             live[i].ns, live[i].pod, live[i].container, x->visible,
                             vgpu_resource_label[live_primary(&live[i])], vgpu_resource_label[r]);
                x->ids[r] = h;
                x->done[r] = true;
                x->amount[r] = live[i].n_ids[r];
                changed = true;
            }
        }
        if (changed) {
            vgpu_journal_set(v, x);
            if (!x->whole && vgpu_files_rewrite(v, x) < 0)
                log_warn("vGPU: cannot rewrite the config of %s/%s container %s in %s", x->ns,
                         x->pod, x->container, x->dir);
        }
    }
    /* free what no live container holds: a share answered long enough ago whose pod is gone
     * or terminal (or, with no watch cache, not listed), never a pending or running one's */
    size_t kept = 0;
    for (size_t a = 0; a < v->n_as; a++) {
        struct assign *x = v->as[a];
        bool drop = false;
        if (fold[a]) {
            drop = true;
            log_info("vGPU: %s/%s container %s: its half share on %s was the second call of a "
                     "container whose first was taken for another: folded into that share",
                     x->ns, x->pod, x->container, x->visible);
        } else if (!holders[a]) {
            enum vgpu_pod_state st = pod_state(v, x->pod_uid);
            bool grace = x->answered_ns && now_ns - x->answered_ns < VGPU_RECONCILE_GRACE_NS;
            if (st == VGPU_POD_DONE)
                drop = !grace || (!vgpu_complete(x) && !x->abandoned);
            else if (!have_pods)
                drop = vgpu_complete(x) && !grace;
            /* an abandoned half share no container holds: its admission failed */
            drop = drop || (x->abandoned && !grace);
            res.waiting += st == VGPU_POD_DONE && !drop;
            x->unheld = !drop && vgpu_complete(x) && !grace;
            if (drop)
                log_info("vGPU: %s/%s container %s no longer exists: its share on %s is free "
                         "again",
                         x->ns, x->pod, x->container, x->visible);
        } else {
            x->unheld = false;
            x->abandoned = false;
        }
        if (drop) {
            if (!x->whole)
                vgpu_remove_files(x);
            vgpu_journal_drop(v, x);
            free(x);
            res.freed++;
            continue;
        }
        holder[kept] = holder[a];
        holders[kept] = holders[a];
        v->as[kept++] = x;
    }
    v->n_as = kept;
    /* a share held by another container than the one it was matched to is that one's */
    for (size_t a = 0; a < v->n_as; a++)
        if (holders[a] == 1 && !same_container(v->as[a], &live[holder[a]]) &&
            rename_to(v, v->as[a], &live[holder[a]]))
            res.renamed++;
    /* IDs an older checkpoint did not record: learned from the holder */
    for (size_t a = 0; a < v->n_as; a++) {
        struct assign *x = v->as[a];
        if (holders[a] != 1)
            continue;
        const struct vgpu_live *c = &live[holder[a]];
        bool learned = false;
        for (int r = 0; r < 2; r++)
            if (!x->ids[r] && live_ids(c, r) && x->done[r]) {
                x->ids[r] = live_ids(c, r);
                learned = true;
            }
        if (learned)
            vgpu_journal_set(v, x);
    }
    /* live containers holding vGPU IDs the books do not know: taken back */
    bool scanned = false;
    for (size_t i = 0; i < n; i++) {
        if (placed[i] || !(live[i].n_ids[VGPU_CORES] || live[i].n_ids[VGPU_MEMORY]))
            continue;
        scanned = true;
        if (adopt(v, &live[i], now_ns))
            res.adopted++;
        else
            res.unmatched++;
    }
    /* directories no share owns: left by a crash between making them and recording them,
     * or by an earlier acceld; looked for at the first reconcile and whenever the books
     * missed a container */
    if (!v->dirs_swept || scanned || v->record_lost) {
        for_orphan_dirs(v, remove_orphan, &res.orphans);
        v->dirs_swept = true;
    }
    free(holder);
    free(holders);
    free(placed);
    free(primary);
    free(fold);
    vgpu_recount(v);
    for (size_t i = 0; i < v->n && (v->overcommit_reported || res.adopted); i++) {
        const struct gpu *g = &v->gpus[i];
        if (g->used_cores > VGPU_CORES_PER_GPU || g->used_mem > g->mem_units)
            log_error("vGPU: GPU %s is over-committed by live containers (%llu of %d cores, "
                      "%llu of %llu memory units): nothing more is handed out on it until "
                      "enough of them end",
                      g->uuid, (unsigned long long)g->used_cores, VGPU_CORES_PER_GPU,
                      (unsigned long long)g->used_mem, (unsigned long long)g->mem_units);
    }
    if (v->record_lost)
        log_warn("vGPU: the lost record is rebuilt: %zu share(s) taken back from the kubelet's "
                 "List and the directories, %zu live container(s) not placed",
                 res.adopted, res.unmatched);
    v->record_lost = false;
    v->overcommit_reported = false;
    int r = 0;
    if (res.freed || res.adopted || res.renamed) {
        r = vgpu_checkpoint_write(v);
        vgpu_changed(v);
    }
    if (ret)
        *ret = res;
    return r;
}

size_t vgpu_reconcile_pods(struct vgpu *v)
{
    size_t freed = 0;
    for (size_t a = 0; a < v->n_as;) {
        struct assign *x = v->as[a];
        /* an abandoned half share: with no List to say otherwise, its admission failed */
        if (pod_state(v, x->pod_uid) != VGPU_POD_DONE && !x->abandoned) {
            a++;
            continue;
        }
        log_info("vGPU: %s/%s container %s %s: its share on %s is free again", x->ns, x->pod,
                 x->container,
                 x->abandoned ? "never got its second Allocate (no List to say otherwise)"
                              : "is gone or terminal",
                 x->visible);
        vgpu_drop(v, a, true);
        freed++;
    }
    return freed;
}

bool vgpu_books_need_list(const struct vgpu *v)
{
    return v->record_lost || v->overcommit_reported;
}

bool vgpu_has_pod(const struct vgpu *v, const char *pod_uid)
{
    for (size_t a = 0; a < v->n_as; a++)
        if (strcmp(v->as[a]->pod_uid, pod_uid) == 0)
            return true;
    return false;
}

void vgpu_live_init(struct vgpu_live *l, const char *ns, const char *pod, const char *container)
{
    *l = (struct vgpu_live){.ns = ns, .pod = pod, .container = container};
}

void vgpu_live_add_id(const struct vgpu *v, struct vgpu_live *l, enum vgpu_resource r,
                      const char *id)
{
    l->ids[r] += vgpu_id_hash(id);
    const char *dash = strrchr(id, '-');
    int g = dash ? vgpu_find_gpu(v, id, (size_t)(dash - id)) : -1;
    if (g >= 0)
        l->gpus[r] |= 1ull << g;
    else
        l->other[r] = true;
    l->n_ids[r]++;
}
