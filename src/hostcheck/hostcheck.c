/* hostcheck.c — the host-side check: NVML's per-process memory grouped by pod and GPU
 * against the targets' quotas, processes on GPUs their pod was not given, the region audit,
 * and the compute share over a sliding window with its duty cycle; see hostcheck.h. */
#include "hostcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "cgroup.h"
#include "util.h"

struct proc_info {
    unsigned pid;
    uint64_t used;
    uint32_t ns_pid;     /* the pid in its own namespace (the region's) */
    int target;          /* its group's first target, -1: none on this GPU */
    uint64_t unreported; /* bytes above what its slot says (0: none) */
    int exact;           /* the target of its own container (runtime id), -1: unknown */
};

/* The pid as the container sees it: the last NSpid of <root>/<pid>/status,
 * or the host pid when the file says nothing (a fake /proc in tests). */
static uint32_t ns_pid(const char *root, unsigned pid)
{
    char path[4096], buf[4096];
    snprintf(path, sizeof(path), "%s/%u/status", root ? root : "/proc", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pid;
    ssize_t len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0)
        return pid;
    buf[len] = '\0';
    const char *p = strstr(buf, "\nNSpid:");
    if (!p)
        return pid;
    p += 7;
    unsigned long last = pid, v;
    int used;
    while (sscanf(p, " %lu%n", &v, &used) == 1) {
        last = v;
        p += used;
        if (*p == '\n' || *p == '\0')
            break;
    }
    return (uint32_t)last;
}

static bool same_group(const struct hostcheck_target *a, const struct hostcheck_target *b)
{
    return strcmp(a->pod_uid, b->pod_uid) == 0 && strcmp(a->gpu_uuid, b->gpu_uuid) == 0;
}

/* The first checked (not whole) target of pod_uid on GPU uuid, or -1. */
static int first_of_group(const struct hostcheck_target *t, size_t n, const char *pod_uid,
                          const char *uuid)
{
    for (size_t i = 0; i < n; i++)
        if (!t[i].whole && strcmp(t[i].pod_uid, pod_uid) == 0 && strcmp(t[i].gpu_uuid, uuid) == 0)
            return (int)i;
    return -1;
}

/* The target of pod_uid's container whose runtime id is cid among the targets (any GPU),
 * else the pod's first target; -1: the pod has none. */
static int pod_target(const struct hostcheck_target *t, size_t n, const char *pod_uid,
                      const char *cid)
{
    int first = -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(t[i].pod_uid, pod_uid) != 0)
            continue;
        if (cid && cid[0] && t[i].container_id && strcmp(t[i].container_id, cid) == 0)
            return (int)i;
        if (first < 0)
            first = (int)i;
    }
    return first;
}

/* Whether some target (whole GPUs included) gives GPU uuid to pod_uid. */
static bool assigned(const struct hostcheck_target *t, size_t n, const char *pod_uid,
                     const char *uuid)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].pod_uid, pod_uid) == 0 && strcmp(t[i].gpu_uuid, uuid) == 0)
            return true;
    return false;
}

static struct hostcheck_finding finding(enum hostcheck_kind kind, size_t ti, unsigned pid,
                                        uint64_t used, uint64_t limit, const char *gpu)
{
    struct hostcheck_finding f = {
        .kind = kind, .target = ti, .pid = pid, .used = used, .limit = limit, .slot = -1};
    snprintf(f.gpu, sizeof(f.gpu), "%s", gpu ? gpu : "");
    return f;
}

static void add(struct hostcheck_finding *ret, size_t max, size_t *n, struct hostcheck_finding f)
{
    if (*n < max)
        ret[*n] = f;
    (*n)++;
}

/* Audits the region of target ti against the processes NVML sees of its container (or of
 * its group, where containers cannot be told apart). The region is read as the tenant's: a
 * region that cannot be read audits as an empty one (each process has no slot), and one that
 * is not a region while processes run is a finding of its own. */
