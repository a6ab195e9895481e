/* test-nvml-procs — memory and the process list across processes, through the emulated
 * libcuda.so.1: two processes allocate at once, and NVML in a third (this one) shows both,
 * each with its allocation plus its context overhead, and the GPU's used memory is their
 * sum; a clean exit and a kill -9 each give the memory back; a process in a pid namespace of
 * its own (a container) is reported by the pid this reader knows it by, and reclaimed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_api.h"
#include "nvml_api.h"
#include "tap.h"

#define MiB (1024ull * 1024ull)
#define CTX_OVERHEAD (8 * MiB)

static char emu_bin[4096];

static bool new_machine(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof(path), "%s/%s", tap_tmpdir(), name);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl(emu_bin, emu_bin, "--state", path, "init", "--gpus", "2", (char *)NULL);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return false;
    setenv("ACCEL_EMU_STATE", path, 1);
    return true;
}

struct child {
    pid_t pid;
    int to;   /* closing it lets the child exit */
    int from; /* "ok" once it holds its memory */
};

#define LOAD(h, name) __typeof__(name) *p_##name = (__typeof__(name) *)dlsym(h, #name)

/* The child: a CUDA process on GPU `gpu` holding `mib` MiB until its stdin pipe closes. */
static _Noreturn void child_main(int gpu, unsigned mib, int in, int out)
{
    /* drop the pipes of earlier children, or they would never see their stdin close */
    for (int fd = 3; fd < 1024; fd++)
        if (fd != in && fd != out)
            close(fd);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        _exit(10);
    LOAD(h, cuInit);
    LOAD(h, cuDeviceGet);
    LOAD(h, cuCtxCreate_v2);
    LOAD(h, cuMemAlloc_v2);
    if (!p_cuInit || !p_cuDeviceGet || !p_cuCtxCreate_v2 || !p_cuMemAlloc_v2)
        _exit(11);
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr ptr;
    if (p_cuInit(0) != CUDA_SUCCESS || p_cuDeviceGet(&dev, gpu) != CUDA_SUCCESS ||
        p_cuCtxCreate_v2(&ctx, 0, dev) != CUDA_SUCCESS ||
        p_cuMemAlloc_v2(&ptr, (size_t)mib * MiB) != CUDA_SUCCESS)
        _exit(12);
    if (write(out, "ok", 2) != 2)
        _exit(13);
    char c;
    while (read(in, &c, 1) > 0)
        ;
    _exit(0); /* the emulated driver gives the memory back at exit */
}

static bool start_child(struct child *c, int gpu, unsigned mib)
{
    int in[2], out[2];
    if (pipe(in) < 0 || pipe(out) < 0)
        return false;
    c->pid = fork();
    if (c->pid < 0)
        return false;
    if (c->pid == 0) {
        close(in[1]);
        close(out[0]);
        child_main(gpu, mib, in[0], out[1]);
    }
    close(in[0]);
    close(out[1]);
    c->to = in[1];
    c->from = out[0];
    char buf[2];
    struct pollfd p = {.fd = c->from, .events = POLLIN};
    return poll(&p, 1, 20000) == 1 && read(c->from, buf, 2) == 2 && memcmp(buf, "ok", 2) == 0;
}

static int stop_child(struct child *c, bool kill9)
{
    if (kill9)
        kill(c->pid, SIGKILL);
    close(c->to);
    close(c->from);
    int st;
    waitpid(c->pid, &st, 0);
    return st;
}

static nvmlDevice_t dev(unsigned i)
{
    nvmlDevice_t d = NULL;
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex_v2(i, &d), NVML_SUCCESS);
    return d;
}

/* What the processes hold: NVML's used less the driver's reserve, which it includes (v2 names
 * it; see docs/emulator-cuda.md, "Reserved memory"). */
static uint64_t used_on(unsigned gpu)
{
    nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
    if (nvmlDeviceGetMemoryInfo_v2(dev(gpu), &m) != NVML_SUCCESS)
        return UINT64_MAX;
    return m.used - m.reserved;
}

static unsigned nprocs_on(unsigned gpu)
{
    unsigned n = 0;
    nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3(dev(gpu), &n, NULL);
    return r == NVML_SUCCESS ? 0 : r == NVML_ERROR_INSUFFICIENT_SIZE ? n : 999;
}

