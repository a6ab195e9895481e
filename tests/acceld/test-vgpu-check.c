/* test-vgpu-check.c — vGPU mode's host-side memory check (src/modes/vgpu-check.c) on the
 * emulator: emu-hold processes stand in for containers (a fake /proc root gives each a
 * /proc/<pid>/cgroup naming its pod, cgroup v2 with containerd's path), hold memory through the
 * emulated driver without libvcuda, and the check reads what the emulated NVML says. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "region.h"
#include "state.h"
#include "tap.h"
#include "vgpu-check.h"

#define MiB (1ull << 20)
#define POD_A "0b6c4a3e-1111-4c2a-9d5e-000000000001"
#define POD_B "0b6c4a3e-2222-4c2a-9d5e-000000000002"

static char dir[256], proc_root[300], uuid[96];
static struct gpu_nvml *nvml;

struct hold {
    pid_t pid;
    FILE *in, *out;
};

static void setup(void)
{
    if (nvml)
        return;
    const char *build = getenv("ACCEL_BUILD_ROOT");
    if (!build)
        tap_skip_all("ACCEL_BUILD_ROOT is not set (run through meson test)");
    snprintf(dir, sizeof(dir), "%s", tap_tmpdir());
    char state[400], lib[4096], path[4200];
    snprintf(state, sizeof(state), "%s/emu-state", dir);
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 1;
    cfg.memory_bytes = 1ull << 30;
    REQUIRE_EQ_INT(emu_state_create(state, &cfg), 0);
    setenv("ACCEL_EMU_STATE", state, 1);
    setenv("ACCEL_EMU_CTX_OVERHEAD", "4Mi", 1);
    /* short NVML sample periods: the compute check sees new samples soon */
    setenv("ACCEL_EMU_UTIL_WINDOW_MS", "50", 1);
    snprintf(lib, sizeof(lib), "%s/src/emu", build);
    setenv("LD_LIBRARY_PATH", lib, 1);
    snprintf(path, sizeof(path), "%s/libnvidia-ml.so.1", lib);
    char err[512];
    int r = gpu_nvml_open(path, &nvml, err, sizeof(err));
    if (r < 0) {
        tap_diag("emulated NVML: %s", err);
        tap_skip_all("the emulated NVML cannot be opened");
    }
    nvmlDevice_t d;
    REQUIRE(nvml->nvmlDeviceGetHandleByIndex_v2(0, &d) == NVML_SUCCESS);
    REQUIRE(nvml->nvmlDeviceGetUUID(d, uuid, sizeof(uuid)) == NVML_SUCCESS);
    snprintf(proc_root, sizeof(proc_root), "%s/proc", dir);
    mkdir(proc_root, 0755);
}

/* The container id (64 digits of it) the next start() writes in the cgroup path. */
static int next_cid = 1;

