/* dra-acceld.c — acceld's DRA side: the GPUs it is given published as the
 * node's ResourceSlice, the kubelet plugin (registration + DRAPlugin) with
 * claims read from the API server, health events turned into device taints,
 * per-claim MPS daemons, and a status file for `accelctl dra`; and
 * acceld_dra_run, `mode: dra` on its own loop. See dra-acceld.h and
 * docs/dra.md. */
#define _GNU_SOURCE
#include "dra-acceld.h"
#include "dra-mig.h"

#include "client.h"
#include "acceld-config.h"
#include "dra-kube.h"
#include "dra.h"
#include "evloop.h"
#include "fs.h"
#include "health.h"
#include "hostcheck.h"
#include "inventory.h"
#include "log.h"
#include "mps-supervisor.h"
#include "nvml.h"
#include "events.h"
#include "objects.h"
#include "acceld-stats.h"
#include "tenant-fs.h"
#include "util.h"
#include "vcuda-lib.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define EXIT_CONFIG 2

/* The MPS control daemon of one prepared MPS claim (docs/dra.md, "MPS
 * shares"): a supervisor of one set, named dra-<uid>. */
struct mps_claim {
    struct acceld_dra *a;
    char uid[72];
    struct mps_sup *sup;
    char why[256]; /* the supervisor's last word on its health */
    char *uuids;   /* the claim's GPUs, comma-separated */
    bool was_up;   /* its daemon has answered with the claim's caps once */
    bool down;     /* and is not serving now (FAULT, dead, hung): its GPUs are unhealthy */
    struct mps_claim *next_stopping; /* on acceld_dra.stopping while its daemon quits */
    uint64_t free_timer;
};

/* Strings behind one struct dra_gpu. */
struct gpu_strings {
    char name[32];
    char dev_node[PATH_MAX];
    char architecture[32];
};

struct acceld_dra {
    const struct acceld_config *cfg; /* &live */
    struct acceld_config live;       /* what runs: the start config, then SIGHUP's */
    struct acceld_stats *stats;      /* borrowed; NULL: not counted */
    int *inv_index; /* per published GPU, its inventory index (dra.gpuSharing's SEL) */
    char node[256];
    char plugin_dir[PATH_MAX];
    char status_path[PATH_MAX];
    char ctl[3][PATH_MAX];
    const char *ctl_ptrs[3];
    struct ev_loop *loop;            /* borrowed */
    const struct gpu_inventory *inv; /* borrowed */
    size_t n;
    struct dra_gpu *gpus;
    struct gpu_strings *strs;
    const char **uuids;
    struct health_gpu *hstate;
    unsigned *mps_down;    /* per GPU: MPS claims on it whose daemon is down (mps_claim.down) */
    uint64_t *mps_retired; /* per GPU: restarts of the daemons of claims unprepared since */
    uint64_t recovery_timer;
    struct dra_prepare_config pcfg;
    struct dra_state *state;
    struct kube_client *client;
    struct dra_kube_claims *claims;
    struct dra_publisher *pub;
    struct dra_plugin *plugin;
    char mps_run_dir[PATH_MAX];
    struct mps_claim **mps;
    size_t n_mps;
    struct mps_claim *stopping; /* unprepared claims whose daemon is still quitting */
    /* the host-side check of shared claims (dra.checkInterval) */
    struct gpu_nvml *nvml; /* borrowed; NULL: none */
    struct hostcheck_state *cstate;
    uint64_t check_timer;
    json_t *check_json;            /* the last pass, for dra-status.json */
    json_t *check_recent;          /* its last 32 findings, newest last */
    struct kube_event_memo posted; /* Events: one per (claim, pod, reason) every 5 minutes */
    struct dra_mig *mig;           /* MIG partitions (dra.mig; dra-mig.h) */
};

/* The marketing name of an architecture from the compute capability. */
static const char *arch_of(int major, int minor)
{
    switch (major) {
    case 6:
        return "Pascal";
    case 7:
        return minor >= 5 ? "Turing" : "Volta";
    case 8:
        return minor == 9 ? "Ada Lovelace" : "Ampere";
    case 9:
        return "Hopper";
    case 10:
    case 12:
        return "Blackwell";
    default:
        return "unknown";
    }
}

/* ------------------------------------------------------------ status file */

/* <state_dir>/dra-status.json for `accelctl dra`: the slice, its devices and
 * their health (the prepared claims are in the checkpoint). */
static void write_status(struct acceld_dra *a)
{
    struct dra_publisher_stats st;
    dra_publisher_stats(a->pub, &st);
    const char *err = dra_publisher_error(a->pub);
    json_t *devs = json_array();
    for (size_t i = 0; i < a->n; i++) {
        const struct dra_gpu *g = &a->gpus[i];
        json_array_append_new(
            devs,
            json_pack("{s:s,s:s,s:I,s:b,s:s,s:b,s:s,s:s,s:s}", "name", g->name, "uuid", g->uuid,
                      "memory", (json_int_t)g->memory, "shared", g->shared, "sharing",
                      g->mps      ? "mps"
                      : g->shared ? "shared"
                                  : "exclusive",
                      "healthy", g->healthy, "taint",
                      dra_gpu_taint_effect(g) ? dra_gpu_taint_effect(g) : "", "reason",
                      g->healthy ? "" : a->hstate[i].reason, "pciBusID", g->pci_bus_id));
    }
    json_t *o =
        json_pack("{s:s,s:s,s:s,s:I,s:b,s:s?,s:{s:I,s:I,s:I,s:I,s:I},s:o}", "driver",
                  ACCELD_DRA_DRIVER, "node", a->node, "slice", dra_publisher_slice_name(a->pub),
                  "generation", (json_int_t)st.generation, "synced", dra_publisher_synced(a->pub),
                  "error", err, "counts", "creates", (json_int_t)st.creates, "updates",
                  (json_int_t)st.updates, "deletes", (json_int_t)st.deletes, "conflicts",
                  (json_int_t)st.conflicts, "failures", (json_int_t)st.failures, "devices", devs);
    if (o && a->check_json)
        json_object_set(o, "hostCheck", a->check_json);
    if (o && dra_mig_count(a->mig))
        json_object_set_new(o, "migPartitions",
                            json_pack("{s:I,s:s?}", "gpus", (json_int_t)dra_mig_count(a->mig),
                                      "refused", dra_mig_refusal(a->mig)));
    char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    json_decref(o);
    if (!text || fs_write_atomic(a->status_path, text, strlen(text), 0644) < 0)
        log_warn("dra: cannot write %s", a->status_path);
    free(text);
}

/* ------------------------------------------------------------ health */

static void publish(struct acceld_dra *a)
{
    dra_publisher_set(a->pub, a->gpus, a->n);
    if (a->plugin)
        dra_plugin_health_changed(a->plugin);
    write_status(a);
}

static void recovery_arm(struct acceld_dra *a);
static void check_arm(struct acceld_dra *a);

/* Copies the health state into the slice's device: an unhealthy GPU gets a
 * taint, NoExecute when it is lost (fallen off the bus, XID 79) or had a
 * double-bit ECC error (those kill its work anyway), NoSchedule otherwise.
 * A GPU with an MPS claim whose daemon is down (docs/dra.md, "MPS shares")
 * is unhealthy too, NoSchedule, until the daemon serves again. */
