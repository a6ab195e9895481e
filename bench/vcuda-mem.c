/* vcuda-mem.c — libvcuda's memory-path costs (docs/vcuda.md, "Benchmarks"):
 *   1. a hooked cuMemAlloc_v2 + cuMemFree_v2 pair vs the same pair straight
 *      into the driver: on the emulated driver and on a do-nothing stub driver
 *      (the stub shows libvcuda's own cost without the emulator's noise);
 *   1b. a cuLaunchKernel with managed memory live (stub driver only): all of it resident (the
 *       steady state: one relaxed load), and 100 untouched allocations (the lookup);
 *   2. process start under a quota: one process, and 300 started at once
 *      (wall time until all 300 have finished initializing libvcuda and the
 *      driver), with and without libvcuda.
 * Usage: vcuda-mem --build BUILD_DIR [--procs N]
 * Each measurement runs in a child process with its own environment (with or
 * without LD_PRELOAD=libvcuda.so); libc + libdl only. */
#include "cuda_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define FN(n) __typeof__(n) *n
static struct {
    FN(cuInit);
    FN(cuDeviceGet);
    FN(cuDevicePrimaryCtxRetain);
    FN(cuCtxSetCurrent);
    FN(cuMemAlloc_v2);
    FN(cuMemFree_v2);
    FN(cuMemAllocManaged);
    FN(cuLaunchKernel);
    FN(cuDeviceTotalMem_v2);
} cu;

static int load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return -1;
#define L(n) (cu.n = (__typeof__(cu.n))dlsym(h, #n))
    if (!L(cuInit) || !L(cuDeviceGet) || !L(cuDevicePrimaryCtxRetain) || !L(cuCtxSetCurrent) ||
        !L(cuMemAlloc_v2) || !L(cuMemFree_v2) || !L(cuDeviceTotalMem_v2))
        return -1;
    return 0;
}

static int ctx_up(void)
{
    CUdevice d;
    CUcontext c;
    if (cu.cuInit(0) || cu.cuDeviceGet(&d, 0) || cu.cuDevicePrimaryCtxRetain(&c, d) ||
        cu.cuCtxSetCurrent(c))
        return -1;
    return 0;
}

/* Child: best of 7 rounds of n alloc/free pairs of 4 KiB, ns per pair. */
static int child_alloc(long n)
{
    if (load() < 0 || ctx_up() < 0)
        return 3;
    double best = 1e30;
    for (int round = 0; round < 7; round++) {
        uint64_t t0 = now_ns();
        for (long i = 0; i < n; i++) {
            CUdeviceptr p;
            if (cu.cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS || cu.cuMemFree_v2(p) != CUDA_SUCCESS)
                return 4;
        }
        double per = (double)(now_ns() - t0) / (double)n;
        if (per < best)
            best = per;
    }
    printf("%.1f\n", best);
    return 0;
}

/* Child: best of 7 rounds of n launches of a 2-pointer kernel, ns per launch. mode 0: no
 * managed memory; 1: one 64 MiB managed allocation the kernel points into (all resident after
 * the first launch); 2: that, and 100 untouched 4 MiB allocations it does not point into. */
