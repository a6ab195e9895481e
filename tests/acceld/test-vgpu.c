/* test-vgpu.c — the vGPU provider driven through the wire (wire.h) as the
 * plugin drives it, against an in-memory pod table standing in for the API
 * server's watch cache: unit device lists (size for 8 × 141 GiB), matching
 * in either resource order, two pods sharing a GPU with their own configs,
 * binpack / spread / extender, whole GPUs, a pod that fits nowhere, the API
 * server unreachable, unhealthy GPUs, and restart from the checkpoint
 * (between the two resources' Allocates) plus reconcile. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"
#include "tap.h"
#include "vgpu.h"
#include "dp-wire.h"

#define GiB (1ull << 30)
#define UNIT (256ull << 20)

/* ---- the in-memory pod table ---- */

static struct vgpu_pending table[16];
static size_t n_table;
static int table_error; /* non-zero: the "API server" is unreachable */
static char last_key[300], last_value[300], last_pod[300];
static int n_annotated;

static int t_pending(void *self, const struct vgpu_pending **ret, size_t *n, char *err,
                     size_t errlen)
{
    if (table_error) {
        snprintf(err, errlen, "GET /api/v1/pods: connection refused");
        return table_error;
    }
    *ret = table;
    *n = n_table;
    return 0;
}

static void t_annotate(void *self, const char *ns, const char *pod, const char *key,
                       const char *value)
{
    snprintf(last_pod, sizeof(last_pod), "%s/%s", ns, pod);
    snprintf(last_key, sizeof(last_key), "%s", key);
    snprintf(last_value, sizeof(last_value), "%s", value);
    n_annotated++;
}

static const struct vgpu_pods_ops table_ops = {t_pending, t_annotate};
static const struct vgpu_pods table_pods = {&table_ops, NULL};

static void add_pod(const char *uid, const char *name, const char *container, int64_t created,
                    uint64_t cores, uint64_t memory, const char *chosen)
{
    table[n_table++] =
        (struct vgpu_pending){uid, "default", name, container, created, cores, memory, chosen};
}

/* ---- a node ---- */

static char state[600];
static int n_state;

static struct vgpu *make(size_t n, uint64_t mem, enum vgpu_policy policy, bool keep_state)
{
    if (!keep_state)
        snprintf(state, sizeof(state), "%s/state%d", tap_tmpdir(), n_state++);
    static char uuids[8][64];
    struct vgpu_gpu_desc g[8];
    for (size_t i = 0; i < n; i++) {
        snprintf(uuids[i], sizeof(uuids[i]), "GPU-%08zx-1111-2222-3333-444455556666", i);
        g[i] = (struct vgpu_gpu_desc){uuids[i], (int)i, (int)i / 4, mem, true};
    }
    char lib[700];
    snprintf(lib, sizeof(lib), "%s/libvcuda.so", tap_tmpdir());
    struct vgpu_options o = {state, lib, "/nonexistent", UNIT, policy};
    struct vgpu *v = NULL;
    char err[512] = "";
    int r = vgpu_new(g, n, &o, &table_pods, &v, err, sizeof(err));
    if (r < 0)
        tap_diag("vgpu_new: %d %s", r, err);
    return v;
}

struct node {
    struct vgpu *v;
    struct acceld_wire *w[2];
    size_t cursor[2]; /* the "kubelet" hands out IDs from the end of the list */
};

static void node_open(struct node *nd, struct vgpu *v)
{
    nd->v = v;
    for (int r = 0; r < 2; r++) {
        struct acceld_provider p = vgpu_provider(v, (enum vgpu_resource)r);
        if (acceld_wire_new(&p, &nd->w[r]) < 0)
            abort();
        nd->cursor[r] = 0;
    }
}

static void node_close(struct node *nd)
{
    for (int r = 0; r < 2; r++)
        nd->w[r] = acceld_wire_free(nd->w[r]);
    nd->v = vgpu_free(nd->v);
}

/* The device list of resource r, unpacked (free with
 * v1beta1__list_and_watch_response__free_unpacked). */
static V1beta1__ListAndWatchResponse *list(struct node *nd, int r, size_t *bytes)
{
    const uint8_t *d;
    size_t len;
    if (acceld_wire_list_bytes(nd->w[r], &d, &len) < 0)
        return NULL;
    if (bytes)
        *bytes = len;
    return v1beta1__list_and_watch_response__unpack(NULL, len, d);
}

