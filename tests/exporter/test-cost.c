/* test-cost — cost per job in accel-exporter (src/exporter/cost.c) on its own: shares from
 * GetAllocatableResources, GPU-seconds per round, energy split by per-process utilization or
 * by allocation with the rest unattributed, a counter going back, the price table, and the
 * series table's reuse of slots an hour after their container left. NVML is a table of test
 * functions; the output goes through the same interface the exporter uses. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cost.h"
#include "podresources.pb-c.h"
#include "tap.h"

#define S 1000000000ull

/* ---- a fake NVML: the per-process samples the next call returns */
static nvmlProcessUtilizationSample_t util[8];
static unsigned nutil;

static nvmlReturn_t fake_util(nvmlDevice_t dev, nvmlProcessUtilizationSample_t *out,
                              unsigned *count, unsigned long long last)
{
    unsigned k = 0;
    for (unsigned i = 0; i < nutil; i++)
        if (util[i].timeStamp > last) {
            if (k == *count)
                return NVML_ERROR_INSUFFICIENT_SIZE;
            out[k++] = util[i];
        }
    *count = k;
    return k ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

/* ---- the output, into a string */
static char out[1 << 20];
static size_t outlen;

static bool fam(void *ctx, const char *name, const char *type, const char *help)
{
    if (outlen < sizeof out - 1)
        outlen += (size_t)snprintf(out + outlen, sizeof out - outlen, "# TYPE %s %s\n", name, type);
    return true;
}

static void print(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void print(void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (outlen < sizeof out - 1)
        outlen += (size_t)vsnprintf(out + outlen, sizeof out - outlen, fmt, ap);
    va_end(ap);
    if (outlen >= sizeof out)
        outlen = sizeof out - 1; /* cut (the test's series come first) */
}

/* The value of the series whose line starts with prefix (name{labels...), or NAN. */
static double value(const struct exporter_cost *c, const char *prefix)
{
    struct exporter_sli_out o = {fam, print, NULL};
    outlen = 0;
    out[0] = '\0';
    exporter_cost_render(c, &o);
    for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, strlen(prefix)) == 0) {
            const char *sp = strchr(l, '}');
            return sp ? strtod(sp + 2, NULL) : NAN;
        }
    return NAN;
}

static bool near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(b) > 1 ? fabs(b) : 1);
}

/* An AllocatableResourcesResponse: nvidia.com/gpu with 4 replicas of GPU-a and GPU-b whole. */
static void allocatable(struct exporter_cost *c)
{
    char *ids[] = {"GPU-a::0", "GPU-a::1", "GPU-a::2", "GPU-a::3", "GPU-b"};
    V1__ContainerDevices d = V1__CONTAINER_DEVICES__INIT, *dp = &d;
    V1__AllocatableResourcesResponse r = V1__ALLOCATABLE_RESOURCES_RESPONSE__INIT;
    uint8_t buf[512];
    d.resource_name = "nvidia.com/gpu";
    d.n_device_ids = 5;
    d.device_ids = ids;
    r.n_devices = 1;
    r.devices = &dp;
    size_t len = v1__allocatable_resources_response__pack(&r, buf);
    CHECK_EQ_INT(exporter_cost_parse_allocatable(c, buf, len), 0);
}

static struct podres pr;

static void holder(size_t k, const char *gpu, const char *pod, unsigned ids, unsigned replica)
{
    struct podres_entry *x = &pr.e[k];
    memset(x, 0, sizeof *x);
    snprintf(x->gpu_uuid, sizeof x->gpu_uuid, "%s", gpu);
    snprintf(x->namespace_, sizeof x->namespace_, "ns");
    snprintf(x->pod, sizeof x->pod, "%s", pod);
    snprintf(x->container, sizeof x->container, "main");
    snprintf(x->resource, sizeof x->resource, "nvidia.com/gpu");
    x->ids = ids;
    x->replica = replica;
    if (k >= pr.n)
        pr.n = k + 1;
}

static struct gpu_nvml nvml;
static struct exporter_config cfg;
static struct gpu_process procs[3] = {{101, 1}, {102, 1}, {103, 1}};
static const struct podres_entry *names[3];
static struct exporter_cost_gpu gpus[2];

