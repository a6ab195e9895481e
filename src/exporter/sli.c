/*
 * sli.c — accel-exporter's reader of acceld's SLI file and the accel_agent_* families; see
 * sli.h. The file is parsed and validated by src/nodestate/acceld-stats.c, the one definition of the
 * format.
 */
#include "sli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "acceld-stats.h"

struct exporter_sli {
    char path[4096];
    bool have;           /* a good file was read at least once: cur holds it */
    bool last_ok;        /* the last read was good */
    double now;          /* time of the last read */
    char last_err[5120]; /* the problem last logged ("" after a good read) */
    struct acceld_stats cur, next;
};

int exporter_sli_new(const char *state_dir, struct exporter_sli **ret)
{
    struct exporter_sli *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    if ((size_t)snprintf(s->path, sizeof(s->path), "%s/%s", state_dir, ACCELD_STATS_FILE) >=
        sizeof(s->path)) {
        free(s);
        return -ENAMETOOLONG;
    }
    *ret = s;
    return 0;
}

struct exporter_sli *exporter_sli_free(struct exporter_sli *s)
{
    free(s);
    return NULL;
}

void exporter_sli_refresh(struct exporter_sli *s, double now)
{
    char err[400];
    s->now = now;
    int r = acceld_stats_read(s->path, &s->next, err, sizeof(err));
    if (r == 0) {
        if (s->last_err[0])
            log_info("%s reads well again", s->path);
        s->cur = s->next;
        s->have = true;
        s->last_ok = true;
        s->last_err[0] = '\0';
        return;
    }
    s->last_ok = false;
    char msg[sizeof(s->last_err)];
    if (r == -ENOENT)
        snprintf(msg, sizeof(msg),
                 "%s does not exist (yet): is acceld running with this state directory? "
                 "accel_agent_up is 0",
                 s->path);
    else
        snprintf(msg, sizeof(msg), "%s: %s: %s", s->path, err,
                 s->have ? "keeping the last good values; accel_agent_up is 0"
                         : "accel_agent_up is 0");
    if (strcmp(msg, s->last_err) != 0) {
        log_warn("%s", msg);
        snprintf(s->last_err, sizeof(s->last_err), "%s", msg);
    }
}

bool exporter_sli_up(const struct exporter_sli *s)
{
    if (!s->have || !s->last_ok)
        return false;
    double age = s->now - s->cur.write_time;
    return age <= EXPORTER_SLI_STALE_S && age >= -EXPORTER_SLI_STALE_S;
}

/* Label values are printable ASCII (the parser's rule): escape \ and ". */
static const char *esc(const char *v, char *out, size_t len)
{
    size_t o = 0;
    for (; *v && o + 3 < len; v++) {
        if (*v == '\\' || *v == '"')
            out[o++] = '\\';
        out[o++] = *v;
    }
    out[o] = '\0';
    return out;
}

/* A bucket bound as OpenMetrics wants it (1.0, not 1); also valid in the text format. */
static const char *le(double b, char *out, size_t len)
{
    snprintf(out, len, "%.17g", b);
    /* shortest form that reads back the same */
    for (int p = 1; p <= 17; p++) {
        char t[40];
        snprintf(t, sizeof t, "%.*g", p, b);
        if (strtod(t, NULL) == b) {
            snprintf(out, len, "%s", t);
            break;
        }
    }
    if (!strpbrk(out, ".eE"))
        strncat(out, ".0", len - strlen(out) - 1);
    return out;
}

/* The kind and action pairs that can happen (others are shown only when counted). */
static bool quota_pair(size_t k, size_t a)
{
    if (a == ACCELD_STATS_ACTION_NONE)
        return true;
    if (k == ACCELD_STATS_QUOTA_COMPUTE)
        return a == ACCELD_STATS_ACTION_FREEZE;
    return a == ACCELD_STATS_ACTION_KILL;
}

/* The GPUs' current health, recoveries and MPS daemon state (a version 2 file; a GPU of a
 * version 1 file has none and is left out). u: room for an escaped UUID. */
