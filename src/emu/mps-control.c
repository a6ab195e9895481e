/* mps-control.c — the emulator's nvidia-cuda-mps-control.
 *
 * Behaves like NVIDIA's tool as far as a node agent can see it:
 *   -d      start the control daemon in the background (returns once it accepts commands)
 *   -f      run it in the foreground (log lines also go to stderr)
 *   (none)  read commands from stdin, send each to the running daemon, print the replies
 * The pipe directory is $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps): it holds the
 * control socket `control`, the lock `control_lock` that stops a second daemon, and
 * `nvidia-cuda-mps-control.pid`. The log directory is $CUDA_MPS_LOG_DIRECTORY (default
 * /var/log/nvidia-mps) with `control.log`.
 *
 * The daemon keeps its settings (default and per-server active thread percentage and pinned
 * device memory limits) in memory and publishes them to the emulated machine's MPS section
 * (state-mps.c) so the emulated libcuda can read them. "Servers" are real child processes
 * named nvidia-cuda-mps-server that do nothing but exist, so their PIDs behave like real
 * ones (kill -0 works, shutdown_server ends them).
 *
 * Protocol between the stdin client and the daemon (ours, not NVIDIA's): one connection per
 * command; the client writes the line and shuts down its write side; the daemon answers
 * "0\n" or "1\n" (success, failure) followed by the text to print, then closes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "mps-cmd.h"
#include "state-mps.h"
#include "state.h"
#include "util.h"

#define PROG "nvidia-cuda-mps-control"
#define DEFAULT_PIPE_DIR "/tmp/nvidia-mps"
#define DEFAULT_LOG_DIR "/var/log/nvidia-mps"
#define REPLY_MAX 16384
#define IO_TIMEOUT_MS 2000

struct daemon {
    char pipe_dir[PATH_MAX];
    char log_dir[PATH_MAX];
    char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char pid_path[PATH_MAX];
    int lock_fd;
    int listen_fd;
    int sig_fd;
    FILE *log;
    bool foreground;
    bool quit;
    struct emu_state *st;      /* NULL: no emulated machine; settings live in memory only */
    int mps_slot;              /* our slot in the state's MPS section, -1 none */
    struct emu_mps_daemon cfg; /* the settings; published whole after each change */
    /* The devices the daemon sees (CUDA_VISIBLE_DEVICES at its start), as machine indexes: its
     * device N, in commands, is the machine's GPU visible[N]; limits are kept by machine
     * index, which is what the emulated libcuda's clients look up. */
    unsigned visible[EMU_MAX_GPUS];
    int n_visible;
};

static void dlog(struct daemon *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dlog(struct daemon *d, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    /* The real daemon's line shape: "[date time.ms Control pid] message" */
    if (d->log) {
        fprintf(d->log, "[%s.%03ld Control %d] %s\n", when, ts.tv_nsec / 1000000, (int)getpid(),
                msg);
        fflush(d->log);
    }
    if (d->foreground)
        fprintf(stderr, "[%s.%03ld Control %d] %s\n", when, ts.tv_nsec / 1000000, (int)getpid(),
                msg);
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

static int set_paths(struct daemon *d)
{
    const char *pipe = env_or("CUDA_MPS_PIPE_DIRECTORY", DEFAULT_PIPE_DIR);
    const char *logd = env_or("CUDA_MPS_LOG_DIRECTORY", DEFAULT_LOG_DIR);
    if (strlen(pipe) >= sizeof(d->pipe_dir) || strlen(logd) >= sizeof(d->log_dir))
        return -ENAMETOOLONG;
    snprintf(d->pipe_dir, sizeof(d->pipe_dir), "%s", pipe);
    snprintf(d->log_dir, sizeof(d->log_dir), "%s", logd);
    if ((size_t)snprintf(d->sock_path, sizeof(d->sock_path), "%s/control", pipe) >=
        sizeof(d->sock_path))
        return -ENAMETOOLONG;
    snprintf(d->pid_path, sizeof(d->pid_path), "%s/" PROG ".pid", pipe);
    return 0;
}

/* ---------------------------------------------------------------- client */

static int connect_daemon(const char *sock_path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len); /* SIGPIPE is ignored: EPIPE comes back */
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Sends one command; prints the reply text. Returns 0 (the daemon said success), 1 (it
 * refused the command) or -errno (no daemon, broken reply). */
static int client_send(const char *sock_path, const char *line)
{
    int fd = connect_daemon(sock_path);
    if (fd < 0)
        return fd;
    int r = write_all(fd, line, strlen(line));
    if (r == 0)
        r = write_all(fd, "\n", 1);
    if (r < 0) {
        close(fd);
        return r;
    }
    shutdown(fd, SHUT_WR);
    char *buf = malloc(REPLY_MAX + 1);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, REPLY_MAX - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == REPLY_MAX)
            break;
    }
    close(fd);
    buf[len] = '\0';
    if (r == 0) {
        if (len < 2 || (buf[0] != '0' && buf[0] != '1') || buf[1] != '\n') {
            r = -EPROTO;
        } else {
            fputs(buf + 2, stdout);
            fflush(stdout);
            r = buf[0] == '1';
        }
    }
    free(buf);
    return r;
}

