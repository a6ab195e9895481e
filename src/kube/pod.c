/* pod.c — owns turning the API server's Pod JSON (objects, lists, watch lines) into struct
 * kube_pod, and Kubernetes quantities into integers.
 *
 * Shapes from the Kubernetes API reference (core/v1 Pod, PodList, WatchEvent, Status) and
 * the quantity grammar of k8s.io/apimachinery/pkg/api/resource (suffixes n u m k M G T P E,
 * Ki Mi Gi Ti Pi Ei, or an exponent e<N>). */
#define _GNU_SOURCE
#include "pod.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define MAX_CONTAINERS 256
#define MAX_KV 4096          /* per map: 4097 annotations refuse that pod, and only that pod */
#define MAX_STR (256 * 1024) /* the API server caps all annotations together at 256 KiB */

static void kv_free(struct kube_kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
    free(kv);
}

static void containers_free(struct kube_container *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(c[i].name);
        kv_free(c[i].requests, c[i].n_requests);
        kv_free(c[i].limits, c[i].n_limits);
    }
    free(c);
}

struct kube_pod *kube_pod_free(struct kube_pod *p)
{
    if (!p)
        return NULL;
    free(p->uid);
    free(p->namespace);
    free(p->name);
    free(p->node_name);
    free(p->phase);
    free(p->resource_version);
    containers_free(p->containers, p->n_containers);
    containers_free(p->init_containers, p->n_init_containers);
    kv_free(p->annotations, p->n_annotations);
    kv_free(p->container_ids, p->n_container_ids);
    free(p);
    return NULL;
}

void kube_watch_event_clear(struct kube_watch_event *ev)
{
    ev->pod = kube_pod_free(ev->pod);
    free(ev->resource_version);
    free(ev->error_message);
    ev->resource_version = ev->error_message = NULL;
    ev->is_skipped = false;
}

/* Names as the API server lets them be (apimachinery's validation): they name files, URL paths
 * and map keys here, so a name of another shape is not believed. */
static bool name_chars(const char *s, size_t max, bool dots)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              (dots && *p == '.')))
            return false;
    return s[n - 1] != '-' && s[n - 1] != '.';
}

static bool dns_label(const char *s)
{
    return name_chars(s, 63, false);
}

static bool dns_subdomain(const char *s)
{
    return name_chars(s, 253, true);
}

/* metadata.uid: a UUID from a real server; any [A-Za-z0-9._-] up to 128 from a test's. */
static bool uid_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128 || s[0] == '.')
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return false;
    return true;
}

/* A string member: absent → "" when optional, a non-string → -EINVAL. */
static int get_str(const json_t *o, const char *key, bool required, char **ret, char *err,
                   size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v) {
        if (required)
            return errbuf_printf(err, errlen, "pod: %s missing", key);
        return (*ret = strdup("")) ? 0 : -ENOMEM;
    }
    if (!json_is_string(v) || json_string_length(v) > MAX_STR ||
        strlen(json_string_value(v)) != json_string_length(v))
        return errbuf_printf(err, errlen, "pod: %s is not a string", key);
    return (*ret = strdup(json_string_value(v))) ? 0 : -ENOMEM;
}

/* A string→string map (annotations, requests, limits). Absent or null: empty. */
static int get_map(const json_t *o, const char *key, struct kube_kv **ret, size_t *ret_n, char *err,
                   size_t errlen)
{
    json_t *m = json_object_get(o, key);
    *ret = NULL;
    *ret_n = 0;
    if (!m || json_is_null(m))
        return 0;
    if (!json_is_object(m))
        return errbuf_printf(err, errlen, "pod: %s is not a map", key);
    if (json_object_size(m) > MAX_KV)
        return errbuf_printf(err, errlen, "pod: %zu %s, more than the %d acceld reads",
                             json_object_size(m), key, MAX_KV);
    size_t n = json_object_size(m);
    struct kube_kv *kv = calloc(n ? n : 1, sizeof(*kv));
    if (!kv)
        return -ENOMEM;
    size_t i = 0;
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v)
    {
        if (!json_is_string(v) || json_string_length(v) > MAX_STR ||
            strlen(json_string_value(v)) != json_string_length(v)) {
            kv_free(kv, i);
            return errbuf_printf(err, errlen, "pod: %s.%.60s is not a string without NUL bytes",
                                 key, k);
        }
        kv[i].key = strdup(k);
        kv[i].value = strdup(json_string_value(v));
        i++;
        if (!kv[i - 1].key || !kv[i - 1].value) {
            kv_free(kv, i);
            return -ENOMEM;
        }
    }
    *ret = kv;
    *ret_n = i;
    return 0;
}

