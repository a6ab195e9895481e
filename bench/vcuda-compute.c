/* vcuda-compute.c — compute-share benchmark on the emulator: how close libvcuda holds a
 * container to its core limit, and what pacing costs per launch.
 *
 * Each scenario creates a fresh one-GPU emulated machine, starts one or more "containers" (a
 * vcuda-load process under LD_PRELOAD=libvcuda.so with its own usage region and
 * VCUDA_CORE_LIMIT), lets them warm up, then measures each container's GPU busy time from the
 * emulator's own timeline (emu_state_util_by_proc, sampled in short consecutive windows so the
 * timeline ring never wraps between samples) — never from libvcuda's bookkeeping. Achieved share
 * = busy time / wall time of the window.
 *
 *   vcuda-compute [--build DIR] [--quick] [--seconds S] [--warmup S] [only...]
 *
 * only: any of single, pair, ceiling, burst, overhead (default: all). --quick: 6 s windows
 * after 1 s warm-up. The machine this runs on matters: note it with the numbers. */
#include "state.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static char build_dir[PATH_MAX];
static char tmp_dir[256];
static unsigned warmup_s = 2, measure_s = 30;
/* where vcuda-load finds libcuda.so.1: the emulator, or the stub driver for overhead runs */
static const char *driver_dir = "src/emu";

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

struct container {
    unsigned limit;       /* 100 = no libvcuda limit */
    const char *policy;   /* hard / burst */
    const char *workload; /* small, medium, long, longwork, graph */
    pid_t pid;
    uint64_t busy_ns;
    double kernel_share; /* % of the window its launched kernels stand for (-1: unknown) */
};

/* Starts vcuda-load for c on a fresh state at state_path; it runs for `seconds`. */
static pid_t spawn(struct container *c, int idx, const char *state_path, unsigned seconds,
                   const char *const *extra_args)
{
    fflush(stdout); /* or the child's copy of the buffer is printed again */
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    char preload[PATH_MAX + 32], libpath[PATH_MAX + 32], region[PATH_MAX + 32], limit[16];
    char exe[PATH_MAX + 32], secs[16];
    snprintf(preload, sizeof(preload), "%s/src/vcuda/libvcuda.so", build_dir);
    snprintf(libpath, sizeof(libpath), "%s/%s", build_dir, driver_dir);
    snprintf(region, sizeof(region), "%s/c%d.region", tmp_dir, idx);
    snprintf(limit, sizeof(limit), "%u", c->limit);
    snprintf(exe, sizeof(exe), "%s/bench/vcuda-load", build_dir);
    snprintf(secs, sizeof(secs), "%u", seconds);
    if (c->limit > 0)
        setenv("LD_PRELOAD", preload, 1);
    setenv("LD_LIBRARY_PATH", libpath, 1);
    setenv("ACCEL_EMU_STATE", state_path, 1);
    setenv("VCUDA_CONFIG", "/nonexistent/vcuda-config", 1);
    setenv("VCUDA_REGION", region, 1);
    setenv("VCUDA_CORE_POLICY", c->policy ? c->policy : "hard", 1);
    if (c->limit > 0 && c->limit < 100)
        setenv("VCUDA_CORE_LIMIT", limit, 1);
    const char *argv[16] = {exe};
    int n = 1;
    if (extra_args) {
        for (; extra_args[n - 1] && n < 15; n++)
            argv[n] = extra_args[n - 1];
    } else {
        argv[n++] = "--marks";
        argv[n++] = "--seconds";
        argv[n++] = secs;
        if (!strcmp(c->workload, "small")) {
            argv[n++] = "--kernel-us";
            argv[n++] = "50";
        } else if (!strcmp(c->workload, "medium")) {
            argv[n++] = "--kernel-us";
            argv[n++] = "1000";
            argv[n++] = "--depth";
            argv[n++] = "4";
        } else if (!strcmp(c->workload, "long") || !strcmp(c->workload, "longwork")) {
            argv[n++] = "--kernel-us";
            argv[n++] = "20000";
            argv[n++] = "--depth";
            argv[n++] = "2";
            if (!strcmp(c->workload, "longwork")) { /* work-bound: not a spin kernel */
                argv[n++] = "--work";
                setenv("ACCEL_EMU_KERNEL_US", "20000", 1);
            }
        } else {
            argv[n++] = "--graph";
            argv[n++] = "--kernel-us";
            argv[n++] = "2000";
            argv[n++] = "--nodes";
            argv[n++] = "10";
        }
    }
    argv[n] = NULL;
    char out[PATH_MAX + 32];
    snprintf(out, sizeof(out), "%s/c%d.out", tmp_dir, idx);
    if (!getenv("BENCH_VERBOSE") || !extra_args)
        (void)!freopen(extra_args ? "/dev/null" : out, "w", stdout);
    execv(exe, (char *const *)argv);
    perror("exec vcuda-load");
    _exit(127);
}

