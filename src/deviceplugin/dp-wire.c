/* dp-wire.c — DevicePlugin messages to and from provider calls, and the checks
 * every mode shares; see dp-wire.h. Allocate's answer is built in one reused
 * block whose size is computed first (the arena below). */
#include "dp-wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPLY_KEEP (64u * 1024) /* the most of Allocate's answer block kept between calls */

struct acceld_wire {
    struct acceld_provider prov;

    uint8_t *list_buf;
    size_t list_len;
    uint64_t list_gen;
    bool list_valid;

    /* Allocate: reused buffers, grown to the largest request so far */
    uint8_t *reply_buf;
    size_t reply_cap;
    size_t *idx;                   /* device indices of the whole request */
    struct acceld_alloc_req *reqs; /* per container */
    struct acceld_alloc *outs;
    size_t cap; /* entries in idx, reqs, outs */
    /* duplicate check: seen[i] == epoch when device i was already named */
    uint32_t *seen;
    size_t seen_cap;
    uint32_t epoch;
};

int acceld_wire_new(const struct acceld_provider *prov, struct acceld_wire **ret)
{
    struct acceld_wire *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->prov = *prov;
    *ret = w;
    return 0;
}

struct acceld_wire *acceld_wire_free(struct acceld_wire *w)
{
    if (!w)
        return NULL;
    free(w->list_buf);
    free(w->reply_buf);
    free(w->idx);
    free(w->reqs);
    free(w->outs);
    free(w->seen);
    free(w);
    return NULL;
}

static size_t count(const struct acceld_wire *w)
{
    return w->prov.ops->count(w->prov.self);
}

/* ------------------------------------------------------------ list */

int acceld_wire_list_bytes(struct acceld_wire *w, const uint8_t **ret_data, size_t *ret_len)
{
    uint64_t gen = w->prov.ops->generation(w->prov.self);
    if (!w->list_valid || w->list_gen != gen) {
        size_t n = count(w);
        V1beta1__Device *devs = calloc(n ? n : 1, sizeof(*devs));
        V1beta1__Device **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
        V1beta1__TopologyInfo *topo = calloc(n ? n : 1, sizeof(*topo));
        V1beta1__NUMANode *numa = calloc(n ? n : 1, sizeof(*numa));
        V1beta1__NUMANode **numa_ptr = calloc(n ? n : 1, sizeof(*numa_ptr));
        uint8_t *buf = NULL;
        int r = -ENOMEM;
        if (!devs || !ptrs || !topo || !numa || !numa_ptr)
            goto out;
        for (size_t i = 0; i < n; i++) {
            struct acceld_device d;
            w->prov.ops->device(w->prov.self, i, &d);
            V1beta1__Device di = V1BETA1__DEVICE__INIT;
            devs[i] = di;
            devs[i].id = (char *)d.id;
            devs[i].health = (char *)(d.healthy ? "Healthy" : "Unhealthy");
            if (d.numa_node >= 0) {
                V1beta1__TopologyInfo ti = V1BETA1__TOPOLOGY_INFO__INIT;
                V1beta1__NUMANode ni = V1BETA1__NUMANODE__INIT;
                topo[i] = ti;
                numa[i] = ni;
                numa[i].id = d.numa_node;
                numa_ptr[i] = &numa[i];
                topo[i].n_nodes = 1;
                topo[i].nodes = &numa_ptr[i];
                devs[i].topology = &topo[i];
            }
            ptrs[i] = &devs[i];
        }
        V1beta1__ListAndWatchResponse m = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
        m.n_devices = n;
        m.devices = ptrs;
        size_t len = v1beta1__list_and_watch_response__get_packed_size(&m);
        buf = malloc(len ? len : 1);
        if (!buf)
            goto out;
        v1beta1__list_and_watch_response__pack(&m, buf);
        free(w->list_buf);
        w->list_buf = buf;
        w->list_len = len;
        w->list_gen = gen;
        w->list_valid = true;
        r = 0;
    out:
        free(devs);
        free(ptrs);
        free(topo);
        free(numa);
        free(numa_ptr);
        if (r < 0)
            return r;
    }
    *ret_data = w->list_buf;
    *ret_len = w->list_len;
    return 0;
}

/* ------------------------------------------------------------ arena */

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

/* Refuses a request that names more device IDs than the provider has
 * devices, before any per-ID work: no such request can be right (a device
 * goes to one container once), and the bound keeps every later step small. */
