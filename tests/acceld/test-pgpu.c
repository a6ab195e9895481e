/* test-pgpu.c — the pGPU provider on a hand-built 4-GPU node, driven through
 * the wire side of the provider seam (wire.h) as the plugin drives it:
 * Allocate's answer (device nodes found under a fake dev root, env or CDI
 * names), its refusals (unknown / unhealthy IDs named, nothing changed), the
 * ListAndWatch message, and GetPreferredAllocation with unknown IDs. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pgpu.h"
#include "policy.h"
#include "tap.h"
#include "dp-wire.h"

/* The wire over the pgpu under test (one at a time). */
static struct acceld_wire *W;
static struct pgpu *WP;

static struct acceld_wire *wire_of(struct pgpu *p)
{
    if (WP != p || !W) {
        W = acceld_wire_free(W);
        struct acceld_provider prov = pgpu_provider(p);
        if (acceld_wire_new(&prov, &W) < 0)
            abort();
        WP = p;
    }
    return W;
}

static void t_free(struct pgpu *p)
{
    W = acceld_wire_free(W);
    WP = NULL;
    pgpu_free(p);
}

static int t_allocate(struct pgpu *p, const V1beta1__AllocateRequest *req,
                      V1beta1__AllocateResponse **ret, char *err, size_t errlen)
{
    return acceld_wire_allocate(wire_of(p), req, ret, err, errlen);
}

static int t_prefer(struct pgpu *p, const V1beta1__PreferredAllocationRequest *req,
                    V1beta1__PreferredAllocationResponse **ret, char *err, size_t errlen)
{
    return acceld_wire_prefer(wire_of(p), req, ret, err, errlen);
}

static int t_list_bytes(struct pgpu *p, const uint8_t **d, size_t *len)
{
    return acceld_wire_list_bytes(wire_of(p), d, len);
}

static char devroot[512];

static struct pgpu *make(enum acceld_strategy strategy)
{
    snprintf(devroot, sizeof(devroot), "%s/dev", tap_tmpdir());
    mkdir(devroot, 0755);
    const char *files[] = {"nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"};
    for (size_t i = 0; i < 4; i++) {
        char f[600];
        snprintf(f, sizeof(f), "%s/%s", devroot, files[i]);
        int fd = open(f, O_CREAT | O_WRONLY, 0644);
        if (fd >= 0)
            close(fd);
    }
    struct pgpu_gpu_desc g[] = {
        {.uuid = "GPU-0000", .minor = 0, .numa_node = 0, .healthy = true},
        {.uuid = "GPU-1111", .minor = 1, .numa_node = 0, .healthy = true},
        {.uuid = "GPU-2222", .minor = 2, .numa_node = 1, .healthy = true},
        {.uuid = "GPU-3333", .minor = 3, .numa_node = -1, .healthy = true},
    };
    uint8_t pcie[16];
    int nvl[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            pcie[i * 4 + j] = i / 2 == j / 2 ? POLICY_PCIE_SWITCH : POLICY_PCIE_FAR;
            nvl[i * 4 + j] = i != j && i / 2 == j / 2 ? 2 : 0;
        }
    struct pgpu_options o = {
        .dev_root = devroot, .strategy = strategy, .cdi_vendor = "nvidia.com", .cdi_class = "gpu"};
    struct pgpu *p = NULL;
    if (pgpu_new(g, 4, pcie, nvl, &o, &p) < 0)
        return NULL;
    return p;
}

static V1beta1__AllocateRequest *alloc_req(char **ids, size_t n)
{
    static V1beta1__ContainerAllocateRequest cr;
    static V1beta1__ContainerAllocateRequest *crs[1];
    static V1beta1__AllocateRequest req;
    V1beta1__ContainerAllocateRequest ci = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    V1beta1__AllocateRequest ri = V1BETA1__ALLOCATE_REQUEST__INIT;
    cr = ci;
    req = ri;
    cr.n_devices_ids = n;
    cr.devices_ids = ids;
    crs[0] = &cr;
    req.n_container_requests = 1;
    req.container_requests = crs;
    return &req;
}

