/* mps-supervisor.c — see mps-supervisor.h. Facts used (NVIDIA's MPS guide, "Appendix: Tools
 * and Interface Reference"): `nvidia-cuda-mps-control -d` starts the control daemon in the
 * background and writes its pid to nvidia-cuda-mps-control.pid in the pipe directory; the
 * front end (no option) reads commands from stdin and exits 0 whenever it reached the
 * daemon, so a command's success is read from the reply text; `quit` stops the daemon. */
#define _GNU_SOURCE
#include "mps-supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include "fs.h"
#include "log.h"
#include "util.h"

extern char **environ;

#define DEFAULT_CONTROL "nvidia-cuda-mps-control"
#define OUT_MAX 4096

enum job_kind { JOB_NONE, JOB_START, JOB_CONFIG, JOB_PROBE, JOB_STATUS, JOB_QUIT };
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
    char *cmds;  /* the defaults commands, then the check */
    char **envp; /* environ with the set's three variables */
    char pipe_dir[PATH_MAX];
    char log_dir[PATH_MAX];
    unsigned thread_pct;
    enum set_state state;
    bool healthy;
    bool reported; /* health reported at least once */
    pid_t daemon_pid;
    int daemon_pidfd;
    uint64_t timer_id; /* probe or restart */
    uint64_t backoff_ns;
    unsigned restarts;
    struct job job;
    char status_cmds[512]; /* the probe's follow-up: get_server_status per server */
};

