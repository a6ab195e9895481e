/* test-vcuda-lib.c — the check that libvcuda is on the node (src/agent/vcuda-lib.c): a
 * library passes; a missing path, a directory, a FIFO, an empty, short or non-ELF file fail
 * with the errno that says which and a message naming the path and the fix. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "vcuda-lib.h"

static void put(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f != NULL);
    REQUIRE(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static char err[1024];

static int check(const char *name, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", tap_tmpdir(), name);
    err[0] = '\0';
    return vcuda_lib_check(path, err, sizeof(err));
}

TEST(an_elf_file_passes)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/libvcuda.so", tap_tmpdir());
    static const unsigned char elf[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
    put(path, elf, sizeof(elf));
    CHECK_EQ_INT(check("libvcuda.so", path, sizeof(path)), 0);
}

TEST(a_missing_file_names_the_path_and_the_fix)
{
    char path[512];
    CHECK_EQ_INT(check("nowhere/libvcuda.so", path, sizeof(path)), -ENOENT);
    CHECK(strstr(err, "libvcuda is missing at ") != NULL);
    CHECK(strstr(err, path) != NULL);
    CHECK(strstr(err, "vcudaLibrary (--vcuda-library)") != NULL);
    CHECK(strstr(err, "docs/deploy.md") != NULL);
}

TEST(what_is_not_a_library_is_refused)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/dir.so", tap_tmpdir());
    REQUIRE(mkdir(path, 0755) == 0);
    CHECK_EQ_INT(check("dir.so", path, sizeof(path)), -ENOEXEC);
    CHECK(strstr(err, "not a regular file") != NULL && strstr(err, path) != NULL);

    /* a FIFO: no open that waits for a writer */
    snprintf(path, sizeof(path), "%s/fifo.so", tap_tmpdir());
    REQUIRE(mkfifo(path, 0644) == 0);
    CHECK_EQ_INT(check("fifo.so", path, sizeof(path)), -ENOEXEC);

    snprintf(path, sizeof(path), "%s/empty.so", tap_tmpdir());
    put(path, "", 0);
    CHECK_EQ_INT(check("empty.so", path, sizeof(path)), -ENOEXEC);
    CHECK(strstr(err, "not a shared library") != NULL && strstr(err, path) != NULL);

    snprintf(path, sizeof(path), "%s/short.so", tap_tmpdir());
    put(path, "\177EL", 3);
    CHECK_EQ_INT(check("short.so", path, sizeof(path)), -ENOEXEC);

    snprintf(path, sizeof(path), "%s/script.so", tap_tmpdir());
    put(path, "#!/bin/sh\n", 10);
    CHECK_EQ_INT(check("script.so", path, sizeof(path)), -ENOEXEC);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
