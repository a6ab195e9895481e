/* pgpu.c — the pGPU provider: the device table, Allocate and
 * GetPreferredAllocation in plain structs (provider.h); see pgpu.h. Answers
 * point at strings and device nodes precomputed here. */
#include "pgpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi.h"
#include "policy.h"
#include "util.h"

static const char *const control_nodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
#define N_CONTROL ARRAY_SIZE(control_nodes)
#define PGPU_MAX_COMMON 4

#define PGPU_NODE_MAX 64

struct pgpu_dev {
    char id[PGPU_ID_MAX];
    char parent[PGPU_ID_MAX]; /* the GPU whose health it follows */
    int minor;
    int numa;
    bool healthy;
    /* its device nodes: "/dev/nvidia<minor>" first (when it has one), then
     * the extra ones */
    char nodes[1 + PGPU_MAX_EXTRA_NODES][PGPU_NODE_MAX];
    size_t n_nodes;
    char cdi_name[PGPU_ID_MAX + 2 * ACCELD_NAME_MAX + 4];
};

struct pgpu {
    size_t n;
    struct pgpu_dev *devs;
    uint8_t *pcie;
    int *nvlinks;
    int *numa;
    struct policy_topo topo;

    char dev_root[ACCELD_PATH_MAX];
    enum acceld_strategy strategy;
    char cdi_vendor[ACCELD_NAME_MAX];
    char cdi_class[ACCELD_NAME_MAX];
    char cdi_tag[ACCELD_NAME_MAX];
    char env_key[ACCELD_NAME_MAX];
    char permissions[8];
    char common_paths[PGPU_MAX_COMMON][PGPU_NODE_MAX];
    size_t n_common;
    size_t max_nodes; /* the most nodes of one device */

    uint64_t generation;

    /* Allocate's answer: one block, grown to the largest answer so far and
     * reused, so Allocate allocates nothing once warm. */
    uint8_t *reply_buf;
    size_t reply_cap;

    /* ID -> index: open addressing over the node's own IDs (slot = index + 1,
     * 0 = empty), at most half full, so a lookup costs one hash of the
     * request's string and a short probe whatever the request holds. */
    uint32_t *slots;
    size_t slot_mask;
};

/* FNV-1a (public domain constants: offset basis 2166136261, prime 16777619). */
static uint32_t id_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static int index_build(struct pgpu *p)
{
    size_t n_slots = 8;
    while (n_slots < 2 * p->n)
        n_slots *= 2;
    p->slots = calloc(n_slots, sizeof(*p->slots));
    if (!p->slots)
        return -ENOMEM;
    p->slot_mask = n_slots - 1;
    for (size_t i = 0; i < p->n; i++) {
        size_t s = id_hash(p->devs[i].id) & p->slot_mask;
        while (p->slots[s])
            s = (s + 1) & p->slot_mask;
        p->slots[s] = (uint32_t)i + 1;
    }
    return 0;
}

static const char visible_key[] = "NVIDIA_VISIBLE_DEVICES";

/* Recomputes what depends on the options: control nodes present under the
 * dev root, CDI names. */
static int apply_options(struct pgpu *p, const struct pgpu_options *o)
{
    const char *env = o->env_key ? o->env_key : visible_key;
    const char *perm = o->permissions ? o->permissions : "rw";
    if (strlen(o->dev_root) >= sizeof(p->dev_root) ||
        strlen(o->cdi_vendor) >= sizeof(p->cdi_vendor) ||
        strlen(o->cdi_class) >= sizeof(p->cdi_class) ||
        (o->cdi_tag && strlen(o->cdi_tag) >= sizeof(p->cdi_tag)) ||
        strlen(env) >= sizeof(p->env_key) || strlen(perm) >= sizeof(p->permissions) ||
        o->n_common > PGPU_MAX_COMMON)
        return -ENAMETOOLONG;
    for (size_t i = 0; i < o->n_common; i++)
        if (strlen(o->common_nodes[i]) >= PGPU_NODE_MAX)
            return -ENAMETOOLONG;
    snprintf(p->dev_root, sizeof(p->dev_root), "%s", o->dev_root);
    snprintf(p->cdi_vendor, sizeof(p->cdi_vendor), "%s", o->cdi_vendor);
    snprintf(p->cdi_class, sizeof(p->cdi_class), "%s", o->cdi_class);
    snprintf(p->cdi_tag, sizeof(p->cdi_tag), "%s", o->cdi_tag ? o->cdi_tag : "");
    snprintf(p->env_key, sizeof(p->env_key), "%s", env);
    snprintf(p->permissions, sizeof(p->permissions), "%s", perm);
    p->strategy = o->strategy;
    p->n_common = 0;
    if (o->common_nodes) {
        for (size_t i = 0; i < o->n_common; i++)
            snprintf(p->common_paths[p->n_common++], PGPU_NODE_MAX, "%s", o->common_nodes[i]);
    }
    for (size_t i = 0; !o->common_nodes && i < N_CONTROL; i++) {
        char host[ACCELD_PATH_MAX + 32];
        snprintf(host, sizeof(host), "%s/%s", p->dev_root, control_nodes[i]);
        if (access(host, F_OK) != 0)
            continue;
        size_t c = p->n_common++;
        snprintf(p->common_paths[c], sizeof(p->common_paths[c]), "/dev/%s", control_nodes[i]);
    }
    for (size_t i = 0; i < p->n; i++) {
        struct pgpu_dev *d = &p->devs[i];
        snprintf(d->cdi_name, sizeof(d->cdi_name), "%s/%s=%s", p->cdi_vendor, p->cdi_class, d->id);
    }
    return 0;
}

