/* mps-supervisor.c — see mps-supervisor.h. Facts used (NVIDIA's MPS guide, "Appendix: Tools
 * and Interface Reference", and nvidia-cuda-mps-control(1): SYNOPSIS [-d | -f]):
 * `nvidia-cuda-mps-control -f` runs the control daemon in the foreground (so it is our child
 * and its pidfd is ours: no pid is ever read from the pipe directory, which containers can
 * write); the front end (no option) reads commands from stdin and exits 0 whenever it reached
 * the daemon, so a command's success is read from the reply text; `quit` stops the daemon;
 * get_/set_active_thread_percentage PID and get_/set_device_pinned_mem_limit PID DEV change
 * one running server (and may raise it above the defaults). */
#define _GNU_SOURCE
#include "mps-supervisor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include "fs.h"
#include "log.h"
#include "proc.h"
#include "tenant-fs.h"
#include "util.h"

extern char **environ;

#define DEFAULT_CONTROL "nvidia-cuda-mps-control"
#define OUT_MAX 8192
#define MAX_SERVERS 48 /* a probe looks at this many servers of a daemon at most */
/* A set whose daemon runs servers is probed this often (a client's per-server command that
 * lifts its caps is undone within about this), an idle one every probe_interval. */
#define BUSY_PROBE_NS 1000000000ull
/* The daemon logged a server's start or exit or a command that sets caps: a probe this soon
 * (and never within BUSY_PROBE_NS of the last one). */
#define STIR_PROBE_NS 50000000ull
/* At most this much of control.log is read per change (more: the rest is skipped). */
#define LOG_SCAN_MAX 65536
/* The first config attempt after the daemon's start is retried this soon, doubling. */
#define READY_RETRY_NS 20000000ull
/* The defaults found changed this many probes in a row: the daemon is restarted. */
#define DEFAULT_RESTORES_MAX 3
/* Each set's own /dev/shm (its daemon's and its clients'). */
#define SHM_OPTS "size=1g,mode=1777"
/* acceld's record of the daemon it runs, in the set's directory (never in the pipe dir) */
#define RECORD_FILE "acceld-daemon"

enum job_kind { JOB_NONE, JOB_CONFIG, JOB_PROBE, JOB_STATUS, JOB_RESTORE, JOB_QUIT };
enum set_state { ST_IDLE, ST_STARTING, ST_UP, ST_WAIT_RESTART, ST_STOPPING };

struct job {
    enum job_kind kind;
    pid_t pid;
    int pidfd; /* the front end's; -1 none */
    int out_fd;
    uint64_t deadline_id;
    char out[OUT_MAX + 1];
    size_t len;
};

struct set {
    struct mps_sup *sup;
    size_t index;
    char *name;
    char *cmds;         /* the defaults commands, then the check */
    char *defaults;     /* the defaults commands alone (restoring them) */
    char *probe;        /* the probe: server list, default percentage, default pinned limits */
    char **envp;        /* environ with the set's three variables */
    char dir[PATH_MAX]; /* RUN_DIR/mps-<name>: acceld's; only pipe/ and shm/ are handed out */
    char pipe_dir[PATH_MAX];
    char log_dir[PATH_MAX];
    char shm_dir[PATH_MAX];
    bool shm_own; /* shm_dir is a tmpfs of the set's, bound on the daemon's /dev/shm */
    unsigned thread_pct;
    unsigned device_count;
    uint64_t pinned_mem_bytes;
    enum set_state state;
    bool healthy;
    bool reported; /* health reported at least once */
    bool busy;     /* the last probe found servers */
    bool fault;    /* the last status found a server in FAULT */
    pid_t daemon_pid;
    int daemon_pidfd;
    uint64_t spawned_ns; /* when the daemon was started (its first config is retried) */
    uint64_t ready_retry_ns;
    uint64_t timer_id; /* probe, config retry or restart */
    uint64_t backoff_ns;
    unsigned restarts;
    /* the daemon's control.log, watched (issue 23: an idle daemon is not probed every few
     * seconds, yet a server it starts is probed at once) */
    int log_wd;                /* inotify watch of log_dir; -1 none */
    off_t log_off;             /* bytes of control.log read */
    ino_t log_ino;             /* the control.log they were read from */
    bool log_stir;             /* it logged something the next probe must come soon for */
    uint64_t last_probe_ns;    /* when the last probe started */
    unsigned caps_restored;    /* servers (or defaults) whose lifted caps were restored */
    unsigned default_restores; /* in a row */
    struct job job;
    pid_t servers[MAX_SERVERS]; /* listed by the last probe */
    size_t n_servers;
    char status_cmds[MAX_SERVERS * 200]; /* the probe's follow-up, per server */
    char restore[MAX_SERVERS * 200];     /* commands that put lifted caps back */
};

struct mps_sup {
    struct ev_loop *loop;
    struct mps_sup_opts opts;
    mps_sup_stopped_cb stopped_cb; /* mps_sup_stop_async's */
    void *stopped_ud;
    char *control;
    struct set *sets;
    size_t n_sets;
    int log_fd; /* inotify on the sets' log dirs; -1 none */
};

