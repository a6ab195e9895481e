/* killat.c — an LD_PRELOAD shim for the fault campaign (tests/faults): SIGKILLs the process at
 * a named state write, so that a test can cut acceld exactly between two steps of an atomic
 * write or of a record and the files it describes.
 *
 *   ACCEL_KILL_AT="<point>:<substring>[:<n>]"
 *
 * point: rename-before (the n-th rename(2) whose new path contains substring, before it
 * happens: the temporary file is left), rename-after (after it: the new file is in place,
 * nothing after it happened), write-before / write-after (the n-th write(2) to a descriptor
 * whose path contains substring), unlink-before (the n-th unlink of such a path). n counts
 * from 1 (default 1). Anything else in the variable: the shim does nothing. Only the test
 * harness loads it; acceld itself never does. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum point { P_NONE, P_RENAME_BEFORE, P_RENAME_AFTER, P_WRITE_BEFORE, P_WRITE_AFTER, P_UNLINK };

static enum point point = P_NONE;
static char what[PATH_MAX];
static long nth = 1;
static atomic_long seen;
static atomic_int ready; /* 0: not read yet, 1: read */

static void setup(void)
{
    if (atomic_load(&ready))
        return;
    const char *v = getenv("ACCEL_KILL_AT");
    static const struct {
        const char *name;
        enum point p;
    } points[] = {{"rename-before:", P_RENAME_BEFORE},
                  {"rename-after:", P_RENAME_AFTER},
                  {"write-before:", P_WRITE_BEFORE},
                  {"write-after:", P_WRITE_AFTER},
                  {"unlink-before:", P_UNLINK}};
    for (size_t i = 0; v && i < sizeof(points) / sizeof(points[0]); i++) {
        size_t l = strlen(points[i].name);
        if (strncmp(v, points[i].name, l) != 0)
            continue;
        snprintf(what, sizeof(what), "%s", v + l);
        char *colon = strrchr(what, ':');
        if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
            nth = strtol(colon + 1, NULL, 10);
            *colon = '\0';
        }
        point = what[0] ? points[i].p : P_NONE;
    }
    atomic_store(&ready, 1);
}

static void maybe_kill(enum point p, const char *path)
{
    setup();
    if (point != p || !path || !strstr(path, what))
        return;
    if (atomic_fetch_add(&seen, 1) + 1 == nth) {
        /* a line the harness can look for: where the process died */
        char line[PATH_MAX + 64];
        int n = snprintf(line, sizeof(line), "killat: SIGKILL at %s\n", path);
        if (n > 0)
            (void)!write(2, line, (size_t)n);
        kill(getpid(), SIGKILL);
        pause();
    }
}

static const char *fd_path(int fd, char *buf, size_t len)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, buf, len - 1);
    if (n < 0)
        return NULL;
    buf[n] = '\0';
    return buf;
}

int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real)
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    maybe_kill(P_RENAME_BEFORE, to);
    int r = real(from, to);
    if (r == 0)
        maybe_kill(P_RENAME_AFTER, to);
    return r;
}

int unlink(const char *path)
{
    static int (*real)(const char *);
    if (!real)
        real = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    maybe_kill(P_UNLINK, path);
    return real(path);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real)
        real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    setup();
    bool watched = fd > 2 && (point == P_WRITE_BEFORE || point == P_WRITE_AFTER);
    char p[PATH_MAX];
    const char *path = watched ? fd_path(fd, p, sizeof(p)) : NULL;
    if (watched)
        maybe_kill(P_WRITE_BEFORE, path);
    ssize_t r = real(fd, buf, n);
    if (watched && r > 0)
        maybe_kill(P_WRITE_AFTER, path);
    return r;
}