static int run_client(struct daemon *d)
{
    char line[MPS_CMD_MAX_LINE + 2];
    int status = 0;
    while (fgets(line, sizeof(line), stdin)) {
        size_t len = strlen(line);
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        else if (!feof(stdin)) {
            fprintf(stderr, PROG ": command longer than %d bytes\n", MPS_CMD_MAX_LINE);
            int c;
            while ((c = getchar()) != EOF && c != '\n')
                ;
            status = 1;
            continue;
        }
        if (strspn(line, " \t\r") == len)
            continue;
        int r = client_send(d->sock_path, line);
        if (r < 0) {
            if (r == -ENOENT || r == -ECONNREFUSED)
                fprintf(stderr, PROG ": no MPS control daemon on %s (start one with -d)\n",
                        d->pipe_dir);
            else
                fprintf(stderr, PROG ": talking to the daemon at %s: %s\n", d->sock_path,
                        strerror(-r));
            return 1;
        }
        /* r > 0: the daemon refused the command. NVIDIA's front end still exits 0 when it
         * reached the daemon: the reply text says whether the command worked. */
    }
    return status;
}

/* ---------------------------------------------------------------- daemon: state */

static void publish(struct daemon *d)
{
    d->cfg.generation++;
    if (d->st && d->mps_slot >= 0)
        emu_state_mps_publish(d->st, d->mps_slot, &d->cfg);
}

static struct emu_mps_server *find_server(struct daemon *d, pid_t pid)
{
    for (uint32_t i = 0; i < d->cfg.server_count; i++)
        if (d->cfg.servers[i].pid == pid)
            return &d->cfg.servers[i];
    return NULL;
}

static void forget_server(struct daemon *d, pid_t pid)
{
    for (uint32_t i = 0; i < d->cfg.server_count; i++) {
        if (d->cfg.servers[i].pid != pid)
            continue;
        d->cfg.servers[i] = d->cfg.servers[d->cfg.server_count - 1];
        memset(&d->cfg.servers[d->cfg.server_count - 1], 0, sizeof(d->cfg.servers[0]));
        d->cfg.server_count--;
        publish(d);
        return;
    }
}

/* Collects exited servers (SIGCHLD). */
static void reap(struct daemon *d)
{
    for (;;) {
        int wst;
        pid_t pid = waitpid(-1, &wst, WNOHANG);
        if (pid <= 0)
            return;
        if (find_server(d, pid)) {
            dlog(d, "Server %d exited", (int)pid);
            forget_server(d, pid);
        }
    }
}

