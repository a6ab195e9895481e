/* fs.c — see fs.h. */
#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof(dir))
        return -ENAMETOOLONG;
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return r;
}

static int write_replace(const char *path, const void *data, size_t len, mode_t mode, bool durable)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    int r = fs_write_full(fd, data, len);
    if (r == 0 && fchmod(fd, mode) < 0)
        r = -errno;
    if (r == 0 && durable && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    if (r < 0) {
        unlink(tmp);
        return r;
    }
    return durable ? fsync_parent(path) : 0;
}

int fs_write_full(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
    return write_replace(path, data, len, mode, true);
}

int fs_write_replace(const char *path, const void *data, size_t len, mode_t mode)
{
    return write_replace(path, data, len, mode, false);
}

int fs_read_all(const char *path, size_t max, char **ret_data, size_t *ret_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= max) {
                free(buf);
                close(fd);
                return -EFBIG;
            }
            size_t ncap = cap * 2 > max ? max : cap * 2;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                close(fd);
                return -ENOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            free(buf);
            close(fd);
            return e;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (len > max) {
        free(buf);
        return -EFBIG;
    }
    buf[len] = '\0';
    *ret_data = buf;
    if (ret_len)
        *ret_len = len;
    return 0;
}

int fs_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf))
        return n ? -ENAMETOOLONG : -EINVAL;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(buf, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* "<digits>" as a pid, else 0. */
static pid_t tmp_pid(const char *s)
{
    long v = 0;
    if (!*s)
        return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > 4194304)
            return 0;
        v = v * 10 + (*s - '0');
    }
    return (pid_t)v;
}

int fs_remove_stale_tmp(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    size_t plen = strlen(prefix);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *mark = strstr(e->d_name, ".tmp.");
        if (!mark || strncmp(e->d_name, prefix, plen) != 0 || (size_t)(mark - e->d_name) < plen)
            continue;
        while (strstr(mark + 1, ".tmp."))
            mark = strstr(mark + 1, ".tmp.");
        pid_t pid = tmp_pid(mark + 5);
        if (pid <= 0)
            continue;
        /* a pid of ours (reused: we wrote nothing yet) or of no process: left by a writer
         * killed between the write and its rename; a live other process's is its own */
        if (pid != getpid() && !(kill(pid, 0) < 0 && errno == ESRCH))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}
