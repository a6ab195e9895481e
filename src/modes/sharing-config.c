/* sharing-config.c — NVIDIA's sharing config (time-slicing / MPS) and acceld's
 * per-GPU replica counts: libyaml document tree, validated node by node so
 * every error names its line. Facts on NVIDIA's format are from its
 * k8s-device-plugin README ("Shared Access to GPUs"); the replica limits from
 * NVIDIA's MPS guide (docs.nvidia.com/deploy/mps). See sharing-config.h. */
#include "sharing-config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "fs.h"

struct ctx {
    yaml_document_t *doc;
    const char *name;
    char *err;
    size_t errlen;
    bool other_keys; /* other top-level keys are acceld's own (config.c checks them) */
};

static int fail(struct ctx *c, const yaml_node_t *n, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        int k = snprintf(c->err, c->errlen, "%s:%lu: ", c->name,
                         n ? (unsigned long)n->start_mark.line + 1 : 1ul);
        if (k >= 0 && (size_t)k < c->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* Scalars only: a NUL inside a value would cut it short silently. */
static int want_scalar(struct ctx *c, const yaml_node_t *n, const char *key, const char **ret)
{
    const char *v = scalar(n);
    if (!v)
        return fail(c, n, "\"%s\" must be a single value", key);
    if (strlen(v) != n->data.scalar.length)
        return fail(c, n, "\"%s\" contains a NUL byte", key);
    *ret = v;
    return 0;
}

static int get_bool(struct ctx *c, const yaml_node_t *n, const char *key, bool *ret)
{
    const char *v;
    int r = want_scalar(c, n, key, &v);
    if (r < 0)
        return r;
    if (!strcmp(v, "true"))
        *ret = true;
    else if (!strcmp(v, "false"))
        *ret = false;
    else
        return fail(c, n, "\"%s\" must be true or false, not \"%s\"", key, v);
    return 0;
}

static int get_uint(struct ctx *c, const yaml_node_t *n, const char *key, unsigned max,
                    unsigned *ret)
{
    const char *v;
    int r = want_scalar(c, n, key, &v);
    if (r < 0)
        return r;
    if (!*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 9)
        return fail(c, n, "\"%s\" must be a whole number, not \"%s\"", key, v);
    unsigned long x = strtoul(v, NULL, 10);
    if (x < 1 || x > max)
        return fail(c, n, "\"%s\" is %lu: use 1 to %u", key, x, max);
    *ret = (unsigned)x;
    return 0;
}

/* Kubernetes extended resource names: domain/name, letters, digits, '-', '.',
 * '_'. NVIDIA's plugin puts a bare name under nvidia.com/. */
static int get_resource_name(struct ctx *c, const yaml_node_t *n, const char *key, char *buf,
                             size_t len)
{
    const char *v;
    int r = want_scalar(c, n, key, &v);
    if (r < 0)
        return r;
    const char *slash = strchr(v, '/');
    const char *base = slash ? slash + 1 : v;
    bool ok = *v && *base && (!slash || slash > v) && !strchr(base, '/');
    for (const char *p = v; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
             *p == '-' || *p == '.' || *p == '_' || *p == '/';
    if (!ok)
        return fail(c, n,
                    "\"%s\" is \"%s\": use a resource name such as nvidia.com/gpu "
                    "(letters, digits, '-', '.', '_')",
                    key, v);
    if ((size_t)snprintf(buf, len, "%s%s", slash ? "" : "nvidia.com/", v) >= len)
        return fail(c, n, "\"%s\" is longer than %zu characters", key, len - 1);
    return 0;
}

/* A GPU named by index ("0") or UUID ("GPU-…"). MIG ("0:1", "MIG-…") is
 * not shared by this plugin: say so rather than match nothing. */
static int get_gpu_ref(struct ctx *c, const yaml_node_t *n, const char *key, char *buf, size_t len)
{
    const char *v;
    int r = want_scalar(c, n, key, &v);
    if (r < 0)
        return r;
    if (strchr(v, ':') || !strncmp(v, "MIG-", 4))
        return fail(c, n, "\"%s\": \"%s\" is a MIG device; sharing applies to whole GPUs only", key,
                    v);
    bool idx = *v && strspn(v, "0123456789") == strlen(v) && strlen(v) <= 4;
    bool uuid = !strncmp(v, "GPU-", 4) && v[4];
    if (!idx && !uuid)
        return fail(c, n, "\"%s\": \"%s\" is neither a GPU index (0, 1, …) nor a UUID (GPU-…)", key,
                    v);
    if ((size_t)snprintf(buf, len, "%s", v) >= len)
        return fail(c, n, "\"%s\": \"%s\" is too long", key, v);
    return 0;
}

static int parse_devices(struct ctx *c, const yaml_node_t *n, struct sharing_resource *res)
{
    const char *v = scalar(n);
    if (v) {
        if (!strcmp(v, "all")) {
            res->devices = SHARING_DEVICES_ALL;
            return 0;
        }
        res->devices = SHARING_DEVICES_COUNT;
        int r = get_uint(c, n, "devices", 4096, &res->count);
        if (r < 0)
            return fail(c, n,
                        "\"devices\" must be \"all\", a count, or a list of GPU indexes "
                        "or UUIDs");
        return 0;
    }
    if (n->type != YAML_SEQUENCE_NODE)
        return fail(c, n, "\"devices\" must be \"all\", a count, or a list");
    res->devices = SHARING_DEVICES_LIST;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        yaml_node_t *e = yaml_document_get_node(c->doc, *it);
        if (res->n_list == SHARING_MAX_DEVICES)
            return fail(c, e, "more than %d devices in one entry", SHARING_MAX_DEVICES);
        char *dst = res->list[res->n_list];
        int r = get_gpu_ref(c, e, "devices", dst, SHARING_DEV_MAX);
        if (r < 0)
            return r;
        for (size_t i = 0; i < res->n_list; i++)
            if (!strcmp(res->list[i], dst))
                return fail(c, e, "device \"%s\" is listed twice", dst);
        res->n_list++;
    }
    if (!res->n_list)
        return fail(c, n, "\"devices\" is an empty list: list GPUs or write \"all\"");
    return 0;
}

static int parse_per_gpu(struct ctx *c, const yaml_node_t *n, struct sharing_resource *res)
{
    if (n->type != YAML_MAPPING_NODE)
        return fail(c, n, "\"perGpuReplicas\" must map GPU index or UUID to a replica count");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        if (res->n_per_gpu == SHARING_MAX_DEVICES)
            return fail(c, k, "more than %d GPUs in perGpuReplicas", SHARING_MAX_DEVICES);
        struct sharing_gpu_replicas *g = &res->per_gpu[res->n_per_gpu];
        int r = get_gpu_ref(c, k, "perGpuReplicas", g->gpu, sizeof(g->gpu));
        if (r < 0 ||
            (r = get_uint(c, v, "perGpuReplicas", SHARING_REPLICAS_MAX_VOLTA, &g->replicas)) < 0)
            return r;
        for (size_t i = 0; i < res->n_per_gpu; i++)
            if (!strcmp(res->per_gpu[i].gpu, g->gpu))
                return fail(c, k, "GPU \"%s\" appears twice in perGpuReplicas", g->gpu);
        g->line = (unsigned long)k->start_mark.line + 1;
        res->n_per_gpu++;
    }
    return 0;
}

static int parse_resource(struct ctx *c, const yaml_node_t *n, struct sharing_resource *res)
{
    if (n->type != YAML_MAPPING_NODE)
        return fail(c, n, "each resources entry must be a mapping with name and replicas");
    memset(res, 0, sizeof(*res));
    res->line = (unsigned long)n->start_mark.line + 1;
    bool have_name = false, have_replicas = false;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        const char *key = scalar(k);
        int r;
        if (!key)
            return fail(c, k, "keys must be plain names");
        if (!strcmp(key, "name")) {
            r = get_resource_name(c, v, key, res->name, sizeof(res->name));
            have_name = true;
        } else if (!strcmp(key, "rename")) {
            r = get_resource_name(c, v, key, res->rename, sizeof(res->rename));
        } else if (!strcmp(key, "replicas")) {
            r = get_uint(c, v, key, SHARING_REPLICAS_MAX_VOLTA, &res->replicas);
            have_replicas = true;
        } else if (!strcmp(key, "devices")) {
            r = parse_devices(c, v, res);
        } else if (!strcmp(key, "perGpuReplicas")) {
            r = parse_per_gpu(c, v, res);
        } else {
            return fail(c, k,
                        "unknown key \"%s\" in a resources entry (known: name, replicas, "
                        "rename, devices, perGpuReplicas)",
                        key);
        }
        if (r < 0)
            return r;
    }
    if (!have_name)
        return fail(c, n, "resources entry without \"name\": add name: nvidia.com/gpu");
    if (!have_replicas)
        return fail(c, n, "resources entry \"%s\" without \"replicas\": add replicas: N",
                    res->name);
    /* a per-GPU count outside the entry's devices would never apply */
    if (res->devices == SHARING_DEVICES_LIST)
        for (size_t i = 0; i < res->n_per_gpu; i++) {
            bool in = false;
            for (size_t j = 0; j < res->n_list; j++)
                in = in || !strcmp(res->list[j], res->per_gpu[i].gpu);
            if (!in) {
                yaml_node_t mark = *n;
                mark.start_mark.line = res->per_gpu[i].line - 1;
                return fail(c, &mark,
                            "perGpuReplicas names GPU \"%s\", which is not in this entry's "
                            "devices: add it there or remove it",
                            res->per_gpu[i].gpu);
            }
        }
    return 0;
}

