/* proc-util.c — accel-exporter's per-process utilization (src/exporter/podutil.c) on GPU 0 of
 * whatever NVML is loaded (the driver's, or accel-emu's with $ACCEL_NVML_LIBRARY): samples every
 * 200 ms for SECONDS, skipping the first second, and prints for each PID given its mean figure
 * ("pid P ratio R") and which NVML call answered. Used by tests/gpu/exporter-util.sh; libc and
 * libdl only, so it builds with gcc on a GPU machine.
 *
 *   proc-util SECONDS PID... */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nvml.h"
#include "podutil.h"

static unsigned long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000u;
}

int main(int argc, char **argv)
{
    static struct exporter_util u;
    struct gpu_nvml *n = NULL;
    char err[512];
    nvmlDevice_t dev;
    if (argc < 3) {
        fprintf(stderr, "usage: proc-util SECONDS PID...\n");
        return 2;
    }
    if (gpu_nvml_open(NULL, &n, err, sizeof err) < 0) {
        fprintf(stderr, "proc-util: %s\n", err);
        return 1;
    }
    if (n->nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS) {
        fprintf(stderr, "proc-util: no GPU 0\n");
        return 1;
    }
    printf("call %s\n", n->nvmlDeviceGetProcessesUtilizationInfo
                            ? "nvmlDeviceGetProcessesUtilizationInfo (or the old one on refusal)"
                            : "nvmlDeviceGetProcessUtilization");
    int rounds = atoi(argv[1]) * 5, npids = argc - 2, used = 0;
    double sum[64] = {0};
    if (npids > 64)
        npids = 64;
    for (int r = 0; r < rounds; r++) {
        int rc = exporter_util_sample(n, dev, &u, now_us(), 200000);
        if (rc < 0) {
            fprintf(stderr, "proc-util: round %d: error %d\n", r, rc);
            return 1;
        }
        if (r >= 5) {
            for (int i = 0; i < npids; i++)
                sum[i] += exporter_util_of(&u, (unsigned)atoi(argv[2 + i]));
            used++;
        }
        struct timespec ts = {0, 200000000L};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < npids; i++)
        printf("pid %s ratio %.3f\n", argv[2 + i], used ? sum[i] / used : 0.0);
    gpu_nvml_free(n);
    return 0;
}
