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
    void (*on_refused)(void *, const char *);
    void *on_refused_data;
    unsigned conflicts_in_a_row; /* reset by a round that ends */
    struct kube_request *watch;  /* the stream of slice changes, once in step */
    uint64_t watch_timer;        /* its restart, after it ended */
    uint64_t watch_backoff_ns;
    uint64_t watch_started_ns;
    bool watch_failing; /* the last stream ended in an error: logged once until one works */
    char list_rv[64];   /* the last LIST's resourceVersion: where the next watch starts */
    /* this round's writes: the pool rendered at its new generation, written in order */
    struct dra_slice_out *want;
    size_t n_want;
    size_t writing; /* the slice whose write is in flight */
    bool *list_has; /* per slice of want: it was listed (an update, else a create) */
};

/* 409s in a row answered by listing again at once; more wait out a backoff */
#define CONFLICTS_BEFORE_BACKOFF 5

static void reconcile(struct dra_publisher *p);
static void step(struct dra_publisher *p);
static void watch_start(struct dra_publisher *p);

static void clear_round(struct dra_publisher *p)
{
    dra_slice_list_clear(&p->list);
    dra_pool_free(p->want, p->n_want);
    p->want = NULL;
    p->n_want = 0;
    p->writing = 0;
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

static void write_next(struct dra_publisher *p);

/* The partitionable-device fields of a slice (MIG partitions) did not survive the write. */
static bool refused(struct dra_publisher *p, const struct kube_response *resp)
{
    const struct dra_slice_out *w = &p->want[p->writing];
    if (!w->partitions || !p->on_refused)
        return false;
    char why[400];
    if (resp->status == 400 && resp->body && strstr(resp->body, "unknown field"))
        snprintf(why, sizeof(why),
                 "the API server does not know the partitionable-device fields (writing %s with "
                 "fieldValidation=Strict: 400 unknown field)",
                 w->name);
    else if (resp->status / 100 == 2 &&
             !dra_slice_kept_partitions(w->json, resp->body, resp->body_len))
        snprintf(why, sizeof(why),
                 "the API server dropped sharedCounters/consumesCounters from %s (the "
                 "DRAPartitionableDevices feature gate is off)",
                 w->name);
    else
        return false;
    p->on_refused(p->on_refused_data, why);
    return true;
}

static void on_written(struct kube_client *c, const struct kube_response *resp, void *ud)
{
    (void)c;
    struct dra_publisher *p = ud;
    p->req = NULL;
    bool create = !p->list_has[p->writing];
    if (resp->status == 409) {
        conflict(p, create ? "create" : "update");
        return;
    }
    if (refused(p, resp)) {
        /* the owner has set the GPUs again without partitions: a new round follows */
        p->dirty = true;
        round_end(p, NULL);
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
    log_info("dra: ResourceSlice %s %s (pool generation %lld, %zu GPU(s))",
             p->want[p->writing].name, create ? "created" : "updated",
             (long long)p->stats.generation, p->n_gpus);
    p->writing++;
    write_next(p);
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

/* The slice of the LIST named name, or -1. */
static int listed(const struct dra_publisher *p, const char *name)
{
    for (size_t i = 0; i < p->list.n_items; i++)
        if (strcmp(p->list.items[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Writes the next slice of the round (PUT over the listed one, else POST). */
static void write_next(struct dra_publisher *p)
{
    if (p->writing == p->n_want) {
        round_end(p, NULL);
        return;
    }
    const struct dra_slice_out *w = &p->want[p->writing];
    int it = listed(p, w->name);
    json_t *body = json_loads(w->json, 0, NULL);
    if (!body) {
        round_end(p, "cannot render the slice");
        return;
    }
    char path[700];
    const char *method = "POST";
    /* strict: an API server whose schema lacks a field says so instead of dropping it */
    const char *strict = w->partitions ? "?fieldValidation=Strict" : "";
    snprintf(path, sizeof(path), "%s%s", SLICES_PATH, strict);
    p->list_has[p->writing] = it >= 0;
    if (it >= 0) {
        json_object_set_new(json_object_get(body, "metadata"), "resourceVersion",
                            json_string(p->list.items[it].rv));
        snprintf(path, sizeof(path), "%s/%s%s", SLICES_PATH, w->name, strict);
        method = "PUT";
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) {
        round_end(p, "out of memory");
        return;
    }
    int r = kube_client_request(p->client, method, path, "application/json", text, on_written, p,
                                &p->req);
    free(text);
    if (r < 0)
        round_end(p, "cannot start the request");
}

/* Writes the pool if needed, once the stale slices are gone: nothing when every slice of it
 * is listed with what is rendered at its generation, else all of them at a new one. */
static void write_ours(struct dra_publisher *p)
{
    const struct dra_slice_list *l = &p->list;
    int first = p->n_want ? listed(p, p->want[0].name) : -1;
    int64_t cur = first >= 0 ? l->items[first].generation : 0;
    struct dra_slice_out *now = NULL;
    size_t n_now = 0;
    bool same = first >= 0 &&
                dra_pool_render(p->driver, p->node, cur, p->gpus, p->n_gpus, &now, &n_now) == 0;
    for (size_t i = 0; same && i < n_now; i++) {
        int it = listed(p, now[i].name);
        char *spec = NULL;
        same = it >= 0 && l->items[it].generation == cur &&
               dra_slice_spec_canonical(now[i].json, strlen(now[i].json), &spec) == 0 &&
               strcmp(spec, l->items[it].spec) == 0;
        free(spec);
    }
    dra_pool_free(now, n_now);
    if (same) {
        p->stats.generation = cur;
        round_end(p, NULL);
        return;
    }
    /* a new generation above every slice of the pool seen, so consumers
     * ignore older ones */
    int64_t gen = (cur > l->max_generation ? cur : l->max_generation) + 1;
    dra_pool_free(p->want, p->n_want);
    p->want = NULL;
    p->n_want = 0;
    if (dra_pool_render(p->driver, p->node, gen, p->gpus, p->n_gpus, &p->want, &p->n_want) < 0) {
        round_end(p, "cannot render the slice");
        return;
    }
    p->stats.generation = gen;
    p->writing = 0;
    write_next(p);
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
    if (p->n_want == 0) {
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
    /* every slice of ours is "stale" to the parse; the pool's own are taken out below */
    if (dra_slice_list_parse(resp->body, resp->body_len, p->driver, p->node, p->name, false,
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
    /* the pool's slices by name (rendered here for their names; write_ours renders them
     * again at the generation it writes) */
    bool *has = NULL;
    if (dra_pool_render(p->driver, p->node, 0, p->gpus, p->n_gpus, &p->want, &p->n_want) < 0 ||
        !(has = realloc(p->list_has, (p->n_want ? p->n_want : 1) * sizeof(bool)))) {
        round_end(p, "cannot render the slice");
        return;
    }
    p->list_has = has;
    size_t k = 0;
    for (size_t i = 0; i < p->list.n_stale; i++) {
        bool ours = false;
        for (size_t w = 0; w < p->n_want; w++)
            ours |= strcmp(p->want[w].name, p->list.stale[i]) == 0;
        if (ours)
            free(p->list.stale[i]);
        else
            p->list.stale[k++] = p->list.stale[i];
    }
    p->list.n_stale = k;
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
    free(p->list_has);
    free(p);
    return NULL;
}

void dra_publisher_on_round(struct dra_publisher *p, void (*fn)(void *), void *user_data)
{
    p->on_round = fn;
    p->on_round_data = user_data;
}

void dra_publisher_on_refused(struct dra_publisher *p, void (*fn)(void *, const char *),
                              void *user_data)
{
    p->on_refused = fn;
    p->on_refused_data = user_data;
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
