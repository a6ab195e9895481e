/* test-mps-supervisor — the MPS daemon supervisor (src/agent/mps-supervisor.c) against the
 * emulated nvidia-cuda-mps-control (src/emu/mps-control.c): start with the defaults visible
 * through the front end, kill -9 and SIGSTOP of the daemon each seen as unhealthy and
 * followed by a restart to healthy, and shutdown leaving no daemon; and issue 22's attacks
 * through the pipe directory a container has mounted: a pid file rewritten to another
 * process's pid (F9), a server's caps and the daemon's defaults lifted with the control
 * commands (F6), and each set's own /dev/shm (F7). Waits are bounded loop runs until a
 * condition holds, never sleeps. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "evloop.h"
#include "mps-supervisor.h"
#include "tap.h"
#include "util.h"

struct events {
    int healthy, unhealthy;
    bool last;
    int caps; /* caps restored */
};

static void on_caps(struct mps_sup *sup, size_t set, pid_t server, const char *what, void *ud)
{
    (void)sup;
    struct events *ev = ud;
    ev->caps++;
    tap_diag("set %zu server %d: %s", set, (int)server, what);
}

static void on_health(struct mps_sup *sup, size_t set, bool healthy, const char *why, void *ud)
{
    (void)sup, (void)set;
    struct events *ev = ud;
    if (healthy)
        ev->healthy++;
    else
        ev->unhealthy++;
    ev->last = healthy;
    tap_diag("set %zu %s: %s", set, healthy ? "healthy" : "unhealthy", why);
}

static char control[4096];

static bool have_control(void)
{
    snprintf(control, sizeof(control), "%s/src/emu/nvidia-cuda-mps-control",
             getenv("ACCEL_BUILD_ROOT") ? getenv("ACCEL_BUILD_ROOT") : "build");
    return access(control, X_OK) == 0;
}

/* Runs the loop until *flag becomes want or 30 s pass (a bound, not a timing check). */
static bool run_until(struct ev_loop *loop, const struct events *ev, int healthy_at_least,
                      int unhealthy_at_least)
{
    uint64_t end = mono_ns() + 30000000000ull;
    while (mono_ns() < end) {
        if (ev->healthy >= healthy_at_least && ev->unhealthy >= unhealthy_at_least)
            return true;
        ev_loop_run_once(loop, 100);
    }
    return false;
}

/* A process is gone when /proc has no entry for it or it is a zombie nobody reaped. */
static bool gone(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] == 'Z';
}

/* The front end's reply to one command, sent to the daemon on pipe_dir. */
static void ask(const char *pipe_dir, const char *cmd, char *out, size_t len)
{
    char sh[8192];
    snprintf(sh, sizeof(sh), "echo '%s' | CUDA_MPS_PIPE_DIRECTORY='%s' '%s'", cmd, pipe_dir,
             control);
    FILE *p = popen(sh, "r");
    size_t n = p ? fread(out, 1, len - 1, p) : 0;
    out[n] = '\0';
    if (p)
        pclose(p);
    while (n > 0 && out[n - 1] == '\n')
        out[--n] = '\0';
}

struct fixture {
    struct ev_loop *loop;
    struct mps_sup *sup;
    struct events ev;
};

static void setup_sets(struct fixture *fx, const char *dir, const struct mps_sup_set_cfg *sets,
                       size_t n, uint64_t probe_interval_ns)
{
    unsetenv("ACCEL_EMU_STATE"); /* the daemon keeps its settings in memory */
    REQUIRE_EQ_INT(ev_loop_new(&fx->loop), 0);
    struct mps_sup_opts o = {.control_path = control,
                             .run_dir = dir,
                             .probe_interval_ns = probe_interval_ns,
                             .reply_timeout_ns = 3000000000ull,
                             .backoff_min_ns = 50000000,
                             .backoff_max_ns = 500000000,
                             .stop_timeout_ns = 3000000000ull,
                             .health_cb = on_health,
                             .caps_cb = on_caps,
                             .user_data = &fx->ev};
    REQUIRE_EQ_INT(mps_sup_new(fx->loop, &o, sets, n, &fx->sup), 0);
    REQUIRE_EQ_INT(mps_sup_start(fx->sup), 0);
}

static void setup_every(struct fixture *fx, const char *dir, uint64_t probe_interval_ns,
                        uint64_t pinned)
{
    struct mps_sup_set_cfg sets[] = {
        {.name = "gpu0",
         .visible_devices = "GPU-0",
         .device_count = 1,
         .thread_pct = 25,
         .pinned_mem_bytes = pinned},
        {.name = "gpu1", .visible_devices = "GPU-1", .device_count = 1, .thread_pct = 50},
    };
    setup_sets(fx, dir, sets, 2, probe_interval_ns);
}

