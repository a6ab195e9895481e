/* driver.c — the hook table generated from hooks.def, the lazy loading of the
 * real libcuda.so.1 / libnvidia-ml.so.1, and the cuGetProcAddress hooks.
 *
 * cuGetProcAddress: the real driver answers first (so the CUDA version and the
 * per-thread-stream flags pick exactly the variant the driver would hand out);
 * if its pointer is the real address of a hooked export, the caller gets our
 * wrapper of that same variant, otherwise the driver's own pointer. */
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

static void *hooked_variant(const char *symbol, void *fn)
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
        *pfn = hooked_variant(symbol, *pfn);
    return r;
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    if (vc_driver_ensure() < 0 || !vc_real.cuGetProcAddress)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = vc_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = hooked_variant(symbol, *pfn);
    return r;
}