/* Waits (bounded) for a server child to end after a signal; SIGKILL when it lingers. */
static void stop_server(struct daemon *d, pid_t pid, bool force)
{
    kill(pid, force ? SIGKILL : SIGTERM);
    uint64_t deadline = mono_ns() + 2000000000ull;
    for (;;) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            break;
        if (mono_ns() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            break;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    forget_server(d, pid);
}

static int device_count(struct daemon *d)
{
    return d->n_visible;
}

static bool server_faulted(struct daemon *d, int32_t pid)
{
    for (int g = 0; d->st && g < d->n_visible; g++)
        if (emu_state_mps_fault_of(d->st, d->visible[g], pid, 0) ||
            emu_state_mps_fault_of(d->st, d->visible[g], d->cfg.pid, 0))
            return true;
    return false;
}

/* CUDA_VISIBLE_DEVICES ("A comma-separated sequence of GPU identifiers ... Only the devices
 * whose index is present in the sequence are visible to CUDA applications and they are
 * enumerated in the order of the sequence. If one of the indices is invalid, only the devices
 * whose index precedes the invalid index are visible", CUDA C++ Programming Guide, CUDA
 * Environment Variables): machine indexes or GPU UUIDs. Unset: every GPU in order. Without an
 * emulated machine every entry counts, in order (nothing to check it against). */
static void parse_visible(struct daemon *d)
{
    int n = d->st ? (int)emu_state_gpu_count(d->st) : EMU_MAX_GPUS;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    d->n_visible = 0;
    if (!v) {
        for (int i = 0; i < n && i < EMU_MAX_GPUS; i++)
            d->visible[d->n_visible++] = (unsigned)i;
        return;
    }
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", v);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok && d->n_visible < EMU_MAX_GPUS;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        int idx = -1;
        if (!d->st) {
            idx = d->n_visible; /* no machine to check against: settings in memory only */
        } else if (strncmp(tok, "GPU-", 4) == 0) {
            for (int i = 0; d->st && i < n; i++) {
                const struct emu_gpu *g = emu_state_gpu(d->st, (unsigned)i);
                if (g && strncmp(g->uuid, tok, strlen(tok)) == 0) {
                    idx = i;
                    break;
                }
            }
        } else {
            char *end;
            long l = strtol(tok, &end, 10);
            if (end != tok && *end == '\0' && l >= 0 && l < n)
                idx = (int)l;
        }
        if (idx < 0)
            break; /* an invalid entry ends the list */
        d->visible[d->n_visible++] = (unsigned)idx;
    }
}

/* The server child: exists until told to stop or until the daemon dies. */
static _Noreturn void server_main(pid_t parent)
{
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_IGN);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(0);
    prctl(PR_SET_NAME, "nvidia-cuda-mps");
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    for (;;)
        pause();
}

static int start_server(struct daemon *d, uint32_t uid, pid_t *ret_pid)
{
    if (d->cfg.server_count >= EMU_MPS_MAX_SERVERS)
        return -ENOSPC;
    for (uint32_t i = 0; i < d->cfg.server_count; i++)
        if (d->cfg.servers[i].uid == uid)
            return -EEXIST;
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0)
        server_main(parent);
    struct emu_mps_server *s = &d->cfg.servers[d->cfg.server_count++];
    memset(s, 0, sizeof(*s));
    s->pid = pid;
    s->uid = uid;
    /* A server takes the defaults of the moment it starts (later default changes only
     * affect the next server, as with NVIDIA's daemon). */
    s->thread_pct_x10 = d->cfg.default_thread_pct_x10;
    memcpy(s->pinned_limit, d->cfg.default_pinned_limit, sizeof(s->pinned_limit));
    publish(d);
    *ret_pid = pid;
    return 0;
}

static uint32_t proc_uid(pid_t pid, bool *ok)
{
    char path[64];
    struct stat sb;
    snprintf(path, sizeof(path), "/proc/%d", (int)pid);
    *ok = stat(path, &sb) == 0;
    return *ok ? sb.st_uid : 0;
}

/* ---------------------------------------------------------------- daemon: commands */

struct reply {
    char buf[REPLY_MAX];
    size_t len;
    bool failed;
};

