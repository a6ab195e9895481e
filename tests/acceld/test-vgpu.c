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
#include "util.h"
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

/* Pods the "watch cache" knows beyond the pending table: uid -> state (admitted pods keep
 * their pending row in the table, as a test needs them; their state is set here). */
static struct {
    const char *uid, *ns, *name;
    enum vgpu_pod_state state;
} known[16];
static size_t n_known;

static void set_state(const char *uid, const char *name, enum vgpu_pod_state st)
{
    for (size_t i = 0; i < n_known; i++)
        if (strcmp(known[i].uid, uid) == 0) {
            known[i].state = st;
            return;
        }
    known[n_known++] = (typeof(known[0])){uid, "default", name, st};
}

static enum vgpu_pod_state t_pod_state(void *self, const char *uid)
{
    for (size_t i = 0; i < n_known; i++)
        if (strcmp(known[i].uid, uid) == 0)
            return known[i].state;
    for (size_t i = 0; i < n_table; i++)
        if (strcmp(table[i].pod_uid, uid) == 0)
            return VGPU_POD_PENDING;
    return VGPU_POD_DONE;
}

static const char *t_pod_uid(void *self, const char *ns, const char *name)
{
    for (size_t i = 0; i < n_known; i++)
        if (strcmp(known[i].ns, ns) == 0 && strcmp(known[i].name, name) == 0)
            return known[i].uid;
    for (size_t i = 0; i < n_table; i++)
        if (strcmp(table[i].namespace, ns) == 0 && strcmp(table[i].pod_name, name) == 0)
            return table[i].pod_uid;
    return NULL;
}

static int n_doubts; /* the relists Allocates asked for */

static void t_doubt(void *self)
{
    (void)self;
    n_doubts++;
}

static const struct vgpu_pods_ops table_ops = {.pending = t_pending,
                                               .annotate = t_annotate,
                                               .pod_state = t_pod_state,
                                               .pod_uid = t_pod_uid,
                                               .doubt = t_doubt};
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
    size_t cursor[2];   /* the "kubelet" hands out IDs from the end of the list */
    char *last[2][128]; /* the IDs the last Allocate of each resource named */
    size_t n_last[2];
};

static void forget_last(struct node *nd, int r)
{
    for (size_t i = 0; i < nd->n_last[r]; i++)
        free(nd->last[r][i]);
    nd->n_last[r] = 0;
}

static void node_open(struct node *nd, struct vgpu *v)
{
    nd->v = v;
    for (int r = 0; r < 2; r++) {
        struct acceld_provider p = vgpu_provider(v, (enum vgpu_resource)r);
        if (acceld_wire_new(&p, &nd->w[r]) < 0)
            abort();
        nd->cursor[r] = 0;
        nd->n_last[r] = 0;
    }
}

static void node_close(struct node *nd)
{
    for (int r = 0; r < 2; r++) {
        nd->w[r] = acceld_wire_free(nd->w[r]);
        forget_last(nd, r);
    }
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
    forget_last(nd, r);
    for (size_t i = 0; i < amount; i++) {
        if (rc == 0 && i < 128)
            nd->last[r][nd->n_last[r]++] = ids[i];
        else
            free(ids[i]);
    }
    free(ids);
    return rc;
}

/* The kubelet's record of a container (pod-resources): the IDs the last Allocate of each
 * resource in mask (1 cores, 2 memory) named. */
static void hold(struct node *nd, struct vgpu_live *l, const char *pod, int mask)
{
    vgpu_live_init(l, "default", pod, "main");
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; (mask & (1 << r)) && i < nd->n_last[r]; i++)
            vgpu_live_add_id(nd->v, l, (enum vgpu_resource)r, nd->last[r][i]);
}

/* A reconcile as the agent runs it, past the grace of the last Allocate. */
static int settle(struct vgpu *v, const struct vgpu_live *live, size_t n,
                  struct vgpu_reconcile_result *res)
{
    return vgpu_reconcile(v, live, n, mono_ns() + 2 * VGPU_RECONCILE_GRACE_NS, res);
}

/* Whether <state>/vgpu/<sub> exists. */
static bool in_state(const char *sub)
{
    char p[1200];
    snprintf(p, sizeof(p), "%s/vgpu/%s", state, sub);
    struct stat st;
    return stat(p, &st) == 0;
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
    n_table = 0, n_known = 0;
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
    n_table = 0, n_known = 0;
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
    /* the memory answer is empty: the env, nodes and mounts came with the cores answer */
    CHECK(env(am, "NVIDIA_VISIBLE_DEVICES") == NULL);
    CHECK_EQ_INT(am->n_mounts, 0);
    CHECK_EQ_INT(am->n_devices, 0);
    /* pod b: memory first; its answer is empty too */
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 32, &bm, err, sizeof(err)), 0);
    CHECK(env(bm, "NVIDIA_VISIBLE_DEVICES") == NULL);
    CHECK_EQ_INT(bm->n_mounts, 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 70, &bc, err, sizeof(err)), 0);
    CHECK_EQ_STR(env(bc, "NVIDIA_VISIBLE_DEVICES"), a_gpu); /* binpack: the same GPU */
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
    n_table = 0, n_known = 0;
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
    /* the extender's annotation wins (c's memory first: its cores answer names the GPU) */
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 4, &r, err, sizeof(err)), 0);
    CHECK_EQ_STR(last_pod, "default/c");
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 10, &r, err, sizeof(err)), 0);
    CHECK_EQ_STR(env(r, "NVIDIA_VISIBLE_DEVICES"), "GPU-00000000-1111-2222-3333-444455556666");
    node_close(&nd);
}

TEST(whole_gpus_and_no_fit)
{
    n_table = 0, n_known = 0;
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
    n_table = 0, n_known = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    table_error = -EHOSTUNREACH;
    struct node nd;
    struct vgpu *v = make(1, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    int before = n_annotated, doubts = n_doubts;
    /* not refused at once: the transport waits (allocateWait) for the watch to come back, and
     * the Allocate asks for a LIST meanwhile (the watch's backoff can outlast allocateWait) */
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), -EAGAIN);
    CHECK(strstr(err, "API server") != NULL && strstr(err, "connection refused") != NULL);
    CHECK_EQ_INT(n_doubts, doubts + 1);
    CHECK_EQ_INT(vgpu_assignment_count(v), 0);
    CHECK_EQ_INT(n_annotated, before);
    table_error = 0;
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    node_close(&nd);
}

