/* objects.c — owns the JSON of the objects acceld writes to the API server (core/v1 Event and
 * the annotation merge patch). Field names from the Kubernetes API reference for Event
 * (core/v1) and RFC 7386 (JSON merge patch). */
#include "objects.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EVENT_MESSAGE_MAX 1024

int kube_annotation_patch(const char *const *keys, const char *const *values, size_t n,
                          char **ret_json)
{
    if (n == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!keys[i] || !*keys[i])
            return -EINVAL;
    json_t *ann = json_object();
    json_t *root = json_pack("{s:{s:o}}", "metadata", "annotations", ann);
    if (!root)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (json_object_set_new(ann, keys[i], values[i] ? json_string(values[i]) : json_null()) <
            0) {
            json_decref(root);
            return values[i] && !json_string(values[i]) ? -EINVAL : -ENOMEM;
        }
    char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    if (!s)
        return -ENOMEM;
    *ret_json = s;
    return 0;
}

static int rfc3339(int64_t t, char buf[32])
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || !strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
        return -EINVAL;
    return 0;
}

int kube_event_json(const struct kube_event_spec *s, char **ret_json)
{
    if (!s->namespace || !*s->namespace || !s->pod_name || !*s->pod_name || !s->pod_uid ||
        !s->reason || !*s->reason || !s->message || !s->component || !*s->component)
        return -EINVAL;
    char ts[32], gen[300];
    if (rfc3339(s->time, ts) < 0)
        return -EINVAL;
    /* generateName: the API server appends a random suffix; the pod's name plus '.' is what
     * kubectl's own events look like (name.<suffix>) */
    snprintf(gen, sizeof(gen), "%.200s.", s->pod_name);
    char msg[EVENT_MESSAGE_MAX + 1];
    snprintf(msg, sizeof(msg), "%s", s->message);
    if (strlen(s->message) > EVENT_MESSAGE_MAX) {
        /* cut at a character boundary: a split UTF-8 sequence is not a JSON string */
        size_t k = EVENT_MESSAGE_MAX;
        while (k > 0 && ((unsigned char)s->message[k] & 0xC0) == 0x80)
            k--;
        msg[k] = 0;
    }
    json_t *root = json_pack(
        "{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s, s:s}, s:s, s:s, s:s, s:{s:s, s:s*},"
        " s:s, s:s, s:i, s:s, s:s*}",
        "apiVersion", "v1", "kind", "Event", "metadata", "generateName", gen, "namespace",
        s->namespace, "involvedObject", "apiVersion", "v1", "kind", "Pod", "namespace",
        s->namespace, "name", s->pod_name, "uid", s->pod_uid, "reason", s->reason, "message", msg,
        "type", s->type == KUBE_EVENT_WARNING ? "Warning" : "Normal", "source", "component",
        s->component, "host", s->host, "firstTimestamp", ts, "lastTimestamp", ts, "count", 1,
        "reportingComponent", s->component, "reportingInstance", s->host);
    if (!root)
        return -EINVAL; /* a string that is not UTF-8 */
    char *out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    if (!out)
        return -ENOMEM;
    *ret_json = out;
    return 0;
}
