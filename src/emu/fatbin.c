/* fatbin.c — reads nvcc's fatbinaries and picks their PTX (see fatbin.h). */
#include "fatbin.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define FLAG_LZ4 0x2000ull
#define FLAG_ZSTD 0x8000ull

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

int fatbin_locate(const void *image, const uint8_t **ret_fatbin, size_t *ret_len)
{
    const uint8_t *p = image;
    if (!p)
        return -EINVAL;
    if (rd32(p) == FATBIN_WRAPPER_MAGIC) {
        /* {u32 magic, u32 version, const void *fatbin, void *filenames} */
        const void *inner;
        memcpy(&inner, p + 8, sizeof(inner));
        if (!inner)
            return -EINVAL;
        p = inner;
    }
    if (rd32(p) != FATBIN_MAGIC)
        return -ENOENT;
    uint64_t total = (uint64_t)rd16(p + 6) + rd64(p + 8);
    if (rd16(p + 6) < 16 || total > FATBIN_MAX)
        return -EINVAL;
    *ret_fatbin = p;
    *ret_len = (size_t)total;
    return 0;
}

/* One entry at p (avail bytes left in its fatbin): fills e, the entry's total size in *ret. */
static int entry(const uint8_t *p, size_t avail, struct fatbin_entry *e, size_t *ret)
{
    if (avail < 64)
        return -EINVAL;
    uint32_t hsize = rd32(p + 4);
    uint64_t psize = rd64(p + 8);
    if (hsize < 64 || hsize > avail || psize > avail - hsize)
        return -EINVAL;
    uint64_t flags = rd64(p + 40);
    e->kind = rd16(p);
    e->sm = rd32(p + 28);
    e->data = p + hsize;
    e->len = (size_t)psize;
    e->raw_size = 0;
    e->codec = FATBIN_PLAIN;
    if (flags & (FLAG_LZ4 | FLAG_ZSTD)) {
        if ((flags & FLAG_LZ4) && (flags & FLAG_ZSTD))
            return -EINVAL;
        e->codec = flags & FLAG_ZSTD ? FATBIN_ZSTD : FATBIN_LZ4;
        uint32_t csize = rd32(p + 16);
        e->raw_size = rd64(p + 56);
        if (!csize || csize > psize || !e->raw_size)
            return -EINVAL;
        e->len = csize; /* the payload is padded past the compressed bytes */
    }
    *ret = hsize + (size_t)psize;
    return 0;
}

int fatbin_find_ptx(const uint8_t *buf, size_t len, struct fatbin_entry *ret)
{
    if (!buf)
        return -EINVAL;
    bool found = false, any = false;
    size_t off = 0;
    while (off < len) {
        if (len - off < 16 || rd32(buf + off) != FATBIN_MAGIC)
            return -EINVAL;
        size_t hsize = rd16(buf + off + 6);
        uint64_t size = rd64(buf + off + 8);
        if (hsize < 16 || hsize > len - off || size > len - off - hsize)
            return -EINVAL;
        const uint8_t *p = buf + off + hsize;
        size_t left = (size_t)size;
        while (left) {
            struct fatbin_entry e;
            size_t used;
            int r = entry(p, left, &e, &used);
            if (r < 0)
                return r;
            any = true;
            if (e.kind == 1 && (!found || e.sm > ret->sm)) {
                *ret = e;
                found = true;
            }
            p += used;
            left -= used;
        }
        off += hsize + (size_t)size;
    }
    if (found)
        return 0;
    return any ? -ENOEXEC : -ENODATA;
}

int fatbin_ptx_text(const struct fatbin_entry *e, char **ret_text, size_t *ret_len)
{
    size_t n = e->codec == FATBIN_PLAIN ? e->len : (size_t)e->raw_size;
    if (e->codec != FATBIN_PLAIN && e->raw_size > FATBIN_PTX_MAX)
        return -EINVAL;
    if (n > FATBIN_PTX_MAX)
        return -EINVAL;
    char *t = malloc(n + 1);
    if (!t)
        return -ENOMEM;
    if (e->codec == FATBIN_PLAIN) {
        memcpy(t, e->data, n);
    } else {
        long got = fatbin_decompress(e->codec, e->data, e->len, (uint8_t *)t, n);
        if (got < 0) {
            free(t);
            return (int)got;
        }
        n = (size_t)got;
    }
    t[n] = 0;
    *ret_text = t;
    *ret_len = strnlen(t, n);
    return 0;
}
