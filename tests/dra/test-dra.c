/* test-dra.c — src/dra without sockets: ResourceClaim parsing and its
 * rejections, Quantity parsing, the ResourceSlice renderer's shape, and an
 * MPS claim's CDI spec and checkpoint (with a stand-in MPS supervisor). */
#include "dra.h"
#include "tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(quantity_parses_whole_quantities)
{
    uint64_t v = 0;
    CHECK(dra_quantity_parse("4Gi", &v) == 0 && v == 4ull << 30);
    CHECK(dra_quantity_parse("300M", &v) == 0 && v == 300000000ull);
    CHECK(dra_quantity_parse("30", &v) == 0 && v == 30);
    CHECK(dra_quantity_parse("1.5Gi", &v) < 0);
    CHECK(dra_quantity_parse("500m", &v) < 0);
    CHECK(dra_quantity_parse("", &v) < 0);
    CHECK(dra_quantity_parse("-1", &v) < 0);
    CHECK(dra_quantity_parse("20Ei", &v) == -ERANGE);
}

static const char claim_json[] =
    "{\"kind\":\"ResourceClaim\",\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\","
    "\"uid\":\"u-1\"},\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"request\":\"gpu\","
    "\"driver\":\"gpu.accel.dev\",\"pool\":\"node-a\",\"device\":\"gpu-0\",\"shareID\":\"s1\","
    "\"consumedCapacity\":{\"memory\":\"4Gi\",\"cores\":\"30\"}}]}}}}";

TEST(claim_parses_results)
{
    struct dra_claim *c = NULL;
    char err[256] = "";
    REQUIRE(dra_claim_parse(claim_json, strlen(claim_json), &c, err, sizeof(err)) == 0);
    CHECK(strcmp(c->uid, "u-1") == 0 && c->n_results == 1);
    CHECK(strcmp(c->results[0].device, "gpu-0") == 0 && strcmp(c->results[0].share_id, "s1") == 0);
    CHECK(c->results[0].has_memory && c->results[0].memory == 4ull << 30);
    CHECK(c->results[0].has_cores && c->results[0].cores == 30);
    dra_claim_free(c);
}

/* status.reservedFor: the pods the host-side check maps processes to (issue 22, F10); other
 * consumers are skipped, a pod entry that names no pod is refused. */
