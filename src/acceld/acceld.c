/* acceld.c — the node agent's main program: flags and config file, NVML and
 * the GPU inventory, the providers of the device-plugin modes and the DRA side
 * (dra-acceld.h) for the GPUs in mode dra, the event loop with its signalfd
 * (SIGTERM/SIGINT: clean exit; SIGHUP: reload, both sides), the health
 * monitor's pipe (events routed to the side that owns the GPU) and the
 * recovery timer. Everything but the health thread runs on the loop. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "accel-config.h"
#include "acceld-config.h"
#include "evloop.h"
#include "flush.h"
#include "fs.h"
#include "health.h"
#include "inventory.h"
#include "log.h"
#include "mps-supervisor.h"
#include "nvml.h"
#include "pgpu.h"
#include "dp-service.h"
#include "policy.h"
#include "replicas.h"
#include "sharing-config.h"
#include "acceld-stats.h"
#include "grpc.h"
#include "podresources.pb-c.h"
#include "util.h"
#include "hostcheck.h"
#include "vcuda-lib.h"
#include "vgpu-status.h"
#include "mig-strategy.h"
#include "vfio.h"
#include "vgpu.h"
#ifdef ACCELD_HAVE_KUBE
#include "vgpu-kube.h"
#endif
#ifdef ACCELD_HAVE_DRA
#include "dra-acceld.h"
#endif

#define EXIT_CONFIG 2
#define MAX_OVERRIDES 64
/* How often the recovery timer looks, as a fraction of recoverAfter, bounded. */
#define RECOVERY_TICK_MIN_NS (50ull * 1000000ull)
#define RECOVERY_TICK_MAX_NS (1000ull * 1000000ull)

struct override {
    const char *key;
    const char *value;
};

/* Resources served beside pGPU, vGPU and the shared ones: VFIO models, MIG profiles. */
#define SERVED_MAX_EXTRA 24

struct agent {
    const char *config_path; /* NULL: flags and defaults only */
    struct override overrides[MAX_OVERRIDES];
    size_t n_overrides;
    struct acceld_config cfg;

    struct ev_loop *loop;
    int sig_fd;
    struct gpu_nvml *nvml;
    struct gpu_inventory *inv;
    struct pgpu *pgpu;          /* the GPUs in pgpu mode (may be none) */
    struct vfio_node *vfio;     /* the GPUs bound to vfio-pci in mode vfio (may be none) */
    struct mig_set *mig;        /* MIG devices (migStrategy single or mixed; NULL: none) */
    size_t vfio_served;         /* served[] index of the first VFIO model */
    struct vgpu *vgpu;          /* the GPUs in vgpu mode (may be none) */
    struct fs_flusher *flusher; /* flushes the vGPU journal off the loop (vgpu.h) */
    uint64_t spare_timer;       /* makes spare container directories once Allocates pause */
    uint64_t spare_backoff_ns;  /* while making them fails */
    bool spare_failing;         /* the last try failed (logged once) */
    struct grpc_client *podres; /* the kubelet's pod-resources API (vGPU books) */
    bool podres_busy;           /* a List is in flight */
    bool podres_again;          /* another was asked for meanwhile */
    bool podres_broken;         /* the last List failed: a new connection next time */
    bool podres_failing;        /* said so in the log (once until it answers) */
    uint64_t books_timer;       /* the next settling of the books */
    uint64_t books_due_ns;
    uint64_t books_doubt_ns; /* the last settling an unmatched Allocate asked for */
    bool books_started;      /* the start's settling was asked for */
    bool books_ready;        /* it ran: Allocates are answered */
    /* one per resource served: provider and its endpoint */
    struct served {
        enum {
            SERVED_PGPU,
            SERVED_VGPU_CORES,
            SERVED_VGPU_MEMORY,
            SERVED_SHARED,
            SERVED_VFIO, /* a GPU model in VFIO mode (vfio.h) */
            SERVED_MIG,  /* MIG devices of a migStrategy (mig-strategy.h) */
        } kind;
        struct acceld_provider prov;
        char resource[ACCELD_NAME_MAX];
        struct acceld_plugin *plugin;
    } served[3 + SHARING_MAX_RESOURCES + SERVED_MAX_EXTRA];
    size_t n_served;
    /* NVIDIA's sharing sections of the config file (docs/mps.md) */
    struct sharing_config sharing;
    struct replicas *shared[SHARING_MAX_RESOURCES]; /* time-slicing / MPS, one per resource */
    size_t n_shared;
    struct mps_sup *mps;
    struct mps_ref {
        size_t served; /* the endpoint of the set's replicas */
        size_t sh, gpu;
        unsigned k;
    } * mps_refs; /* per supervisor set */
    size_t n_mps;
    struct health_monitor *health;
    /* every advertised GPU, whatever its mode (the health monitor's index) */
    size_t n_gpus;
    const char **uuids;        /* borrowed from inv */
    struct health_gpu *hstate; /* per GPU */
    int *map;                  /* GPU index -> inventory index */
    struct vgpu_pods pods;     /* the pods of this node (vGPU matching); ops NULL: none */
#ifdef ACCELD_HAVE_KUBE
    struct vgpu_kube *kube; /* the API server's watch cache behind pods */
#endif
    uint64_t recovery_timer;
    uint64_t vgpu_check_timer;              /* the host-side check (vgpu.checkInterval) */
    uint64_t vgpu_check_due_ns;             /* when it fires */
    struct vgpu_status_recent *vgpu_recent; /* its last findings (accelctl vgpu) */
    struct hostcheck_state *vgpu_cstate;    /* its compute half's memory (NULL: off) */
    uint64_t vgpu_thaw_timer;               /* thaws what vgpu.computeAction froze */
    /* the agent's SLIs (acceld-stats.h), written to <stateDir>/acceld-stats.json */
    struct acceld_stats *stats;
    struct acceld_stats_writer stats_w; /* what was written when, and its timer */
    bool stats_warned;                  /* a failed write was logged (once until one succeeds) */
    bool stats_not_ours;                /* another acceld serves the socket: its file, not ours */
    /* the DRA side (gpuModes N=dra, or mode dra with exceptions): its GPUs
     * are in the GPU table (health monitor, SLIs) and in no provider */
    int *dra_pos; /* inventory positions of the DRA GPUs */
    size_t n_dra; /* their number */
    int *dra_of;  /* GPU index -> the DRA side's index, -1 for a device-plugin GPU */
#ifdef ACCELD_HAVE_DRA
    struct acceld_dra *dra;
#endif
    bool config_error; /* start failed on the config (exit 2) */
};

/* defaults → file → flags. On error writes why into err; cfg untouched. */
static int build_config(const struct agent *a, struct acceld_config *ret_cfg, char *err,
                        size_t errlen)
{
    struct acceld_config c;
    acceld_config_defaults(&c);
    if (a->config_path) {
        int r = acceld_config_load_file(&c, a->config_path, err, errlen);
        if (r < 0)
            return r;
    }
    for (size_t i = 0; i < a->n_overrides; i++) {
        char msg[400];
        int r = acceld_config_set(&c, a->overrides[i].key, a->overrides[i].value, msg, sizeof(msg));
        if (r < 0) {
            const char *flag = a->overrides[i].key;
            for (const struct acceld_config_key *k = acceld_config_keys; k->key; k++)
                if (strcmp(k->key, flag) == 0)
                    flag = k->flag;
            snprintf(err, errlen, "flag --%s: %s", flag, msg);
            return r;
        }
    }
    *ret_cfg = c;
    return 0;
}

#ifdef ACCELD_HAVE_DRA
/* DRA mode's SIGHUP: the same defaults → file → flags. */
static int dra_reload_config(void *user_data, struct acceld_config *ret_cfg, char *err,
                             size_t errlen)
{
    return build_config(user_data, ret_cfg, err, errlen);
}
#endif

static void usage(FILE *f)
{
    fprintf(f, "Usage: acceld [--config FILE] [OPTIONS]\n"
               "The accel node agent: serves the node's GPUs to the kubelet as a device plugin.\n\n"
               "  --config FILE                YAML config file (see docs/acceld.md); flags win "
               "over it\n");
    for (const struct acceld_config_key *k = acceld_config_keys; k->key; k++) {
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s%s", k->flag,
                 strcmp(k->key, "noRegister") == 0 ? "" : " VALUE");
        fprintf(f, "  %-28s %s [%s]\n", flag, k->help, k->key);
    }
    fprintf(f,
            "  --print-config               print the effective config as YAML and exit\n"
            "  --version                    print the version and exit\n"
            "  --help                       this text\n\n"
            "Signals: SIGTERM/SIGINT exit cleanly (sockets removed); SIGHUP reloads the config.\n"
            "Exit status: 0 clean exit, 1 runtime failure, 2 bad flags or config.\n");
}

/* The effective config as a config file (a section's keys stand together in the table). */
static void print_config(const struct acceld_config *c)
{
    const char *section = "";
    for (const struct acceld_config_key *k = acceld_config_keys; k->key; k++) {
        char v[1024];
        acceld_config_format(c, k->key, v, sizeof(v));
        const char *dot = strchr(k->key, '.');
        if (dot) {
            size_t l = (size_t)(dot - k->key);
            if (strncmp(section, k->key, l) != 0 || section[l] != '.') {
                printf("%.*s:\n", (int)l, k->key);
                section = k->key;
            }
            if (strcmp(k->key, "health.ignoredXids") == 0)
                printf("  %s: [%s]\n", dot + 1, v);
            else
                printf("  %s: \"%s\"\n", dot + 1, v);
        } else {
            printf("%s: \"%s\"\n", k->key, v);
        }
    }
}

/* Parses argv into a->config_path and a->overrides. Returns 0, 1 (exit 0
 * now: --help/--version/--print-config handled by the caller via *what), or
 * -EINVAL. */
