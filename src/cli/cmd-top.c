/*
 * cmd-top.c — `accelctl top`: a live terminal view of the node's GPUs, like nvtop for a
 * Kubernetes node. Per GPU: utilization, memory used/total, power, temperature and whether it
 * answers NVML; under each GPU its processes with pid, pod and container (from
 * /proc/PID/cgroup, named through the kubelet's pod-resources API where that is unambiguous),
 * device memory and SM utilization.
 *
 * NVML comes through the project's loader (src/gpu/nvml.c), so it runs on the emulator.
 * Interactive mode: the alternate screen, raw keys (q quits, s cycles the sort key), redrawn
 * every --interval and at once on SIGWINCH; SIGINT/SIGTERM/exit restore the terminal.
 * --once prints one frame (no escape sequences) and exits: for scripts and tests.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "accelctl.h"
#include "cgroup.h"
#include "nvml.h"
#include "podres.h"
#include "util.h"

#define TOP_MAX_GPUS 64
#define TOP_MAX_PROCS 64
/* NVML's per-process samples: it refuses a buffer smaller than its own sample buffer
 * (INSUFFICIENT_SIZE; 72 entries on an H200 with driver 580), however few processes are busy */
#define TOP_UTIL_SAMPLES 256
#define TOP_PODRES_TIMEOUT_MS 500
#define TOP_DEFAULT_PODRES "/var/lib/kubelet/pod-resources/kubelet.sock"

enum top_sort { TOP_SORT_MEM = 0, TOP_SORT_UTIL, TOP_SORT_PID, TOP_SORT_N };
static const char *const sort_names[TOP_SORT_N] = {"memory", "util", "pid"};

struct top_proc {
    unsigned pid;
    uint64_t mem;                    /* UINT64_MAX: NVML cannot tell */
    int util;                        /* SM %, -1 unknown */
    struct kube_cgroup_ref ref;      /* pod_uid "" = not in a pod */
    const struct podres_entry *name; /* NULL = pod-resources cannot say */
};

struct top_gpu {
    char uuid[96], name[96], err[128];
    bool ok;                          /* answers NVML */
    int util, temp, power_w, limit_w; /* -1: unknown */
    uint64_t mem_used, mem_total;
    bool mem_ok;
    size_t nprocs;
    struct top_proc procs[TOP_MAX_PROCS];
};

struct top {
    struct gpu_nvml *nvml;
    const char *proc_root;
    const char *podres_socket; /* NULL: off */
    struct podres podres;
    bool podres_ok;
    unsigned ngpus;
    struct top_gpu gpus[TOP_MAX_GPUS];
    enum top_sort sort;
};

static void top_usage(FILE *f)
{
    fprintf(f,
            "usage: accelctl top [--once] [--interval SECONDS] [--sort memory|util|pid]\n"
            "                    [--nvml PATH] [--proc-root DIR] [--pod-resources-socket PATH]\n"
            "\n"
            "A live view of the node's GPUs and the processes (pods) on them, refreshed every\n"
            "interval. Keys: q quits, s cycles the sort key of the process lists.\n"
            "\n"
            "  --once             print one frame and exit (no terminal control)\n"
            "  --interval SECONDS refresh period, 0.1 to 3600 (default 2)\n"
            "  --sort KEY         processes by memory (default), util or pid\n"
            "  --nvml PATH        NVML library to load (default: $ACCEL_NVML_LIBRARY, else\n"
            "                     libnvidia-ml.so.1)\n"
            "  --proc-root DIR    where /proc is, for the processes' cgroups (default /proc)\n"
            "  --pod-resources-socket PATH\n"
            "                     the kubelet's pod-resources socket, to name pods and\n"
            "                     containers (default %s; '' turns it off)\n",
            TOP_DEFAULT_PODRES);
}

#define NVML_OK(call) ((call) == NVML_SUCCESS)