TEST(claim_reserved_for_pods)
{
    static const char j[] =
        "{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"u\"},\"status\":{"
        "\"allocation\":{\"devices\":{\"results\":[]}},\"reservedFor\":["
        "{\"resource\":\"pods\",\"name\":\"p\",\"uid\":\"0b6c4a3e-7777\"},"
        "{\"apiGroup\":\"apps\",\"resource\":\"deployments\",\"name\":\"d\",\"uid\":\"x\"}]}}";
    struct dra_claim *c = NULL;
    char err[256] = "";
    REQUIRE_EQ_INT(dra_claim_parse(j, strlen(j), &c, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(c->n_pods, 1);
    CHECK_EQ_STR(c->pods[0].name, "p");
    CHECK_EQ_STR(c->pods[0].uid, "0b6c4a3e-7777");
    dra_claim_free(c);
    static const char bad[] =
        "{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"u\"},\"status\":{"
        "\"allocation\":{\"devices\":{\"results\":[]}},\"reservedFor\":["
        "{\"resource\":\"pods\",\"name\":\"../p\",\"uid\":\"u\"}]}}";
    c = NULL;
    CHECK_EQ_INT(dra_claim_parse(bad, strlen(bad), &c, err, sizeof(err)), -EINVAL);
    CHECK(c == NULL && strstr(err, "reservedFor") != NULL);
}

TEST(claim_rejections_say_why)
{
    static const struct {
        const char *json, *why;
    } bad[] = {
        {"{", "invalid JSON"},
        {"{\"kind\":\"Pod\"}", "not a ResourceClaim"},
        {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"u\"}}", "not allocated"},
        {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\"},\"status\":{}}", "missing uid"},
        {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"u\"},\"status\":{"
         "\"allocation\":{\"devices\":{\"results\":[{\"request\":\"r\",\"driver\":\"d\","
         "\"pool\":\"p\",\"device\":\"x\",\"consumedCapacity\":{\"cores\":\"130\"}}]}}}}",
         "not a percentage"},
        {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"u\"},\"status\":{"
         "\"allocation\":{\"devices\":{\"results\":[{\"request\":\"r\",\"driver\":\"d\","
         "\"pool\":\"p\",\"device\":\"x\",\"consumedCapacity\":{\"memory\":\"1.5Gi\"}}]}}}}",
         "not a whole quantity"},
        {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"u\"},\"status\":{"
         "\"allocation\":{\"devices\":{\"results\":[{\"driver\":\"d\"}]}}}}",
         "missing request"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct dra_claim *c = NULL;
        char err[256] = "";
        CHECK(dra_claim_parse(bad[i].json, strlen(bad[i].json), &c, err, sizeof(err)) == -EINVAL);
        CHECK(c == NULL);
        if (!strstr(err, bad[i].why))
            tap_fail(__FILE__, __LINE__, "case %zu: \"%s\" lacks \"%s\"", i, err, bad[i].why);
    }
}

TEST(slice_has_the_v1_shape)
{
    const struct dra_gpu g[] = {
        {.name = "gpu-0",
         .uuid = "GPU-a",
         .memory = 80ull << 30,
         .product = "H100",
         .architecture = "Hopper",
         .cc_major = 9,
         .cc_minor = 0,
         .driver_version = "550.54.15",
         .numa_node = 1,
         .pci_bus_id = "0000:3b:00.0",
         .mig_capable = true,
         .shared = true,
         .healthy = true},
        {.name = "gpu-1",
         .uuid = "GPU-b",
         .memory = 80ull << 30,
         .numa_node = -1,
         .healthy = false,
         .fatal = true},
    };
    char *s = NULL;
    REQUIRE(dra_slice_render("gpu.accel.dev", "node-a", "node-a-gpu.accel.dev", 3, g, 2, &s) == 0);
    json_t *root = json_loads(s, 0, NULL);
    free(s);
    REQUIRE(root);
    json_t *spec = json_object_get(root, "spec");
    CHECK(strcmp(json_string_value(json_object_get(root, "apiVersion")), "resource.k8s.io/v1") ==
          0);
    CHECK(json_integer_value(json_object_get(json_object_get(spec, "pool"), "generation")) == 3);
    json_t *d0 = json_array_get(json_object_get(spec, "devices"), 0);
    json_t *d1 = json_array_get(json_object_get(spec, "devices"), 1);
    json_t *a0 = json_object_get(d0, "attributes");
    CHECK(strcmp(json_string_value(
                     json_object_get(json_object_get(a0, "cudaComputeCapability"), "version")),
                 "9.0.0") == 0);
    CHECK(json_integer_value(json_object_get(json_object_get(a0, "numaNode"), "int")) == 1);
    CHECK(json_is_true(json_object_get(d0, "allowMultipleAllocations")));
    /* the attribute deploy/dra's DeviceClasses select on */
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(a0, "sharing"), "string")),
                 "vgpu");
    CHECK_EQ_STR(json_string_value(json_object_get(
                     json_object_get(json_object_get(d1, "attributes"), "sharing"), "string")),
                 "exclusive");
    json_t *mem = json_object_get(json_object_get(d0, "capacity"), "memory");
    CHECK(strcmp(json_string_value(json_object_get(mem, "value")), "85899345920") == 0);
    CHECK(json_object_get(json_object_get(mem, "requestPolicy"), "validRange") != NULL);
    CHECK(json_object_get(d0, "taints") == NULL);
    CHECK(json_object_get(json_object_get(d1, "attributes"), "numaNode") == NULL);
    CHECK(json_object_get(d1, "allowMultipleAllocations") == NULL);
    CHECK(json_object_get(json_object_get(json_object_get(d1, "capacity"), "memory"),
                          "requestPolicy") == NULL);
    json_t *t = json_array_get(json_object_get(d1, "taints"), 0);
    CHECK(strcmp(json_string_value(json_object_get(t, "effect")), "NoExecute") == 0);
    json_decref(root);
}

