/* test-vcuda-managed.c — libvcuda charges managed memory for what is on the GPU
 * (docs/vcuda.md, "Managed memory"), against the emulated driver, which models residency the
 * same way (docs/emulator-cuda.md, "Managed memory"): 256 MiB quota, a 4 GiB GPU, 4 MiB per
 * context. Every check of the books is also a check against the emulator's own charge for this
 * process, so the books and the GPU agree.
 *
 * Run without VCUDA_TEST_CHILD, the program is its own launcher (vcuda-launch.c). */
#define _GNU_SOURCE
#include "cuda_api.h"
#include "nvml_api.h"
#include "state.h"
#include "tap.h"
#include "vcuda-launch.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define QUOTA (256 * MiB)
#define PAGE (2 * MiB)

static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                          ".visible .entry use(.param .u64 .ptr .global .align 1 p)\n{\n ret;\n}\n"
                          ".visible .entry use2(.param .u32 n, .param .u64 p)\n{\n ret;\n}\n";

#define FN(n) __typeof__(n) *n
static struct {
    FN(cuInit);
    FN(cuDevicePrimaryCtxRetain);
    FN(cuCtxSetCurrent);
    FN(cuCtxSynchronize);
    FN(cuMemGetInfo_v2);
    FN(cuMemAlloc_v2);
    FN(cuMemAllocManaged);
    FN(cuMemFree_v2);
    FN(cuMemsetD8_v2);
    FN(cuMemcpyHtoD_v2);
    FN(cuMemcpy2D_v2);
    FN(cuMemcpy3D_v2);
    FN(cuMemsetD2D32_v2);
    FN(cuMemPrefetchAsync);
    FN(cuMemPrefetchAsync_v2);
    FN(cuModuleLoadData);
    FN(cuModuleGetFunction);
    FN(cuLaunchKernel);
} cu;

static CUcontext ctx;
static CUfunction use, use2;