static void audit(const struct hostcheck_target *t, size_t ti, struct proc_info *p, size_t np,
                  struct hostcheck_usage *usage, struct hostcheck_finding *ret, size_t max,
                  size_t *nf)
{
    if (!t[ti].region_dir)
        return;
    struct vc_audit_proc ap[GPU_NVML_MAX_PROCS];
    size_t map[GPU_NVML_MAX_PROCS], k = 0;
    for (size_t i = 0; i < np; i++)
        if ((p[i].exact >= 0 ? p[i].exact : p[i].target) == (int)ti) {
            ap[k] = (struct vc_audit_proc){p[i].ns_pid, p[i].used};
            map[k++] = i;
        }
    struct hostcheck_region reg = {0};
    int rr = hostcheck_region_read(t[ti].region_dir, &reg);
    struct vc_audit_finding af[GPU_NVML_MAX_PROCS];
    int m = 0;
    if (rr == 0) {
        if (usage) {
            usage[ti].region_ok = true;
            usage[ti].region_bytes = vc_region_used(&reg.view, t[ti].region_dev);
        }
        m = vc_region_audit(&reg.view, t[ti].region_dev, ap, k, HOSTCHECK_SLACK, af, k);
        hostcheck_region_free(&reg);
    } else {
        for (size_t i = 0; i < k; i++)
            if (ap[i].used_bytes > HOSTCHECK_SLACK)
                af[m++] = (struct vc_audit_finding){ap[i].pid, -1, 0, ap[i].used_bytes};
        if (k && rr != -ENOENT && rr != -EAGAIN) {
            struct hostcheck_finding f =
                finding(HOSTCHECK_REGION_BAD, ti, p[map[0]].pid, 0, 0, t[ti].gpu_uuid);
            f.region_errno = -rr;
            add(ret, max, nf, f);
        }
    }
    for (int j = 0; j < m && (size_t)j < k; j++) {
        for (size_t i = 0; i < k; i++) {
            if (ap[i].pid != af[j].pid)
                continue;
            struct proc_info *pi = &p[map[i]];
            pi->unreported = af[j].nvml_bytes - af[j].region_bytes;
            struct hostcheck_finding f =
                finding(HOSTCHECK_UNDER_REPORT, ti, pi->pid, af[j].nvml_bytes, af[j].region_bytes,
                        t[ti].gpu_uuid);
            f.slot = af[j].slot;
            add(ret, max, nf, f);
            break;
        }
    }
}

/* Whether process i is a worse offender than process w (-1: none yet): the one its region
 * under-reports the most (a bypassing process first), else the larger. */
static bool worse(const struct proc_info *p, size_t i, int w)
{
    return w < 0 || p[i].unreported > p[w].unreported ||
           (p[i].unreported == p[w].unreported && p[i].used > p[w].used);
}

/* An over-quota finding on target ti, with the configured action on pid. */
static void punish(const struct hostcheck_options *o, struct hostcheck_finding *ret, size_t max,
                   size_t *nf, enum hostcheck_kind kind, size_t ti, unsigned pid, uint64_t used,
                   uint64_t limit, const char *gpu)
{
    struct hostcheck_finding f = finding(kind, ti, pid, used, limit, gpu);
    if (o->action == HOSTCHECK_ACTION_KILL) {
        if (kill((pid_t)pid, SIGKILL) == 0)
            f.killed = true;
        else
            f.kill_errno = errno;
    }
    add(ret, max, nf, f);
}

static int check_gpu(struct gpu_nvml *nvml, const char *uuid, const struct hostcheck_target *t,
                     size_t n, const struct hostcheck_options *o, struct hostcheck_finding *ret,
                     size_t max, size_t *nf)
{
    if (!nvml->nvmlDeviceGetHandleByUUID)
        return -EOPNOTSUPP;
    nvmlDevice_t dev;
    nvmlReturn_t nr = nvml->nvmlDeviceGetHandleByUUID(uuid, &dev);
    if (nr != NVML_SUCCESS)
        return gpu_nvml_errno(nr);
    struct gpu_process gp[GPU_NVML_MAX_PROCS];
    size_t np = 0;
    int r = gpu_nvml_running_processes(nvml, dev, gp, GPU_NVML_MAX_PROCS, &np);
    if (r < 0)
        return r;
    struct proc_info p[GPU_NVML_MAX_PROCS];
    for (size_t i = 0; i < np; i++) {
        p[i] = (struct proc_info){gp[i].pid, gp[i].used_memory_bytes, 0, -1, 0, -1};
        struct kube_cgroup_ref ref;
        if (gp[i].used_memory_bytes == UINT64_MAX ||
            kube_cgroup_read(o->proc_root, (pid_t)gp[i].pid, &ref) < 0)
            continue; /* a host process, gone, or unreadable: not a tenant's */
        p[i].target = first_of_group(t, n, ref.pod_uid, uuid);
        p[i].ns_pid = ns_pid(o->proc_root, gp[i].pid);
        for (size_t j = 0; ref.container_id[0] && p[i].target >= 0 && j < n; j++)
            if (!t[j].whole && t[j].container_id &&
                strcmp(t[j].container_id, ref.container_id) == 0 &&
                same_group(&t[j], &t[p[i].target]))
                p[i].exact = (int)j;
    }
    for (size_t ti = 0; ti < n; ti++)
        if (!t[ti].whole && strcmp(t[ti].gpu_uuid, uuid) == 0)
            audit(t, ti, p, np, o->usage, ret, max, nf);
    /* Per container first, where the cgroup names a container whose runtime id the target
     * knows; then per group (pod and GPU) for what cannot be told apart, one finding per
     * group at most. */
    for (size_t ti = 0; ti < n; ti++) {
        if (strcmp(t[ti].gpu_uuid, uuid) != 0 ||
            first_of_group(t, n, t[ti].pod_uid, uuid) != (int)ti)
            continue;
        bool found = false;
        uint64_t limit = 0, used = 0;
        unsigned procs = 0;
        int worst = -1;
        for (size_t j = ti; j < n; j++) {
            if (t[j].whole || !same_group(&t[ti], &t[j]))
                continue;
            limit += t[j].memory_limit;
            if (!t[j].container_id || !t[j].container_id[0])
                continue;
            uint64_t cu = 0, cl = t[j].memory_limit;
            unsigned cp = 0;
            int cw = -1;
            for (size_t i = 0; i < np; i++) {
                if (p[i].exact != (int)j)
                    continue;
                cu += p[i].used;
                cl += HOSTCHECK_SLACK;
                cp++;
                if (worse(p, i, cw))
                    cw = (int)i;
            }
            if (o->usage) {
                o->usage[j].nvml_bytes = cu;
                o->usage[j].nvml_procs = cp;
            }
            if (cw >= 0 && cu > cl) {
                punish(o, ret, max, nf, HOSTCHECK_OVER_QUOTA, j, p[cw].pid, cu, cl, uuid);
                found = true;
            }
        }
        for (size_t i = 0; i < np; i++) {
            if (p[i].target != (int)ti)
                continue;
            used += p[i].used;
            limit += HOSTCHECK_SLACK;
            procs++;
            if (worse(p, i, worst))
                worst = (int)i;
        }
        for (size_t j = ti; o->usage && j < n; j++)
            if (!t[j].whole && same_group(&t[ti], &t[j]) &&
                (!t[j].container_id || !t[j].container_id[0])) {
                o->usage[j].nvml_bytes = used;
                o->usage[j].nvml_procs = procs;
            }
        if (found || worst < 0 || used <= limit)
            continue;
        punish(o, ret, max, nf, HOSTCHECK_OVER_QUOTA,
               p[worst].exact >= 0 ? (size_t)p[worst].exact : ti, p[worst].pid, used, limit, uuid);
    }
    return 0;
}

