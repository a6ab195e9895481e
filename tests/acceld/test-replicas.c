/* test-replicas.c — the time-slicing and MPS providers (src/modes/replicas.c)
 * through the provider seam: replica IDs and lookup, health of every replica
 * of a GPU at once (GPU health and each MPS daemon's), Allocate's contents
 * and refusals, GetPreferredAllocation on one GPU. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replicas.h"
#include "tap.h"

#define MIB (1ull << 20)

static const struct replicas_gpu_desc gpus[] = {
    {"GPU-aaaa", 0, 0, true, 2, 1000 * MIB},
    {"GPU-bbbb", 3, 1, true, 3, 900 * MIB},
};

static struct replicas *make(bool mps, bool fail_gt_one, enum acceld_strategy strategy)
{
    struct replicas_options o = {mps,      fail_gt_one,  "nvidia.com/gpu", "/nonexistent-dev",
                                 strategy, "nvidia.com", "gpu-shared"};
    struct replicas *s = NULL;
    if (replicas_new(gpus, 2, &o, &s) < 0)
        return NULL;
    return s;
}

static const char *env_of(const struct acceld_alloc *a, const char *key)
{
    for (size_t i = 0; i < a->n_envs; i++)
        if (strcmp(a->envs[i].key, key) == 0)
            return a->envs[i].value;
    return NULL;
}

static size_t healthy_count(struct acceld_provider p)
{
    size_t n = 0;
    for (size_t i = 0; i < p.ops->count(p.self); i++) {
        struct acceld_device d;
        p.ops->device(p.self, i, &d);
        n += d.healthy;
    }
    return n;
}

TEST(ids_and_find)
{
    struct replicas *s = make(false, false, ACCELD_STRATEGY_ENVVAR);
    REQUIRE(s != NULL);
    struct acceld_provider p = replicas_provider(s);
    REQUIRE_EQ_INT(p.ops->count(p.self), 5);
    struct acceld_device d;
    p.ops->device(p.self, 0, &d);
    CHECK_EQ_STR(d.id, "GPU-aaaa::0");
    p.ops->device(p.self, 4, &d);
    CHECK_EQ_STR(d.id, "GPU-bbbb::2");
    CHECK_EQ_INT(d.numa_node, 1);
    CHECK_EQ_INT(p.ops->find(p.self, "GPU-bbbb::1"), 3);
    CHECK_EQ_INT(p.ops->find(p.self, "GPU-aaaa::2"), -1); /* past its replicas */
    CHECK_EQ_INT(p.ops->find(p.self, "GPU-aaaa"), -1);
    CHECK_EQ_INT(p.ops->find(p.self, "GPU-cccc::0"), -1);
    CHECK_EQ_INT(healthy_count(p), 5); /* time-slicing: no daemon to wait for */
    replicas_free(s);
}

TEST(health_of_every_replica_at_once)
{
    struct replicas *s = make(true, false, ACCELD_STRATEGY_ENVVAR);
    REQUIRE(s != NULL);
    struct acceld_provider p = replicas_provider(s);
    CHECK_EQ_INT(replicas_max_request(s, 0), 2);
    CHECK_EQ_INT(replicas_max_request(s, 1), 3);
    CHECK_EQ_INT(healthy_count(p), 0); /* until the daemons answer */
    uint64_t g0 = p.ops->generation(p.self);
    CHECK(!replicas_set_daemon_health(s, 0, 1, true)); /* k = 2 still down */
    CHECK(replicas_set_daemon_health(s, 0, 2, true));
    CHECK_EQ_INT(healthy_count(p), 2);
    CHECK(p.ops->generation(p.self) != g0);
    for (unsigned k = 1; k <= 3; k++)
        replicas_set_daemon_health(s, 1, k, true);
    CHECK_EQ_INT(healthy_count(p), 5);
    /* one daemon of GPU 1 down: its three replicas, nothing else */
    CHECK(replicas_set_daemon_health(s, 1, 2, false));
    CHECK_EQ_INT(healthy_count(p), 2);
    CHECK(!replicas_set_daemon_health(s, 1, 2, false));
    CHECK(!replicas_set_daemon_health(s, 1, 9, true)); /* no such daemon */
    CHECK(replicas_set_daemon_health(s, 1, 2, true));
    /* an XID on GPU 0: both its replicas */
    CHECK(p.ops->set_gpu_health(p.self, "GPU-aaaa", false));
    CHECK_EQ_INT(healthy_count(p), 3);
    CHECK(!p.ops->set_gpu_health(p.self, "GPU-zzzz", false));
    CHECK(p.ops->set_gpu_health(p.self, "GPU-aaaa", true));
    CHECK_EQ_INT(healthy_count(p), 5);
    replicas_free(s);
}

