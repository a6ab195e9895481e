/* Unit tests for src/common/evloop: fd dispatch, timers, and removal of fds
 * and timers from inside callbacks. */
#include "evloop.h"
#include "tap.h"
#include "util.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

struct counts {
    int reads;
    int timers;
    int order[8];
    int n_order;
};

static void read_cb(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    struct counts *c = ud;
    char buf[16];
    if (read(fd, buf, sizeof(buf)) > 0)
        c->reads++;
}

TEST(io_dispatch_and_del)
{
    struct ev_loop *loop;
    REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
    int sv[2];
    REQUIRE_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct counts c = {0};
    CHECK_EQ_INT(ev_loop_add_io(loop, sv[0], EPOLLIN, read_cb, &c), 0);
    CHECK_EQ_INT(ev_loop_add_io(loop, sv[0], EPOLLIN, read_cb, &c), -EEXIST);
    CHECK_EQ_INT(write(sv[1], "x", 1), 1);
    CHECK_EQ_INT(ev_loop_run_once(loop, 1000), 1);
    CHECK_EQ_INT(c.reads, 1);
    CHECK_EQ_INT(ev_loop_mod_io(loop, sv[0], EPOLLIN), 0);
    CHECK_EQ_INT(ev_loop_del_io(loop, sv[0]), 0);
    CHECK_EQ_INT(ev_loop_del_io(loop, sv[0]), -ENOENT);
    CHECK_EQ_INT(ev_loop_mod_io(loop, sv[0], EPOLLIN), -ENOENT);
    CHECK_EQ_INT(write(sv[1], "y", 1), 1);
    CHECK_EQ_INT(ev_loop_run_once(loop, 0), 0);
    CHECK_EQ_INT(c.reads, 1);
    close(sv[0]);
    close(sv[1]);
    ev_loop_free(loop);
}

/* Two readable fds; the first callback removes the second: it must not run. */
struct pair {
    int fds[2];
    int calls[2];
};

static void remove_other_cb(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    struct pair *p = ud;
    int me = fd == p->fds[0] ? 0 : 1;
    p->calls[me]++;
    ev_loop_del_io(loop, p->fds[!me]);
    ev_loop_del_io(loop, fd);
}

TEST(callback_removes_other_fd)
{
    struct ev_loop *loop;
    REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
    int a[2], b[2];
    REQUIRE_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, a), 0);
    REQUIRE_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, b), 0);
    struct pair p = {.fds = {a[0], b[0]}};
    CHECK_EQ_INT(ev_loop_add_io(loop, a[0], EPOLLIN, remove_other_cb, &p), 0);
    CHECK_EQ_INT(ev_loop_add_io(loop, b[0], EPOLLIN, remove_other_cb, &p), 0);
    CHECK_EQ_INT(write(a[1], "x", 1), 1);
    CHECK_EQ_INT(write(b[1], "x", 1), 1);
    /* Both are ready before the wait, so one epoll_wait returns both. */
    CHECK_EQ_INT(ev_loop_run_once(loop, 1000), 1);
    CHECK_EQ_INT(p.calls[0] + p.calls[1], 1);
    CHECK_EQ_INT(ev_loop_run_once(loop, 0), 0);
    close(a[0]), close(a[1]), close(b[0]), close(b[1]);
    ev_loop_free(loop);
}

static void timer_record(struct ev_loop *loop, void *ud)
{
    struct counts *c = ud;
    c->timers++;
}

struct cancel_ctx {
    uint64_t other;
    int ran;
};

static void timer_cancel_other(struct ev_loop *loop, void *ud)
{
    struct cancel_ctx *x = ud;
    x->ran++;
    ev_loop_cancel_timer(loop, x->other);
}

TEST(timers_fire_in_order_and_cancel)
{
    struct ev_loop *loop;
    REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
    struct counts c = {0};
    uint64_t id1 = 0, id2 = 0;
    CHECK_EQ_INT(ev_loop_add_timer(loop, 1000000, timer_record, &c, &id1), 0);
    CHECK_EQ_INT(ev_loop_add_timer(loop, 1000000, timer_record, &c, &id2), 0);
    CHECK(id1 != 0 && id2 != 0 && id1 != id2);
    CHECK_EQ_INT(ev_loop_cancel_timer(loop, id2), 0);
    CHECK_EQ_INT(ev_loop_cancel_timer(loop, id2), -ENOENT);
    CHECK_EQ_INT(ev_loop_cancel_timer(loop, 0), -ENOENT);
    /* The wait is bounded by the timer, not by the -1 timeout. */
    while (c.timers == 0)
        REQUIRE(ev_loop_run_once(loop, -1) >= 0);
    CHECK_EQ_INT(c.timers, 1);
    CHECK_EQ_INT(ev_loop_cancel_timer(loop, id1), -ENOENT);

    /* A timer cancelling another that is due in the same round. */
    struct cancel_ctx x1 = {0}, x2 = {0};
    uint64_t t1, t2;
    CHECK_EQ_INT(ev_loop_add_timer(loop, 0, timer_cancel_other, &x1, &t1), 0);
    CHECK_EQ_INT(ev_loop_add_timer(loop, 0, timer_cancel_other, &x2, &t2), 0);
    x1.other = t2;
    x2.other = t1;
    CHECK_EQ_INT(ev_loop_run_once(loop, 0), 1);
    CHECK_EQ_INT(x1.ran + x2.ran, 1);
    ev_loop_free(loop);
}

static void rearm_cb(struct ev_loop *loop, void *ud)
{
    int *n = ud;
    (*n)++;
    ev_loop_add_timer(loop, 0, rearm_cb, ud, NULL);
}

TEST(rearming_zero_timer_does_not_spin_one_round)
{
    struct ev_loop *loop;
    REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
    int n = 0;
    CHECK_EQ_INT(ev_loop_add_timer(loop, 0, rearm_cb, &n, NULL), 0);
    CHECK_EQ_INT(ev_loop_run_once(loop, 0), 1);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(ev_loop_run_once(loop, 0), 1);
    CHECK_EQ_INT(n, 2);
    ev_loop_free(loop); /* pending timer dropped */
}

static void quit_cb(struct ev_loop *loop, void *ud)
{
    ev_loop_quit(loop);
}

TEST(run_until_quit)
{
    struct ev_loop *loop;
    REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
    struct counts c = {0};
    CHECK_EQ_INT(ev_loop_add_timer(loop, 0, timer_record, &c, NULL), 0);
    CHECK_EQ_INT(ev_loop_add_timer(loop, 2000000, quit_cb, NULL, NULL), 0);
    CHECK_EQ_INT(ev_loop_run(loop), 0);
    CHECK_EQ_INT(c.timers, 1);
    ev_loop_free(loop);
    CHECK(ev_loop_free(NULL) == NULL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
