/* dlsym.c — our dlsym override and the way to the real one.
 *
 * The CUDA runtime dlopen()s libcuda.so.1 and looks entry points up by handle,
 * which plain symbol interposition never sees; so dlsym itself is overridden:
 * a hooked name (hooks.def) that the real dlsym resolves is answered with our
 * wrapper, everything else with the real answer.
 *
 * Built on its own with -O2 and without sanitizers (meson.build): an
 * instrumented dlsym crashes while the ASan runtime itself resolves symbols,
 * and at -O0 the call through the real pointer could recurse into another
 * preloaded dlsym. The real one comes from dlvsym(RTLD_NEXT) by version.
 *
 * RTLD_NEXT: the real dlsym resolves it relative to its caller's return
 * address. Every name we do not hook is forwarded with a tail call (-O2), so
 * the real dlsym sees the application's caller and the answer is exact
 * (tests/vcuda/test-vcuda-next.c). A hooked name found through RTLD_NEXT is
 * resolved relative to this library, then answered with our wrapper. */
#include "vcuda.h"

#include <dlfcn.h>
#include <stddef.h>

typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn real_dlsym_ptr;

__attribute__((no_sanitize("address", "undefined"))) static dlsym_fn real_dlsym_get(void)
{
    dlsym_fn f = __atomic_load_n(&real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (VC_LIKELY(f != NULL))
        return f;
    /* Idempotent: racing threads store the same pointer. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]) && !f; i++)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    __atomic_store_n(&real_dlsym_ptr, f, __ATOMIC_RELEASE);
    return f;
}

__attribute__((no_sanitize("address", "undefined"))) void *vc_real_dlsym(void *handle,
                                                                         const char *name)
{
    dlsym_fn f = real_dlsym_get();
    return f ? f(handle, name) : NULL;
}

__attribute__((no_sanitize("address", "undefined"))) VC_EXPORT void *dlsym(void *handle,
                                                                           const char *name)
{
    dlsym_fn f = real_dlsym_get();
    if (!f)
        return NULL;
    /* glibc declares name nonnull; launder it so a NULL from a buggy caller
     * is passed on rather than dereferenced here. */
    const char *n = name;
    __asm__("" : "+r"(n));
    /* Cheap filter first: only cu* and nvml* names can be hooked. */
    if (n && ((n[0] == 'c' && n[1] == 'u') || (n[0] == 'n' && n[1] == 'v'))) {
        const struct vc_hook *h = vc_hook_by_name(name);
        if (h) {
            void *p = f(handle, name);
            return p ? h->wrapper : NULL;
        }
    }
    /* A tail call: keeps the caller's return address for RTLD_NEXT. */
    return f(handle, name);
}
