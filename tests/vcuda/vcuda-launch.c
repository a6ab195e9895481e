/* vcuda-launch.c — see vcuda-launch.h. */
#define _GNU_SOURCE
#include "vcuda-launch.h"

#include "state.h"
#include "tap.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs /proc/self/exe with argv under the environment set so far; with out, its stdout is
 * captured there (NUL-terminated). Returns its exit status (128 + signal), or -1. */
static int run_self(char **argv, char *out, size_t outlen)
{
    int o[2] = {-1, -1};
    if (out && pipe(o) < 0)
        return -1;
    pid_t kid = fork();
    if (kid == 0) {
        if (out) {
            dup2(o[1], 1);
            close(o[0]);
            close(o[1]);
        }
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    if (out) {
        close(o[1]);
        size_t len = 0;
        ssize_t n;
        while (kid > 0 && len < outlen - 1 && (n = read(o[0], out + len, outlen - 1 - len)) > 0)
            len += (size_t)n;
        out[len] = '\0';
        close(o[0]);
    }
    int st, rc = -1;
    if (kid > 0 && waitpid(kid, &st, 0) == kid)
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return rc;
}

/* Sets up the machine and the environment in dir; then runs the program, its quota sized by a
 * probe when contexts > 0 (work + contexts × the probed cost), else quota as given. */
static int launch(char **argv, const char *quota, uint64_t work, unsigned contexts,
                  uint64_t gpu_bytes)
{
    const char *build = getenv("ACCEL_BUILD_ROOT");
    if (!build) {
        printf("1..0 # SKIP ACCEL_BUILD_ROOT is not set (run through meson test)\n");
        return 77;
    }
    const char *real = getenv("VCUDA_TEST_REAL");
    bool real_gpu = real && *real == '1';
    const char *model = getenv("VCUDA_TEST_EMU_MODEL");
    if (model && !*model)
        model = NULL;
    char dir[] = "/tmp/vcuda-emu-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char state[256], region[256], probe_region[256], none[256], preload[8192], libpath[4096],
        asan[4096];
    snprintf(state, sizeof(state), "%s/emu-state", dir);
    snprintf(region, sizeof(region), "%s/region", dir);
    snprintf(probe_region, sizeof(probe_region), "%s/region-probe", dir);
    snprintf(none, sizeof(none), "%s/no-config", dir);
    if (!real_gpu) {
        struct emu_config cfg;
        emu_config_init(&cfg);
        cfg.gpus = 1;
        cfg.model = model;
        cfg.memory_bytes = model ? 0 : gpu_bytes;
        int r = emu_state_create(state, &cfg);
        if (r < 0) {
            fprintf(stderr, "emu_state_create%s%s: %s\n", model ? " --model " : "",
                    model ? model : "", strerror(-r));
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
     * dry-run against accel-emu (docs/vcuda.md, "Real GPU"); there, and with a model, a
     * context costs what the driver (or the model) says. */
    if (!real_gpu)
        setenv("ACCEL_EMU_STATE", state, 1);
    if (!real_gpu && !model)
        setenv("ACCEL_EMU_CTX_OVERHEAD", "4Mi", 1);
    setenv("VCUDA_CONTEXT_MEMORY", "4Mi", 1);
    setenv("VCUDA_CONFIG", none, 1);
    setenv("VCUDA_TEST_DIR", dir, 1);
    setenv("VCUDA_TEST_CHILD", "1", 1);
    setenv("LD_PRELOAD", preload, 1);
    int rc = 1;
    char limit[32];
    if (contexts) {
        /* the probe: a region of its own, a quota no context reaches (libvcuda takes no
         * measured context cost above 16 GiB); total - free can only overstate the charge
         * (free is also capped by what the device has free) */
        char out[256] = "", *probe_argv[] = {argv[0], "--role", "ctx-cost", "", NULL};
        setenv("VCUDA_MEMORY_LIMIT", "16Gi", 1);
        setenv("VCUDA_REGION", probe_region, 1);
        int prc = run_self(probe_argv, out, sizeof(out));
        unsigned long long cost = 0;
        if (prc != 0 || sscanf(out, "ctx=%llu", &cost) != 1 || !cost) {
            printf("Bail out! the ctx-cost probe failed (exit %d): %s\n", prc, out);
            rc = 1;
            goto done;
        }
        snprintf(limit, sizeof(limit), "%llu", cost);
        setenv("VCUDA_TEST_CTX_COST", limit, 1);
        snprintf(limit, sizeof(limit), "%" PRIu64, work + contexts * (uint64_t)cost);
        quota = limit;
    }
    setenv("VCUDA_MEMORY_LIMIT", quota, 1);
    setenv("VCUDA_REGION", region, 1);
    /* leak checks stay on; the children's own exit paths are what matter */
    rc = run_self(argv, NULL, 0);
done:;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}

int vcuda_test_launch(char **argv, const char *quota, uint64_t gpu_bytes)
{
    return launch(argv, quota, 0, 0, gpu_bytes);
}

int vcuda_test_launch_sized(char **argv, uint64_t work, unsigned contexts, uint64_t gpu_bytes)
{
    return launch(argv, NULL, work, contexts, gpu_bytes);
}
