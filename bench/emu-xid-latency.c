/* emu-xid-latency — how long an XID injected into the emulated machine takes to wake a process
 * blocked in the emulated NVML's nvmlEventSetWait_v2 (the issue asks for < 10 ms).
 *
 * A waiter process registers for XID events on GPU 0 and waits; the injector (this process)
 * posts one XID at a time through the state API (what `accel-emu xid` does after parsing its
 * arguments), stamping CLOCK_MONOTONIC just before the post; the waiter stamps it just after
 * its wait returns. Both stamps go to a shared page; the difference is the latency. Before
 * each injection the injector pauses briefly so the waiter is asleep in the futex, which is the
 * case that matters (an event already posted is picked up without sleeping).
 *
 * Usage: emu-xid-latency [ITERATIONS]   (default 2000; needs libnvidia-ml.so.1 from the build) */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvml_api.h"
#include "state-nvml.h"
#include "state.h"

#define MAX_ITERS 100000

struct shared {
    int ready;    /* waiter registered */
    int consumed; /* events the waiter has stamped */
    int failed;
    uint64_t inject_ns[MAX_ITERS];
    uint64_t wake_ns[MAX_ITERS];
};

static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void waiter(struct shared *sh, int iters)
{
    nvmlDevice_t d;
    nvmlEventSet_t set;
    nvmlEventData_t e;
    if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &d) != NVML_SUCCESS ||
        nvmlEventSetCreate(&set) != NVML_SUCCESS ||
        nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set) != NVML_SUCCESS) {
        __atomic_store_n(&sh->failed, 1, __ATOMIC_RELEASE);
        _exit(1);
    }
    __atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < iters; i++) {
        nvmlReturn_t r = nvmlEventSetWait_v2(set, &e, 5000);
        uint64_t now = mono();
        if (r != NVML_SUCCESS || e.eventData != (unsigned long long)i + 1) {
            __atomic_store_n(&sh->failed, 1, __ATOMIC_RELEASE);
            _exit(1);
        }
        sh->wake_ns[i] = now;
        __atomic_store_n(&sh->consumed, i + 1, __ATOMIC_RELEASE);
    }
    nvmlEventSetFree(set);
    nvmlShutdown();
    _exit(0);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    if (iters < 1 || iters > MAX_ITERS) {
        fprintf(stderr, "usage: emu-xid-latency [ITERATIONS 1-%d]\n", MAX_ITERS);
        return 2;
    }
    char dir[] = "/tmp/emu-xid-latency-XXXXXX", path[64];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof(path), "%s/state", dir);
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 1;
    struct emu_state *st = NULL;
    int r = emu_state_create(path, &cfg);
    if (r == 0)
        r = emu_state_open(path, &st);
    if (r < 0) {
        fprintf(stderr, "emu-xid-latency: cannot make a machine at %s: %s\n", path, strerror(-r));
        return 1;
    }
    setenv("ACCEL_EMU_STATE", path, 1);

    struct shared *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0)
        waiter(sh, iters);
    while (!__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&sh->failed, __ATOMIC_ACQUIRE))
        pause_us(100);

    for (int i = 0; i < iters && !__atomic_load_n(&sh->failed, __ATOMIC_ACQUIRE); i++) {
        pause_us(200 + (i % 7) * 50); /* let the waiter fall asleep in the futex */
        sh->inject_ns[i] = mono();
        emu_state_inject_xid(st, 0, (uint64_t)i + 1);
        while (__atomic_load_n(&sh->consumed, __ATOMIC_ACQUIRE) < i + 1 &&
               !__atomic_load_n(&sh->failed, __ATOMIC_ACQUIRE))
            pause_us(20);
    }
    int wst;
    waitpid(pid, &wst, 0);
    if (sh->failed || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        fprintf(stderr, "emu-xid-latency: the waiter failed\n");
        return 1;
    }

    uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)iters);
    if (!lat)
        return 1;
    for (int i = 0; i < iters; i++)
        lat[i] = sh->wake_ns[i] - sh->inject_ns[i];
    qsort(lat, (size_t)iters, sizeof(uint64_t), cmp_u64);
    printf("emu-xid-latency: %d XIDs, inject -> nvmlEventSetWait_v2 return in another process\n",
           iters);
    printf("  p50 %.1f us   p99 %.1f us   max %.1f us\n", lat[iters / 2] / 1000.0,
           lat[(size_t)iters * 99 / 100] / 1000.0, lat[iters - 1] / 1000.0);
    free(lat);
    emu_state_close(st);
    unlink(path);
    rmdir(dir);
    return 0;
}
