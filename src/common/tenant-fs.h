/* tenant-fs.h — opening and removing what a tenant can write, from a root process, without
 * following anything the tenant made.
 *
 * A directory a container can write (a vGPU usage-region dir, an MPS pipe dir) is hostile
 * ground for acceld: any entry in it may be a symlink to a root-only file, a hard link, a
 * FIFO that blocks a reader, a directory where a file was, or change between two calls. So
 * acceld never names a path in such a directory: it opens a directory it created (a dir fd),
 * resolves what lies below it with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS [| RESOLVE_NO_XDEV]) — or, on a kernel without openat2 (before 5.6),
 * one component at a time with O_NOFOLLOW — never creates anything there, and checks what it
 * opened (fstat) before it reads. Removal walks dir fds and unlinkat()s entries, which removes
 * a symlink and never what it points to, and never crosses into another filesystem.
 *
 * libc only; any thread. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

/* tenant_open options */
#define TENANT_NO_XDEV 0x1u  /* refuse to cross a mount point below dirfd */
#define TENANT_FALLBACK 0x2u /* walk with O_NOFOLLOW even where openat2 exists (tests) */

/* Opens path (relative, '/'-separated, no "..", no empty or "." components) below dirfd with
 * flags (O_RDONLY, O_PATH, O_DIRECTORY, O_NONBLOCK ...; O_CREAT and O_TMPFILE are refused:
 * nothing is ever created under a tenant's directory). O_CLOEXEC and O_NOCTTY are added. A
 * symlink anywhere on the way is -ELOOP (or -ENOTDIR for one in a directory's place), a mount
 * crossed under TENANT_NO_XDEV -EXDEV. Returns the fd or -errno. */
int tenant_open(int dirfd, const char *path, int flags, unsigned opts);

/* Opens a regular file below dirfd for reading (O_RDONLY | O_NONBLOCK: a FIFO never blocks)
 * and checks it: a regular file (-EPROTO otherwise), one link only (-EMLINK: a hard link to a
 * file elsewhere), on dirfd's filesystem (-EXDEV), at most max_size bytes (-EFBIG; 0: any).
 * Returns the fd or -errno; *ret_size (optional) gets its size. */
int tenant_open_file(int dirfd, const char *path, off_t max_size, off_t *ret_size);

/* Reads len bytes at off with pread (never a mapping: a file the tenant truncates cannot
 * turn into SIGBUS). Returns the bytes read (fewer at the end of the file) or -errno. */
ssize_t tenant_pread(int fd, void *buf, size_t len, off_t off);

/* Removes name (a file, a symlink, or a directory tree of at most max_depth levels) below
 * dirfd: entries are unlinkat()ed through dir fds opened with O_NOFOLLOW, so a symlink is
 * removed and never followed; a directory on another filesystem (a mount point) is left as
 * it is. Returns 0 (gone, or never there) or -errno of the first entry that could not be
 * removed (-EXDEV for a mount point, -ELOOP past max_depth). */
int tenant_remove_tree(int dirfd, const char *name, unsigned max_depth);

/* Whether this kernel has openat2 (decided once). */
bool tenant_have_openat2(void);

/* A directory acceld makes to hand to a container (a usage-region dir), bounded: a tmpfs of
 * its own mounted on it (TENANT_DIR_TMPFS_OPTS: 512 KiB and 32 inodes, no devices, setuid or
 * exec), so a tenant filling it fills only it — never acceld's state filesystem — and hard
 * links from elsewhere cannot be made into it. Made with its parents (0755) when missing.
 * *ret_how says what it is:
 *   TENANT_DIR_TMPFS  a tmpfs (just mounted, or one already: acceld restarted);
 *   TENANT_DIR_PLAIN  made now, but mount(2) was refused (no CAP_SYS_ADMIN, no tmpfs): a plain
 *                     directory, mode 0777 (errno says why);
 *   TENANT_DIR_KEPT   a plain directory that was there already (made by an earlier acceld,
 *                     maybe handed out: a tmpfs mounted on it now would hide the container's
 *                     files from acceld), left as it is but for its mode.
 * Returns 0 or -errno. */
enum tenant_dir_how { TENANT_DIR_TMPFS, TENANT_DIR_PLAIN, TENANT_DIR_KEPT };
#define TENANT_DIR_TMPFS_OPTS "size=512k,nr_inodes=32,mode=0777"
int tenant_dir_make(const char *path, enum tenant_dir_how *ret_how);
/* The same with the tmpfs's own mount options (mode included, e.g. an MPS daemon's /dev/shm:
 * "size=1g,mode=1777"), and mode the plain directory's mode where mount(2) is refused. */
int tenant_dir_make_opts(const char *path, const char *tmpfs_opts, mode_t mode,
                         enum tenant_dir_how *ret_how);

/* Removes a directory made by tenant_dir_make with everything the tenant left in it: its tmpfs
 * is unmounted (lazily: a container still holding it keeps its view until it exits), then
 * what is left below the path is removed with tenant_remove_tree. Returns 0 or -errno. */
int tenant_dir_remove(const char *path);
