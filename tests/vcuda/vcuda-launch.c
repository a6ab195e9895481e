/* vcuda-launch.c — see vcuda-launch.h. */
#define _GNU_SOURCE
#include "vcuda-launch.h"

#include "state.h"
#include "tap.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int vcuda_test_launch(char **argv, const char *quota, uint64_t gpu_bytes)
{
    const char *build = getenv("ACCEL_BUILD_ROOT");
    if (!build) {
        printf("1..0 # SKIP ACCEL_BUILD_ROOT is not set (run through meson test)\n");
        return 77;
    }
    const char *real = getenv("VCUDA_TEST_REAL");
    bool real_gpu = real && *real == '1';
    char dir[] = "/tmp/vcuda-emu-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char state[256], region[256], none[256], preload[8192], libpath[4096], asan[4096];
    snprintf(state, sizeof(state), "%s/emu-state", dir);
    snprintf(region, sizeof(region), "%s/region", dir);
    snprintf(none, sizeof(none), "%s/no-config", dir);
    if (!real_gpu) {
        struct emu_config cfg;
        emu_config_init(&cfg);
        cfg.gpus = 1;
        cfg.memory_bytes = gpu_bytes;
        int r = emu_state_create(state, &cfg);
        if (r < 0) {
            fprintf(stderr, "emu_state_create: %s\n", strerror(-r));
            return 1;
        }
        snprintf(libpath, sizeof(libpath), "%s/src/emu", build);
        setenv("LD_LIBRARY_PATH", libpath, 1);
    }
    if (tap_find_asan_runtime(asan, sizeof(asan)))
        snprintf(preload, sizeof(preload), "%s:%s/src/vcuda/libvcuda.so", asan, build);
    else
        snprintf(preload, sizeof(preload), "%s/src/vcuda/libvcuda.so", build);
    /* VCUDA_TEST_REAL=1 keeps a caller's emulated machine, so tests/gpu/vcuda-memory.sh can be
     * dry-run against accel-emu (docs/vcuda.md, "Real GPU"). */
    if (!real_gpu)
        setenv("ACCEL_EMU_STATE", state, 1);
    setenv("ACCEL_EMU_CTX_OVERHEAD", "4Mi", 1);
    setenv("VCUDA_CONTEXT_MEMORY", "4Mi", 1);
    setenv("VCUDA_MEMORY_LIMIT", quota, 1);
    setenv("VCUDA_REGION", region, 1);
    setenv("VCUDA_CONFIG", none, 1);
    setenv("VCUDA_TEST_DIR", dir, 1);
    setenv("VCUDA_TEST_CHILD", "1", 1);
    setenv("LD_PRELOAD", preload, 1);
    /* leak checks stay on; the children's own exit paths are what matter */
    pid_t kid = fork();
    if (kid == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int st, rc = -1;
    if (waitpid(kid, &st, 0) == kid)
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
