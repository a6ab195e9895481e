/* driver.c — the hook table generated from hooks.def, the lazy loading of the
 * real libcuda.so.1 / libnvidia-ml.so.1, and the cuGetProcAddress hooks.
 *
 * cuGetProcAddress: the real driver answers first (so the CUDA version and the
 * per-thread-stream flags pick exactly the variant the driver would hand out);
 * if its pointer is the real address of a hooked export, the caller gets our
 * wrapper of that same variant; if the pointer is none we know (a driver that
 * hands out private entry points), our wrapper of the variant a table of
 * (name, CUDA version, flags) picks; otherwise the driver's own pointer. */
#include "vcuda.h"

#include "log.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

struct vc_real vc_real;

const struct vc_hook vc_hooks[] = {
#define VC_HOOK_CU(n) {#n, (void *)n, (void **)&vc_real.n, VC_LIB_CUDA},
#define VC_HOOK_NVML(n) {#n, (void *)n, (void **)&vc_real.n, VC_LIB_NVML},
#define VC_REAL_CU(n)
#define VC_REAL_NVML(n)
#include "hooks.def"
#undef VC_HOOK_CU
#undef VC_HOOK_NVML
#undef VC_REAL_CU
#undef VC_REAL_NVML
};
const unsigned vc_hook_count = sizeof(vc_hooks) / sizeof(vc_hooks[0]);

/* Functions we call but do not wrap, resolved along with the hooked ones. */
struct vc_real_only {
    const char *name;
    void **real;
    int lib;
};
static const struct vc_real_only vc_real_only[] = {
#define VC_HOOK_CU(n)
#define VC_HOOK_NVML(n)
#define VC_REAL_CU(n) {#n, (void **)&vc_real.n, VC_LIB_CUDA},
#define VC_REAL_NVML(n) {#n, (void **)&vc_real.n, VC_LIB_NVML},
#include "hooks.def"
#undef VC_HOOK_CU
#undef VC_HOOK_NVML
#undef VC_REAL_CU
#undef VC_REAL_NVML
};

const struct vc_hook *vc_hook_by_name(const char *name)
{
    for (unsigned i = 0; i < vc_hook_count; i++)
        if (strcmp(vc_hooks[i].name, name) == 0)
            return &vc_hooks[i];
    return NULL;
}

void *vc_hook_by_real(const void *real_fn)
{
    if (!real_fn)
        return NULL;
    for (unsigned i = 0; i < vc_hook_count; i++)
        if (*vc_hooks[i].real == real_fn)
            return vc_hooks[i].wrapper;
    return NULL;
}

/* One loader per library: state 0 = not loaded, 1 = loaded, -errno = failed
 * for good. The mutex is held across dlopen only; a hooked call made on the
 * same thread from inside that dlopen (a constructor) gets -EDEADLK instead of
 * a self-deadlock (pthread_once would hang there). */
struct loader {
    pthread_mutex_t lock;
    atomic_int state;
    const char *soname;
    int lib;
};

static struct loader cuda_loader = {PTHREAD_MUTEX_INITIALIZER, 0, "libcuda.so.1", VC_LIB_CUDA};
static struct loader nvml_loader = {PTHREAD_MUTEX_INITIALIZER, 0, "libnvidia-ml.so.1", VC_LIB_NVML};
static __thread bool in_load;