static void health_changed(struct acceld_dra *a, size_t i, bool fatal)
{
    struct dra_gpu *g = &a->gpus[i];
    bool was = g->healthy;
    bool nvml_ok = a->hstate[i].healthy;
    g->healthy = nvml_ok && !a->mps_down[i];
    g->fatal = !nvml_ok && (fatal || a->hstate[i].lost || (g->fatal && !g->healthy));
    if (a->stats && was != g->healthy)
        acceld_stats_health(a->stats, g->uuid, g->healthy);
    const char *why = !nvml_ok ? a->hstate[i].reason : "an MPS claim's control daemon is down";
    if (g->healthy)
        log_info("dra: GPU %s is Healthy again: taint removed from %s", g->uuid, g->name);
    else
        log_warn("dra: GPU %s is Unhealthy (%s): device %s %s%s", g->uuid, why, g->name,
                 dra_gpu_taint_effect(g) ? "tainted " : "not tainted (taint effect None)",
                 dra_gpu_taint_effect(g) ? dra_gpu_taint_effect(g) : "");
}

/* The health monitor's event ev for GPU first..last-1; true when one changed. */
static bool apply_event(struct acceld_dra *a, size_t first, size_t last,
                        const struct health_event *ev)
{
    uint64_t now = mono_ns();
    bool fatal = ev->kind == HEALTH_EV_LOST || ev->kind == HEALTH_EV_ECC_DBE ||
                 (ev->kind == HEALTH_EV_XID && (ev->data == 79 || ev->data == 48));
    bool changed = false;
    for (size_t i = first; i < last && i < a->n; i++) {
        bool ignored = false;
        bool was_fatal = a->gpus[i].fatal;
        if (health_apply(&a->hstate[i], ev, a->cfg, now, &ignored)) {
            health_changed(a, i, fatal);
            changed = true;
        } else if (!a->hstate[i].healthy && fatal && !was_fatal) {
            /* already unhealthy, now fatal: NoSchedule becomes NoExecute */
            health_changed(a, i, true);
            changed = true;
        } else if (ignored) {
            log_info("dra: GPU %s: XID %llu ignored (health.ignoredXids)", a->uuids[i],
                     (unsigned long long)ev->data);
        }
    }
    return changed;
}

void acceld_dra_health_event(struct acceld_dra *a, int i, const struct health_event *ev)
{
    size_t first = i < 0 ? 0 : (size_t)i;
    size_t last = i < 0 ? a->n : first + 1;
    if (apply_event(a, first, last, ev)) {
        publish(a);
        recovery_arm(a);
    }
}

static void on_recovery_tick(struct ev_loop *loop, void *ud)
{
    (void)loop;
    struct acceld_dra *a = ud;
    a->recovery_timer = 0;
    bool changed = false;
    uint64_t now = mono_ns();
    for (size_t i = 0; i < a->n; i++) {
        if (health_recovered(&a->hstate[i], a->cfg->recover_after_ns, now)) {
            health_changed(a, i, false);
            changed = true;
        }
    }
    if (changed)
        publish(a);
    recovery_arm(a);
}

static void recovery_arm(struct acceld_dra *a)
{
    if (a->recovery_timer || !a->cfg->recover_after_ns)
        return;
    bool any = false;
    for (size_t i = 0; i < a->n; i++)
        any |= !a->hstate[i].healthy;
    if (any) {
        uint64_t tick = a->cfg->recover_after_ns / 4;
        if (tick < 10000000ull)
            tick = 10000000ull;
        if (tick > 1000000000ull)
            tick = 1000000000ull;
        ev_loop_add_timer(a->loop, tick, on_recovery_tick, a, &a->recovery_timer);
    }
}

/* ------------------------------------------------------------ MPS claims */

/* One daemon per MPS claim, its defaults the claim's consumed capacity: a
 * client may lower the percentage and the pinned memory limit below its
 * server's, never raise them (NVIDIA's MPS guide), so the container cannot
 * take more than it was allocated whatever its env says. Claims of one GPU
 * get separate daemons, like NVIDIA's DRA driver's per-claim MPS daemons. */
static struct mps_claim *mps_find(struct acceld_dra *a, const char *uid, size_t *ret_i)
{
    for (size_t i = 0; i < a->n_mps; i++) {
        if (strcmp(a->mps[i]->uid, uid) == 0) {
            if (ret_i)
                *ret_i = i;
            return a->mps[i];
        }
    }
    return NULL;
}

/* Whether the GPU with this UUID is one of m's claim. */
static bool claim_has(const struct mps_claim *m, const char *uuid)
{
    size_t l = strlen(uuid);
    for (const char *p = m->uuids; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == l && strncmp(p, uuid, l) == 0)
            return true;
        p += len + (end ? 1 : 0);
    }
    return false;
}

/* Marks (down) or clears the GPUs of m's claim as held down by its daemon;
 * the slice, the status file and the health stream follow. */
static void mps_mark(struct acceld_dra *a, struct mps_claim *m, bool down)
{
    if (m->down == down)
        return;
    m->down = down;
    bool changed = false;
    for (size_t i = 0; i < a->n; i++) {
        if (!claim_has(m, a->uuids[i]))
            continue;
        if (down)
            a->mps_down[i]++;
        else if (a->mps_down[i])
            a->mps_down[i]--;
        bool was = a->gpus[i].healthy;
        health_changed(a, i, false);
        changed |= was != a->gpus[i].healthy;
    }
    if (changed)
        publish(a);
}

static void on_mps_health(struct mps_sup *sup, size_t set, bool healthy, const char *why, void *ud)
{
    (void)sup, (void)set;
    struct mps_claim *m = ud;
    snprintf(m->why, sizeof(m->why), "%s", why ? why : "");
    log_info("dra: claim %s: its MPS control daemon is %s (%s)", m->uid,
             healthy ? "up with the claim's caps" : "down", m->why);
    /* a daemon that served the claim and stopped (a fatal XID's FAULT, a
     * crash, a hang) leaves its clients without their caps or their server:
     * the claim's devices are unhealthy until it serves again. One that has
     * not come up yet is the prepare's business (its reply waits for it). */
    if (healthy)
        m->was_up = true;
    if (m->was_up)
        mps_mark(m->a, m, !healthy);
    if (m->a->plugin)
        dra_plugin_claims_changed(m->a->plugin);
}

/* An unprepared claim whose daemon is still quitting (a new prepare of it must wait). */
static bool mps_stopping(const struct acceld_dra *a, const char *uid)
{
    for (const struct mps_claim *m = a->stopping; m; m = m->next_stopping)
        if (strcmp(m->uid, uid) == 0)
            return true;
    return false;
}