/* status.containerStatuses: container name -> the runtime's id (after "<runtime>://"); a
 * container not started yet has no containerID and is left out. */
static int get_container_ids(const json_t *status, struct kube_kv **ret, size_t *ret_n, char *err,
                             size_t errlen)
{
    json_t *a = json_object_get(status, "containerStatuses");
    *ret = NULL;
    *ret_n = 0;
    if (!a || json_is_null(a))
        return 0;
    if (!json_is_array(a) || json_array_size(a) > MAX_CONTAINERS)
        return errbuf_printf(err, errlen, "pod: status.containerStatuses is not a list");
    struct kube_kv *kv = calloc(json_array_size(a) ? json_array_size(a) : 1, sizeof(*kv));
    if (!kv)
        return -ENOMEM;
    size_t n = 0, i;
    json_t *e;
    json_array_foreach(a, i, e)
    {
        char *name = NULL, *id = NULL;
        int r = json_is_object(e)
                    ? get_str(e, "name", true, &name, err, errlen)
                    : errbuf_printf(err, errlen, "pod: a containerStatuses entry is not an object");
        if (r == 0)
            r = get_str(e, "containerID", false, &id, err, errlen);
        if (r < 0) {
            free(name);
            free(id);
            kv_free(kv, n);
            return r;
        }
        const char *sep = strstr(id, "://");
        if (!id[0] || !sep || !sep[3]) {
            free(name);
            free(id);
            continue;
        }
        memmove(id, sep + 3, strlen(sep + 3) + 1);
        kv[n].key = name;
        kv[n].value = id;
        n++;
    }
    *ret = kv;
    *ret_n = n;
    return 0;
}

static int get_containers(const json_t *spec, const char *key, struct kube_container **ret,
                          size_t *ret_n, char *err, size_t errlen)
{
    json_t *a = json_object_get(spec, key);
    *ret = NULL;
    *ret_n = 0;
    if (!a || json_is_null(a))
        return 0;
    if (!json_is_array(a) || json_array_size(a) > MAX_CONTAINERS)
        return errbuf_printf(err, errlen, "pod: spec.%s is not a list", key);
    size_t n = json_array_size(a);
    struct kube_container *c = calloc(n ? n : 1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    int r = 0;
    size_t i;
    for (i = 0; i < n && r == 0; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_object(e)) {
            r = errbuf_printf(err, errlen, "pod: spec.%s[%zu] is not an object", key, i);
            break;
        }
        r = get_str(e, "name", true, &c[i].name, err, errlen);
        if (r == 0 && !dns_label(c[i].name))
            r = errbuf_printf(err, errlen, "pod: spec.%s[%zu].name is not a DNS label", key, i);
        json_t *res = json_object_get(e, "resources");
        if (r == 0 && res && !json_is_null(res) && !json_is_object(res))
            r = errbuf_printf(err, errlen, "pod: spec.%s[%zu].resources is not an object", key, i);
        if (r == 0)
            r = get_map(res, "requests", &c[i].requests, &c[i].n_requests, err, errlen);
        if (r == 0)
            r = get_map(res, "limits", &c[i].limits, &c[i].n_limits, err, errlen);
    }
    if (r < 0) {
        containers_free(c, n);
        return r;
    }
    *ret = c;
    *ret_n = n;
    return 0;
}

int kube_time_parse(const char *s, int64_t *ret)
{
    struct tm tm = {0};
    int y, mo, d, h, mi, sec, used = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 ||
        used != 19)
        return -EINVAL;
    const char *t = s + 19;
    if (*t == '.') /* fractional seconds: ignored */
        for (t++; *t >= '0' && *t <= '9'; t++)
            ;
    if (strcmp(t, "Z") != 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
        sec > 60 || y < 1970)
        return -EINVAL;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    time_t v = timegm(&tm);
    if (v == (time_t)-1)
        return -EINVAL;
    *ret = (int64_t)v;
    return 0;
}

