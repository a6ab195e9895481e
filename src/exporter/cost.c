/*
 * cost.c — GPU-seconds allocated, energy apportioned by utilization, and money per container
 * (cost.h). Allocation from the kubelet's pod-resources List (podres.c) and
 * GetAllocatableResources (here); utilization from nvmlDeviceGetProcessUtilization.
 */
#include "cost.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "grpc.h"
#include "regions.h"
#include "podresources.pb-c.h"

#define ALLOC_METHOD "/v1.PodResourcesLister/GetAllocatableResources"
#define UTIL_SAMPLES 256

/* One counter series: a container on a GPU; for allocation also its resource and share. */
struct cost_series {
    bool used;
    unsigned gpu;
    char namespace_[64], pod[254], container[64];
    char resource[128]; /* allocation only */
    char share[24];     /* allocation only: the share as its label prints it */
    double gpu_seconds; /* allocation: share-weighted seconds */
    double money;       /* allocation: gpu_seconds × price / 3600 */
    double joules;      /* energy */
    uint64_t seen_ns;
};

struct cost_replicas {
    char resource[128];
    char uuid[96];
    unsigned n;
};

/* What splits a GPU's energy: the weights of the last per-process samples, by process (a
 * held weight counts only while its process still runs on the GPU). */
struct cost_weight {
    unsigned pid;
    int series; /* index in energy[]; -1: a process in no named container */
    double w;
};

struct cost_gpu_state {
    bool have_energy;
    unsigned long long last_mj;
    unsigned long long last_util_ts; /* NVML's timestamp (µs) of the newest sample used */
    uint64_t util_ns;                /* when those samples came (CLOCK_MONOTONIC) */
    size_t nweights;
    struct cost_weight weights[64]; /* busy processes: more than MPS's 48 clients a GPU */
    double unattributed_j;
    char uuid[96]; /* the GPU's, from its first round */
};

struct exporter_cost {
    const struct exporter_config *cfg;
    char vgpu_path[4096]; /* <stateDir>/vgpu/status.json; "" = off */
    uint64_t vgpu_next_ns;
    size_t nvgpu;
    struct podres_entry vgpu[EXPORTER_COST_MAX_VGPU]; /* ids = cores (% of a GPU) */
    unsigned ngpus;
    uint64_t last_ns; /* the previous round (0: none yet) */
    struct cost_gpu_state *gpus;
    size_t nreplicas;
    struct cost_replicas replicas[EXPORTER_COST_MAX_REPLICAS];
    struct cost_series alloc[EXPORTER_COST_MAX_SERIES];
    struct cost_series energy[EXPORTER_COST_MAX_SERIES];
    int alloc_hw, energy_hw; /* slots past these were never used: scans stop there */
    nvmlProcessUtilizationSample_t samples[UTIL_SAMPLES];
};

int exporter_cost_new(const struct exporter_config *cfg, unsigned ngpus, struct exporter_cost **ret)
{
    struct exporter_cost *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->gpus = calloc(ngpus ? ngpus : 1, sizeof(*c->gpus));
    if (!c->gpus) {
        free(c);
        return -ENOMEM;
    }
    c->cfg = cfg;
    c->ngpus = ngpus;
    *ret = c;
    return 0;
}

struct exporter_cost *exporter_cost_free(struct exporter_cost *c)
{
    if (c)
        free(c->gpus);
    free(c);
    return NULL;
}

/* ------------------------------------------------------------ replicas per GPU */

int exporter_cost_parse_allocatable(struct exporter_cost *c, const uint8_t *msg, size_t len)
{
    V1__AllocatableResourcesResponse *r =
        v1__allocatable_resources_response__unpack(NULL, len, msg);
    if (!r)
        return -EPROTO;
    c->nreplicas = 0;
    for (size_t d = 0; d < r->n_devices; d++) {
        const V1__ContainerDevices *cd = r->devices[d];
        const char *res = cd->resource_name ? cd->resource_name : "";
        for (size_t i = 0; i < cd->n_device_ids; i++) {
            const char *id = cd->device_ids[i], *sep = id ? strstr(id, "::") : NULL;
            size_t ul = sep ? (size_t)(sep - id) : 0;
            struct cost_replicas *x = NULL;
            if (!sep || ul == 0 || ul >= sizeof(x->uuid) || strlen(res) >= sizeof(x->resource))
                continue; /* a whole GPU (share 1) or a name too long to be ours */
            for (size_t k = 0; k < c->nreplicas && !x; k++)
                if (!strcmp(c->replicas[k].resource, res) &&
                    !strncmp(c->replicas[k].uuid, id, ul) && c->replicas[k].uuid[ul] == '\0')
                    x = &c->replicas[k];
            if (!x) {
                if (c->nreplicas == EXPORTER_COST_MAX_REPLICAS)
                    continue;
                x = &c->replicas[c->nreplicas++];
                snprintf(x->resource, sizeof(x->resource), "%s", res);
                memcpy(x->uuid, id, ul);
                x->uuid[ul] = '\0';
                x->n = 0;
            }
            x->n++;
        }
    }
    v1__allocatable_resources_response__free_unpacked(r, NULL);
    return 0;
}