static int parse_strategy(struct ctx *c, const yaml_node_t *n, const char *what,
                          struct sharing_config *out)
{
    if (n->type != YAML_MAPPING_NODE)
        return fail(c, n, "\"sharing.%s\" must be a mapping", what);
    bool have_res = false;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        const char *key = scalar(k);
        int r = 0;
        if (!key)
            return fail(c, k, "keys must be plain names");
        if (!strcmp(key, "renameByDefault")) {
            r = get_bool(c, v, key, &out->rename_by_default);
        } else if (!strcmp(key, "failRequestsGreaterThanOne")) {
            r = get_bool(c, v, key, &out->fail_requests_greater_than_one);
        } else if (!strcmp(key, "resources")) {
            if (v->type != YAML_SEQUENCE_NODE)
                return fail(c, v, "\"resources\" must be a list of {name, replicas}");
            for (yaml_node_item_t *it = v->data.sequence.items.start;
                 it < v->data.sequence.items.top; it++) {
                yaml_node_t *e = yaml_document_get_node(c->doc, *it);
                if (out->n_res == SHARING_MAX_RESOURCES)
                    return fail(c, e, "more than %d resources entries", SHARING_MAX_RESOURCES);
                struct sharing_resource *res = &out->res[out->n_res];
                if ((r = parse_resource(c, e, res)) < 0)
                    return r;
                out->n_res++;
            }
            have_res = true;
        } else {
            return fail(c, k,
                        "unknown key \"%s\" in sharing.%s (known: renameByDefault, "
                        "failRequestsGreaterThanOne, resources)",
                        key, what);
        }
        if (r < 0)
            return r;
    }
    if (!have_res || !out->n_res)
        return fail(c, n,
                    "sharing.%s has no resources: add resources: [{name: nvidia.com/gpu, "
                    "replicas: N}]",
                    what);
    return 0;
}