static int pidfd_open_(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int pidfd_kill(int pidfd, int sig)
{
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

/* Waits up to timeout_ns for the process behind pidfd to exit (shutdown only). */
static bool pidfd_wait(int pidfd, uint64_t timeout_ns)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    uint64_t end = mono_ns() + timeout_ns;
    for (;;) {
        uint64_t now = mono_ns();
        int ms = now >= end ? 0 : (int)((end - now + 999999) / 1000000);
        int r = poll(&p, 1, ms);
        if (r > 0)
            return true;
        if (r == 0 || (r < 0 && errno != EINTR))
            return false;
    }
}

static void set_fail(struct set *s, const char *why);
static void set_launch(struct set *s);
static void record_drop(struct set *s);

/* A process of ours that was killed: reaped once its pidfd says it is gone. */
struct reap {
    pid_t pid;
    int pidfd;
};

static void reap_cb(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    (void)events;
    struct reap *r = user_data;
    ev_loop_del_io(loop, fd);
    waitpid(r->pid, NULL, WNOHANG);
    close(r->pidfd);
    free(r);
}

/* Reaps pid (our child, pidfd its pidfd, now owned here) without waiting on the loop. */
static void reap_later(struct mps_sup *sup, pid_t pid, int pidfd)
{
    if (waitpid(pid, NULL, WNOHANG) == pid) {
        close(pidfd);
        return;
    }
    struct reap *r = malloc(sizeof(*r));
    if (!r || ev_loop_add_io(sup->loop, pidfd, EPOLLIN, reap_cb, r) < 0) {
        free(r);
        close(pidfd); /* a zombie until acceld exits: better than a blocked loop */
        return;
    }
    *r = (struct reap){pid, pidfd};
}

static void report(struct set *s, bool healthy, const char *why)
{
    if (s->reported && s->healthy == healthy)
        return;
    s->reported = true;
    s->healthy = healthy;
    log_info("mps: GPU set %s %s: %s", s->name, healthy ? "healthy" : "unhealthy", why);
    if (s->sup->opts.health_cb)
        s->sup->opts.health_cb(s->sup, s->index, healthy, why, s->sup->opts.user_data);
}

/* ------------------------------------------------------------------ front end jobs */

/* Ends the job: the front end is killed if it still runs, and reaped. */
static void job_cancel(struct set *s)
{
    struct job *j = &s->job;
    if (j->kind == JOB_NONE)
        return;
    struct ev_loop *loop = s->sup->loop;
    ev_loop_cancel_timer(loop, j->deadline_id);
    if (j->pidfd >= 0) {
        ev_loop_del_io(loop, j->pidfd);
        pidfd_kill(j->pidfd, SIGKILL);
        close(j->pidfd);
    }
    if (j->pid > 0)
        waitpid(j->pid, NULL, 0); /* killed, or already exited: returns at once */
    if (j->out_fd >= 0)
        close(j->out_fd);
    j->kind = JOB_NONE;
    j->pid = 0;
    j->pidfd = j->out_fd = -1;
}

static void job_drain(struct job *j)
{
    for (;;) {
        ssize_t n = read(j->out_fd, j->out + j->len, OUT_MAX - j->len);
        if (n > 0 && j->len + (size_t)n < OUT_MAX) {
            j->len += (size_t)n;
            continue;
        }
        if (n > 0)
            j->len += (size_t)n;
        if (n < 0 && errno == EINTR)
            continue;
        break;
    }
    j->out[j->len] = '\0';
}

/* Splits out into its non-empty lines (in place); returns how many, at most max. */
static size_t split_lines(char *out, char **lines, size_t max)
{
    size_t n = 0;
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l && n < max;
         l = strtok_r(NULL, "\n", &save)) {
        size_t len = strlen(l);
        while (len && (l[len - 1] == '\r' || l[len - 1] == ' '))
            l[--len] = '\0';
        if (len)
            lines[n++] = l;
    }
    return n;
}

/* A percentage as the control daemon prints it ("30.0"); -1 when it is not one. */
static double parse_pct(const char *line)
{
    char *e;
    errno = 0;
    double v = strtod(line, &e);
    if (e == line || *e || errno || v < 0)
        return -1;
    return v;
}

/* A pinned-memory limit as the control daemon prints it: a number with an optional K, M, G or
 * T (powers of 1024) and an optional B; "0" is no limit. -EINVAL when it is not one. */
static int parse_limit(const char *line, uint64_t *ret)
{
    char *e;
    errno = 0;
    unsigned long long v = strtoull(line, &e, 10);
    if (e == line || errno || line[0] == '-')
        return -EINVAL;
    unsigned shift = 0;
    switch (*e) {
    case 'K':
        shift = 10, e++;
        break;
    case 'M':
        shift = 20, e++;
        break;
    case 'G':
        shift = 30, e++;
        break;
    case 'T':
        shift = 40, e++;
        break;
    }
    if (*e == 'B')
        e++;
    if (*e || (shift && v > (UINT64_MAX >> shift)))
        return -EINVAL;
    *ret = (uint64_t)v << shift;
    return 0;
}

static int job_spawn(struct set *s, enum job_kind kind, const char *cmds);

static void report_caps(struct set *s, pid_t server, const char *what)
{
    s->caps_restored++;
    if (server)
        log_warn("mps: GPU set %s: server %d had its caps lifted (%s): restored", s->name,
                 (int)server, what);
    else
        log_warn("mps: GPU set %s: the daemon's defaults were changed (%s): restored", s->name,
                 what);
    if (s->sup->opts.caps_cb)
        s->sup->opts.caps_cb(s->sup, s->index, server, what, s->sup->opts.user_data);
}

/* The probe's reply: the servers (every line but the last 1 + device_count), the default
 * percentage, the default pinned limit of each device. A default found changed (a client ran
 * set_default_*) is put back, without the set going unhealthy: the daemon still works for
 * everyone; only after DEFAULT_RESTORES_MAX probes in a row is it restarted. Then the
 * servers' own caps (JOB_STATUS). */
static void probe_done(struct set *s, char *out)
{
    char *lines[MAX_SERVERS + 20];
    size_t n = split_lines(out, lines, sizeof(lines) / sizeof(lines[0]));
    size_t d = s->pinned_mem_bytes ? s->device_count : 0;
    char why[256];
    if (n < 1 + d || parse_pct(lines[n - 1 - d]) < 0) {
        snprintf(why, sizeof(why), "the probe's reply is not the daemon's: %.200s",
                 n ? lines[n - 1] : "(empty)");
        set_fail(s, why);
        return;
    }
    s->restore[0] = '\0';
    size_t used = 0;
    double pct = parse_pct(lines[n - 1 - d]);
    bool changed = (unsigned)(pct + 0.5) != s->thread_pct;
    for (size_t k = 0; k < d && !changed; k++) {
        uint64_t v;
        /* set in whole MiB (set_default_device_pinned_mem_limit D <MiB>M): a share that is
         * not a whole number of MiB reads back rounded down, and is not a change */
        changed = parse_limit(lines[n - d + k], &v) < 0 || v != (s->pinned_mem_bytes >> 20 << 20);
    }
    if (changed) {
        if (++s->default_restores >= DEFAULT_RESTORES_MAX) {
            snprintf(why, sizeof(why),
                     "the daemon's defaults keep changing (%g %% now, not %u): restarting it", pct,
                     s->thread_pct);
            set_fail(s, why);
            return;
        }
        snprintf(why, sizeof(why),
                 "default active thread percentage %g, or a default pinned "
                 "memory limit, not the set's (%u %%)",
                 pct, s->thread_pct);
        report_caps(s, 0, why);
        used += (size_t)snprintf(s->restore, sizeof(s->restore), "%s", s->defaults);
    } else {
        s->default_restores = 0;
    }
    s->n_servers = 0;
    size_t cu = 0;
    s->status_cmds[0] = '\0';
    for (size_t i = 0; i + 1 + d < n && s->n_servers < MAX_SERVERS; i++) {
        char *e;
        long pid = strtol(lines[i], &e, 10);
        if (e == lines[i] || *e || pid <= 0 || pid > INT32_MAX)
            continue;
        s->servers[s->n_servers++] = (pid_t)pid;
        cu +=
            (size_t)snprintf(s->status_cmds + cu, sizeof(s->status_cmds) - cu,
                             "get_server_status %ld\nget_active_thread_percentage %ld\n", pid, pid);
        for (size_t k = 0; k < d && cu < sizeof(s->status_cmds); k++)
            cu += (size_t)snprintf(s->status_cmds + cu, sizeof(s->status_cmds) - cu,
                                   "get_device_pinned_mem_limit %ld %zu\n", pid, k);
    }
    (void)used;
    s->busy = s->n_servers > 0;
    enum job_kind next = s->n_servers ? JOB_STATUS : s->restore[0] ? JOB_RESTORE : JOB_NONE;
    if (next == JOB_NONE) {
        s->state = ST_UP;
        s->backoff_ns = s->sup->opts.backoff_min_ns;
        report(s, true, "daemon answers");
        set_launch(s);
        return;
    }
    if (job_spawn(s, next, next == JOB_STATUS ? s->status_cmds : s->restore) < 0)
        set_fail(s, "cannot run the control front end");
}

