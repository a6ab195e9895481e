/* pgpu.c — the pGPU provider's device table, Allocate and
 * GetPreferredAllocation; see pgpu.h. Responses are built in one arena per
 * call that points at strings and DeviceSpecs precomputed here. */
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

struct pgpu_dev {
    char id[PGPU_ID_MAX];
    int minor;
    int numa;
    bool healthy;
    char node[32]; /* "/dev/nvidia<minor>" */
    V1beta1__DeviceSpec spec;
    char cdi_name[PGPU_ID_MAX + 2 * ACCELD_NAME_MAX + 4];
    V1beta1__CDIDevice cdi;
    V1beta1__CDIDevice *cdi_ptr;
    /* ListAndWatch entry */
    V1beta1__Device dev;
    V1beta1__TopologyInfo topo;
    V1beta1__NUMANode numa_node;
    V1beta1__NUMANode *numa_ptr;
};

#define REPLY_KEEP (64u * 1024) /* the most of Allocate's answer block kept between calls */

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
    char common_paths[N_CONTROL][32];
    V1beta1__DeviceSpec common[N_CONTROL];
    size_t n_common;

    uint64_t generation;
    uint8_t *list_buf;
    size_t list_len;
    uint64_t list_gen; /* generation list_buf was packed for; 0 = none */

    /* Allocate builds its answer here, grown to the largest answer so far
     * and reused, so Allocate allocates nothing once warm. */
    uint8_t *reply_buf;
    size_t reply_cap;

    /* ID -> index: open addressing over the node's own IDs (slot = index + 1,
     * 0 = empty), at most half full, so a lookup costs one hash of the
     * request's string and a short probe whatever the request holds. */
    uint32_t *slots;
    size_t slot_mask;
    /* Allocate's duplicate check: seen[i] == epoch when device i was already
     * named in the request being checked (no clearing, no allocation). */
    uint32_t *seen;
    uint32_t epoch;
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
    p->seen = calloc(p->n ? p->n : 1, sizeof(*p->seen));
    if (!p->slots || !p->seen)
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

static char healthy_str[] = "Healthy";
static char unhealthy_str[] = "Unhealthy";
static char rw_str[] = "rw";
static char visible_key[] = "NVIDIA_VISIBLE_DEVICES";

/* Recomputes what depends on the options: control nodes present under the
 * dev root, CDI names. */
