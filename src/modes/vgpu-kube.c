/* vgpu-kube.c — the vGPU pod source over the Kubernetes client's watch cache
 * (src/kube): pending containers asking for vGPU resources, oldest pod first,
 * read from the cache without an API call, and the assignment annotation as
 * a merge PATCH; see vgpu-kube.h. */
#include "vgpu-kube.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "kubeconfig.h"
#include "log.h"
#include "events.h"
#include "objects.h"
#include "pod.h"
#include "podwatch.h"
#include "util.h"

struct vgpu_kube {
    struct kube_client *client;
    struct kube_podwatch *watch;
    char core_resource[128];
    char memory_resource[128];
    struct vgpu_pending *list;
    size_t cap, n;
    /* list is what the cache holds now: rebuilt only after the cache changed (on_pod), so
     * the two Allocates of a container and the ones of a burst share one build */
    bool fresh;
    char node[VGPU_NAME_MAX];
    /* the agent's hooks: a pod gone or terminal; the watch in step or not */
    void (*gone_hook)(void *ctx, const char *pod_uid);
    void (*state_hook)(void *ctx, bool in_step);
    void *hook_ctx;
    uint64_t last_doubt_ns; /* the last relist an unmatched Allocate asked for */
    /* Events posted lately: "<pod uid>/<container>/<reason>" */
    struct kube_event_memo posted;
    /* pods the watch left out (on_skip): lines said in the current minute, and held back */
    int64_t skip_minute;
    unsigned skip_said, skip_held;
};

/* A container's amount of resource: its request, else its limit (extended
 * resources must have a limit; the request defaults to it). Whole units only.
 * Returns 0 (absent: 0) or -EINVAL. */
static int amount(const struct kube_container *c, const char *resource, uint64_t *ret)
{
    const char *q = kube_container_request(c, resource);
    if (!q)
        q = kube_container_limit(c, resource);
    *ret = 0;
    if (!q)
        return 0;
    int64_t milli;
    if (kube_quantity_parse_milli(q, &milli) < 0 || milli < 0 || milli % 1000)
        return -EINVAL;
    *ret = (uint64_t)(milli / 1000);
    return 0;
}

static int cmp_pending(const void *a, const void *b)
{
    const struct vgpu_pending *x = a, *y = b;
    if (x->created != y->created)
        return x->created < y->created ? -1 : 1;
    int r = strcmp(x->namespace, y->namespace);
    if (r == 0)
        r = strcmp(x->pod_name, y->pod_name);
    return r;
}

static bool pending_phase(const struct kube_pod *p)
{
    return !p->deleting && (p->phase[0] == '\0' || strcmp(p->phase, "Pending") == 0);
}

static int op_pending(void *self, const struct vgpu_pending **ret, size_t *ret_n, char *err,
                      size_t errlen)
{
    struct vgpu_kube *k = self;
    const char *why = kube_podwatch_error(k->watch);
    if (!kube_podwatch_synced(k->watch) || why) {
        snprintf(err, errlen, "%s",
                 why ? why
                     : "the first LIST of this node's pods has not "
                       "succeeded yet");
        return -EHOSTUNREACH;
    }
    if (k->fresh) {
        *ret = k->list;
        *ret_n = k->n;
        return 0;
    }
    size_t n_pods, n = 0;
    const struct kube_pod *const *pods = kube_podwatch_pods(k->watch, &n_pods);
    size_t total = 0;
    for (size_t i = 0; i < n_pods; i++)
        if (pending_phase(pods[i]))
            total += pods[i]->n_containers;
    if (total > k->cap) {
        struct vgpu_pending *l = realloc(k->list, total * sizeof(*l));
        if (!l) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
        k->list = l;
        k->cap = total;
    }
    for (size_t i = 0; i < n_pods; i++) {
        const struct kube_pod *p = pods[i];
        if (!pending_phase(p))
            continue;
        for (size_t c = 0; c < p->n_containers; c++) {
            const struct kube_container *ct = &p->containers[c];
            uint64_t cores, mem;
            if (amount(ct, k->core_resource, &cores) < 0 ||
                amount(ct, k->memory_resource, &mem) < 0) {
                log_warn("vGPU: pod %s/%s container %s asks for a fraction of a vGPU unit: "
                         "ignored",
                         p->namespace, p->name, ct->name);
                continue;
            }
            if (!cores && !mem)
                continue;
            /* accel.dev/vgpu-<container> is acceld's output, never an input: the pod's
             * author writes its annotations, so one naming a GPU would let any tenant choose
             * its placement over the policy (issue 22, F3). chosen_gpu stays NULL. */
            k->list[n] = (struct vgpu_pending){p->uid,           p->namespace, p->name, ct->name,
                                               p->creation_time, cores,        mem,     NULL};
            n++;
        }
    }
    if (n > 1) /* qsort's array must not be NULL, even for 0 elements (C17 7.22.5) */
        qsort(k->list, n, sizeof(*k->list), cmp_pending);
    k->n = n;
    k->fresh = true;
    *ret = k->list;
    *ret_n = n;
    return 0;
}