static void say(struct reply *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct reply *r, const char *fmt, ...)
{
    if (r->len >= sizeof(r->buf) - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->buf + r->len, sizeof(r->buf) - r->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        r->len += (size_t)n < sizeof(r->buf) - r->len ? (size_t)n : sizeof(r->buf) - r->len - 1;
}

static void fail(struct reply *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct reply *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    say(r, "%s\n", msg);
    r->failed = true;
}

/* Client PIDs of the emulated GPUs: the processes holding memory on gpu, of user uid
 * (UINT32_MAX: anyone). There is no real MPS connection in the emulator: a process that uses
 * an emulated GPU while a server for its user runs counts as that server's client. */
static void list_clients(struct daemon *d, unsigned gpu, uint32_t uid, struct reply *r,
                         bool with_uuid)
{
    if (!d->st)
        return;
    struct emu_proc_mem procs[EMU_MAX_PROCS];
    size_t n = 0;
    if (emu_state_procs(d->st, gpu, procs, EMU_MAX_PROCS, &n) < 0)
        return;
    if (n > EMU_MAX_PROCS)
        n = EMU_MAX_PROCS;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        bool ok;
        uint32_t pu = proc_uid(procs[i].pid, &ok);
        if (!ok || (uid != UINT32_MAX && pu != uid))
            continue;
        if (with_uuid) {
            /* one line per device: "UUID pid pid ..." */
            if (!any)
                say(r, "%s", emu_state_gpu(d->st, gpu)->uuid);
            say(r, " %d", (int)procs[i].pid);
        } else {
            say(r, "%d\n", (int)procs[i].pid);
        }
        any = true;
    }
    if (with_uuid && any)
        say(r, "\n");
}

static void execute(struct daemon *d, const struct mps_cmd *c, struct reply *r)
{
    char buf[64];
    struct emu_mps_server *s = NULL;
    if (c->pid && c->kind != MPS_CMD_GET_DEVICE_CLIENT_LIST && c->kind != MPS_CMD_SHUTDOWN_SERVER) {
        s = find_server(d, c->pid);
        if (!s) {
            fail(r, "no MPS server with PID %d", (int)c->pid);
            return;
        }
    }
    bool has_dev = c->kind == MPS_CMD_GET_DEFAULT_PINNED_LIMIT ||
                   c->kind == MPS_CMD_SET_DEFAULT_PINNED_LIMIT ||
                   c->kind == MPS_CMD_GET_PINNED_LIMIT || c->kind == MPS_CMD_SET_PINNED_LIMIT;
    if (has_dev && (int)c->device >= device_count(d)) {
        fail(r, "no device %u (the daemon sees %d)", c->device, device_count(d));
        return;
    }
    unsigned m = has_dev ? d->visible[c->device] : 0; /* the device's machine index */

    switch (c->kind) {
    case MPS_CMD_QUIT:
        d->quit = true;
        break;
    case MPS_CMD_GET_SERVER_LIST:
        for (uint32_t i = 0; i < d->cfg.server_count; i++)
            say(r, "%d\n", (int)d->cfg.servers[i].pid);
        break;
    case MPS_CMD_GET_SERVER_STATUS:
        /* FAULT while clients a fatal XID hit on one of its GPUs live (MPS guide, "Error
         * Containment"; emu_state_mps_fault_of) */
        say(r, "%s\n", server_faulted(d, c->pid) ? "FAULT" : "ACTIVE");
        break;
    case MPS_CMD_START_SERVER: {
        pid_t pid = 0;
        int e = start_server(d, c->uid, &pid);
        if (e == -EEXIST)
            fail(r, "a server for uid %u is already running", c->uid);
        else if (e == -ENOSPC)
            fail(r, "too many servers (at most %d)", EMU_MPS_MAX_SERVERS);
        else if (e < 0)
            fail(r, "cannot start a server: %s", strerror(-e));
        else
            dlog(d, "Server %d (uid %u) started", (int)pid, c->uid);
        break;
    }
    case MPS_CMD_SHUTDOWN_SERVER:
        if (!find_server(d, c->pid)) {
            fail(r, "no MPS server with PID %d", (int)c->pid);
            break;
        }
        stop_server(d, c->pid, c->force);
        dlog(d, "Server %d shut down", (int)c->pid);
        break;
    case MPS_CMD_GET_CLIENT_LIST:
        for (int g = 0; d->st && g < device_count(d); g++)
            list_clients(d, d->visible[g], s->uid, r, false);
        break;
    case MPS_CMD_GET_DEVICE_CLIENT_LIST: {
        uint32_t uid = UINT32_MAX;
        if (c->pid) {
            struct emu_mps_server *srv = find_server(d, c->pid);
            if (!srv) {
                fail(r, "no MPS server with PID %d", (int)c->pid);
                break;
            }
            uid = srv->uid;
        }
        for (int g = 0; d->st && g < device_count(d); g++)
            list_clients(d, d->visible[g], uid, r, true);
        break;
    }
    case MPS_CMD_GET_DEFAULT_THREAD_PCT:
        say(r, "%s\n", mps_cmd_format_pct(d->cfg.default_thread_pct_x10, buf, sizeof(buf)));
        break;
    case MPS_CMD_SET_DEFAULT_THREAD_PCT:
        d->cfg.default_thread_pct_x10 = c->thread_pct_x10;
        publish(d);
        say(r, "%s\n", mps_cmd_format_pct(c->thread_pct_x10, buf, sizeof(buf)));
        break;
    case MPS_CMD_GET_THREAD_PCT:
        say(r, "%s\n", mps_cmd_format_pct(s->thread_pct_x10, buf, sizeof(buf)));
        break;
    case MPS_CMD_SET_THREAD_PCT:
        s->thread_pct_x10 = c->thread_pct_x10;
        publish(d);
        say(r, "%s\n", mps_cmd_format_pct(c->thread_pct_x10, buf, sizeof(buf)));
        break;
    case MPS_CMD_GET_DEFAULT_PINNED_LIMIT:
        say(r, "%s\n", mps_cmd_format_bytes(d->cfg.default_pinned_limit[m], buf, sizeof(buf)));
        break;
    case MPS_CMD_SET_DEFAULT_PINNED_LIMIT:
        d->cfg.default_pinned_limit[m] = c->bytes;
        publish(d);
        break;
    case MPS_CMD_GET_PINNED_LIMIT:
        say(r, "%s\n", mps_cmd_format_bytes(s->pinned_limit[m], buf, sizeof(buf)));
        break;
    case MPS_CMD_SET_PINNED_LIMIT:
        s->pinned_limit[m] = c->bytes;
        publish(d);
        break;
    }
}

