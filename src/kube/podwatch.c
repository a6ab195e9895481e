/* podwatch.c — owns the LIST + WATCH cycle of this node's pods and the cache it feeds.
 *
 * The protocol (Kubernetes API concepts, "Efficient detection of changes"): LIST gives the
 * items and the list's resourceVersion; WATCH from that version streams one JSON event per
 * line (ADDED / MODIFIED / DELETED with the object, BOOKMARK with only a newer
 * resourceVersion, ERROR with a Status). A version the server no longer has answers 410 Gone,
 * as an HTTP status or an ERROR event: then only a new LIST helps. A stream that ends cleanly
 * (the server's timeoutSeconds) is resumed at once from the last version seen (after a backoff
 * when it brought no event at all). One that breaks or fails may have lost events: the cache is
 * not in step until a LIST, made at once the first time in QUICK_RELIST_NS, after a backoff
 * (min doubling to max, reset by the next good event) when streams keep breaking.
 *
 * The cache is an array searched linearly: a node runs at most a few hundred pods. */
#define _GNU_SOURCE
#include "podwatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "evloop.h"
#include "util.h"

#define WATCH_TIMEOUT_S 300 /* the server ends each watch after this; we resume from the rv */
/* A stream that breaks at most this often is relisted at once; more often, after a backoff. */
#define QUICK_RELIST_NS (5ull * 1000000000ull)

enum pw_phase { PW_IDLE, PW_LISTING, PW_WATCHING, PW_WAITING };

struct kube_podwatch {
    struct ev_loop *loop;
    struct kube_client *client;
    char *node;
    struct kube_podwatch_ops ops;
    void *user_data;
    enum pw_phase phase;
    struct kube_request *req;
    uint64_t retry_timer;
    uint64_t backoff_min, backoff_max, backoff;
    bool synced, gone, need_list;
    char *rv;
    char *error;
    struct kube_pod **pods;
    size_t n_pods, cap_pods;
    struct kube_podwatch_stats stats;
    uint64_t events_at_watch; /* stats.events when the running watch started */
    uint64_t last_break_ns;   /* CLOCK_MONOTONIC of the last stream that broke */
};

static void do_list(struct kube_podwatch *w);
static void do_watch(struct kube_podwatch *w);

static bool valid_node(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            return false;
    return true;
}

int kube_podwatch_new(struct ev_loop *loop, struct kube_client *client, const char *node_name,
                      const struct kube_podwatch_ops *ops, void *user_data,
                      struct kube_podwatch **ret)
{
    if (!node_name || !valid_node(node_name))
        return -EINVAL;
    struct kube_podwatch *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->loop = loop;
    w->client = client;
    w->ops = ops ? *ops : (struct kube_podwatch_ops){0};
    w->user_data = user_data;
    w->backoff_min = 500 * 1000000ull;
    w->backoff_max = 30 * 1000000000ull;
    w->need_list = true;
    if (!(w->node = strdup(node_name)) || !(w->rv = strdup(""))) {
        kube_podwatch_free(w);
        return -ENOMEM;
    }
    *ret = w;
    return 0;
}

struct kube_podwatch *kube_podwatch_free(struct kube_podwatch *w)
{
    if (!w)
        return NULL;
    kube_request_cancel(w->client, w->req);
    ev_loop_cancel_timer(w->loop, w->retry_timer);
    for (size_t i = 0; i < w->n_pods; i++)
        kube_pod_free(w->pods[i]);
    free(w->pods);
    free(w->node);
    free(w->rv);
    free(w->error);
    free(w);
    return NULL;
}

void kube_podwatch_set_backoff(struct kube_podwatch *w, uint64_t min_ns, uint64_t max_ns)
{
    w->backoff_min = min_ns ? min_ns : 1;
    w->backoff_max = max_ns < w->backoff_min ? w->backoff_min : max_ns;
}

