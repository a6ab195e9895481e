/*
 * accel-exporter.c — the GPU metrics exporter: serves /metrics (Prometheus text 0.0.4, or
 * OpenMetrics 1.0.0 when the Accept header asks for application/openmetrics-text) and
 * /healthz over libmicrohttpd.
 *
 * NVML is never called on the scrape path: a sampler thread reads every GPU each interval
 * and renders both exposition formats into a back buffer, then swaps it with the front
 * buffer under a mutex; a scrape copies the front buffer out. An event thread counts XID
 * events per GPU and XID as they arrive (nvmlEventSetWait_v2), so short-lived XIDs between
 * two samples are never lost. NVML is found like acceld's: --nvml-library, then
 * $ACCEL_NVML_LIBRARY, then libnvidia-ml.so.1 (src/gpu/nvml.c).
 *
 * Metric names follow the Prometheus naming guide (base units, _total counters):
 * https://prometheus.io/docs/practices/naming/ ; the formats are described at
 * https://prometheus.io/docs/instrumenting/exposition_formats/ and in the OpenMetrics spec
 * (https://github.com/OpenObservability/OpenMetrics/blob/main/specification/OpenMetrics.md).
 */
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "accel-config.h"
#include "cgroup.h"
#include "cost.h"
#include "expconfig.h"
#include "gpu-mig.h"
#include "gpuextra.h"
#include "httpguard.h"
#include "log.h"
#include "nvml.h"
#include "podres.h"
#include "podutil.h"
#include "regions.h"
#include "sli.h"
#include "status.h"
#include "util.h"

#define EXP_MAX_GPUS 64
#define EXP_MAX_MIG 8   /* MIG devices of one GPU (NVML's maximum is 7) */
#define EXP_MAX_XIDS 32 /* distinct XIDs counted per GPU; more are folded into xid="other" */
#define EXP_PODRES_REFRESH_NS 5000000000ULL /* at most one List per 5 s */
#define EXP_PODRES_TIMEOUT_MS 1000u

struct exp_xid {
    unsigned xid; /* 0 = unused slot; UINT32_MAX = the "other" bucket */
    uint64_t count;
};

struct exp_gpu {
    nvmlDevice_t dev;
    char uuid[96];
    char name[96];
    char vbios[64];
    struct exp_xid xids[EXP_MAX_XIDS + 1];
    struct status_xids recent; /* for the status page */
    struct exporter_util util; /* per-process SM utilization (sampler thread) */
};

/* A growable text buffer; reused across samples so steady state allocates nothing. */
struct exp_buf {
    char *p;
    size_t len, cap;
    bool oom;
};

struct exporter {
    struct gpu_nvml *nvml;
    unsigned ngpus;
    struct exp_gpu gpus[EXP_MAX_GPUS];
    char driver[64];
    int cuda_version;
    uint64_t interval_ns;
    const char *proc_root;        /* where /proc is (tests: a fake tree) */
    const char *podres_socket;    /* NULL: pod-resources off */
    struct podres *podres;        /* the last good List (sampler thread only) */
    bool podres_ok;               /* the last List succeeded */
    struct exporter_sli *sli;     /* acceld's SLI file (--state-dir); NULL: off */
    struct exporter_vgpu *vgpu;   /* vGPU assignments and regions (--state-dir); NULL: off */
    uint64_t podres_next_ns;      /* when to ask again */
    struct exporter_cost *cost;   /* cost per job (cost.c) */
    struct exporter_extra *extra; /* NVLink errors, MIG mode (gpuextra.c) */

    pthread_mutex_t lock;    /* guards front buffers, xid counters and the flags below */
    struct exp_buf front[2]; /* [0] Prometheus text, [1] OpenMetrics */
    struct exp_buf back[2];
    struct status_gpu *status, *status_back; /* the status page's view, one per GPU */
    time_t status_time;                      /* when status was sampled */
    uint64_t samples;                        /* completed sampling rounds */
    volatile int stop;                       /* set by main at exit; polled by the threads */
};