static void setup(struct fixture *fx, const char *dir)
{
    setup_every(fx, dir, 100000000, 2048ull << 20);
}

static void teardown(struct fixture *fx)
{
    pid_t p0 = mps_sup_daemon_pid(fx->sup, 0), p1 = mps_sup_daemon_pid(fx->sup, 1);
    fx->sup = mps_sup_free(fx->sup);
    fx->loop = ev_loop_free(fx->loop);
    CHECK(p0 == 0 || gone(p0));
    CHECK(p1 == 0 || gone(p1));
}

TEST(starts_with_defaults_and_stops)
{
    if (!have_control())
        tap_skip_case("no emulated nvidia-cuda-mps-control built");
    struct fixture fx = {0};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/start", tap_tmpdir());
    setup(&fx, dir);
    /* both sets healthy: two healthy reports, none unhealthy */
    REQUIRE(run_until(fx.loop, &fx.ev, 2, 0));
    CHECK_EQ_INT(fx.ev.unhealthy, 0);
    CHECK(mps_sup_healthy(fx.sup, 0) && mps_sup_healthy(fx.sup, 1));
    pid_t p0 = mps_sup_daemon_pid(fx.sup, 0), p1 = mps_sup_daemon_pid(fx.sup, 1);
    CHECK(p0 > 0 && p1 > 0 && p0 != p1);
    char out[256];
    ask(mps_sup_pipe_dir(fx.sup, 0), "get_default_active_thread_percentage", out, sizeof(out));
    CHECK_EQ_STR(out, "25.0");
    ask(mps_sup_pipe_dir(fx.sup, 1), "get_default_active_thread_percentage", out, sizeof(out));
    CHECK_EQ_STR(out, "50.0");
    ask(mps_sup_pipe_dir(fx.sup, 0), "get_default_device_pinned_mem_limit 0", out, sizeof(out));
    CHECK_EQ_STR(out, "2G");
    /* the directories are the set's own, under the run dir */
    char want[4200];
    snprintf(want, sizeof(want), "%s/mps-gpu1/pipe", dir);
    CHECK_EQ_STR(mps_sup_pipe_dir(fx.sup, 1), want);
    /* a few probe rounds change nothing */
    uint64_t end = mono_ns() + 500000000ull;
    while (mono_ns() < end)
        ev_loop_run_once(fx.loop, 50);
    CHECK_EQ_INT(fx.ev.unhealthy, 0);
    CHECK_EQ_INT(mps_sup_daemon_pid(fx.sup, 0), p0);
    mps_sup_stop(fx.sup);
    CHECK(gone(p0) && gone(p1));
    CHECK_EQ_INT(mps_sup_daemon_pid(fx.sup, 0), 0);
    teardown(&fx);
}

/* A quarter of an H100 (NVML's total, 85520809984 bytes, is not whole MiB): the daemon takes
 * its limit in whole MiB, so that is the set's limit; the probes find it as set, nothing is
 * "restored" and the daemon is not restarted (the test cluster's MPS agent restored every
 * set's defaults every probe, and restarted the daemons, while the cap was in bytes). */
TEST(a_limit_of_no_whole_mib_is_kept_as_the_daemon_reads_it)
{
    if (!have_control())
        tap_skip_case("no emulated nvidia-cuda-mps-control built");
    struct fixture fx = {0};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/mib", tap_tmpdir());
    struct mps_sup_set_cfg sets[] = {{.name = "gpu0",
                                      .visible_devices = "GPU-0",
                                      .device_count = 1,
                                      .thread_pct = 25,
                                      .pinned_mem_bytes = 85520809984ull / 4}};
    setup_sets(&fx, dir, sets, 1, 100000000);
    REQUIRE(run_until(fx.loop, &fx.ev, 1, 0));
    pid_t p0 = mps_sup_daemon_pid(fx.sup, 0);
    uint64_t end = mono_ns() + 1000000000ull; /* about 10 probes */
    while (mono_ns() < end)
        ev_loop_run_once(fx.loop, 50);
    CHECK_EQ_INT(mps_sup_caps_restored(fx.sup, 0), 0);
    CHECK_EQ_INT(mps_sup_daemon_pid(fx.sup, 0), p0);
    CHECK_EQ_INT(fx.ev.unhealthy, 0);
    char out[256];
    ask(mps_sup_pipe_dir(fx.sup, 0), "get_default_device_pinned_mem_limit 0", out, sizeof(out));
    CHECK_EQ_STR(out, "20389M");
    teardown(&fx);
}

