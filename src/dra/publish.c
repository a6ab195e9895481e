/* publish.c — the node's ResourceSlice on the API server: created, updated
 * when what acceld renders changes (pool generation + 1), stale slices of
 * this node and driver deleted, conflicts answered by a fresh LIST, and
 * written again when a watch of the node's slices sees someone else change or
 * delete it (the kubelet deletes them when it starts). One request at a time
 * besides the watch stream, all on the event loop. See dra-kube.h. */
#include "dra-kube.h"

#include "client.h"
#include "evloop.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKOFF_MIN_NS (500ull * 1000000ull)
#define BACKOFF_MAX_NS (30ull * 1000000000ull)
#define WATCH_BACKOFF_MIN_NS (1000ull * 1000000ull)
/* a stream that lasted this long ended normally (the server's watch timeout): restart at once */
#define WATCH_HEALTHY_NS (60ull * 1000000000ull)
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
    struct dra_slice_list list; /* this round's LIST: stale slices, ours */
    char error[512];
    struct dra_publisher_stats stats;
    void (*on_round)(void *);
    void *on_round_data;
    unsigned conflicts_in_a_row; /* reset by a round that ends */
    struct kube_request *watch;  /* the stream of slice changes, once in step */
    uint64_t watch_timer;        /* its restart, after it ended */
    uint64_t watch_backoff_ns;
    uint64_t watch_started_ns;
    bool watch_failing; /* the last stream ended in an error: logged once until one works */
    char list_rv[64];   /* the last LIST's resourceVersion: where the next watch starts */
};

/* 409s in a row answered by listing again at once; more wait out a backoff */
#define CONFLICTS_BEFORE_BACKOFF 5

static void reconcile(struct dra_publisher *p);
static void step(struct dra_publisher *p);
static void watch_start(struct dra_publisher *p);

static void clear_round(struct dra_publisher *p)
{
    dra_slice_list_clear(&p->list);
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
    p->conflicts_in_a_row = 0;
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
    if (!error && !p->watch && !p->watch_timer)
        watch_start(p);
    if (!error && p->dirty)
        reconcile(p);
}

/* A 409: someone else changed a slice; start again from a fresh LIST. */
static void conflict(struct dra_publisher *p, const char *what)
{
    p->stats.conflicts++;
    if (++p->conflicts_in_a_row > CONFLICTS_BEFORE_BACKOFF) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "%u conflicts in a row (last on %s): another writer keeps "
                 "changing the slice",
                 p->conflicts_in_a_row, what);
        round_end(p, msg);
        return;
    }
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
    bool create = !p->list.have_ours;
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
    const char *name = p->list.stale[p->list.n_stale - 1];
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
    free(p->list.stale[--p->list.n_stale]);
    step(p);
}

