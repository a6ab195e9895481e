/* cmd-agent.c — `accelctl agent`: acceld as it last reported itself (<stateDir>/acceld-stats.json,
 * src/nodestate/acceld-stats.h, read with the exporter's own parser): whether it is alive (the
 * file's age: acceld writes it at least every 10 s), per resource whether it is ready (acceld
 * registers a resource with the kubelet only once its Allocates can be answered) and why not,
 * its registrations and Allocates, and per GPU its health. --json prints the file as it is. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acceld-stats.h"
#include "accelctl.h"
#include "fs.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: accelctl agent [--state-dir DIR] [--json]\n"
               "  Shows acceld as it last reported itself: alive or not, each resource ready\n"
               "  (registered with the kubelet) or why not, its registrations and Allocates,\n"
               "  and each GPU's health. --state-dir: acceld's stateDir (default\n"
               "  /var/lib/accel). --json: the SLI file as it is.\n");
}

/* Older than three heartbeats: acceld is not writing it. */
#define STALE_S (3 * ACCELD_STATS_HEARTBEAT_NS / 1000000000ull)

static void show(const struct acceld_stats *s, double now)
{
    double age = now - acceld_stats_reported(s);
    printf("acceld: %s (SLI file written %.0f s ago, started %.0f s ago)\n",
           age > (double)STALE_S ? "NOT REPORTING" : "up", age, now - s->start_time);
    printf("\n%-32s %-10s %9s %9s  %s\n", "RESOURCE", "READY", "REGISTER", "ALLOCATE",
           "WHY NOT READY");
    for (size_t i = 0; i < s->n_resources; i++) {
        const struct acceld_stats_resource *r = &s->res[i];
        char reg[32], alloc[32];
        snprintf(reg, sizeof(reg), "%llu/%llu", (unsigned long long)r->reg_ok,
                 (unsigned long long)(r->reg_ok + r->reg_failed));
        snprintf(alloc, sizeof(alloc), "%llu/%llu", (unsigned long long)r->alloc_ok,
                 (unsigned long long)(r->alloc_ok + r->alloc_error));
        printf("%-32s %-10s %9s %9s  %s\n", r->name,
               !r->has_ready ? "unknown"
               : r->ready    ? "yes"
                             : "no",
               reg, alloc, r->has_ready && !r->ready ? r->not_ready : "");
    }
    printf("\n%-4s %-42s %-9s %s\n", "IDX", "UUID", "HEALTH", "REASON");
    for (size_t i = 0; i < s->n_gpus; i++) {
        const struct acceld_stats_gpu *g = &s->gpus[i];
        printf("%-4u %-42s %-9s %s\n", g->index, g->uuid,
               !g->has_state ? "unknown"
               : g->healthy  ? "healthy"
                             : "unhealthy",
               g->has_state && !g->healthy ? g->reason : "");
    }
    printf("\nREGISTER and ALLOCATE: ok/all since acceld started. A resource that is not ready is "
           "not\nregistered with the kubelet yet (vGPU: its pods listed and its books settled "
           "with the\nkubelet; MPS: every control daemon answered).\n");
}

int accelctl_cmd_agent(int argc, char **argv)
{
    const char *dir = "/var/lib/accel";
    bool json = false;
    int r = accelctl_state_options(argc, argv, usage, &dir, &json);
    if (r >= 0)
        return r;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, ACCELD_STATS_FILE);
    if (json) {
        char *text;
        size_t len;
        r = fs_read_all(path, ACCELD_STATS_MAX_BYTES, &text, &len);
        if (r < 0) {
            fprintf(stderr,
                    "accelctl agent: cannot read %s: %s (is acceld running with "
                    "--state-dir %s?)\n",
                    path, strerror(-r), dir);
            return ACCELCTL_EXIT_FAILURE;
        }
        fwrite(text, 1, len, stdout);
        free(text);
        return ACCELCTL_EXIT_OK;
    }
    static struct acceld_stats s;
    char err[512];
    r = acceld_stats_read(path, &s, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr,
                "accelctl agent: cannot read %s: %s (is acceld running with --state-dir %s?)\n",
                path, r == -EINVAL ? err : strerror(-r), dir);
        return ACCELCTL_EXIT_FAILURE;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    show(&s, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    return ACCELCTL_EXIT_OK;
}