/* Allocates amount IDs of resource r the way the kubelet does (IDs of its
 * choosing: here from the end of the list, so on the last GPU, never the
 * one acceld picks). Returns the rc; *ret the response (borrowed). */
static int alloc(struct node *nd, int r, size_t amount, V1beta1__ContainerAllocateResponse **ret,
                 char *err, size_t errlen)
{
    V1beta1__ListAndWatchResponse *l = list(nd, r, NULL);
    if (!l)
        return -ENOMEM;
    char **ids = calloc(amount, sizeof(char *));
    for (size_t i = 0; i < amount; i++)
        ids[i] = strdup(l->devices[l->n_devices - 1 - nd->cursor[r] - i]->id);
    v1beta1__list_and_watch_response__free_unpacked(l, NULL);
    V1beta1__ContainerAllocateRequest cr = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    cr.n_devices_ids = amount;
    cr.devices_ids = ids;
    V1beta1__ContainerAllocateRequest *crs[] = {&cr};
    V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
    req.n_container_requests = 1;
    req.container_requests = crs;
    V1beta1__AllocateResponse *resp = NULL;
    int rc = acceld_wire_allocate(nd->w[r], &req, &resp, err, errlen);
    if (rc == 0) {
        nd->cursor[r] += amount;
        *ret = resp->container_responses[0];
    }
    for (size_t i = 0; i < amount; i++)
        free(ids[i]);
    free(ids);
    return rc;
}

static const char *env(const V1beta1__ContainerAllocateResponse *c, const char *key)
{
    for (size_t i = 0; i < c->n_envs; i++)
        if (strcmp(c->envs[i]->key, key) == 0)
            return c->envs[i]->value;
    return NULL;
}

static const V1beta1__Mount *mount(const V1beta1__ContainerAllocateResponse *c, const char *path)
{
    for (size_t i = 0; i < c->n_mounts; i++)
        if (strcmp(c->mounts[i]->container_path, path) == 0)
            return c->mounts[i];
    return NULL;
}

static char *slurp(const char *path)
{
    char *d = NULL;
    size_t len;
    if (fs_read_all(path, 1 << 20, &d, &len) < 0)
        return NULL;
    return d;
}

/* The config libvcuda will read in this container: from the response's mount. */
static char *config_of(const V1beta1__ContainerAllocateResponse *c)
{
    const V1beta1__Mount *m = mount(c, VGPU_CONTAINER_CONFIG);
    return m ? slurp(m->host_path) : NULL;
}

/* ------------------------------------------------------------ tests */