int exporter_cost_allocatable(struct exporter_cost *c, const char *socket_path, unsigned timeout_ms)
{
    V1__AllocatableResourcesRequest req = V1__ALLOCATABLE_RESOURCES_REQUEST__INIT;
    uint8_t buf[16];
    size_t len = v1__allocatable_resources_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    char *message = NULL;
    int status = -1;
    int r =
        grpc_blocking_unary(socket_path, ALLOC_METHOD, buf, len, (uint64_t)timeout_ms * 1000000u,
                            &status, &message, &resp, &resp_len);
    if (r < 0)
        return r;
    r = status != 0 ? -EIO : exporter_cost_parse_allocatable(c, resp ? resp : buf, resp_len);
    free(message);
    free(resp);
    return r;
}

static unsigned replicas_of(const struct exporter_cost *c, const char *res, const char *uuid)
{
    for (size_t k = 0; k < c->nreplicas; k++)
        if (!strcmp(c->replicas[k].resource, res) && !strcmp(c->replicas[k].uuid, uuid))
            return c->replicas[k].n;
    return 0;
}

/* ------------------------------------------------------------ vGPU assignments */

int exporter_cost_set_state_dir(struct exporter_cost *c, const char *state_dir)
{
    if (!*state_dir) {
        c->vgpu_path[0] = '\0';
        return 0;
    }
    if ((size_t)snprintf(c->vgpu_path, sizeof(c->vgpu_path), "%s/vgpu/status.json", state_dir) >=
        sizeof(c->vgpu_path)) {
        c->vgpu_path[0] = '\0';
        return -ENAMETOOLONG;
    }
    return 0;
}

/* src into out when it fits (names longer than Kubernetes allows are skipped, not cut). */
static bool copy_name(char *out, size_t len, const char *src)
{
    size_t n = strlen(src);
    if (n >= len)
        return false;
    memcpy(out, src, n + 1);
    return true;
}

/* acceld's vGPU report, through the exporter's one reader of it (regions.c, strict: a bad
 * file is refused whole and the last assignments stay). */
int exporter_cost_parse_vgpu(struct exporter_cost *c, const char *data, size_t len)
{
    static struct exporter_vgpu_assign a[EXPORTER_COST_MAX_VGPU];
    static struct podres_entry next[EXPORTER_COST_MAX_VGPU];
    size_t na = 0, n = 0;
    char err[400];
    int r = exporter_vgpu_status_parse(data, len, a, EXPORTER_COST_MAX_VGPU, &na, err, sizeof err);
    if (r < 0)
        return r;
    for (size_t i = 0; i < na; i++) {
        struct podres_entry *x = &next[n];
        memset(x, 0, sizeof(*x));
        /* an assignment not yet complete holds nothing yet */
        if (!a[i].complete || !copy_name(x->gpu_uuid, sizeof x->gpu_uuid, a[i].gpu_uuid) ||
            !copy_name(x->namespace_, sizeof x->namespace_, a[i].ns) ||
            !copy_name(x->pod, sizeof x->pod, a[i].pod) ||
            !copy_name(x->container, sizeof x->container, a[i].container))
            continue;
        x->ids = a[i].whole ? 100 : (unsigned)a[i].cores;
        snprintf(x->resource, sizeof(x->resource), "%s", EXPORTER_COST_VGPU_RESOURCE);
        x->replica = 2; /* a vGPU share: ids are cores */
        if (x->ids)
            n++;
    }
    memcpy(c->vgpu, next, n * sizeof(next[0]));
    c->nvgpu = n;
    return 0;
}

static void vgpu_refresh(struct exporter_cost *c, uint64_t now)
{
    char *data = NULL;
    size_t len = 0;
    if (!c->vgpu_path[0] || now < c->vgpu_next_ns)
        return;
    c->vgpu_next_ns = now + 5000000000ull;
    int r = fs_read_all(c->vgpu_path, EXPORTER_COST_VGPU_MAX_BYTES, &data, &len);
    if (r == -ENOENT)
        c->nvgpu = 0; /* no vGPU on this node (or acceld not in that mode any more) */
    if (r < 0)
        return;
    exporter_cost_parse_vgpu(c, data, len); /* a bad file keeps the last assignments */
    free(data);
}