static void buf_printf(struct exp_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void buf_printf(struct exp_buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 16384;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* Label values come from the driver (UUID, name, versions): escape \ " and newline as the
 * exposition formats require. */
static const char *esc(const char *s, char *out, size_t outlen)
{
    size_t o = 0;
    for (; *s && o + 3 < outlen; s++) {
        if (*s == '\\' || *s == '"') {
            out[o++] = '\\';
            out[o++] = *s;
        } else if (*s == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *s;
        }
    }
    out[o] = '\0';
    return out;
}

/* The settings (read-only once the threads run): metric families turned off. */
static const struct exporter_config *exp_cfg;

/* HELP and TYPE for one family. Counters: OpenMetrics names the family without _total.
 * false (and nothing written) when the config turns the family off: skip its series. */
static bool family(struct exp_buf *b, bool om, const char *name, const char *type, const char *help)
{
    if (exp_cfg && exporter_config_disabled(exp_cfg, name))
        return false;
    char fam[128];
    snprintf(fam, sizeof fam, "%s", name);
    size_t l = strlen(fam);
    if (om && strcmp(type, "counter") == 0 && l > 6 && strcmp(fam + l - 6, "_total") == 0)
        fam[l - 6] = '\0';
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam, help, fam, type);
    return true;
}

/* sli.c's and regions.c's output, into one exposition buffer. */
struct sli_ctx {
    struct exp_buf *b;
    bool om;
    const struct exporter *e; /* regions.c: for the GPU index of a UUID */
};

static bool sli_family(void *ctx, const char *name, const char *type, const char *help)
{
    struct sli_ctx *c = ctx;
    return family(c->b, c->om, name, type, help);
}

static void sli_print(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sli_print(void *ctx, const char *fmt, ...)
{
    struct sli_ctx *c = ctx;
    char line[4096]; /* room for regions.c's label sets, the longest */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line) /* labels are bounded: a full line cannot happen */
        c->b->oom = true;
    else
        buf_printf(c->b, "%s", line);
}

static int vgpu_gpu_index(void *ctx, const char *uuid);

struct gpu_sample {
    bool util_ok, mem_ok, temp_ok, power_ok, energy_ok, limit_ok, sm_ok, memclk_ok, reasons_ok;
    bool slowdown_ok;
    unsigned slowdown_c; /* the temperature at which the GPU slows itself down */
    bool ecc_ok, remap_ok, replay_ok;
    unsigned remap[4], replays; /* corrected rows, uncorrectable rows, pending, failure */
    nvmlUtilization_t util;
    nvmlMemory_t mem;
    unsigned temp, power_mw, limit_mw, sm_mhz, mem_mhz;
    unsigned long long energy_mj, reasons, ecc[2];
    size_t nprocs;
    struct gpu_process procs[64];
    struct kube_cgroup_ref pods[64];      /* pod_uid "" = not in a pod (or its cgroup unreadable) */
    const struct podres_entry *names[64]; /* NULL = pod-resources cannot say */
    bool putil_ok;                        /* per-process utilization answered (podutil.h) */
    double putil[64];                     /* SM utilization of procs[k], 0..1 */
    bool mps[64]; /* procs[k] is an MPS client (nvmlDeviceGetMPSComputeRunningProcesses_v3) */
    size_t n_mig; /* its MIG devices (a GPU in MIG mode) */
    struct gpu_mig_device mig[EXP_MAX_MIG];
};

/* Clock-event reason bits (NVML's nvmlClocksEventReason* constants, nvml.h of the driver). */
static const struct {
    unsigned long long bit;
    const char *name;
} reason_bits[] = {
    {0x1ULL, "gpu_idle"},
    {0x2ULL, "applications_clocks_setting"},
    {0x4ULL, "sw_power_cap"},
    {0x8ULL, "hw_slowdown"},
    {0x10ULL, "sync_boost"},
    {0x20ULL, "sw_thermal_slowdown"},
    {0x40ULL, "hw_thermal_slowdown"},
    {0x80ULL, "hw_power_brake_slowdown"},
    {0x100ULL, "display_clock_setting"},
};

#define NVML_OK(call) ((call) == NVML_SUCCESS)

/* MPS clients (with MPS the compute list names the server; its clients are listed apart):
 * flagged, and added to the processes when the compute list lacks them. */
static void add_mps_clients(struct gpu_nvml *n, nvmlDevice_t dev, struct gpu_sample *s)
{
    struct gpu_process c[64];
    size_t nc = 0, cap = sizeof s->procs / sizeof s->procs[0];
    if (gpu_nvml_list_processes(n, dev, GPU_NVML_PROCS_MPS, c, 64, &nc) < 0)
        return;
    for (size_t i = 0; i < nc; i++) {
        size_t k = 0;
        while (k < s->nprocs && s->procs[k].pid != c[i].pid)
            k++;
        if (k == s->nprocs) {
            if (k == cap)
                continue;
            s->procs[s->nprocs++] = c[i];
        }
        s->mps[k] = true;
    }
}

static void sample_gpu(struct exporter *e, struct exp_gpu *g, struct gpu_sample *s)
{
    struct gpu_nvml *n = e->nvml;
    memset(s, 0, offsetof(struct gpu_sample, procs));
    memset(s->names, 0, sizeof s->names);
    memset(s->mps, 0, sizeof s->mps);
    s->util_ok = n->nvmlDeviceGetUtilizationRates &&
                 NVML_OK(n->nvmlDeviceGetUtilizationRates(g->dev, &s->util));
    s->mem_ok = n->nvmlDeviceGetMemoryInfo && NVML_OK(n->nvmlDeviceGetMemoryInfo(g->dev, &s->mem));
    s->temp_ok = n->nvmlDeviceGetTemperature &&
                 NVML_OK(n->nvmlDeviceGetTemperature(g->dev, NVML_TEMPERATURE_GPU, &s->temp));
    s->slowdown_ok = n->nvmlDeviceGetTemperatureThreshold &&
                     NVML_OK(n->nvmlDeviceGetTemperatureThreshold(
                         g->dev, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &s->slowdown_c));
    s->power_ok =
        n->nvmlDeviceGetPowerUsage && NVML_OK(n->nvmlDeviceGetPowerUsage(g->dev, &s->power_mw));
    s->limit_ok = n->nvmlDeviceGetEnforcedPowerLimit &&
                  NVML_OK(n->nvmlDeviceGetEnforcedPowerLimit(g->dev, &s->limit_mw));
    s->energy_ok = n->nvmlDeviceGetTotalEnergyConsumption &&
                   NVML_OK(n->nvmlDeviceGetTotalEnergyConsumption(g->dev, &s->energy_mj));
    s->sm_ok = n->nvmlDeviceGetClockInfo &&
               NVML_OK(n->nvmlDeviceGetClockInfo(g->dev, NVML_CLOCK_SM, &s->sm_mhz));
    s->memclk_ok = n->nvmlDeviceGetClockInfo &&
                   NVML_OK(n->nvmlDeviceGetClockInfo(g->dev, NVML_CLOCK_MEM, &s->mem_mhz));
    s->reasons_ok = n->nvmlDeviceGetCurrentClocksEventReasons &&
                    NVML_OK(n->nvmlDeviceGetCurrentClocksEventReasons(g->dev, &s->reasons));
    s->ecc_ok = n->nvmlDeviceGetTotalEccErrors &&
                NVML_OK(n->nvmlDeviceGetTotalEccErrors(g->dev, NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                                       NVML_AGGREGATE_ECC, &s->ecc[0])) &&
                NVML_OK(n->nvmlDeviceGetTotalEccErrors(g->dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                       NVML_AGGREGATE_ECC, &s->ecc[1]));
    s->remap_ok = n->nvmlDeviceGetRemappedRows &&
                  NVML_OK(n->nvmlDeviceGetRemappedRows(g->dev, &s->remap[0], &s->remap[1],
                                                       &s->remap[2], &s->remap[3]));
    s->replay_ok = n->nvmlDeviceGetPcieReplayCounter &&
                   NVML_OK(n->nvmlDeviceGetPcieReplayCounter(g->dev, &s->replays));
    size_t np = 0;
    if (gpu_nvml_running_processes(n, g->dev, s->procs, sizeof s->procs / sizeof s->procs[0],
                                   &np) == 0)
        s->nprocs = np;
    add_mps_clients(n, g->dev, s);
    size_t nm = 0;
    unsigned cur = 0, pending = 0;
    s->n_mig = 0;
    if (n->nvmlDeviceGetMigMode && NVML_OK(n->nvmlDeviceGetMigMode(g->dev, &cur, &pending)) &&
        cur == NVML_DEVICE_MIG_ENABLE &&
        gpu_mig_devices_into(n, g->dev, s->mig, EXP_MAX_MIG, &nm) == 0)
        s->n_mig = nm < EXP_MAX_MIG ? nm : EXP_MAX_MIG;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    s->putil_ok = exporter_util_sample(n, g->dev, &g->util,
                                       (unsigned long long)now.tv_sec * 1000000ull +
                                           (unsigned long long)now.tv_nsec / 1000ull,
                                       e->interval_ns / 1000u) == 0;
    for (size_t k = 0; k < s->nprocs; k++)
        s->putil[k] = s->putil_ok ? exporter_util_of(&g->util, s->procs[k].pid) : 0;
    for (size_t k = 0; k < s->nprocs; k++)
        if (kube_cgroup_read(e->proc_root, (pid_t)s->procs[k].pid, &s->pods[k]) < 0)
            memset(&s->pods[k], 0, sizeof s->pods[k]);
}

/* Names the processes' containers from the last pod-resources List, only where unambiguous
 * (pod-resources names no pod UID or container ID, see podres.h):
 *  1. a GPU held by one container, with one container ID running on it: that container;
 *  2. a container ID so named on one GPU keeps its names on every GPU;
 *  3. a GPU whose holders are all named but one, with one unnamed container ID left on it:
 *     that container is the remaining holder.
 * A GPU listed for several containers otherwise leaves the names empty. */
static void name_containers(const struct exporter *e, struct gpu_sample *ss)
{
    const struct podres *pr = e->podres;
    if (!e->podres_ok)
        return;
    for (unsigned i = 0; i < e->ngpus; i++) {
        const struct podres_entry *first;
        const char *cid = NULL;
        bool one_cid = true;
        if (podres_holders(pr, e->gpus[i].uuid, &first) != 1)
            continue;
        /* a second container on a GPU listed for one (a pod that reached the GPU without
         * asking for it) makes the GPU ambiguous */
        for (size_t k = 0; k < ss[i].nprocs; k++)
            if (ss[i].pods[k].pod_uid[0]) {
                if (cid && strcmp(cid, ss[i].pods[k].container_id))
                    one_cid = false;
                cid = ss[i].pods[k].container_id;
            }
        for (size_t k = 0; k < ss[i].nprocs && one_cid; k++)
            if (ss[i].pods[k].pod_uid[0])
                ss[i].names[k] = first;
    }
    for (unsigned i = 0; i < e->ngpus; i++)
        for (size_t k = 0; k < ss[i].nprocs; k++)
            for (unsigned j = 0; j < e->ngpus && ss[i].pods[k].pod_uid[0] && !ss[i].names[k]; j++)
                for (size_t m = 0; m < ss[j].nprocs; m++)
                    if (ss[j].names[m] &&
                        !strcmp(ss[j].pods[m].container_id, ss[i].pods[k].container_id)) {
                        ss[i].names[k] = ss[j].names[m];
                        break;
                    }
    for (unsigned i = 0; i < e->ngpus; i++) {
        const struct podres_entry *left = NULL;
        const char *cid = NULL;
        size_t nleft = 0;
        bool one_cid = true;
        for (size_t h = 0; h < pr->n; h++) {
            bool named = false;
            if (strcmp(pr->e[h].gpu_uuid, e->gpus[i].uuid))
                continue;
            for (size_t k = 0; k < ss[i].nprocs && !named; k++)
                named = ss[i].names[k] && podres_same_container(ss[i].names[k], &pr->e[h]);
            if (!named) {
                left = &pr->e[h];
                nleft++;
            }
        }
        for (size_t k = 0; k < ss[i].nprocs; k++)
            if (ss[i].pods[k].pod_uid[0] && !ss[i].names[k]) {
                if (cid && strcmp(cid, ss[i].pods[k].container_id))
                    one_cid = false;
                cid = ss[i].pods[k].container_id;
            }
        if (nleft != 1 || !cid || !one_cid)
            continue;
        for (size_t k = 0; k < ss[i].nprocs; k++)
            if (ss[i].pods[k].pod_uid[0] && !ss[i].names[k])
                ss[i].names[k] = left;
    }
}

/* The namespace, pod and container labels of process k (empty where unknown), escaped. */
static const char *name_labels(const struct gpu_sample *s, size_t k, char *out, size_t len)
{
    const struct podres_entry *x = s->names[k];
    char ns[140], pod[520], ct[140];
    snprintf(out, len, "namespace=\"%s\",pod=\"%s\",container=\"%s\"",
             esc(x ? x->namespace_ : "", ns, sizeof ns), esc(x ? x->pod : "", pod, sizeof pod),
             esc(x ? x->container : "", ct, sizeof ct));
    return out;
}

/* Processes j and k of one GPU belong to the same pod's container. */
static bool same_container(const struct gpu_sample *s, size_t j, size_t k)
{
    return !strcmp(s->pods[j].pod_uid, s->pods[k].pod_uid) &&
           !strcmp(s->pods[j].container_id, s->pods[k].container_id);
}

/* Process k is the first of its container on this GPU (host processes belong to none). */
static bool first_of_container(const struct gpu_sample *s, size_t k)
{
    if (!s->pods[k].pod_uid[0])
        return false;
    for (size_t j = 0; j < k; j++)
        if (same_container(s, j, k))
            return false;
    return true;
}

/* Per-process and per-container SM utilization (podutil.c) and MPS clients: each
 * container's own figure, summed over its processes, never the GPU's copied. */
static void render_pod_usage(struct exporter *e, struct exp_buf *b, bool om,
                             const struct gpu_sample *ss, char (*l)[160])
{
    char nl[900];
    bool on = family(b, om, "accel_gpu_process_utilization_ratio", "gauge",
                     "Fraction of the last sample periods in which the process used the GPU's "
                     "SMs (NVML's per-process samples; 0 when it had none).");
    for (unsigned i = 0; i < e->ngpus && on; i++)
        for (size_t k = 0; k < ss[i].nprocs && ss[i].putil_ok; k++)
            buf_printf(b,
                       "accel_gpu_process_utilization_ratio{%s,pid=\"%u\",%s,pod_uid=\"%s\","
                       "container_id=\"%s\"} %.17g\n",
                       l[i], ss[i].procs[k].pid, name_labels(&ss[i], k, nl, sizeof nl),
                       ss[i].pods[k].pod_uid, ss[i].pods[k].container_id, ss[i].putil[k]);
    on = family(b, om, "accel_container_gpu_utilization_ratio", "gauge",
                "SM utilization of one pod's container on this GPU: the sum over its processes "
                "(at most 1).");
    for (unsigned i = 0; i < e->ngpus && on; i++)
        for (size_t k = 0; k < ss[i].nprocs && ss[i].putil_ok; k++) {
            if (!first_of_container(&ss[i], k))
                continue;
            double sum = 0;
            for (size_t j = k; j < ss[i].nprocs; j++)
                if (same_container(&ss[i], j, k))
                    sum += ss[i].putil[j];
            buf_printf(b,
                       "accel_container_gpu_utilization_ratio{%s,%s,pod_uid=\"%s\","
                       "container_id=\"%s\"} %.17g\n",
                       l[i], name_labels(&ss[i], k, nl, sizeof nl), ss[i].pods[k].pod_uid,
                       ss[i].pods[k].container_id, sum > 1 ? 1 : sum);
        }
    on = family(b, om, "accel_container_gpu_mps_clients", "gauge",
                "MPS client processes of one pod's container on this GPU (containers with at "
                "least one).");
    for (unsigned i = 0; i < e->ngpus && on; i++)
        for (size_t k = 0; k < ss[i].nprocs; k++) {
            if (!first_of_container(&ss[i], k))
                continue;
            unsigned c = 0;
            for (size_t j = k; j < ss[i].nprocs; j++)
                c += same_container(&ss[i], j, k) && ss[i].mps[j];
            if (c)
                buf_printf(b,
                           "accel_container_gpu_mps_clients{%s,%s,pod_uid=\"%s\","
                           "container_id=\"%s\"} %u\n",
                           l[i], name_labels(&ss[i], k, nl, sizeof nl), ss[i].pods[k].pod_uid,
                           ss[i].pods[k].container_id, c);
        }
}

/* The labels of a MIG device: mig_uuid, gpu_instance_id, compute_instance_id, mig_profile. */
static const char *mig_labels(const struct gpu_mig_device *m, char *out, size_t len)
{
    char u[200], p[80];
    snprintf(out, len,
             "mig_uuid=\"%s\",gpu_instance_id=\"%u\",compute_instance_id=\"%u\","
             "mig_profile=\"%s\"",
             esc(m->uuid, u, sizeof u), m->gi, m->ci, esc(m->profile, p, sizeof p));
    return out;
}

/* Renders one format from the samples. om: OpenMetrics. */
static void render(struct exporter *e, struct exp_buf *b, bool om, const struct gpu_sample *ss,
                   const struct exp_gpu *xid_copy)
{
    char l[EXP_MAX_GPUS][160];
    for (unsigned i = 0; i < e->ngpus; i++) {
        char u[200];
        snprintf(l[i], sizeof l[i], "gpu=\"%u\",uuid=\"%s\"", i, esc(e->gpus[i].uuid, u, sizeof u));
    }
    char d[140], v[140], nm[200];
    bool on = family(b, om, "accel_gpu_info", "gauge",
                     "GPU identity and firmware: driver, CUDA driver API and VBIOS versions "
                     "(value 1).");
    for (unsigned i = 0; i < e->ngpus && on; i++)
        buf_printf(b,
                   "accel_gpu_info{%s,name=\"%s\",driver_version=\"%s\",cuda_version=\"%d.%d\","
                   "vbios_version=\"%s\"} 1\n",
                   l[i], esc(e->gpus[i].name, nm, sizeof nm), esc(e->driver, d, sizeof d),
                   e->cuda_version / 1000, e->cuda_version % 1000 / 10,
                   esc(e->gpus[i].vbios, v, sizeof v));

    /* per MIG device of a GPU in MIG mode: GPU and compute instance, NVIDIA's profile name */
    on = family(b, om, "accel_mig_device_info", "gauge",
                "A MIG device of a GPU in MIG mode (value 1): its UUID, GPU instance, compute "
                "instance and profile.");
    for (unsigned i = 0; i < e->ngpus && on; i++)
        for (size_t k = 0; k < ss[i].n_mig; k++)
            buf_printf(b, "accel_mig_device_info{%s,%s} 1\n", l[i],
                       mig_labels(&ss[i].mig[k], nm, sizeof nm));
    for (int used = 1; used >= 0; used--) {
        const char *name =
            used ? "accel_mig_device_memory_used_bytes" : "accel_mig_device_memory_total_bytes";
        on = family(b, om, name, "gauge",
                    used ? "Memory in use on a MIG device."
                         : "Memory of a MIG device (its GPU instance's).");
        for (unsigned i = 0; i < e->ngpus && on; i++)
            for (size_t k = 0; k < ss[i].n_mig; k++)
                buf_printf(b, "%s{%s,%s} %" PRIu64 "\n", name, l[i],
                           mig_labels(&ss[i].mig[k], nm, sizeof nm),
                           used ? ss[i].mig[k].memory_used_bytes : ss[i].mig[k].memory_bytes);
    }

/* One family with a series per GPU whose sample ss[i].okf succeeded. */
#define PER_GPU(type, metric, help, okf, expr)                                                     \
    do {                                                                                           \
        if (!family(b, om, metric, type, help))                                                    \
            break;                                                                                 \
        for (unsigned i = 0; i < e->ngpus; i++)                                                    \
            if (ss[i].okf)                                                                         \
                buf_printf(b, metric "{%s} %.17g\n", l[i], (double)(expr));                        \
    } while (0)
#define GAUGE(...) PER_GPU("gauge", __VA_ARGS__)
#define COUNTER(...) PER_GPU("counter", __VA_ARGS__)

    GAUGE("accel_gpu_utilization_ratio", "Fraction of the last sample period the GPU was busy.",
          util_ok, ss[i].util.gpu / 100.0);
    GAUGE("accel_gpu_memory_used_bytes", "Device memory in use.", mem_ok, ss[i].mem.used);
    GAUGE("accel_gpu_memory_free_bytes", "Device memory free.", mem_ok, ss[i].mem.free);
    GAUGE("accel_gpu_memory_total_bytes", "Device memory installed.", mem_ok, ss[i].mem.total);
    GAUGE("accel_gpu_temperature_celsius", "GPU core temperature.", temp_ok, ss[i].temp);
    GAUGE("accel_gpu_temperature_slowdown_celsius",
          "Temperature at which the GPU slows its clocks down (NVML's slowdown threshold).",
          slowdown_ok, ss[i].slowdown_c);
    GAUGE("accel_gpu_power_watts", "Power draw.", power_ok, ss[i].power_mw / 1000.0);
    GAUGE("accel_gpu_power_limit_watts", "Enforced power limit.", limit_ok,
          ss[i].limit_mw / 1000.0);
    COUNTER("accel_gpu_energy_joules_total", "Energy consumed since the driver loaded.", energy_ok,
            ss[i].energy_mj / 1000.0);
    GAUGE("accel_gpu_sm_clock_hertz", "SM clock.", sm_ok, ss[i].sm_mhz * 1e6);
    GAUGE("accel_gpu_memory_clock_hertz", "Memory clock.", memclk_ok, ss[i].mem_mhz * 1e6);

    on = family(b, om, "accel_gpu_clock_event_reason", "gauge",
                "1 while the clocks are held down for this reason (throttling), else 0.");
    for (unsigned i = 0; i < e->ngpus && on; i++)
        if (ss[i].reasons_ok)
            for (size_t k = 0; k < sizeof reason_bits / sizeof reason_bits[0]; k++)
                buf_printf(b, "accel_gpu_clock_event_reason{%s,reason=\"%s\"} %d\n", l[i],
                           reason_bits[k].name, (ss[i].reasons & reason_bits[k].bit) ? 1 : 0);

    on = family(b, om, "accel_gpu_ecc_errors_total", "counter",
                "ECC errors over the GPU's life (aggregate counters), by type.");
    for (unsigned i = 0; i < e->ngpus && on; i++)
        if (ss[i].ecc_ok)
            buf_printf(b,
                       "accel_gpu_ecc_errors_total{%s,type=\"corrected\"} %llu\n"
                       "accel_gpu_ecc_errors_total{%s,type=\"uncorrected\"} %llu\n",
                       l[i], ss[i].ecc[0], l[i], ss[i].ecc[1]);

    GAUGE("accel_gpu_remapped_rows_correctable", "Rows remapped after correctable errors.",
          remap_ok, ss[i].remap[0]);
    GAUGE("accel_gpu_remapped_rows_uncorrectable", "Rows remapped after uncorrectable errors.",
          remap_ok, ss[i].remap[1]);
    GAUGE("accel_gpu_row_remap_pending", "1 while a row remap waits for a GPU reset.", remap_ok,
          ss[i].remap[2] != 0);
    GAUGE("accel_gpu_row_remap_failed", "1 once a row remap has failed.", remap_ok,
          ss[i].remap[3] != 0);
    COUNTER("accel_gpu_pcie_replays_total", "PCIe replays (link-level retransmissions).", replay_ok,
            ss[i].replays);

    on = family(b, om, "accel_gpu_xid_events_total", "counter",
                "XID events seen since the exporter started, by XID.");
    for (unsigned i = 0; i < e->ngpus && on; i++)
        for (unsigned k = 0; k <= EXP_MAX_XIDS; k++) {
            const struct exp_xid *x = &xid_copy[i].xids[k];
            if (!x->xid)
                continue;
            if (x->xid == UINT32_MAX)
                buf_printf(b, "accel_gpu_xid_events_total{%s,xid=\"other\"} %" PRIu64 "\n", l[i],
                           x->count);
            else
                buf_printf(b, "accel_gpu_xid_events_total{%s,xid=\"%u\"} %" PRIu64 "\n", l[i],
                           x->xid, x->count);
        }

    on = family(b, om, "accel_gpu_process_memory_used_bytes", "gauge",
                "Device memory used by one process (NVML's compute process list), with its pod "
                "and container when /proc/PID/cgroup names them and their names when "
                "pod-resources does.");
    char nl[900];
    for (unsigned i = 0; i < e->ngpus && on; i++)
        for (size_t k = 0; k < ss[i].nprocs; k++)
            if (ss[i].procs[k].used_memory_bytes != UINT64_MAX)
                buf_printf(b,
                           "accel_gpu_process_memory_used_bytes{%s,pid=\"%u\",%s,pod_uid=\"%s\","
                           "container_id=\"%s\"} %" PRIu64 "\n",
                           l[i], ss[i].procs[k].pid, name_labels(&ss[i], k, nl, sizeof nl),
                           ss[i].pods[k].pod_uid, ss[i].pods[k].container_id,
                           ss[i].procs[k].used_memory_bytes);

    /* Per container: the sum over its processes on this GPU (first process of each pair
     * (pod, container) prints the sum; at most 64 processes, so quadratic is cheap). */
    on = family(b, om, "accel_container_gpu_memory_used_bytes", "gauge",
                "Device memory used on this GPU by all processes of one pod's container.");
    for (unsigned i = 0; i < e->ngpus && on; i++)
        for (size_t k = 0; k < ss[i].nprocs; k++) {
            const struct kube_cgroup_ref *pk = &ss[i].pods[k];
            bool first = pk->pod_uid[0] != '\0';
            uint64_t sum = 0;
            for (size_t j = 0; j < ss[i].nprocs && first; j++) {
                const struct kube_cgroup_ref *pj = &ss[i].pods[j];
                if (strcmp(pj->pod_uid, pk->pod_uid) || strcmp(pj->container_id, pk->container_id))
                    continue;
                if (j < k)
                    first = false;
                else if (ss[i].procs[j].used_memory_bytes != UINT64_MAX)
                    sum += ss[i].procs[j].used_memory_bytes;
            }
            if (first)
                buf_printf(b,
                           "accel_container_gpu_memory_used_bytes{%s,%s,pod_uid=\"%s\","
                           "container_id=\"%s\"} %" PRIu64 "\n",
                           l[i], name_labels(&ss[i], k, nl, sizeof nl), pk->pod_uid,
                           pk->container_id, sum);
        }

    render_pod_usage(e, b, om, ss, l);

    if (e->podres &&
        family(b, om, "accel_exporter_pod_resources_up", "gauge",
               "1 when the last List from the kubelet's pod-resources API succeeded, else 0."))
        buf_printf(b, "accel_exporter_pod_resources_up %d\n", e->podres_ok ? 1 : 0);
    if (family(b, om, "accel_exporter_samples_total", "counter", "Sampling rounds completed."))
        buf_printf(b, "accel_exporter_samples_total %" PRIu64 "\n", e->samples + 1);
    struct sli_ctx c = {b, om, e};
    struct exporter_sli_out out = {sli_family, sli_print, &c};
    exporter_extra_render(e->extra, &out);
    exporter_cost_render(e->cost, &out);
    if (e->sli)
        exporter_sli_render(e->sli, &out);
    if (e->vgpu) {
        struct exporter_vgpu_out vout = {sli_family, sli_print, vgpu_gpu_index, &c};
        exporter_vgpu_render(e->vgpu, &vout);
    }
    if (om)
        buf_printf(b, "# EOF\n");
#undef PER_GPU
#undef GAUGE
#undef COUNTER
}

static int vgpu_gpu_index(void *ctx, const char *uuid)
{
    const struct exporter *e = ((const struct sli_ctx *)ctx)->e;
    for (unsigned i = 0; i < e->ngpus; i++)
        if (!strcmp(e->gpus[i].uuid, uuid))
            return (int)i;
    return -1;
}

/* The status page's view of GPU i (containers summed over their processes, as in
 * accel_container_gpu_memory_used_bytes). */
static void fill_status(const struct exporter *e, unsigned i, const struct gpu_sample *s,
                        struct status_gpu *g)
{
    struct status_xids recent = g->xids;
    memset(g, 0, sizeof *g);
    g->xids = recent;
    g->index = i;
    snprintf(g->uuid, sizeof g->uuid, "%s", e->gpus[i].uuid);
    snprintf(g->name, sizeof g->name, "%s", e->gpus[i].name);
    g->util_ok = s->util_ok, g->utilization = s->util.gpu / 100.0;
    g->mem_ok = s->mem_ok, g->memory_used = s->mem.used, g->memory_total = s->mem.total;
    g->temp_ok = s->temp_ok, g->temperature = s->temp;
    g->power_ok = s->power_ok, g->power_watts = s->power_mw / 1000.0;
    g->ecc_ok = s->ecc_ok, g->ecc_uncorrected = s->ecc[1];
    g->remap_ok = s->remap_ok, g->remap_pending = s->remap[2], g->remap_failed = s->remap[3];
    g->reasons_ok = s->reasons_ok, g->clock_event_reasons = s->reasons;
    for (size_t k = 0; k < s->nprocs; k++) {
        const struct kube_cgroup_ref *pk = &s->pods[k];
        struct status_pod *p = NULL;
        if (!pk->pod_uid[0])
            continue;
        for (unsigned j = 0; j < g->npods && !p; j++)
            if (!strcmp(g->pods[j].pod_uid, pk->pod_uid) &&
                !strcmp(g->pods[j].container_id, pk->container_id))
                p = &g->pods[j];
        if (!p && g->npods == STATUS_MAX_PODS) {
            g->pods_dropped++;
            continue;
        }
        if (!p) {
            p = &g->pods[g->npods++];
            snprintf(p->pod_uid, sizeof p->pod_uid, "%s", pk->pod_uid);
            snprintf(p->container_id, sizeof p->container_id, "%s", pk->container_id);
            if (s->names[k]) {
                snprintf(p->namespace_, sizeof p->namespace_, "%s", s->names[k]->namespace_);
                snprintf(p->pod, sizeof p->pod, "%s", s->names[k]->pod);
                snprintf(p->container, sizeof p->container, "%s", s->names[k]->container);
            }
        }
        if (s->procs[k].used_memory_bytes != UINT64_MAX)
            p->memory_bytes += s->procs[k].used_memory_bytes;
    }
}

static void *sampler_main(void *arg)
{
    struct exporter *e = arg;
    static struct gpu_sample ss[EXP_MAX_GPUS];
    static struct exp_gpu xid_copy[EXP_MAX_GPUS];
    static struct exporter_cost_gpu cost_in[EXP_MAX_GPUS];
    bool alloc_warned = false; /* GetAllocatableResources failing was logged */
    bool podres_tried = false; /* a List was asked for: its first failure is logged too */
    while (!e->stop) {
        uint64_t t0 = mono_ns();
        for (unsigned i = 0; i < e->ngpus; i++) {
            sample_gpu(e, &e->gpus[i], &ss[i]);
            exporter_extra_sample(e->extra, e->nvml, i, e->gpus[i].dev, e->gpus[i].uuid,
                                  e->samples);
        }
        if (e->podres && t0 >= e->podres_next_ns) {
            int r = podres_list(e->podres_socket, EXP_PODRES_TIMEOUT_MS, e->podres);
            /* the replicas per GPU, for the shares (an older kubelet without the call: the
             * replicas' shares stay unknown, see docs/exporter.md "Cost per job") */
            int ra =
                r == 0 ? exporter_cost_allocatable(e->cost, e->podres_socket, EXP_PODRES_TIMEOUT_MS)
                       : 0;
            if (ra < 0 && !alloc_warned)
                log_warn("pod-resources GetAllocatableResources on %s failed (%s): the shares "
                         "of time-sliced and MPS replicas are unknown, so their GPU-seconds are "
                         "not counted",
                         e->podres_socket, strerror(-ra));
            alloc_warned = ra < 0;
            /* once per outage, the first one at start included (docs/exporter.md) */
            if (r < 0 && (e->podres_ok || !podres_tried))
                log_warn("pod-resources List on %s failed (%s): pod and container names are left "
                         "empty until it answers again",
                         e->podres_socket, strerror(-r));
            else if (r == 0 && !e->podres_ok && podres_tried)
                log_info("pod-resources List on %s answers again", e->podres_socket);
            podres_tried = true;
            e->podres_ok = r == 0;
            e->podres_next_ns = mono_ns() + EXP_PODRES_REFRESH_NS;
        }
        name_containers(e, ss);
        for (unsigned i = 0; i < e->ngpus; i++)
            cost_in[i] = (struct exporter_cost_gpu){
                e->gpus[i].uuid, e->gpus[i].dev, ss[i].energy_ok, ss[i].energy_mj,
                ss[i].nprocs,    ss[i].procs,    ss[i].names};
        exporter_cost_round(e->cost, e->nvml, cost_in, e->ngpus, e->podres_ok ? e->podres : NULL,
                            mono_ns());
        if (e->sli) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            exporter_sli_refresh(e->sli, (double)now.tv_sec + now.tv_nsec / 1e9);
        }
        if (e->vgpu)
            exporter_vgpu_refresh(e->vgpu);
        pthread_mutex_lock(&e->lock);
        for (unsigned i = 0; i < e->ngpus; i++) {
            memcpy(xid_copy[i].xids, e->gpus[i].xids, sizeof xid_copy[i].xids);
            e->status_back[i].xids = e->gpus[i].recent;
        }
        pthread_mutex_unlock(&e->lock);
        for (unsigned i = 0; i < e->ngpus; i++)
            fill_status(e, i, &ss[i], &e->status_back[i]);
        for (int f = 0; f < 2; f++) {
            e->back[f].len = 0;
            e->back[f].oom = false;
            render(e, &e->back[f], f == 1, ss, xid_copy);
        }
        pthread_mutex_lock(&e->lock);
        for (int f = 0; f < 2; f++) {
            if (e->back[f].oom)
                continue; /* keep serving the last good snapshot */
            struct exp_buf t = e->front[f];
            e->front[f] = e->back[f];
            e->back[f] = t;
        }
        struct status_gpu *st = e->status;
        e->status = e->status_back;
        e->status_back = st;
        e->status_time = time(NULL);
        e->samples++;
        pthread_mutex_unlock(&e->lock);
        uint64_t spent = mono_ns() - t0;
        uint64_t wait = spent < e->interval_ns ? e->interval_ns - spent : 0;
        /* sleep in short steps so a signal stops the exporter promptly */
        while (wait > 0 && !e->stop) {
            uint64_t step = wait > 100000000ULL ? 100000000ULL : wait;
            struct timespec ts = {(time_t)(step / 1000000000ULL), (long)(step % 1000000000ULL)};
            nanosleep(&ts, NULL);
            wait -= step;
        }
    }
    return NULL;
}

