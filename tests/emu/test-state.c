/* test-state.c — the shared emulated machine: creation, identity, memory accounting across
 * processes (including kill -9), the timeline, the event ring with its futex wait, and the MIG
 * instances (memory charged against a GPU instance, the fields validation refuses). */
#define _GNU_SOURCE
#include "state.h"
#include "state-mig.h"

#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

static char *state_path(const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof(buf), "%s/%s", tap_tmpdir(), name);
    return buf;
}

static struct emu_state *make(const char *name, unsigned gpus, const char *model)
{
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = gpus;
    cfg.model = model;
    cfg.seed = 7;
    const char *p = state_path(name);
    if (emu_state_create(p, &cfg) < 0)
        return NULL;
    struct emu_state *st = NULL;
    if (emu_state_open(p, &st) < 0)
        return NULL;
    return st;
}

TEST(create_and_identity)
{
    struct emu_state *st = make("a", 4, "A100");
    REQUIRE(st);
    CHECK_EQ_INT(emu_state_gpu_count(st), 4);
    struct emu_gpu *g0 = emu_state_gpu(st, 0), *g1 = emu_state_gpu(st, 1);
    REQUIRE(g0 && g1);
    CHECK(emu_state_gpu(st, 4) == NULL);
    CHECK_EQ_STR(g0->name, "NVIDIA A100-SXM4-80GB");
    CHECK_EQ_INT(g0->sm_count, 108);
    CHECK_EQ_INT(g0->cc_major, 8);
    CHECK_EQ_INT(strlen(g0->uuid), 40);
    CHECK(strncmp(g0->uuid, "GPU-", 4) == 0);
    CHECK(strcmp(g0->uuid, g1->uuid) != 0);
    CHECK_EQ_STR(g0->pci_bus_id, "00000000:18:00.0");
    CHECK_EQ_INT(emu_state_find_gpu(st, g1->uuid), 1);
    CHECK_EQ_INT(emu_state_find_gpu(st, "0000:18:00.0"), 0);
    CHECK_EQ_INT(emu_state_find_gpu(st, "GPU-nope"), -ENOENT);
    CHECK_EQ_INT(g0->topo[0], EMU_TOPO_INTERNAL);
    CHECK_EQ_INT(g0->topo[1], EMU_TOPO_SINGLE);
    CHECK_EQ_INT(g0->topo[2], EMU_TOPO_NODE);
    CHECK_EQ_INT(g0->nvlinks[3], 4); /* 12 links over 3 peers */
    /* same seed → same UUIDs */
    char u0[EMU_UUID_LEN];
    memcpy(u0, g0->uuid, sizeof(u0));
    struct emu_state *st2 = make("a2", 2, "A100");
    REQUIRE(st2);
    CHECK_EQ_STR(emu_state_gpu(st2, 0)->uuid, u0);
    emu_state_close(st2);
    emu_state_close(st);
}

/* The state file is 0600 whatever the umask, or the mode asked for; a mode the creator could
 * not use itself, or beyond 0777, is refused. */
TEST(state_file_mode)
{
    mode_t old = umask(0);
    struct emu_config cfg;
    emu_config_init(&cfg);
    const char *p = state_path("mode");
    struct stat sb;
    REQUIRE_EQ_INT(emu_state_create(p, &cfg), 0);
    REQUIRE(stat(p, &sb) == 0);
    CHECK_EQ_INT(sb.st_mode & 07777, 0600);
    cfg.mode = 0660;
    REQUIRE_EQ_INT(emu_state_create(p, &cfg), 0);
    REQUIRE(stat(p, &sb) == 0);
    CHECK_EQ_INT(sb.st_mode & 07777, 0660);
    umask(0077);
    cfg.mode = 0666;
    REQUIRE_EQ_INT(emu_state_create(p, &cfg), 0);
    REQUIRE(stat(p, &sb) == 0);
    CHECK_EQ_INT(sb.st_mode & 07777, 0666);
    cfg.mode = 0400;
    CHECK_EQ_INT(emu_state_create(p, &cfg), -EINVAL);
    cfg.mode = 04600;
    CHECK_EQ_INT(emu_state_create(p, &cfg), -EINVAL);
    REQUIRE(stat(p, &sb) == 0);
    CHECK_EQ_INT(sb.st_mode & 07777, 0666); /* refused: the file stays as it was */
    umask(old);
}

/* A user the mode keeps out is told which user and mode would work. */
TEST(permission_denied_says_what_would_work)
{
    struct emu_config cfg;
    emu_config_init(&cfg);
    /* a directory anyone may enter (the test's own is 0700), so the file's mode decides */
    char dir[] = "/tmp/emu-perm-XXXXXX", p[64];
    REQUIRE(mkdtemp(dir) && chmod(dir, 0755) == 0);
    snprintf(p, sizeof(p), "%s/state", dir);
    REQUIRE_EQ_INT(emu_state_create(p, &cfg), 0);
    int pfd[2];
    REQUIRE(pipe(pfd) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        /* root ignores modes: drop to nobody; anyone else: take our own rights away */
        if (geteuid() == 0 ? setgid(65534) < 0 || setuid(65534) < 0 : chmod(p, 0) < 0)
            _exit(3);
        char err[512] = "";
        struct emu_state *st = NULL;
        int r = emu_state_open_err(p, &st, err, sizeof(err));
        if (write(pfd[1], err, strlen(err) + 1) < 0)
            _exit(4);
        _exit(r == -EACCES ? 0 : 1);
    }
    close(pfd[1]);
    char msg[512] = "";
    ssize_t n = read(pfd[0], msg, sizeof(msg) - 1);
    msg[n > 0 ? n : 0] = 0;
    close(pfd[0]);
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    tap_diag("%s", msg);
    CHECK(strstr(msg, "permission denied") && strstr(msg, "mode 0") && strstr(msg, "owner uid") &&
          strstr(msg, "accel-emu init --mode"));
    unlink(p);
    rmdir(dir);
}

/* Every field a reader trusts is checked when the file is mapped: a damaged file is refused
 * with the field named, never shown as "13152.00 PiB". */
static struct emu_shared *image_of(const char *path)
{
    struct emu_shared *img = malloc(sizeof(*img));
    FILE *f = fopen(path, "rb");
    if (!img || !f || fread(img, sizeof(*img), 1, f) != 1) {
        free(img);
        img = NULL;
    }
    if (f)
        fclose(f);
    return img;
}