static void check_restart_after(int sig)
{
    if (!have_control())
        tap_skip_case("no emulated nvidia-cuda-mps-control built");
    struct fixture fx = {0};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/sig%d", tap_tmpdir(), sig);
    setup(&fx, dir);
    REQUIRE(run_until(fx.loop, &fx.ev, 2, 0));
    pid_t old = mps_sup_daemon_pid(fx.sup, 0), other = mps_sup_daemon_pid(fx.sup, 1);
    REQUIRE(old > 0);
    REQUIRE_EQ_INT(kill(old, sig), 0);
    REQUIRE(run_until(fx.loop, &fx.ev, 2, 1));
    CHECK(!mps_sup_healthy(fx.sup, 0));
    CHECK(mps_sup_healthy(fx.sup, 1)); /* the other set is untouched */
    REQUIRE(run_until(fx.loop, &fx.ev, 3, 1));
    CHECK(mps_sup_healthy(fx.sup, 0));
    CHECK_GE_INT(mps_sup_restarts(fx.sup, 0), 1);
    pid_t now = mps_sup_daemon_pid(fx.sup, 0);
    CHECK(now > 0 && now != old);
    CHECK(gone(old)); /* a stopped daemon was killed, not left behind */
    CHECK_EQ_INT(mps_sup_daemon_pid(fx.sup, 1), other);
    char out[256];
    ask(mps_sup_pipe_dir(fx.sup, 0), "get_default_active_thread_percentage", out, sizeof(out));
    CHECK_EQ_STR(out, "25.0"); /* the defaults are set again on the new daemon */
    teardown(&fx);
}

TEST(kill_9_is_unhealthy_then_restarted)
{
    check_restart_after(SIGKILL);
}

TEST(sigstop_counts_as_dead_and_is_restarted)
{
    check_restart_after(SIGSTOP);
}

TEST(missing_binary_is_unhealthy_and_bad_sets_refused)
{
    struct ev_loop *loop;
    REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
    struct events ev = {0};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/missing", tap_tmpdir());
    struct mps_sup_set_cfg set = {
        .name = "g", .visible_devices = "GPU-0", .device_count = 1, .thread_pct = 10};
    struct mps_sup_opts o = {.control_path = "/nonexistent/nvidia-cuda-mps-control",
                             .run_dir = dir,
                             .backoff_min_ns = 1000000000ull,
                             .health_cb = on_health,
                             .user_data = &ev};
    struct mps_sup *sup = NULL;
    struct mps_sup_set_cfg bad = set;
    bad.name = "../x";
    CHECK_EQ_INT(mps_sup_new(loop, &o, &bad, 1, &sup), -EINVAL);
    bad = set;
    bad.thread_pct = 101;
    CHECK_EQ_INT(mps_sup_new(loop, &o, &bad, 1, &sup), -EINVAL);
    CHECK(sup == NULL);
    REQUIRE_EQ_INT(mps_sup_new(loop, &o, &set, 1, &sup), 0);
    REQUIRE_EQ_INT(mps_sup_start(sup), 0);
    CHECK(run_until(loop, &ev, 0, 1));
    CHECK_EQ_INT(ev.healthy, 0);
    mps_sup_free(sup);
    ev_loop_free(loop);
}

/* Runs the loop for ms milliseconds. */
static void spin(struct ev_loop *loop, int ms)
{
    uint64_t end = mono_ns() + (uint64_t)ms * 1000000ull;
    while (mono_ns() < end)
        ev_loop_run_once(loop, 20);
}

/* Issue 22, F9: a container rewrites nvidia-cuda-mps-control.pid in its pipe directory, in a
 * loop, to the pid of another process (here a child of the test standing in for the kubelet),
 * and the daemon fails: the supervisor restarts it, and kills it again at the next failure,
 * without ever signalling that process. Before, the pid read back from the pipe directory after
 * `-d` was the one later SIGKILLed. */