/* dra.taintEffect / dra.fatalTaintEffect: the effect is the configured one, "" none. */
TEST(slice_taint_effects_are_configurable)
{
    struct dra_gpu g[] = {
        {.name = "gpu-0", .uuid = "GPU-a", .numa_node = -1, .healthy = false, .taint_effect = ""},
        {.name = "gpu-1",
         .uuid = "GPU-b",
         .numa_node = -1,
         .healthy = false,
         .fatal = true,
         .fatal_taint_effect = "NoSchedule"},
        {.name = "gpu-2",
         .uuid = "GPU-c",
         .numa_node = -1,
         .healthy = false,
         .taint_effect = "NoExecute"},
        {.name = "gpu-3",
         .uuid = "GPU-d",
         .numa_node = -1,
         .healthy = true,
         .taint_effect = "NoExecute"},
    };
    CHECK(dra_gpu_taint_effect(&g[0]) == NULL);
    CHECK_EQ_STR(dra_gpu_taint_effect(&g[1]), "NoSchedule");
    CHECK_EQ_STR(dra_gpu_taint_effect(&g[2]), "NoExecute");
    CHECK(dra_gpu_taint_effect(&g[3]) == NULL);
    char *s = NULL;
    REQUIRE(dra_slice_render("gpu.accel.dev", "node-a", "node-a-gpu.accel.dev", 1, g, 4, &s) == 0);
    json_t *root = json_loads(s, 0, NULL);
    free(s);
    REQUIRE(root);
    json_t *devs = json_object_get(json_object_get(root, "spec"), "devices");
    CHECK(json_object_get(json_array_get(devs, 0), "taints") == NULL);
    json_t *t1 = json_array_get(json_object_get(json_array_get(devs, 1), "taints"), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(t1, "effect")), "NoSchedule");
    CHECK_EQ_STR(json_string_value(json_object_get(t1, "value")), "fatal-xid");
    json_t *t2 = json_array_get(json_object_get(json_array_get(devs, 2), "taints"), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(t2, "effect")), "NoExecute");
    CHECK_EQ_STR(json_string_value(json_object_get(t2, "value")), "unhealthy");
    CHECK(json_object_get(json_array_get(devs, 3), "taints") == NULL);
    json_decref(root);
}

TEST(slice_list_finds_ours_and_stale)
{
    static const char list[] =
        "{\"kind\":\"ResourceSliceList\",\"items\":["
        "{\"metadata\":{\"name\":\"node-a-old\",\"resourceVersion\":\"4\"},"
        "\"spec\":{\"driver\":\"gpu.accel.dev\",\"nodeName\":\"node-a\",\"pool\":{\"generation\":7}"
        "}},"
        "{\"metadata\":{\"name\":\"node-a-gpu.accel.dev\",\"resourceVersion\":\"9\"},"
        "\"spec\":{\"nodeName\":\"node-a\",\"driver\":\"gpu.accel.dev\",\"pool\":{\"generation\":3}"
        ","
        "\"devices\":[{\"name\":\"gpu-0\",\"taints\":[{\"key\":\"k\",\"effect\":\"NoSchedule\","
        "\"timeAdded\":\"2026-01-01T00:00:00Z\"}]}]}},"
        "{\"metadata\":{\"name\":\"node-b-gpu.accel.dev\",\"resourceVersion\":\"5\"},"
        "\"spec\":{\"driver\":\"gpu.accel.dev\",\"nodeName\":\"node-b\",\"pool\":{\"generation\":"
        "99}}},"
        "{\"metadata\":{\"name\":\"nic\",\"resourceVersion\":\"6\"},"
        "\"spec\":{\"driver\":\"nic.example.com\",\"nodeName\":\"node-a\"}}]}";
    struct dra_slice_list l;
    char err[256];
    REQUIRE(dra_slice_list_parse(list, sizeof(list) - 1, "gpu.accel.dev", "node-a",
                                 "node-a-gpu.accel.dev", true, &l, err, sizeof(err)) == 0);
    /* another node's and another driver's slices are not ours to touch */
    CHECK_EQ_INT(l.n_stale, 1);
    CHECK_EQ_STR(l.stale[0], "node-a-old");
    CHECK(l.have_ours);
    CHECK_EQ_STR(l.ours_rv, "9");
    CHECK_EQ_INT(l.ours_generation, 3);
    CHECK_EQ_INT(l.max_generation, 7);
    /* the server's timeAdded is not a difference; keys sorted */
    CHECK_EQ_STR(l.ours_spec, "{\"devices\":[{\"name\":\"gpu-0\",\"taints\":[{\"effect\":"
                              "\"NoSchedule\",\"key\":\"k\"}]}],\"driver\":\"gpu.accel.dev\","
                              "\"nodeName\":\"node-a\",\"pool\":{\"generation\":3}}");
    dra_slice_list_clear(&l);
    /* nothing to publish: ours is stale too */
    REQUIRE(dra_slice_list_parse(list, sizeof(list) - 1, "gpu.accel.dev", "node-a",
                                 "node-a-gpu.accel.dev", false, &l, err, sizeof(err)) == 0);
    CHECK_EQ_INT(l.n_stale, 2);
    CHECK(!l.have_ours);
    dra_slice_list_clear(&l);
    static const char status[] = "{\"kind\":\"Status\",\"code\":500}";
    CHECK_EQ_INT(dra_slice_list_parse(status, sizeof(status) - 1, "gpu.accel.dev", "node-a", "x",
                                      true, &l, err, sizeof(err)),
                 -EINVAL);
    CHECK(strstr(err, "no items") != NULL);
}