static int mps_start(void *ctx, const char *uid, const char *uuids, unsigned n, unsigned pct,
                     uint64_t mem, char *ret_pipe, char *ret_shm, size_t len, char *err,
                     size_t errlen)
{
    struct acceld_dra *a = ctx;
    struct mps_claim *m = mps_find(a, uid, NULL);
    int r;
    if (!m && mps_stopping(a, uid)) {
        snprintf(err, errlen,
                 "claim %s was unprepared and its MPS control daemon is still quitting; try again",
                 uid);
        return -EAGAIN;
    }
    if (!m) {
        char name[80];
        if (snprintf(name, sizeof(name), "dra-%s", uid) > 64) {
            snprintf(err, errlen, "claim uid %s is too long for an MPS set name", uid);
            return -ENAMETOOLONG;
        }
        struct mps_claim **grown = realloc(a->mps, (a->n_mps + 1) * sizeof(*grown));
        if (!grown || !(m = calloc(1, sizeof(*m)))) {
            if (grown)
                a->mps = grown;
            return -ENOMEM;
        }
        a->mps = grown;
        m->a = a;
        snprintf(m->uid, sizeof(m->uid), "%s", uid);
        snprintf(m->why, sizeof(m->why), "starting");
        if (!(m->uuids = strdup(uuids))) {
            free(m);
            return -ENOMEM;
        }
        struct mps_sup_opts o = {
            .control_path = a->cfg->mps_control[0] ? a->cfg->mps_control : NULL,
            .run_dir = a->mps_run_dir,
            .probe_interval_ns = a->cfg->mps_probe_interval_ns,
            .stop_timeout_ns = 2000000000ull,
            .health_cb = on_mps_health,
            .user_data = m,
        };
        struct mps_sup_set_cfg set = {name, uuids, n, pct, mem};
        if ((r = mps_sup_new(a->loop, &o, &set, 1, &m->sup)) < 0 ||
            (r = mps_sup_start(m->sup)) < 0) {
            snprintf(err, errlen, "cannot set up its daemon under %s: %s", a->mps_run_dir,
                     strerror(-r));
            m->sup = mps_sup_free(m->sup);
            free(m->uuids);
            free(m);
            return r;
        }
        a->mps[a->n_mps++] = m;
        log_info("dra: claim %s: starting its MPS control daemon for %s (%u %%, %llu MiB per GPU)",
                 uid, uuids, pct, (unsigned long long)(mem >> 20));
    }
    const char *shm = mps_sup_shm_dir(m->sup, 0);
    if (snprintf(ret_pipe, len, "%s", mps_sup_pipe_dir(m->sup, 0)) >= (int)len ||
        snprintf(ret_shm, len, "%s", shm ? shm : "/dev/shm") >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

static int mps_ready(void *ctx, const char *uid, char *why, size_t whylen)
{
    struct mps_claim *m = mps_find(ctx, uid, NULL);
    if (!m)
        return 1; /* not an MPS claim */
    if (mps_sup_healthy(m->sup, 0))
        return 1;
    snprintf(why, whylen, "%s", m->why);
    return 0;
}

/* After its daemon is gone: the claim's directories removed and its memory freed (from a
 * timer: the supervisor's callback must not free the supervisor under itself). */
static void mps_claim_free(struct ev_loop *loop, void *user_data)
{
    struct mps_claim *m = user_data;
    struct acceld_dra *a = m->a;
    m->free_timer = 0;
    for (struct mps_claim **pp = &a->stopping; *pp; pp = &(*pp)->next_stopping)
        if (*pp == m) {
            *pp = m->next_stopping;
            break;
        }
    m->sup = mps_sup_free(m->sup);
    /* its shm tmpfs unmounted, then the rest (what containers left in the pipe dir too)
     * removed through dir fds, following nothing */
    char dir[PATH_MAX], shm[PATH_MAX + 8];
    if (snprintf(dir, sizeof(dir), "%s/mps-dra-%s", a->mps_run_dir, m->uid) < (int)sizeof(dir)) {
        snprintf(shm, sizeof(shm), "%s/shm", dir);
        if (tenant_dir_remove(shm) < 0 || tenant_dir_remove(dir) < 0)
            log_warn("dra: claim %s: cannot remove %s", m->uid, dir);
    }
    log_info("dra: claim %s: its MPS control daemon stopped", m->uid);
    free(m->uuids);
    free(m);
}

static void mps_stopped(struct mps_sup *sup, void *user_data)
{
    struct mps_claim *m = user_data;
    if (ev_loop_add_timer(m->a->loop, 0, mps_claim_free, m, &m->free_timer) < 0)
        log_error("dra: claim %s: out of memory: its directories stay", m->uid);
}

static void mps_stop(void *ctx, const char *uid)
{
    struct acceld_dra *a = ctx;
    size_t i;
    struct mps_claim *m = mps_find(a, uid, &i);
    if (!m)
        return;
    /* its restarts stay counted (the SLI file's counters never go down) */
    for (size_t g = 0; g < a->n; g++)
        if (claim_has(m, a->uuids[g]))
            a->mps_retired[g] += mps_sup_restarts(m->sup, 0);
    mps_mark(a, m, false); /* the claim is gone: so is what held its GPUs down */
    memmove(&a->mps[i], &a->mps[i + 1], (a->n_mps - i - 1) * sizeof(*a->mps));
    a->n_mps--;
    /* quit, SIGKILL after 2 s, awaited on the loop: an unprepare never holds it up (the
     * device-plugin GPUs beside may be answering Allocates) */
    m->next_stopping = a->stopping;
    a->stopping = m;
    int r = mps_sup_stop_async(m->sup, mps_stopped, m);
    if (r != 0)
        mps_stopped(m->sup, m); /* nothing ran, or cannot wait: clean up now */
}

/* The daemons of the MPS claims in the checkpoint (their containers may run). */
static void mps_restart_claims(struct acceld_dra *a)
{
    for (size_t i = 0; i < dra_state_count(a->state); i++) {
        const struct dra_prepared *p = dra_state_get(a->state, i);
        char pipe[PATH_MAX], shm[PATH_MAX], err[256] = "";
        if (!p->mps)
            continue;
        int r = mps_start(a, p->uid, p->mps_uuids, p->mps_n, p->mps_pct, p->mps_mem, pipe, shm,
                          sizeof(pipe), err, sizeof(err));
        if (r < 0)
            log_error("dra: claim %s: cannot start its MPS control daemon again: %s", p->uid,
                      err[0] ? err : strerror(-r));
    }
}

/* ------------------------------------------------------------ start-up */

/* A taint effect as struct dra_gpu has it: "" for None. */
static const char *effect_of(enum acceld_taint_effect e)
{
    return e == ACCELD_TAINT_NONE ? "" : acceld_taint_effect_name(e);
}

static int make_gpus(struct acceld_dra *a, const int *pos, size_t n_pos)
{
    const struct gpu_inventory *inv = a->inv;
    size_t total = n_pos;
    a->gpus = calloc(total ? total : 1, sizeof(*a->gpus));
    a->strs = calloc(total ? total : 1, sizeof(*a->strs));
    a->uuids = calloc(total ? total : 1, sizeof(char *));
    a->hstate = calloc(total ? total : 1, sizeof(*a->hstate));
    a->inv_index = calloc(total ? total : 1, sizeof(int));
    a->mps_down = calloc(total ? total : 1, sizeof(unsigned));
    a->mps_retired = calloc(total ? total : 1, sizeof(uint64_t));
    if (!a->gpus || !a->strs || !a->uuids || !a->hstate || !a->inv_index || !a->mps_down ||
        !a->mps_retired)
        return -ENOMEM;
    for (size_t j = 0; j < n_pos; j++) {
        int i = pos[j];
        if (i < 0 || i >= inv->count)
            continue;
        const struct gpu_device *d = &inv->devices[i];
        bool dup = false;
        for (size_t k = 0; k < a->n; k++)
            dup |= strcmp(a->uuids[k], d->uuid) == 0;
        if (!d->uuid[0] || dup) {
            log_warn("dra: GPU %d (PCI %s) is not published: no usable UUID (%s)", i,
                     d->pci_bus_id[0] ? d->pci_bus_id : "unknown",
                     d->error[0] ? d->error : "duplicate");
            continue;
        }
        size_t k = a->n++;
        struct gpu_strings *s = &a->strs[k];
        int minor = d->minor >= 0 ? d->minor : d->index;
        snprintf(s->name, sizeof(s->name), "gpu-%d", minor);
        /* CDI device node paths are the container's (as Allocate's are in the
         * device-plugin modes): /dev, whatever devRoot is */
        snprintf(s->dev_node, sizeof(s->dev_node), "/dev/nvidia%d", minor);
        snprintf(s->architecture, sizeof(s->architecture), "%s", arch_of(d->cc_major, d->cc_minor));
        a->uuids[k] = d->uuid;
        a->inv_index[k] = d->index;
        a->hstate[k].healthy = d->healthy;
        if (!d->healthy) {
            a->hstate[k].lost = true;
            a->hstate[k].last_fatal_ns = mono_ns();
            snprintf(a->hstate[k].reason, sizeof(a->hstate[k].reason), "%s", d->error);
        }
        a->gpus[k] = (struct dra_gpu){
            .name = s->name,
            .uuid = d->uuid,
            .dev_node = s->dev_node,
            .memory = d->memory_total_bytes,
            .minor = minor,
            .product = d->name,
            .architecture = s->architecture,
            .cc_major = d->cc_major < 0 ? 0 : d->cc_major,
            .cc_minor = d->cc_minor < 0 ? 0 : d->cc_minor,
            .driver_version = inv->driver_version,
            .numa_node = d->numa_node,
            .pci_bus_id = d->pci_bus_id,
            .mig_capable = d->mig_enabled > 0,
            .shared = acceld_config_dra_sharing(a->cfg, d->index, d->uuid) == ACCELD_DRA_SHARED,
            .mps = acceld_config_dra_sharing(a->cfg, d->index, d->uuid) == ACCELD_DRA_MPS,
            .healthy = d->healthy,
            .fatal = !d->healthy,
            .taint_effect = effect_of(a->cfg->dra_taint_effect),
            .fatal_taint_effect = effect_of(a->cfg->dra_fatal_taint_effect),
        };
    }
    return 0;
}

static void on_state_change(void *ud)
{
    write_status(ud);
}

/* After each publishing round: the first slice in step makes the driver ready, and only
 * then is the registration socket served (the kubelet registers what it finds there and
 * sends claims at once; before a slice exists no claim can name these GPUs anyway). */
static void on_round(void *ud)
{
    struct acceld_dra *a = ud;
    write_status(a);
    if (a->plugin && dra_publisher_synced(a->pub) && !dra_plugin_registration_served(a->plugin) &&
        dra_plugin_register(a->plugin) == 0)
        log_info("dra: the first ResourceSlice is published: the driver registers with the "
                 "kubelet");
}

/* The SLIs of the DRA side, in the device-plugin modes' families with the
 * driver's name as the resource: a prepared claim is the DRA Allocate. */
static void on_prepared(void *ud, bool ok, uint64_t duration_ns)
{
    struct acceld_dra *a = ud;
    if (a->stats)
        acceld_stats_allocate(a->stats, ACCELD_DRA_DRIVER, ok, duration_ns);
}

static void on_registration(void *ud, bool registered)
{
    struct acceld_dra *a = ud;
    if (a->stats)
        acceld_stats_registration(a->stats, ACCELD_DRA_DRIVER, registered);
}

uint64_t acceld_dra_mps_restarts(const struct acceld_dra *a, const char *uuid)
{
    int g = acceld_dra_find(a, uuid);
    if (g < 0)
        return 0;
    uint64_t n = a->mps_retired[g];
    for (size_t i = 0; i < a->n_mps; i++)
        if (claim_has(a->mps[i], uuid))
            n += mps_sup_restarts(a->mps[i]->sup, 0);
    return n;
}
/* The API server dropped or refused the partitionable-device fields: the MIG GPUs leave the
 * slice (dra-mig.h), which is published again without them. */
static void on_partitions_refused(void *ud, const char *reason)
{
    struct acceld_dra *a = ud;
    dra_mig_refuse(a->mig, a->gpus, a->n, reason);
    publish(a);
}

static int kube_start(struct acceld_dra *a)
{
    char err[1024];
    int r = dra_kube_client_new(a->loop, a->cfg->kubeconfig, &a->client, err, sizeof(err));
    if (r < 0) {
        log_error("dra: no API server: %s", err);
        return r;
    }
    if (r == 0)
        r = dra_kube_claims_new(a->loop, a->client, a->cfg->dra_claim_wait_ns, &a->claims);
    if (r == 0)
        r = dra_publisher_new(a->loop, a->client, ACCELD_DRA_DRIVER, a->node, &a->pub);
    if (r == 0) {
        dra_publisher_on_round(a->pub, on_round, a);
        dra_publisher_on_refused(a->pub, on_partitions_refused, a);
    }
    if (r < 0)
        log_error("dra: cannot start the API client: %s", strerror(-r));
    return r;
}

/* ------------------------------------------------------------ SIGHUP */

static const char *sharing_name(const struct dra_gpu *g)
{
    return g->mps ? "mps" : g->shared ? "shared" : "exclusive";
}

/* Prepared claims that hold device name. */
static size_t claims_on(const struct acceld_dra *a, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < dra_state_count(a->state); i++) {
        const struct dra_prepared *p = dra_state_get(a->state, i);
        for (size_t d = 0; d < p->n_devices; d++)
            if (strcmp(p->devices[d].device, name) == 0) {
                n++;
                break;
            }
    }
    return n;
}

/* dra.sharing / dra.gpuSharing applied per GPU; a GPU with prepared claims
 * keeps its sharing (its claims were allocated and prepared as such) until
 * they are gone and a later SIGHUP asks again. Returns whether one changed. */
static bool apply_sharing(struct acceld_dra *a)
{
    bool changed = false;
    for (size_t i = 0; i < a->n; i++) {
        struct dra_gpu *g = &a->gpus[i];
        if (g->n_mig_profiles)
            continue; /* MIG partitions: exclusive, whatever dra.sharing says (dra-mig.h) */
        enum acceld_dra_sharing want = acceld_config_dra_sharing(a->cfg, a->inv_index[i], g->uuid);
        bool shared = want == ACCELD_DRA_SHARED, mps = want == ACCELD_DRA_MPS;
        if (shared == g->shared && mps == g->mps)
            continue;
        static const char *const names[] = {"exclusive", "shared", "mps"};
        size_t held = claims_on(a, g->name);
        if (held) {
            log_warn("config reload: GPU %s (%s) has prepared claims (%zu): its sharing stays %s, "
                     "not %s, until they are unprepared (then send SIGHUP again)",
                     g->name, g->uuid, held, sharing_name(g), names[want]);
            continue;
        }
        char err[1024];
        if (shared && vcuda_lib_check(a->cfg->vcuda_library, err, sizeof(err)) < 0) {
            log_error("config reload: GPU %s (%s) stays %s, not shared: %s", g->name, g->uuid,
                      sharing_name(g), err);
            continue;
        }
        log_info("config reload: GPU %s (%s): sharing %s -> %s", g->name, g->uuid, sharing_name(g),
                 names[want]);
        g->shared = shared;
        g->mps = mps;
        changed = true;
    }
    return changed;
}

/* Keys DRA mode reads at start only: a change is refused (the running value
 * stays) with a log line. Keys not in this list and not live are not used
 * in DRA mode. */
static const char *const at_start_keys[] = {
    "nvmlLibrary", "sysfsRoot",       "devRoot",       "stateDir",      "mode",
    "gpuModes",    "nodeName",        "kubeconfig",    "vcudaLibrary",  "cdi.dir",
    "mpsControl",  "dra.registryDir", "dra.pluginDir", "dra.claimWait", "dra.mig",
};
/* Keys SIGHUP applies in DRA mode. */
static const char *const live_keys[] = {
    "logLevel",          "health.ignoredXids", "health.recoverAfter",  "dra.sharing",
    "dra.gpuSharing",    "dra.taintEffect",    "dra.fatalTaintEffect", "dra.overQuotaAction",
    "dra.checkInterval", "procRoot",
};

static bool in_list(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, list[i]) == 0)
            return true;
    return false;
}