static int parse_args(struct agent *a, int argc, char **argv, int *ret_what)
{
    enum { OPT_CONFIG = 1000, OPT_PRINT, OPT_VERSION, OPT_HELP, OPT_KEY_BASE = 2000 };
    struct option opts[MAX_OVERRIDES];
    size_t n = 0;
    opts[n++] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
    opts[n++] = (struct option){"print-config", no_argument, NULL, OPT_PRINT};
    opts[n++] = (struct option){"version", no_argument, NULL, OPT_VERSION};
    opts[n++] = (struct option){"help", no_argument, NULL, OPT_HELP};
    for (size_t i = 0; acceld_config_keys[i].key && n < MAX_OVERRIDES - 1; i++) {
        bool flag_only = strcmp(acceld_config_keys[i].key, "noRegister") == 0;
        opts[n++] =
            (struct option){acceld_config_keys[i].flag, flag_only ? no_argument : required_argument,
                            NULL, OPT_KEY_BASE + (int)i};
    }
    opts[n] = (struct option){NULL, 0, NULL, 0};
    *ret_what = 0;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == OPT_CONFIG)
            a->config_path = optarg;
        else if (c == OPT_PRINT || c == OPT_VERSION || c == OPT_HELP)
            *ret_what = c == OPT_PRINT ? 1 : c == OPT_VERSION ? 2 : 3;
        else if (c >= OPT_KEY_BASE) {
            const struct acceld_config_key *k = &acceld_config_keys[c - OPT_KEY_BASE];
            if (a->n_overrides == MAX_OVERRIDES) {
                fprintf(stderr, "acceld: too many flags\n");
                return -EINVAL;
            }
            a->overrides[a->n_overrides++] =
                (struct override){k->key, strcmp(k->key, "noRegister") == 0 ? "true" : optarg};
        } else {
            fprintf(stderr, "acceld: %s: %s\n", argv[optind - 1],
                    c == ':' ? "needs a value" : "unknown option");
            usage(stderr);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "acceld: unexpected argument \"%s\"\n", argv[optind]);
        return -EINVAL;
    }
    return 0;
}

/* ------------------------------------------------------------ SLI file */

static double real_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The MPS supervisor keeps its own restart counts and daemon states: copied into the SLIs
 * per GPU (at each write and on each MPS health change). */
static void stats_pull_mps(struct agent *a)
{
    for (size_t g = 0; a->stats && g < a->n_gpus && a->uuids; g++) {
        uint64_t n = 0;
        enum acceld_stats_mps_state st = ACCELD_STATS_MPS_NONE;
        for (size_t k = 0; k < a->n_mps && a->mps; k++) {
            const struct mps_ref *m = &a->mps_refs[k];
            if (strcmp(replicas_gpu_uuid(a->shared[m->sh], m->gpu), a->uuids[g]) != 0)
                continue;
            n += mps_sup_restarts(a->mps, k);
            /* the worst of the GPU's sets: down, else fault, else running */
            enum acceld_stats_mps_state k_st =
                mps_sup_daemon_pid(a->mps, k) <= 0 ? ACCELD_STATS_MPS_DOWN
                : mps_sup_healthy(a->mps, k)       ? ACCELD_STATS_MPS_RUNNING
                                                   : ACCELD_STATS_MPS_FAULT;
            if (st == ACCELD_STATS_MPS_NONE || k_st == ACCELD_STATS_MPS_DOWN ||
                (k_st == ACCELD_STATS_MPS_FAULT && st == ACCELD_STATS_MPS_RUNNING))
                st = k_st;
        }
#ifdef ACCELD_HAVE_DRA
        if (a->dra) /* the DRA side's MPS claims' daemons */
            n += acceld_dra_mps_restarts(a->dra, a->uuids[g]);
#endif
        acceld_stats_set_mps_restarts(a->stats, a->uuids[g], n);
        acceld_stats_set_mps_state(a->stats, a->uuids[g], st);
    }
}

/* Writes the SLI file when something changed (at most once a second), touches it at the
 * heartbeat, or writes it now (force). */
static void stats_flush(struct agent *a, bool force)
{
    if (!a->stats || a->stats_not_ours)
        return;
    stats_pull_mps(a);
    int r = acceld_stats_flush(&a->stats_w, a->stats, a->cfg.state_dir, mono_ns(), real_s(), force);
    if (r < 0) {
        if (!a->stats_warned)
            log_warn("cannot write %s/%s (the agent's SLIs for accel-exporter): %s",
                     a->cfg.state_dir, ACCELD_STATS_FILE, strerror(-r));
        a->stats_warned = true;
        return;
    }
    a->stats_warned = false;
}

static void on_stats_tick(struct ev_loop *loop, void *user_data);

/* The one write timer, armed for the next flush that is due. */
static void stats_schedule(struct agent *a)
{
    if (a->stats && !a->stats_not_ours && a->loop)
        acceld_stats_schedule(&a->stats_w, a->stats, a->loop, on_stats_tick, a);
}

static void on_stats_tick(struct ev_loop *loop, void *user_data)
{
    struct agent *a = user_data;
    a->stats_w.timer = 0;
    stats_flush(a, false);
    stats_schedule(a);
}

static void on_stats_change(void *ctx)
{
    stats_schedule(ctx);
}

/* ------------------------------------------------------------ health */

static void recovery_arm(struct agent *a);

/* Tells every provider (each ignores GPUs not its own) and sends the new
 * list on the endpoints whose list changed. */
static void set_health(struct agent *a, size_t i, const char *why)
{
    bool any = false;
    if (a->stats) {
        acceld_stats_health(a->stats, a->uuids[i], a->hstate[i].healthy);
        acceld_stats_set_health_state(a->stats, a->uuids[i], a->hstate[i].healthy,
                                      a->hstate[i].reason);
    }
    for (size_t k = 0; k < a->n_served; k++) {
        struct served *s = &a->served[k];
        if (s->prov.ops->set_gpu_health(s->prov.self, a->uuids[i], a->hstate[i].healthy)) {
            acceld_plugin_devices_changed(s->plugin);
            any = true;
        }
    }
    if (!any)
        return;
    if (a->hstate[i].healthy)
        log_info("GPU %s is Healthy again (%s)", a->uuids[i], why);
    else
        log_warn("GPU %s is Unhealthy: %s", a->uuids[i], a->hstate[i].reason);
}

static void on_health(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    struct agent *a = user_data;
    struct health_event ev;
    bool changed = false;
    int r;
    while ((r = health_monitor_read(a->health, &ev)) == 1) {
        uint64_t now = mono_ns();
        size_t first = ev.gpu < 0 ? 0 : (size_t)ev.gpu;
        size_t last = ev.gpu < 0 ? a->n_gpus : first + 1;
        for (size_t i = first; i < last && i < a->n_gpus; i++) {
            bool ignored = false, was_lost = a->hstate[i].lost;
            if (a->dra_of && a->dra_of[i] >= 0) {
                /* a DRA GPU: its health is the DRA side's (slice taint, health stream) */
#ifdef ACCELD_HAVE_DRA
                if (a->dra)
                    acceld_dra_health_event(a->dra, a->dra_of[i], &ev);
#endif
                continue;
            }
            if (health_apply(&a->hstate[i], &ev, &a->cfg, now, &ignored)) {
                set_health(a, i, "");
                changed = true;
            } else if (ignored) {
                log_info("GPU %s: XID %llu ignored (health.ignoredXids)", a->uuids[i],
                         (unsigned long long)ev.data);
            } else if (ev.kind == HEALTH_EV_BACK && was_lost) {
                log_info("GPU %s answers NVML again", a->uuids[i]);
            }
        }
    }
    if (r < 0) {
        log_error("health monitor pipe failed: %s; health changes are no longer seen",
                  strerror(-r));
        ev_loop_del_io(loop, fd);
    }
    if (changed)
        recovery_arm(a);
}

static void on_recovery_tick(struct ev_loop *loop, void *user_data)
{
    struct agent *a = user_data;
    a->recovery_timer = 0;
    uint64_t now = mono_ns();
    char why[64];
    for (size_t i = 0; i < a->n_gpus; i++) {
        if (health_recovered(&a->hstate[i], a->cfg.recover_after_ns, now)) {
            acceld_config_format(&a->cfg, "health.recoverAfter", why, sizeof(why));
            char msg[96];
            snprintf(msg, sizeof(msg), "no fatal event for %s", why);
            set_health(a, i, msg);
        }
    }
    recovery_arm(a);
}

/* Keeps a timer running while recovery is on and some GPU is unhealthy. */
static void recovery_arm(struct agent *a)
{
    if (a->recovery_timer || a->cfg.recover_after_ns == 0)
        return;
    bool any = false;
    for (size_t i = 0; i < a->n_gpus; i++)
        any |= !a->hstate[i].healthy;
    if (!any)
        return;
    uint64_t tick = a->cfg.recover_after_ns / 10;
    tick = tick < RECOVERY_TICK_MIN_NS ? RECOVERY_TICK_MIN_NS : tick;
    tick = tick > RECOVERY_TICK_MAX_NS ? RECOVERY_TICK_MAX_NS : tick;
    ev_loop_add_timer(a->loop, tick, on_recovery_tick, a, &a->recovery_timer);
}

/* ------------------------------------------------------------ vGPU host-side check */

static void vgpu_check_arm(struct agent *a);

/* Spares (vgpu.h) are made back in small batches once no Allocate has taken
 * one for a while, so that making them never delays an Allocate of a burst. A
 * failure (read-only or full state dir, the inode reserve reached) backs off
 * from 1 s, doubling up to a minute, with one log line when it starts failing
 * and one when it works again. */
