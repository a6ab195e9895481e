/* proc.c — reading a process's start time from /proc/<pid>/stat (see proc.h). */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define STARTTIME_FIELD 22

int proc_parse_start_time(const char *stat, size_t len, uint64_t *ret)
{
    if (!stat || !ret)
        return -EINVAL;
    /* comm (field 2) is free text in parentheses: only the last ')' surely ends it */
    const char *end = stat + len, *p = NULL;
    for (const char *q = stat; q < end; q++)
        if (*q == ')')
            p = q;
    if (!p)
        return -EPROTO;
    /* each space after the ')' starts the next field */
    p++;
    for (int field = 2; field < STARTTIME_FIELD; field++) {
        while (p < end && *p != ' ')
            p++;
        if (p >= end)
            return -EPROTO;
        p++;
    }
    uint64_t v = 0;
    const char *digits = p;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EPROTO;
        v = v * 10 + d;
    }
    /* more fields always follow: a number running into the end was cut short */
    if (p == digits || p >= end || (*p != ' ' && *p != '\n'))
        return -EPROTO;
    *ret = v;
    return 0;
}

int proc_start_time(pid_t pid, uint64_t *ret)
{
    if (pid <= 0 || !ret)
        return -EINVAL;
    /* comm is at most 64 bytes (TASK_COMM_LEN is 16 today) and fields 3..22 numbers, so
     * field 22 lies well inside; a short read shows as -EPROTO, never a wrong value */
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n;
    do
        n = read(fd, buf, sizeof(buf));
    while (n < 0 && errno == EINTR);
    int err = errno;
    close(fd);
    if (n < 0)
        return -err;
    return proc_parse_start_time(buf, (size_t)n, ret);
}