static int loader_run(struct loader *l)
{
    int st = atomic_load_explicit(&l->state, memory_order_acquire);
    if (VC_LIKELY(st == 1))
        return 0;
    if (st < 0)
        return st;
    if (in_load)
        return -EDEADLK;
    pthread_mutex_lock(&l->lock);
    in_load = true;
    st = atomic_load_explicit(&l->state, memory_order_acquire);
    if (st == 0) {
        void *h = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            log_error("cannot load %s: %s", l->soname, e ? e : "unknown error");
            st = -ENOENT;
        } else {
            for (unsigned i = 0; i < vc_hook_count; i++)
                if (vc_hooks[i].lib == l->lib)
                    *vc_hooks[i].real = vc_real_dlsym(h, vc_hooks[i].name);
            for (size_t i = 0; i < sizeof(vc_real_only) / sizeof(vc_real_only[0]); i++)
                if (vc_real_only[i].lib == l->lib)
                    *vc_real_only[i].real = vc_real_dlsym(h, vc_real_only[i].name);
            /* The handle stays open for the life of the process. */
            st = 1;
        }
        atomic_store_explicit(&l->state, st, memory_order_release);
    }
    in_load = false;
    pthread_mutex_unlock(&l->lock);
    return st == 1 ? 0 : st;
}

int vc_driver_ensure(void)
{
    return loader_run(&cuda_loader);
}

int vc_nvml_ensure(void)
{
    return loader_run(&nvml_loader);
}

/* fork: a child must not inherit a lock held by another thread of the parent. */
void vc_driver_atfork_prepare(void);
void vc_driver_atfork_parent(void);
void vc_driver_atfork_child(void);
void vc_driver_atfork_prepare(void)
{
    pthread_mutex_lock(&cuda_loader.lock);
    pthread_mutex_lock(&nvml_loader.lock);
}
void vc_driver_atfork_parent(void)
{
    pthread_mutex_unlock(&nvml_loader.lock);
    pthread_mutex_unlock(&cuda_loader.lock);
}
void vc_driver_atfork_child(void)
{
    pthread_mutex_init(&nvml_loader.lock, NULL);
    pthread_mutex_init(&cuda_loader.lock, NULL);
}

/* Is symbol (a base name as the runtime asks for it) one we hook in some
 * variant? Only used to diagnose a driver whose cuGetProcAddress hands out
 * pointers that are not its exported symbols. */
static bool hooked_base(const char *symbol)
{
    static const char *const suffixes[] = {"", "_v2", "_v3", "_v4", "_ptsz", "_ptds"};
    size_t n = strlen(symbol);
    for (unsigned i = 0; i < vc_hook_count; i++) {
        const char *h = vc_hooks[i].name;
        if (strncmp(h, symbol, n) != 0)
            continue;
        for (size_t k = 0; k < sizeof(suffixes) / sizeof(suffixes[0]); k++)
            if (strcmp(h + n, suffixes[k]) == 0)
                return true;
    }
    return false;
}

/* The second way (issue 8): which exported variant the driver hands out for
 * (name, cudaVersion, flags), for the names we hook, so a driver whose
 * cuGetProcAddress returns private entry points (none of its exports) still
 * gets our wrapper of the right variant. The versions are when each variant
 * became what cuGetProcAddress returns (NVIDIA's cuda.h maps each API to its
 * versioned export and the CUDA version that introduced it; the emulator's
 * table, src/emu/cuda_proc.c, follows the same facts). ptsz: the variant for
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. */
struct proc_variant {
    const char *base;
    int version;
    bool ptsz;
    const char *symbol;
};

