/* replicas.c — the time-slicing and MPS replica providers; see replicas.h. */
#include "replicas.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi.h"
#include "sharing-config.h"
#include "util.h"

static const char *const control_nodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
#define N_CONTROL ARRAY_SIZE(control_nodes)
#define N_ENV 5
#define N_MOUNT 2

struct sgpu {
    char uuid[ACCELD_ID_MAX];
    char node[32]; /* /dev/nvidia<minor> */
    char cdi_name[ACCELD_ID_MAX + 2 * ACCELD_NAME_MAX + 4];
    int numa;
    bool healthy; /* the GPU itself (XID, lost) */
    unsigned replicas;
    unsigned max_k; /* daemons for k = 1..max_k (MPS) */
    size_t first;   /* index of replica 0 */
    uint64_t mem;
    bool *daemon_ok;   /* [max_k] */
    bool *daemon_seen; /* [max_k]: its supervisor reported once (healthy or not) */
    char (*pipe)[ACCELD_PATH_MAX];
    char (*shm)[ACCELD_PATH_MAX]; /* each daemon's /dev/shm for its clients */
};

/* One container's answer. */
struct answer {
    struct acceld_kv env[N_ENV];
    struct acceld_mount mounts[N_MOUNT];
    struct acceld_devnode *nodes;
    const char **cdi;
    char *visible;
    char pct[16];
    char mem[48];
};

struct replicas {
    struct replicas_options o;
    char resource[ACCELD_NAME_MAX];
    char dev_root[ACCELD_PATH_MAX];
    char cdi_vendor[ACCELD_NAME_MAX];
    char cdi_class[ACCELD_NAME_MAX];
    char common[N_CONTROL][32];
    size_t n_common;
    struct sgpu *gpus;
    size_t n_gpus;
    size_t n_devs;
    char (*ids)[ACCELD_ID_MAX]; /* [n_devs] */
    uint32_t *dev_gpu;          /* [n_devs] */
    uint64_t generation;
    struct answer *ans;
    size_t n_ans;
};

static bool gpu_up(const struct sgpu *g, bool mps)
{
    if (!g->healthy)
        return false;
    for (unsigned k = 0; mps && k < g->max_k; k++)
        if (!g->daemon_ok[k])
            return false;
    return true;
}

static void answers_free(struct replicas *s)
{
    for (size_t i = 0; i < s->n_ans; i++) {
        free(s->ans[i].nodes);
        free(s->ans[i].cdi);
        free(s->ans[i].visible);
    }
    free(s->ans);
    s->ans = NULL;
    s->n_ans = 0;
}

struct replicas *replicas_free(struct replicas *s)
{
    if (!s)
        return NULL;
    answers_free(s);
    for (size_t i = 0; s->gpus && i < s->n_gpus; i++) {
        free(s->gpus[i].daemon_ok);
        free(s->gpus[i].daemon_seen);
        free(s->gpus[i].pipe);
        free(s->gpus[i].shm);
    }
    free(s->gpus);
    free(s->ids);
    free(s->dev_gpu);
    free(s);
    return NULL;
}