#define SPARE_QUIET_NS 300000000ull
#define SPARE_BATCH 4
#define SPARE_NEXT_NS 10000000ull
#define SPARE_BACKOFF_MIN_NS 1000000000ull
#define SPARE_BACKOFF_MAX_NS 60000000000ull

static void on_spare_fill(struct ev_loop *loop, void *user_data)
{
    struct agent *a = user_data;
    a->spare_timer = 0;
    int err = 0;
    size_t missing = vgpu_spare_fill(a->vgpu, SPARE_BATCH, &err);
    if (err < 0) {
        if (!a->spare_failing)
            log_warn("vGPU: cannot make spare container directories under %s/vgpu/.spare: %s "
                     "(%zu of %d missing; Allocate makes the files itself meanwhile; retrying "
                     "with backoff)",
                     a->cfg.state_dir,
                     err == -ENOSPC ? "the filesystem is down to the inodes or space kept for "
                                      "the checkpoint and the containers' configs"
                                    : strerror(-err),
                     missing, VGPU_SPARES);
        a->spare_failing = true;
        a->spare_backoff_ns = a->spare_backoff_ns ? a->spare_backoff_ns * 2 : SPARE_BACKOFF_MIN_NS;
        if (a->spare_backoff_ns > SPARE_BACKOFF_MAX_NS)
            a->spare_backoff_ns = SPARE_BACKOFF_MAX_NS;
        ev_loop_add_timer(loop, a->spare_backoff_ns, on_spare_fill, a, &a->spare_timer);
        return;
    }
    if (a->spare_failing)
        log_info("vGPU: spare container directories are made again (%zu missing)", missing);
    a->spare_failing = false;
    a->spare_backoff_ns = 0;
    if (missing > 0)
        ev_loop_add_timer(loop, SPARE_NEXT_NS, on_spare_fill, a, &a->spare_timer);
}

static void on_spare_taken(void *ctx)
{
    struct agent *a = ctx;
    if (a->spare_failing)
        return; /* the backoff's timer stays */
    ev_loop_cancel_timer(a->loop, a->spare_timer);
    a->spare_timer = 0;
    ev_loop_add_timer(a->loop, SPARE_QUIET_NS, on_spare_fill, a, &a->spare_timer);
}

static uint64_t mono_ms(void)
{
    return mono_ns() / 1000000;
}

/* Freezes and thaws the duty-cycled containers (vgpu.computeAction freeze)
 * whose phase is over, and arms itself for the next toggle. */
static void on_vgpu_thaw(struct ev_loop *loop, void *user_data)
{
    struct agent *a = user_data;
    ev_loop_cancel_timer(loop, a->vgpu_thaw_timer);
    a->vgpu_thaw_timer = 0;
    uint64_t now = mono_ms(), next = hostcheck_cycle(a->vgpu_cstate, now);
    if (next != UINT64_MAX)
        ev_loop_add_timer(loop, (next > now ? next - now : 0) * 1000000, on_vgpu_thaw, a,
                          &a->vgpu_thaw_timer);
}

static void vgpu_check_report(struct agent *a, const struct hostcheck_target *t,
                              const struct hostcheck_finding *f)
{
    const struct hostcheck_target *g = &t[f->target];
    char msg[1024];
    if (a->stats)
        acceld_stats_quota(a->stats, (enum acceld_stats_quota_kind)hostcheck_stats_family(f->kind),
                           f->killed   ? ACCELD_STATS_ACTION_KILL
                           : f->frozen ? ACCELD_STATS_ACTION_FREEZE
                                       : ACCELD_STATS_ACTION_NONE);
    vgpu_status_describe(f, t, msg, sizeof(msg));
    if (f->kind == HOSTCHECK_OVER_QUOTA || f->kind == HOSTCHECK_FOREIGN_GPU)
        log_error("vGPU check: %s/%s %s", g->ns, g->pod, msg);
    else
        log_warn("vGPU check: %s/%s %s", g->ns, g->pod, msg);
#ifdef ACCELD_HAVE_KUBE
    /* a Warning Event on the pod, posted on the loop (never waited for) */
    static const char *const reason[] = {
        [HOSTCHECK_OVER_QUOTA] = VGPU_EVENT_OVER_QUOTA,
        [HOSTCHECK_UNDER_REPORT] = VGPU_EVENT_UNDER_REPORT,
        [HOSTCHECK_OVER_SHARE] = VGPU_EVENT_OVER_SHARE,
        [HOSTCHECK_FOREIGN_GPU] = VGPU_EVENT_FOREIGN_GPU,
        [HOSTCHECK_REGION_BAD] = VGPU_EVENT_REGION_BAD,
    };
    if (a->kube)
        vgpu_kube_event(a->kube, g->ns, g->pod, g->pod_uid, g->container, reason[f->kind], msg);
#endif
}

/* One pass of the host-side check over every complete assignment (whole GPUs only tell
 * which GPUs the pod was given); the findings are logged and the status file (accelctl
 * vgpu) rewritten. */
static void vgpu_check_once(struct agent *a)
{
    size_t n = vgpu_assignment_count(a->vgpu), cap = n ? n : 1;
    struct hostcheck_target *t = calloc(cap, sizeof(*t));
    struct hostcheck_usage *u = calloc(cap, sizeof(*u));
    struct hostcheck_finding f[32];
    size_t k = 0, nf = 0;
    for (size_t i = 0; t && u && i < n; i++) {
        struct vgpu_assignment_info as;
        if (vgpu_assignment_get(a->vgpu, i, &as) < 0 || !as.complete || !as.gpu_uuid[0])
            continue;
        const char *cid = NULL;
#ifdef ACCELD_HAVE_KUBE
        if (a->kube) /* the container's runtime id: findings per container */
            cid = vgpu_kube_container_id(a->kube, as.pod_uid, as.container);
#endif
        t[k++] = (struct hostcheck_target){
            .pod_uid = as.pod_uid,
            .ns = as.ns,
            .pod = as.pod,
            .container = as.container,
            .gpu_uuid = as.gpu_uuid,
            .memory_limit = as.memory_bytes,
            .region_dir = as.whole ? NULL : as.region,
            .cores = (unsigned)as.cores,
            .container_id = cid,
            .whole = as.whole,
        };
    }
    struct hostcheck_options o = {
        .proc_root = a->cfg.proc_root,
        .action = a->cfg.vgpu_over_quota_kill ? HOSTCHECK_ACTION_KILL : HOSTCHECK_ACTION_NONE,
        .usage = u,
        .state = a->vgpu_cstate,
        .compute_action =
            a->cfg.vgpu_compute_freeze ? HOSTCHECK_COMPUTE_FREEZE : HOSTCHECK_COMPUTE_NONE,
        .cgroup_root = a->cfg.vgpu_cgroup_root,
        .freeze_ms = a->cfg.vgpu_freeze_period_ns / 1000000,
        .now_ms = mono_ms(),
        .all_gpus = true,
    };
    int r = (t && u) ? hostcheck_run(a->nvml, t, k, &o, f, ARRAY_SIZE(f), &nf) : -ENOMEM;
    if (r < 0)
        log_warn("vGPU check: cannot read every GPU's processes: %s", strerror(-r));
    nf = nf < ARRAY_SIZE(f) ? nf : ARRAY_SIZE(f);
    for (size_t i = 0; i < nf; i++)
        vgpu_check_report(a, t, &f[i]);
    struct vgpu_status_pass pass = {(int64_t)time(NULL),
                                    t,
                                    u,
                                    t && u ? k : 0,
                                    f,
                                    nf,
                                    hostcheck_action_name(o.action),
                                    a->cfg.vgpu_check_interval_ns / 1000000,
                                    a->vgpu_recent};
    r = vgpu_status_write(a->vgpu, a->cfg.state_dir, &pass);
    if (r < 0)
        log_warn("vGPU: cannot write the status file for accelctl: %s", strerror(-r));
    free(t);
    free(u);
    /* a pass may have started, retimed or ended cycles */
    if (a->vgpu_cstate)
        on_vgpu_thaw(a->loop, a);
}

static void on_vgpu_check(struct ev_loop *loop, void *user_data)
{
    struct agent *a = user_data;
    (void)loop;
    a->vgpu_check_timer = 0;
    vgpu_check_once(a);
    vgpu_check_arm(a);
}

/* Runs the check every vgpu.checkInterval while the books hold shares (an idle node does
 * nothing: the pass after the last share went wrote the status file without it). */
static void vgpu_check_arm(struct agent *a)
{
    if (a->vgpu_check_timer || !a->vgpu || a->cfg.vgpu_check_interval_ns == 0 ||
        vgpu_assignment_count(a->vgpu) == 0)
        return;
    if (ev_loop_add_timer(a->loop, a->cfg.vgpu_check_interval_ns, on_vgpu_check, a,
                          &a->vgpu_check_timer) == 0)
        a->vgpu_check_due_ns = mono_ns() + a->cfg.vgpu_check_interval_ns;
}

/* The books changed: a pass (and the status file it writes) within a second, so accelctl
 * vgpu and accel-exporter show them, then the usual interval. */
#define VGPU_STATUS_DELAY_NS 1000000000ull

static void vgpu_check_soon(struct agent *a)
{
    uint64_t due = mono_ns() + VGPU_STATUS_DELAY_NS;
    if (!a->vgpu || !a->loop || (a->vgpu_check_timer && a->vgpu_check_due_ns <= due))
        return;
    ev_loop_cancel_timer(a->loop, a->vgpu_check_timer);
    a->vgpu_check_timer = 0;
    if (ev_loop_add_timer(a->loop, VGPU_STATUS_DELAY_NS, on_vgpu_check, a, &a->vgpu_check_timer) ==
        0)
        a->vgpu_check_due_ns = due;
}