TEST(two_processes_allocating_show_in_a_third)
{
    REQUIRE(new_machine("two"));
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    struct child a, b;
    REQUIRE(start_child(&a, 1, 100));
    REQUIRE(start_child(&b, 1, 250));

    nvmlProcessInfo_t infos[8];
    unsigned n = 8;
    REQUIRE_EQ_INT(nvmlDeviceGetComputeRunningProcesses_v3(dev(1), &n, infos), NVML_SUCCESS);
    REQUIRE_EQ_INT(n, 2);
    uint64_t sum = 0;
    for (unsigned i = 0; i < n; i++) {
        if ((pid_t)infos[i].pid == a.pid)
            CHECK_EQ_U64(infos[i].usedGpuMemory, 100 * MiB + CTX_OVERHEAD);
        else if ((pid_t)infos[i].pid == b.pid)
            CHECK_EQ_U64(infos[i].usedGpuMemory, 250 * MiB + CTX_OVERHEAD);
        else
            tap_fail(__FILE__, __LINE__, "unexpected pid %u", infos[i].pid);
        sum += infos[i].usedGpuMemory;
    }
    CHECK_EQ_U64(used_on(1), sum);
    CHECK_EQ_U64(used_on(1), 350 * MiB + 2 * CTX_OVERHEAD);
    CHECK_EQ_U64(used_on(0), 0);
    CHECK_EQ_INT(nprocs_on(0), 0);

    /* a clean exit gives its share back; wait for it with a bound */
    int st = stop_child(&a, false);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(TAP_WAIT_UNTIL(used_on(1) == 250 * MiB + CTX_OVERHEAD, 10000));
    CHECK_EQ_INT(nprocs_on(1), 1);

    /* kill -9: nothing runs in the child, yet the memory comes back */
    stop_child(&b, true);
    CHECK(TAP_WAIT_UNTIL(used_on(1) == 0, 10000));
    CHECK_EQ_INT(nprocs_on(1), 0);
    nvmlShutdown();
}

/* A process in a pid namespace of its own (as in a container): it records itself as pid 1 of
 * that namespace, NVML here reports it by the pid this process knows it by (as NVIDIA's driver
 * reports host pids), and once it is killed its memory comes back (this process, in the initial
 * pid namespace, sees that it is gone). Needs CAP_SYS_ADMIN for the namespace. */
TEST(a_process_in_another_pid_namespace_is_reported_by_our_pid)
{
    char link[64];
    ssize_t l = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
    if (l <= 0 || (link[l] = 0, strcmp(link, "pid:[4026531836]") != 0) || geteuid() != 0) {
        tap_skip_case("needs root in the initial pid namespace");
        return;
    }
    REQUIRE(new_machine("pidns"));
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    int in[2], out[2];
    REQUIRE(pipe(in) == 0 && pipe(out) == 0);
    pid_t mid = fork();
    REQUIRE(mid >= 0);
    if (mid == 0) {
        /* the namespace's first child is its pid 1; this one reports its pid to the parent */
        if (unshare(CLONE_NEWPID) < 0)
            _exit(20);
        pid_t c = fork();
        if (c == 0) {
            close(in[1]);
            close(out[0]);
            child_main(0, 64, in[0], out[1]);
        }
        char msg[32];
        int len = snprintf(msg, sizeof(msg), "%d", (int)c);
        _exit(c > 0 && write(out[1], msg, (size_t)len) == len ? 0 : 21);
    }
    close(in[0]);
    close(out[1]);
    int st;
    REQUIRE(waitpid(mid, &st, 0) == mid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char buf[40] = {0};
    struct pollfd p = {.fd = out[0], .events = POLLIN};
    size_t got = 0;
    while (got < sizeof(buf) - 1 && poll(&p, 1, 20000) == 1) {
        ssize_t r = read(out[0], buf + got, sizeof(buf) - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        if (strstr(buf, "ok"))
            break;
    }
    pid_t host = (pid_t)strtol(buf, NULL, 10);
    REQUIRE(host > 1 && strstr(buf, "ok") != NULL);
    nvmlProcessInfo_t infos[8];
    unsigned n = 8;
    REQUIRE_EQ_INT(nvmlDeviceGetComputeRunningProcesses_v3(dev(0), &n, infos), NVML_SUCCESS);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT((int)infos[0].pid, (int)host); /* not 1, its pid in its own namespace */
    CHECK_EQ_U64(infos[0].usedGpuMemory, 64 * MiB + CTX_OVERHEAD);
    /* a reader without privileges (the exporter: hostPID, uid 65532) too: it cannot read
     * the process's namespace link, but its innermost pid and start time are readable by all */
    pid_t r = fork();
    if (r == 0) {
        unsigned m = 8;
        nvmlProcessInfo_t seen[8];
        _exit(setgid(65534) == 0 && setuid(65534) == 0 &&
                      nvmlDeviceGetComputeRunningProcesses_v3(dev(0), &m, seen) == NVML_SUCCESS &&
                      m == 1 && (pid_t)seen[0].pid == host
                  ? 0
                  : 1);
    }
    int rst = -1;
    CHECK(r > 0 && waitpid(r, &rst, 0) == r && WIFEXITED(rst) && WEXITSTATUS(rst) == 0);
    /* killed (its namespace goes with it): nobody there is left to tell, this reader can */
    kill(host, SIGKILL);
    close(in[1]);
    close(out[0]);
    CHECK(TAP_WAIT_UNTIL(used_on(0) == 0, 10000));
    CHECK_EQ_INT(nprocs_on(0), 0);
    nvmlShutdown();
}

int main(int argc, char **argv)
{
    const char *root = getenv("ACCEL_BUILD_ROOT");
    snprintf(emu_bin, sizeof(emu_bin), "%s/src/emu/accel-emu", root ? root : ".");
    if (access(emu_bin, X_OK) != 0)
        tap_skip_all("accel-emu is not built");
    char ov[32];
    snprintf(ov, sizeof(ov), "%llu", (unsigned long long)CTX_OVERHEAD);
    setenv("ACCEL_EMU_CTX_OVERHEAD", ov, 1);
    return tap_main(argc, argv);
}
