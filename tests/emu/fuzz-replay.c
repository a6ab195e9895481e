/* fuzz-replay.c — replays a fuzz target's seed corpus as a normal test in every build: each
 * file of the directory given as argument goes through LLVMFuzzerTestOneInput once (a crash
 * or an abort fails the test). Prints TAP, one case per file. */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS-DIR\n", argv[0]);
        return 2;
    }
    struct dirent **ents;
    int n = scandir(argv[1], &ents, NULL, by_name);
    if (n < 0) {
        perror(argv[1]);
        return 1;
    }
    int files = 0;
    for (int i = 0; i < n; i++)
        files += ents[i]->d_name[0] != '.';
    printf("1..%d\n", files);
    int k = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        if (name[0] != '.') {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[1], name);
            FILE *f = fopen(path, "rb");
            uint8_t *buf = malloc(1 << 20);
            size_t len = f && buf ? fread(buf, 1, 1 << 20, f) : 0;
            bool ok = f && buf;
            if (ok) {
                /* an exact-size copy, so ASan sees any read past the input */
                uint8_t *exact = malloc(len ? len : 1);
                memcpy(exact, buf, len);
                LLVMFuzzerTestOneInput(exact, len);
                free(exact);
            }
            if (f)
                fclose(f);
            free(buf);
            printf("%s %d - %s\n", ok ? "ok" : "not ok", ++k, name);
            failed += !ok;
        }
        free(ents[i]);
    }
    free(ents);
    return failed ? 1 : 0;
}