/* Two entries of one name may split the GPUs between them (different
 * devices); the same GPU under one name twice is ambiguous. Checked here for
 * lists; for "all"/count it needs the inventory (resolve). */
static int check_overlap(struct ctx *c, const yaml_node_t *at, const struct sharing_config *o)
{
    for (size_t i = 0; i < o->n_res; i++)
        for (size_t j = i + 1; j < o->n_res; j++) {
            const struct sharing_resource *a = &o->res[i], *b = &o->res[j];
            if (strcmp(a->name, b->name))
                continue;
            yaml_node_t mark = *at;
            mark.start_mark.line = b->line - 1;
            if (a->devices != SHARING_DEVICES_LIST || b->devices != SHARING_DEVICES_LIST)
                return fail(c, &mark,
                            "\"%s\" has two entries and one covers all or a count of GPUs: "
                            "give each entry a devices list",
                            b->name);
            for (size_t x = 0; x < a->n_list; x++)
                for (size_t y = 0; y < b->n_list; y++)
                    if (!strcmp(a->list[x], b->list[y]))
                        return fail(c, &mark, "GPU \"%s\" is in two entries for \"%s\"", a->list[x],
                                    a->name);
        }
    return 0;
}

static int parse_root(struct ctx *c, const yaml_node_t *root, struct sharing_config *out)
{
    if (!root)
        return fail(c, NULL, "empty config: write version: v1 and a sharing section");
    if (root->type != YAML_MAPPING_NODE)
        return fail(c, root, "the config must be a mapping (version:, sharing:)");
    bool have_version = false;
    const yaml_node_t *ts = NULL, *mps = NULL;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        const char *key = scalar(k);
        if (!key)
            return fail(c, k, "keys must be plain names");
        if (!strcmp(key, "version")) {
            const char *s;
            int r = want_scalar(c, v, key, &s);
            if (r < 0)
                return r;
            if (strcmp(s, "v1"))
                return fail(c, v, "version \"%s\" is not supported: write version: v1", s);
            have_version = true;
        } else if (!strcmp(key, "flags") || !strcmp(key, "resources")) {
            /* NVIDIA's other sections (flags, MIG/GPU renames): not sharing */
        } else if (!strcmp(key, "sharing")) {
            if (v->type != YAML_MAPPING_NODE)
                return fail(c, v, "\"sharing\" must be a mapping (timeSlicing: or mps:)");
            for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top;
                 q++) {
                yaml_node_t *k2 = yaml_document_get_node(c->doc, q->key);
                const char *key2 = scalar(k2);
                if (key2 && !strcmp(key2, "timeSlicing"))
                    ts = yaml_document_get_node(c->doc, q->value);
                else if (key2 && !strcmp(key2, "mps"))
                    mps = yaml_document_get_node(c->doc, q->value);
                else
                    return fail(c, k2, "unknown key \"%s\" in sharing (known: timeSlicing, mps)",
                                key2 ? key2 : "?");
            }
        } else if (!c->other_keys) {
            return fail(c, k, "unknown key \"%s\" (known: version, flags, resources, sharing)",
                        key);
        }
    }
    if (!have_version)
        return fail(c, root, "no \"version\": add version: v1");
    if (ts && mps)
        return fail(c, mps, "both sharing.timeSlicing and sharing.mps are set: keep one");
    int r = 0;
    if (ts) {
        out->mode = SHARING_TIME_SLICING;
        r = parse_strategy(c, ts, "timeSlicing", out);
    } else if (mps) {
        out->mode = SHARING_MPS;
        r = parse_strategy(c, mps, "mps", out);
    }
    return r < 0 ? r : check_overlap(c, root, out);
}

