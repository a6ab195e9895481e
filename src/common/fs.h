/* fs.h — file helpers: atomic replace (tmp + fsync + rename + dir fsync, or
 * without the fsyncs),
 * whole-file reads with a size cap, mkdir -p. libc only. */
#pragma once

#include <stddef.h>
#include <sys/types.h>

/* Writes data to path atomically: a reader sees the old file or the new one,
 * never a mix, and after return the new content survives a crash.
 * Returns 0 or -errno; on failure path is unchanged. */
int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode);

/* As fs_write_atomic without the fsyncs: readers see the old file or the new
 * one, and the new one survives the writer being killed (it is in the page
 * cache), but not a crash of the machine. For files that can be rebuilt from
 * a durable record, or that only report. Returns 0 or -errno. */
int fs_write_replace(const char *path, const void *data, size_t len, mode_t mode);

/* Writes all of data to fd (retrying short writes and EINTR). 0 or -errno. */
int fs_write_full(int fd, const void *data, size_t len);

/* Reads a whole file (at most max bytes; larger → -EFBIG), NUL-terminated.
 * *ret_data is owned by the caller (free). Returns 0 or -errno. */
int fs_read_all(const char *path, size_t max, char **ret_data, size_t *ret_len);

/* mkdir -p with mode for created components. Returns 0 or -errno. */
int fs_mkdir_p(const char *path, mode_t mode);

/* Removes what interrupted atomic writes left in dir: "<prefix>*.tmp.<pid>" entries (the
 * temporary names fs_write_atomic and fs_write_replace use) whose pid is this process's (a
 * restarted daemon may get its old pid back, and wrote nothing yet) or no live process's. A
 * live other process's are its own and stay. Returns how many were removed (0 when dir does
 * not exist) or -errno when dir cannot be read. */
int fs_remove_stale_tmp(const char *dir, const char *prefix);