/* Each server's status, active thread percentage and pinned limits (2 + d lines a server,
 * each command one line: its value or why it failed). "FAULT": a fatal GPU error hit the
 * server's clients, and it refuses new ones until they exit (MPS guide, "Error
 * Containment"): unhealthy, the daemon left alone (it recovers by itself). A server above the
 * set's caps — a client ran set_active_thread_percentage or set_device_pinned_mem_limit on it
 * through the pipe directory it has mounted — gets them back (JOB_RESTORE). */
static void status_done(struct set *s, char *out)
{
    char *lines[MAX_SERVERS * 20];
    size_t n = split_lines(out, lines, sizeof(lines) / sizeof(lines[0]));
    size_t d = s->pinned_mem_bytes ? s->device_count : 0, per = 2 + d;
    s->fault = false;
    size_t used = strlen(s->restore);
    for (size_t i = 0; i < s->n_servers && (i + 1) * per <= n; i++) {
        char **l = &lines[i * per];
        pid_t pid = s->servers[i];
        if (strcmp(l[0], "FAULT") == 0)
            s->fault = true;
        char what[256] = "";
        double pct = parse_pct(l[1]);
        if (pct >= 0 && pct > s->thread_pct + 0.05) {
            snprintf(what, sizeof(what), "active thread percentage %g over the set's %u", pct,
                     s->thread_pct);
            used +=
                (size_t)snprintf(s->restore + used, sizeof(s->restore) - used,
                                 "set_active_thread_percentage %d %u\n", (int)pid, s->thread_pct);
        }
        for (size_t k = 0; k < d && used < sizeof(s->restore); k++) {
            uint64_t v;
            if (parse_limit(l[2 + k], &v) < 0 || (v != 0 && v <= s->pinned_mem_bytes))
                continue; /* within the cap, or not a value (the server just went) */
            size_t w = strlen(what);
            snprintf(what + w, sizeof(what) - w, "%sdevice %zu pinned memory limit %s over %lluM",
                     w ? ", " : "", k, v ? l[2 + k] : "0 (none)",
                     (unsigned long long)(s->pinned_mem_bytes >> 20));
            used += (size_t)snprintf(s->restore + used, sizeof(s->restore) - used,
                                     "set_device_pinned_mem_limit %d %zu %lluM\n", (int)pid, k,
                                     (unsigned long long)(s->pinned_mem_bytes >> 20));
        }
        if (what[0])
            report_caps(s, pid, what);
    }
    if (used >= sizeof(s->restore))
        s->restore[sizeof(s->restore) - 1] = '\0';
    if (s->restore[0]) {
        if (job_spawn(s, JOB_RESTORE, s->restore) < 0)
            set_fail(s, "cannot run the control front end");
        return;
    }
    s->state = ST_UP;
    s->backoff_ns = s->sup->opts.backoff_min_ns;
    if (s->fault)
        report(s, false,
               "its MPS server is in the fault state (a fatal GPU error hit its clients; new "
               "clients are refused until those exit)");
    else
        report(s, true, "daemon answers, server active");
    set_launch(s);
}

static void config_retry_cb(struct ev_loop *loop, void *user_data)
{
    (void)loop;
    struct set *s = user_data;
    s->timer_id = 0;
    if (job_spawn(s, JOB_CONFIG, s->cmds) < 0)
        set_fail(s, "cannot run the control front end");
}

static void job_finished(struct set *s, int status)
{
    struct job *j = &s->job;
    enum job_kind kind = j->kind;
    job_drain(j);
    char out[OUT_MAX + 1];
    memcpy(out, j->out, j->len + 1);
    job_cancel(s); /* already exited: only reaps and closes */
    bool exited0 = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    char why[256];
    if (!exited0 && kind != JOB_QUIT && kind != JOB_NONE) {
        /* -f: the daemon may not listen yet; its first config is retried while it lives */
        if (kind == JOB_CONFIG && s->daemon_pidfd >= 0 &&
            mono_ns() - s->spawned_ns < s->sup->opts.reply_timeout_ns) {
            s->ready_retry_ns = s->ready_retry_ns ? s->ready_retry_ns * 2 : READY_RETRY_NS;
            if (s->ready_retry_ns > 320000000ull)
                s->ready_retry_ns = 320000000ull;
            if (ev_loop_add_timer(s->sup->loop, s->ready_retry_ns, config_retry_cb, s,
                                  &s->timer_id) == 0)
                return;
        }
        snprintf(why, sizeof(why), "control command failed (exit status %d): %.200s",
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                 out[0] ? out : "no reply");
        set_fail(s, why);
        return;
    }
    switch (kind) {
    case JOB_CONFIG: {
        char *lines[64];
        size_t n = split_lines(out, lines, 64);
        double pct = n ? parse_pct(lines[n - 1]) : -1;
        if (pct < 0 || (unsigned)(pct + 0.5) != s->thread_pct) {
            snprintf(why, sizeof(why), "the daemon's default thread percentage is %s, not %u",
                     n ? lines[n - 1] : "unknown", s->thread_pct);
            set_fail(s, why);
            return;
        }
        s->state = ST_UP;
        s->ready_retry_ns = 0;
        s->backoff_ns = s->sup->opts.backoff_min_ns;
        report(s, true, "daemon started, defaults set");
        set_launch(s);
        return;
    }
    case JOB_PROBE:
        probe_done(s, out);
        return;
    case JOB_STATUS:
        status_done(s, out);
        return;
    case JOB_RESTORE:
        /* put back; the next probe (within BUSY_PROBE_NS) reads them again */
        s->state = ST_UP;
        s->restore[0] = '\0';
        if (s->fault)
            report(s, false,
                   "its MPS server is in the fault state (a fatal GPU error hit its clients; "
                   "new clients are refused until those exit)");
        else
            report(s, true, "daemon answers, caps restored");
        set_launch(s);
        return;
    case JOB_QUIT: /* the daemon's exit, watched on its pidfd, ends the stop */
    case JOB_NONE:
        return;
    }
}