bool kube_podwatch_synced(const struct kube_podwatch *w)
{
    return w->synced;
}

const char *kube_podwatch_error(const struct kube_podwatch *w)
{
    return w->error;
}

const char *kube_podwatch_resource_version(const struct kube_podwatch *w)
{
    return w->rv;
}

void kube_podwatch_stats(const struct kube_podwatch *w, struct kube_podwatch_stats *ret)
{
    *ret = w->stats;
}

static ssize_t find(const struct kube_podwatch *w, const char *uid)
{
    for (size_t i = 0; i < w->n_pods; i++)
        if (strcmp(w->pods[i]->uid, uid) == 0)
            return (ssize_t)i;
    return -1;
}

const struct kube_pod *kube_podwatch_get(const struct kube_podwatch *w, const char *uid)
{
    ssize_t i = find(w, uid);
    return i < 0 ? NULL : w->pods[i];
}

const struct kube_pod *const *kube_podwatch_pods(const struct kube_podwatch *w, size_t *ret_n)
{
    *ret_n = w->n_pods;
    return (const struct kube_pod *const *)w->pods;
}

static void set_error(struct kube_podwatch *w, const char *msg)
{
    free(w->error);
    w->error = msg ? strdup(msg) : NULL;
    if (w->ops.on_state)
        w->ops.on_state(w, msg, w->user_data);
}

static void set_rv(struct kube_podwatch *w, const char *rv)
{
    char *n = strdup(rv);
    if (n) {
        free(w->rv);
        w->rv = n;
    }
}

static void notify(struct kube_podwatch *w, enum kube_watch_type t, const struct kube_pod *p)
{
    if (w->ops.on_pod)
        w->ops.on_pod(w, t, p, w->user_data);
}

/* Takes pod. */
static int cache_put(struct kube_podwatch *w, struct kube_pod *pod)
{
    ssize_t i = find(w, pod->uid);
    if (i >= 0) {
        kube_pod_free(w->pods[i]);
        w->pods[i] = pod;
        notify(w, KUBE_WATCH_MODIFIED, pod);
        return 0;
    }
    if (w->n_pods == w->cap_pods) {
        size_t cap = w->cap_pods ? w->cap_pods * 2 : 32;
        struct kube_pod **p = realloc(w->pods, cap * sizeof(*p));
        if (!p) {
            kube_pod_free(pod);
            return -ENOMEM;
        }
        w->pods = p;
        w->cap_pods = cap;
    }
    w->pods[w->n_pods++] = pod;
    notify(w, KUBE_WATCH_ADDED, pod);
    return 0;
}

static void cache_del(struct kube_podwatch *w, const char *uid)
{
    ssize_t i = find(w, uid);
    if (i < 0)
        return;
    struct kube_pod *p = w->pods[i];
    w->pods[i] = w->pods[--w->n_pods];
    notify(w, KUBE_WATCH_DELETED, p);
    kube_pod_free(p);
}

/* ---- retry ---- */

static void on_retry(struct ev_loop *loop, void *ud)
{
    struct kube_podwatch *w = ud;
    w->retry_timer = 0;
    if (w->gone || w->need_list)
        do_list(w);
    else
        do_watch(w);
}

static void retry(struct kube_podwatch *w, bool with_backoff)
{
    uint64_t delay = 0;
    if (with_backoff) {
        w->stats.failures++;
        w->backoff = w->backoff ? w->backoff * 2 : w->backoff_min;
        if (w->backoff > w->backoff_max)
            w->backoff = w->backoff_max;
        delay = w->backoff;
    }
    w->phase = PW_WAITING;
    ev_loop_cancel_timer(w->loop, w->retry_timer);
    if (ev_loop_add_timer(w->loop, delay, on_retry, w, &w->retry_timer) < 0)
        w->retry_timer = 0; /* out of memory: the next start() call is the only way on */
}

/* ---- LIST ---- */

