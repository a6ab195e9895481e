/* state-mps.c — the MPS section of the shared state; see state-mps.h. */
#include "state-mps.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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

int emu_state_mps_find(struct emu_state *st, const char *pipe_dir, struct emu_mps_daemon *ret)
{
    if (!st || !pipe_dir || !ret)
        return -EINVAL;
    struct emu_shared *sh = emu_state_shared(st);
    int r = -ENOENT;
    emu_state_lock(st);
    for (int i = 0; i < EMU_MPS_MAX_DAEMONS; i++) {
        if (sh->mps[i].pid && daemon_alive(&sh->mps[i]) &&
            strncmp(sh->mps[i].pipe_dir, pipe_dir, sizeof(sh->mps[i].pipe_dir)) == 0) {
            *ret = sh->mps[i];
            r = 0;
            break;
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