int replicas_new(const struct replicas_gpu_desc *gpus, size_t n, const struct replicas_options *o,
                 struct replicas **ret)
{
    if (strlen(o->resource) >= ACCELD_NAME_MAX || strlen(o->dev_root) >= ACCELD_PATH_MAX ||
        strlen(o->cdi_vendor) >= ACCELD_NAME_MAX || strlen(o->cdi_class) >= ACCELD_NAME_MAX)
        return -ENAMETOOLONG;
    struct replicas *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->o = *o;
    snprintf(s->resource, sizeof(s->resource), "%s", o->resource);
    snprintf(s->dev_root, sizeof(s->dev_root), "%s", o->dev_root);
    snprintf(s->cdi_vendor, sizeof(s->cdi_vendor), "%s", o->cdi_vendor);
    snprintf(s->cdi_class, sizeof(s->cdi_class), "%s", o->cdi_class);
    s->o.resource = s->resource;
    s->o.dev_root = s->dev_root;
    s->o.cdi_vendor = s->cdi_vendor;
    s->o.cdi_class = s->cdi_class;
    s->gpus = calloc(n ? n : 1, sizeof(*s->gpus));
    s->n_gpus = n;
    int r = -ENOMEM;
    if (!s->gpus)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        struct sgpu *g = &s->gpus[i];
        /* the ID "<uuid>::<n>" must fit in 63 characters */
        r = -EINVAL;
        if (!gpus[i].uuid || strlen(gpus[i].uuid) + 5 >= ACCELD_ID_MAX || gpus[i].replicas == 0 ||
            gpus[i].replicas > SHARING_REPLICAS_MAX_VOLTA)
            goto fail;
        snprintf(g->uuid, sizeof(g->uuid), "%s", gpus[i].uuid);
        snprintf(g->node, sizeof(g->node), "/dev/nvidia%d", gpus[i].minor);
        snprintf(g->cdi_name, sizeof(g->cdi_name), "%s/%s=%s", s->cdi_vendor, s->cdi_class,
                 g->uuid);
        g->numa = gpus[i].numa_node;
        g->healthy = gpus[i].healthy;
        g->replicas = gpus[i].replicas;
        g->mem = gpus[i].mem_bytes;
        g->first = s->n_devs;
        s->n_devs += g->replicas;
        g->max_k = !o->mps ? 0 : o->fail_requests_greater_than_one ? 1 : g->replicas;
        r = -ENOMEM;
        if (g->max_k && (!(g->daemon_ok = calloc(g->max_k, sizeof(bool))) ||
                         !(g->daemon_seen = calloc(g->max_k, sizeof(bool))) ||
                         !(g->pipe = calloc(g->max_k, sizeof(*g->pipe))) ||
                         !(g->shm = calloc(g->max_k, sizeof(*g->shm)))))
            goto fail;
    }
    s->ids = calloc(s->n_devs ? s->n_devs : 1, sizeof(*s->ids));
    s->dev_gpu = calloc(s->n_devs ? s->n_devs : 1, sizeof(*s->dev_gpu));
    if (!s->ids || !s->dev_gpu)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        for (unsigned k = 0; k < s->gpus[i].replicas; k++) {
            size_t d = s->gpus[i].first + k;
            sharing_replica_id(s->gpus[i].uuid, k, s->ids[d], sizeof(s->ids[d]));
            s->dev_gpu[d] = (uint32_t)i;
        }
    }
    for (size_t i = 0; i < N_CONTROL; i++) {
        char host[ACCELD_PATH_MAX + 32];
        snprintf(host, sizeof(host), "%s/%s", s->dev_root, control_nodes[i]);
        if (access(host, F_OK) == 0)
            snprintf(s->common[s->n_common++], sizeof(s->common[0]), "/dev/%s", control_nodes[i]);
    }
    *ret = s;
    return 0;
fail:
    replicas_free(s);
    return r;
}

size_t replicas_gpu_count(const struct replicas *s)
{
    return s->n_gpus;
}

const char *replicas_gpu_uuid(const struct replicas *s, size_t gpu)
{
    return s->gpus[gpu].uuid;
}

unsigned replicas_gpu_replicas(const struct replicas *s, size_t gpu)
{
    return s->gpus[gpu].replicas;
}

unsigned replicas_max_request(const struct replicas *s, size_t gpu)
{
    return s->gpus[gpu].max_k;
}

int replicas_set_mps_dirs(struct replicas *s, size_t gpu, unsigned k, const char *pipe_dir,
                          const char *shm_dir)
{
    struct sgpu *g = &s->gpus[gpu];
    if (!shm_dir)
        shm_dir = "/dev/shm";
    if (k == 0 || k > g->max_k)
        return -EINVAL;
    if (strlen(pipe_dir) >= ACCELD_PATH_MAX || strlen(shm_dir) >= ACCELD_PATH_MAX)
        return -ENAMETOOLONG;
    snprintf(g->pipe[k - 1], sizeof(g->pipe[0]), "%s", pipe_dir);
    snprintf(g->shm[k - 1], sizeof(g->shm[0]), "%s", shm_dir);
    return 0;
}

