/* selfbind-dlsym.c — the dlsym override of the preloaded stand-in for libvcuda.so
 * (selfbind-count.c): as libvcuda's, it answers a name the stand-in exports with the stand-in's
 * function whatever handle it is asked on, everything else with glibc's answer. The emulated
 * driver's cuGetProcAddress must not be fooled by it.
 *
 * Built on its own, optimized and uninstrumented (tests/emu/meson.build): the ASan runtime
 * calls dlsym before it is initialized, so this code calls nothing instrumented. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>

#include "cuda_api.h"
#include "nvml_api.h"

typedef void *(*dlsym_fn)(void *, const char *);

static const struct {
    const char *name;
    void *fn;
} own[] = {
    {"cuDeviceGetPCIBusId", (void *)cuDeviceGetPCIBusId},
    {"cuDevicePrimaryCtxRelease_v2", (void *)cuDevicePrimaryCtxRelease_v2},
    {"cuGetProcAddress_v2", (void *)cuGetProcAddress_v2},
    {"cuMemAlloc_v2", (void *)cuMemAlloc_v2},
    {"cuDeviceCanAccessPeer", (void *)cuDeviceCanAccessPeer},
    {"nvmlInit_v2", (void *)nvmlInit_v2},
    {"nvmlDeviceGetCount_v2", (void *)nvmlDeviceGetCount_v2},
    {"nvmlDeviceGetHandleByIndex_v2", (void *)nvmlDeviceGetHandleByIndex_v2},
};

static bool same(const char *a, const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

__attribute__((no_sanitize("address", "undefined"))) static dlsym_fn real(void)
{
    static dlsym_fn f;
    dlsym_fn r = __atomic_load_n(&f, __ATOMIC_ACQUIRE);
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; !r && i < sizeof(versions) / sizeof(versions[0]); i++)
        r = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    __atomic_store_n(&f, r, __ATOMIC_RELEASE);
    return r;
}

/* glibc's dlsym, for the stand-in's forwarding and the test's own look-ups. */
__attribute__((no_sanitize("address", "undefined"))) void *selfbind_real_dlsym(void *h,
                                                                               const char *name);
__attribute__((no_sanitize("address", "undefined"))) void *selfbind_real_dlsym(void *h,
                                                                               const char *name)
{
    dlsym_fn f = real();
    return f ? f(h, name) : NULL;
}

__attribute__((no_sanitize("address", "undefined"))) void *dlsym(void *h, const char *name)
{
    dlsym_fn f = real();
    if (!f)
        return NULL;
    const char *n = name;
    __asm__("" : "+r"(n)); /* glibc says nonnull: keep the NULL check */
    if (n && ((n[0] == 'c' && n[1] == 'u') || (n[0] == 'n' && n[1] == 'v')))
        for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
            if (same(own[i].name, n))
                return f(h, n) ? own[i].fn : NULL;
    return f(h, n);
}
