/* test-userns.c — vc_userns_initial (src/vcuda/userns.c): the initial user namespace is told
 * apart from every namespace a tenant can make, whatever it mounts over /proc (issue 22, F5b).
 *
 * Each case runs vc_userns_initial in a child that first puts itself where a tenant would:
 * a user namespace of its own (mapping only its own uid, as an unprivileged process can), one
 * with the identity map (as a tenant holding CAP_SETUID in the initial namespace can have
 * written for it), and either with a file of its own bind-mounted over /proc/<pid>/uid_map. */
#define _GNU_SOURCE
#include "tap.h"
#include "userns.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum how {
    OWN_UID,        /* "0 <euid> 1", written by the child itself */
    IDENTITY,       /* "0 0 4294967295", written by the (root) parent */
    OWN_UID_MOUNT,  /* OWN_UID, then a file with the identity map mounted over the real one */
    IDENTITY_MOUNT, /* IDENTITY, and the same mount */
};

/* A kernel (or a container's seccomp profile) without openat2: it answers ENOSYS, so
 * vc_userns_initial takes its fallback. */
static int deny_openat2(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 437 /* openat2 */, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) < 0)
        _exit(90);
}

/* Runs vc_userns_initial in a child placed as how says. Returns its result (or 77 when this
 * machine cannot make the namespace) and its message in why. */
static int in_namespace(enum how how, bool no_openat2, char *why, size_t whylen)
{
    int go[2], ready[2], out[2];
    REQUIRE(pipe(go) == 0 && pipe(ready) == 0 && pipe(out) == 0);
    uid_t uid = geteuid();
    pid_t kid = fork();
    REQUIRE(kid >= 0);
    if (kid == 0) {
        close(go[1]);
        close(ready[0]);
        close(out[0]);
        bool mounts = how == OWN_UID_MOUNT || how == IDENTITY_MOUNT;
        char ok = unshare(CLONE_NEWUSER | (mounts ? CLONE_NEWNS : 0)) == 0 ? 1 : 0;
        if (write(ready[1], &ok, 1) != 1 || !ok)
            _exit(77);
        if (read(go[0], &ok, 1) != 1)
            _exit(91);
        if (how == OWN_UID || how == OWN_UID_MOUNT) {
            char map[64];
            snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)uid);
            write_file("/proc/self/uid_map", map);
        }
        if (mounts) {
            char fake[512], target[64];
            snprintf(fake, sizeof(fake), "%s/fake-uid-map-%d", tap_tmpdir(), (int)getpid());
            write_file(fake, "         0          0 4294967295\n");
            snprintf(target, sizeof(target), "/proc/%d/uid_map", (int)getpid());
            if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                mount(fake, target, NULL, MS_BIND, NULL) < 0)
                _exit(92);
        }
        if (no_openat2 && deny_openat2() < 0)
            _exit(94);
        char w[512] = "";
        int r = vc_userns_initial("/proc", w, sizeof(w));
        if (write(out[1], w, strlen(w)) < 0)
            _exit(93);
        _exit(r == 0 ? 0 : r == -EPERM ? 1 : 2);
    }
    close(go[0]);
    close(ready[1]);
    close(out[1]);
    char ok = 0;
    if (read(ready[0], &ok, 1) != 1)
        ok = 0;
    if (ok && (how == IDENTITY || how == IDENTITY_MOUNT)) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)kid);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        CHECK(write(fd, "0 0 4294967295\n", 15) == 15);
        close(fd);
    }
    CHECK(write(go[1], &ok, 1) == 1);
    close(go[1]);
    ssize_t n = read(out[0], why, whylen - 1);
    why[n > 0 ? n : 0] = '\0';
    close(out[0]);
    close(ready[0]);
    int status;
    REQUIRE(waitpid(kid, &status, 0) == kid);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static bool in_initial_namespace(void)
{
    char link[64];
    ssize_t n = readlink("/proc/self/ns/user", link, sizeof(link) - 1);
    if (n < 0)
        return false;
    link[n] = '\0';
    return strcmp(link, "user:[4026531837]") == 0;
}

TEST(the_initial_namespace_is_recognised)
{
    char why[512] = "";
    int r = vc_userns_initial("/proc", why, sizeof(why));
    if (!in_initial_namespace()) {
        CHECK_EQ_INT(r, -EPERM);
        tap_skip_case("this test runs in a user namespace of its own");
    }
    CHECK_EQ_INT(r, 0);
    if (r)
        tap_diag("%s", why);
}

TEST(a_namespace_mapping_only_its_own_uid_is_refused)
{
    char why[512];
    int r = in_namespace(OWN_UID, false, why, sizeof(why));
    if (r == 77)
        tap_skip_case("unprivileged user namespaces are not allowed here");
    CHECK_EQ_INT(r, 1);
    CHECK(strstr(why, "user namespace other than the initial one (uid_map \"0 ") != NULL);
    tap_diag("%s", why);
}

TEST(an_identity_mapped_namespace_is_refused)
{
    if (geteuid() != 0)
        tap_skip_case("needs root to write an identity map");
    char why[512];
    int r = in_namespace(IDENTITY, false, why, sizeof(why));
    if (r == 77)
        tap_skip_case("user namespaces are not allowed here");
    CHECK_EQ_INT(r, 1);
    CHECK(strstr(why, "with an identity uid_map") != NULL);
    tap_diag("%s", why);
}

TEST(a_file_mounted_over_uid_map_is_refused)
{
    char why[512];
    /* with openat2 (the mount is not crossed) and without (the file is not procfs's) */
    for (int no_openat2 = 0; no_openat2 < 2; no_openat2++) {
        int r = in_namespace(OWN_UID_MOUNT, no_openat2, why, sizeof(why));
        if (r == 77)
            tap_skip_case("unprivileged user namespaces are not allowed here");
        CHECK_EQ_INT(r, 1);
        CHECK(strstr(why, "a mount over procfs's file") != NULL);
        tap_diag("%s", why);
        if (geteuid() == 0) {
            r = in_namespace(IDENTITY_MOUNT, no_openat2, why, sizeof(why));
            CHECK_EQ_INT(r, 1);
            CHECK(strstr(why, "a mount over procfs's file") != NULL);
        }
    }
    /* the fallback alone still tells the namespaces apart */
    CHECK_EQ_INT(in_namespace(OWN_UID, true, why, sizeof(why)), 1);
    CHECK(strstr(why, "(uid_map \"0 ") != NULL);
}

TEST(a_directory_that_is_not_procfs_is_refused)
{
    char why[512];
    CHECK_EQ_INT(vc_userns_initial(tap_tmpdir(), why, sizeof(why)), -EPERM);
    CHECK(strstr(why, "is not the root of a procfs mount") != NULL);
    /* a procfs directory that is not its root */
    CHECK_EQ_INT(vc_userns_initial("/proc/self", why, sizeof(why)), -EPERM);
    CHECK(vc_userns_initial("/nonexistent", why, sizeof(why)) < 0);
    CHECK(strstr(why, "/nonexistent") != NULL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