static int new_machine(char *path, size_t len, int n)
{
    snprintf(path, len, "%s/emu-%d.state", tmp_dir, n);
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 1;
    int r = emu_state_create(path, &cfg);
    if (r < 0)
        fprintf(stderr, "vcuda-compute: cannot create %s: %s\n", path, strerror(-r));
    return r;
}

/* Runs containers together; fills busy_ns over [warm-up, warm-up + measure). */
static int run_scenario(struct container *cs, int n)
{
    static int serial;
    char state_path[PATH_MAX];
    if (new_machine(state_path, sizeof(state_path), serial++) < 0)
        return -1;
    struct emu_state *st;
    if (emu_state_open(state_path, &st) < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        char region[PATH_MAX + 32];
        snprintf(region, sizeof(region), "%s/c%d.region", tmp_dir, i);
        unlink(region);
        cs[i].busy_ns = 0;
        cs[i].kernel_share = -1;
        cs[i].pid = spawn(&cs[i], i, state_path, warmup_s + measure_s + 2, NULL);
    }
    uint64_t t0 = now_ns() + warmup_s * 1000000000ull, end = t0 + measure_s * 1000000000ull;
    sleep_ns(t0 - now_ns());
    for (int i = 0; i < n; i++)
        kill(cs[i].pid, SIGUSR1); /* vcuda-load --marks: the window starts */
    uint64_t last = t0;
    while (last < end) {
        sleep_ns(20000000ull);
        uint64_t t = now_ns();
        if (t > end)
            t = end;
        struct emu_proc_util u[64];
        size_t m = 0;
        if (emu_state_util_by_proc(st, 0, last, t, u, 64, &m) == 0) {
            for (size_t k = 0; k < m && k < 64; k++)
                for (int i = 0; i < n; i++)
                    if (u[k].pid == cs[i].pid)
                        cs[i].busy_ns += u[k].busy_ns;
        }
        last = t;
    }
    int rc = 0;
    for (int i = 0; i < n; i++)
        kill(cs[i].pid, SIGTERM); /* --marks: ends its run, printing the window's kernels */
    for (int i = 0; i < n; i++) {
        int status;
        waitpid(cs[i].pid, &status, 0);
        char out[PATH_MAX + 32], line[512] = "";
        snprintf(out, sizeof(out), "%s/c%d.out", tmp_dir, i);
        FILE *f = fopen(out, "r");
        if (f) {
            while (fgets(line, sizeof(line), f)) {
                const char *k = strstr(line, "window_kernel_ms="),
                           *w = strstr(line, "window_seconds=");
                double km = 0, ws = 0;
                if (k && w && sscanf(k, "window_kernel_ms=%lf", &km) == 1 &&
                    sscanf(w, "window_seconds=%lf", &ws) == 1 && ws > 0)
                    cs[i].kernel_share = km / (ws * 10.0);
            }
            fclose(f);
            unlink(out);
        }
    }
    emu_state_close(st);
    unlink(state_path);
    return rc;
}