/* Starts emu-hold holding mib MiB on GPU 0; pod != NULL puts it in that pod's cgroup. */
static struct hold start(const char *pod, unsigned mib)
{
    char exe[4096], arg[16];
    snprintf(exe, sizeof(exe), "%s/tests/emu/emu-hold", getenv("ACCEL_BUILD_ROOT"));
    snprintf(arg, sizeof(arg), "%u", mib);
    int in[2], out[2];
    /* close-on-exec: a later hold must not keep this one's stdin open */
    REQUIRE(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl(exe, exe, "0", arg, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    struct hold h = {pid, fdopen(in[1], "w"), fdopen(out[0], "r")};
    char line[64] = "";
    REQUIRE(fgets(line, sizeof(line), h.out) != NULL);
    char want[64];
    snprintf(want, sizeof(want), "ready %d\n", (int)pid);
    CHECK_EQ_STR(line, want);
    if (pod) {
        char d[400], f[420], u[64];
        snprintf(d, sizeof(d), "%s/%d", proc_root, (int)pid);
        mkdir(d, 0755);
        snprintf(u, sizeof(u), "%s", pod);
        for (char *p = u; *p; p++)
            if (*p == '-')
                *p = '_';
        snprintf(f, sizeof(f), "%s/cgroup", d);
        FILE *c = fopen(f, "w");
        REQUIRE(c != NULL);
        fprintf(c,
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
                "cri-containerd-%064d.scope\n",
                u, next_cid);
        fclose(c);
    }
    return h;
}

/* Ends h (closing its stdin) unless it is gone already; returns its wait status. */
static int stop(struct hold *h)
{
    char f[420];
    snprintf(f, sizeof(f), "%s/%d/cgroup", proc_root, (int)h->pid);
    remove(f);
    snprintf(f, sizeof(f), "%s/%d", proc_root, (int)h->pid);
    remove(f);
    fclose(h->in);
    fclose(h->out);
    int st = 0;
    REQUIRE(waitpid(h->pid, &st, 0) == h->pid);
    return st;
}

static struct vgpu_check_target target(const char *pod, const char *ctr, uint64_t limit,
                                       const char *region)
{
    return (struct vgpu_check_target){
        pod, "default", strcmp(pod, POD_A) == 0 ? "a" : "b", ctr, uuid, limit, region, 0, 30, NULL};
}

static bool alive(pid_t pid)
{
    return kill(pid, 0) == 0;
}

TEST(over_quota_process_is_killed_one_within_quota_is_left_alone)
{
    setup();
    struct hold a = start(POD_A, 96), b = start(POD_B, 16), host = start(NULL, 200);
    struct vgpu_check_target t[] = {target(POD_A, "main", 32 * MiB, NULL),
                                    target(POD_B, "main", 64 * MiB, NULL)};
    struct vgpu_check_options o = {.proc_root = proc_root, .action = VGPU_OVER_QUOTA_KILL};
    struct vgpu_check_finding f[8];
    size_t n = 99;
    REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 2, &o, f, 8, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].kind, VGPU_CHECK_OVER_QUOTA);
    CHECK_EQ_INT(f[0].target, 0);
    CHECK_EQ_INT(f[0].pid, a.pid);
    CHECK_GE_U64(f[0].used, 96 * MiB);
    CHECK_EQ_U64(f[0].limit, 32 * MiB + VGPU_CHECK_SLACK);
    CHECK(f[0].killed);
    int st = stop(&a);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* within quota, and a host process (no pod cgroup) holding more: both untouched */
    CHECK(alive(b.pid));
    CHECK(alive(host.pid));
    st = stop(&b);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    stop(&host);
}

TEST(action_none_reports_and_kills_nothing)
{
    setup();
    struct hold a = start(POD_A, 48);
    struct vgpu_check_target t[] = {target(POD_A, "main", 32 * MiB, NULL)};
    struct vgpu_check_usage u[1] = {{.nvml_procs = 99, .region_ok = true}};
    struct vgpu_check_options o = {
        .proc_root = proc_root, .action = VGPU_OVER_QUOTA_NONE, .usage = u};
    struct vgpu_check_finding f[4];
    size_t n = 0;
    REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 1, &o, f, 4, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].pid, a.pid);
    CHECK(!f[0].killed);
    CHECK(alive(a.pid));
    /* the usage accelctl shows: NVML's figure for the container, no region (none given) */
    CHECK_GE_U64(u[0].nvml_bytes, 48 * MiB);
    CHECK_EQ_INT(u[0].nvml_procs, 1);
    CHECK(!u[0].region_ok);
    /* the same usage against a larger quota is no finding */
    t[0].memory_limit = 64 * MiB;
    REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 1, &o, f, 4, &n), 0);
    CHECK_EQ_INT(n, 0);
    stop(&a);
}

