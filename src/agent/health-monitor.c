/* health-monitor.c — the NVML event thread: waits for XID / double-bit ECC
 * events, probes each GPU between waits (every HEALTH_PROBE_INTERVAL_NS, and
 * at once after XID 79 or a wait failing with GPU_IS_LOST) for GPU_IS_LOST
 * and its return, and reports through a pipe; see health.h. The only thread acceld starts. */
#define _GNU_SOURCE /* pipe2 */
#include "health.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"
#include "util.h"

struct health_gpu_nvml {
    char uuid[96];
    nvmlDevice_t dev; /* NULL while lost */
    nvmlDevice_t was; /* the last handle it had: events for a lost GPU still name it */
    bool lost;        /* what the thread last reported */
    bool reported;    /* the first probe reports either way (acceld may think it lost) */
};

struct health_monitor {
    struct gpu_nvml *nvml;
    struct health_gpu_nvml *gpus;
    size_t n;
    nvmlEventSet_t set;
    int pipe_r, pipe_w;
    pthread_t thread;
    bool started;
    atomic_bool stop;
};

/* Writes one record; the pipe is non-blocking so that a stalled loop cannot
 * wedge the thread past a stop request. */
static void emit(struct health_monitor *m, int gpu, enum health_kind kind, uint64_t data)
{
    struct health_event ev = {gpu, (uint32_t)kind, data};
    while (!atomic_load_explicit(&m->stop, memory_order_relaxed)) {
        ssize_t w = write(m->pipe_w, &ev, sizeof(ev));
        if (w == (ssize_t)sizeof(ev))
            return;
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* The handle of the GPU with this UUID: by UUID where NVML has that, else by
 * walking the indices (NVML's index is not ours once a GPU is skipped). */
static nvmlReturn_t find_handle(struct gpu_nvml *nv, const char *uuid, nvmlDevice_t *ret)
{
    if (nv->nvmlDeviceGetHandleByUUID)
        return nv->nvmlDeviceGetHandleByUUID(uuid, ret);
    unsigned n = 0;
    nvmlReturn_t r = nv->nvmlDeviceGetCount_v2(&n);
    if (r != NVML_SUCCESS)
        return r;
    for (unsigned i = 0; i < n && nv->nvmlDeviceGetUUID; i++) {
        nvmlDevice_t d;
        char u[96];
        if (nv->nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS &&
            nv->nvmlDeviceGetUUID(d, u, sizeof(u)) == NVML_SUCCESS && strcmp(u, uuid) == 0) {
            *ret = d;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t probe(struct health_monitor *m, struct health_gpu_nvml *g)
{
    struct gpu_nvml *nv = m->nvml;
    if (!g->dev) {
        nvmlReturn_t r = find_handle(nv, g->uuid, &g->dev);
        if (r != NVML_SUCCESS) {
            g->dev = NULL;
            return r;
        }
        g->was = g->dev;
        if (m->set && nv->nvmlDeviceRegisterEvents)
            nv->nvmlDeviceRegisterEvents(
                g->dev, nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError, m->set);
    }
    if (nv->nvmlDeviceGetMemoryInfo) {
        nvmlMemory_t mem;
        return nv->nvmlDeviceGetMemoryInfo(g->dev, &mem);
    }
    char uuid[96];
    return nv->nvmlDeviceGetUUID ? nv->nvmlDeviceGetUUID(g->dev, uuid, sizeof(uuid)) : NVML_SUCCESS;
}

/* A query failing with GPU_IS_LOST (or the handle no longer resolving) is a
 * lost GPU; other errors (NOT_SUPPORTED...) say nothing about health. */
static void probe_all(struct health_monitor *m)
{
    for (size_t i = 0; i < m->n; i++) {
        struct health_gpu_nvml *g = &m->gpus[i];
        nvmlReturn_t r = probe(m, g);
        bool lost = r == NVML_ERROR_GPU_IS_LOST || r == NVML_ERROR_NOT_FOUND ||
                    r == NVML_ERROR_GPU_NOT_FOUND || (r != NVML_SUCCESS && !g->dev);
        if (r == NVML_ERROR_GPU_IS_LOST)
            g->dev = NULL; /* look it up again when it answers */
        if (lost != g->lost || !g->reported) {
            g->lost = lost;
            g->reported = true;
            emit(m, (int)i, lost ? HEALTH_EV_LOST : HEALTH_EV_BACK, r);
        }
    }
}

/* The GPU an event names. A lost GPU's handle is dropped (looked up again
 * when it answers) but its events still name the old one: matching that too
 * keeps an event of one lost GPU from being applied to every GPU. */
static int gpu_of(const struct health_monitor *m, nvmlDevice_t dev)
{
    for (size_t i = 0; i < m->n; i++)
        if (dev && (m->gpus[i].dev == dev || m->gpus[i].was == dev))
            return (int)i;
    return -1;
}

/* XID 79: the GPU has fallen off the bus. NVML's queries fail with
 * GPU_IS_LOST from then on; probe at once so the GPU is known lost (and
 * cannot "recover" while it does not answer). */
#define XID_FALLEN_OFF_BUS 79

static void *monitor_main(void *arg)
{
    struct health_monitor *m = arg;
    struct gpu_nvml *nv = m->nvml;
    uint64_t next_probe = 0;
    bool lost_wait = false; /* the last wait failed with GPU_IS_LOST */
    while (!atomic_load_explicit(&m->stop, memory_order_acquire)) {
        uint64_t now = mono_ns();
        if (now >= next_probe) {
            probe_all(m);
            now = mono_ns();
            next_probe = now + HEALTH_PROBE_INTERVAL_NS;
        }
        /* A wait never outlasts the next probe: a GPU lost without any
         * event is found within one interval. */
        uint64_t until = (next_probe - now + 999999ull) / 1000000ull;
        unsigned wait_ms = until < HEALTH_WAIT_MS ? (unsigned)until : HEALTH_WAIT_MS;
        if (wait_ms == 0)
            wait_ms = 1;
        struct timespec nap = {0, (long)wait_ms * 1000000L};
        if (!m->set) {
            nanosleep(&nap, NULL);
            continue;
        }
        nvmlEventData_t d;
        memset(&d, 0, sizeof(d));
        nvmlReturn_t r = nv->nvmlEventSetWait_v2(m->set, &d, wait_ms);
        if (r == NVML_SUCCESS) {
            lost_wait = false;
            int gpu = gpu_of(m, d.device);
            if (d.eventType & nvmlEventTypeXidCriticalError) {
                emit(m, gpu, HEALTH_EV_XID, d.eventData);
                if (d.eventData == XID_FALLEN_OFF_BUS)
                    next_probe = 0;
            }
            if (d.eventType & nvmlEventTypeDoubleBitEccError)
                emit(m, gpu, HEALTH_EV_ECC_DBE, 0);
        } else if (r == NVML_ERROR_GPU_IS_LOST) {
            /* Find out which one now; if the wait keeps failing so, do not
             * spin: wait for the next probe instead. */
            if (lost_wait)
                nanosleep(&nap, NULL);
            else
                next_probe = 0;
            lost_wait = true;
        } else if (r != NVML_ERROR_TIMEOUT) {
            /* A broken wait must not spin the CPU. */
            lost_wait = false;
            nanosleep(&nap, NULL);
        }
    }
    return NULL;
}

int health_monitor_start(struct gpu_nvml *nvml, const char *const *uuids, size_t n,
                         struct health_monitor **ret, size_t *ret_warnings)
{
    struct health_monitor *m = calloc(1, sizeof(*m));
    size_t warnings = 0;
    int r;
    if (!m)
        return -ENOMEM;
    m->nvml = nvml;
    m->n = n;
    m->pipe_r = m->pipe_w = -1;
    m->gpus = calloc(n ? n : 1, sizeof(*m->gpus));
    if (!m->gpus) {
        r = -ENOMEM;
        goto fail;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
        r = -errno;
        goto fail;
    }
    m->pipe_r = fds[0];
    m->pipe_w = fds[1];
    if (nvml->nvmlEventSetCreate && nvml->nvmlEventSetWait_v2 && nvml->nvmlDeviceRegisterEvents &&
        nvml->nvmlEventSetCreate(&m->set) != NVML_SUCCESS)
        m->set = NULL;
    if (!m->set)
        warnings += n;
    for (size_t i = 0; i < n; i++) {
        struct health_gpu_nvml *g = &m->gpus[i];
        snprintf(g->uuid, sizeof(g->uuid), "%s", uuids[i]);
        if (find_handle(nvml, g->uuid, &g->dev) != NVML_SUCCESS)
            g->dev = NULL;
        g->was = g->dev;
        if (!g->dev || !m->set)
            continue;
        unsigned long long want = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError;
        unsigned long long supported = want;
        if (nvml->nvmlDeviceGetSupportedEventTypes &&
            nvml->nvmlDeviceGetSupportedEventTypes(g->dev, &supported) == NVML_SUCCESS)
            want &= supported;
        if (!want || nvml->nvmlDeviceRegisterEvents(g->dev, want, m->set) != NVML_SUCCESS)
            warnings++;
    }
    /* The thread must not take the signals the loop reads from its signalfd. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    r = -pthread_create(&m->thread, NULL, monitor_main, m);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r < 0)
        goto fail;
    m->started = true;
    if (ret_warnings)
        *ret_warnings = warnings;
    *ret = m;
    return 0;
fail:
    health_monitor_stop(m);
    return r;
}

int health_monitor_fd(const struct health_monitor *m)
{
    return m->pipe_r;
}

int health_monitor_read(struct health_monitor *m, struct health_event *ret_ev)
{
    ssize_t n = read(m->pipe_r, ret_ev, sizeof(*ret_ev));
    if (n == (ssize_t)sizeof(*ret_ev))
        return 1;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    return n < 0 ? -errno : (n == 0 ? -EPIPE : -EIO);
}

struct health_monitor *health_monitor_stop(struct health_monitor *m)
{
    if (!m)
        return NULL;
    atomic_store_explicit(&m->stop, true, memory_order_release);
    if (m->started)
        pthread_join(m->thread, NULL);
    if (m->set && m->nvml->nvmlEventSetFree)
        m->nvml->nvmlEventSetFree(m->set);
    if (m->pipe_r >= 0)
        close(m->pipe_r);
    if (m->pipe_w >= 0)
        close(m->pipe_w);
    free(m->gpus);
    free(m);
    return NULL;
}