static double share(const struct container *c)
{
    return 100.0 * (double)c->busy_ns / ((double)measure_s * 1e9);
}

static void bench_single(void)
{
    static const char *const loads[] = {"small", "long", "graph"};
    static const char *const names[] = {"50 us kernels", "20 ms kernels",
                                        "CUDA graphs (10 x 200 us)"};
    static const unsigned limits[] = {10, 30, 50, 70};
    printf("\n## One container, %u s after %u s warm-up (hard policy)\n\n", measure_s, warmup_s);
    printf("| workload | 10 %% | 30 %% | 50 %% | 70 %% | mean abs. error (points) |\n");
    printf("|---|---|---|---|---|---|\n");
    for (unsigned w = 0; w < 3; w++) {
        double mae = 0;
        printf("| %s |", names[w]);
        fflush(stdout);
        for (unsigned i = 0; i < 4; i++) {
            struct container c = {.limit = limits[i], .policy = "hard", .workload = loads[w]};
            if (run_scenario(&c, 1) < 0)
                exit(1);
            double s = share(&c);
            mae += (s > limits[i] ? s - limits[i] : limits[i] - s) / 4;
            printf(" %.2f |", s);
            fflush(stdout);
        }
        printf(" %.2f |\n", mae);
    }
}

static const char *load_name(const char *w)
{
    return !strcmp(w, "small")      ? "50 us"
           : !strcmp(w, "medium")   ? "1 ms"
           : !strcmp(w, "longwork") ? "20 ms work-bound"
                                    : "20 ms spin";
}

/* Two paced containers (the ratio of their shares against the ratio of their limits), and a
 * paced container beside an unlimited neighbour (no libvcuda; the emulator time-slices the two
 * processes). 20 ms kernels are longer than the 2 ms slice: spin kernels are clock-bound (their
 * events read their own 20 ms, as on a GPU), work-bound ones (not spin kernels) need 20 ms of
 * their own slices, so their events span the neighbour's slices too and the pacer, charging
 * event time, over-charges them. */