/* What SIGHUP changes on the DRA side: n has the running value of every
 * key read at start only. */
static void apply_config(struct acceld_dra *a, const struct acceld_config *n)
{
    a->live = *n;
    for (size_t i = 0; i < a->n; i++) {
        a->gpus[i].taint_effect = effect_of(n->dra_taint_effect);
        a->gpus[i].fatal_taint_effect = effect_of(n->dra_fatal_taint_effect);
    }
    apply_sharing(a);
    /* the publisher writes only when the rendered slice differs */
    publish(a);
    a->recovery_timer = (ev_loop_cancel_timer(a->loop, a->recovery_timer), 0);
    recovery_arm(a);
    a->check_timer = (ev_loop_cancel_timer(a->loop, a->check_timer), 0);
    check_arm(a);
}

void acceld_dra_reload(struct acceld_dra *a, const struct acceld_config *n, bool log_refused)
{
    struct acceld_config c = *n;
    for (size_t i = 0; i < ARRAY_SIZE(at_start_keys); i++) {
        const char *key = at_start_keys[i];
        if (!acceld_config_key_differs(a->cfg, &c, key))
            continue;
        char ov[1024], nv[1024], msg[256];
        acceld_config_format(a->cfg, key, ov, sizeof(ov));
        acceld_config_format(&c, key, nv, sizeof(nv));
        if (log_refused)
            log_warn("config reload: %s: \"%s\" -> \"%s\": the DRA side reads it at start "
                     "only (restart acceld); it keeps \"%s\"",
                     key, ov, nv, ov);
        if (acceld_config_set(&c, key, ov, msg, sizeof(msg)) < 0)
            log_error("config reload: cannot keep %s: %s", key, msg);
    }
    apply_config(a, &c);
}