TEST(unhealthy_gpu_takes_its_units)
{
    n_table = 0, n_known = 0;
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

/* kill -9 between the two resources' Allocates: the kubelet's second call finds no acceld and
 * fails the pod for good (it never calls again; a restarted kubelet admits it anew). The
 * restarted provider frees that half share and does not hand the pod's identity to the next
 * call; the complete assignment survives with its config. Then the books follow the kubelet:
 * a complete share no live container holds is freed (its directory removed) once its pod is
 * gone, never while the pod runs, and one still waiting for its second Allocate is kept. */
TEST(restart_between_resources_and_reconcile)
{
    n_table = 0, n_known = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    add_pod("uid-b", "b", "main", 200, 40, 8, NULL);
    struct node nd;
    struct vgpu *v = make(2, 16 * GiB, VGPU_SPREAD, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    char a_gpu[64];
    snprintf(a_gpu, sizeof(a_gpu), "%s", env(r, "NVIDIA_VISIBLE_DEVICES"));
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
    struct vgpu_live a_live;
    hold(&nd, &a_live, "a", 2);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 8, &r, err, sizeof(err)), 0);
    node_close(&nd); /* "killed": nothing but the files survives */

    v = make(2, 16 * GiB, VGPU_SPREAD, true);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1); /* a; b's half is free */
    CHECK(!in_state("uid-b"));
    /* b's pod is still Pending (its Failed status is late): the next call of 40 cores is not
     * taken for b's, nor matched to b */
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 40, &r, err, sizeof(err)), -EAGAIN);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    uint64_t fc, fm;
    int gi = strcmp(a_gpu, "GPU-00000000-1111-2222-3333-444455556666") == 0 ? 0 : 1;
    vgpu_gpu_free_units(v, (size_t)1 - (size_t)gi, &fc, &fm);
    CHECK_EQ_U64(fc, 100);
    CHECK_EQ_U64(fm, 64);
    char *cfg = NULL;
    char path[900];
    snprintf(path, sizeof(path), "%s/vgpu/uid-a/main/config", state);
    CHECK((cfg = slurp(path)) && strstr(cfg, "memory_limit = 4294967296\n") &&
          strstr(cfg, "core_limit = 30\n"));
    free(cfg);

    /* c admitted (both resources), d half-way (cores only) */
    add_pod("uid-c", "c", "main", 300, 10, 4, NULL);
    add_pod("uid-d", "d", "main", 400, 5, 2, NULL);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 10, &r, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 4, &r, err, sizeof(err)), 0);
    struct vgpu_live c_live;
    hold(&nd, &c_live, "c", 2);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 5, &r, err, sizeof(err)), 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 3);
    /* the kubelet lists c only; a's pod still runs: kept (a running pod's container holds
     * its IDs whatever a List says); d waits for its second Allocate: kept */
    set_state("uid-a", "a", VGPU_POD_RUNNING);
    struct vgpu_reconcile_result res;
    CHECK_EQ_INT(settle(v, &c_live, 1, &res), 0);
    CHECK_EQ_INT(res.freed, 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 3);
    /* a's pod is gone: freed, its directory removed */
    set_state("uid-a", "a", VGPU_POD_DONE);
    CHECK_EQ_INT(settle(v, &c_live, 1, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    CHECK(!in_state("uid-a"));
    CHECK(in_state("uid-c/main/config"));
    /* a's listed under its IDs would have kept it: the List is the record (checked next) */
    node_close(&nd);
    /* the settled checkpoint is what a restart sees; d's half, its cores answered (the
     * mounts handed out), is kept, no candidate, until a settling finds no container holding
     * it: then freed */
    v = make(2, 16 * GiB, VGPU_SPREAD, true);
    REQUIRE(v != NULL);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    CHECK_EQ_INT(settle(v, &c_live, 1, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    CHECK(!in_state("uid-d"));
    vgpu_free(v);
    (void)a_live;
}

/* Issue 22, F12 (and F1's removal half): a container's region dir is a small tmpfs of its own
 * (when this test runs as root, in its private mount namespace), so writing into it fills
 * only it; what the tenant leaves there — nested directories, files, a symlink to a directory
 * of acceld's — goes with the assignment, and nothing a link points to is touched. Before, the
 * dir was a plain 0777 directory on the state filesystem, and a non-empty subdirectory
 * survived the pod. */
TEST(region_dir_is_bounded_and_removed_whole)
{
    n_table = 0;
    add_pod("uid-t", "t", "main", 100, 30, 16, NULL);
    struct node nd;
    struct vgpu *v = make(1, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
    char region[800], p[900], keep[800];
    snprintf(region, sizeof(region), "%s/vgpu/uid-t/main/region", state);
    struct stat st, parent;
    REQUIRE_EQ_INT(stat(region, &st), 0);
    CHECK_EQ_INT(st.st_mode & 07777, 0777);
    snprintf(p, sizeof(p), "%s/..", region);
    REQUIRE_EQ_INT(stat(p, &parent), 0);
    if (geteuid() == 0) {
        CHECK(st.st_dev != parent.st_dev); /* a filesystem of its own */
        snprintf(p, sizeof(p), "%s/fill", region);
        int fd = open(p, O_WRONLY | O_CREAT, 0644);
        REQUIRE(fd >= 0);
        static char chunk[64 << 10];
        size_t wrote = 0;
        ssize_t w;
        while (wrote < (16u << 20) && (w = write(fd, chunk, sizeof(chunk))) > 0)
            wrote += (size_t)w;
        int e = errno;
        close(fd);
        CHECK(wrote < (1u << 20)); /* stopped at the tmpfs's size */
        CHECK_EQ_INT(e, ENOSPC);
    } else {
        tap_diag("not root: the region dir cannot be a tmpfs here (plain directory)");
    }
    /* what the tenant leaves behind */
    snprintf(keep, sizeof(keep), "%s/vgpu/checkpoint.json", state);
    REQUIRE_EQ_INT(stat(keep, &st), 0);
    off_t keep_size = st.st_size;
    snprintf(p, sizeof(p), "%s/d", region);
    REQUIRE_EQ_INT(mkdir(p, 0777), 0);
    snprintf(p, sizeof(p), "%s/d/e", region);
    REQUIRE_EQ_INT(mkdir(p, 0777), 0);
    snprintf(p, sizeof(p), "%s/d/e/f", region);
    close(open(p, O_WRONLY | O_CREAT, 0644));
    snprintf(p, sizeof(p), "%s/d/state", region);
    char target[800];
    snprintf(target, sizeof(target), "%s/vgpu", state);
    REQUIRE_EQ_INT(symlink(target, p), 0);
    /* the pod ends: the kubelet lists another pod's container only */
    n_table = 0;
    set_state("uid-t", "t", VGPU_POD_DONE);
    struct vgpu_live other;
    vgpu_live_init(&other, "default", "other", "main");
    struct vgpu_reconcile_result res;
    CHECK_EQ_INT(settle(v, &other, 1, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
    snprintf(p, sizeof(p), "%s/vgpu/uid-t", state);
    CHECK(stat(p, &st) < 0 && errno == ENOENT); /* all of it gone */
    REQUIRE_EQ_INT(stat(keep, &st), 0);         /* what the link pointed into: untouched */
    CHECK(st.st_size >= keep_size);
    node_close(&nd);
}

/* A container whose admission failed between its two Allocates (its pod no
 * longer pending) neither catches the next container's call of the same
 * amount nor keeps its share. */
TEST(abandoned_half_assignment)
{
    n_table = 0, n_known = 0;
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
    /* y's half, its cores answered (the mounts handed out), is no candidate and is kept
     * until the kubelet's List shows no container holding it */
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    struct vgpu_live xl;
    hold(&nd, &xl, "x", 2);
    struct vgpu_reconcile_result res;
    CHECK_EQ_INT(settle(v, &xl, 1, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
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
    n_table = 0, n_known = 0;
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
    CHECK_EQ_U64(vgpu_spare_fill(v, 0, NULL), 2);
    CHECK_EQ_U64(vgpu_spare_fill(v, 1, NULL), 1);
    CHECK_EQ_U64(vgpu_spare_fill(v, 8, NULL), 0);
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
    /* a; not the cut z; b's half is kept, no candidate for any call: acceld stopped between
     * b's two Allocates, so the kubelet's second one failed the pod for good, but its cores
     * answer handed out the mounts, so it goes only once a settling finds no container
     * holding it */
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    char *conf_after = slurp(a_conf);
    CHECK(conf_after && strcmp(conf_after, conf_before) == 0); /* rebuilt, the same */
    free(conf_after);
    free(conf_before);
    /* folded: the snapshot holds a, the journal is empty */
    CHECK_EQ_INT((int)count_lines(jr), 0);
    REQUIRE_EQ_INT(stat(jr, &st), 0);
    CHECK_EQ_INT((int)st.st_size, 0);
    snap = slurp(cp);
    CHECK(snap && strstr(snap, "uid-a") && strstr(snap, "uid-b") && !strstr(snap, "uid-z"));
    free(snap);
    struct vgpu_reconcile_result res;
    CHECK_EQ_INT(settle(v, NULL, 0, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    snap = slurp(cp);
    CHECK(snap && strstr(snap, "uid-a") && !strstr(snap, "uid-b"));
    free(snap);
    uint64_t fc, fm;
    vgpu_gpu_free_units(v, 0, &fc, &fm);
    CHECK_EQ_U64(fc, 100 - 30); /* b's 40 cores are free */

    /* c's first Allocate is journaled */
    n_table = 0, n_known = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    add_pod("uid-b", "b", "main", 200, 40, 8, NULL);
    add_pod("uid-c", "c", "main", 300, 10, 4, NULL);
    node_open(&nd, v);
    /* b is still Pending (its Failed status is late): not matched to a 40-core call */
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 40, &r, err, sizeof(err)), -EAGAIN);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 10, &r, err, sizeof(err)), 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2); /* a, c */
    char *j = slurp(jr);
    CHECK(j && strstr(j, "{\"set\":{") && strstr(j, "uid-c"));
    free(j);
    node_close(&nd);
    v = make(1, 16 * GiB, VGPU_BINPACK, true);
    REQUIRE(v != NULL);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2); /* c was half-way too: kept until settled */
    CHECK_EQ_INT(settle(v, NULL, 0, &res), 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    vgpu_gpu_free_units(v, 0, &fc, &fm);
    CHECK_EQ_U64(fc, 100 - 30);
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
    n_table = 0, n_known = 0;
    add_pod("uid-m", "m", "main", 100, 30, 8, NULL);
    add_pod("uid-m", "m", "side", 100, 20, 4, NULL);
    struct node nd;
    struct vgpu *v = make(1, 16 * GiB, VGPU_BINPACK, false);
    REQUIRE(v != NULL);
    CHECK_EQ_U64(vgpu_spare_fill(v, 0, NULL), 0);
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
    CHECK_EQ_U64(vgpu_spare_fill(v, 0, NULL), 2);
    CHECK_EQ_U64(vgpu_spare_fill(v, 8, NULL), 0);
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

/* ------------------------------------------------------------ issue 23: the books */

/* A node of n GPUs for a test: the provider opened through the wire. NULL on failure. */
static struct vgpu *open_node(struct node *nd, size_t n, enum vgpu_policy policy)
{
    struct vgpu *v = make(n, 16 * GiB, policy, false);
    if (v)
        node_open(nd, v);
    return v;
}

/* A container admitted as the kubelet does: cores, then memory (the one with the mounts
 * comes back through *ret). 0 or the failing Allocate's rc. */
static int admit(struct node *nd, uint64_t cores, uint64_t mem,
                 V1beta1__ContainerAllocateResponse **ret)
{
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *m;
    int rc = alloc(nd, VGPU_CORES, cores, ret, err, sizeof(err));
    if (rc == 0)
        rc = alloc(nd, VGPU_MEMORY, mem, &m, err, sizeof(err));
    if (rc < 0)
        tap_diag("admit %llu/%llu: %d %s", (unsigned long long)cores, (unsigned long long)mem, rc,
                 err);
    return rc;
}

/* The directory a response's config mount lives in ("" if none). */
static void dir_of(const V1beta1__ContainerAllocateResponse *r, char *out, size_t len)
{
    const V1beta1__Mount *m = mount(r, VGPU_CONTAINER_CONFIG);
    snprintf(out, len, "%s", m ? m->host_path : "");
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = '\0';
}

/* Finding 1: a deleted pod's share is freed by the next reconcile (acceld settles at once
 * when the watch says a pod is gone), not only at the next start: on a 1-GPU node, a 60-core
 * pod deleted leaves room for the next 60-core pod. */
TEST(deleted_pods_share_is_freed)
{
    n_table = 0, n_known = 0;
    add_pod("uid-old", "old", "main", 100, 60, 8, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 1, VGPU_BINPACK);
    REQUIRE(v != NULL);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(admit(&nd, 60, 8, &r), 0);
    /* the pod is deleted: the watch drops it, the kubelet lists nothing */
    n_table = 0;
    set_state("uid-old", "old", VGPU_POD_DONE);
    struct vgpu_reconcile_result res;
    CHECK_EQ_INT(settle(v, NULL, 0, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
    CHECK(!in_state("uid-old"));
    nd.cursor[0] = nd.cursor[1] = 0; /* the kubelet freed the old pod's IDs */
    add_pod("uid-new", "new", "main", 200, 60, 8, NULL);
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 60, &r, err, sizeof(err)), 0);
    CHECK_EQ_INT(alloc(&nd, VGPU_MEMORY, 8, &r, err, sizeof(err)), 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    /* without a watch cache, the List alone: freed when its pod is terminal (reconcile_pods) */
    set_state("uid-new", "new", VGPU_POD_DONE);
    CHECK_EQ_INT(vgpu_reconcile_pods(v), 1);
    CHECK_EQ_INT(vgpu_assignment_count(v), 0);
    node_close(&nd);
}

/* Finding 3: a pod whose Allocate acceld refused stays Pending in the watch cache until its
 * Failed status arrives; the next identical pod's Allocate must not get its identity (its
 * directory, config, annotation). */
TEST(refused_pod_is_no_candidate)
{
    n_table = 0, n_known = 0;
    add_pod("uid-x", "x", "main", 50, 60, 8, NULL);
    add_pod("uid-y", "y", "main", 60, 60, 8, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 2, VGPU_SPREAD);
    REQUIRE(v != NULL);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    for (int i = 0; i < 2; i++) { /* x and y: 60 cores on each GPU */
        REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 60, &r, err, sizeof(err)), 0);
        REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 8, &r, err, sizeof(err)), 0);
    }
    /* p asks for 50 cores: 80 are free on the node, but no GPU has 50: refused (the kubelet
     * fails p for good) */
    set_state("uid-x", "x", VGPU_POD_RUNNING);
    set_state("uid-y", "y", VGPU_POD_RUNNING);
    n_table = 0;
    add_pod("uid-p", "p", "main", 100, 50, 8, NULL);
    CHECK_EQ_INT(alloc(&nd, VGPU_CORES, 50, &r, err, sizeof(err)), -ENOSPC);
    /* x ends; q, identical to p, is admitted while p's Failed status is still on its way */
    set_state("uid-x", "x", VGPU_POD_DONE);
    struct vgpu_reconcile_result res;
    REQUIRE_EQ_INT(settle(v, NULL, 0, &res), 0);
    REQUIRE_EQ_INT(res.freed, 1);
    add_pod("uid-q", "q", "main", 200, 50, 8, NULL);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 50, &r, err, sizeof(err)), 0);
    CHECK_EQ_STR(last_pod, "default/q");
    char dir[900];
    dir_of(r, dir, sizeof(dir));
    CHECK(strstr(dir, "/uid-q/main") != NULL);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 8, &r, err, sizeof(err)), 0);
    CHECK(!in_state("uid-p"));
    /* p's Failed status arrives: q keeps its share and directory */
    set_state("uid-p", "p", VGPU_POD_DONE);
    set_state("uid-q", "q", VGPU_POD_RUNNING);
    n_table = 0;
    struct vgpu_live q;
    hold(&nd, &q, "q", 3);
    REQUIRE_EQ_INT(settle(v, &q, 1, &res), 0);
    CHECK_EQ_INT(res.freed, 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2); /* y, q */
    CHECK(in_state("uid-q/main/config"));
    node_close(&nd);
}