static void bench_pair(void)
{
    static const unsigned pairs[][2] = {{10, 90}, {30, 70}};
    static const char *const loads[] = {"medium", "small", "long", "longwork"};
    printf("\n## Two containers on one GPU, %u s after %u s warm-up (hard)\n\n", measure_s,
           warmup_s);
    printf("| limits | kernels | achieved (busy) | ratio | target ratio | ratio error | by kernel "
           "time | ratio error |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (unsigned w = 0; w < ARRAY_LEN(loads); w++)
        for (unsigned p = 0; p < 2; p++) {
            struct container cs[2] = {
                {.limit = pairs[p][0], .policy = "hard", .workload = loads[w]},
                {.limit = pairs[p][1], .policy = "hard", .workload = loads[w]},
            };
            if (run_scenario(cs, 2) < 0)
                exit(1);
            double a = share(&cs[0]), b = share(&cs[1]);
            double want = (double)pairs[p][0] / pairs[p][1], got = b > 0 ? a / b : 0;
            double ka = cs[0].kernel_share, kb = cs[1].kernel_share, kg = kb > 0 ? ka / kb : 0;
            printf(
                "| %u / %u | %s | %.2f %% / %.2f %% | %.3f | %.3f | %+.1f %% | %.2f %% / %.2f %% "
                "| %+.1f %% |\n",
                pairs[p][0], pairs[p][1], load_name(loads[w]), a, b, got, want,
                100.0 * (got - want) / want, ka, kb, 100.0 * (kg - want) / want);
            fflush(stdout);
        }
    printf("\n| paced container | neighbour | kernels | achieved (busy) | error | by kernel time "
           "| error |\n"
           "|---|---|---|---|---|---|---|\n");
    static const unsigned limits[] = {10, 30, 50};
    for (unsigned w = 0; w < ARRAY_LEN(loads); w++)
        for (unsigned l = 0; l < ARRAY_LEN(limits); l++) {
            struct container cs[2] = {
                {.limit = limits[l], .policy = "hard", .workload = loads[w]},
                {.limit = 0, .policy = "hard", .workload = loads[w]},
            };
            if (run_scenario(cs, 2) < 0)
                exit(1);
            double a = share(&cs[0]), b = share(&cs[1]), ka = cs[0].kernel_share;
            printf("| %u %% | unlimited (%.2f %%) | %s | %.2f %% | %+.2f points | %.2f %% | %+.2f "
                   "points |\n",
                   limits[l], b, load_name(loads[w]), a, a - limits[l], ka, ka - limits[l]);
            fflush(stdout);
        }
}

/* What the host lets a 50 us-kernel tenant reach: the 30/70 pair next to the same pair with the
 * big container unlimited (libvcuda loaded, no pacing), then a 30 % burst container next to an
 * unlimited one, each alone — alternating, twice, so both sides see the same machine load. An
 * unlimited container is paced by nothing but the host (its load process keeps 16 kernels =
 * 0.8 ms queued and must be scheduled again before they run out); where it cannot fill what
 * is left to it, the paced row's shortfall is the host's, not the controller's. */
static void bench_ceiling(void)
{
    printf("\n## Host ceiling (50 us kernels), %u s after %u s warm-up, alternating\n\n", measure_s,
           warmup_s);
    printf("| run | containers | achieved | GPU idle |\n|---|---|---|---|\n");
    static const struct {
        unsigned limit[2];
        const char *policy, *name;
    } rows[] = {
        {{30, 70}, "hard", "30 / 70 hard"},
        {{30, 100}, "hard", "30 hard / unlimited"},
        {{30, 0}, "burst", "30 burst alone"},
        {{100, 0}, "hard", "unlimited alone"},
    };
    for (unsigned run = 1; run <= 2; run++)
        for (unsigned r = 0; r < ARRAY_LEN(rows); r++) {
            struct container cs[2] = {
                {.limit = rows[r].limit[0], .policy = rows[r].policy, .workload = "small"},
                {.limit = rows[r].limit[1], .policy = "hard", .workload = "small"},
            };
            int n = rows[r].limit[1] ? 2 : 1;
            /* as in bench_burst: NVML's window no longer than the burst sampler's */
            setenv("ACCEL_EMU_UTIL_WINDOW_MS", "50", 1);
            int rc = run_scenario(cs, n);
            unsetenv("ACCEL_EMU_UTIL_WINDOW_MS");
            if (rc < 0)
                exit(1);
            double a = share(&cs[0]), b = n == 2 ? share(&cs[1]) : 0;
            if (n == 2)
                printf("| %u | %s | %.2f %% / %.2f %% | %.2f %% |\n", run, rows[r].name, a, b,
                       100.0 - a - b);
            else
                printf("| %u | %s | %.2f %% | %.2f %% |\n", run, rows[r].name, a, 100.0 - a);
            fflush(stdout);
        }
}

/* Busy time of pid on GPU 0 within [t0, t1). */
static uint64_t pid_busy(struct emu_state *st, pid_t pid, uint64_t t0, uint64_t t1)
{
    struct emu_proc_util u[64];
    size_t m = 0;
    if (emu_state_util_by_proc(st, 0, t0, t1, u, 64, &m) < 0)
        return 0;
    for (size_t k = 0; k < m && k < 64; k++)
        if (u[k].pid == pid)
            return u[k].busy_ns;
    return 0;
}

/* Burst: a container at 30 % burst alone, then a hard 50 % tenant arrives. Reports the burst
 * container's share alone, with the tenant, and how long after the tenant's first kernel the
 * burst container's share (50 ms windows) first came down to its limit (+5 points). */
static void bench_burst(void)
{
    const uint64_t alone = 3000000000ull, after = 4000000000ull, win = 50000000ull;
    printf("\n## Burst policy (50 us kernels): a 30 %% burst container alone, then a 50 %% hard "
           "tenant arrives\n\n");
    char state_path[PATH_MAX];
    if (new_machine(state_path, sizeof(state_path), 500) < 0)
        exit(1);
    struct emu_state *st;
    if (emu_state_open(state_path, &st) < 0)
        exit(1);
    struct container a = {.limit = 30, .policy = "burst", .workload = "small"};
    struct container b = {.limit = 50, .policy = "hard", .workload = "small"};
    for (int i = 0; i < 2; i++) {
        char region[PATH_MAX + 32];
        snprintf(region, sizeof(region), "%s/c%d.region", tmp_dir, i);
        unlink(region);
    }
    /* NVML's utilization window on the emulator = libvcuda's sample window (PACE_SAMPLE_NS): see
     * docs/vcuda-compute.md, burst policy */
    setenv("ACCEL_EMU_UTIL_WINDOW_MS", "50", 1);
    uint64_t t_start = now_ns();
    a.pid = spawn(&a, 0, state_path, (unsigned)((alone + after) / 1000000000ull) + 2, NULL);
    sleep_ns(alone);
    /* The timeline keeps the last 4096 intervals: measure as we go. */
    uint64_t t_b = now_ns();
    double s_alone = 100.0 * (double)pid_busy(st, a.pid, t_start + 1000000000ull, t_b) /
                     (double)(t_b - t_start - 1000000000ull);
    b.pid = spawn(&b, 1, state_path, (unsigned)(after / 1000000000ull) + 2, NULL);
    uint64_t first = 0, fell = 0, busy_a = 0, busy_b = 0, m0 = 0, last = 0;
    uint64_t t_end = t_b + after;
    for (uint64_t t = now_ns(); t < t_end; t = now_ns()) {
        sleep_ns(5000000ull);
        t = now_ns();
        if (!first) {
            if (pid_busy(st, b.pid, t_b, t) > 0) {
                /* its first kernel: within the last 5 ms */
                first = t - 5000000ull;
                m0 = first + 200000000ull;
            }
            continue;
        }
        if (!fell && t >= first + win &&
            100.0 * (double)pid_busy(st, a.pid, t - win, t) / (double)win <= 35.0)
            fell = t - first;
        if (t >= m0) {
            uint64_t from = last ? last : m0;
            busy_a += pid_busy(st, a.pid, from, t);
            busy_b += pid_busy(st, b.pid, from, t);
            last = t;
        }
    }
    double s_a = last ? 100.0 * (double)busy_a / (double)(last - m0) : 0;
    double s_b = last ? 100.0 * (double)busy_b / (double)(last - m0) : 0;
    printf("| burst container alone | after the tenant arrives (burst / tenant) | back at its "
           "limit after |\n|---|---|---|\n");
    if (fell)
        printf("| %.2f %% | %.2f %% / %.2f %% | %.0f ms |\n", s_alone, s_a, s_b, fell / 1e6);
    else
        printf("| %.2f %% | %.2f %% / %.2f %% | never |\n", s_alone, s_a, s_b);
    fflush(stdout);
    unsetenv("ACCEL_EMU_UTIL_WINDOW_MS");
    kill(a.pid, SIGTERM);
    kill(b.pid, SIGTERM);
    waitpid(a.pid, NULL, 0);
    waitpid(b.pid, NULL, 0);
    emu_state_close(st);
    unlink(state_path);
}

/* Launch cost: N empty-kernel launches, the mean time of one cuLaunchKernel call. */
static double overhead_run(unsigned limit, bool preload)
{
    char state_path[PATH_MAX], out_path[PATH_MAX + 16];
    static int serial = 1000;
    if (new_machine(state_path, sizeof(state_path), serial++) < 0)
        exit(1);
    snprintf(out_path, sizeof(out_path), "%s/overhead.out", tmp_dir);
    struct container c = {.limit = preload ? limit : 0, .policy = "hard", .workload = "small"};
    char region[PATH_MAX + 32];
    snprintf(region, sizeof(region), "%s/c9.region", tmp_dir);
    unlink(region);
    static const char *const args[] = {"--overhead", "2000000", NULL};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(out_path, "w", stdout))
            _exit(127);
        setenv("BENCH_VERBOSE", "1", 1);
        pid_t k = spawn(&c, 9, state_path, 0, args);
        int status;
        waitpid(k, &status, 0);
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    unlink(state_path);
    FILE *f = fopen(out_path, "r");
    double ns = -1;
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        char *p = strstr(line, "launch_ns=");
        if (p)
            ns = strtod(p + 10, NULL);
    }
    if (f)
        fclose(f);
    return ns;
}

