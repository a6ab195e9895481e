/* test-hostcheck.c — the host-side check (src/hostcheck/hostcheck.c) on the
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
#include "hostcheck.h"

#define MiB (1ull << 20)
#define POD_A "0b6c4a3e-1111-4c2a-9d5e-000000000001"
#define POD_B "0b6c4a3e-2222-4c2a-9d5e-000000000002"

static char dir[256], proc_root[300], uuid[96], uuid1[96];
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
    cfg.gpus = 2; /* GPU 1: where a pod given GPU 0 must not go */
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
    REQUIRE(nvml->nvmlDeviceGetHandleByIndex_v2(1, &d) == NVML_SUCCESS);
    REQUIRE(nvml->nvmlDeviceGetUUID(d, uuid1, sizeof(uuid1)) == NVML_SUCCESS);
    snprintf(proc_root, sizeof(proc_root), "%s/proc", dir);
    mkdir(proc_root, 0755);
}

/* The container id (64 digits of it) the next start() writes in the cgroup path. */
static int next_cid = 1;

/* Starts emu-hold holding mib MiB on GPU gpu; pod != NULL puts it in that pod's cgroup. */
static struct hold start_on(const char *gpu, const char *pod, unsigned mib)
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
        execl(exe, exe, gpu, arg, (char *)NULL);
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

static struct hold start(const char *pod, unsigned mib)
{
    return start_on("0", pod, mib);
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

static struct hostcheck_target target(const char *pod, const char *ctr, uint64_t limit,
                                      const char *region_dir)
{
    return (struct hostcheck_target){.pod_uid = pod,
                                     .ns = "default",
                                     .pod = strcmp(pod, POD_A) == 0 ? "a" : "b",
                                     .container = ctr,
                                     .gpu_uuid = uuid,
                                     .memory_limit = limit,
                                     .region_dir = region_dir,
                                     .cores = 30};
}

static bool alive(pid_t pid)
{
    return kill(pid, 0) == 0;
}

TEST(over_quota_process_is_killed_one_within_quota_is_left_alone)
{
    setup();
    struct hold a = start(POD_A, 96), b = start(POD_B, 16), host = start(NULL, 200);
    struct hostcheck_target t[] = {target(POD_A, "main", 32 * MiB, NULL),
                                   target(POD_B, "main", 64 * MiB, NULL)};
    struct hostcheck_options o = {.proc_root = proc_root, .action = HOSTCHECK_ACTION_KILL};
    struct hostcheck_finding f[8];
    size_t n = 99;
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 2, &o, f, 8, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].kind, HOSTCHECK_OVER_QUOTA);
    CHECK_EQ_INT(f[0].target, 0);
    CHECK_EQ_INT(f[0].pid, a.pid);
    CHECK_GE_U64(f[0].used, 96 * MiB);
    CHECK_EQ_U64(f[0].limit, 32 * MiB + HOSTCHECK_SLACK);
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
    struct hostcheck_target t[] = {target(POD_A, "main", 32 * MiB, NULL)};
    struct hostcheck_usage u[1] = {{.nvml_procs = 99, .region_ok = true}};
    struct hostcheck_options o = {
        .proc_root = proc_root, .action = HOSTCHECK_ACTION_NONE, .usage = u};
    struct hostcheck_finding f[4];
    size_t n = 0;
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 4, &n), 0);
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
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 4, &n), 0);
    CHECK_EQ_INT(n, 0);
    stop(&a);
}