static void count_xid(struct exporter *e, nvmlDevice_t dev, unsigned xid)
{
    pthread_mutex_lock(&e->lock);
    for (unsigned i = 0; i < e->ngpus; i++) {
        if (e->gpus[i].dev != dev)
            continue;
        struct exp_xid *slot = NULL;
        for (unsigned k = 0; k < EXP_MAX_XIDS; k++) {
            struct exp_xid *x = &e->gpus[i].xids[k];
            if (x->xid == xid || !x->xid) {
                slot = x;
                break;
            }
        }
        status_note_xid(&e->gpus[i].recent, xid, time(NULL));
        if (!slot || xid == 0 || xid == UINT32_MAX) {
            slot = &e->gpus[i].xids[EXP_MAX_XIDS];
            xid = UINT32_MAX;
        }
        slot->xid = xid;
        slot->count++;
        break;
    }
    pthread_mutex_unlock(&e->lock);
}

static void *events_main(void *arg)
{
    struct exporter *e = arg;
    struct gpu_nvml *n = e->nvml;
    nvmlEventSet_t set = NULL;
    if (!NVML_OK(n->nvmlEventSetCreate(&set))) {
        log_warn("NVML event set could not be created: XID counters stay empty");
        return NULL;
    }
    unsigned registered = 0;
    for (unsigned i = 0; i < e->ngpus; i++)
        if (NVML_OK(
                n->nvmlDeviceRegisterEvents(e->gpus[i].dev, nvmlEventTypeXidCriticalError, set)))
            registered++;
    if (!registered)
        log_warn("no GPU accepted XID event registration: XID counters stay empty");
    while (registered && !e->stop) {
        nvmlEventData_t data;
        memset(&data, 0, sizeof data);
        nvmlReturn_t r = n->nvmlEventSetWait_v2(set, &data, 200);
        if (r == NVML_SUCCESS && (data.eventType & nvmlEventTypeXidCriticalError))
            count_xid(e, data.device, (unsigned)data.eventData);
        else if (r != NVML_SUCCESS && r != NVML_ERROR_TIMEOUT) {
            struct timespec ts = {0, 200000000L};
            nanosleep(&ts, NULL);
        }
    }
    n->nvmlEventSetFree(set);
    return NULL;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 const char *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* The status page: the last view copied out under the lock, rendered outside it. */
static enum MHD_Result send_status(struct exporter *e, struct MHD_Connection *c)
{
    size_t sz = (e->ngpus ? e->ngpus : 1) * sizeof(struct status_gpu);
    struct status_gpu *v = malloc(sz);
    char *page = NULL, host[256] = "";
    size_t len = 0;
    if (!v)
        return send_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain", "out of memory\n", 14);
    pthread_mutex_lock(&e->lock);
    bool ok = e->samples > 0;
    memcpy(v, e->status, e->ngpus * sizeof *v);
    time_t when = e->status_time;
    pthread_mutex_unlock(&e->lock);
    if (!ok) {
        free(v);
        return send_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain", "no sample yet\n", 14);
    }
    gethostname(host, sizeof host - 1);
    FILE *f = open_memstream(&page, &len);
    int r = f ? status_render(f, v, e->ngpus, host, e->driver, when) : -1;
    if (f && fclose(f) != 0)
        r = -1;
    free(v);
    if (r < 0) {
        free(page);
        return send_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain", "out of memory\n", 14);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, page, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(page);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/html; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **req_cls)
{
    struct exporter *e = cls;
    exporter_httpguard_headers_done(c); /* the request line and headers are in */
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "use GET\n", 8);
    if (strcmp(url, "/healthz") == 0) {
        pthread_mutex_lock(&e->lock);
        bool ok = e->samples > 0;
        pthread_mutex_unlock(&e->lock);
        return ok ? send_text(c, MHD_HTTP_OK, "text/plain", "ok\n", 3)
                  : send_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain", "no sample yet\n", 14);
    }
    if (strcmp(url, "/metrics") == 0) {
        const char *acc = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
        int f = acc && strstr(acc, "application/openmetrics-text") ? 1 : 0;
        const char *ctype = f ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                              : "text/plain; version=0.0.4; charset=utf-8";
        pthread_mutex_lock(&e->lock);
        if (!e->samples) {
            pthread_mutex_unlock(&e->lock);
            return send_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                             "no sample yet; retry in a second\n", 33);
        }
        enum MHD_Result r = send_text(c, MHD_HTTP_OK, ctype, e->front[f].p, e->front[f].len);
        pthread_mutex_unlock(&e->lock);
        return r;
    }
    if (strcmp(url, "/") == 0)
        return send_status(e, c);
    static const char nf[] = "not found: try /, /metrics or /healthz\n";
    return send_text(c, MHD_HTTP_NOT_FOUND, "text/plain", nf, sizeof nf - 1);
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: accel-exporter [--config FILE] [--listen ADDR:PORT] [--nvml-library PATH]\n"
        "                      [--interval DURATION] [--proc-root DIR]\n"
        "                      [--pod-resources-socket PATH] [--state-dir DIR]\n"
        "                      [--disable-metrics NAMES] [--cost-currency CUR]\n"
        "                      [--cost-gpu-hour-price RESOURCE=PRICE,...]\n"
        "                      [--connection-limit N] [--per-ip-connection-limit N]\n"
        "                      [--request-header-timeout DURATION] [--idle-timeout DURATION]\n"
        "                      [--log-level LEVEL] [--check-config] [--version]\n"
        "  --config        YAML settings (keys as below, camelCase); flags win over it\n"
        "  --listen        address to serve /, /metrics and /healthz on (default 0.0.0.0:9835)\n"
        "  --nvml-library  NVML to load (default $%s, else %s)\n"
        "  --interval      sampling period, e.g. 1s or 250ms (default 1s)\n"
        "  --proc-root     where /proc is, for the PID -> pod mapping (default /proc)\n"
        "  --pod-resources-socket  the kubelet's pod-resources API, for namespace, pod and\n"
        "                  container names (default %s; \"\" turns it off)\n"
        "  --state-dir     acceld's state directory: its SLIs from acceld-stats.json\n"
        "                  (accel_agent_*) and vGPU usage regions (accel_vgpu_*;\n"
        "                  default \"\": off)\n"
        "  --disable-metrics  metric families not to serve, comma-separated (config:\n"
        "                  metrics.disable)\n"
        "  --cost-currency CUR  the currency of the price table (config: cost.currency)\n"
        "  --cost-gpu-hour-price RESOURCE=PRICE,...  price of a GPU-hour per resource\n"
        "                  (config: cost.gpuHourPrice); adds accel_pod_gpu_cost_total\n"
        "  --connection-limit N  HTTP connections served at once (default %u)\n"
        "  --per-ip-connection-limit N  of them from one address, 0 = any (default %u)\n"
        "  --request-header-timeout DURATION  a request's line and headers must arrive\n"
        "                  within it, or the connection is closed (default 5s)\n"
        "  --idle-timeout DURATION  a silent connection is closed after it (default 10s)\n"
        "  --log-level     error, warn, info or debug\n"
        "  --check-config  print the settings (file and flags) as YAML and exit: 0 when\n"
        "                  valid, 2 with the reason otherwise\n"
        "  --version       print the version and exit\n",
        GPU_NVML_LIBRARY_ENV, GPU_NVML_DEFAULT_LIBRARY, EXPORTER_DEFAULT_PODRES,
        EXPORTER_DEFAULT_CONNECTION_LIMIT, EXPORTER_DEFAULT_PER_IP_LIMIT);
}