static int check_count(size_t n, const char *what, size_t cnt, char *err, size_t errlen)
{
    if (cnt <= n)
        return 0;
    snprintf(err, errlen,
             "%s names %zu device IDs, more than the %zu devices this node has: refused (a "
             "request for this node lists only its own devices, each once; check the client)",
             what, cnt, n);
    return -EINVAL;
}

static int grow(struct acceld_wire *w, size_t need, size_t n_dev)
{
    if (need > w->cap) {
        size_t cap = need < 16 ? 16 : need;
        size_t *idx = realloc(w->idx, cap * sizeof(*idx));
        if (idx)
            w->idx = idx;
        struct acceld_alloc_req *reqs = realloc(w->reqs, cap * sizeof(*reqs));
        if (reqs)
            w->reqs = reqs;
        struct acceld_alloc *outs = realloc(w->outs, cap * sizeof(*outs));
        if (outs)
            w->outs = outs;
        if (!idx || !reqs || !outs)
            return -ENOMEM;
        w->cap = cap;
    }
    if (n_dev > w->seen_cap) {
        uint32_t *s = calloc(n_dev, sizeof(*s));
        if (!s)
            return -ENOMEM;
        free(w->seen);
        w->seen = s;
        w->seen_cap = n_dev;
        w->epoch = 0;
    }
    return 0;
}

static size_t answer_size(const struct acceld_alloc *o)
{
    return align16(sizeof(V1beta1__ContainerAllocateResponse)) +
           align16(o->n_envs * sizeof(V1beta1__ContainerAllocateResponse__EnvsEntry)) +
           align16(o->n_envs * sizeof(void *)) +
           align16(o->n_annotations *
                   sizeof(V1beta1__ContainerAllocateResponse__AnnotationsEntry)) +
           align16(o->n_annotations * sizeof(void *)) +
           align16(o->n_mounts * sizeof(V1beta1__Mount)) + align16(o->n_mounts * sizeof(void *)) +
           align16(o->n_devices * sizeof(V1beta1__DeviceSpec)) +
           align16(o->n_devices * sizeof(void *)) +
           align16(o->n_cdi_devices * sizeof(V1beta1__CDIDevice)) +
           align16(o->n_cdi_devices * sizeof(void *));
}

static void answer_fill(struct arena *a, const struct acceld_alloc *o,
                        V1beta1__ContainerAllocateResponse *out)
{
    V1beta1__ContainerAllocateResponse cinit = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
    *out = cinit;
    V1beta1__ContainerAllocateResponse__EnvsEntry *env = arena_take(a, o->n_envs * sizeof(*env));
    out->envs = arena_take(a, o->n_envs * sizeof(void *));
    for (size_t i = 0; i < o->n_envs; i++) {
        V1beta1__ContainerAllocateResponse__EnvsEntry ei =
            V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ENVS_ENTRY__INIT;
        env[i] = ei;
        env[i].key = (char *)o->envs[i].key;
        env[i].value = (char *)o->envs[i].value;
        out->envs[i] = &env[i];
    }
    out->n_envs = o->n_envs;
    V1beta1__ContainerAllocateResponse__AnnotationsEntry *ann =
        arena_take(a, o->n_annotations * sizeof(*ann));
    out->annotations = arena_take(a, o->n_annotations * sizeof(void *));
    for (size_t i = 0; i < o->n_annotations; i++) {
        V1beta1__ContainerAllocateResponse__AnnotationsEntry ai =
            V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ANNOTATIONS_ENTRY__INIT;
        ann[i] = ai;
        ann[i].key = (char *)o->annotations[i].key;
        ann[i].value = (char *)o->annotations[i].value;
        out->annotations[i] = &ann[i];
    }
    out->n_annotations = o->n_annotations;
    V1beta1__Mount *m = arena_take(a, o->n_mounts * sizeof(*m));
    out->mounts = arena_take(a, o->n_mounts * sizeof(void *));
    for (size_t i = 0; i < o->n_mounts; i++) {
        V1beta1__Mount mi = V1BETA1__MOUNT__INIT;
        m[i] = mi;
        m[i].container_path = (char *)o->mounts[i].container_path;
        m[i].host_path = (char *)o->mounts[i].host_path;
        m[i].read_only = o->mounts[i].read_only;
        out->mounts[i] = &m[i];
    }
    out->n_mounts = o->n_mounts;
    V1beta1__DeviceSpec *d = arena_take(a, o->n_devices * sizeof(*d));
    out->devices = arena_take(a, o->n_devices * sizeof(void *));
    for (size_t i = 0; i < o->n_devices; i++) {
        V1beta1__DeviceSpec di = V1BETA1__DEVICE_SPEC__INIT;
        d[i] = di;
        d[i].container_path = (char *)o->devices[i].container_path;
        d[i].host_path = (char *)o->devices[i].host_path;
        d[i].permissions = (char *)o->devices[i].permissions;
        out->devices[i] = &d[i];
    }
    out->n_devices = o->n_devices;
    V1beta1__CDIDevice *c = arena_take(a, o->n_cdi_devices * sizeof(*c));
    out->cdi_devices = arena_take(a, o->n_cdi_devices * sizeof(void *));
    for (size_t i = 0; i < o->n_cdi_devices; i++) {
        V1beta1__CDIDevice ci = V1BETA1__CDIDEVICE__INIT;
        c[i] = ci;
        c[i].name = (char *)o->cdi_devices[i];
        out->cdi_devices[i] = &c[i];
    }
    out->n_cdi_devices = o->n_cdi_devices;
}

