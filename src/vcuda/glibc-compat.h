/* glibc-compat.h — keeps libvcuda loadable in containers with glibc 2.17 (CentOS 7) and up.
 *
 * Force-included into every libvcuda source (meson.build: -include). libvcuda is preloaded
 * into whatever image a tenant runs; the symbol versions it imports must exist there. The
 * build machine's headers (Debian 12, glibc 2.36) bind some calls to versions added long after
 * 2.17 although the function itself is older:
 *   - glibc 2.34 merged libdl and libpthread into libc: dlopen, dlerror, pthread_mutex_trylock,
 *     ... are now @GLIBC_2.34; their first versions (GLIBC_2.2.5 on x86_64, GLIBC_2.17 on
 *     aarch64, whose ABI starts there) are still exported by libc.so.6 as compat symbols, and
 *     by libdl.so.2 / libpthread.so.0 on an older glibc. The directives below bind each call
 *     to that first version; meson.build puts libdl.so.2 and libpthread.so.0 in DT_NEEDED so
 *     an older glibc loads the libraries that define them (on 2.34+ they are empty stubs).
 *   - fcntl became fcntl64@GLIBC_2.28 under _FILE_OFFSET_BITS=64; on 64-bit targets the two
 *     are one function, so the call is bound to fcntl's first version.
 *   - the stat family became real symbols in 2.33 (fstat64@GLIBC_2.33, ...; before, inline
 *     wrappers around __fxstat64): glibc-compat.c defines them inside the library (hidden)
 *     as the system calls they are.
 * A .symver for a function a file does not call adds nothing to it. dlsym and dlvsym are not
 * listed: libvcuda defines them (dlsym.c finds glibc's in libc's or libdl's symbol table).
 * The test vcuda-glibc (tests/vcuda/test-glibc.py) fails on any import newer than GLIBC_2.17.
 */
#ifndef VCUDA_GLIBC_COMPAT_H
#define VCUDA_GLIBC_COMPAT_H

#if defined(__x86_64__)
#define VC_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define VC_GLIBC_BASE "GLIBC_2.17"
#endif

#ifdef VC_GLIBC_BASE
#define VC_GLIBC_PIN(fn) __asm__(".symver " #fn "," #fn "@" VC_GLIBC_BASE)
#define VC_GLIBC_PIN_AS(fn, old) __asm__(".symver " #fn "," #old "@" VC_GLIBC_BASE)

/* libdl (moved into libc in 2.34) */
VC_GLIBC_PIN(dlopen);
VC_GLIBC_PIN(dlclose);
VC_GLIBC_PIN(dlerror);
VC_GLIBC_PIN(dladdr);
/* libpthread (moved into libc in 2.34; pthread_mutex_lock/unlock/init were always in libc) */
VC_GLIBC_PIN(pthread_mutex_trylock);
VC_GLIBC_PIN(pthread_mutexattr_init);
VC_GLIBC_PIN(pthread_mutexattr_destroy);
VC_GLIBC_PIN(pthread_mutexattr_settype);
VC_GLIBC_PIN(pthread_once);
VC_GLIBC_PIN(pthread_create);
VC_GLIBC_PIN(pthread_join);
VC_GLIBC_PIN(pthread_detach);
VC_GLIBC_PIN(pthread_key_create);
VC_GLIBC_PIN(pthread_key_delete);
VC_GLIBC_PIN(pthread_getspecific);
VC_GLIBC_PIN(pthread_setspecific);
VC_GLIBC_PIN(pthread_kill);
VC_GLIBC_PIN(pthread_rwlock_init);
VC_GLIBC_PIN(pthread_rwlock_destroy);
VC_GLIBC_PIN(pthread_rwlock_rdlock);
VC_GLIBC_PIN(pthread_rwlock_wrlock);
VC_GLIBC_PIN(pthread_rwlock_unlock);
/* fcntl64@GLIBC_2.28 is fcntl on 64-bit targets */
VC_GLIBC_PIN_AS(fcntl64, fcntl);
#endif

#endif
