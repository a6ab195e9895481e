/* evloop.h — the agent's single-threaded event loop: epoll for file
 * descriptors plus one-shot timers on CLOCK_MONOTONIC. libc only.
 *
 * Threads: every function must be called from the thread that runs the loop
 * (or before it runs). Another thread that needs the loop's attention writes
 * to an eventfd/pipe the loop watches.
 *
 * Re-entrancy: a callback may add, modify or remove any fd or timer,
 * including its own, and may call ev_loop_quit(). An fd removed during a
 * dispatch round gets no further callback in that round, even when the
 * same fd number is added again before the round ends. ev_loop_free() must
 * not be called from inside a callback.
 *
 * Ownership: the loop never closes the fds it watches; remove an fd
 * (ev_loop_del_io) before closing it. */
#pragma once

#include <stdint.h>
#include <sys/epoll.h>

struct ev_loop;

/* events: EPOLLIN / EPOLLOUT / EPOLLHUP / EPOLLERR / EPOLLRDHUP as reported. */
typedef void (*ev_io_cb)(struct ev_loop *loop, int fd, uint32_t events, void *user_data);
typedef void (*ev_timer_cb)(struct ev_loop *loop, void *user_data);

/* Returns 0 or -errno (-ENOMEM, or epoll_create1's error). */
int ev_loop_new(struct ev_loop **ret);
/* Frees the loop; pending timers are dropped without running. NULL ok; returns NULL. */
struct ev_loop *ev_loop_free(struct ev_loop *loop);

/* Watches fd for events (EPOLLIN, EPOLLOUT, ... level-triggered). One watch
 * per fd: -EEXIST if fd is already watched, -EBADF/-EPERM from epoll_ctl. */
int ev_loop_add_io(struct ev_loop *loop, int fd, uint32_t events, ev_io_cb cb, void *user_data);
/* Changes the event mask of a watched fd. -ENOENT if not watched. */
int ev_loop_mod_io(struct ev_loop *loop, int fd, uint32_t events);
/* Stops watching fd. -ENOENT if not watched. */
int ev_loop_del_io(struct ev_loop *loop, int fd);

/* Runs cb once, delay_ns from now (0: on the next loop iteration, after I/O
 * of the current round). *ret_id (optional) identifies the timer for
 * cancelling; ids are never 0 and never reused. Returns 0 or -ENOMEM. */
int ev_loop_add_timer(struct ev_loop *loop, uint64_t delay_ns, ev_timer_cb cb, void *user_data,
                      uint64_t *ret_id);
/* Cancels a pending timer. -ENOENT if it already ran, was cancelled, or never
 * existed (so 0 is always safe to pass). */
int ev_loop_cancel_timer(struct ev_loop *loop, uint64_t id);

/* Dispatches until ev_loop_quit(). Returns 0, or -errno if epoll_wait fails
 * for a reason other than EINTR. */
int ev_loop_run(struct ev_loop *loop);
/* One round: waits up to timeout_ms (-1: no limit; the next timer shortens
 * it), dispatches ready fds, then runs the timers that are due. Returns the
 * number of callbacks run (>= 0) or -errno. */
int ev_loop_run_once(struct ev_loop *loop, int timeout_ms);
/* Makes ev_loop_run() return after the current callback. */
void ev_loop_quit(struct ev_loop *loop);