/* Pods a list left out (they failed validation): each is absent from the cache now. */
static void report_skips(struct kube_podwatch *w, const struct kube_pod_skips *skips)
{
    w->stats.skipped += skips->n;
    for (size_t i = 0; w->ops.on_skip && i < skips->n && i < KUBE_POD_SKIPS_MAX; i++)
        w->ops.on_skip(w, &skips->e[i], w->user_data);
}

static void on_list(struct kube_client *c, const struct kube_response *resp, void *ud)
{
    struct kube_podwatch *w = ud;
    w->req = NULL;
    if (resp->error) {
        set_error(w, resp->error);
        retry(w, true);
        return;
    }
    struct kube_pod **pods = NULL;
    size_t n = 0;
    char *rv = NULL;
    char err[256] = "";
    struct kube_pod_skips skips;
    int r =
        kube_pod_list_parse(resp->body, resp->body_len, &pods, &n, &rv, &skips, err, sizeof(err));
    if (r < 0) {
        char msg[400];
        snprintf(msg, sizeof(msg), "the API server's pod list is unusable: %s",
                 r == -ENOMEM ? "out of memory" : err);
        set_error(w, msg);
        retry(w, true);
        return;
    }
    /* pods gone across the relist, then the new and changed ones */
    for (size_t i = w->n_pods; i-- > 0;) {
        bool kept = false;
        for (size_t j = 0; j < n && !kept; j++)
            kept = strcmp(pods[j]->uid, w->pods[i]->uid) == 0;
        if (!kept)
            cache_del(w, w->pods[i]->uid);
    }
    for (size_t j = 0; j < n; j++) {
        const struct kube_pod *old = kube_podwatch_get(w, pods[j]->uid);
        if (old && strcmp(old->resource_version, pods[j]->resource_version) == 0)
            kube_pod_free(pods[j]);
        else
            cache_put(w, pods[j]);
    }
    free(pods);
    report_skips(w, &skips);
    free(w->rv);
    w->rv = rv;
    w->stats.lists++;
    w->synced = true;
    w->gone = w->need_list = false;
    w->backoff = 0;
    set_error(w, NULL);
    do_watch(w);
}

static char *pods_path(struct kube_podwatch *w, bool watch)
{
    char *p = NULL;
    int n;
    if (watch) {
        /* rv is opaque: percent-encode anything but [A-Za-z0-9] */
        char rv[256 * 3 + 1];
        size_t o = 0;
        for (const char *s = w->rv; *s && o + 4 < sizeof(rv); s++) {
            unsigned char ch = (unsigned char)*s;
            if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
                rv[o++] = (char)ch;
            else
                o += (size_t)snprintf(rv + o, 4, "%%%02X", ch);
        }
        rv[o] = 0;
        n = asprintf(&p,
                     "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s&watch=1&resourceVersion=%s"
                     "&allowWatchBookmarks=true&timeoutSeconds=%d",
                     w->node, rv, WATCH_TIMEOUT_S);
    } else {
        n = asprintf(&p, "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s", w->node);
    }
    return n < 0 ? NULL : p;
}

static void do_list(struct kube_podwatch *w)
{
    char *path = pods_path(w, false);
    w->phase = PW_LISTING;
    if (!path || kube_client_request(w->client, "GET", path, NULL, NULL, on_list, w, &w->req) < 0) {
        w->req = NULL;
        retry(w, true);
    }
    free(path);
}

/* ---- WATCH ---- */

