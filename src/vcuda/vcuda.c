/* vcuda.c — libvcuda's process-wide state: the one-time setup run by the
 * first hooked call (log level, config, region, process slot), fork handling
 * and the release of our slot at exit.
 *
 * Start cost matters (every process of the container loads us, 300 may start
 * at once): the constructor only reads VCUDA_LOG; setup does no driver call,
 * takes no file lock, and a slot is claimed with one CAS. */
#include "vcuda.h"

#include "log.h"
#include "track.h"
#include "userns.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct vc_state vc = {.slot = -1};
atomic_int vc_ready;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread bool in_init;

void vc_driver_atfork_prepare(void);
void vc_driver_atfork_parent(void);
void vc_driver_atfork_child(void);

/* Lock order: a driver load may run hooked code (loader, then setup), so the
 * loader locks come first here too. */
static void atfork_prepare(void)
{
    vc_driver_atfork_prepare();
    pthread_mutex_lock(&init_lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&init_lock);
    vc_driver_atfork_parent();
}

/* The child is a new process: it owns none of the parent's allocations or
 * contexts, and needs its own slot (claimed by its first hooked call). */
static void atfork_child(void)
{
    vc_driver_atfork_child();
    pthread_mutex_init(&init_lock, NULL);
    vc_track_reset();
    vc_mem_atfork_child();
    vc_ctx_atfork_child();
    vc_launch_atfork_child();
    vc_graph_atfork_child();
    vc.slot = -1;
    vc.pid = 0;
    atomic_store_explicit(&vc_ready, 0, memory_order_release);
}

__attribute__((constructor)) static void vc_constructor(void)
{
    log_set_ident("vcuda");
    const char *lvl = getenv("VCUDA_LOG");
    enum log_level level = LOG_LEVEL_WARN;
    if (lvl && *lvl && log_level_parse(lvl, &level) < 0)
        level = LOG_LEVEL_WARN;
    log_set_level(level);
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

__attribute__((destructor)) static void vc_destructor(void)
{
    if (atomic_load_explicit(&vc_ready, memory_order_acquire) == 1 && vc.slot >= 0 &&
        vc.pid == (uint32_t)getpid()) {
        vc_launch_exit();
        vc_region_release_slot(&vc.region, vc.slot, vc.pid);
    }
}

static void publish_config(void)
{
    struct vc_region_header *h = vc.region.hdr;
    /* Same values from every process of the container: plain idempotent stores. */
    unsigned n = vc.cfg.device_count > 0 ? (unsigned)vc.cfg.device_count : VC_REGION_DEVICES;
    for (unsigned d = 0; d < n && d < VC_REGION_DEVICES; d++)
        __atomic_store_n(&h->memory_limit[d], vc.cfg.memory_limit, __ATOMIC_RELAXED);
    for (int d = 0; d < vc.cfg.device_count; d++)
        if (h->device_uuid[d][0] == '\0')
            memcpy(h->device_uuid[d], vc.cfg.device_uuid[d], sizeof(h->device_uuid[d]));
    __atomic_store_n(&h->context_memory, vc.cfg.context_memory, __ATOMIC_RELAXED);
    __atomic_store_n(&h->core_limit, (uint32_t)vc.cfg.core_limit, __ATOMIC_RELAXED);
    __atomic_store_n(&h->core_policy, (uint32_t)vc.cfg.core_policy, __ATOMIC_RELAXED);
}

/* Why this process may not open the region read-write, and what would work:
 * the file's (or, when missing, its directory's) owner and mode against our
 * own user and group. */
static void region_access_why(const char *path, char *buf, size_t len)
{
    struct stat st;
    char dir[512];
    const char *what = "file";
    if (stat(path, &st) < 0) {
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *(slash == dir ? slash + 1 : slash) = '\0';
        what = "directory";
        if (stat(dir, &st) < 0) {
            snprintf(buf, len, "its directory cannot be read either");
            return;
        }
        path = dir;
    }
    unsigned uid = (unsigned)geteuid(), gid = (unsigned)getegid();
    snprintf(buf, len,
             "the %s %s belongs to uid %u gid %u with mode %04o, and this process runs as uid %u "
             "gid %u; the %s must be %s by it: owner uid %u with mode %s, or group gid %u with "
             "mode %s",
             what, path, (unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777),
             uid, gid, what, what[0] == 'd' ? "writable and searchable" : "readable and writable",
             uid, what[0] == 'd' ? "0700" : "0600", gid, what[0] == 'd' ? "0770" : "0660");
}

int vc_init_slow(void)
{
    if (in_init)
        return -EDEADLK;
    pthread_mutex_lock(&init_lock);
    if (atomic_load_explicit(&vc_ready, memory_order_acquire) == 1) {
        pthread_mutex_unlock(&init_lock);
        return 0;
    }
    in_init = true;
    uint64_t t0 = mono_ns();
    if (vc.region.hdr == NULL) {
        /* First time in this process (not a forked child): config and region. */
        char err[1024], note[1024];
        int r = vc_config_load(vc_config_agent_path, getenv, &vc.cfg, err, sizeof(err), note,
                               sizeof(note));
        if (r == 0 && note[0])
            log_warn("%s", note);
        /* The agent's file is the agent's only where the process could not have mounted a file
         * of its own over it: in the initial user namespace (userns.h; docs/vcuda.md, "Threat
         * model"). Anywhere else it is refused like a broken file. */
        if (r == 0 && vc.cfg.source == VC_CONFIG_SOURCE_AGENT) {
            char why[384];
            int u = vc_userns_initial("/proc", why, sizeof(why));
            if (u < 0) {
                r = u;
                snprintf(err, sizeof(err),
                         "%s is not trusted: %s; the agent's config is only obeyed in the initial "
                         "user namespace (run the pod with hostUsers: true, and without user "
                         "namespaces of its own)",
                         vc_config_agent_path, why);
            }
        }
        if (r < 0) {
            log_error("%s; denying all device memory until the config is fixed", err);
            vc_config_init(&vc.cfg);
            vc.fail_closed = true;
        }
        r = vc_region_attach(vc.cfg.region, &vc.region);
        if (r == -EACCES || r == -EPERM || r == -EROFS) {
            char why[1536];
            region_access_why(vc.cfg.region, why, sizeof(why));
            log_error("cannot use the usage region %s: %s: %s; denying all device memory",
                      vc.cfg.region, strerror(-r), why);
        } else if (r < 0) {
            log_error("cannot use the usage region %s: %s; denying all device memory",
                      vc.cfg.region, strerror(-r));
        }
        if (r < 0) {
            vc.fail_closed = true;
            /* A private region keeps the code paths uniform. */
            if (vc_region_attach(NULL, &vc.region) < 0)
                abort();
        }
        if (!vc.fail_closed)
            publish_config();
    }
    vc.pid = (uint32_t)getpid();
    vc.slot = vc_region_claim_slot(&vc.region, vc.pid, vc_proc_start_time(vc.pid));
    if (vc.slot < 0) {
        log_error("no free process slot in the usage region %s (%u processes); denying device "
                  "memory to this process",
                  vc.cfg.region, VC_REGION_SLOTS);
    }
    log_debug("set up in %llu us: limit %llu bytes, region %s, slot %d",
              (unsigned long long)((mono_ns() - t0) / 1000),
              (unsigned long long)vc.cfg.memory_limit,
              vc.cfg.region[0] ? vc.cfg.region : "(private)", vc.slot);
    in_init = false;
    atomic_store_explicit(&vc_ready, 1, memory_order_release);
    pthread_mutex_unlock(&init_lock);
    return 0;
}