TEST(two_containers_of_one_pod_share_their_quotas)
{
    setup();
    struct hold a1 = start(POD_A, 40), a2 = start(POD_A, 10);
    struct hostcheck_target t[] = {target(POD_A, "one", 32 * MiB, NULL),
                                   target(POD_A, "two", 32 * MiB, NULL)};
    struct hostcheck_options o = {.proc_root = proc_root, .action = HOSTCHECK_ACTION_KILL};
    struct hostcheck_finding f[4];
    size_t n = 0;
    /* 40 + 10 MiB (+ contexts) within 64 MiB: nobody is killed */
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 2, &o, f, 4, &n), 0);
    CHECK_EQ_INT(n, 0);
    CHECK(alive(a1.pid) && alive(a2.pid));
    t[1].memory_limit = 8 * MiB; /* 40 MiB quota now: the larger process goes */
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 2, &o, f, 4, &n), 0);
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
    struct hostcheck_target t[] = {target(POD_A, "one", 64 * MiB, NULL),
                                   target(POD_A, "two", 8 * MiB, NULL)};
    t[0].container_id = id1;
    t[1].container_id = id2;
    struct hostcheck_usage u[2];
    struct hostcheck_options o = {
        .proc_root = proc_root, .action = HOSTCHECK_ACTION_KILL, .usage = u};
    struct hostcheck_finding f[4];
    size_t n = 0;
    /* the pod is within 72 MiB, but "two" holds 10 MiB (+ context) of its 8: it is the
     * finding, named as its own container, and its process is the one killed */
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 2, &o, f, 4, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].kind, HOSTCHECK_OVER_QUOTA);
    CHECK_EQ_INT(f[0].target, 1);
    CHECK_EQ_INT(f[0].pid, a2.pid);
    CHECK_EQ_U64(f[0].limit, 8 * MiB + HOSTCHECK_SLACK);
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
    char region_dir[400], region[420];
    snprintf(region_dir, sizeof(region_dir), "%s/region-b", dir);
    mkdir(region_dir, 0777);
    snprintf(region, sizeof(region), "%s/usage", region_dir);
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
    struct hostcheck_target t[] = {target(POD_B, "main", 256 * MiB, region_dir)};
    struct hostcheck_usage u[1];
    struct hostcheck_options o = {
        .proc_root = proc_root, .action = HOSTCHECK_ACTION_KILL, .usage = u};
    struct hostcheck_finding f[4];
    size_t n = 0;
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 4, &n), 0);
    REQUIRE_EQ_INT(n, 1); /* within quota: only the region finding, nothing killed */
    /* region and NVML side by side: the region counts only the honest process */
    CHECK(u[0].region_ok);
    CHECK_EQ_U64(u[0].region_bytes, honest_used);
    CHECK_EQ_INT(u[0].nvml_procs, 2);
    CHECK_GE_U64(u[0].nvml_bytes, honest_used + 16 * MiB);
    CHECK_EQ_INT(f[0].kind, HOSTCHECK_UNDER_REPORT);
    CHECK_EQ_INT(f[0].pid, bypass.pid);
    CHECK_EQ_INT(f[0].slot, -1);
    CHECK_EQ_U64(f[0].limit, 0);
    CHECK_GE_U64(f[0].used, 16 * MiB);
    CHECK(!f[0].killed);
    CHECK(alive(bypass.pid) && alive(honest.pid));
    /* over quota: the process the region does not account for is the one killed */
    t[0].memory_limit = 20 * MiB;
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 4, &n), 0);
    REQUIRE_EQ_INT(n, 2);
    CHECK_EQ_INT(f[1].kind, HOSTCHECK_OVER_QUOTA);
    CHECK_EQ_INT(f[1].pid, bypass.pid);
    CHECK(f[1].killed);
    int st = stop(&bypass);
    CHECK(WIFSIGNALED(st));
    CHECK(alive(honest.pid));
    stop(&honest);
    vc_region_detach(&r);
}

/* Issue 22, F4: a container's process on a GPU its pod was not given (a runtime honouring
 * NVIDIA_VISIBLE_DEVICES=all) is a finding on that container, killed under kill; before,
 * only the GPUs named by targets were looked at. A whole GPU given to the pod is its own. */
TEST(process_on_a_gpu_the_pod_was_not_given)
{
    setup();
    struct hold stray = start_on("1", POD_A, 24), own = start(POD_A, 8);
    struct hold whole = start_on("1", POD_B, 16), host = start_on("1", NULL, 16);
    struct hostcheck_target t[] = {target(POD_A, "main", 64 * MiB, NULL),
                                   target(POD_B, "main", 0, NULL)};
    t[1].gpu_uuid = uuid1;
    t[1].whole = true;
    struct hostcheck_options o = {.proc_root = proc_root, .action = HOSTCHECK_ACTION_NONE};
    struct hostcheck_finding f[8];
    size_t n = 9;
    /* only the targets' GPUs (as before issue 22): nothing */
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 2, &o, f, 8, &n), 0);
    CHECK_EQ_INT(n, 0);
    o.all_gpus = true;
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 2, &o, f, 8, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].kind, HOSTCHECK_FOREIGN_GPU);
    CHECK_EQ_INT(f[0].target, 0);
    CHECK_EQ_INT(f[0].pid, stray.pid);
    CHECK_EQ_STR(f[0].gpu, uuid1);
    CHECK_GE_U64(f[0].used, 24 * MiB);
    CHECK(!f[0].killed && alive(stray.pid));
    char msg[1024];
    hostcheck_describe(&f[0], t, "vgpu", msg, sizeof(msg));
    CHECK(strstr(msg, uuid1) != NULL && strstr(msg, "not given") != NULL);
    o.action = HOSTCHECK_ACTION_KILL;
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 2, &o, f, 8, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK(f[0].killed);
    int st = stop(&stray);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    CHECK(alive(own.pid) && alive(whole.pid) && alive(host.pid));
    stop(&own);
    stop(&whole);
    stop(&host);
}

