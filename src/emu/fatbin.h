/* fatbin.h — the fatbinaries nvcc embeds in programs: a wrapper (magic 0x466243B1) pointing at
 * a fatbin (magic 0xBA55ED50) whose entries are PTX (kind 1) or SASS/ELF (kind 2), each
 * possibly compressed (LZ4 or zstd). The emulator runs PTX only, so it picks the PTX entry.
 * Fatbins are outside data (any program hands one to cuModuleLoadData): the parser never
 * reads past the length it is given and checks every size. libc only (decompression loads
 * Debian's libzstd.so.1 / liblz4.so.1 at run time). Fuzz targets: tests/fuzz/fuzz-fatbin.c.
 *
 * Layout (as nvcc 13 writes it; facts in docs/emulator-cuda.md): header {u32 magic, u16
 * version, u16 header size, u64 size of the entries}; each entry: kind u16 at +0, header size
 * u32 at +4, payload size u64 at +8, compressed size u32 at +16, SM version u32 at +28, flags
 * u64 at +40 (0x2000 LZ4, 0x8000 zstd), uncompressed size u64 at +56; the payload follows the
 * entry's header. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243B1u
#define FATBIN_MAX (256u << 20)    /* largest fatbin read from memory */
#define FATBIN_PTX_MAX (64u << 20) /* largest PTX text after decompression */

enum fatbin_codec { FATBIN_PLAIN, FATBIN_LZ4, FATBIN_ZSTD };

struct fatbin_entry {
    unsigned kind; /* 1 PTX, 2 ELF */
    unsigned sm;   /* e.g. 90 */
    enum fatbin_codec codec;
    const uint8_t *data; /* payload (compressed bytes when codec != PLAIN) */
    size_t len;
    uint64_t raw_size; /* uncompressed size (compressed entries) */
};

/* image points at a wrapper or a fatbin in memory (no length known, as cuModuleLoadData
 * gets it): the fatbin and its length from its header. -ENOENT when image is neither. */
int fatbin_locate(const void *image, const uint8_t **ret_fatbin, size_t *ret_len);

/* The PTX entry of the highest SM version in the len bytes at buf (one or more fatbins back
 * to back). -ENOEXEC: well formed but no PTX (SASS only); -ENODATA: no entries at all (nvcc
 * emits such an empty fatbin beside the real one); -EINVAL: malformed. */
int fatbin_find_ptx(const uint8_t *buf, size_t len, struct fatbin_entry *ret);

/* The entry's PTX text, NUL-terminated, malloc'ed (caller frees), length in *ret_len.
 * -ELIBACC when the codec's library cannot be loaded (message on stderr says which), -EINVAL
 * for corrupt data or a size above FATBIN_PTX_MAX, -ENOMEM. */
int fatbin_ptx_text(const struct fatbin_entry *e, char **ret_text, size_t *ret_len);

/* Raw decompression (what fatbin_ptx_text uses): src into dst of exactly raw bytes.
 * Returns the bytes produced or a negative errno as above. */
long fatbin_decompress(enum fatbin_codec codec, const uint8_t *src, size_t len, uint8_t *dst,
                       size_t raw);