/* Reads one command from a fresh connection (bounded in size and time, so a silent client
 * cannot stall the daemon for long) and answers it. */
static void serve_one(struct daemon *d, int fd)
{
    char line[MPS_CMD_MAX_LINE + 2];
    size_t len = 0;
    uint64_t deadline = mono_ns() + (uint64_t)IO_TIMEOUT_MS * 1000000ull;
    bool complete = false;
    while (len < sizeof(line) - 1) {
        uint64_t now = mono_ns();
        if (now >= deadline)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, (int)((deadline - now) / 1000000ull) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        ssize_t n = read(fd, line + len, sizeof(line) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            complete = n == 0;
            break;
        }
        len += (size_t)n;
        if (memchr(line, '\n', len)) {
            complete = true;
            break;
        }
    }
    line[len] = '\0';
    char *nl = memchr(line, '\n', len);
    if (nl)
        nl[1] = '\0';

    struct reply *r = calloc(1, sizeof(*r));
    if (!r)
        return;
    if (!complete) {
        fail(r, "incomplete command");
    } else {
        struct mps_cmd c;
        char err[256];
        int e = mps_cmd_parse(line, &c, err, sizeof(err));
        if (nl)
            *nl = '\0';
        if (e == -ENODATA) {
            /* blank line: nothing to do */
        } else if (e < 0) {
            dlog(d, "Cmd:%s (refused: %s)", line, err);
            fail(r, "%s", err);
        } else {
            dlog(d, "Cmd:%s", line);
            execute(d, &c, r);
        }
    }
    char head[3] = {r->failed ? '1' : '0', '\n', 0};
    if (write_all(fd, head, 2) == 0)
        write_all(fd, r->buf, r->len);
    free(r);
}

