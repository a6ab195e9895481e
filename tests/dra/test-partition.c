/* test-partition.c — src/dra/partition.c: partition device names and their lookup, the pool of
 * a node with MIG partitions (counter sets, what each partition consumes, slices of at most 64
 * devices and 8 counter sets, one generation and slice count), the check that an API server
 * kept the partitionable fields, and the ResourceSliceList reader's items. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra.h"
#include "h100-profiles.h"
#include "tap.h"

/* 1g.10gb, 1g.10gb+me, 3g.40gb, 7g.80gb of the H100's table: 17 partitions a GPU */
static struct dra_mig_profile profiles[4];

static void pick_profiles(void)
{
    profiles[0] = h100_profiles[0];
    profiles[1] = h100_profiles[1];
    profiles[2] = h100_profiles[4];
    profiles[3] = h100_profiles[6];
}

static struct dra_gpu gpu(const char *name, bool mig)
{
    return (struct dra_gpu){.name = name,
                            .uuid = "GPU-11111111-2222-3333-4444-555555555555",
                            .dev_node = "/dev/nvidia0",
                            .memory = 80ull << 30,
                            .product = "NVIDIA H100 80GB HBM3",
                            .architecture = "Hopper",
                            .cc_major = 9,
                            .driver_version = "580.65.06",
                            .numa_node = 0,
                            .pci_bus_id = "0000:18:00.0",
                            .healthy = true,
                            .mig_profiles = mig ? profiles : NULL,
                            .n_mig_profiles = mig ? sizeof(profiles) / sizeof(profiles[0]) : 0};
}

TEST(partition_names_and_lookup)
{
    struct dra_gpu g[2] = {gpu("gpu-0", false), gpu("gpu-3", true)};
    char name[80];
    CHECK_EQ_INT(dra_partition_name(&g[1], &profiles[1], 5, name, sizeof(name)), 0);
    CHECK_EQ_STR(name, "gpu-3-mig-1g-10gb-me-5");
    const struct dra_gpu *found;
    const struct dra_mig_profile *p;
    unsigned start = 99, size = 99;
    CHECK_EQ_INT(dra_partition_find(g, 2, "gpu-3-mig-3g-40gb-4", &found, &p, &start, &size), 0);
    CHECK(found == &g[1] && p == &profiles[2] && start == 4 && size == 4);
    /* a placement the profile does not have, a whole GPU's name */
    CHECK_EQ_INT(dra_partition_find(g, 2, "gpu-3-mig-3g-40gb-2", &found, &p, &start, &size),
                 -ENOENT);
    CHECK_EQ_INT(dra_partition_find(g, 2, "gpu-0", &found, &p, &start, &size), -ENOENT);
    CHECK_EQ_INT(dra_partition_find(g, 2, "gpu-0-mig-1g-10gb-0", &found, &p, &start, &size),
                 -ENOENT);
}

static json_t *find_device(json_t *slices, const char *name)
{
    size_t i, j;
    json_t *s, *d;
    json_array_foreach(slices, i, s)
    {
        json_array_foreach(json_object_get(json_object_get(s, "spec"), "devices"), j, d)
        {
            if (strcmp(json_string_value(json_object_get(d, "name")), name) == 0)
                return d;
        }
    }
    return NULL;
}