/* Finding 4: the kubelet restarts while admitting p (after p's first Allocate) and admits p
 * again with new IDs, in either order; its neighbour n (identical, newer, pending) is not
 * touched; n's own admission later gets n's own share, and p's directory stays. */
static void readmission(bool same_order)
{
    n_table = 0, n_known = 0;
    add_pod("uid-p", "p", "main", 100, 30, 16, NULL);
    add_pod("uid-n", "n", "main", 200, 30, 16, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 2, VGPU_SPREAD);
    REQUIRE(v != NULL);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    char p_dir[900];
    dir_of(r, p_dir, sizeof(p_dir));
    CHECK(strstr(p_dir, "/uid-p/main") != NULL);
    /* the kubelet restarts: both endpoints see it */
    struct acceld_provider pc = vgpu_provider(v, VGPU_CORES), pm = vgpu_provider(v, VGPU_MEMORY);
    pc.ops->kubelet_restarted(pc.self);
    pm.ops->kubelet_restarted(pm.self);
    if (same_order) {
        REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
        char again[900];
        dir_of(r, again, sizeof(again));
        CHECK_EQ_STR(again, p_dir);
        REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
    } else {
        REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
        REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
        char again[900];
        dir_of(r, again, sizeof(again));
        CHECK_EQ_STR(again, p_dir); /* p's own directory, not n's */
    }
    CHECK_EQ_INT(vgpu_assignment_count(v), 1); /* p only: n has nothing yet */
    CHECK(!in_state("uid-n"));
    /* n's admission: its own share; p's directory stays */
    set_state("uid-p", "p", VGPU_POD_RUNNING);
    table[0] = table[1];
    n_table = 1;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    char n_dir[900];
    dir_of(r, n_dir, sizeof(n_dir));
    CHECK(strstr(n_dir, "/uid-n/main") != NULL);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    CHECK(in_state("uid-p/main/config"));
    uint64_t fc0, fm0, fc1, fm1;
    vgpu_gpu_free_units(v, 0, &fc0, &fm0);
    vgpu_gpu_free_units(v, 1, &fc1, &fm1);
    CHECK_EQ_U64(fc0 + fc1, 200 - 60); /* two shares of 30, nothing held twice */
    node_close(&nd);
}