TEST(damaged_state_is_refused_with_the_field_named)
{
    struct emu_state *st = make("v", 2, "T4");
    REQUIRE(st);
    emu_state_close(st);
    const char *p = state_path("v");
    struct emu_shared *good = image_of(p), *img = malloc(sizeof(*img));
    REQUIRE(good && img);
    char err[256];
    CHECK_EQ_INT(emu_state_validate(good, sizeof(*good), err, sizeof(err)), 0);
    struct {
        const char *want; /* in the message */
        int field;
    } cases[] = {
        {"bad magic", 0},
        {"version", 1},
        {"GPU count 17", 2},
        {"memory total", 3},
        {"identity string", 4},
        {"clocks", 5},
        {"sensor", 6},
        {"compute mode", 7},
        {"topology level", 8},
        {"event ring entry 3", 9},
        {"interval", 10},
        {"process slot 5: pid", 11},
        {"exceed its memory", 12},
        {"GPU 3, which", 13},
        {"MPS slot 1", 14},
        {"process-info stride", 15},
        {"NVLink mode", 16},
        {"model name", 17},
        {"busy until", 18},
        {"reserved memory", 19},
        {"reserved memory", 20},
        {"time slice 1000001 us", 21},
        {"timeline interval 0", 22},
        {"timeline interval 0", 23},
        {"timeline interval 0", 24},
        {"timeline interval 0", 25},
        {"timeline interval 0", 26},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memcpy(img, good, sizeof(*img));
        struct emu_gpu *g = &img->gpus[1];
        switch (cases[i].field) {
        case 0:
            img->magic ^= 1;
            break;
        case 1:
            img->version = 99;
            break;
        case 2:
            img->gpu_count = 17;
            break;
        case 3:
            g->memory_total = 0xb6f0d2c1e4a39587ull;
            break; /* random bytes */
        case 4:
            memset(g->uuid, 'A', sizeof(g->uuid));
            break;
        case 5:
            g->sm_clock_mhz = g->sm_clock_max_mhz + 1;
            break;
        case 6:
            g->temperature_c = 1000;
            break;
        case 7:
            g->compute_mode = 1;
            break;
        case 8:
            g->topo[0] = 33;
            break;
        case 9:
            g->event_seq = 2;
            g->events[3].seq = 2;
            break;
        case 10:
            g->interval_count = 1;
            g->intervals[0] = (struct emu_interval){2000, 1000, 1, 1, 0, 0, 0, 0};
            g->busy_until_ns = 2000;
            break;
        case 11:
            img->procs[5].pid = -7;
            break;
        case 12:
            img->procs[5].pid = 1234;
            img->procs[5].mem[1] = g->memory_total;
            img->procs[6].pid = 1235;
            img->procs[6].mem[1] = 1;
            break;
        case 13:
            img->procs[5].pid = 1234;
            img->procs[5].mem[3] = 1;
            break;
        case 14:
            img->mps[1].pid = 99;
            img->mps[1].server_count = EMU_MPS_MAX_SERVERS + 1;
            break;
        case 15:
            img->proc_info_stride = 20;
            break;
        case 16:
            img->nvlink_mode = 9;
            break;
        case 17:
            memset(img->model, 'x', sizeof(img->model));
            break;
        case 18:
            g->interval_count = 1;
            g->intervals[0] = (struct emu_interval){1000, 2000, 1, 1, 0, 0, 0, 0};
            g->busy_until_ns = 1500;
            break;
        case 19:
            g->memory_reserved = g->memory_total;
            break; /* processes' share would wrap */
        case 20:
            g->ctx_cost = ~0ull;
            break;
        case 21:
            g->timeslice_us = EMU_TIMESLICE_MAX_US + 1;
            break;
        case 22: /* a lag longer than the time before the interval */
            g->interval_count = 1;
            g->intervals[0] = (struct emu_interval){1000, 2000, 1, 1, 1001, 0, 0, 0};
            g->busy_until_ns = 2000;
            break;
        case 23: /* a wait longer than the lag it is part of */
            g->interval_count = 1;
            g->intervals[0] = (struct emu_interval){1000, 2000, 1, 1, 10, 11, 0, 0};
            g->busy_until_ns = 2000;
            break;
        case 24: /* a flag this version does not know */
            g->interval_count = 1;
            g->intervals[0] = (struct emu_interval){1000, 2000, 1, 1, 0, 0, 4, 0};
            g->busy_until_ns = 2000;
            break;
        case 25: /* going on with a clock-bound item, itself work-bound */
            g->interval_count = 1;
            g->intervals[0] = (struct emu_interval){1000, 2000, 1, 1, 0, 0, EMU_IV_CONT, 0};
            g->busy_until_ns = 2000;
            break;
        case 26: /* the padding set */
            g->interval_count = 1;
            g->intervals[0] = (struct emu_interval){1000, 2000, 1, 1, 0, 0, EMU_IV_CLOCK, 7};
            g->busy_until_ns = 2000;
            break;
        }
        err[0] = 0;
        CHECK_EQ_INT(emu_state_validate(img, sizeof(*img), err, sizeof(err)), -EPROTO);
        if (!strstr(err, cases[i].want))
            tap_fail(__FILE__, __LINE__, "case %zu: '%s' not in '%s'", i, cases[i].want, err);
    }
    /* through open, as every process maps it: refused, the path and the field in the reason */
    memcpy(img, good, sizeof(*img));
    img->gpus[0].memory_total = 0xb6f0d2c1e4a39587ull;
    FILE *f = fopen(p, "wb");
    REQUIRE(f && fwrite(img, sizeof(*img), 1, f) == 1);
    fclose(f);
    struct emu_state *bad = NULL;
    CHECK_EQ_INT(emu_state_open_err(p, &bad, err, sizeof(err)), -EPROTO);
    CHECK(bad == NULL);
    CHECK(strstr(err, p) && strstr(err, "GPU 0: memory total") && strstr(err, "accel-emu init"));
    /* random bytes after a good header: refused too */
    memcpy(img, good, sizeof(*img));
    unsigned seed = 1;
    for (size_t k = offsetof(struct emu_shared, seed); k < sizeof(*img); k++)
        ((unsigned char *)img)[k] = (unsigned char)(rand_r(&seed) >> 7);
    CHECK_EQ_INT(emu_state_validate(img, sizeof(*img), err, sizeof(err)), -EPROTO);
    CHECK_EQ_INT(emu_state_validate(good, sizeof(*good) - 1, err, sizeof(err)), -EPROTO);
    free(img);
    free(good);
}