static void exporter_sli_render_gpu_state(const struct acceld_stats *st,
                                          const struct exporter_sli_out *o, char *u, size_t ulen)
{
    void *c = o->ctx;
    char why[2 * ACCELD_STATS_REASON_MAX];
    if (o->family(c, "accel_gpu_health", "gauge",
                  "1 while acceld counts the GPU healthy (it advertises it), 0 while unhealthy; "
                  "reason says why (\"\" while healthy)."))
        for (size_t i = 0; i < st->n_gpus; i++)
            if (st->gpus[i].has_state)
                o->print(c, "accel_gpu_health{gpu=\"%u\",uuid=\"%s\",reason=\"%s\"} %d\n",
                         st->gpus[i].index, esc(st->gpus[i].uuid, u, ulen),
                         esc(st->gpus[i].healthy ? "" : st->gpus[i].reason, why, sizeof why),
                         st->gpus[i].healthy ? 1 : 0);
    if (o->family(c, "accel_gpu_recoveries_total", "counter",
                  "Times acceld brought the GPU back to healthy (health.recoverAfter without a "
                  "fatal event) since acceld started."))
        for (size_t i = 0; i < st->n_gpus; i++)
            if (st->gpus[i].has_state)
                o->print(c, "accel_gpu_recoveries_total{gpu=\"%u\",uuid=\"%s\"} %" PRIu64 "\n",
                         st->gpus[i].index, esc(st->gpus[i].uuid, u, ulen), st->gpus[i].to_healthy);
    if (o->family(c, "accel_gpu_mps_daemon_state", "gauge",
                  "1 for the state of the GPU's MPS control daemons (running, fault: runs but "
                  "does not answer right, down: not running), 0 for the others; GPUs with MPS "
                  "only."))
        for (size_t i = 0; i < st->n_gpus; i++) {
            const struct acceld_stats_gpu *g = &st->gpus[i];
            if (!g->has_state || g->mps == ACCELD_STATS_MPS_NONE)
                continue;
            esc(g->uuid, u, ulen);
            for (int k = ACCELD_STATS_MPS_RUNNING; k < ACCELD_STATS_MPS_STATES; k++)
                o->print(c, "accel_gpu_mps_daemon_state{gpu=\"%u\",uuid=\"%s\",state=\"%s\"} %d\n",
                         g->index, u, acceld_stats_mps_state_name((enum acceld_stats_mps_state)k),
                         (int)g->mps == k ? 1 : 0);
        }
}

