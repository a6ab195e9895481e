/* test-hostcheck-region.c — the host check's reader of a container's usage region
 * (src/hostcheck/hostcheck-region.c) against what a tenant can make of the file: every
 * truncation, garbage in each header field and in the slots, a symlink to a root-only file, a
 * hard link, a FIFO, a directory, and a file truncated and regrown in a loop by another
 * process while the reader reads it (a mapping of it would die of SIGBUS). The reader must
 * answer 0 or an error for each, never crash, and never touch what a link points to. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostcheck.h"
#include "tap.h"
#include "tenant-fs.h"

static char dir[300];

/* A fresh region directory holding a valid region written by libvcuda's own code, with a
 * process slot holding 5 MiB on device 0. Returns the directory's fd. */
static int region_dir(const char *name)
{
    snprintf(dir, sizeof(dir), "%s/%s", tap_tmpdir(), name);
    mkdir(dir, 0777);
    char path[400];
    snprintf(path, sizeof(path), "%s/usage", dir);
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(path, &r), 0);
    int slot = vc_region_claim_slot(&r, 4242, 0);
    REQUIRE(slot >= 0);
    vc_region_charge(&r, slot, 0, 5u << 20);
    vc_region_detach(&r);
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    return fd;
}

static unsigned char *file_bytes(void)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/usage", dir);
    unsigned char *b = malloc(VC_REGION_SIZE);
    REQUIRE(b != NULL);
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    REQUIRE(pread(fd, b, VC_REGION_SIZE, 0) == (ssize_t)VC_REGION_SIZE);
    close(fd);
    return b;
}

TEST(a_valid_region_reads_back)
{
    int dfd = region_dir("valid");
    struct hostcheck_region r = {0};
    REQUIRE_EQ_INT(hostcheck_region_read_at(dfd, &r), 0);
    CHECK_EQ_U64(vc_region_used(&r.view, 0), 5u << 20);
    struct vc_audit_proc p = {4242, 9u << 20};
    struct vc_audit_finding f;
    CHECK_EQ_INT(vc_region_audit(&r.view, 0, &p, 1, 1u << 20, &f, 1), 1);
    CHECK_EQ_U64(f.region_bytes, 5u << 20);
    hostcheck_region_free(&r);
    REQUIRE_EQ_INT(hostcheck_region_read(dir, &r), 0);
    hostcheck_region_free(&r);
    close(dfd);
}

TEST(every_truncation_is_refused)
{
    region_dir("trunc");
    unsigned char *b = file_bytes();
    size_t bad = 0;
    for (size_t len = 0; len < VC_REGION_SIZE; len += len < 8192 ? 1 : 509) {
        struct hostcheck_region r = {0};
        int e = hostcheck_region_parse(b, len, &r);
        bad += e == -EPROTO;
        if (e == 0)
            hostcheck_region_free(&r);
    }
    CHECK_EQ_U64(bad, 8192 + (VC_REGION_SIZE - 8192 + 508) / 509);
    free(b);
}

/* Each header word set to garbage in turn: refused, or read within bounds. */
TEST(garbage_in_each_header_word)
{
    region_dir("garbage");
    unsigned char *b = file_bytes();
    static const uint64_t vals[] = {0,    1,    0xffffffffull,     0xffffffffffffffffull,
                                    1025, 4096, VC_REGION_SIZE + 1};
    size_t accepted = 0, refused = 0;
    for (size_t off = 0; off < 64; off += 4)
        for (size_t v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
            unsigned char *m = malloc(VC_REGION_SIZE);
            REQUIRE(m != NULL);
            memcpy(m, b, VC_REGION_SIZE);
            uint32_t w = (uint32_t)vals[v];
            memcpy(m + off, &w, 4);
            struct hostcheck_region r = {0};
            int e = hostcheck_region_parse(m, VC_REGION_SIZE, &r);
            if (e == 0) {
                accepted++;
                (void)vc_region_used(&r.view, 0);
                hostcheck_region_free(&r);
            } else {
                refused++;
                CHECK(e == -EPROTO || e == -EAGAIN);
            }
            free(m);
        }
    CHECK(refused > 0 && accepted > 0); /* the reserved words are free; the layout's are not */
    /* slot_hwm past the slots */
    uint32_t hwm = VC_REGION_SLOTS + 1;
    memcpy(b + offsetof(struct vc_region_header, slot_hwm), &hwm, 4);
    struct hostcheck_region r = {0};
    CHECK_EQ_INT(hostcheck_region_parse(b, VC_REGION_SIZE, &r), -EPROTO);
    free(b);
}

