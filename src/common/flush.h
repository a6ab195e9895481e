/* flush.h — makes what was written to a file durable without blocking the
 * agent's loop: an fdatasync submitted through Linux AIO (IOCB_CMD_FDSYNC,
 * kernel 4.18 and later, any filesystem) whose completion arrives on an
 * eventfd the loop watches. No thread is started. Requests made while one is
 * in flight are merged into the next (group commit).
 *
 * Where AIO is refused (ENOSYS, EPERM under a seccomp profile, EINVAL from an
 * older kernel), fs_flusher_sync falls back to fdatasync in the caller:
 * slower, never less durable.
 *
 * Threads: the loop's thread only (evloop.h). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;
struct fs_flusher;

/* loop may be NULL: every sync is then an fdatasync in the caller. Returns 0
 * or -ENOMEM (AIO being unavailable is not an error: see fs_flusher_async). */
int fs_flusher_new(struct ev_loop *loop, struct fs_flusher **ret);
/* Waits for a flush in flight (so that what was written before is durable
 * when the agent exits) and frees. NULL ok; returns NULL. */
struct fs_flusher *fs_flusher_free(struct fs_flusher *f);

/* Makes the data written to fd so far durable: asynchronously when AIO is
 * available (returns at once; fd must stay open until fs_flusher_idle or
 * fs_flusher_free), else by fdatasync before returning. One fd per flusher:
 * a request for another fd while one is in flight is done synchronously.
 * f NULL: fdatasync. Returns 0 or -errno (a failure of an asynchronous flush
 * is logged and makes the next request synchronous, which reports it). */
int fs_flusher_sync(struct fs_flusher *f, int fd);

/* Whether flushes go through AIO (false: fdatasync in the caller). */
bool fs_flusher_async(const struct fs_flusher *f);
/* Whether no flush is in flight or requested. */
bool fs_flusher_idle(const struct fs_flusher *f);
/* Flushes completed through AIO (tests, stats). */
uint64_t fs_flusher_completed(const struct fs_flusher *f);