static void sample_procs(struct top *t, nvmlDevice_t dev, struct top_gpu *g)
{
    struct gpu_process p[TOP_MAX_PROCS];
    size_t n = 0;
    if (gpu_nvml_running_processes(t->nvml, dev, p, TOP_MAX_PROCS, &n) < 0)
        n = 0;
    nvmlProcessUtilizationSample_t u[TOP_UTIL_SAMPLES];
    unsigned nu = TOP_UTIL_SAMPLES;
    if (!t->nvml->nvmlDeviceGetProcessUtilization ||
        !NVML_OK(t->nvml->nvmlDeviceGetProcessUtilization(dev, u, &nu, 0)))
        nu = 0;
    g->nprocs = n;
    for (size_t k = 0; k < n; k++) {
        struct top_proc *tp = &g->procs[k];
        memset(tp, 0, sizeof *tp);
        tp->pid = p[k].pid;
        tp->mem = p[k].used_memory_bytes;
        tp->util = nu ? 0 : -1; /* listed samples cover every busy process: absent = idle */
        for (unsigned j = 0; j < nu; j++)
            if (u[j].pid == tp->pid)
                tp->util = (int)u[j].smUtil;
        if (kube_cgroup_read(t->proc_root, (pid_t)tp->pid, &tp->ref) < 0)
            memset(&tp->ref, 0, sizeof tp->ref);
    }
}

/* A GPU listed for exactly one container in pod-resources, with processes of one container
 * ID on it: they are that container (podres.h: the API names no container ID). */
static void name_procs(struct top *t)
{
    if (!t->podres_ok)
        return;
    for (unsigned i = 0; i < t->ngpus; i++) {
        struct top_gpu *g = &t->gpus[i];
        const struct podres_entry *first;
        const char *cid = NULL;
        bool one = true;
        if (podres_holders(&t->podres, g->uuid, &first) != 1)
            continue;
        for (size_t k = 0; k < g->nprocs; k++)
            if (g->procs[k].ref.pod_uid[0]) {
                if (cid && strcmp(cid, g->procs[k].ref.container_id))
                    one = false;
                cid = g->procs[k].ref.container_id;
            }
        for (size_t k = 0; k < g->nprocs && one; k++)
            if (g->procs[k].ref.pod_uid[0])
                g->procs[k].name = first;
    }
}

static int cmp_mem(const void *a, const void *b)
{
    const struct top_proc *x = a, *y = b;
    uint64_t mx = x->mem == UINT64_MAX ? 0 : x->mem, my = y->mem == UINT64_MAX ? 0 : y->mem;
    return mx < my ? 1 : mx > my ? -1 : (x->pid > y->pid) - (x->pid < y->pid);
}

static int cmp_util(const void *a, const void *b)
{
    const struct top_proc *x = a, *y = b;
    return x->util < y->util ? 1 : x->util > y->util ? -1 : cmp_mem(a, b);
}

static int cmp_pid(const void *a, const void *b)
{
    const struct top_proc *x = a, *y = b;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

static void sort_procs(struct top *t)
{
    int (*cmp)(const void *, const void *) = t->sort == TOP_SORT_UTIL  ? cmp_util
                                             : t->sort == TOP_SORT_PID ? cmp_pid
                                                                       : cmp_mem;
    for (unsigned i = 0; i < t->ngpus; i++)
        qsort(t->gpus[i].procs, t->gpus[i].nprocs, sizeof t->gpus[i].procs[0], cmp);
}

static void sample(struct top *t)
{
    struct gpu_nvml *n = t->nvml;
    unsigned count = 0;
    if (!NVML_OK(n->nvmlDeviceGetCount_v2(&count)))
        count = 0;
    t->ngpus = count > TOP_MAX_GPUS ? TOP_MAX_GPUS : count;
    for (unsigned i = 0; i < t->ngpus; i++) {
        struct top_gpu *g = &t->gpus[i];
        nvmlDevice_t dev;
        nvmlReturn_t r;
        memset(g, 0, offsetof(struct top_gpu, procs));
        g->util = g->temp = g->power_w = g->limit_w = -1;
        r = n->nvmlDeviceGetHandleByIndex_v2(i, &dev);
        if (r == NVML_SUCCESS && n->nvmlDeviceGetUUID)
            r = n->nvmlDeviceGetUUID(dev, g->uuid, sizeof g->uuid);
        if (r != NVML_SUCCESS) {
            snprintf(g->err, sizeof g->err, "%s", gpu_nvml_strerror(n, r));
            continue;
        }
        g->ok = true;
        if (n->nvmlDeviceGetName && !NVML_OK(n->nvmlDeviceGetName(dev, g->name, sizeof g->name)))
            g->name[0] = '\0';
        nvmlUtilization_t u;
        if (n->nvmlDeviceGetUtilizationRates && NVML_OK(n->nvmlDeviceGetUtilizationRates(dev, &u)))
            g->util = (int)u.gpu;
        nvmlMemory_t m;
        if (n->nvmlDeviceGetMemoryInfo && NVML_OK(r = n->nvmlDeviceGetMemoryInfo(dev, &m))) {
            g->mem_ok = true;
            g->mem_used = m.used;
            g->mem_total = m.total;
        } else if (n->nvmlDeviceGetMemoryInfo && r == NVML_ERROR_GPU_IS_LOST) {
            g->ok = false;
            snprintf(g->err, sizeof g->err, "%s", gpu_nvml_strerror(n, r));
        }
        unsigned v;
        if (n->nvmlDeviceGetTemperature &&
            NVML_OK(n->nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &v)))
            g->temp = (int)v;
        if (n->nvmlDeviceGetPowerUsage && NVML_OK(n->nvmlDeviceGetPowerUsage(dev, &v)))
            g->power_w = (int)(v / 1000);
        if (n->nvmlDeviceGetEnforcedPowerLimit &&
            NVML_OK(n->nvmlDeviceGetEnforcedPowerLimit(dev, &v)))
            g->limit_w = (int)(v / 1000);
        if (g->ok)
            sample_procs(t, dev, g);
    }
    if (t->podres_socket)
        t->podres_ok = podres_list(t->podres_socket, TOP_PODRES_TIMEOUT_MS, &t->podres) == 0;
    name_procs(t);
    sort_procs(t);
}