TEST(kubelet_restart_readmits_in_the_same_order)
{
    readmission(true);
}

TEST(kubelet_restart_readmits_in_the_other_order)
{
    readmission(false);
}

/* The device-plugin API cannot tell identical pending pods apart: q's Allocates were matched
 * to p (older, pending: its admission failed elsewhere, its status late). The kubelet's List
 * says q's container holds those IDs: the share becomes q's, its directory (which q mounts)
 * kept; p's Failed status frees nothing; q's end frees it. */
TEST(identity_follows_the_kubelets_ids)
{
    n_table = 0, n_known = 0;
    add_pod("uid-p", "p", "main", 100, 30, 16, NULL);
    add_pod("uid-q", "q", "main", 200, 30, 16, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 1, VGPU_BINPACK);
    REQUIRE(v != NULL);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0); /* q's, taken for p */
    char dir[900];
    dir_of(r, dir, sizeof(dir));
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
    CHECK_EQ_STR(last_pod, "default/p");
    struct vgpu_live q;
    hold(&nd, &q, "q", 3);
    /* p fails; q runs */
    set_state("uid-p", "p", VGPU_POD_DONE);
    set_state("uid-q", "q", VGPU_POD_RUNNING);
    n_table = 0;
    struct vgpu_reconcile_result res;
    REQUIRE_EQ_INT(settle(v, &q, 1, &res), 0);
    CHECK_EQ_INT(res.freed, 0);
    CHECK_EQ_INT(res.renamed, 1);
    CHECK_EQ_STR(last_pod, "default/q"); /* the annotation follows */
    struct vgpu_assignment_info ai;
    REQUIRE_EQ_INT(vgpu_assignment_get(v, 0, &ai), 0);
    CHECK_EQ_STR(ai.pod_uid, "uid-q");
    CHECK_EQ_STR(ai.pod, "q");
    char region[1000];
    snprintf(region, sizeof(region), "%s/region", dir);
    CHECK_EQ_STR(ai.region, region); /* the directory q mounts */
    CHECK(in_state("uid-p/main/config"));
    /* settled again: nothing moves; a restart keeps it (the directory is checkpointed) */
    REQUIRE_EQ_INT(settle(v, &q, 1, &res), 0);
    CHECK(res.freed == 0 && res.renamed == 0 && res.orphans == 0);
    node_close(&nd);
    v = make(1, 16 * GiB, VGPU_BINPACK, true);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    REQUIRE_EQ_INT(settle(v, &q, 1, &res), 0);
    CHECK(res.freed == 0 && res.renamed == 0 && res.orphans == 0 && res.adopted == 0);
    CHECK(in_state("uid-p/main/config"));
    /* q ends: freed with its directory */
    set_state("uid-q", "q", VGPU_POD_DONE);
    REQUIRE_EQ_INT(settle(v, NULL, 0, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
    CHECK(!in_state("uid-p"));
    node_close(&nd);
}

/* The fault campaign's finds (issue 23). A pod that stays Pending (its admission forgotten)
 * catches an identical pod's Allocates twice: the first share, renamed to the container that
 * holds its IDs, keeps uid-p/main (that container mounts it), so the second gets a directory
 * of its own. Before, both were answered with uid-p/main. */
TEST(a_kept_directory_is_never_handed_out_again)
{
    n_table = 0, n_known = 0;
    add_pod("uid-p", "p", "main", 100, 10, 2, NULL);
    add_pod("uid-q", "q", "main", 200, 10, 2, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 1, VGPU_BINPACK);
    REQUIRE(v != NULL);
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(admit(&nd, 10, 2, &r), 0); /* q's, taken for p (p is older) */
    char first[900], second[900];
    dir_of(r, first, sizeof(first));
    struct vgpu_live q;
    hold(&nd, &q, "q", 3);
    set_state("uid-q", "q", VGPU_POD_RUNNING);
    struct vgpu_reconcile_result res;
    REQUIRE_EQ_INT(settle(v, &q, 1, &res), 0);
    CHECK_EQ_INT(res.renamed, 1);
    /* r, identical, while p is still Pending: taken for p again, in a directory of its own */
    n_table = 0;
    add_pod("uid-p", "p", "main", 100, 10, 2, NULL);
    add_pod("uid-r", "r", "main", 300, 10, 2, NULL);
    REQUIRE_EQ_INT(admit(&nd, 10, 2, &r), 0);
    dir_of(r, second, sizeof(second));
    CHECK(strcmp(first, second) != 0);
    CHECK(in_state("uid-p/main_1/config"));
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    /* r's share, renamed to r in turn, keeps main_1 across a restart; q's keeps main */
    struct vgpu_live live[2];
    live[0] = q;
    hold(&nd, &live[1], "r", 3);
    set_state("uid-r", "r", VGPU_POD_RUNNING);
    REQUIRE_EQ_INT(settle(v, live, 2, &res), 0);
    CHECK_EQ_INT(res.renamed, 1);
    node_close(&nd);
    v = make(1, 16 * GiB, VGPU_BINPACK, true);
    REQUIRE(v != NULL);
    node_open(&nd, v);
    REQUIRE_EQ_INT(settle(v, live, 2, &res), 0);
    CHECK(res.freed == 0 && res.renamed == 0 && res.orphans == 0 && res.adopted == 0);
    CHECK(in_state("uid-p/main/config") && in_state("uid-p/main_1/config"));
    node_close(&nd);
}

/* The kubelet hands a new container IDs a gone one held (it reuses freed IDs): the same
 * memory units, other cores. The gone pod's share is not the new container's (every
 * resource both know must agree) and is freed. Before, one agreeing resource was enough:
 * the gone pod's share was kept as the new container's second. */
TEST(ids_of_one_resource_are_not_a_holder)
{
    n_table = 0, n_known = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 1, VGPU_BINPACK);
    REQUIRE(v != NULL);
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(admit(&nd, 30, 16, &r), 0);
    /* a is deleted; before any settling, b gets a's memory units and other cores */
    n_table = 0;
    set_state("uid-a", "a", VGPU_POD_DONE);
    add_pod("uid-b", "b", "main", 200, 20, 16, NULL);
    nd.cursor[1] = 0; /* the kubelet freed a's memory units: b gets the same ones */
    REQUIRE_EQ_INT(admit(&nd, 20, 16, &r), 0);
    struct vgpu_live b;
    hold(&nd, &b, "b", 3);
    set_state("uid-b", "b", VGPU_POD_RUNNING);
    struct vgpu_reconcile_result res;
    REQUIRE_EQ_INT(settle(v, &b, 1, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    struct vgpu_assignment_info ai;
    REQUIRE_EQ_INT(vgpu_assignment_get(v, 0, &ai), 0);
    CHECK_EQ_STR(ai.pod_uid, "uid-b");
    CHECK(!in_state("uid-a"));
    node_close(&nd);
}

/* The kubelet hands a new container every ID a gone one held (an identical request gets the
 * same free IDs): two shares carry the IDs it holds. Its share is the one matched to it; the
 * gone pod's is freed. Before, both were taken as held, the gone one's was "left as is until
 * one of them is freed" (fault campaign: a deleted pod's share held until the new pod went). */
TEST(every_id_reused_the_gone_share_is_freed)
{
    n_table = 0, n_known = 0;
    add_pod("uid-a", "a", "main", 100, 10, 2, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 1, VGPU_BINPACK);
    REQUIRE(v != NULL);
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(admit(&nd, 10, 2, &r), 0);
    /* a is deleted; before any settling, b, identical, gets every one of a's IDs */
    n_table = 0;
    set_state("uid-a", "a", VGPU_POD_DONE);
    add_pod("uid-b", "b", "main", 200, 10, 2, NULL);
    nd.cursor[0] = nd.cursor[1] = 0;
    REQUIRE_EQ_INT(admit(&nd, 10, 2, &r), 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    struct vgpu_live b;
    hold(&nd, &b, "b", 3);
    set_state("uid-b", "b", VGPU_POD_RUNNING);
    struct vgpu_reconcile_result res;
    REQUIRE_EQ_INT(settle(v, &b, 1, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
    CHECK_EQ_INT(res.renamed, 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    struct vgpu_assignment_info ai;
    REQUIRE_EQ_INT(vgpu_assignment_get(v, 0, &ai), 0);
    CHECK_EQ_STR(ai.pod_uid, "uid-b");
    CHECK(!in_state("uid-a"));
    CHECK(in_state("uid-b/main/config"));
    node_close(&nd);
}

/* Fault campaign (Failed status 400 ms late): p629 and p630 failed without acceld knowing
 * (it was killed under their calls) and are still Pending. p631 (30 cores, 8 units): its
 * memory call is taken for p630's, its cores call for p629's (the answer with p629's mounts);
 * p632 (30 cores, 4 units): its memory call completes p629's share, its cores call gets a
 * share of its own. p631 mounts p629's share: it is p631's (renamed, directory kept, its
 * memory IDs and amount learned), and p632's share learns its memory. Before, p629's share
 * was no one's (its memory IDs were p632's), p631 was "taken back" on another GPU and p629's
 * directory, which p631 mounts, was removed. */
TEST(the_share_a_container_mounts_is_its_own_whatever_its_other_ids)
{
    n_table = 0, n_known = 0;
    add_pod("uid-p629", "p629", "main", 100, 30, 4, NULL);
    add_pod("uid-p630", "p630", "main", 200, 50, 8, NULL);
    add_pod("uid-p631", "p631", "main", 300, 30, 8, NULL);
    add_pod("uid-p632", "p632", "main", 400, 30, 4, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 1, VGPU_BINPACK);
    REQUIRE(v != NULL);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    struct vgpu_live live[2];
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 8, &r, err, sizeof(err)), 0); /* p631's, as p630's */
    hold(&nd, &live[0], "p631", 2);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0); /* p631's, as p629's */
    for (size_t i = 0; i < nd.n_last[VGPU_CORES]; i++)
        vgpu_live_add_id(v, &live[0], VGPU_CORES, nd.last[VGPU_CORES][i]);
    char mounted[900];
    dir_of(r, mounted, sizeof(mounted));
    REQUIRE(strstr(mounted, "uid-p629/main") != NULL);
    /* p631 runs (out of the pending list); p632's calls, memory first */
    n_table = 0;
    add_pod("uid-p629", "p629", "main", 100, 30, 4, NULL);
    add_pod("uid-p630", "p630", "main", 200, 50, 8, NULL);
    add_pod("uid-p632", "p632", "main", 400, 30, 4, NULL);
    set_state("uid-p631", "p631", VGPU_POD_RUNNING);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 4, &r, err, sizeof(err)), 0); /* completes p629's */
    hold(&nd, &live[1], "p632", 2);
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0); /* p632's own */
    for (size_t i = 0; i < nd.n_last[VGPU_CORES]; i++)
        vgpu_live_add_id(v, &live[1], VGPU_CORES, nd.last[VGPU_CORES][i]);
    /* p629's and p630's Failed statuses come */
    n_table = 0;
    set_state("uid-p629", "p629", VGPU_POD_DONE);
    set_state("uid-p630", "p630", VGPU_POD_DONE);
    set_state("uid-p632", "p632", VGPU_POD_RUNNING);
    struct vgpu_reconcile_result res;
    REQUIRE_EQ_INT(settle(v, live, 2, &res), 0);
    CHECK_EQ_INT(res.renamed, 1);
    CHECK_EQ_INT(res.adopted, 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 2);
    char cfg[1000];
    snprintf(cfg, sizeof(cfg), "%s/config", mounted);
    char *text = slurp(cfg);
    CHECK(text && strstr(text, "memory_limit = 2147483648\n") && strstr(text, "core_limit = 30\n"));
    free(text);
    bool p631 = false, p632 = false;
    for (size_t i = 0; i < vgpu_assignment_count(v); i++) {
        struct vgpu_assignment_info ai;
        REQUIRE_EQ_INT(vgpu_assignment_get(v, i, &ai), 0);
        if (strcmp(ai.pod_uid, "uid-p631") == 0)
            p631 = strstr(ai.region, "uid-p629/main") && ai.cores == 30 &&
                   ai.memory_bytes == 2 * GiB && ai.complete;
        if (strcmp(ai.pod_uid, "uid-p632") == 0)
            p632 = ai.cores == 30 && ai.memory_bytes == 1 * GiB && ai.complete;
    }
    CHECK(p631);
    CHECK(p632);
    node_close(&nd);
}

