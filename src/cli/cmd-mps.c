/* cmd-mps.c — `accelctl mps`: what an MPS control daemon reports, per pipe
 * directory: whether it answers, its pid, its default active thread
 * percentage, its default pinned device memory limit per device, its servers
 * with their thread percentage and client pids.
 *
 * It talks to the daemon the portable way, through the control front end
 * (nvidia-cuda-mps-control reading a command on stdin, with
 * CUDA_MPS_PIPE_DIRECTORY naming the daemon), so the same code reads NVIDIA's
 * daemon and the emulator's. Commands are from NVIDIA's MPS guide, "Appendix:
 * Tools and Interface Reference". Each command has a deadline: a hung daemon
 * shows as "not answering" instead of hanging the CLI. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accelctl.h"
#include "cgroup.h"

#define MPS_REPLY_MAX 8192
#define MPS_MAX_DEVICES 64
#define MPS_DEADLINE_MS 5000

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs `control` with cmd on stdin and CUDA_MPS_PIPE_DIRECTORY=dir; the reply
 * (stdout + stderr) goes to out. Returns the exit status (>= 0), or -ETIMEDOUT
 * when it did not finish before the deadline (it is killed), or -errno. */
static int mps_ask(const char *control, const char *dir, const char *cmd, char *out, size_t len)
{
    int in[2], rd[2];
    if (pipe2(in, O_CLOEXEC) < 0)
        return -errno;
    if (pipe2(rd, O_CLOEXEC) < 0) {
        int e = -errno;
        close(in[0]);
        close(in[1]);
        return e;
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        close(in[0]), close(in[1]), close(rd[0]), close(rd[1]);
        return e;
    }
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(rd[1], 1);
        dup2(rd[1], 2);
        setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
        execlp(control, control, (char *)NULL);
        dprintf(1, "cannot run %s: %s\n", control, strerror(errno));
        _exit(127);
    }
    close(in[0]);
    close(rd[1]);
    /* a command is one short line: it fits the pipe, so this cannot block */
    if (write(in[1], cmd, strlen(cmd)) < 0 || write(in[1], "\n", 1) < 0) {
        /* the child died early; its output and status still tell why */
    }
    close(in[1]);
    size_t n = 0;
    long long end = now_ms() + MPS_DEADLINE_MS;
    bool timed_out = false;
    for (;;) {
        long long left = end - now_ms();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd p = {.fd = rd[0], .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            timed_out = r == 0;
            break;
        }
        char tmp[512];
        ssize_t k = read(rd[0], tmp, sizeof(tmp));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        size_t take = (size_t)k < len - 1 - n ? (size_t)k : len - 1 - n;
        memcpy(out + n, tmp, take);
        n += take;
    }
    out[n] = '\0';
    close(rd[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (timed_out)
        return -ETIMEDOUT;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void chomp(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
}

static void first_line(char *s)
{
    s[strcspn(s, "\n")] = '\0';
}

/* Prints one daemon; returns 0 when it answered, 1 when not. */
static const char *proc_root; /* --proc-root: where /proc is, for the clients' cgroups */

/* One line per client pid: its pod UID and container ID when its cgroup names a pod. */
static void show_clients(char *list)
{
    int n = 0;
    for (char *save = NULL, *t = strtok_r(list, " \n", &save); t;
         t = strtok_r(NULL, " \n", &save)) {
        char *e;
        long pid = strtol(t, &e, 10);
        if (*e || pid <= 0)
            continue;
        struct kube_cgroup_ref ref;
        if (kube_cgroup_read(proc_root, (pid_t)pid, &ref) == 0)
            printf("    client %ld: pod %s, container %s\n", pid, ref.pod_uid,
                   ref.container_id[0] ? ref.container_id : "(the pod's own cgroup)");
        else
            printf("    client %ld: not in a pod\n", pid);
        n++;
    }
    if (!n)
        printf("    clients: (none)\n");
}

static int show_dir(const char *control, const char *dir)
{
    char buf[MPS_REPLY_MAX], q[128];
    printf("%s:\n", dir);
    int r = mps_ask(control, dir, "get_server_list", buf, sizeof(buf));
    if (r != 0) {
        chomp(buf);
        printf("  state: %s%s%s\n", r == -ETIMEDOUT ? "not answering (hung?)" : "down",
               buf[0] ? ": " : "", buf);
        return 1;
    }
    char servers[MPS_REPLY_MAX];
    snprintf(servers, sizeof(servers), "%s", buf);
    char pidfile[4096], pidtxt[32] = "?";
    snprintf(pidfile, sizeof(pidfile), "%s/nvidia-cuda-mps-control.pid", dir);
    FILE *f = fopen(pidfile, "re");
    if (f) {
        if (!fgets(pidtxt, sizeof(pidtxt), f))
            snprintf(pidtxt, sizeof(pidtxt), "?");
        fclose(f);
        chomp(pidtxt);
    }
    printf("  state: up (control daemon pid %s)\n", pidtxt);
    if (mps_ask(control, dir, "get_default_active_thread_percentage", buf, sizeof(buf)) == 0) {
        first_line(buf);
        printf("  default active thread percentage: %s\n", buf);
    }
    int n_limits = 0;
    for (int d = 0; d < MPS_MAX_DEVICES; d++) {
        snprintf(q, sizeof(q), "get_default_device_pinned_mem_limit %d", d);
        /* the front end exits 0 once it reached the daemon, so the end of its devices is
         * the reply's "no device N" */
        if (mps_ask(control, dir, q, buf, sizeof(buf)) != 0 || !buf[0] ||
            strncmp(buf, "no device", 9) == 0)
            break;
        first_line(buf);
        if (strcmp(buf, "0") != 0) /* "0": no limit */
            printf("  default pinned memory limit, device %d: %s\n", d, buf), n_limits++;
    }
    if (!n_limits)
        printf("  default pinned memory limit: none\n");
    int n_servers = 0;
    for (char *save = NULL, *s = strtok_r(servers, " \n", &save); s;
         s = strtok_r(NULL, " \n", &save)) {
        if (strspn(s, "0123456789") != strlen(s))
            continue;
        n_servers++;
        printf("  server %s:\n", s);
        snprintf(q, sizeof(q), "get_active_thread_percentage %s", s);
        if (mps_ask(control, dir, q, buf, sizeof(buf)) == 0) {
            first_line(buf);
            printf("    active thread percentage: %s\n", buf);
        }
        snprintf(q, sizeof(q), "get_server_status %s", s);
        if (mps_ask(control, dir, q, buf, sizeof(buf)) == 0) {
            first_line(buf);
            printf("    status: %s%s\n", buf,
                   strcmp(buf, "FAULT") == 0
                       ? " (a fatal GPU error hit its clients; new clients are refused until "
                         "they exit)"
                       : "");
        }
        snprintf(q, sizeof(q), "get_client_list %s", s);
        if (mps_ask(control, dir, q, buf, sizeof(buf)) == 0)
            show_clients(buf);
    }
    if (!n_servers)
        printf("  servers: none (one starts when the first client connects)\n");
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: accelctl mps [--mps-control PATH] [--state-dir DIR] [--proc-root DIR]\n"
               "                    [PIPE_DIR...]\n"
               "  Shows each MPS control daemon: state, defaults, servers (status, thread\n"
               "  percentage), clients (pod and container from /proc/PID/cgroup; --proc-root:\n"
               "  where /proc is, default /proc).\n"
               "  PIPE_DIR: a daemon's CUDA_MPS_PIPE_DIRECTORY (default: that variable,\n"
               "  else /tmp/nvidia-mps). --state-dir: every daemon acceld runs under DIR\n"
               "  (acceld's stateDir: DIR/mps/mps-<set>/pipe). --mps-control: the control\n"
               "  front end (default: nvidia-cuda-mps-control on PATH).\n");
}

static int only_sets(const struct dirent *e)
{
    return strncmp(e->d_name, "mps-", 4) == 0;
}

/* Every daemon acceld runs under its state dir, in name order. Returns the count of those
 * down, or -1 when there are none (said on stderr). */
static int show_state_dir(const char *control, const char *state)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/mps", state);
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, only_sets, alphasort);
    if (n <= 0) {
        fprintf(stderr, "accelctl mps: no MPS daemon directories under %s%s%s\n", dir,
                n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
        free(ents);
        return -1;
    }
    int down = 0;
    for (int i = 0; i < n; i++) {
        char pipe[4096 + 300];
        snprintf(pipe, sizeof(pipe), "%s/%s/pipe", dir, ents[i]->d_name);
        down += show_dir(control, pipe);
        free(ents[i]);
    }
    free(ents);
    return down;
}

int accelctl_cmd_mps(int argc, char **argv)
{
    static const struct option opts[] = {{"mps-control", required_argument, NULL, 'c'},
                                         {"state-dir", required_argument, NULL, 's'},
                                         {"proc-root", required_argument, NULL, 'p'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *control = "nvidia-cuda-mps-control", *state = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'c') {
            control = optarg;
        } else if (c == 's') {
            state = optarg;
        } else if (c == 'p') {
            proc_root = optarg;
        } else if (c == 'h') {
            usage(stdout);
            return ACCELCTL_EXIT_OK;
        } else {
            usage(stderr);
            return ACCELCTL_EXIT_USAGE;
        }
    }
    int down = 0;
    if (state) {
        int r = show_state_dir(control, state);
        if (r < 0)
            return ACCELCTL_EXIT_FAILURE;
        down += r;
    } else if (optind == argc) {
        const char *d = getenv("CUDA_MPS_PIPE_DIRECTORY");
        down += show_dir(control, d && *d ? d : "/tmp/nvidia-mps");
    }
    for (int i = optind; i < argc; i++)
        down += show_dir(control, argv[i]);
    fflush(stdout);
    return down ? ACCELCTL_EXIT_FAILURE : ACCELCTL_EXIT_OK;
}