/* ------------------------------------------------------------ start-up */

int acceld_dra_node_name(const struct acceld_config *cfg, char *buf, size_t len)
{
    const char *node = cfg->node_name[0] ? cfg->node_name : getenv("NODE_NAME");
    if (!node || !node[0]) {
        log_error("dra: the node name is needed (--node-name or $NODE_NAME)");
        return -EINVAL;
    }
    /* a DNS subdomain: it goes into API paths and field selectors as is */
    bool dns = strlen(node) <= 253 && strlen(node) < len;
    for (const char *c = node; *c; c++)
        dns &= (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '.';
    if (!dns) {
        log_error("dra: node name \"%s\" is not a DNS subdomain (lower-case letters, digits, "
                  "'-', '.')",
                  node);
        return -EINVAL;
    }
    snprintf(buf, len, "%s", node);
    return 0;
}

static int start(struct acceld_dra *a, const int *pos, size_t n_pos)
{
    const struct acceld_config *cfg = a->cfg;
    char err[1024];
    int r = acceld_dra_node_name(cfg, a->node, sizeof(a->node));
    if (r < 0)
        return r;
    if (cfg->dra_plugin_dir[0])
        snprintf(a->plugin_dir, sizeof(a->plugin_dir), "%s", cfg->dra_plugin_dir);
    else
        snprintf(a->plugin_dir, sizeof(a->plugin_dir), "/var/lib/kubelet/plugins/%s",
                 ACCELD_DRA_DRIVER);
    snprintf(a->status_path, sizeof(a->status_path), "%s/dra-status.json", cfg->state_dir);
    if ((r = make_gpus(a, pos, n_pos)) < 0)
        return r;
    /* before the counts: a GPU published as MIG partitions is exclusive */
    if ((r = dra_mig_new(a->nvml, cfg, a->gpus, a->n, &a->mig)) < 0)
        return r;
    size_t shared = 0, mps = 0;
    for (size_t i = 0; i < a->n; i++) {
        shared += a->gpus[i].shared;
        mps += a->gpus[i].mps;
    }
    log_info("dra: driver %s, %zu GPU(s) published: %zu shared (vGPU), %zu shared (MPS), %zu "
             "exclusive",
             a->inv->driver_version, a->n, shared, mps, a->n - shared - mps);
    if (shared && vcuda_lib_check(cfg->vcuda_library, err, sizeof(err)) < 0) {
        log_error("dra: %zu GPU(s) shared through libvcuda (dra.sharing, dra.gpuSharing): %s",
                  shared, err);
        return -EINVAL;
    }
    static const char *const ctl[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(a->ctl[i], sizeof(a->ctl[i]), "/dev/%s", ctl[i]);
        a->ctl_ptrs[i] = a->ctl[i];
    }
    if ((r = fs_mkdir_p(cfg->state_dir, 0755)) < 0 || (r = fs_mkdir_p(cfg->cdi_dir, 0755)) < 0 ||
        (r = fs_mkdir_p(a->plugin_dir, 0750)) < 0) {
        log_error("dra: cannot create %s, %s or %s: %s", cfg->state_dir, cfg->cdi_dir,
                  a->plugin_dir, strerror(-r));
        return r;
    }
    a->pcfg = (struct dra_prepare_config){ACCELD_DRA_DRIVER,
                                          a->node,
                                          cfg->cdi_dir,
                                          cfg->state_dir,
                                          cfg->vcuda_library,
                                          a->ctl_ptrs,
                                          3,
                                          a->gpus,
                                          a->n,
                                          {mps_start, mps_ready, mps_stop, a},
                                          dra_mig_ops(a->mig)};
    snprintf(a->mps_run_dir, sizeof(a->mps_run_dir), "%s/mps", cfg->state_dir);
    if ((r = dra_state_new(&a->pcfg, &a->state, err, sizeof(err))) < 0) {
        log_error("dra: %s", err);
        return r;
    }
    mps_restart_claims(a);
    /* instances of a crash between a create and the checkpoint, or made by hand */
    dra_mig_clean(a->mig, a->state);
    if ((r = kube_start(a)) < 0)
        return r;
    struct dra_plugin_config pc = {
        .driver_name = ACCELD_DRA_DRIVER,
        .registry_dir = cfg->dra_registry_dir,
        .plugin_dir = a->plugin_dir,
        .state = a->state,
        .fetcher = dra_kube_claims_fetcher(a->claims),
        .on_change = on_state_change,
        .on_change_data = a,
        .on_prepared = on_prepared,
        .on_registration = on_registration,
        .gpus = a->gpus,
        .n_gpus = a->n,
        .pool_name = a->node,
        .mps = a->pcfg.mps,
        .mps_ready_wait_ns = cfg->dra_claim_wait_ns,
        .defer_registration = true,
    };
    if ((r = dra_plugin_new(a->loop, &pc, &a->plugin)) < 0) {
        log_error("dra: cannot serve the kubelet plugin sockets: %s", strerror(-r));
        return r;
    }
    publish(a);
    on_round(a); /* a round that ended before the plugin existed */
    recovery_arm(a);
    if (a->nvml && hostcheck_state_new(&a->cstate) == 0)
        check_arm(a);
    return 0;
}

/* ------------------------------------------------------------ host-side check */

/* The shared claims' pods, checked as the vGPU mode's containers are (src/hostcheck; issue 22,
 * F10): each (pod, GPU) of a prepared libvcuda share is a target with the claim's memory and
 * cores and its region dir; the claim's pods are the ones it was reserved for at prepare. */

static void on_event_posted(struct kube_client *c, const struct kube_response *resp, void *ud)
{
    (void)c, (void)ud;
    if (resp->error)
        log_warn("dra: cannot post the host-side check's Event: %s", resp->error);
}

static const char *const check_reason[] = {
    [HOSTCHECK_OVER_QUOTA] = "DRAShareOverQuota",
    [HOSTCHECK_UNDER_REPORT] = "DRAShareUsageUnderReported",
    [HOSTCHECK_OVER_SHARE] = "DRAShareComputeOverShare",
    [HOSTCHECK_FOREIGN_GPU] = "DRAShareForeignGPU",
    [HOSTCHECK_REGION_BAD] = "DRAShareRegionInvalid",
};

static void check_report(struct acceld_dra *a, const struct hostcheck_target *t,
                         const struct hostcheck_finding *f, const char *claim_uid, json_t *arr)
{
    const struct hostcheck_target *g = &t[f->target];
    char msg[1024], act[160];
    hostcheck_describe(f, t, "dra", msg, sizeof(msg));
    hostcheck_action_text(f, "dra", act, sizeof(act));
    if (f->kind == HOSTCHECK_OVER_QUOTA || f->kind == HOSTCHECK_FOREIGN_GPU)
        log_error("dra check: %s/%s %s", g->ns, g->pod, msg);
    else
        log_warn("dra check: %s/%s %s", g->ns, g->pod, msg);
    if (a->stats)
        acceld_stats_quota(a->stats, (enum acceld_stats_quota_kind)hostcheck_stats_family(f->kind),
                           f->killed ? ACCELD_STATS_ACTION_KILL : ACCELD_STATS_ACTION_NONE);
    json_t *o = json_pack("{s:I,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:s,s:s}", "time",
                          (json_int_t)time(NULL), "kind", hostcheck_kind_name(f->kind), "claim",
                          claim_uid, "namespace", g->ns, "pod", g->pod, "gpu", f->gpu, "pid",
                          (json_int_t)f->pid, "used", (json_int_t)f->used, "limit",
                          (json_int_t)f->limit, "action", act, "message", msg);
    if (o) {
        json_array_append(arr, o);
        if (!a->check_recent)
            a->check_recent = json_array();
        json_array_append_new(a->check_recent, o);
        while (json_array_size(a->check_recent) > 32)
            json_array_remove(a->check_recent, 0);
    }
    char key[sizeof(a->posted.e[0].key)];
    snprintf(key, sizeof(key), "%s/%s/%s", claim_uid, g->pod_uid, check_reason[f->kind]);
    struct kube_event_spec spec = {
        g->ns, g->pod,   g->pod_uid, KUBE_EVENT_WARNING, check_reason[f->kind],
        msg,   "acceld", a->node,    time(NULL)};
    if (a->client)
        kube_event_post(a->client, &a->posted, key, &spec, on_event_posted, a);
}

static void check_once(struct acceld_dra *a)
{
    size_t cap = 0;
    for (size_t i = 0; i < dra_state_count(a->state); i++) {
        const struct dra_prepared *p = dra_state_get(a->state, i);
        if (p->share)
            cap += p->n_pods * p->share_n;
    }
    struct hostcheck_target *t = calloc(cap ? cap : 1, sizeof(*t));
    const char **owner = calloc(cap ? cap : 1, sizeof(*owner)); /* each target's claim uid */
    char(*uuid)[96] = calloc(cap ? cap : 1, sizeof(*uuid));
    char(*region)[PATH_MAX] = calloc(cap ? cap : 1, sizeof(*region));
    char(*label)[300] = calloc(cap ? cap : 1, sizeof(*label));
    size_t k = 0;
    for (size_t i = 0; t && owner && uuid && region && label && i < dra_state_count(a->state);
         i++) {
        const struct dra_prepared *p = dra_state_get(a->state, i);
        if (!p->share)
            continue;
        const char *u = p->share_uuids;
        for (unsigned d = 0; d < p->share_n && u && *u; d++) {
            size_t len = strcspn(u, ",");
            for (size_t j = 0; j < p->n_pods && k < cap; j++, k++) {
                snprintf(uuid[k], sizeof(uuid[k]), "%.*s", (int)(len < 95 ? len : 95), u);
                snprintf(region[k], sizeof(region[k]), "%s/claims/%s/region", a->cfg->state_dir,
                         p->uid);
                snprintf(label[k], sizeof(label[k]), "of claim %s", p->share_name);
                owner[k] = p->uid;
                t[k] = (struct hostcheck_target){
                    .pod_uid = p->pods[j].uid,
                    .ns = p->share_ns,
                    .pod = p->pods[j].name,
                    .container = label[k],
                    .gpu_uuid = uuid[k],
                    /* no memory consumed: no memory limit */
                    .memory_limit = p->share_memory ? p->share_memory : (1ull << 62),
                    .region_dir = region[k],
                    .region_dev = d,
                    .cores = p->share_cores,
                };
            }
            u += len + (u[len] == ',');
        }
    }
    struct hostcheck_finding f[32];
    size_t nf = 0;
    struct hostcheck_options o = {
        .proc_root = a->cfg->proc_root,
        .action = a->cfg->dra_over_quota_kill ? HOSTCHECK_ACTION_KILL : HOSTCHECK_ACTION_NONE,
        .state = a->cstate,
        .all_gpus = true,
    };
    int r = t && owner && uuid && region && label
                ? hostcheck_run(a->nvml, t, k, &o, f, ARRAY_SIZE(f), &nf)
                : -ENOMEM;
    if (r < 0)
        log_warn("dra check: cannot read every GPU's processes: %s", strerror(-r));
    nf = nf < ARRAY_SIZE(f) ? nf : ARRAY_SIZE(f);
    json_t *arr = json_array();
    for (size_t i = 0; i < nf && arr; i++)
        check_report(a, t, &f[i], owner[f[i].target], arr);
    json_decref(a->check_json);
    a->check_json = json_pack("{s:I,s:s,s:I,s:I,s:o,s:o}", "time", (json_int_t)time(NULL),
                              "overQuotaAction", hostcheck_action_name(o.action), "checkIntervalMs",
                              (json_int_t)(a->cfg->dra_check_interval_ns / 1000000), "targets",
                              (json_int_t)k, "findings", arr ? arr : json_array(), "recentFindings",
                              /* "o" takes the reference: a new one, never the kept list's own */
                              a->check_recent ? json_incref(a->check_recent) : json_array());
    free(t);
    free(owner);
    free(uuid);
    free(region);
    free(label);
    if (nf || a->check_json)
        write_status(a);
}

static void on_check(struct ev_loop *loop, void *user_data)
{
    (void)loop;
    struct acceld_dra *a = user_data;
    a->check_timer = 0;
    check_once(a);
    check_arm(a);
}

static void check_arm(struct acceld_dra *a)
{
    if (a->check_timer || !a->nvml || !a->cstate || a->cfg->dra_check_interval_ns == 0)
        return;
    ev_loop_add_timer(a->loop, a->cfg->dra_check_interval_ns, on_check, a, &a->check_timer);
}

static void stop(struct acceld_dra *a)
{
    if (a->check_timer)
        ev_loop_cancel_timer(a->loop, a->check_timer);
    a->check_timer = 0;
    a->cstate = hostcheck_state_free(a->cstate);
    json_decref(a->check_json);
    json_decref(a->check_recent);
    a->check_json = a->check_recent = NULL;
    a->plugin = dra_plugin_free(a->plugin);
    if (a->recovery_timer)
        ev_loop_cancel_timer(a->loop, a->recovery_timer);
    a->pub = dra_publisher_free(a->pub);
    a->claims = dra_kube_claims_free(a->claims);
    a->client = kube_client_free(a->client);
    /* the claims' daemons stop with acceld (as the device-plugin mode's do);
     * a restarted acceld starts them again from the checkpoint */
    for (size_t i = 0; i < a->n_mps; i++) {
        mps_sup_free(a->mps[i]->sup);
        free(a->mps[i]->uuids);
        free(a->mps[i]);
    }
    free(a->mps);
    while (a->stopping) { /* their daemons' quit, waited for in place now */
        struct mps_claim *m = a->stopping;
        ev_loop_cancel_timer(a->loop, m->free_timer);
        mps_claim_free(a->loop, m);
    }
    a->state = dra_state_free(a->state);
    a->mig = dra_mig_free(a->mig);
    free(a->gpus);
    free(a->strs);
    free(a->uuids);
    free(a->hstate);
    free(a->inv_index);
    free(a->mps_down);
    free(a->mps_retired);
}

int acceld_dra_new(const struct acceld_dra_options *o, struct acceld_dra **ret)
{
    struct acceld_dra *a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->live = *o->cfg;
    a->cfg = &a->live;
    a->loop = o->loop;
    a->inv = o->inv;
    a->stats = o->stats;
    a->nvml = o->nvml;
    log_info("acceld DRA side: driver %s, %zu GPU(s), registry %s, state %s", ACCELD_DRA_DRIVER,
             o->n_gpus, a->cfg->dra_registry_dir, a->cfg->state_dir);
    int r = start(a, o->gpus, o->n_gpus);
    if (r < 0) {
        stop(a);
        free(a);
        return r;
    }
    *ret = a;
    return 0;
}

struct acceld_dra *acceld_dra_free(struct acceld_dra *a)
{
    if (!a)
        return NULL;
    if (a->pub)
        write_status(a);
    stop(a);
    free(a);
    return NULL;
}

size_t acceld_dra_gpu_count(const struct acceld_dra *a)
{
    return a->n;
}

const char *acceld_dra_gpu_uuid(const struct acceld_dra *a, size_t i)
{
    return i < a->n ? a->uuids[i] : NULL;
}

int acceld_dra_find(const struct acceld_dra *a, const char *uuid)
{
    for (size_t i = 0; a && uuid && i < a->n; i++)
        if (strcmp(a->uuids[i], uuid) == 0)
            return (int)i;
    return -1;
}

/* ------------------------------------------------------------ mode: dra alone */

/* acceld_dra_run's own loop, NVML, inventory and health monitor around the
 * DRA side serving every GPU. */
struct dra_run {
    struct acceld_config cfg; /* the running config, for the reload's comparison */
    acceld_dra_reload_fn reload;
    void *reload_data;
    struct ev_loop *loop;
    struct gpu_nvml *nvml;
    struct gpu_inventory *inv;
    struct health_monitor *health;
    struct acceld_dra *dra;
    /* the agent's SLIs (acceld-stats.h), written to <stateDir>/acceld-stats.json */
    struct acceld_stats *stats;
    struct acceld_stats_writer stats_w; /* what was written when, and its timer */
    bool stats_warned;                  /* a failed write was logged (once until one succeeds) */
};

static double real_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* As acceld.c's for the device-plugin modes: when something changed, at most
 * once a second, touched at least every ACCELD_STATS_HEARTBEAT_NS, and at exit. */
static void run_stats_flush(struct dra_run *d, bool force)
{
    if (!d->stats)
        return;
    for (size_t i = 0; d->dra && i < acceld_dra_gpu_count(d->dra); i++) {
        const char *uuid = acceld_dra_gpu_uuid(d->dra, i);
        acceld_stats_set_mps_restarts(d->stats, uuid, acceld_dra_mps_restarts(d->dra, uuid));
    }
    int r = acceld_stats_flush(&d->stats_w, d->stats, d->cfg.state_dir, mono_ns(), real_s(), force);
    if (r < 0) {
        if (!d->stats_warned)
            log_warn("cannot write %s/%s (the agent's SLIs for accel-exporter): %s",
                     d->cfg.state_dir, ACCELD_STATS_FILE, strerror(-r));
        d->stats_warned = true;
        return;
    }
    d->stats_warned = false;
}

static void on_run_stats_tick(struct ev_loop *loop, void *ud);

static void run_stats_schedule(struct dra_run *d)
{
    if (d->stats && d->loop)
        acceld_stats_schedule(&d->stats_w, d->stats, d->loop, on_run_stats_tick, d);
}

static void on_run_stats_tick(struct ev_loop *loop, void *ud)
{
    struct dra_run *d = ud;
    (void)loop;
    d->stats_w.timer = 0;
    run_stats_flush(d, false);
    run_stats_schedule(d);
}

static void on_run_stats_change(void *ud)
{
    run_stats_schedule(ud);
}

static void run_reload(struct dra_run *d)
{
    struct acceld_config n;
    char err[1024];
    if (!d->reload) {
        log_warn("SIGHUP: no config to reload");
        return;
    }
    if (d->reload(d->reload_data, &n, err, sizeof(err)) < 0) {
        log_error("config reload refused, keeping the running config: %s", err);
        return;
    }
    size_t changes = 0;
    for (const struct acceld_config_key *k = acceld_config_keys; k->key; k++) {
        if (!acceld_config_key_differs(&d->cfg, &n, k->key))
            continue;
        char ov[1024], nv[1024], msg[256];
        acceld_config_format(&d->cfg, k->key, ov, sizeof(ov));
        acceld_config_format(&n, k->key, nv, sizeof(nv));
        if (in_list(k->key, at_start_keys, ARRAY_SIZE(at_start_keys))) {
            log_warn("config reload: %s: \"%s\" -> \"%s\" refused: DRA mode reads it at start "
                     "only (restart acceld); keeping \"%s\"",
                     k->key, ov, nv, ov);
            if (acceld_config_set(&n, k->key, ov, msg, sizeof(msg)) < 0)
                log_error("config reload: cannot keep %s: %s", k->key, msg);
        } else if (in_list(k->key, live_keys, ARRAY_SIZE(live_keys))) {
            log_info("config reload: %s: \"%s\" -> \"%s\"", k->key, ov, nv);
            changes++;
        } else {
            log_info("config reload: %s: \"%s\" -> \"%s\" (not used in DRA mode)", k->key, ov, nv);
        }
    }
    if (!changes) {
        log_info("config reload: nothing DRA mode applies changed");
        return;
    }
    d->cfg = n;
    log_set_level(n.log_level);
    acceld_dra_reload(d->dra, &n, false);
}

static void on_run_signal(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)events;
    struct dra_run *d = ud;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGHUP) {
            log_info("SIGHUP: reloading the config");
            run_reload(d);
        } else {
            log_info("%s: shutting down", strsignal((int)si.ssi_signo));
            ev_loop_quit(loop);
        }
    }
}

