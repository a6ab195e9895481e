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
    /* annotation keys of the list (one per entry) */
    char (*keys)[VGPU_NAME_MAX + 32];
    char node[VGPU_NAME_MAX];
    /* Events posted lately: "<pod uid>/<container>/<reason>" and when */
    struct posted {
        char key[2 * VGPU_NAME_MAX + 64];
        int64_t at;
    } posted[64];
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
        if (l)
            k->list = l;
        char(*keys)[VGPU_NAME_MAX + 32] = realloc(k->keys, total * sizeof(*keys));
        if (keys)
            k->keys = keys;
        if (!l || !keys) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
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
            snprintf(k->keys[n], sizeof(k->keys[n]), "%s%s", VGPU_ANNOTATION_PREFIX, ct->name);
            k->list[n] = (struct vgpu_pending){
                p->uid,           p->namespace, p->name, ct->name,
                p->creation_time, cores,        mem,     kube_pod_annotation(p, k->keys[n])};
            n++;
        }
    }
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

/* Whether key was posted less than VGPU_KUBE_EVENT_REPEAT_S before now; if
 * not, it is recorded as posted now (over the oldest entry). */
static bool posted_lately(struct vgpu_kube *k, const char *key, int64_t now)
{
    size_t oldest = 0;
    for (size_t i = 0; i < ARRAY_SIZE(k->posted); i++) {
        struct posted *p = &k->posted[i];
        if (p->at && strcmp(p->key, key) == 0) {
            if (now - p->at < VGPU_KUBE_EVENT_REPEAT_S)
                return true;
            oldest = i;
            break;
        }
        if (p->at < k->posted[oldest].at)
            oldest = i;
    }
    snprintf(k->posted[oldest].key, sizeof(k->posted[oldest].key), "%s", key);
    k->posted[oldest].at = now;
    return false;
}

int vgpu_kube_event(struct vgpu_kube *k, const char *ns, const char *pod, const char *pod_uid,
                    const char *container, const char *reason, const char *message)
{
    int64_t now = (int64_t)time(NULL);
    char key[sizeof(k->posted[0].key)];
    snprintf(key, sizeof(key), "%s/%s/%s", pod_uid, container, reason);
    if (posted_lately(k, key, now))
        return 0;
    struct kube_event_spec spec = {ns,       pod,     pod_uid, KUBE_EVENT_WARNING, reason, message,
                                   "acceld", k->node, now};
    char *body = NULL, path[400];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns);
    int r = kube_event_json(&spec, &body);
    if (r == 0)
        r = kube_client_request(k->client, "POST", path, "application/json", body, on_event_posted,
                                k, NULL);
    free(body);
    if (r < 0) {
        log_warn("vGPU: cannot post an Event about %s/%s: %s", ns, pod, strerror(-r));
        return r;
    }
    return 1;
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

static const struct vgpu_pods_ops kube_pods_ops = {op_pending, op_annotate};

/* The cached list points into the cache's pods: any change makes it stale. */
static void on_pod(struct kube_podwatch *w, enum kube_watch_type type, const struct kube_pod *pod,
                   void *user_data)
{
    struct vgpu_kube *k = user_data;
    k->fresh = false;
}

static void on_warm(struct kube_client *c, const struct kube_response *resp, void *user_data)
{
    if (resp->error)
        log_debug("vGPU: GET /version: %s", resp->error);
}

static void on_state(struct kube_podwatch *w, const char *error, void *user_data)
{
    struct vgpu_kube *k = user_data;
    if (error) {
        log_warn("vGPU: the pod watch is not in step (%s): vGPU Allocates are refused until it "
                 "is",
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
    static const struct kube_podwatch_ops wops = {on_pod, on_state};
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
    free(k->keys);
    free(k);
    return NULL;
}

struct vgpu_pods vgpu_kube_pods(struct vgpu_kube *k)
{
    return (struct vgpu_pods){&kube_pods_ops, k};
}
