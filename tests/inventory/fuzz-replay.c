/*
 * fuzz-replay — replays a fuzz target's seed corpus as a normal test in every build, so the
 * seeds (and any crash reproducer added to them) keep passing without libFuzzer.
 * Reads the corpus directory named by $FUZZ_CORPUS, else the working directory (meson runs
 * it in tests/fuzz/corpus/<target>/).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fs.h"
#include "tap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

TEST(replay_seed_corpus)
{
    const char *dir = getenv("FUZZ_CORPUS") ? getenv("FUZZ_CORPUS") : ".";
    struct dirent *e;
    int files = 0;
    DIR *d;

    d = opendir(dir);
    REQUIRE(d != NULL);
    while ((e = readdir(d))) {
        char path[4096];
        char *data = NULL;
        size_t len = 0;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (!CHECK(fs_read_all(path, 1 << 20, &data, &len) == 0))
            continue;
        LLVMFuzzerTestOneInput((const uint8_t *)data, len); /* a bug aborts the program */
        free(data);
        files++;
    }
    closedir(d);
    tap_diag("%d corpus files replayed from %s", files, dir);
    CHECK_GE_INT(files, 5);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
