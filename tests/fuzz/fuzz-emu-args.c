/* fuzz-emu-args.c — libFuzzer target for accel-emu's value parsers (src/emu/emu-args.c):
 * GPU references, NUMA lists, NVLink modes, `set` assignments, `init --mode` and
 * `--iommu-groups`, `mig GPU create`'s profile lists, all typed by users; and the emulated
 * libcuda's reader of CUDA_VISIBLE_DEVICES (src/emu/cuda-visible.c), which any process's
 * environment feeds. The first byte picks the parser; the rest is the text. Checks: no read past
 * the text (ASan), outputs untouched on failure, values within the documented ranges on success,
 * and applying a parsed `set` never moves a GPU outside its limits. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emu-args.h"
#include "cuda-visible.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned pick = data[0] % 8;
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
    case 5: {
        /* profile lists on every board with MIG; a list is at most EMU_MIG_MAX_GI long */
        static const char *const boards[] = {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
                                             "NVIDIA A100-SXM4-40GB", "NVIDIA H200"};
        const struct emu_mig_board *b = emu_mig_board_find(boards[size % 4]);
        unsigned idx[EMU_MIG_MAX_GI];
        size_t n = 999, max = 1 + size % EMU_MIG_MAX_GI;
        memset(idx, 0xee, sizeof(idx));
        if (emu_args_mig_profiles(s, b, idx, max, &n, err, sizeof(err)) == 0) {
            if (n < 1 || n > max)
                abort();
            for (size_t i = 0; i < n; i++)
                if (!emu_mig_gi_by_index(b, idx[i]))
                    abort();
        } else if (n != 999 || idx[0] != 0xeeeeeeeeu) {
            abort();
        }
        break;
    }
    case 6: {
        bool shared = true;
        int r = emu_args_iommu_groups(s, &shared, err, sizeof(err));
        if (r != 0 && !shared)
            abort();
        break;
    }
    case 7: {
        struct emu_visible_entry e[EMU_VISIBLE_MAX];
        size_t max = size % (EMU_VISIBLE_MAX + 1);
        size_t n = emu_visible_parse(s, e, max);
        if (n > max)
            abort();
        for (size_t i = 0; i < n; i++) {
            if (!memchr(e[i].uuid, 0, sizeof(e[i].uuid)))
                abort();
            if (e[i].kind != EMU_VISIBLE_INDEX && strlen(e[i].uuid) < 5)
                abort(); /* "GPU-" / "MIG-" and something */
        }
        break;
    }
    }
    free(s);
    return 0;
}