TEST(device_lists_for_8_h200)
{
    struct node nd;
    struct vgpu *v = make(8, 141 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    size_t bytes[2];
    V1beta1__ListAndWatchResponse *c = list(&nd, VGPU_CORES, &bytes[0]);
    V1beta1__ListAndWatchResponse *m = list(&nd, VGPU_MEMORY, &bytes[1]);
    REQUIRE(c && m);
    CHECK_EQ_INT(c->n_devices, 800);
    CHECK_EQ_INT(m->n_devices, 8 * 564); /* 141 GiB / 256 MiB */
    size_t longest = 0;
    for (size_t i = 0; i < m->n_devices; i++)
        longest = strlen(m->devices[i]->id) > longest ? strlen(m->devices[i]->id) : longest;
    CHECK_LE_INT(longest, 63);
    /* far below the kubelet's 4 MiB message limit (and below acceld's own 1 MiB) */
    tap_diag("list sizes: cores %zu bytes, memory %zu bytes", bytes[0], bytes[1]);
    CHECK_LE_U64(bytes[0], 1u << 20);
    CHECK_LE_U64(bytes[1], 1u << 20);
    CHECK(m->devices[4 * 564]->topology != NULL);
    CHECK_EQ_INT(m->devices[4 * 564]->topology->nodes[0]->id, 1);
    v1beta1__list_and_watch_response__free_unpacked(c, NULL);
    v1beta1__list_and_watch_response__free_unpacked(m, NULL);
    node_close(&nd);
}

/* Two pods share one GPU (binpack), admitted in opposite resource orders;
 * each gets its own config with its own quota, both responses of a
 * container agree on the env, and mounts come once. */
/* GetPreferredAllocation of size IDs of resource r, every listed ID available: writes the
 * one GPU all the answer's IDs are on to gpu ("" when on several). Returns the rc. */
static int prefer(struct node *nd, int r, size_t size, char *gpu, size_t len)
{
    V1beta1__ListAndWatchResponse *l = list(nd, r, NULL);
    if (!l)
        return -ENOMEM;
    char **avail = calloc(l->n_devices, sizeof(char *));
    for (size_t i = 0; i < l->n_devices; i++)
        avail[i] = l->devices[i]->id;
    V1beta1__ContainerPreferredAllocationRequest cr =
        V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
    cr.n_available_deviceids = l->n_devices;
    cr.available_deviceids = avail;
    cr.allocation_size = (int32_t)size;
    V1beta1__ContainerPreferredAllocationRequest *crs[] = {&cr};
    V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
    req.n_container_requests = 1;
    req.container_requests = crs;
    V1beta1__PreferredAllocationResponse *resp = NULL;
    char err[512];
    int rc = acceld_wire_prefer(nd->w[r], &req, &resp, err, sizeof(err));
    if (rc == 0) {
        const V1beta1__ContainerPreferredAllocationResponse *c = resp->container_responses[0];
        gpu[0] = '\0';
        for (size_t i = 0; i < c->n_deviceids; i++) {
            const char *dash = strrchr(c->deviceids[i], '-');
            int k = (int)(dash - c->deviceids[i]);
            if (i == 0)
                snprintf(gpu, len, "%.*s", k, c->deviceids[i]);
            else if (strncmp(gpu, c->deviceids[i], (size_t)k) != 0 || gpu[k] != '\0')
                gpu[0] = '\0', i = c->n_deviceids;
        }
        if (c->n_deviceids != size)
            rc = -EPROTO;
        acceld_wire_prefer_free(resp);
    }
    free(avail);
    v1beta1__list_and_watch_response__free_unpacked(l, NULL);
    return rc;
}

TEST(preferred_allocation_names_the_gpu_allocate_will_choose)
{
    n_table = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    struct node nd;
    struct vgpu *v = make(2, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "", g[80], g2[80];
    V1beta1__ContainerAllocateResponse *resp;
    /* the pending container's GPU, before anything is recorded */
    REQUIRE_EQ_INT(prefer(&nd, VGPU_CORES, 30, g, sizeof(g)), 0);
    CHECK(g[0] != '\0');
    CHECK_EQ_INT(vgpu_assignment_count(v), 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &resp, err, sizeof(err)), 0);
    CHECK_EQ_STR(env(resp, "NVIDIA_VISIBLE_DEVICES"), g);
    /* the other resource: the GPU of the assignment waiting for it */
    REQUIRE_EQ_INT(prefer(&nd, VGPU_MEMORY, 16, g2, sizeof(g2)), 0);
    CHECK_EQ_STR(g2, g);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &resp, err, sizeof(err)), 0);
    /* binpack: a second pod goes onto the same (fuller) GPU */
    add_pod("uid-c", "c", "main", 300, 20, 4, NULL);
    REQUIRE_EQ_INT(prefer(&nd, VGPU_MEMORY, 4, g2, sizeof(g2)), 0);
    CHECK_EQ_STR(g2, g);
    /* no pending container asks for 7: the least loaded GPU */
    REQUIRE_EQ_INT(prefer(&nd, VGPU_CORES, 7, g2, sizeof(g2)), 0);
    CHECK(g2[0] != '\0' && strcmp(g2, g) != 0);
    node_close(&nd);
}