bool replicas_set_daemon_health(struct replicas *s, size_t gpu, unsigned k, bool healthy)
{
    struct sgpu *g = &s->gpus[gpu];
    if (k == 0 || k > g->max_k)
        return false;
    g->daemon_seen[k - 1] = true;
    if (g->daemon_ok[k - 1] == healthy)
        return false;
    bool before = gpu_up(g, true);
    g->daemon_ok[k - 1] = healthy;
    if (before == gpu_up(g, true))
        return false;
    s->generation++;
    return true;
}

/* ------------------------------------------------------------ provider ops */

static size_t op_count(void *self)
{
    return ((struct replicas *)self)->n_devs;
}

static void op_device(void *self, size_t idx, struct acceld_device *out)
{
    struct replicas *s = self;
    const struct sgpu *g = &s->gpus[s->dev_gpu[idx]];
    *out = (struct acceld_device){s->ids[idx], gpu_up(g, s->o.mps), g->numa};
}

static int gpu_find(const struct replicas *s, const char *uuid)
{
    for (size_t i = 0; i < s->n_gpus; i++)
        if (strcmp(s->gpus[i].uuid, uuid) == 0)
            return (int)i;
    return -1;
}

static int op_find(void *self, const char *id)
{
    struct replicas *s = self;
    char uuid[ACCELD_ID_MAX];
    unsigned n;
    if (sharing_replica_id_parse(id, uuid, sizeof(uuid), &n) < 0)
        return -1;
    int g = gpu_find(s, uuid);
    if (g < 0 || n >= s->gpus[g].replicas)
        return -1;
    return (int)(s->gpus[g].first + n);
}

static uint64_t op_generation(void *self)
{
    return ((struct replicas *)self)->generation;
}

/* Prefers replicas of one GPU (an MPS container needs all its replicas on one
 * GPU; time-slicing packs too): the GPU of the first must_include ID, else the
 * one with the most available replicas. */
static int op_prefer(void *self, const struct acceld_prefer_req *req, const char **out, char *err,
                     size_t errlen)
{
    struct replicas *s = self;
    size_t *avail = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(size_t));
    if (!avail)
        return -ENOMEM;
    for (size_t i = 0; i < req->n_available; i++) {
        int d = op_find(s, req->available[i]);
        if (d >= 0)
            avail[s->dev_gpu[d]]++;
    }
    int best = -1;
    if (req->n_must_include) {
        int d = op_find(s, req->must_include[0]);
        best = d >= 0 ? (int)s->dev_gpu[d] : -1;
    }
    if (best < 0) {
        size_t most = 0;
        for (size_t g = 0; g < s->n_gpus; g++) {
            if (avail[g] > most) {
                most = avail[g];
                best = (int)g;
            }
        }
    }
    free(avail);
    size_t k = 0;
    for (size_t i = 0; i < req->n_must_include && k < req->size; i++)
        out[k++] = req->must_include[i];
    for (int pass = 0; pass < 2 && k < req->size; pass++) {
        for (size_t i = 0; i < req->n_available && k < req->size; i++) {
            int d = op_find(s, req->available[i]);
            bool on_best = d >= 0 && (int)s->dev_gpu[d] == best;
            if (pass == 0 ? !on_best : on_best)
                continue;
            bool taken = false;
            for (size_t j = 0; j < k && !taken; j++)
                taken = strcmp(out[j], req->available[i]) == 0;
            if (!taken)
                out[k++] = req->available[i];
        }
    }
    if (k < req->size) {
        snprintf(err, errlen, "cannot pick %zu distinct devices", req->size);
        return -EINVAL;
    }
    return 0;
}

