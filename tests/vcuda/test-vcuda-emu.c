/* test-vcuda-emu.c — libvcuda.so against the emulated driver, reached the way
 * NVIDIA's runtime reaches a driver: dlopen("libcuda.so.1"), dlsym of
 * cuGetProcAddress_v2, then every entry point by name, CUDA version and flags
 * (per-thread-stream _ptsz variants included). Nothing here links libcuda, so
 * every call below went through our dlsym/cuGetProcAddress interception.
 *
 * Run without VCUDA_TEST_CHILD, the program is its own launcher: it creates an
 * emulated machine (1 GPU) and a temp dir, sets the quota environment,
 * LD_LIBRARY_PATH (the emulator) and LD_PRELOAD (the ASan runtime first in the
 * sanitizer build, then libvcuda.so) and re-executes itself under them. Cases
 * that need other processes (racers, kill -9, other configs) run this binary
 * again with --role. */
#define _GNU_SOURCE
#include "cuda_api.h"
#include "nvml_api.h"
#include "state.h"
#include "tap.h"
#include "vcuda-launch.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)

/* The quota holds CONTEXTS contexts (ours and the 8 racers') and WORK bytes besides: 64 MiB with
 * the emulator's 4 MiB contexts. A real GPU's context costs hundreds of MiB (518 MiB on an H200,
 * driver 580), and so does an emulated model's: the launcher measures one first and sizes the
 * quota to it (vcuda-launch.h). */
#define WORK (28 * MiB)
#define CONTEXTS 9
/* What the single-process cases work in: 64 MiB less one 4 MiB context, as on the emulator.
 * Where more is free, squeeze() takes the rest first. */
#define WORK_FREE (60 * MiB)
/* VCUDA_CONTEXT_MEMORY as the launcher sets it: reserved before a context exists, and charged
 * when its creation is seen to take nothing */
#define CTX_CONFIGURED (4 * MiB)

static uint64_t quota_total; /* bytes: VCUDA_MEMORY_LIMIT as the launcher set it */
static uint64_t ctx_cost;    /* what our primary context took off the quota (setup) */

/* ---- the runtime's way in ------------------------------------------------ */

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);
static void *libcuda;
static getproc_fn getproc;

#define FN(n) __typeof__(n) *n
static struct {
    FN(cuInit);
    FN(cuDeviceGet);
    FN(cuDevicePrimaryCtxRetain);
    FN(cuDevicePrimaryCtxRelease_v2);
    FN(cuCtxSetCurrent);
    FN(cuCtxCreate_v2);
    FN(cuCtxDestroy_v2);
    FN(cuMemGetInfo_v2);
    FN(cuDeviceTotalMem_v2);
    FN(cuMemAlloc_v2);
    FN(cuMemFree_v2);
    FN(cuMemAllocPitch_v2);
    FN(cuMemAllocManaged);
    FN(cuMemAllocAsync);
    FN(cuMemAllocAsync_ptsz);
    FN(cuMemFreeAsync);
    FN(cuStreamSynchronize);
    FN(cuMemCreate);
    FN(cuMemRelease);
    FN(cuMemGetAllocationGranularity);
    FN(cuArrayCreate_v2);
    FN(cuArray3DCreate_v2);
    FN(cuArrayDestroy);
    FN(cuMipmappedArrayCreate);
    FN(cuMipmappedArrayDestroy);
    FN(cuIpcGetMemHandle);
    FN(cuIpcOpenMemHandle_v2);
    FN(cuIpcCloseMemHandle);
    FN(cuDeviceGetMemPool);
    FN(cuMemPoolSetAttribute);
    FN(cuMemPoolGetAttribute);
    FN(cuMemPoolTrimTo);
    FN(cuMemPoolCreate);
    FN(cuMemPoolDestroy);
    FN(cuMemAllocFromPoolAsync);
    FN(cuMemAddressReserve);
    FN(cuMemAddressFree);
    FN(cuMemMap);
    FN(cuMemUnmap);
    FN(cuMemExportToShareableHandle);
    FN(cuMemImportFromShareableHandle);
    FN(cuStreamCreate);
    FN(cuStreamDestroy_v2);
    FN(cuStreamBeginCapture_v2);
    FN(cuStreamEndCapture);
    FN(cuGraphInstantiateWithFlags);
    FN(cuGraphUpload);
    FN(cuGraphLaunch);
    FN(cuGraphExecDestroy);
    FN(cuGraphDestroy);
    FN(cuDeviceGraphMemTrim);
    FN(cuDeviceGetGraphMemAttribute);
} cu;

static void *lookup(const char *name, int version, cuuint64_t flags)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (getproc(name, &p, version, flags, &st) != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS)
        return NULL;
    return p;
}

#define GET(field, name, ver, flags) (cu.field = (__typeof__(cu.field))lookup(name, ver, flags))