/* ---------------------------------------------------------------- daemon: life cycle */

static int lock_pipe_dir(struct daemon *d, char *err, size_t errlen)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/control_lock", d->pipe_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -errno;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        char *old = NULL;
        long other = 0;
        if (fs_read_all(d->pid_path, 64, &old, NULL) == 0)
            other = strtol(old, NULL, 10);
        free(old);
        if (e == EWOULDBLOCK)
            snprintf(err, errlen,
                     "an MPS control daemon is already running on pipe directory %s (pid %ld)",
                     d->pipe_dir, other);
        else
            snprintf(err, errlen, "cannot lock %s: %s", path, strerror(e));
        close(fd);
        return -(e == EWOULDBLOCK ? EBUSY : e);
    }
    d->lock_fd = fd;
    return 0;
}

static int open_socket(struct daemon *d, char *err, size_t errlen)
{
    /* We hold the lock: whatever socket file is there belongs to a dead daemon. */
    unlink(d->sock_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -errno;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->sock_path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot listen on %s: %s", d->sock_path, strerror(e));
        close(fd);
        return -e;
    }
    d->listen_fd = fd;
    return 0;
}

static int setup(struct daemon *d, char *err, size_t errlen)
{
    int r = fs_mkdir_p(d->pipe_dir, 0755);
    if (r < 0) {
        snprintf(err, errlen, "cannot create pipe directory %s: %s", d->pipe_dir, strerror(-r));
        return r;
    }
    r = fs_mkdir_p(d->log_dir, 0755);
    if (r < 0) {
        snprintf(err, errlen, "cannot create log directory %s: %s", d->log_dir, strerror(-r));
        return r;
    }
    if ((r = lock_pipe_dir(d, err, errlen)) < 0)
        return r;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/control.log", d->log_dir);
    d->log = fopen(path, "ae");
    if (!d->log) {
        r = -errno;
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(-r));
        return r;
    }
    if ((r = open_socket(d, err, errlen)) < 0)
        return r;
    char pidbuf[32];
    int n = snprintf(pidbuf, sizeof(pidbuf), "%d\n", (int)getpid());
    if ((r = fs_write_atomic(d->pid_path, pidbuf, (size_t)n, 0644)) < 0) {
        snprintf(err, errlen, "cannot write %s: %s", d->pid_path, strerror(-r));
        return r;
    }

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    d->sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d->sig_fd < 0) {
        r = -errno;
        snprintf(err, errlen, "signalfd: %s", strerror(-r));
        return r;
    }
    signal(SIGPIPE, SIG_IGN);

    d->cfg.pid = getpid();
    d->cfg.default_thread_pct_x10 = 1000;
    if (strlen(d->pipe_dir) >= sizeof(d->cfg.pipe_dir)) {
        snprintf(err, errlen, "pipe directory name longer than %zu bytes",
                 sizeof(d->cfg.pipe_dir) - 1);
        return -ENAMETOOLONG;
    }
    memcpy(d->cfg.pipe_dir, d->pipe_dir, strlen(d->pipe_dir) + 1);
    d->mps_slot = -1;
    r = emu_state_open_env(&d->st);
    if (r < 0) {
        d->st = NULL;
        dlog(d, "No emulated machine (%s): settings are kept in memory only", strerror(-r));
    } else {
        r = emu_state_mps_claim(d->st, &d->cfg, &d->mps_slot);
        if (r < 0)
            dlog(d, "Cannot record settings in the emulated machine: %s", strerror(-r));
    }
    parse_visible(d);
    dlog(d, "Starting control daemon using socket %s", d->sock_path);
    return 0;
}