TEST(allocate_envvar)
{
    struct pgpu *p = make(ACCELD_STRATEGY_ENVVAR);
    REQUIRE(p != NULL);
    char *ids[] = {"GPU-2222", "GPU-0000"};
    V1beta1__AllocateResponse *resp = NULL;
    char err[512];
    REQUIRE_EQ_INT(t_allocate(p, alloc_req(ids, 2), &resp, err, sizeof(err)), 0);
    /* pack and unpack: what the kubelet would see */
    size_t len = v1beta1__allocate_response__get_packed_size(resp);
    uint8_t *buf = malloc(len);
    v1beta1__allocate_response__pack(resp, buf);
    /* the answer's block is reused: a warm Allocate allocates nothing */
    V1beta1__AllocateResponse *again = NULL;
    REQUIRE_EQ_INT(t_allocate(p, alloc_req(ids, 1), &again, err, sizeof(err)), 0);
    CHECK(again == resp);
    CHECK_EQ_STR(again->container_responses[0]->envs[0]->value, "GPU-2222");
    V1beta1__AllocateResponse *r = v1beta1__allocate_response__unpack(NULL, len, buf);
    free(buf);
    REQUIRE(r != NULL);
    REQUIRE_EQ_INT(r->n_container_responses, 1);
    V1beta1__ContainerAllocateResponse *c = r->container_responses[0];
    REQUIRE_EQ_INT(c->n_envs, 1);
    CHECK_EQ_STR(c->envs[0]->key, "NVIDIA_VISIBLE_DEVICES");
    CHECK_EQ_STR(c->envs[0]->value, "GPU-2222,GPU-0000");
    /* 2 GPUs + nvidiactl + nvidia-uvm (nvidia-uvm-tools does not exist) */
    REQUIRE_EQ_INT(c->n_devices, 4);
    CHECK_EQ_STR(c->devices[0]->container_path, "/dev/nvidia2");
    CHECK_EQ_STR(c->devices[0]->host_path, "/dev/nvidia2");
    CHECK_EQ_STR(c->devices[0]->permissions, "rw");
    CHECK_EQ_STR(c->devices[1]->host_path, "/dev/nvidia0");
    CHECK_EQ_STR(c->devices[2]->host_path, "/dev/nvidiactl");
    CHECK_EQ_STR(c->devices[3]->host_path, "/dev/nvidia-uvm");
    CHECK_EQ_INT(c->n_cdi_devices, 0);
    v1beta1__allocate_response__free_unpacked(r, NULL);
    t_free(p);
}

TEST(allocate_cdi)
{
    struct pgpu *p = make(ACCELD_STRATEGY_CDI);
    REQUIRE(p != NULL);
    char *ids[] = {"GPU-1111"};
    V1beta1__AllocateResponse *resp = NULL;
    char err[512];
    REQUIRE_EQ_INT(t_allocate(p, alloc_req(ids, 1), &resp, err, sizeof(err)), 0);
    V1beta1__ContainerAllocateResponse *c = resp->container_responses[0];
    CHECK_EQ_INT(c->n_envs, 0);
    REQUIRE_EQ_INT(c->n_cdi_devices, 1);
    CHECK_EQ_STR(c->cdi_devices[0]->name, "nvidia.com/gpu=GPU-1111");
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/cdi", tap_tmpdir());
    CHECK_EQ_INT(pgpu_write_cdi(p, dir), 0);
    struct pgpu_options o = {.dev_root = devroot,
                             .strategy = ACCELD_STRATEGY_CDI,
                             .cdi_vendor = "example.com",
                             .cdi_class = "accel"};
    REQUIRE_EQ_INT(pgpu_set_options(p, &o), 0);
    REQUIRE_EQ_INT(t_allocate(p, alloc_req(ids, 1), &resp, err, sizeof(err)), 0);
    CHECK_EQ_STR(resp->container_responses[0]->cdi_devices[0]->name, "example.com/accel=GPU-1111");
    t_free(p);
}

TEST(allocate_refuses_unknown_and_unhealthy)
{
    struct pgpu *p = make(ACCELD_STRATEGY_ENVVAR);
    REQUIRE(p != NULL);
    V1beta1__AllocateResponse *resp = (void *)0x1;
    char err[512] = "";
    char *ids[] = {"GPU-0000", "GPU-nope", "GPU-gone"};
    CHECK_EQ_INT(t_allocate(p, alloc_req(ids, 3), &resp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "unknown device IDs: GPU-nope, GPU-gone") != NULL);
    CHECK(resp == (void *)0x1);
    uint64_t gen = pgpu_generation(p);
    CHECK(pgpu_set_healthy(p, 3, false));
    CHECK(!pgpu_set_healthy(p, 3, false));
    CHECK(pgpu_generation(p) == gen + 1);
    char *ids2[] = {"GPU-3333"};
    CHECK_EQ_INT(t_allocate(p, alloc_req(ids2, 1), &resp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "unhealthy devices: GPU-3333") != NULL);
    CHECK_EQ_INT(t_allocate(p, alloc_req(ids2, 0), &resp, err, sizeof(err)), -EINVAL);
    CHECK(resp == (void *)0x1);
    t_free(p);
}

