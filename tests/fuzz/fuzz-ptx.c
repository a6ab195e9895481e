/* fuzz-ptx.c — libFuzzer target for the emulator's PTX reader (src/emu/ptx.c), which parses
 * whatever a program hands to cuModuleLoadData. Checks the parser's promises on every input:
 * no read past the buffer (ASan), counts within their caps, names terminated, sizes set. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ptx_kernel out[8];
    size_t n = 0;
    int r = ptx_parse((const char *)data, size, out, 8, &n);
    if (r == 0) {
        if (n > PTX_ENTRIES_MAX)
            abort();
        for (size_t i = 0; i < n && i < 8; i++) {
            if (out[i].nparams > PTX_PARAMS_MAX || !memchr(out[i].name, 0, PTX_NAME_MAX) ||
                !out[i].name[0])
                abort();
            for (unsigned p = 0; p < out[i].nparams; p++)
                if (!out[i].param_size[p])
                    abort();
        }
        /* counting alone agrees */
        size_t n2 = 0;
        if (ptx_parse((const char *)data, size, NULL, 0, &n2) != 0 || n2 != n)
            abort();
    }
    /* module variables: sizes within the cap, initializers within their variable */
    struct ptx_global *g;
    size_t ng;
    if (ptx_globals((const char *)data, size, &g, &ng) == 0) {
        for (size_t i = 0; i < ng; i++)
            if (!g[i].size || g[i].size > PTX_GLOBAL_SIZE_MAX || g[i].init_len > g[i].size ||
                !memchr(g[i].name, 0, PTX_NAME_MAX))
                abort();
        ptx_globals_free(g, ng);
    }
    return 0;
}