static void teardown(struct daemon *d)
{
    while (d->cfg.server_count > 0)
        stop_server(d, d->cfg.servers[0].pid, false);
    if (d->st && d->mps_slot >= 0)
        emu_state_mps_release(d->st, d->mps_slot);
    d->st = emu_state_close(d->st);
    if (d->listen_fd >= 0) {
        unlink(d->sock_path);
        close(d->listen_fd);
    }
    if (d->lock_fd >= 0) {
        unlink(d->pid_path);
        close(d->lock_fd); /* releases the lock last: the next daemon finds a clean dir */
    }
    if (d->sig_fd >= 0)
        close(d->sig_fd);
    if (d->log) {
        dlog(d, "Control daemon exited");
        fclose(d->log);
        d->log = NULL;
    }
}

static void run_loop(struct daemon *d)
{
    while (!d->quit) {
        struct pollfd p[2] = {{.fd = d->listen_fd, .events = POLLIN},
                              {.fd = d->sig_fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            dlog(d, "poll: %s", strerror(errno));
            break;
        }
        if (p[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(d->sig_fd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGCHLD) {
                    reap(d);
                } else if (si.ssi_signo != SIGHUP) {
                    dlog(d, "Received signal %u, shutting down", si.ssi_signo);
                    d->quit = true;
                }
            }
        }
        if (p[0].revents & POLLIN) {
            int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                serve_one(d, fd);
                close(fd);
            }
        }
    }
}

static void daemon_init(struct daemon *d)
{
    d->lock_fd = d->listen_fd = d->sig_fd = -1;
    d->mps_slot = -1;
}

static int run_foreground(struct daemon *d)
{
    char err[PATH_MAX + 128];
    d->foreground = true;
    if (setup(d, err, sizeof(err)) < 0) {
        fprintf(stderr, PROG ": %s\n", err);
        teardown(d);
        return 1;
    }
    run_loop(d);
    teardown(d);
    return 0;
}

/* -d: the parent returns once the child accepts commands (or with the child's error), so a
 * script can send commands right after `nvidia-cuda-mps-control -d`. */
static int run_background(struct daemon *d)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid > 0) {
        close(pfd[1]);
        char msg[PATH_MAX + 128];
        size_t len = 0;
        ssize_t n;
        while (len < sizeof(msg) - 1 && ((n = read(pfd[0], msg + len, sizeof(msg) - 1 - len)) > 0 ||
                                         (n < 0 && errno == EINTR)))
            if (n > 0)
                len += (size_t)n;
        close(pfd[0]);
        msg[len] = '\0';
        if (strcmp(msg, "ok") == 0)
            return 0;
        fprintf(stderr, PROG ": %s\n", len ? msg : "the daemon died while starting");
        waitpid(pid, NULL, 0);
        return 1;
    }
    close(pfd[0]);
    setsid();
    char err[PATH_MAX + 128];
    if (setup(d, err, sizeof(err)) < 0) {
        write_all(pfd[1], err, strlen(err));
        teardown(d);
        _exit(1);
    }
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
        dup2(devnull, 2);
        if (devnull > 2)
            close(devnull);
    }
    write_all(pfd[1], "ok", 2);
    close(pfd[1]);
    run_loop(d);
    teardown(d);
    exit(0);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " [-d | -f]\n"
               "  -d   start the MPS control daemon in the background\n"
               "  -f   run the control daemon in the foreground\n"
               "  (no option) read commands from stdin and send them to the running daemon\n"
               "Pipe directory: $CUDA_MPS_PIPE_DIRECTORY (default " DEFAULT_PIPE_DIR ")\n"
               "Log directory:  $CUDA_MPS_LOG_DIRECTORY (default " DEFAULT_LOG_DIR ")\n"
               "This is accel-emu's emulated control daemon (see docs/emulator.md).\n");
}

int main(int argc, char **argv)
{
    struct daemon d = {0};
    daemon_init(&d);
    if (argc > 2) {
        usage(stderr);
        return 2;
    }
    if (set_paths(&d) < 0) {
        fprintf(stderr, PROG ": CUDA_MPS_PIPE_DIRECTORY or CUDA_MPS_LOG_DIRECTORY is too long\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (argc == 1)
        return run_client(&d);
    if (strcmp(argv[1], "-d") == 0)
        return run_background(&d);
    if (strcmp(argv[1], "-f") == 0)
        return run_foreground(&d);
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, PROG ": unknown option '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