static void on_run_health(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)events;
    struct dra_run *d = ud;
    struct health_event ev;
    int r;
    /* the monitor watches the DRA side's GPUs, in its order */
    while ((r = health_monitor_read(d->health, &ev)) == 1)
        acceld_dra_health_event(d->dra, ev.gpu < 0 ? -1 : ev.gpu, &ev);
    if (r < 0) {
        log_error("health monitor pipe failed: %s; health changes are no longer seen",
                  strerror(-r));
        ev_loop_del_io(loop, fd);
    }
}

static int run_start(struct dra_run *d, int sig_fd)
{
    char err[1024];
    const struct acceld_config *cfg = &d->cfg;
    int r =
        gpu_nvml_open(cfg->nvml_library[0] ? cfg->nvml_library : NULL, &d->nvml, err, sizeof(err));
    if (r < 0) {
        log_error("cannot open NVML: %s", err);
        if (d->stats)
            acceld_stats_device_init(d->stats, false);
        return r == -EINVAL ? -EIO : r;
    }
    struct gpu_inventory_options io = {d->nvml->path, cfg->sysfs_root};
    if ((r = gpu_inventory_load(&io, d->nvml, &d->inv, err, sizeof(err))) < 0) {
        log_error("cannot list the GPUs: %s", err);
        if (d->stats)
            acceld_stats_device_init(d->stats, false);
        return r == -EINVAL ? -EIO : r;
    }
    int *pos = calloc(d->inv->count ? (size_t)d->inv->count : 1, sizeof(int));
    if (!pos)
        return -ENOMEM;
    for (int i = 0; i < d->inv->count; i++)
        pos[i] = i;
    if ((r = ev_loop_new(&d->loop)) < 0 ||
        (r = ev_loop_add_io(d->loop, sig_fd, EPOLLIN, on_run_signal, d)) < 0) {
        free(pos);
        return r;
    }
    struct acceld_dra_options o = {d->loop,  cfg,    d->inv, pos, (size_t)d->inv->count,
                                   d->stats, d->nvml};
    r = acceld_dra_new(&o, &d->dra);
    free(pos);
    if (r < 0) {
        /* a second acceld refused its sockets leaves the first one's SLI file alone */
        d->stats = (free(d->stats), NULL);
        return r;
    }
    for (size_t i = 0; d->stats && i < acceld_dra_gpu_count(d->dra); i++) {
        const char *uuid = acceld_dra_gpu_uuid(d->dra, i);
        for (int k = 0; k < d->inv->count; k++) {
            const struct gpu_device *g = &d->inv->devices[k];
            if (strcmp(g->uuid, uuid) == 0) {
                acceld_stats_add_gpu(d->stats, (unsigned)g->index, uuid);
                acceld_stats_device_init(d->stats, g->healthy);
            }
        }
    }
    /* the GPUs left out (no usable UUID) */
    for (size_t i = acceld_dra_gpu_count(d->dra); d->stats && i < (size_t)d->inv->count; i++)
        acceld_stats_device_init(d->stats, false);
    size_t n = acceld_dra_gpu_count(d->dra), warnings = 0;
    const char **uuids = calloc(n ? n : 1, sizeof(char *));
    if (!uuids)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        uuids[i] = acceld_dra_gpu_uuid(d->dra, i);
    r = health_monitor_start(d->nvml, uuids, n, &d->health, &warnings);
    free(uuids);
    if (r < 0) {
        log_error("cannot start the health monitor: %s", strerror(-r));
        return r == -EINVAL ? -EIO : r;
    }
    if (warnings)
        log_warn("NVML events unavailable for %zu GPU(s): only GPU loss is detected for them",
                 warnings);
    if ((r = ev_loop_add_io(d->loop, health_monitor_fd(d->health), EPOLLIN, on_run_health, d)) < 0)
        return r;
    if (d->stats) {
        run_stats_flush(d, true);
        acceld_stats_set_change_hook(d->stats, on_run_stats_change, d);
        run_stats_schedule(d);
    }
    return 0;
}