static void job_exit_cb(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    (void)loop, (void)fd, (void)events;
    struct set *s = user_data;
    int status = 0;
    if (waitpid(s->job.pid, &status, WNOHANG) <= 0)
        return; /* not yet reaped (spurious wakeup) */
    s->job.pid = 0;
    job_finished(s, status);
}

static void job_deadline_cb(struct ev_loop *loop, void *user_data)
{
    (void)loop;
    struct set *s = user_data;
    s->job.deadline_id = 0;
    if (s->state == ST_STOPPING) { /* the stop's own deadline kills the daemon */
        job_cancel(s);
        return;
    }
    set_fail(s, "the daemon did not answer before the deadline (hung)");
}

/* Runs the front end (command mode) with cmds on its stdin. */
static int job_spawn(struct set *s, enum job_kind kind, const char *cmds)
{
    struct mps_sup *sup = s->sup;
    struct job *j = &s->job;
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    int r = 0;
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC | O_NONBLOCK) < 0) {
        r = -errno;
        goto fail;
    }
    /* cmds are a few short lines: they fit the pipe's buffer, so this never blocks */
    if (cmds && write(in[1], cmds, strlen(cmds)) != (ssize_t)strlen(cmds)) {
        r = -EIO;
        goto fail;
    }
    close(in[1]);
    in[1] = -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, out[1], 2);
    char *argv[] = {sup->control, NULL};
    pid_t pid;
    int e = posix_spawnp(&pid, sup->control, &fa, NULL, argv, s->envp);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    in[0] = -1;
    close(out[1]);
    out[1] = -1;
    if (e) {
        r = -e;
        goto fail;
    }
    j->kind = kind;
    j->pid = pid;
    j->out_fd = out[0];
    j->len = 0;
    j->pidfd = pidfd_open_(pid);
    if (j->pidfd < 0 || ev_loop_add_io(sup->loop, j->pidfd, EPOLLIN, job_exit_cb, s) < 0 ||
        ev_loop_add_timer(sup->loop, sup->opts.reply_timeout_ns, job_deadline_cb, s,
                          &j->deadline_id) < 0) {
        job_cancel(s);
        return -ENOMEM;
    }
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
    }
    return r;
}

/* ------------------------------------------------------------------ the set's life */

static void daemon_exit_cb(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    (void)loop, (void)fd, (void)events;
    set_fail(user_data, "the daemon exited");
}

static void record_drop(struct set *s)
{
    char rec[PATH_MAX + 32];
    snprintf(rec, sizeof(rec), "%s/" RECORD_FILE, s->dir);
    unlink(rec);
}

/* Lets go of the daemon (killed first when kill_it): it is our child, reaped once gone. */
static void daemon_forget(struct set *s, bool kill_it)
{
    if (s->daemon_pidfd < 0)
        return;
    record_drop(s);
    ev_loop_del_io(s->sup->loop, s->daemon_pidfd);
    if (kill_it)
        pidfd_kill(s->daemon_pidfd, SIGKILL);
    reap_later(s->sup, s->daemon_pid, s->daemon_pidfd);
    s->daemon_pidfd = -1;
    s->daemon_pid = 0;
}

/* The pipe directory is the containers' to write: before a daemon starts there, whatever they
 * left (a symlink where the daemon opens its lock or pid file, a lock file held open, a socket
 * of their own named `control`) is removed, through dir fds, following nothing. The log
 * directory is acceld's (not handed out), but a symlink or link there from an older acceld's
 * time goes too. */
static void dirs_clean(struct set *s)
{
    const char *dirs[] = {s->pipe_dir, s->log_dir};
    for (size_t i = 0; i < 2; i++) {
        int dfd = open(dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
            if (dfd >= 0)
                close(dfd);
            continue;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            struct stat st;
            if (i == 1 && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(st.st_mode) && st.st_nlink == 1)
                continue; /* the daemon's own logs stay */
            tenant_remove_tree(dirfd(d), e->d_name, 16);
        }
        closedir(d);
    }
}

/* The control binary's path: as given when it names a file, else found on PATH. */
static int control_path(const char *control, char *buf, size_t len)
{
    if (strchr(control, '/'))
        return snprintf(buf, len, "%s", control) < (int)len ? 0 : -ENAMETOOLONG;
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        const char *c = strchr(p, ':');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n && (size_t)snprintf(buf, len, "%.*s/%s", (int)n, p, control) < len &&
            access(buf, X_OK) == 0)
            return 0;
        p += n + (c ? 1 : 0);
    }
    return -ENOENT;
}

/* Starts `nvidia-cuda-mps-control -f` as our child (its pidfd opened before it can be
 * reaped, so it names that process and no other) in a new session and, when the set has its
 * own shm, in a mount namespace of its own where that tmpfs is its /dev/shm (its servers
 * inherit it, and the set's clients get the same tmpfs: MPS shares memory through /dev/shm).
 * Its output goes to /dev/null (the daemon logs in its log dir). The child only makes system
 * calls between fork and exec; a failure there comes back through a close-on-exec pipe. */
