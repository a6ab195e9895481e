/* util.h — small helpers shared by every component: size and duration
 * parsing, monotonic time, cleanup attributes. libc only: libvcuda and the
 * emulator link this too. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void freep(void *p)
{
    free(*(void **)p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd)
{
    if (*fd >= 0)
        close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

static inline uint64_t now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mono_ns(void)
{
    return now_ns(CLOCK_MONOTONIC);
}

/* "4096", "4K", "4KiB", "1.5G", "256Mi": K/M/G/T are powers of 1000, Ki/Mi/Gi/Ti
 * (and KiB...) powers of 1024; a trailing "B" is accepted. Rejects negative
 * numbers, junk and overflow. Returns 0 or -EINVAL / -ERANGE. */
int parse_size(const char *s, uint64_t *ret_bytes);

/* "250ms", "10s", "5m", "1h", "0" (bare numbers are seconds). Returns 0 or -EINVAL / -ERANGE. */
int parse_duration_ns(const char *s, uint64_t *ret_ns);

/* Strict base-10 integer parsing of the whole string. 0 or -EINVAL / -ERANGE. */
int parse_u64(const char *s, uint64_t *ret);
int parse_int(const char *s, int *ret);

/* Formats a message into err (when err is non-NULL and errlen > 0) and returns -EINVAL, so a
 * parser reports why it refused an input in one line: `return errbuf_printf(err, len, "...")`. */
int errbuf_printf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Formats bytes as "1.50 GiB" into buf. Returns buf. */
char *format_bytes(uint64_t bytes, char *buf, size_t len);
