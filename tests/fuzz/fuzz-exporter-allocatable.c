/* fuzz-exporter-allocatable.c — libFuzzer target for src/exporter/cost.c's two decoders of
 * outside data: the kubelet's GetAllocatableResources answer (protobuf from the kubelet's
 * socket), which gives the replicas per GPU that cost per job divides by, and acceld's
 * <stateDir>/vgpu/status.json (the vGPU assignments); each input goes to both. Checks: 0 or
 * -EPROTO / -EINVAL only; a refused answer keeps the last good replicas (a known pair still
 * counts 2); and a round plus a render over anything decoded stay within their buffers
 * (ASan). */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "podresources.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool fam(void *ctx, const char *name, const char *type, const char *help)
{
    return true;
}

struct text {
    char buf[16384];
    size_t len;
};

static void print(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void print(void *ctx, const char *fmt, ...)
{
    struct text *t = ctx;
    va_list ap;
    va_start(ap, fmt);
    if (t->len < sizeof(t->buf) - 1) {
        int n = vsnprintf(t->buf + t->len, sizeof(t->buf) - t->len, fmt, ap);
        t->len = n < 0 ? t->len : t->len + (size_t)n;
        if (t->len >= sizeof(t->buf))
            t->len = sizeof(t->buf) - 1;
    }
    va_end(ap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct exporter_config cfg;
    static struct gpu_nvml nvml;
    struct exporter_cost *c;
    static struct podres pr;
    char *ids[] = {"GPU-k::0", "GPU-k::1"};
    V1__ContainerDevices d = V1__CONTAINER_DEVICES__INIT, *dp = &d;
    V1__AllocatableResourcesResponse known = V1__ALLOCATABLE_RESOURCES_RESPONSE__INIT;
    uint8_t buf[256];

    if (size > 65536)
        return 0;
    exporter_config_defaults(&cfg);
    if (exporter_cost_new(&cfg, 1, &c) < 0)
        return 0;
    d.resource_name = "r";
    d.n_device_ids = 2;
    d.device_ids = ids;
    known.n_devices = 1;
    known.devices = &dp;
    if (exporter_cost_parse_allocatable(c, buf,
                                        v1__allocatable_resources_response__pack(&known, buf)) != 0)
        abort();
    /* one container holding one replica of GPU-k */
    memset(&pr, 0, sizeof(pr));
    strcpy(pr.e[0].gpu_uuid, "GPU-k");
    strcpy(pr.e[0].resource, "r");
    pr.e[0].ids = 1;
    pr.e[0].replica = 1;
    pr.n = 1;
    int r = exporter_cost_parse_allocatable(c, data, size);
    if (r != 0 && r != -EPROTO)
        abort();
    int v = exporter_cost_parse_vgpu(c, (const char *)data, size);
    if (v != 0 && v != -EINVAL)
        abort();
    struct exporter_cost_gpu g = {"GPU-k", NULL, true, 0, 0, NULL, NULL};
    static struct text t;
    t.len = 0;
    t.buf[0] = '\0';
    struct exporter_sli_out o = {fam, print, &t};
    exporter_cost_round(c, &nvml, &g, 1, &pr, 1000000000ull);
    exporter_cost_round(c, &nvml, &g, 1, &pr, 3000000000ull);
    exporter_cost_render(c, &o);
    /* refused: the known answer still holds (a share of 1/2 for 2 s is 1 GPU-second) */
    if (r < 0 && !strstr(t.buf, "resource=\"r\",share=\"0.5\"} 1\n"))
        abort();
    exporter_cost_free(c);
    return 0;
}
