/* bench-emu-runtime.c — the emulator's cost on NVIDIA's runtime's paths (issue 9):
 *   1. context-local storage `get`, which the runtime calls before nearly every API call
 *      (src/emu/cuda_cls.c, reached through cuGetExportTable as the runtime reaches it);
 *   2. start-up of an nvcc-built program (tests/runtime/rt-prog.cu, `start` mode: cudaFree(0)):
 *      wall time from exec to exit on the emulator, median and worst of N runs.
 *
 *   LD_LIBRARY_PATH=build/src/emu build/bench/bench-emu-runtime [gets] [runs] [rt-prog...]
 *
 * Makes its own one-GPU emulated machine (ACCEL_EMU_STATE) unless one is set. The shared-cudart
 * program needs the CUDA toolkit's lib64 on LD_LIBRARY_PATH too: `scripts/cuda-wheels.sh --root`
 * names the toolkit (/usr/local/cuda, or NVIDIA's wheels from PyPI). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "state.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef CUresult (*cls_put_fn)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *));
typedef CUresult (*cls_get_fn)(void **, CUcontext, void *);

static int bench_cls(long gets)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    __typeof__(cuInit) *init = (__typeof__(init))dlsym(lib, "cuInit");
    __typeof__(cuGetExportTable) *get_table = (__typeof__(get_table))dlsym(lib, "cuGetExportTable");
    __typeof__(cuDevicePrimaryCtxRetain) *retain =
        (__typeof__(retain))dlsym(lib, "cuDevicePrimaryCtxRetain");
    __typeof__(cuCtxSetCurrent) *set = (__typeof__(set))dlsym(lib, "cuCtxSetCurrent");
    static const unsigned char cls_uuid[16] = {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                                               0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93};
    CUuuid id;
    memcpy(id.bytes, cls_uuid, 16);
    const void *t = NULL;
    CUcontext ctx;
    if (!init || !get_table || !retain || !set || init(0) || get_table(&t, &id) ||
        retain(&ctx, 0) || set(ctx)) {
        fprintf(stderr, "emulated driver not usable (ACCEL_EMU_STATE?)\n");
        return 1;
    }
    void *const *slots = t;
    cls_put_fn put = (cls_put_fn)slots[0];
    cls_get_fn get = (cls_get_fn)slots[2];
    static int keys[8];
    for (int i = 0; i < 8; i++)
        put(NULL, &keys[i], &keys[i], NULL);
    void *v;
    uint64_t t0 = now_ns();
    for (long i = 0; i < gets; i++)
        get(&v, NULL, &keys[i & 7]);
    uint64_t t1 = now_ns();
    printf("CLS get (current context, 8 keys): %.1f ns per call over %ld calls\n",
           (double)(t1 - t0) / (double)gets, gets);
    return 0;
}

static int bench_start(const char *prog, int runs)
{
    uint64_t *t = calloc((size_t)runs, sizeof(*t));
    for (int i = 0; i < runs; i++) {
        uint64_t t0 = now_ns();
        pid_t pid = fork();
        if (pid == 0) {
            execl(prog, prog, "start", (char *)NULL);
            _exit(127);
        }
        int st;
        waitpid(pid, &st, 0);
        t[i] = now_ns() - t0;
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "%s start failed (status %d)\n", prog, st);
            free(t);
            return 1;
        }
    }
    qsort(t, (size_t)runs, sizeof(*t), cmp_u64);
    printf("start-up %s: median %.1f ms, max %.1f ms over %d runs\n", prog,
           (double)t[runs / 2] / 1e6, (double)t[runs - 1] / 1e6, runs);
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    long gets = argc > 1 ? atol(argv[1]) : 10000000;
    int runs = argc > 2 ? atoi(argv[2]) : 20;
    if (gets <= 0 || runs <= 0) {
        fprintf(stderr, "usage: bench-emu-runtime [gets] [runs] [rt-prog...]\n");
        return 2;
    }
    char path[] = "/tmp/bench-emu-runtime-XXXXXX";
    if (!getenv("ACCEL_EMU_STATE")) {
        int fd = mkstemp(path);
        if (fd < 0)
            return 1;
        close(fd);
        struct emu_config cfg;
        emu_config_init(&cfg);
        cfg.gpus = 1;
        if (emu_state_create(path, &cfg) < 0)
            return 1;
        setenv("ACCEL_EMU_STATE", path, 1);
    }
    int rc = 0;
    for (int i = 3; i < argc && !rc; i++)
        rc = bench_start(argv[i], runs);
    if (!rc)
        rc = bench_cls(gets);
    if (strcmp(path, "/tmp/bench-emu-runtime-XXXXXX") != 0)
        unlink(path);
    return rc;
}