/* Random slot contents (seeded): the sums saturate, the audit stays within its bounds. */
TEST(random_slots_are_only_numbers)
{
    region_dir("random");
    unsigned char *b = file_bytes();
    unsigned seed = 22;
    for (int round = 0; round < 20; round++) {
        for (size_t i = VC_REGION_HEADER_SIZE; i < VC_REGION_SIZE; i++)
            b[i] = (unsigned char)rand_r(&seed);
        uint32_t hwm = (uint32_t)rand_r(&seed) % (VC_REGION_SLOTS + 1);
        memcpy(b + offsetof(struct vc_region_header, slot_hwm), &hwm, 4);
        struct hostcheck_region r = {0};
        REQUIRE_EQ_INT(hostcheck_region_parse(b, VC_REGION_SIZE, &r), 0);
        for (unsigned d = 0; d < VC_REGION_DEVICES + 2; d++)
            (void)vc_region_used(&r.view, d);
        struct vc_audit_proc p[3] = {{1, 1}, {2, UINT64_MAX}, {0, 0}};
        struct vc_audit_finding f[3];
        int n = vc_region_audit(&r.view, 0, p, 3, 0, f, 3);
        CHECK(n >= 0 && n <= 3);
        hostcheck_region_free(&r);
    }
    free(b);
}

TEST(a_symlink_to_a_root_only_file_is_not_followed)
{
    int dfd = region_dir("symlink");
    char secret[400], path[400];
    snprintf(secret, sizeof(secret), "%s/secret", tap_tmpdir());
    int fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, "root only\n", 10) == 10);
    close(fd);
    snprintf(path, sizeof(path), "%s/usage", dir);
    unlink(path);
    REQUIRE(symlink(secret, path) == 0);
    struct hostcheck_region r = {0};
    CHECK_EQ_INT(hostcheck_region_read_at(dfd, &r), -ELOOP);
    /* a symlinked directory on the way is refused the same, by both walks */
    char sub[400];
    snprintf(sub, sizeof(sub), "%s/d", dir);
    REQUIRE(symlink(tap_tmpdir(), sub) == 0);
    CHECK(tenant_open(dfd, "d/secret", O_RDONLY, 0) < 0);
    CHECK(tenant_open(dfd, "d/secret", O_RDONLY, TENANT_FALLBACK) < 0);
    CHECK_EQ_INT(tenant_open(dfd, "usage", O_RDONLY, TENANT_FALLBACK), -ELOOP);
    CHECK_EQ_INT(tenant_open(dfd, "../secret", O_RDONLY, 0), -EINVAL);
    CHECK_EQ_INT(tenant_open(dfd, "/etc/passwd", O_RDONLY, 0), -EINVAL);
    CHECK_EQ_INT(tenant_open(dfd, "usage", O_RDWR | O_CREAT, 0), -EINVAL);
    struct stat st;
    REQUIRE(stat(secret, &st) == 0);
    CHECK_EQ_INT(st.st_size, 10);
    CHECK_EQ_INT(st.st_mode & 07777, 0600);
    close(dfd);
}

TEST(a_hard_link_a_fifo_and_a_directory_are_refused)
{
    int dfd = region_dir("links");
    char path[400], other[400];
    snprintf(path, sizeof(path), "%s/usage", dir);
    snprintf(other, sizeof(other), "%s/elsewhere", dir);
    REQUIRE(link(path, other) == 0);
    struct hostcheck_region r = {0};
    CHECK_EQ_INT(hostcheck_region_read_at(dfd, &r), -EMLINK);
    unlink(other);
    unlink(path);
    REQUIRE(mkfifo(path, 0666) == 0); /* opened O_NONBLOCK: never waits for a writer */
    CHECK_EQ_INT(hostcheck_region_read_at(dfd, &r), -EPROTO);
    unlink(path);
    REQUIRE(mkdir(path, 0777) == 0);
    CHECK_EQ_INT(hostcheck_region_read_at(dfd, &r), -EPROTO);
    rmdir(path);
    CHECK_EQ_INT(hostcheck_region_read_at(dfd, &r), -ENOENT);
    close(dfd);
}