static const struct proc_variant proc_variants[] = {
    {"cuGetProcAddress", 11030, false, "cuGetProcAddress"},
    {"cuGetProcAddress", 12000, false, "cuGetProcAddress_v2"},
    {"cuDevicePrimaryCtxRetain", 7000, false, "cuDevicePrimaryCtxRetain"},
    {"cuDevicePrimaryCtxRelease", 7000, false, "cuDevicePrimaryCtxRelease"},
    {"cuDevicePrimaryCtxRelease", 11000, false, "cuDevicePrimaryCtxRelease_v2"},
    {"cuDevicePrimaryCtxReset", 7000, false, "cuDevicePrimaryCtxReset"},
    {"cuDevicePrimaryCtxReset", 11000, false, "cuDevicePrimaryCtxReset_v2"},
    {"cuCtxCreate", 2000, false, "cuCtxCreate"},
    {"cuCtxCreate", 3020, false, "cuCtxCreate_v2"},
    {"cuCtxCreate", 11040, false, "cuCtxCreate_v3"},
    {"cuCtxCreate", 12050, false, "cuCtxCreate_v4"},
    {"cuCtxDestroy", 2000, false, "cuCtxDestroy"},
    {"cuCtxDestroy", 4000, false, "cuCtxDestroy_v2"},
    {"cuMemAlloc", 2000, false, "cuMemAlloc"},
    {"cuMemAlloc", 3020, false, "cuMemAlloc_v2"},
    {"cuMemAllocPitch", 2000, false, "cuMemAllocPitch"},
    {"cuMemAllocPitch", 3020, false, "cuMemAllocPitch_v2"},
    {"cuMemAllocManaged", 6000, false, "cuMemAllocManaged"},
    {"cuMemFree", 2000, false, "cuMemFree"},
    {"cuMemFree", 3020, false, "cuMemFree_v2"},
    {"cuMemAllocAsync", 11020, false, "cuMemAllocAsync"},
    {"cuMemAllocAsync", 11020, true, "cuMemAllocAsync_ptsz"},
    {"cuMemAllocFromPoolAsync", 11020, false, "cuMemAllocFromPoolAsync"},
    {"cuMemAllocFromPoolAsync", 11020, true, "cuMemAllocFromPoolAsync_ptsz"},
    {"cuMemFreeAsync", 11020, false, "cuMemFreeAsync"},
    {"cuMemFreeAsync", 11020, true, "cuMemFreeAsync_ptsz"},
    {"cuMemPoolCreate", 11020, false, "cuMemPoolCreate"},
    {"cuMemPoolDestroy", 11020, false, "cuMemPoolDestroy"},
    {"cuMemPoolTrimTo", 11020, false, "cuMemPoolTrimTo"},
    {"cuMemCreate", 10020, false, "cuMemCreate"},
    {"cuMemRelease", 10020, false, "cuMemRelease"},
    {"cuMemMap", 10020, false, "cuMemMap"},
    {"cuMemUnmap", 10020, false, "cuMemUnmap"},
    {"cuMemRetainAllocationHandle", 11000, false, "cuMemRetainAllocationHandle"},
    {"cuMemExportToShareableHandle", 10020, false, "cuMemExportToShareableHandle"},
    {"cuMemImportFromShareableHandle", 10020, false, "cuMemImportFromShareableHandle"},
    {"cuArrayCreate", 2000, false, "cuArrayCreate"},
    {"cuArrayCreate", 3020, false, "cuArrayCreate_v2"},
    {"cuArray3DCreate", 2000, false, "cuArray3DCreate"},
    {"cuArray3DCreate", 3020, false, "cuArray3DCreate_v2"},
    {"cuArrayDestroy", 2000, false, "cuArrayDestroy"},
    {"cuMipmappedArrayCreate", 5000, false, "cuMipmappedArrayCreate"},
    {"cuMipmappedArrayDestroy", 5000, false, "cuMipmappedArrayDestroy"},
    {"cuMemGetInfo", 2000, false, "cuMemGetInfo"},
    {"cuMemGetInfo", 3020, false, "cuMemGetInfo_v2"},
    {"cuDeviceTotalMem", 2000, false, "cuDeviceTotalMem"},
    {"cuDeviceTotalMem", 3020, false, "cuDeviceTotalMem_v2"},
    {"cuLaunchKernel", 4000, false, "cuLaunchKernel"},
    {"cuLaunchKernel", 7000, true, "cuLaunchKernel_ptsz"},
    {"cuLaunchKernelEx", 11060, false, "cuLaunchKernelEx"},
    {"cuLaunchKernelEx", 11060, true, "cuLaunchKernelEx_ptsz"},
    {"cuLaunchCooperativeKernel", 9000, false, "cuLaunchCooperativeKernel"},
    {"cuLaunchCooperativeKernel", 9000, true, "cuLaunchCooperativeKernel_ptsz"},
    {"cuLaunchCooperativeKernelMultiDevice", 9000, false, "cuLaunchCooperativeKernelMultiDevice"},
    {"cuGraphInstantiate", 10000, false, "cuGraphInstantiate"},
    {"cuGraphInstantiate", 11000, false, "cuGraphInstantiate_v2"},
    {"cuGraphInstantiate", 12000, false, "cuGraphInstantiateWithFlags"},
    {"cuGraphInstantiateWithFlags", 11040, false, "cuGraphInstantiateWithFlags"},
    {"cuGraphInstantiateWithParams", 12000, false, "cuGraphInstantiateWithParams"},
    {"cuGraphInstantiateWithParams", 12000, true, "cuGraphInstantiateWithParams_ptsz"},
    {"cuGraphExecDestroy", 10000, false, "cuGraphExecDestroy"},
    {"cuGraphUpload", 11010, false, "cuGraphUpload"},
    {"cuGraphUpload", 11010, true, "cuGraphUpload_ptsz"},
    {"cuDeviceGraphMemTrim", 11040, false, "cuDeviceGraphMemTrim"},
    {"cuGraphLaunch", 10000, false, "cuGraphLaunch"},
    {"cuGraphLaunch", 10000, true, "cuGraphLaunch_ptsz"},
};