static int answer_fill(struct replicas *s, const struct acceld_alloc_req *req, struct answer *a,
                       struct acceld_alloc *out, char *err, size_t errlen)
{
    /* the GPUs of this container, each once, in request order */
    size_t *gl = calloc(req->n_devs, sizeof(size_t));
    size_t ng = 0;
    if (!gl)
        return -ENOMEM;
    for (size_t i = 0; i < req->n_devs; i++) {
        size_t g = s->dev_gpu[req->devs[i]];
        bool seen = false;
        for (size_t j = 0; j < ng && !seen; j++)
            seen = gl[j] == g;
        if (!seen)
            gl[ng++] = g;
    }
    int r = -ENOMEM;
    if (s->o.fail_requests_greater_than_one && req->n_devs > 1) {
        snprintf(err, errlen,
                 "request for %zu %s devices refused: the sharing config sets "
                 "failRequestsGreaterThanOne, so a container may ask for 1 replica only (ask for "
                 "1, or unset failRequestsGreaterThanOne)",
                 req->n_devs, s->resource);
        r = -EINVAL;
        goto out;
    }
    if (s->o.mps && ng > 1) {
        snprintf(err, errlen,
                 "request for %zu %s replicas spans %zu GPUs: an MPS client talks to one GPU's "
                 "daemon, so a container's replicas must all be on one GPU (ask for at most %u, "
                 "the replicas of one GPU)",
                 req->n_devs, s->resource, ng, s->gpus[gl[0]].replicas);
        r = -EINVAL;
        goto out;
    }
    size_t vis_len = ng * ACCELD_ID_MAX + 1;
    a->visible = malloc(vis_len);
    a->nodes = calloc(ng + N_CONTROL, sizeof(*a->nodes));
    a->cdi = calloc(ng, sizeof(char *));
    if (!a->visible || !a->nodes || !a->cdi)
        goto out;
    size_t vl = 0, nn = 0, ne = 0;
    a->visible[0] = '\0';
    for (size_t j = 0; j < ng; j++) {
        const struct sgpu *g = &s->gpus[gl[j]];
        vl += (size_t)snprintf(a->visible + vl, vis_len - vl, "%s%s", j ? "," : "", g->uuid);
        a->nodes[nn++] = (struct acceld_devnode){g->node, g->node, "rw"};
        a->cdi[j] = g->cdi_name;
    }
    for (size_t i = 0; i < s->n_common; i++)
        a->nodes[nn++] = (struct acceld_devnode){s->common[i], s->common[i], "rw"};
    *out = (struct acceld_alloc){0};
    if (s->o.strategy == ACCELD_STRATEGY_CDI) {
        out->cdi_devices = a->cdi;
        out->n_cdi_devices = ng;
    } else {
        a->env[ne++] = (struct acceld_kv){"NVIDIA_VISIBLE_DEVICES", a->visible};
        out->devices = a->nodes;
        out->n_devices = nn;
    }
    if (s->o.mps) {
        const struct sgpu *g = &s->gpus[gl[0]];
        unsigned k = (unsigned)req->n_devs, pct;
        uint64_t mem;
        if (k > g->max_k || sharing_mps_caps(k, g->replicas, g->mem, &pct, &mem) < 0) {
            snprintf(err, errlen,
                     "request for %u %s replicas of GPU %s: no MPS daemon serves that "
                     "size (at most %u)",
                     k, s->resource, g->uuid, g->max_k);
            r = -EINVAL;
            goto out;
        }
        snprintf(a->pct, sizeof(a->pct), "%u", pct);
        a->env[ne++] = (struct acceld_kv){"CUDA_MPS_PIPE_DIRECTORY", REPLICAS_MPS_PIPE_PATH};
        a->env[ne++] = (struct acceld_kv){"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", a->pct};
        if (mem) {
            /* the client sees its one GPU as device 0 */
            snprintf(a->mem, sizeof(a->mem), "0=%lluM", (unsigned long long)(mem >> 20));
            a->env[ne++] = (struct acceld_kv){"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", a->mem};
        }
        /* no log directory: the root daemon writes its log there, and a directory a container
         * can write is one where it could plant a symlink for root to follow */
        a->mounts[0] = (struct acceld_mount){REPLICAS_MPS_PIPE_PATH, g->pipe[k - 1], false};
        a->mounts[1] = (struct acceld_mount){"/dev/shm", g->shm[k - 1], false};
        out->mounts = a->mounts;
        out->n_mounts = N_MOUNT;
    }
    out->envs = a->env;
    out->n_envs = ne;
    r = 0;
out:
    free(gl);
    return r;
}