/* ------------------------------------------------------------ SIGHUP */

static struct pgpu_options pgpu_opts(const struct acceld_config *c)
{
    return (struct pgpu_options){.dev_root = c->dev_root,
                                 .strategy = c->strategy,
                                 .cdi_vendor = c->cdi_vendor,
                                 .cdi_class = c->cdi_class};
}

static void reload(struct agent *a)
{
    struct acceld_config n;
    char err[1024];
    if (build_config(a, &n, err, sizeof(err)) < 0) {
        log_error("config reload refused, keeping the running config: %s", err);
        return;
    }
    if (n.nvidia_sharing || a->cfg.nvidia_sharing)
        log_info("config reload: the sharing sections (version, sharing) are read at start only: "
                 "restart acceld to change the replicas");
    size_t changes = 0;
    for (const struct acceld_config_key *k = acceld_config_keys; k->key; k++) {
        if (!acceld_config_key_differs(&a->cfg, &n, k->key))
            continue;
        char ov[1024], nv[1024];
        acceld_config_format(&a->cfg, k->key, ov, sizeof(ov));
        acceld_config_format(&n, k->key, nv, sizeof(nv));
        static const char *const at_start[] = {
            "nvmlLibrary", "sysfsRoot",       "stateDir",           "mode",
            "gpuModes",    "nodeName",        "kubeconfig",         "vcudaLibrary",
            "procRoot",    "vgpu.policy",     "podResourcesSocket", "vgpu.memoryUnit",
            "mpsControl",  "migStrategy",     "vfio.bind",          "vfio.resourceNames",
            "dra.mig",     "mpsProbeInterval"};
        bool restart = false;
        for (size_t i = 0; i < ARRAY_SIZE(at_start); i++)
            restart |= strcmp(k->key, at_start[i]) == 0;
        log_info("config reload: %s: \"%s\" -> \"%s\"%s", k->key, ov, nv,
                 restart ? " (takes effect at the next start)" : "");
        changes++;
    }
    if (!changes) {
        log_info("config reload: nothing changed");
        return;
    }
    struct pgpu_options po = pgpu_opts(&n);
    if (a->pgpu && pgpu_set_options(a->pgpu, &po) < 0) {
        log_error("config reload refused: cannot apply device options");
        return;
    }
    if (a->mig && mig_set_reconfigure(a->mig, &n) < 0) {
        log_error("config reload refused: cannot apply device options to the MIG devices");
        return;
    }
    if (a->pgpu && n.strategy == ACCELD_STRATEGY_CDI) {
        int r = pgpu_write_cdi(a->pgpu, n.cdi_dir);
        if (r < 0)
            log_error("cannot write the CDI spec under %s: %s", n.cdi_dir, strerror(-r));
    }
    if (a->mig && n.strategy == ACCELD_STRATEGY_CDI) {
        int r = mig_set_write_cdi(a->mig, n.cdi_dir);
        if (r < 0)
            log_error("cannot write the MIG CDI specs under %s: %s", n.cdi_dir, strerror(-r));
    }
    for (size_t k = 0; k < a->n_served; k++) {
        struct served *s = &a->served[k];
        /* the pGPU resource follows resourceName; a mode's own names follow its keys */
        /* a shared resource keeps its name (the sharing config is read at start) */
        /* VFIO models and MIG profiles keep theirs too (named at start) */
        const char *name =
            s->kind == SERVED_SHARED || s->kind == SERVED_VFIO || s->kind == SERVED_MIG
                ? s->resource
            : s->kind == SERVED_PGPU       ? n.resource_name
            : s->kind == SERVED_VGPU_CORES ? n.vgpu_core_resource
                                           : n.vgpu_memory_resource;
        if (name != s->resource)
            snprintf(s->resource, sizeof(s->resource), "%s", name);
        if (acceld_plugin_reconfigure(s->plugin, &n, s->resource) < 0)
            log_error("config reload: cannot serve at the new place, still serving %s",
                      acceld_plugin_socket_path(s->plugin));
    }
    log_set_level(n.log_level);
    a->cfg = n;
#ifdef ACCELD_HAVE_DRA
    if (a->dra)
        acceld_dra_reload(a->dra, &n, true);
#endif
    a->recovery_timer = (ev_loop_cancel_timer(a->loop, a->recovery_timer), 0);
    recovery_arm(a);
    a->vgpu_check_timer = (ev_loop_cancel_timer(a->loop, a->vgpu_check_timer), 0);
    vgpu_check_arm(a);
}

static void on_signal(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    struct agent *a = user_data;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGHUP) {
            log_info("SIGHUP: reloading %s", a->config_path ? a->config_path : "(flags only)");
            reload(a);
        } else {
            log_info("%s: shutting down", strsignal((int)si.ssi_signo));
            ev_loop_quit(loop);
        }
    }
}

/* ------------------------------------------------------------ start-up */

static enum policy_pcie pcie_of(enum gpu_link_kind k)
{
    switch (k) {
    case GPU_LINK_SELF:
    case GPU_LINK_BOARD:
    case GPU_LINK_SINGLE:
    case GPU_LINK_MULTIPLE:
        return POLICY_PCIE_SWITCH;
    case GPU_LINK_HOSTBRIDGE:
        return POLICY_PCIE_HOSTBRIDGE;
    case GPU_LINK_NODE:
        return POLICY_PCIE_NUMA;
    default:
        return POLICY_PCIE_FAR;
    }
}

/* A GPU can be advertised only with a UUID (its device ID), once. */
static bool usable(const struct gpu_inventory *inv, int i)
{
    const struct gpu_device *d = &inv->devices[i];
    if (!d->uuid[0] || strlen(d->uuid) >= PGPU_ID_MAX)
        return false;
    for (int j = 0; j < i; j++)
        if (strcmp(inv->devices[j].uuid, d->uuid) == 0)
            return false;
    return true;
}

/* Builds the GPU table from the GPUs that can be advertised (a->map[k] is
 * the inventory index of GPU k; the health monitor uses GPU indices), then
 * each mode's provider from the GPUs in that mode. */
