/* vgpu-check.c — vGPU mode's host-side memory check: NVML's per-process
 * memory grouped by pod and GPU against the assignments' quotas, and the
 * region audit; see vgpu-check.h. */
#include "vgpu-check.h"

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
#include "region.h"

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

static bool same_group(const struct vgpu_check_target *a, const struct vgpu_check_target *b)
{
    return strcmp(a->pod_uid, b->pod_uid) == 0 && strcmp(a->gpu_uuid, b->gpu_uuid) == 0;
}

static int first_of_group(const struct vgpu_check_target *t, size_t n, const char *pod_uid,
                          const char *uuid)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].pod_uid, pod_uid) == 0 && strcmp(t[i].gpu_uuid, uuid) == 0)
            return (int)i;
    return -1;
}

static void add(struct vgpu_check_finding *ret, size_t max, size_t *n, struct vgpu_check_finding f)
{
    if (*n < max)
        ret[*n] = f;
    (*n)++;
}

/* Audits the region of target t against the processes of its group. */
static void audit(const struct vgpu_check_target *t, size_t ti, struct proc_info *p, size_t np,
                  struct vgpu_check_usage *usage, struct vgpu_check_finding *ret, size_t max,
                  size_t *nf)
{
    struct stat st;
    if (!t[ti].region || stat(t[ti].region, &st) < 0 || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size < VC_REGION_SIZE)
        return; /* no region yet: attach would create one */
    struct vc_region r;
    if (vc_region_attach(t[ti].region, &r) < 0)
        return;
    if (usage) {
        usage[ti].region_ok = true;
        usage[ti].region_bytes = vc_region_used(&r, t[ti].region_dev);
    }
    struct vc_audit_proc ap[GPU_NVML_MAX_PROCS];
    size_t map[GPU_NVML_MAX_PROCS], k = 0;
    for (size_t i = 0; i < np; i++)
        if ((p[i].exact >= 0 ? p[i].exact : p[i].target) == (int)ti) {
            ap[k] = (struct vc_audit_proc){p[i].ns_pid, p[i].used};
            map[k++] = i;
        }
    struct vc_audit_finding af[GPU_NVML_MAX_PROCS];
    int m = vc_region_audit(&r, t[ti].region_dev, ap, k, VGPU_CHECK_SLACK, af, k);
    for (int j = 0; j < m && (size_t)j < k; j++) {
        for (size_t i = 0; i < k; i++) {
            if (ap[i].pid != af[j].pid)
                continue;
            struct proc_info *pi = &p[map[i]];
            pi->unreported = af[j].nvml_bytes - af[j].region_bytes;
            add(ret, max, nf,
                (struct vgpu_check_finding){VGPU_CHECK_UNDER_REPORT, ti, pi->pid, af[j].nvml_bytes,
                                            af[j].region_bytes, af[j].slot, false, 0, false, 0, 0});
            break;
        }
    }
    vc_region_detach(&r);
}

/* Whether process i is a worse offender than process w (-1: none yet): the one its region
 * under-reports the most (a bypassing process first), else the larger. */
static bool worse(const struct proc_info *p, size_t i, int w)
{
    return w < 0 || p[i].unreported > p[w].unreported ||
           (p[i].unreported == p[w].unreported && p[i].used > p[w].used);
}

/* An over-quota finding on target ti, with the configured action on pid. */
static void punish(const struct vgpu_check_options *o, struct vgpu_check_finding *ret, size_t max,
                   size_t *nf, size_t ti, unsigned pid, uint64_t used, uint64_t limit)
{
    struct vgpu_check_finding f = {
        VGPU_CHECK_OVER_QUOTA, ti, pid, used, limit, -1, false, 0, false, 0, 0};
    if (o->action == VGPU_OVER_QUOTA_KILL) {
        if (kill((pid_t)pid, SIGKILL) == 0)
            f.killed = true;
        else
            f.kill_errno = errno;
    }
    add(ret, max, nf, f);
}