static int op_allocate(void *self, const struct acceld_alloc_req *reqs, size_t n,
                       struct acceld_alloc *out, char *err, size_t errlen)
{
    struct replicas *s = self;
    answers_free(s);
    s->ans = calloc(n ? n : 1, sizeof(*s->ans));
    if (!s->ans)
        return -ENOMEM;
    s->n_ans = n;
    for (size_t i = 0; i < n; i++) {
        int r = answer_fill(s, &reqs[i], &s->ans[i], &out[i], err, errlen);
        if (r < 0) {
            answers_free(s);
            return r;
        }
    }
    return 0;
}

static bool op_set_gpu_health(void *self, const char *uuid, bool healthy)
{
    struct replicas *s = self;
    int g = gpu_find(s, uuid);
    if (g < 0 || s->gpus[g].healthy == healthy)
        return false;
    bool before = gpu_up(&s->gpus[g], s->o.mps);
    s->gpus[g].healthy = healthy;
    if (before == gpu_up(&s->gpus[g], s->o.mps))
        return false;
    s->generation++;
    return true;
}

/* MPS: ready once every daemon has answered, or failed to (its supervisor's first report):
 * before, a container given a replica could find no daemon behind its pipe directory. A
 * daemon that failed keeps its GPU's replicas Unhealthy, which the kubelet does not hand
 * out. Time-slicing is always ready. */
static bool op_ready(void *self, char *why, size_t whylen)
{
    struct replicas *s = self;
    for (size_t i = 0; s->o.mps && i < s->n_gpus; i++)
        for (unsigned k = 0; k < s->gpus[i].max_k; k++)
            if (!s->gpus[i].daemon_seen[k]) {
                snprintf(why, whylen,
                         "the MPS control daemon of GPU %s for %u-replica requests has not "
                         "answered yet",
                         s->gpus[i].uuid, k + 1);
                return false;
            }
    return true;
}

static const struct acceld_provider_ops replicas_ops = {
    .count = op_count,
    .device = op_device,
    .find = op_find,
    .generation = op_generation,
    .prefer = op_prefer,
    .allocate = op_allocate,
    .set_gpu_health = op_set_gpu_health,
    .ready = op_ready,
};

struct acceld_provider replicas_provider(struct replicas *s)
{
    return (struct acceld_provider){&replicas_ops, s};
}

int replicas_write_cdi(const struct replicas *s, const char *dir)
{
    struct cdi_device *devs = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(*devs));
    const char **nodes = calloc(s->n_gpus ? s->n_gpus : 1, sizeof(char *));
    const char *common[N_CONTROL];
    int r = -ENOMEM;
    if (devs && nodes) {
        for (size_t i = 0; i < s->n_gpus; i++) {
            nodes[i] = s->gpus[i].node;
            devs[i] = (struct cdi_device){s->gpus[i].uuid, &nodes[i], 1};
        }
        for (size_t i = 0; i < s->n_common; i++)
            common[i] = s->common[i];
        r = cdi_spec_write(dir, s->cdi_vendor, s->cdi_class, devs, s->n_gpus, common, s->n_common);
    }
    free(devs);
    free(nodes);
    return r;
}
