/* objects.h — the Kubernetes objects acceld writes: the merge patch of a pod's annotations
 * and core/v1 Events about a pod. Built with jansson; the text is owned by the caller (free).
 * tests/kube validates what these build against kubernetes-models' schemas. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct kube_pod;

/* {"metadata":{"annotations":{k:v,...}}} — sent as application/merge-patch+json (RFC 7386):
 * a NULL value removes the key. Returns 0, -EINVAL (n == 0, an empty key), -ENOMEM. */
int kube_annotation_patch(const char *const *keys, const char *const *values, size_t n,
                          char **ret_json);

enum kube_event_type { KUBE_EVENT_NORMAL, KUBE_EVENT_WARNING };

struct kube_event_spec {
    const char *namespace; /* the pod's */
    const char *pod_name;
    const char *pod_uid;
    enum kube_event_type type;
    const char *reason;    /* UpperCamelCase, e.g. "GPUMemoryOverQuota" */
    const char *message;   /* for people; cut at 1024 bytes */
    const char *component; /* "acceld" */
    const char *host;      /* the node name */
    int64_t time;          /* seconds since the epoch */
};

/* A complete core/v1 Event (metadata.generateName "<pod>.", involvedObject the pod, reason,
 * message, type, source, timestamps, count 1). Returns 0, -EINVAL (a field missing), -ENOMEM. */
int kube_event_json(const struct kube_event_spec *spec, char **ret_json);