TEST(pid_file_in_the_pipe_dir_is_never_believed)
{
    if (!have_control())
        tap_skip_case("no emulated nvidia-cuda-mps-control built");
    struct fixture fx = {0};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/pidfile", tap_tmpdir());
    pid_t victim = fork();
    REQUIRE(victim >= 0);
    if (victim == 0) {
        pause();
        _exit(0);
    }
    setup(&fx, dir);
    REQUIRE(run_until(fx.loop, &fx.ev, 2, 0));
    char pidfile[4200];
    snprintf(pidfile, sizeof(pidfile), "%s/nvidia-cuda-mps-control.pid",
             mps_sup_pipe_dir(fx.sup, 0));
    pid_t tenant = fork();
    REQUIRE(tenant >= 0);
    if (tenant == 0) { /* the container: the victim's pid in the file, over and over */
        char text[32];
        int n = snprintf(text, sizeof(text), "%d\n", (int)victim);
        for (;;) {
            FILE *f = fopen(pidfile, "w");
            if (f) {
                fwrite(text, 1, (size_t)n, f);
                fclose(f);
            }
            usleep(200);
        }
    }
    for (int round = 0; round < 3; round++) {
        pid_t d = mps_sup_daemon_pid(fx.sup, 0);
        REQUIRE(d > 0 && d != victim);
        REQUIRE_EQ_INT(kill(d, SIGKILL), 0);
        REQUIRE(run_until(fx.loop, &fx.ev, 3 + round, 1 + round));
    }
    CHECK(mps_sup_healthy(fx.sup, 0));
    CHECK(mps_sup_daemon_pid(fx.sup, 0) != victim);
    kill(tenant, SIGKILL);
    waitpid(tenant, NULL, 0);
    /* a last failure while the file names the victim: the supervisor kills its own daemon */
    pid_t d = mps_sup_daemon_pid(fx.sup, 0);
    REQUIRE_EQ_INT(kill(d, SIGSTOP), 0);
    REQUIRE(run_until(fx.loop, &fx.ev, 3, 4));
    uint64_t end = mono_ns() + 5000000000ull;
    while (!gone(d) && mono_ns() < end)
        ev_loop_run_once(fx.loop, 20);
    CHECK(gone(d));                   /* the hung daemon itself was killed */
    CHECK_EQ_INT(kill(victim, 0), 0); /* alive */
    CHECK(!gone(victim));
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    teardown(&fx);
}

/* The server's active thread percentage as the front end prints it. */
static double server_pct(const char *pipe, pid_t server)
{
    char cmd[64], out[256];
    snprintf(cmd, sizeof(cmd), "get_active_thread_percentage %d", (int)server);
    ask(pipe, cmd, out, sizeof(out));
    return atof(out);
}

/* Issue 22, F6: a client runs set_active_thread_percentage <its server> 100 and
 * set_device_pinned_mem_limit <server> 0 81920M through the pipe directory: the next probe
 * (every second while servers run) puts both back, and the set stays healthy (no restart,
 * nothing tainted for the others). Raising the daemon's defaults is undone the same way.
 * Before, a server's own caps were never read, and changed defaults restarted the daemon. */
TEST(lifted_caps_are_put_back)
{
    if (!have_control())
        tap_skip_case("no emulated nvidia-cuda-mps-control built");
    struct fixture fx = {0};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/caps", tap_tmpdir());
    setup(&fx, dir);
    REQUIRE(run_until(fx.loop, &fx.ev, 2, 0));
    const char *pipe = mps_sup_pipe_dir(fx.sup, 0);
    char out[256];
    ask(pipe, "start_server -uid 1000", out, sizeof(out));
    ask(pipe, "get_server_list", out, sizeof(out));
    pid_t server = (pid_t)atoi(out);
    REQUIRE(server > 0);
    pid_t daemon = mps_sup_daemon_pid(fx.sup, 0);
    spin(fx.loop, 300); /* a probe sees the server: the set is busy, probed every second */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "set_active_thread_percentage %d 100", (int)server);
    ask(pipe, cmd, out, sizeof(out));
    snprintf(cmd, sizeof(cmd), "set_device_pinned_mem_limit %d 0 81920M", (int)server);
    ask(pipe, cmd, out, sizeof(out));
    CHECK(server_pct(pipe, server) > 99);
    uint64_t end = mono_ns() + 10000000000ull;
    while (mono_ns() < end && (server_pct(pipe, server) > 25.5 || fx.ev.caps < 1))
        ev_loop_run_once(fx.loop, 50);
    CHECK(server_pct(pipe, server) < 25.5);
    snprintf(cmd, sizeof(cmd), "get_device_pinned_mem_limit %d 0", (int)server);
    ask(pipe, cmd, out, sizeof(out));
    CHECK_EQ_STR(out, "2G");
    CHECK_GE_INT(fx.ev.caps, 1);
    /* the defaults */
    ask(pipe, "set_default_active_thread_percentage 100", out, sizeof(out));
    ask(pipe, "set_default_device_pinned_mem_limit 0 0", out, sizeof(out));
    int caps = fx.ev.caps;
    end = mono_ns() + 10000000000ull;
    for (;;) {
        ask(pipe, "get_default_active_thread_percentage", out, sizeof(out));
        if ((strcmp(out, "25.0") == 0 && fx.ev.caps > caps) || mono_ns() > end)
            break;
        ev_loop_run_once(fx.loop, 50);
    }
    CHECK_EQ_STR(out, "25.0");
    ask(pipe, "get_default_device_pinned_mem_limit 0", out, sizeof(out));
    CHECK_EQ_STR(out, "2G");
    CHECK_EQ_INT(fx.ev.unhealthy, 0); /* never unhealthy: nothing tainted for others */
    CHECK_EQ_INT(mps_sup_daemon_pid(fx.sup, 0), daemon);
    CHECK_GE_INT(mps_sup_caps_restored(fx.sup, 0), 2);
    teardown(&fx);
}

