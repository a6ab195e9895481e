/* userns.c — is this process in the initial user namespace? (userns.h)
 *
 * Everything is read from a procfs the caller verified (fstatfs), relative to its root's
 * directory fd, with openat2(RESOLVE_BENEATH | RESOLVE_NO_XDEV): a tenant that owns a mount
 * namespace can put a file of its own over /proc/self/uid_map, or a tmpfs over /proc, but a
 * lookup that crosses a mount point fails with EXDEV, and a tmpfs is not a procfs. Kernels
 * older than 5.6 (no openat2) get plain openat and an fstatfs check of each file: a file of
 * the tenant's own then fails that check, and a genuine proc file of another process (bound
 * over ours) reads as that process's map translated into our namespace, never as the
 * identity map. libc only, and no glibc wrapper newer than 2.17 (syscall(2) for openat2). */
#include "userns.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define VC_PROC_SUPER_MAGIC 0x9fa0
#define VC_PROC_ROOT_INO 1
#ifndef SYS_openat2
#define SYS_openat2 437 /* the same number on every architecture */
#endif
#define VC_RESOLVE_NO_XDEV 0x01
#define VC_RESOLVE_BENEATH 0x08

struct vc_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

/* openat2 beneath dirfd without crossing a mount; -ENOSYS (or what a seccomp filter answers
 * for a system call it does not know: -EPERM) when the kernel cannot, so the caller falls
 * back. */
static int open_beneath(int dirfd, const char *path, int flags)
{
    struct vc_open_how how = {.flags = (uint64_t)flags,
                              .resolve = VC_RESOLVE_BENEATH | VC_RESOLVE_NO_XDEV};
    long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
    return fd < 0 ? -errno : (int)fd;
}

/* Opens proc/path read-only (or O_PATH for a link), refusing anything that is not procfs's own
 * file reached without crossing a mount. *ret_strict says whether openat2 vouched for the
 * path (else only the file's filesystem was checked). */
static int open_proc_file(int procfd, const char *path, int flags, bool *ret_strict)
{
    int fd = open_beneath(procfd, path, flags | O_CLOEXEC);
    *ret_strict = fd >= 0 || (fd != -ENOSYS && fd != -EPERM);
    if (fd == -ENOSYS || fd == -EPERM)
        fd = openat(procfd, path, flags | O_CLOEXEC);
    if (fd < 0)
        return fd == -1 ? -errno : fd;
    struct statfs sfs;
    if (fstatfs(fd, &sfs) < 0 || sfs.f_type != VC_PROC_SUPER_MAGIC) {
        close(fd);
        return -EXDEV; /* a file of another filesystem put over procfs's */
    }
    return fd;
}

/* Parses a uid_map: true when it is exactly one extent "0 0 4294967295". */
static bool identity_map(const char *text)
{
    unsigned long long inside, outside, count;
    int used = 0;
    if (sscanf(text, " %llu %llu %llu %n", &inside, &outside, &count, &used) != 3)
        return false;
    return inside == 0 && outside == 0 && count == 4294967295ull && text[used] == '\0';
}

/* The map as one line for messages: runs of blanks squeezed, lines joined with "; ". */
static void squeeze(const char *in, char *out, size_t outlen)
{
    size_t o = 0;
    bool blank = true;
    for (const char *p = in; *p && o + 3 < outlen; p++) {
        if (*p == '\n') {
            if (p[1] && o + 2 < outlen) {
                out[o++] = ';';
                out[o++] = ' ';
            }
            blank = true;
        } else if (*p == ' ' || *p == '\t') {
            if (!blank)
                out[o++] = ' ';
            blank = true;
        } else {
            out[o++] = *p;
            blank = false;
        }
    }
    while (o && (out[o - 1] == ' ' || out[o - 1] == ';'))
        o--;
    out[o] = '\0';
}

int vc_userns_initial(const char *proc, char *why, size_t whylen)
{
    _cleanup_close_ int procfd = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (procfd < 0) {
        int e = errno;
        errbuf_printf(why, whylen, "%s: %s", proc, strerror(e));
        return -e;
    }
    struct statfs sfs;
    struct stat st;
    if (fstatfs(procfd, &sfs) < 0 || sfs.f_type != VC_PROC_SUPER_MAGIC || fstat(procfd, &st) < 0 ||
        st.st_ino != VC_PROC_ROOT_INO) {
        errbuf_printf(why, whylen, "%s is not the root of a procfs mount", proc);
        return -EPERM;
    }

    /* The uid map. */
    bool strict;
    int fd = open_proc_file(procfd, "self/uid_map", O_RDONLY, &strict);
    if (fd == -ENOENT && strict)
        return 0; /* a kernel without user namespaces: the initial one is the only one */
    if (fd < 0) {
        errbuf_printf(why, whylen, "%s/self/uid_map: %s", proc,
                      fd == -EXDEV ? "a mount over procfs's file" : strerror(-fd));
        return fd == -EXDEV ? -EPERM : fd;
    }
    char map[512];
    ssize_t n = read(fd, map, sizeof(map) - 1);
    close(fd);
    if (n < 0) {
        int e = errno;
        errbuf_printf(why, whylen, "%s/self/uid_map: %s", proc, strerror(e));
        return -e;
    }
    map[n] = '\0';
    if (!identity_map(map)) {
        char shown[160];
        squeeze(map, shown, sizeof(shown));
        errbuf_printf(why, whylen,
                      "this process runs in a user namespace other than the initial one (uid_map "
                      "\"%s\")",
                      shown);
        return -EPERM;
    }

    /* The namespace itself: an identity map only says that whoever made it held CAP_SETUID in
     * the initial namespace (a root tenant with the default capabilities can). */
    fd = open_proc_file(procfd, "self/ns/user", O_PATH | O_NOFOLLOW, &strict);
    if (fd < 0) {
        errbuf_printf(why, whylen, "%s/self/ns/user: %s", proc,
                      fd == -EXDEV ? "a mount over procfs's file" : strerror(-fd));
        return fd == -EXDEV || fd == -ENOENT ? -EPERM : fd;
    }
    char link[64];
    n = readlinkat(fd, "", link, sizeof(link) - 1);
    int e = errno;
    close(fd);
    if (n < 0) {
        errbuf_printf(why, whylen, "%s/self/ns/user: %s", proc, strerror(e));
        return -e;
    }
    link[n] = '\0';
    char want[32];
    snprintf(want, sizeof(want), "user:[%" PRIu32 "]", (uint32_t)VC_USERNS_INIT_INO);
    if (strcmp(link, want) != 0) {
        errbuf_printf(why, whylen,
                      "this process runs in a user namespace other than the initial one (%s, "
                      "with an identity uid_map)",
                      link);
        return -EPERM;
    }
    return 0;
}
