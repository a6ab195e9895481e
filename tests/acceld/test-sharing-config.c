/* test-sharing-config.c — the sharing config (src/modes/sharing-config.c): NVIDIA's
 * documented time-slicing and MPS examples, acceld's perGpuReplicas,
 * replicas: 1, the replica limit by compute capability, the ".shared"
 * rename, replica IDs and the k/n MPS caps; every refused file names its
 * line and leaves the output untouched. */
#include <errno.h>
#include <string.h>

#include "sharing-config.h"
#include "tap.h"

static struct sharing_config cfg;

static int parse(const char *yaml, char *err, size_t len)
{
    return sharing_config_parse(&cfg, yaml, strlen(yaml), "t.yaml", err, len);
}

TEST(nvidia_time_slicing_example)
{
    char err[256];
    REQUIRE_EQ_INT(parse("version: v1\n"
                         "flags:\n  migStrategy: none\n"
                         "sharing:\n  timeSlicing:\n    renameByDefault: false\n"
                         "    failRequestsGreaterThanOne: false\n    resources:\n"
                         "    - name: nvidia.com/gpu\n      replicas: 10\n",
                         err, sizeof(err)),
                   0);
    CHECK_EQ_INT(cfg.mode, SHARING_TIME_SLICING);
    REQUIRE_EQ_INT(cfg.n_res, 1);
    CHECK_EQ_STR(cfg.res[0].name, "nvidia.com/gpu");
    CHECK_EQ_INT(cfg.res[0].replicas, 10);
    CHECK_EQ_INT(cfg.res[0].devices, SHARING_DEVICES_ALL);
    char adv[128];
    sharing_resource_advertised(&cfg, &cfg.res[0], adv, sizeof(adv));
    CHECK_EQ_STR(adv, "nvidia.com/gpu");
}

TEST(mps_rename_by_default_and_bare_names)
{
    char err[256];
    REQUIRE_EQ_INT(parse("version: v1\nsharing:\n  mps:\n    renameByDefault: true\n"
                         "    failRequestsGreaterThanOne: true\n"
                         "    resources:\n    - name: gpu\n      replicas: 1\n",
                         err, sizeof(err)),
                   0);
    CHECK_EQ_INT(cfg.mode, SHARING_MPS);
    CHECK(cfg.rename_by_default);
    CHECK(cfg.fail_requests_greater_than_one);
    CHECK_EQ_STR(cfg.res[0].name, "nvidia.com/gpu");
    CHECK_EQ_INT(cfg.res[0].replicas, 1); /* NVIDIA refuses 1; we allow it */
    char adv[128];
    sharing_resource_advertised(&cfg, &cfg.res[0], adv, sizeof(adv));
    CHECK_EQ_STR(adv, "nvidia.com/gpu.shared");
    REQUIRE_EQ_INT(parse("version: v1\nsharing:\n  mps:\n    renameByDefault: true\n"
                         "    resources:\n    - name: nvidia.com/gpu\n      rename: gpu-mps\n"
                         "      replicas: 4\n",
                         err, sizeof(err)),
                   0);
    sharing_resource_advertised(&cfg, &cfg.res[0], adv, sizeof(adv));
    CHECK_EQ_STR(adv, "nvidia.com/gpu-mps");
}

static const struct sharing_gpu gpus[] = {
    {0, "GPU-aaaa", 8, 0},
    {1, "GPU-bbbb", 8, 0},
    {2, "GPU-cccc", 6, 1},
};