int sharing_config_parse(struct sharing_config *out, const char *data, size_t len, const char *name,
                         char *err, size_t errlen)
{
    return sharing_config_parse_ex(out, data, len, name, 0, err, errlen);
}

int sharing_config_parse_ex(struct sharing_config *out, const char *data, size_t len,
                            const char *name, unsigned flags, char *err, size_t errlen)
{
    struct ctx c = {.name = name ? name : "config",
                    .err = err,
                    .errlen = errlen,
                    .other_keys = flags & SHARING_PARSE_OTHER_KEYS};
    if (err && errlen)
        err[0] = '\0';
    if (len > SHARING_CONFIG_MAX_BYTES)
        return fail(&c, NULL, "config is larger than %u bytes", SHARING_CONFIG_MAX_BYTES);
    if (memchr(data, '\0', len))
        return fail(&c, NULL, "config contains a NUL byte: is it a text file?");
    struct sharing_config *tmp = calloc(1, sizeof(*tmp));
    if (!tmp)
        return -ENOMEM;
    yaml_parser_t parser;
    yaml_document_t doc;
    int r;
    if (!yaml_parser_initialize(&parser)) {
        free(tmp);
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_node_t mark = {0};
        mark.start_mark.line = parser.problem_mark.line;
        r = fail(&c, &mark, "YAML syntax error: %s", parser.problem ? parser.problem : "?");
    } else {
        c.doc = &doc;
        r = parse_root(&c, yaml_document_get_root_node(&doc), tmp);
        if (r == 0) {
            /* a second document would be silently ignored: refuse it */
            yaml_document_t more;
            if (!yaml_parser_load(&parser, &more)) {
                r = fail(&c, NULL, "YAML syntax error after the first document");
            } else {
                if (yaml_document_get_root_node(&more))
                    r = fail(&c, NULL, "more than one YAML document: keep one");
                yaml_document_delete(&more);
            }
        }
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    if (r == 0)
        *out = *tmp;
    free(tmp);
    return r;
}

int sharing_config_load_file(struct sharing_config *out, const char *path, char *err, size_t errlen)
{
    return sharing_config_load_file_ex(out, path, 0, err, errlen);
}

int sharing_config_load_file_ex(struct sharing_config *out, const char *path, unsigned flags,
                                char *err, size_t errlen)
{
    char *data = NULL;
    size_t len = 0;
    int r = fs_read_all(path, SHARING_CONFIG_MAX_BYTES, &data, &len);
    if (r < 0) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(-r));
        return r;
    }
    r = sharing_config_parse_ex(out, data, len, path, flags, err, errlen);
    free(data);
    return r;
}