struct mps_sup {
    struct ev_loop *loop;
    struct mps_sup_opts opts;
    mps_sup_stopped_cb stopped_cb; /* mps_sup_stop_async's */
    void *stopped_ud;
    char *control;
    struct set *sets;
    size_t n_sets;
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

/* The last non-empty line of the reply, as a percentage; -1 when it is not one. */
static double last_pct(char *out)
{
    char *end = out + strlen(out);
    while (end > out && (end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\r'))
        *--end = '\0';
    char *line = strrchr(out, '\n');
    line = line ? line + 1 : out;
    char *e;
    errno = 0;
    double v = strtod(line, &e);
    if (e == line || *e || errno)
        return -1;
    return v;
}

static int job_spawn(struct set *s, enum job_kind kind, const char *arg, const char *cmds);

/* "get_server_status PID" for each server PID line of a probe's reply (all lines but the
 * last, the percentage); false when there is none. */
static bool status_cmds(const char *reply, char *cmds, size_t len)
{
    /* the last non-empty line is the percentage */
    const char *end = reply + strlen(reply);
    while (end > reply && end[-1] == '\n')
        end--;
    const char *last = end;
    while (last > reply && last[-1] != '\n')
        last--;
    size_t used = 0;
    cmds[0] = '\0';
    for (const char *p = reply; p && *p && p < last;) {
        const char *nl = strchr(p, '\n');
        char *e;
        long pid = strtol(p, &e, 10);
        if (e != p && (*e == '\n' || *e == '\0') && pid > 0 && used + 48 < len)
            used += (size_t)snprintf(cmds + used, len - used, "get_server_status %ld\n", pid);
        p = nl ? nl + 1 : NULL;
    }
    return used > 0;
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

    switch (kind) {
    case JOB_START: {
        if (!exited0) {
            snprintf(why, sizeof(why), "nvidia-cuda-mps-control -d failed: %.200s",
                     out[0] ? out : "no message");
            set_fail(s, why);
            return;
        }
        char path[PATH_MAX + 64];
        snprintf(path, sizeof(path), "%s/nvidia-cuda-mps-control.pid", s->pipe_dir);
        char *txt = NULL;
        size_t len = 0;
        int pid = 0;
        if (fs_read_all(path, 64, &txt, &len) < 0 || parse_int(strtok(txt, " \n"), &pid) < 0 ||
            pid <= 0) {
            free(txt);
            set_fail(s, "the daemon started but left no readable pid file");
            return;
        }
        free(txt);
        s->daemon_pidfd = pidfd_open_(pid);
        if (s->daemon_pidfd < 0) {
            set_fail(s, "the daemon exited right after starting");
            return;
        }
        s->daemon_pid = pid;
        break;
    }
    case JOB_STATUS:
        /* "FAULT": a fatal GPU error hit the server's clients, and it refuses new ones until
         * they exit (MPS guide, "Error Containment"): Unhealthy, but the daemon is left
         * alone, it recovers by itself */
        if (!exited0) {
            snprintf(why, sizeof(why), "get_server_status failed: %.200s",
                     out[0] ? out : "no reply");
            set_fail(s, why);
            return;
        }
        s->state = ST_UP;
        s->backoff_ns = s->sup->opts.backoff_min_ns;
        if (strstr(out, "FAULT"))
            report(s, false,
                   "its MPS server is in the fault state (a fatal GPU error hit its clients; "
                   "new clients are refused until those exit)");
        else
            report(s, true, "daemon answers, server active");
        set_launch(s);
        return;
    case JOB_CONFIG:
    case JOB_PROBE: {
        char servers[OUT_MAX + 1];
        memcpy(servers, out, sizeof(servers));
        double pct = last_pct(out);
        if (!exited0 || pct < 0) {
            snprintf(why, sizeof(why), "control command failed (exit status %d): %.200s",
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                     out[0] ? out : "no reply");
            set_fail(s, why);
            return;
        }
        if ((unsigned)(pct + 0.5) != s->thread_pct) {
            snprintf(why, sizeof(why), "the daemon's default thread percentage is %g, not %u", pct,
                     s->thread_pct);
            set_fail(s, why);
            return;
        }
        /* a probe's reply starts with the server list: ask each server's status */
        if (kind == JOB_PROBE && status_cmds(servers, s->status_cmds, sizeof(s->status_cmds))) {
            if (job_spawn(s, JOB_STATUS, NULL, s->status_cmds) < 0)
                set_fail(s, "cannot run the control front end");
            return;
        }
        break;
    }
    case JOB_QUIT: /* the daemon's exit, watched on its pidfd, ends the stop */
    case JOB_NONE:
        return;
    }
    /* the next step */
    if (kind == JOB_START) {
        set_launch(s);
    } else {
        s->state = ST_UP;
        s->backoff_ns = s->sup->opts.backoff_min_ns;
        report(s, true, kind == JOB_CONFIG ? "daemon started, defaults set" : "daemon answers");
        set_launch(s);
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

/* Runs the front end (args: "-d" or NULL for command mode) with cmds on its stdin. */
static int job_spawn(struct set *s, enum job_kind kind, const char *arg, const char *cmds)
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
    char *argv[] = {sup->control, (char *)arg, NULL};
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

static void daemon_forget(struct set *s, bool kill_it)
{
    if (s->daemon_pidfd < 0)
        return;
    ev_loop_del_io(s->sup->loop, s->daemon_pidfd);
    if (kill_it)
        pidfd_kill(s->daemon_pidfd, SIGKILL);
    close(s->daemon_pidfd);
    s->daemon_pidfd = -1;
    s->daemon_pid = 0;
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
    if (job_spawn(s, JOB_PROBE, NULL, "get_server_list\nget_default_active_thread_percentage\n") <
        0)
        set_fail(s, "cannot run the control front end");
}

/* Marks the set unhealthy, kills what runs, and schedules a restart after the backoff. */
static void set_fail(struct set *s, const char *why)
{
    struct mps_sup *sup = s->sup;
    job_cancel(s);
    daemon_forget(s, true);
    ev_loop_cancel_timer(sup->loop, s->timer_id);
    s->timer_id = 0;
    report(s, false, why);
    s->state = ST_WAIT_RESTART;
    uint64_t delay = s->backoff_ns;
    s->backoff_ns = delay * 2 > sup->opts.backoff_max_ns ? sup->opts.backoff_max_ns : delay * 2;
    if (ev_loop_add_timer(sup->loop, delay, restart_cb, s, &s->timer_id) < 0)
        log_error("mps: GPU set %s: cannot schedule a restart (out of memory)", s->name);
}

/* Starts the step the state calls for: -d, then the defaults, then probes on the timer. */
static void set_launch(struct set *s)
{
    struct mps_sup *sup = s->sup;
    int r;
    if (s->state == ST_STARTING && s->daemon_pidfd < 0) {
        r = job_spawn(s, JOB_START, "-d", NULL);
    } else if (s->state == ST_STARTING) {
        r = ev_loop_add_io(sup->loop, s->daemon_pidfd, EPOLLIN, daemon_exit_cb, s);
        if (r == 0)
            r = job_spawn(s, JOB_CONFIG, NULL, s->cmds);
    } else {
        r = ev_loop_add_timer(sup->loop, sup->opts.probe_interval_ns, probe_cb, s, &s->timer_id);
    }
    if (r < 0) {
        char why[128];
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
        s->daemon_pidfd = s->job.pidfd = s->job.out_fd = -1;
        s->thread_pct = sets[i].thread_pct;
        s->backoff_ns = sup->opts.backoff_min_ns;
        if ((size_t)snprintf(s->pipe_dir, sizeof(s->pipe_dir), "%s/mps-%s/pipe", opts->run_dir,
                             sets[i].name) >= sizeof(s->pipe_dir) - 64 ||
            (size_t)snprintf(s->log_dir, sizeof(s->log_dir), "%s/mps-%s/log", opts->run_dir,
                             sets[i].name) >= sizeof(s->log_dir)) {
            r = -ENAMETOOLONG;
            break;
        }
        s->name = strdup(sets[i].name);
        s->envp = env_for(s, sets[i].visible_devices);
        /* the defaults, then their check: the reply's last line is the percentage */
        size_t cap = 128 + (size_t)sets[i].device_count * 80;
        s->cmds = malloc(cap);
        if (!s->name || !s->envp || !s->cmds) {
            r = -ENOMEM;
            break;
        }
        size_t len = (size_t)snprintf(s->cmds, cap, "set_default_active_thread_percentage %u\n",
                                      sets[i].thread_pct);
        for (unsigned d = 0; sets[i].pinned_mem_bytes && d < sets[i].device_count; d++)
            len += (size_t)snprintf(s->cmds + len, cap - len,
                                    "set_default_device_pinned_mem_limit %u %lluM\n", d,
                                    (unsigned long long)(sets[i].pinned_mem_bytes >> 20));
        snprintf(s->cmds + len, cap - len, "get_default_active_thread_percentage\n");
        if ((r = fs_mkdir_p(s->pipe_dir, 0755)) < 0 || (r = fs_mkdir_p(s->log_dir, 0755)) < 0)
            break;
    }
    if (r < 0) {
        mps_sup_free(sup);
        return r;
    }
    *ret = sup;
    return 0;
}

/* A daemon left behind by an earlier agent (killed before it could stop it) still holds the
 * pipe directory, and `-d` refuses to start a second one there. Its defaults are unknown, so
 * it is not adopted: it is killed, through a pidfd opened before its name is checked (a pid
 * reused by another program is never signalled). Start only: blocks for at most
 * stop_timeout_ns. */
static void stale_kill(struct set *s)
{
    char path[PATH_MAX + 64], buf[64];
    snprintf(path, sizeof(path), "%s/nvidia-cuda-mps-control.pid", s->pipe_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    long pid = n > 0 ? (buf[n] = '\0', strtol(buf, NULL, 10)) : 0;
    if (pid <= 1 || pid == (long)getpid())
        return;
    int pidfd = pidfd_open_((pid_t)pid);
    if (pidfd < 0)
        return; /* gone */
    snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    /* comm is the first 15 bytes of the program's name */
    if (n > 0 && strncmp(buf, "nvidia-cuda-mps", 15) == 0) {
        log_warn("mps: GPU set %s: a control daemon (pid %ld) left by an earlier run holds %s: "
                 "killing it",
                 s->name, pid, s->pipe_dir);
        pidfd_kill(pidfd, SIGKILL);
        if (!pidfd_wait(pidfd, s->sup->opts.stop_timeout_ns))
            log_warn("mps: GPU set %s: pid %ld did not exit", s->name, pid);
    }
    close(pidfd);
}

int mps_sup_start(struct mps_sup *sup)
{
    if (!sup)
        return -EINVAL;
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
        if (job_spawn(s, JOB_PROBE, NULL, "quit\n") == 0) {
            ev_loop_del_io(sup->loop, s->job.pidfd); /* waited on here, not by the loop */
            pidfd_wait(s->job.pidfd, sup->opts.stop_timeout_ns);
        }
        if (!pidfd_wait(s->daemon_pidfd, s->job.kind ? sup->opts.stop_timeout_ns : 0)) {
            log_warn("mps: GPU set %s: the daemon did not quit; killing it", s->name);
            pidfd_kill(s->daemon_pidfd, SIGKILL);
            pidfd_wait(s->daemon_pidfd, sup->opts.stop_timeout_ns);
        }
        job_cancel(s);
        close(s->daemon_pidfd);
        s->daemon_pidfd = -1;
        s->daemon_pid = 0;
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
        if (job_spawn(s, JOB_QUIT, NULL, "quit\n") < 0)
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
    for (size_t i = 0; i < sup->n_sets; i++) {
        struct set *s = &sup->sets[i];
        if (s->sup)
            set_stop(s);
        free(s->name);
        free(s->cmds);
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

bool mps_sup_healthy(const struct mps_sup *sup, size_t set)
{
    return set < sup->n_sets && sup->sets[set].healthy;
}

unsigned mps_sup_restarts(const struct mps_sup *sup, size_t set)
{
    return set < sup->n_sets ? sup->sets[set].restarts : 0;
}