int kube_pod_from_json(const json_t *obj, struct kube_pod **ret, char *err, size_t errlen)
{
    if (!json_is_object(obj))
        return errbuf_printf(err, errlen, "pod: not a JSON object");
    json_t *kind = json_object_get(obj, "kind");
    if (kind && (!json_is_string(kind) || strcmp(json_string_value(kind), "Pod") != 0))
        return errbuf_printf(err, errlen, "pod: kind is not Pod");
    json_t *meta = json_object_get(obj, "metadata");
    json_t *spec = json_object_get(obj, "spec");
    json_t *status = json_object_get(obj, "status");
    if (!json_is_object(meta))
        return errbuf_printf(err, errlen, "pod: metadata missing");
    if (spec && !json_is_object(spec))
        return errbuf_printf(err, errlen, "pod: spec is not an object");
    if (status && !json_is_object(status))
        return errbuf_printf(err, errlen, "pod: status is not an object");
    struct kube_pod *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    int r = get_str(meta, "uid", true, &p->uid, err, errlen);
    if (r == 0 && !uid_ok(p->uid))
        r = errbuf_printf(err, errlen, "pod: metadata.uid is empty or not a UID");
    if (r == 0)
        r = get_str(meta, "namespace", true, &p->namespace, err, errlen);
    if (r == 0 && !dns_label(p->namespace))
        r = errbuf_printf(err, errlen, "pod: metadata.namespace is not a DNS label");
    if (r == 0)
        r = get_str(meta, "name", true, &p->name, err, errlen);
    if (r == 0 && !dns_subdomain(p->name))
        r = errbuf_printf(err, errlen, "pod: metadata.name is not a DNS subdomain");
    if (r == 0)
        r = get_str(meta, "resourceVersion", false, &p->resource_version, err, errlen);
    if (r == 0)
        r = get_str(spec, "nodeName", false, &p->node_name, err, errlen);
    if (r == 0)
        r = get_str(status, "phase", false, &p->phase, err, errlen);
    if (r == 0) {
        json_t *ct = json_object_get(meta, "creationTimestamp");
        if (ct && !json_is_null(ct) &&
            (!json_is_string(ct) || kube_time_parse(json_string_value(ct), &p->creation_time)))
            r = errbuf_printf(err, errlen, "pod: metadata.creationTimestamp is not a time");
        json_t *dt = json_object_get(meta, "deletionTimestamp");
        p->deleting = dt && !json_is_null(dt);
    }
    if (r == 0)
        r = get_map(meta, "annotations", &p->annotations, &p->n_annotations, err, errlen);
    if (r == 0)
        r = get_containers(spec, "containers", &p->containers, &p->n_containers, err, errlen);
    if (r == 0)
        r = get_container_ids(status, &p->container_ids, &p->n_container_ids, err, errlen);
    if (r == 0)
        r = get_containers(spec, "initContainers", &p->init_containers, &p->n_init_containers, err,
                           errlen);
    if (r < 0) {
        kube_pod_free(p);
        return r;
    }
    *ret = p;
    return 0;
}

static json_t *load(const char *text, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    /* JSON_REJECT_DUPLICATES: an object with two "uid"s is not one we can believe.
     * JSON_ALLOW_NUL: a "\u0000" in one pod's annotation value (the API server lets values
     * hold any string) must not make the whole document (a list of every pod of the node)
     * unreadable; the fields' own checks refuse that pod. (jansson refuses a NUL in a key
     * whatever the flags; the API server never lets one into an annotation key.) */
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root)
        errbuf_printf(err, errlen, "JSON error at line %d: %s", je.line, je.text);
    return root;
}