TEST(two_containers_of_one_pod_share_their_quotas)
{
    setup();
    struct hold a1 = start(POD_A, 40), a2 = start(POD_A, 10);
    struct vgpu_check_target t[] = {target(POD_A, "one", 32 * MiB, NULL),
                                    target(POD_A, "two", 32 * MiB, NULL)};
    struct vgpu_check_options o = {.proc_root = proc_root, .action = VGPU_OVER_QUOTA_KILL};
    struct vgpu_check_finding f[4];
    size_t n = 0;
    /* 40 + 10 MiB (+ contexts) within 64 MiB: nobody is killed */
    REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 2, &o, f, 4, &n), 0);
    CHECK_EQ_INT(n, 0);
    CHECK(alive(a1.pid) && alive(a2.pid));
    t[1].memory_limit = 8 * MiB; /* 40 MiB quota now: the larger process goes */
    REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 2, &o, f, 4, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].pid, a1.pid);
    int st = stop(&a1);
    CHECK(WIFSIGNALED(st));
    CHECK(alive(a2.pid));
    stop(&a2);
}

TEST(containers_told_apart_by_their_runtime_id)
{
    setup();
    next_cid = 2;
    struct hold a1 = start(POD_A, 40);
    next_cid = 3;
    struct hold a2 = start(POD_A, 10);
    next_cid = 1;
    char id1[80], id2[80];
    snprintf(id1, sizeof(id1), "%064d", 2);
    snprintf(id2, sizeof(id2), "%064d", 3);
    struct vgpu_check_target t[] = {target(POD_A, "one", 64 * MiB, NULL),
                                    target(POD_A, "two", 8 * MiB, NULL)};
    t[0].container_id = id1;
    t[1].container_id = id2;
    struct vgpu_check_usage u[2];
    struct vgpu_check_options o = {
        .proc_root = proc_root, .action = VGPU_OVER_QUOTA_KILL, .usage = u};
    struct vgpu_check_finding f[4];
    size_t n = 0;
    /* the pod is within 72 MiB, but "two" holds 10 MiB (+ context) of its 8: it is the
     * finding, named as its own container, and its process is the one killed */
    REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 2, &o, f, 4, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].kind, VGPU_CHECK_OVER_QUOTA);
    CHECK_EQ_INT(f[0].target, 1);
    CHECK_EQ_INT(f[0].pid, a2.pid);
    CHECK_EQ_U64(f[0].limit, 8 * MiB + VGPU_CHECK_SLACK);
    CHECK(f[0].killed);
    /* usage per container, not the pod's total on each */
    CHECK_EQ_INT(u[0].nvml_procs, 1);
    CHECK_EQ_INT(u[1].nvml_procs, 1);
    CHECK_GE_U64(u[0].nvml_bytes, 40 * MiB);
    CHECK(u[1].nvml_bytes >= 10 * MiB && u[1].nvml_bytes < 40 * MiB);
    int st = stop(&a2);
    CHECK(WIFSIGNALED(st));
    CHECK(alive(a1.pid));
    stop(&a1);
}