TEST(two_pods_share_one_gpu)
{
    n_table = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL); /* 30 % + 4 GiB */
    add_pod("uid-b", "b", "main", 200, 70, 32, NULL); /* 70 % + 8 GiB */
    struct node nd;
    struct vgpu *v = make(2, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *ac, *am, *bc, *bm;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &ac, err, sizeof(err)), 0);
    char *acfg = config_of(ac);
    const char *a_env = env(ac, "NVIDIA_VISIBLE_DEVICES");
    REQUIRE(a_env != NULL);
    char a_gpu[64];
    snprintf(a_gpu, sizeof(a_gpu), "%s", a_env);
    CHECK_EQ_STR(last_pod, "default/a");
    CHECK_EQ_STR(last_key, VGPU_ANNOTATION_PREFIX "main");
    CHECK_EQ_STR(last_value, a_gpu);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &am, err, sizeof(err)), 0);
    CHECK_EQ_STR(env(am, "NVIDIA_VISIBLE_DEVICES"), a_gpu);
    CHECK_EQ_INT(am->n_mounts, 0); /* the mounts came with the cores response */
    /* pod b: memory first */
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 32, &bm, err, sizeof(err)), 0);
    CHECK_EQ_STR(env(bm, "NVIDIA_VISIBLE_DEVICES"), a_gpu); /* binpack: the same GPU */
    CHECK_EQ_INT(bm->n_mounts, 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 70, &bc, err, sizeof(err)), 0);
    CHECK_EQ_STR(env(bc, "NVIDIA_VISIBLE_DEVICES"), a_gpu);
    char *bcfg = config_of(bc);
    REQUIRE(acfg && bcfg);
    CHECK(strstr(acfg, "memory_limit = 4294967296\n") != NULL);
    CHECK(strstr(acfg, "core_limit = 30\n") != NULL);
    CHECK(strstr(bcfg, "memory_limit = 8589934592\n") != NULL);
    CHECK(strstr(bcfg, "core_limit = 70\n") != NULL);
    char dev_line[100];
    snprintf(dev_line, sizeof(dev_line), "devices = %s\n", a_gpu);
    CHECK(strstr(acfg, dev_line) != NULL);
    CHECK(strstr(acfg, "region = " VGPU_CONTAINER_REGION_DIR "/usage\n") != NULL);
    /* the mounts: library, config, preload read-only; region dir writable */
    REQUIRE(mount(bc, VGPU_CONTAINER_LIBRARY) && mount(bc, VGPU_CONTAINER_PRELOAD) &&
            mount(bc, VGPU_CONTAINER_REGION_DIR));
    CHECK(mount(bc, VGPU_CONTAINER_LIBRARY)->read_only);
    CHECK(mount(bc, VGPU_CONTAINER_CONFIG)->read_only);
    CHECK(mount(bc, VGPU_CONTAINER_PRELOAD)->read_only);
    CHECK(!mount(bc, VGPU_CONTAINER_REGION_DIR)->read_only);
    char *pre = slurp(mount(bc, VGPU_CONTAINER_PRELOAD)->host_path);
    CHECK_EQ_STR(pre, VGPU_CONTAINER_LIBRARY "\n");
    char want_dir[800];
    snprintf(want_dir, sizeof(want_dir), "%s/vgpu/uid-b/main/region", state);
    CHECK_EQ_STR(mount(bc, VGPU_CONTAINER_REGION_DIR)->host_path, want_dir);
    struct stat st;
    REQUIRE_EQ_INT(stat(want_dir, &st), 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0777);
    /* device nodes: the GPU's own, not the last GPU's the kubelet named */
    REQUIRE_EQ_INT(bc->n_devices, 1);
    CHECK_EQ_STR(bc->devices[0]->host_path, "/dev/nvidia0");
    /* the checkpoint: 0600 */
    char cp[800];
    snprintf(cp, sizeof(cp), "%s/vgpu/checkpoint.json", state);
    REQUIRE_EQ_INT(stat(cp, &st), 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0600);
    uint64_t fc, fm;
    vgpu_gpu_free_units(v, 0, &fc, &fm);
    CHECK_EQ_U64(fc, 0);
    CHECK_EQ_U64(fm, 64 - 48);
    vgpu_gpu_free_units(v, 1, &fc, &fm);
    CHECK_EQ_U64(fc, 100);
    /* what the host-side check reads: each assignment with its GPU, limits and region */
    struct vgpu_assignment_info ai;
    REQUIRE_EQ_INT(vgpu_assignment_get(v, 1, &ai), 0);
    CHECK_EQ_STR(ai.pod_uid, "uid-b");
    CHECK_EQ_STR(ai.pod, "b");
    CHECK_EQ_STR(ai.container, "main");
    CHECK_EQ_STR(ai.gpu_uuid, a_gpu);
    CHECK_EQ_U64(ai.cores, 70);
    CHECK_EQ_U64(ai.memory_bytes, 8 * GiB);
    CHECK_EQ_STR(ai.region, want_dir);
    CHECK(ai.complete && !ai.whole);
    CHECK_EQ_INT(vgpu_assignment_get(v, 2, &ai), -ENOENT);
    free(acfg);
    free(bcfg);
    free(pre);
    node_close(&nd);
}

