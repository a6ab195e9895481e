/* publish.c — the node's ResourceSlice on the API server: created, updated
 * when what acceld renders changes (pool generation + 1), stale slices of
 * this node and driver deleted, conflicts answered by a fresh LIST. One
 * request at a time, all on the event loop. See dra-kube.h. */
#include "dra-kube.h"

#include "client.h"
#include "evloop.h"
#include "log.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKOFF_MIN_NS (500ull * 1000000ull)
#define BACKOFF_MAX_NS (30ull * 1000000000ull)
#define SLICES_PATH "/apis/resource.k8s.io/v1/resourceslices"

struct dra_publisher {
    struct ev_loop *loop;
    struct kube_client *client;
    char driver[128];
    char node[256];
    char name[400];
    const struct dra_gpu *gpus;
    size_t n_gpus;
    bool have_gpus;
    bool busy;  /* a reconciliation is running */
    bool dirty; /* a change came while busy */
    struct kube_request *req;
    uint64_t backoff_timer;
    uint64_t backoff_ns;
    char **stale; /* slice names to delete, in this reconciliation */
    size_t n_stale;
    json_t *ours;    /* our slice as the server has it (NULL: absent) */
    int64_t max_gen; /* the highest pool generation seen in the LIST */
    char error[512];
    struct dra_publisher_stats stats;
    void (*on_round)(void *);
    void *on_round_data;
};

static void reconcile(struct dra_publisher *p);
static void step(struct dra_publisher *p);

static void clear_round(struct dra_publisher *p)
{
    for (size_t i = 0; i < p->n_stale; i++)
        free(p->stale[i]);
    free(p->stale);
    p->stale = NULL;
    p->n_stale = 0;
    json_decref(p->ours);
    p->ours = NULL;
}

static void on_backoff(struct ev_loop *loop, void *ud)
{
    (void)loop;
    struct dra_publisher *p = ud;
    p->backoff_timer = 0;
    reconcile(p);
}

/* The round ends: in step, or after a failure (retry after a backoff). */
static void round_end(struct dra_publisher *p, const char *error)
{
    clear_round(p);
    p->busy = false;
    if (error) {
        snprintf(p->error, sizeof(p->error), "%s", error);
        p->stats.failures++;
        log_warn("dra: ResourceSlice %s: %s; retrying in %llu ms", p->name, error,
                 (unsigned long long)(p->backoff_ns / 1000000));
        if (ev_loop_add_timer(p->loop, p->backoff_ns, on_backoff, p, &p->backoff_timer) < 0)
            log_error("dra: cannot arm the ResourceSlice retry timer");
        p->backoff_ns = p->backoff_ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : p->backoff_ns * 2;
    } else {
        p->error[0] = '\0';
        p->backoff_ns = BACKOFF_MIN_NS;
        p->stats.syncs++;
    }
    if (p->on_round)
        p->on_round(p->on_round_data);
    if (!error && p->dirty)
        reconcile(p);
}

/* A 409: someone else changed a slice; start again from a fresh LIST. */
static void conflict(struct dra_publisher *p, const char *what)
{
    p->stats.conflicts++;
    log_info("dra: ResourceSlice %s: conflict on %s; listing again", p->name, what);
    clear_round(p);
    p->busy = false;
    reconcile(p);
}

static void failed(struct dra_publisher *p, const char *what, const struct kube_response *resp)
{
    char msg[512];
    snprintf(msg, sizeof(msg), "%s: %s", what, resp->error ? resp->error : "failed");
    round_end(p, msg);
}

static void on_written(struct kube_client *c, const struct kube_response *resp, void *ud)
{
    (void)c;
    struct dra_publisher *p = ud;
    p->req = NULL;
    bool create = p->ours == NULL;
    if (resp->status == 409) {
        conflict(p, create ? "create" : "update");
        return;
    }
    if (resp->status / 100 != 2) {
        failed(p, create ? "create" : "update", resp);
        return;
    }
    if (create)
        p->stats.creates++;
    else
        p->stats.updates++;
    log_info("dra: ResourceSlice %s %s (pool generation %lld, %zu device(s))", p->name,
             create ? "created" : "updated", (long long)p->stats.generation, p->n_gpus);
    round_end(p, NULL);
}

