/* evloop.c — owns the agent's epoll loop and its one-shot timers.
 *
 * fds live in a table indexed by fd number. Each watch gets a generation
 * number, stored with the fd in the epoll event, so that an event already
 * returned by epoll_wait for a watch that was removed (and maybe replaced by
 * a new watch on the same fd number) during the same round is dropped.
 *
 * Timers are a small array scanned linearly: the agent has a handful
 * (deadlines, backoff), and a scan keeps cancel-by-id trivial. */
#include "evloop.h"

#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ev_io {
    ev_io_cb cb;
    void *user_data;
    uint32_t gen; /* 0: slot unused */
};

struct ev_timer {
    uint64_t id;
    uint64_t due_ns;
    ev_timer_cb cb;
    void *user_data;
};

struct ev_loop {
    int epfd;
    bool quit;
    struct ev_io *ios;
    size_t n_ios; /* table size (max fd + 1 seen) */
    uint32_t next_gen;
    struct ev_timer *timers;
    size_t n_timers, cap_timers;
    uint64_t next_timer_id;
};

#define EV_MAX_EVENTS 64

int ev_loop_new(struct ev_loop **ret)
{
    struct ev_loop *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        int r = -errno;
        free(l);
        return r;
    }
    l->next_gen = 1;
    l->next_timer_id = 1;
    *ret = l;
    return 0;
}

struct ev_loop *ev_loop_free(struct ev_loop *loop)
{
    if (!loop)
        return NULL;
    close(loop->epfd);
    free(loop->ios);
    free(loop->timers);
    free(loop);
    return NULL;
}

static struct ev_io *io_slot(struct ev_loop *l, int fd)
{
    if (fd < 0 || (size_t)fd >= l->n_ios || l->ios[fd].gen == 0)
        return NULL;
    return &l->ios[fd];
}

int ev_loop_add_io(struct ev_loop *loop, int fd, uint32_t events, ev_io_cb cb, void *user_data)
{
    if (fd < 0 || !cb)
        return -EINVAL;
    if (io_slot(loop, fd))
        return -EEXIST;
    if ((size_t)fd >= loop->n_ios) {
        size_t n = loop->n_ios ? loop->n_ios : 16;
        while (n <= (size_t)fd)
            n *= 2;
        struct ev_io *t = realloc(loop->ios, n * sizeof(*t));
        if (!t)
            return -ENOMEM;
        memset(t + loop->n_ios, 0, (n - loop->n_ios) * sizeof(*t));
        loop->ios = t;
        loop->n_ios = n;
    }
    uint32_t gen = loop->next_gen++;
    if (loop->next_gen == 0)
        loop->next_gen = 1;
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)gen << 32 | (uint32_t)fd};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        return -errno;
    loop->ios[fd] = (struct ev_io){.cb = cb, .user_data = user_data, .gen = gen};
    return 0;
}

int ev_loop_mod_io(struct ev_loop *loop, int fd, uint32_t events)
{
    struct ev_io *io = io_slot(loop, fd);
    if (!io)
        return -ENOENT;
    struct epoll_event ev = {.events = events, .data.u64 = (uint64_t)io->gen << 32 | (uint32_t)fd};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
        return -errno;
    return 0;
}

int ev_loop_del_io(struct ev_loop *loop, int fd)
{
    struct ev_io *io = io_slot(loop, fd);
    if (!io)
        return -ENOENT;
    /* The fd may already be closed by a careless caller; the slot goes anyway. */
    (void)epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
    *io = (struct ev_io){0};
    return 0;
}

