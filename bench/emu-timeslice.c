/* emu-timeslice.c — what a submit costs on the emulator's timeline when another process has
 * work pending on the GPU: each such submit deals the future out again in time slices
 * (emu_state_submit, docs/emulator-cuda.md "Time slicing between processes"), so its cost grows
 * with the slices ahead. One process queues a 2 s kernel; a forked child then submits N kernels
 * of D µs each beside it and reports the mean cost per submit, and the same alone on a fresh
 * GPU for comparison. Creates its own machine in a temporary directory.
 *
 *   build/bench/emu-timeslice [N] [D_us] */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "state.h"

static double per_submit_us(struct emu_state *st, unsigned gpu, int n, uint64_t d)
{
    uint64_t t0 = emu_state_now_ns();
    for (int i = 0; i < n; i++)
        emu_state_submit(st, gpu, 0, d, NULL, NULL);
    return (double)(emu_state_now_ns() - t0) / 1e3 / n;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    uint64_t d = (argc > 2 ? strtoull(argv[2], NULL, 10) : 2000) * 1000ull;
    if (n < 1 || !d) {
        fprintf(stderr, "usage: emu-timeslice [N] [D_us]\n");
        return 2;
    }
    char dir[] = "/tmp/emu-timeslice-XXXXXX", path[64];
    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/state", dir);
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 2;
    struct emu_state *st = NULL;
    if (emu_state_create(path, &cfg) < 0 || emu_state_open(path, &st) < 0) {
        fprintf(stderr, "cannot create %s\n", path);
        return 1;
    }
    /* GPU 0: our 2 s kernel, the child's beside it; GPU 1: the child alone */
    emu_state_submit(st, 0, 0, 2000000000ull, NULL, NULL);
    pid_t c = fork();
    if (c == 0) {
        double shared = per_submit_us(st, 0, n, d);
        uint64_t slices = emu_state_gpu(st, 0)->interval_count;
        double alone = per_submit_us(st, 1, n, d);
        printf("%d submits of %llu us: beside a 2 s kernel %.2f us each (%llu intervals), "
               "alone %.2f us each\n",
               n, (unsigned long long)(d / 1000), shared, (unsigned long long)slices, alone);
        fflush(stdout);
        emu_state_proc_release(st);
        _exit(0);
    }
    int status = 0;
    waitpid(c, &status, 0);
    emu_state_proc_release(st);
    emu_state_close(st);
    unlink(path);
    rmdir(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