TEST(spread_and_extender)
{
    n_table = 0;
    add_pod("uid-a", "a", "main", 100, 20, 4, NULL);
    add_pod("uid-b", "b", "main", 200, 20, 4, NULL);
    add_pod("uid-c", "c", "main", 300, 10, 4, "GPU-00000000-1111-2222-3333-444455556666");
    struct node nd;
    struct vgpu *v = make(2, 16 * GiB, VGPU_SPREAD, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    char first[64];
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 20, &r, err, sizeof(err)), 0);
    snprintf(first, sizeof(first), "%s", env(r, "NVIDIA_VISIBLE_DEVICES"));
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 4, &r, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 20, &r, err, sizeof(err)), 0);
    CHECK(strcmp(env(r, "NVIDIA_VISIBLE_DEVICES"), first) != 0); /* spread: the other GPU */
    CHECK_EQ_STR(last_pod, "default/b");
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 4, &r, err, sizeof(err)), 0);
    /* the extender's annotation wins */
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 4, &r, err, sizeof(err)), 0);
    CHECK_EQ_STR(env(r, "NVIDIA_VISIBLE_DEVICES"), "GPU-00000000-1111-2222-3333-444455556666");
    CHECK_EQ_STR(last_pod, "default/c");
    node_close(&nd);
}

TEST(whole_gpus_and_no_fit)
{
    n_table = 0;
    add_pod("uid-w", "w", "train", 100, 200, 0, NULL);
    add_pod("uid-s", "s", "main", 200, 50, 60, NULL);  /* 15 GiB: fits nowhere after */
    add_pod("uid-t", "t", "main", 300, 50, 300, NULL); /* larger than any GPU */
    struct node nd;
    struct vgpu *v = make(3, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 200, &r, err, sizeof(err)), 0);
    const char *vis = env(r, "NVIDIA_VISIBLE_DEVICES");
    REQUIRE(vis != NULL);
    CHECK(strchr(vis, ',') != NULL); /* two GPUs */
    CHECK_EQ_INT(r->n_mounts, 0);    /* no libvcuda, no limits */
    CHECK_EQ_INT(r->n_devices, 2);
    /* one GPU left with 64 units: 60 fit */
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 50, &r, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 60, &r, err, sizeof(err)), 0);
    /* 300 units fit nowhere: a clear message with the largest fit */
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 50, &r, err, sizeof(err)), -ENOSPC);
    tap_diag("%s", err);
    CHECK(strstr(err, "default/t container main") != NULL);
    CHECK(strstr(err, "the largest fit is 50 cores and 4 units (1024 MiB)") != NULL);
    /* nothing was recorded for it */
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    /* a request no pending container makes */
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 7, &r, err, sizeof(err)), -EAGAIN);
    CHECK(strstr(err, "exactly 7 vcuda-core") != NULL);
    node_close(&nd);
}

TEST(api_server_unreachable_never_guesses)
{
    n_table = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    table_error = -EHOSTUNREACH;
    struct node nd;
    struct vgpu *v = make(1, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    int before = n_annotated;
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), -EHOSTUNREACH);
    CHECK(strstr(err, "API server") != NULL && strstr(err, "connection refused") != NULL);
    CHECK_EQ_INT(vgpu_assignment_count(v), 0);
    CHECK_EQ_INT(n_annotated, before);
    table_error = 0;
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    node_close(&nd);
}