static int spawn_daemon(struct set *s, char *why, size_t whylen)
{
    char exe[PATH_MAX];
    int r = control_path(s->sup->control, exe, sizeof(exe));
    if (r < 0) {
        snprintf(why, whylen, "cannot find %s: %s", s->sup->control, strerror(-r));
        return r;
    }
    int errp[2];
    if (pipe2(errp, O_CLOEXEC) < 0)
        return -errno;
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    char *argv[] = {exe, (char *)"-f", NULL};
    pid_t pid = fork();
    if (pid < 0) {
        r = -errno;
        close(errp[0]);
        close(errp[1]);
        if (devnull >= 0)
            close(devnull);
        return r;
    }
    if (pid == 0) {
        int step = 0;
        setsid();
        if (s->shm_own && ((step = 1, unshare(CLONE_NEWNS) < 0) ||
                           (step = 2, mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) ||
                           (step = 3, mount(s->shm_dir, "/dev/shm", NULL, MS_BIND, NULL) < 0)))
            goto child_fail;
        step = 4;
        if (devnull >= 0 && (dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0))
            goto child_fail;
        step = 5;
        execve(exe, argv, s->envp);
    child_fail:;
        int msg[2] = {step, errno};
        if (write(errp[1], msg, sizeof(msg)) < 0)
            _exit(126);
        _exit(127);
    }
    close(errp[1]);
    if (devnull >= 0)
        close(devnull);
    int msg[2] = {0, 0};
    ssize_t n;
    do
        n = read(errp[0], msg, sizeof(msg));
    while (n < 0 && errno == EINTR);
    close(errp[0]);
    int pidfd = pidfd_open_(pid); /* not reaped yet: this is our child */
    if (n == (ssize_t)sizeof(msg) || pidfd < 0) {
        static const char *const steps[] = {"?",
                                            "unshare(CLONE_NEWNS)",
                                            "mount --make-rslave /",
                                            "bind its shm on /dev/shm",
                                            "redirect its output",
                                            "exec"};
        snprintf(why, whylen, "cannot start %s -f: %s: %s", exe,
                 steps[msg[0] >= 1 && msg[0] <= 5 ? msg[0] : 0],
                 strerror(pidfd < 0 ? errno : msg[1]));
        if (pidfd >= 0)
            close(pidfd);
        waitpid(pid, NULL, 0); /* it exited (or is exiting) on its own */
        return -ECHILD;
    }
    s->daemon_pid = pid;
    s->daemon_pidfd = pidfd;
    s->spawned_ns = mono_ns();
    s->ready_retry_ns = 0;
    /* acceld's record of it, where no container writes, for the next acceld (stale_kill) */
    uint64_t start = 0;
    proc_start_time(pid, &start);
    char rec[PATH_MAX + 32], text[64];
    snprintf(rec, sizeof(rec), "%s/" RECORD_FILE, s->dir);
    int tn = snprintf(text, sizeof(text), "%d %llu\n", (int)pid, (unsigned long long)start);
    if (fs_write_replace(rec, text, (size_t)tn, 0600) < 0)
        log_warn("mps: GPU set %s: cannot record its daemon in %s", s->name, rec);
    return 0;
}

static void restart_cb(struct ev_loop *loop, void *user_data)
{
    (void)loop;
    struct set *s = user_data;
    s->timer_id = 0;
    s->restarts++;
    s->state = ST_STARTING;
    set_launch(s);
}

static void probe_cb(struct ev_loop *loop, void *user_data)
{
    (void)loop;
    struct set *s = user_data;
    s->timer_id = 0;
    s->last_probe_ns = mono_ns();
    if (job_spawn(s, JOB_PROBE, s->probe) < 0)
        set_fail(s, "cannot run the control front end");
}

/* ------------------------------------------------------------ control.log */

/* NVIDIA's MPS guide ("Appendix: Logging"): the control daemon's control.log "contains the
 * status of its MPS servers, user commands issued and their result, and startup and shutdown
 * notices for the daemon". So a server the daemon starts or loses, and a caps command a client
 * runs itself (issue 22, F6), show there as a line: acceld watches the file (inotify on the log
 * dir, which is acceld's: only pipe/ and shm/ are handed out) and probes within STIR_PROBE_NS,
 * rate-limited to one probe per BUSY_PROBE_NS, instead of probing an idle daemon every few
 * seconds. Lines of the probe's own read-only commands (Cmd:get_...) stir nothing, so the
 * probe does not feed itself. The emulator (src/emu/mps-control.c) writes "Server N ...
 * started", "... exited", "... shut down" and "Cmd:<command>" lines. */

/* Whether a control.log line calls for a probe: a server's start or end, or a command that
 * is not one of the read-only get_ queries (ours, or a client's). */
static bool log_line_stirs(const char *line, size_t len)
{
    if (memmem(line, len, "Cmd:get_", 8))
        return false;
    return memmem(line, len, "erver", 5) || memmem(line, len, "Cmd:", 4);
}

static int log_open(const struct set *s)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/control.log", s->log_dir);
    return open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

/* What the daemon logged before now is not news (its start, or an earlier daemon's). */
static void log_skip(struct set *s)
{
    struct stat st;
    int fd = log_open(s);
    s->log_off = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : 0;
    s->log_ino = fd >= 0 && fstat(fd, &st) == 0 ? st.st_ino : 0;
    if (fd >= 0)
        close(fd);
}

/* Reads what control.log gained since the last read; true when a line calls for a probe. */
static bool log_scan(struct set *s)
{
    int fd = log_open(s);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    if (st.st_ino != s->log_ino || st.st_size < s->log_off) {
        s->log_ino = st.st_ino; /* a new file, or truncated */
        s->log_off = 0;
    }
    if (st.st_size - s->log_off > LOG_SCAN_MAX)
        s->log_off = st.st_size - LOG_SCAN_MAX;
    static char buf[LOG_SCAN_MAX];
    ssize_t n = pread(fd, buf, (size_t)(st.st_size - s->log_off), s->log_off);
    close(fd);
    if (n <= 0)
        return false;
    /* whole lines only: a line still being written is read at its next change */
    const char *end = memrchr(buf, '\n', (size_t)n);
    if (!end)
        return false;
    s->log_off += end + 1 - buf;
    bool stir = false;
    for (const char *p = buf; p < end && !stir;) {
        const char *nl = memchr(p, '\n', (size_t)(end + 1 - p));
        stir = log_line_stirs(p, (size_t)(nl - p));
        p = nl + 1;
    }
    return stir;
}

/* The delay of a probe the log called for: soon, but not within BUSY_PROBE_NS of the last. */
static uint64_t stir_delay(const struct set *s, uint64_t every)
{
    uint64_t now = mono_ns(), at = s->last_probe_ns + BUSY_PROBE_NS;
    uint64_t d = at > now + STIR_PROBE_NS ? at - now : STIR_PROBE_NS;
    return d < every ? d : every;
}

/* A probe soon: the timer is moved up when the set waits for its next probe; while a front
 * end runs (or a restart is due), the next set_launch takes it. */
static void probe_soon(struct set *s)
{
    struct mps_sup *sup = s->sup;
    if (s->state != ST_UP || s->job.kind != JOB_NONE || !s->timer_id) {
        s->log_stir = s->state == ST_UP || s->state == ST_STARTING;
        return;
    }
    ev_loop_cancel_timer(sup->loop, s->timer_id);
    s->timer_id = 0;
    if (ev_loop_add_timer(sup->loop, stir_delay(s, UINT64_MAX), probe_cb, s, &s->timer_id) < 0)
        set_fail(s, "cannot schedule a probe (out of memory)");
}

