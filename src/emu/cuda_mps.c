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
 * The active thread percentage (same appendix, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, and "Tools and
 * Interface Reference", set_default_active_thread_percentage / set_active_thread_percentage):
 * the server's setting (the daemon's default when the server started), which the client's own
 * variable "will only further constrain"; the client then runs on floor(SMs x P / 100) SMs (at
 * least one) and its MULTIPROCESSOR_COUNT says so. Clients of one server share the GPU as the
 * server's one context does: their kernels run side by side (cuda_exec.c), each on its SMs.
 *
 * In the emulator the daemon publishes its settings in the machine's MPS section
 * (state-mps.c); there is no real connection, so the settings are read once, at the first use
 * (an allocation, a launch, an attribute query). Limits are kept by the emulated machine's GPU
 * index (the daemon maps its own device numbers, which follow its CUDA_VISIBLE_DEVICES, to
 * them); the emulated libcuda has no CUDA_VISIBLE_DEVICES of its own, so a client's device N
 * is the machine's GPU N. Device memory only: managed memory is not limited here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_emu.h"
#include "mps-cmd.h"
#include "state-mps.h"

static bool mps_loaded;
static uint32_t mps_pct_x10 = 1000;      /* active thread percentage, tenths */
static int32_t mps_group;                /* the server (else daemon) pid: 0 = not a client */
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
    uint32_t pct = d->default_thread_pct_x10;
    mps_group = d->pid;
    uint32_t uid = (uint32_t)getuid();
    for (uint32_t i = 0; i < d->server_count && i < EMU_MPS_MAX_SERVERS; i++)
        if (d->servers[i].uid == uid) { /* our user's running server */
            lim = d->servers[i].pinned_limit;
            pct = d->servers[i].thread_pct_x10;
            mps_group = d->servers[i].pid;
        }
    memcpy(mps_limit, lim, sizeof(mps_limit));
    free(d);
    mps_cmd_tighten_limits(getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), mps_limit, EMU_MAX_GPUS);
    /* the client's percentage, read as the daemon reads one (a malformed value is ignored) */
    const char *env = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    char line[96];
    struct mps_cmd c;
    char err[128];
    if (env &&
        snprintf(line, sizeof(line), "set_default_active_thread_percentage %s", env) <
            (int)sizeof(line) &&
        mps_cmd_parse(line, &c, err, sizeof(err)) == 0 && c.thread_pct_x10 < pct)
        pct = c.thread_pct_x10;
    if (pct >= 1 && pct <= 1000)
        mps_pct_x10 = pct;
}

uint32_t cuda_mps_sms_locked(uint32_t total)
{
    if (!mps_loaded)
        mps_load_locked();
    if (mps_pct_x10 >= 1000)
        return total;
    uint64_t n = (uint64_t)total * mps_pct_x10 / 1000;
    return n ? (uint32_t)n : 1;
}

uint32_t cuda_mps_sms(uint32_t total)
{
    pthread_mutex_lock(&cuda_lock);
    uint32_t n = cuda_mps_sms_locked(total);
    pthread_mutex_unlock(&cuda_lock);
    return n;
}

int32_t cuda_mps_group_locked(void)
{
    if (!mps_loaded)
        mps_load_locked();
    return mps_group;
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
