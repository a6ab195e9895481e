/* glibc-compat.c — the stat family inside libvcuda, so that it imports no stat symbol.
 *
 * glibc 2.33 made fstat64, stat64, lstat64 and fstatat64 real symbols (@GLIBC_2.33); before,
 * the headers turned each call into __fxstat64 and friends, so a library built on glibc 2.33+
 * does not load where glibc is older (glibc-compat.h has the why). They are defined here,
 * hidden (the version script exports none of them), as the system calls they are; every
 * object linked into libvcuda (src/common's included) binds to these. The kernel's struct stat
 * is glibc's struct stat64 on the 64-bit targets this builds for. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if !defined(__LP64__)
#error "glibc-compat.c assumes a 64-bit target (kernel struct stat == glibc struct stat64)"
#endif

int fstat64(int fd, struct stat64 *st)
{
    return (int)syscall(SYS_fstat, fd, st);
}

int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
    return (int)syscall(SYS_newfstatat, dirfd, path, st, flags);
}

int stat64(const char *path, struct stat64 *st)
{
    return fstatat64(AT_FDCWD, path, st, 0);
}

int lstat64(const char *path, struct stat64 *st)
{
    return fstatat64(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}