TEST(list_bytes_follow_health)
{
    struct pgpu *p = make(ACCELD_STRATEGY_ENVVAR);
    REQUIRE(p != NULL);
    const uint8_t *d;
    size_t len;
    REQUIRE_EQ_INT(t_list_bytes(p, &d, &len), 0);
    V1beta1__ListAndWatchResponse *m = v1beta1__list_and_watch_response__unpack(NULL, len, d);
    REQUIRE(m != NULL);
    REQUIRE_EQ_INT(m->n_devices, 4);
    CHECK_EQ_STR(m->devices[2]->id, "GPU-2222");
    CHECK_EQ_STR(m->devices[2]->health, "Healthy");
    REQUIRE(m->devices[2]->topology != NULL);
    REQUIRE_EQ_INT(m->devices[2]->topology->n_nodes, 1);
    CHECK_EQ_INT(m->devices[2]->topology->nodes[0]->id, 1);
    CHECK(m->devices[3]->topology == NULL); /* NUMA unknown: omitted */
    v1beta1__list_and_watch_response__free_unpacked(m, NULL);
    pgpu_set_healthy(p, 2, false);
    REQUIRE_EQ_INT(t_list_bytes(p, &d, &len), 0);
    m = v1beta1__list_and_watch_response__unpack(NULL, len, d);
    REQUIRE(m != NULL);
    CHECK_EQ_STR(m->devices[2]->health, "Unhealthy");
    CHECK_EQ_STR(m->devices[1]->health, "Healthy");
    v1beta1__list_and_watch_response__free_unpacked(m, NULL);
    t_free(p);
}

TEST(prefer_with_unknown_ids)
{
    struct pgpu *p = make(ACCELD_STRATEGY_ENVVAR);
    REQUIRE(p != NULL);
    char *avail[] = {"GPU-zzz", "GPU-2222", "GPU-0000", "GPU-3333"};
    char *must[] = {"GPU-3333"};
    V1beta1__ContainerPreferredAllocationRequest cr =
        V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
    cr.n_available_deviceids = 4;
    cr.available_deviceids = avail;
    cr.n_must_include_deviceids = 1;
    cr.must_include_deviceids = must;
    cr.allocation_size = 2;
    V1beta1__ContainerPreferredAllocationRequest *crs[] = {&cr};
    V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
    req.n_container_requests = 1;
    req.container_requests = crs;
    V1beta1__PreferredAllocationResponse *resp = NULL;
    char err[512];
    REQUIRE_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(resp->container_responses[0]->n_deviceids, 2);
    /* 3's NVLink partner is 2 */
    CHECK_EQ_STR(resp->container_responses[0]->deviceids[0], "GPU-2222");
    CHECK_EQ_STR(resp->container_responses[0]->deviceids[1], "GPU-3333");
    acceld_wire_prefer_free(resp);
    cr.allocation_size = 4;
    REQUIRE_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), 0);
    CHECK_EQ_STR(resp->container_responses[0]->deviceids[3], "GPU-zzz");
    acceld_wire_prefer_free(resp);
    cr.allocation_size = 5;
    resp = NULL;
    CHECK_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "cannot pick 5 devices") != NULL);
    CHECK(resp == NULL);
    cr.allocation_size = 0;
    CHECK_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), -EINVAL);
    t_free(p);
}

/* GetPreferredAllocation still answers, unaligned, with an unhealthy (lost)
 * GPU among the available ones and with no link information at all; a hostile
 * allocation_size is refused before it sizes anything. */