static int apply_options(struct pgpu *p, const struct pgpu_options *o)
{
    if (strlen(o->dev_root) >= sizeof(p->dev_root) ||
        strlen(o->cdi_vendor) >= sizeof(p->cdi_vendor) ||
        strlen(o->cdi_class) >= sizeof(p->cdi_class))
        return -ENAMETOOLONG;
    snprintf(p->dev_root, sizeof(p->dev_root), "%s", o->dev_root);
    snprintf(p->cdi_vendor, sizeof(p->cdi_vendor), "%s", o->cdi_vendor);
    snprintf(p->cdi_class, sizeof(p->cdi_class), "%s", o->cdi_class);
    p->strategy = o->strategy;
    p->n_common = 0;
    for (size_t i = 0; i < N_CONTROL; i++) {
        char host[ACCELD_PATH_MAX + 32];
        snprintf(host, sizeof(host), "%s/%s", p->dev_root, control_nodes[i]);
        if (access(host, F_OK) != 0)
            continue;
        size_t c = p->n_common++;
        snprintf(p->common_paths[c], sizeof(p->common_paths[c]), "/dev/%s", control_nodes[i]);
        V1beta1__DeviceSpec init = V1BETA1__DEVICE_SPEC__INIT;
        p->common[c] = init;
        p->common[c].container_path = p->common_paths[c];
        p->common[c].host_path = p->common_paths[c];
        p->common[c].permissions = rw_str;
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
        if (!gpus[i].uuid || !gpus[i].uuid[0] || strlen(gpus[i].uuid) >= PGPU_ID_MAX)
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
        d->minor = gpus[i].minor;
        d->numa = gpus[i].numa_node;
        d->healthy = gpus[i].healthy;
        p->numa[i] = d->numa;
        snprintf(d->node, sizeof(d->node), "/dev/nvidia%d", d->minor);
        V1beta1__DeviceSpec spec = V1BETA1__DEVICE_SPEC__INIT;
        d->spec = spec;
        d->spec.container_path = d->node;
        d->spec.host_path = d->node;
        d->spec.permissions = rw_str;
        V1beta1__CDIDevice cdi = V1BETA1__CDIDEVICE__INIT;
        d->cdi = cdi;
        d->cdi.name = d->cdi_name;
        d->cdi_ptr = &d->cdi;
        V1beta1__Device dev = V1BETA1__DEVICE__INIT;
        d->dev = dev;
        d->dev.id = d->id;
        d->dev.health = d->healthy ? healthy_str : unhealthy_str;
        if (d->numa >= 0) {
            V1beta1__TopologyInfo topo = V1BETA1__TOPOLOGY_INFO__INIT;
            V1beta1__NUMANode nn = V1BETA1__NUMANODE__INIT;
            d->topo = topo;
            d->numa_node = nn;
            d->numa_node.id = d->numa;
            d->numa_ptr = &d->numa_node;
            d->topo.n_nodes = 1;
            d->topo.nodes = &d->numa_ptr;
            d->dev.topology = &d->topo;
        }
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
    free(p->list_buf);
    free(p->reply_buf);
    free(p->slots);
    free(p->seen);
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
    p->devs[idx].dev.health = healthy ? healthy_str : unhealthy_str;
    p->generation++;
    return true;
}

uint64_t pgpu_generation(const struct pgpu *p)
{
    return p->generation;
}

int pgpu_list_bytes(struct pgpu *p, const uint8_t **ret_data, size_t *ret_len)
{
    if (p->list_gen != p->generation || !p->list_buf) {
        V1beta1__Device **ptrs = calloc(p->n ? p->n : 1, sizeof(*ptrs));
        if (!ptrs)
            return -ENOMEM;
        for (size_t i = 0; i < p->n; i++)
            ptrs[i] = &p->devs[i].dev;
        V1beta1__ListAndWatchResponse m = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
        m.n_devices = p->n;
        m.devices = ptrs;
        size_t len = v1beta1__list_and_watch_response__get_packed_size(&m);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf) {
            free(ptrs);
            return -ENOMEM;
        }
        v1beta1__list_and_watch_response__pack(&m, buf);
        free(ptrs);
        free(p->list_buf);
        p->list_buf = buf;
        p->list_len = len;
        p->list_gen = p->generation;
    }
    *ret_data = p->list_buf;
    *ret_len = p->list_len;
    return 0;
}

/* ---- arena: one block per response (Allocate reuses its block) ---- */

struct arena {
    uint8_t *base;
    size_t used, size;
};

static size_t align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static void *arena_take(struct arena *a, size_t n)
{
    n = align16(n);
    if (a->used + n > a->size)
        return NULL; /* cannot happen: sizes are computed first */
    void *p = a->base + a->used;
    a->used += n;
    return p;
}

/* Appends "id, " to a bounded message. */
static void msg_append(char *buf, size_t len, size_t *pos, const char *s)
{
    if (*pos >= len)
        return;
    int m = snprintf(buf + *pos, len - *pos, "%s%s", *pos ? ", " : "", s);
    if (m > 0)
        *pos += (size_t)m;
}

/* Refuses a request that names more device IDs than the node has devices,
 * before any per-ID work: no such request can be right (a device goes to one
 * container once), and the bound keeps every later step small. */
static int check_count(const struct pgpu *p, const char *what, size_t count, char *err,
                       size_t errlen)
{
    if (count <= p->n)
        return 0;
    snprintf(err, errlen,
             "%s names %zu device IDs, more than the %zu devices this node has: refused (a "
             "request for this node lists only its own devices, each once; check the client)",
             what, count, p->n);
    return -EINVAL;
}