/* ------------------------------------------------------------ allocate */

int acceld_wire_allocate(struct acceld_wire *w, const V1beta1__AllocateRequest *req,
                         V1beta1__AllocateResponse **ret_resp, char *err, size_t errlen)
{
    const struct acceld_provider_ops *ops = w->prov.ops;
    size_t n = count(w), nc = req->n_container_requests;
    if (nc == 0) {
        snprintf(err, errlen, "allocate request has no container requests");
        return -EINVAL;
    }
    size_t total = 0;
    for (size_t c = 0; c < nc; c++) {
        const V1beta1__ContainerAllocateRequest *cr = req->container_requests[c];
        if (cr->n_devices_ids == 0) {
            snprintf(err, errlen, "container request %zu has no device IDs", c);
            return -EINVAL;
        }
        total += cr->n_devices_ids;
    }
    if (check_count(n, "allocate request", total, err, errlen) < 0)
        return -EINVAL;
    if (grow(w, total, n) < 0)
        return -ENOMEM;
    /* Validate everything first: a bad ID anywhere fails the whole request. */
    char unknown[512], unhealthy[512], twice[512];
    size_t nu = 0, nh = 0, nt = 0, k = 0;
    unknown[0] = unhealthy[0] = twice[0] = '\0';
    if (++w->epoch == 0) { /* wrapped: old marks could match again */
        memset(w->seen, 0, w->seen_cap * sizeof(*w->seen));
        w->epoch = 1;
    }
    for (size_t c = 0; c < nc; c++) {
        const V1beta1__ContainerAllocateRequest *cr = req->container_requests[c];
        w->reqs[c] = (struct acceld_alloc_req){w->idx + k, cr->n_devices_ids};
        for (size_t i = 0; i < cr->n_devices_ids; i++) {
            int idx = ops->find(w->prov.self, cr->devices_ids[i]);
            if (idx < 0) {
                msg_append(unknown, sizeof(unknown), &nu, cr->devices_ids[i]);
                continue;
            }
            if (w->seen[idx] == w->epoch) {
                msg_append(twice, sizeof(twice), &nt, cr->devices_ids[i]);
                continue;
            }
            w->seen[idx] = w->epoch;
            struct acceld_device d;
            ops->device(w->prov.self, (size_t)idx, &d);
            if (!d.healthy)
                msg_append(unhealthy, sizeof(unhealthy), &nh, cr->devices_ids[i]);
            w->idx[k++] = (size_t)idx;
        }
    }
    if (nu || nh || nt) {
        snprintf(err, errlen, "%s%s%s%s%s%s%s%s%s%s%s", nu ? "unknown device IDs: " : "", unknown,
                 nu ? " (not a device of this node: check the resource name)" : "",
                 nu && (nh || nt) ? "; " : "", nh ? "unhealthy devices: " : "", unhealthy,
                 nh ? " (wait for them to recover or pick others)" : "", nh && nt ? "; " : "",
                 nt ? "device IDs named more than once: " : "", twice,
                 nt ? " (a device goes to one container once: fix the client)" : "");
        return -EINVAL;
    }
    memset(w->outs, 0, nc * sizeof(*w->outs));
    int r = ops->allocate(w->prov.self, w->reqs, nc, w->outs, err, errlen);
    if (r < 0)
        return r;

    size_t bytes = align16(sizeof(V1beta1__AllocateResponse)) + align16(nc * sizeof(void *));
    for (size_t c = 0; c < nc; c++)
        bytes += answer_size(&w->outs[c]);
    /* A rare huge answer (thousands of containers) is not kept for good. */
    if (w->reply_cap > REPLY_KEEP && bytes <= REPLY_KEEP) {
        free(w->reply_buf);
        w->reply_buf = NULL;
        w->reply_cap = 0;
    }
    if (bytes > w->reply_cap) {
        size_t cap = bytes < 4096 ? 4096 : bytes;
        uint8_t *b = malloc(cap);
        if (!b)
            return -ENOMEM;
        free(w->reply_buf);
        w->reply_buf = b;
        w->reply_cap = cap;
    }
    struct arena a = {w->reply_buf, 0, bytes};
    V1beta1__AllocateResponse *resp = arena_take(&a, sizeof(*resp));
    V1beta1__AllocateResponse rinit = V1BETA1__ALLOCATE_RESPONSE__INIT;
    *resp = rinit;
    resp->n_container_responses = nc;
    resp->container_responses = arena_take(&a, nc * sizeof(void *));
    for (size_t c = 0; c < nc; c++) {
        V1beta1__ContainerAllocateResponse *out = arena_take(&a, sizeof(*out));
        answer_fill(&a, &w->outs[c], out);
        resp->container_responses[c] = out;
    }
    *ret_resp = resp;
    return 0;
}