TEST(region_that_under_reports_is_flagged)
{
    setup();
    char region[400];
    snprintf(region, sizeof(region), "%s/region-b", dir);
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(region, &r), 0);
    struct hold honest = start(POD_B, 8), bypass = start(POD_B, 16);
    /* honest's slot says what NVML says (its allocation and the emulator's context) */
    struct gpu_process gp[8];
    size_t np = 0;
    nvmlDevice_t d;
    REQUIRE(nvml->nvmlDeviceGetHandleByIndex_v2(0, &d) == NVML_SUCCESS);
    REQUIRE_EQ_INT(gpu_nvml_running_processes(nvml, d, gp, 8, &np), 0);
    uint64_t honest_used = 0;
    for (size_t i = 0; i < np; i++)
        if ((pid_t)gp[i].pid == honest.pid)
            honest_used = gp[i].used_memory_bytes;
    REQUIRE(honest_used >= 8 * MiB);
    int slot = vc_region_claim_slot(&r, (uint32_t)honest.pid, 0);
    REQUIRE(slot >= 0);
    vc_region_charge(&r, slot, 0, honest_used);
    struct vgpu_check_target t[] = {target(POD_B, "main", 256 * MiB, region)};
    struct vgpu_check_usage u[1];
    struct vgpu_check_options o = {
        .proc_root = proc_root, .action = VGPU_OVER_QUOTA_KILL, .usage = u};
    struct vgpu_check_finding f[4];
    size_t n = 0;
    REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 1, &o, f, 4, &n), 0);
    REQUIRE_EQ_INT(n, 1); /* within quota: only the region finding, nothing killed */
    /* region and NVML side by side: the region counts only the honest process */
    CHECK(u[0].region_ok);
    CHECK_EQ_U64(u[0].region_bytes, honest_used);
    CHECK_EQ_INT(u[0].nvml_procs, 2);
    CHECK_GE_U64(u[0].nvml_bytes, honest_used + 16 * MiB);
    CHECK_EQ_INT(f[0].kind, VGPU_CHECK_UNDER_REPORT);
    CHECK_EQ_INT(f[0].pid, bypass.pid);
    CHECK_EQ_INT(f[0].slot, -1);
    CHECK_EQ_U64(f[0].limit, 0);
    CHECK_GE_U64(f[0].used, 16 * MiB);
    CHECK(!f[0].killed);
    CHECK(alive(bypass.pid) && alive(honest.pid));
    /* over quota: the process the region does not account for is the one killed */
    t[0].memory_limit = 20 * MiB;
    REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 1, &o, f, 4, &n), 0);
    REQUIRE_EQ_INT(n, 2);
    CHECK_EQ_INT(f[1].kind, VGPU_CHECK_OVER_QUOTA);
    CHECK_EQ_INT(f[1].pid, bypass.pid);
    CHECK(f[1].killed);
    int st = stop(&bypass);
    CHECK(WIFSIGNALED(st));
    CHECK(alive(honest.pid));
    stop(&honest);
    vc_region_detach(&r);
}

/* A process of POD_A that keeps GPU 0 busy (tests/emu/spin: one 60 s kernel on the
 * emulator) until it is killed; its /proc/<pid>/cgroup names its
 * container's cgroup, and the fake cgroup tree under dir/cgroup has that cgroup's
 * cgroup.freeze. */
#define BUSY_CGROUP                                                                                \
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b6c4a3e_1111_4c2a_9d5e_"      \
    "000000000001.slice/cri-containerd-" /* + 64 x 'b' */
static pid_t start_busy(char *freeze_file, size_t len)
{
    char exe[4096];
    snprintf(exe, sizeof(exe), "%s/tests/emu/spin", getenv("ACCEL_BUILD_ROOT"));
    if (access(exe, X_OK) != 0)
        return -1;
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl(exe, exe, "60000", (char *)NULL);
        _exit(127);
    }
    char cg[300], d[400], f[420];
    snprintf(cg, sizeof(cg), "%s%064d.scope", BUSY_CGROUP, 0);
    memset(strstr(cg, "cri-containerd-") + 15, 'b', 64);
    snprintf(d, sizeof(d), "%s/%d", proc_root, (int)pid);
    mkdir(d, 0755);
    snprintf(f, sizeof(f), "%s/cgroup", d);
    FILE *c = fopen(f, "w");
    REQUIRE(c != NULL);
    fprintf(c, "0::%s\n", cg);
    fclose(c);
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s/cgroup%s'", dir, cg);
    REQUIRE(system(cmd) == 0);
    snprintf(freeze_file, len, "%s/cgroup%s/cgroup.freeze", dir, cg);
    c = fopen(freeze_file, "w");
    REQUIRE(c != NULL);
    fputs("0\n", c);
    fclose(c);
    return pid;
}

static char freeze_state(const char *file)
{
    char buf[8] = "";
    FILE *f = fopen(file, "r");
    if (!f)
        return '?';
    if (!fgets(buf, sizeof(buf), f))
        buf[0] = '?';
    fclose(f);
    return buf[0];
}