int pgpu_allocate(struct pgpu *p, const V1beta1__AllocateRequest *req,
                  V1beta1__AllocateResponse **ret_resp, char *err, size_t errlen)
{
    /* Validate everything first: a bad ID anywhere fails the whole request. */
    char unknown[512], unhealthy[512], twice[512];
    size_t nu = 0, nh = 0, nt = 0;
    unknown[0] = unhealthy[0] = twice[0] = '\0';
    size_t bytes = align16(sizeof(V1beta1__AllocateResponse)) +
                   align16(req->n_container_requests * sizeof(void *));
    if (req->n_container_requests == 0) {
        snprintf(err, errlen, "allocate request has no container requests");
        return -EINVAL;
    }
    size_t total = 0;
    for (size_t c = 0; c < req->n_container_requests; c++) {
        const V1beta1__ContainerAllocateRequest *cr = req->container_requests[c];
        if (cr->n_devices_ids == 0) {
            snprintf(err, errlen, "container request %zu has no device IDs", c);
            return -EINVAL;
        }
        total += cr->n_devices_ids;
    }
    if (check_count(p, "allocate request", total, err, errlen) < 0)
        return -EINVAL;
    if (++p->epoch == 0) { /* wrapped: old marks could match again */
        memset(p->seen, 0, p->n * sizeof(*p->seen));
        p->epoch = 1;
    }
    for (size_t c = 0; c < req->n_container_requests; c++) {
        const V1beta1__ContainerAllocateRequest *cr = req->container_requests[c];
        for (size_t i = 0; i < cr->n_devices_ids; i++) {
            int idx = pgpu_find(p, cr->devices_ids[i]);
            if (idx < 0) {
                msg_append(unknown, sizeof(unknown), &nu, cr->devices_ids[i]);
            } else if (p->seen[idx] == p->epoch) {
                msg_append(twice, sizeof(twice), &nt, cr->devices_ids[i]);
            } else {
                p->seen[idx] = p->epoch;
                if (!p->devs[idx].healthy)
                    msg_append(unhealthy, sizeof(unhealthy), &nh, cr->devices_ids[i]);
            }
        }
        size_t k = cr->n_devices_ids;
        bytes += align16(sizeof(V1beta1__ContainerAllocateResponse));
        bytes += align16(sizeof(V1beta1__ContainerAllocateResponse__EnvsEntry));
        bytes += align16(sizeof(void *));
        bytes += align16(k * PGPU_ID_MAX + 1);
        bytes += align16((k + p->n_common) * sizeof(void *));
        bytes += align16(k * sizeof(void *));
    }
    if (nu || nh || nt) {
        snprintf(err, errlen, "%s%s%s%s%s%s%s%s%s%s%s", nu ? "unknown device IDs: " : "", unknown,
                 nu ? " (not a GPU of this node: check the resource name)" : "",
                 nu && (nh || nt) ? "; " : "", nh ? "unhealthy devices: " : "", unhealthy,
                 nh ? " (wait for them to recover or pick others)" : "", nh && nt ? "; " : "",
                 nt ? "device IDs named more than once: " : "", twice,
                 nt ? " (a device goes to one container once: fix the client)" : "");
        return -EINVAL;
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
        if (!b)
            return -ENOMEM;
        free(p->reply_buf);
        p->reply_buf = b;
        p->reply_cap = cap;
    }
    struct arena a = {p->reply_buf, 0, bytes};
    V1beta1__AllocateResponse *resp = arena_take(&a, sizeof(*resp));
    V1beta1__AllocateResponse rinit = V1BETA1__ALLOCATE_RESPONSE__INIT;
    *resp = rinit;
    resp->n_container_responses = req->n_container_requests;
    resp->container_responses = arena_take(&a, req->n_container_requests * sizeof(void *));
    for (size_t c = 0; c < req->n_container_requests; c++) {
        const V1beta1__ContainerAllocateRequest *cr = req->container_requests[c];
        size_t k = cr->n_devices_ids;
        V1beta1__ContainerAllocateResponse *out = arena_take(&a, sizeof(*out));
        V1beta1__ContainerAllocateResponse cinit = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        *out = cinit;
        resp->container_responses[c] = out;
        V1beta1__ContainerAllocateResponse__EnvsEntry *env = arena_take(&a, sizeof(*env));
        V1beta1__ContainerAllocateResponse__EnvsEntry einit =
            V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ENVS_ENTRY__INIT;
        V1beta1__ContainerAllocateResponse__EnvsEntry **envs = arena_take(&a, sizeof(void *));
        char *value = arena_take(&a, k * PGPU_ID_MAX + 1);
        V1beta1__DeviceSpec **specs = arena_take(&a, (k + p->n_common) * sizeof(void *));
        V1beta1__CDIDevice **cdis = arena_take(&a, k * sizeof(void *));
        size_t n_specs = 0, n_ids = 0, vlen = 0;
        for (size_t i = 0; i < k; i++) {
            const struct pgpu_dev *d = &p->devs[pgpu_find(p, cr->devices_ids[i])];
            specs[n_specs++] = (V1beta1__DeviceSpec *)&d->spec;
            cdis[n_ids++] = (V1beta1__CDIDevice *)&d->cdi;
            size_t l = strlen(d->id);
            if (vlen)
                value[vlen++] = ',';
            memcpy(value + vlen, d->id, l);
            vlen += l;
        }
        value[vlen] = '\0';
        for (size_t i = 0; i < p->n_common; i++)
            specs[n_specs++] = (V1beta1__DeviceSpec *)&p->common[i];
        out->n_devices = n_specs;
        out->devices = specs;
        if (p->strategy == ACCELD_STRATEGY_CDI) {
            out->n_cdi_devices = n_ids;
            out->cdi_devices = cdis;
        } else {
            *env = einit;
            env->key = visible_key;
            env->value = value;
            envs[0] = env;
            out->n_envs = 1;
            out->envs = envs;
        }
    }
    *ret_resp = resp;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Maps an ID to a policy number: the GPU index when known, else n + its rank
 * among the sorted unknown IDs (so the answer does not depend on order). */
static int id_number(const struct pgpu *p, const char *id, char **unknown, size_t n_unknown)
{
    int idx = pgpu_find(p, id);
    if (idx >= 0)
        return idx;
    char **hit = bsearch(&id, unknown, n_unknown, sizeof(char *), cmp_str);
    return hit ? (int)(p->n + (size_t)(hit - unknown)) : -1;
}

static const char *number_id(const struct pgpu *p, int num, char **unknown)
{
    return (size_t)num < p->n ? p->devs[num].id : unknown[(size_t)num - p->n];
}

static int prefer_one(const struct pgpu *p, const V1beta1__ContainerPreferredAllocationRequest *cr,
                      size_t c, char **out_ids, char *err, size_t errlen)
{
    size_t total = cr->n_available_deviceids + cr->n_must_include_deviceids;
    int r = -ENOMEM;
    char **unknown = malloc((total ? total : 1) * sizeof(char *));
    int *avail = malloc((cr->n_available_deviceids + 1) * sizeof(int));
    int *must = malloc((cr->n_must_include_deviceids + 1) * sizeof(int));
    int *out = malloc(((size_t)(cr->allocation_size > 0 ? cr->allocation_size : 1)) * sizeof(int));
    if (!unknown || !avail || !must || !out)
        goto done;
    size_t n_unknown = 0;
    for (size_t i = 0; i < cr->n_available_deviceids; i++)
        if (pgpu_find(p, cr->available_deviceids[i]) < 0)
            unknown[n_unknown++] = cr->available_deviceids[i];
    for (size_t i = 0; i < cr->n_must_include_deviceids; i++)
        if (pgpu_find(p, cr->must_include_deviceids[i]) < 0)
            unknown[n_unknown++] = cr->must_include_deviceids[i];
    qsort(unknown, n_unknown, sizeof(char *), cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n_unknown; i++)
        if (u == 0 || strcmp(unknown[u - 1], unknown[i]) != 0)
            unknown[u++] = unknown[i];
    n_unknown = u;
    for (size_t i = 0; i < cr->n_available_deviceids; i++)
        avail[i] = id_number(p, cr->available_deviceids[i], unknown, n_unknown);
    for (size_t i = 0; i < cr->n_must_include_deviceids; i++)
        must[i] = id_number(p, cr->must_include_deviceids[i], unknown, n_unknown);
    r = -EINVAL;
    if (cr->allocation_size <= 0) {
        snprintf(err, errlen, "container request %zu: allocation_size %d is not positive", c,
                 cr->allocation_size);
        goto done;
    }
    r = policy_prefer(&p->topo, avail, cr->n_available_deviceids, must,
                      cr->n_must_include_deviceids, (size_t)cr->allocation_size, out);
    if (r < 0) {
        snprintf(err, errlen,
                 "container request %zu: cannot pick %d devices from %zu available with %zu "
                 "that must be included",
                 c, cr->allocation_size, cr->n_available_deviceids, cr->n_must_include_deviceids);
        goto done;
    }
    for (int i = 0; i < cr->allocation_size; i++)
        out_ids[i] = (char *)number_id(p, out[i], unknown);
    r = 0;
done:
    free(unknown);
    free(avail);
    free(must);
    free(out);
    return r;
}

int pgpu_prefer(const struct pgpu *p, const V1beta1__PreferredAllocationRequest *req,
                V1beta1__PreferredAllocationResponse **ret_resp, char *err, size_t errlen)
{
    size_t nc = req->n_container_requests;
    /* Each container asks for at least one device and no two share one. */
    if (nc > p->n) {
        snprintf(err, errlen,
                 "preferred-allocation request has %zu container requests, more than the %zu "
                 "devices this node has: refused (check the client)",
                 nc, p->n);
        return -EINVAL;
    }
    size_t bytes =
        align16(sizeof(V1beta1__PreferredAllocationResponse)) + align16(nc * sizeof(void *));
    for (size_t c = 0; c < nc; c++) {
        const V1beta1__ContainerPreferredAllocationRequest *cr = req->container_requests[c];
        int32_t size = cr->allocation_size;
        bool over_avail = cr->n_available_deviceids > p->n;
        if (over_avail || cr->n_must_include_deviceids > p->n) {
            char what[64];
            snprintf(what, sizeof(what), "container request %zu: %s", c,
                     over_avail ? "available_deviceIDs" : "must_include_deviceIDs");
            return check_count(
                p, what, over_avail ? cr->n_available_deviceids : cr->n_must_include_deviceids, err,
                errlen);
        }
        /* Refused before anything is sized by it: a hostile size must not
         * become a huge allocation. */
        if (size > 0 && (size_t)size > cr->n_available_deviceids + cr->n_must_include_deviceids) {
            snprintf(err, errlen,
                     "container request %zu: cannot pick %d devices from %zu available with %zu "
                     "that must be included",
                     c, size, cr->n_available_deviceids, cr->n_must_include_deviceids);
            return -EINVAL;
        }
        bytes += align16(sizeof(V1beta1__ContainerPreferredAllocationResponse));
        bytes += align16((size_t)(size > 0 ? size : 0) * sizeof(void *));
    }
    struct arena a = {malloc(bytes), 0, bytes};
    if (!a.base)
        return -ENOMEM;
    V1beta1__PreferredAllocationResponse *resp = arena_take(&a, sizeof(*resp));
    V1beta1__PreferredAllocationResponse init = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    *resp = init;
    resp->n_container_responses = nc;
    resp->container_responses = arena_take(&a, nc * sizeof(void *));
    for (size_t c = 0; c < nc; c++) {
        const V1beta1__ContainerPreferredAllocationRequest *cr = req->container_requests[c];
        V1beta1__ContainerPreferredAllocationResponse *out = arena_take(&a, sizeof(*out));
        V1beta1__ContainerPreferredAllocationResponse cinit =
            V1BETA1__CONTAINER_PREFERRED_ALLOCATION_RESPONSE__INIT;
        *out = cinit;
        resp->container_responses[c] = out;
        size_t size = (size_t)(cr->allocation_size > 0 ? cr->allocation_size : 0);
        out->deviceids = arena_take(&a, size * sizeof(void *));
        int r = prefer_one(p, cr, c, out->deviceids, err, errlen);
        if (r < 0) {
            free(a.base);
            return r;
        }
        out->n_deviceids = size;
    }
    *ret_resp = resp;
    return 0;
}

void pgpu_prefer_response_free(V1beta1__PreferredAllocationResponse *resp)
{
    free(resp);
}

int pgpu_write_cdi(const struct pgpu *p, const char *dir)
{
    struct cdi_device *devs = calloc(p->n ? p->n : 1, sizeof(*devs));
    const char **nodes = calloc(p->n ? p->n : 1, sizeof(char *));
    const char *common[N_CONTROL];
    if (!devs || !nodes) {
        free(devs);
        free(nodes);
        return -ENOMEM;
    }
    for (size_t i = 0; i < p->n; i++) {
        nodes[i] = p->devs[i].node;
        devs[i] = (struct cdi_device){p->devs[i].id, &nodes[i], 1};
    }
    for (size_t i = 0; i < p->n_common; i++)
        common[i] = p->common_paths[i];
    int r = cdi_spec_write(dir, p->cdi_vendor, p->cdi_class, devs, p->n, common, p->n_common);
    free(devs);
    free(nodes);
    return r;
}