TEST(slice_spec_canonical_matches_a_rendered_slice)
{
    const struct dra_gpu g = {
        .name = "gpu-0", .uuid = "GPU-a", .memory = 1ull << 30, .numa_node = -1, .healthy = true};
    char *a = NULL, *b = NULL, *ca = NULL, *cb = NULL;
    REQUIRE(dra_slice_render("gpu.accel.dev", "n", "n-gpu.accel.dev", 2, &g, 1, &a) == 0);
    REQUIRE(dra_slice_render("gpu.accel.dev", "n", "n-gpu.accel.dev", 3, &g, 1, &b) == 0);
    REQUIRE(dra_slice_spec_canonical(a, strlen(a), &ca) == 0);
    REQUIRE(dra_slice_spec_canonical(b, strlen(b), &cb) == 0);
    CHECK(strcmp(ca, cb) != 0); /* the generation is part of the spec */
    CHECK(strstr(ca, "\"generation\":2") != NULL);
    CHECK_EQ_INT(dra_slice_spec_canonical("{}", 2, &cb), -EINVAL);
    free(a);
    free(b);
    free(ca);
    free(cb);
}

/* ------------------------------------------------------------ MPS claims */

/* A stand-in for dra-mode's per-claim supervisors: records what it was asked. */
struct fake_mps {
    int starts, stops;
    char uid[80], uuids[200];
    unsigned n, pct;
    uint64_t mem;
    int fail; /* start's result when < 0 */
};

static int fake_start(void *ctx, const char *uid, const char *uuids, unsigned n, unsigned pct,
                      uint64_t mem, char *pipe, char *log, size_t len, char *err, size_t errlen)
{
    struct fake_mps *f = ctx;
    if (f->fail) {
        snprintf(err, errlen, "no daemon today");
        return f->fail;
    }
    f->starts++;
    snprintf(f->uid, sizeof(f->uid), "%s", uid);
    snprintf(f->uuids, sizeof(f->uuids), "%s", uuids);
    f->n = n, f->pct = pct, f->mem = mem;
    snprintf(pipe, len, "/run/host-mps/%s/pipe", uid);
    snprintf(log, len, "/run/host-mps/%s/shm", uid);
    return 0;
}

static void fake_stop(void *ctx, const char *uid)
{
    struct fake_mps *f = ctx;
    (void)uid;
    f->stops++;
}

static void write_claim(const char *dir, const char *name, const char *uid, const char *results)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/ns_%s.json", dir, name);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return;
    fprintf(fp,
            "{\"kind\":\"ResourceClaim\",\"metadata\":{\"namespace\":\"ns\",\"name\":\"%s\","
            "\"uid\":\"%s\"},\"status\":{\"allocation\":{\"devices\":{\"results\":[%s]}}}}",
            name, uid, results);
    fclose(fp);
}

static bool has_str(json_t *arr, const char *want)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), want) == 0)
            return true;
    }
    return false;
}

static json_t *mount_at(json_t *mounts, const char *ctr)
{
    size_t i;
    json_t *m;
    json_array_foreach(mounts, i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "containerPath")), ctr) == 0)
            return m;
    }
    return NULL;
}