/* The kubelet fails a pod on its own after acceld answered its memory (not enough cores
 * left, by the kubelet's count), and posts nothing yet: the next identical pod's cores call is
 * taken as the failed pod's second, its memory call as a new container's first. The List
 * tells: the container mounts the share its cores IDs name (the cores answer carries the
 * mounts): that share is its own (directory kept, the memory IDs learned), the half share of
 * its memory call folds into it, and nothing of it goes when the failed pod's status comes. */
TEST(a_call_taken_for_a_kubelet_failed_pod_is_settled)
{
    n_table = 0, n_known = 0;
    add_pod("uid-a", "a", "main", 100, 10, 2, NULL);
    add_pod("uid-b", "b", "main", 200, 10, 2, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 1, VGPU_BINPACK);
    REQUIRE(v != NULL);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 2, &r, err, sizeof(err)), 0); /* a's memory */
    nd.cursor[1] = 0; /* the kubelet fails a: its memory units go back */
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 10, &r, err, sizeof(err)), 0); /* b's cores */
    char mounted[900];
    dir_of(r, mounted, sizeof(mounted));
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 2, &r, err, sizeof(err)), 0); /* b's memory */
    struct vgpu_live b;
    hold(&nd, &b, "b", 3);
    set_state("uid-b", "b", VGPU_POD_RUNNING);
    struct vgpu_reconcile_result res;
    REQUIRE_EQ_INT(settle(v, &b, 1, &res), 0);
    CHECK_EQ_INT(res.renamed, 1);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    struct vgpu_assignment_info ai;
    REQUIRE_EQ_INT(vgpu_assignment_get(v, 0, &ai), 0);
    CHECK_EQ_STR(ai.pod_uid, "uid-b");
    char region[1000];
    snprintf(region, sizeof(region), "%s/region", mounted);
    CHECK_EQ_STR(ai.region, region);
    /* a's Failed status arrives: nothing moves, the mounted directory stays */
    n_table = 0;
    set_state("uid-a", "a", VGPU_POD_DONE);
    REQUIRE_EQ_INT(settle(v, &b, 1, &res), 0);
    CHECK(res.freed == 0 && res.renamed == 0);
    char cfg[1000];
    snprintf(cfg, sizeof(cfg), "%s/config", mounted);
    struct stat st;
    CHECK_EQ_INT(stat(cfg, &st), 0);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    node_close(&nd);
}

