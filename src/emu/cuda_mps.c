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
 * them); a client's device is translated to the machine's GPU (its CUDA_VISIBLE_DEVICES may
 * number them otherwise: cuda_dev_gpu). Device memory only: managed memory is not limited
 * here. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "cuda_emu.h"
#include "mps-cmd.h"
#include "state-mps.h"

static bool mps_loaded;
static uint32_t mps_pct_x10 = 1000;      /* active thread percentage, tenths */
static int32_t mps_group;                /* the server (else daemon) pid: 0 = not a client */
static uint64_t mps_limit[EMU_MAX_GPUS]; /* 0: none */
static uint64_t mps_used[EMU_MAX_GPUS];  /* this process's device allocations, by span */

/* "If there's no MPS server already running ..., the control daemon launches an MPS server
 * with the same user id (UID) as that of the requesting client process" (nvidia-cuda-mps-control
 * man page): the emulated client asks its daemon through the control socket, as the real
 * driver's connection does. Best effort: without a server the client still runs under the
 * daemon's defaults. */
static void mps_ask_server(const char *pipe)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/control", pipe) >= (int)sizeof(sa.sun_path))
        return;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char cmd[64];
    int n = snprintf(cmd, sizeof(cmd), "start_server -uid %u\n", (unsigned)getuid());
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && write(fd, cmd, (size_t)n) == n) {
        shutdown(fd, SHUT_WR);
        char buf[256];
        while (read(fd, buf, sizeof(buf)) > 0)
            ; /* the reply: started, or already running */
    }
    close(fd);
}

static void mps_read_locked(void)
{
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
    struct emu_mps_daemon *d = calloc(1, sizeof(*d));
    if (!pipe || !*pipe || !d || !cuda_state || emu_state_mps_find(cuda_state, pipe, d) < 0) {
        free(d);
        return; /* not an MPS client: no limit */
    }
    bool has_server = false;
    for (uint32_t i = 0; i < d->server_count && i < EMU_MPS_MAX_SERVERS; i++)
        has_server = has_server || d->servers[i].uid == (uint32_t)getuid();
    if (!has_server) {
        mps_ask_server(pipe);
        if (emu_state_mps_find(cuda_state, pipe, d) < 0) {
            free(d);
            return;
        }
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
    emu_state_set_mps_group(cuda_state, mps_group); /* a fatal XID finds its clients by it */
}

/* Reads the settings once; mps_loaded is set last, so a reader that sees it (cuda_mps_fault,
 * without the lock) sees the group too. */
static void mps_load_locked(void)
{
    mps_read_locked();
    __atomic_store_n(&mps_loaded, true, __ATOMIC_RELEASE);
}

uint32_t cuda_mps_sms_locked(uint32_t total)
{
    if (!__atomic_load_n(&mps_loaded, __ATOMIC_RELAXED))
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
    if (!__atomic_load_n(&mps_loaded, __ATOMIC_RELAXED))
        mps_load_locked();
    return mps_group;
}

bool cuda_mps_charge_locked(int d, uint64_t bytes)
{
    if (!__atomic_load_n(&mps_loaded, __ATOMIC_RELAXED))
        mps_load_locked();
    if (!cuda_dev(d))
        return true;
    unsigned dev = cuda_dev_gpu(d); /* the limits are kept by the machine's GPU index */
    if (mps_limit[dev] && (bytes > mps_limit[dev] || mps_used[dev] > mps_limit[dev] - bytes))
        return false;
    mps_used[dev] += bytes;
    return true;
}

void cuda_mps_uncharge_locked(int d, uint64_t bytes)
{
    unsigned dev = cuda_dev_gpu(d);
    if (cuda_dev(d))
        mps_used[dev] -= bytes < mps_used[dev] ? bytes : mps_used[dev];
}

/* The server's fault state (NVIDIA MPS guide, "Error Containment": after a fatal GPU
 * exception the clients on that GPU are hit, and the server "will wait for [them] to exit and
 * reject any new client requests"): a hit client's calls fail with
 * CUDA_ERROR_MPS_CLIENT_TERMINATED ("the MPS client has been terminated by the server. To
 * continue using CUDA, the process must be terminated and relaunched", CUDA Driver API,
 * CUresult); a new context of another client of that server with
 * CUDA_ERROR_MPS_SERVER_NOT_READY ("not ready to accept new MPS client requests ... recovering
 * from a fatal failure"). Processes outside MPS are untouched. */
CUresult cuda_mps_fault(int dev)
{
    /* a client hit by a fault had memory on the GPU, so its settings are loaded already */
    if (!__atomic_load_n(&mps_loaded, __ATOMIC_ACQUIRE) || !mps_group || dev < 0)
        return CUDA_SUCCESS;
    return emu_state_mps_fault_of(cuda_state, cuda_dev_gpu(dev), mps_group, (int32_t)getpid()) == 1
               ? CUDA_ERROR_MPS_CLIENT_TERMINATED
               : CUDA_SUCCESS;
}

CUresult cuda_mps_new_client_locked(int dev)
{
    int32_t group = cuda_mps_group_locked();
    if (!group || dev < 0)
        return CUDA_SUCCESS;
    int f = emu_state_mps_fault_of(cuda_state, cuda_dev_gpu(dev), group, (int32_t)getpid());
    return f == 1   ? CUDA_ERROR_MPS_CLIENT_TERMINATED
           : f == 2 ? CUDA_ERROR_MPS_SERVER_NOT_READY
                    : CUDA_SUCCESS;
}