static int make_providers(struct agent *a)
{
    const struct gpu_inventory *inv = a->inv;
    size_t total = (size_t)inv->count, n = 0, np = 0;
    struct pgpu_gpu_desc *g = calloc(total ? total : 1, sizeof(*g));
    struct mig_gpu *migs = calloc(total ? total : 1, sizeof(*migs));
    size_t n_mig = 0;
    struct vgpu_gpu_desc *vg = calloc(total ? total : 1, sizeof(*vg));
    size_t nv = 0;
    int *pmap = calloc(total ? total : 1, sizeof(int)); /* pgpu index -> GPU index */
    a->map = calloc(total ? total : 1, sizeof(int));
    a->uuids = calloc(total ? total : 1, sizeof(char *));
    a->hstate = calloc(total ? total : 1, sizeof(*a->hstate));
    a->dra_pos = calloc(total ? total : 1, sizeof(int));
    a->dra_of = calloc(total ? total : 1, sizeof(int));
    uint8_t *pcie = NULL;
    int *nvl = NULL;
    int r = -ENOMEM;
    struct sharing_gpu *sg = calloc(total ? total : 1, sizeof(*sg));
    struct replicas_gpu_desc *sd = calloc(total ? total : 1, sizeof(*sd));
    size_t *sgroup = calloc(total ? total : 1, sizeof(size_t)), ns = 0;
    char names[SHARING_MAX_RESOURCES][ACCELD_NAME_MAX];
    size_t n_names = 0;
    if (!g || !vg || !pmap || !a->map || !a->uuids || !a->hstate || !sg || !sd || !sgroup ||
        !a->dra_pos || !a->dra_of || !migs)
        goto out;
    for (int i = 0; i < inv->count; i++)
        sg[i] = (struct sharing_gpu){(unsigned)inv->devices[i].index, inv->devices[i].uuid,
                                     inv->devices[i].cc_major, inv->devices[i].cc_minor};
    for (int i = 0; i < inv->count; i++) {
        const struct gpu_device *d = &inv->devices[i];
        if (!usable(inv, i)) {
            if (a->stats)
                acceld_stats_device_init(a->stats, false);
            log_warn("GPU %d (PCI %s) is not advertised: no usable UUID (%s)", i,
                     d->pci_bus_id[0] ? d->pci_bus_id : "unknown",
                     d->error[0] ? d->error : "duplicate or too long");
            continue;
        }
        enum acceld_mode mode = acceld_config_gpu_mode_at(&a->cfg, i, d->uuid, d->pci_bus_id);
        if (mode == ACCELD_MODE_VFIO) {
            /* NVML sees it: the nvidia driver has it, so no VM can */
            log_warn("GPU %d (%s, PCI %s) is in mode vfio but bound to the nvidia driver: not "
                     "served (vfio.bind binds it to vfio-pci at start, or bind it yourself)",
                     i, d->uuid, d->pci_bus_id);
            continue;
        }
        a->map[n] = i;
        a->uuids[n] = d->uuid;
        a->hstate[n].healthy = d->healthy;
        if (a->stats) {
            acceld_stats_add_gpu(a->stats, (unsigned)d->index, d->uuid);
            acceld_stats_device_init(a->stats, d->healthy);
        }
        if (!d->healthy) {
            /* unhealthy at start: treated like lost until NVML answers */
            a->hstate[n].lost = true;
            a->hstate[n].last_fatal_ns = mono_ns();
            snprintf(a->hstate[n].reason, sizeof(a->hstate[n].reason), "%s", d->error);
            log_warn("GPU %s is Unhealthy at start: %s", d->uuid, d->error);
            if (a->stats)
                acceld_stats_set_health_state(a->stats, d->uuid, false, a->hstate[n].reason);
        }
        int minor = d->minor >= 0 ? d->minor : d->index;
        bool mig = a->cfg.mig_strategy != ACCELD_MIG_NONE && d->mig_enabled == 1;
        a->dra_of[n] = -1;
        if (mode == ACCELD_MODE_DRA) {
            /* the DRA side's alone: never in a provider, whatever the sharing
             * sections select (a GPU is offered by one side only) */
            const struct sharing_resource *res;
            unsigned replicas;
            char err[512];
            if (a->sharing.mode != SHARING_NONE &&
                sharing_config_resolve(&a->sharing, sg, total, (size_t)i, &res, &replicas, err,
                                       sizeof(err)) == 0)
                log_warn("GPU %d (%s) is in mode dra (gpuModes): the sharing section's replicas "
                         "do not apply to it; the DRA driver shares it through dra.sharing",
                         i, d->uuid);
            a->dra_pos[a->n_dra++] = i;
            n++;
            continue;
        }
        if (a->sharing.mode != SHARING_NONE) {
            const struct sharing_resource *res;
            unsigned replicas;
            char err[512], name[ACCELD_NAME_MAX];
            int q = sharing_config_resolve(&a->sharing, sg, total, (size_t)i, &res, &replicas, err,
                                           sizeof(err));
            if (q == -EINVAL) {
                log_error("%s", err);
                r = q;
                goto out;
            }
            if (q == 0 && mig) {
                log_error("GPU %d (%s) is in MIG mode and the sharing section selects it: "
                          "time-slicing and MPS do not mix with MIG here (migStrategy %s): not "
                          "served",
                          i, d->uuid, acceld_mig_strategy_name(a->cfg.mig_strategy));
                n++;
                continue;
            }
            if (q == 0) {
                sharing_resource_advertised(&a->sharing, res, name, sizeof(name));
                size_t grp = 0;
                while (grp < n_names && strcmp(names[grp], name) != 0)
                    grp++;
                if (grp == n_names)
                    snprintf(names[n_names++], sizeof(names[0]), "%s", name);
                sgroup[ns] = grp;
                sd[ns++] = (struct replicas_gpu_desc){d->uuid,    minor,    d->numa_node,
                                                      d->healthy, replicas, d->memory_total_bytes};
                n++;
                continue;
            }
        }
        if (mode == ACCELD_MODE_VGPU && mig) {
            log_error("GPU %d (%s) is in MIG mode and in mode vgpu: vGPU does not mix with MIG "
                      "(migStrategy %s): not served",
                      i, d->uuid, acceld_mig_strategy_name(a->cfg.mig_strategy));
            n++;
            continue;
        }
        if (mode == ACCELD_MODE_VGPU) {
            vg[nv++] = (struct vgpu_gpu_desc){d->uuid, minor, d->numa_node, d->memory_total_bytes,
                                              d->healthy};
            n++;
            continue;
        }
        nvmlDevice_t h;
        if (mig && a->nvml->nvmlDeviceGetHandleByIndex_v2((unsigned)d->index, &h) == NVML_SUCCESS) {
            /* its MIG devices, not the GPU, are served (mig-strategy.h) */
            migs[n_mig++] = (struct mig_gpu){d->uuid, h, minor, d->numa_node, d->healthy};
            n++;
            continue;
        }
        pmap[np] = (int)n;
        g[np++] = (struct pgpu_gpu_desc){
            .uuid = d->uuid, .minor = minor, .numa_node = d->numa_node, .healthy = d->healthy};
        n++;
    }
    a->n_gpus = n;
    if (inv->links) {
        pcie = calloc(np ? np * np : 1, 1);
        nvl = calloc(np ? np * np : 1, sizeof(int));
        if (!pcie || !nvl)
            goto out;
        for (size_t k = 0; k < np; k++) {
            for (size_t m = 0; m < np; m++) {
                const struct gpu_link *l =
                    &inv->links[(size_t)a->map[pmap[k]] * total + (size_t)a->map[pmap[m]]];
                pcie[k * np + m] = (uint8_t)pcie_of(l->pcie);
                nvl[k * np + m] = l->nvlinks;
            }
        }
    }
    r = 0;
    for (size_t grp = 0; grp < n_names; grp++) {
        /* one name, one socket: unshared GPUs cannot join a shared resource */
        if (np && strcmp(names[grp], a->cfg.resource_name) == 0) {
            log_error("the sharing config advertises %s, and %zu GPU(s) it does not select would "
                      "be advertised whole under the same name: select every GPU (devices: all), "
                      "rename the shared resource, or set resourceName to another name",
                      names[grp], np);
            r = -EINVAL;
            goto out;
        }
    }
    /* MIG devices by NVIDIA's strategy (its rules refused: a config error, as NVIDIA's) */
    if (a->cfg.mig_strategy != ACCELD_MIG_NONE) {
        char merr[1024];
        if ((r = mig_set_new(a->nvml, &a->cfg, migs, n_mig, np, &a->mig, merr, sizeof(merr))) < 0) {
            log_error("%s", merr);
            a->config_error = r == -EINVAL;
            goto out;
        }
        for (size_t t = 0; t < a->mig->n; t++) {
            struct served *s = &a->served[a->n_served++];
            s->kind = SERVED_MIG;
            s->prov = pgpu_provider(a->mig->tables[t].table);
            snprintf(s->resource, sizeof(s->resource), "%s", a->mig->tables[t].resource);
            log_info("MIG (migStrategy %s): %zu MIG device(s) as %s",
                     acceld_mig_strategy_name(a->cfg.mig_strategy),
                     pgpu_count(a->mig->tables[t].table), s->resource);
        }
    }
    /* the GPUs bound to vfio-pci (NVML does not see them): from sysfs */
    char verr[512];
    if ((r = vfio_node_new(&a->cfg, &a->vfio, verr, sizeof(verr))) < 0) {
        log_error("VFIO: %s", verr);
        goto out;
    }
    a->vfio_served = a->n_served;
    for (size_t m = 0; m < vfio_node_models(a->vfio); m++) {
        struct served *s = &a->served[a->n_served++];
        s->kind = SERVED_VFIO;
        s->prov = pgpu_provider(vfio_node_table(a->vfio, m));
        snprintf(s->resource, sizeof(s->resource), "%s", vfio_node_resource(a->vfio, m));
    }
    /* A node with every GPU in another mode serves no pGPU resource. */
    if (np || (n == 0 && !vfio_node_models(a->vfio) && !(a->mig && a->mig->n))) {
        struct pgpu_options po = pgpu_opts(&a->cfg);
        r = pgpu_new(g, np, pcie, nvl, &po, &a->pgpu);
        if (r == 0) {
            struct served *s = &a->served[a->n_served++];
            s->prov = pgpu_provider(a->pgpu);
            s->kind = SERVED_PGPU;
            snprintf(s->resource, sizeof(s->resource), "%s", a->cfg.resource_name);
        }
    }
    if (r == 0 && nv) {
        char err[1024];
        if (vcuda_lib_check(a->cfg.vcuda_library, err, sizeof(err)) < 0) {
            log_error("%zu GPU(s) in mode vgpu: %s", nv, err);
            a->config_error = true;
            r = -EINVAL;
            goto out;
        }
        struct vgpu_options vo = {a->cfg.state_dir, a->cfg.vcuda_library, a->cfg.dev_root,
                                  a->cfg.vgpu_memory_unit,
                                  a->cfg.vgpu_policy ? VGPU_SPREAD : VGPU_BINPACK};
        /* The pod source (the API server's watch cache) is wired in by kube_start. */
        r = vgpu_new(vg, nv, &vo, a->pods.ops ? &a->pods : NULL, &a->vgpu, err, sizeof(err));
        if (r < 0) {
            log_error("cannot start vGPU mode: %s", err);
            goto out;
        }
        /* NULL (no memory): the status file lists no recent findings */
        a->vgpu_recent = calloc(1, sizeof(*a->vgpu_recent));
        if (hostcheck_state_new(&a->vgpu_cstate) < 0)
            log_warn("vGPU: out of memory: the compute half of the host-side check is off");
        for (int k = 0; k < 2; k++) {
            struct served *s = &a->served[a->n_served++];
            s->kind = k == 0 ? SERVED_VGPU_CORES : SERVED_VGPU_MEMORY;
            s->prov = vgpu_provider(a->vgpu, k == 0 ? VGPU_CORES : VGPU_MEMORY);
            snprintf(s->resource, sizeof(s->resource), "%s",
                     k == 0 ? a->cfg.vgpu_core_resource : a->cfg.vgpu_memory_resource);
        }
        log_info("vGPU mode on %zu GPU(s): %s and %s", nv, a->cfg.vgpu_core_resource,
                 a->cfg.vgpu_memory_resource);
    }
    for (size_t grp = 0; r == 0 && grp < n_names; grp++) {
        struct replicas_gpu_desc *mine = calloc(ns ? ns : 1, sizeof(*mine));
        size_t nm = 0;
        if (!mine) {
            r = -ENOMEM;
            break;
        }
        for (size_t k = 0; k < ns; k++)
            if (sgroup[k] == grp)
                mine[nm++] = sd[k];
        /* one CDI spec per resource, apart from the pGPU one (docs/mps.md, "CDI") */
        char cls[ACCELD_NAME_MAX];
        snprintf(cls, sizeof(cls), grp ? "%.100s-shared%zu" : "%.100s-shared", a->cfg.cdi_class,
                 grp);
        struct replicas_options so = {a->sharing.mode == SHARING_MPS,
                                      a->sharing.fail_requests_greater_than_one,
                                      names[grp],
                                      a->cfg.dev_root,
                                      a->cfg.strategy,
                                      a->cfg.cdi_vendor,
                                      cls};
        r = replicas_new(mine, nm, &so, &a->shared[a->n_shared]);
        free(mine);
        if (r < 0) {
            log_error("cannot build the shared resource %s: %s", names[grp], strerror(-r));
            break;
        }
        struct served *s = &a->served[a->n_served++];
        s->kind = SERVED_SHARED;
        s->prov = replicas_provider(a->shared[a->n_shared++]);
        snprintf(s->resource, sizeof(s->resource), "%s", names[grp]);
        log_info("%s mode on %zu GPU(s): %s",
                 a->sharing.mode == SHARING_MPS ? "MPS" : "time-slicing", nm, names[grp]);
    }
out:
    free(migs);
    free(sg);
    free(sd);
    free(sgroup);
    free(g);
    free(vg);
    free(pmap);
    free(pcie);
    free(nvl);
    return r;
}