static void on_patched(struct kube_client *c, const struct kube_response *resp, void *user_data)
{
    if (resp->error)
        log_warn("vGPU: cannot annotate the pod with its GPU (the checkpoint has it): %s",
                 resp->error);
}

static void op_annotate(void *self, const char *ns, const char *pod, const char *key,
                        const char *value)
{
    struct vgpu_kube *k = self;
    char *body = NULL;
    char path[700];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, pod);
    int r = kube_annotation_patch(&key, &value, 1, &body);
    if (r == 0)
        r = kube_client_request(k->client, "PATCH", path, "application/merge-patch+json", body,
                                on_patched, k, NULL);
    if (r < 0)
        log_warn("vGPU: cannot annotate %s/%s with its GPU: %s", ns, pod, strerror(-r));
    free(body);
}

static void on_event_posted(struct kube_client *c, const struct kube_response *resp,
                            void *user_data)
{
    if (resp->error)
        log_warn("vGPU: cannot post the host-side check's Event: %s", resp->error);
}

int vgpu_kube_event(struct vgpu_kube *k, const char *ns, const char *pod, const char *pod_uid,
                    const char *container, const char *reason, const char *message)
{
    char key[sizeof(k->posted.e[0].key)];
    snprintf(key, sizeof(key), "%s/%s/%s", pod_uid, container, reason);
    struct kube_event_spec spec = {ns,      pod,      pod_uid, KUBE_EVENT_WARNING, reason,
                                   message, "acceld", k->node, time(NULL)};
    int r = kube_event_post(k->client, &k->posted, key, &spec, on_event_posted, k);
    if (r < 0)
        log_warn("vGPU: cannot post an Event about %s/%s: %s", ns, pod, strerror(-r));
    return r;
}

const char *vgpu_kube_container_id(struct vgpu_kube *k, const char *pod_uid, const char *container)
{
    size_t n;
    const struct kube_pod *const *pods = kube_podwatch_pods(k->watch, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(pods[i]->uid, pod_uid) == 0)
            return kube_pod_container_id(pods[i], container);
    return NULL;
}

static bool terminal(const struct kube_pod *p)
{
    return strcmp(p->phase, "Succeeded") == 0 || strcmp(p->phase, "Failed") == 0;
}

static enum vgpu_pod_state op_pod_state(void *self, const char *uid)
{
    struct vgpu_kube *k = self;
    if (!kube_podwatch_synced(k->watch))
        return VGPU_POD_UNKNOWN;
    const struct kube_pod *p = kube_podwatch_get(k->watch, uid);
    if (!p) /* it was in the cache when matched: a DELETED event or a relist took it out */
        return VGPU_POD_DONE;
    if (terminal(p))
        return VGPU_POD_DONE;
    if (p->phase[0] == '\0' || strcmp(p->phase, "Pending") == 0)
        return VGPU_POD_PENDING;
    return strcmp(p->phase, "Running") == 0 ? VGPU_POD_RUNNING : VGPU_POD_UNKNOWN;
}