/* ---- rendering: a frame is a list of lines, each cut to the terminal's width ---- */

struct frame {
    char (*line)[512];
    size_t n, cap;
    int width; /* columns; lines are cut to it */
};

static void fline(struct frame *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fline(struct frame *f, const char *fmt, ...)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 64;
        void *p = realloc(f->line, cap * sizeof f->line[0]);
        if (!p)
            return;
        f->line = p;
        f->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->line[f->n], sizeof f->line[0], fmt, ap);
    va_end(ap);
    if (f->width > 0 && (size_t)f->width < sizeof f->line[0])
        f->line[f->n][f->width] = '\0';
    f->n++;
}

/* "[|||||     ]" of width w (w ≥ 3) for pct, or dashes when unknown. */
static const char *bar(int pct, int w, char *buf, size_t len)
{
    if (w < 3 || (size_t)w >= len) {
        buf[0] = '\0';
        return buf;
    }
    int inner = w - 2, fill = pct < 0 ? 0 : (pct * inner + 50) / 100;
    buf[0] = '[';
    for (int i = 0; i < inner; i++)
        buf[1 + i] = pct < 0 ? '-' : i < fill ? '|' : ' ';
    buf[w - 1] = ']';
    buf[w] = '\0';
    return buf;
}

static const char *num(int v, const char *unit, char *buf, size_t len)
{
    if (v < 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%d%s", v, unit);
    return buf;
}

/* The process's owner: namespace/pod/container when named, else the pod UID and container ID
 * from its cgroup, else "host". */
static const char *owner(const struct top_proc *p, char *buf, size_t len)
{
    if (p->name)
        snprintf(buf, len, "%s/%s/%s", p->name->namespace_, p->name->pod, p->name->container);
    else if (p->ref.pod_uid[0])
        snprintf(buf, len, "pod %.8s ctr %.12s", p->ref.pod_uid,
                 p->ref.container_id[0] ? p->ref.container_id : "-");
    else
        snprintf(buf, len, "host");
    return buf;
}

/* The fixed part of a GPU line is GPU_FIXED columns; a wide terminal gives the rest to the
 * utilization bar (at most 52), a narrow one drops the bar and then the name. */
#define GPU_FIXED 72

static void render(const struct top *t, struct frame *f, bool once)
{
    char b1[64], b2[64], b3[16], b4[16], b5[16], b6[40], who[400];
    int w = f->width > 0 ? f->width : 120;
    int barw = w - GPU_FIXED - 1;
    if (barw > 52)
        barw = 52;
    bool show_name = w >= 60;
    f->n = 0;
    fline(f, "accelctl top - %u GPU%s - sort: %s - pod names: %s%s", t->ngpus,
          t->ngpus == 1 ? "" : "s", sort_names[t->sort],
          !t->podres_socket ? "off"
          : t->podres_ok    ? "pod-resources"
                            : "unavailable",
          once ? "" : " - q quit, s sort");
    fline(f, "%s", "");
    for (unsigned i = 0; i < t->ngpus; i++) {
        const struct top_gpu *g = &t->gpus[i];
        char used[32], total[32], mem[80];
        if (g->mem_ok)
            snprintf(mem, sizeof mem, "%s/%s", format_bytes(g->mem_used, used, sizeof used),
                     format_bytes(g->mem_total, total, sizeof total));
        else
            snprintf(mem, sizeof mem, "-");
        snprintf(b5, sizeof b5, "%s", num(g->power_w, "", b3, sizeof b3));
        snprintf(b6, sizeof b6, "%s/%sW", b5, num(g->limit_w, "", b4, sizeof b4));
        fline(f, "GPU %-2u %-20.20s util %4s %s mem %-17s pwr %-9s temp %4s %s%s%s", i,
              show_name ? (g->name[0] ? g->name : "-") : "", num(g->util, "%", b3, sizeof b3),
              barw >= 3 ? bar(g->util, barw, b1, sizeof b1) : "", mem, b6,
              num(g->temp, "C", b4, sizeof b4), g->ok ? "ok" : "LOST", g->ok ? "" : ": ",
              g->ok ? "" : g->err);
        if (!g->ok)
            continue;
        if (g->nprocs == 0) {
            fline(f, "    (no processes)");
            continue;
        }
        fline(f, "    %8s  %10s  %5s  %s", "PID", "MEMORY", "UTIL", "POD/CONTAINER");
        for (size_t k = 0; k < g->nprocs; k++) {
            const struct top_proc *p = &g->procs[k];
            if (p->mem == UINT64_MAX)
                snprintf(b2, sizeof b2, "-");
            else
                format_bytes(p->mem, b2, sizeof b2);
            fline(f, "    %8u  %10s  %5s  %s", p->pid, b2, num(p->util, "%", b3, sizeof b3),
                  owner(p, who, sizeof who));
        }
    }
}

/* ---- the terminal ---- */

static struct termios saved_tio;
static bool tio_saved;
static volatile sig_atomic_t got_winch, got_stop;

static void term_restore(void)
{
    if (!tio_saved)
        return;
    /* leave the alternate screen, show the cursor */
    static const char seq[] = "\033[?25h\033[?1049l";
    if (write(STDOUT_FILENO, seq, sizeof seq - 1) < 0) {
        /* nothing more to do on the way out */
    }
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
    tio_saved = false;
}

static void on_signal(int sig)
{
    if (sig == SIGWINCH)
        got_winch = 1;
    else
        got_stop = sig;
}

static int term_setup(void)
{
    struct termios raw;
    if (tcgetattr(STDIN_FILENO, &saved_tio) < 0)
        return -errno;
    raw = saved_tio;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) < 0)
        return -errno;
    tio_saved = true;
    atexit(term_restore);
    fputs("\033[?1049h\033[?25l", stdout);
    fflush(stdout);
    return 0;
}