static int check_gpu(struct gpu_nvml *nvml, const char *uuid, const struct vgpu_check_target *t,
                     size_t n, const struct vgpu_check_options *o, struct vgpu_check_finding *ret,
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
            if (t[j].container_id && strcmp(t[j].container_id, ref.container_id) == 0 &&
                same_group(&t[j], &t[p[i].target]))
                p[i].exact = (int)j;
    }
    for (size_t ti = 0; ti < n; ti++)
        if (strcmp(t[ti].gpu_uuid, uuid) == 0)
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
            if (!same_group(&t[ti], &t[j]))
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
                cl += VGPU_CHECK_SLACK;
                cp++;
                if (worse(p, i, cw))
                    cw = (int)i;
            }
            if (o->usage) {
                o->usage[j].nvml_bytes = cu;
                o->usage[j].nvml_procs = cp;
            }
            if (cw >= 0 && cu > cl) {
                punish(o, ret, max, nf, j, p[cw].pid, cu, cl);
                found = true;
            }
        }
        for (size_t i = 0; i < np; i++) {
            if (p[i].target != (int)ti)
                continue;
            used += p[i].used;
            limit += VGPU_CHECK_SLACK;
            procs++;
            if (worse(p, i, worst))
                worst = (int)i;
        }
        for (size_t j = ti; o->usage && j < n; j++)
            if (same_group(&t[ti], &t[j]) && (!t[j].container_id || !t[j].container_id[0])) {
                o->usage[j].nvml_bytes = used;
                o->usage[j].nvml_procs = procs;
            }
        if (found || worst < 0 || used <= limit)
            continue;
        punish(o, ret, max, nf, p[worst].exact >= 0 ? (size_t)p[worst].exact : ti, p[worst].pid,
               used, limit);
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

