/* vcuda-lib.c — the check that libvcuda.so is on the node; see vcuda-lib.h. */
#include "vcuda-lib.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the message tells the operator to do, whatever went wrong. */
#define VCUDA_LIB_FIX                                                                              \
    "install it on the node (the Helm chart's init container copies it from the image, "           \
    "docs/deploy.md) or point vcudaLibrary (--vcuda-library) at it; GPUs in mode vgpu and "        \
    "DRA shared GPUs hand it to every container"

int vcuda_lib_check(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            snprintf(err, errlen, "libvcuda is missing at %s: " VCUDA_LIB_FIX, path);
        else
            snprintf(err, errlen, "cannot open libvcuda at %s: %s: " VCUDA_LIB_FIX, path,
                     strerror(e));
        return -e;
    }
    struct stat st;
    unsigned char magic[4];
    int r = 0;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot stat libvcuda at %s: %s", path, strerror(-r));
    } else if (!S_ISREG(st.st_mode)) {
        r = -ENOEXEC;
        snprintf(err, errlen, "libvcuda at %s is not a regular file: " VCUDA_LIB_FIX, path);
    } else if (pread(fd, magic, sizeof(magic), 0) != (ssize_t)sizeof(magic) ||
               memcmp(magic, "\177ELF", sizeof(magic)) != 0) {
        r = -ENOEXEC;
        snprintf(err, errlen,
                 "libvcuda at %s is not a shared library (no ELF header; an unfinished "
                 "copy?): " VCUDA_LIB_FIX,
                 path);
    }
    close(fd);
    return r;
}