static int on_line(struct kube_client *c, const char *line, size_t len, void *ud)
{
    struct kube_podwatch *w = ud;
    struct kube_watch_event ev;
    char err[256] = "";
    int r = kube_watch_event_parse(line, len, &ev, err, sizeof(err));
    if (r < 0) {
        char msg[400];
        snprintf(msg, sizeof(msg), "a watch event from the API server is unusable: %s", err);
        set_error(w, msg);
        w->need_list = true;
        return -1; /* a stream we cannot follow: relist after the backoff */
    }
    if (ev.type == KUBE_WATCH_ERROR) {
        w->gone = ev.error_code == 410;
        if (!w->gone) {
            char msg[400];
            snprintf(msg, sizeof(msg), "the pod watch failed: %d %.300s", ev.error_code,
                     ev.error_message);
            set_error(w, msg);
            w->need_list = true;
        }
        if (w->gone)
            w->stats.gone++;
        kube_watch_event_clear(&ev);
        return -1;
    }
    w->stats.events++;
    w->backoff = 0;
    if (w->error)
        set_error(w, NULL); /* back in step after a reconnect */
    set_rv(w, ev.resource_version);
    if (ev.is_skipped) {
        /* a pod that fails validation: whatever state of it the cache held is stale now */
        w->stats.skipped++;
        if (ev.skipped.uid[0])
            cache_del(w, ev.skipped.uid);
        if (w->ops.on_skip)
            w->ops.on_skip(w, &ev.skipped, w->user_data);
    } else if (ev.type == KUBE_WATCH_DELETED) {
        cache_del(w, ev.pod->uid);
    } else if (ev.type != KUBE_WATCH_BOOKMARK) {
        struct kube_pod *p = ev.pod;
        ev.pod = NULL;
        /* a pod moved off this node (never in practice: nodeName is set once) leaves the
         * cache */
        if (strcmp(p->node_name, w->node) != 0) {
            cache_del(w, p->uid);
            kube_pod_free(p);
        } else {
            cache_put(w, p);
        }
    }
    kube_watch_event_clear(&ev);
    return 0;
}

static void on_watch_end(struct kube_client *c, const struct kube_response *resp, void *ud)
{
    struct kube_podwatch *w = ud;
    w->req = NULL;
    if (resp->status == 410) {
        w->gone = true;
        w->stats.gone++;
    }
    if (w->gone) {
        retry(w, false); /* relist now */
        return;
    }
    if (resp->error) {
        /* A stream that broke or failed: events may have been missed, so the cache is not in
         * step until a LIST says what is. The first break in a while relists at once (a pod
         * admitted meanwhile waits milliseconds, not a backoff); breaks in a row back off. */
        uint64_t now = mono_ns();
        bool quick = !w->last_break_ns || now - w->last_break_ns > QUICK_RELIST_NS;
        w->last_break_ns = now;
        set_error(w, resp->error);
        w->need_list = true;
        if (quick)
            w->stats.failures++;
        retry(w, !quick);
        return;
    }
    /* the server's timeoutSeconds: resume from w->rv at once; a watch that ended without a
     * single event (a real server sends bookmarks) waits a backoff, so a server that closes
     * every watch at once is not hammered */
    retry(w, w->stats.events == w->events_at_watch);
}

static void do_watch(struct kube_podwatch *w)
{
    char *path = pods_path(w, true);
    w->phase = PW_WATCHING;
    w->stats.watches++;
    w->events_at_watch = w->stats.events;
    if (!path || kube_client_stream(w->client, path, on_line, on_watch_end, w, &w->req) < 0) {
        w->req = NULL;
        retry(w, true);
    }
    free(path);
}

int kube_podwatch_relist(struct kube_podwatch *w)
{
    if (w->phase == PW_IDLE)
        return -EINVAL;
    if (w->phase == PW_LISTING)
        return -EALREADY;
    if (w->phase == PW_WATCHING) {
        kube_request_cancel(w->client, w->req);
        w->req = NULL;
    }
    ev_loop_cancel_timer(w->loop, w->retry_timer);
    w->retry_timer = 0;
    w->need_list = true;
    do_list(w);
    return 0;
}

int kube_podwatch_start(struct kube_podwatch *w)
{
    if (w->phase != PW_IDLE)
        return -EALREADY;
    do_list(w);
    return 0;
}
