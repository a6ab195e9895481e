/* fatbin-zip.c — decompression of fatbin entries with Debian's libzstd.so.1 and liblz4.so.1,
 * loaded when first needed: the emulated driver links libc only, and programs without
 * compressed fatbins never load them. A missing library is a clear error once on stderr
 * (install the package scripts/deps.sh names). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "fatbin.h"

struct codec_lib {
    const char *soname, *package, *fn_name, *err_name;
    pthread_once_t once;
    void *fn;     /* ZSTD_decompress / LZ4_decompress_safe */
    void *is_err; /* ZSTD_isError */
};

static struct codec_lib zstd = {
    "libzstd.so.1", "libzstd1", "ZSTD_decompress", "ZSTD_isError", PTHREAD_ONCE_INIT, NULL, NULL};
static struct codec_lib lz4 = {
    "liblz4.so.1", "liblz4-1", "LZ4_decompress_safe", NULL, PTHREAD_ONCE_INIT, NULL, NULL};

static void load(struct codec_lib *l)
{
    void *h = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
    void *fn = h ? dlsym(h, l->fn_name) : NULL;
    void *is_err = h && l->err_name ? dlsym(h, l->err_name) : NULL;
    if (!fn || (l->err_name && !is_err)) {
        fprintf(stderr,
                "accel-emu libcuda: cannot load %s (%s) to decompress this program's PTX; "
                "install the Debian package %s\n",
                l->soname, h ? "symbol missing" : dlerror(), l->package);
        return;
    }
    l->is_err = is_err;
    l->fn = fn;
}

static void load_zstd(void)
{
    load(&zstd);
}

static void load_lz4(void)
{
    load(&lz4);
}

long fatbin_decompress(enum fatbin_codec codec, const uint8_t *src, size_t len, uint8_t *dst,
                       size_t raw)
{
    if (codec == FATBIN_ZSTD) {
        pthread_once(&zstd.once, load_zstd);
        if (!zstd.fn)
            return -ELIBACC;
        size_t (*dec)(void *, size_t, const void *, size_t) =
            (size_t(*)(void *, size_t, const void *, size_t))zstd.fn;
        unsigned (*is_err)(size_t) = (unsigned (*)(size_t))zstd.is_err;
        size_t got = dec(dst, raw, src, len);
        if (is_err(got))
            return -EINVAL;
        return (long)got;
    }
    if (codec == FATBIN_LZ4) {
        pthread_once(&lz4.once, load_lz4);
        if (!lz4.fn)
            return -ELIBACC;
        if (len > 0x7e000000u || raw > 0x7e000000u)
            return -EINVAL;
        int (*dec)(const char *, char *, int, int) =
            (int (*)(const char *, char *, int, int))lz4.fn;
        int got = dec((const char *)src, (char *)dst, (int)len, (int)raw);
        return got < 0 ? -EINVAL : got;
    }
    return -EINVAL;
}