TEST(prefer_degraded_and_hostile_size)
{
    struct pgpu *p = make(ACCELD_STRATEGY_ENVVAR);
    REQUIRE(p != NULL);
    char *avail[] = {"GPU-0000", "GPU-1111", "GPU-2222", "GPU-3333"};
    V1beta1__ContainerPreferredAllocationRequest cr =
        V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
    cr.n_available_deviceids = 4;
    cr.available_deviceids = avail;
    cr.allocation_size = 3;
    V1beta1__ContainerPreferredAllocationRequest *crs[] = {&cr};
    V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
    req.n_container_requests = 1;
    req.container_requests = crs;
    V1beta1__PreferredAllocationResponse *resp = NULL;
    char err[512];
    CHECK(pgpu_set_healthy(p, 1, false));
    REQUIRE_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), 0);
    CHECK_EQ_INT(resp->container_responses[0]->n_deviceids, 3);
    acceld_wire_prefer_free(resp);
    resp = NULL;
    cr.allocation_size = INT32_MAX;
    CHECK_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "cannot pick 2147483647 devices") != NULL);
    CHECK(resp == NULL);
    t_free(p);

    /* no topology: NVML's link queries failed at start */
    struct pgpu_gpu_desc g[] = {{.uuid = "GPU-0000", .minor = 0, .numa_node = -1, .healthy = true},
                                {.uuid = "GPU-1111", .minor = 1, .numa_node = -1, .healthy = true}};
    struct pgpu_options o = {.dev_root = devroot,
                             .strategy = ACCELD_STRATEGY_ENVVAR,
                             .cdi_vendor = "nvidia.com",
                             .cdi_class = "gpu"};
    REQUIRE_EQ_INT(pgpu_new(g, 2, NULL, NULL, &o, &p), 0);
    char *two[] = {"GPU-1111", "GPU-0000"};
    cr.available_deviceids = two;
    cr.n_available_deviceids = 2;
    cr.allocation_size = 1;
    REQUIRE_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(resp->container_responses[0]->n_deviceids, 1);
    CHECK_EQ_STR(resp->container_responses[0]->deviceids[0], "GPU-0000"); /* lowest index */
    acceld_wire_prefer_free(resp);
    t_free(p);
}

/* A request naming a device twice (in one container or across two) is
 * refused, naming it, instead of being echoed. */
TEST(allocate_refuses_duplicates)
{
    struct pgpu *p = make(ACCELD_STRATEGY_ENVVAR);
    REQUIRE(p != NULL);
    V1beta1__AllocateResponse *resp = NULL;
    char err[1024];
    char *ids[] = {"GPU-1111", "GPU-0000", "GPU-1111"};
    CHECK_EQ_INT(t_allocate(p, alloc_req(ids, 3), &resp, err, sizeof(err)), -EINVAL);
    CHECK(resp == NULL);
    CHECK(strstr(err, "named more than once: GPU-1111 (") != NULL);
    /* across two containers of one request */
    char *a[] = {"GPU-2222"}, *b[] = {"GPU-3333", "GPU-2222"};
    V1beta1__ContainerAllocateRequest c0 = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    V1beta1__ContainerAllocateRequest c1 = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    c0.n_devices_ids = 1;
    c0.devices_ids = a;
    c1.n_devices_ids = 2;
    c1.devices_ids = b;
    V1beta1__ContainerAllocateRequest *crs[] = {&c0, &c1};
    V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
    req.n_container_requests = 2;
    req.container_requests = crs;
    CHECK_EQ_INT(t_allocate(p, &req, &resp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "named more than once: GPU-2222") != NULL);
    /* the same IDs once each are fine, in the next call (marks do not leak) */
    b[1] = "GPU-0000";
    REQUIRE_EQ_INT(t_allocate(p, &req, &resp, err, sizeof(err)), 0);
    CHECK_EQ_STR(resp->container_responses[1]->envs[0]->value, "GPU-3333,GPU-0000");
    t_free(p);
}

/* 10,000 IDs (what stalled the loop for minutes) are refused at once, in
 * Allocate and in GetPreferredAllocation, without looking at them; a request
 * the size of the node whose IDs are all unknown still gets an answer. */