int pgpu_new(const struct pgpu_gpu_desc *gpus, size_t n, const uint8_t *pcie, const int *nvlinks,
             const struct pgpu_options *opts, struct pgpu **ret)
{
    for (size_t i = 0; i < n; i++) {
        if (!gpus[i].uuid || !gpus[i].uuid[0] || strlen(gpus[i].uuid) >= PGPU_ID_MAX ||
            (gpus[i].parent_uuid && strlen(gpus[i].parent_uuid) >= PGPU_ID_MAX) ||
            gpus[i].n_extra > PGPU_MAX_EXTRA_NODES)
            return -EINVAL;
        for (size_t k = 0; k < gpus[i].n_extra; k++)
            if (!gpus[i].extra_nodes[k] || strlen(gpus[i].extra_nodes[k]) >= PGPU_NODE_MAX)
                return -EINVAL;
        for (size_t j = 0; j < i; j++)
            if (strcmp(gpus[i].uuid, gpus[j].uuid) == 0)
                return -EINVAL;
    }
    struct pgpu *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->n = n;
    p->devs = calloc(n ? n : 1, sizeof(*p->devs));
    p->numa = calloc(n ? n : 1, sizeof(int));
    if (pcie)
        p->pcie = malloc(n ? n * n : 1);
    if (nvlinks)
        p->nvlinks = malloc((n ? n * n : 1) * sizeof(int));
    if (!p->devs || !p->numa || (pcie && !p->pcie) || (nvlinks && !p->nvlinks)) {
        pgpu_free(p);
        return -ENOMEM;
    }
    if (pcie)
        memcpy(p->pcie, pcie, n * n);
    if (nvlinks)
        memcpy(p->nvlinks, nvlinks, n * n * sizeof(int));
    for (size_t i = 0; i < n; i++) {
        struct pgpu_dev *d = &p->devs[i];
        snprintf(d->id, sizeof(d->id), "%s", gpus[i].uuid);
        snprintf(d->parent, sizeof(d->parent), "%s",
                 gpus[i].parent_uuid ? gpus[i].parent_uuid : gpus[i].uuid);
        d->minor = gpus[i].minor;
        d->numa = gpus[i].numa_node;
        d->healthy = gpus[i].healthy;
        p->numa[i] = d->numa;
        if (d->minor >= 0)
            snprintf(d->nodes[d->n_nodes++], PGPU_NODE_MAX, "/dev/nvidia%d", d->minor);
        for (size_t k = 0; k < gpus[i].n_extra; k++)
            snprintf(d->nodes[d->n_nodes++], PGPU_NODE_MAX, "%s", gpus[i].extra_nodes[k]);
        if (d->n_nodes > p->max_nodes)
            p->max_nodes = d->n_nodes;
    }
    p->topo = (struct policy_topo){(int)n, p->pcie, p->nvlinks, p->numa};
    int r = index_build(p);
    if (r == 0)
        r = apply_options(p, opts);
    if (r < 0) {
        pgpu_free(p);
        return r;
    }
    p->generation = 1;
    *ret = p;
    return 0;
}

struct pgpu *pgpu_free(struct pgpu *p)
{
    if (!p)
        return NULL;
    free(p->devs);
    free(p->pcie);
    free(p->nvlinks);
    free(p->numa);
    free(p->reply_buf);
    free(p->slots);
    free(p);
    return NULL;
}

int pgpu_set_options(struct pgpu *p, const struct pgpu_options *opts)
{
    /* apply_options checks every length before it changes anything */
    return apply_options(p, opts);
}

size_t pgpu_count(const struct pgpu *p)
{
    return p->n;
}