/* Writes our slice if needed, once the stale ones are gone. */
static void write_ours(struct dra_publisher *p)
{
    const struct dra_slice_list *l = &p->list;
    int64_t cur = l->have_ours ? l->ours_generation : 0;
    char *text = NULL, *spec = NULL;
    int r = dra_slice_render(p->driver, p->node, p->name, cur, p->gpus, p->n_gpus, &text);
    if (r == 0 && l->have_ours && dra_slice_spec_canonical(text, strlen(text), &spec) == 0 &&
        strcmp(spec, l->ours_spec) == 0) {
        free(text);
        free(spec);
        p->stats.generation = cur;
        round_end(p, NULL);
        return;
    }
    free(spec);
    free(text);
    /* a new generation above every slice of the pool seen, so consumers
     * ignore older ones */
    int64_t gen = (cur > l->max_generation ? cur : l->max_generation) + 1;
    r = dra_slice_render(p->driver, p->node, p->name, gen, p->gpus, p->n_gpus, &text);
    json_t *want = r == 0 ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (!want) {
        round_end(p, "cannot render the slice");
        return;
    }
    char path[600];
    const char *method = "POST";
    snprintf(path, sizeof(path), "%s", SLICES_PATH);
    if (l->have_ours) {
        json_object_set_new(json_object_get(want, "metadata"), "resourceVersion",
                            json_string(l->ours_rv));
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
    if (p->list.n_stale) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", SLICES_PATH, p->list.stale[p->list.n_stale - 1]);
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
    char err[256], msg[300];
    if (dra_slice_list_parse(resp->body, resp->body_len, p->driver, p->node, p->name, p->n_gpus > 0,
                             &p->list, err, sizeof(err)) < 0) {
        snprintf(msg, sizeof(msg), "list: %s", err);
        round_end(p, msg);
        return;
    }
    /* an opaque token to the client, but it goes into a URL: letters and digits only */
    const char *rv = p->list.list_rv ? p->list.list_rv : "";
    size_t n = strspn(rv, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
    if (rv[n] || n >= sizeof(p->list_rv))
        n = 0;
    memcpy(p->list_rv, rv, n);
    p->list_rv[n] = '\0';
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

/* ---- the watch: someone else changed or deleted a slice of ours ---- */

/* A change seen: reconcile (now, or after the round or the backoff under way). */
static void kick(struct dra_publisher *p)
{
    p->stats.watch_events++;
    if (p->backoff_timer)
        return; /* a failure is being waited out: its retry reconciles */
    reconcile(p);
}

static int on_watch_line(struct kube_client *c, const char *line, size_t len, void *ud)
{
    (void)c;
    struct dra_publisher *p = ud;
    json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    int stop = 0;
    if (!type || strcmp(type, "ERROR") == 0)
        stop = 1; /* an expired version or a garbled line: start a new stream */
    else if (strcmp(type, "BOOKMARK") != 0)
        kick(p); /* ours or a stale one, added, changed or deleted: LIST and compare */
    json_decref(ev);
    return stop;
}

/* The stream ended a while ago: a reconciliation (what changed while no stream ran), whose
 * end starts the next stream from its LIST's resourceVersion. */
static void on_watch_timer(struct ev_loop *loop, void *ud)
{
    (void)loop;
    struct dra_publisher *p = ud;
    p->watch_timer = 0;
    p->stats.watch_restarts++;
    if (p->backoff_timer)
        return; /* a failure is being waited out: its round starts the watch */
    if (p->busy)
        p->dirty = true;
    else
        reconcile(p);
}

static void on_watch_end(struct kube_client *c, const struct kube_response *resp, void *ud)
{
    (void)c;
    struct dra_publisher *p = ud;
    p->watch = NULL;
    uint64_t lasted = mono_ns() - p->watch_started_ns;
    bool failed = resp->status / 100 != 2;
    if (failed && !p->watch_failing)
        log_warn("dra: the watch of ResourceSlices ended: %s; starting it again",
                 resp->error ? resp->error : "no answer");
    p->watch_failing = failed;
    if (!failed && lasted >= WATCH_HEALTHY_NS)
        p->watch_backoff_ns = WATCH_BACKOFF_MIN_NS;
    if (ev_loop_add_timer(p->loop, p->watch_backoff_ns, on_watch_timer, p, &p->watch_timer) < 0)
        log_error("dra: cannot arm the ResourceSlice watch restart timer");
    p->watch_backoff_ns =
        p->watch_backoff_ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : p->watch_backoff_ns * 2;
}

/* Watches from the resourceVersion of the round's LIST, so what changed since that LIST (a
 * deletion racing the round, our own write) comes as events; each event is answered by a LIST
 * and a comparison (nothing is written when in step), so a repeated one costs a GET. Without
 * a resourceVersion the server sends what there is as ADDED first, with the same effect. */
static void watch_start(struct dra_publisher *p)
{
    char path[1024];
    snprintf(path, sizeof(path),
             "%s?watch=true&allowWatchBookmarks=true&fieldSelector=spec.nodeName%%3D%s%%2Cspec."
             "driver%%3D%s%s%s",
             SLICES_PATH, p->node, p->driver, p->list_rv[0] ? "&resourceVersion=" : "", p->list_rv);
    p->watch_started_ns = mono_ns();
    if (kube_client_stream(p->client, path, on_watch_line, on_watch_end, p, &p->watch) < 0) {
        p->watch = NULL;
        if (ev_loop_add_timer(p->loop, p->watch_backoff_ns, on_watch_timer, p, &p->watch_timer) < 0)
            log_error("dra: cannot arm the ResourceSlice watch restart timer");
    }
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
    p->watch_backoff_ns = WATCH_BACKOFF_MIN_NS;
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
    if (p->watch)
        kube_request_cancel(p->client, p->watch);
    ev_loop_cancel_timer(p->loop, p->backoff_timer);
    ev_loop_cancel_timer(p->loop, p->watch_timer);
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