static void on_deleted(struct kube_client *c, const struct kube_response *resp, void *ud)
{
    (void)c;
    struct dra_publisher *p = ud;
    p->req = NULL;
    const char *name = p->stale[p->n_stale - 1];
    if (resp->status == 409) {
        conflict(p, name);
        return;
    }
    if (resp->status / 100 != 2 && resp->status != 404) {
        char what[300];
        snprintf(what, sizeof(what), "delete stale slice %s", name);
        failed(p, what, resp);
        return;
    }
    if (resp->status != 404) {
        p->stats.deletes++;
        log_info("dra: stale ResourceSlice %s deleted", name);
    }
    free(p->stale[--p->n_stale]);
    step(p);
}

/* The spec without what the server adds (a taint's timeAdded). */
static json_t *spec_of(json_t *slice)
{
    json_t *spec = json_deep_copy(json_object_get(slice, "spec"));
    size_t i, j;
    json_t *d, *t;
    json_array_foreach(json_object_get(spec, "devices"), i, d)
    {
        json_array_foreach(json_object_get(d, "taints"), j, t)
        {
            json_object_del(t, "timeAdded");
        }
    }
    return spec;
}

/* Writes our slice if needed, once the stale ones are gone. */
static void write_ours(struct dra_publisher *p)
{
    int64_t cur = -1;
    if (p->ours)
        cur = json_integer_value(json_object_get(
            json_object_get(json_object_get(p->ours, "spec"), "pool"), "generation"));
    char *text = NULL;
    int r =
        dra_slice_render(p->driver, p->node, p->name, cur < 0 ? 0 : cur, p->gpus, p->n_gpus, &text);
    json_t *want = r == 0 ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (!want) {
        round_end(p, "cannot render the slice");
        return;
    }
    if (p->ours) {
        json_t *a = spec_of(p->ours), *b = spec_of(want);
        bool same = json_equal(a, b);
        json_decref(a);
        json_decref(b);
        if (same) {
            json_decref(want);
            p->stats.generation = cur;
            round_end(p, NULL);
            return;
        }
    }
    /* a new generation above every slice of the pool seen, so consumers
     * ignore older ones */
    int64_t gen = (cur > p->max_gen ? cur : p->max_gen) + 1;
    json_t *pool = json_object_get(json_object_get(want, "spec"), "pool");
    json_object_set_new(pool, "generation", json_integer(gen));
    char path[600];
    const char *method = "POST";
    snprintf(path, sizeof(path), "%s", SLICES_PATH);
    if (p->ours) {
        json_t *rv = json_object_get(json_object_get(p->ours, "metadata"), "resourceVersion");
        json_object_set(json_object_get(want, "metadata"), "resourceVersion", rv);
        snprintf(path, sizeof(path), "%s/%s", SLICES_PATH, p->name);
        method = "PUT";
    }
    text = json_dumps(want, JSON_COMPACT);
    json_decref(want);
    if (!text) {
        round_end(p, "out of memory");
        return;
    }
    p->stats.generation = gen;
    r = kube_client_request(p->client, method, path, "application/json", text, on_written, p,
                            &p->req);
    free(text);
    if (r < 0)
        round_end(p, "cannot start the request");
}

static void step(struct dra_publisher *p)
{
    if (p->n_stale) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", SLICES_PATH, p->stale[p->n_stale - 1]);
        if (kube_client_request(p->client, "DELETE", path, NULL, NULL, on_deleted, p, &p->req) < 0)
            round_end(p, "cannot start the request");
        return;
    }
    if (p->n_gpus == 0) {
        /* nothing to publish: no slice (ours, if any, was queued as stale) */
        p->stats.generation = 0;
        round_end(p, NULL);
        return;
    }
    write_ours(p);
}

