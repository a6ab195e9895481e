/* fuzz-fatbin.c — libFuzzer target for the emulator's fatbin reader (src/emu/fatbin.c): the
 * bytes a program hands to cuModuleLoadData/cuLibraryLoadData as a fatbinary. Picks the PTX
 * entry, decompresses it (zstd/LZ4 through the Debian libraries) and reads the PTX's kernels
 * and variables, as the driver does. Checks: no read past the buffer (ASan), the entry lies
 * inside the input, the text is terminated and within its cap. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fatbin.h"
#include "ptx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fatbin_entry e;
    if (fatbin_find_ptx(data, size, &e) != 0)
        return 0;
    if (e.kind != 1 || e.data < data || e.len > size || e.data + e.len > data + size)
        abort();
    char *text;
    size_t len;
    if (fatbin_ptx_text(&e, &text, &len) != 0)
        return 0;
    if (len > FATBIN_PTX_MAX || text[len] != 0)
        abort();
    size_t n = 0, ng = 0;
    ptx_parse(text, len, NULL, 0, &n);
    struct ptx_global *g;
    if (ptx_globals(text, len, &g, &ng) == 0)
        ptx_globals_free(g, ng);
    free(text);
    return 0;
}