static void setup(struct exporter_cost **c)
{
    memset(&nvml, 0, sizeof nvml);
    nvml.nvmlDeviceGetProcessUtilization = fake_util;
    exporter_config_defaults(&cfg);
    snprintf(cfg.cost_currency, sizeof cfg.cost_currency, "EUR");
    cfg.nprices = 1;
    snprintf(cfg.prices[0].resource, sizeof cfg.prices[0].resource, "nvidia.com/gpu");
    cfg.prices[0].per_hour = 3.6;
    memset(&pr, 0, sizeof pr);
    /* GPU-a: pod p1 holds one replica of 4, p2 two; GPU-b: p3 holds it whole */
    holder(0, "GPU-a", "p1", 1, 1);
    holder(1, "GPU-a", "p2", 2, 1);
    holder(2, "GPU-b", "p3", 1, 0);
    names[0] = &pr.e[0], names[1] = &pr.e[1], names[2] = NULL; /* pid 103: no container */
    nutil = 0;
    gpus[0] = (struct exporter_cost_gpu){"GPU-a", NULL, true, 0, 3, procs, names};
    gpus[1] = (struct exporter_cost_gpu){"GPU-b", NULL, true, 0, 0, procs, names};
    REQUIRE_EQ_INT(exporter_cost_new(&cfg, 2, c), 0);
}

#define A1                                                                                         \
    "accel_pod_gpu_allocated_seconds_total{gpu=\"0\",uuid=\"GPU-a\",namespace=\"ns\",pod=\"p1\""
#define A2                                                                                         \
    "accel_pod_gpu_allocated_seconds_total{gpu=\"0\",uuid=\"GPU-a\",namespace=\"ns\",pod=\"p2\""
#define A3                                                                                         \
    "accel_pod_gpu_allocated_seconds_total{gpu=\"1\",uuid=\"GPU-b\",namespace=\"ns\",pod=\"p3\""
#define E1 "accel_pod_gpu_energy_joules_total{gpu=\"0\",uuid=\"GPU-a\",namespace=\"ns\",pod=\"p1\""
#define E2 "accel_pod_gpu_energy_joules_total{gpu=\"0\",uuid=\"GPU-a\",namespace=\"ns\",pod=\"p2\""
#define U0 "accel_gpu_energy_unattributed_joules_total{gpu=\"0\""
#define C1 "accel_pod_gpu_cost_total{gpu=\"0\",uuid=\"GPU-a\",namespace=\"ns\",pod=\"p1\""

TEST(shares_need_the_allocatable_replicas)
{
    struct exporter_cost *c;
    setup(&c);
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 1 * S);
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 2 * S);
    CHECK(isnan(value(c, A1))); /* replicas unknown: not counted, not guessed */
    CHECK(near(value(c, A3), 1.0));
    allocatable(c);
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 4 * S);
    CHECK(near(value(c, A1 ",container=\"main\",resource=\"nvidia.com/gpu\",share=\"0.25\""), 0.5));
    CHECK(near(value(c, A2 ",container=\"main\",resource=\"nvidia.com/gpu\",share=\"0.5\""), 1.0));
    CHECK(near(value(c, A3 ",container=\"main\",resource=\"nvidia.com/gpu\",share=\"1\""), 3.0));
    /* the price: 3.6 a GPU-hour is 0.001 a GPU-second */
    CHECK(near(value(c, C1), 0.5 * 0.001));
    CHECK(strstr(out, "currency=\"EUR\"") != NULL);
    /* a bad answer keeps the last good replicas */
    CHECK_EQ_INT(exporter_cost_parse_allocatable(c, (const uint8_t *)"\xff\xff\xff", 3), -EPROTO);
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 5 * S);
    CHECK(near(value(c, A1), 0.75));
    c = exporter_cost_free(c);
}

TEST(energy_by_utilization_then_by_allocation)
{
    struct exporter_cost *c;
    setup(&c);
    allocatable(c);
    gpus[0].energy_mj = 1000000; /* 1000 J: the baseline */
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 1 * S);
    CHECK(near(value(c, U0), 0));
    /* p1's process 30%, p2's 10%, a host process 40%: 200 J split 3:1:4 */
    util[0] = (nvmlProcessUtilizationSample_t){101, 10, 30, 0, 0, 0};
    util[1] = (nvmlProcessUtilizationSample_t){102, 10, 10, 0, 0, 0};
    util[2] = (nvmlProcessUtilizationSample_t){103, 10, 40, 0, 0, 0};
    nutil = 3;
    gpus[0].energy_mj = 1200000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 2 * S);
    CHECK(near(value(c, E1), 75));
    CHECK(near(value(c, E2), 25));
    CHECK(near(value(c, U0), 100));
    /* no sample newer: the last weights still split the next second */
    gpus[0].energy_mj = 1280000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 3 * S);
    CHECK(near(value(c, E1), 105));
    /* over 2 s without a sample: nobody busy, by allocation (0.25 and 0.5; 0.25 unheld) */
    gpus[0].energy_mj = 1680000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 6 * S);
    CHECK(near(value(c, E1), 205));
    CHECK(near(value(c, E2), 35 + 200));
    CHECK(near(value(c, U0), 140 + 100));
    /* the counter goes back (driver reload): a new baseline, nothing attributed */
    gpus[0].energy_mj = 5000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 7 * S);
    CHECK(near(value(c, E1), 205));
    gpus[0].energy_mj = 405000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 8 * S);
    CHECK(near(value(c, E1), 305));
    /* no energy reading: nothing, and no baseline across the gap */
    gpus[0].energy_ok = false;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 9 * S);
    gpus[0].energy_ok = true;
    gpus[0].energy_mj = 805000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 10 * S);
    CHECK(near(value(c, E1), 305));
    c = exporter_cost_free(c);
}