/* ------------------------------------------------------------ VFIO */

static void on_vfio_changed(void *ud, size_t model)
{
    struct agent *a = ud;
    struct served *s = &a->served[a->vfio_served + model];
    if (s->plugin)
        acceld_plugin_devices_changed(s->plugin);
}

/* ------------------------------------------------------------ MPS */

static void on_mps_health(struct mps_sup *sup, size_t set, bool healthy, const char *why,
                          void *user_data)
{
    struct agent *a = user_data;
    (void)sup;
    const struct mps_ref *m = &a->mps_refs[set];
    struct replicas *sh = a->shared[m->sh];
    stats_pull_mps(a); /* its state and restarts in the SLIs */
    bool changed = replicas_set_daemon_health(sh, m->gpu, m->k, healthy);
    /* the resource registers once every daemon answered (or failed to) */
    acceld_plugin_ready_changed(a->served[m->served].plugin);
    if (!changed)
        return;
    acceld_plugin_devices_changed(a->served[m->served].plugin);
    if (healthy)
        log_info("MPS: every replica of GPU %s is Healthy again", replicas_gpu_uuid(sh, m->gpu));
    else
        log_warn("MPS: every replica of GPU %s is Unhealthy: its daemon for %u-replica requests "
                 "is not serving (%s)",
                 replicas_gpu_uuid(sh, m->gpu), m->k, why);
}

/* One daemon per (MPS GPU, request size k) with defaults k/n (docs/mps.md). */
static int mps_start(struct agent *a)
{
    if (a->sharing.mode != SHARING_MPS)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < a->n_shared; i++)
        for (size_t g = 0; g < replicas_gpu_count(a->shared[i]); g++)
            n += replicas_max_request(a->shared[i], g);
    if (n == 0)
        return 0;
    struct mps_sup_set_cfg *sets = calloc(n, sizeof(*sets));
    char(*names)[48] = calloc(n, sizeof(*names));
    a->mps_refs = calloc(n, sizeof(*a->mps_refs));
    int r = -ENOMEM;
    if (!sets || !names || !a->mps_refs)
        goto out;
    size_t k = 0, served = 0;
    for (size_t i = 0; i < a->n_shared; i++) {
        struct replicas *sh = a->shared[i];
        while (a->served[served].prov.self != sh)
            served++;
        for (size_t g = 0; g < replicas_gpu_count(sh); g++) {
            const char *uuid = replicas_gpu_uuid(sh, g);
            int inv = -1;
            for (int d = 0; d < a->inv->count && inv < 0; d++)
                if (strcmp(a->inv->devices[d].uuid, uuid) == 0)
                    inv = d;
            unsigned replicas = replicas_gpu_replicas(sh, g);
            for (unsigned req = 1; req <= replicas_max_request(sh, g); req++, k++) {
                unsigned pct;
                uint64_t mem;
                sharing_mps_caps(req, replicas, a->inv->devices[inv].memory_total_bytes, &pct,
                                 &mem);
                snprintf(names[k], sizeof(names[k]), "gpu%d-k%u", a->inv->devices[inv].index, req);
                sets[k] = (struct mps_sup_set_cfg){names[k], uuid, 1, pct, mem};
                a->mps_refs[k] = (struct mps_ref){served, i, g, req};
            }
        }
    }
    char run_dir[ACCELD_PATH_MAX + 8];
    snprintf(run_dir, sizeof(run_dir), "%s/mps", a->cfg.state_dir);
    /* A daemon that exits is seen at once (its pidfd); the probe is for one that hangs or
     * loses its defaults, and each costs a front end process: at mpsProbeInterval's 60 s a
     * set, an idle node with 16 sets runs one every 4 s (docs/benchmarks.md, "Idle"). */
    struct mps_sup_opts o = {.control_path = a->cfg.mps_control[0] ? a->cfg.mps_control : NULL,
                             .run_dir = run_dir,
                             .probe_interval_ns = a->cfg.mps_probe_interval_ns,
                             .health_cb = on_mps_health,
                             .user_data = a};
    r = mps_sup_new(a->loop, &o, sets, n, &a->mps);
    if (r < 0) {
        log_error("MPS: cannot set up the daemons under %s: %s", run_dir, strerror(-r));
        goto out;
    }
    a->n_mps = n;
    for (size_t s = 0; s < n; s++) {
        const struct mps_ref *m = &a->mps_refs[s];
        replicas_set_mps_dirs(a->shared[m->sh], m->gpu, m->k, mps_sup_pipe_dir(a->mps, s),
                              mps_sup_shm_dir(a->mps, s));
    }
    r = mps_sup_start(a->mps);
    if (r < 0)
        log_error("MPS: cannot start the daemons: %s", strerror(-r));
    else
        log_info("MPS: %zu control daemon(s) starting (%s); replicas are Unhealthy until their "
                 "daemon answers with its defaults",
                 n, a->cfg.mps_control[0] ? a->cfg.mps_control : "nvidia-cuda-mps-control on PATH");
out:
    free(sets);
    free(names);
    return r;
}

/* ------------------------------------------------------------ vGPU books */

/* The books (vgpu.h: the shares handed out) follow the kubelet: the pod-resources List says
 * which container holds which IDs (vgpu_reconcile). It runs at start (once the first LIST of
 * the pods is in), at once when the watch says a pod with a share is gone or terminal, when
 * an Allocate finds no pod, and every vgpu.reconcileInterval while the books hold shares. */
#define PODRES_TIMEOUT_NS (10ull * 1000000000ull)
#define PODRES_RETRY_NS (1000000000ull)

static void books_list(struct agent *a);

static void on_books_timer(struct ev_loop *loop, void *user_data)
{
    struct agent *a = user_data;
    a->books_timer = 0;
    books_list(a);
}

/* Settles the books now (on the loop's next turn: never from inside a callback of the
 * pod-resources client or the watch). */
static void books_soon(struct agent *a, uint64_t delay_ns)
{
    if (!a->vgpu || !a->loop)
        return;
    if (a->books_timer && a->books_due_ns <= mono_ns() + delay_ns)
        return;
    ev_loop_cancel_timer(a->loop, a->books_timer);
    a->books_timer = 0;
    if (ev_loop_add_timer(a->loop, delay_ns, on_books_timer, a, &a->books_timer) == 0)
        a->books_due_ns = mono_ns() + delay_ns;
}

/* The periodic settling, while the books hold a share (an idle node does nothing). */
static void books_arm(struct agent *a)
{
    if (a->cfg.vgpu_reconcile_interval_ns && vgpu_assignment_count(a->vgpu) > 0)
        books_soon(a, a->cfg.vgpu_reconcile_interval_ns);
}

/* Readiness of the vGPU resources may have changed: each registers once it is ready. */
static void vgpu_ready_changed(struct agent *a)
{
    for (size_t k = 0; k < a->n_served; k++)
        if ((a->served[k].kind == SERVED_VGPU_CORES || a->served[k].kind == SERVED_VGPU_MEMORY) &&
            a->served[k].plugin)
            acceld_plugin_ready_changed(a->served[k].plugin);
}

static void books_settled(struct agent *a)
{
    if (!a->books_ready) {
        a->books_ready = true;
        vgpu_set_books_ready(a->vgpu, true);
        vgpu_ready_changed(a);
    }
    books_arm(a);
}

/* The List failed: frees only what the watch cache says is gone. A record the start found
 * missing or over-committed waits for the List (nothing is handed out meanwhile). */
static void books_without_list(struct agent *a, const char *why)
{
    if (!a->podres_failing)
        log_warn("vGPU: the kubelet's pod-resources List at %s failed (%s): the books free the "
                 "shares of pods the watch says are gone or terminal, and take nothing back, "
                 "until it answers",
                 a->cfg.pod_resources_socket, why);
    a->podres_failing = true;
    a->podres_broken = true;
    size_t freed = vgpu_reconcile_pods(a->vgpu);
    if (freed)
        log_info("vGPU: %zu share(s) of gone or terminal pods freed (watch)", freed);
    if (!a->books_ready && vgpu_books_need_list(a->vgpu)) {
        books_soon(a, PODRES_RETRY_NS);
        return;
    }
    books_settled(a);
}