/* ------------------------------------------------------------ series */

/* The series for (gpu, container[, resource, share]) in table t, made when missing (a free
 * slot, else one unseen for EXPORTER_COST_KEEP_NS). -1 when the table is full. */
static int series(struct cost_series *t, int *hw, unsigned gpu, const struct podres_entry *x,
                  const char *resource, const char *share, uint64_t now)
{
    int free_slot = *hw < EXPORTER_COST_MAX_SERIES ? *hw : -1;
    for (int i = 0; i < *hw; i++) {
        struct cost_series *s = &t[i];
        if (!s->used) {
            if (free_slot < 0 || free_slot == *hw)
                free_slot = i;
            continue;
        }
        if (s->gpu == gpu && !strcmp(s->namespace_, x->namespace_) && !strcmp(s->pod, x->pod) &&
            !strcmp(s->container, x->container) && !strcmp(s->resource, resource) &&
            !strcmp(s->share, share)) {
            s->seen_ns = now;
            return i;
        }
        if ((free_slot < 0 || free_slot == *hw) && now - s->seen_ns > EXPORTER_COST_KEEP_NS)
            free_slot = i;
    }
    if (free_slot < 0)
        return -1;
    if (free_slot == *hw)
        (*hw)++;
    struct cost_series *s = &t[free_slot];
    memset(s, 0, sizeof(*s));
    s->used = true;
    s->gpu = gpu;
    snprintf(s->namespace_, sizeof(s->namespace_), "%s", x->namespace_);
    snprintf(s->pod, sizeof(s->pod), "%s", x->pod);
    snprintf(s->container, sizeof(s->container), "%s", x->container);
    snprintf(s->resource, sizeof(s->resource), "%s", resource);
    snprintf(s->share, sizeof(s->share), "%s", share);
    s->seen_ns = now;
    return free_slot;
}

static double price_of(const struct exporter_config *cfg, const char *resource, bool *ret_found)
{
    for (size_t i = 0; i < cfg->nprices; i++)
        if (!strcmp(cfg->prices[i].resource, resource)) {
            *ret_found = true;
            return cfg->prices[i].per_hour;
        }
    *ret_found = false;
    return 0;
}

/* The share of GPU uuid that entry x holds: 1, ids / replicas, or 0 when the replicas are
 * unknown (GetAllocatableResources unanswered). */
static double share_of(const struct exporter_cost *c, const struct podres_entry *x)
{
    if (!x->replica)
        return 1.0;
    if (x->replica == 2)
        return x->ids / 100.0;
    unsigned n = replicas_of(c, x->resource, x->gpu_uuid);
    if (!n)
        return 0;
    return x->ids >= n ? 1.0 : (double)x->ids / n;
}

/* ------------------------------------------------------------ a round */

/* The holders of GPUs: pod-resources' entries (none while List fails), then vGPU's. */
static size_t holders_n(const struct exporter_cost *c, const struct podres *pr)
{
    return (pr ? pr->n : 0) + c->nvgpu;
}

static const struct podres_entry *holder_at(const struct exporter_cost *c, const struct podres *pr,
                                            size_t h)
{
    size_t n = pr ? pr->n : 0;
    return h < n ? &pr->e[h] : &c->vgpu[h - n];
}

/* New per-process samples for GPU i: their weights by process, each with its container's
 * energy series. */
static void take_utilization(struct exporter_cost *c, struct gpu_nvml *n, unsigned i,
                             const struct exporter_cost_gpu *g, uint64_t now)
{
    struct cost_gpu_state *st = &c->gpus[i];
    unsigned count = UTIL_SAMPLES;
    if (!n->nvmlDeviceGetProcessUtilization ||
        n->nvmlDeviceGetProcessUtilization(g->dev, c->samples, &count, st->last_util_ts) !=
            NVML_SUCCESS)
        return; /* NOT_FOUND: nothing newer; keep the last weights while they are fresh */
    unsigned long long newest = st->last_util_ts;
    st->nweights = 0;
    for (unsigned s = 0; s < count && s < UTIL_SAMPLES; s++) {
        const nvmlProcessUtilizationSample_t *u = &c->samples[s];
        int idx = -1;
        if (u->timeStamp > newest)
            newest = u->timeStamp;
        if (!u->smUtil)
            continue;
        for (size_t k = 0; k < g->nprocs; k++)
            if (g->procs[k].pid == u->pid && g->names[k]) {
                idx = series(c->energy, &c->energy_hw, i, g->names[k], "", "", now);
                break;
            }
        size_t w = 0;
        while (w < st->nweights && st->weights[w].pid != u->pid)
            w++;
        if (w == st->nweights) {
            if (st->nweights == sizeof(st->weights) / sizeof(st->weights[0]))
                continue;
            st->weights[st->nweights++] = (struct cost_weight){u->pid, idx, 0};
        }
        st->weights[w].w += u->smUtil;
    }
    st->last_util_ts = newest;
    st->util_ns = now;
}

