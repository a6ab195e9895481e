/* expconfig.c — accel-exporter's config file (expconfig.h): a walk over libyaml's events, so
 * each refusal names the line and column where the offending node starts (libyaml's marks
 * are 0-based; messages count from 1 as editors do). */
#include "expconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "fs.h"
#include "log.h"
#include "util.h"

const char *const exporter_metric_families[] = {
    "accel_gpu_info",
    "accel_gpu_utilization_ratio",
    "accel_gpu_memory_used_bytes",
    "accel_gpu_memory_free_bytes",
    "accel_gpu_memory_total_bytes",
    "accel_gpu_temperature_celsius",
    "accel_gpu_temperature_slowdown_celsius",
    "accel_gpu_power_watts",
    "accel_gpu_power_limit_watts",
    "accel_gpu_energy_joules_total",
    "accel_gpu_sm_clock_hertz",
    "accel_gpu_memory_clock_hertz",
    "accel_gpu_clock_event_reason",
    "accel_gpu_ecc_errors_total",
    "accel_gpu_remapped_rows_correctable",
    "accel_gpu_remapped_rows_uncorrectable",
    "accel_gpu_row_remap_pending",
    "accel_gpu_row_remap_failed",
    "accel_gpu_pcie_replays_total",
    "accel_gpu_xid_events_total",
    "accel_gpu_process_memory_used_bytes",
    "accel_container_gpu_memory_used_bytes",
    /* per-process utilization and MPS clients (podutil.c) */
    "accel_gpu_process_utilization_ratio",
    "accel_container_gpu_utilization_ratio",
    "accel_container_gpu_mps_clients",
    /* vGPU usage regions, from --state-dir (regions.c) */
    "accel_vgpu_container_memory_limit_bytes",
    "accel_vgpu_container_core_share_ratio",
    "accel_vgpu_container_memory_used_bytes",
    "accel_vgpu_container_gpu_time_seconds_total",
    "accel_vgpu_container_throttled_seconds_total",
    "accel_vgpu_status_up",
    "accel_exporter_pod_resources_up",
    "accel_exporter_samples_total",
    /* acceld's own SLIs, from --state-dir (sli.c) */
    "accel_agent_up",
    "accel_agent_start_time_seconds",
    "accel_agent_registrations_total",
    "accel_agent_allocate_total",
    "accel_agent_allocate_duration_seconds",
    "accel_agent_device_init_total",
    "accel_agent_health_transitions_total",
    "accel_agent_mps_daemon_restarts_total",
    "accel_agent_quota_findings_total",
    /* acceld's view of each GPU (src/exporter/sli.c) */
    "accel_gpu_health",
    "accel_gpu_recoveries_total",
    "accel_gpu_mps_daemon_state",
    /* NVLink and MIG (gpuextra.c) */
    "accel_gpu_nvlink_errors_total",
    "accel_gpu_nvlink_links_active",
    "accel_gpu_mig_mode",
    "accel_gpu_mig_mode_pending",
    /* per MIG device of a GPU in MIG mode (accel-exporter.c) */
    "accel_mig_device_info",
    "accel_mig_device_memory_used_bytes",
    "accel_mig_device_memory_total_bytes",
    /* cost per job (cost.c) */
    "accel_pod_gpu_allocated_seconds_total",
    "accel_pod_gpu_energy_joules_total",
    "accel_gpu_energy_unattributed_joules_total",
    "accel_pod_gpu_cost_total",
    NULL,
};

void exporter_config_defaults(struct exporter_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen, sizeof c->listen, "%s", EXPORTER_DEFAULT_LISTEN);
    c->interval_ns = 1000000000ULL;
    snprintf(c->proc_root, sizeof c->proc_root, "/proc");
    snprintf(c->pod_resources_socket, sizeof c->pod_resources_socket, "%s",
             EXPORTER_DEFAULT_PODRES);
    c->connection_limit = EXPORTER_DEFAULT_CONNECTION_LIMIT;
    c->per_ip_connection_limit = EXPORTER_DEFAULT_PER_IP_LIMIT;
    c->header_timeout_ns = EXPORTER_DEFAULT_HEADER_TIMEOUT_NS;
    c->idle_timeout_ns = EXPORTER_DEFAULT_IDLE_TIMEOUT_NS;
}

int exporter_parse_listen(const char *s, struct sockaddr_in *sa)
{
    const char *colon = strrchr(s, ':');
    char host[64];
    uint64_t port;
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof host)
        return -EINVAL;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    if (parse_u64(colon + 1, &port) < 0 || port > 65535)
        return -EINVAL;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