/* ------------------------------------------------------------ prefer */

int acceld_wire_prefer(struct acceld_wire *w, const V1beta1__PreferredAllocationRequest *req,
                       V1beta1__PreferredAllocationResponse **ret_resp, char *err, size_t errlen)
{
    if (!w->prov.ops->prefer) {
        snprintf(err, errlen, "this resource offers no preferred allocation");
        return -ENOTSUP;
    }
    size_t n = count(w), nc = req->n_container_requests;
    /* Each container asks for at least one device and no two share one. */
    if (nc > n) {
        snprintf(err, errlen,
                 "preferred-allocation request has %zu container requests, more than the %zu "
                 "devices this node has: refused (check the client)",
                 nc, n);
        return -EINVAL;
    }
    size_t bytes =
        align16(sizeof(V1beta1__PreferredAllocationResponse)) + align16(nc * sizeof(void *));
    for (size_t c = 0; c < nc; c++) {
        const V1beta1__ContainerPreferredAllocationRequest *cr = req->container_requests[c];
        int32_t size = cr->allocation_size;
        bool over_avail = cr->n_available_deviceids > n;
        if (over_avail || cr->n_must_include_deviceids > n) {
            char what[64];
            snprintf(what, sizeof(what), "container request %zu: %s", c,
                     over_avail ? "available_deviceIDs" : "must_include_deviceIDs");
            return check_count(
                n, what, over_avail ? cr->n_available_deviceids : cr->n_must_include_deviceids, err,
                errlen);
        }
        if (size <= 0) {
            snprintf(err, errlen, "container request %zu: allocation_size %d is not positive", c,
                     size);
            return -EINVAL;
        }
        /* Refused before anything is sized by it: a hostile size must not
         * become a huge allocation. */
        if ((size_t)size > cr->n_available_deviceids + cr->n_must_include_deviceids) {
            snprintf(err, errlen,
                     "container request %zu: cannot pick %d devices from %zu available with %zu "
                     "that must be included",
                     c, size, cr->n_available_deviceids, cr->n_must_include_deviceids);
            return -EINVAL;
        }
        bytes += align16(sizeof(V1beta1__ContainerPreferredAllocationResponse));
        bytes += align16((size_t)size * sizeof(void *));
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
        size_t size = (size_t)cr->allocation_size;
        out->deviceids = arena_take(&a, size * sizeof(void *));
        struct acceld_prefer_req pr = {
            (const char *const *)cr->available_deviceids, cr->n_available_deviceids,
            (const char *const *)cr->must_include_deviceids, cr->n_must_include_deviceids, size};
        char one[400];
        int r =
            w->prov.ops->prefer(w->prov.self, &pr, (const char **)out->deviceids, one, sizeof(one));
        if (r < 0) {
            snprintf(err, errlen, "container request %zu: %s", c, one);
            free(a.base);
            return r;
        }
        out->n_deviceids = size;
    }
    *ret_resp = resp;
    return 0;
}

void acceld_wire_prefer_free(V1beta1__PreferredAllocationResponse *resp)
{
    free(resp);
}
