/* replay-main.c — runs a libFuzzer target's LLVMFuzzerTestOneInput over
 * every file of the seed corpus dirs given as arguments, as an ordinary test
 * in every build (no clang needed). One TAP case per input; a crash or an
 * abort inside the target fails the test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path, int *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("not ok %d - %s (cannot open)\n", ++*n, path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return 1;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        if (got == 0)
            break;
        len += got;
    }
    fclose(f);
    /* an exact-size copy so ASan catches reads past the input */
    uint8_t *exact = malloc(len ? len : 1);
    if (len)
        memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    printf("ok %d - %s\n", ++*n, path);
    return 0;
}

int main(int argc, char **argv)
{
    int n = 0, failed = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) == 0 && !S_ISDIR(st.st_mode)) {
            failed |= run_file(argv[a], &n);
            continue;
        }
        struct dirent **ents = NULL;
        int m = scandir(argv[a], &ents, NULL, alphasort);
        if (m < 0) {
            printf("not ok %d - %s (cannot read corpus dir)\n", ++n, argv[a]);
            failed = 1;
            continue;
        }
        for (int i = 0; i < m; i++) {
            if (ents[i]->d_name[0] != '.') {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", argv[a], ents[i]->d_name);
                if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                    failed |= run_file(path, &n);
            }
            free(ents[i]);
        }
        free(ents);
    }
    printf("1..%d\n", n);
    return failed || n == 0;
}