TEST(mps_claim_spec_and_checkpoint)
{
    char tmp[] = "/tmp/test-dra-mps-XXXXXX";
    REQUIRE(mkdtemp(tmp) != NULL);
    char cdi[600], state[600], claims[600], path[700];
    snprintf(cdi, sizeof(cdi), "%s/cdi", tmp);
    snprintf(state, sizeof(state), "%s/state", tmp);
    snprintf(claims, sizeof(claims), "%s/claims", tmp);
    REQUIRE(mkdir(claims, 0755) == 0 && mkdir(state, 0755) == 0);
    const struct dra_gpu g[] = {
        {.name = "gpu-0",
         .uuid = "GPU-a",
         .dev_node = "/dev/nvidia0",
         .memory = 16ull << 30,
         .mps = true,
         .healthy = true},
        {.name = "gpu-1",
         .uuid = "GPU-b",
         .dev_node = "/dev/nvidia1",
         .memory = 16ull << 30,
         .shared = true,
         .healthy = true},
    };
    const char *ctl[] = {"/dev/nvidiactl"};
    struct fake_mps f = {0};
    struct dra_prepare_config pc = {"gpu.accel.dev",
                                    "node-a",
                                    cdi,
                                    state,
                                    "/lib/libvcuda.so",
                                    ctl,
                                    1,
                                    g,
                                    2,
                                    {fake_start, NULL, fake_stop, &f},
                                    {NULL, NULL, NULL}};
    const char *uid = "0b5e6a1c-0000-4000-8000-000000000001";
    write_claim(claims, "mps", uid,
                "{\"request\":\"gpu\",\"driver\":\"gpu.accel.dev\",\"pool\":\"node-a\","
                "\"device\":\"gpu-0\",\"shareID\":\"s1\",\"consumedCapacity\":{\"memory\":"
                "\"4Gi\",\"cores\":\"30\"}}");
    struct dra_claim_source src = dra_claim_source_dir(claims);
    struct dra_state *st = NULL;
    char err[512] = "";
    REQUIRE(dra_state_new(&pc, &st, err, sizeof(err)) == 0);
    const struct dra_prepared *pr = NULL;
    CHECK_EQ_INT(dra_prepare(st, &src, "ns", "mps", uid, &pr, err, sizeof(err)), 0);
    /* the daemon was asked for exactly the consumed capacity as its defaults */
    CHECK_EQ_INT(f.starts, 1);
    CHECK_EQ_STR(f.uid, uid);
    CHECK_EQ_STR(f.uuids, "GPU-a");
    CHECK(f.n == 1 && f.pct == 30 && f.mem == 4ull << 30);
    REQUIRE(pr && pr->n_devices == 1 && pr->mps && pr->mps_pct == 30);
    snprintf(path, sizeof(path), "%s/accel-dra-%s.json", cdi, uid);
    json_t *spec = json_load_file(path, 0, NULL);
    REQUIRE(spec);
    json_t *edits = json_object_get(spec, "containerEdits");
    json_t *env = json_object_get(edits, "env");
    CHECK(has_str(env, "NVIDIA_VISIBLE_DEVICES=GPU-a"));
    CHECK(has_str(env, "CUDA_MPS_PIPE_DIRECTORY=/run/accel-mps/pipe"));
    CHECK(!has_str(env, "CUDA_MPS_LOG_DIRECTORY=/run/accel-mps/log")); /* acceld's, issue 22 */
    CHECK(has_str(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"));
    CHECK(has_str(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M"));
    CHECK(!has_str(env, "VCUDA_CONFIG=/etc/vcuda/config"));
    CHECK_EQ_INT((int)json_array_size(env), 4);
    json_t *mounts = json_object_get(edits, "mounts");
    CHECK_EQ_INT((int)json_array_size(mounts), 2);
    char want[300];
    snprintf(want, sizeof(want), "/run/host-mps/%s/pipe", uid);
    json_t *m = mount_at(mounts, "/run/accel-mps/pipe");
    CHECK(m && strcmp(json_string_value(json_object_get(m, "hostPath")), want) == 0 &&
          has_str(json_object_get(m, "options"), "rw"));
    CHECK(mount_at(mounts, "/run/accel-mps/log") == NULL);
    /* the claim's daemon's own /dev/shm (issue 22, F7), never the host's */
    m = mount_at(mounts, "/dev/shm");
    snprintf(want, sizeof(want), "/run/host-mps/%s/shm", uid);
    CHECK(m && strcmp(json_string_value(json_object_get(m, "hostPath")), want) == 0);
    CHECK(mount_at(mounts, "/etc/ld.so.preload") == NULL); /* no libvcuda: MPS caps the claim */
    json_decref(spec);
    /* no libvcuda files for an MPS claim */
    snprintf(path, sizeof(path), "%s/claims/%s", state, uid);
    CHECK(access(path, F_OK) < 0);
    /* prepared again: the same answer, no second daemon */
    const struct dra_prepared *again = NULL;
    CHECK_EQ_INT(dra_prepare(st, &src, "ns", "mps", uid, &again, err, sizeof(err)), 0);
    CHECK(again == pr && f.starts == 1);
    /* a restart reads the claim's daemon settings back from the checkpoint */
    st = dra_state_free(st);
    REQUIRE(dra_state_new(&pc, &st, err, sizeof(err)) == 0);
    pr = dra_state_find(st, uid);
    REQUIRE(pr);
    CHECK(pr->mps && pr->mps_n == 1 && pr->mps_pct == 30 && pr->mps_mem == 4ull << 30);
    CHECK_EQ_STR(pr->mps_uuids, "GPU-a");
    /* unprepare after the restart: spec gone, daemon stopped */
    CHECK_EQ_INT(dra_unprepare(st, uid, err, sizeof(err)), 0);
    CHECK_EQ_INT(f.stops, 1);
    snprintf(path, sizeof(path), "%s/accel-dra-%s.json", cdi, uid);
    CHECK(access(path, F_OK) < 0);
    /* mixing an MPS share and a vGPU share in one claim is refused, nothing left */
    const char *uid2 = "0b5e6a1c-0000-4000-8000-000000000002";
    write_claim(claims, "mix", uid2,
                "{\"request\":\"a\",\"driver\":\"gpu.accel.dev\",\"pool\":\"node-a\","
                "\"device\":\"gpu-0\",\"consumedCapacity\":{\"cores\":\"30\"}},"
                "{\"request\":\"b\",\"driver\":\"gpu.accel.dev\",\"pool\":\"node-a\","
                "\"device\":\"gpu-1\",\"consumedCapacity\":{\"cores\":\"30\"}}");
    CHECK_EQ_INT(dra_prepare(st, &src, "ns", "mix", uid2, &pr, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "mixes MPS and vGPU shares") != NULL);
    CHECK_EQ_INT(f.starts, 1);
    /* a daemon that cannot start: the claim's error says so, nothing written */
    f.fail = -EIO;
    const char *uid3 = "0b5e6a1c-0000-4000-8000-000000000003";
    write_claim(claims, "nodaemon", uid3,
                "{\"request\":\"gpu\",\"driver\":\"gpu.accel.dev\",\"pool\":\"node-a\","
                "\"device\":\"gpu-0\",\"consumedCapacity\":{\"memory\":\"1Gi\"}}");
    CHECK_EQ_INT(dra_prepare(st, &src, "ns", "nodaemon", uid3, &pr, err, sizeof(err)), -EIO);
    CHECK(strstr(err, "cannot start its MPS control daemon: no daemon today") != NULL);
    snprintf(path, sizeof(path), "%s/accel-dra-%s.json", cdi, uid3);
    CHECK(access(path, F_OK) < 0);
    CHECK_EQ_INT((int)dra_state_count(st), 0);
    /* without a supervisor (a test plugin, say) an MPS claim is refused */
    f.fail = 0;
    pc.mps.start = NULL;
    CHECK_EQ_INT(dra_prepare(st, &src, "ns", "nodaemon", uid3, &pr, err, sizeof(err)), -EOPNOTSUPP);
    CHECK(strstr(err, "no MPS supervisor") != NULL);
    st = dra_state_free(st);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    CHECK_EQ_INT(system(cmd), 0);
}

int main(int argc, char **argv)
{
    tap_private_mounts(); /* the region dirs' tmpfs mounts go with this process */
    return tap_main(argc, argv);
}