TEST(bad_config_rejected)
{
    struct emu_config cfg;
    emu_config_init(&cfg);
    const char *p = state_path("bad");
    cfg.gpus = 0;
    CHECK_EQ_INT(emu_state_create(p, &cfg), -EINVAL);
    cfg.gpus = EMU_MAX_GPUS + 1;
    CHECK_EQ_INT(emu_state_create(p, &cfg), -EINVAL);
    cfg.gpus = 2;
    cfg.model = "Voodoo2";
    CHECK_EQ_INT(emu_state_create(p, &cfg), -EINVAL);
    cfg.model = NULL;
    cfg.numa_count = 3;
    CHECK_EQ_INT(emu_state_create(p, &cfg), -EINVAL);
    CHECK(access(p, F_OK) < 0);
    struct emu_state *st = NULL;
    CHECK_EQ_INT(emu_state_open(p, &st), -ENOENT);
    /* a file that is not a state file */
    FILE *f = fopen(p, "w");
    REQUIRE(f);
    fputs("hello", f);
    fclose(f);
    CHECK_EQ_INT(emu_state_open(p, &st), -EPROTO);
    CHECK(st == NULL);
}

TEST(memory_accounting_and_oom)
{
    struct emu_state *st = make("m", 2, "T4");
    REQUIRE(st);
    uint64_t used, total;
    REQUIRE_EQ_INT(emu_state_mem_info(st, 0, &used, &total), 0);
    CHECK_EQ_U64(used, 0);
    CHECK_EQ_U64(total, 15360ull << 20);
    CHECK_EQ_INT(emu_state_mem_charge(st, 0, 1 << 30), 0);
    CHECK_EQ_INT(emu_state_mem_charge(st, 0, total), -ENOMEM);
    emu_state_mem_info(st, 0, &used, NULL);
    CHECK_EQ_U64(used, 1 << 30);
    emu_state_mem_info(st, 1, &used, NULL);
    CHECK_EQ_U64(used, 0);
    struct emu_proc_mem pm[4];
    size_t n = 0;
    CHECK_EQ_INT(emu_state_procs(st, 0, pm, 4, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(pm[0].pid, getpid());
    CHECK_EQ_U64(pm[0].bytes, 1 << 30);
    emu_state_mem_uncharge(st, 0, 1 << 30);
    emu_state_mem_info(st, 0, &used, NULL);
    CHECK_EQ_U64(used, 0);
    CHECK_EQ_INT(emu_state_mem_charge(st, 5, 1), -EINVAL);
    emu_state_close(st);
}

static uint64_t used_of(struct emu_state *st)
{
    uint64_t used = 0;
    emu_state_mem_info(st, 0, &used, NULL);
    return used;
}

TEST(dead_process_memory_comes_back)
{
    struct emu_state *st = make("k", 1, NULL);
    REQUIRE(st);
    int pfd[2];
    REQUIRE(pipe(pfd) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        int r = emu_state_mem_charge(st, 0, 3ull << 30);
        /* hold the lock too: kill -9 must not wedge the parent */
        emu_state_lock(st);
        char c = r == 0 ? 'y' : 'n';
        if (write(pfd[1], &c, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char c = 0;
    REQUIRE(read(pfd[0], &c, 1) == 1);
    CHECK(c == 'y');
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* the lock is recovered and the slot reclaimed */
    CHECK(TAP_WAIT_UNTIL(used_of(st) == 0, 5000));
    close(pfd[0]);
    close(pfd[1]);
    emu_state_close(st);
}

static uint64_t my_pidns(void)
{
    char buf[64];
    ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    return strtoull(strchr(buf, '[') + 1, NULL, 10);
}

TEST(other_pid_namespaces_are_judged_only_from_the_initial_one)
{
    struct emu_state *st = make("ns", 1, NULL);
    REQUIRE(st);
    uint64_t ns = my_pidns();
    if (!ns) {
        tap_skip_case("no /proc/self/ns/pid");
        emu_state_close(st);
        return;
    }
    /* two slots of a pid that does not exist here: one of our namespace (dead: reclaimed),
     * one of another container's: its owner may be alive there, which only a reader that sees
     * every process can rule out — one in the initial pid namespace, where /proc shows all of
     * them, whoever it runs as (the innermost pid and the start time are readable by all;
     * test-nvml-procs runs a real one in a namespace of its own) */
    bool init_ns = ns == 4026531836ull;
    struct emu_shared *sh = emu_state_shared(st);
    emu_state_lock(st);
    sh->procs[5] = (struct emu_proc){.pid = 999999, .start_time = 1, .pidns = ns};
    sh->procs[5].mem[0] = 1 << 20;
    sh->procs[6] = (struct emu_proc){.pid = 999999, .start_time = 1, .pidns = ns + 1};
    sh->procs[6].mem[0] = 2 << 20;
    emu_state_unlock(st);
    CHECK_EQ_INT(emu_state_reclaim(st), init_ns ? 2 : 1);
    CHECK_EQ_U64(used_of(st), init_ns ? 0 : 2 << 20);
    /* our own charges go to our own slot, not to the other namespace's same pid (which a lazy
     * reclaim from the initial namespace may have reaped meanwhile) */
    emu_state_lock(st);
    sh->procs[6] = (struct emu_proc){.pid = getpid(), .start_time = 1, .pidns = ns + 1};
    sh->procs[6].mem[0] = 2 << 20;
    emu_state_unlock(st);
    CHECK_EQ_INT(emu_state_mem_charge(st, 0, 4096), 0);
    CHECK(sh->procs[6].pid == 0 || sh->procs[6].mem[0] == 2 << 20);
    CHECK_EQ_U64(used_of(st), (sh->procs[6].pid ? 2 << 20 : 0) + 4096);
    emu_state_close(st);
}

TEST(timeline_serializes_and_measures)
{
    struct emu_state *st = make("t", 1, NULL);
    REQUIRE(st);
    uint64_t now = emu_state_now_ns();
    uint64_t s1, e1, s2, e2, s3, e3;
    /* far in the future so that "now" never wins: exact arithmetic */
    uint64_t base = now + 10000000000ull;
    REQUIRE_EQ_INT(emu_state_submit(st, 0, base, 1000, &s1, &e1), 0);
    CHECK_EQ_U64(s1, base);
    CHECK_EQ_U64(e1, base + 1000);
    REQUIRE_EQ_INT(emu_state_submit(st, 0, 0, 500, &s2, &e2), 0);
    CHECK_EQ_U64(s2, e1); /* queued behind the GPU's busy_until */
    CHECK_EQ_U64(e2, e1 + 500);
    REQUIRE_EQ_INT(emu_state_submit(st, 0, e2 + 100, 0, &s3, &e3), 0);
    CHECK_EQ_U64(s3, e2 + 100); /* an event: zero length, stream order */
    CHECK_EQ_U64(e3, s3);
    uint64_t busy;
    bool complete;
    REQUIRE_EQ_INT(emu_state_busy_ns(st, 0, base, base + 3000, 0, &busy, &complete), 0);
    CHECK_EQ_U64(busy, 1500);
    CHECK(complete);
    emu_state_busy_ns(st, 0, base + 500, base + 1200, 0, &busy, NULL);
    CHECK_EQ_U64(busy, 700);
    emu_state_busy_ns(st, 0, base, base + 3000, getpid() + 1, &busy, NULL);
    CHECK_EQ_U64(busy, 0);
    struct emu_proc_util pu[2];
    size_t n = 0;
    REQUIRE_EQ_INT(emu_state_util_by_proc(st, 0, base, base + 3000, pu, 2, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(pu[0].pid, getpid());
    CHECK_EQ_U64(pu[0].busy_ns, 1500);
    CHECK_EQ_U64(pu[0].last_ns, base + 1500);
    /* back-to-back work of one process is merged into one interval */
    CHECK_EQ_U64(emu_state_gpu(st, 0)->interval_count, 1);
    emu_state_close(st);
}

/* A process queues 2000 kernels of 5 ms (10 s of work) and dies (kill -9) or leaves (the
 * release libcuda's exit handler does) without waiting: its work that had not started leaves
 * the timeline, as the driver drops a dying context's work. The next kernel of another process
 * starts at once, and no busy time remains after it. Timeline figures only, no wall clock. */
static void dead_work_case(const char *name, bool killed)
{
    struct emu_state *st = make(name, 1, NULL);
    REQUIRE(st);
    enum { N = 2000 };
    const uint64_t d = 5000000; /* 5 ms */
    int pfd[2];
    REQUIRE(pipe(pfd) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        char c = 'y';
        for (int i = 0; i < N; i++)
            if (emu_state_submit(st, 0, 0, d, NULL, NULL) < 0)
                c = 'n';
        if (write(pfd[1], &c, 1) != 1)
            _exit(1);
        if (!killed) {
            emu_state_proc_release(st); /* as cuda_fini() at exit */
            _exit(0);
        }
        pause();
        _exit(0);
    }
    char c = 0;
    REQUIRE(read(pfd[0], &c, 1) == 1);
    CHECK(c == 'y');
    struct emu_gpu *g = emu_state_gpu(st, 0);
    uint64_t first_start = g->intervals[0].start_ns;
    if (killed) {
        /* the work is queued: the GPU is busy for the whole 10 s from the child's first start */
        CHECK_EQ_U64(g->busy_until_ns, first_start + N * d);
        kill(child, SIGKILL);
    }
    int status = 0;
    waitpid(child, &status, 0);
    uint64_t gone = emu_state_now_ns(); /* the child is gone by now */
    uint64_t s = 0, e = 0;
    REQUIRE_EQ_INT(emu_state_submit(st, 0, 0, d, &s, &e), 0);
    uint64_t after = emu_state_now_ns();
    /* it started when it was queued: not behind the dead process's 10 s */
    CHECK(s <= after);
    CHECK_EQ_U64(e - s, d);
    tap_diag("%s: next kernel queued %.3f ms after the child's first start, waited %.3f ms", name,
             (after - first_start) / 1e6, s > gone ? (s - gone) / 1e6 : 0.0);
    /* no phantom work: nothing but our kernel from its start on (the dead process's running
     * kernel was cut when its death was noticed, at the latest when ours was queued) */
    uint64_t busy = 1;
    REQUIRE_EQ_INT(emu_state_busy_ns(st, 0, s, s + 2 * N * d, 0, &busy, NULL), 0);
    CHECK_EQ_U64(busy, d);
    struct emu_proc_util pu[4];
    size_t n = 0;
    REQUIRE_EQ_INT(emu_state_util_by_proc(st, 0, e, e + 2 * N * d, pu, 4, &n), 0);
    CHECK_EQ_INT(n, 0);
    /* the GPU's totals shrank with it: the child's share is what ran before it was gone */
    CHECK(g->busy_total_ns <= (s - first_start) + d);
    CHECK_EQ_U64(g->busy_until_ns, e);
    close(pfd[0]);
    close(pfd[1]);
    emu_state_close(st);
}

TEST(killed_process_work_leaves_the_timeline)
{
    dead_work_case("dk", true);
}

TEST(exited_process_work_leaves_the_timeline)
{
    dead_work_case("dx", false);
}

/* A live process's work beside another process's: the two take turns in time slices (2 ms by
 * default) while both have work pending, and the other's work goes when its owner is found
 * dead: the live one then runs alone, its end earlier than the slices had put it. */
TEST(live_work_beside_dead_work_is_sliced_then_alone)
{
    struct emu_state *st = make("dl", 1, NULL);
    REQUIRE(st);
    struct emu_shared *sh = emu_state_shared(st);
    uint64_t ns = my_pidns();
    if (!ns) {
        tap_skip_case("no /proc/self/ns/pid");
        emu_state_close(st);
        return;
    }
    const uint64_t ms = 1000000;
    CHECK_EQ_U64(emu_state_timeslice_ns(st, 0), 2 * ms);
    uint64_t before = emu_state_now_ns(), base = before - ms; /* started 1 ms ago */
    /* slot 3: a dead process of our namespace, with 20 ms of work queued */
    emu_state_lock(st);
    sh->procs[3] = (struct emu_proc){.pid = 999999, .start_time = 1, .pidns = ns};
    struct emu_gpu *g = &sh->gpus[0];
    g->intervals[0] = (struct emu_interval){base, base + 10 * ms, 999999, 4, 0, 0, 0, 0};
    g->intervals[1] = (struct emu_interval){base + 10 * ms, base + 20 * ms, 999999, 4, 0, 0, 0, 0};
    g->interval_count = 2;
    g->busy_until_ns = base + 20 * ms;
    g->busy_total_ns = 20 * ms;
    g->pending_slots[0] = 1ull << 3;
    emu_state_unlock(st);
    /* while the owner's death is not known (another namespace's pid cannot be judged: make it
     * look like one for this submit), our 3 ms are sliced with its work: the rest of its slice
     * (1 ms), ours (2 ms), its (2 ms), our last 1 ms */
    emu_state_lock(st);
    sh->procs[3].pidns = ns + 1;
    emu_state_unlock(st);
    uint64_t s = 0, e = 0;
    REQUIRE_EQ_INT(emu_state_submit(st, 0, 0, 3 * ms, &s, &e), 0);
    uint64_t after = emu_state_now_ns();
    CHECK(s >= before && s <= after); /* on our clock, which has not waited yet */
    CHECK_EQ_U64(e, s + 3 * ms);
    /* its slice ends 2 ms after it began (base), then ours [2, 4), its [4, 6), ours [6, 7):
     * exact while the submit came within 1 ms of `before` */
    uint64_t we = emu_state_wall_ns(st, 0, 0, e, false);
    CHECK_EQ_U64(we, base + 7 * ms);
    /* what had run stays; the neighbour finishes its slice (2 ms from its start) first */
    CHECK_EQ_U64(g->intervals[0].start_ns, base);
    CHECK_EQ_U64(g->intervals[0].end_ns, base + 2 * ms);
    CHECK_EQ_INT(g->intervals[1].pid, getpid());
    CHECK_EQ_U64(g->intervals[1].start_ns, base + 2 * ms);
    tap_diag("3 ms beside a neighbour's 19 ms: done %.3f ms after submit", (we - s) / 1e6);
    /* the GPU finishes both later: the neighbour's end moves by our 3 ms */
    CHECK_EQ_U64(g->busy_until_ns, base + 23 * ms);
    struct emu_proc_util pu[4];
    size_t n = 0;
    REQUIRE_EQ_INT(emu_state_util_by_proc(st, 0, s, s + 6 * ms, pu, 4, &n), 0);
    REQUIRE_EQ_INT(n, 2);
    for (size_t k = 0; k < n; k++) {
        tap_diag("pid %d busy %.3f ms of the first 6 ms", pu[k].pid, pu[k].busy_ns / 1e6);
        CHECK_EQ_U64(pu[k].busy_ns, 3 * ms);
    }
    emu_state_lock(st);
    sh->procs[3].pidns = ns;
    emu_state_unlock(st);
    /* the reaper finds it dead: its work goes, ours runs alone from then on */
    CHECK_EQ_INT(emu_state_reclaim(st), 1);
    uint64_t t1 = emu_state_now_ns();
    uint64_t we2 = emu_state_wall_ns(st, 0, 0, e, false);
    CHECK(we2 <= we && we2 <= t1 + 3 * ms);
    if (t1 >= we2) {
        /* this process was descheduled past the end of its own work before it looked (seen on
         * a loaded machine): no schedule to come is left to observe */
        tap_skip_case("descheduled past the work's end: the schedule after the reclaim is gone");
        emu_state_close(st);
        return;
    }
    CHECK_EQ_U64(g->busy_until_ns, we2);
    REQUIRE_EQ_INT(emu_state_util_by_proc(st, 0, t1, t1 + 30 * ms, pu, 4, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(pu[0].pid, getpid());
    CHECK_EQ_U64(g->pending_slots[0] & (1ull << 3), 0);
    emu_state_close(st);
}

/* Round robin between owners, exactly: a neighbour (another namespace's pid, so never reaped)
 * runs 10 ms of work that started 0.5 ms ago; with 1 ms slices (set at create) our 3 ms go in
 * turns: the rest of its slice, ours, its, ours, its, ours. Our times are on our clock; turned
 * into GPU time, a start marker reads our first slice, an end our last one's end. What has run
 * never changes when a third owner comes; the newcomer takes its turn after those waiting. */

/* Another pid namespace's process (proc slot 5, owner tag 6) runs 10 ms of work on GPU 0 from
 * 0.5 ms before base: the neighbour of the time-slicing cases. */
static void foreign_run(struct emu_state *st, uint64_t base, int32_t pid)
{
    const uint64_t us = 1000, ms = 1000000;
    struct emu_shared *sh = emu_state_shared(st);
    struct emu_gpu *g = emu_state_gpu(st, 0);
    emu_state_lock(st);
    sh->procs[5] = (struct emu_proc){.pid = pid, .start_time = 1, .pidns = my_pidns() + 1};
    g->intervals[0] = (struct emu_interval){base - 500 * us, base + 9500 * us, pid, 6, 0, 0, 0, 0};
    g->interval_count = 1;
    g->busy_until_ns = base + 9500 * us;
    g->busy_total_ns = 10 * ms;
    g->pending_slots[0] = 1ull << 5;
    emu_state_unlock(st);
}

TEST(timeline_time_slices_between_owners)
{
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 1;
    cfg.timeslice_us = 1000;
    const char *p = state_path("ts");
    REQUIRE_EQ_INT(emu_state_create(p, &cfg), 0);
    struct emu_state *st = NULL;
    REQUIRE_EQ_INT(emu_state_open(p, &st), 0);
    cfg.timeslice_us = EMU_TIMESLICE_MAX_US + 1;
    CHECK_EQ_INT(emu_state_create(state_path("ts-bad"), &cfg), -EINVAL);
    struct emu_gpu *g = emu_state_gpu(st, 0);
    const uint64_t us = 1000, ms = 1000000;
    CHECK_EQ_U64(emu_state_timeslice_ns(st, 0), ms);
    uint64_t base = emu_state_now_ns() + 200 * ms; /* in the future: "now" never interferes */
    foreign_run(st, base, 999998);
    /* our work is queued at base (not_before: our clock has not waited yet, it is the GPU's) */
    uint64_t s = 0, e = 0;
    REQUIRE_EQ_INT(emu_state_submit(st, 0, base, 3 * ms, &s, &e), 0);
    CHECK_EQ_U64(s, base);
    CHECK_EQ_U64(e, base + 3 * ms);
    /* not_before in the future counts from now: the turns start at now, not base; so look at
     * the schedule relative to where our first slice is */
    uint64_t first = emu_state_wall_ns(st, 0, 0, s, true);
    uint64_t last = emu_state_wall_ns(st, 0, 0, e, false);
    tap_diag("3 ms beside 10 ms in 1 ms slices: first slice at +%.3f ms, done at +%.3f ms",
             ((double)first - (double)base) / 1e6, ((double)last - (double)base) / 1e6);
    /* ours: three 1 ms slices with one of the neighbour's between each */
    CHECK_EQ_U64(last - first, 5 * ms);
    CHECK_EQ_U64(first, base + 500 * us); /* after the rest of the neighbour's slice */
    CHECK_EQ_U64(emu_state_wall_ns(st, 0, 0, s, false), base); /* before the wait */
    int mine = 0, theirs = 0;
    uint64_t busy_mine = 0;
    for (uint64_t k = 0; k < g->interval_count; k++) {
        const struct emu_interval *iv = &g->intervals[k % EMU_TIMELINE_RING];
        if (iv->end_ns <= first)
            continue;
        if (iv->pid == getpid()) {
            mine++;
            busy_mine += iv->end_ns - iv->start_ns;
            CHECK_EQ_U64(iv->end_ns - iv->start_ns, ms);
        } else {
            theirs++;
        }
    }
    CHECK_EQ_INT(mine, 3);
    CHECK_EQ_INT(theirs, 3); /* two slices between ours, then its rest in one */
    CHECK_EQ_U64(busy_mine, 3 * ms);
    /* the neighbour's end moved by our 3 ms */
    CHECK_EQ_U64(g->busy_until_ns, base + 9500 * us + 3 * ms);
    uint64_t busy = 0;
    REQUIRE_EQ_INT(emu_state_busy_ns(st, 0, first, last, 0, &busy, NULL), 0);
    CHECK_EQ_U64(busy, last - first); /* the device: busy throughout, the union */
    REQUIRE_EQ_INT(emu_state_busy_ns(st, 0, first, last, getpid(), &busy, NULL), 0);
    CHECK_EQ_U64(busy, 3 * ms); /* ours: our slices only */
    /* a forked child (a third owner) queues 2 ms ready 1 ms into our first slice: it joins
     * the queue behind the neighbour (waiting since our slice began) and ahead of us (back in
     * the queue when our slice ends): N [-0.5, 0.5) ours [0.5, 1.5) N [1.5, 2.5) child
     * [2.5, 3.5) ours [3.5, 4.5) N [4.5, 5.5) child [5.5, 6.5) ours [6.5, 7.5) N's rest */
    int pfd[2], back[2];
    REQUIRE(pipe(pfd) == 0 && pipe(back) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        uint64_t cs = 0, ce = 0;
        char c = emu_state_submit(st, 0, base + ms, 2 * ms, &cs, &ce) == 0 ? 'y' : 'n';
        uint64_t w[2] = {emu_state_wall_ns(st, 0, 0, cs, true),
                         emu_state_wall_ns(st, 0, 0, ce, false)};
        if (write(pfd[1], &c, 1) != 1 || write(pfd[1], w, sizeof(w)) != sizeof(w))
            _exit(1);
        char x;
        if (read(back[0], &x, 1) < 0) /* stay alive until the parent has looked */
            _exit(1);
        _exit(0);
    }
    char c = 0;
    uint64_t w[2] = {0, 0};
    bool got = read(pfd[0], &c, 1) == 1 && read(pfd[0], w, sizeof(w)) == sizeof(w);
    if (!got) {
        int status = 0;
        waitpid(child, &status, 0);
        tap_diag("child status 0x%x", status);
    }
    REQUIRE(got);
    CHECK(c == 'y');
    tap_diag("child: first slice at +%.3f ms, done at +%.3f ms",
             ((double)w[0] - (double)base) / 1e6, ((double)w[1] - (double)base) / 1e6);
    CHECK_EQ_U64(w[0], base + 2500 * us);
    CHECK_EQ_U64(w[1], base + 6500 * us);
    CHECK_EQ_U64(emu_state_wall_ns(st, 0, 0, e, false), base + 7500 * us); /* ours: 2 ms later */
    CHECK_EQ_U64(emu_state_wall_ns(st, 0, 0, s, true), first);
    CHECK_EQ_U64(g->busy_until_ns, base + 9500 * us + 5 * ms);
    CHECK(write(back[1], "q", 1) == 1);
    int status = 0;
    waitpid(child, &status, 0);
    close(pfd[0]);
    close(pfd[1]);
    close(back[0]);
    close(back[1]);
    emu_state_close(st);
}

/* Clock-bound items (spin kernels) beside a neighbour's work, 1 ms slices: the item's clock
 * starts at its first slice and runs on while the neighbour has the GPU, so 3 ms of it end 3 ms
 * after its first slice (ours [0.5, 1.5), the neighbour's [1.5, 2.5), ours [2.5, 3.5)), not
 * 5 ms as work-bound time would; it is busy in its own slices only (2 ms), and the neighbour's
 * work is stretched by those 2 ms. A second item of 1.5 ms queued behind it waits for our next
 * slice (4.5), and its clock runs out at 6.0 while the neighbour runs: it completes when we are
 * resident again, at 6.5 (its end event reads that). */
TEST(timeline_clock_bound_items_run_on_the_clock)
{
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 1;
    cfg.timeslice_us = 1000;
    const char *p = state_path("clk");
    REQUIRE_EQ_INT(emu_state_create(p, &cfg), 0);
    struct emu_state *st = NULL;
    REQUIRE_EQ_INT(emu_state_open(p, &st), 0);
    struct emu_shared *sh = emu_state_shared(st);
    struct emu_gpu *g = emu_state_gpu(st, 0);
    const uint64_t us = 1000, ms = 1000000;
    uint64_t base = emu_state_now_ns() + 200 * ms; /* in the future: "now" never interferes */
    foreign_run(st, base, 999996);
    uint64_t s = 0, e = 0;
    REQUIRE_EQ_INT(emu_state_submit_kind(st, 0, base, UINT64_MAX, 3 * ms, 0, true, &s, &e), 0);
    CHECK_EQ_U64(e - s, 3 * ms);
    uint64_t first = emu_state_wall_ns(st, 0, 0, s, true);
    uint64_t last = emu_state_wall_ns(st, 0, 0, e, false);
    tap_diag("clock-bound 3 ms beside 10 ms of work in 1 ms slices: first slice at +%.3f ms, "
             "done at +%.3f ms",
             ((double)first - (double)base) / 1e6, ((double)last - (double)base) / 1e6);
    CHECK_EQ_U64(first, base + 500 * us);
    CHECK_EQ_U64(last, base + 3500 * us); /* work-bound: 5.5 */
    uint64_t busy = 0;
    REQUIRE_EQ_INT(emu_state_busy_ns(st, 0, first, last, getpid(), &busy, NULL), 0);
    CHECK_EQ_U64(busy, 2 * ms); /* resident in two of its slices */
    REQUIRE_EQ_INT(emu_state_busy_ns(st, 0, first, last, 0, &busy, NULL), 0);
    CHECK_EQ_U64(busy, 3 * ms);                        /* the device: busy throughout */
    CHECK_EQ_U64(g->busy_until_ns, base + 11500 * us); /* the work stretched by our 2 ms */

    uint64_t s2 = 0, e2 = 0;
    REQUIRE_EQ_INT(emu_state_submit_kind(st, 0, 0, UINT64_MAX, 1500 * us, 0, true, &s2, &e2), 0);
    CHECK_EQ_U64(s2, e);
    uint64_t first2 = emu_state_wall_ns(st, 0, 0, s2, true);
    uint64_t last2 = emu_state_wall_ns(st, 0, 0, e2, false);
    tap_diag("then 1.5 ms: first slice at +%.3f ms, done at +%.3f ms",
             ((double)first2 - (double)base) / 1e6, ((double)last2 - (double)base) / 1e6);
    CHECK_EQ_U64(first2, base + 4500 * us);
    CHECK_EQ_U64(last2, base + 6500 * us); /* its clock ran out at 6.0, switched out */
    CHECK_EQ_U64(emu_state_wall_ns(st, 0, 0, e, false), last); /* the first one's end stays */
    REQUIRE_EQ_INT(emu_state_busy_ns(st, 0, base, last2, getpid(), &busy, NULL), 0);
    CHECK_EQ_U64(busy, 3 * ms);
    CHECK_EQ_U64(g->busy_until_ns, base + 12500 * us);
    /* the state file holds what the scheduler needs: it validates */
    char err[256] = "";
    CHECK_EQ_INT(emu_state_validate(sh, sizeof(*sh), err, sizeof(err)), 0);
    emu_state_close(st);
}

/* Ten 1 ms kernels queued one by one beside a neighbour are dealt out as one 10 ms kernel would
 * be (each submit after the first only reschedules from where our queue ran out): with the
 * default 2 ms slices, ours are the second, fourth, ... tenth 2 ms of the neighbour's run. */
TEST(timeline_slices_queued_piecewise_as_whole)
{
    struct emu_state *st = make("tw", 1, NULL);
    REQUIRE(st);
    struct emu_shared *sh = emu_state_shared(st);
    struct emu_gpu *g = emu_state_gpu(st, 0);
    const uint64_t ms = 1000000;
    uint64_t base = emu_state_now_ns() + 200 * ms;
    emu_state_lock(st);
    sh->procs[5] = (struct emu_proc){.pid = 999997, .start_time = 1, .pidns = my_pidns() + 1};
    g->intervals[0] = (struct emu_interval){base, base + 100 * ms, 999997, 6, 0, 0, 0, 0};
    g->interval_count = 1;
    g->busy_until_ns = base + 100 * ms;
    g->busy_total_ns = 100 * ms;
    emu_state_unlock(st);
    uint64_t s = 0, e = 0, first = 0;
    for (int i = 0; i < 10; i++) {
        REQUIRE_EQ_INT(emu_state_submit(st, 0, base, ms, &s, &e), 0);
        if (!i)
            first = s;
    }
    CHECK_EQ_U64(e, base + 10 * ms); /* our clock: back to back */
    CHECK_EQ_U64(emu_state_wall_ns(st, 0, 0, first, true), base + 2 * ms);
    CHECK_EQ_U64(emu_state_wall_ns(st, 0, 0, e, false), base + 20 * ms);
    int mine = 0;
    for (uint64_t k = 0; k < g->interval_count; k++) {
        const struct emu_interval *iv = &g->intervals[k % EMU_TIMELINE_RING];
        if (iv->pid != getpid())
            continue;
        CHECK_EQ_U64(iv->start_ns, base + (4 * (uint64_t)mine + 2) * ms);
        CHECK_EQ_U64(iv->end_ns - iv->start_ns, 2 * ms);
        mine++;
    }
    CHECK_EQ_INT(mine, 5);
    CHECK_EQ_U64(g->busy_until_ns, base + 110 * ms);
    emu_state_close(st);
}

TEST(events_ring_and_wait)
{
    struct emu_state *st = make("e", 2, NULL);
    REQUIRE(st);
    struct emu_event ev;
    CHECK_EQ_INT(emu_state_event_last(st, 1), 0);
    CHECK_EQ_INT(emu_state_event_get(st, 1, 1, &ev), -EAGAIN);
    uint32_t w = emu_state_event_word(st);
    CHECK_EQ_INT(emu_state_event_wait(st, w, 1000000), -ETIMEDOUT);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        uint64_t seq;
        _exit(emu_state_event_post(st, 1, EMU_EVENT_XID, 79, &seq) == 0 && seq == 1 ? 0 : 1);
    }
    /* blocks in the futex until the child posts; the bound only limits a failure */
    CHECK_EQ_INT(emu_state_event_wait(st, w, 10000000000ull), 0);
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ_INT(emu_state_event_last(st, 1), 1);
    REQUIRE_EQ_INT(emu_state_event_get(st, 1, 1, &ev), 0);
    CHECK_EQ_U64(ev.type, EMU_EVENT_XID);
    CHECK_EQ_U64(ev.data, 79);
    for (int i = 0; i < EMU_EVENT_RING; i++)
        emu_state_event_post(st, 1, EMU_EVENT_XID, 1000 + i, NULL);
    CHECK_EQ_INT(emu_state_event_get(st, 1, 1, &ev), -ESTALE);
    REQUIRE_EQ_INT(emu_state_event_get(st, 1, EMU_EVENT_RING + 1, &ev), 0);
    CHECK_EQ_U64(ev.data, 1000 + EMU_EVENT_RING - 1);
    emu_state_close(st);
}

TEST(mig_instances_hold_their_memory)
{
    struct emu_state *st = make("mig", 2, "H100");
    REQUIRE(st);
    bool active = false;
    int32_t busy = -1;
    REQUIRE_EQ_INT(emu_state_mig_set_mode(st, 0, true, &active, &busy), 0);
    CHECK(active && busy == 0);
    unsigned gi[2], ci[2], prof[2] = {EMU_MIG_GI_1_SLICE, EMU_MIG_GI_3_SLICE};
    REQUIRE_EQ_INT(emu_state_mig_create_default(st, 0, prof, 2, gi, ci, NULL), 0);
    struct emu_mig_gi tab[EMU_MIG_MAX_GI];
    REQUIRE_EQ_INT(emu_state_mig_snapshot(st, 0, tab), 0);
    uint64_t serial = tab[gi[0]].ci[ci[0]].serial; /* the 1g.10gb: 9984 MiB */
    CHECK_EQ_INT(tab[gi[0]].id, 13);
    CHECK_EQ_INT(tab[gi[1]].id, 1);
    REQUIRE_EQ_INT(emu_state_mig_bind(st, 0, serial), 0);
    CHECK_EQ_INT(emu_state_mem_charge(st, 0, 9000ull << 20), 0);
    CHECK_EQ_INT(emu_state_mem_charge(st, 0, 1000ull << 20), -ENOMEM); /* past 9984 MiB */
    CHECK_EQ_U64(emu_state_mig_gi_used(st, 0, gi[0]), 9000ull << 20);
    CHECK_EQ_U64(emu_state_mig_gi_used(st, 0, gi[1]), 0);
    /* its instance is in use, the others not; a bind elsewhere while holding memory is refused */
    int32_t who = 0;
    CHECK_EQ_INT(emu_state_mig_ci_destroy(st, 0, gi[0], ci[0], serial, &who), -EBUSY);
    CHECK_EQ_INT(who, getpid());
    CHECK_EQ_INT(emu_state_mig_bind(st, 0, tab[gi[1]].ci[ci[1]].serial), -EBUSY);
    CHECK_EQ_INT(emu_state_mig_destroy_all(st, 0, &who), -EBUSY);
    CHECK_EQ_INT(emu_state_gpu_reset(st, 0, &who), -EBUSY);
    /* the whole of GPU 1 is still a GPU of its own */
    CHECK_EQ_INT(emu_state_mem_charge(st, 1, 9000ull << 20), 0);
    emu_state_mem_uncharge(st, 1, 9000ull << 20);
    emu_state_mem_uncharge(st, 0, 9000ull << 20);
    CHECK_EQ_INT(emu_state_mig_ci_destroy(st, 0, gi[0], ci[0], serial, NULL), 0);
    CHECK_EQ_INT(emu_state_mem_charge(st, 0, 1 << 20), -ENODEV); /* its instance is gone */
    CHECK_EQ_INT(emu_state_mig_destroy_all(st, 0, NULL), 0);
    emu_state_proc_release(st);
    emu_state_close(st);
}

TEST(mig_and_pci_fields_are_validated)
{
    struct emu_state *st = make("migv", 2, "H100");
    REQUIRE(st);
    REQUIRE_EQ_INT(emu_state_mig_set_mode(st, 0, true, NULL, NULL), 0);
    unsigned gi[2], ci[2], prof[2] = {EMU_MIG_GI_1_SLICE, EMU_MIG_GI_2_SLICE};
    REQUIRE_EQ_INT(emu_state_mig_create_default(st, 0, prof, 2, gi, ci, NULL), 0);
    emu_state_close(st);
    struct emu_shared *good = image_of(state_path("migv")), *img = malloc(sizeof(*img));
    REQUIRE(good && img);
    char err[256];
    CHECK_EQ_INT(emu_state_validate(good, sizeof(*good), err, sizeof(err)), 0);
    const char *want[] = {"malformed",
                          "malformed",
                          "malformed",
                          "while MIG mode is off",
                          "compute instance slot",
                          "compute instance slot",
                          "vfio",
                          "IOMMU group",
                          "without MIG"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        memcpy(img, good, sizeof(*img));
        struct emu_gpu *g = &img->gpus[0];
        struct emu_mig_gi *a = &g->mig[gi[0]], *b = &g->mig[gi[1]];
        switch (i) {
        case 0: /* two GPU instances on one memory slice */
            b->start = a->start & ~1u;
            b->id = (uint32_t)emu_mig_gi_id(b->start, b->size);
            a->start = b->start;
            a->id = (uint32_t)emu_mig_gi_id(a->start, a->size);
            break;
        case 1: /* an ID its placement does not give */
            a->id = 2;
            break;
        case 2: /* a placement the profile does not have */
            a->start = 7;
            a->id = (uint32_t)emu_mig_gi_id(7, 1);
            break;
        case 3:
            g->mig_mode = 0;
            break;
        case 4: /* a compute instance larger than its GPU instance allows */
            a->ci[ci[0]].size = 2;
            break;
        case 5: /* a serial never given */
            a->ci[ci[0]].serial = img->mig_serial_last + 1;
            break;
        case 6:
            g->vfio = 2;
            break;
        case 7:
            g->iommu_group = 3;
            break;
        case 8: /* MIG mode on a model without MIG */
            snprintf(img->gpus[1].name, sizeof(img->gpus[1].name), "Tesla T4");
            img->gpus[1].mig_mode_pending = 1;
            break;
        }
        err[0] = 0;
        CHECK_EQ_INT(emu_state_validate(img, sizeof(*img), err, sizeof(err)), -EPROTO);
        if (!strstr(err, want[i]))
            tap_fail(__FILE__, __LINE__, "case %zu: '%s' not in '%s'", i, want[i], err);
    }
    free(img);
    free(good);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