/* ------------------------------------------------------------ compute */

#define STATE_GPUS 64
#define STATE_GROUPS 1024
#define STATE_CYCLES 256

/* A strike key: "<pod uid>/<container>/<gpu uuid>" for a container its
 * processes are known by (runtime id), "<pod uid>//<gpu uuid>" for the pod's
 * processes on that GPU as a whole. */
#define KEY_MAX 400

struct hostcheck_state {
    struct {
        char uuid[96];
        unsigned long long last_us; /* NVML's last sample time seen */
    } gpu[STATE_GPUS];
    /* per key: its utilization in its last HOSTCHECK_COMPUTE_WINDOW passes with samples */
    struct window {
        char key[KEY_MAX];
        uint8_t util[HOSTCHECK_COMPUTE_WINDOW]; /* %, a ring */
        uint8_t n, next;
        bool seen; /* in this pass */
    } group[STATE_GROUPS];
    /* Duty cycles: a cgroup frozen duty_pm per mille of every period_ms. */
    struct cycle {
        char key[KEY_MAX];
        char path[4200]; /* its cgroup.freeze */
        unsigned duty_pm;
        uint64_t period_ms;
        bool frozen;
        uint64_t next_ms; /* when it toggles next */
        bool seen;        /* its key was judged in this pass */
    } cycle[STATE_CYCLES];
};

int hostcheck_state_new(struct hostcheck_state **ret)
{
    *ret = calloc(1, sizeof(**ret));
    return *ret ? 0 : -ENOMEM;
}

static int write_freeze(const char *path, const char *v)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    int r = write(fd, v, 1) == 1 ? 0 : -errno;
    close(fd);
    return r;
}

static void cycle_end(struct cycle *c)
{
    if (c->frozen)
        write_freeze(c->path, "0"); /* a cgroup gone with its container: nothing */
    c->key[0] = '\0';
    c->path[0] = '\0';
}

uint64_t hostcheck_cycle(struct hostcheck_state *s, uint64_t now_ms)
{
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; s && i < STATE_CYCLES; i++) {
        struct cycle *c = &s->cycle[i];
        if (!c->key[0])
            continue;
        if (c->next_ms <= now_ms) {
            c->frozen = !c->frozen;
            write_freeze(c->path, c->frozen ? "1" : "0");
            uint64_t span = c->period_ms * (c->frozen ? c->duty_pm : 1000 - c->duty_pm) / 1000;
            c->next_ms = now_ms + (span ? span : 1);
        }
        if (c->next_ms < next)
            next = c->next_ms;
    }
    return next;
}

size_t hostcheck_cycling(const struct hostcheck_state *s)
{
    size_t n = 0;
    for (size_t i = 0; s && i < STATE_CYCLES; i++)
        n += s->cycle[i].key[0] != '\0';
    return n;
}