TEST(devices_and_per_gpu_replicas)
{
    char err[256];
    const struct sharing_resource *r;
    unsigned n;
    REQUIRE_EQ_INT(parse("version: v1\nsharing:\n  mps:\n    resources:\n"
                         "    - name: nvidia.com/gpu\n      replicas: 4\n"
                         "      devices: [0, GPU-bbbb]\n"
                         "      perGpuReplicas: {GPU-bbbb: 2}\n",
                         err, sizeof(err)),
                   0);
    REQUIRE_EQ_INT(cfg.res[0].n_list, 2);
    REQUIRE_EQ_INT(sharing_config_resolve(&cfg, gpus, 3, 0, &r, &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n, 4);
    REQUIRE_EQ_INT(sharing_config_resolve(&cfg, gpus, 3, 1, &r, &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(sharing_config_resolve(&cfg, gpus, 3, 2, &r, &n, err, sizeof(err)), -ENOENT);
    /* a count selects the first N GPUs */
    REQUIRE_EQ_INT(parse("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                         "    - name: nvidia.com/gpu\n      replicas: 3\n      devices: 2\n",
                         err, sizeof(err)),
                   0);
    CHECK_EQ_INT(sharing_config_resolve(&cfg, gpus, 3, 1, &r, &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(sharing_config_resolve(&cfg, gpus, 3, 2, &r, &n, err, sizeof(err)), -ENOENT);
    /* a list naming a GPU the node lacks */
    REQUIRE_EQ_INT(parse("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                         "    - name: nvidia.com/gpu\n      replicas: 3\n      devices: [7]\n",
                         err, sizeof(err)),
                   0);
    CHECK_EQ_INT(sharing_config_resolve(&cfg, gpus, 3, 0, &r, &n, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "\"7\"") != NULL);
}

TEST(replica_limit_by_compute_capability)
{
    char err[256];
    const struct sharing_resource *r;
    unsigned n;
    CHECK_EQ_INT(sharing_replicas_max(7, 0), 48);
    CHECK_EQ_INT(sharing_replicas_max(6, 1), 16);
    REQUIRE_EQ_INT(parse("version: v1\nsharing:\n  mps:\n    resources:\n"
                         "    - name: nvidia.com/gpu\n      replicas: 48\n",
                         err, sizeof(err)),
                   0);
    CHECK_EQ_INT(sharing_config_resolve(&cfg, gpus, 3, 0, &r, &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n, 48);
    CHECK_EQ_INT(sharing_config_resolve(&cfg, gpus, 3, 2, &r, &n, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "at most 16") != NULL);
    CHECK(strstr(err, "line 5") != NULL);
    CHECK_EQ_INT(parse("version: v1\nsharing:\n  mps:\n    resources:\n"
                       "    - name: nvidia.com/gpu\n      replicas: 49\n",
                       err, sizeof(err)),
                 -EINVAL);
    CHECK(strstr(err, "t.yaml:6:") != NULL);
}

static void refused(const char *yaml, const char *line, const char *words)
{
    char err[256];
    struct sharing_config before;
    memset(&before, 0x5a, sizeof(before));
    cfg = before;
    CHECK_EQ_INT(parse(yaml, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, line) != NULL);
    CHECK(strstr(err, words) != NULL);
    CHECK(memcmp(&cfg, &before, sizeof(cfg)) == 0);
}

TEST(errors_name_the_line_and_change_nothing)
{
    refused("sharing:\n  mps:\n    resources: []\n", "t.yaml:1:", "add version: v1");
    refused("version: v2\n", "t.yaml:1:", "version: v1");
    refused("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replicas: 0\n",
            "t.yaml:6:", "use 1 to 48");
    refused("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replicas: 2\n      devices: [\"0:1\"]\n",
            "t.yaml:7:", "MIG");
    refused("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replica: 2\n",
            "t.yaml:6:", "unknown key \"replica\"");
    refused("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replicas: 2\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replicas: 2\n",
            "t.yaml:", "keep one");
    refused("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replicas: 2\n      devices: [0]\n      perGpuReplicas: {1: 3}\n",
            "t.yaml:8:", "not in this entry's devices");
    refused("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replicas: 2\n    - name: nvidia.com/gpu\n      replicas: 3\n",
            "t.yaml:7:", "two entries");
    refused("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replicas: 2\n      devices: [0]\n    - name: nvidia.com/gpu\n"
            "      replicas: 3\n      devices: [GPU-x, 0]\n",
            "t.yaml:8:", "two entries");
    refused("version: v1\nsharing:\n  mps:\n    resources:\n    - name: \"nvidia.com/g pu\"\n"
            "      replicas: 2\n",
            "t.yaml:5:", "resource name");
    refused("version: v1\nsharing: {mps: {resources: [{name: gpu, replicas: 2}]}}\n---\n"
            "version: v1\n",
            "t.yaml:", "one YAML document");
    refused("version: v1\nsharing:\n  mps:\n    resources: [\n", "t.yaml:", "YAML syntax");
}

TEST(replica_ids)
{
    char buf[64], uuid[64];
    unsigned n;
    REQUIRE_EQ_INT(sharing_replica_id("GPU-aaaa", 3, buf, sizeof(buf)), 0);
    CHECK_EQ_STR(buf, "GPU-aaaa::3");
    REQUIRE_EQ_INT(sharing_replica_id_parse(buf, uuid, sizeof(uuid), &n), 0);
    CHECK_EQ_STR(uuid, "GPU-aaaa");
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(sharing_replica_id_parse("GPU-aaaa", uuid, sizeof(uuid), &n), -EINVAL);
    CHECK_EQ_INT(sharing_replica_id_parse("GPU-a::01", uuid, sizeof(uuid), &n), -EINVAL);
    CHECK_EQ_INT(sharing_replica_id_parse("::1", uuid, sizeof(uuid), &n), -EINVAL);
    CHECK_EQ_INT(sharing_replica_id("GPU-a::1", 2, buf, sizeof(buf)), -EINVAL);
    CHECK_EQ_INT(sharing_replica_id("GPU-aaaa", 3, buf, 5), -ENOSPC);
}

TEST(mps_caps_k_of_n)
{
    unsigned pct;
    uint64_t mem;
    REQUIRE_EQ_INT(sharing_mps_caps(1, 4, 80ull << 30, &pct, &mem), 0);
    CHECK_EQ_INT(pct, 25);
    CHECK_EQ_U64(mem, 20ull << 30);
    REQUIRE_EQ_INT(sharing_mps_caps(2, 3, 3000, &pct, &mem), 0);
    CHECK_EQ_INT(pct, 66);
    CHECK_EQ_U64(mem, 2000);
    REQUIRE_EQ_INT(sharing_mps_caps(1, 48, 100, &pct, &mem), 0);
    CHECK_EQ_INT(pct, 2);
    CHECK_EQ_U64(mem, 2);
    REQUIRE_EQ_INT(sharing_mps_caps(3, 3, UINT64_MAX, &pct, &mem), 0);
    CHECK_EQ_INT(pct, 100);
    CHECK_EQ_U64(mem, UINT64_MAX);
    CHECK_EQ_INT(sharing_mps_caps(4, 3, 100, &pct, &mem), -EINVAL);
    CHECK_EQ_INT(sharing_mps_caps(1, 0, 100, &pct, &mem), -EINVAL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
