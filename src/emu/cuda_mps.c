/* cuda_mps.c — the emulated libcuda as an MPS client: the pinned device memory limit.
 *
 * Facts (NVIDIA's Multi-Process Service guide, "Appendix: Environment Variables" and "Appendix:
 * Tools and Interface Reference"): a process whose CUDA_MPS_PIPE_DIRECTORY names a running
 * control daemon is that daemon's client and runs under its server's limits; the server's
 * pinned device memory limit starts as the daemon's default (set_default_device_pinned_mem_limit)
 * and may be changed per server (set_device_pinned_mem_limit); a client's own
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=1G,1=512MB") only further constrains it. Allocations past
 * the limit fail with CUDA_ERROR_OUT_OF_MEMORY while cuMemGetInfo still reports the whole device.
 *
 * In the emulator the daemon publishes its settings in the machine's MPS section
 * (state-mps.c); there is no real connection, so the limits are read once, at the first device
 * allocation. Device indexes are the emulated machine's (the emulated daemon numbers them the
 * same way). Device memory only: managed memory is not limited here. cuda_lock held. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_emu.h"
#include "mps-cmd.h"
#include "state-mps.h"

static bool mps_loaded;
static uint64_t mps_limit[EMU_MAX_GPUS]; /* 0: none */
static uint64_t mps_used[EMU_MAX_GPUS];  /* this process's device allocations, by span */

static void mps_load_locked(void)
{
    mps_loaded = true;
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
    struct emu_mps_daemon *d = calloc(1, sizeof(*d));
    if (!pipe || !*pipe || !d || !cuda_state || emu_state_mps_find(cuda_state, pipe, d) < 0) {
        free(d);
        return; /* not an MPS client: no limit */
    }
    const uint64_t *lim = d->default_pinned_limit;
    uint32_t uid = (uint32_t)getuid();
    for (uint32_t i = 0; i < d->server_count && i < EMU_MPS_MAX_SERVERS; i++)
        if (d->servers[i].uid == uid)
            lim = d->servers[i].pinned_limit; /* our user's running server */
    memcpy(mps_limit, lim, sizeof(mps_limit));
    free(d);
    mps_cmd_tighten_limits(getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), mps_limit, EMU_MAX_GPUS);
}

bool cuda_mps_charge_locked(int dev, uint64_t bytes)
{
    if (!mps_loaded)
        mps_load_locked();
    if (dev < 0 || dev >= EMU_MAX_GPUS)
        return true;
    if (mps_limit[dev] && (bytes > mps_limit[dev] || mps_used[dev] > mps_limit[dev] - bytes))
        return false;
    mps_used[dev] += bytes;
    return true;
}

void cuda_mps_uncharge_locked(int dev, uint64_t bytes)
{
    if (dev >= 0 && dev < EMU_MAX_GPUS)
        mps_used[dev] -= bytes < mps_used[dev] ? bytes : mps_used[dev];
}