struct hostcheck_state *hostcheck_state_free(struct hostcheck_state *s)
{
    for (size_t i = 0; s && i < STATE_CYCLES; i++)
        if (s->cycle[i].key[0])
            cycle_end(&s->cycle[i]);
    free(s);
    return NULL;
}

static unsigned long long *last_seen(struct hostcheck_state *s, const char *uuid)
{
    size_t free_i = STATE_GPUS;
    for (size_t i = 0; i < STATE_GPUS; i++) {
        if (strcmp(s->gpu[i].uuid, uuid) == 0)
            return &s->gpu[i].last_us;
        if (!s->gpu[i].uuid[0] && free_i == STATE_GPUS)
            free_i = i;
    }
    if (free_i == STATE_GPUS)
        return NULL;
    snprintf(s->gpu[free_i].uuid, sizeof(s->gpu[free_i].uuid), "%s", uuid);
    return &s->gpu[free_i].last_us;
}

static void strike_key(char *key, const struct hostcheck_target *t, bool container)
{
    snprintf(key, KEY_MAX, "%s/%s/%s", t->pod_uid, container ? t->container : "", t->gpu_uuid);
}

/* The key's window (created empty), or NULL when the table is full. */
static struct window *window_of(struct hostcheck_state *s, const char *key)
{
    size_t free_i = STATE_GROUPS;
    for (size_t i = 0; i < STATE_GROUPS; i++) {
        if (strcmp(s->group[i].key, key) == 0) {
            s->group[i].seen = true;
            return &s->group[i];
        }
        if (!s->group[i].key[0] && free_i == STATE_GROUPS)
            free_i = i;
    }
    if (free_i == STATE_GROUPS)
        return NULL;
    struct window *w = &s->group[free_i];
    *w = (struct window){.seen = true};
    snprintf(w->key, sizeof(w->key), "%s", key);
    return w;
}

/* Adds one pass's utilization; returns the window's mean, and how many passes it holds. */
static uint64_t window_push(struct window *w, uint64_t util, unsigned *ret_n)
{
    w->util[w->next] = (uint8_t)(util > 255 ? 255 : util);
    w->next = (uint8_t)((w->next + 1) % HOSTCHECK_COMPUTE_WINDOW);
    if (w->n < HOSTCHECK_COMPUTE_WINDOW)
        w->n++;
    uint64_t sum = 0;
    for (unsigned i = 0; i < w->n; i++)
        sum += w->util[(w->next + HOSTCHECK_COMPUTE_WINDOW - 1 - i) % HOSTCHECK_COMPUTE_WINDOW];
    *ret_n = w->n;
    return sum / w->n;
}

static void window_clear(struct window *w)
{
    if (w)
        w->n = w->next = 0;
}

static struct cycle *cycle_of(struct hostcheck_state *s, const char *key)
{
    for (size_t i = 0; i < STATE_CYCLES; i++)
        if (s->cycle[i].key[0] && strcmp(s->cycle[i].key, key) == 0)
            return &s->cycle[i];
    return NULL;
}

/* <cgroup_root><the process's cgroup v2 path>/cgroup.freeze, from
 * <proc_root>/<pid>/cgroup's "0::" line. Returns 0 or -errno (-ENOENT: no v2
 * line, -EINVAL: a path with "..", which no real cgroup has). */
static int freeze_path(const struct hostcheck_options *o, unsigned pid, char *buf, size_t len)
{
    char path[4096], text[8192];
    snprintf(path, sizeof(path), "%s/%u/cgroup", o->proc_root ? o->proc_root : "/proc", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0)
        return -ENOENT;
    text[n] = '\0';
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (strncmp(l, "0::/", 4) != 0)
            continue;
        if (strstr(l, "/..") || strlen(l + 3) < 2)
            return -EINVAL;
        int k = snprintf(buf, len, "%s%s/cgroup.freeze",
                         o->cgroup_root ? o->cgroup_root : "/sys/fs/cgroup", l + 3);
        return k > 0 && (size_t)k < len ? 0 : -ENAMETOOLONG;
    }
    return -ENOENT;
}

/* The share of each period a cgroup must spend frozen for util (its SM
 * utilization, %, measured while frozen duty_pm of the time) to come down
 * to cores: its utilization when free is util / (1 - duty), at most 100. */
static unsigned duty_for(uint64_t util, uint64_t cores, unsigned duty_pm)
{
    uint64_t free_util = util * 1000 / (1000 - duty_pm);
    if (free_util > 100)
        free_util = 100;
    if (free_util <= cores)
        return 0;
    uint64_t d = 1000 - cores * 1000 / free_util;
    return d > HOSTCHECK_MAX_DUTY_PM ? HOSTCHECK_MAX_DUTY_PM : (unsigned)d;
}