static bool runs_on(const struct exporter_cost_gpu *g, unsigned pid)
{
    for (size_t k = 0; k < g->nprocs; k++)
        if (g->procs[k].pid == pid)
            return true;
    return false;
}

/* Whether weight w splits this round's energy: samples that came this round always (their
 * period overlaps the round, even when their process has ended since); samples kept from an
 * earlier round (NVML had nothing newer) for EXPORTER_COST_UTIL_MAX_AGE_NS, and only while
 * their process still runs: an ended process draws nothing, and its last weights would
 * otherwise hold the GPU's energy away from its holders after the work is over. */
static bool weighs(const struct cost_gpu_state *st, const struct cost_weight *w,
                   const struct exporter_cost_gpu *g, uint64_t now)
{
    if (now == st->util_ns)
        return true;
    return now - st->util_ns <= EXPORTER_COST_UTIL_MAX_AGE_NS && runs_on(g, w->pid);
}

/* Splits GPU i's energy delta (joules) over its containers. */
static void split_energy(struct exporter_cost *c, unsigned i, double dj, const struct podres *pr,
                         const struct exporter_cost_gpu *g, uint64_t now)
{
    struct cost_gpu_state *st = &c->gpus[i];
    const char *uuid = g->uuid;
    double total = 0;
    for (size_t w = 0; w < st->nweights; w++)
        if (weighs(st, &st->weights[w], g, now))
            total += st->weights[w].w;
    if (total > 0) {
        for (size_t w = 0; w < st->nweights; w++) {
            if (!weighs(st, &st->weights[w], g, now))
                continue;
            double part = dj * st->weights[w].w / total;
            if (st->weights[w].series >= 0)
                c->energy[st->weights[w].series].joules += part;
            else
                st->unattributed_j += part;
        }
        return;
    }
    /* nobody busy: by allocation share; what no one holds stays unattributed */
    double held = 0;
    for (size_t h = 0; h < holders_n(c, pr); h++)
        if (!strcmp(holder_at(c, pr, h)->gpu_uuid, uuid))
            held += share_of(c, holder_at(c, pr, h));
    double scale = held > 1.0 ? 1.0 / held : 1.0; /* overcommitted replicas: by proportion */
    double given = 0;
    for (size_t h = 0; h < holders_n(c, pr); h++) {
        const struct podres_entry *x = holder_at(c, pr, h);
        if (strcmp(x->gpu_uuid, uuid))
            continue;
        double s = share_of(c, x) * scale;
        int idx = s > 0 ? series(c->energy, &c->energy_hw, i, x, "", "", now) : -1;
        if (idx < 0)
            continue;
        c->energy[idx].joules += dj * s;
        given += dj * s;
    }
    st->unattributed_j += dj - given > 0 ? dj - given : 0;
}

void exporter_cost_round(struct exporter_cost *c, struct gpu_nvml *nvml,
                         const struct exporter_cost_gpu *gpus, unsigned ngpus,
                         const struct podres *pr, uint64_t now_ns)
{
    double dt = c->last_ns && now_ns > c->last_ns ? (double)(now_ns - c->last_ns) / 1e9 : 0;
    c->last_ns = now_ns;
    vgpu_refresh(c, now_ns);
    if (ngpus > c->ngpus)
        ngpus = c->ngpus;
    for (unsigned i = 0; i < ngpus; i++) {
        const struct exporter_cost_gpu *g = &gpus[i];
        struct cost_gpu_state *st = &c->gpus[i];
        if (!st->uuid[0])
            snprintf(st->uuid, sizeof(st->uuid), "%s", g->uuid);
        /* allocation: every container pod-resources lists on this GPU, and vGPU's */
        for (size_t h = 0; h < holders_n(c, pr); h++) {
            const struct podres_entry *x = holder_at(c, pr, h);
            char share[24];
            if (strcmp(x->gpu_uuid, g->uuid))
                continue;
            double s = share_of(c, x);
            if (s <= 0)
                continue; /* replicas unknown: the share cannot be told */
            snprintf(share, sizeof(share), "%.6g", s);
            int idx = series(c->alloc, &c->alloc_hw, i, x, x->resource, share, now_ns);
            if (idx < 0)
                continue;
            bool priced;
            double price = price_of(c->cfg, x->resource, &priced);
            c->alloc[idx].gpu_seconds += s * dt;
            if (priced)
                c->alloc[idx].money += s * dt * price / 3600.0;
        }
        /* energy: the delta since the last round, split */
        take_utilization(c, nvml, i, g, now_ns);
        if (!g->energy_ok) {
            st->have_energy = false;
            continue;
        }
        if (st->have_energy && g->energy_mj >= st->last_mj && dt > 0)
            split_energy(c, i, (double)(g->energy_mj - st->last_mj) / 1000.0, pr, g, now_ns);
        st->have_energy = true; /* a counter that went back (driver reload): a new baseline */
        st->last_mj = g->energy_mj;
    }
}

