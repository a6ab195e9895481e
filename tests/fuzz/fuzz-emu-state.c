/* fuzz-emu-state.c — libFuzzer target for the state-file validation (emu_state_validate in
 * src/emu/state.c): the file is shared by every process on the machine and may be damaged or
 * written by anyone allowed to open it. The input is laid over the start of a valid machine
 * (4 H100s, made once with emu_state_create), so the seeds (a real file's header, and header,
 * process slots and the first GPU) validate and mutations explore every field from there.
 * Checks: no read outside the image (ASan), and when validation passes, everything a reader
 * trusts holds: the GPU count, NUL-terminated strings, memory totals and charges in range,
 * MPS server counts. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct emu_shared *base, *img;

static void make_base(void)
{
    char dir[] = "/tmp/fuzz-emu-state-XXXXXX";
    if (!mkdtemp(dir))
        abort();
    char path[64];
    snprintf(path, sizeof(path), "%s/s", dir);
    struct emu_config cfg;
    emu_config_init(&cfg);
    if (emu_state_create(path, &cfg) < 0)
        abort();
    base = malloc(sizeof(*base));
    img = malloc(sizeof(*img));
    FILE *f = fopen(path, "rb");
    if (!base || !img || !f || fread(base, sizeof(*base), 1, f) != 1)
        abort();
    fclose(f);
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!base)
        make_base();
    memcpy(img, base, sizeof(*img));
    memcpy(img, data, size < sizeof(*img) ? size : sizeof(*img));
    char err[256];
    err[0] = 'x';
    err[1] = 0;
    if (emu_state_validate(img, sizeof(*img), err, sizeof(err)) < 0) {
        if (!memchr(err, 0, sizeof(err)) || err[0] == 'x')
            abort(); /* a refusal always says why */
        return 0;
    }
    if (img->gpu_count < 1 || img->gpu_count > EMU_MAX_GPUS || !memchr(img->model, 0, EMU_NAME_LEN))
        abort();
    for (unsigned i = 0; i < img->gpu_count; i++) {
        const struct emu_gpu *g = &img->gpus[i];
        if (!memchr(g->uuid, 0, sizeof(g->uuid)) || !memchr(g->name, 0, sizeof(g->name)) ||
            g->memory_total < EMU_MEMORY_MIN || g->memory_total > EMU_MEMORY_MAX ||
            g->sm_clock_mhz > g->sm_clock_max_mhz)
            abort();
        uint64_t used = 0;
        for (unsigned p = 0; p < EMU_MAX_PROCS; p++)
            if (img->procs[p].pid)
                used += img->procs[p].mem[i];
        if (used > g->memory_total)
            abort();
    }
    for (unsigned i = 0; i < EMU_MPS_MAX_DAEMONS; i++)
        if (img->mps[i].server_count > EMU_MPS_MAX_SERVERS)
            abort();
    return 0;
}