/* Runs the check until it finds something or 20 s pass (polling every 10 ms). */
static size_t run_until_finding(struct vgpu_check_target *t, size_t n, struct vgpu_check_options *o,
                                struct vgpu_check_finding *f)
{
    for (int i = 0; i < 2000; i++) {
        size_t k = 0;
        REQUIRE_EQ_INT(vgpu_check_run(nvml, t, n, o, f, 4, &k), 0);
        if (k)
            return k;
        usleep(10000);
    }
    return 0;
}

TEST(compute_over_share_is_found_and_frozen_then_thawed)
{
    setup();
    char freeze_file[700];
    pid_t busy = start_busy(freeze_file, sizeof(freeze_file));
    if (busy < 0) {
        tap_diag("tests/emu/spin is not built: no busy process");
        return;
    }
    char cgroup_root[300];
    snprintf(cgroup_root, sizeof(cgroup_root), "%s/cgroup", dir);
    struct vgpu_check_target t[] = {target(POD_A, "main", 512 * MiB, NULL)};
    /* action none first: reported, nothing frozen */
    struct vgpu_check_state *s = NULL;
    REQUIRE_EQ_INT(vgpu_check_state_new(&s), 0);
    struct vgpu_check_options o = {.proc_root = proc_root,
                                   .state = s,
                                   .compute_action = VGPU_COMPUTE_NONE,
                                   .cgroup_root = cgroup_root,
                                   .freeze_ms = 1000,
                                   .now_ms = 5000};
    struct vgpu_check_finding f[4];
    size_t n = run_until_finding(t, 1, &o, f);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].kind, VGPU_CHECK_OVER_SHARE);
    CHECK_EQ_INT(f[0].pid, busy);
    CHECK_GE_U64(f[0].used, 90); /* the GPU is all its */
    CHECK_EQ_U64(f[0].limit, 30);
    CHECK(!f[0].frozen);
    CHECK_EQ_INT(freeze_state(freeze_file), '0');
    s = vgpu_check_state_free(s);
    /* freeze: the container's cgroup is duty-cycled, frozen 1 - 30/util of each
     * freeze_ms (the GPU is all its: util 90..100, so 667..700 per mille) */
    REQUIRE_EQ_INT(vgpu_check_state_new(&s), 0);
    o.state = s;
    o.compute_action = VGPU_COMPUTE_FREEZE;
    n = run_until_finding(t, 1, &o, f);
    REQUIRE_EQ_INT(n, 1);
    CHECK(f[0].frozen);
    CHECK_EQ_INT(f[0].freeze_errno, 0);
    unsigned duty = f[0].duty_pm;
    CHECK(duty >= 660 && duty <= 700);
    CHECK_EQ_INT(freeze_state(freeze_file), '1');
    CHECK_EQ_U64(vgpu_check_cycling(s), 1);
    CHECK_EQ_U64(vgpu_check_cycle(s, 5000), 5000 + duty);
    CHECK_EQ_INT(freeze_state(freeze_file), '1');
    CHECK_EQ_U64(vgpu_check_cycle(s, 5000 + duty), 6000); /* thawed for the rest */
    CHECK_EQ_INT(freeze_state(freeze_file), '0');
    CHECK_EQ_U64(vgpu_check_cycle(s, 6000), 6000 + duty); /* and frozen again */
    CHECK_EQ_INT(freeze_state(freeze_file), '1');
    /* the next passes: still over (this freezer is a file: the process never stops, so
     * its utilization when free is estimated at the most, 100 %): the cycle goes on at
     * 70 % */
    for (int i = 0; i < 5; i++) {
        size_t k = 0;
        REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 1, &o, f, 4, &k), 0);
        usleep(20000);
    }
    CHECK_EQ_U64(vgpu_check_cycling(s), 1);
    /* a share that covers it: the next pass with samples ends the cycle, thawed */
    t[0].cores = 100;
    for (int i = 0; i < 500 && vgpu_check_cycling(s); i++) {
        size_t k = 0;
        REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 1, &o, f, 4, &k), 0);
        usleep(10000);
    }
    CHECK_EQ_U64(vgpu_check_cycling(s), 0);
    CHECK_EQ_INT(freeze_state(freeze_file), '0');
    CHECK_EQ_U64(vgpu_check_cycle(s, 7000), UINT64_MAX);
    t[0].cores = 30;
    s = vgpu_check_state_free(s);
    /* freeing the state thaws what is still frozen */
    REQUIRE_EQ_INT(vgpu_check_state_new(&s), 0);
    o.state = s;
    REQUIRE_EQ_INT(run_until_finding(t, 1, &o, f), 1);
    CHECK_EQ_INT(freeze_state(freeze_file), '1');
    s = vgpu_check_state_free(s);
    CHECK_EQ_INT(freeze_state(freeze_file), '0');
    /* a share that covers it: a pass with samples finds nothing */
    REQUIRE_EQ_INT(vgpu_check_state_new(&s), 0);
    o.state = s;
    t[0].cores = 100;
    size_t k = 9;
    for (int i = 0; i < 20; i++) {
        REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 1, &o, f, 4, &k), 0);
        CHECK_EQ_INT(k, 0);
        usleep(10000);
    }
    s = vgpu_check_state_free(s);
    kill(busy, SIGKILL);
    int st;
    REQUIRE(waitpid(busy, &st, 0) == busy);
}

