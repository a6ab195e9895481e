/* tenant-fs.c — see tenant-fs.h. */
#define _GNU_SOURCE
#include "tenant-fs.h"

#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

static int have_openat2 = -1; /* -1: not tried yet */

bool tenant_have_openat2(void)
{
    if (__atomic_load_n(&have_openat2, __ATOMIC_RELAXED) < 0) {
        struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_BENEATH};
        long fd = syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof(how));
        int v = fd >= 0 || (errno != ENOSYS && errno != EPERM);
        if (fd >= 0)
            close((int)fd);
        __atomic_store_n(&have_openat2, v, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&have_openat2, __ATOMIC_RELAXED) > 0;
}

/* A relative path of plain names: no "", ".", ".." component, no leading '/'. */
static bool plain_path(const char *path)
{
    if (!path || !*path || *path == '/' || strlen(path) >= PATH_MAX)
        return false;
    for (const char *p = path; *p;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n;
        if (*p == '/')
            p++;
        if (e && !*p)
            return false; /* a trailing '/' */
    }
    return true;
}

/* Component by component: each directory opened O_PATH | O_DIRECTORY | O_NOFOLLOW (a
 * symlink in a directory's place fails with ENOTDIR), the last with O_NOFOLLOW (ELOOP). */
static int walk_open(int dirfd, const char *path, int flags, unsigned opts)
{
    struct stat top;
    if ((opts & TENANT_NO_XDEV) && fstat(dirfd, &top) < 0)
        return -errno;
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    int cur = dirfd;
    char *save = NULL;
    char *comp = strtok_r(buf, "/", &save);
    for (;;) {
        char *next = strtok_r(NULL, "/", &save);
        int f = next ? O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                     : flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY;
        int fd = openat(cur, comp, f);
        int e = errno;
        if (cur != dirfd)
            close(cur);
        if (fd < 0)
            return -e;
        if (opts & TENANT_NO_XDEV) {
            struct stat st;
            if (fstat(fd, &st) < 0 || st.st_dev != top.st_dev) {
                close(fd);
                return -EXDEV;
            }
        }
        if (!next)
            return fd;
        cur = fd;
        comp = next;
    }
}