int acceld_dra_run(const struct acceld_config *cfg, int sig_fd, acceld_dra_reload_fn reload,
                   void *user_data)
{
    struct dra_run d = {.cfg = *cfg, .reload = reload, .reload_data = user_data};
    /* NULL (no memory): DRA mode runs without its SLI file */
    if ((d.stats = malloc(sizeof(*d.stats))))
        acceld_stats_init(d.stats, real_s());
    log_info("acceld DRA mode: driver %s, registry %s, state %s", ACCELD_DRA_DRIVER,
             cfg->dra_registry_dir, cfg->state_dir);
    int r = run_start(&d, sig_fd);
    int code = r == -EINVAL ? EXIT_CONFIG : r < 0 ? 1 : 0;
    if (r == 0) {
        r = ev_loop_run(d.loop);
        if (r < 0) {
            log_error("event loop failed: %s", strerror(-r));
            code = 1;
        }
    }
    if (d.health && d.loop)
        ev_loop_del_io(d.loop, health_monitor_fd(d.health));
    bool nvml_busy;
    d.health = health_monitor_stop(d.health, &nvml_busy);
    if (d.stats_w.timer)
        ev_loop_cancel_timer(d.loop, d.stats_w.timer);
    d.stats_w.timer = 0;
    if (d.stats)
        acceld_stats_set_change_hook(d.stats, NULL, NULL);
    run_stats_flush(&d, true); /* the last counts (a failed start's included) */
    free(d.stats);
    d.dra = acceld_dra_free(d.dra);
    d.loop = ev_loop_free(d.loop);
    d.inv = gpu_inventory_free(d.inv);
    if (!nvml_busy) /* else the health thread still waits in NVML: the exit ends it */
        d.nvml = gpu_nvml_free(d.nvml);
    log_info("stopped");
    return code;
}
