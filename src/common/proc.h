/* proc.h — facts about a process read from /proc. libc only: the emulator's state code and
 * libvcuda both use this to tell a live process from a dead one whose pid was reused. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Hidden: these get linked into shared libraries (the emulated libcuda.so.1) whose exported
 * names must stay the driver's own. */
#define PROC_API __attribute__((visibility("hidden")))

/* Parses field 22 (starttime, clock ticks after boot) out of the text of a /proc/<pid>/stat
 * file, len bytes at stat (need not be NUL-terminated). Field 2 (comm) may itself hold spaces
 * and ')' characters, so fields are counted from the last ')'. Returns 0, or -EPROTO when the
 * text is not a stat line; *ret is untouched on failure. */
PROC_API int proc_parse_start_time(const char *stat, size_t len, uint64_t *ret);

/* The start time of pid from /proc/<pid>/stat. Returns 0, -EINVAL for pid <= 0, -errno when
 * the file cannot be read (-ENOENT: no such process, or another pid namespace's /proc), or
 * -EPROTO; *ret is untouched on failure. */
PROC_API int proc_start_time(pid_t pid, uint64_t *ret);
