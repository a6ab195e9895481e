/* vgpu-status.c — <stateDir>/vgpu/status.json for `accelctl vgpu`, and the
 * one-line description of a host-side check finding; see vgpu-status.h. */
#include "vgpu-status.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

void vgpu_status_describe(const struct hostcheck_finding *f, const struct hostcheck_target *t,
                          char *buf, size_t len)
{
    hostcheck_describe(f, t, "vgpu", buf, len);
}

static json_t *gpus_json(const struct vgpu *v)
{
    json_t *arr = json_array();
    struct vgpu_gpu_info g;
    for (size_t i = 0; arr && vgpu_gpu_get(v, i, &g) == 0; i++)
        json_array_append_new(arr, json_pack("{s:s,s:b,s:I,s:I,s:I,s:I,s:I}", "uuid", g.uuid,
                                             "healthy", g.healthy, "cores", (json_int_t)g.cores,
                                             "usedCores", (json_int_t)g.used_cores, "memoryUnits",
                                             (json_int_t)g.memory_units, "usedMemoryUnits",
                                             (json_int_t)g.used_memory_units, "memoryBytes",
                                             (json_int_t)(g.memory_units * g.unit_bytes)));
    return arr;
}

/* The pass's target for assignment a, or -1. */
static long target_of(const struct vgpu_status_pass *p, const struct vgpu_assignment_info *a)
{
    for (size_t i = 0; i < p->n; i++)
        if (!p->targets[i].whole && strcmp(p->targets[i].pod_uid, a->pod_uid) == 0 &&
            strcmp(p->targets[i].container, a->container) == 0 &&
            strcmp(p->targets[i].gpu_uuid, a->gpu_uuid) == 0)
            return (long)i;
    return -1;
}

static json_t *assignments_json(const struct vgpu *v, const struct vgpu_status_pass *p)
{
    json_t *arr = json_array();
    struct vgpu_assignment_info a;
    for (size_t i = 0; arr && vgpu_assignment_get(v, i, &a) == 0; i++) {
        json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:b,s:b}", "namespace", a.ns, "pod",
                              a.pod, "podUID", a.pod_uid, "container", a.container, "gpu",
                              a.gpu_uuid, "cores", (json_int_t)a.cores, "memoryBytes",
                              (json_int_t)a.memory_bytes, "whole", a.whole, "complete", a.complete);
        long t = target_of(p, &a);
        if (o && t >= 0 && p->usage) {
            const struct hostcheck_usage *u = &p->usage[t];
            json_object_set_new(o, "nvmlBytes", json_integer((json_int_t)u->nvml_bytes));
            json_object_set_new(o, "nvmlProcesses", json_integer(u->nvml_procs));
            json_object_set_new(o, "regionBytes",
                                u->region_ok ? json_integer((json_int_t)u->region_bytes)
                                             : json_null());
        }
        json_array_append_new(arr, o);
    }
    return arr;
}

/* Copies finding f of pass p (described as msg, action) into the ring. */
static void remember(const struct vgpu_status_pass *p, const struct hostcheck_finding *f,
                     const char *action, const char *msg)
{
    const struct hostcheck_target *t = &p->targets[f->target];
    struct vgpu_status_recent *r = p->recent;
    struct vgpu_status_entry *e = &r->e[r->next];
    e->time = p->time;
    e->pid = f->pid;
    snprintf(e->kind, sizeof(e->kind), "%s", hostcheck_kind_name(f->kind));
    snprintf(e->ns, sizeof(e->ns), "%s", t->ns);
    snprintf(e->pod, sizeof(e->pod), "%s", t->pod);
    snprintf(e->container, sizeof(e->container), "%s", t->container);
    snprintf(e->gpu, sizeof(e->gpu), "%s", f->gpu[0] ? f->gpu : t->gpu_uuid);
    snprintf(e->action, sizeof(e->action), "%s", action);
    snprintf(e->message, sizeof(e->message), "%s", msg);
    r->next = (r->next + 1) % VGPU_STATUS_RECENT;
    r->n += r->n < VGPU_STATUS_RECENT;
}

static json_t *findings_json(const struct vgpu_status_pass *p)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < p->n_findings; i++) {
        const struct hostcheck_finding *f = &p->findings[i];
        const struct hostcheck_target *t = &p->targets[f->target];
        char msg[1024], action[160];
        vgpu_status_describe(f, p->targets, msg, sizeof(msg));
        hostcheck_action_text(f, "vgpu", action, sizeof(action));
        json_array_append_new(
            arr, json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:s,s:s}", "kind",
                           hostcheck_kind_name(f->kind), "namespace", t->ns, "pod", t->pod,
                           "container", t->container, "gpu", f->gpu[0] ? f->gpu : t->gpu_uuid,
                           "pid", (json_int_t)f->pid, "used", (json_int_t)f->used, "limit",
                           (json_int_t)f->limit, "action", action, "message", msg));
        if (p->recent)
            remember(p, f, action, msg);
    }
    return arr;
}

static json_t *recent_json(const struct vgpu_status_recent *r)
{
    json_t *arr = json_array();
    for (size_t k = 1; arr && r && k <= r->n; k++) {
        const struct vgpu_status_entry *e =
            &r->e[(r->next + VGPU_STATUS_RECENT - k) % VGPU_STATUS_RECENT];
        json_array_append_new(arr, json_pack("{s:I,s:s,s:s,s:s,s:s,s:s,s:I,s:s,s:s}", "time",
                                             (json_int_t)e->time, "kind", e->kind, "namespace",
                                             e->ns, "pod", e->pod, "container", e->container, "gpu",
                                             e->gpu, "pid", (json_int_t)e->pid, "action", e->action,
                                             "message", e->message));
    }
    return arr;
}

int vgpu_status_write(const struct vgpu *v, const char *state_dir,
                      const struct vgpu_status_pass *pass)
{
    /* findings first: it adds the pass's findings to the recent ones */
    json_t *findings = findings_json(pass);
    json_t *root =
        json_pack("{s:i,s:I,s:s,s:I,s:o,s:o,s:o,s:o}", "version", VGPU_STATUS_VERSION, "checkTime",
                  (json_int_t)pass->time, "overQuotaAction", pass->action ? pass->action : "none",
                  "checkIntervalMs", (json_int_t)pass->interval_ms, "gpus", gpus_json(v),
                  "assignments", assignments_json(v, pass), "findings", findings, "recentFindings",
                  recent_json(pass->recent));
    if (!root)
        return -ENOMEM;
    char *text = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    if (!text)
        return -ENOMEM;
    char path[4200];
    snprintf(path, sizeof(path), "%s/vgpu/%s", state_dir, VGPU_STATUS_FILE);
    /* a report rewritten every pass: replaced atomically, not fsynced. 0644: accel-exporter
     * reads it as a non-root user (docs/deploy.md); tenants never see the vgpu/ directory
     * itself, only their own container's directory below it. */
    int r = fs_write_replace(path, text, strlen(text), 0644);
    free(text);
    return r;
}
