/* state-mps.c — the MPS section of the shared state; see state-mps.h. */
#include "state-mps.h"

#include <errno.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static bool daemon_alive(const struct emu_mps_daemon *m)
{
    return m->pid > 0 && !(kill(m->pid, 0) < 0 && errno == ESRCH);
}

int emu_state_mps_claim(struct emu_state *st, const struct emu_mps_daemon *cfg, int *ret_slot)
{
    if (!st || !cfg || !ret_slot)
        return -EINVAL;
    struct emu_shared *sh = emu_state_shared(st);
    int slot = -1;
    emu_state_lock(st);
    for (int i = 0; i < EMU_MPS_MAX_DAEMONS && slot < 0; i++)
        if (strncmp(sh->mps[i].pipe_dir, cfg->pipe_dir, sizeof(cfg->pipe_dir)) == 0 &&
            (sh->mps[i].pid == cfg->pid || !daemon_alive(&sh->mps[i])))
            slot = i;
    for (int i = 0; i < EMU_MPS_MAX_DAEMONS && slot < 0; i++)
        if (!daemon_alive(&sh->mps[i]))
            slot = i;
    if (slot >= 0)
        sh->mps[slot] = *cfg;
    emu_state_unlock(st);
    if (slot < 0)
        return -ENOSPC;
    *ret_slot = slot;
    return 0;
}

void emu_state_mps_publish(struct emu_state *st, int slot, const struct emu_mps_daemon *cfg)
{
    if (!st || !cfg || slot < 0 || slot >= EMU_MPS_MAX_DAEMONS)
        return;
    emu_state_lock(st);
    emu_state_shared(st)->mps[slot] = *cfg;
    emu_state_unlock(st);
}

void emu_state_mps_release(struct emu_state *st, int slot)
{
    if (!st || slot < 0 || slot >= EMU_MPS_MAX_DAEMONS)
        return;
    emu_state_lock(st);
    memset(&emu_state_shared(st)->mps[slot], 0, sizeof(struct emu_mps_daemon));
    emu_state_unlock(st);
}

/* The pid in <pipe_dir>/nvidia-cuda-mps-control.pid, or 0. */
static int32_t pid_file(const char *pipe_dir)
{
    char path[320];
    if (snprintf(path, sizeof(path), "%s/nvidia-cuda-mps-control.pid", pipe_dir) >=
        (int)sizeof(path))
        return 0;
    FILE *f = fopen(path, "re");
    long pid = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%ld", &pid) != 1 || pid <= 0 || pid > INT32_MAX)
        pid = 0;
    fclose(f);
    return (int32_t)pid;
}

/* Whether a daemon listens on <pipe_dir>/control: how a client in a container, which cannot
 * see the daemon's pid (another pid namespace), tells a live daemon from a dead one's leftovers,
 * as a real client does by connecting. */
static bool control_answers(const char *pipe_dir)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/control", pipe_dir) >=
        (int)sizeof(sa.sun_path))
        return false;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool up = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return up;
}

int emu_state_mps_find(struct emu_state *st, const char *pipe_dir, struct emu_mps_daemon *ret)
{
    if (!st || !pipe_dir || !ret)
        return -EINVAL;
    struct emu_shared *sh = emu_state_shared(st);
    int r = -ENOENT;
    /* a container sees the daemon's pipe directory bind-mounted at another
     * path (a CDI mount): the directory is the daemon's when the pid file the
     * daemon keeps in it names that daemon */
    int32_t pid = pid_file(pipe_dir);
    /* that daemon's pid may be another pid namespace's (a container's client, a daemon run by
     * a hostPID agent): kill(2) cannot tell there, its control socket can */
    bool answers = pid > 0 && control_answers(pipe_dir);
    emu_state_lock(st);
    for (int pass = 0; pass < 2 && r < 0; pass++) {
        for (int i = 0; i < EMU_MPS_MAX_DAEMONS; i++) {
            bool match =
                pass == 0 ? strncmp(sh->mps[i].pipe_dir, pipe_dir, sizeof(sh->mps[i].pipe_dir)) == 0
                          : pid > 0 && sh->mps[i].pid == pid;
            bool alive = daemon_alive(&sh->mps[i]) || (pass == 1 && answers);
            if (sh->mps[i].pid && alive && match) {
                *ret = sh->mps[i];
                r = 0;
                break;
            }
        }
    }
    emu_state_unlock(st);
    return r;
}