/* Starts duty-cycling the cgroup of f->pid under key: frozen now, for duty of
 * each hostcheck_options.freeze_ms. */
static void cycle_start(struct hostcheck_state *s, const struct hostcheck_options *o,
                        const char *key, unsigned duty_pm, struct hostcheck_finding *f)
{
    char path[4200];
    int r = freeze_path(o, f->pid, path, sizeof(path));
    for (size_t i = 0; r == 0 && i < STATE_CYCLES; i++)
        if (s->cycle[i].key[0] && strcmp(s->cycle[i].path, path) == 0) {
            /* cycled already under its container's (or its pod's) key */
            f->frozen = true;
            f->duty_pm = s->cycle[i].duty_pm;
            return;
        }
    struct cycle *c = NULL;
    for (size_t i = 0; r == 0 && i < STATE_CYCLES && !c; i++)
        if (!s->cycle[i].key[0])
            c = &s->cycle[i];
    if (r == 0 && !c)
        r = -ENOSPC; /* no room to remember the thaw: do not freeze */
    if (r == 0)
        r = write_freeze(path, "1");
    if (r < 0) {
        f->freeze_errno = -r;
        return;
    }
    snprintf(c->key, sizeof(c->key), "%s", key);
    snprintf(c->path, sizeof(c->path), "%s", path);
    c->duty_pm = duty_pm;
    c->period_ms = o->freeze_ms ? o->freeze_ms : 1000;
    c->frozen = true;
    c->next_ms = o->now_ms + c->period_ms * duty_pm / 1000;
    c->seen = true;
    f->frozen = true;
    f->duty_pm = duty_pm;
}

/* One judgement of key's util (%) against its cores: the window, a finding once the mean of
 * its last HOSTCHECK_COMPUTE_WINDOW passes is over the share (with at least
 * HOSTCHECK_COMPUTE_STRIKES passes in it), and its duty cycle (started by a finding under
 * HOSTCHECK_COMPUTE_FREEZE; adjusted every pass from what it measured; ended once the cgroup
 * would stay within its share unfrozen). Returns whether a finding was made. */
static bool judge(struct hostcheck_state *s, const struct hostcheck_options *o, const char *key,
                  size_t ti, unsigned pid, uint64_t util, uint64_t cores, const char *gpu,
                  struct hostcheck_finding *ret, size_t max, size_t *nf)
{
    struct cycle *c = cycle_of(s, key);
    if (c) {
        c->seen = true;
        unsigned d = duty_for(util, cores, c->duty_pm);
        if (!d)
            cycle_end(c);
        else
            c->duty_pm = d;
    }
    struct window *w = window_of(s, key);
    if (!w || cores == 0)
        return false;
    unsigned passes;
    uint64_t mean = window_push(w, util, &passes);
    if (passes < HOSTCHECK_COMPUTE_STRIKES || mean <= cores + HOSTCHECK_COMPUTE_TOLERANCE)
        return false;
    window_clear(w); /* the next finding takes as many passes again */
    struct hostcheck_finding f = finding(HOSTCHECK_OVER_SHARE, ti, pid, mean, cores, gpu);
    c = cycle_of(s, key);
    if (c) { /* cycling already, at the most it may: say so */
        f.frozen = true;
        f.duty_pm = c->duty_pm;
    } else if (o->compute_action == HOSTCHECK_COMPUTE_FREEZE) {
        cycle_start(s, o, key, duty_for(util, cores, 0), &f);
    }
    add(ret, max, nf, f);
    return true;
}

/* The compute check of one GPU: the samples since the last pass, averaged
 * per process, summed per container where the process's cgroup names a
 * container the targets know by runtime id, and per pod and GPU for all of
 * the pod's processes there (a finding per pod only where no container of it
 * had one), against the cores. */
