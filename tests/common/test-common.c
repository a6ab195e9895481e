/* Unit tests for src/common: size/duration parsing, atomic writes, mkdir -p, /proc start times. */
#include "evloop.h"
#include "flush.h"
#include "fs.h"
#include "log.h"
#include "proc.h"
#include "tap.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TEST(parse_size_units)
{
    uint64_t v = 0;
    CHECK_EQ_INT(parse_size("4096", &v), 0);
    CHECK_EQ_U64(v, 4096);
    CHECK_EQ_INT(parse_size("4Ki", &v), 0);
    CHECK_EQ_U64(v, 4096);
    CHECK_EQ_INT(parse_size("4GiB", &v), 0);
    CHECK_EQ_U64(v, 4ull << 30);
    CHECK_EQ_INT(parse_size("1G", &v), 0);
    CHECK_EQ_U64(v, 1000000000ull);
    CHECK_EQ_INT(parse_size("1.5Gi", &v), 0);
    CHECK_EQ_U64(v, 3ull << 29);
    CHECK_EQ_INT(parse_size("256Mi", &v), 0);
    CHECK_EQ_U64(v, 256ull << 20);
}

TEST(parse_size_rejects_junk_and_leaves_output)
{
    uint64_t v = 7;
    CHECK_EQ_INT(parse_size("", &v), -EINVAL);
    CHECK_EQ_INT(parse_size("-1", &v), -EINVAL);
    CHECK_EQ_INT(parse_size("12X", &v), -EINVAL);
    CHECK_EQ_INT(parse_size("1.", &v), -EINVAL);
    CHECK_EQ_INT(parse_size(" 1", &v), -EINVAL);
    CHECK_EQ_INT(parse_size("99999999999999999999", &v), -ERANGE);
    CHECK_EQ_INT(parse_size("17179869184Gi", &v), -ERANGE);
    CHECK_EQ_U64(v, 7);
}

TEST(parse_duration)
{
    uint64_t v = 0;
    CHECK_EQ_INT(parse_duration_ns("250ms", &v), 0);
    CHECK_EQ_U64(v, 250000000ull);
    CHECK_EQ_INT(parse_duration_ns("10", &v), 0);
    CHECK_EQ_U64(v, 10000000000ull);
    CHECK_EQ_INT(parse_duration_ns("5m", &v), 0);
    CHECK_EQ_U64(v, 300000000000ull);
    CHECK_EQ_INT(parse_duration_ns("0", &v), 0);
    CHECK_EQ_U64(v, 0);
    CHECK_EQ_INT(parse_duration_ns("5x", &v), -EINVAL);
}

TEST(parse_int_strict)
{
    int v = 3;
    CHECK_EQ_INT(parse_int("-12", &v), 0);
    CHECK_EQ_INT(v, -12);
    CHECK_EQ_INT(parse_int("12a", &v), -EINVAL);
    CHECK_EQ_INT(parse_int("99999999999", &v), -ERANGE);
    CHECK_EQ_INT(v, -12);
}

TEST(atomic_write_replaces_and_mkdir_p)
{
    char dir[512], path[600];
    snprintf(dir, sizeof(dir), "%s/a/b/c", tap_tmpdir());
    REQUIRE_EQ_INT(fs_mkdir_p(dir, 0755), 0);
    CHECK_EQ_INT(fs_mkdir_p(dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/state.json", dir);
    REQUIRE_EQ_INT(fs_write_atomic(path, "one", 3, 0600), 0);
    REQUIRE_EQ_INT(fs_write_atomic(path, "second", 6, 0644), 0);
    char *data = NULL;
    size_t len = 0;
    REQUIRE_EQ_INT(fs_read_all(path, 1024, &data, &len), 0);
    CHECK_EQ_STR(data, "second");
    CHECK_EQ_U64(len, 6);
    free(data);
    struct stat st;
    REQUIRE_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0644);
    CHECK_EQ_INT(fs_read_all(path, 3, &data, &len), -EFBIG);
}

TEST(atomic_write_failure_leaves_target)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/no/such/dir/file", tap_tmpdir());
    CHECK_EQ_INT(fs_write_atomic(path, "x", 1, 0600), -ENOENT);
}

TEST(replace_write_without_fsync)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/report.json", tap_tmpdir());
    REQUIRE_EQ_INT(fs_write_replace(path, "old", 3, 0600), 0);
    REQUIRE_EQ_INT(fs_write_replace(path, "newer", 5, 0640), 0);
    char *data = NULL;
    size_t len = 0;
    REQUIRE_EQ_INT(fs_read_all(path, 1024, &data, &len), 0);
    CHECK_EQ_STR(data, "newer");
    free(data);
    struct stat st;
    REQUIRE_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0640);
    snprintf(path, sizeof(path), "%s/no/such/dir/file", tap_tmpdir());
    CHECK_EQ_INT(fs_write_replace(path, "x", 1, 0600), -ENOENT);
}

/* The flusher's fdatasync completes on the loop (AIO, this kernel has it),
 * requests made while one is in flight are merged into one more; without a
 * loop, or for a bad fd, it is done in place and reports the error. */