/* Issue 23: an idle daemon is probed once a minute (mpsProbeInterval), yet what its
 * control.log shows (a server started, a client's caps command) brings the probe forward: a
 * server started and lifted before any probe saw it is put back within seconds, not at the
 * next minute. Before, only the timer probed. */
TEST(the_control_log_brings_the_probe_forward)
{
    if (!have_control())
        tap_skip_case("no emulated nvidia-cuda-mps-control built");
    struct fixture fx = {0};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/stir", tap_tmpdir());
    setup_every(&fx, dir, 60000000000ull, 2048ull << 20);
    REQUIRE(run_until(fx.loop, &fx.ev, 2, 0));
    spin(fx.loop, 1500); /* the probe after the start's own commands */
    const char *pipe = mps_sup_pipe_dir(fx.sup, 0);
    char out[256], cmd[128];
    ask(pipe, "start_server -uid 1000", out, sizeof(out));
    ask(pipe, "get_server_list", out, sizeof(out));
    pid_t server = (pid_t)atoi(out);
    REQUIRE(server > 0);
    snprintf(cmd, sizeof(cmd), "set_active_thread_percentage %d 100", (int)server);
    ask(pipe, cmd, out, sizeof(out));
    CHECK(server_pct(pipe, server) > 99);
    uint64_t end = mono_ns() + 5000000000ull;
    while (mono_ns() < end && (server_pct(pipe, server) > 25.5 || fx.ev.caps < 1))
        ev_loop_run_once(fx.loop, 50);
    CHECK(server_pct(pipe, server) < 25.5);
    CHECK_GE_INT(fx.ev.caps, 1);
    CHECK_EQ_INT(fx.ev.unhealthy, 0);
    teardown(&fx);
}

/* Issue 22, F7: each set has its own /dev/shm: a tmpfs in its directory that is its daemon's
 * /dev/shm too (the daemon runs in a mount namespace of its own), never the host's. */
TEST(each_set_has_its_own_shm)
{
    if (!have_control())
        tap_skip_case("no emulated nvidia-cuda-mps-control built");
    if (geteuid() != 0)
        tap_skip_case("not root: no tmpfs of the set's own");
    struct fixture fx = {0};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/shm", tap_tmpdir());
    setup(&fx, dir);
    REQUIRE(run_until(fx.loop, &fx.ev, 2, 0));
    const char *a = mps_sup_shm_dir(fx.sup, 0), *b = mps_sup_shm_dir(fx.sup, 1);
    REQUIRE(a != NULL && b != NULL);
    struct stat sa, sb, host, seen;
    REQUIRE_EQ_INT(stat(a, &sa), 0);
    REQUIRE_EQ_INT(stat(b, &sb), 0);
    REQUIRE_EQ_INT(stat("/dev/shm", &host), 0);
    CHECK(sa.st_dev != sb.st_dev && sa.st_dev != host.st_dev);
    char root[64];
    snprintf(root, sizeof(root), "/proc/%d/root/dev/shm", (int)mps_sup_daemon_pid(fx.sup, 0));
    REQUIRE_EQ_INT(stat(root, &seen), 0);
    CHECK(seen.st_dev == sa.st_dev); /* the daemon's /dev/shm is the set's */
    teardown(&fx);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    tap_private_mounts(); /* the sets' shm tmpfs mounts go with this process */
    return tap_main(argc, argv);
}