static void on_podres(int status, const char *message, const uint8_t *resp, size_t len,
                      void *user_data)
{
    struct agent *a = user_data;
    uint64_t now = mono_ns();
    a->podres_busy = false;
    V1__ListPodResourcesResponse *m =
        status == GRPC_STATUS_OK ? v1__list_pod_resources_response__unpack(NULL, len, resp) : NULL;
    if (!m) {
        char why[512];
        snprintf(why, sizeof(why), "%s%s%s",
                 status == GRPC_STATUS_OK ? "its answer cannot be parsed"
                                          : grpc_status_name(status),
                 message ? ": " : "", message ? message : "");
        books_without_list(a, why);
        goto again;
    }
    if (a->podres_failing)
        log_info("vGPU: the kubelet's pod-resources List answers again");
    a->podres_failing = false;
    size_t n = 0;
    for (size_t i = 0; i < m->n_pod_resources; i++)
        n += m->pod_resources[i]->n_containers;
    struct vgpu_live *live = calloc(n ? n : 1, sizeof(*live));
    size_t k = 0;
    for (size_t i = 0; live && i < m->n_pod_resources; i++) {
        const V1__PodResources *p = m->pod_resources[i];
        for (size_t c = 0; c < p->n_containers; c++) {
            const V1__ContainerResources *ct = p->containers[c];
            vgpu_live_init(&live[k], p->namespace_, p->name, ct->name);
            for (size_t d = 0; d < ct->n_devices; d++) {
                const V1__ContainerDevices *dev = ct->devices[d];
                int r = strcmp(dev->resource_name, a->cfg.vgpu_core_resource) == 0     ? 0
                        : strcmp(dev->resource_name, a->cfg.vgpu_memory_resource) == 0 ? 1
                                                                                       : -1;
                for (size_t j = 0; r >= 0 && j < dev->n_device_ids; j++)
                    vgpu_live_add_id(a->vgpu, &live[k], (enum vgpu_resource)r, dev->device_ids[j]);
            }
            if (live[k].n_ids[0] || live[k].n_ids[1])
                k++;
        }
    }
    struct vgpu_reconcile_result res = {0};
    int r = live ? vgpu_reconcile(a->vgpu, live, k, now, &res) : -ENOMEM;
    if (r < 0)
        log_error("vGPU: settling the books with the kubelet failed: %s", strerror(-r));
    else if (res.freed || res.adopted || res.renamed || res.orphans || res.unmatched)
        log_info("vGPU: books settled with the kubelet (%zu live container(s) with vGPU IDs): "
                 "%zu freed, %zu taken back, %zu found to be another container's, %zu "
                 "director%s of no share removed, %zu not placed",
                 k, res.freed, res.adopted, res.renamed, res.orphans,
                 res.orphans == 1 ? "y" : "ies", res.unmatched);
    free(live);
    v1__list_pod_resources_response__free_unpacked(m, NULL);
    books_settled(a);
    /* a gone pod's share answered moments ago (the List may not show it yet): settled again
     * once that grace is over */
    if (res.waiting)
        books_soon(a, VGPU_RECONCILE_GRACE_NS);
again:
    if (a->podres_again) {
        a->podres_again = false;
        books_soon(a, 0);
    }
}

/* Asks the kubelet which containers exist and which IDs each holds (pod-resources v1 List);
 * one List at a time (a request meanwhile runs after it). The connection is kept. */
static void books_list(struct agent *a)
{
    if (a->podres_busy) {
        a->podres_again = true;
        return;
    }
    if (a->podres_broken)
        a->podres = grpc_client_free(a->podres);
    a->podres_broken = false;
    int r = a->podres ? 0 : grpc_client_new(a->loop, a->cfg.pod_resources_socket, NULL, &a->podres);
    V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
    if (r == 0)
        r = grpc_client_unary_msg(a->podres, "/v1.PodResourcesLister/List", &req.base,
                                  PODRES_TIMEOUT_NS, on_podres, a, NULL);
    if (r == 0) {
        a->podres_busy = true;
        return;
    }
    books_without_list(a, strerror(-r));
}

#ifdef ACCELD_HAVE_KUBE
/* The watch says a pod is gone or terminal: its shares are settled with the kubelet now. */
static void on_pod_gone(void *ctx, const char *pod_uid)
{
    struct agent *a = ctx;
    if (vgpu_has_pod(a->vgpu, pod_uid))
        books_soon(a, 0);
}

static void on_pods_state(void *ctx, bool in_step)
{
    struct agent *a = ctx;
    vgpu_ready_changed(a);
    /* the start's settling, once the pods are listed (the watch cache tells gone from pending) */
    if (in_step && !a->books_started) {
        a->books_started = true;
        books_soon(a, 0);
    }
}
#endif

static void vgpu_check_soon(struct agent *a);

/* The books changed: the status file (accelctl vgpu, accel-exporter) follows within a
 * second, and the periodic settling runs while they hold shares. */
static void on_books_changed(void *ctx)
{
    struct agent *a = ctx;
    vgpu_check_soon(a);
    books_arm(a);
}

/* An Allocate found no pod: the books may hold a share the kubelet forgot (it admits that
 * container again), and the watch may be behind (vgpu-kube relists). */
static void on_books_doubt(void *ctx)
{
    struct agent *a = ctx;
    if (!a->books_doubt_ns || mono_ns() - a->books_doubt_ns > PODRES_RETRY_NS) {
        a->books_doubt_ns = mono_ns();
        books_soon(a, 0);
    }
}

/* Connects the vGPU provider to the API server's watch cache of this node's
 * pods. Without it (no credentials, or built without src/kube) every vGPU
 * Allocate is refused, saying so: acceld never guesses the pod. */
static void pods_start(struct agent *a)
{
    vgpu_set_hooks(a->vgpu, on_books_changed, on_books_doubt, a);
#ifdef ACCELD_HAVE_KUBE
    char err[1024];
    struct vgpu_kube_options o = {a->cfg.node_name, a->cfg.kubeconfig, a->cfg.vgpu_core_resource,
                                  a->cfg.vgpu_memory_resource};
    int r = vgpu_kube_new(a->loop, &o, &a->kube, err, sizeof(err));
    if (r < 0) {
        log_error("vGPU: no API server connection (%s): every vGPU Allocate is refused until "
                  "acceld is restarted with one",
                  err);
        return;
    }
    vgpu_kube_set_hooks(a->kube, on_pod_gone, on_pods_state, a);
    a->pods = vgpu_kube_pods(a->kube);
    vgpu_set_pods(a->vgpu, &a->pods);
    /* Allocates wait, and the resources register, once the start's settling ran */
    vgpu_set_books_ready(a->vgpu, false);
#else
    log_error("vGPU: this acceld is built without the Kubernetes client (libcurl missing at "
              "build time): every vGPU Allocate is refused");
#endif
}

/* The DRA side for the GPUs in mode dra, on this loop (after the
 * device-plugin sockets: a second acceld stops before touching its slice). */
static int dra_start(struct agent *a)
{
#ifdef ACCELD_HAVE_DRA
    struct acceld_dra_options o = {a->loop,  &a->cfg,  a->inv, a->dra_pos,
                                   a->n_dra, a->stats, a->nvml};
    int r = acceld_dra_new(&o, &a->dra);
    if (r < 0) {
        a->config_error = r == -EINVAL;
        log_error("cannot start the DRA side for %zu GPU(s): %s", a->n_dra, strerror(-r));
        return r;
    }
    for (size_t i = 0; i < a->n_gpus; i++)
        a->dra_of[i] = acceld_dra_find(a->dra, a->uuids[i]);
    log_info("DRA mode on %zu GPU(s) beside the device-plugin modes: driver %s", a->n_dra,
             ACCELD_DRA_DRIVER);
    return 0;
#else
    log_error("gpuModes: %zu GPU(s) in mode dra: this acceld is built without the Kubernetes "
              "client (libcurl)",
              a->n_dra);
    a->config_error = true;
    return -EINVAL;
#endif
}