int pgpu_find(const struct pgpu *p, const char *uuid)
{
    for (size_t s = id_hash(uuid) & p->slot_mask; p->slots[s]; s = (s + 1) & p->slot_mask) {
        size_t i = p->slots[s] - 1;
        if (strcmp(p->devs[i].id, uuid) == 0)
            return (int)i;
    }
    return -1;
}

const char *pgpu_id(const struct pgpu *p, size_t idx)
{
    return idx < p->n ? p->devs[idx].id : NULL;
}

bool pgpu_healthy(const struct pgpu *p, size_t idx)
{
    return idx < p->n && p->devs[idx].healthy;
}

bool pgpu_set_healthy(struct pgpu *p, size_t idx, bool healthy)
{
    if (idx >= p->n || p->devs[idx].healthy == healthy)
        return false;
    p->devs[idx].healthy = healthy;
    p->generation++;
    return true;
}

bool pgpu_set_gpu_healthy(struct pgpu *p, const char *gpu_uuid, bool healthy)
{
    bool changed = false;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->devs[i].parent, gpu_uuid) == 0)
            changed |= pgpu_set_healthy(p, i, healthy);
    return changed;
}

uint64_t pgpu_generation(const struct pgpu *p)
{
    return p->generation;
}

/* Appends node to nodes[0..*n) unless it is there (two MIG devices of one GPU
 * share its /dev/nvidiaN). */
static void add_node(struct acceld_devnode *nodes, size_t *n, const char *node, const char *perm)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(nodes[i].host_path, node) == 0)
            return;
    nodes[(*n)++] = (struct acceld_devnode){node, node, perm};
}

static size_t align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

#define REPLY_KEEP (64u * 1024) /* the most of Allocate's answer block kept between calls */

static int pgpu_allocate(void *self, const struct acceld_alloc_req *reqs, size_t n,
                         struct acceld_alloc *out, char *err, size_t errlen)
{
    struct pgpu *p = self;
    size_t bytes = 0;
    for (size_t c = 0; c < n; c++) {
        size_t k = reqs[c].n_devs;
        bytes += align16(sizeof(struct acceld_kv)) + align16(k * PGPU_ID_MAX + 1) +
                 align16((k * p->max_nodes + p->n_common) * sizeof(struct acceld_devnode)) +
                 align16(k * sizeof(char *));
    }
    /* A rare huge answer (thousands of containers) is not kept for good. */
    if (p->reply_cap > REPLY_KEEP && bytes <= REPLY_KEEP) {
        free(p->reply_buf);
        p->reply_buf = NULL;
        p->reply_cap = 0;
    }
    if (bytes > p->reply_cap) {
        size_t cap = bytes < 4096 ? 4096 : bytes;
        uint8_t *b = malloc(cap);
        if (!b) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
        free(p->reply_buf);
        p->reply_buf = b;
        p->reply_cap = cap;
    }
    uint8_t *at = p->reply_buf;
    for (size_t c = 0; c < n; c++) {
        size_t k = reqs[c].n_devs;
        struct acceld_kv *env = (void *)at;
        at += align16(sizeof(*env));
        char *value = (char *)at;
        at += align16(k * PGPU_ID_MAX + 1);
        struct acceld_devnode *nodes = (void *)at;
        at += align16((k * p->max_nodes + p->n_common) * sizeof(*nodes));
        const char **cdis = (void *)at;
        at += align16(k * sizeof(char *));
        size_t vlen = 0, nn = 0;
        for (size_t i = 0; i < k; i++) {
            const struct pgpu_dev *d = &p->devs[reqs[c].devs[i]];
            for (size_t m = 0; m < d->n_nodes; m++)
                add_node(nodes, &nn, d->nodes[m], p->permissions);
            cdis[i] = d->cdi_name;
            size_t l = strlen(d->id);
            if (vlen)
                value[vlen++] = ',';
            memcpy(value + vlen, d->id, l);
            vlen += l;
        }
        value[vlen] = '\0';
        for (size_t i = 0; i < p->n_common; i++)
            add_node(nodes, &nn, p->common_paths[i], p->permissions);
        out[c] = (struct acceld_alloc){0};
        out[c].devices = nodes;
        out[c].n_devices = nn;
        if (p->strategy == ACCELD_STRATEGY_CDI) {
            out[c].cdi_devices = cdis;
            out[c].n_cdi_devices = k;
        } else {
            *env = (struct acceld_kv){p->env_key, value};
            out[c].envs = env;
            out[c].n_envs = 1;
        }
    }
    return 0;
}
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Maps an ID to a policy number: the GPU index when known, else n + its rank
 * among the sorted unknown IDs (so the answer does not depend on order). */