/* Finding 8: the checkpoint and its journal deleted while containers live: the start says so,
 * and the first reconcile takes the live containers' shares back from their directories
 * (their GPU from the config acceld wrote) before anything is handed out again; a directory
 * no live container holds is removed. A checkpoint that over-commits a GPU (3 x 60 cores) is
 * settled the same way: the shares no live container holds go. */
TEST(lost_or_overcommitted_record_is_rebuilt)
{
    n_table = 0, n_known = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    add_pod("uid-b", "b", "main", 200, 20, 8, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 2, VGPU_SPREAD);
    REQUIRE(v != NULL);
    char err[1024] = "";
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(alloc(&nd, VGPU_CORES, 30, &r, err, sizeof(err)), 0);
    char a_gpu[64];
    snprintf(a_gpu, sizeof(a_gpu), "%s", env(r, "NVIDIA_VISIBLE_DEVICES"));
    REQUIRE_EQ_INT(alloc(&nd, VGPU_MEMORY, 16, &r, err, sizeof(err)), 0);
    struct vgpu_live a;
    REQUIRE_EQ_INT(admit(&nd, 20, 8, &r), 0);
    node_close(&nd);
    /* a lives (its IDs as the kubelet lists them: 30 cores, 16 units); b is gone */
    vgpu_live_init(&a, "default", "a", "main");
    struct vgpu *tmpv = make(2, 16 * GiB, VGPU_SPREAD, true);
    REQUIRE(tmpv != NULL);
    char id[80];
    for (int i = 0; i < 30; i++) {
        snprintf(id, sizeof(id), "%s-%d", a_gpu, i);
        vgpu_live_add_id(tmpv, &a, VGPU_CORES, id);
    }
    for (int i = 0; i < 16; i++) {
        snprintf(id, sizeof(id), "%s-%d", a_gpu, i);
        vgpu_live_add_id(tmpv, &a, VGPU_MEMORY, id);
    }
    vgpu_free(tmpv);
    char p[900];
    snprintf(p, sizeof(p), "%s/vgpu/checkpoint.json", state);
    REQUIRE_EQ_INT(unlink(p), 0);
    snprintf(p, sizeof(p), "%s/vgpu/checkpoint.journal", state);
    unlink(p);
    n_table = 0;
    set_state("uid-a", "a", VGPU_POD_RUNNING);
    set_state("uid-b", "b", VGPU_POD_DONE);
    v = make(2, 16 * GiB, VGPU_SPREAD, true);
    REQUIRE(v != NULL);
    CHECK(vgpu_books_need_list(v)); /* nothing answered before the List */
    CHECK_EQ_INT(vgpu_assignment_count(v), 0);
    struct vgpu_reconcile_result res;
    REQUIRE_EQ_INT(vgpu_reconcile(v, &a, 1, mono_ns(), &res), 0);
    CHECK_EQ_INT(res.adopted, 1);
    CHECK_EQ_INT(res.orphans, 1); /* b's directory */
    CHECK(!vgpu_books_need_list(v));
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    CHECK(in_state("uid-a/main/config"));
    CHECK(!in_state("uid-b"));
    int gi = strcmp(a_gpu, "GPU-00000000-1111-2222-3333-444455556666") == 0 ? 0 : 1;
    uint64_t fc, fm;
    vgpu_gpu_free_units(v, (size_t)gi, &fc, &fm);
    CHECK_EQ_U64(fc, 70);
    CHECK_EQ_U64(fm, 48);
    vgpu_free(v);

    /* three 60-core shares on one GPU in the checkpoint; only x1 lives */
    snprintf(state, sizeof(state), "%s/overcommit", tap_tmpdir());
    snprintf(p, sizeof(p), "%s/vgpu", state);
    REQUIRE_EQ_INT(fs_mkdir_p(p, 0755), 0);
    char cp[4096];
    size_t at = (size_t)snprintf(cp, sizeof(cp), "{\"version\":1,\"assignments\":[");
    for (int i = 0; i < 3; i++)
        at += (size_t)snprintf(cp + at, sizeof(cp) - at,
                               "%s{\"podUID\":\"uid-x%d\",\"namespace\":\"default\",\"pod\":"
                               "\"x%d\",\"container\":\"main\",\"cores\":60,\"memory\":4,"
                               "\"coresDone\":true,\"memoryDone\":true,\"whole\":false,"
                               "\"gpus\":[\"GPU-00000000-1111-2222-3333-444455556666\"]}",
                               i ? "," : "", i, i);
    snprintf(cp + at, sizeof(cp) - at, "]}");
    snprintf(p, sizeof(p), "%s/vgpu/checkpoint.json", state);
    REQUIRE_EQ_INT(fs_write_atomic(p, cp, strlen(cp), 0600), 0);
    n_known = 0;
    set_state("uid-x0", "x0", VGPU_POD_DONE);
    set_state("uid-x1", "x1", VGPU_POD_RUNNING);
    set_state("uid-x2", "x2", VGPU_POD_DONE);
    struct vgpu_gpu_desc g = {"GPU-00000000-1111-2222-3333-444455556666", 0, 0, 16 * GiB, true};
    char lib[700];
    snprintf(lib, sizeof(lib), "%s/libvcuda.so", tap_tmpdir());
    struct vgpu_options o = {state, lib, "/nonexistent", UNIT, VGPU_BINPACK};
    REQUIRE_EQ_INT(vgpu_new(&g, 1, &o, &table_pods, &v, err, sizeof(err)), 0);
    CHECK(vgpu_books_need_list(v));
    CHECK_EQ_INT(vgpu_assignment_count(v), 3);
    struct vgpu_live x1;
    vgpu_live_init(&x1, "default", "x1", "main");
    vgpu_live_add_id(v, &x1, VGPU_CORES, "GPU-00000000-1111-2222-3333-444455556666-0");
    REQUIRE_EQ_INT(vgpu_reconcile(v, &x1, 1, mono_ns(), &res), 0);
    CHECK_EQ_INT(res.freed, 2);
    CHECK_EQ_INT(vgpu_assignment_count(v), 1);
    vgpu_gpu_free_units(v, 0, &fc, &fm);
    CHECK_EQ_U64(fc, 40);
    vgpu_free(v);
}

