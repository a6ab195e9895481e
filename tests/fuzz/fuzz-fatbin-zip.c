/* fuzz-fatbin-zip.c — libFuzzer target for fatbin decompression (src/emu/fatbin-zip.c over
 * Debian's libzstd/liblz4): corrupt compressed PTX must fail cleanly, never write past the
 * buffer sized from the entry's header. Input: codec byte (1 LZ4, 2 zstd), u32 uncompressed
 * size (little endian), then the compressed bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fatbin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    uint32_t raw;
    memcpy(&raw, data + 1, 4);
    if (!raw || raw > (1u << 20))
        return 0;
    enum fatbin_codec c = data[0] == 1 ? FATBIN_LZ4 : data[0] == 2 ? FATBIN_ZSTD : FATBIN_PLAIN;
    uint8_t *dst = malloc(raw);
    if (!dst)
        return 0;
    long got = fatbin_decompress(c, data + 5, size - 5, dst, raw);
    if (got > (long)raw)
        abort();
    free(dst);
    return 0;
}