static const char *op_pod_uid(void *self, const char *ns, const char *name)
{
    struct vgpu_kube *k = self;
    size_t n;
    const struct kube_pod *const *pods = kube_podwatch_pods(k->watch, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(pods[i]->namespace, ns) == 0 && strcmp(pods[i]->name, name) == 0)
            return pods[i]->uid;
    return NULL;
}

/* At most one relist a second for Allocates that found no pod, or that wait while the pod list
 * is not available (only while an Allocate waits: at most allocateWait of them). */
#define DOUBT_RELIST_NS 1000000000ull

static void op_doubt(void *self)
{
    struct vgpu_kube *k = self;
    uint64_t now = mono_ns();
    if (k->last_doubt_ns && now - k->last_doubt_ns < DOUBT_RELIST_NS)
        return;
    k->last_doubt_ns = now;
    bool in_step = kube_podwatch_synced(k->watch) && !kube_podwatch_error(k->watch);
    if (kube_podwatch_relist(k->watch) == 0)
        log_info("vGPU: %s", in_step ? "an Allocate found no pending pod for it: listing the "
                                       "pods again in case the watch is behind"
                                     : "an Allocate waits for the pod list: listing the pods "
                                       "again now (at most once a second)");
}

static const struct vgpu_pods_ops kube_pods_ops = {op_pending, op_annotate, op_pod_state,
                                                   op_pod_uid, op_doubt};

void vgpu_kube_set_hooks(struct vgpu_kube *k, void (*gone)(void *ctx, const char *pod_uid),
                         void (*state)(void *ctx, bool in_step), void *ctx)
{
    k->gone_hook = gone;
    k->state_hook = state;
    k->hook_ctx = ctx;
}

/* A pod the API server returned that fails validation (issue 22, F11: 4097 annotations, a NUL
 * in a value): the watch left it out and goes on, so it costs only itself. Said once per pod
 * per KUBE_EVENT_REPEAT_S, at most VGPU_KUBE_SKIP_LINES lines a minute (the rest
 * counted), with a Warning Event on it when its namespace, name and uid can be believed. */
#define VGPU_KUBE_SKIP_LINES 10
static void on_skip(struct kube_podwatch *w, const struct kube_pod_skip *skip, void *user_data)
{
    struct vgpu_kube *k = user_data;
    int64_t now = (int64_t)time(NULL);
    char key[sizeof(k->posted.e[0].key)];
    snprintf(key, sizeof(key), "%s//skip/%s/%s", skip->uid, skip->ns, skip->name);
    for (size_t i = 0; i < ARRAY_SIZE(k->posted.e); i++)
        if (k->posted.e[i].at && now - k->posted.e[i].at < KUBE_EVENT_REPEAT_S &&
            strcmp(k->posted.e[i].key, key) == 0)
            return; /* said lately: no line, no Event */
    if (now / 60 != k->skip_minute) {
        if (k->skip_held)
            log_warn("vGPU: %u more pod(s) from the API server ignored in the last minute (not "
                     "valid; see above)",
                     k->skip_held);
        k->skip_minute = now / 60;
        k->skip_said = k->skip_held = 0;
    }
    if (k->skip_said >= VGPU_KUBE_SKIP_LINES) {
        k->skip_held++;
        return;
    }
    k->skip_said++;
    log_warn("vGPU: pod %s/%s (uid %s) from the API server is ignored: %s; no vGPU Allocate can "
             "match it, every other pod is served",
             skip->ns[0] ? skip->ns : "?", skip->name[0] ? skip->name : "?",
             skip->uid[0] ? skip->uid : "?", skip->why);
    char msg[512];
    snprintf(msg, sizeof(msg),
             "acceld ignores this pod: %s. It gets no vGPU share until it is fixed.", skip->why);
    struct kube_event_spec spec = {
        skip->ns, skip->name, skip->uid, KUBE_EVENT_WARNING, VGPU_EVENT_POD_IGNORED, msg,
        "acceld", k->node,    now};
    if (skip->ns[0] && skip->uid[0])
        kube_event_post(k->client, &k->posted, key, &spec, on_event_posted, k);
}