bool emu_state_mps_is_client(struct emu_state *st, int32_t pid)
{
    char path[64];
    struct stat sb;
    snprintf(path, sizeof(path), "/proc/%d", (int)pid);
    if (!st || pid <= 0 || stat(path, &sb) < 0)
        return false;
    struct emu_shared *sh = emu_state_shared(st);
    bool served = false;
    emu_state_lock(st);
    for (int i = 0; i < EMU_MPS_MAX_DAEMONS && !served; i++) {
        const struct emu_mps_daemon *d = &sh->mps[i];
        if (!daemon_alive(d))
            continue;
        for (uint32_t k = 0; k < d->server_count && k < EMU_MPS_MAX_SERVERS && !served; k++) {
            const struct emu_mps_server *s = &d->servers[k];
            served = s->uid == sb.st_uid && s->pid > 0 && !(kill(s->pid, 0) < 0 && errno == ESRCH);
        }
    }
    emu_state_unlock(st);
    return served;
}

/* XIDs that end the GPU contexts on the device (NVIDIA's XID catalog: 13 graphics engine
 * exception, 31 GPU memory page fault, 43 GPU stopped processing, 48 double-bit ECC error,
 * 79 fallen off the bus, 94/95 contained/uncontained ECC error): under MPS such a fatal
 * exception reaches every client of the server on that GPU. */
bool emu_state_mps_fatal_xid(uint64_t xid)
{
    return xid == 13 || xid == 31 || xid == 43 || xid == 48 || xid == 79 || xid == 94 || xid == 95;
}

static bool pid_alive(int32_t pid)
{
    return pid > 0 && !(kill(pid, 0) < 0 && errno == ESRCH);
}

static void fault_prune_locked(struct emu_gpu *g)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < g->mps_fault_n && i < EMU_MPS_FAULT_MAX; i++)
        if (pid_alive(g->mps_fault_pid[i])) {
            g->mps_fault_pid[k] = g->mps_fault_pid[i];
            g->mps_fault_group[k++] = g->mps_fault_group[i];
        }
    g->mps_fault_n = k;
}

void emu_state_mps_fault(struct emu_state *st, unsigned gpu)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return;
    struct emu_shared *sh = emu_state_shared(st);
    emu_state_lock(st);
    fault_prune_locked(g);
    for (unsigned i = 0; i < EMU_MAX_PROCS && g->mps_fault_n < EMU_MPS_FAULT_MAX; i++) {
        const struct emu_proc *p = &sh->procs[i];
        if (!p->pid || !p->mps_group || !p->mem[gpu] || !pid_alive(p->pid))
            continue;
        bool listed = false;
        for (uint32_t k = 0; k < g->mps_fault_n && !listed; k++)
            listed = g->mps_fault_pid[k] == p->pid;
        if (!listed) {
            g->mps_fault_pid[g->mps_fault_n] = p->pid;
            g->mps_fault_group[g->mps_fault_n++] = p->mps_group;
        }
    }
    emu_state_unlock(st);
}

int emu_state_mps_fault_of(struct emu_state *st, unsigned gpu, int32_t group, int32_t pid)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g || !group || !__atomic_load_n(&g->mps_fault_n, __ATOMIC_RELAXED))
        return 0;
    int r = 0;
    emu_state_lock(st);
    fault_prune_locked(g);
    for (uint32_t i = 0; i < g->mps_fault_n; i++) {
        if (g->mps_fault_pid[i] == pid)
            r = 1;
        else if (g->mps_fault_group[i] == group && r == 0)
            r = 2;
    }
    emu_state_unlock(st);
    return r;
}