static void bench_overhead(void)
{
    printf("\n## Launch overhead (stub driver that returns at once; mean of 2000000 cuLaunchKernel "
           "calls, median of 3 runs)\n\n");
    driver_dir = "bench";
    printf("| path | ns per launch | over direct |\n|---|---|---|\n");
    double med[3];
    const char *names[3] = {"direct (no libvcuda)", "libvcuda, no limit (100)",
                            "libvcuda, limit 99 (paced path, budget available)"};
    for (int k = 0; k < 3; k++) {
        double v[3];
        for (int i = 0; i < 3; i++)
            v[i] = overhead_run(k == 2 ? 99 : 100, k > 0);
        /* median of three */
        double a = v[0], b = v[1], c = v[2];
        med[k] = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
        printf("| %s | %.1f | %s%.1f |\n", names[k], med[k], k ? "+" : "",
               k ? med[k] - med[0] : 0.0);
        fflush(stdout);
    }
    driver_dir = "src/emu";
}

int main(int argc, char **argv)
{
    bool quick = false, want[5] = {false, false, false, false, false}, any = false;
    const char *build = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--build") && i + 1 < argc)
            build = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            measure_s = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup_s = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "single"))
            want[0] = any = true;
        else if (!strcmp(argv[i], "pair"))
            want[1] = any = true;
        else if (!strcmp(argv[i], "overhead"))
            want[2] = any = true;
        else if (!strcmp(argv[i], "burst"))
            want[3] = any = true;
        else if (!strcmp(argv[i], "ceiling"))
            want[4] = any = true;
        else {
            fprintf(stderr, "usage: vcuda-compute [--build DIR] [--quick] [--seconds S] "
                            "[--warmup S] [single|pair|ceiling|burst|overhead...]\n");
            return 2;
        }
    }
    if (quick) { /* shorter windows, unless --seconds / --warmup say otherwise */
        bool secs_given = false, warm_given = false;
        for (int i = 1; i + 1 < argc; i++) {
            secs_given |= !strcmp(argv[i], "--seconds");
            warm_given |= !strcmp(argv[i], "--warmup");
        }
        if (!secs_given)
            measure_s = 6;
        if (!warm_given)
            warmup_s = 1;
    }
    if (!any)
        want[0] = want[1] = want[2] = want[3] = want[4] = true;
    if (build) {
        if (!realpath(build, build_dir)) {
            perror(build);
            return 2;
        }
    } else {
        /* this binary is <build>/bench/vcuda-compute */
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0)
            return 2;
        self[n] = 0;
        char *s = strrchr(self, '/');
        if (s)
            *s = 0;
        s = strrchr(self, '/');
        if (s)
            *s = 0;
        snprintf(build_dir, sizeof(build_dir), "%s", self);
    }
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/vcuda-compute-XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    printf("# vcuda-compute: emulated GPU, build %s, %u s windows after %u s warm-up\n", build_dir,
           measure_s, warmup_s);
    if (want[0])
        bench_single();
    if (want[1])
        bench_pair();
    if (want[4])
        bench_ceiling();
    if (want[3])
        bench_burst();
    if (want[2])
        bench_overhead();
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_dir);
    (void)!system(cmd);
    return 0;
}