int ev_loop_add_timer(struct ev_loop *loop, uint64_t delay_ns, ev_timer_cb cb, void *user_data,
                      uint64_t *ret_id)
{
    if (!cb)
        return -EINVAL;
    if (loop->n_timers == loop->cap_timers) {
        size_t n = loop->cap_timers ? loop->cap_timers * 2 : 8;
        struct ev_timer *t = realloc(loop->timers, n * sizeof(*t));
        if (!t)
            return -ENOMEM;
        loop->timers = t;
        loop->cap_timers = n;
    }
    uint64_t now = mono_ns();
    uint64_t due = delay_ns > UINT64_MAX - now ? UINT64_MAX : now + delay_ns;
    uint64_t id = loop->next_timer_id++;
    loop->timers[loop->n_timers++] =
        (struct ev_timer){.id = id, .due_ns = due, .cb = cb, .user_data = user_data};
    if (ret_id)
        *ret_id = id;
    return 0;
}

int ev_loop_cancel_timer(struct ev_loop *loop, uint64_t id)
{
    for (size_t i = 0; i < loop->n_timers; i++) {
        if (loop->timers[i].id == id) {
            /* Order does not matter: timers are scanned, not kept sorted. */
            loop->timers[i] = loop->timers[--loop->n_timers];
            return 0;
        }
    }
    return -ENOENT;
}

/* Milliseconds until the next timer (rounded up), capped by timeout_ms. */
static int next_timeout_ms(struct ev_loop *loop, int timeout_ms)
{
    if (loop->n_timers == 0)
        return timeout_ms;
    uint64_t min = UINT64_MAX;
    for (size_t i = 0; i < loop->n_timers; i++)
        if (loop->timers[i].due_ns < min)
            min = loop->timers[i].due_ns;
    uint64_t now = mono_ns();
    if (min <= now)
        return 0;
    uint64_t ms = (min - now + 999999) / 1000000;
    if (ms > INT_MAX)
        ms = INT_MAX;
    if (timeout_ms >= 0 && (uint64_t)timeout_ms < ms)
        return timeout_ms;
    return (int)ms;
}

/* Runs the timers due now. Timers added by a callback wait for the next round,
 * so a 0-delay timer that re-arms itself cannot starve I/O. */
static int run_timers(struct ev_loop *loop)
{
    uint64_t now = mono_ns();
    uint64_t limit_id = loop->next_timer_id;
    int ran = 0;
    for (;;) {
        size_t pick = SIZE_MAX;
        for (size_t i = 0; i < loop->n_timers; i++) {
            const struct ev_timer *t = &loop->timers[i];
            if (t->due_ns <= now && t->id < limit_id &&
                (pick == SIZE_MAX || t->due_ns < loop->timers[pick].due_ns))
                pick = i;
        }
        if (pick == SIZE_MAX)
            return ran;
        struct ev_timer t = loop->timers[pick];
        loop->timers[pick] = loop->timers[--loop->n_timers];
        t.cb(loop, t.user_data);
        ran++;
    }
}

int ev_loop_run_once(struct ev_loop *loop, int timeout_ms)
{
    struct epoll_event evs[EV_MAX_EVENTS];
    int n = epoll_wait(loop->epfd, evs, EV_MAX_EVENTS, next_timeout_ms(loop, timeout_ms));
    if (n < 0) {
        if (errno != EINTR)
            return -errno;
        n = 0;
    }
    int ran = 0;
    for (int i = 0; i < n; i++) {
        int fd = (int)(uint32_t)evs[i].data.u64;
        uint32_t gen = (uint32_t)(evs[i].data.u64 >> 32);
        struct ev_io *io = io_slot(loop, fd);
        if (!io || io->gen != gen)
            continue; /* removed (or replaced) earlier in this round */
        io->cb(loop, fd, evs[i].events, io->user_data);
        ran++;
    }
    return ran + run_timers(loop);
}

int ev_loop_run(struct ev_loop *loop)
{
    loop->quit = false;
    while (!loop->quit) {
        int r = ev_loop_run_once(loop, -1);
        if (r < 0)
            return r;
    }
    return 0;
}

void ev_loop_quit(struct ev_loop *loop)
{
    loop->quit = true;
}