static void term_size(int *rows, int *cols)
{
    struct winsize ws;
    *rows = 24;
    *cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
    }
}

static void draw(const struct frame *f, int rows)
{
    fputs("\033[H\033[2J", stdout);
    size_t show = f->n;
    if (rows > 0 && show > (size_t)rows) {
        show = (size_t)rows - 1;
        for (size_t i = 0; i < show; i++)
            printf("%s\r\n", f->line[i]);
        char more[64];
        snprintf(more, sizeof more, "... %zu more lines", f->n - show);
        printf("%.*s", f->width, more);
    } else {
        for (size_t i = 0; i < show; i++)
            printf(i + 1 < show ? "%s\r\n" : "%s", f->line[i]);
    }
    fflush(stdout);
}

static int run_live(struct top *t, uint64_t interval_ns)
{
    struct frame f = {0};
    sigset_t block, orig;
    struct sigaction sa = {.sa_handler = on_signal};
    int rc = ACCELCTL_EXIT_OK;

    sigemptyset(&block);
    sigaddset(&block, SIGWINCH);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigprocmask(SIG_BLOCK, &block, &orig);
    sigaction(SIGWINCH, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (term_setup() < 0) {
        fprintf(stderr, "accelctl top: standard input is not a terminal (use --once)\n");
        sigprocmask(SIG_SETMASK, &orig, NULL);
        return ACCELCTL_EXIT_FAILURE;
    }
    uint64_t next = 0;
    bool resample = true;
    for (;;) {
        int rows, cols;
        if (resample) {
            sample(t);
            next = mono_ns() + interval_ns;
            resample = false;
        }
        term_size(&rows, &cols);
        f.width = cols;
        render(t, &f, false);
        draw(&f, rows);

        uint64_t now = mono_ns();
        uint64_t left = next > now ? next - now : 0;
        struct timespec ts = {.tv_sec = (time_t)(left / 1000000000u),
                              .tv_nsec = (long)(left % 1000000000u)};
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int pr = ppoll(&pfd, 1, &ts, &orig);
        if (got_stop)
            break;
        if (got_winch) {
            got_winch = 0;
            continue;
        }
        if (pr < 0 && errno != EINTR) {
            rc = ACCELCTL_EXIT_FAILURE;
            break;
        }
        if (pr == 0) {
            resample = true;
            continue;
        }
        if (pr > 0 && (pfd.revents & (POLLHUP | POLLERR)))
            break;
        char keys[32];
        ssize_t nk = pr > 0 ? read(STDIN_FILENO, keys, sizeof keys) : 0;
        bool quit = false;
        for (ssize_t k = 0; k < nk; k++) {
            if (keys[k] == 'q' || keys[k] == 'Q')
                quit = true;
            else if (keys[k] == 's') {
                t->sort = (t->sort + 1) % TOP_SORT_N;
                sort_procs(t);
            }
        }
        if (quit)
            break;
    }
    term_restore();
    free(f.line);
    sigprocmask(SIG_SETMASK, &orig, NULL);
    /* killed by a signal: exit the way the shell expects (128+N) after restoring */
    if (got_stop == SIGINT || got_stop == SIGTERM || got_stop == SIGHUP)
        return 128 + got_stop;
    return rc;
}

int accelctl_cmd_top(int argc, char **argv)
{
    static const struct option opts[] = {
        {"once", no_argument, NULL, 'o'},
        {"interval", required_argument, NULL, 'i'},
        {"sort", required_argument, NULL, 's'},
        {"nvml", required_argument, NULL, 'n'},
        {"proc-root", required_argument, NULL, 'p'},
        {"pod-resources-socket", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *nvml_path = NULL;
    bool once = false;
    double interval = 2.0;
    struct top *t = calloc(1, sizeof *t);
    int c, rc;

    if (!t) {
        fprintf(stderr, "accelctl top: out of memory\n");
        return ACCELCTL_EXIT_FAILURE;
    }
    t->podres_socket = TOP_DEFAULT_PODRES;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            once = true;
            break;
        case 'i': {
            char *end;
            errno = 0;
            interval = strtod(optarg, &end);
            if (errno || *end || end == optarg || !(interval >= 0.1 && interval <= 3600)) {
                fprintf(stderr, "accelctl top: --interval: want seconds, 0.1 to 3600\n");
                free(t);
                return ACCELCTL_EXIT_USAGE;
            }
            break;
        }
        case 's': {
            int k;
            for (k = 0; k < TOP_SORT_N && strcmp(optarg, sort_names[k]); k++)
                ;
            if (k == TOP_SORT_N) {
                fprintf(stderr, "accelctl top: --sort: want memory, util or pid\n");
                free(t);
                return ACCELCTL_EXIT_USAGE;
            }
            t->sort = (enum top_sort)k;
            break;
        }
        case 'n':
            nvml_path = optarg;
            break;
        case 'p':
            t->proc_root = optarg;
            break;
        case 'r':
            t->podres_socket = optarg[0] ? optarg : NULL;
            break;
        case 'h':
            top_usage(stdout);
            free(t);
            return ACCELCTL_EXIT_OK;
        default:
            top_usage(stderr);
            free(t);
            return ACCELCTL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "accelctl top: unexpected argument '%s'\n", argv[optind]);
        top_usage(stderr);
        free(t);
        return ACCELCTL_EXIT_USAGE;
    }
    char err[512];
    if (gpu_nvml_open(nvml_path, &t->nvml, err, sizeof err) < 0) {
        fprintf(stderr, "accelctl top: %s\n", err);
        free(t);
        return ACCELCTL_EXIT_FAILURE;
    }
    if (once) {
        struct frame f = {0};
        sample(t);
        render(t, &f, true);
        for (size_t i = 0; i < f.n; i++)
            printf("%s\n", f.line[i]);
        free(f.line);
        rc = ACCELCTL_EXIT_OK;
    } else {
        rc = run_live(t, (uint64_t)(interval * 1e9));
    }
    gpu_nvml_free(t->nvml);
    free(t);
    return rc;
}