int tenant_open(int dirfd, const char *path, int flags, unsigned opts)
{
    if (!plain_path(path) || (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
        return -EINVAL;
    if (!(opts & TENANT_FALLBACK) && tenant_have_openat2()) {
        struct open_how how = {
            .flags = (uint64_t)(flags | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW),
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                       ((opts & TENANT_NO_XDEV) ? RESOLVE_NO_XDEV : 0),
        };
        long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        if (fd >= 0)
            return (int)fd;
        return -errno;
    }
    return walk_open(dirfd, path, flags, opts);
}

int tenant_open_file(int dirfd, const char *path, off_t max_size, off_t *ret_size)
{
    int fd = tenant_open(dirfd, path, O_RDONLY | O_NONBLOCK, TENANT_NO_XDEV);
    if (fd < 0)
        return fd;
    struct stat st, dst;
    int r = 0;
    if (fstat(fd, &st) < 0 || fstat(dirfd, &dst) < 0)
        r = -errno;
    else if (!S_ISREG(st.st_mode))
        r = -EPROTO;
    else if (st.st_nlink != 1)
        r = -EMLINK;
    else if (st.st_dev != dst.st_dev)
        r = -EXDEV;
    else if (max_size > 0 && st.st_size > max_size)
        r = -EFBIG;
    if (r < 0) {
        close(fd);
        return r;
    }
    if (ret_size)
        *ret_size = st.st_size;
    return fd;
}

ssize_t tenant_pread(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* Empties the directory fd (which it closes), depth levels of subdirectories at most. */
static int empty_dir(int fd, dev_t dev, unsigned depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        int r = -errno;
        close(fd);
        return r;
    }
    int first = 0;
    struct dirent *e;
    /* a pass removes what it can; entries a tenant adds meanwhile make a next pass (bounded) */
    for (int pass = 0; pass < 4; pass++) {
        bool again = false;
        rewinddir(d);
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (unlinkat(dirfd(d), e->d_name, 0) == 0 || (errno != EISDIR && errno != EPERM))
                continue; /* removed (a symlink is removed itself), or gone already */
            int sub = openat(dirfd(d), e->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            if (sub < 0) {
                if (!first && errno != ENOENT)
                    first = -errno;
                continue;
            }
            struct stat st;
            int r = 0;
            if (fstat(sub, &st) < 0)
                r = -errno;
            else if (st.st_dev != dev)
                r = -EXDEV; /* a mount point: never walked into */
            else if (depth == 0)
                r = -ELOOP;
            if (r < 0) {
                close(sub);
                if (!first)
                    first = r;
                continue;
            }
            r = empty_dir(sub, dev, depth - 1);
            if (r < 0 && !first)
                first = r;
            if (unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT) {
                if (errno == ENOTEMPTY)
                    again = true;
                else if (!first)
                    first = -errno;
            }
        }
        if (!again)
            break;
    }
    closedir(d);
    return first;
}

int tenant_remove_tree(int dirfd, const char *name, unsigned max_depth)
{
    if (!plain_path(name) || strchr(name, '/'))
        return -EINVAL;
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -errno;
    struct stat top;
    if (fstat(dirfd, &top) < 0)
        return -errno;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_dev != top.st_dev) {
        close(fd);
        return -EXDEV;
    }
    int r = empty_dir(fd, st.st_dev, max_depth);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
        r = -errno;
    return r;
}

/* Whether path is the root of a mount (its filesystem differs from its parent's). */
static bool mount_root(const char *path)
{
    char parent[PATH_MAX];
    if (snprintf(parent, sizeof(parent), "%s/..", path) >= (int)sizeof(parent))
        return false;
    struct stat a, b;
    return lstat(path, &a) == 0 && S_ISDIR(a.st_mode) && stat(parent, &b) == 0 &&
           a.st_dev != b.st_dev;
}

int tenant_dir_make(const char *path, enum tenant_dir_how *ret_how)
{
    return tenant_dir_make_opts(path, TENANT_DIR_TMPFS_OPTS, 0777, ret_how);
}

int tenant_dir_make_opts(const char *path, const char *tmpfs_opts, mode_t mode,
                         enum tenant_dir_how *ret_how)
{
    struct stat st;
    bool existed = lstat(path, &st) == 0;
    if (existed && !S_ISDIR(st.st_mode))
        return -ENOTDIR;
    if (existed && mount_root(path)) {
        *ret_how = TENANT_DIR_TMPFS;
        return 0;
    }
    if (!existed) {
        int r = fs_mkdir_p(path, 0755);
        if (r < 0)
            return r;
        if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, tmpfs_opts) == 0) {
            *ret_how = TENANT_DIR_TMPFS;
            return 0;
        }
    }
    int e = errno;
    *ret_how = existed ? TENANT_DIR_KEPT : TENANT_DIR_PLAIN;
    /* chmod, not the mkdir mode: the umask must not narrow it */
    if (chmod(path, mode) < 0)
        return -errno;
    errno = e;
    return 0;
}

int tenant_dir_remove(const char *path)
{
    /* a tmpfs (or, after a crash in between, two) of ours on it: detached, contents and all */
    for (int i = 0; i < 4 && mount_root(path); i++)
        if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
            break;
    char parent[PATH_MAX];
    if (snprintf(parent, sizeof(parent), "%s", path) >= (int)sizeof(parent))
        return -ENAMETOOLONG;
    char *slash = strrchr(parent, '/');
    const char *name = slash ? path + (slash - parent) + 1 : path;
    if (slash == parent)
        parent[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(parent, sizeof(parent), ".");
    int dfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -errno;
    int r = tenant_remove_tree(dfd, name, 16);
    close(dfd);
    return r;
}
