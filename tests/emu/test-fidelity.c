/* test-fidelity.c — the emulator answers as NVIDIA's documentation says the driver does, where
 * a kinder emulator would let the suite pass while the product fails on hardware (issue 14):
 * lost GPUs, reserved memory, page-granular allocations, sampled utilization, bounded
 * cooperative launches. Each case states the documented behaviour it checks; the sources are
 * listed in docs/emulator-cuda.md.
 *
 * The program links the emulated libcuda.so.1 and libnvidia-ml.so.1 directly and makes its
 * machine (2 H100s) before the first test, in the test's temporary directory. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "nvml_api.h"
#include "state-nvml.h"
#include "state.h"
#include "tap.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define ROUND_512(x) (((x) + 511) / 512 * 512)

/* a kernel without parameters: only its launch configuration matters here */
static const char nop_ptx[] = ".version 7.0\n"
                              ".target sm_70\n"
                              ".address_size 64\n"
                              ".visible .entry nop()\n"
                              "{\n"
                              "    ret;\n"
                              "}\n"
                              ".visible .entry spin(\n"
                              "    .param .u64 spin_param_0\n"
                              ")\n"
                              "{\n"
                              "    ret;\n"
                              "}\n"
                              ".visible .entry use(\n"
                              "    .param .u64 .ptr .global .align 1 use_param_0\n"
                              ")\n"
                              "{\n"
                              "    ret;\n"
                              "}\n";

static char state_path[4096];
static struct emu_state *st;
static CUcontext ctx0;

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static bool setup(void)
{
    static bool done, ok;
    if (done)
        return ok;
    done = true;
    CUdevice d;
    ok = cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&d, 0) == CUDA_SUCCESS &&
         cuDevicePrimaryCtxRetain(&ctx0, d) == CUDA_SUCCESS &&
         cuCtxSetCurrent(ctx0) == CUDA_SUCCESS && nvmlInit_v2() == NVML_SUCCESS;
    return ok;
}

/* ---- 6. lost GPUs ---- */

