/* test-mps-supervisor — the MPS daemon supervisor (src/agent/mps-supervisor.c) against the
 * emulated nvidia-cuda-mps-control (src/emu/mps-control.c): start with the defaults visible
 * through the front end, kill -9 and SIGSTOP of the daemon each seen as unhealthy and
 * followed by a restart to healthy, and shutdown leaving no daemon. Waits are bounded loop
 * runs until a condition holds, never sleeps. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evloop.h"
#include "mps-supervisor.h"
#include "tap.h"
#include "util.h"

struct events {
    int healthy, unhealthy;
    bool last;
};

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

static void setup(struct fixture *fx, const char *dir)
{
    unsetenv("ACCEL_EMU_STATE"); /* the daemon keeps its settings in memory */
    REQUIRE_EQ_INT(ev_loop_new(&fx->loop), 0);
    struct mps_sup_set_cfg sets[] = {
        {.name = "gpu0",
         .visible_devices = "GPU-0",
         .device_count = 1,
         .thread_pct = 25,
         .pinned_mem_bytes = 2048ull << 20},
        {.name = "gpu1", .visible_devices = "GPU-1", .device_count = 1, .thread_pct = 50},
    };
    struct mps_sup_opts o = {.control_path = control,
                             .run_dir = dir,
                             .probe_interval_ns = 100000000,
                             .reply_timeout_ns = 3000000000ull,
                             .backoff_min_ns = 50000000,
                             .backoff_max_ns = 500000000,
                             .stop_timeout_ns = 3000000000ull,
                             .health_cb = on_health,
                             .user_data = &fx->ev};
    REQUIRE_EQ_INT(mps_sup_new(fx->loop, &o, sets, 2, &fx->sup), 0);
    REQUIRE_EQ_INT(mps_sup_start(fx->sup), 0);
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

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    return tap_main(argc, argv);
}