/* The cached list points into the cache's pods: any change makes it stale. */
static void on_pod(struct kube_podwatch *w, enum kube_watch_type type, const struct kube_pod *pod,
                   void *user_data)
{
    struct vgpu_kube *k = user_data;
    k->fresh = false;
    /* a share of this pod may be free now (the agent asks the kubelet which) */
    if (k->gone_hook && (type == KUBE_WATCH_DELETED || terminal(pod)))
        k->gone_hook(k->hook_ctx, pod->uid);
}

static void on_warm(struct kube_client *c, const struct kube_response *resp, void *user_data)
{
    if (resp->error)
        log_debug("vGPU: GET /version: %s", resp->error);
}

static void on_state(struct kube_podwatch *w, const char *error, void *user_data)
{
    struct vgpu_kube *k = user_data;
    if (k->state_hook)
        k->state_hook(k->hook_ctx, !error);
    if (error) {
        log_warn("vGPU: the pod watch is not in step (%s): vGPU Allocates wait for it (up to "
                 "allocateWait)",
                 error);
        return;
    }
    log_info("vGPU: the pod watch is in step");
    /* Over HTTP/1.1 the watch holds its connection: the first PATCH after an Allocate would
     * open the requests' one, a TLS handshake on the loop while the kubelet's next Allocate
     * waits. A request now (GET /version: any authenticated client may) opens it ahead. */
    if (kube_client_request(k->client, "GET", "/version", NULL, NULL, on_warm, k, NULL) < 0)
        log_debug("vGPU: cannot send GET /version");
}

int vgpu_kube_new(struct ev_loop *loop, const struct vgpu_kube_options *opts,
                  struct vgpu_kube **ret, char *err, size_t errlen)
{
    const char *node =
        opts->node_name && opts->node_name[0] ? opts->node_name : getenv("NODE_NAME");
    if (!node || !node[0]) {
        snprintf(err, errlen, "no node name: set nodeName (--node-name) or $NODE_NAME");
        return -EINVAL;
    }
    struct kube_config *kc = NULL;
    int r = opts->kubeconfig && opts->kubeconfig[0]
                ? kube_config_load_kubeconfig(opts->kubeconfig, &kc, err, errlen)
                : kube_config_in_cluster(NULL, &kc, err, errlen);
    if (r < 0)
        return r;
    struct vgpu_kube *k = calloc(1, sizeof(*k));
    if (!k) {
        kube_config_free(kc);
        return -ENOMEM;
    }
    snprintf(k->node, sizeof(k->node), "%s", node);
    snprintf(k->core_resource, sizeof(k->core_resource), "%s", opts->core_resource);
    snprintf(k->memory_resource, sizeof(k->memory_resource), "%s", opts->memory_resource);
    static const struct kube_podwatch_ops wops = {on_pod, on_state, on_skip};
    r = kube_client_new(loop, kc, &k->client);
    kube_config_free(kc);
    if (r == 0)
        r = kube_podwatch_new(loop, k->client, node, &wops, k, &k->watch);
    if (r == 0)
        r = kube_podwatch_start(k->watch);
    if (r < 0) {
        snprintf(err, errlen, "cannot start watching the pods of node %s: %s", node, strerror(-r));
        vgpu_kube_free(k);
        return r;
    }
    *ret = k;
    return 0;
}

struct vgpu_kube *vgpu_kube_free(struct vgpu_kube *k)
{
    if (!k)
        return NULL;
    kube_podwatch_free(k->watch);
    kube_client_free(k->client);
    free(k->list);
    free(k);
    return NULL;
}

struct vgpu_pods vgpu_kube_pods(struct vgpu_kube *k)
{
    return (struct vgpu_pods){&kube_pods_ops, k};
}
