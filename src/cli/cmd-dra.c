/* cmd-dra.c — `accelctl dra`: what acceld's DRA mode (docs/dra.md) has done on this node,
 * read from its state dir without asking anyone: the ResourceSlice it publishes (name, pool
 * generation, whether the API server is in step) and each device's health and taint, from
 * dra-status.json; the prepared claims from the checkpoint (dra-checkpoint.json), with what
 * each claim's containers get (the devices and, for a share, the memory and core limits of
 * its libvcuda config). --json prints both files' content as one object. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accelctl.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: accelctl dra [--state-dir DIR] [--json]\n"
               "  --state-dir DIR   acceld's stateDir (default /var/lib/accel)\n"
               "  --json            print {\"status\": ..., \"checkpoint\": ...} for scripts\n");
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* The libvcuda config of a shared claim: "memory_limit = N" and "core_limit = N". */
static void share_limits(const char *dir, const char *uid, char *out, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/claims/%s/config", dir, uid);
    FILE *f = fopen(path, "r");
    snprintf(out, len, "whole GPU");
    if (!f)
        return;
    char line[256];
    unsigned long long mem = 0, cores = 0;
    while (fgets(line, sizeof(line), f)) {
        sscanf(line, "memory_limit = %llu", &mem);
        sscanf(line, "core_limit = %llu", &cores);
    }
    fclose(f);
    snprintf(out, len, "share: %llu MiB, %llu%% of the cores", mem >> 20, cores);
}

int accelctl_cmd_dra(int argc, char **argv)
{
    const char *dir = "/var/lib/accel";
    bool as_json = false;
    int r = accelctl_state_options(argc, argv, usage, &dir, &as_json);
    if (r >= 0)
        return r;
    char path[4096];
    json_error_t jerr;
    snprintf(path, sizeof(path), "%s/dra-status.json", dir);
    json_t *status = json_load_file(path, 0, &jerr);
    if (!status) {
        fprintf(stderr,
                "accelctl dra: cannot read %s (is acceld running with --mode dra and "
                "--state-dir %s?): %s\n",
                path, dir, jerr.text);
        return ACCELCTL_EXIT_FAILURE;
    }
    snprintf(path, sizeof(path), "%s/dra-checkpoint.json", dir);
    json_t *ck = json_load_file(path, 0, &jerr); /* absent until the first prepare */
    if (as_json) {
        json_t *o = json_pack("{s:o,s:o}", "status", status, "checkpoint",
                              ck ? ck : json_pack("{s:i,s:[]}", "version", 1, "claims"));
        json_dumpf(o, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(o);
        return ACCELCTL_EXIT_OK;
    }
    json_t *err = json_object_get(status, "error");
    printf("driver %s on node %s\n", str(status, "driver"), str(status, "node"));
    printf("slice %s: pool generation %" JSON_INTEGER_FORMAT ", %s\n", str(status, "slice"),
           json_integer_value(json_object_get(status, "generation")),
           json_is_true(json_object_get(status, "synced")) ? "in step with the API server"
                                                           : "not in step with the API server");
    if (json_is_string(err))
        printf("  last error: %s\n", json_string_value(err));
    printf("\n%-8s %-42s %9s %-9s %-10s %s\n", "DEVICE", "UUID", "MEMORY", "SHARING", "HEALTH",
           "TAINT");
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(status, "devices"), i, d)
    {
        bool healthy = json_is_true(json_object_get(d, "healthy"));
        char taint[256];
        snprintf(taint, sizeof(taint), "%s (%s)", str(d, "taint")[0] ? str(d, "taint") : "none",
                 str(d, "reason"));
        printf("%-8s %-42s %6" JSON_INTEGER_FORMAT " MiB %-9s %-10s %s\n", str(d, "name"),
               str(d, "uuid"), json_integer_value(json_object_get(d, "memory")) >> 20,
               str(d, "sharing")[0]                         ? str(d, "sharing")
               : json_is_true(json_object_get(d, "shared")) ? "shared"
                                                            : "exclusive",
               healthy ? "Healthy" : "Unhealthy", healthy ? "-" : taint);
    }
    json_t *claims = json_object_get(ck, "claims");
    printf("\nprepared claims (%zu):\n", json_array_size(claims));
    json_array_foreach(claims, i, d)
    {
        char lim[128];
        json_t *mps = json_object_get(d, "mps");
        if (mps)
            snprintf(lim, sizeof(lim),
                     "MPS share: %" JSON_INTEGER_FORMAT " MiB, %" JSON_INTEGER_FORMAT
                     "%% of the cores (its own MPS daemon)",
                     json_integer_value(json_object_get(mps, "memory")) >> 20,
                     json_integer_value(json_object_get(mps, "cores")));
        else
            share_limits(dir, str(d, "uid"), lim, sizeof(lim));
        json_t *devs = json_object_get(d, "devices");
        printf("  %s: %s\n", str(d, "uid"), json_array_size(devs) ? lim : "no device of ours");
        size_t j;
        json_t *v;
        json_array_foreach(devs, j, v)
        {
            printf("    %s/%s -> %s\n", str(v, "pool"), str(v, "device"), str(v, "cdi"));
        }
        json_t *share = json_object_get(d, "share"), *pod;
        json_array_foreach(json_object_get(share, "pods"), j, pod)
        {
            printf("    for pod %s/%s (%s)\n", str(share, "namespace"), str(pod, "name"),
                   str(pod, "uid"));
        }
    }
    /* the host-side check of the shared claims' pods (issue 22): its last findings */
    json_t *hc = json_object_get(status, "hostCheck");
    if (hc) {
        json_t *recent = json_object_get(hc, "recentFindings");
        printf("\nhost-side check: every %" JSON_INTEGER_FORMAT " ms, overQuotaAction %s, %zu "
               "recent finding(s)\n",
               json_integer_value(json_object_get(hc, "checkIntervalMs")),
               str(hc, "overQuotaAction"), json_array_size(recent));
        json_array_foreach(recent, i, d)
        {
            printf("  %-13s %s/%s: %s\n", str(d, "kind"), str(d, "namespace"), str(d, "pod"),
                   str(d, "message"));
        }
    }
    json_decref(status);
    json_decref(ck);
    return ACCELCTL_EXIT_OK;
}