static int check_compute(struct gpu_nvml *nvml, const char *uuid, const struct hostcheck_target *t,
                         size_t n, const struct hostcheck_options *o, struct hostcheck_finding *ret,
                         size_t max, size_t *nf)
{
    struct hostcheck_state *s = o->state;
    if (!nvml->nvmlDeviceGetProcessUtilization)
        return -EOPNOTSUPP;
    nvmlDevice_t dev;
    nvmlReturn_t nr = nvml->nvmlDeviceGetHandleByUUID(uuid, &dev);
    if (nr != NVML_SUCCESS)
        return gpu_nvml_errno(nr);
    unsigned long long *last = last_seen(s, uuid);
    if (!last)
        return -ENOSPC;
    char key[KEY_MAX];
    for (size_t ti = 0; ti < n; ti++) { /* the keys here are live: keep their windows */
        if (t[ti].whole || strcmp(t[ti].gpu_uuid, uuid) != 0)
            continue;
        strike_key(key, &t[ti], false);
        window_of(s, key);
        struct cycle *c = cycle_of(s, key);
        if (c)
            c->seen = true;
        if (t[ti].container_id && t[ti].container_id[0]) {
            strike_key(key, &t[ti], true);
            window_of(s, key);
            if ((c = cycle_of(s, key)))
                c->seen = true;
        }
    }
    nvmlProcessUtilizationSample_t smp[GPU_NVML_MAX_PROCS * 4];
    unsigned cnt = ARRAY_SIZE(smp);
    nr = nvml->nvmlDeviceGetProcessUtilization(dev, smp, &cnt, *last);
    if (nr == NVML_ERROR_NOT_FOUND) {
        /* No sample since the last pass. A pass shorter than NVML's sample period
         * (1/6 s to 1 s) sees that on a busy GPU too: windows and cycles stay as they are;
         * but a GPU without a sample for HOSTCHECK_IDLE_US is idle, everyone's
         * utilization 0, and that ends the cycles of processes that are gone. */
        struct timeval tv;
        gettimeofday(&tv, NULL);
        unsigned long long now_us = (unsigned long long)tv.tv_sec * 1000000 + tv.tv_usec;
        if (*last && now_us - *last < HOSTCHECK_IDLE_US)
            return 0;
        cnt = 0;
    } else if (nr != NVML_SUCCESS) {
        return gpu_nvml_errno(nr);
    }
    /* per process: the mean of its samples */
    struct {
        unsigned pid;
        unsigned sum, k;
        int target; /* its pod's first target on this GPU, -1: none */
        int exact;  /* its container's target, -1: unknown */
    } pr[GPU_NVML_MAX_PROCS];
    size_t np = 0;
    for (unsigned i = 0; i < cnt; i++) {
        if (smp[i].timeStamp > *last)
            *last = smp[i].timeStamp;
        size_t j = 0;
        while (j < np && pr[j].pid != smp[i].pid)
            j++;
        if (j == np) {
            if (np == ARRAY_SIZE(pr))
                continue;
            struct kube_cgroup_ref ref;
            pr[np].pid = smp[i].pid;
            pr[np].sum = pr[np].k = 0;
            pr[np].target = pr[np].exact = -1;
            if (kube_cgroup_read(o->proc_root, (pid_t)smp[i].pid, &ref) == 0) {
                pr[np].target = first_of_group(t, n, ref.pod_uid, uuid);
                for (size_t x = 0; ref.container_id[0] && pr[np].target >= 0 && x < n; x++)
                    if (!t[x].whole && t[x].container_id &&
                        strcmp(t[x].container_id, ref.container_id) == 0 &&
                        same_group(&t[x], &t[pr[np].target]))
                        pr[np].exact = (int)x;
            }
            np++;
        }
        pr[j].sum += smp[i].smUtil;
        pr[j].k++;
    }
    for (size_t ti = 0; ti < n; ti++) {
        if (strcmp(t[ti].gpu_uuid, uuid) != 0 ||
            first_of_group(t, n, t[ti].pod_uid, uuid) != (int)ti)
            continue;
        bool found = false;
        uint64_t cores = 0, util = 0;
        int worst = -1;
        for (size_t j = ti; j < n; j++) {
            if (t[j].whole || !same_group(&t[ti], &t[j]))
                continue;
            cores += t[j].cores;
            if (!t[j].container_id || !t[j].container_id[0])
                continue;
            uint64_t cu = 0;
            int cw = -1;
            for (size_t i = 0; i < np; i++) {
                if (pr[i].exact != (int)j)
                    continue;
                unsigned u = pr[i].sum / pr[i].k;
                cu += u;
                if (cw < 0 || u > pr[cw].sum / pr[cw].k)
                    cw = (int)i;
            }
            strike_key(key, &t[j], true);
            if (cw >= 0 || cycle_of(s, key))
                found |= judge(s, o, key, j, cw >= 0 ? pr[cw].pid : 0, cu, t[j].cores, uuid, ret,
                               max, nf);
        }
        for (size_t i = 0; i < np; i++) {
            if (pr[i].target != (int)ti)
                continue;
            unsigned u = pr[i].sum / pr[i].k;
            util += u;
            if (worst < 0 || u > pr[worst].sum / pr[worst].k)
                worst = (int)i;
        }
        strike_key(key, &t[ti], false);
        if (found) {
            window_clear(window_of(s, key));
            continue;
        }
        size_t on = worst >= 0 && pr[worst].exact >= 0 ? (size_t)pr[worst].exact : ti;
        judge(s, o, key, on, worst >= 0 ? pr[worst].pid : 0, util, cores, uuid, ret, max, nf);
    }
    return 0;
}

/* Processes of the targets' pods on GPU dev (uuid), which none of their targets names: each
 * one is a finding on its container's target (by runtime id), else its pod's first. */