TEST(refuses_more_ids_than_devices)
{
    struct pgpu *p = make(ACCELD_STRATEGY_ENVVAR);
    REQUIRE(p != NULL);
    enum { N = 10000 };
    char **ids = calloc(N, sizeof(char *));
    REQUIRE(ids != NULL);
    for (size_t i = 0; i < N; i++) {
        ids[i] = malloc(24);
        snprintf(ids[i], 24, "GPU-unknown-%zu", i);
    }
    V1beta1__AllocateResponse *aresp = NULL;
    char err[1024];
    CHECK_EQ_INT(t_allocate(p, alloc_req(ids, N), &aresp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "names 10000 device IDs, more than the 4 devices this node has") != NULL);
    CHECK(aresp == NULL);
    /* five IDs: one more than the node has */
    CHECK_EQ_INT(t_allocate(p, alloc_req(ids, 5), &aresp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "names 5 device IDs") != NULL);

    V1beta1__ContainerPreferredAllocationRequest cr =
        V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
    cr.n_available_deviceids = N;
    cr.available_deviceids = ids;
    cr.allocation_size = 2;
    V1beta1__ContainerPreferredAllocationRequest *crs[] = {&cr};
    V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
    req.n_container_requests = 1;
    req.container_requests = crs;
    V1beta1__PreferredAllocationResponse *resp = NULL;
    CHECK_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "available_deviceIDs names 10000 device IDs") != NULL);
    CHECK(resp == NULL);
    cr.n_available_deviceids = 4;
    cr.n_must_include_deviceids = N;
    cr.must_include_deviceids = ids;
    CHECK_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "must_include_deviceIDs names 10000") != NULL);
    /* more containers than devices */
    cr.n_must_include_deviceids = 0;
    V1beta1__ContainerPreferredAllocationRequest *five[] = {&cr, &cr, &cr, &cr, &cr};
    req.n_container_requests = 5;
    req.container_requests = five;
    CHECK_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "5 container requests, more than the 4 devices") != NULL);
    /* at the bound, all unknown: answered (unknown IDs take part, in order) */
    req.n_container_requests = 1;
    req.container_requests = crs;
    REQUIRE_EQ_INT(t_prefer(p, &req, &resp, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(resp->container_responses[0]->n_deviceids, 2);
    CHECK_EQ_STR(resp->container_responses[0]->deviceids[0], "GPU-unknown-0");
    CHECK_EQ_STR(resp->container_responses[0]->deviceids[1], "GPU-unknown-1");
    acceld_wire_prefer_free(resp);
    for (size_t i = 0; i < N; i++)
        free(ids[i]);
    free(ids);
    t_free(p);
}

/* The ID index on a large node: every ID found at its index, near misses not. */
TEST(find_many)
{
    enum { N = 300 };
    static char uuids[N][48];
    struct pgpu_gpu_desc g[N];
    for (int i = 0; i < N; i++) {
        snprintf(uuids[i], sizeof(uuids[i]), "GPU-%08x-0000-0000-0000-%012d", i * 7919, i);
        g[i] = (struct pgpu_gpu_desc){
            .uuid = uuids[i], .minor = i, .numa_node = i % 2, .healthy = true};
    }
    struct pgpu_options o = {.dev_root = "/nonexistent",
                             .strategy = ACCELD_STRATEGY_ENVVAR,
                             .cdi_vendor = "nvidia.com",
                             .cdi_class = "gpu"};
    struct pgpu *p = NULL;
    REQUIRE_EQ_INT(pgpu_new(g, N, NULL, NULL, &o, &p), 0);
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        char miss[64];
        snprintf(miss, sizeof(miss), "%sx", uuids[i]);
        wrong += pgpu_find(p, uuids[i]) != i;
        wrong += pgpu_find(p, miss) != -1;
    }
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(pgpu_find(p, ""), -1);
    t_free(p);
}

TEST(rejects_bad_ids)
{
    struct pgpu_gpu_desc dup[] = {{.uuid = "GPU-a", .minor = 0, .numa_node = 0, .healthy = true},
                                  {.uuid = "GPU-a", .minor = 1, .numa_node = 0, .healthy = true}};
    struct pgpu_options o = {.dev_root = "/dev",
                             .strategy = ACCELD_STRATEGY_ENVVAR,
                             .cdi_vendor = "nvidia.com",
                             .cdi_class = "gpu"};
    struct pgpu *p = NULL;
    CHECK_EQ_INT(pgpu_new(dup, 2, NULL, NULL, &o, &p), -EINVAL);
    char longid[80];
    memset(longid, 'a', 70);
    longid[70] = '\0';
    struct pgpu_gpu_desc lg[] = {{.uuid = longid, .minor = 0, .numa_node = 0, .healthy = true}};
    CHECK_EQ_INT(pgpu_new(lg, 1, NULL, NULL, &o, &p), -EINVAL);
    CHECK(p == NULL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
