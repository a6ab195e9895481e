/* cmd-vgpu.c — `accelctl vgpu`: vGPU mode on this node as acceld last saw it
 * (<stateDir>/vgpu/status.json, written at start and after every host-side
 * check pass, src/modes/vgpu-status.h): per GPU the shares handed out, per
 * container its vcuda-core / vcuda-memory quota and its usage at the last
 * pass from libvcuda's region and from NVML side by side, and the pass's
 * findings. --json prints the file's object as it is. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "accelctl.h"

#define STATUS_MAX (64u << 20)

static void usage(FILE *f)
{
    fprintf(f, "usage: accelctl vgpu [--state-dir DIR] [--json]\n"
               "  Shows vGPU mode as acceld last saw it: per GPU the cores and memory units\n"
               "  handed out, per container its quota and its usage at the last host-side\n"
               "  check (region: what libvcuda counts; NVML: what the driver says), and the\n"
               "  check's findings. --state-dir: acceld's stateDir (default /var/lib/accel).\n"
               "  --json: the status file's object.\n");
}

/* bytes for people: "4.0 GiB", "512 MiB", "12 KiB", "100 B" */
static const char *human(json_int_t b, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0]))
        v /= 1024, u++;
    if (u == 0 || v >= 100 || v == (double)(long long)v)
        snprintf(buf, len, "%.0f %s", v, unit[u]);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
    return buf;
}

static json_int_t num(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "?";
}

static void show_assignment(json_t *a)
{
    char b1[32], b2[32], b3[32];
    printf("  %s/%s %s: ", str(a, "namespace"), str(a, "pod"), str(a, "container"));
    if (json_is_true(json_object_get(a, "whole"))) {
        printf("whole GPU (%lld cores), no libvcuda limits\n", (long long)num(a, "cores"));
        return;
    }
    printf("quota %lld cores, %s memory", (long long)num(a, "cores"),
           human(num(a, "memoryBytes"), b1, sizeof(b1)));
    if (!json_is_true(json_object_get(a, "complete"))) {
        printf("; waiting for its other resource's Allocate\n");
        return;
    }
    json_t *nv = json_object_get(a, "nvmlBytes"), *rg = json_object_get(a, "regionBytes");
    if (!nv) {
        printf("; usage: not checked yet\n");
        return;
    }
    printf("; usage: region %s, NVML %s (%lld process%s)\n",
           json_is_integer(rg) ? human(json_integer_value(rg), b2, sizeof(b2)) : "none",
           human(json_integer_value(nv), b3, sizeof(b3)), (long long)num(a, "nvmlProcesses"),
           num(a, "nvmlProcesses") == 1 ? "" : "es");
}

static void show(json_t *root)
{
    json_int_t when = num(root, "checkTime");
    printf("host-side check: ");
    if (when > 0) {
        char t[64];
        time_t tt = (time_t)when;
        struct tm tm;
        strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&tt, &tm));
        printf("last pass %s (%lld s ago)", t, (long long)(time(NULL) - when));
    } else {
        printf("no pass yet");
    }
    json_int_t ms = num(root, "checkIntervalMs");
    if (ms > 0)
        printf(", every %lld ms", (long long)ms);
    else
        printf(", off (vgpu.checkInterval 0)");
    printf(", over-quota action %s\n", str(root, "overQuotaAction"));

    json_t *gpus = json_object_get(root, "gpus"), *as = json_object_get(root, "assignments");
    size_t i, j;
    json_t *g, *a;
    json_array_foreach(gpus, i, g)
    {
        char b1[32], b2[32];
        json_int_t units = num(g, "memoryUnits"), used = num(g, "usedMemoryUnits");
        json_int_t unit = units ? num(g, "memoryBytes") / units : 0;
        printf("GPU %s (%s): cores %lld/%lld handed out, memory %lld/%lld units (%s of %s)\n",
               str(g, "uuid"),
               json_is_true(json_object_get(g, "healthy")) ? "healthy" : "UNHEALTHY",
               (long long)num(g, "usedCores"), (long long)num(g, "cores"), (long long)used,
               (long long)units, human(used * unit, b1, sizeof(b1)),
               human(num(g, "memoryBytes"), b2, sizeof(b2)));
        size_t k = 0;
        json_array_foreach(as, j, a)
        {
            if (strcmp(str(a, "gpu"), str(g, "uuid")) == 0) {
                show_assignment(a);
                k++;
            }
        }
        if (!k)
            printf("  (no shares handed out)\n");
    }
    json_t *fs = json_object_get(root, "findings"), *f;
    printf("findings at the last pass:%s\n", json_array_size(fs) ? "" : " none");
    json_array_foreach(fs, i, f)
    {
        printf("  %s %s/%s: %s\n", str(f, "kind"), str(f, "namespace"), str(f, "pod"),
               str(f, "message"));
    }
    fs = json_object_get(root, "recentFindings");
    if (!json_array_size(fs))
        return;
    printf("recent findings (newest first):\n");
    json_array_foreach(fs, i, f)
    {
        char t[64];
        time_t tt = (time_t)num(f, "time");
        struct tm tm;
        strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&tt, &tm));
        printf("  %s %s %s/%s: %s\n", t, str(f, "kind"), str(f, "namespace"), str(f, "pod"),
               str(f, "message"));
    }
}

int accelctl_cmd_vgpu(int argc, char **argv)
{
    const char *state = "/var/lib/accel";
    bool as_json = false;
    int r = accelctl_state_options(argc, argv, usage, &state, &as_json);
    if (r >= 0)
        return r;
    char path[4200];
    snprintf(path, sizeof(path), "%s/vgpu/status.json", state);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        fprintf(stderr,
                "accelctl vgpu: cannot read %s (%s): is acceld running in vgpu mode with "
                "stateDir %s?\n",
                path, je.text, state);
        return ACCELCTL_EXIT_FAILURE;
    }
    if (!json_is_object(root) || num(root, "version") != 1 ||
        !json_is_array(json_object_get(root, "gpus")) ||
        !json_is_array(json_object_get(root, "assignments"))) {
        fprintf(stderr, "accelctl vgpu: %s is not a version 1 vGPU status file\n", path);
        json_decref(root);
        return ACCELCTL_EXIT_FAILURE;
    }
    if (as_json) {
        json_dumpf(root, stdout, JSON_INDENT(2));
        putchar('\n');
    } else {
        show(root);
    }
    json_decref(root);
    fflush(stdout);
    return ACCELCTL_EXIT_OK;
}