static int say(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int say(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static int set_path(char *dst, size_t len, const char *key, const char *v, char *err, size_t errlen)
{
    if (strlen(v) >= len)
        return say(err, errlen, "%s is longer than %zu bytes", key, len - 1);
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* One cost.gpuHourPrice entry: a resource name (a Kubernetes extended resource: printable, no
 * '=' or ',' or '"' or '\\') and a price per GPU-hour (a finite decimal, at least 0). */
static int exporter_config_add_price(struct exporter_config *c, const char *res, const char *price,
                                     char *err, size_t errlen)
{
    size_t n = strlen(res);
    char *end = NULL;
    double p;
    if (n == 0 || n >= sizeof c->prices[0].resource)
        return say(err, errlen, "cost.gpuHourPrice: a resource name of 1 to %zu characters",
                   sizeof c->prices[0].resource - 1);
    for (size_t i = 0; i < n; i++)
        if (res[i] <= ' ' || res[i] > '~' || strchr("=,\"\\", res[i]))
            return say(err, errlen, "cost.gpuHourPrice: bad resource name \"%.*s\"", 64, res);
    errno = 0;
    p = *price && strspn(price, "0123456789.eE+-") == strlen(price) ? strtod(price, &end) : -1;
    if (p < 0 || errno || !end || *end || !isfinite(p))
        return say(err, errlen,
                   "cost.gpuHourPrice: bad price \"%.*s\" for %s: give a decimal of at least 0, "
                   "e.g. 2.48",
                   32, price, res);
    for (size_t i = 0; i < c->nprices; i++)
        if (strcmp(c->prices[i].resource, res) == 0)
            return say(err, errlen, "cost.gpuHourPrice: %s given twice", res);
    if (c->nprices == EXPORTER_CONFIG_MAX_PRICES)
        return say(err, errlen, "cost.gpuHourPrice: at most %d prices", EXPORTER_CONFIG_MAX_PRICES);
    memset(&c->prices[c->nprices], 0, sizeof(c->prices[0])); /* whole: configs compare bytes */
    memcpy(c->prices[c->nprices].resource, res, n + 1);
    c->prices[c->nprices++].per_hour = p;
    return 0;
}

int exporter_config_check(const struct exporter_config *c, char *err, size_t errlen)
{
    if (c->nprices && !c->cost_currency[0])
        return say(err, errlen, "cost.gpuHourPrice needs cost.currency (e.g. USD)");
    return 0;
}

int exporter_config_set(struct exporter_config *c, const char *key, const char *v, char *err,
                        size_t errlen)
{
    if (strcmp(key, "listen") == 0) {
        struct sockaddr_in sa;
        if (exporter_parse_listen(v, &sa) < 0 || strlen(v) >= sizeof c->listen)
            return say(err, errlen, "bad listen \"%s\": give IPv4ADDR:PORT, e.g. 127.0.0.1:9835",
                       v);
        return set_path(c->listen, sizeof c->listen, key, v, err, errlen);
    }
    if (strcmp(key, "interval") == 0) {
        uint64_t ns;
        if (parse_duration_ns(v, &ns) < 0 || ns < 10000000ULL)
            return say(err, errlen,
                       "bad interval \"%s\": give a duration of at least 10ms, e.g. 1s", v);
        c->interval_ns = ns;
        return 0;
    }
    if (strcmp(key, "connectionLimit") == 0 || strcmp(key, "perIpConnectionLimit") == 0) {
        bool per_ip = key[0] == 'p';
        uint64_t n;
        if (parse_u64(v, &n) < 0 || n > 65535 || (!per_ip && n == 0))
            return say(err, errlen, "bad %s \"%s\": give a number of connections, %s to 65535", key,
                       v, per_ip ? "0 (no limit per address)" : "1");
        *(per_ip ? &c->per_ip_connection_limit : &c->connection_limit) = (unsigned)n;
        return 0;
    }
    if (strcmp(key, "requestHeaderTimeout") == 0 || strcmp(key, "idleTimeout") == 0) {
        bool idle = key[0] == 'i';
        uint64_t ns, min = idle ? 1000000000ULL : 100000000ULL;
        if (parse_duration_ns(v, &ns) < 0 || ns < min || ns > 3600000000000ULL)
            return say(err, errlen, "bad %s \"%s\": give a duration from %s to 1h, e.g. %s", key, v,
                       idle ? "1s" : "100ms", idle ? "10s" : "5s");
        if (idle) /* libmicrohttpd counts whole seconds */
            ns = (ns + 999999999ULL) / 1000000000ULL * 1000000000ULL;
        *(idle ? &c->idle_timeout_ns : &c->header_timeout_ns) = ns;
        return 0;
    }
    if (strcmp(key, "logLevel") == 0) {
        enum log_level lv;
        if (log_level_parse(v, &lv) < 0 || strlen(v) >= sizeof c->log_level)
            return say(err, errlen, "bad logLevel \"%s\": use error, warn, info or debug", v);
        return set_path(c->log_level, sizeof c->log_level, key, v, err, errlen);
    }
    if (strcmp(key, "metrics.disable") == 0) { /* the flag's form: NAME,NAME,... ("" = none) */
        struct exporter_config t = *c;
        char buf[2048], *save = NULL;
        if (strlen(v) >= sizeof buf)
            return say(err, errlen, "metrics.disable is too long");
        snprintf(buf, sizeof buf, "%s", v);
        t.ndisabled = 0;
        for (char *n = strtok_r(buf, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
            const char *const *f;
            for (f = exporter_metric_families; *f && strcmp(*f, n); f++)
                ;
            if (!*f)
                return say(err, errlen, "no metric family \"%s\" (docs/exporter.md lists them)", n);
            if (!exporter_config_disabled(&t, *f) && t.ndisabled < EXPORTER_CONFIG_MAX_DISABLED)
                t.disabled[t.ndisabled++] = *f;
        }
        *c = t;
        return 0;
    }
    if (strcmp(key, "cost.currency") == 0) {
        size_t n = strlen(v);
        if (n >= sizeof c->cost_currency || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
                                                      "qrstuvwxyz0123456789_") != n)
            return say(err, errlen,
                       "bad cost.currency \"%s\": give up to 15 letters, digits or _, e.g. USD", v);
        return set_path(c->cost_currency, sizeof c->cost_currency, key, v, err, errlen);
    }
    if (strcmp(key, "cost.gpuHourPrice") == 0) { /* the flag's form: RESOURCE=PRICE,... */
        struct exporter_config t = *c;
        char buf[4096], *save = NULL;
        if (strlen(v) >= sizeof buf)
            return say(err, errlen, "cost.gpuHourPrice is too long");
        snprintf(buf, sizeof buf, "%s", v);
        t.nprices = 0;
        for (char *n = strtok_r(buf, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
            char *eq = strrchr(n, '=');
            if (!eq)
                return say(err, errlen, "cost.gpuHourPrice: give RESOURCE=PRICE, not \"%s\"", n);
            *eq = '\0';
            int r = exporter_config_add_price(&t, n, eq + 1, err, errlen);
            if (r < 0)
                return r;
        }
        *c = t;
        return 0;
    }
    if (strcmp(key, "nvmlLibrary") == 0)
        return set_path(c->nvml_library, sizeof c->nvml_library, key, v, err, errlen);
    if (strcmp(key, "procRoot") == 0)
        return set_path(c->proc_root, sizeof c->proc_root, key, v, err, errlen);
    if (strcmp(key, "podResourcesSocket") == 0)
        return set_path(c->pod_resources_socket, sizeof c->pod_resources_socket, key, v, err,
                        errlen);
    if (strcmp(key, "stateDir") == 0)
        return set_path(c->state_dir, sizeof c->state_dir, key, v, err, errlen);
    return say(err, errlen,
               "unknown key \"%s\" (known: listen, interval, nvmlLibrary, procRoot, "
               "podResourcesSocket, stateDir, logLevel, connectionLimit, perIpConnectionLimit, "
               "requestHeaderTimeout, idleTimeout, metrics, cost)",
               key);
}

static void quoted(FILE *f, const char *key, const char *v)
{
    fprintf(f, "%s: \"", key);
    for (; *v; v++) {
        unsigned char ch = (unsigned char)*v;
        /* YAML 1.1 line breaks beyond ASCII (NEL, LS, PS) would fold: their escapes */
        if (ch == 0xc2 && (unsigned char)v[1] == 0x85) {
            fputs("\\N", f);
            v++;
        } else if (ch == 0xe2 && (unsigned char)v[1] == 0x80 &&
                   ((unsigned char)v[2] == 0xa8 || (unsigned char)v[2] == 0xa9)) {
            fputs((unsigned char)v[2] == 0xa8 ? "\\L" : "\\P", f);
            v += 2;
        } else if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
    fputs("\"\n", f);
}

int exporter_config_write(FILE *f, const struct exporter_config *c)
{
    quoted(f, "listen", c->listen);
    fprintf(f, "interval: %" PRIu64 "ns\n", c->interval_ns);
    quoted(f, "nvmlLibrary", c->nvml_library);
    quoted(f, "procRoot", c->proc_root);
    quoted(f, "podResourcesSocket", c->pod_resources_socket);
    quoted(f, "stateDir", c->state_dir);
    if (c->log_level[0])
        quoted(f, "logLevel", c->log_level);
    fprintf(f, "connectionLimit: %u\n", c->connection_limit);
    fprintf(f, "perIpConnectionLimit: %u\n", c->per_ip_connection_limit);
    fprintf(f, "requestHeaderTimeout: %" PRIu64 "ns\n", c->header_timeout_ns);
    fprintf(f, "idleTimeout: %" PRIu64 "ns\n", c->idle_timeout_ns);
    fputs("metrics:\n  disable: [", f);
    for (size_t i = 0; i < c->ndisabled; i++)
        fprintf(f, "%s%s", i ? ", " : "", c->disabled[i]);
    fputs("]\n", f);
    fputs("cost:\n  ", f);
    quoted(f, "currency", c->cost_currency);
    fputs("  gpuHourPrice:", f);
    fputs(c->nprices ? "\n" : " {}\n", f);
    for (size_t i = 0; i < c->nprices; i++) {
        fputs("    ", f);
        /* %.17g reads back to the same double */
        fprintf(f, "\"%s\": %.17g\n", c->prices[i].resource, c->prices[i].per_hour);
    }
    return ferror(f) ? -1 : 0;
}

bool exporter_config_disabled(const struct exporter_config *c, const char *name)
{
    for (size_t i = 0; i < c->ndisabled; i++)
        if (strcmp(c->disabled[i], name) == 0)
            return true;
    return false;
}

/* The walk: one event at a time, the current one in w->ev. */
struct walk {
    yaml_parser_t p;
    yaml_event_t ev;
    bool have;
    const char *name;
    char *err;
    size_t errlen;
    struct exporter_config *c;
};

static int at(struct walk *w, const yaml_mark_t *m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int at(struct walk *w, const yaml_mark_t *m, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return say(w->err, w->errlen, "%s:%zu:%zu: %s", w->name, m->line + 1, m->column + 1, msg);
}

static int next(struct walk *w)
{
    if (w->have)
        yaml_event_delete(&w->ev);
    w->have = false;
    if (!yaml_parser_parse(&w->p, &w->ev)) {
        const char *what = w->p.problem ? w->p.problem : "cannot parse";
        if (w->p.error == YAML_MEMORY_ERROR) {
            say(w->err, w->errlen, "%s: out of memory", w->name);
            return -ENOMEM;
        }
        return at(w, &w->p.problem_mark, "YAML syntax error: %s", what);
    }
    w->have = true;
    if (w->ev.type == YAML_ALIAS_EVENT)
        return at(w, &w->ev.start_mark, "YAML aliases are not supported here");
    return 0;
}

static const char *kind(yaml_event_type_t t)
{
    switch (t) {
    case YAML_SCALAR_EVENT:
        return "a scalar";
    case YAML_SEQUENCE_START_EVENT:
        return "a list";
    case YAML_MAPPING_START_EVENT:
        return "a mapping";
    default:
        return "something else";
    }
}

static bool is_null(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    return ev->type == YAML_SCALAR_EVENT && ev->data.scalar.plain_implicit &&
           (!*v || !strcmp(v, "~") || !strcmp(v, "null"));
}

/* metrics.disable: a list of family names (the current event is its SEQUENCE_START). */
static int walk_disable(struct walk *w)
{
    int r;
    while ((r = next(w)) == 0 && w->ev.type != YAML_SEQUENCE_END_EVENT) {
        const char *v = (const char *)w->ev.data.scalar.value;
        const char *const *f;
        if (w->ev.type != YAML_SCALAR_EVENT)
            return at(w, &w->ev.start_mark, "metrics.disable takes family names, found %s",
                      kind(w->ev.type));
        for (f = exporter_metric_families; *f && strcmp(*f, v); f++)
            ;
        if (!*f)
            return at(w, &w->ev.start_mark,
                      "metrics.disable: no metric family \"%s\" (docs/exporter.md lists them)", v);
        if (exporter_config_disabled(w->c, *f))
            continue;
        if (w->c->ndisabled == EXPORTER_CONFIG_MAX_DISABLED)
            return at(w, &w->ev.start_mark, "metrics.disable: too many names");
        w->c->disabled[w->c->ndisabled++] = *f;
    }
    return r;
}

/* metrics: a mapping with the key disable (the current event is its MAPPING_START). */
static int walk_metrics(struct walk *w)
{
    int r;
    bool seen = false;
    while ((r = next(w)) == 0 && w->ev.type != YAML_MAPPING_END_EVENT) {
        if (w->ev.type != YAML_SCALAR_EVENT ||
            strcmp((const char *)w->ev.data.scalar.value, "disable"))
            return at(w, &w->ev.start_mark, "unknown key under metrics (known: disable)");
        if (seen)
            return at(w, &w->ev.start_mark, "metrics.disable given twice");
        seen = true;
        if ((r = next(w)) < 0)
            return r;
        if (is_null(&w->ev))
            continue;
        if (w->ev.type != YAML_SEQUENCE_START_EVENT)
            return at(w, &w->ev.start_mark, "metrics.disable must be a list, found %s",
                      kind(w->ev.type));
        if ((r = walk_disable(w)) < 0)
            return r;
    }
    return r;
}

/* cost.gpuHourPrice: a mapping RESOURCE: PRICE (the current event is its MAPPING_START). */
static int walk_prices(struct walk *w)
{
    int r;
    w->c->nprices = 0;
    while ((r = next(w)) == 0 && w->ev.type != YAML_MAPPING_END_EVENT) {
        char res[256], msg[300];
        yaml_mark_t m = w->ev.start_mark;
        if (w->ev.type != YAML_SCALAR_EVENT)
            return at(w, &m, "cost.gpuHourPrice: a resource name must be a scalar, found %s",
                      kind(w->ev.type));
        snprintf(res, sizeof res, "%s", (const char *)w->ev.data.scalar.value);
        if ((r = next(w)) < 0)
            return r;
        if (w->ev.type != YAML_SCALAR_EVENT)
            return at(w, &w->ev.start_mark, "cost.gpuHourPrice: a price must be a scalar, found %s",
                      kind(w->ev.type));
        if (exporter_config_add_price(w->c, res, (const char *)w->ev.data.scalar.value, msg,
                                      sizeof msg) < 0)
            return at(w, &m, "%s", msg);
    }
    return r;
}

/* cost: a mapping with currency and gpuHourPrice (the current event is its MAPPING_START). */
static int walk_cost(struct walk *w)
{
    int r;
    bool seen[2] = {false, false};
    while ((r = next(w)) == 0 && w->ev.type != YAML_MAPPING_END_EVENT) {
        const char *k = (const char *)w->ev.data.scalar.value;
        int which = w->ev.type != YAML_SCALAR_EVENT  ? -1
                    : strcmp(k, "currency") == 0     ? 0
                    : strcmp(k, "gpuHourPrice") == 0 ? 1
                                                     : -1;
        if (which < 0)
            return at(w, &w->ev.start_mark,
                      "unknown key under cost (known: currency, "
                      "gpuHourPrice)");
        if (seen[which])
            return at(w, &w->ev.start_mark, "cost.%s given twice",
                      which ? "gpuHourPrice" : "currency");
        seen[which] = true;
        if ((r = next(w)) < 0)
            return r;
        if (is_null(&w->ev))
            continue;
        if (which == 1) {
            if (w->ev.type != YAML_MAPPING_START_EVENT)
                return at(w, &w->ev.start_mark,
                          "cost.gpuHourPrice must be a mapping RESOURCE: PRICE, found %s",
                          kind(w->ev.type));
            if ((r = walk_prices(w)) < 0)
                return r;
            continue;
        }
        char msg[300];
        if (w->ev.type != YAML_SCALAR_EVENT)
            return at(w, &w->ev.start_mark, "cost.currency must be a scalar, found %s",
                      kind(w->ev.type));
        if (exporter_config_set(w->c, "cost.currency", (const char *)w->ev.data.scalar.value, msg,
                                sizeof msg) < 0)
            return at(w, &w->ev.start_mark, "%s", msg);
    }
    return r;
}

static int walk_root(struct walk *w)
{
    static const char *const keys[] = {"listen",
                                       "interval",
                                       "nvmlLibrary",
                                       "procRoot",
                                       "podResourcesSocket",
                                       "stateDir",
                                       "logLevel",
                                       "connectionLimit",
                                       "perIpConnectionLimit",
                                       "requestHeaderTimeout",
                                       "idleTimeout",
                                       "metrics",
                                       "cost"};
    bool seen[sizeof keys / sizeof keys[0]] = {false};
    int r;
    while ((r = next(w)) == 0 && w->ev.type != YAML_MAPPING_END_EVENT) {
        char key[64];
        size_t k;
        if (w->ev.type != YAML_SCALAR_EVENT)
            return at(w, &w->ev.start_mark, "a key must be a scalar, found %s", kind(w->ev.type));
        snprintf(key, sizeof key, "%s", (const char *)w->ev.data.scalar.value);
        for (k = 0; k < sizeof keys / sizeof keys[0] && strcmp(keys[k], key); k++)
            ;
        if (k == sizeof keys / sizeof keys[0]) {
            char msg[256];
            exporter_config_set(w->c, key, "", msg, sizeof msg); /* the "unknown key" text */
            return at(w, &w->ev.start_mark, "%s", msg);
        }
        if (seen[k])
            return at(w, &w->ev.start_mark, "%s given twice", key);
        seen[k] = true;
        if ((r = next(w)) < 0)
            return r;
        if (strcmp(key, "cost") == 0) {
            if (is_null(&w->ev))
                continue;
            if (w->ev.type != YAML_MAPPING_START_EVENT)
                return at(w, &w->ev.start_mark, "cost must be a mapping, found %s",
                          kind(w->ev.type));
            if ((r = walk_cost(w)) < 0)
                return r;
            continue;
        }
        if (strcmp(key, "metrics") == 0) {
            if (is_null(&w->ev))
                continue;
            if (w->ev.type != YAML_MAPPING_START_EVENT)
                return at(w, &w->ev.start_mark, "metrics must be a mapping, found %s",
                          kind(w->ev.type));
            if ((r = walk_metrics(w)) < 0)
                return r;
            continue;
        }
        if (w->ev.type != YAML_SCALAR_EVENT)
            return at(w, &w->ev.start_mark, "%s must be a scalar, found %s", key, kind(w->ev.type));
        char msg[300];
        if (exporter_config_set(w->c, key, (const char *)w->ev.data.scalar.value, msg, sizeof msg) <
            0)
            return at(w, &w->ev.start_mark, "%s", msg);
    }
    return r;
}

int exporter_config_parse(struct exporter_config *c, const char *data, size_t len, const char *name,
                          char *err, size_t errlen)
{
    struct exporter_config work = *c;
    struct walk w = {.name = name ? name : "<config>", .err = err, .errlen = errlen, .c = &work};
    int r;
    if (!yaml_parser_initialize(&w.p)) {
        say(err, errlen, "%s: out of memory", w.name);
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&w.p, (const unsigned char *)data, len);
    if ((r = next(&w)) < 0 || (r = next(&w)) < 0) /* STREAM_START, DOCUMENT_START or END */
        goto out;
    if (w.ev.type == YAML_STREAM_END_EVENT)
        goto out; /* an empty file: nothing changes */
    if ((r = next(&w)) < 0)
        goto out;
    if (w.ev.type == YAML_MAPPING_START_EVENT) {
        if ((r = walk_root(&w)) < 0)
            goto out;
    } else if (!is_null(&w.ev)) {
        r = at(&w, &w.ev.start_mark, "the config must be a mapping of keys, found %s",
               kind(w.ev.type));
        goto out;
    }
    if ((r = next(&w)) < 0 || (r = next(&w)) < 0) /* DOCUMENT_END, STREAM_END */
        goto out;
    if (w.ev.type != YAML_STREAM_END_EVENT)
        r = at(&w, &w.ev.start_mark, "more than one YAML document");
out:
    if (w.have)
        yaml_event_delete(&w.ev);
    yaml_parser_delete(&w.p);
    if (r == 0)
        *c = work;
    return r;
}

int exporter_config_load(struct exporter_config *c, const char *path, char *err, size_t errlen)
{
    char *data = NULL;
    size_t len = 0;
    int r = fs_read_all(path, EXPORTER_CONFIG_MAX_BYTES, &data, &len);
    if (r < 0) {
        snprintf(err, errlen, "%s: cannot read the config: %s", path, strerror(-r));
        return r;
    }
    r = exporter_config_parse(c, data, len, path, err, errlen);
    free(data);
    return r;
}
