/* podwatch.h — the watch cache of this node's pods: LIST then WATCH of
 * /api/v1/pods?fieldSelector=spec.nodeName=<node> through a struct kube_client, kept in step
 * with resourceVersion and bookmarks, relisting after 410 Gone and after a stream that broke
 * (at once, then with a backoff while it keeps breaking). acceld answers Allocate from this cache
 * without an API call.
 *
 * Threads: the loop's thread only. Callbacks run from the loop; from them, the cache may be
 * read and requests started, but the watch must not be freed. Pods handed to callbacks and
 * returned by the getters are borrowed: valid until the cache next changes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pod.h"

struct ev_loop;
struct kube_client;
struct kube_podwatch;

struct kube_podwatch_ops {
    /* After the cache changed: ADDED, MODIFIED or DELETED (a relist reports what changed
     * across it the same way). For DELETED, pod is the last state, valid during the call. */
    void (*on_pod)(struct kube_podwatch *w, enum kube_watch_type type, const struct kube_pod *pod,
                   void *user_data);
    /* error NULL: the cache is in step (after each successful LIST); else why it is not (the
     * cache keeps its last content, and the watch retries by itself). Optional. */
    void (*on_state)(struct kube_podwatch *w, const char *error, void *user_data);
    /* A pod of the list or of a watch event failed validation (too many annotations, a NUL,
     * a name of the wrong shape ...): it is left out of the cache (an older state of it is
     * dropped), and everything else goes on. Called for each such pod of a LIST (the first
     * KUBE_POD_SKIPS_MAX) and each such event; the receiver rate-limits what it says.
     * Optional. */
    void (*on_skip)(struct kube_podwatch *w, const struct kube_pod_skip *skip, void *user_data);
};

struct kube_podwatch_stats {
    uint64_t lists;    /* LISTs that succeeded */
    uint64_t watches;  /* WATCH requests started */
    uint64_t gone;     /* 410 Gone answers (HTTP or ERROR event) */
    uint64_t failures; /* LIST/WATCH failures that led to a backoff */
    uint64_t events;   /* watch events applied (bookmarks included) */
    uint64_t skipped;  /* pods left out because they failed validation */
};

/* node_name: a DNS subdomain (lower-case letters, digits, '-', '.'), else -EINVAL. ops is
 * copied. Returns 0, -EINVAL, -ENOMEM. */
int kube_podwatch_new(struct ev_loop *loop, struct kube_client *client, const char *node_name,
                      const struct kube_podwatch_ops *ops, void *user_data,
                      struct kube_podwatch **ret);
/* Stops and frees; NULL ok; returns NULL. Not from its own callbacks. */
struct kube_podwatch *kube_podwatch_free(struct kube_podwatch *w);
/* Starts the first LIST. Returns 0 or -errno of the request. */
int kube_podwatch_start(struct kube_podwatch *w);
/* Lists again now (the cache may be behind a watch that lags or hangs without breaking): the
 * running watch, if any, is dropped and restarted from the new LIST. 0, -EALREADY (a LIST
 * runs), -EINVAL (not started). Not from the watch's own callbacks. */
int kube_podwatch_relist(struct kube_podwatch *w);
/* Retry delays after a failure: min_ns doubling up to max_ns (defaults 500 ms, 30 s). */
void kube_podwatch_set_backoff(struct kube_podwatch *w, uint64_t min_ns, uint64_t max_ns);

/* true once a LIST has succeeded (the cache may lag while the watch reconnects). */
bool kube_podwatch_synced(const struct kube_podwatch *w);
/* The last failure (borrowed), or NULL while in step. */
const char *kube_podwatch_error(const struct kube_podwatch *w);
/* The pod with this uid, or NULL. */
const struct kube_pod *kube_podwatch_get(const struct kube_podwatch *w, const char *uid);
/* All cached pods (borrowed array of n). */
const struct kube_pod *const *kube_podwatch_pods(const struct kube_podwatch *w, size_t *ret_n);
/* The resourceVersion the watch resumes from (borrowed; "" before the first LIST). */
const char *kube_podwatch_resource_version(const struct kube_podwatch *w);
void kube_podwatch_stats(const struct kube_podwatch *w, struct kube_podwatch_stats *ret);