static void log_cb(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    (void)loop, (void)events;
    struct mps_sup *sup = user_data;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            p += sizeof(*e) + e->len;
            for (size_t i = 0; i < sup->n_sets; i++) {
                struct set *s = &sup->sets[i];
                if (s->log_wd == e->wd && e->len && strcmp(e->name, "control.log") == 0 &&
                    log_scan(s))
                    probe_soon(s);
            }
        }
    }
}

/* Watches every set's log dir; without inotify, probes alone (every probe_interval). */
static void log_watch_start(struct mps_sup *sup)
{
    if (sup->log_fd < 0) {
        sup->log_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (sup->log_fd >= 0 && ev_loop_add_io(sup->loop, sup->log_fd, EPOLLIN, log_cb, sup) < 0) {
            close(sup->log_fd);
            sup->log_fd = -1;
        }
    }
    for (size_t i = 0; i < sup->n_sets; i++) {
        struct set *s = &sup->sets[i];
        if (s->log_wd < 0 && sup->log_fd >= 0)
            s->log_wd = inotify_add_watch(sup->log_fd, s->log_dir,
                                          IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
        if (s->log_wd < 0)
            log_warn("mps: GPU set %s: cannot watch %s (%s): an idle daemon's new server is seen "
                     "at the next probe (mpsProbeInterval)",
                     s->name, s->log_dir, strerror(errno));
    }
}

static void log_watch_stop(struct mps_sup *sup)
{
    if (sup->log_fd < 0)
        return;
    ev_loop_del_io(sup->loop, sup->log_fd);
    close(sup->log_fd);
    sup->log_fd = -1;
    for (size_t i = 0; i < sup->n_sets; i++)
        sup->sets[i].log_wd = -1;
}

/* Marks the set unhealthy, kills what runs, and schedules a restart after the backoff. */
static void set_fail(struct set *s, const char *why)
{
    struct mps_sup *sup = s->sup;
    job_cancel(s);
    daemon_forget(s, true);
    ev_loop_cancel_timer(sup->loop, s->timer_id);
    s->timer_id = 0;
    s->busy = false;
    report(s, false, why);
    s->state = ST_WAIT_RESTART;
    uint64_t delay = s->backoff_ns;
    s->backoff_ns = delay * 2 > sup->opts.backoff_max_ns ? sup->opts.backoff_max_ns : delay * 2;
    if (ev_loop_add_timer(sup->loop, delay, restart_cb, s, &s->timer_id) < 0)
        log_error("mps: GPU set %s: cannot schedule a restart (out of memory)", s->name);
}

/* Starts the step the state calls for: the daemon (-f), then the defaults, then probes on the
 * timer (every BUSY_PROBE_NS while it runs servers, else every probe_interval). */
static void set_launch(struct set *s)
{
    struct mps_sup *sup = s->sup;
    int r;
    char why[PATH_MAX + 128] = "";
    if (s->state == ST_STARTING && s->daemon_pidfd < 0) {
        dirs_clean(s);
        log_skip(s);
        r = spawn_daemon(s, why, sizeof(why));
        if (r == 0)
            r = ev_loop_add_io(sup->loop, s->daemon_pidfd, EPOLLIN, daemon_exit_cb, s);
        if (r == 0)
            r = job_spawn(s, JOB_CONFIG, s->cmds);
    } else {
        uint64_t every = sup->opts.probe_interval_ns;
        if (s->busy && every > BUSY_PROBE_NS)
            every = BUSY_PROBE_NS;
        if (s->log_stir) {
            s->log_stir = false;
            every = stir_delay(s, every);
        }
        r = ev_loop_add_timer(sup->loop, every, probe_cb, s, &s->timer_id);
    }
    if (r < 0) {
        if (!why[0])
            snprintf(why, sizeof(why), "cannot run %s: %s", sup->control, strerror(-r));
        set_fail(s, why);
    }
}

/* ------------------------------------------------------------------ public */

static bool name_ok(const char *n)
{
    if (!n || !*n || strlen(n) > 64 || strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
        return false;
    for (; *n; n++)
        if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') ||
              *n == '.' || *n == '_' || *n == '-'))
            return false;
    return true;
}

static char **env_for(const struct set *s, const char *visible)
{
    static const char *const ours[] = {
        "CUDA_MPS_PIPE_DIRECTORY=", "CUDA_MPS_LOG_DIRECTORY=", "CUDA_VISIBLE_DEVICES="};
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 4, sizeof(*env));
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool skip = false;
        for (size_t o = 0; o < ARRAY_SIZE(ours); o++)
            skip |= strncmp(environ[i], ours[o], strlen(ours[o])) == 0;
        if (!skip)
            env[k++] = environ[i]; /* borrowed: freed only for our own three */
    }
    bool ok = asprintf(&env[k++], "CUDA_MPS_PIPE_DIRECTORY=%s", s->pipe_dir) > 0 &&
              asprintf(&env[k++], "CUDA_MPS_LOG_DIRECTORY=%s", s->log_dir) > 0 &&
              asprintf(&env[k++], "CUDA_VISIBLE_DEVICES=%s", visible) > 0;
    env[k] = NULL;
    if (!ok)
        return NULL; /* leaks at most two strings on a failed allocation */
    return env;
}

static void env_free(char **env)
{
    if (!env)
        return;
    size_t n = 0;
    while (env[n])
        n++;
    for (size_t i = n >= 3 ? n - 3 : 0; i < n; i++)
        free(env[i]);
    free(env);
}