/* Another process truncates the file to nothing and grows it back, in a loop (the issue's
 * attack); the reader keeps reading. Through a mapping, the first read of a page past the
 * end would be SIGBUS; through pread it is a short read. */
TEST(a_region_truncated_in_a_loop_never_faults)
{
    int dfd = region_dir("loop");
    unsigned char *b = file_bytes();
    char path[400];
    snprintf(path, sizeof(path), "%s/usage", dir);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        int fd = open(path, O_RDWR);
        for (;;) {
            if (ftruncate(fd, 0) < 0 || pwrite(fd, b, VC_REGION_SIZE, 0) < 0)
                _exit(1);
            if (ftruncate(fd, VC_REGION_HEADER_SIZE / 2) < 0)
                _exit(1);
        }
    }
    size_t ok = 0, refused = 0, other = 0;
    for (int i = 0; i < 20000; i++) {
        struct hostcheck_region r = {0};
        int e = hostcheck_region_read_at(dfd, &r);
        if (e == 0) {
            ok++;
            CHECK_EQ_U64(vc_region_used(&r.view, 0), 5u << 20);
            hostcheck_region_free(&r);
        } else if (e == -EPROTO || e == -EAGAIN) {
            refused++;
        } else {
            other++;
        }
    }
    kill(child, SIGKILL);
    int st;
    waitpid(child, &st, 0);
    tap_diag("20000 reads while truncated in a loop: %zu whole, %zu refused", ok, refused);
    CHECK_EQ_U64(ok + refused, 20000);
    CHECK_EQ_U64(other, 0);
    free(b);
    close(dfd);
}

TEST(remove_tree_never_follows_and_stops_at_mounts)
{
    char base[400], victim[400], p[500];
    snprintf(base, sizeof(base), "%s/tree", tap_tmpdir());
    snprintf(victim, sizeof(victim), "%s/victim", tap_tmpdir());
    mkdir(victim, 0755);
    snprintf(p, sizeof(p), "%s/keep", victim);
    close(open(p, O_WRONLY | O_CREAT, 0644));
    mkdir(base, 0755);
    snprintf(p, sizeof(p), "%s/region", base);
    mkdir(p, 0777);
    /* what a tenant leaves: nested directories, files, a symlink to a directory elsewhere */
    snprintf(p, sizeof(p), "%s/region/a", base);
    mkdir(p, 0777);
    snprintf(p, sizeof(p), "%s/region/a/b", base);
    mkdir(p, 0777);
    snprintf(p, sizeof(p), "%s/region/a/b/f", base);
    close(open(p, O_WRONLY | O_CREAT, 0644));
    snprintf(p, sizeof(p), "%s/region/link", base);
    REQUIRE(symlink(victim, p) == 0);
    snprintf(p, sizeof(p), "%s/region/a/link", base);
    REQUIRE(symlink(victim, p) == 0);
    int bfd = open(base, O_PATH | O_DIRECTORY);
    REQUIRE(bfd >= 0);
    CHECK_EQ_INT(tenant_remove_tree(bfd, "region", 8), 0);
    snprintf(p, sizeof(p), "%s/region", base);
    CHECK(access(p, F_OK) < 0 && errno == ENOENT);
    snprintf(p, sizeof(p), "%s/keep", victim);
    CHECK(access(p, F_OK) == 0);
    CHECK_EQ_INT(tenant_remove_tree(bfd, "region", 8), 0); /* gone already */
    /* deeper than allowed: -ELOOP, the rest removed */
    snprintf(p, sizeof(p), "%s/deep/1/2/3", base);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", p);
    REQUIRE(system(cmd) == 0);
    CHECK_EQ_INT(tenant_remove_tree(bfd, "deep", 1), -ELOOP);
    close(bfd);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
