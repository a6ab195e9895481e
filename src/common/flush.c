/* flush.c — asynchronous fdatasync through Linux AIO; see flush.h. Raw
 * syscalls (io_setup, io_submit, io_getevents): libaio is not needed for one
 * request at a time. */
#define _GNU_SOURCE
#include "flush.h"

#include <errno.h>
#include <linux/aio_abi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "evloop.h"
#include "log.h"

struct fs_flusher {
    struct ev_loop *loop;
    aio_context_t ctx; /* 0: no AIO, fdatasync in the caller */
    int efd;
    int fd;         /* the file being flushed */
    bool in_flight; /* an IOCB_CMD_FDSYNC was submitted and has not completed */
    bool again;     /* written to since that submission: submit once more */
    int failed;     /* -errno of the last asynchronous flush that failed, 0 */
    uint64_t completed;
    struct iocb cb;
};

static long sys_io_setup(unsigned nr, aio_context_t *ctx)
{
    return syscall(SYS_io_setup, nr, ctx);
}

static long sys_io_destroy(aio_context_t ctx)
{
    return syscall(SYS_io_destroy, ctx);
}

static long sys_io_submit(aio_context_t ctx, long n, struct iocb **cbs)
{
    return syscall(SYS_io_submit, ctx, n, cbs);
}

static long sys_io_getevents(aio_context_t ctx, long min, long max, struct io_event *ev,
                             struct timespec *ts)
{
    return syscall(SYS_io_getevents, ctx, min, max, ev, ts);
}

static int sync_now(int fd)
{
    while (fdatasync(fd) < 0)
        if (errno != EINTR)
            return -errno;
    return 0;
}

/* Submits an fdatasync of f->fd. 0, or -errno (AIO refused it: the caller
 * flushes synchronously instead). */
static int submit(struct fs_flusher *f)
{
    memset(&f->cb, 0, sizeof(f->cb));
    f->cb.aio_fildes = (uint32_t)f->fd;
    f->cb.aio_lio_opcode = IOCB_CMD_FDSYNC;
    f->cb.aio_flags = IOCB_FLAG_RESFD;
    f->cb.aio_resfd = (uint32_t)f->efd;
    struct iocb *cbs[1] = {&f->cb};
    long r;
    while ((r = sys_io_submit(f->ctx, 1, cbs)) < 0 && errno == EINTR)
        ;
    if (r != 1)
        return r < 0 ? -errno : -EAGAIN;
    f->in_flight = true;
    f->again = false;
    return 0;
}

/* Collects the completion; submits again if more was written meanwhile. */
static void on_done(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    struct fs_flusher *f = user_data;
    uint64_t n;
    if (read(f->efd, &n, sizeof(n)) < 0)
        return; /* EAGAIN: not ours yet */
    struct io_event ev;
    struct timespec zero = {0, 0};
    if (sys_io_getevents(f->ctx, 0, 1, &ev, &zero) != 1)
        return;
    f->in_flight = false;
    if (ev.res < 0) {
        f->failed = (int)ev.res;
        log_error("cannot flush a state file to disk: %s (the next write flushes in place)",
                  strerror((int)-ev.res));
        return;
    }
    f->completed++;
    if (f->again && submit(f) < 0)
        f->failed = sync_now(f->fd);
}

int fs_flusher_new(struct ev_loop *loop, struct fs_flusher **ret)
{
    struct fs_flusher *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->efd = -1;
    f->fd = -1;
    f->loop = loop;
    if (loop && sys_io_setup(1, &f->ctx) == 0) {
        f->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (f->efd < 0 || ev_loop_add_io(loop, f->efd, EPOLLIN, on_done, f) < 0) {
            if (f->efd >= 0)
                close(f->efd);
            f->efd = -1;
            sys_io_destroy(f->ctx);
            f->ctx = 0;
        }
    } else {
        f->ctx = 0;
    }
    if (loop && !f->ctx)
        log_info("state files are flushed in place (Linux AIO is not available: %s)",
                 strerror(errno));
    *ret = f;
    return 0;
}

/* Waits for the flush in flight, if any. */
static void drain(struct fs_flusher *f)
{
    while (f->in_flight) {
        struct io_event ev;
        long r = sys_io_getevents(f->ctx, 1, 1, &ev, NULL);
        if (r == 1) {
            f->in_flight = false;
            f->completed += ev.res >= 0;
        } else if (r < 0 && errno != EINTR) {
            f->in_flight = false;
        }
    }
}

struct fs_flusher *fs_flusher_free(struct fs_flusher *f)
{
    if (!f)
        return NULL;
    drain(f);
    if (f->again && f->fd >= 0)
        sync_now(f->fd);
    if (f->efd >= 0) {
        ev_loop_del_io(f->loop, f->efd);
        close(f->efd);
    }
    if (f->ctx)
        sys_io_destroy(f->ctx);
    free(f);
    return NULL;
}

int fs_flusher_sync(struct fs_flusher *f, int fd)
{
    if (!f || !f->ctx)
        return sync_now(fd);
    if (f->failed) {
        f->failed = 0;
        drain(f);
        f->again = false;
        return sync_now(fd);
    }
    if (f->in_flight) {
        if (fd != f->fd)
            return sync_now(fd);
        f->again = true;
        return 0;
    }
    f->fd = fd;
    if (submit(f) < 0)
        return sync_now(fd);
    return 0;
}

bool fs_flusher_async(const struct fs_flusher *f)
{
    return f && f->ctx;
}

bool fs_flusher_idle(const struct fs_flusher *f)
{
    return !f || (!f->in_flight && !f->again);
}

uint64_t fs_flusher_completed(const struct fs_flusher *f)
{
    return f ? f->completed : 0;
}
