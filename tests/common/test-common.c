/* Unit tests for src/common: size/duration parsing, atomic writes, mkdir -p. */
#include "fs.h"
#include "log.h"
#include "tap.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

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

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