static void check_foreign(struct gpu_nvml *nvml, nvmlDevice_t dev, const char *uuid,
                          const struct hostcheck_target *t, size_t n,
                          const struct hostcheck_options *o, struct hostcheck_finding *ret,
                          size_t max, size_t *nf)
{
    struct gpu_process gp[GPU_NVML_MAX_PROCS];
    size_t np = 0;
    if (gpu_nvml_running_processes(nvml, dev, gp, GPU_NVML_MAX_PROCS, &np) < 0)
        return;
    for (size_t i = 0; i < np; i++) {
        struct kube_cgroup_ref ref;
        if (kube_cgroup_read(o->proc_root, (pid_t)gp[i].pid, &ref) < 0)
            continue; /* a host process, or gone */
        int ti = pod_target(t, n, ref.pod_uid, ref.container_id);
        if (ti < 0 || assigned(t, n, ref.pod_uid, uuid))
            continue;
        punish(o, ret, max, nf, HOSTCHECK_FOREIGN_GPU, (size_t)ti, gp[i].pid,
               gp[i].used_memory_bytes == UINT64_MAX ? 0 : gp[i].used_memory_bytes, 0, uuid);
    }
}

/* Every GPU of the node that no target names (those were looked at by check_gpu, which
 * leaves out processes of pods without a target there: they are looked at here too). */
static int check_all_gpus(struct gpu_nvml *nvml, const struct hostcheck_target *t, size_t n,
                          const struct hostcheck_options *o, struct hostcheck_finding *ret,
                          size_t max, size_t *nf)
{
    if (!nvml->nvmlDeviceGetCount_v2 || !nvml->nvmlDeviceGetHandleByIndex_v2 ||
        !nvml->nvmlDeviceGetUUID)
        return -EOPNOTSUPP;
    unsigned count = 0;
    nvmlReturn_t nr = nvml->nvmlDeviceGetCount_v2(&count);
    if (nr != NVML_SUCCESS)
        return gpu_nvml_errno(nr);
    int first_err = 0;
    for (unsigned i = 0; i < count && i < 1024; i++) {
        nvmlDevice_t dev;
        char uuid[96];
        nr = nvml->nvmlDeviceGetHandleByIndex_v2(i, &dev);
        if (nr == NVML_SUCCESS)
            nr = nvml->nvmlDeviceGetUUID(dev, uuid, sizeof(uuid));
        if (nr != NVML_SUCCESS) {
            if (!first_err)
                first_err = gpu_nvml_errno(nr);
            continue;
        }
        check_foreign(nvml, dev, uuid, t, n, o, ret, max, nf);
    }
    return first_err;
}

int hostcheck_run(struct gpu_nvml *nvml, const struct hostcheck_target *targets, size_t n,
                  const struct hostcheck_options *opts, struct hostcheck_finding *ret, size_t max,
                  size_t *ret_n)
{
    if (!nvml || (n && !targets) || !opts || !ret_n)
        return -EINVAL;
    size_t nf = 0;
    int first_err = 0;
    if (opts->usage)
        memset(opts->usage, 0, n * sizeof(*opts->usage));
    for (size_t i = 0; opts->state && i < STATE_GROUPS; i++)
        opts->state->group[i].seen = false;
    for (size_t i = 0; opts->state && i < STATE_CYCLES; i++)
        opts->state->cycle[i].seen = false;
    for (size_t i = 0; i < n; i++) {
        bool seen = targets[i].whole;
        for (size_t j = 0; j < i && !seen; j++)
            seen = !targets[j].whole && strcmp(targets[j].gpu_uuid, targets[i].gpu_uuid) == 0;
        if (seen)
            continue;
        int r = check_gpu(nvml, targets[i].gpu_uuid, targets, n, opts, ret, max, &nf);
        if (r < 0 && !first_err)
            first_err = r;
        if (opts->state) {
            r = check_compute(nvml, targets[i].gpu_uuid, targets, n, opts, ret, max, &nf);
            if (r < 0 && !first_err)
                first_err = r;
        }
    }
    if (opts->all_gpus && n) {
        int r = check_all_gpus(nvml, targets, n, opts, ret, max, &nf);
        if (r < 0 && !first_err)
            first_err = r;
    }
    /* keys gone since (their container or pod ended): forget their windows, end their
     * cycles */
    for (size_t i = 0; opts->state && i < STATE_GROUPS; i++)
        if (!opts->state->group[i].seen)
            opts->state->group[i].key[0] = '\0';
    for (size_t i = 0; opts->state && i < STATE_CYCLES; i++)
        if (opts->state->cycle[i].key[0] && !opts->state->cycle[i].seen)
            cycle_end(&opts->state->cycle[i]);
    *ret_n = nf;
    return first_err;
}

static const char *const action_names[] = {"none", "kill"};

int hostcheck_action_parse(const char *s, enum hostcheck_action *ret)
{
    for (size_t i = 0; i < sizeof(action_names) / sizeof(action_names[0]); i++)
        if (s && strcmp(s, action_names[i]) == 0) {
            *ret = (enum hostcheck_action)i;
            return 0;
        }
    return -EINVAL;
}