struct vgpu_check_state {
    struct {
        char uuid[96];
        unsigned long long last_us; /* NVML's last sample time seen */
    } gpu[STATE_GPUS];
    struct {
        char key[KEY_MAX];
        unsigned strikes;
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

int vgpu_check_state_new(struct vgpu_check_state **ret)
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

uint64_t vgpu_check_cycle(struct vgpu_check_state *s, uint64_t now_ms)
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

size_t vgpu_check_cycling(const struct vgpu_check_state *s)
{
    size_t n = 0;
    for (size_t i = 0; s && i < STATE_CYCLES; i++)
        n += s->cycle[i].key[0] != '\0';
    return n;
}

struct vgpu_check_state *vgpu_check_state_free(struct vgpu_check_state *s)
{
    for (size_t i = 0; s && i < STATE_CYCLES; i++)
        if (s->cycle[i].key[0])
            cycle_end(&s->cycle[i]);
    free(s);
    return NULL;
}

static unsigned long long *last_seen(struct vgpu_check_state *s, const char *uuid)
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

static void strike_key(char *key, const struct vgpu_check_target *t, bool container)
{
    snprintf(key, KEY_MAX, "%s/%s/%s", t->pod_uid, container ? t->container : "", t->gpu_uuid);
}

/* The key's strike counter (created at 0), or NULL when the table is full. */
static unsigned *strikes_of(struct vgpu_check_state *s, const char *key)
{
    size_t free_i = STATE_GROUPS;
    for (size_t i = 0; i < STATE_GROUPS; i++) {
        if (strcmp(s->group[i].key, key) == 0) {
            s->group[i].seen = true;
            return &s->group[i].strikes;
        }
        if (!s->group[i].key[0] && free_i == STATE_GROUPS)
            free_i = i;
    }
    if (free_i == STATE_GROUPS)
        return NULL;
    snprintf(s->group[free_i].key, sizeof(s->group[free_i].key), "%s", key);
    s->group[free_i].strikes = 0;
    s->group[free_i].seen = true;
    return &s->group[free_i].strikes;
}

static struct cycle *cycle_of(struct vgpu_check_state *s, const char *key)
{
    for (size_t i = 0; i < STATE_CYCLES; i++)
        if (s->cycle[i].key[0] && strcmp(s->cycle[i].key, key) == 0)
            return &s->cycle[i];
    return NULL;
}

/* <cgroup_root><the process's cgroup v2 path>/cgroup.freeze, from
 * <proc_root>/<pid>/cgroup's "0::" line. Returns 0 or -errno (-ENOENT: no v2
 * line, -EINVAL: a path with "..", which no real cgroup has). */
static int freeze_path(const struct vgpu_check_options *o, unsigned pid, char *buf, size_t len)
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
    return d > VGPU_CHECK_MAX_DUTY_PM ? VGPU_CHECK_MAX_DUTY_PM : (unsigned)d;
}

/* Starts duty-cycling the cgroup of f->pid under key: frozen now, for duty of
 * each vgpu_check_options.freeze_ms. */
static void cycle_start(struct vgpu_check_state *s, const struct vgpu_check_options *o,
                        const char *key, unsigned duty_pm, struct vgpu_check_finding *f)
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

/* One judgement of key's util (%) against its cores: the strikes, a finding
 * after VGPU_CHECK_COMPUTE_STRIKES passes over in a row, and its duty cycle
 * (started by a finding under VGPU_COMPUTE_FREEZE; adjusted every pass from
 * what it measured; ended once the cgroup would stay within its share
 * unfrozen). Returns whether a finding was made. */
static bool judge(struct vgpu_check_state *s, const struct vgpu_check_options *o, const char *key,
                  size_t ti, unsigned pid, uint64_t util, uint64_t cores,
                  struct vgpu_check_finding *ret, size_t max, size_t *nf)
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
    unsigned *strikes = strikes_of(s, key);
    if (!strikes)
        return false;
    if (cores == 0 || util <= cores + VGPU_CHECK_COMPUTE_TOLERANCE) {
        *strikes = 0;
        return false;
    }
    if (++*strikes < VGPU_CHECK_COMPUTE_STRIKES)
        return false;
    *strikes = 0; /* the next finding takes as many passes again */
    struct vgpu_check_finding f = {
        VGPU_CHECK_OVER_SHARE, ti, pid, util, cores, -1, false, 0, false, 0, 0};
    c = cycle_of(s, key);
    if (c) { /* cycling already, at the most it may: say so */
        f.frozen = true;
        f.duty_pm = c->duty_pm;
    } else if (o->compute_action == VGPU_COMPUTE_FREEZE) {
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
static int check_compute(struct gpu_nvml *nvml, const char *uuid, const struct vgpu_check_target *t,
                         size_t n, const struct vgpu_check_options *o,
                         struct vgpu_check_finding *ret, size_t max, size_t *nf)
{
    struct vgpu_check_state *s = o->state;
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
    for (size_t ti = 0; ti < n; ti++) { /* the keys here are live: keep their strikes */
        if (strcmp(t[ti].gpu_uuid, uuid) != 0)
            continue;
        strike_key(key, &t[ti], false);
        strikes_of(s, key);
        struct cycle *c = cycle_of(s, key);
        if (c)
            c->seen = true;
        if (t[ti].container_id && t[ti].container_id[0]) {
            strike_key(key, &t[ti], true);
            strikes_of(s, key);
            if ((c = cycle_of(s, key)))
                c->seen = true;
        }
    }
    nvmlProcessUtilizationSample_t smp[GPU_NVML_MAX_PROCS * 4];
    unsigned cnt = ARRAY_SIZE(smp);
    nr = nvml->nvmlDeviceGetProcessUtilization(dev, smp, &cnt, *last);
    if (nr == NVML_ERROR_NOT_FOUND) {
        /* No sample since the last pass. A pass shorter than NVML's sample period
         * (1/6 s to 1 s) sees that on a busy GPU too: strikes and cycles stay as they are;
         * but a GPU without a sample for VGPU_CHECK_IDLE_US is idle, everyone's
         * utilization 0, and that ends the cycles of processes that are gone. */
        struct timeval tv;
        gettimeofday(&tv, NULL);
        unsigned long long now_us = (unsigned long long)tv.tv_sec * 1000000 + tv.tv_usec;
        if (*last && now_us - *last < VGPU_CHECK_IDLE_US)
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
                    if (t[x].container_id && strcmp(t[x].container_id, ref.container_id) == 0 &&
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
            if (!same_group(&t[ti], &t[j]))
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
                found |=
                    judge(s, o, key, j, cw >= 0 ? pr[cw].pid : 0, cu, t[j].cores, ret, max, nf);
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
            unsigned *st = strikes_of(s, key);
            if (st)
                *st = 0;
            continue;
        }
        size_t on = worst >= 0 && pr[worst].exact >= 0 ? (size_t)pr[worst].exact : ti;
        judge(s, o, key, on, worst >= 0 ? pr[worst].pid : 0, util, cores, ret, max, nf);
    }
    return 0;
}

int vgpu_check_run(struct gpu_nvml *nvml, const struct vgpu_check_target *targets, size_t n,
                   const struct vgpu_check_options *opts, struct vgpu_check_finding *ret,
                   size_t max, size_t *ret_n)
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
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(targets[j].gpu_uuid, targets[i].gpu_uuid) == 0;
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
    /* keys gone since (their container or pod ended): forget their strikes, end their
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

int vgpu_over_quota_action_parse(const char *s, enum vgpu_over_quota_action *ret)
{
    for (size_t i = 0; i < sizeof(action_names) / sizeof(action_names[0]); i++)
        if (s && strcmp(s, action_names[i]) == 0) {
            *ret = (enum vgpu_over_quota_action)i;
            return 0;
        }
    return -EINVAL;
}

const char *vgpu_over_quota_action_name(enum vgpu_over_quota_action a)
{
    return (unsigned)a < 2 ? action_names[a] : "?";
}