static int start(struct agent *a)
{
    char err[512];
    int r = gpu_nvml_open(a->cfg.nvml_library[0] ? a->cfg.nvml_library : NULL, &a->nvml, err,
                          sizeof(err));
    if (r < 0 && a->cfg.mode == ACCELD_MODE_VFIO) {
        /* a passthrough node needs no nvidia driver: its GPUs come from sysfs */
        log_info("no NVML (%s): mode vfio, serving the GPUs bound to vfio-pci only", err);
        if (!(a->inv = calloc(1, sizeof(*a->inv))))
            return -ENOMEM;
        r = 0;
    } else if (r < 0) {
        log_error("cannot open NVML: %s", err);
        if (a->stats)
            acceld_stats_device_init(a->stats, false);
        return r;
    } else {
        struct gpu_inventory_options io = {a->nvml->path, a->cfg.sysfs_root};
        r = gpu_inventory_load(&io, a->nvml, &a->inv, err, sizeof(err));
    }
    if (r < 0) {
        log_error("cannot list the GPUs: %s", err);
        if (a->stats)
            acceld_stats_device_init(a->stats, false);
        return r;
    }
    if (a->nvml)
        log_info("driver %s, %d GPU(s)", a->inv->driver_version, a->inv->count);
    if ((r = make_providers(a)) < 0) {
        log_error("cannot build the device table: %s", strerror(-r));
        return r;
    }
    if ((r = ev_loop_new(&a->loop)) < 0)
        return r;
    if ((r = ev_loop_add_io(a->loop, a->sig_fd, EPOLLIN, on_signal, a)) < 0)
        return r;
    if (vfio_node_models(a->vfio) &&
        (r = vfio_node_watch(a->vfio, a->loop, on_vfio_changed, a)) < 0)
        log_warn("VFIO: cannot watch %s/vfio (%s): a GPU unbound from vfio-pci is not seen until "
                 "acceld restarts",
                 a->cfg.dev_root, strerror(-r));
    if (a->vgpu) {
        if ((r = fs_flusher_new(a->loop, &a->flusher)) < 0)
            return r;
        vgpu_set_flusher(a->vgpu, a->flusher);
        vgpu_set_spare_hook(a->vgpu, on_spare_taken, a);
        /* vgpu_new made what it could; the rest (and why not) from the loop */
        if (vgpu_spare_fill(a->vgpu, 0, NULL) > 0)
            ev_loop_add_timer(a->loop, 0, on_spare_fill, a, &a->spare_timer);
    }
    size_t warnings = 0;
    r = a->nvml ? health_monitor_start(a->nvml, a->uuids, a->n_gpus, &a->health, &warnings) : 0;
    if (r < 0) {
        log_error("cannot start the health monitor: %s", strerror(-r));
        return r;
    }
    if (warnings)
        log_warn("NVML events unavailable for %zu GPU(s): only GPU loss is detected for them",
                 warnings);
    if (a->health &&
        (r = ev_loop_add_io(a->loop, health_monitor_fd(a->health), EPOLLIN, on_health, a)) < 0)
        return r;
#ifdef ACCELD_HAVE_DRA
    char node[256];
    /* a config error of the DRA side stops acceld before anything is served */
    if (a->n_dra && acceld_dra_node_name(&a->cfg, node, sizeof(node)) < 0) {
        a->config_error = true;
        return -EINVAL;
    }
#endif
    /* the pod source before the sockets: a vGPU resource registers once its pods are listed */
    if (a->vgpu)
        pods_start(a);
    for (size_t k = 0; k < a->n_served; k++) {
        struct served *s = &a->served[k];
        if ((r = acceld_plugin_new(a->loop, &a->cfg, s->resource, &s->prov, &s->plugin)) < 0) {
            log_error("cannot start the device plugin for %s: %s", s->resource, strerror(-r));
            a->stats_not_ours = true; /* say a second acceld: it leaves the first's file */
            return r;
        }
        acceld_plugin_set_stats(s->plugin, a->stats);
    }
    /* After the socket is ours (a second acceld stops above and writes
     * nothing), before the loop runs (no Allocate can come yet). */
    if (a->pgpu && a->cfg.strategy == ACCELD_STRATEGY_CDI &&
        (r = pgpu_write_cdi(a->pgpu, a->cfg.cdi_dir)) < 0) {
        log_error("cannot write the CDI spec under %s: %s", a->cfg.cdi_dir, strerror(-r));
        return r;
    }
    if (a->mig && a->cfg.strategy == ACCELD_STRATEGY_CDI &&
        (r = mig_set_write_cdi(a->mig, a->cfg.cdi_dir)) < 0) {
        log_error("cannot write the MIG devices' CDI specs under %s: %s", a->cfg.cdi_dir,
                  strerror(-r));
        return r;
    }
    for (size_t i = 0; a->cfg.strategy == ACCELD_STRATEGY_CDI && i < a->n_shared; i++) {
        if ((r = replicas_write_cdi(a->shared[i], a->cfg.cdi_dir)) < 0) {
            log_error("cannot write the CDI spec under %s: %s", a->cfg.cdi_dir, strerror(-r));
            return r;
        }
    }
    if ((r = mps_start(a)) < 0)
        return r;
    if (a->n_dra && (r = dra_start(a)) < 0)
        return r;
    /* after the sockets are ours (a second acceld stopped above): what interrupted writes left */
    fs_remove_stale_tmp(a->cfg.cdi_dir, "accel-");
    if (a->vgpu) {
        /* without a watch the start's settling runs now (else after the first LIST) */
        if (!a->pods.ops) {
            a->books_started = true;
            books_soon(a, 0);
        }
        /* accelctl vgpu sees the GPUs and restored shares before the first pass */
        struct vgpu_status_pass none = {.action = a->cfg.vgpu_over_quota_kill ? "kill" : "none",
                                        .interval_ms = a->cfg.vgpu_check_interval_ns / 1000000};
        if ((r = vgpu_status_write(a->vgpu, a->cfg.state_dir, &none)) < 0)
            log_warn("vGPU: cannot write the status file for accelctl: %s", strerror(-r));
    }
    recovery_arm(a);
    vgpu_check_arm(a);
    if (a->stats) {
        stats_flush(a, true);
        acceld_stats_set_change_hook(a->stats, on_stats_change, a);
        stats_schedule(a);
    }
    return 0;
}

static void stop(struct agent *a)
{
    /* the daemons first: nothing of ours is left running */
    a->mps = mps_sup_free(a->mps);
    free(a->mps_refs);
#ifdef ACCELD_HAVE_DRA
    a->dra = acceld_dra_free(a->dra); /* its sockets, its claims' daemons */
#endif
    for (size_t k = 0; k < a->n_served; k++)
        a->served[k].plugin = acceld_plugin_free(a->served[k].plugin);
    if (a->health && a->loop)
        ev_loop_del_io(a->loop, health_monitor_fd(a->health));
    bool nvml_busy;
    a->health = health_monitor_stop(a->health, &nvml_busy);
    if (a->loop && a->recovery_timer)
        ev_loop_cancel_timer(a->loop, a->recovery_timer);
    if (a->loop && a->vgpu_check_timer)
        ev_loop_cancel_timer(a->loop, a->vgpu_check_timer);
    if (a->loop && a->vgpu_thaw_timer)
        ev_loop_cancel_timer(a->loop, a->vgpu_thaw_timer);
    if (a->loop && a->spare_timer)
        ev_loop_cancel_timer(a->loop, a->spare_timer);
    if (a->loop && a->books_timer)
        ev_loop_cancel_timer(a->loop, a->books_timer);
    if (a->loop && a->stats_w.timer)
        ev_loop_cancel_timer(a->loop, a->stats_w.timer);
    /* everything that registered with the loop goes before it */
    a->podres = grpc_client_free(a->podres);
#ifdef ACCELD_HAVE_KUBE
    a->kube = vgpu_kube_free(a->kube);
#endif
    /* waits for the journal's flush in flight: what was answered is on disk */
    a->flusher = fs_flusher_free(a->flusher);
    a->vfio = vfio_node_free(a->vfio); /* its inotify fd is on the loop */
    a->loop = ev_loop_free(a->loop);
    a->pgpu = pgpu_free(a->pgpu);
    a->mig = mig_set_free(a->mig);
    a->vgpu = vgpu_free(a->vgpu);
    for (size_t i = 0; i < a->n_shared; i++)
        a->shared[i] = replicas_free(a->shared[i]);
    free(a->vgpu_recent);
    a->vgpu_recent = NULL;
    /* never leave a container frozen behind us */
    a->vgpu_cstate = hostcheck_state_free(a->vgpu_cstate);
    free(a->hstate);
    free(a->map);
    free(a->uuids);
    free(a->dra_pos);
    free(a->dra_of);
    a->inv = gpu_inventory_free(a->inv);
    /* the health thread still waits in NVML: the exit ends it, NVML stays loaded till then */
    if (!nvml_busy)
        a->nvml = gpu_nvml_free(a->nvml);
    if (a->sig_fd >= 0)
        close(a->sig_fd);
}

int main(int argc, char **argv)
{
    static struct agent a = {.sig_fd = -1};
    int what;
    char err[1024];

    log_set_ident("acceld");
    log_set_timestamps(true);
    if (parse_args(&a, argc, argv, &what) < 0)
        return EXIT_CONFIG;
    if (what == 3) {
        usage(stdout);
        return 0;
    }
    if (what == 2) {
        printf("acceld %s\n", ACCEL_VERSION);
        return 0;
    }
    if (build_config(&a, &a.cfg, err, sizeof(err)) < 0) {
        log_error("%s", err);
        return EXIT_CONFIG;
    }
    if (a.cfg.nvidia_sharing &&
        sharing_config_load_file_ex(&a.sharing, a.config_path, SHARING_PARSE_OTHER_KEYS, err,
                                    sizeof(err)) < 0) {
        log_error("%s", err);
        return EXIT_CONFIG;
    }
    if (what == 1) {
        print_config(&a.cfg);
        return 0;
    }
    log_set_level(a.cfg.log_level);

    /* Signals go to the signalfd only; blocked before any thread exists. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    a.sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (a.sig_fd < 0) {
        log_error("signalfd: %s", strerror(errno));
        return 1;
    }

    /* mode dra with no per-GPU exception: the DRA side alone; otherwise the
     * device-plugin modes, with the DRA side beside them for the dra GPUs */
    if (acceld_config_dra_only(&a.cfg) && a.sharing.mode != SHARING_NONE) {
        log_error("%s: NVIDIA's sharing section is for the device-plugin modes, and every GPU is "
                  "in mode dra, which shares GPUs through dra.sharing (docs/dra.md): remove one "
                  "of the two, or give some GPUs another mode (gpuModes)",
                  a.config_path);
        close(a.sig_fd);
        return EXIT_CONFIG;
    }
    if (acceld_config_dra_only(&a.cfg)) {
#ifdef ACCELD_HAVE_DRA
        int code = acceld_dra_run(&a.cfg, a.sig_fd, dra_reload_config, &a);
#else
        log_error("mode dra: this acceld is built without the Kubernetes client (libcurl)");
        int code = EXIT_CONFIG;
#endif
        close(a.sig_fd);
        return code;
    }
    log_info("acceld %s starting: resource %s, plugin dir %s", ACCEL_VERSION, a.cfg.resource_name,
             a.cfg.plugin_dir);
    /* NULL (no memory): the agent runs without its SLI file */
    a.stats = malloc(sizeof(*a.stats));
    if (a.stats)
        acceld_stats_init(a.stats, real_s());
    /* before NVML holds the GPUs: the nvidia driver's unbind waits for its users */
    if (a.cfg.vfio_bind[0] && vfio_bind_at_start(&a.cfg))
        log_warn("vfio.bind: some GPUs could not be bound to vfio-pci (above): they are not "
                 "served");
    int r = start(&a);
    if (r == 0) {
        r = ev_loop_run(a.loop);
        if (r < 0)
            log_error("event loop failed: %s", strerror(-r));
    }
    if (a.stats)
        acceld_stats_set_change_hook(a.stats, NULL, NULL);
    stats_flush(&a, true); /* the last counts (a failed start's included) */
    stop(&a);
    free(a.stats);
    log_info("stopped");
    return r < 0 ? (a.config_error ? EXIT_CONFIG : 1) : 0;
}
