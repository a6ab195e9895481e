/* test-xid — NVML event delivery across processes: a process blocked in nvmlEventSetWait_v2
 * receives the XID that `accel-emu xid` injects from another process (and an ECC error, and
 * the XID 79 of `accel-emu lose`), every waiter gets it, and a wait with nothing posted times
 * out. Delivery latency is measured by bench/emu-xid-latency.c, not asserted here. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvml_api.h"
#include "tap.h"

static char emu_bin[4096];
static char state_path[4096];

static int run_emu(const char *a0, const char *a1, const char *a2)
{
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl(emu_bin, emu_bin, "--state", state_path, a0, a1, a2, (char *)NULL);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void new_machine(const char *name)
{
    snprintf(state_path, sizeof(state_path), "%s/%s", tap_tmpdir(), name);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl(emu_bin, emu_bin, "--state", state_path, "init", "--gpus", "2", (char *)NULL);
        _exit(127);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    setenv("ACCEL_EMU_STATE", state_path, 1);
}

/* What a waiter reports back through its pipe. */
struct report {
    int rc;
    unsigned index;
    unsigned long long type, data;
    int after; /* the return of nvmlDeviceGetName on the event's device afterwards */
};

/* Reads exactly len bytes from fd within timeout_ms (a failure bound, not a timing check). */
static bool read_within(int fd, void *buf, size_t len, int timeout_ms)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            return false;
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

/* A child that registers `types` on GPU `gpu`, says "ready", waits up to 20 s for one event
 * and reports it. Returns the child's pid; *ret_fd reads its messages. */
static pid_t start_waiter(unsigned gpu, unsigned long long types, int *ret_fd)
{
    int p[2];
    REQUIRE(pipe(p) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        struct report r = {.rc = -1};
        nvmlDevice_t d;
        nvmlEventSet_t set;
        nvmlEventData_t e;
        char ready = 'R', name[96];
        if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(gpu, &d) != 0 ||
            nvmlEventSetCreate(&set) != 0 || nvmlDeviceRegisterEvents(d, types, set) != 0)
            _exit(3);
        if (write(p[1], &ready, 1) != 1)
            _exit(4);
        r.rc = nvmlEventSetWait_v2(set, &e, 20000);
        if (r.rc == NVML_SUCCESS) {
            nvmlDeviceGetIndex(e.device, &r.index);
            r.type = e.eventType;
            r.data = e.eventData;
            r.after = nvmlDeviceGetName(e.device, name, sizeof(name));
        }
        if (write(p[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
            _exit(5);
        nvmlEventSetFree(set);
        nvmlShutdown();
        _exit(0);
    }
    close(p[1]);
    char ready = 0;
    if (!read_within(p[0], &ready, 1, 10000) || ready != 'R') {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(p[0]);
        tap_fail(__FILE__, __LINE__, "waiter did not get ready");
        tap_abort_case();
    }
    *ret_fd = p[0];
    return pid;
}

static void finish_waiter(pid_t pid, int fd, struct report *r)
{
    bool ok = read_within(fd, r, sizeof(*r), 20000);
    close(fd);
    if (!ok)
        kill(pid, SIGKILL);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(ok);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(xid_reaches_a_waiter_in_another_process)
{
    new_machine("one");
    int fd;
    pid_t w = start_waiter(1, nvmlEventTypeXidCriticalError, &fd);
    REQUIRE_EQ_INT(run_emu("xid", "1", "48"), 0);
    struct report r = {0};
    finish_waiter(w, fd, &r);
    CHECK_EQ_INT(r.rc, NVML_SUCCESS);
    CHECK_EQ_INT(r.index, 1);
    CHECK_EQ_U64(r.type, nvmlEventTypeXidCriticalError);
    CHECK_EQ_U64(r.data, 48);
    CHECK_EQ_INT(r.after, NVML_SUCCESS);
}

TEST(every_waiter_receives_the_event)
{
    new_machine("two");
    int fd1, fd2;
    pid_t w1 = start_waiter(0, nvmlEventTypeXidCriticalError, &fd1);
    pid_t w2 =
        start_waiter(0, nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError, &fd2);
    /* an event on the other GPU reaches neither */
    REQUIRE_EQ_INT(run_emu("xid", "1", "31"), 0);
    REQUIRE_EQ_INT(run_emu("xid", "GPU-nonexistent", "31"), 2);
    REQUIRE_EQ_INT(run_emu("xid", "0", "94"), 0);
    struct report r1 = {0}, r2 = {0};
    finish_waiter(w1, fd1, &r1);
    finish_waiter(w2, fd2, &r2);
    CHECK_EQ_INT(r1.rc, NVML_SUCCESS);
    CHECK_EQ_INT(r2.rc, NVML_SUCCESS);
    CHECK_EQ_U64(r1.data, 94);
    CHECK_EQ_U64(r2.data, 94);
    CHECK_EQ_INT(r1.index, 0);
    CHECK_EQ_INT(r2.index, 0);
}

TEST(ecc_error_reaches_a_waiter)
{
    new_machine("ecc");
    int fd;
    pid_t w = start_waiter(1, nvmlEventTypeDoubleBitEccError, &fd);
    REQUIRE_EQ_INT(run_emu("xid", "1", "13"), 0); /* not asked for: passed over */
    REQUIRE_EQ_INT(run_emu("ecc", "1", "double"), 0);
    struct report r = {0};
    finish_waiter(w, fd, &r);
    CHECK_EQ_INT(r.rc, NVML_SUCCESS);
    CHECK_EQ_U64(r.type, nvmlEventTypeDoubleBitEccError);
}

TEST(lost_gpu_wakes_the_waiter_with_xid_79)
{
    new_machine("lose");
    int fd;
    pid_t w = start_waiter(1, nvmlEventTypeXidCriticalError, &fd);
    REQUIRE_EQ_INT(run_emu("lose", "1", NULL), 0);
    struct report r = {0};
    finish_waiter(w, fd, &r);
    CHECK_EQ_INT(r.rc, NVML_SUCCESS);
    CHECK_EQ_U64(r.data, 79);
    CHECK_EQ_INT(r.after, NVML_ERROR_GPU_IS_LOST);
    /* losing it again posts nothing new; restore brings it back */
    REQUIRE_EQ_INT(run_emu("restore", "1", NULL), 0);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t d;
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex_v2(1, &d), NVML_SUCCESS);
    nvmlShutdown();
}

TEST(wait_without_events_times_out)
{
    new_machine("quiet");
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t d;
    nvmlEventSet_t set;
    nvmlEventData_t e;
    REQUIRE_EQ_INT(nvmlDeviceGetHandleByIndex_v2(0, &d), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlEventSetCreate(&set), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlEventSetWait_v2(set, &e, 20), NVML_ERROR_TIMEOUT);
    nvmlEventSetFree(set);
    nvmlShutdown();
}

int main(int argc, char **argv)
{
    const char *root = getenv("ACCEL_BUILD_ROOT");
    snprintf(emu_bin, sizeof(emu_bin), "%s/src/emu/accel-emu", root ? root : ".");
    if (access(emu_bin, X_OK) != 0)
        tap_skip_all("accel-emu is not built");
    return tap_main(argc, argv);
}