TEST(unhealthy_gpu_takes_its_units)
{
    n_table = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    struct node nd;
    struct vgpu *v = make(2, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    struct acceld_provider pc = vgpu_provider(v, VGPU_CORES), pm = vgpu_provider(v, VGPU_MEMORY);
    const char *g0 = "GPU-00000000-1111-2222-3333-444455556666";
    CHECK(pc.ops->set_gpu_health(pc.self, g0, false));
    CHECK(pm.ops->set_gpu_health(pm.self, g0, false)); /* each endpoint learns it */
    CHECK(!pm.ops->set_gpu_health(pm.self, g0, false));
    V1beta1__ListAndWatchResponse *l = list(&nd, VGPU_MEMORY, NULL);
    REQUIRE(l != NULL);
    CHECK_EQ_STR(l->devices[0]->health, "Unhealthy");
    CHECK_EQ_STR(l->devices[63]->health, "Unhealthy");
    CHECK_EQ_STR(l->devices[64]->health, "Healthy");
    v1beta1__list_and_watch_response__free_unpacked(l, NULL);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    CHECK_EQ_STR(env(r, "NVIDIA_VISIBLE_DEVICES"), "GPU-00000001-1111-2222-3333-444455556666");
    node_close(&nd);
}

/* kill -9 between the two resources' Allocates: the restarted provider
 * (from the checkpoint) answers the second with the same GPU and config;
 * reconcile then drops only containers that are gone. */
TEST(restart_between_resources_and_reconcile)
{
    n_table = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    add_pod("uid-b", "b", "main", 200, 40, 8, NULL);
    struct node nd;
    struct vgpu *v = make(2, 16 * GiB, VGPU_SPREAD, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
    char a_gpu[64];
    snprintf(a_gpu, sizeof(a_gpu), "%s", env(r, "NVIDIA_VISIBLE_DEVICES"));
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 8, &r, err, sizeof(err)), 0);
    char b_gpu[64];
    snprintf(b_gpu, sizeof(b_gpu), "%s", env(r, "NVIDIA_VISIBLE_DEVICES"));
    node_close(&nd); /* "killed": nothing but the files survives */

    v = make(2, 16 * GiB, VGPU_SPREAD, true);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 40, &r, err, sizeof(err)), 0);
    CHECK_EQ_STR(env(r, "NVIDIA_VISIBLE_DEVICES"), b_gpu);
    char *cfg = config_of(r);
    REQUIRE(cfg != NULL);
    CHECK(strstr(cfg, "memory_limit = 2147483648\n") && strstr(cfg, "core_limit = 40\n"));
    free(cfg);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2); /* the same container, not a new one */
    uint64_t fc, fm;
    int gi = strcmp(a_gpu, "GPU-00000000-1111-2222-3333-444455556666") == 0 ? 0 : 1;
    vgpu_gpu_free_units(v, (size_t)gi, &fc, &fm);
    CHECK_EQ_U64(fc, 70);
    CHECK_EQ_U64(fm, 48);

    /* pod a is gone, b lives; an incomplete c (cores only so far) is kept */
    add_pod("uid-c", "c", "main", 300, 10, 4, NULL);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 10, &r, err, sizeof(err)), 0);
    char a_dir[800];
    snprintf(a_dir, sizeof(a_dir), "%s/vgpu/uid-a", state);
    struct stat st;
    CHECK_EQ_INT(stat(a_dir, &st), 0);
    const char *live[] = {"default/b/main", "other/a/main"};
    CHECK_EQ_INT(vgpu_reconcile(v, live, 2), 1);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    CHECK_EQ_INT(stat(a_dir, &st), -1); /* its directory is gone */
    vgpu_gpu_free_units(v, (size_t)gi, &fc, &fm);
    /* spread put b on the other GPU and c beside a: a's GPU now holds c only */
    CHECK(strcmp(a_gpu, b_gpu) != 0);
    CHECK_EQ_U64(fc, 90);
    CHECK_EQ_U64(fm, 60);
    node_close(&nd);
    /* the reconciled checkpoint is what a second restart sees */
    v = make(2, 16 * GiB, VGPU_SPREAD, true);
    REQUIRE(v != NULL);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    vgpu_free(v);
}

/* A container whose admission failed between its two Allocates (its pod no
 * longer pending) neither catches the next container's call of the same
 * amount nor keeps its share. */
TEST(abandoned_half_assignment)
{
    n_table = 0;
    add_pod("uid-y", "y", "main", 100, 30, 16, NULL);
    add_pod("uid-x", "x", "main", 200, 20, 16, NULL);
    struct node nd;
    struct vgpu *v = make(1, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    CHECK_EQ_STR(last_pod, "default/y");
    table[0] = table[1]; /* y failed admission: no longer pending */
    n_table = 1;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
    CHECK_EQ_STR(last_pod, "default/x"); /* a new assignment, not y's second call */
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    uint64_t fc, fm;
    vgpu_gpu_free_units(v, 0, &fc, &fm);
    CHECK_EQ_U64(fc, 80); /* y's 30 cores are free again; x holds 20 */
    CHECK_EQ_U64(fm, 64 - 16);
    char y_dir[800];
    snprintf(y_dir, sizeof(y_dir), "%s/vgpu/uid-y", state);
    struct stat st;
    CHECK_EQ_INT(stat(y_dir, &st), -1);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 20, &r, err, sizeof(err)), 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    node_close(&nd);
}

/* Lines of a file (0 if absent). */
static size_t count_lines(const char *path)
{
    char *t = slurp(path);
    size_t n = 0;
    for (const char *c = t; c && *c; c++)
        n += *c == '\n';
    free(t);
    return n;
}