/* ------------------------------------------------------------ exposition */

static const char *esc(const char *v, char *out, size_t len)
{
    size_t o = 0;
    for (; *v && o + 3 < len; v++) {
        if (*v == '\\' || *v == '"') {
            out[o++] = '\\';
            out[o++] = *v;
        } else if (*v == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *v;
        }
    }
    out[o] = '\0';
    return out;
}

/* gpu, uuid, namespace, pod, container of s, escaped. */
static const char *labels(const struct exporter_cost *c, const struct cost_series *s, char *out,
                          size_t len)
{
    char u[200], ns[140], pod[520], ct[140];
    snprintf(out, len, "gpu=\"%u\",uuid=\"%s\",namespace=\"%s\",pod=\"%s\",container=\"%s\"",
             s->gpu, esc(c->gpus[s->gpu].uuid, u, sizeof(u)), esc(s->namespace_, ns, sizeof(ns)),
             esc(s->pod, pod, sizeof(pod)), esc(s->container, ct, sizeof(ct)));
    return out;
}

void exporter_cost_render(const struct exporter_cost *c, const struct exporter_sli_out *o)
{
    void *x = o->ctx;
    char l[1200], r[300], u[200];
    if (o->family(x, "accel_pod_gpu_allocated_seconds_total", "counter",
                  "GPU-seconds allocated to the container on this GPU: seconds held times the "
                  "share held (1 a whole GPU, IDs held / replicas for a shared one), by resource "
                  "and share."))
        for (int i = 0; i < c->alloc_hw; i++) {
            const struct cost_series *s = &c->alloc[i];
            if (!s->used)
                continue;
            labels(c, s, l, sizeof(l));
            o->print(
                x, "accel_pod_gpu_allocated_seconds_total{%s,resource=\"%s\",share=\"%s\"} %.17g\n",
                l, esc(s->resource, r, sizeof(r)), s->share, s->gpu_seconds);
        }
    if (o->family(x, "accel_pod_gpu_energy_joules_total", "counter",
                  "The GPU's energy apportioned to the container: each interval's energy split "
                  "by its processes' SM utilization, or by allocation share while none is busy."))
        for (int i = 0; i < c->energy_hw; i++) {
            const struct cost_series *s = &c->energy[i];
            if (!s->used)
                continue;
            labels(c, s, l, sizeof(l));
            o->print(x, "accel_pod_gpu_energy_joules_total{%s} %.17g\n", l, s->joules);
        }
    if (o->family(x, "accel_gpu_energy_unattributed_joules_total", "counter",
                  "The GPU's energy no container was given: busy processes in no named "
                  "container, or no one holding the GPU."))
        for (unsigned i = 0; i < c->ngpus; i++)
            o->print(x,
                     "accel_gpu_energy_unattributed_joules_total{gpu=\"%u\",uuid=\"%s\"} %.17g\n",
                     i, esc(c->gpus[i].uuid, u, sizeof(u)), c->gpus[i].unattributed_j);
    if (c->cfg->nprices && c->cfg->cost_currency[0] &&
        o->family(x, "accel_pod_gpu_cost_total", "counter",
                  "GPU-seconds allocated times the price table's GPU-hour price of the resource "
                  "(cost.gpuHourPrice) / 3600, in currency."))
        for (int i = 0; i < c->alloc_hw; i++) {
            const struct cost_series *s = &c->alloc[i];
            bool priced;
            if (!s->used || (price_of(c->cfg, s->resource, &priced), !priced))
                continue;
            labels(c, s, l, sizeof(l));
            o->print(x,
                     "accel_pod_gpu_cost_total{%s,resource=\"%s\",share=\"%s\",currency=\"%s\"} "
                     "%.17g\n",
                     l, esc(s->resource, r, sizeof(r)), s->share, c->cfg->cost_currency, s->money);
        }
}