static void on_list(struct kube_client *c, const struct kube_response *resp, void *ud)
{
    (void)c;
    struct dra_publisher *p = ud;
    p->req = NULL;
    if (resp->status != 200) {
        failed(p, "list", resp);
        return;
    }
    json_t *list = json_loadb(resp->body, resp->body_len, 0, NULL);
    json_t *items = json_object_get(list, "items");
    if (!json_is_array(items)) {
        json_decref(list);
        round_end(p, "list: the answer has no items");
        return;
    }
    size_t i;
    json_t *it;
    p->max_gen = 0;
    p->stale = calloc(json_array_size(items) + 1, sizeof(char *));
    if (!p->stale) {
        json_decref(list);
        round_end(p, "out of memory");
        return;
    }
    json_array_foreach(items, i, it)
    {
        json_t *spec = json_object_get(it, "spec");
        const char *name =
            json_string_value(json_object_get(json_object_get(it, "metadata"), "name"));
        /* the field selector is the server's; check what came back anyway */
        if (!name || !json_is_object(spec) ||
            strcmp(json_string_value(json_object_get(spec, "driver")) ?: "", p->driver) != 0 ||
            strcmp(json_string_value(json_object_get(spec, "nodeName")) ?: "", p->node) != 0)
            continue;
        int64_t g =
            json_integer_value(json_object_get(json_object_get(spec, "pool"), "generation"));
        if (g > p->max_gen)
            p->max_gen = g;
        if (strcmp(name, p->name) == 0 && p->n_gpus) {
            json_decref(p->ours);
            p->ours = json_incref(it);
        } else if ((p->stale[p->n_stale] = strdup(name))) {
            p->n_stale++;
        }
    }
    json_decref(list);
    step(p);
}

static void reconcile(struct dra_publisher *p)
{
    if (!p->have_gpus)
        return;
    if (p->busy) {
        p->dirty = true;
        return;
    }
    p->busy = true;
    p->dirty = false;
    char path[1024];
    /* fieldSelector=spec.nodeName=<node>,spec.driver=<driver> ('=' and ','
     * escaped; node and driver names are DNS names: nothing else to escape) */
    snprintf(path, sizeof(path), "%s?fieldSelector=spec.nodeName%%3D%s%%2Cspec.driver%%3D%s",
             SLICES_PATH, p->node, p->driver);
    if (kube_client_request(p->client, "GET", path, NULL, NULL, on_list, p, &p->req) < 0)
        round_end(p, "cannot start the request");
}

int dra_publisher_new(struct ev_loop *loop, struct kube_client *client, const char *driver_name,
                      const char *node_name, struct dra_publisher **ret)
{
    struct dra_publisher *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->loop = loop;
    p->client = client;
    p->backoff_ns = BACKOFF_MIN_NS;
    if (snprintf(p->driver, sizeof(p->driver), "%s", driver_name) >= (int)sizeof(p->driver) ||
        snprintf(p->node, sizeof(p->node), "%s", node_name) >= (int)sizeof(p->node) ||
        snprintf(p->name, sizeof(p->name), "%s-%s", node_name, driver_name) > 253) {
        free(p);
        return -ENAMETOOLONG;
    }
    *ret = p;
    return 0;
}

struct dra_publisher *dra_publisher_free(struct dra_publisher *p)
{
    if (!p)
        return NULL;
    if (p->req)
        kube_request_cancel(p->client, p->req);
    ev_loop_cancel_timer(p->loop, p->backoff_timer);
    clear_round(p);
    free(p);
    return NULL;
}

void dra_publisher_on_round(struct dra_publisher *p, void (*fn)(void *), void *user_data)
{
    p->on_round = fn;
    p->on_round_data = user_data;
}

void dra_publisher_set(struct dra_publisher *p, const struct dra_gpu *gpus, size_t n_gpus)
{
    p->gpus = gpus;
    p->n_gpus = n_gpus;
    p->have_gpus = true;
    if (p->busy) {
        p->dirty = true;
        return;
    }
    if (p->backoff_timer) {
        /* a failure is being waited out: try the new content now */
        ev_loop_cancel_timer(p->loop, p->backoff_timer);
        p->backoff_timer = 0;
    }
    reconcile(p);
}

bool dra_publisher_synced(const struct dra_publisher *p)
{
    return p->have_gpus && !p->busy && !p->dirty && !p->error[0];
}

const char *dra_publisher_error(const struct dra_publisher *p)
{
    return p->error[0] ? p->error : NULL;
}

void dra_publisher_stats(const struct dra_publisher *p, struct dra_publisher_stats *ret)
{
    *ret = p->stats;
}

const char *dra_publisher_slice_name(const struct dra_publisher *p)
{
    return p->name;
}