static void append_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "a");
    REQUIRE(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* The checkpoint is a snapshot plus a journal of one line per change: an
 * Allocate appends, a restart replays the lines over the snapshot (a line cut
 * by a machine crash ignored, any other broken line refused), rebuilds the
 * per-container files (written without fsync) and folds all into a new
 * snapshot. A drop is journaled too: a restart does not bring it back. */
TEST(checkpoint_journal)
{
    n_table = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    add_pod("uid-b", "b", "main", 200, 40, 8, NULL);
    struct node nd;
    struct vgpu *v = make(1, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char cp[800], jr[800];
    snprintf(cp, sizeof(cp), "%s/vgpu/checkpoint.json", state);
    snprintf(jr, sizeof(jr), "%s/vgpu/checkpoint.journal", state);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
    char a_conf[900];
    snprintf(a_conf, sizeof(a_conf), "%s/vgpu/uid-a/main/config", state);
    char *conf_before = slurp(a_conf);
    REQUIRE(conf_before != NULL);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 40, &r, err, sizeof(err)), 0); /* b: cores only */
    /* two containers took two spare directories; making them back */
    CHECK_EQ_U64(vgpu_spare_fill(v, 0), 2);
    CHECK_EQ_U64(vgpu_spare_fill(v, 1), 1);
    CHECK_EQ_U64(vgpu_spare_fill(v, 8), 0);
    /* three changes, three lines; the snapshot is the one written at start */
    CHECK_EQ_INT((int)count_lines(jr), 3);
    char *snap = slurp(cp);
    CHECK(snap && strstr(snap, "\"assignments\":[]"));
    free(snap);
    struct stat st;
    REQUIRE_EQ_INT(stat(jr, &st), 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0600);
    node_close(&nd); /* "killed" */

    /* the machine stopped: a's config never reached the disk, and the last
     * journal line was cut in the middle */
    REQUIRE_EQ_INT(unlink(a_conf), 0);
    append_text(jr, "{\"set\":{\"podUID\":\"uid-z\",\"namesp");
    v = make(1, 16 * GiB, VGPU_BINPACK, true);
    REQUIRE(v != NULL);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2); /* a and b's half; not the cut z */
    char *conf_after = slurp(a_conf);
    CHECK(conf_after && strcmp(conf_after, conf_before) == 0); /* rebuilt, the same */
    free(conf_after);
    free(conf_before);
    /* folded: the snapshot holds both, the journal is empty */
    CHECK_EQ_INT((int)count_lines(jr), 0);
    REQUIRE_EQ_INT(stat(jr, &st), 0);
    CHECK_EQ_INT((int)st.st_size, 0);
    snap = slurp(cp);
    CHECK(snap && strstr(snap, "uid-a") && strstr(snap, "uid-b") && !strstr(snap, "uid-z"));
    free(snap);

    /* b never got its second Allocate (its admission failed): a new container's
     * first call drops it, and the drop is journaled */
    n_table = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    add_pod("uid-c", "c", "main", 300, 10, 4, NULL);
    node_open(&nd, v);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 10, &r, err, sizeof(err)), 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2); /* a, c */
    char *j = slurp(jr);
    CHECK(j && strstr(j, "{\"drop\":{") && strstr(j, "uid-b"));
    free(j);
    node_close(&nd);
    v = make(1, 16 * GiB, VGPU_BINPACK, true);
    REQUIRE(v != NULL);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    uint64_t fc, fm;
    vgpu_gpu_free_units(v, 0, &fc, &fm);
    CHECK_EQ_U64(fc, 100 - 30 - 10); /* b's 40 cores did not come back */
    vgpu_free(v);

    /* a broken line that is not the last is refused, saying what to do */
    append_text(jr, "not json\n{\"drop\":{\"podUID\":\"uid-a\",\"container\":\"main\"}}\n");
    v = make(1, 16 * GiB, VGPU_BINPACK, true);
    CHECK(v == NULL);
    struct vgpu_gpu_desc g = {"GPU-00000000-1111-2222-3333-444455556666", 0, 0, 16 * GiB, true};
    char lib[700];
    snprintf(lib, sizeof(lib), "%s/libvcuda.so", tap_tmpdir());
    struct vgpu_options o = {state, lib, "/nonexistent", UNIT, VGPU_BINPACK};
    CHECK_EQ_INT(vgpu_new(&g, 1, &o, &table_pods, &v, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "broken line 1") && strstr(err, "move it away"));
}