/* Our wrapper of the variant the driver would hand out, or NULL (not a name
 * we hook, a version before the API, or a variant the driver lacks). */
static void *wrapper_by_table(const char *symbol, int cuda_version, cuuint64_t flags)
{
    bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const struct proc_variant *best = NULL, *best_ptsz = NULL;
    for (size_t i = 0; i < sizeof(proc_variants) / sizeof(proc_variants[0]); i++) {
        const struct proc_variant *v = &proc_variants[i];
        if (strcmp(v->base, symbol) != 0 || v->version > cuda_version)
            continue;
        const struct proc_variant **slot = v->ptsz ? &best_ptsz : &best;
        if (!*slot || v->version >= (*slot)->version)
            *slot = v;
    }
    if (per_thread && best_ptsz)
        best = best_ptsz;
    const struct vc_hook *h = best ? vc_hook_by_name(best->symbol) : NULL;
    return h && *h->real ? h->wrapper : NULL;
}

static void *hooked_variant(const char *symbol, void *fn, int cuda_version, cuuint64_t flags)
{
    void *w = vc_hook_by_real(fn);
    if (w)
        return w;
    /* Defensive: a driver that finds its own entry points by name (dlsym on
     * RTLD_DEFAULT, or references not bound inside itself at link time) gets
     * the first definition in the process, which is our preloaded wrapper.
     * That answer is already accounted: hand it on, and do not warn below.
     * Neither the emulator (linked -Bsymbolic-functions, see
     * tests/emu/test-selfbind.c) nor NVIDIA's driver is known to do this. */
    for (unsigned i = 0; i < vc_hook_count; i++)
        if (vc_hooks[i].wrapper == fn)
            return fn;
    /* The pointer is none we know: the driver hands out private entry points.
     * Our wrapper of the variant it would pick by name calls that export. */
    void *t = symbol ? wrapper_by_table(symbol, cuda_version, flags) : NULL;
    if (t)
        return t;
    if (symbol && hooked_base(symbol)) {
        static atomic_int warned;
        if (atomic_exchange_explicit(&warned, 1, memory_order_relaxed) == 0)
            log_warn("cuGetProcAddress(\"%s\") returned %p, which is none of the driver's "
                     "exported symbols: calls through it are not accounted",
                     symbol, fn);
    }
    return fn;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    if (vc_driver_ensure() < 0 || !vc_real.cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = vc_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = hooked_variant(symbol, *pfn, cudaVersion, flags);
    return r;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    if (vc_driver_ensure() < 0 || !vc_real.cuGetProcAddress)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = vc_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = hooked_variant(symbol, *pfn, cudaVersion, flags);
    return r;
}
