/* fuzz-emu-args.c — libFuzzer target for accel-emu's value parsers (src/emu/emu-args.c):
 * GPU references, NUMA lists, NVLink modes, `set` assignments and `init --mode`, all typed by
 * users. The
 * first byte picks the parser; the rest is the text. Checks: no read past the text (ASan),
 * outputs untouched on failure, values within the documented ranges on success, and
 * applying a parsed `set` never moves a GPU outside its limits. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emu-args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned pick = data[0] % 5;
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    char err[512];

    switch (pick) {
    case 0: {
        unsigned want = size > 1 ? (unsigned)(data[size - 1] % (EMU_MAX_GPUS + 1)) : 4;
        int numa[EMU_MAX_GPUS];
        memset(numa, 0x7f, sizeof(numa));
        if (emu_args_numa(s, want, numa, err, sizeof(err)) == 0) {
            for (unsigned i = 0; i < want; i++)
                if (numa[i] < -1 || numa[i] > 1023)
                    abort();
        } else if (numa[0] != 0x7f7f7f7f) {
            abort();
        }
        break;
    }
    case 1: {
        enum emu_nvlink_mode m = (enum emu_nvlink_mode)77;
        if (emu_args_nvlink(s, &m, err, sizeof(err)) == 0) {
            if (m != EMU_NVLINK_ALL && m != EMU_NVLINK_NONE && m != EMU_NVLINK_PAIRS)
                abort();
        } else if ((int)m != 77) {
            abort();
        }
        break;
    }
    case 2: {
        struct emu_set_req req = {0}, before;
        /* several assignments separated by spaces, as on the command line */
        for (char *tok = strtok(s, " "); tok; tok = strtok(NULL, " ")) {
            before = req;
            if (emu_args_set(tok, &req, err, sizeof(err)) < 0 &&
                memcmp(&before, &req, sizeof(req)) != 0)
                abort();
        }
        struct emu_gpu g = {.index = 0,
                            .sm_clock_mhz = 1000,
                            .sm_clock_max_mhz = 1980,
                            .cc_major = 9,
                            .cc_minor = 0};
        if (emu_args_set_apply(&g, &req, err, sizeof(err)) == 0) {
            if (g.temperature_c > 200 || g.power_mw > 2000000 || g.sm_clock_mhz > 1980 ||
                g.fan_percent > 100 || g.pstate > 15 || g.mig_mode > 1 ||
                g.nvlink_error_link >= 18 ||
                (g.compute_mode != 0 && g.compute_mode != 2 && g.compute_mode != 3))
                abort();
        }
        break;
    }
    case 3: {
        unsigned idx = 12345, count = size > 1 ? data[size - 1] % 20 : 4;
        int r = emu_args_gpu_index(s, count, &idx, err, sizeof(err));
        if (r == 0 && idx >= count)
            abort();
        if (r != 0 && idx != 12345)
            abort();
        break;
    }
    case 4: {
        unsigned mode = 12345;
        int r = emu_args_mode(s, &mode, err, sizeof(err));
        if (r == 0 && (mode > 0777 || (mode & 0600) != 0600))
            abort();
        if (r != 0 && mode != 12345)
            abort();
        break;
    }
    }
    free(s);
    return 0;
}
