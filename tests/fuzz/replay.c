/* replay.c — runs a fuzz target's seed corpus as a normal test, in every
 * build (no libFuzzer needed): each file in the directories given is passed
 * to LLVMFuzzerTestOneInput once. Prints TAP, one case per file; a crash or a
 * sanitizer report fails the test. An empty corpus fails too (a missing
 * corpus would otherwise pass silently). Shared by every target in
 * tests/fuzz/meson.build. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_file(const char *path, int n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("not ok %d - %s (cannot open)\n", n, path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    size_t got = buf && len > 0 ? fread(buf, 1, (size_t)len, f) : 0;
    fclose(f);
    if (!buf || (long)got != len) {
        free(buf);
        printf("not ok %d - %s (cannot read)\n", n, path);
        return 1;
    }
    /* A copy of exactly the file's size, so ASan sees any overread. */
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    printf("ok %d - %s\n", n, strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    char **files = NULL;
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) {
            files = realloc(files, (n + 1) * sizeof(*files));
            files[n++] = strdup(argv[i]);
            continue;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            files = realloc(files, (n + 1) * sizeof(*files));
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            files[n] = malloc(len);
            snprintf(files[n++], len, "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
    }
    if (n == 0) {
        printf("1..1\nnot ok 1 - empty corpus\n");
        return 1;
    }
    qsort(files, n, sizeof(*files), cmp);
    printf("1..%zu\n", n);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        failed += replay_file(files[i], (int)i + 1);
        free(files[i]);
    }
    free(files);
    return failed ? 1 : 0;
}
