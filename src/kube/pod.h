/* pod.h — this node's pods as acceld needs them, read from the API server's JSON (jansson):
 * Pod objects, PodLists and watch events; and Kubernetes resource quantities.
 *
 * A struct kube_pod owns all its strings (kube_pod_free). Parsers take outside data and never
 * trust it: every field is type-checked, sizes and counts are capped per object, names must
 * have the shape the API server gives them (they become file names, URL paths and keys), and a
 * bad object is refused whole with a message. In a list or a watch stream one bad object costs
 * only itself: it is left out and reported (struct kube_pod_skip), the rest is used. Not
 * thread-safe; no I/O. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kube_kv {
    char *key;
    char *value;
};

struct kube_container {
    char *name;
    struct kube_kv *requests; /* resource name → quantity text ("30", "4Gi", "500m") */
    size_t n_requests;
    struct kube_kv *limits;
    size_t n_limits;
};

struct kube_pod {
    char *uid;
    char *namespace;
    char *name;
    char *node_name; /* spec.nodeName, "" when unscheduled */
    char *phase;     /* status.phase, "" when absent */
    char *resource_version;
    int64_t creation_time; /* metadata.creationTimestamp, seconds since the epoch; 0 absent */
    int deleting;          /* metadata.deletionTimestamp is set */
    struct kube_container *containers; /* spec.containers, in order */
    size_t n_containers;
    struct kube_container *init_containers;
    size_t n_init_containers;
    struct kube_kv *annotations;
    size_t n_annotations;
    /* status.containerStatuses of started containers: name → runtime id (the part after
     * "containerd://", "cri-o://", "docker://"), as /proc/<pid>/cgroup names it */
    struct kube_kv *container_ids;
    size_t n_container_ids;
};

enum kube_watch_type {
    KUBE_WATCH_ADDED,
    KUBE_WATCH_MODIFIED,
    KUBE_WATCH_DELETED,
    KUBE_WATCH_BOOKMARK,
    KUBE_WATCH_ERROR,
};

/* A pod left out of a list or a watch event because it failed validation: its uid, namespace
 * and name when those themselves have the API server's shape ("" otherwise), and why. */
struct kube_pod_skip {
    char uid[129];
    char ns[64];
    char name[254];
    char why[256];
};
/* The pods a list left out: n counts them all, e holds the first KUBE_POD_SKIPS_MAX. */
#define KUBE_POD_SKIPS_MAX 8
struct kube_pod_skips {
    size_t n;
    struct kube_pod_skip e[KUBE_POD_SKIPS_MAX];
};

/* One line of a watch stream. pod is set for ADDED/MODIFIED/DELETED — unless the object failed
 * validation: then pod is NULL and skipped says which pod and why (skipped.uid "" when even its
 * uid is unusable); resource_version for every type but ERROR; ERROR carries the Status's code
 * and message. */
struct kube_watch_event {
    enum kube_watch_type type;
    struct kube_pod *pod;
    char *resource_version;
    int error_code;
    char *error_message;
    bool is_skipped;
    struct kube_pod_skip skipped;
};

struct kube_pod *kube_pod_free(struct kube_pod *pod);
void kube_watch_event_clear(struct kube_watch_event *ev);

/* Parses a Pod object. Returns 0, -EINVAL (err says why), -ENOMEM. */
int kube_pod_from_json(const json_t *obj, struct kube_pod **ret, char *err, size_t errlen);
/* Parses a PodList's text: its items (caller frees each and the array) and
 * metadata.resourceVersion. An item that fails validation is left out and counted in skips
 * (optional). Returns 0, -EINVAL (the list itself is unusable), -ENOMEM; nothing is returned
 * on failure. */
int kube_pod_list_parse(const char *text, size_t len, struct kube_pod ***ret_pods, size_t *ret_n,
                        char **ret_resource_version, struct kube_pod_skips *skips, char *err,
                        size_t errlen);
/* Parses one watch-stream line. Returns 0 (a pod that fails validation included: is_skipped),
 * -EINVAL (the line is no watch event), -ENOMEM; *ret filled only on success. */
int kube_watch_event_parse(const char *line, size_t len, struct kube_watch_event *ret, char *err,
                           size_t errlen);

/* The annotation's value (borrowed), or NULL. */
const char *kube_pod_annotation(const struct kube_pod *pod, const char *key);
/* The runtime id of the started container named container (borrowed), or NULL. */
const char *kube_pod_container_id(const struct kube_pod *pod, const char *container);
/* The container named name (borrowed), or NULL. */
const struct kube_container *kube_pod_container(const struct kube_pod *pod, const char *name);
/* The quantity text of requests[resource] / limits[resource] (borrowed), or NULL. */
const char *kube_container_request(const struct kube_container *c, const char *resource);
const char *kube_container_limit(const struct kube_container *c, const char *resource);
/* A deep copy. Returns 0 or -ENOMEM. */
int kube_pod_dup(const struct kube_pod *pod, struct kube_pod **ret);

/* A Kubernetes quantity ("30", "1.5", "500m", "4Gi", "2k", "1e3") as an integer count of
 * thousandths (milli-units): "30" → 30000, "500m" → 500, "1Ki" → 1024000. Returns 0,
 * -EINVAL (not a quantity), -ERANGE (beyond int64 milli-units or finer than a milli-unit). */
int kube_quantity_parse_milli(const char *s, int64_t *ret);

/* "2024-01-02T03:04:05Z" (RFC 3339, UTC, as the API server writes it) → seconds since the
 * epoch. Returns 0 or -EINVAL. */
int kube_time_parse(const char *s, int64_t *ret);