static int id_number(const struct pgpu *p, const char *id, const char **unknown, size_t n_unknown)
{
    int idx = pgpu_find(p, id);
    if (idx >= 0)
        return idx;
    const char **hit = bsearch(&id, unknown, n_unknown, sizeof(char *), cmp_str);
    return hit ? (int)(p->n + (size_t)(hit - unknown)) : -1;
}

static const char *number_id(const struct pgpu *p, int num, const char **unknown)
{
    return (size_t)num < p->n ? p->devs[num].id : unknown[(size_t)num - p->n];
}

static int pgpu_prefer(void *self, const struct acceld_prefer_req *req, const char **out_ids,
                       char *err, size_t errlen)
{
    const struct pgpu *p = self;
    size_t total = req->n_available + req->n_must_include;
    int r = -ENOMEM;
    const char **unknown = malloc((total ? total : 1) * sizeof(char *));
    int *avail = malloc((req->n_available + 1) * sizeof(int));
    int *must = malloc((req->n_must_include + 1) * sizeof(int));
    int *out = malloc(req->size * sizeof(int));
    if (!unknown || !avail || !must || !out) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    size_t n_unknown = 0;
    for (size_t i = 0; i < req->n_available; i++)
        if (pgpu_find(p, req->available[i]) < 0)
            unknown[n_unknown++] = req->available[i];
    for (size_t i = 0; i < req->n_must_include; i++)
        if (pgpu_find(p, req->must_include[i]) < 0)
            unknown[n_unknown++] = req->must_include[i];
    qsort(unknown, n_unknown, sizeof(char *), cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n_unknown; i++)
        if (u == 0 || strcmp(unknown[u - 1], unknown[i]) != 0)
            unknown[u++] = unknown[i];
    n_unknown = u;
    for (size_t i = 0; i < req->n_available; i++)
        avail[i] = id_number(p, req->available[i], unknown, n_unknown);
    for (size_t i = 0; i < req->n_must_include; i++)
        must[i] = id_number(p, req->must_include[i], unknown, n_unknown);
    r = policy_prefer(&p->topo, avail, req->n_available, must, req->n_must_include, req->size, out);
    if (r < 0) {
        r = -EINVAL;
        snprintf(err, errlen,
                 "cannot pick %zu devices from %zu available with %zu that must be "
                 "included",
                 req->size, req->n_available, req->n_must_include);
        goto done;
    }
    for (size_t i = 0; i < req->size; i++)
        out_ids[i] = number_id(p, out[i], unknown);
    r = 0;
done:
    free(unknown);
    free(avail);
    free(must);
    free(out);
    return r;
}

static size_t op_count(void *self)
{
    return pgpu_count(self);
}

static void op_device(void *self, size_t idx, struct acceld_device *out)
{
    const struct pgpu_dev *d = &((struct pgpu *)self)->devs[idx];
    *out = (struct acceld_device){d->id, d->healthy, d->numa};
}

static int op_find(void *self, const char *id)
{
    return pgpu_find(self, id);
}

static uint64_t op_generation(void *self)
{
    return pgpu_generation(self);
}

static bool op_set_gpu_health(void *self, const char *uuid, bool healthy)
{
    return pgpu_set_gpu_healthy(self, uuid, healthy);
}

static const struct acceld_provider_ops pgpu_ops = {
    .count = op_count,
    .device = op_device,
    .find = op_find,
    .generation = op_generation,
    .prefer = pgpu_prefer,
    .allocate = pgpu_allocate,
    .set_gpu_health = op_set_gpu_health,
};

struct acceld_provider pgpu_provider(struct pgpu *p)
{
    return (struct acceld_provider){&pgpu_ops, p};
}

int pgpu_write_cdi(const struct pgpu *p, const char *dir)
{
    size_t per = 1 + PGPU_MAX_EXTRA_NODES;
    struct cdi_device *devs = calloc(p->n ? p->n : 1, sizeof(*devs));
    const char **nodes = calloc(p->n ? p->n * per : 1, sizeof(char *));
    const char *common[PGPU_MAX_COMMON];
    if (!devs || !nodes) {
        free(devs);
        free(nodes);
        return -ENOMEM;
    }
    for (size_t i = 0; i < p->n; i++) {
        for (size_t m = 0; m < p->devs[i].n_nodes; m++)
            nodes[i * per + m] = p->devs[i].nodes[m];
        devs[i] = (struct cdi_device){p->devs[i].id, &nodes[i * per], p->devs[i].n_nodes};
    }
    for (size_t i = 0; i < p->n_common; i++)
        common[i] = p->common_paths[i];
    int r =
        cdi_spec_write_tagged(dir, p->cdi_vendor, p->cdi_class, p->cdi_tag[0] ? p->cdi_tag : NULL,
                              devs, p->n, common, p->n_common);
    free(devs);
    free(nodes);
    return r;
}