TEST(mps_allocate)
{
    struct replicas *s = make(true, false, ACCELD_STRATEGY_ENVVAR);
    REQUIRE(s != NULL);
    struct acceld_provider p = replicas_provider(s);
    for (unsigned k = 1; k <= 3; k++) {
        char pipe[64], shm[64];
        snprintf(pipe, sizeof(pipe), "/run/x/b%u/pipe", k);
        snprintf(shm, sizeof(shm), "/run/x/b%u/shm", k);
        CHECK_EQ_INT(replicas_set_mps_dirs(s, 1, k, pipe, k == 3 ? NULL : shm), 0);
    }
    CHECK_EQ_INT(replicas_set_mps_dirs(s, 1, 4, "/p", "/l"), -EINVAL);
    size_t two[] = {2, 4}; /* GPU-bbbb::0 and ::2 */
    struct acceld_alloc_req req = {two, 2};
    struct acceld_alloc out;
    char err[512] = "";
    REQUIRE_EQ_INT(p.ops->allocate(p.self, &req, 1, &out, err, sizeof(err)), 0);
    CHECK_EQ_STR(env_of(&out, "NVIDIA_VISIBLE_DEVICES"), "GPU-bbbb");
    CHECK_EQ_STR(env_of(&out, "CUDA_MPS_PIPE_DIRECTORY"), REPLICAS_MPS_PIPE_PATH);
    /* no log directory (the root daemon's, issue 22); the daemon's own /dev/shm (F7) */
    CHECK(env_of(&out, "CUDA_MPS_LOG_DIRECTORY") == NULL);
    CHECK_EQ_STR(env_of(&out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "66");
    CHECK_EQ_STR(env_of(&out, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=600M");
    REQUIRE_EQ_INT(out.n_mounts, 2);
    CHECK_EQ_STR(out.mounts[0].host_path, "/run/x/b2/pipe");
    CHECK_EQ_STR(out.mounts[1].container_path, "/dev/shm");
    CHECK_EQ_STR(out.mounts[1].host_path, "/run/x/b2/shm");
    REQUIRE_EQ_INT(out.n_devices, 1); /* no control nodes under the fake dev root */
    CHECK_EQ_STR(out.devices[0].host_path, "/dev/nvidia3");
    /* two GPUs in one container: refused */
    size_t across[] = {0, 2};
    req = (struct acceld_alloc_req){across, 2};
    CHECK_EQ_INT(p.ops->allocate(p.self, &req, 1, &out, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "one GPU") != NULL);
    replicas_free(s);
}

TEST(fail_requests_greater_than_one)
{
    struct replicas *s = make(false, true, ACCELD_STRATEGY_CDI);
    REQUIRE(s != NULL);
    struct acceld_provider p = replicas_provider(s);
    size_t two[] = {0, 1};
    struct acceld_alloc_req req = {two, 2};
    struct acceld_alloc out;
    char err[512] = "";
    CHECK_EQ_INT(p.ops->allocate(p.self, &req, 1, &out, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "failRequestsGreaterThanOne") != NULL);
    req.n_devs = 1;
    REQUIRE_EQ_INT(p.ops->allocate(p.self, &req, 1, &out, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(out.n_cdi_devices, 1);
    CHECK_EQ_STR(out.cdi_devices[0], "nvidia.com/gpu-shared=GPU-aaaa");
    CHECK(env_of(&out, "NVIDIA_VISIBLE_DEVICES") == NULL);
    CHECK_EQ_INT(out.n_mounts, 0);
    replicas_free(s);
}

TEST(time_slicing_across_gpus_and_prefer)
{
    struct replicas *s = make(false, false, ACCELD_STRATEGY_ENVVAR);
    REQUIRE(s != NULL);
    struct acceld_provider p = replicas_provider(s);
    size_t across[] = {1, 3};
    struct acceld_alloc_req req = {across, 2};
    struct acceld_alloc out;
    char err[512] = "";
    REQUIRE_EQ_INT(p.ops->allocate(p.self, &req, 1, &out, err, sizeof(err)), 0);
    CHECK_EQ_STR(env_of(&out, "NVIDIA_VISIBLE_DEVICES"), "GPU-aaaa,GPU-bbbb");
    CHECK(env_of(&out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == NULL);
    CHECK_EQ_INT(out.n_devices, 2);
    /* two of the five: the GPU with the most available replicas (bbbb) */
    const char *avail[] = {"GPU-aaaa::0", "GPU-bbbb::0", "GPU-aaaa::1", "GPU-bbbb::2",
                           "GPU-bbbb::1"};
    const char *picked[3];
    struct acceld_prefer_req pr = {avail, 5, NULL, 0, 2};
    REQUIRE_EQ_INT(p.ops->prefer(p.self, &pr, picked, err, sizeof(err)), 0);
    CHECK(strncmp(picked[0], "GPU-bbbb::", 10) == 0 && strncmp(picked[1], "GPU-bbbb::", 10) == 0);
    /* must_include pulls the choice to its GPU */
    const char *must[] = {"GPU-aaaa::1"};
    const char *rest[] = {"GPU-aaaa::0", "GPU-bbbb::0", "GPU-bbbb::2", "GPU-bbbb::1"};
    pr = (struct acceld_prefer_req){rest, 4, must, 1, 2};
    REQUIRE_EQ_INT(p.ops->prefer(p.self, &pr, picked, err, sizeof(err)), 0);
    CHECK_EQ_STR(picked[0], "GPU-aaaa::1");
    CHECK_EQ_STR(picked[1], "GPU-aaaa::0");
    replicas_free(s);
}

TEST(bad_descriptions)
{
    struct replicas_options o = {true, false, "r", "/dev", ACCELD_STRATEGY_ENVVAR, "v", "c"};
    struct replicas *s = NULL;
    struct replicas_gpu_desc g = {"GPU-x", 0, -1, true, 0, 0};
    CHECK_EQ_INT(replicas_new(&g, 1, &o, &s), -EINVAL); /* 0 replicas */
    g.replicas = 49;
    CHECK_EQ_INT(replicas_new(&g, 1, &o, &s), -EINVAL);
    g.replicas = 1;
    REQUIRE_EQ_INT(replicas_new(&g, 1, &o, &s), 0);
    CHECK_EQ_INT(replicas_max_request(s, 0), 1);
    replicas_free(s);
}

TEST(cdi_spec)
{
    char dir[] = "/tmp/test-shared-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    struct replicas *s = make(true, true, ACCELD_STRATEGY_CDI);
    REQUIRE(s != NULL);
    CHECK_EQ_INT(replicas_write_cdi(s, dir), 0);
    char path[256];
    snprintf(path, sizeof(path), "%s/accel-nvidia.com-gpu-shared.json", dir);
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    CHECK(strstr(buf, "\"nvidia.com/gpu-shared\"") != NULL);
    CHECK(strstr(buf, "GPU-bbbb") != NULL && strstr(buf, "/dev/nvidia3") != NULL);
    unlink(path);
    rmdir(dir);
    replicas_free(s);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