/* Who a refused object is, as far as its metadata can be believed, and why it was refused. */
static void skip_of(const json_t *obj, const char *why, struct kube_pod_skip *ret)
{
    json_t *meta = json_object_get(obj, "metadata");
    const char *uid = json_string_value(json_object_get(meta, "uid"));
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *name = json_string_value(json_object_get(meta, "name"));
    /* json_string_value stops at a NUL: a cut value is not the uid; compare lengths */
    bool whole_uid = uid && strlen(uid) == json_string_length(json_object_get(meta, "uid"));
    bool whole_ns = ns && strlen(ns) == json_string_length(json_object_get(meta, "namespace"));
    bool whole_name = name && strlen(name) == json_string_length(json_object_get(meta, "name"));
    *ret = (struct kube_pod_skip){0};
    if (whole_uid && uid_ok(uid))
        snprintf(ret->uid, sizeof(ret->uid), "%s", uid);
    if (whole_ns && dns_label(ns) && whole_name && dns_subdomain(name)) {
        snprintf(ret->ns, sizeof(ret->ns), "%s", ns);
        snprintf(ret->name, sizeof(ret->name), "%s", name);
    }
    snprintf(ret->why, sizeof(ret->why), "%s", why);
}

int kube_pod_list_parse(const char *text, size_t len, struct kube_pod ***ret_pods, size_t *ret_n,
                        char **ret_resource_version, struct kube_pod_skips *skips, char *err,
                        size_t errlen)
{
    json_t *root = load(text, len, err, errlen);
    if (!root)
        return -EINVAL;
    int r = 0;
    json_t *items = json_object_get(root, "items");
    json_t *meta = json_object_get(root, "metadata");
    json_t *rv = json_object_get(meta, "resourceVersion");
    json_t *kind = json_object_get(root, "kind");
    if (!json_is_object(root) ||
        (kind && (!json_is_string(kind) || strcmp(json_string_value(kind), "PodList") != 0))) {
        json_decref(root);
        return errbuf_printf(err, errlen, "not a PodList");
    }
    if (!json_is_string(rv) || !*json_string_value(rv)) {
        json_decref(root);
        return errbuf_printf(err, errlen, "PodList: metadata.resourceVersion missing");
    }
    if (items && !json_is_null(items) && !json_is_array(items)) {
        json_decref(root);
        return errbuf_printf(err, errlen, "PodList: items is not a list");
    }
    size_t n = json_array_size(items);
    struct kube_pod **pods = calloc(n ? n : 1, sizeof(*pods));
    char *rvs = strdup(json_string_value(rv));
    if (!pods || !rvs)
        r = -ENOMEM;
    size_t kept = 0;
    if (skips)
        skips->n = 0;
    for (size_t i = 0; i < n && r == 0; i++) {
        char why[256] = "";
        r = kube_pod_from_json(json_array_get(items, i), &pods[kept], why, sizeof(why));
        if (r == 0) {
            kept++;
        } else if (r == -EINVAL) {
            /* one bad pod costs only itself */
            if (skips && skips->n < KUBE_POD_SKIPS_MAX)
                skip_of(json_array_get(items, i), why, &skips->e[skips->n]);
            if (skips)
                skips->n++;
            r = 0;
        }
    }
    n = kept;
    json_decref(root);
    if (r < 0) {
        for (size_t j = 0; j < n && pods; j++)
            kube_pod_free(pods[j]);
        free(pods);
        free(rvs);
        return r;
    }
    *ret_pods = pods;
    *ret_n = n;
    *ret_resource_version = rvs;
    return 0;
}