TEST(an_ended_process_holds_no_energy)
{
    struct exporter_cost *c;
    setup(&c);
    allocatable(c);
    gpus[0].energy_mj = 1000000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 1 * S);
    /* p1's process 30%, a host process 10%: 100 J split 3:1 */
    util[0] = (nvmlProcessUtilizationSample_t){101, 10, 30, 0, 0, 0};
    util[1] = (nvmlProcessUtilizationSample_t){103, 10, 10, 0, 0, 0};
    nutil = 2;
    gpus[0].energy_mj = 1100000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 2 * S);
    CHECK(near(value(c, E1), 75));
    CHECK(near(value(c, U0), 25));
    /* the host process ended, nothing newer: p1's process, still running, takes it all */
    gpus[0].nprocs = 2;
    gpus[0].energy_mj = 1200000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 2 * S + S / 2);
    CHECK(near(value(c, E1), 175));
    CHECK(near(value(c, U0), 25));
    /* p1's process ended too (only p2's, idle, left), well within 2 s of the samples: nobody
     * busy, so by allocation: p1 0.25, p2 0.5, 0.25 unheld */
    gpus[0].procs = &procs[1], gpus[0].names = &names[1], gpus[0].nprocs = 1;
    gpus[0].energy_mj = 1300000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 3 * S);
    CHECK(near(value(c, E1), 200));
    CHECK(near(value(c, E2), 50));
    CHECK(near(value(c, U0), 50));
    /* a sample that comes in the round its process ends still counts for that round (its
     * period overlaps it): a process no longer listed is in no named container */
    util[0] = (nvmlProcessUtilizationSample_t){101, 20, 50, 0, 0, 0};
    nutil = 1;
    gpus[0].energy_mj = 1400000;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 4 * S);
    CHECK(near(value(c, E1), 200));
    CHECK(near(value(c, U0), 150));
    gpus[0].procs = procs, gpus[0].names = names;
    c = exporter_cost_free(c);
}

/* Unit IDs "GPU-a-<first>" .. "GPU-a-<first + n - 1>" into the pool, as a device entry. */
static char unit_pool[1024][16];
static char *unit_ids[1024];
static size_t unit_n;

static void units(V1__ContainerDevices *d, const char *resource, int first, int n)
{
    v1__container_devices__init(d);
    d->resource_name = (char *)resource;
    d->device_ids = &unit_ids[unit_n];
    d->n_device_ids = (size_t)n;
    for (int k = 0; k < n; k++, unit_n++) {
        snprintf(unit_pool[unit_n], sizeof unit_pool[unit_n], "GPU-a-%d", first + k);
        unit_ids[unit_n] = unit_pool[unit_n];
    }
}

/* GPU-a shared by vGPU containers: pod-resources lists each container's vcuda-core and
 * vcuda-memory unit IDs ("<uuid>-<k>", src/modes/vgpu.c), status.json the same containers
 * with their cores. Each container counts once on GPU-a, with cores / 100: the unit IDs are
 * no GPU of their own, memory units hold no share of the GPU's time or energy, and however
 * many there are they leave room for the holders of GPUs listed after them (p9, GPU-b). */