TEST(pool_with_partitions)
{
    /* 9 MIG GPUs of 17 partitions (153 devices) and a whole one, the last MIG GPU unhealthy */
    static char names[10][16];
    struct dra_gpu g[10];
    for (int i = 0; i < 10; i++) {
        snprintf(names[i], sizeof(names[i]), "gpu-%d", i);
        g[i] = gpu(names[i], i < 9);
    }
    g[8].healthy = false;
    struct dra_slice_out *out = NULL;
    size_t n = 0;
    REQUIRE_EQ_INT(dra_pool_render("gpu.accel.dev", "node-a", 4, g, 10, &out, &n), 0);
    /* 154 devices: 64 + 64 + 26; 9 counter sets: 8 + 1 */
    REQUIRE_EQ_INT(n, 5);
    CHECK_EQ_STR(out[0].name, "node-a-gpu.accel.dev");
    CHECK_EQ_STR(out[2].name, "node-a-gpu.accel.dev-2");
    CHECK_EQ_STR(out[3].name, "node-a-gpu.accel.dev-counters");
    CHECK_EQ_STR(out[4].name, "node-a-gpu.accel.dev-counters-1");
    json_t *all = json_array();
    size_t devs = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_loads(out[i].json, 0, NULL);
        REQUIRE(s != NULL);
        json_t *spec = json_object_get(s, "spec"), *pool = json_object_get(spec, "pool");
        CHECK(out[i].partitions);
        CHECK_EQ_INT(json_integer_value(json_object_get(pool, "generation")), 4);
        CHECK_EQ_INT(json_integer_value(json_object_get(pool, "resourceSliceCount")), 5);
        CHECK((json_object_get(spec, "devices") != NULL) !=
              (json_object_get(spec, "sharedCounters") != NULL));
        CHECK_LE_INT(json_array_size(json_object_get(spec, "devices")), 64);
        CHECK_LE_INT(json_array_size(json_object_get(spec, "sharedCounters")), 8);
        devs += json_array_size(json_object_get(spec, "devices"));
        json_array_append_new(all, s);
    }
    CHECK_EQ_INT(devs, 9 * 17 + 1);
    CHECK(find_device(all, "gpu-9") != NULL);
    CHECK(find_device(all, "gpu-0") == NULL);
    json_t *me = find_device(all, "gpu-2-mig-1g-10gb-me-6");
    REQUIRE(me != NULL);
    char *c = json_dumps(json_object_get(me, "consumesCounters"), JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_EQ_STR(c, "[{\"counterSet\":\"gpu-2-counters\",\"counters\":{\"compute-slices\":{"
                    "\"value\":\"1\"},\"memory-slice-6\":{\"value\":\"1\"},"
                    "\"profile-20-instances\":{\"value\":\"1\"}}}]");
    free(c);
    json_t *attrs = json_object_get(me, "attributes");
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(attrs, "profile"), "string")),
                 "1g.10gb+me");
    CHECK(json_object_get(attrs, "uuid") == NULL);
    CHECK(json_object_get(json_object_get(me, "capacity"), "cores") == NULL);
    json_t *seven = find_device(all, "gpu-1-mig-7g-80gb-0");
    REQUIRE(seven != NULL);
    json_t *cons =
        json_object_get(json_array_get(json_object_get(seven, "consumesCounters"), 0), "counters");
    CHECK_EQ_INT(json_object_size(cons), 9); /* 8 memory slices and the compute slices */
    json_t *sick = find_device(all, "gpu-8-mig-3g-40gb-4");
    CHECK(sick && json_object_get(sick, "taints") != NULL);
    /* the counter set: 8 memory slices, 7 compute slices, the media extension's one */
    json_t *sets =
        json_object_get(json_object_get(json_array_get(all, 3), "spec"), "sharedCounters");
    json_t *set0 = json_array_get(sets, 0);
    CHECK_EQ_STR(json_string_value(json_object_get(set0, "name")), "gpu-0-counters");
    json_t *counters = json_object_get(set0, "counters");
    CHECK_EQ_INT(json_object_size(counters), 10);
    CHECK_EQ_STR(
        json_string_value(json_object_get(json_object_get(counters, "compute-slices"), "value")),
        "7");
    json_decref(all);
    /* kept: the same fields back; dropped: the server's answer without them */
    CHECK(dra_slice_kept_partitions(out[3].json, out[3].json, strlen(out[3].json)));
    json_t *s = json_loads(out[0].json, 0, NULL);
    json_t *d0 = json_array_get(json_object_get(json_object_get(s, "spec"), "devices"), 0);
    json_object_del(d0, "consumesCounters");
    char *dropped = json_dumps(s, JSON_COMPACT);
    CHECK(!dra_slice_kept_partitions(out[0].json, dropped, strlen(dropped)));
    CHECK(!dra_slice_kept_partitions(out[0].json, "not json", 8));
    free(dropped);
    json_decref(s);
    dra_pool_free(out, n);
    /* withdrawn GPUs leave the pool; a pool of none is no slice */
    for (int i = 0; i < 10; i++)
        g[i].unpublished = true;
    REQUIRE_EQ_INT(dra_pool_render("gpu.accel.dev", "node-a", 4, g, 10, &out, &n), 0);
    CHECK_EQ_INT(n, 0);
    dra_pool_free(out, n);
}

TEST(pool_without_partitions_is_the_single_slice)
{
    struct dra_gpu g[2] = {gpu("gpu-0", false), gpu("gpu-1", false)};
    struct dra_slice_out *out = NULL;
    size_t n = 0;
    char *one = NULL, *a = NULL, *b = NULL;
    REQUIRE_EQ_INT(dra_pool_render("gpu.accel.dev", "node-a", 2, g, 2, &out, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK(!out[0].partitions);
    REQUIRE_EQ_INT(
        dra_slice_render("gpu.accel.dev", "node-a", "node-a-gpu.accel.dev", 2, g, 2, &one), 0);
    REQUIRE_EQ_INT(dra_slice_spec_canonical(one, strlen(one), &a), 0);
    REQUIRE_EQ_INT(dra_slice_spec_canonical(out[0].json, strlen(out[0].json), &b), 0);
    CHECK_EQ_STR(a, b); /* what acceld published before partitions, byte for byte */
    free(one);
    free(a);
    free(b);
    dra_pool_free(out, n);
}

TEST(slice_list_items)
{
    static const char list[] =
        "{\"items\":[{\"metadata\":{\"name\":\"node-a-gpu.accel.dev\",\"resourceVersion\":\"7\"},"
        "\"spec\":{\"driver\":\"gpu.accel.dev\",\"nodeName\":\"node-a\",\"pool\":{"
        "\"generation\":3}}},{\"metadata\":{\"name\":\"node-a-gpu.accel.dev-counters\"},"
        "\"spec\":{\"driver\":\"gpu.accel.dev\",\"nodeName\":\"node-a\",\"pool\":{"
        "\"generation\":3}}},{\"metadata\":{\"name\":\"other\"},\"spec\":{\"driver\":\"x\","
        "\"nodeName\":\"node-a\"}}]}";
    struct dra_slice_list l;
    char err[128];
    REQUIRE_EQ_INT(dra_slice_list_parse(list, sizeof(list) - 1, "gpu.accel.dev", "node-a",
                                        "node-a-gpu.accel.dev", false, &l, err, sizeof(err)),
                   0);
    REQUIRE_EQ_INT(l.n_items, 2);
    CHECK_EQ_STR(l.items[0].rv, "7");
    CHECK_EQ_STR(l.items[1].name, "node-a-gpu.accel.dev-counters");
    CHECK_EQ_STR(l.items[1].rv, "");
    CHECK_EQ_INT(l.items[1].generation, 3);
    CHECK_EQ_INT(l.n_stale, 2); /* not kept as ours: the publisher sorts them */
    dra_slice_list_clear(&l);
}

int main(int argc, char **argv)
{
    pick_profiles();
    return tap_main(argc, argv);
}