static int child_launch(int mode, long n)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h || load() < 0 || ctx_up() < 0 || !L(cuMemAllocManaged) || !L(cuLaunchKernel))
        return 3;
    CUdeviceptr m = 0, other = 4096;
    if (mode >= 1 && cu.cuMemAllocManaged(&m, 64 << 20, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS)
        return 4;
    for (int i = 0; mode == 2 && i < 100; i++) {
        CUdeviceptr x;
        if (cu.cuMemAllocManaged(&x, 4 << 20, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS)
            return 4;
    }
    CUdeviceptr a = mode ? m : other, b = other;
    void *params[] = {&a, &b};
    CUfunction f = (CUfunction)(uintptr_t)0x2000;
    double best = 1e30;
    for (int round = 0; round < 7; round++) {
        uint64_t t0 = now_ns();
        for (long i = 0; i < n; i++)
            if (cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CUDA_SUCCESS)
                return 5;
        double per = (double)(now_ns() - t0) / (double)n;
        if (per < best)
            best = per;
    }
    printf("%.1f\n", best);
    return 0;
}

/* Child: from main() to "driver loaded, first hooked call done" (the lazy
 * libvcuda setup: config, region, slot). Writes the µs to stdout, then a byte
 * to fd 3 when given (the spawn-300 parent counts those). */
static int child_start(uint64_t t_exec)
{
    if (load() < 0)
        return 3;
    size_t total;
    if (cu.cuInit(0) || cu.cuDeviceTotalMem_v2(&total, 0))
        return 4;
    uint64_t t1 = now_ns();
    if (write(3, "x", 1) < 0) {
        /* not run by the spawn parent */
    }
    printf("%.1f\n", (double)(t1 - t_exec) / 1000.0);
    return 0;
}

static char self[4096];
static const char *build;

static void set_env(const char *dir, bool preload, bool stub)
{
    char v[8192];
    snprintf(v, sizeof(v), "%s/%s", build, stub ? "bench/memstub" : "src/emu");
    setenv("LD_LIBRARY_PATH", v, 1);
    if (preload) {
        snprintf(v, sizeof(v), "%s/src/vcuda/libvcuda.so", build);
        setenv("LD_PRELOAD", v, 1);
    } else {
        unsetenv("LD_PRELOAD");
    }
    snprintf(v, sizeof(v), "%s/emu-state", dir);
    setenv("ACCEL_EMU_STATE", v, 1);
    snprintf(v, sizeof(v), "%s/region", dir);
    setenv("VCUDA_REGION", v, 1);
    snprintf(v, sizeof(v), "%s/no-config", dir);
    setenv("VCUDA_CONFIG", v, 1);
    setenv("VCUDA_MEMORY_LIMIT", "40Gi", 1);
}

/* Runs self with args in a child, returns its stdout as a number. */
static double run_child(char *const args[])
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execv(self, args);
        _exit(127);
    }
    close(p[1]);
    char buf[64] = "";
    ssize_t n = read(p[0], buf, sizeof(buf) - 1);
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    buf[n] = '\0';
    return atof(buf);
}

/* Starts n `start` children at once; returns ms until all of them wrote
 * their byte (finished initializing); *ret_cpu_ms is the CPU time the
 * children used in all (user + system). */