const char *hostcheck_action_name(enum hostcheck_action a)
{
    return (unsigned)a < 2 ? action_names[a] : "?";
}

const char *hostcheck_kind_name(enum hostcheck_kind k)
{
    switch (k) {
    case HOSTCHECK_OVER_QUOTA:
        return "overQuota";
    case HOSTCHECK_UNDER_REPORT:
        return "underReport";
    case HOSTCHECK_OVER_SHARE:
        return "overShare";
    case HOSTCHECK_FOREIGN_GPU:
        return "foreignGpu";
    case HOSTCHECK_REGION_BAD:
        return "regionInvalid";
    }
    return "?";
}

int hostcheck_stats_family(enum hostcheck_kind k)
{
    return k == HOSTCHECK_OVER_SHARE                                  ? 2
           : k == HOSTCHECK_UNDER_REPORT || k == HOSTCHECK_REGION_BAD ? 1
                                                                      : 0;
}

void hostcheck_action_text(const struct hostcheck_finding *f, const char *keys, char *buf,
                           size_t len)
{
    if (f->kind == HOSTCHECK_UNDER_REPORT || f->kind == HOSTCHECK_REGION_BAD)
        snprintf(buf, len, "reported");
    else if (f->kind == HOSTCHECK_OVER_SHARE && f->frozen)
        snprintf(buf, len,
                 "its cgroup duty-cycled: frozen %u.%u %% of every %s.freezePeriod "
                 "(%s.computeAction freeze)",
                 f->duty_pm / 10, f->duty_pm % 10, keys, keys);
    else if (f->kind == HOSTCHECK_OVER_SHARE && f->freeze_errno)
        snprintf(buf, len, "freezing its cgroup failed: %s", strerror(f->freeze_errno));
    else if (f->kind == HOSTCHECK_OVER_SHARE)
        snprintf(buf, len, "left running (%s.computeAction none)", keys);
    else if (f->killed)
        snprintf(buf, len, "process %u killed (%s.overQuotaAction kill)", f->pid, keys);
    else if (f->kill_errno)
        snprintf(buf, len, "killing process %u failed: %s", f->pid, strerror(f->kill_errno));
    else
        snprintf(buf, len, "process %u left running (%s.overQuotaAction none)", f->pid, keys);
}

void hostcheck_describe(const struct hostcheck_finding *f, const struct hostcheck_target *t,
                        const char *keys, char *buf, size_t len)
{
    const struct hostcheck_target *g = &t[f->target];
    char act[160];
    hostcheck_action_text(f, keys, act, sizeof(act));
    switch (f->kind) {
    case HOSTCHECK_UNDER_REPORT:
        snprintf(buf, len,
                 "container %s on GPU %s: process %u holds %llu bytes of device memory but its "
                 "usage region says %llu%s (it bypasses or tampers with libvcuda)",
                 g->container, f->gpu, f->pid, (unsigned long long)f->used,
                 (unsigned long long)f->limit, f->slot < 0 ? " (it has no slot)" : "");
        return;
    case HOSTCHECK_REGION_BAD:
        snprintf(buf, len,
                 "container %s on GPU %s: its usage region is not one libvcuda wrote (%s) while "
                 "its process %u runs on the GPU: it was replaced, truncated or tampered with "
                 "(the check goes by NVML's figures)",
                 g->container, f->gpu,
                 f->region_errno == ELOOP || f->region_errno == ENOTDIR ? "a symlink"
                 : f->region_errno == EMLINK                            ? "a hard link"
                 : f->region_errno == EXDEV                             ? "on another filesystem"
                 : f->region_errno == EPROTO ? "not a regular file, short, or not a region"
                                             : strerror(f->region_errno),
                 f->pid);
        return;
    case HOSTCHECK_OVER_SHARE:
        snprintf(buf, len,
                 "container %s on GPU %s keeps using %llu %% of the GPU's SMs (process %u the "
                 "most; mean of its last passes), above its share of %llu %%; %s",
                 g->container, f->gpu, (unsigned long long)f->used, f->pid,
                 (unsigned long long)f->limit, act);
        return;
    case HOSTCHECK_FOREIGN_GPU:
        snprintf(buf, len,
                 "container %s: process %u uses GPU %s (%llu bytes of device memory), which was "
                 "not given to its pod (its share is on GPU %s); %s",
                 g->container, f->pid, f->gpu, (unsigned long long)f->used, g->gpu_uuid, act);
        return;
    case HOSTCHECK_OVER_QUOTA:
        break;
    }
    snprintf(buf, len,
             "container %s on GPU %s uses %llu bytes of device memory, over its quota of %llu; %s",
             g->container, f->gpu, (unsigned long long)f->used, (unsigned long long)f->limit, act);
}
