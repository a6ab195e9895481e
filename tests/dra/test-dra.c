/* test-dra.c — src/dra without sockets: ResourceClaim parsing and its
 * rejections, Quantity parsing, and the ResourceSlice renderer's shape. */
#include "dra.h"
#include "tap.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