int kube_watch_event_parse(const char *line, size_t len, struct kube_watch_event *ret, char *err,
                           size_t errlen)
{
    static const struct {
        const char *name;
        enum kube_watch_type type;
    } types[] = {
        {"ADDED", KUBE_WATCH_ADDED},     {"MODIFIED", KUBE_WATCH_MODIFIED},
        {"DELETED", KUBE_WATCH_DELETED}, {"BOOKMARK", KUBE_WATCH_BOOKMARK},
        {"ERROR", KUBE_WATCH_ERROR},
    };
    json_t *root = load(line, len, err, errlen);
    if (!root)
        return -EINVAL;
    struct kube_watch_event ev = {0};
    int r = 0;
    json_t *type = json_object_get(root, "type");
    json_t *obj = json_object_get(root, "object");
    size_t t;
    for (t = 0; json_is_string(type) && t < ARRAY_SIZE(types); t++)
        if (strcmp(json_string_value(type), types[t].name) == 0)
            break;
    if (!json_is_string(type) || t == ARRAY_SIZE(types) || !json_is_object(obj)) {
        json_decref(root);
        return errbuf_printf(err, errlen, "watch event: no known type and object");
    }
    ev.type = types[t].type;
    if (ev.type == KUBE_WATCH_ERROR) {
        /* a Status: {"kind":"Status","code":410,"reason":"Expired","message":"..."} */
        json_t *code = json_object_get(obj, "code");
        json_t *msg = json_object_get(obj, "message");
        ev.error_code =
            json_is_integer(code) && json_integer_value(code) > 0 && json_integer_value(code) < 1000
                ? (int)json_integer_value(code)
                : 0;
        ev.error_message = strdup(json_is_string(msg) ? json_string_value(msg) : "");
        if (!ev.error_message)
            r = -ENOMEM;
    } else {
        json_t *rv = json_object_get(json_object_get(obj, "metadata"), "resourceVersion");
        if (!json_is_string(rv) || !*json_string_value(rv))
            r = errbuf_printf(err, errlen, "watch event: object has no resourceVersion");
        else if (!(ev.resource_version = strdup(json_string_value(rv))))
            r = -ENOMEM;
        if (r == 0 && ev.type != KUBE_WATCH_BOOKMARK) {
            char why[256] = "";
            r = kube_pod_from_json(obj, &ev.pod, why, sizeof(why));
            if (r == -EINVAL) { /* the event is usable; its pod is not */
                skip_of(obj, why, &ev.skipped);
                ev.is_skipped = true;
                r = 0;
            }
        }
    }
    json_decref(root);
    if (r < 0) {
        kube_watch_event_clear(&ev);
        return r;
    }
    *ret = ev;
    return 0;
}

static const char *kv_get(const struct kube_kv *kv, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(kv[i].key, key) == 0)
            return kv[i].value;
    return NULL;
}

const char *kube_pod_annotation(const struct kube_pod *pod, const char *key)
{
    return kv_get(pod->annotations, pod->n_annotations, key);
}

const char *kube_pod_container_id(const struct kube_pod *pod, const char *container)
{
    return kv_get(pod->container_ids, pod->n_container_ids, container);
}

const struct kube_container *kube_pod_container(const struct kube_pod *pod, const char *name)
{
    for (size_t i = 0; i < pod->n_containers; i++)
        if (strcmp(pod->containers[i].name, name) == 0)
            return &pod->containers[i];
    return NULL;
}

const char *kube_container_request(const struct kube_container *c, const char *resource)
{
    return kv_get(c->requests, c->n_requests, resource);
}

const char *kube_container_limit(const struct kube_container *c, const char *resource)
{
    return kv_get(c->limits, c->n_limits, resource);
}

static int kv_dup(const struct kube_kv *src, size_t n, struct kube_kv **ret)
{
    *ret = calloc(n ? n : 1, sizeof(**ret));
    if (!*ret)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        (*ret)[i].key = strdup(src[i].key);
        (*ret)[i].value = strdup(src[i].value);
        if (!(*ret)[i].key || !(*ret)[i].value)
            return -ENOMEM;
    }
    return 0;
}

static int containers_dup(const struct kube_container *src, size_t n, struct kube_container **ret)
{
    *ret = calloc(n ? n : 1, sizeof(**ret));
    if (!*ret)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        struct kube_container *d = &(*ret)[i];
        d->n_requests = src[i].n_requests;
        d->n_limits = src[i].n_limits;
        if (!(d->name = strdup(src[i].name)) ||
            kv_dup(src[i].requests, src[i].n_requests, &d->requests) < 0 ||
            kv_dup(src[i].limits, src[i].n_limits, &d->limits) < 0)
            return -ENOMEM;
    }
    return 0;
}