TEST(flusher_async_and_in_place)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/journal", tap_tmpdir());
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    struct ev_loop *loop = NULL;
    REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
    struct fs_flusher *f = NULL;
    REQUIRE_EQ_INT(fs_flusher_new(loop, &f), 0);
    if (!fs_flusher_async(f)) {
        tap_diag("Linux AIO refused here: the in-place path only");
    } else {
        CHECK(fs_flusher_idle(f));
        REQUIRE_EQ_INT(fs_write_full(fd, "one\n", 4), 0);
        CHECK_EQ_INT(fs_flusher_sync(f, fd), 0);
        CHECK(!fs_flusher_idle(f));
        REQUIRE_EQ_INT(fs_write_full(fd, "two\n", 4), 0);
        CHECK_EQ_INT(fs_flusher_sync(f, fd), 0); /* in flight: merged */
        REQUIRE_EQ_INT(fs_write_full(fd, "three\n", 6), 0);
        CHECK_EQ_INT(fs_flusher_sync(f, fd), 0);
        for (int i = 0; i < 1000 && !fs_flusher_idle(f); i++)
            ev_loop_run_once(loop, 10);
        CHECK(fs_flusher_idle(f));
        CHECK_EQ_U64(fs_flusher_completed(f), 2); /* the first, then one for the other two */
        CHECK_EQ_INT(fs_flusher_sync(f, -1), -EBADF);
        CHECK(fs_flusher_idle(f));
    }
    f = fs_flusher_free(f);
    CHECK(f == NULL);
    REQUIRE_EQ_INT(fs_flusher_new(NULL, &f), 0);
    CHECK(!fs_flusher_async(f));
    CHECK_EQ_INT(fs_flusher_sync(f, fd), 0);
    CHECK_EQ_INT(fs_flusher_sync(f, -1), -EBADF);
    CHECK_EQ_INT(fs_flusher_sync(NULL, fd), 0);
    fs_flusher_free(f);
    ev_loop_free(loop);
    close(fd);
}

TEST(log_level_parse_names)
{
    enum log_level l = LOG_LEVEL_INFO;
    CHECK_EQ_INT(log_level_parse("debug", &l), 0);
    CHECK_EQ_INT(l, LOG_LEVEL_DEBUG);
    CHECK_EQ_INT(log_level_parse("WARN", &l), 0);
    CHECK_EQ_INT(l, LOG_LEVEL_WARN);
    CHECK_EQ_INT(log_level_parse("loud", &l), -EINVAL);
    CHECK_EQ_INT(l, LOG_LEVEL_WARN);
}

/* Fields 3..21 of a stat line, then starttime 4242 and what follows it. */
#define STAT_TAIL " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 999 7\n"

TEST(proc_parse_start_time_comm_with_spaces_and_parens)
{
    static const char *const lines[] = {
        "123 (sh)" STAT_TAIL,       /* plain */
        "123 (a b c)" STAT_TAIL,    /* spaces */
        "123 (x) 5 6 7)" STAT_TAIL, /* a comm that looks like more fields */
        "123 ()) ) ()" STAT_TAIL,   /* only parentheses and spaces */
        "123 ( )" STAT_TAIL,        /* a lone space */
    };
    for (size_t i = 0; i < ARRAY_SIZE(lines); i++) {
        uint64_t v = 0;
        CHECK_EQ_INT(proc_parse_start_time(lines[i], strlen(lines[i]), &v), 0);
        CHECK_EQ_U64(v, 4242);
    }
}

TEST(proc_parse_start_time_rejects_and_leaves_output)
{
    static const char *const bad[] = {
        "",
        "123 sh S 1 2 3",                                          /* no ')' */
        "123 (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18", /* too few fields */
        "123 (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 ",
        "123 (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 42", /* cut short */
        "123 (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4x2 9\n",
        "123 (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 -42 9\n",
        "123 (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99999999999999999999 9\n",
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        uint64_t v = 77;
        CHECK_EQ_INT(proc_parse_start_time(bad[i], strlen(bad[i]), &v), -EPROTO);
        CHECK_EQ_U64(v, 77);
    }
    /* the length bounds the parse: the same line cut before field 22 is rejected */
    const char *good = "1 (a)" STAT_TAIL;
    uint64_t v = 77;
    CHECK_EQ_INT(proc_parse_start_time(good, 20, &v), -EPROTO);
    CHECK_EQ_U64(v, 77);
}

TEST(proc_start_time_of_live_and_dead_processes)
{
    uint64_t me = 0, again = 0, child_start = 0, v = 77;
    REQUIRE(proc_start_time(getpid(), &me) == 0);
    CHECK(me > 0);
    /* the kernel's own comm with spaces and ')' must not move the answer */
    char old[17] = {0};
    REQUIRE(prctl(PR_GET_NAME, old) == 0);
    REQUIRE(prctl(PR_SET_NAME, ") 1 2 (3) 4 5") == 0);
    CHECK_EQ_INT(proc_start_time(getpid(), &again), 0);
    prctl(PR_SET_NAME, old);
    CHECK_EQ_U64(again, me);

    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        _exit(0);
    /* a zombie still has its stat: started no earlier than we did */
    CHECK_EQ_INT(proc_start_time(pid, &child_start), 0);
    CHECK_GE_U64(child_start, me);
    REQUIRE(waitpid(pid, NULL, 0) == pid);
    CHECK_EQ_INT(proc_start_time(pid, &v), -ENOENT);
    CHECK_EQ_U64(v, 77);
    CHECK_EQ_INT(proc_start_time(0, &v), -EINVAL);
    CHECK_EQ_INT(proc_start_time(-1, &v), -EINVAL);
    CHECK_EQ_U64(v, 77);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