/* Finding 7: a temporary file an interrupted write left in a container directory (the config
 * is replaced by tmp + rename) no longer keeps the directory from being removed, and the
 * start removes those of the checkpoint and the preload file. */
TEST(stale_temporary_files_go)
{
    n_table = 0, n_known = 0;
    add_pod("uid-a", "a", "main", 100, 30, 16, NULL);
    struct node nd;
    struct vgpu *v = open_node(&nd, 1, VGPU_BINPACK);
    REQUIRE(v != NULL);
    V1beta1__ContainerAllocateResponse *r;
    REQUIRE_EQ_INT(admit(&nd, 30, 16, &r), 0);
    node_close(&nd);
    /* pid 4194303 (the kernel's pid_max bound) is no process's */
    static const char *const tmps[] = {"uid-a/main/config.tmp.4194303",
                                       "checkpoint.json.tmp.4194303", "ld.so.preload.tmp.4194303",
                                       "status.json.tmp.4194303"};
    for (size_t i = 0; i < ARRAY_SIZE(tmps); i++) {
        char p[1200];
        snprintf(p, sizeof(p), "%s/vgpu/%s", state, tmps[i]);
        REQUIRE_EQ_INT(fs_write_atomic(p, "x", 1, 0600), 0);
    }
    /* one written by another live process (this one's parent) stays */
    char live_tmp[64];
    snprintf(live_tmp, sizeof(live_tmp), "checkpoint.json.tmp.%d", (int)getppid());
    char lp[1200];
    snprintf(lp, sizeof(lp), "%s/vgpu/%s", state, live_tmp);
    REQUIRE_EQ_INT(fs_write_atomic(lp, "x", 1, 0600), 0);
    v = make(1, 16 * GiB, VGPU_BINPACK, true);
    REQUIRE(v != NULL);
    for (size_t i = 0; i < ARRAY_SIZE(tmps); i++)
        CHECK(!in_state(tmps[i]));
    CHECK(in_state(live_tmp));
    unlink(lp);
    /* the pod goes: its directory goes whole */
    char p[1200];
    snprintf(p, sizeof(p), "%s/vgpu/uid-a/main/config.tmp.4194303", state);
    REQUIRE_EQ_INT(fs_write_atomic(p, "x", 1, 0600), 0);
    set_state("uid-a", "a", VGPU_POD_DONE);
    struct vgpu_reconcile_result res;
    REQUIRE_EQ_INT(settle(v, NULL, 0, &res), 0);
    CHECK_EQ_INT(res.freed, 1);
    CHECK(!in_state("uid-a"));
    vgpu_free(v);
}

int main(int argc, char **argv)
{
    tap_private_mounts(); /* the region dirs' tmpfs mounts go with this process */
    return tap_main(argc, argv);
}