int mps_sup_new(struct ev_loop *loop, const struct mps_sup_opts *opts,
                const struct mps_sup_set_cfg *sets, size_t n_sets, struct mps_sup **ret)
{
    if (!loop || !opts || !opts->run_dir || !ret || (n_sets && !sets))
        return -EINVAL;
    for (size_t i = 0; i < n_sets; i++)
        if (!name_ok(sets[i].name) || !sets[i].visible_devices || !*sets[i].visible_devices ||
            sets[i].device_count == 0 || sets[i].thread_pct < 1 || sets[i].thread_pct > 100)
            return -EINVAL;
    struct mps_sup *sup = calloc(1, sizeof(*sup));
    if (!sup)
        return -ENOMEM;
    sup->loop = loop;
    sup->opts = *opts;
    sup->log_fd = -1;
    if (!sup->opts.probe_interval_ns)
        sup->opts.probe_interval_ns = 5000000000ull;
    if (!sup->opts.reply_timeout_ns)
        sup->opts.reply_timeout_ns = 5000000000ull;
    if (!sup->opts.backoff_min_ns)
        sup->opts.backoff_min_ns = 1000000000ull;
    if (!sup->opts.backoff_max_ns)
        sup->opts.backoff_max_ns = 60000000000ull;
    if (!sup->opts.stop_timeout_ns)
        sup->opts.stop_timeout_ns = 5000000000ull;
    sup->opts.run_dir = NULL; /* not kept */
    sup->control = strdup(opts->control_path ? opts->control_path : DEFAULT_CONTROL);
    sup->sets = calloc(n_sets ? n_sets : 1, sizeof(*sup->sets));
    sup->n_sets = n_sets;
    if (!sup->control || !sup->sets) {
        mps_sup_free(sup);
        return -ENOMEM;
    }
    int r = 0;
    for (size_t i = 0; i < n_sets; i++) {
        struct set *s = &sup->sets[i];
        s->sup = sup;
        s->index = i;
        s->daemon_pidfd = s->job.pidfd = s->job.out_fd = s->log_wd = -1;
        s->thread_pct = sets[i].thread_pct;
        s->device_count = sets[i].device_count;
        /* the daemon takes the limit in whole MiB (set_default_device_pinned_mem_limit N M,
         * below) and reports it so: that is the set's limit, or every probe would find it
         * "changed" (a quarter of an H100 is 20389.875 MiB) */
        s->pinned_mem_bytes = sets[i].pinned_mem_bytes >> 20 << 20;
        s->backoff_ns = sup->opts.backoff_min_ns;
        if ((size_t)snprintf(s->dir, sizeof(s->dir), "%s/mps-%s", opts->run_dir, sets[i].name) >=
                sizeof(s->dir) - 64 ||
            (size_t)snprintf(s->pipe_dir, sizeof(s->pipe_dir), "%s/pipe", s->dir) >=
                sizeof(s->pipe_dir) - 64 ||
            (size_t)snprintf(s->log_dir, sizeof(s->log_dir), "%s/log", s->dir) >=
                sizeof(s->log_dir) ||
            (size_t)snprintf(s->shm_dir, sizeof(s->shm_dir), "%s/shm", s->dir) >=
                sizeof(s->shm_dir)) {
            r = -ENAMETOOLONG;
            break;
        }
        s->name = strdup(sets[i].name);
        s->envp = env_for(s, sets[i].visible_devices);
        /* the defaults, then their check: the reply's last line is the percentage; the
         * probe: servers, the default percentage, then each device's default pinned limit */
        size_t cap = 128 + (size_t)sets[i].device_count * 80;
        s->cmds = malloc(cap);
        s->defaults = malloc(cap);
        s->probe = malloc(cap);
        if (!s->name || !s->envp || !s->cmds || !s->defaults || !s->probe) {
            r = -ENOMEM;
            break;
        }
        size_t len = (size_t)snprintf(s->defaults, cap, "set_default_active_thread_percentage %u\n",
                                      sets[i].thread_pct);
        size_t plen = (size_t)snprintf(s->probe, cap,
                                       "get_server_list\nget_default_active_thread_percentage\n");
        for (unsigned d = 0; sets[i].pinned_mem_bytes && d < sets[i].device_count; d++) {
            len += (size_t)snprintf(s->defaults + len, cap - len,
                                    "set_default_device_pinned_mem_limit %u %lluM\n", d,
                                    (unsigned long long)(sets[i].pinned_mem_bytes >> 20));
            plen += (size_t)snprintf(s->probe + plen, cap - plen,
                                     "get_default_device_pinned_mem_limit %u\n", d);
        }
        snprintf(s->cmds, cap, "%sget_default_active_thread_percentage\n", s->defaults);
        if ((r = fs_mkdir_p(s->pipe_dir, 0755)) < 0 || (r = fs_mkdir_p(s->log_dir, 0755)) < 0)
            break;
        /* the set's own /dev/shm: a tmpfs, or none (then its clients get the host's) */
        enum tenant_dir_how how;
        r = tenant_dir_make_opts(s->shm_dir, SHM_OPTS, 01777, &how);
        if (r < 0)
            break;
        s->shm_own = how == TENANT_DIR_TMPFS;
        if (!s->shm_own)
            log_warn("mps: GPU set %s: cannot mount a tmpfs on %s (%s): its clients share the "
                     "host's /dev/shm, where any container with it mounted reads and writes; run "
                     "acceld with CAP_SYS_ADMIN",
                     s->name, s->shm_dir,
                     how == TENANT_DIR_KEPT ? "a plain directory is there" : strerror(errno));
    }
    if (r < 0) {
        mps_sup_free(sup);
        return r;
    }
    *ret = sup;
    return 0;
}

/* A daemon left behind by an earlier agent (killed before it could stop it) still serves the
 * pipe directory with defaults nobody knows, so it is not adopted: it is killed. It is found
 * through acceld's own record (RECORD_FILE in the set's directory, which no container can
 * write: never the daemon's pid file in the pipe directory, which every container of the set
 * can), and only when the process with that pid has the recorded start time (a reused pid is
 * never signalled), through a pidfd. A daemon of an acceld that kept no record is asked to
 * `quit` through the pipe directory. Start only: blocks for at most about 2 x stop_timeout_ns. */
static void stale_kill(struct set *s)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/" RECORD_FILE, s->dir);
    char *txt = NULL;
    size_t len = 0;
    long pid = 0;
    unsigned long long start = 0;
    if (fs_read_all(path, 128, &txt, &len) == 0 && sscanf(txt, "%ld %llu", &pid, &start) == 2 &&
        pid > 1 && pid != (long)getpid()) {
        int pidfd = pidfd_open_((pid_t)pid);
        uint64_t now_start = 0;
        if (pidfd >= 0 && proc_start_time((pid_t)pid, &now_start) == 0 && now_start == start) {
            log_warn("mps: GPU set %s: its control daemon (pid %ld) left by an earlier run still "
                     "serves %s: killing it",
                     s->name, pid, s->pipe_dir);
            pidfd_kill(pidfd, SIGKILL);
            if (!pidfd_wait(pidfd, s->sup->opts.stop_timeout_ns))
                log_warn("mps: GPU set %s: pid %ld did not exit", s->name, pid);
        }
        if (pidfd >= 0)
            close(pidfd);
    }
    free(txt);
    unlink(path);
    struct stat st;
    snprintf(path, sizeof(path), "%s/control", s->pipe_dir);
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && job_spawn(s, JOB_QUIT, "quit\n") == 0) {
        ev_loop_del_io(s->sup->loop, s->job.pidfd); /* waited on here, not by the loop */
        pidfd_wait(s->job.pidfd, s->sup->opts.stop_timeout_ns);
        job_cancel(s);
    }
}

