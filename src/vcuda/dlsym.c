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
 * preloaded dlsym. The real ones are read from libc's symbol table.
 *
 * dlvsym is overridden too: dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34") (or
 * GLIBC_2.2.5) would otherwise hand out glibc's unhooked resolver, and
 * dlvsym(handle, "cuMemAlloc_v2", any) the driver's unhooked entry point.
 *
 * RTLD_NEXT: the real dlsym resolves it relative to its caller's return
 * address. Every name we do not hook is forwarded with a tail call (-O2), so
 * the real dlsym sees the application's caller and the answer is exact
 * (tests/vcuda/test-vcuda-next.c). A hooked name found through RTLD_NEXT is
 * resolved relative to this library, then answered with our wrapper. */
#include "vcuda.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);

static dlsym_fn real_dlsym_ptr;
static dlvsym_fn real_dlvsym_ptr;

/* glibc's dlsym and dlvsym cannot be asked for by name from here: both names
 * are ours now (a call to dlvsym from this library binds to our own export).
 * So they are read from libc's dynamic symbol table directly, through its GNU
 * hash table (the ELF gABI / GNU hash format; both of glibc 2.36's versions of
 * each, GLIBC_2.2.5 and GLIBC_2.34, are one address); a glibc older than 2.34
 * has them in libdl.so.2 instead (in libvcuda's DT_NEEDED, so loaded: meson.build),
 * where they are looked for when libc has none. The loaded objects are
 * found through ld.so's r_debug list, not dl_iterate_phdr, and no libc string
 * function is called: this runs while the ASan runtime initializes itself
 * (it resolves its interceptors with dlsym/dlvsym), when its own interceptors
 * of those functions cannot be called yet. */
extern struct r_debug _r_debug;

__attribute__((no_sanitize("address", "undefined"))) static bool str_eq(const char *a,
                                                                        const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

/* Does the file name's last component start with want ("libc.so")? */
__attribute__((no_sanitize("address", "undefined"))) static bool is_lib(const char *path,
                                                                        const char *want)
{
    const char *base = path;
    for (const char *p = path; *p; p++)
        if (*p == '/')
            base = p + 1;
    for (; *want; want++, base++)
        if (*base != *want)
            return false;
    return true;
}

__attribute__((no_sanitize("address", "undefined"))) static uint32_t gnu_hash(const char *s)
{
    uint32_t h = 5381;
    for (; *s; s++)
        h = h * 33 + (unsigned char)*s;
    return h;
}

__attribute__((no_sanitize("address", "undefined"))) static void *
lookup_in(const struct link_map *m, const char *name)
{
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gh = NULL;
    for (const ElfW(Dyn) *dyn = m->l_ld; dyn && dyn->d_tag != DT_NULL; dyn++) {
        /* ld.so relocates these in place on x86_64; not on every architecture. */
        ElfW(Addr) p = dyn->d_un.d_ptr;
        if (p < m->l_addr)
            p += m->l_addr;
        if (dyn->d_tag == DT_SYMTAB)
            symtab = (const ElfW(Sym) *)p;
        else if (dyn->d_tag == DT_STRTAB)
            strtab = (const char *)p;
        else if (dyn->d_tag == DT_GNU_HASH)
            gh = (const uint32_t *)p;
    }
    if (!symtab || !strtab || !gh || gh[0] == 0)
        return NULL;
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_size = gh[2];
    const ElfW(Addr) *bloom = (const ElfW(Addr) *)(const void *)&gh[4];
    const uint32_t *buckets = (const uint32_t *)(const void *)&bloom[bloom_size];
    const uint32_t *chain = &buckets[nbuckets];
    uint32_t h = gnu_hash(name);
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset)
        return NULL;
    for (;; i++) {
        uint32_t h2 = chain[i - symoffset];
        const ElfW(Sym) *s = &symtab[i];
        if ((h | 1) == (h2 | 1) && s->st_shndx != SHN_UNDEF && str_eq(strtab + s->st_name, name))
            return (void *)(m->l_addr + s->st_value);
        if (h2 & 1)
            return NULL;
    }
}

/* name from libc, else from libdl (glibc < 2.34: dlsym and dlvsym live there). */
__attribute__((no_sanitize("address", "undefined"))) static void *libc_symbol(const char *name)
{
    static const char *const libs[] = {"libc.so", "libdl.so"};
    for (unsigned k = 0; k < sizeof(libs) / sizeof(libs[0]); k++)
        for (const struct link_map *m = _r_debug.r_map; m; m = m->l_next)
            if (m->l_name && is_lib(m->l_name, libs[k])) {
                void *p = lookup_in(m, name);
                if (p)
                    return p;
                break;
            }
    return NULL;
}

__attribute__((no_sanitize("address", "undefined"))) static dlsym_fn real_dlsym_get(void)
{
    dlsym_fn f = __atomic_load_n(&real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (VC_LIKELY(f != NULL))
        return f;
    /* Idempotent: racing threads store the same pointer. */
    f = (dlsym_fn)libc_symbol("dlsym");
    __atomic_store_n(&real_dlsym_ptr, f, __ATOMIC_RELEASE);
    return f;
}

__attribute__((no_sanitize("address", "undefined"))) static dlvsym_fn real_dlvsym_get(void)
{
    dlvsym_fn f = __atomic_load_n(&real_dlvsym_ptr, __ATOMIC_ACQUIRE);
    if (VC_LIKELY(f != NULL))
        return f;
    f = (dlvsym_fn)libc_symbol("dlvsym");
    __atomic_store_n(&real_dlvsym_ptr, f, __ATOMIC_RELEASE);
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

/* dlvsym: the same answers as dlsym, whatever the version asked for. Asking
 * for glibc's own dlsym or dlvsym by version (the way this library finds them
 * elsewhere, and the way around an unversioned dlsym override) gets ours; a
 * hooked name gets our wrapper (a driver's symbols have no versions, so any
 * version string finds them); everything else is glibc's answer. */
__attribute__((no_sanitize("address", "undefined"))) VC_EXPORT void *
dlvsym(void *handle, const char *name, const char *version)
{
    dlvsym_fn f = real_dlvsym_get();
    if (!f)
        return NULL;
    const char *n = name;
    __asm__("" : "+r"(n));
    if (n && n[0] == 'd' && n[1] == 'l') {
        if (str_eq(n, "dlsym"))
            return f(handle, name, version) ? (void *)dlsym : NULL;
        if (str_eq(n, "dlvsym"))
            return f(handle, name, version) ? (void *)dlvsym : NULL;
    }
    if (n && ((n[0] == 'c' && n[1] == 'u') || (n[0] == 'n' && n[1] == 'v'))) {
        const struct vc_hook *h = vc_hook_by_name(name);
        if (h) {
            void *p = f(handle, name, version);
            return p ? h->wrapper : NULL;
        }
    }
    return f(handle, name, version);
}