static void load(void)
{
    if (getproc)
        return;
    libcuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!libcuda)
        tap_skip_all("libcuda.so.1 (the emulator) cannot be loaded");
    getproc = (getproc_fn)dlsym(libcuda, "cuGetProcAddress_v2");
    if (!getproc)
        tap_skip_all("no cuGetProcAddress_v2");
    GET(cuInit, "cuInit", 12000, 0);
    GET(cuDeviceGet, "cuDeviceGet", 12000, 0);
    GET(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 12000, 0);
    GET(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 12000, 0);
    GET(cuCtxSetCurrent, "cuCtxSetCurrent", 12000, 0);
    GET(cuCtxCreate_v2, "cuCtxCreate", 11000, 0);
    GET(cuCtxDestroy_v2, "cuCtxDestroy", 12000, 0);
    GET(cuMemGetInfo_v2, "cuMemGetInfo", 12000, 0);
    GET(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 12000, 0);
    GET(cuMemAlloc_v2, "cuMemAlloc", 12000, 0);
    GET(cuMemFree_v2, "cuMemFree", 12000, 0);
    GET(cuMemAllocPitch_v2, "cuMemAllocPitch", 12000, 0);
    GET(cuMemAllocManaged, "cuMemAllocManaged", 12000, 0);
    GET(cuMemAllocAsync, "cuMemAllocAsync", 12000, 0);
    GET(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 12000,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    GET(cuMemFreeAsync, "cuMemFreeAsync", 12000, 0);
    GET(cuStreamSynchronize, "cuStreamSynchronize", 12000, 0);
    GET(cuMemCreate, "cuMemCreate", 12000, 0);
    GET(cuMemRelease, "cuMemRelease", 12000, 0);
    GET(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 12000, 0);
    GET(cuArrayCreate_v2, "cuArrayCreate", 12000, 0);
    GET(cuArray3DCreate_v2, "cuArray3DCreate", 12000, 0);
    GET(cuArrayDestroy, "cuArrayDestroy", 12000, 0);
    GET(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 12000, 0);
    GET(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 12000, 0);
    GET(cuIpcGetMemHandle, "cuIpcGetMemHandle", 12000, 0);
    GET(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 12000, 0);
    GET(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 12000, 0);
    GET(cuDeviceGetMemPool, "cuDeviceGetMemPool", 12000, 0);
    GET(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 12000, 0);
    GET(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 12000, 0);
    GET(cuMemPoolTrimTo, "cuMemPoolTrimTo", 12000, 0);
    GET(cuMemPoolCreate, "cuMemPoolCreate", 12000, 0);
    GET(cuMemPoolDestroy, "cuMemPoolDestroy", 12000, 0);
    GET(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 12000, 0);
    GET(cuMemAddressReserve, "cuMemAddressReserve", 12000, 0);
    GET(cuMemAddressFree, "cuMemAddressFree", 12000, 0);
    GET(cuMemMap, "cuMemMap", 12000, 0);
    GET(cuMemUnmap, "cuMemUnmap", 12000, 0);
    GET(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 12000, 0);
    GET(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 12000, 0);
    GET(cuStreamCreate, "cuStreamCreate", 12000, 0);
    GET(cuStreamDestroy_v2, "cuStreamDestroy", 12000, 0);
    GET(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 12000, 0);
    GET(cuStreamEndCapture, "cuStreamEndCapture", 12000, 0);
    GET(cuGraphInstantiateWithFlags, "cuGraphInstantiate", 12000, 0);
    GET(cuGraphUpload, "cuGraphUpload", 12000, 0);
    GET(cuGraphLaunch, "cuGraphLaunch", 12000, 0);
    GET(cuGraphExecDestroy, "cuGraphExecDestroy", 12000, 0);
    GET(cuGraphDestroy, "cuGraphDestroy", 12000, 0);
    GET(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 12000, 0);
    GET(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", 12000, 0);
}

static CUcontext ctx;
static void pool_reset(void);

static uint64_t quota_free(void)
{
    size_t f = 0, t = 0;
    if (cu.cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS)
        return UINT64_MAX;
    return f;
}

/* Primary context current on this thread, as the runtime does it. The first call creates it
 * and measures its cost as a user sees it: the quota less what is free right after. */
static void setup(void)
{
    load();
    if (ctx) {
        REQUIRE_EQ_INT(cu.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        pool_reset();
        return;
    }
    REQUIRE(cu.cuInit && cu.cuDevicePrimaryCtxRetain && cu.cuCtxSetCurrent);
    REQUIRE_EQ_INT(cu.cuInit(0), CUDA_SUCCESS);
    CUdevice dev;
    REQUIRE_EQ_INT(cu.cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    uint64_t f = quota_free();
    REQUIRE(f != UINT64_MAX && f <= quota_total);
    ctx_cost = quota_total - f;
}

/* Takes all but WORK_FREE of what is free with one allocation (none when no more is free), so
 * a case works in the same room whatever a context costs: fills stay the emulator's sizes and
 * threads meet the quota as often. Returns it for unsqueeze. */
static CUdeviceptr squeeze(void)
{
    uint64_t f = quota_free();
    CUdeviceptr b = 0;
    if (f == UINT64_MAX || f <= WORK_FREE + 512)
        return 0;
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&b, (f - WORK_FREE) / 512 * 512), CUDA_SUCCESS);
    return b;
}

static void unsqueeze(CUdeviceptr b)
{
    if (b)
        CHECK_EQ_INT(cu.cuMemFree_v2(b), CUDA_SUCCESS);
}

/* VCUDA_TEST_REAL=1 (tests/gpu/vcuda-memory.sh): the same cases on a real
 * driver; checks against the emulator's own books are left out there. */
static bool real_gpu(void)
{
    const char *v = getenv("VCUDA_TEST_REAL");
    return v && *v == '1';
}

/* Checks only the emulator can answer. */
#define EMU_CHECK_EQ_U64(a, b)                                                                     \
    do {                                                                                           \
        if (!real_gpu())                                                                           \
            CHECK_EQ_U64(a, b);                                                                    \
    } while (0)
#define EMU_CHECK_EQ_INT(a, b)                                                                     \
    do {                                                                                           \
        if (!real_gpu())                                                                           \
            CHECK_EQ_INT(a, b);                                                                    \
    } while (0)

static struct emu_state *emu_state(void)
{
    static struct emu_state *st;
    if (!st && emu_state_open(getenv("ACCEL_EMU_STATE"), &st) < 0)
        return NULL;
    return st;
}

/* What the emulator itself has charged on GPU 0, over all processes:
 * independent of libvcuda's own bookkeeping. */
static uint64_t emu_used(void)
{
    struct emu_state *st = emu_state();
    if (!st)
        return UINT64_MAX;
    uint64_t used = 0, total = 0;
    emu_state_mem_info(st, 0, &used, &total);
    return used;
}

/* What one context costs on the emulated GPU 0: the launcher's ACCEL_EMU_CTX_OVERHEAD (a
 * number of MiB, "4Mi") when set, else the model's (docs/emulator-cuda.md, "Context cost"). */
static uint64_t emu_ctx_cost(void)
{
    const char *o = getenv("ACCEL_EMU_CTX_OVERHEAD");
    if (o) {
        char *end;
        uint64_t v = strtoull(o, &end, 10);
        return strcmp(end, "Mi") == 0 ? v * MiB : UINT64_MAX;
    }
    struct emu_state *st = emu_state();
    return st ? emu_state_gpu(st, 0)->ctx_cost : UINT64_MAX;
}

/* What the device's default pool holds now, as the driver says (RESERVED_MEM_CURRENT). */
static uint64_t pool_reserved(CUmemoryPool pool)
{
    uint64_t v = 0;
    if (!pool && cu.cuDeviceGetMemPool(&pool, 0) != CUDA_SUCCESS)
        return UINT64_MAX;
    if (!cu.cuMemPoolGetAttribute ||
        cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
        return UINT64_MAX;
    return v;
}

/* The chunk the emulated pools reserve in: the launcher's ACCEL_EMU_POOL_GRANULARITY ("NMi"),
 * else the emulator's default, whole 2 MiB pages (docs/emulator-cuda.md, "Pools"). */
static uint64_t emu_pool_gran(void)
{
    const char *g = getenv("ACCEL_EMU_POOL_GRANULARITY");
    if (!g)
        return 2 * MiB;
    char *end;
    uint64_t v = strtoull(g, &end, 10);
    return strcmp(end, "Mi") == 0 ? v * MiB : UINT64_MAX;
}

static uint64_t round_up(uint64_t n, uint64_t unit)
{
    return (n + unit - 1) / unit * unit;
}

/* Every case starts from a default pool that keeps nothing (release threshold 0, trimmed), as a
 * fresh process has it: a case that stopped halfway leaves the next one no pool memory. */
static void pool_reset(void)
{
    CUmemoryPool pool = NULL;
    uint64_t zero = 0;
    if (cu.cuDeviceGetMemPool && cu.cuDeviceGetMemPool(&pool, 0) == CUDA_SUCCESS) {
        cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
        cu.cuStreamSynchronize(NULL);
        cu.cuMemPoolTrimTo(pool, 0);
    }
}

static bool in_lib(void *fn, const char *lib_part, const char **ret_sym)
{
    Dl_info info;
    if (!fn || !dladdr(fn, &info) || !info.dli_fname)
        return false;
    if (ret_sym)
        *ret_sym = info.dli_sname;
    return strstr(info.dli_fname, lib_part) != NULL;
}

/* ---- interception -------------------------------------------------------- */

TEST(dlsym_of_the_driver_handle_is_intercepted)
{
    load();
    const char *sym = NULL;
    CHECK(in_lib((void *)getproc, "libvcuda", &sym));
    CHECK_EQ_STR(sym, "cuGetProcAddress_v2");
    /* by handle, and through the default scope */
    void *p = dlsym(libcuda, "cuMemAlloc_v2");
    CHECK(in_lib(p, "libvcuda", &sym));
    CHECK_EQ_STR(sym, "cuMemAlloc_v2");
    /* not hooked: the driver's own */
    p = dlsym(libcuda, "cuStreamQuery");
    CHECK(in_lib(p, "libcuda", &sym));
    /* unknown names stay unknown */
    CHECK(dlsym(libcuda, "cuNoSuchFunction") == NULL);
}

static const struct {
    const char *name;
    int version;
    cuuint64_t flags;
    const char *want; /* symbol the caller must end up in */
    bool ours;        /* in libvcuda (hooked) or in the driver */
} lookups[] = {
    {"cuMemAlloc", 12000, 0, "cuMemAlloc_v2", true},
    {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2", true},
    {"cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2", true},
    {"cuMemAllocAsync", 12000, 0, "cuMemAllocAsync", true},
    {"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
     "cuMemAllocAsync_ptsz", true},
    {"cuMemAllocFromPoolAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
     "cuMemAllocFromPoolAsync_ptsz", true},
    {"cuMemFreeAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemFreeAsync_ptsz",
     true},
    {"cuLaunchKernel", 12000, 0, "cuLaunchKernel", true},
    {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz",
     true},
    {"cuGraphLaunch", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuGraphLaunch_ptsz",
     true},
    {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4", true},
    {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3", true},
    {"cuCtxCreate", 11000, 0, "cuCtxCreate_v2", true},
    {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2", true},
    {"cuArray3DCreate", 12000, 0, "cuArray3DCreate_v2", true},
    {"cuDevicePrimaryCtxRelease", 12000, 0, "cuDevicePrimaryCtxRelease_v2", true},
    /* copies, memsets and prefetches that may bring managed memory to the device */
    {"cuMemcpyHtoD", 12000, 0, "cuMemcpyHtoD_v2", true},
    {"cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds",
     true},
    {"cuMemPrefetchAsync", 12000, 0, "cuMemPrefetchAsync", true},
    {"cuMemPrefetchAsync", 12020, 0, "cuMemPrefetchAsync_v2", true},
    {"cuMemsetD8Async", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
     "cuMemsetD8Async_ptsz", true},
    {"cuMemcpy2D", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpy2D_v2_ptds",
     true},
    {"cuStreamQuery", 12000, 0, "cuStreamQuery", false},
    /* synchronizations: where pools give memory back */
    {"cuStreamSynchronize", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
     "cuStreamSynchronize_ptsz", true},
    {"cuStreamSynchronize", 12000, 0, "cuStreamSynchronize", true},
    {"cuCtxSynchronize", 12000, 0, "cuCtxSynchronize", true},
    {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2", true},
    {"cuEventSynchronize", 12000, 0, "cuEventSynchronize", true},
    {"cuInit", 12000, 0, "cuInit", false},
};

TEST(get_proc_address_follows_the_drivers_variant)
{
    load();
    for (size_t i = 0; i < sizeof(lookups) / sizeof(lookups[0]); i++) {
        void *p = lookup(lookups[i].name, lookups[i].version, lookups[i].flags);
        const char *sym = NULL;
        bool ours = in_lib(p, "libvcuda", &sym);
        if (!p || ours != lookups[i].ours || !sym || strcmp(sym, lookups[i].want) != 0)
            tap_fail(__FILE__, __LINE__, "%s@%d flags %llu: got %s in %s, want %s in %s",
                     lookups[i].name, lookups[i].version, (unsigned long long)lookups[i].flags,
                     sym ? sym : "(null)", ours ? "libvcuda" : "the driver", lookups[i].want,
                     lookups[i].ours ? "libvcuda" : "the driver");
    }
    /* the v1 entry point (4 arguments) is hooked the same way */
    void *v1 = dlsym(libcuda, "cuGetProcAddress");
    CHECK(in_lib(v1, "libvcuda", NULL));
    void *p = NULL;
    CHECK_EQ_INT(
        ((CUresult(*)(const char *, void **, int, cuuint64_t))v1)("cuMemAlloc", &p, 12000, 0),
        CUDA_SUCCESS);
    const char *sym = NULL;
    CHECK(in_lib(p, "libvcuda", &sym));
    CHECK_EQ_STR(sym, "cuMemAlloc_v2");
    /* unknown symbols: the driver's answer, untouched; no answer is no error, a NULL pointer
     * with the reason in the status (NVIDIA's driver 580.159.04 answers so) */
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    p = (void *)1;
    CHECK_EQ_INT(getproc("cuNoSuchThing", &p, 12000, 0, &st), CUDA_SUCCESS);
    CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CHECK(p == NULL);
    p = (void *)1;
    CHECK_EQ_INT(getproc("cuNoSuchThing", &p, 12000, 0, NULL), CUDA_SUCCESS);
    CHECK(p == NULL);
    p = (void *)1;
    CHECK_EQ_INT(getproc("cuCtxCreate", &p, 1000, 0, &st), CUDA_SUCCESS);
    CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK(p == NULL);
    /* a version above the driver's: INVALID_VALUE, nothing written */
    p = (void *)1;
    st = CU_GET_PROC_ADDRESS_SUCCESS;
    CHECK_EQ_INT(getproc("cuMemAlloc", &p, 99990, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CHECK(p == (void *)1);
    CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SUCCESS);
    /* the 4-argument form has no status: NOT_FOUND, the pointer left as it was */
    CHECK_EQ_INT(
        ((CUresult(*)(const char *, void **, int, cuuint64_t))v1)("cuNoSuchThing", &p, 12000, 0),
        CUDA_ERROR_NOT_FOUND);
    CHECK(p == (void *)1);
}

/* Driver entry points our header does not declare; the runtime asks for
 * these too (most resolve to nothing on the emulator). */
static const char *const more_names[] = {
    "cuDeviceGetLuid",
    "cuDeviceGetNvSciSyncAttributes",
    "cuDeviceGetTexture1DLinearMaxWidth",
    "cuDeviceGetExecAffinitySupport",
    "cuFlushGPUDirectRDMAWrites",
    "cuDeviceGetP2PAttribute",
    "cuCtxResetPersistingL2Cache",
    "cuCtxGetExecAffinity",
    "cuCtxGetId",
    "cuCtxGetSharedMemConfig",
    "cuCtxSetSharedMemConfig",
    "cuCtxAttach",
    "cuCtxDetach",
    "cuCtxRecordEvent",
    "cuCtxWaitEvent",
    "cuModuleGetLoadingMode",
    "cuModuleGetTexRef",
    "cuModuleGetSurfRef",
    "cuLinkCreate",
    "cuLinkAddData",
    "cuLinkAddFile",
    "cuLinkComplete",
    "cuLinkDestroy",
    "cuMemHostGetFlags",
    "cuMemAdvise",
    "cuMemPrefetchAsync",
    "cuMemRangeGetAttribute",
    "cuMemRangeGetAttributes",
    "cuMemGetHandleForAddressRange",
    "cuMemMapArrayAsync",
    "cuMemPoolExportToShareableHandle",
    "cuMemPoolImportFromShareableHandle",
    "cuMemPoolExportPointer",
    "cuMemPoolImportPointer",
    "cuMemPoolGetAccess",
    "cuStreamGetId",
    "cuStreamAttachMemAsync",
    "cuStreamCopyAttributes",
    "cuStreamGetAttribute",
    "cuStreamSetAttribute",
    "cuStreamWaitValue32",
    "cuStreamWaitValue64",
    "cuStreamWriteValue32",
    "cuStreamWriteValue64",
    "cuStreamBatchMemOp",
    "cuStreamGetCaptureInfo",
    "cuStreamUpdateCaptureDependencies",
    "cuThreadExchangeStreamCaptureMode",
    "cuImportExternalSemaphore",
    "cuSignalExternalSemaphoresAsync",
    "cuWaitExternalSemaphoresAsync",
    "cuDestroyExternalSemaphore",
    "cuExternalMemoryGetMappedMipmappedArray",
    "cuFuncGetModule",
    "cuFuncGetName",
    "cuFuncSetSharedMemConfig",
    "cuFuncSetBlockShape",
    "cuLaunch",
    "cuLaunchGrid",
    "cuLaunchGridAsync",
    "cuParamSetSize",
    "cuParamSeti",
    "cuGraphClone",
    "cuGraphAddMemcpyNode",
    "cuGraphAddMemsetNode",
    "cuGraphAddHostNode",
    "cuGraphAddChildGraphNode",
    "cuGraphAddEmptyNode",
    "cuGraphAddEventRecordNode",
    "cuGraphAddEventWaitNode",
    "cuGraphAddMemAllocNode",
    "cuGraphAddMemFreeNode",
    "cuGraphGetNodes",
    "cuGraphGetRootNodes",
    "cuGraphGetEdges",
    "cuGraphNodeGetType",
    "cuGraphDestroyNode",
    "cuGraphExecKernelNodeSetParams",
    "cuGraphExecUpdate",
    "cuGraphKernelNodeGetParams",
    "cuGraphKernelNodeSetParams",
    "cuGraphDebugDotPrint",
    "cuUserObjectCreate",
    "cuUserObjectRetain",
    "cuUserObjectRelease",
    "cuGraphRetainUserObject",
    "cuGraphReleaseUserObject",
    "cuDeviceGraphMemTrim",
    "cuDeviceGetGraphMemAttribute",
    "cuDeviceSetGraphMemAttribute",
    "cuOccupancyMaxPotentialBlockSize",
    "cuOccupancyMaxPotentialBlockSizeWithFlags",
    "cuOccupancyAvailableDynamicSMemPerBlock",
    "cuOccupancyMaxPotentialClusterSize",
    "cuOccupancyMaxActiveClusters",
    "cuTexObjectCreate",
    "cuTexObjectDestroy",
    "cuTexObjectGetResourceDesc",
    "cuSurfObjectCreate",
    "cuSurfObjectDestroy",
    "cuTensorMapEncodeTiled",
    "cuTensorMapEncodeIm2col",
    "cuTensorMapReplaceAddress",
    "cuGraphicsUnregisterResource",
    "cuGraphicsMapResources",
    "cuGraphicsUnmapResources",
    "cuGraphicsResourceGetMappedPointer",
    "cuProfilerStart",
    "cuProfilerStop",
    "cuCoredumpGetAttribute",
    "cuLibraryGetGlobal",
    "cuLibraryGetManaged",
    "cuLibraryGetUnifiedFunction",
    "cuKernelGetAttribute",
    "cuKernelSetAttribute",
    "cuKernelSetCacheConfig",
    "cuMulticastCreate",
    "cuMulticastAddDevice",
    "cuMulticastBindMem",
    "cuMulticastUnbind",
    "cuMulticastGetGranularity",
    "cuGreenCtxCreate",
    "cuGreenCtxDestroy",
    "cuDevResourceGenerateDesc",
    "cuDeviceGetDevResource",
    "cuCheckpointProcessLock",
};

/* The runtime's start-up: every driver entry point by base name with flags 0
 * and per-thread (~440 lookups). Whatever resolves is ours exactly when the
 * symbol is hooked, and then the same variant the driver picked. The names come
 * from our CUDA header (src/gpu/cuda_api.h), versioned suffixes stripped. */
TEST(runtime_style_bulk_lookups)
{
    load();
    char path[1024];
    snprintf(path, sizeof(path), "%s/src/gpu/cuda_api.h", getenv("ACCEL_SOURCE_ROOT"));
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    char line[1024];
    static char names[1024][64];
    int n = 0;
    while (fgets(line, sizeof(line), f) && n < 1024) {
        char *p = strstr(line, "CUDAAPI cu");
        if (!p)
            continue;
        p += 8;
        size_t len = strcspn(p, "(");
        if (len >= 64)
            continue;
        char nm[64];
        memcpy(nm, p, len);
        nm[len] = '\0';
        static const char *const suffixes[] = {"_ptsz", "_ptds", "_v2", "_v3", "_v4"};
        for (int again = 0; again < 2; again++)
            for (size_t s = 0; s < sizeof(suffixes) / sizeof(suffixes[0]); s++) {
                size_t l = strlen(nm), sl = strlen(suffixes[s]);
                if (l > sl && strcmp(nm + l - sl, suffixes[s]) == 0)
                    nm[l - sl] = '\0';
            }
        bool dup = false;
        for (int i = 0; i < n && !dup; i++)
            dup = strcmp(names[i], nm) == 0;
        if (!dup)
            strcpy(names[n++], nm);
    }
    fclose(f);
    CHECK(n > 150);
    for (size_t i = 0; i < sizeof(more_names) / sizeof(more_names[0]) && n < 1024; i++)
        strcpy(names[n++], more_names[i]);
    int looked = 0, resolved = 0, hooked = 0;
    for (int i = 0; i < n; i++) {
        for (cuuint64_t flags = 0; flags <= 2; flags += 2) {
            looked++;
            void *p = lookup(names[i], 13000, flags);
            if (!p)
                continue;
            resolved++;
            const char *sym = NULL;
            bool ours = in_lib(p, "libvcuda", &sym);
            Dl_info info;
            /* whose symbol is it? ours must carry the same base name */
            if (ours) {
                hooked++;
                if (!sym || strncmp(sym, names[i], strlen(names[i])) != 0)
                    tap_fail(__FILE__, __LINE__, "%s → our %s", names[i], sym ? sym : "?");
            } else if (dladdr(p, &info) && info.dli_sname &&
                       dlsym(RTLD_DEFAULT, info.dli_sname) != NULL &&
                       in_lib(dlsym(libcuda, info.dli_sname), "libvcuda", NULL)) {
                /* the driver's pointer for a symbol we hook: interception missed */
                tap_fail(__FILE__, __LINE__, "%s (flags %llu) escaped as the driver's %s", names[i],
                         (unsigned long long)flags, info.dli_sname);
            }
        }
    }
    tap_diag("%d lookups, %d resolved, %d to our wrappers", looked, resolved, hooked);
    CHECK(looked >= 400);
    CHECK(resolved >= 250);
    CHECK(hooked >= 40);
}

/* ---- the quota ----------------------------------------------------------- */

TEST(mem_get_info_shows_the_quota)
{
    setup();
    size_t f = 0, t = 0;
    REQUIRE_EQ_INT(cu.cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    CHECK_EQ_U64(t, quota_total);
    size_t total = 0;
    REQUIRE_EQ_INT(cu.cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
    CHECK_EQ_U64(total, quota_total);
    /* the primary context's own memory is charged (setup measured it: quota - free), */
    CHECK(ctx_cost > 0);
    CHECK_EQ_U64(f, quota_total - ctx_cost);
    /* as much as the launcher's probe saw in another process: exactly on the emulator; a real
     * driver's measured context (docs/vcuda.md, "Context memory") may differ between processes */
    const char *pc = getenv("VCUDA_TEST_CTX_COST");
    uint64_t probed = pc ? strtoull(pc, NULL, 10) : 0;
    if (!real_gpu())
        CHECK_EQ_U64(ctx_cost, probed);
    tap_diag("a context costs %llu bytes here (the probe saw %llu), quota %llu",
             (unsigned long long)ctx_cost, (unsigned long long)probed,
             (unsigned long long)quota_total);
    /* and it is what the emulator charged for the context, its configured cost */
    EMU_CHECK_EQ_U64(emu_used(), ctx_cost);
    EMU_CHECK_EQ_U64(ctx_cost, emu_ctx_cost());
}

/* One allocation kind: fill exactly what is free, one more unit fails with
 * OUT_OF_MEMORY, freeing gives everything back, and a request one unit too
 * big fails without leaking. The emulator's own charge moves in step. */
enum kind { K_ALLOC, K_PITCH, K_MANAGED, K_ASYNC, K_ASYNC_PTSZ, K_VMM, K_ARRAY, K_ARRAY3D };

static size_t vmm_gran;

static CUresult kind_alloc(enum kind k, uint64_t bytes, uint64_t *ret_handle)
{
    CUdeviceptr p = 0;
    CUresult r;
    switch (k) {
    case K_ALLOC:
        r = cu.cuMemAlloc_v2(&p, bytes);
        break;
    case K_PITCH: {
        size_t pitch = 0;
        r = cu.cuMemAllocPitch_v2(&p, &pitch, 2048, bytes / 2048, 4);
        if (r == CUDA_SUCCESS && pitch != 2048)
            tap_fail(__FILE__, __LINE__, "pitch %zu", pitch);
        break;
    }
    case K_MANAGED:
        r = cu.cuMemAllocManaged(&p, bytes, 1);
        break;
    case K_ASYNC:
        r = cu.cuMemAllocAsync(&p, bytes, NULL);
        break;
    case K_ASYNC_PTSZ:
        r = cu.cuMemAllocAsync_ptsz(&p, bytes, NULL);
        break;
    case K_VMM: {
        CUmemAllocationProp prop = {0};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        CUmemGenericAllocationHandle h = 0;
        r = cu.cuMemCreate(&h, bytes, &prop, 0);
        p = h;
        break;
    }
    case K_ARRAY: {
        /* FLOAT x1, 4096 wide: 16 KiB rows; 4 rows: one 64 KiB page */
        CUDA_ARRAY_DESCRIPTOR d = {4096, bytes / (16 << 10), CU_AD_FORMAT_FLOAT, 1};
        CUarray a = NULL;
        r = cu.cuArrayCreate_v2(&a, &d);
        p = (CUdeviceptr)(uintptr_t)a;
        break;
    }
    case K_ARRAY3D: {
        /* FLOAT x1, 128 wide: 512-byte rows; 128 rows: 64 KiB per slice */
        CUDA_ARRAY3D_DESCRIPTOR d = {128, 128, bytes / (64 << 10), CU_AD_FORMAT_FLOAT, 1, 0};
        CUarray a = NULL;
        r = cu.cuArray3DCreate_v2(&a, &d);
        p = (CUdeviceptr)(uintptr_t)a;
        break;
    }
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    *ret_handle = p;
    return r;
}

static CUresult kind_free(enum kind k, uint64_t h)
{
    switch (k) {
    case K_ASYNC:
    case K_ASYNC_PTSZ: {
        CUresult r = cu.cuMemFreeAsync(h, NULL);
        if (r == CUDA_SUCCESS)
            r = cu.cuStreamSynchronize(NULL);
        return r;
    }
    case K_VMM:
        return cu.cuMemRelease(h);
    case K_ARRAY:
    case K_ARRAY3D:
        return cu.cuArrayDestroy((CUarray)(uintptr_t)h);
    default:
        return cu.cuMemFree_v2(h);
    }
}

static void async_at_quota(enum kind k);

static void exact_at_quota(enum kind k, uint64_t unit)
{
    if (k == K_ASYNC || k == K_ASYNC_PTSZ) {
        async_at_quota(k);
        return;
    }
    setup();
    CUdeviceptr ballast = squeeze();
    uint64_t free0 = quota_free();
    uint64_t emu0 = emu_used();
    REQUIRE(free0 != UINT64_MAX && free0 >= unit);
    uint64_t fill = free0 / unit * unit;
    uint64_t h = 0, h2 = 0;
    REQUIRE_EQ_INT(kind_alloc(k, fill, &h), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0 - fill);
    EMU_CHECK_EQ_U64(emu_used(), emu0 + fill);
    CHECK_EQ_INT(kind_alloc(k, unit, &h2), CUDA_ERROR_OUT_OF_MEMORY);
    EMU_CHECK_EQ_U64(emu_used(), emu0 + fill);
    CHECK_EQ_INT(kind_free(k, h), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
    EMU_CHECK_EQ_U64(emu_used(), emu0);
    CHECK_EQ_INT(kind_alloc(k, fill + unit, &h2), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ_U64(quota_free(), free0);
    /* what just failed fits once the rest is free again */
    REQUIRE_EQ_INT(kind_alloc(k, fill, &h), CUDA_SUCCESS);
    CHECK_EQ_INT(kind_free(k, h), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
    unsqueeze(ballast);
}

/* A stream-ordered allocation of bytes from pool (NULL: the device's, through kind k) when
 * free0 is free to the pool, which holds held0 and has live bytes handed out (in one block, or
 * none). It fits only if what the pool then reserves fits the quota: either it succeeds, the
 * pool holds no more than free0 and the quota charges what it holds; or it is refused with
 * OUT_OF_MEMORY and nothing more is kept, by the pool or the quota. On the emulator the outcome
 * is exact: the new block takes whole 2 MiB pages, the pool reserves its blocks in whole chunks
 * of its granularity (docs/emulator-cuda.md, "Pools"). */
static CUresult pool_try(enum kind k, CUmemoryPool pool, uint64_t bytes, uint64_t free0,
                         uint64_t held0, uint64_t live, CUdeviceptr *ret)
{
    CUdeviceptr p = 0;
    CUresult r = pool ? cu.cuMemAllocFromPoolAsync(&p, bytes, pool, NULL)
                      : kind_alloc(k, bytes, (uint64_t *)&p);
    uint64_t held = pool_reserved(pool);
    uint64_t emu_held =
        round_up(round_up(live, 2 * MiB) + round_up(bytes, 2 * MiB), emu_pool_gran());
    if (emu_held < held0)
        emu_held = held0;
    EMU_CHECK_EQ_INT(r, emu_held <= free0 && live + round_up(bytes, 512) <= free0
                            ? CUDA_SUCCESS
                            : CUDA_ERROR_OUT_OF_MEMORY);
    if (r == CUDA_SUCCESS) {
        CHECK_LE_U64(held, free0);
        EMU_CHECK_EQ_U64(held, emu_held);
        uint64_t charge = held > live + bytes ? held : live + bytes;
        CHECK_EQ_U64(quota_free(), charge >= free0 ? 0 : free0 - charge);
    } else {
        CHECK_EQ_INT(r, CUDA_ERROR_OUT_OF_MEMORY);
        CHECK_EQ_U64(held, held0);
        uint64_t charge = held0 > live ? held0 : live;
        CHECK_EQ_U64(quota_free(), charge >= free0 ? 0 : free0 - charge);
    }
    *ret = p;
    return r;
}

/* The largest allocation from a drained pool, in 2 MiB steps down from all of free0, whose pool
 * growth fits: on the emulator all of free0 when its chunks allow, else a whole number of
 * chunks; on a real GPU whatever the driver's chunks allow. Each refusal on the way is checked
 * to keep nothing. 0 when nothing fits. */
static uint64_t pool_fill(enum kind k, CUmemoryPool pool, uint64_t free0, CUdeviceptr *ret)
{
    uint64_t all = free0 / 512 * 512, fill = all;
    while (pool_try(k, pool, fill, free0, 0, 0, ret) != CUDA_SUCCESS) {
        if (fill <= 2 * MiB)
            return 0;
        fill = (fill - 1) / (2 * MiB) * (2 * MiB);
    }
    if (real_gpu() && fill != all)
        tap_diag("a stream-ordered fill with %llu free: %llu fit, the pool holds %llu",
                 (unsigned long long)free0, (unsigned long long)fill,
                 (unsigned long long)pool_reserved(pool));
    uint64_t g = emu_pool_gran();
    EMU_CHECK_EQ_U64(fill, round_up(all, g) <= free0 ? all : free0 / g * g);
    return fill;
}

/* Stream-ordered memory stops exactly where the pool's reservation meets the quota: what the
 * pool reserves (its RESERVED_MEM_CURRENT, in the driver's own chunks: the H200 took 64 MiB for
 * a 60 MiB allocation) never passes the quota, an allocation that would make it is refused and
 * leaves nothing behind, and freeing gives everything back (release threshold 0: at the
 * synchronization). */
static void async_at_quota(enum kind k)
{
    setup();
    CUdeviceptr ballast = squeeze();
    uint64_t free0 = quota_free(), emu0 = emu_used(), unit = 512;
    REQUIRE(free0 != UINT64_MAX && free0 >= 4 * MiB);
    CHECK_EQ_U64(pool_reserved(NULL), 0);
    CUdeviceptr h = 0, h2 = 0;
    uint64_t fill = pool_fill(k, NULL, free0, &h);
    REQUIRE(fill > 0);
    uint64_t held = pool_reserved(NULL);
    EMU_CHECK_EQ_U64(emu_used(), emu0 + held);
    /* one unit more: served from what the pool holds beyond the fill, or refused (what it
     * would take from the driver does not fit) */
    CUresult r = pool_try(k, NULL, unit, free0, held, fill, &h2);
    if (r == CUDA_SUCCESS) {
        tap_diag("%llu bytes more came from what the pool holds", (unsigned long long)unit);
        CHECK_EQ_INT(kind_free(k, h2), CUDA_SUCCESS);
    }
    EMU_CHECK_EQ_INT(r, CUDA_ERROR_OUT_OF_MEMORY);
    EMU_CHECK_EQ_U64(emu_used(), emu0 + held);
    CHECK_EQ_INT(kind_free(k, h), CUDA_SUCCESS);
    CHECK_EQ_U64(pool_reserved(NULL), 0);
    CHECK_EQ_U64(quota_free(), free0);
    EMU_CHECK_EQ_U64(emu_used(), emu0);
    /* a whole 2 MiB step more than fit is refused, and keeps nothing */
    CHECK_EQ_INT(pool_try(k, NULL, fill + 2 * MiB, free0, 0, 0, &h2), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ_U64(quota_free(), free0);
    /* what fit fits again */
    REQUIRE_EQ_INT(pool_try(k, NULL, fill, free0, 0, 0, &h), CUDA_SUCCESS);
    CHECK_EQ_INT(kind_free(k, h), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
    EMU_CHECK_EQ_U64(emu_used(), emu0);
    unsqueeze(ballast);
}

TEST(mem_alloc_stops_exactly_at_quota)
{
    exact_at_quota(K_ALLOC, 512);
}

TEST(mem_alloc_pitch_stops_exactly_at_quota)
{
    exact_at_quota(K_PITCH, 2048);
}

/* Managed memory is charged for what is on the GPU (docs/vcuda.md, "Managed memory";
 * test-vcuda-managed.c has the rest): untouched, any size is free. */
TEST(mem_alloc_managed_is_not_charged_until_resident)
{
    setup();
    uint64_t free0 = quota_free(), emu0 = emu_used(), h = 0;
    REQUIRE_EQ_INT(kind_alloc(K_MANAGED, 4 * quota_total, &h), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
    EMU_CHECK_EQ_U64(emu_used(), emu0);
    CHECK_EQ_INT(kind_free(K_MANAGED, h), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
}

TEST(mem_alloc_async_stops_exactly_at_quota)
{
    exact_at_quota(K_ASYNC, 512);
}

TEST(mem_alloc_async_ptsz_stops_exactly_at_quota)
{
    exact_at_quota(K_ASYNC_PTSZ, 512);
}

/* A pool that keeps freed memory (release threshold) is charged for what it
 * holds: the memory is not free for anything else until the pool trims. */
TEST(pool_is_charged_for_what_it_holds)
{
    setup();
    uint64_t free0 = quota_free();
    CUmemoryPool pool = NULL;
    REQUIRE_EQ_INT(cu.cuDeviceGetMemPool(&pool, 0), CUDA_SUCCESS);
    uint64_t keep = UINT64_MAX;
    REQUIRE_EQ_INT(cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
                   CUDA_SUCCESS);
    CUdeviceptr p;
    REQUIRE_EQ_INT(cu.cuMemAllocAsync(&p, 16 * MiB, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuStreamSynchronize(NULL), CUDA_SUCCESS);
    /* freed into the pool, still held by it: 16 MiB in whole chunks on the emulator, what the
     * driver says the pool holds on a real GPU (it may grow by more) */
    uint64_t held = pool_reserved(pool);
    REQUIRE(held != UINT64_MAX && held >= 16 * MiB && held < free0);
    EMU_CHECK_EQ_U64(held, round_up(16 * MiB, emu_pool_gran()));
    CHECK_EQ_U64(quota_free(), free0 - held);
    CUdeviceptr q;
    CHECK_EQ_INT(cu.cuMemAlloc_v2(&q, free0 - held + 512), CUDA_ERROR_OUT_OF_MEMORY);
    /* the pool's own memory serves a new stream-ordered allocation */
    REQUIRE_EQ_INT(cu.cuMemAllocAsync(&p, 16 * MiB, NULL), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0 - held);
    REQUIRE_EQ_INT(cu.cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuStreamSynchronize(NULL), CUDA_SUCCESS);
    /* trimming gives it back */
    REQUIRE_EQ_INT(cu.cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
    EMU_CHECK_EQ_U64(emu_used(), quota_total - free0);
    keep = 0;
    cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
}

TEST(created_pool_is_given_back_when_destroyed)
{
    setup();
    uint64_t free0 = quota_free();
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool pool = NULL;
    REQUIRE_EQ_INT(cu.cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
    uint64_t keep = UINT64_MAX;
    cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
    /* as much as its chunks let the pool take: all that is free on the emulator's default
     * 2 MiB granularity */
    CUdeviceptr p = 0, p2 = 0;
    uint64_t fill = pool_fill(K_ASYNC, pool, free0, &p);
    CHECK(fill > 0);
    uint64_t held = pool_reserved(pool);
    /* 512 bytes more come from what the pool holds beyond the fill, or are refused (the
     * growth would pass the quota) */
    if (fill && pool_try(K_ASYNC, pool, 512, free0, held, fill, &p2) == CUDA_SUCCESS) {
        tap_diag("the pool holds %llu bytes for a %llu-byte allocation: 512 more came from it",
                 (unsigned long long)held, (unsigned long long)fill);
        CHECK_EQ_INT(cu.cuMemFreeAsync(p2, NULL), CUDA_SUCCESS);
    }
    if (fill)
        CHECK_EQ_INT(cu.cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuStreamSynchronize(NULL), CUDA_SUCCESS);
    /* the pool keeps it, charged */
    held = pool_reserved(pool);
    CHECK(held >= fill);
    CHECK_EQ_U64(quota_free(), held >= free0 ? 0 : free0 - held);
    REQUIRE_EQ_INT(cu.cuMemPoolDestroy(pool), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
    EMU_CHECK_EQ_U64(emu_used(), quota_total - free0);
}

TEST(mem_create_vmm_stops_exactly_at_quota)
{
    setup();
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    REQUIRE_EQ_INT(
        cu.cuMemGetAllocationGranularity(&vmm_gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        CUDA_SUCCESS);
    REQUIRE(vmm_gran > 0 && vmm_gran <= 4 * MiB);
    exact_at_quota(K_VMM, vmm_gran);
}

/* On a real GPU the array layout is the driver's own, so an exact fill cannot
 * be computed: a 4 MiB array must cost at least its texels (and not wildly
 * more: 16 MiB at most, whatever the driver pads) and come back. */
static void array_charged_and_given_back(enum kind k)
{
    setup();
    uint64_t free0 = quota_free(), h = 0;
    REQUIRE_EQ_INT(kind_alloc(k, 4 * MiB, &h), CUDA_SUCCESS);
    uint64_t charged = free0 - quota_free();
    CHECK(charged >= 4 * MiB && charged <= 16 * MiB);
    tap_diag("a 4 MiB %s array: %llu bytes charged (the driver's layout: not filled exactly here)",
             k == K_ARRAY ? "2D" : "3D", (unsigned long long)charged);
    CHECK_EQ_INT(kind_free(k, h), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
}

TEST(array_stops_exactly_at_quota)
{
    if (real_gpu())
        array_charged_and_given_back(K_ARRAY);
    else
        exact_at_quota(K_ARRAY, 64 << 10);
}

TEST(array3d_stops_exactly_at_quota)
{
    if (real_gpu())
        array_charged_and_given_back(K_ARRAY3D);
    else
        exact_at_quota(K_ARRAY3D, 64 << 10);
}

TEST(mipmapped_array_is_charged_like_the_driver)
{
    setup();
    uint64_t free0 = quota_free(), emu0 = emu_used();
    CUDA_ARRAY3D_DESCRIPTOR d = {1000, 300, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    CUmipmappedArray m = NULL;
    REQUIRE_EQ_INT(cu.cuMipmappedArrayCreate(&m, &d, 5), CUDA_SUCCESS);
    uint64_t charged = free0 - quota_free();
    CHECK(charged > 1000ull * 300 * 4);
    /* the GPU carves 2 MiB pages (docs/emulator-cuda.md, "Pages"): this block under 2 MiB
     * starts a page of its own; libvcuda counts the bytes (docs/vcuda.md, "Quota and pages") */
    EMU_CHECK_EQ_U64(emu_used() - emu0, (charged + 2 * MiB - 1) / (2 * MiB) * (2 * MiB));
    CHECK_EQ_INT(cu.cuMipmappedArrayDestroy(m), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
}

TEST(context_memory_is_charged_and_given_back)
{
    setup();
    uint64_t free0 = quota_free();
    CUcontext c2 = NULL;
    REQUIRE_EQ_INT(cu.cuCtxCreate_v2(&c2, 0, 0), CUDA_SUCCESS);
    /* c2 is current now; the quota view is the same device. The emulator charges every context
     * the same; a real driver's second context is measured on its own and may cost another
     * figure than the primary one, but it must cost something. */
    uint64_t c2_cost = free0 - quota_free();
    CHECK(c2_cost > 0 && c2_cost < free0);
    if (real_gpu())
        tap_diag("a second context costs %llu bytes, the primary one %llu",
                 (unsigned long long)c2_cost, (unsigned long long)ctx_cost);
    else
        CHECK_EQ_U64(c2_cost, ctx_cost);
    CUdeviceptr p;
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&p, MiB), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0 - c2_cost - MiB);
    /* destroying the context frees what was allocated in it too */
    REQUIRE_EQ_INT(cu.cuCtxDestroy_v2(c2), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
    /* The emulator keeps a destroyed context's allocations (a real driver
     * frees them): free it there so later cases start clean. libvcuda no
     * longer tracks it, so this gives nothing back twice. */
    if (!real_gpu() && emu_used() != quota_total - free0)
        cu.cuMemFree_v2(p);
    CHECK_EQ_U64(quota_free(), free0);
    EMU_CHECK_EQ_U64(emu_used(), quota_total - free0);
}

/* NVML's memory info (nvidia-smi, frameworks' free-memory checks) shows the
 * quota: reached by dlopen + dlsym of libnvidia-ml.so.1 like any tool does. */
TEST(nvml_memory_info_shows_the_quota)
{
    setup();
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!nvml) {
        tap_skip_case("no libnvidia-ml.so.1 (emulated NVML not built)");
        return;
    }
    __typeof__(nvmlInit_v2) *init = (__typeof__(init))dlsym(nvml, "nvmlInit_v2");
    __typeof__(nvmlDeviceGetHandleByIndex_v2) *get =
        (__typeof__(get))dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
    __typeof__(nvmlDeviceGetMemoryInfo) *info =
        (__typeof__(info))dlsym(nvml, "nvmlDeviceGetMemoryInfo");
    __typeof__(nvmlDeviceGetMemoryInfo_v2) *info2 =
        (__typeof__(info2))dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2");
    REQUIRE(init && get && info && info2);
    CHECK(in_lib((void *)info, "libvcuda", NULL));
    CHECK(in_lib((void *)info2, "libvcuda", NULL));
    REQUIRE_EQ_INT(init(), NVML_SUCCESS);
    nvmlDevice_t dev;
    REQUIRE_EQ_INT(get(0, &dev), NVML_SUCCESS);
    CUdeviceptr p;
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&p, 10 * MiB), CUDA_SUCCESS);
    uint64_t f = quota_free();
    nvmlMemory_t m;
    REQUIRE_EQ_INT(info(dev, &m), NVML_SUCCESS);
    CHECK_EQ_U64(m.total, quota_total);
    CHECK_EQ_U64(m.free, f);
    CHECK_EQ_U64(m.used, quota_total - f);
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    REQUIRE_EQ_INT(info2(dev, &m2), NVML_SUCCESS);
    CHECK_EQ_U64(m2.total, quota_total);
    CHECK_EQ_U64(m2.free, f);
    CHECK_EQ_U64(m2.used + m2.reserved + m2.free, quota_total);
    REQUIRE_EQ_INT(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    REQUIRE_EQ_INT(info(dev, &m), NVML_SUCCESS);
    CHECK_EQ_U64(m.free, f + 10 * MiB);
}

/* ---- threads ------------------------------------------------------------- */

struct thr {
    uint64_t room; /* free when the threads started */
    atomic_ullong *held;
    atomic_int *violations;
    unsigned seed;
    int ok;
};

static void *alloc_thread(void *arg)
{
    struct thr *t = arg;
    if (cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return NULL;
    CUdeviceptr mine[8] = {0};
    uint64_t size[8] = {0};
    for (int i = 0; i < 3000; i++) {
        int k = (int)(rand_r(&t->seed) % 8);
        if (mine[k]) {
            atomic_fetch_sub(t->held, size[k]);
            cu.cuMemFree_v2(mine[k]);
            mine[k] = 0;
        } else {
            size[k] = (1 + rand_r(&t->seed) % 16) * 512 * 1024;
            if (cu.cuMemAlloc_v2(&mine[k], size[k]) == CUDA_SUCCESS) {
                t->ok++;
                if (atomic_fetch_add(t->held, size[k]) + size[k] > t->room)
                    atomic_fetch_add(t->violations, 1);
            } else {
                mine[k] = 0;
            }
        }
    }
    for (int k = 0; k < 8; k++)
        if (mine[k]) {
            atomic_fetch_sub(t->held, size[k]);
            cu.cuMemFree_v2(mine[k]);
        }
    return NULL;
}

TEST(threads_allocate_within_the_quota)
{
    setup();
    CUdeviceptr ballast = squeeze();
    uint64_t free0 = quota_free();
    atomic_ullong held = 0;
    atomic_int violations = 0;
    pthread_t th[8];
    struct thr t[8];
    for (int i = 0; i < 8; i++) {
        t[i] = (struct thr){free0, &held, &violations, (unsigned)i * 31u + 7u, 0};
        pthread_create(&th[i], NULL, alloc_thread, &t[i]);
    }
    int ok = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ok += t[i].ok;
    }
    CHECK_EQ_INT(atomic_load(&violations), 0);
    CHECK(ok > 100);
    CHECK_EQ_U64(quota_free(), free0);
    unsqueeze(ballast);
}

/* Threads allocating stream-ordered memory from the one default pool, each on its per-thread
 * stream: allocations meet the quota (and, with large pool chunks, each other's growth and
 * undos) often; none ends in another error, the pool never holds more than was free as far as
 * the quota can see, and everything comes back. */
struct athr {
    uint64_t room;
    atomic_int *errors;
    unsigned seed;
    int ok, refused;
};

static void *async_thread(void *arg)
{
    struct athr *t = arg;
    if (cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return NULL;
    CUdeviceptr mine[4] = {0};
    for (int i = 0; i < 400; i++) {
        int k = (int)(rand_r(&t->seed) % 4);
        if (mine[k]) {
            if (cu.cuMemFreeAsync(mine[k], CU_STREAM_PER_THREAD) != CUDA_SUCCESS)
                atomic_fetch_add(t->errors, 1);
            mine[k] = 0;
            if (i % 7 == 0)
                cu.cuStreamSynchronize(CU_STREAM_PER_THREAD);
            continue;
        }
        uint64_t size = (1 + rand_r(&t->seed) % 24) * 512 * 1024;
        CUresult r = cu.cuMemAllocAsync_ptsz(&mine[k], size, NULL);
        if (r == CUDA_SUCCESS) {
            t->ok++;
        } else {
            mine[k] = 0;
            if (r == CUDA_ERROR_OUT_OF_MEMORY)
                t->refused++;
            else
                atomic_fetch_add(t->errors, 1);
        }
    }
    for (int k = 0; k < 4; k++)
        if (mine[k])
            cu.cuMemFreeAsync(mine[k], CU_STREAM_PER_THREAD);
    cu.cuStreamSynchronize(CU_STREAM_PER_THREAD);
    return NULL;
}

TEST(threads_allocate_stream_ordered_within_the_quota)
{
    setup();
    CUdeviceptr ballast = squeeze();
    uint64_t free0 = quota_free(), emu0 = emu_used();
    atomic_int errors = 0;
    pthread_t th[4];
    struct athr t[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (struct athr){free0, &errors, (unsigned)i * 17u + 3u, 0, 0};
        pthread_create(&th[i], NULL, async_thread, &t[i]);
    }
    int ok = 0, refused = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ok += t[i].ok;
        refused += t[i].refused;
    }
    tap_diag("%d stream-ordered allocations, %d refused", ok, refused);
    CHECK_EQ_INT(atomic_load(&errors), 0);
    CHECK(ok > 100);
    CHECK(refused > 0); /* the quota was met */
    CHECK_EQ_INT(cu.cuStreamSynchronize(NULL), CUDA_SUCCESS);
    CHECK_EQ_U64(pool_reserved(NULL), 0);
    CHECK_EQ_U64(quota_free(), free0);
    EMU_CHECK_EQ_U64(emu_used(), emu0);
    unsqueeze(ballast);
}

/* ---- other processes ----------------------------------------------------- */

static int wait_exit(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Role "racer": makes its context, says "ready", waits for one byte on
 * stdin, allocates 1 MiB blocks until refused, prints how many, then waits
 * for fd 3 to close and exits (its memory is released at exit). */
static int role_racer(void)
{
    load();
    CUcontext c;
    if (cu.cuInit(0) || cu.cuDevicePrimaryCtxRetain(&c, 0) || cu.cuCtxSetCurrent(c)) {
        printf("error ctx\n");
        return 3;
    }
    printf("ready\n");
    fflush(stdout);
    char b;
    if (read(0, &b, 1) != 1)
        return 5;
    int n = 0;
    CUdeviceptr p;
    CUresult r;
    while ((r = cu.cuMemAlloc_v2(&p, MiB)) == CUDA_SUCCESS)
        n++;
    printf(r == CUDA_ERROR_OUT_OF_MEMORY ? "%d\n" : "error %d\n",
           r == CUDA_ERROR_OUT_OF_MEMORY ? n : (int)r);
    fflush(stdout);
    /* hold the memory until the parent closes fd 3 (not stdin: the other
     * racers' start bytes are still in that pipe) */
    while (read(3, &b, 1) > 0)
        ;
    return 0;
}

TEST(eight_processes_race_for_one_quota)
{
    setup();
    /* this process holds its context; 8 racers each add their own. They make their contexts
     * one at a time: a context's charge is measured across its creation (docs/vcuda.md,
     * "Context memory"), and where NVML cannot see a process's own memory (another pid
     * namespace) it is the device's growth, which other creations at the same time would add
     * to. The race is for what is left. */
    int in[2], out[2], hold[2];
    REQUIRE_EQ_INT(pipe(in), 0);
    REQUIRE_EQ_INT(pipe(out), 0);
    REQUIRE_EQ_INT(pipe(hold), 0);
    FILE *f = fdopen(out[0], "r");
    REQUIRE(f != NULL);
    char line[64];
    int ready = 0;
    pid_t kids[8];
    for (int i = 0; i < 8; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            dup2(in[0], 0);
            close(in[1]);
            dup2(out[1], 1);
            close(out[0]);
            dup2(hold[0], 3);
            close(hold[1]);
            char self[4096];
            ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
            self[n > 0 ? n : 0] = '\0';
            execl(self, self, "--role", "racer", "", (char *)NULL);
            _exit(127);
        }
        if (ready == i && fgets(line, sizeof(line), f) && strcmp(line, "ready\n") == 0)
            ready++;
        else if (ready == i)
            tap_diag("racer %d: %s", i, line);
    }
    close(in[0]);
    close(out[1]);
    close(hold[0]);
    CHECK_EQ_INT(ready, 8);
    /* 9 contexts charged (ours + 8): what is left is what the racers share. The emulator
     * charges each the same; a real driver's are measured one by one. */
    uint64_t left = quota_free();
    if (real_gpu() && left != quota_total - CONTEXTS * ctx_cost)
        tap_diag("9 contexts took %llu bytes, 9 x ours %llu",
                 (unsigned long long)(quota_total - left),
                 (unsigned long long)(CONTEXTS * ctx_cost));
    else
        CHECK_EQ_U64(left, quota_total - CONTEXTS * ctx_cost);
    int total = 0, got = 0, over = 0;
    if (ready == 8) {
        /* all at once */
        CHECK_EQ_INT(write(in[1], "gggggggg", 8), 8);
        /* while they race, the emulator never holds more than the quota, plus what 2 MiB
         * pages add to libvcuda's byte count: at most one half-used page of 1 MiB blocks per
         * process (docs/vcuda.md, "Quota and pages") */
        const uint64_t page_slack = 9 * MiB;
        while (got < 8 && fgets(line, sizeof(line), f)) {
            if (!real_gpu() && emu_used() > quota_total + page_slack)
                over++;
            if (strncmp(line, "error", 5) == 0)
                tap_fail(__FILE__, __LINE__, "racer: %s", line);
            total += atoi(line);
            got++;
        }
        CHECK_EQ_INT(got, 8);
        CHECK_EQ_INT(over, 0);
        if (!real_gpu())
            CHECK_LE_U64(emu_used(), quota_total + page_slack);
        /* 1 MiB blocks: every MiB left is used, and no more */
        CHECK_EQ_INT(total, (int)(left / MiB));
        CHECK_EQ_U64(quota_free(), left % MiB);
    } else {
        for (int i = 0; i < 8; i++)
            kill(kids[i], SIGKILL);
    }
    close(in[1]);
    close(hold[1]);
    fclose(f);
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(wait_exit(kids[i]), ready == 8 ? 0 : 128 + SIGKILL);
    CHECK(TAP_WAIT_UNTIL(quota_free() == quota_total - ctx_cost, 1000));
}

TEST(kill9_during_allocation_is_reclaimed)
{
    setup();
    uint64_t free0 = quota_free();
    for (int round = 0; round < 3; round++) {
        int in[2], out[2];
        REQUIRE_EQ_INT(pipe(in), 0);
        REQUIRE_EQ_INT(pipe(out), 0);
        pid_t kid = fork();
        if (kid == 0) {
            dup2(in[0], 0);
            dup2(out[1], 1);
            close(in[1]);
            close(out[0]);
            char self[4096];
            ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
            self[n > 0 ? n : 0] = '\0';
            execl(self, self, "--role", "churn", "", (char *)NULL);
            _exit(127);
        }
        close(in[0]);
        close(out[1]);
        char b;
        REQUIRE(read(out[0], &b, 1) == 1); /* it is allocating now */
        kill(kid, SIGKILL);
        CHECK_EQ_INT(wait_exit(kid), 128 + SIGKILL);
        close(in[1]);
        close(out[0]);
        /* within a second, everything it held is back for us */
        CHECK(TAP_WAIT_UNTIL(quota_free() == free0, 1000));
        CUdeviceptr p;
        CHECK_EQ_INT(cu.cuMemAlloc_v2(&p, free0), CUDA_SUCCESS);
        CHECK_EQ_INT(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    }
}

/* Role "churn": allocates and frees random blocks forever, telling the parent
 * once it has started. */
static int role_churn(void)
{
    load();
    CUcontext c;
    if (cu.cuInit(0) || cu.cuDevicePrimaryCtxRetain(&c, 0) || cu.cuCtxSetCurrent(c))
        return 3;
    CUdeviceptr held[16] = {0};
    unsigned seed = (unsigned)getpid();
    bool told = false;
    for (;;) {
        int k = (int)(rand_r(&seed) % 16);
        if (held[k]) {
            cu.cuMemFree_v2(held[k]);
            held[k] = 0;
        } else if (cu.cuMemAlloc_v2(&held[k], (1 + rand_r(&seed) % 8) * MiB) != CUDA_SUCCESS) {
            held[k] = 0;
        }
        if (!told) {
            (void)!write(1, "x", 1);
            told = true;
        }
    }
}

TEST(fork_child_gets_its_own_share_of_the_quota)
{
    if (real_gpu()) {
        tap_skip_case("CUDA is not usable in a child forked after the parent initialized it");
        return;
    }
    setup();
    uint64_t free0 = quota_free();
    CUdeviceptr mine;
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&mine, 8 * MiB), CUDA_SUCCESS);
    pid_t kid = fork();
    if (kid == 0) {
        /* A fresh process as far as the quota goes: its own context, its
         * own slot, the parent's use still counted. The emulator's forked
         * child goes on with its parent's context (a real driver's cannot
         * use CUDA at all), so the creation takes no memory and libvcuda
         * keeps its configured figure (docs/vcuda.md, "Context memory"). */
        int rc = 0;
        CUcontext c;
        if (cu.cuDevicePrimaryCtxRetain(&c, 0) || cu.cuCtxSetCurrent(c))
            _exit(10);
        uint64_t f = quota_free();
        if (f != free0 - 8 * MiB - CTX_CONFIGURED)
            rc = 11;
        CUdeviceptr p;
        if (!rc && cu.cuMemAlloc_v2(&p, f) != CUDA_SUCCESS)
            rc = 12;
        if (!rc && cu.cuMemAlloc_v2(&p, 512) != CUDA_ERROR_OUT_OF_MEMORY)
            rc = 13;
        _exit(rc);
    }
    CHECK_EQ_INT(wait_exit(kid), 0);
    /* the child's use went with it; ours stayed */
    CHECK(TAP_WAIT_UNTIL(quota_free() == free0 - 8 * MiB, 1000));
    CHECK_EQ_INT(cu.cuMemFree_v2(mine), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
}

/* Runs this program again as --role role arg (in the quota's environment) and returns its exit
 * status, its standard output (its first read, up to len - 1 bytes) in out. */
static int role_output(const char *role, const char *arg, char *out, size_t len)
{
    int o[2];
    REQUIRE_EQ_INT(pipe(o), 0);
    pid_t kid = fork();
    if (kid == 0) {
        dup2(o[1], 1);
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[n > 0 ? n : 0] = '\0';
        execl(self, self, "--role", role, arg, (char *)NULL);
        _exit(127);
    }
    close(o[1]);
    ssize_t n = read(o[0], out, len - 1);
    out[n > 0 ? n : 0] = '\0';
    close(o[0]);
    return wait_exit(kid);
}

/* Role "ipc HEX": opens another process's allocation by IPC handle and
 * prints how much of the quota that cost (nothing: it is the owner's). */
static int role_ipc(const char *hex)
{
    load();
    CUcontext c;
    if (cu.cuInit(0) || cu.cuDevicePrimaryCtxRetain(&c, 0) || cu.cuCtxSetCurrent(c))
        return 3;
    CUipcMemHandle h;
    memset(&h, 0, sizeof(h));
    for (size_t i = 0; i < sizeof(h.reserved) && hex[2 * i] && hex[2 * i + 1]; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return 4;
        h.reserved[i] = (char)v;
    }
    uint64_t before = quota_free();
    CUdeviceptr p;
    CUresult r = cu.cuIpcOpenMemHandle_v2(&p, h, 1);
    uint64_t after = quota_free();
    if (r == CUDA_SUCCESS)
        cu.cuIpcCloseMemHandle(p);
    printf("open=%d cost=%lld\n", (int)r, (long long)(before - after));
    return 0;
}

TEST(ipc_import_is_charged_to_its_owner_only)
{
    if (real_gpu()) {
        tap_skip_case("needs two GPUs' worth of processes on one device; run on the emulator");
        return;
    }
    setup();
    uint64_t free0 = quota_free();
    CUdeviceptr p;
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&p, 8 * MiB), CUDA_SUCCESS);
    CUipcMemHandle h;
    REQUIRE_EQ_INT(cu.cuIpcGetMemHandle(&h, p), CUDA_SUCCESS);
    char hex[2 * sizeof(h.reserved) + 1];
    for (size_t i = 0; i < sizeof(h.reserved); i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);
    char out[128];
    CHECK_EQ_INT(role_output("ipc", hex, out, sizeof(out)), 0);
    CHECK(strstr(out, "open=0 cost=0") != NULL);
    if (!strstr(out, "open=0 cost=0"))
        tap_diag("child said: %s", out);
    /* the owner's charge is untouched by the import and its close */
    CHECK(TAP_WAIT_UNTIL(quota_free() == free0 - 8 * MiB, 1000));
    CHECK_EQ_INT(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), free0);
}

/* Role "vmm-share" (issue 22, F5c): the escape through a shareable handle, in a process of its
 * own (memory this process exports stays charged to it until it exits). Up to four times:
 * create a third of what is free, export it to a file descriptor, import that, map the import,
 * release the original. Before the fix each release gave the charge back while the import's
 * mapping held the memory: four thirds mapped. Prints how many mappings were made and refused,
 * and what the quota and the emulator's own books say was held at the end. */
static int role_vmm_share(void)
{
    load();
    CUcontext c;
    if (cu.cuInit(0) || cu.cuDevicePrimaryCtxRetain(&c, 0) || cu.cuCtxSetCurrent(c))
        return 3;
    if (!cu.cuMemExportToShareableHandle || !cu.cuMemImportFromShareableHandle || !cu.cuMemMap)
        return 4;
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    if (cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) || !gran)
        return 5;
    uint64_t f0 = quota_free(), e0 = emu_used();
    uint64_t third = f0 / 3 / gran * gran;
    CUdeviceptr va;
    if (!third || cu.cuMemAddressReserve(&va, 4 * third, 0, 0, 0))
        return 6;
    CUmemGenericAllocationHandle mapped[4];
    int maps = 0, refused = 0, creates = 0;
    CUresult why = CUDA_SUCCESS;
    for (int i = 0; i < 4; i++) {
        CUmemGenericAllocationHandle orig, imp;
        if (cu.cuMemCreate(&orig, third, &prop, 0) != CUDA_SUCCESS)
            break;
        creates++;
        int fd = -1;
        CUresult r =
            cu.cuMemExportToShareableHandle(&fd, orig, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r == CUDA_SUCCESS)
            r = cu.cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (fd >= 0)
            close(fd);
        if (r != CUDA_SUCCESS) {
            printf("unsupported=%d\n", (int)r);
            return 0;
        }
        r = cu.cuMemMap(va + (CUdeviceptr)maps * third, third, 0, imp, 0);
        if (r == CUDA_SUCCESS)
            mapped[maps++] = imp;
        else {
            refused++;
            why = r;
            cu.cuMemRelease(imp);
        }
        cu.cuMemRelease(orig); /* the import (and its mapping) still holds the memory */
    }
    uint64_t view = f0 - quota_free(), emu = real_gpu() ? 0 : emu_used() - e0;
    printf("third=%llu f0=%llu creates=%d maps=%d refused=%d why=%d view=%llu emu=%llu\n",
           (unsigned long long)third, (unsigned long long)f0, creates, maps, refused, (int)why,
           (unsigned long long)view, (unsigned long long)emu);
    for (int i = 0; i < maps; i++) {
        cu.cuMemUnmap(va + (CUdeviceptr)i * third, third);
        cu.cuMemRelease(mapped[i]);
    }
    cu.cuMemAddressFree(va, 4 * third);
    return 0;
}

TEST(vmm_import_of_an_export_is_charged_while_mapped)
{
    setup();
    uint64_t free0 = quota_free();
    char out[256];
    CHECK_EQ_INT(role_output("vmm-share", "", out, sizeof(out)), 0);
    tap_diag("%s", out);
    if (strstr(out, "unsupported="))
        tap_skip_case("this driver cannot import its own POSIX file descriptor export");
    unsigned long long third = 0, f0 = 0, view = 0, emu = 0;
    int creates = 0, maps = 0, refused = 0, why = 0;
    REQUIRE(sscanf(out,
                   "third=%llu f0=%llu creates=%d maps=%d refused=%d why=%d view=%llu emu=%llu",
                   &third, &f0, &creates, &maps, &refused, &why, &view, &emu) == 8);
    /* never more mapped than was free, and the quota saw at least what was mapped */
    CHECK(maps >= 1);
    CHECK_LE_U64((unsigned long long)maps * third, f0);
    CHECK_GE_U64(view, (unsigned long long)maps * third);
    /* the way out was closed by a refusal, with the driver's out-of-memory result */
    CHECK(refused >= 1 || creates < 4);
    if (refused)
        CHECK_EQ_INT(why, CUDA_ERROR_OUT_OF_MEMORY);
    /* the emulator's own books hold what the imports map (the import keeps its allocation) */
    if (!real_gpu())
        CHECK_GE_U64(emu, (unsigned long long)maps * third);
    /* what the child held (its export pinned until exit) went with it */
    CHECK(TAP_WAIT_UNTIL(quota_free() == free0, 1000));
}

/* ---- graph memory (issue 22) ------------------------------------------------ */

/* What the driver holds for this process's graphs on device 0 (RESERVED_MEM_CURRENT). */
static uint64_t graph_reserved(void)
{
    cuuint64_t v = 0;
    if (cu.cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) !=
        CUDA_SUCCESS)
        return UINT64_MAX;
    return v;
}

/* A graph captured from s: one stream-ordered allocation of bytes, a memset of it, its free. */
static CUgraph capture_alloc_graph(CUstream s, uint64_t bytes)
{
    CUgraph g = NULL;
    CUdeviceptr p = 0;
    REQUIRE_EQ_INT(cu.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemAllocAsync(&p, bytes, s), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemFreeAsync(p, s), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    return g;
}

/* A stream-captured cuMemAllocAsync allocates nothing at capture and memory at the launches of
 * the graphs made from it (NVIDIA, "Graph Memory Nodes"): it used to be charged once at capture
 * and never again. Now each graph's memory is reserved before the launch that maps it, the
 * quota sees at least what the driver holds for the graphs, a launch that would take more is
 * refused with out-of-memory, and a trim gives it back. Three graphs of 40 % of what is free
 * each: the emulator maps every graph its own memory, so the third is refused there; a real
 * driver may let graphs launched into one stream share memory, and then needs less. */
TEST(graph_memory_is_charged_when_launches_map_it)
{
    setup();
    if (!cu.cuStreamBeginCapture_v2 || !cu.cuDeviceGetGraphMemAttribute)
        tap_skip_case("no stream capture or graph memory attributes in this driver");
    CUdeviceptr sq = squeeze();
    uint64_t free0 = quota_free(), held0 = graph_reserved();
    uint64_t each = free0 * 2 / 5 / (2 * MiB) * (2 * MiB);
    REQUIRE(each > 0 && held0 != UINT64_MAX);
    CUstream s;
    REQUIRE_EQ_INT(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUgraph g[3];
    CUgraphExec ex[3];
    for (int i = 0; i < 3; i++) {
        g[i] = capture_alloc_graph(s, each);
        REQUIRE_EQ_INT(cu.cuGraphInstantiateWithFlags(&ex[i], g[i], 0), CUDA_SUCCESS);
    }
    /* capture and instantiation take nothing */
    CHECK_EQ_U64(quota_free(), free0);
    CHECK_EQ_U64(graph_reserved(), held0);
    int launched = 0;
    CUresult refused = CUDA_SUCCESS;
    for (int i = 0; i < 3; i++) {
        uint64_t before = graph_reserved();
        CUresult r = i == 0 ? cu.cuGraphUpload(ex[i], s) : cu.cuGraphLaunch(ex[i], s);
        if (i == 0 && r == CUDA_SUCCESS)
            r = cu.cuGraphLaunch(ex[i], s);
        if (r == CUDA_SUCCESS) {
            launched++;
        } else {
            refused = r;
            CHECK_EQ_U64(graph_reserved(), before); /* a refused launch mapped nothing */
        }
        /* never more held than the quota allowed, and the quota sees all of it */
        uint64_t held = graph_reserved() - held0;
        CHECK_LE_U64(held, free0);
        CHECK_GE_U64(free0 - quota_free(), held);
        tap_diag("graph %d: %s, the driver holds %llu MiB of graph memory, the quota shows %llu "
                 "MiB used",
                 i, r == CUDA_SUCCESS ? "launched" : "refused", (unsigned long long)(held / MiB),
                 (unsigned long long)((free0 - quota_free()) / MiB));
    }
    CHECK(launched >= 2);
    if (refused != CUDA_SUCCESS)
        CHECK_EQ_INT(refused, CUDA_ERROR_OUT_OF_MEMORY);
    if (!real_gpu()) {
        CHECK_EQ_INT(launched, 2); /* no sharing on the emulator: the third does not fit */
        CHECK_LE_U64(emu_used(), quota_total);
    }
    /* relaunching a mapped graph needs nothing more */
    uint64_t f1 = quota_free();
    CHECK_EQ_INT(cu.cuGraphLaunch(ex[0], s), CUDA_SUCCESS);
    CHECK_EQ_U64(quota_free(), f1);
    CHECK_EQ_INT(cu.cuStreamSynchronize(s), CUDA_SUCCESS);
    /* destroyed graphs keep their memory until a trim, and so does the quota */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(cu.cuGraphExecDestroy(ex[i]), CUDA_SUCCESS);
        CHECK_EQ_INT(cu.cuGraphDestroy(g[i]), CUDA_SUCCESS);
    }
    CHECK_GE_U64(free0 - quota_free(), graph_reserved() - held0);
    CHECK_EQ_INT(cu.cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
    CHECK_EQ_U64(graph_reserved(), held0);
    CHECK_EQ_U64(quota_free(), free0);
    CHECK_EQ_INT(cu.cuStreamDestroy_v2(s), CUDA_SUCCESS);
    unsqueeze(sq);
}

/* Role "info": prints the quota total and free as cuMemGetInfo reports them,
 * and whether a 1 MiB allocation worked. */
static int role_info(void)
{
    load();
    CUcontext c;
    if (cu.cuInit(0) || cu.cuDevicePrimaryCtxRetain(&c, 0) || cu.cuCtxSetCurrent(c)) {
        /* a fail-closed library refuses even the context's memory */
        printf("total=0 alloc=ctxfail\n");
        return 0;
    }
    size_t f = 0, t = 0;
    cu.cuMemGetInfo_v2(&f, &t);
    CUdeviceptr p;
    CUresult r = cu.cuMemAlloc_v2(&p, MiB);
    printf("total=%zu free=%zu alloc=%d\n", t, f, (int)r);
    return 0;
}

static void run_info(const char *config_text, const char *env_limit, char *out, size_t outlen,
                     char *err, size_t errlen)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "%s/config-%d", getenv("VCUDA_TEST_DIR"), (int)getpid());
    if (config_text) {
        FILE *f = fopen(cfg, "w");
        fputs(config_text, f);
        fclose(f);
    } else {
        unlink(cfg);
    }
    int o[2], e[2];
    if (pipe(o) < 0 || pipe(e) < 0)
        return;
    pid_t kid = fork();
    if (kid == 0) {
        dup2(o[1], 1);
        dup2(e[1], 2);
        setenv("VCUDA_CONFIG", cfg, 1);
        setenv("VCUDA_MEMORY_LIMIT", env_limit, 1);
        char region[1024];
        snprintf(region, sizeof(region), "%s/region-info", getenv("VCUDA_TEST_DIR"));
        setenv("VCUDA_REGION", region, 1);
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[n > 0 ? n : 0] = '\0';
        execl(self, self, "--role", "info", "", (char *)NULL);
        _exit(127);
    }
    close(o[1]);
    close(e[1]);
    ssize_t n = read(o[0], out, outlen - 1);
    out[n > 0 ? n : 0] = '\0';
    size_t el = 0;
    while (el < errlen - 1 && (n = read(e[0], err + el, errlen - 1 - el)) > 0)
        el += (size_t)n;
    err[el] = '\0';
    close(o[0]);
    close(e[0]);
    wait_exit(kid);
}

TEST(config_file_wins_over_environment)
{
    char out[256], err[2048];
    run_info("memory_limit = 32Mi\ncontext_memory = 4Mi\n", "1Gi", out, sizeof(out), err,
             sizeof(err));
    CHECK(strstr(out, "total=33554432 ") != NULL);
    if (!strstr(out, "total=33554432 "))
        tap_diag("got: %s / %s", out, err);
    run_info(NULL, "48Mi", out, sizeof(out), err, sizeof(err));
    CHECK(strstr(out, "total=50331648 ") != NULL);
}

/* A process whose quota is below what the container already holds (a smaller
 * limit sharing the region) sees its quota as total and 0 free: never a
 * negative or wrapped figure, and its allocations fail. */
TEST(views_never_wrap_when_use_exceeds_the_quota)
{
    setup();
    CUdeviceptr p;
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&p, 40 * MiB), CUDA_SUCCESS);
    char out[256], err[2048], cfg[1200];
    /* a config file names its region itself (the file wins over VCUDA_REGION) */
    snprintf(cfg, sizeof(cfg), "memory_limit = 32Mi\ncontext_memory = 0\nregion = %s\n",
             getenv("VCUDA_REGION"));
    run_info(cfg, "1Gi", out, sizeof(out), err, sizeof(err));
    CHECK(strstr(out, "total=33554432 free=0 alloc=2") != NULL);
    if (!strstr(out, "total=33554432 free=0 alloc=2"))
        tap_diag("got: %s / %s", out, err);
    CHECK_EQ_INT(cu.cuMemFree_v2(p), CUDA_SUCCESS);
}

/* Memory a pool gives back at a synchronization (release threshold 0) is back for the
 * container's other processes at once: another process's view right after the synchronize
 * sees it free, before this process looks at its own quota again. */
TEST(pool_memory_released_at_sync_is_free_for_other_processes)
{
    setup();
    char out[256], err[2048], cfg[1200];
    snprintf(cfg, sizeof(cfg), "memory_limit = %llu\ncontext_memory = 0\nregion = %s\n",
             (unsigned long long)quota_total, getenv("VCUDA_REGION"));
    unsigned long long t0 = 0, f0 = 0, t1 = 0, f1 = 0;
    run_info(cfg, "1Gi", out, sizeof(out), err, sizeof(err));
    REQUIRE(sscanf(out, "total=%llu free=%llu", &t0, &f0) == 2);
    CUdeviceptr p;
    REQUIRE_EQ_INT(cu.cuMemAllocAsync(&p, 16 * MiB, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuStreamSynchronize(NULL), CUDA_SUCCESS);
    /* no view of ours in between: what the other process sees was given back by the sync */
    run_info(cfg, "1Gi", out, sizeof(out), err, sizeof(err));
    REQUIRE(sscanf(out, "total=%llu free=%llu", &t1, &f1) == 2);
    tap_diag("another process saw %llu free before, %llu after", f0, f1);
    CHECK_EQ_U64(t1, quota_total);
    CHECK_EQ_U64(pool_reserved(NULL), 0);
    if (real_gpu())
        CHECK(f1 + 8 * MiB > f0); /* its own context is measured anew: within a few MiB */
    else
        CHECK_EQ_U64(f1, f0);
}

TEST(broken_config_fails_closed_with_a_message)
{
    char out[256], err[2048];
    run_info("memory_limit = 32Mi\nmemory_limit: 1Gi\n", "1Gi", out, sizeof(out), err, sizeof(err));
    /* no device memory at all, and stderr says why */
    CHECK(strstr(out, "alloc=ctxfail") != NULL || strstr(out, "alloc=2") != NULL);
    CHECK(strstr(err, "line 2") != NULL);
    CHECK(strstr(err, "vcuda") != NULL);
}

TEST(over_quota_logs_one_line_naming_quota_and_request)
{
    char out[256], err[4096];
    run_info(NULL, "4Mi", out, sizeof(out), err, sizeof(err));
    /* a 4 MiB quota: the context's memory (4 MiB reserved before it exists, what it is
     * measured to take after) fills it, and a 1 MiB allocation is refused */
    CHECK(strstr(out, "alloc=2") != NULL);
    CHECK(strstr(err, "out of memory") != NULL);
    CHECK(strstr(err, "1.00 MiB") != NULL);
    CHECK(strstr(err, "4.00 MiB quota") != NULL);
    int lines = 0;
    for (char *p = err; *p; p++)
        lines += *p == '\n';
    CHECK_EQ_INT(lines, 1);
    if (lines != 1)
        tap_diag("stderr: %s", err);
}

/* Role "ctx-cost" (the launcher's probe, before the cases run): prints what our primary
 * context took off the quota, as cuMemGetInfo shows it, and gives the context back. */
static int role_ctx_cost(void)
{
    load();
    CUcontext c;
    CUdevice dev = 0;
    if (cu.cuInit(0) || cu.cuDeviceGet(&dev, 0) || cu.cuDevicePrimaryCtxRetain(&c, dev) ||
        cu.cuCtxSetCurrent(c)) {
        printf("error ctx\n");
        return 3;
    }
    size_t f = 0, t = 0;
    CUresult r = cu.cuMemGetInfo_v2(&f, &t);
    if (r != CUDA_SUCCESS || f > t) {
        printf("error meminfo %d\n", (int)r);
        return 4;
    }
    printf("ctx=%zu\n", t - f);
    cu.cuDevicePrimaryCtxRelease_v2(dev);
    return 0;
}

/* ---- launcher ------------------------------------------------------------ */

/* --emu-model=NAME (meson test vcuda-emu-model): the emulated GPU is that model, whose
 * contexts cost what a real one's do (hundreds of MiB), so the sizing a real GPU needs runs in
 * make check. --emu-pool-granularity=NMi (meson test vcuda-emu-pools): the emulated pools
 * reserve in chunks of N MiB, as an H200's did (docs/emulator-cuda.md, "Pools"). */
static int launcher(int argc, char **argv)
{
    for (;;) {
        if (argc >= 2 && strncmp(argv[1], "--emu-model=", 12) == 0)
            setenv("VCUDA_TEST_EMU_MODEL", argv[1] + 12, 1);
        else if (argc >= 2 && strncmp(argv[1], "--emu-pool-granularity=", 23) == 0)
            setenv("ACCEL_EMU_POOL_GRANULARITY", argv[1] + 23, 1);
        else
            break;
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    return vcuda_test_launch_sized(argv, WORK, CONTEXTS, 1ull << 30);
}

int main(int argc, char **argv)
{
    if (!getenv("VCUDA_TEST_CHILD"))
        return launcher(argc, argv);
    const char *limit = getenv("VCUDA_MEMORY_LIMIT");
    quota_total = limit ? strtoull(limit, NULL, 10) : 0;
    if (argc >= 3 && strcmp(argv[1], "--role") == 0) {
        if (strcmp(argv[2], "ctx-cost") == 0)
            return role_ctx_cost();
        if (strcmp(argv[2], "racer") == 0)
            return role_racer();
        if (strcmp(argv[2], "churn") == 0)
            return role_churn();
        if (strcmp(argv[2], "info") == 0)
            return role_info();
        if (strcmp(argv[2], "ipc") == 0 && argc >= 4)
            return role_ipc(argv[3]);
        if (strcmp(argv[2], "vmm-share") == 0)
            return role_vmm_share();
        return 2;
    }
    return tap_main(argc, argv);
}