static double spawn_many(int n, double *ret_cpu_ms)
{
    struct rusage ru0, ru1;
    getrusage(RUSAGE_CHILDREN, &ru0);
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t *kids = calloc((size_t)n, sizeof(*kids));
    char t[32];
    uint64_t t0 = now_ns();
    snprintf(t, sizeof(t), "%llu", (unsigned long long)t0);
    for (int i = 0; i < n; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            dup2(p[1], 3);
            int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 1);
            execl(self, self, "--child-start", t, (char *)NULL);
            _exit(127);
        }
    }
    close(p[1]);
    int got = 0;
    char b[64];
    ssize_t r;
    while (got < n && (r = read(p[0], b, sizeof(b))) > 0)
        got += (int)r;
    double ms = (double)(now_ns() - t0) / 1e6;
    close(p[0]);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    free(kids);
    getrusage(RUSAGE_CHILDREN, &ru1);
    *ret_cpu_ms = ((double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                   (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec)) *
                      1e3 +
                  ((double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) +
                   (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec)) /
                      1e3;
    return got == n && !bad ? ms : -1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child-alloc") == 0)
        return child_alloc(atol(argv[2]));
    if (argc == 4 && strcmp(argv[1], "--child-launch") == 0)
        return child_launch(atoi(argv[2]), atol(argv[3]));
    if (argc == 3 && strcmp(argv[1], "--child-start") == 0)
        return child_start(strtoull(argv[2], NULL, 10));
    int procs = 300;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--build") == 0 && i + 1 < argc)
            build = argv[++i];
        else if (strcmp(argv[i], "--procs") == 0 && i + 1 < argc)
            procs = atoi(argv[++i]);
    }
    if (!build) {
        fprintf(stderr, "usage: vcuda-mem --build BUILD_DIR [--procs N]\n");
        return 2;
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return 1;
    self[n] = '\0';
    char dir[] = "/tmp/vcuda-bench-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "%s/src/emu/accel-emu --state %s/emu-state init --gpus 1 >/dev/null",
             build, dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "vcuda-mem: %s failed\n", cmd);
        return 1;
    }
    char *alloc_stub[] = {self, "--child-alloc", "200000", NULL};
    char *alloc_emu[] = {self, "--child-alloc", "10000", NULL};
    printf("vcuda-mem: libvcuda memory path (best of 7 rounds; noisy shared 2-core VM)\n");
    for (int stub = 1; stub >= 0; stub--) {
        set_env(dir, false, stub);
        double direct = run_child(stub ? alloc_stub : alloc_emu);
        set_env(dir, true, stub);
        double hooked = run_child(stub ? alloc_stub : alloc_emu);
        printf("  cuMemAlloc_v2+cuMemFree_v2 (4 KiB), %-14s direct %8.1f ns  hooked %8.1f ns  "
               "extra %6.1f ns per pair\n",
               stub ? "stub driver:" : "emulated:", direct, hooked, hooked - direct);
    }
    static const char *const launch_what[] = {
        "no managed memory:", "managed, all resident:", "100 untouched managed:"};
    for (int mode = 0; mode < 3; mode++) {
        char m[4];
        snprintf(m, sizeof(m), "%d", mode);
        char *launch_args[] = {self, "--child-launch", m, "1000000", NULL};
        set_env(dir, false, true);
        double direct = run_child(launch_args);
        set_env(dir, true, true);
        double hooked = run_child(launch_args);
        printf("  cuLaunchKernel, stub driver, %-24s direct %6.1f ns  hooked %6.1f ns  extra %6.1f "
               "ns\n",
               launch_what[mode], direct, hooked, hooked - direct);
    }
    char t[32];
    snprintf(t, sizeof(t), "%llu", (unsigned long long)now_ns());
    /* with and without interleaved, best of 20 each: the VM's noise hits both */
    for (int stub = 1; stub >= 0; stub--) {
        double best[2] = {1e30, 1e30};
        for (int i = 0; i < 20; i++) {
            for (int pre = 0; pre <= 1; pre++) {
                set_env(dir, pre, stub);
                snprintf(t, sizeof(t), "%llu", (unsigned long long)now_ns());
                char *start_args[] = {self, "--child-start", t, NULL};
                double us = run_child(start_args);
                if (us >= 0 && us < best[pre])
                    best[pre] = us;
            }
        }
        printf("  one process, exec to first hooked call done, %-14s without %6.0f us, with "
               "libvcuda %6.0f us (best of 20)\n",
               stub ? "stub driver," : "emulated,", best[0], best[1]);
    }
    /* CPU time per process (user + system of the children, getrusage) does not depend on how
     * many cores run them, unlike the wall time of all of them at once */
    for (int stub = 1; stub >= 0; stub--) {
        double per[2] = {0, 0};
        for (int pre = 0; pre <= 1; pre++) {
            set_env(dir, pre, stub);
            double cpu = 0;
            double ms = spawn_many(procs, &cpu);
            per[pre] = cpu / procs;
            printf("  %d processes at once, all initialized, %-14s %-16s %8.0f ms wall, %6.0f ms "
                   "CPU in all, %5.2f ms CPU per process\n",
                   procs, stub ? "stub driver," : "emulated,",
                   pre ? "with libvcuda:" : "without:", ms, cpu, per[pre]);
        }
        printf("  libvcuda's CPU cost per process start, %-14s %+5.2f ms\n",
               stub ? "stub driver:" : "emulated:", per[1] - per[0]);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        return 1;
    return 0;
}
