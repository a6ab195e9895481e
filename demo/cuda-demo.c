/* cuda-demo.c — a small CUDA driver API program to run under libvcuda (README, "The components
 * by hand"): what a memory quota and a compute share look like from inside a process. It
 * loads libcuda.so.1 as NVIDIA's runtime does (dlopen; dlsym), creates a context, prints
 * cuMemGetInfo, allocates in 256 MiB blocks until the driver says no (or --alloc is reached),
 * prints cuMemGetInfo again, then runs spin kernels (PTX that loops on %clock64 for a number of
 * SM cycles) one after another for --seconds and reports the GPU time it got as a share of the
 * wall time. Runs on the emulator (build/src/emu on LD_LIBRARY_PATH) and on a real GPU alike.
 *
 *   cuda-demo [--alloc MiB] [--seconds S] [--kernel-ms MS] [--device N]
 *
 * Exit status: 0 on success, 1 when a CUDA call fails (the call and its error are printed). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_api.h"

static const char ptx[] = ".version 7.0\n"
                          ".target sm_70\n"
                          ".address_size 64\n"
                          ".visible .entry spin(.param .u64 spin_param_0)\n"
                          "{\n"
                          "    .reg .pred %p<2>;\n"
                          "    .reg .b64 %rd<5>;\n"
                          "    ld.param.u64 %rd1, [spin_param_0];\n"
                          "    mov.u64 %rd2, %clock64;\n"
                          "$L_spin:\n"
                          "    mov.u64 %rd3, %clock64;\n"
                          "    sub.s64 %rd4, %rd3, %rd2;\n"
                          "    setp.lt.u64 %p1, %rd4, %rd1;\n"
                          "    @%p1 bra $L_spin;\n"
                          "    ret;\n"
                          "}\n";

static void *lib;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "cuda-demo: libcuda.so.1 has no %s\n", name);
        exit(1);
    }
    return p;
}

#define CALL(fn, ...)                                                                              \
    do {                                                                                           \
        CUresult r_ = ((__typeof__(fn) *)sym(#fn))(__VA_ARGS__);                                   \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "cuda-demo: %s failed: CUresult %d\n", #fn, (int)r_);                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double mib(size_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

static unsigned long arg_num(const char *opt, const char *v, unsigned long min, unsigned long max)
{
    char *end = NULL;
    unsigned long x = v && *v >= '0' && *v <= '9' ? strtoul(v, &end, 10) : 0;
    if (!end || *end || x < min || x > max) {
        fprintf(stderr, "cuda-demo: bad %s '%s': want a number %lu-%lu\n", opt, v ? v : "", min,
                max);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    unsigned long alloc_mib = 8192, seconds = 3, kernel_ms = 5, device = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--alloc"))
            alloc_mib = arg_num(argv[i], v, 1, 1ul << 30);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = arg_num(argv[i], v, 1, 3600);
        else if (!strcmp(argv[i], "--kernel-ms"))
            kernel_ms = arg_num(argv[i], v, 1, 10000);
        else if (!strcmp(argv[i], "--device"))
            device = arg_num(argv[i], v, 0, 63);
        else {
            fprintf(stderr, "usage: cuda-demo [--alloc MiB] [--seconds S] [--kernel-ms MS] "
                            "[--device N]\n");
            return 2;
        }
        i++;
    }
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr,
                "cuda-demo: cannot load libcuda.so.1 (%s): on the emulator, put "
                "build/src/emu on LD_LIBRARY_PATH\n",
                dlerror());
        return 1;
    }
    CUdevice dev;
    CUcontext ctx;
    char name[128];
    int clock_khz = 0;
    CALL(cuInit, 0);
    CALL(cuDeviceGet, &dev, (int)device);
    CALL(cuDeviceGetName, name, (int)sizeof(name), dev);
    CALL(cuDeviceGetAttribute, &clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
    CALL(cuCtxCreate_v2, &ctx, 0, dev);
    size_t free_b, total_b;
    CALL(cuMemGetInfo_v2, &free_b, &total_b);
    printf("device %lu: %s, SM clock %d MHz\n", device, name, clock_khz / 1000);
    printf("cuMemGetInfo: free %.0f MiB of %.0f MiB\n", mib(free_b), mib(total_b));

    /* allocate in blocks until refused: under a quota, the refusal comes at the quota */
    enum { BLOCK_MIB = 256, MAX_BLOCKS = 4096 };
    static CUdeviceptr blocks[MAX_BLOCKS];
    size_t nb = 0;
    __typeof__(cuMemAlloc_v2) *alloc = (__typeof__(cuMemAlloc_v2) *)sym("cuMemAlloc_v2");
    CUresult last = CUDA_SUCCESS;
    while (nb < MAX_BLOCKS && (nb + 1) * BLOCK_MIB <= alloc_mib) {
        last = alloc(&blocks[nb], (size_t)BLOCK_MIB << 20);
        if (last != CUDA_SUCCESS)
            break;
        nb++;
    }
    printf("allocated %zu MiB in %d MiB blocks%s\n", nb * BLOCK_MIB, BLOCK_MIB,
           last == CUDA_ERROR_OUT_OF_MEMORY ? ", then CUDA_ERROR_OUT_OF_MEMORY" : "");
    CALL(cuMemGetInfo_v2, &free_b, &total_b);
    printf("cuMemGetInfo: free %.0f MiB of %.0f MiB\n", mib(free_b), mib(total_b));
    for (size_t i = 0; i < nb; i++)
        CALL(cuMemFree_v2, blocks[i]);

    /* spin kernels back to back; the share is GPU time over wall time */
    CUmodule mod;
    CUfunction spin;
    CALL(cuModuleLoadData, &mod, ptx);
    CALL(cuModuleGetFunction, &spin, mod, "spin");
    unsigned long long cycles = (unsigned long long)clock_khz * kernel_ms;
    void *args[] = {&cycles};
    __typeof__(cuLaunchKernel) *launch = (__typeof__(cuLaunchKernel) *)sym("cuLaunchKernel");
    __typeof__(cuCtxSynchronize) *sync = (__typeof__(cuCtxSynchronize) *)sym("cuCtxSynchronize");
    double t0 = now_s(), t = t0;
    unsigned long kernels = 0;
    while (t - t0 < (double)seconds) {
        CUresult r = launch(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
        if (r == CUDA_SUCCESS)
            r = sync();
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "cuda-demo: kernel %lu failed: CUresult %d\n", kernels, (int)r);
            return 1;
        }
        kernels++;
        t = now_s();
    }
    double gpu = (double)kernels * (double)kernel_ms / 1000.0;
    printf("ran %lu kernels of %lu ms: %.2f s of GPU time in %.2f s, a %.0f %% share\n", kernels,
           kernel_ms, gpu, t - t0, 100.0 * gpu / (t - t0));
    CALL(cuModuleUnload, mod);
    CALL(cuCtxDestroy_v2, ctx);
    return 0;
}