int kube_pod_dup(const struct kube_pod *s, struct kube_pod **ret)
{
    struct kube_pod *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    *p = (struct kube_pod){.creation_time = s->creation_time,
                           .deleting = s->deleting,
                           .n_containers = s->n_containers,
                           .n_init_containers = s->n_init_containers,
                           .n_annotations = s->n_annotations,
                           .n_container_ids = s->n_container_ids};
    /* on a failed strdup/calloc below, the counts bound what kube_pod_free walks: arrays are
     * calloc'd whole, so unfilled entries are NULL */
    if (!(p->uid = strdup(s->uid)) || !(p->namespace = strdup(s->namespace)) ||
        !(p->name = strdup(s->name)) || !(p->node_name = strdup(s->node_name)) ||
        !(p->phase = strdup(s->phase)) || !(p->resource_version = strdup(s->resource_version)) ||
        containers_dup(s->containers, s->n_containers, &p->containers) < 0 ||
        containers_dup(s->init_containers, s->n_init_containers, &p->init_containers) < 0 ||
        kv_dup(s->annotations, s->n_annotations, &p->annotations) < 0 ||
        kv_dup(s->container_ids, s->n_container_ids, &p->container_ids) < 0) {
        if (!p->containers)
            p->n_containers = 0;
        if (!p->init_containers)
            p->n_init_containers = 0;
        if (!p->annotations)
            p->n_annotations = 0;
        if (!p->container_ids)
            p->n_container_ids = 0;
        kube_pod_free(p);
        return -ENOMEM;
    }
    *ret = p;
    return 0;
}

/* ---- quantities ---- */

static bool mul_ok(int64_t a, int64_t b, int64_t *ret)
{
    return !__builtin_mul_overflow(a, b, ret);
}

int kube_quantity_parse_milli(const char *s, int64_t *ret)
{
    const char *p = s;
    if (*p == '+')
        p++;
    int64_t mant = 0;
    int exp10 = 0, digits = 0;
    bool any = false;
    for (; *p >= '0' && *p <= '9'; p++, any = true) {
        if (mant == 0 && *p == '0')
            continue;
        if (++digits > 18)
            return -ERANGE;
        mant = mant * 10 + (*p - '0');
    }
    if (*p == '.') {
        p++;
        for (; *p >= '0' && *p <= '9'; p++, any = true) {
            if (mant == 0 && *p == '0') {
                exp10--;
                continue;
            }
            if (++digits > 18)
                return -ERANGE;
            mant = mant * 10 + (*p - '0');
            exp10--;
        }
    }
    if (!any)
        return -EINVAL;
    int64_t bin = 1;
    static const struct {
        const char *sfx;
        int exp10;
        int pow1024;
    } sfx[] = {
        {"Ki", 0, 1}, {"Mi", 0, 2}, {"Gi", 0, 3}, {"Ti", 0, 4}, {"Pi", 0, 5}, {"Ei", 0, 6},
        {"n", -9, 0}, {"u", -6, 0}, {"m", -3, 0}, {"k", 3, 0},  {"M", 6, 0},  {"G", 9, 0},
        {"T", 12, 0}, {"P", 15, 0}, {"E", 18, 0}, {"", 0, 0},
    };
    if (*p == 'e' || *p == 'E') {
        /* "1E" and "1Ei" are exa / exbi; "1e3", "1E-3" an exponent */
        if (p[1] == '-' || p[1] == '+' || (p[1] >= '0' && p[1] <= '9')) {
            int e;
            if (parse_int(p + 1, &e) < 0 || e > 40 || e < -40)
                return -EINVAL;
            exp10 += e;
            p += strlen(p);
        }
    }
    if (*p) {
        size_t i;
        for (i = 0; i < ARRAY_SIZE(sfx); i++)
            if (strcmp(p, sfx[i].sfx) == 0)
                break;
        if (i == ARRAY_SIZE(sfx))
            return -EINVAL;
        exp10 += sfx[i].exp10;
        for (int k = 0; k < sfx[i].pow1024; k++)
            if (!mul_ok(bin, 1024, &bin))
                return -ERANGE;
    }
    exp10 += 3; /* milli-units */
    int64_t v = mant;
    if (!mul_ok(v, bin, &v))
        return -ERANGE;
    for (; exp10 > 0 && v; exp10--)
        if (!mul_ok(v, 10, &v))
            return -ERANGE;
    for (; exp10 < 0; exp10++) {
        if (v % 10)
            return -ERANGE; /* finer than a milli-unit */
        v /= 10;
    }
    *ret = v;
    return 0;
}