/* Spares: a pod's first container takes a whole spare (it becomes the pod's directory), its
 * second only the spare's container directory (leaving a shell the next fill completes); both
 * get their config and a 0777 region; a full refill makes 128 again. */
TEST(spares_for_a_pods_containers)
{
    n_table = 0;
    add_pod("uid-m", "m", "main", 100, 30, 8, NULL);
    add_pod("uid-m", "m", "side", 100, 20, 4, NULL);
    struct node nd;
    struct vgpu *v = make(1, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    CHECK_EQ_U64(vgpu_spare_fill(v, 0), 0);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    const char *ctrs[] = {"main", "side"};
    for (int c = 0; c < 2; c++) {
        REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, c ? 20 : 30, &r, err, sizeof(err)), 0);
        char *cfg = config_of(r); /* the mounts come with the cores */
        REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, c ? 4 : 8, &r, err, sizeof(err)), 0);
        CHECK(cfg && strstr(cfg, c ? "core_limit = 20\n" : "core_limit = 30\n"));
        free(cfg);
        char d[900];
        struct stat st;
        snprintf(d, sizeof(d), "%s/vgpu/uid-m/%s/region", state, ctrs[c]);
        REQUIRE_EQ_INT(stat(d, &st), 0);
        CHECK_EQ_INT(st.st_mode & 0777, 0777);
        snprintf(d, sizeof(d), "%s/vgpu/uid-m/%s/config", state, ctrs[c]);
        REQUIRE_EQ_INT(stat(d, &st), 0);
        CHECK_EQ_INT(st.st_mode & 0777, 0644);
    }
    CHECK_EQ_U64(vgpu_spare_fill(v, 0), 2);
    CHECK_EQ_U64(vgpu_spare_fill(v, 8), 0);
    /* 127 spares on disk, one of them the completed shell; each has c/config and c/region */
    char d[900];
    snprintf(d, sizeof(d), "%s/vgpu/.spare", state);
    DIR *dir = opendir(d);
    REQUIRE(dir != NULL);
    int n = 0, whole = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        n++;
        char f[1200];
        struct stat st;
        snprintf(f, sizeof(f), "%s/%s/c/config", d, e->d_name);
        bool ok = stat(f, &st) == 0 && st.st_size == 0;
        snprintf(f, sizeof(f), "%s/%s/c/region", d, e->d_name);
        whole += ok && stat(f, &st) == 0 && S_ISDIR(st.st_mode);
    }
    closedir(dir);
    CHECK_EQ_INT(n, VGPU_SPARES);
    CHECK_EQ_INT(whole, VGPU_SPARES);
    node_close(&nd);
}

TEST(bad_options_and_checkpoint)
{
    struct vgpu_gpu_desc g[] = {{"GPU-a", 0, 0, 16 * GiB, true}, {"GPU-a", 1, 0, 16 * GiB, true}};
    struct vgpu_options o = {"/tmp", "/lib/libvcuda.so", "/dev", UNIT, VGPU_BINPACK};
    struct vgpu *v = NULL;
    char err[512];
    CHECK_EQ_INT(vgpu_new(g, 2, &o, &table_pods, &v, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "repeated") != NULL);
    /* more units than six digits can number: refused, saying what to raise */
    struct vgpu_gpu_desc huge[] = {{"GPU-h", 0, 0, 1024 * GiB, true}};
    struct vgpu_options small = {tap_tmpdir(), "/lib/libvcuda.so", "/dev", 1u << 20, VGPU_BINPACK};
    CHECK_EQ_INT(vgpu_new(huge, 1, &small, &table_pods, &v, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "raise vgpu.memoryUnit") != NULL);
    o.library = "relative.so";
    CHECK_EQ_INT(vgpu_new(g, 1, &o, &table_pods, &v, err, sizeof(err)), -EINVAL);
    /* a checkpoint that cannot be parsed stops the start, saying what to do */
    snprintf(state, sizeof(state), "%s/broken", tap_tmpdir());
    char p[700];
    snprintf(p, sizeof(p), "%s/vgpu", state);
    REQUIRE_EQ_INT(fs_mkdir_p(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/vgpu/checkpoint.json", state);
    REQUIRE_EQ_INT(fs_write_atomic(p, "{\"version\":1,", 13, 0600), 0);
    o.state_dir = state;
    o.library = "/lib/libvcuda.so";
    CHECK_EQ_INT(vgpu_new(g, 1, &o, &table_pods, &v, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "move it away") != NULL);
    CHECK(v == NULL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