/* The compute check per container: a pod's two containers of 30 and 70 cores, the first
 * running the GPU flat out. Known by their runtime ids, the first is over its share (a
 * finding on it); unknown, the pod as a whole is within its 100 (none). */
TEST(compute_per_container)
{
    setup();
    char freeze_file[700];
    pid_t busy = start_busy(freeze_file, sizeof(freeze_file));
    if (busy < 0) {
        tap_diag("tests/emu/spin is not built: no busy process");
        return;
    }
    char main_id[65], side_id[65];
    memset(main_id, 'b', 64);
    memset(side_id, 'c', 64);
    main_id[64] = side_id[64] = '\0';
    struct vgpu_check_target t[] = {target(POD_A, "main", 512 * MiB, NULL),
                                    target(POD_A, "side", 512 * MiB, NULL)};
    t[1].cores = 70;
    struct vgpu_check_state *s = NULL;
    REQUIRE_EQ_INT(vgpu_check_state_new(&s), 0);
    struct vgpu_check_options o = {.proc_root = proc_root, .state = s, .freeze_ms = 1000};
    struct vgpu_check_finding f[4];
    size_t k = 9;
    for (int i = 0; i < 20; i++) {
        REQUIRE_EQ_INT(vgpu_check_run(nvml, t, 2, &o, f, 4, &k), 0);
        CHECK_EQ_INT(k, 0);
        usleep(10000);
    }
    t[0].container_id = main_id;
    t[1].container_id = side_id;
    size_t n = run_until_finding(t, 2, &o, f);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].kind, VGPU_CHECK_OVER_SHARE);
    CHECK_EQ_INT(f[0].target, 0);
    CHECK_EQ_U64(f[0].limit, 30);
    CHECK_GE_U64(f[0].used, 90);
    CHECK_EQ_INT(f[0].pid, busy);
    vgpu_check_state_free(s);
    kill(busy, SIGKILL);
    int st;
    REQUIRE(waitpid(busy, &st, 0) == busy);
}

TEST(action_names)
{
    enum vgpu_over_quota_action a = VGPU_OVER_QUOTA_NONE;
    CHECK_EQ_INT(vgpu_over_quota_action_parse("kill", &a), 0);
    CHECK_EQ_INT(a, VGPU_OVER_QUOTA_KILL);
    CHECK_EQ_INT(vgpu_over_quota_action_parse("freeze", &a), -EINVAL);
    CHECK_EQ_INT(a, VGPU_OVER_QUOTA_KILL);
    CHECK_EQ_STR(vgpu_over_quota_action_name(VGPU_OVER_QUOTA_NONE), "none");
}

int main(int argc, char **argv)
{
    int rc = tap_main(argc, argv);
    nvml = gpu_nvml_free(nvml);
    return rc;
}