static void setup(void)
{
    if (ctx) {
        REQUIRE_EQ_INT(cu.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        return;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib)
        tap_skip_all("libcuda.so.1 (the emulator) cannot be loaded");
#define GET(n) REQUIRE((cu.n = (__typeof__(cu.n))dlsym(lib, #n)) != NULL)
    GET(cuInit);
    GET(cuDevicePrimaryCtxRetain);
    GET(cuCtxSetCurrent);
    GET(cuCtxSynchronize);
    GET(cuMemGetInfo_v2);
    GET(cuMemAlloc_v2);
    GET(cuMemAllocManaged);
    GET(cuMemFree_v2);
    GET(cuMemsetD8_v2);
    GET(cuMemcpyHtoD_v2);
    GET(cuMemcpy2D_v2);
    GET(cuMemcpy3D_v2);
    GET(cuMemsetD2D32_v2);
    GET(cuMemPrefetchAsync);
    GET(cuMemPrefetchAsync_v2);
    GET(cuModuleLoadData);
    GET(cuModuleGetFunction);
    GET(cuLaunchKernel);
    REQUIRE_EQ_INT(cu.cuInit(0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CUmodule mod;
    REQUIRE_EQ_INT(cu.cuModuleLoadData(&mod, ptx), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuModuleGetFunction(&use, mod, "use"), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuModuleGetFunction(&use2, mod, "use2"), CUDA_SUCCESS);
}

/* What the books say this container holds (the quota view). */
static uint64_t charged(void)
{
    size_t f = 0, t = 0;
    if (cu.cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS)
        return UINT64_MAX;
    return t - f;
}

/* What the emulator itself holds on GPU 0 (all processes: only this one here). */
static uint64_t on_gpu(void)
{
    static struct emu_state *st;
    if (!st && emu_state_open(getenv("ACCEL_EMU_STATE"), &st) < 0)
        return UINT64_MAX;
    uint64_t used = 0, total = 0;
    emu_state_mem_info(st, 0, &used, &total);
    return used;
}

/* The books moved by want since (b0, g0), and the GPU by the same. */
#define CHECK_HELD(b0, g0, want)                                                                   \
    do {                                                                                           \
        CHECK_EQ_U64(charged() - (b0), (uint64_t)(want));                                          \
        CHECK_EQ_U64(on_gpu() - (g0), (uint64_t)(want));                                           \
    } while (0)

static CUresult launch(CUfunction f, CUdeviceptr p)
{
    void *params[] = {&p};
    CUresult r = cu.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    return r == CUDA_SUCCESS ? cu.cuCtxSynchronize() : r;
}

TEST(untouched_managed_memory_is_not_charged)
{
    setup();
    uint64_t b0 = charged(), g0 = on_gpu();
    CUdeviceptr m;
    REQUIRE_EQ_INT(cu.cuMemAllocManaged(&m, GiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 0);
    CHECK_EQ_INT(cu.cuMemFree_v2(m), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 0);
}

/* A kernel given a pointer into a managed allocation may touch all of it: what fits in the
 * quota is charged (and is on the GPU); the rest stays on the host, and the program goes on.
 * NVML and cuMemGetInfo show the same books. Freeing gives it all back. */
TEST(a_launch_charges_what_becomes_resident_never_over_the_quota)
{
    setup();
    uint64_t b0 = charged(), g0 = on_gpu();
    uint64_t room = (QUOTA - b0) / PAGE * PAGE;
    CUdeviceptr m;
    REQUIRE_EQ_INT(cu.cuMemAllocManaged(&m, GiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ_INT(launch(use, m + 5), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, room);
    size_t f = 1, t = 0;
    CHECK_EQ_INT(cu.cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    CHECK_EQ_U64(t, QUOTA);
    CHECK_EQ_U64(f, QUOTA - b0 - room);
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (nvml) {
        __typeof__(nvmlInit_v2) *init = (__typeof__(init))dlsym(nvml, "nvmlInit_v2");
        __typeof__(nvmlDeviceGetHandleByIndex_v2) *get =
            (__typeof__(get))dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
        __typeof__(nvmlDeviceGetMemoryInfo) *info =
            (__typeof__(info))dlsym(nvml, "nvmlDeviceGetMemoryInfo");
        nvmlDevice_t dev;
        nvmlMemory_t mem;
        if (CHECK(init && get && info) && CHECK(init() == NVML_SUCCESS) &&
            CHECK(get(0, &dev) == NVML_SUCCESS) && CHECK(info(dev, &mem) == NVML_SUCCESS)) {
            CHECK_EQ_U64(mem.total, QUOTA);
            CHECK_EQ_U64(mem.used, b0 + room);
        }
    } else {
        tap_diag("no libnvidia-ml.so.1: NVML's view not checked");
    }
    /* launching again changes nothing: nothing new becomes resident */
    CHECK_EQ_INT(launch(use, m + GiB - 1), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, room);
    CHECK_EQ_INT(cu.cuMemFree_v2(m), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 0);
}

/* Pointers found through cuFuncGetParamInfo, in kernelParams or in an argument buffer; a
 * launch whose arguments point elsewhere charges nothing. */
TEST(only_allocations_a_launch_points_into_are_charged)
{
    setup();
    uint64_t b0 = charged(), g0 = on_gpu();
    CUdeviceptr a, b, plain;
    REQUIRE_EQ_INT(cu.cuMemAllocManaged(&a, 8 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemAllocManaged(&b, 16 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&plain, PAGE), CUDA_SUCCESS);
    CHECK_EQ_INT(launch(use, plain), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, PAGE);
    /* use2(u32 n, u64 p): p at offset 8 of the buffer */
    struct {
        uint32_t n, pad;
        uint64_t p;
    } buf = {7, 0, b + 3 * MiB};
    size_t size = sizeof(buf);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CHECK_EQ_INT(cu.cuLaunchKernel(use2, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, PAGE + 16 * MiB);
    uint32_t n = 1;
    void *params[] = {&n, &a};
    CHECK_EQ_INT(cu.cuLaunchKernel(use2, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, PAGE + 8 * MiB + 16 * MiB);
    CHECK_EQ_INT(cu.cuMemFree_v2(a), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemFree_v2(b), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemFree_v2(plain), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 0);
}

/* Copies and memsets bring the pages they reach; a prefetch to the device brings its range, a
 * prefetch to the CPU gives it back. */
TEST(copies_and_prefetches_move_the_charge)
{
    setup();
    uint64_t b0 = charged(), g0 = on_gpu();
    CUdeviceptr m;
    REQUIRE_EQ_INT(cu.cuMemAllocManaged(&m, 64 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    /* 3 MiB at 1 MiB: pages 0 and 1 */
    CHECK_EQ_INT(cu.cuMemsetD8_v2(m + MiB, 7, 3 * MiB), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 2 * PAGE);
    char host[64] = "x";
    CHECK_EQ_INT(cu.cuMemcpyHtoD_v2(m + 10 * MiB, host, sizeof(host)), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 3 * PAGE);
    CUmemLocation gpu0 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CHECK_EQ_INT(cu.cuMemPrefetchAsync_v2(m + 32 * MiB, 16 * MiB, gpu0, 0, NULL), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 3 * PAGE + 16 * MiB);
    /* 2D and 3D: the bytes the rows span. A 2D memset of 3 rows of 1 KiB, 1 MiB apart, from
     * 53.5 MiB: 53.5..55.5 MiB, pages 26 and 27 */
    CHECK_EQ_INT(cu.cuMemsetD2D32_v2(m + 53 * MiB + MiB / 2, MiB, 9, 256, 3), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 5 * PAGE + 16 * MiB);
    /* a 2D copy from the host into page 29 (58 MiB + 2 rows of 4 KiB at a 64 KiB pitch) */
    static char rows[2 * 4096];
    CUDA_MEMCPY2D c2 = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                        .srcHost = rows,
                        .srcPitch = 4096,
                        .dstMemoryType = CU_MEMORYTYPE_UNIFIED,
                        .dstDevice = m + 58 * MiB,
                        .dstPitch = 64 << 10,
                        .WidthInBytes = 4096,
                        .Height = 2};
    CHECK_EQ_INT(cu.cuMemcpy2D_v2(&c2), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 6 * PAGE + 16 * MiB);
    /* a 3D copy out of page 31 (62 MiB, 2 slices of 2 rows) */
    CUDA_MEMCPY3D c3 = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                        .srcDevice = m + 62 * MiB,
                        .srcPitch = 4096,
                        .srcHeight = 2,
                        .dstMemoryType = CU_MEMORYTYPE_HOST,
                        .dstHost = rows,
                        .dstPitch = 1024,
                        .dstHeight = 2,
                        .WidthInBytes = 1024,
                        .Height = 2,
                        .Depth = 2};
    CHECK_EQ_INT(cu.cuMemcpy3D_v2(&c3), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 7 * PAGE + 16 * MiB);
    CHECK_EQ_INT(cu.cuMemPrefetchAsync(m, 52 * MiB, CU_DEVICE_CPU, NULL), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 4 * PAGE); /* pages 26, 27, 29 and 31 are still on the GPU */
    CHECK_EQ_INT(cu.cuMemPrefetchAsync(m, 64 * MiB, CU_DEVICE_CPU, NULL), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 0);
    /* back on the host, a launch brings it all again */
    CHECK_EQ_INT(launch(use, m), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 64 * MiB);
    CHECK_EQ_INT(cu.cuMemFree_v2(m), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 0);
}

/* More managed memory than the quota, touched every way: no call fails (the GPU never fails a
 * touch), the books never pass the quota, and the GPU holds what the books say. A device
 * prefetch moves what fits; after a prefetch to the CPU makes room, it moves more. */
TEST(oversubscription_does_not_fail_and_stays_within_the_quota)
{
    setup();
    uint64_t b0 = charged(), g0 = on_gpu();
    uint64_t room = (QUOTA - b0) / PAGE * PAGE;
    CUdeviceptr m;
    REQUIRE_EQ_INT(cu.cuMemAllocManaged(&m, 2 * GiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    CUmemLocation gpu0 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CHECK_EQ_INT(cu.cuMemPrefetchAsync_v2(m, 2 * GiB, gpu0, 0, NULL), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, room);
    /* touches past the quota: kept on the host, used where they are */
    CHECK_EQ_INT(cu.cuMemsetD8_v2(m + GiB, 5, MiB), CUDA_SUCCESS);
    CHECK_EQ_INT(launch(use, m + GiB), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, room);
    CHECK_EQ_INT(((volatile unsigned char *)(uintptr_t)m)[GiB], 5);
    /* 64 MiB back to the host; a device prefetch of the kept part now brings 64 MiB of it */
    CHECK_EQ_INT(cu.cuMemPrefetchAsync(m, 64 * MiB, CU_DEVICE_CPU, NULL), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, room - 64 * MiB);
    CHECK_EQ_INT(cu.cuMemPrefetchAsync(m + GiB, GiB, 0, NULL), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, room);
    CHECK_EQ_INT(cu.cuMemFree_v2(m), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 0);
}

/* Plain allocations see the managed pages on the GPU: refused exactly at the quota. */
TEST(plain_allocations_stop_exactly_at_the_quota_beside_resident_managed_memory)
{
    setup();
    uint64_t b0 = charged(), g0 = on_gpu();
    CUdeviceptr m, p, q;
    REQUIRE_EQ_INT(cu.cuMemAllocManaged(&m, GiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemsetD8_v2(m, 1, 100 * MiB), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 100 * MiB);
    uint64_t left = QUOTA - b0 - 100 * MiB;
    CHECK_EQ_INT(cu.cuMemAlloc_v2(&q, left + 512), CUDA_ERROR_OUT_OF_MEMORY);
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&p, left), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemAlloc_v2(&q, 512), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ_U64(charged(), QUOTA);
    /* the GPU is full for this container: further touches stay on the host, without error */
    CHECK_EQ_INT(cu.cuMemsetD8_v2(m + 200 * MiB, 1, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U64(charged(), QUOTA);
    CHECK_EQ_INT(cu.cuMemFree_v2(m), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_HELD(b0, g0, 0);
}

/* Threads touching their own managed memory at once (launches, memsets, prefetches both ways),
 * 4 x 128 MiB against the 256 MiB quota: no call fails, the books never pass the quota, and they
 * end where the GPU is. (Threads racing on the same pages with no order between their calls
 * are not checked: which of them wins on the GPU is the race's outcome.) */
static pthread_barrier_t touched, checked;

static void *toucher(void *arg)
{
    long k = (long)(intptr_t)arg;
    CUdeviceptr m = 0;
    if (cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
        cu.cuMemAllocManaged(&m, 128 * MiB, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS) {
        pthread_barrier_wait(&touched);
        pthread_barrier_wait(&checked);
        return (void *)1;
    }
    CUmemLocation gpu0 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    void *failed = NULL;
    for (int i = 0; i < 198; i++) { /* the last a partial prefetch to the CPU */
        CUdeviceptr p = m + (uint64_t)((k * 13 + i * 7) % 56) * PAGE;
        CUresult r;
        switch (i % 5) {
        case 0:
            r = cu.cuMemsetD8_v2(p, 1, 3 * PAGE / 2);
            break;
        case 1:
            r = launch(use, p);
            break;
        case 2:
            r = cu.cuMemPrefetchAsync(p, 8 * PAGE, CU_DEVICE_CPU, NULL);
            break;
        case 3:
            r = cu.cuMemPrefetchAsync_v2(p, 4 * PAGE, gpu0, 0, NULL);
            break;
        default:
            r = cu.cuMemPrefetchAsync(m, 128 * MiB, CU_DEVICE_CPU, NULL);
            break;
        }
        if (r != CUDA_SUCCESS || charged() > QUOTA) {
            failed = (void *)3;
            break;
        }
    }
    pthread_barrier_wait(&touched);
    pthread_barrier_wait(&checked);
    return cu.cuMemFree_v2(m) == CUDA_SUCCESS ? failed : (void *)4;
}

TEST(threads_touching_at_once_keep_the_books_with_the_gpu)
{
    setup();
    uint64_t b0 = charged(), g0 = on_gpu();
    pthread_t t[4];
    REQUIRE_EQ_INT(pthread_barrier_init(&touched, NULL, 5), 0);
    REQUIRE_EQ_INT(pthread_barrier_init(&checked, NULL, 5), 0);
    for (long k = 0; k < 4; k++)
        REQUIRE_EQ_INT(pthread_create(&t[k], NULL, toucher, (void *)(intptr_t)k), 0);
    pthread_barrier_wait(&touched);
    /* all four are done touching and hold their memory: the books are the GPU's */
    CHECK(charged() <= QUOTA);
    CHECK(charged() > b0);
    CHECK_EQ_U64(charged() - b0, on_gpu() - g0);
    pthread_barrier_wait(&checked);
    for (int k = 0; k < 4; k++) {
        void *r = (void *)1;
        pthread_join(t[k], &r);
        CHECK(r == NULL);
    }
    pthread_barrier_destroy(&touched);
    pthread_barrier_destroy(&checked);
    CHECK_HELD(b0, g0, 0);
}

int main(int argc, char **argv)
{
    if (!getenv("VCUDA_TEST_CHILD"))
        return vcuda_test_launch(argv, "256Mi", 4 * GiB);
    return tap_main(argc, argv);
}