void exporter_sli_render(const struct exporter_sli *s, const struct exporter_sli_out *o)
{
    void *c = o->ctx;
    if (o->family(c, "accel_agent_up", "gauge",
                  "1 while acceld's SLI file (STATE_DIR/acceld-stats.json) is valid and was "
                  "written in the last 30 s, else 0."))
        o->print(c, "accel_agent_up %d\n", exporter_sli_up(s) ? 1 : 0);
    if (!s->have)
        return;
    const struct acceld_stats *st = &s->cur;
    char r[2 * ACCELD_STATS_NAME_MAX], u[2 * ACCELD_STATS_UUID_MAX], b[48];
    if (o->family(c, "accel_agent_start_time_seconds", "gauge",
                  "When the acceld that wrote the SLI file started (Unix time)."))
        o->print(c, "accel_agent_start_time_seconds %.17g\n", st->start_time);
    if (o->family(c, "accel_agent_registrations_total", "counter",
                  "Register calls to the kubelet since acceld started, by resource and result."))
        for (size_t i = 0; i < st->n_resources; i++) {
            esc(st->res[i].name, r, sizeof r);
            o->print(c,
                     "accel_agent_registrations_total{resource=\"%s\",result=\"ok\"} %" PRIu64
                     "\naccel_agent_registrations_total{resource=\"%s\",result=\"failed\"} "
                     "%" PRIu64 "\n",
                     r, st->res[i].reg_ok, r, st->res[i].reg_failed);
        }
    if (o->family(c, "accel_agent_allocate_total", "counter",
                  "Allocate calls answered since acceld started, by resource and result."))
        for (size_t i = 0; i < st->n_resources; i++) {
            esc(st->res[i].name, r, sizeof r);
            o->print(c,
                     "accel_agent_allocate_total{resource=\"%s\",result=\"ok\"} %" PRIu64
                     "\naccel_agent_allocate_total{resource=\"%s\",result=\"error\"} %" PRIu64 "\n",
                     r, st->res[i].alloc_ok, r, st->res[i].alloc_error);
        }
    if (o->family(c, "accel_agent_allocate_duration_seconds", "histogram",
                  "Time from an Allocate's arrival to its answer (a parked one included)."))
        for (size_t i = 0; i < st->n_resources; i++) {
            const struct acceld_stats_resource *x = &st->res[i];
            esc(x->name, r, sizeof r);
            for (size_t k = 0; k < st->nbuckets; k++)
                o->print(c,
                         "accel_agent_allocate_duration_seconds_bucket{resource=\"%s\",le=\"%s\"} "
                         "%" PRIu64 "\n",
                         r, le(st->bounds[k], b, sizeof b), x->bucket[k]);
            o->print(c,
                     "accel_agent_allocate_duration_seconds_bucket{resource=\"%s\",le=\"+Inf\"} "
                     "%" PRIu64 "\n"
                     "accel_agent_allocate_duration_seconds_sum{resource=\"%s\"} %.17g\n"
                     "accel_agent_allocate_duration_seconds_count{resource=\"%s\"} %" PRIu64 "\n",
                     r, x->alloc_ok + x->alloc_error, r, x->alloc_sum, r,
                     x->alloc_ok + x->alloc_error);
        }
    if (o->family(c, "accel_agent_device_init_total", "counter",
                  "GPUs acceld initialised at start, by result (failed: not advertised, or "
                  "unhealthy at start; NVML itself failing counts one)."))
        o->print(c,
                 "accel_agent_device_init_total{result=\"ok\"} %" PRIu64
                 "\naccel_agent_device_init_total{result=\"failed\"} %" PRIu64 "\n",
                 st->init_ok, st->init_failed);
    if (o->family(c, "accel_agent_health_transitions_total", "counter",
                  "A GPU's health changes in acceld, by the state it went to."))
        for (size_t i = 0; i < st->n_gpus; i++) {
            esc(st->gpus[i].uuid, u, sizeof u);
            o->print(c,
                     "accel_agent_health_transitions_total{gpu=\"%u\",uuid=\"%s\",to=\"unhealthy\"}"
                     " %" PRIu64 "\n"
                     "accel_agent_health_transitions_total{gpu=\"%u\",uuid=\"%s\",to=\"healthy\"}"
                     " %" PRIu64 "\n",
                     st->gpus[i].index, u, st->gpus[i].to_unhealthy, st->gpus[i].index, u,
                     st->gpus[i].to_healthy);
        }
    if (o->family(c, "accel_agent_mps_daemon_restarts_total", "counter",
                  "Restarts of the GPU's MPS control daemons by acceld's supervisor."))
        for (size_t i = 0; i < st->n_gpus; i++)
            o->print(
                c, "accel_agent_mps_daemon_restarts_total{gpu=\"%u\",uuid=\"%s\"} %" PRIu64 "\n",
                st->gpus[i].index, esc(st->gpus[i].uuid, u, sizeof u), st->gpus[i].mps_restarts);
    exporter_sli_render_gpu_state(st, o, u, sizeof u);
    if (o->family(c, "accel_agent_quota_findings_total", "counter",
                  "Findings of acceld's host-side vGPU check, by kind and the action taken."))
        for (size_t k = 0; k < ACCELD_STATS_QUOTA_KINDS; k++)
            for (size_t a = 0; a < ACCELD_STATS_ACTIONS; a++)
                if (quota_pair(k, a) || st->quota[k][a])
                    o->print(c,
                             "accel_agent_quota_findings_total{kind=\"%s\",action=\"%s\"} "
                             "%" PRIu64 "\n",
                             acceld_stats_quota_kind_name(k), acceld_stats_quota_action_name(a),
                             st->quota[k][a]);
}