/* Issue 22, F1/F2 at the check's level: a region dir whose "usage" is a symlink to another
 * file, or a truncated file, while the container runs on the GPU: a finding about the
 * container (regionInvalid), the file pointed to untouched and never created. */
TEST(a_symlinked_or_truncated_region_is_a_finding_never_followed)
{
    setup();
    char rdir[400], usage[420], victim[400];
    snprintf(rdir, sizeof(rdir), "%s/region-f1", dir);
    mkdir(rdir, 0777);
    snprintf(usage, sizeof(usage), "%s/usage", rdir);
    snprintf(victim, sizeof(victim), "%s/not-yet", dir);
    REQUIRE(symlink(victim, usage) == 0);
    struct hold a = start(POD_A, 8);
    struct hostcheck_target t[] = {target(POD_A, "main", 64 * MiB, rdir)};
    struct hostcheck_usage u[1];
    struct hostcheck_options o = {
        .proc_root = proc_root, .action = HOSTCHECK_ACTION_KILL, .usage = u};
    struct hostcheck_finding f[8];
    size_t n = 0;
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 8, &n), 0);
    REQUIRE_EQ_INT(n, 2);
    CHECK_EQ_INT(f[0].kind, HOSTCHECK_REGION_BAD);
    CHECK_EQ_INT(f[0].region_errno, ELOOP);
    CHECK_EQ_INT(f[1].kind, HOSTCHECK_UNDER_REPORT); /* its process has no slot it can show */
    CHECK_EQ_INT(f[1].slot, -1);
    CHECK(!u[0].region_ok);
    CHECK(access(victim, F_OK) < 0 && errno == ENOENT); /* never created through the link */
    CHECK(alive(a.pid));                                /* within its quota */
    unlink(usage);
    int fd = open(usage, O_WRONLY | O_CREAT, 0666);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, 100) == 0);
    close(fd);
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 8, &n), 0);
    REQUIRE_EQ_INT(n, 2);
    CHECK_EQ_INT(f[0].kind, HOSTCHECK_REGION_BAD);
    CHECK_EQ_INT(f[0].region_errno, EPROTO);
    struct stat st;
    REQUIRE(stat(usage, &st) == 0);
    CHECK_EQ_INT(st.st_size, 100); /* read, never grown or written */
    stop(&a);
    /* no process on the GPU: a missing or odd region is nobody's business yet */
    REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 8, &n), 0);
    CHECK_EQ_INT(n, 0);
}

/* Issue 22, F13: a scripted NVML whose one process alternates between 2x its 30 % share and
 * just under it, pass after pass. A count of passes over the share in a row, reset by any
 * pass within it, never reached 3; the window's mean (about 44 %) is over 30 + 10. */
static unsigned script_util[64];
static size_t script_len, script_at;
static unsigned long long script_ts;

static nvmlReturn_t fake_handle(const char *u, nvmlDevice_t *d)
{
    (void)u;
    *d = (nvmlDevice_t)(uintptr_t)1;
    return NVML_SUCCESS;
}