TEST(lost_gpu_fails_nvml_waits_and_cuda_calls)
{
    REQUIRE(setup());
    CUdevice d1;
    CUcontext c1;
    CUdeviceptr p;
    REQUIRE_EQ_INT(cuDeviceGet(&d1, 1), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuCtxCreate_v2(&c1, 0, d1), CUDA_SUCCESS); /* current now */
    REQUIRE_EQ_INT(cuMemAlloc_v2(&p, MiB), CUDA_SUCCESS);

    nvmlDevice_t n1;
    nvmlEventSet_t set;
    nvmlEventData_t e;
    REQUIRE_EQ_INT(nvmlDeviceGetHandleByIndex_v2(1, &n1), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlEventSetCreate(&set), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceRegisterEvents(n1, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
    REQUIRE_EQ_INT(emu_state_set_lost(st, 1, true), 0);

    /* the XID 79 first, then "GPU is lost" at once (nvmlEventSetWait_v2's documented return),
     * never a timeout */
    CHECK_EQ_INT(nvmlEventSetWait_v2(set, &e, 5000), NVML_SUCCESS);
    CHECK_EQ_U64(e.eventData, EMU_XID_FALLEN_OFF_BUS);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ_INT(nvmlEventSetWait_v2(set, &e, 60000), NVML_ERROR_GPU_IS_LOST);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(t1.tv_sec - t0.tv_sec < 30); /* answered, not the 60 s timeout */

    /* CUDA work on that GPU fails with CUDA_ERROR_DEVICE_UNAVAILABLE */
    const CUresult U = CUDA_ERROR_DEVICE_UNAVAILABLE;
    size_t fr, tot;
    CUdeviceptr q;
    CUstream s;
    CUcontext c2;
    CHECK_EQ_INT(cuMemAlloc_v2(&q, MiB), U);
    CHECK_EQ_INT(cuMemsetD8_v2(p, 0, MiB), U);
    CHECK_EQ_INT(cuMemGetInfo_v2(&fr, &tot), U);
    CHECK_EQ_INT(cuStreamCreate(&s, 0), U);
    CHECK_EQ_INT(cuCtxSynchronize(), U);
    CHECK_EQ_INT(cuCtxCreate_v2(&c2, 0, d1), U);
    const char *name = NULL;
    CHECK_EQ_INT(cuGetErrorName(U, &name), CUDA_SUCCESS);
    CHECK_EQ_STR(name, "CUDA_ERROR_DEVICE_UNAVAILABLE");
    /* the other GPU is untouched */
    REQUIRE_EQ_INT(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemAlloc_v2(&q, MiB), CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemFree_v2(q), CUDA_SUCCESS);

    /* restored: usable again */
    REQUIRE_EQ_INT(emu_state_set_lost(st, 1, false), 0);
    REQUIRE_EQ_INT(cuCtxSetCurrent(c1), CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ_INT(cuCtxDestroy_v2(c1), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
    nvmlEventSetFree(set);
}

/* ---- 4. reserved memory ---- */

TEST(reserved_memory_is_never_cudas)
{
    REQUIRE(setup());
    /* an H100 80GB HBM3 as boards report it: 81559 MiB to nvidia-smi, 81100 MiB to CUDA */
    const uint64_t phys_total = 81559 * MiB, cuda_total = 81100 * MiB;
    const uint64_t reserve = phys_total - cuda_total;

    size_t tot = 0, fr = 0;
    CHECK_EQ_INT(cuDeviceTotalMem_v2(&tot, 0), CUDA_SUCCESS);
    CHECK_EQ_U64(tot, cuda_total);
    CHECK_EQ_INT(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U64(tot, cuda_total);

    /* NVML: physical total; used = reserved + allocated (v1 and v2); v2 names the reserve */
    nvmlDevice_t n;
    nvmlMemory_t m1;
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    REQUIRE_EQ_INT(nvmlDeviceGetHandleByIndex_v2(0, &n), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetMemoryInfo(n, &m1), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetMemoryInfo_v2(n, &m2), NVML_SUCCESS);
    uint64_t allocated = 0, phys = 0;
    emu_state_mem_info(st, 0, &allocated, &phys);
    CHECK_EQ_U64(phys, phys_total);
    CHECK_EQ_U64(m1.total, phys_total);
    CHECK_EQ_U64(m2.total, phys_total);
    CHECK_EQ_U64(m2.reserved, reserve);
    CHECK_EQ_U64(m1.used, allocated + reserve);
    CHECK_EQ_U64(m2.used, allocated + reserve);
    CHECK_EQ_U64(m1.free + m1.used, m1.total);
    CHECK_EQ_U64(m2.free, fr); /* what CUDA can still allocate */

    /* the reserve cannot be allocated: everything CUDA reports free fits, one page more not */
    CUdeviceptr p, q;
    REQUIRE_EQ_INT(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemAlloc_v2(&p, fr + 2 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    REQUIRE_EQ_INT(cuMemAlloc_v2(&p, fr), CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemAlloc_v2(&q, 2 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ_INT(cuMemFree_v2(p), CUDA_SUCCESS);
}

/* ---- 2. concurrency inside a context ---- */

static float ms_between(CUevent a, CUevent b)
{
    float ms = -1;
    return cuEventElapsedTime(&ms, a, b) == CUDA_SUCCESS ? ms : -1;
}

/* Streams of one context overlap within the SMs their kernels ask for; the GPU's busy time is
 * the union of the busy intervals. Times are the emulator's (spin kernels: cycles at the SM
 * clock), exact whatever the host does between calls. */
TEST(streams_of_a_context_run_side_by_side)
{
    REQUIRE(setup());
    int ck = 0;
    REQUIRE_EQ_INT(cuDeviceGetAttribute(&ck, CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 0),
                   CUDA_SUCCESS);
    CHECK_EQ_INT(ck, 1);
    CUmodule mod;
    CUfunction spin;
    REQUIRE_EQ_INT(cuModuleLoadData(&mod, nop_ptx), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuModuleGetFunction(&spin, mod, "spin"), CUDA_SUCCESS);
    int mhz_k = 0, sms = 0;
    REQUIRE_EQ_INT(cuDeviceGetAttribute(&mhz_k, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
                   CUDA_SUCCESS);
    uint64_t c50 = 50ull * (uint64_t)mhz_k, c100 = 100ull * (uint64_t)mhz_k; /* ms -> cycles */
    void *p50[] = {&c50}, *p100[] = {&c100};
    CUstream s1, s2;
    CUevent e0, e1, e2, e3;
    REQUIRE_EQ_INT(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuEventCreate(&e0, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuEventCreate(&e1, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuEventCreate(&e2, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuEventCreate(&e3, 0), CUDA_SUCCESS);
    unsigned full = (unsigned)sms * 2; /* 2 blocks of 1024 threads per SM: the whole GPU */

    /* a whole-GPU 50 ms kernel, then two one-block 100 ms kernels on two streams: both start
     * when it ends and run together (100 ms for both, not 200) */
    uint64_t t0 = mono_ns();
    REQUIRE_EQ_INT(cuLaunchKernel(spin, full, 1, 1, 1024, 1, 1, 0, s1, p50, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuEventRecord(e0, s1), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s1, p100, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuEventRecord(e1, s1), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s2, p100, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuEventRecord(e2, s2), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuCtxSynchronize(), CUDA_SUCCESS);
    uint64_t t1 = mono_ns();
    CHECK(fabsf(ms_between(e0, e1) - 100.0f) < 0.01f);
    CHECK(fabsf(ms_between(e0, e2) - 100.0f) < 0.01f); /* s2's kernel ended with s1's */
    /* busy time is the union: 150 ms of GPU time in the window, not 250 */
    uint64_t busy = 0;
    REQUIRE_EQ_INT(emu_state_busy_ns(st, 0, t0, t1 + 1, getpid(), &busy, NULL), 0);
    CHECK_EQ_U64(busy, 150000000ull);

    /* two whole-GPU kernels on two streams cannot share the SMs: one after the other */
    REQUIRE_EQ_INT(cuEventRecord(e0, s1), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuLaunchKernel(spin, full, 1, 1, 1024, 1, 1, 0, s1, p100, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuLaunchKernel(spin, full, 1, 1, 1024, 1, 1, 0, s2, p100, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuEventRecord(e3, s2), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK(fabsf(ms_between(e0, e3) - 200.0f) < 0.01f);

    cuEventDestroy_v2(e0);
    cuEventDestroy_v2(e1);
    cuEventDestroy_v2(e2);
    cuEventDestroy_v2(e3);
    cuStreamDestroy_v2(s1);
    cuStreamDestroy_v2(s2);
    cuModuleUnload(mod);
}

/* ---- 3. pages and context cost ---- */

/* What this process holds on gpu in the shared state. */
static uint64_t held(unsigned gpu)
{
    struct emu_proc_mem pm[EMU_MAX_PROCS];
    size_t n = 0;
    emu_state_procs(st, gpu, pm, EMU_MAX_PROCS, &n);
    for (size_t i = 0; i < n && i < EMU_MAX_PROCS; i++)
        if (pm[i].pid == getpid())
            return pm[i].bytes;
    return 0;
}

TEST(memory_is_carved_in_2_mib_pages)
{
    REQUIRE(setup());
    size_t gran = 0;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    REQUIRE_EQ_INT(cuMemGetAllocationGranularity(&gran, &prop, 0), CUDA_SUCCESS);
    REQUIRE_EQ_U64(gran, 2 * MiB);
    uint64_t base = held(0);
    CUdeviceptr a, b, big;
    /* one byte takes a page; a second small block shares it */
    REQUIRE_EQ_INT(cuMemAlloc_v2(&a, 1), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, gran);
    REQUIRE_EQ_INT(cuMemAlloc_v2(&b, 1000), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, gran);
    /* a block of a page or more takes whole pages of its own, page-aligned */
    REQUIRE_EQ_INT(cuMemAlloc_v2(&big, gran + 1), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 3 * gran);
    CHECK_EQ_U64(big % gran, 0);
    CUdeviceptr rb;
    size_t rs = 0;
    CHECK_EQ_INT(cuMemGetAddressRange_v2(&rb, &rs, big), CUDA_SUCCESS);
    CHECK_EQ_U64(rs, ROUND_512(gran + 1)); /* the program sees what it asked for */
    /* the page goes back with its last block */
    CHECK_EQ_INT(cuMemFree_v2(a), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 3 * gran);
    CHECK_EQ_INT(cuMemFree_v2(b), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 2 * gran);
    CHECK_EQ_INT(cuMemFree_v2(big), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0), base);

    /* a pool grows by whole pages */
    CUstream s;
    CUmemoryPool pool;
    REQUIRE_EQ_INT(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuMemAllocAsync(&a, 1, s), CUDA_SUCCESS);
    uint64_t reserved = 0;
    CHECK_EQ_INT(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved),
                 CUDA_SUCCESS);
    CHECK_EQ_U64(reserved, gran);
    CHECK_EQ_U64(held(0) - base, gran);
    CHECK_EQ_INT(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    CHECK_EQ_INT(cuStreamSynchronize(s), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0), base);
    CHECK_EQ_INT(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

/* A context costs what the model's does (H100: 480 MiB), not a token 32 MiB. */
TEST(a_context_costs_the_models_memory)
{
    REQUIRE(setup());
    uint64_t base = held(1);
    CUcontext c;
    REQUIRE_EQ_INT(cuCtxCreate_v2(&c, 0, 1), CUDA_SUCCESS);
    CHECK_EQ_U64(held(1) - base, 480 * MiB);
    CHECK_EQ_INT(cuCtxDestroy_v2(c), CUDA_SUCCESS);
    CHECK_EQ_U64(held(1), base);
    REQUIRE_EQ_INT(cuCtxSetCurrent(ctx0), CUDA_SUCCESS);
}

/* ---- 5. managed memory ---- */

/* Managed memory is charged for what is on the GPU: nothing at allocation, pages as they are
 * touched (a copy or memset, a kernel given a pointer into it, a prefetch to the device), and
 * more than the GPU holds may be allocated ("device memory oversubscription is possible" when
 * CONCURRENT_MANAGED_ACCESS is 1). */
TEST(managed_memory_is_charged_when_resident)
{
    REQUIRE(setup());
    int cma = 0;
    REQUIRE_EQ_INT(cuDeviceGetAttribute(&cma, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0),
                   CUDA_SUCCESS);
    CHECK_EQ_INT(cma, 1);
    uint64_t base = held(0);
    size_t fr0 = 0, tot = 0;
    REQUIRE_EQ_INT(cuMemGetInfo_v2(&fr0, &tot), CUDA_SUCCESS);

    CUdeviceptr m, huge;
    REQUIRE_EQ_INT(cuMemAllocManaged(&m, 64 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0), base); /* untouched: nothing on the GPU */
    /* oversubscription: more than the whole GPU */
    REQUIRE_EQ_INT(cuMemAllocManaged(&huge, tot + 20 * GiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0), base);

    /* a memset of 3 MiB at 1 MiB touches pages 0..1 */
    CHECK_EQ_INT(cuMemsetD8_v2(m + MiB, 7, 3 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 4 * MiB);
    /* prefetched to the device: those pages come too; back to the CPU: they go */
    CUstream s;
    REQUIRE_EQ_INT(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemPrefetchAsync(m + 8 * MiB, 8 * MiB, 0, s), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 12 * MiB);
    CHECK_EQ_INT(cuMemPrefetchAsync(m, 16 * MiB, CU_DEVICE_CPU, s), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0), base);
    /* a kernel given a pointer into it may touch all of it */
    CUmodule mod;
    CUfunction f;
    REQUIRE_EQ_INT(cuModuleLoadData(&mod, nop_ptx), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuModuleGetFunction(&f, mod, "use"), CUDA_SUCCESS);
    CUdeviceptr arg = m + 5;
    void *params[] = {&arg};
    CHECK_EQ_INT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, params, NULL), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 64 * MiB);
    /* the host sees what the GPU wrote (one memory, as with managed memory) */
    CHECK_EQ_INT(((volatile unsigned char *)(uintptr_t)m)[MiB], 7);
    /* touching the oversubscribed allocation fills the GPU and no more: never an error */
    size_t fr = 0;
    REQUIRE_EQ_INT(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemPrefetchAsync(huge, tot + 20 * GiB, 0, s), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U64(fr, 0);
    CHECK_EQ_INT(cuMemFree_v2(huge), CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemFree_v2(m), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0), base);
    REQUIRE_EQ_INT(cuMemGetInfo_v2(&fr, &tot), CUDA_SUCCESS);
    CHECK_EQ_U64(fr, fr0);
    CHECK_EQ_INT(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    CHECK_EQ_INT(cuModuleUnload(mod), CUDA_SUCCESS);
}

/* Pages advised to stay on the CPU and mapped for the device (cuMemAdvise
 * SET_PREFERRED_LOCATION = CPU + SET_ACCESSED_BY = the device) are used where they are: a touch
 * does not bring them to the GPU; an explicit prefetch still does. */
TEST(managed_pages_advised_to_the_cpu_stay_there)
{
    REQUIRE(setup());
    uint64_t base = held(0);
    CUdeviceptr m;
    REQUIRE_EQ_INT(cuMemAllocManaged(&m, 16 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    /* the upper 8 MiB: preferred on the CPU, accessed by GPU 0 */
    CHECK_EQ_INT(
        cuMemAdvise(m + 8 * MiB, 8 * MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU),
        CUDA_SUCCESS);
    CUmemLocation gpu0 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CHECK_EQ_INT(cuMemAdvise_v2(m + 8 * MiB, 8 * MiB, CU_MEM_ADVISE_SET_ACCESSED_BY, gpu0),
                 CUDA_SUCCESS);
    CUmodule mod;
    CUfunction f;
    REQUIRE_EQ_INT(cuModuleLoadData(&mod, nop_ptx), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuModuleGetFunction(&f, mod, "use"), CUDA_SUCCESS);
    void *params[] = {&m};
    CHECK_EQ_INT(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    CHECK_EQ_INT(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 8 * MiB); /* the lower half only */
    CHECK_EQ_INT(cuMemsetD8_v2(m + 12 * MiB, 1, MiB), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 8 * MiB);
    /* preferred location alone (no mapping for the device) does not keep a page off the GPU */
    CHECK_EQ_INT(cuMemAdvise(m + 8 * MiB, 2 * MiB, CU_MEM_ADVISE_UNSET_ACCESSED_BY, 0),
                 CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemsetD8_v2(m + 8 * MiB, 1, 8 * MiB), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 10 * MiB);
    /* a prefetch to the device moves advised pages too */
    CHECK_EQ_INT(cuMemPrefetchAsync(m, 16 * MiB, 0, NULL), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0) - base, 16 * MiB);
    CHECK_EQ_INT(cuMemFree_v2(m), CUDA_SUCCESS);
    CHECK_EQ_U64(held(0), base);
    CHECK_EQ_INT(cuModuleUnload(mod), CUDA_SUCCESS);
}

/* cuFuncGetParamInfo (CUDA 12.4): each parameter's offset and size in the device-side layout,
 * from the PTX parameter list; an index past the last parameter is INVALID_VALUE. */
TEST(kernel_parameter_layout)
{
    REQUIRE(setup());
    static const char ptx[] =
        ".version 7.0\n.target sm_70\n.address_size 64\n"
        ".visible .entry k(.param .u32 a, .param .u64 .ptr .global .align 1 p,"
        " .param .align 16 .b8 s[20], .param .u8 c)\n{\n ret;\n}\n";
    CUmodule mod;
    CUfunction f;
    REQUIRE_EQ_INT(cuModuleLoadData(&mod, ptx), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuModuleGetFunction(&f, mod, "k"), CUDA_SUCCESS);
    static const size_t want_off[] = {0, 8, 16, 36}, want_size[] = {4, 8, 20, 1};
    for (size_t i = 0; i < 4; i++) {
        size_t off = 99, size = 99;
        CHECK_EQ_INT(cuFuncGetParamInfo(f, i, &off, &size), CUDA_SUCCESS);
        CHECK_EQ_U64(off, want_off[i]);
        CHECK_EQ_U64(size, want_size[i]);
    }
    size_t off = 0;
    CHECK_EQ_INT(cuFuncGetParamInfo(f, 1, &off, NULL), CUDA_SUCCESS);
    CHECK_EQ_U64(off, 8);
    CHECK_EQ_INT(cuFuncGetParamInfo(f, 4, &off, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ_INT(cuModuleUnload(mod), CUDA_SUCCESS);
}

/* ---- 8. cooperative launches ---- */

TEST(cooperative_grids_must_fit_on_the_gpu_at_once)
{
    REQUIRE(setup());
    CUmodule mod;
    CUfunction f;
    REQUIRE_EQ_INT(cuModuleLoadData(&mod, nop_ptx), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuModuleGetFunction(&f, mod, "nop"), CUDA_SUCCESS);
    int per_sm = 0, sms = 0, coop = 0;
    REQUIRE_EQ_INT(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 1024, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
                   CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0),
                   CUDA_SUCCESS);
    CHECK_EQ_INT(coop, 1);
    CHECK_EQ_INT(sms, 132);
    CHECK(per_sm >= 1);
    unsigned limit = (unsigned)(per_sm * sms);
    const CUresult BIG = CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;

    CHECK_EQ_INT(cuLaunchCooperativeKernel(f, limit, 1, 1, 1024, 1, 1, 0, NULL, NULL),
                 CUDA_SUCCESS);
    CHECK_EQ_INT(cuLaunchCooperativeKernel(f, limit + 1, 1, 1, 1024, 1, 1, 0, NULL, NULL), BIG);
    CHECK_EQ_INT(cuLaunchCooperativeKernel(f, 1000000, 1, 1, 1024, 1, 1, 0, NULL, NULL), BIG);
    CHECK_EQ_INT(cuLaunchCooperativeKernel(f, limit / 2 + 1, 2, 1, 1024, 1, 1, 0, NULL, NULL), BIG);
    /* an ordinary launch of the same grid is fine: blocks wait for room */
    CHECK_EQ_INT(cuLaunchKernel(f, 1000000, 1, 1, 1024, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);

    /* the same rule through cuLaunchKernelEx's cooperative attribute */
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof(attr));
    attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = limit + 1;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 1024;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CHECK_EQ_INT(cuLaunchKernelEx(&cfg, f, NULL, NULL), BIG);
    cfg.gridDimX = limit;
    CHECK_EQ_INT(cuLaunchKernelEx(&cfg, f, NULL, NULL), CUDA_SUCCESS);
    CHECK_EQ_INT(cuCtxSynchronize(), CUDA_SUCCESS);
    CHECK_EQ_INT(cuModuleUnload(mod), CUDA_SUCCESS);
}

/* ---- 7. sampled utilization ---- */

/* NVML reports utilization per sample period (the emulator's: 1 s by default, aligned on
 * multiples of it): the device's rate over the last period, and one sample per process busy in
 * it, stamped with a CPU timestamp. 200 ms of work inside one period reads 20 %, also after the
 * work has ended, until the next period completes. */
TEST(utilization_is_sampled_per_period)
{
    REQUIRE(setup());
    const uint64_t P = 1000000000ull, work = 200000000ull;
    nvmlDevice_t n;
    REQUIRE_EQ_INT(nvmlDeviceGetHandleByIndex_v2(0, &n), NVML_SUCCESS);
    bool measured = false;
    /* a few tries: the window below (b + 1.3 s .. b + 2 s) can be missed on a loaded machine */
    for (int attempt = 0; attempt < 5 && !measured; attempt++) {
        uint64_t b = (mono_ns() / P + 1) * P; /* the next period boundary */
        REQUIRE(TAP_WAIT_UNTIL(mono_ns() >= b + 10000000ull, 3000));
        uint64_t start, end;
        REQUIRE_EQ_INT(emu_state_submit(st, 0, 0, work, &start, &end), 0);
        if (end > b + P)
            continue; /* queued behind other work: try the next period */
        REQUIRE(TAP_WAIT_UNTIL(mono_ns() >= b + P + 300000000ull, 3000));
        nvmlUtilization_t u = {0, 0};
        /* NVML wants a buffer of its own sample buffer's size at least (72 on an H200) */
        static nvmlProcessUtilizationSample_t smp[256];
        unsigned cnt = 256;
        nvmlReturn_t r1 = nvmlDeviceGetUtilizationRates(n, &u);
        nvmlReturn_t r2 = nvmlDeviceGetProcessUtilization(n, smp, &cnt, 0);
        if (mono_ns() >= b + 2 * P)
            continue; /* the period after has completed meanwhile */
        measured = true;
        CHECK_EQ_INT(r1, NVML_SUCCESS);
        CHECK_EQ_INT(u.gpu, 20);
        REQUIRE_EQ_INT(r2, NVML_SUCCESS);
        REQUIRE_EQ_INT(cnt, 1);
        CHECK_EQ_INT(smp[0].pid, getpid());
        CHECK_EQ_INT(smp[0].smUtil, 20);
        /* stamped at the period's end (CPU µs), and not returned again past that stamp */
        struct timespec rt;
        clock_gettime(CLOCK_REALTIME, &rt);
        uint64_t now_us = (uint64_t)rt.tv_sec * 1000000ull + (uint64_t)rt.tv_nsec / 1000ull;
        uint64_t age_us = (mono_ns() - (b + P)) / 1000ull;
        CHECK(smp[0].timeStamp <= now_us - age_us + 5000 &&
              smp[0].timeStamp + 5000 >= now_us - age_us);
        cnt = 256;
        CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(n, smp, &cnt, smp[0].timeStamp),
                     NVML_ERROR_NOT_FOUND);
    }
    CHECK(measured);
}

int main(int argc, char **argv)
{
    snprintf(state_path, sizeof(state_path), "%s/fidelity.state", tap_tmpdir());
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 2;
    if (emu_state_create(state_path, &cfg) < 0 || emu_state_open(state_path, &st) < 0) {
        fprintf(stderr, "cannot make the emulated machine at %s\n", state_path);
        return 1;
    }
    setenv("ACCEL_EMU_STATE", state_path, 1);
    unsetenv("ACCEL_EMU_CTX_OVERHEAD");
    int r = tap_main(argc, argv);
    emu_state_close(st);
    return r;
}