TEST(vgpu_containers_count_once_whatever_pod_resources_lists)
{
    struct exporter_cost *c;
    static struct podres list;
    setup(&c);
    allocatable(c);
    unit_n = 0;
    V1__ContainerDevices d[5], *dp[5];
    units(&d[0], "tencent.com/vcuda-core", 0, 30);
    units(&d[1], "tencent.com/vcuda-memory", 0, 4);
    units(&d[2], "tencent.com/vcuda-core", 30, 50);
    units(&d[3], "tencent.com/vcuda-memory", 4, 600); /* more than PODRES_MAX */
    static char *whole[] = {"GPU-b"};
    v1__container_devices__init(&d[4]);
    d[4].resource_name = "nvidia.com/gpu", d[4].device_ids = whole, d[4].n_device_ids = 1;
    for (int k = 0; k < 5; k++)
        dp[k] = &d[k];
    V1__ContainerResources ct[3], *ctp[3];
    V1__PodResources pod[3], *podp[3];
    const char *pods[3] = {"v1", "v2", "p9"};
    for (int k = 0; k < 3; k++) {
        v1__container_resources__init(&ct[k]);
        ct[k].name = "c", ct[k].devices = &dp[2 * k], ct[k].n_devices = k < 2 ? 2 : 1;
        ctp[k] = &ct[k];
        v1__pod_resources__init(&pod[k]);
        pod[k].namespace_ = k < 2 ? "vn" : "ns", pod[k].name = (char *)pods[k];
        pod[k].containers = &ctp[k], pod[k].n_containers = 1;
        podp[k] = &pod[k];
    }
    V1__ListPodResourcesResponse r = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
    r.pod_resources = podp, r.n_pod_resources = 3;
    static uint8_t msg[32768];
    size_t len = v1__list_pod_resources_response__get_packed_size(&r);
    REQUIRE(len <= sizeof msg);
    v1__list_pod_resources_response__pack(&r, msg);
    REQUIRE_EQ_INT(podres_parse(msg, len, &list), 0);
    static const char status[] =
        "{\"version\": 1, \"checkTime\": 0, \"gpus\": [], \"assignments\": ["
        "{\"namespace\": \"vn\", \"pod\": \"v1\", \"podUID\": \"u1\", \"container\": \"c\","
        " \"gpu\": \"GPU-a\", \"cores\": 30, \"memoryBytes\": 1, \"whole\": false,"
        " \"complete\": true},"
        "{\"namespace\": \"vn\", \"pod\": \"v2\", \"podUID\": \"u2\", \"container\": \"c\","
        " \"gpu\": \"GPU-a\", \"cores\": 50, \"memoryBytes\": 1, \"whole\": false,"
        " \"complete\": true}]}";
    REQUIRE_EQ_INT(exporter_cost_parse_vgpu(c, status, sizeof status - 1), 0);
    gpus[0].energy_mj = 1000000, gpus[0].nprocs = 0;
    exporter_cost_round(c, &nvml, gpus, 2, &list, 1 * S);
    gpus[0].energy_mj = 1100000;
    exporter_cost_round(c, &nvml, gpus, 2, &list, 2 * S);
    /* 0.3 + 0.5 held: 30 J and 50 J of 100, 20 J unheld */
    CHECK(near(value(c, "accel_pod_gpu_energy_joules_total{gpu=\"0\",uuid=\"GPU-a\","
                        "namespace=\"vn\",pod=\"v1\""),
               30));
    CHECK(near(value(c, "accel_pod_gpu_energy_joules_total{gpu=\"0\",uuid=\"GPU-a\","
                        "namespace=\"vn\",pod=\"v2\""),
               50));
    CHECK(near(value(c, U0), 20));
    CHECK(near(value(c, "accel_pod_gpu_allocated_seconds_total{gpu=\"0\",uuid=\"GPU-a\","
                        "namespace=\"vn\",pod=\"v1\",container=\"c\",resource=\"tencent.com/"
                        "vcuda-core\",share=\"0.3\""),
               0.3));
    CHECK(strstr(out, "vcuda-memory") == NULL);
    CHECK(near(value(c, "accel_pod_gpu_allocated_seconds_total{gpu=\"1\",uuid=\"GPU-b\","
                        "namespace=\"ns\",pod=\"p9\",container=\"c\",resource=\"nvidia.com/"
                        "gpu\",share=\"1\""),
               1.0));
    CHECK_EQ_INT(podres_holders(&list, "GPU-b", NULL), 1);
    gpus[0].nprocs = 3;
    c = exporter_cost_free(c);
}