static nvmlReturn_t fake_procs(nvmlDevice_t d, unsigned *count, nvmlProcessInfo_v1_t *infos)
{
    (void)d, (void)infos;
    *count = 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t fake_util(nvmlDevice_t d, nvmlProcessUtilizationSample_t *s, unsigned *count,
                              unsigned long long last)
{
    (void)d, (void)last;
    if (script_at >= script_len)
        return NVML_ERROR_NOT_FOUND;
    if (*count < 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memset(s, 0, sizeof(*s));
    s[0].pid = 777777;
    s[0].timeStamp = ++script_ts;
    s[0].smUtil = script_util[script_at++];
    *count = 1;
    return NVML_SUCCESS;
}

TEST(bursty_overuse_is_seen_by_the_window)
{
    setup();
    char d[400], f2[420];
    snprintf(d, sizeof(d), "%s/777777", proc_root);
    mkdir(d, 0755);
    snprintf(f2, sizeof(f2), "%s/cgroup", d);
    FILE *c = fopen(f2, "w");
    REQUIRE(c != NULL);
    fprintf(c,
            "0::/kubepods.slice/kubepods-pod0b6c4a3e_1111_4c2a_9d5e_000000000001.slice/"
            "cri-containerd-%064d.scope\n",
            9);
    fclose(c);
    struct gpu_nvml fake = {0};
    fake.nvmlDeviceGetHandleByUUID = fake_handle;
    fake.nvmlDeviceGetComputeRunningProcesses = fake_procs;
    fake.nvmlDeviceGetProcessUtilization = fake_util;
    struct hostcheck_target t[] = {target(POD_A, "main", 64 * MiB, NULL)};
    struct hostcheck_state *s = NULL;
    REQUIRE_EQ_INT(hostcheck_state_new(&s), 0);
    struct hostcheck_options o = {.proc_root = proc_root, .state = s};
    /* 60, 29, 60, 29, ...: never three passes over in a row */
    script_len = 12;
    script_at = 0;
    for (size_t i = 0; i < script_len; i++)
        script_util[i] = i % 2 ? 29 : 60;
    struct hostcheck_finding f[4];
    size_t found = 0, first = 0;
    for (size_t pass = 0; pass < script_len; pass++) {
        size_t k = 0;
        hostcheck_run(&fake, t, 1, &o, f, 4, &k);
        if (k && !found++) {
            first = pass;
            CHECK_EQ_INT(f[0].kind, HOSTCHECK_OVER_SHARE);
            CHECK_EQ_INT(f[0].pid, 777777);
            CHECK(f[0].used > 40 && f[0].used < 60);
            CHECK_EQ_U64(f[0].limit, 30);
        }
    }
    CHECK_GE_INT(found, 1);
    CHECK_LE_INT(first, HOSTCHECK_COMPUTE_WINDOW);
    /* within the share on average (35, 20, ...: mean 27.5): no finding */
    s = hostcheck_state_free(s);
    REQUIRE_EQ_INT(hostcheck_state_new(&s), 0);
    o.state = s;
    script_at = 0;
    for (size_t i = 0; i < script_len; i++)
        script_util[i] = i % 2 ? 20 : 35;
    found = 0;
    for (size_t pass = 0; pass < script_len; pass++) {
        size_t k = 0;
        hostcheck_run(&fake, t, 1, &o, f, 4, &k);
        found += k;
    }
    CHECK_EQ_INT(found, 0);
    hostcheck_state_free(s);
    remove(f2);
    rmdir(d);
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
static size_t run_until_finding(struct hostcheck_target *t, size_t n, struct hostcheck_options *o,
                                struct hostcheck_finding *f)
{
    for (int i = 0; i < 2000; i++) {
        size_t k = 0;
        REQUIRE_EQ_INT(hostcheck_run(nvml, t, n, o, f, 4, &k), 0);
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
    struct hostcheck_target t[] = {target(POD_A, "main", 512 * MiB, NULL)};
    /* action none first: reported, nothing frozen */
    struct hostcheck_state *s = NULL;
    REQUIRE_EQ_INT(hostcheck_state_new(&s), 0);
    struct hostcheck_options o = {.proc_root = proc_root,
                                  .state = s,
                                  .compute_action = HOSTCHECK_COMPUTE_NONE,
                                  .cgroup_root = cgroup_root,
                                  .freeze_ms = 1000,
                                  .now_ms = 5000};
    struct hostcheck_finding f[4];
    size_t n = run_until_finding(t, 1, &o, f);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].kind, HOSTCHECK_OVER_SHARE);
    CHECK_EQ_INT(f[0].pid, busy);
    /* the mean of its passes so far (the first ones see it start): over 30 + 10 */
    CHECK(f[0].used > 30 + HOSTCHECK_COMPUTE_TOLERANCE && f[0].used <= 100);
    CHECK_EQ_U64(f[0].limit, 30);
    CHECK(!f[0].frozen);
    CHECK_EQ_INT(freeze_state(freeze_file), '0');
    s = hostcheck_state_free(s);
    /* freeze: the container's cgroup is duty-cycled, frozen 1 - 30/util of each
     * freeze_ms (the GPU is all its: util 90..100, so 667..700 per mille) */
    REQUIRE_EQ_INT(hostcheck_state_new(&s), 0);
    o.state = s;
    o.compute_action = HOSTCHECK_COMPUTE_FREEZE;
    n = run_until_finding(t, 1, &o, f);
    REQUIRE_EQ_INT(n, 1);
    CHECK(f[0].frozen);
    CHECK_EQ_INT(f[0].freeze_errno, 0);
    unsigned duty = f[0].duty_pm;
    CHECK(duty >= 660 && duty <= 700);
    CHECK_EQ_INT(freeze_state(freeze_file), '1');
    CHECK_EQ_U64(hostcheck_cycling(s), 1);
    CHECK_EQ_U64(hostcheck_cycle(s, 5000), 5000 + duty);
    CHECK_EQ_INT(freeze_state(freeze_file), '1');
    CHECK_EQ_U64(hostcheck_cycle(s, 5000 + duty), 6000); /* thawed for the rest */
    CHECK_EQ_INT(freeze_state(freeze_file), '0');
    CHECK_EQ_U64(hostcheck_cycle(s, 6000), 6000 + duty); /* and frozen again */
    CHECK_EQ_INT(freeze_state(freeze_file), '1');
    /* the next passes: still over (this freezer is a file: the process never stops, so
     * its utilization when free is estimated at the most, 100 %): the cycle goes on at
     * 70 % */
    for (int i = 0; i < 5; i++) {
        size_t k = 0;
        REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 4, &k), 0);
        usleep(20000);
    }
    CHECK_EQ_U64(hostcheck_cycling(s), 1);
    /* a share that covers it: the next pass with samples ends the cycle, thawed */
    t[0].cores = 100;
    for (int i = 0; i < 500 && hostcheck_cycling(s); i++) {
        size_t k = 0;
        REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 4, &k), 0);
        usleep(10000);
    }
    CHECK_EQ_U64(hostcheck_cycling(s), 0);
    CHECK_EQ_INT(freeze_state(freeze_file), '0');
    CHECK_EQ_U64(hostcheck_cycle(s, 7000), UINT64_MAX);
    t[0].cores = 30;
    s = hostcheck_state_free(s);
    /* freeing the state thaws what is still frozen */
    REQUIRE_EQ_INT(hostcheck_state_new(&s), 0);
    o.state = s;
    REQUIRE_EQ_INT(run_until_finding(t, 1, &o, f), 1);
    CHECK_EQ_INT(freeze_state(freeze_file), '1');
    s = hostcheck_state_free(s);
    CHECK_EQ_INT(freeze_state(freeze_file), '0');
    /* a share that covers it: a pass with samples finds nothing */
    REQUIRE_EQ_INT(hostcheck_state_new(&s), 0);
    o.state = s;
    t[0].cores = 100;
    size_t k = 9;
    for (int i = 0; i < 20; i++) {
        REQUIRE_EQ_INT(hostcheck_run(nvml, t, 1, &o, f, 4, &k), 0);
        CHECK_EQ_INT(k, 0);
        usleep(10000);
    }
    s = hostcheck_state_free(s);
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
    struct hostcheck_target t[] = {target(POD_A, "main", 512 * MiB, NULL),
                                   target(POD_A, "side", 512 * MiB, NULL)};
    t[1].cores = 70;
    struct hostcheck_state *s = NULL;
    REQUIRE_EQ_INT(hostcheck_state_new(&s), 0);
    struct hostcheck_options o = {.proc_root = proc_root, .state = s, .freeze_ms = 1000};
    struct hostcheck_finding f[4];
    size_t k = 9;
    for (int i = 0; i < 20; i++) {
        REQUIRE_EQ_INT(hostcheck_run(nvml, t, 2, &o, f, 4, &k), 0);
        CHECK_EQ_INT(k, 0);
        usleep(10000);
    }
    t[0].container_id = main_id;
    t[1].container_id = side_id;
    size_t n = run_until_finding(t, 2, &o, f);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(f[0].kind, HOSTCHECK_OVER_SHARE);
    CHECK_EQ_INT(f[0].target, 0);
    CHECK_EQ_U64(f[0].limit, 30);
    CHECK(f[0].used > 30 + HOSTCHECK_COMPUTE_TOLERANCE && f[0].used <= 100);
    CHECK_EQ_INT(f[0].pid, busy);
    hostcheck_state_free(s);
    kill(busy, SIGKILL);
    int st;
    REQUIRE(waitpid(busy, &st, 0) == busy);
}

TEST(action_names)
{
    enum hostcheck_action a = HOSTCHECK_ACTION_NONE;
    CHECK_EQ_INT(hostcheck_action_parse("kill", &a), 0);
    CHECK_EQ_INT(a, HOSTCHECK_ACTION_KILL);
    CHECK_EQ_INT(hostcheck_action_parse("freeze", &a), -EINVAL);
    CHECK_EQ_INT(a, HOSTCHECK_ACTION_KILL);
    CHECK_EQ_STR(hostcheck_action_name(HOSTCHECK_ACTION_NONE), "none");
}

int main(int argc, char **argv)
{
    int rc = tap_main(argc, argv);
    nvml = gpu_nvml_free(nvml);
    return rc;
}