int mps_sup_start(struct mps_sup *sup)
{
    if (!sup)
        return -EINVAL;
    log_watch_start(sup);
    for (size_t i = 0; i < sup->n_sets; i++) {
        struct set *s = &sup->sets[i];
        if (s->state != ST_IDLE)
            continue;
        stale_kill(s);
        s->state = ST_STARTING;
        set_launch(s);
    }
    return 0;
}

/* Runs `quit` through the front end and waits (bounded) for the daemon to go; SIGKILL after. */
static void set_stop(struct set *s)
{
    struct mps_sup *sup = s->sup;
    job_cancel(s);
    ev_loop_cancel_timer(sup->loop, s->timer_id);
    s->timer_id = 0;
    if (s->daemon_pidfd >= 0) {
        ev_loop_del_io(sup->loop, s->daemon_pidfd);
        if (job_spawn(s, JOB_QUIT, "quit\n") == 0) {
            ev_loop_del_io(sup->loop, s->job.pidfd); /* waited on here, not by the loop */
            pidfd_wait(s->job.pidfd, sup->opts.stop_timeout_ns);
        }
        if (!pidfd_wait(s->daemon_pidfd, s->job.kind ? sup->opts.stop_timeout_ns : 0)) {
            log_warn("mps: GPU set %s: the daemon did not quit; killing it", s->name);
            pidfd_kill(s->daemon_pidfd, SIGKILL);
            pidfd_wait(s->daemon_pidfd, sup->opts.stop_timeout_ns);
        }
        job_cancel(s);
        waitpid(s->daemon_pid, NULL, WNOHANG); /* our child: gone now, or a zombie of init's */
        close(s->daemon_pidfd);
        s->daemon_pidfd = -1;
        s->daemon_pid = 0;
        record_drop(s);
    }
    s->state = ST_IDLE;
}

/* A stopping set is stopped: idle, and the supervisor's stop callback runs once all are. */
static void stop_done(struct set *s)
{
    struct mps_sup *sup = s->sup;
    job_cancel(s);
    daemon_forget(s, false);
    ev_loop_cancel_timer(sup->loop, s->timer_id);
    s->timer_id = 0;
    s->state = ST_IDLE;
    for (size_t i = 0; i < sup->n_sets; i++)
        if (sup->sets[i].state == ST_STOPPING)
            return;
    mps_sup_stopped_cb cb = sup->stopped_cb;
    sup->stopped_cb = NULL;
    if (cb)
        cb(sup, sup->stopped_ud); /* last: it may free sup */
}

static void stopping_exit_cb(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    (void)loop, (void)fd, (void)events;
    stop_done(user_data);
}

static void stop_deadline_cb(struct ev_loop *loop, void *user_data)
{
    (void)loop;
    struct set *s = user_data;
    s->timer_id = 0;
    log_warn("mps: GPU set %s: the daemon did not quit; killing it", s->name);
    if (pidfd_kill(s->daemon_pidfd, SIGKILL) < 0)
        stop_done(s); /* gone already */
}

int mps_sup_stop_async(struct mps_sup *sup, mps_sup_stopped_cb cb, void *user_data)
{
    if (!sup)
        return -EINVAL;
    bool waiting = false;
    for (size_t i = 0; i < sup->n_sets; i++) {
        struct set *s = &sup->sets[i];
        job_cancel(s);
        ev_loop_cancel_timer(sup->loop, s->timer_id);
        s->timer_id = 0;
        if (s->daemon_pidfd < 0) {
            s->state = ST_IDLE;
            continue;
        }
        s->state = ST_STOPPING;
        ev_loop_del_io(sup->loop, s->daemon_pidfd);
        if (ev_loop_add_io(sup->loop, s->daemon_pidfd, EPOLLIN, stopping_exit_cb, s) < 0 ||
            ev_loop_add_timer(sup->loop, sup->opts.stop_timeout_ns, stop_deadline_cb, s,
                              &s->timer_id) < 0) {
            set_stop(s); /* out of memory: the bounded wait in place */
            continue;
        }
        if (job_spawn(s, JOB_QUIT, "quit\n") < 0)
            pidfd_kill(s->daemon_pidfd, SIGTERM);
        waiting = true;
    }
    if (!waiting)
        return 1;
    sup->stopped_cb = cb;
    sup->stopped_ud = user_data;
    return 0;
}

void mps_sup_stop(struct mps_sup *sup)
{
    if (!sup)
        return;
    for (size_t i = 0; i < sup->n_sets; i++)
        set_stop(&sup->sets[i]);
}

struct mps_sup *mps_sup_free(struct mps_sup *sup)
{
    if (!sup)
        return NULL;
    log_watch_stop(sup);
    for (size_t i = 0; i < sup->n_sets; i++) {
        struct set *s = &sup->sets[i];
        if (s->sup)
            set_stop(s);
        free(s->name);
        free(s->cmds);
        free(s->defaults);
        free(s->probe);
        env_free(s->envp);
    }
    free(sup->sets);
    free(sup->control);
    free(sup);
    return NULL;
}

pid_t mps_sup_daemon_pid(const struct mps_sup *sup, size_t set)
{
    return set < sup->n_sets ? sup->sets[set].daemon_pid : 0;
}

const char *mps_sup_pipe_dir(const struct mps_sup *sup, size_t set)
{
    return set < sup->n_sets ? sup->sets[set].pipe_dir : NULL;
}

const char *mps_sup_log_dir(const struct mps_sup *sup, size_t set)
{
    return set < sup->n_sets ? sup->sets[set].log_dir : NULL;
}

const char *mps_sup_shm_dir(const struct mps_sup *sup, size_t set)
{
    return set < sup->n_sets && sup->sets[set].shm_own ? sup->sets[set].shm_dir : NULL;
}

unsigned mps_sup_caps_restored(const struct mps_sup *sup, size_t set)
{
    return set < sup->n_sets ? sup->sets[set].caps_restored : 0;
}

bool mps_sup_healthy(const struct mps_sup *sup, size_t set)
{
    return set < sup->n_sets && sup->sets[set].healthy;
}

unsigned mps_sup_restarts(const struct mps_sup *sup, size_t set)
{
    return set < sup->n_sets ? sup->sets[set].restarts : 0;
}