TEST(series_stay_an_hour_then_their_slot_is_reused)
{
    struct exporter_cost *c;
    setup(&c);
    allocatable(c);
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 1 * S);
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 2 * S);
    double before = value(c, A3);
    CHECK(near(before, 1.0));
    /* p3 leaves: its counter stays as it was (no reset while the exporter runs) */
    pr.n = 2;
    exporter_cost_round(c, &nvml, gpus, 2, &pr, 10 * S);
    CHECK(near(value(c, A3), before));
    /* the table full of new containers an hour later: p3's slot is taken, nothing else */
    static struct podres many;
    for (size_t k = 0; k < PODRES_MAX; k++) {
        struct podres_entry *x = &many.e[k];
        snprintf(x->gpu_uuid, sizeof x->gpu_uuid, "GPU-%c", k % 2 ? 'a' : 'b');
        snprintf(x->namespace_, sizeof x->namespace_, "many");
        snprintf(x->pod, sizeof x->pod, "q%zu", k);
        snprintf(x->resource, sizeof x->resource, "nvidia.com/gpu");
        x->ids = 1;
        x->replica = 0;
    }
    many.n = PODRES_MAX;
    for (int r = 0; r < 3; r++)
        exporter_cost_round(c, &nvml, gpus, 2, &many, EXPORTER_COST_KEEP_NS + (20 + r) * S);
    CHECK(isnan(value(c, A3)));
    CHECK(!isnan(value(c, "accel_pod_gpu_allocated_seconds_total{gpu=\"1\",uuid=\"GPU-b\","
                          "namespace=\"many\",pod=\"q510\"")));
    c = exporter_cost_free(c);
}

TEST(vgpu_shares_from_acceld_status)
{
    struct exporter_cost *c;
    char dir[512], path[600];
    setup(&c);
    pr.n = 0;
    snprintf(dir, sizeof dir, "%s/state", tap_tmpdir());
    snprintf(path, sizeof path, "%s/vgpu", dir);
    REQUIRE_EQ_INT(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    REQUIRE_EQ_INT(mkdir(path, 0755) == 0 || errno == EEXIST, 1);
    strcat(path, "/status.json");
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    /* GPU-b: v1 holds 30 cores, v2 the whole GPU-a, v3 is not complete, v4 has no cores */
    fputs("{\"version\": 1, \"checkTime\": 0, \"gpus\": [], \"assignments\": ["
          "{\"namespace\": \"vn\", \"pod\": \"v1\", \"podUID\": \"u1\", \"container\": \"c\","
          " \"gpu\": \"GPU-b\", \"cores\": 30, \"memoryBytes\": 1, \"whole\": false,"
          " \"complete\": true},"
          "{\"namespace\": \"vn\", \"pod\": \"v2\", \"podUID\": \"u2\", \"container\": \"c\","
          " \"gpu\": \"GPU-a\", \"cores\": 0, \"memoryBytes\": 0, \"whole\": true,"
          " \"complete\": true},"
          "{\"namespace\": \"vn\", \"pod\": \"v3\", \"podUID\": \"u3\", \"container\": \"c\","
          " \"gpu\": \"GPU-b\", \"cores\": 50, \"memoryBytes\": 1, \"whole\": false,"
          " \"complete\": false},"
          "{\"namespace\": \"vn\", \"pod\": \"v4\", \"podUID\": \"u4\", \"container\": \"c\","
          " \"gpu\": \"GPU-b\", \"cores\": 0, \"memoryBytes\": 1, \"whole\": false,"
          " \"complete\": true}]}",
          f);
    fclose(f);
    CHECK_EQ_INT(exporter_cost_set_state_dir(c, dir), 0);
    exporter_cost_round(c, &nvml, gpus, 2, NULL, 1 * S); /* pod-resources down: vGPU still */
    exporter_cost_round(c, &nvml, gpus, 2, NULL, 3 * S);
    CHECK(near(value(c, "accel_pod_gpu_allocated_seconds_total{gpu=\"1\",uuid=\"GPU-b\","
                        "namespace=\"vn\",pod=\"v1\",container=\"c\",resource=\"tencent.com/"
                        "vcuda-core\",share=\"0.3\""),
               0.6));
    CHECK(near(value(c, "accel_pod_gpu_allocated_seconds_total{gpu=\"0\",uuid=\"GPU-a\","
                        "namespace=\"vn\",pod=\"v2\",container=\"c\",resource=\"tencent.com/"
                        "vcuda-core\",share=\"1\""),
               2.0));
    CHECK(strstr(out, "pod=\"v3\"") == NULL && strstr(out, "pod=\"v4\"") == NULL);
    /* a bad file keeps the assignments; the decoder refuses what is not status.json */
    CHECK_EQ_INT(exporter_cost_parse_vgpu(c, "{\"version\": 2, \"assignments\": []}", 33), -EINVAL);
    CHECK_EQ_INT(exporter_cost_parse_vgpu(c, "[", 1), -EINVAL);
    exporter_cost_round(c, &nvml, gpus, 2, NULL, 4 * S);
    CHECK(near(value(c, "accel_pod_gpu_allocated_seconds_total{gpu=\"1\",uuid=\"GPU-b\","
                        "namespace=\"vn\",pod=\"v1\""),
               0.9));
    c = exporter_cost_free(c);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