unsigned sharing_replicas_max(int cc_major, int cc_minor)
{
    (void)cc_minor;
    return cc_major >= 7 ? SHARING_REPLICAS_MAX_VOLTA : SHARING_REPLICAS_MAX_PRE_VOLTA;
}

static bool gpu_matches(const char *ref, const struct sharing_gpu *g)
{
    if (!strncmp(ref, "GPU-", 4))
        return g->uuid && !strcmp(ref, g->uuid);
    return strtoul(ref, NULL, 10) == g->index;
}

static bool ref_exists(const char *ref, const struct sharing_gpu *gpus, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (gpu_matches(ref, &gpus[i]))
            return true;
    return false;
}

int sharing_config_resolve(const struct sharing_config *c, const struct sharing_gpu *gpus,
                           size_t n_gpus, size_t which, const struct sharing_resource **ret_res,
                           unsigned *ret_replicas, char *err, size_t errlen)
{
    if (which >= n_gpus)
        return -EINVAL;
    const struct sharing_gpu *g = &gpus[which];
    for (size_t i = 0; i < c->n_res; i++) {
        const struct sharing_resource *r = &c->res[i];
        for (size_t j = 0; j < r->n_list; j++)
            if (!ref_exists(r->list[j], gpus, n_gpus)) {
                snprintf(err, errlen,
                         "line %lu: devices names GPU \"%s\", which this node does not have",
                         r->line, r->list[j]);
                return -EINVAL;
            }
        bool sel = r->devices == SHARING_DEVICES_ALL ||
                   (r->devices == SHARING_DEVICES_COUNT && which < r->count);
        for (size_t j = 0; !sel && j < r->n_list; j++)
            sel = gpu_matches(r->list[j], g);
        if (!sel)
            continue;
        unsigned n = r->replicas;
        for (size_t j = 0; j < r->n_per_gpu; j++)
            if (gpu_matches(r->per_gpu[j].gpu, g))
                n = r->per_gpu[j].replicas;
        unsigned max = sharing_replicas_max(g->cc_major, g->cc_minor);
        if (n > max) {
            snprintf(err, errlen,
                     "line %lu: GPU %u (%s, compute capability %d.%d) may have at most %u "
                     "replicas (MPS client limit), not %u: lower replicas or perGpuReplicas",
                     r->line, g->index, g->uuid ? g->uuid : "?", g->cc_major, g->cc_minor, max, n);
            return -EINVAL;
        }
        *ret_res = r;
        *ret_replicas = n;
        return 0;
    }
    return -ENOENT;
}

void sharing_resource_advertised(const struct sharing_config *c, const struct sharing_resource *r,
                                 char *buf, size_t len)
{
    if (r->rename[0])
        snprintf(buf, len, "%s", r->rename);
    else if (c->rename_by_default)
        snprintf(buf, len, "%s.shared", r->name);
    else
        snprintf(buf, len, "%s", r->name);
}

int sharing_replica_id(const char *uuid, unsigned n, char *buf, size_t len)
{
    if (!uuid || !*uuid || strstr(uuid, "::"))
        return -EINVAL;
    int k = snprintf(buf, len, "%s::%u", uuid, n);
    return k < 0 || (size_t)k >= len ? -ENOSPC : 0;
}

int sharing_replica_id_parse(const char *id, char *uuid, size_t len, unsigned *ret_n)
{
    const char *sep = strstr(id, "::");
    if (!sep || sep == id || strstr(sep + 2, "::"))
        return -EINVAL;
    const char *num = sep + 2;
    if (!*num || strspn(num, "0123456789") != strlen(num) || strlen(num) > 6 ||
        (num[0] == '0' && num[1]))
        return -EINVAL;
    if ((size_t)(sep - id) >= len)
        return -ENOSPC;
    memcpy(uuid, id, (size_t)(sep - id));
    uuid[sep - id] = '\0';
    *ret_n = (unsigned)strtoul(num, NULL, 10);
    return 0;
}

int sharing_mps_caps(unsigned k, unsigned n, uint64_t mem_bytes, unsigned *ret_pct,
                     uint64_t *ret_mem)
{
    if (!n || !k || k > n)
        return -EINVAL;
    unsigned pct = (unsigned)(100ull * k / n);
    *ret_pct = pct ? pct : 1;
    /* mem·k/n without overflow: split mem into quotient and remainder by n */
    *ret_mem = mem_bytes / n * k + mem_bytes % n * k / n;
    return 0;
}