/* Flags and the config keys they set. */
static const struct {
    const char *flag, *key;
} exp_flags[] = {
    {"--listen", "listen"},
    {"--interval", "interval"},
    {"--nvml-library", "nvmlLibrary"},
    {"--proc-root", "procRoot"},
    {"--pod-resources-socket", "podResourcesSocket"},
    {"--state-dir", "stateDir"},
    {"--log-level", "logLevel"},
    {"--disable-metrics", "metrics.disable"},
    {"--cost-currency", "cost.currency"},
    {"--cost-gpu-hour-price", "cost.gpuHourPrice"},
    {"--connection-limit", "connectionLimit"},
    {"--per-ip-connection-limit", "perIpConnectionLimit"},
    {"--request-header-timeout", "requestHeaderTimeout"},
    {"--idle-timeout", "idleTimeout"},
};

int main(int argc, char **argv)
{
    static struct exporter_config cfg;
    char err[512];
    const char *config_path = NULL;
    bool check_config = false;
    log_set_ident("accel-exporter");
    exporter_config_defaults(&cfg);
    /* the config file first, whatever the order: flags override it */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("accel-exporter %s\n", ACCEL_VERSION);
            return 0;
        }
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config_path = argv[++i];
    }
    if (config_path && exporter_config_load(&cfg, config_path, err, sizeof err) < 0) {
        fprintf(stderr, "accel-exporter: %s\n", err);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *key = NULL;
        for (size_t k = 0; k < sizeof exp_flags / sizeof exp_flags[0] && !key; k++)
            if (strcmp(a, exp_flags[k].flag) == 0)
                key = exp_flags[k].key;
        if (strcmp(a, "--check-config") == 0) {
            check_config = true;
            continue;
        }
        if (!key && strcmp(a, "--config") != 0) {
            fprintf(stderr, "accel-exporter: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "accel-exporter: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (key && exporter_config_set(&cfg, key, v, err, sizeof err) < 0) {
            fprintf(stderr, "accel-exporter: %s: %s\n", a, err);
            return 2;
        }
    }
    if (exporter_config_check(&cfg, err, sizeof err) < 0) {
        fprintf(stderr, "accel-exporter: %s\n", err);
        return 2;
    }
    if (cfg.log_level[0]) {
        enum log_level lv;
        if (log_level_parse(cfg.log_level, &lv) == 0)
            log_set_level(lv);
    }
    exp_cfg = &cfg;
    const char *listen_s = cfg.listen, *lib = cfg.nvml_library[0] ? cfg.nvml_library : NULL;
    const char *proc_root = cfg.proc_root, *podres_socket = cfg.pod_resources_socket;
    uint64_t interval_ns = cfg.interval_ns;
    struct sockaddr_in sa;
    if (exporter_parse_listen(listen_s, &sa) < 0) {
        fprintf(stderr,
                "accel-exporter: bad --listen %s: give IPv4ADDR:PORT, e.g. 127.0.0.1:9835\n",
                listen_s);
        return 2;
    }
    if (check_config)
        return exporter_config_write(stdout, &cfg) == 0 && fflush(stdout) == 0 ? 0 : 1;

    static struct exporter e;
    e.interval_ns = interval_ns;
    e.proc_root = proc_root;
    if (*podres_socket) {
        e.podres_socket = podres_socket;
        e.podres = calloc(1, sizeof *e.podres);
        if (!e.podres) {
            log_error("out of memory");
            return 1;
        }
    }
    if (cfg.state_dir[0] && (exporter_sli_new(cfg.state_dir, &e.sli) < 0 ||
                             exporter_vgpu_new(cfg.state_dir, &e.vgpu) < 0)) {
        log_error("out of memory");
        return 1;
    }
    pthread_mutex_init(&e.lock, NULL);
    int r = gpu_nvml_open(lib, &e.nvml, err, sizeof err);
    if (r < 0) {
        log_error("%s", err);
        return 1;
    }
    unsigned n = 0;
    if (!NVML_OK(e.nvml->nvmlDeviceGetCount_v2(&n))) {
        log_error("nvmlDeviceGetCount failed; check that the NVIDIA driver is loaded");
        return 1;
    }
    if (n > EXP_MAX_GPUS)
        n = EXP_MAX_GPUS;
    if (e.nvml->nvmlSystemGetDriverVersion)
        e.nvml->nvmlSystemGetDriverVersion(e.driver, sizeof e.driver);
    if (e.nvml->nvmlSystemGetCudaDriverVersion_v2)
        e.nvml->nvmlSystemGetCudaDriverVersion_v2(&e.cuda_version);
    for (unsigned i = 0; i < n; i++) {
        struct exp_gpu *g = &e.gpus[e.ngpus];
        if (!NVML_OK(e.nvml->nvmlDeviceGetHandleByIndex_v2(i, &g->dev))) {
            log_warn("GPU %u: no NVML handle; it is left out", i);
            continue;
        }
        if (e.nvml->nvmlDeviceGetUUID)
            e.nvml->nvmlDeviceGetUUID(g->dev, g->uuid, sizeof g->uuid);
        if (e.nvml->nvmlDeviceGetName)
            e.nvml->nvmlDeviceGetName(g->dev, g->name, sizeof g->name);
        if (e.nvml->nvmlDeviceGetVbiosVersion)
            e.nvml->nvmlDeviceGetVbiosVersion(g->dev, g->vbios, sizeof g->vbios);
        e.ngpus++;
    }
    if (exporter_cost_new(&cfg, e.ngpus, &e.cost) < 0 ||
        exporter_cost_set_state_dir(e.cost, cfg.state_dir) < 0 ||
        exporter_extra_new(e.ngpus, &e.extra) < 0) {
        log_error("out of memory");
        return 1;
    }
    e.status = calloc(e.ngpus ? e.ngpus : 1, sizeof *e.status);
    e.status_back = calloc(e.ngpus ? e.ngpus : 1, sizeof *e.status_back);
    if (!e.status || !e.status_back) {
        log_error("out of memory");
        return 1;
    }

    /* Block the stop signals in every thread; main waits for them with sigwait. */
    sigset_t stopset;
    sigemptyset(&stopset);
    sigaddset(&stopset, SIGTERM);
    sigaddset(&stopset, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stopset, NULL);

    pthread_t sampler, events;
    bool have_events = e.nvml->nvmlEventSetCreate && e.nvml->nvmlDeviceRegisterEvents &&
                       e.nvml->nvmlEventSetWait_v2 && e.nvml->nvmlEventSetFree;
    if (pthread_create(&sampler, NULL, sampler_main, &e) != 0) {
        log_error("cannot start the sampler thread");
        return 1;
    }
    if (have_events && pthread_create(&events, NULL, events_main, &e) != 0)
        have_events = false;

    /* The daemon runs in this thread (MHD_run_wait), so that between its runs the guard can
     * shut connections whose headers are overdue without racing libmicrohttpd's own closes
     * (httpguard.h); slow clients cannot hold it: every socket waits in one epoll set. */
    struct exporter_httpguard *guard = NULL;
    if (exporter_httpguard_new(cfg.header_timeout_ns, &guard) < 0) {
        log_error("out of memory");
        e.stop = 1;
    }
    struct MHD_Daemon *d =
        guard ? MHD_start_daemon(MHD_USE_AUTO | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, &e,
                                 MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_CONNECTION_LIMIT,
                                 cfg.connection_limit, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                                 cfg.per_ip_connection_limit, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)(cfg.idle_timeout_ns / 1000000000ULL),
                                 MHD_OPTION_NOTIFY_CONNECTION, exporter_httpguard_on_connection,
                                 guard, MHD_OPTION_NOTIFY_COMPLETED,
                                 exporter_httpguard_on_completed, guard, MHD_OPTION_END)
              : NULL;
    if (!d) {
        if (guard)
            log_error("cannot listen on %s: is the port in use or the address not local?",
                      listen_s);
        e.stop = 1;
    } else {
        log_info("serving %u GPU(s) on http://%s/metrics", e.ngpus, listen_s);
        uint64_t said_ns = 0, said_total = 0, checked_ns = 0;
        const struct timespec no_wait = {0, 0};
        for (;;) {
            MHD_run_wait(d, 100);
            /* the deadline and the stop signals at most every 50 ms, not after every event */
            uint64_t now = mono_ns();
            if (now - checked_ns < 50000000ULL)
                continue;
            checked_ns = now;
            if (sigtimedwait(&stopset, NULL, &no_wait) >= 0)
                break;
            exporter_httpguard_cut(guard, now);
            /* say it, at most once a minute: something holds connections open without asking */
            uint64_t total = exporter_httpguard_cut_total(guard);
            if (total != said_total && now - said_ns >= 60000000000ULL) {
                log_warn("closed %" PRIu64 " connection(s) whose request headers took longer "
                         "than %" PRIu64 " ms (%u open now); see requestHeaderTimeout in "
                         "docs/exporter.md",
                         total - said_total, cfg.header_timeout_ns / 1000000,
                         exporter_httpguard_open(guard));
                said_total = total;
                said_ns = now;
            }
        }
        MHD_stop_daemon(d);
    }
    guard = exporter_httpguard_free(guard);
    e.stop = 1;
    pthread_join(sampler, NULL);
    if (have_events)
        pthread_join(events, NULL);
    for (int f = 0; f < 2; f++) {
        free(e.front[f].p);
        free(e.back[f].p);
    }
    gpu_nvml_free(e.nvml);
    free(e.podres);
    e.sli = exporter_sli_free(e.sli);
    e.vgpu = exporter_vgpu_free(e.vgpu);
    e.cost = exporter_cost_free(e.cost);
    e.extra = exporter_extra_free(e.extra);
    free(e.status);
    free(e.status_back);
    return d ? 0 : 1;
}
