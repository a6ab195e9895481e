/* vfio.c — the VFIO mode: which vfio-pci GPUs are served under which model's resource, their
 * pgpu tables with VFIO's nodes and env, bind at start, health from sysfs on inotify events.
 * See vfio.h. */
#include "vfio.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "evloop.h"
#include "log.h"
#include "pci-sysfs.h"
#include "pgpu.h"
#include "util.h"

#define VFIO_MAX_MODELS 8
#define VFIO_NODE_LEN 32 /* "/dev/vfio/<group>" */

static const char vfio_driver[] = "vfio-pci";
static const char *const vfio_container[] = {"/dev/vfio/vfio"};

struct vfio_gpu {
    struct gpu_pci_gpu pci; /* as served (the group is the one at start) */
    size_t model;
    size_t idx; /* in the model's table */
    bool healthy;
    char node[VFIO_NODE_LEN]; /* "/dev/vfio/<group>" */
};

struct vfio_model {
    char resource[ACCELD_NAME_MAX]; /* nvidia.com/GH100_H100_SXM5_80GB */
    char env_key[ACCELD_NAME_MAX];  /* PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB */
    struct pgpu *table;
};

struct vfio_node {
    char sysfs_root[ACCELD_PATH_MAX];
    char dev_root[ACCELD_PATH_MAX];
    struct vfio_gpu *gpus;
    size_t n_gpus;
    struct vfio_model models[VFIO_MAX_MODELS];
    size_t n_models;
    struct ev_loop *loop;
    int ino_fd;
    vfio_changed_fn fn;
    void *ud;
};

size_t vfio_bind_at_start(const struct acceld_config *cfg)
{
    if (!cfg->vfio_bind[0])
        return 0;
    struct gpu_pci_gpu *g = NULL;
    size_t n = 0, failed = 0;
    char err[512];
    if (gpu_pci_scan(cfg->sysfs_root, &g, &n, err, sizeof(err)) < 0) {
        log_error("vfio.bind: %s", err);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!acceld_config_vfio_bind(cfg, g[i].bdf) || strcmp(g[i].driver, vfio_driver) == 0)
            continue;
        if (acceld_config_pci_mode(cfg, g[i].bdf) != ACCELD_MODE_VFIO) {
            log_warn("vfio.bind: GPU %s is not bound: its mode is %s (mode: vfio, or gpuModes "
                     "%s=vfio, puts it in VFIO mode)",
                     g[i].bdf, acceld_mode_name(acceld_config_pci_mode(cfg, g[i].bdf)), g[i].bdf);
            continue;
        }
        log_info("vfio.bind: binding GPU %s (driver %s) to vfio-pci", g[i].bdf,
                 g[i].driver[0] ? g[i].driver : "none");
        if (gpu_pci_bind_vfio(cfg->sysfs_root, g[i].bdf, err, sizeof(err)) < 0) {
            log_error("vfio.bind: GPU %s: %s", g[i].bdf, err);
            failed++;
        }
    }
    free(g);
    return failed;
}

/* "PCI_RESOURCE_" and the resource name in upper case with '/' and '.' as '_' (KubeVirt reads
 * the addresses of a host device's resource from that variable). */
static void env_key_of(const char *resource, char *out, size_t len)
{
    int n = snprintf(out, len, "PCI_RESOURCE_%s", resource);
    for (int i = (int)strlen("PCI_RESOURCE_"); i < n && (size_t)i < len; i++)
        out[i] = out[i] == '/' || out[i] == '.' ? '_' : (char)toupper((unsigned char)out[i]);
}

/* The model's resource: vfio.resourceNames, else nvidia.com/<PCI ID name>, else
 * nvidia.com/<device id in hex> (what NVIDIA's plugin falls back to). */
static void resource_of(const struct acceld_config *cfg, unsigned device, char *out, size_t len)
{
    char name[ACCELD_NAME_MAX];
    const char *pci = gpu_pci_device_name(device);
    if (acceld_config_vfio_name(cfg, device, out, len) == 1)
        return;
    if (pci && gpu_pci_resource_name(pci, name, sizeof(name)) == 0)
        snprintf(out, len, "nvidia.com/%.100s", name);
    else
        snprintf(out, len, "nvidia.com/%04x", device);
}

/* Why a GPU cannot be served, or NULL. */
static const char *refusal(const struct vfio_node *v, const struct gpu_pci_gpu *g, char *buf,
                           size_t len)
{
    if (strcmp(g->driver, vfio_driver) != 0) {
        snprintf(buf, len, "bound to %s, not vfio-pci (bind it, or list it in vfio.bind)",
                 g->driver[0] ? g->driver : "no driver");
        return buf;
    }
    if (g->iommu_group < 0) {
        snprintf(buf, len,
                 "it has no IOMMU group (turn the IOMMU on: intel_iommu=on or "
                 "amd_iommu=on on the kernel command line)");
        return buf;
    }
    if (g->n_others) {
        char list[GPU_PCI_OTHERS_LISTED * GPU_PCI_BDF_SIZE + 8] = "";
        for (size_t i = 0; i < g->n_others && i < GPU_PCI_OTHERS_LISTED; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
                     g->others[i]);
        snprintf(buf, len,
                 "its IOMMU group %d also holds %zu other device(s) (%s%s): a VM gets a whole "
                 "group, so it cannot get this GPU alone (move the GPU to a slot with its own "
                 "group, or enable ACS on the switch above it)",
                 g->iommu_group, g->n_others, list,
                 g->n_others > GPU_PCI_OTHERS_LISTED ? ", ..." : "");
        return buf;
    }
    (void)v;
    return NULL;
}

static bool node_present(const struct vfio_node *v, int group)
{
    char path[ACCELD_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/vfio/%d", v->dev_root, group);
    return access(path, F_OK) == 0;
}

static int model_of(struct vfio_node *v, const char *resource, char *err, size_t errlen)
{
    for (size_t m = 0; m < v->n_models; m++)
        if (strcmp(v->models[m].resource, resource) == 0)
            return (int)m;
    if (v->n_models == VFIO_MAX_MODELS)
        return errbuf_printf(err, errlen, "more than %d GPU models in VFIO mode", VFIO_MAX_MODELS),
               -E2BIG;
    struct vfio_model *md = &v->models[v->n_models];
    snprintf(md->resource, sizeof(md->resource), "%s", resource);
    env_key_of(resource, md->env_key, sizeof(md->env_key));
    return (int)v->n_models++;
}

static int build_tables(struct vfio_node *v, const struct acceld_config *cfg, char *err,
                        size_t errlen)
{
    for (size_t m = 0; m < v->n_models; m++) {
        struct vfio_model *md = &v->models[m];
        struct pgpu_gpu_desc *d = calloc(v->n_gpus ? v->n_gpus : 1, sizeof(*d));
        if (!d)
            return errbuf_printf(err, errlen, "out of memory"), -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < v->n_gpus; i++) {
            struct vfio_gpu *g = &v->gpus[i];
            if (g->model != m)
                continue;
            g->idx = k;
            d[k++] = (struct pgpu_gpu_desc){.uuid = g->pci.bdf,
                                            .minor = -1,
                                            .numa_node = g->pci.numa_node,
                                            .healthy = g->healthy,
                                            .extra_nodes = {g->node},
                                            .n_extra = 1};
        }
        struct pgpu_options o = {.dev_root = cfg->dev_root,
                                 .strategy = ACCELD_STRATEGY_ENVVAR,
                                 .cdi_vendor = cfg->cdi_vendor,
                                 .cdi_class = cfg->cdi_class,
                                 .env_key = md->env_key,
                                 .common_nodes = vfio_container,
                                 .n_common = ARRAY_SIZE(vfio_container),
                                 .permissions = "mrw"};
        int r = pgpu_new(d, k, NULL, NULL, &o, &md->table);
        free(d);
        if (r < 0)
            return errbuf_printf(err, errlen, "cannot build the table of %s: %s", md->resource,
                                 strerror(-r)),
                   r;
    }
    return 0;
}

int vfio_node_new(const struct acceld_config *cfg, struct vfio_node **ret, char *err, size_t errlen)
{
    struct vfio_node *v = calloc(1, sizeof(*v));
    struct gpu_pci_gpu *all = NULL;
    size_t n_all = 0;
    if (!v)
        return errbuf_printf(err, errlen, "out of memory"), -ENOMEM;
    v->ino_fd = -1;
    snprintf(v->sysfs_root, sizeof(v->sysfs_root), "%s", cfg->sysfs_root);
    snprintf(v->dev_root, sizeof(v->dev_root), "%s", cfg->dev_root);
    int r = gpu_pci_scan(cfg->sysfs_root, &all, &n_all, err, errlen);
    if (r < 0 && cfg->mode != ACCELD_MODE_VFIO && !strstr(cfg->gpu_modes, "=vfio")) {
        /* no PCI sysfs (a container without /sys, a test's fake tree): no VFIO GPU either */
        log_debug("VFIO: %s: no GPU bound to vfio-pci is looked for", err);
        r = 0;
    }
    if (r == 0 && !(v->gpus = calloc(n_all ? n_all : 1, sizeof(*v->gpus))))
        r = (errbuf_printf(err, errlen, "out of memory"), -ENOMEM);
    for (size_t i = 0; r == 0 && i < n_all; i++) {
        const struct gpu_pci_gpu *g = &all[i];
        char why[512];
        if (acceld_config_pci_mode(cfg, g->bdf) != ACCELD_MODE_VFIO) {
            if (strcmp(g->driver, vfio_driver) == 0)
                log_info("GPU %s is bound to vfio-pci but its mode is %s: not served (mode: "
                         "vfio, or gpuModes %s=vfio, serves it to VMs)",
                         g->bdf, acceld_mode_name(acceld_config_pci_mode(cfg, g->bdf)), g->bdf);
            continue;
        }
        if (refusal(v, g, why, sizeof(why))) {
            /* one bound to nvidia is NVML's: acceld.c says so with its index and UUID */
            if (strcmp(g->driver, "nvidia") != 0)
                log_warn("VFIO: GPU %s is not served: %s", g->bdf, why);
            continue;
        }
        char resource[ACCELD_NAME_MAX];
        resource_of(cfg, g->device, resource, sizeof(resource));
        int m = model_of(v, resource, err, errlen);
        if (m < 0) {
            r = m;
            break;
        }
        struct vfio_gpu *vg = &v->gpus[v->n_gpus++];
        vg->pci = *g;
        vg->model = (size_t)m;
        snprintf(vg->node, sizeof(vg->node), "/dev/vfio/%d", g->iommu_group);
        vg->healthy = node_present(v, g->iommu_group);
        if (!vg->healthy)
            log_warn("VFIO: GPU %s is Unhealthy at start: %s/vfio/%d is missing", g->bdf,
                     v->dev_root, g->iommu_group);
    }
    free(all);
    if (r == 0)
        r = build_tables(v, cfg, err, errlen);
    if (r < 0) {
        vfio_node_free(v);
        return r;
    }
    for (size_t m = 0; m < v->n_models; m++)
        log_info("VFIO mode: %zu GPU(s) as %s (env %s)", pgpu_count(v->models[m].table),
                 v->models[m].resource, v->models[m].env_key);
    *ret = v;
    return 0;
}

struct vfio_node *vfio_node_free(struct vfio_node *v)
{
    if (!v)
        return NULL;
    if (v->ino_fd >= 0) {
        if (v->loop)
            ev_loop_del_io(v->loop, v->ino_fd);
        close(v->ino_fd);
    }
    for (size_t m = 0; m < v->n_models; m++)
        pgpu_free(v->models[m].table);
    free(v->gpus);
    free(v);
    return NULL;
}

size_t vfio_node_models(const struct vfio_node *v)
{
    return v ? v->n_models : 0;
}

const char *vfio_node_resource(const struct vfio_node *v, size_t model)
{
    return model < v->n_models ? v->models[model].resource : NULL;
}

struct pgpu *vfio_node_table(struct vfio_node *v, size_t model)
{
    return model < v->n_models ? v->models[model].table : NULL;
}

/* Why a served GPU is unhealthy now, or NULL. */
static const char *sick(const struct vfio_node *v, const struct vfio_gpu *g, char *buf, size_t len)
{
    struct gpu_pci_gpu now = g->pci;
    if (gpu_pci_refresh(v->sysfs_root, &now) < 0)
        return snprintf(buf, len, "gone from %s/bus/pci/devices", v->sysfs_root), buf;
    if (strcmp(now.driver, vfio_driver) != 0)
        return snprintf(buf, len, "bound to %s, not vfio-pci",
                        now.driver[0] ? now.driver : "no driver"),
               buf;
    if (now.iommu_group != g->pci.iommu_group)
        return snprintf(buf, len, "its IOMMU group is %d, not %d", now.iommu_group,
                        g->pci.iommu_group),
               buf;
    if (now.n_others)
        return snprintf(buf, len, "its IOMMU group %d now holds %zu other device(s) (%s, ...)",
                        now.iommu_group, now.n_others, now.others[0]),
               buf;
    if (!node_present(v, g->pci.iommu_group))
        return snprintf(buf, len, "%s/vfio/%d is gone", v->dev_root, g->pci.iommu_group), buf;
    return NULL;
}

size_t vfio_node_recheck(struct vfio_node *v)
{
    bool changed[VFIO_MAX_MODELS] = {false};
    size_t n = 0;
    for (size_t i = 0; i < v->n_gpus; i++) {
        struct vfio_gpu *g = &v->gpus[i];
        char why[1024];
        const char *reason = sick(v, g, why, sizeof(why));
        bool healthy = reason == NULL;
        if (healthy == g->healthy)
            continue;
        g->healthy = healthy;
        pgpu_set_healthy(v->models[g->model].table, g->idx, healthy);
        changed[g->model] = true;
        n++;
        if (healthy)
            log_info("VFIO: GPU %s (%s) is Healthy again", g->pci.bdf,
                     v->models[g->model].resource);
        else
            log_warn("VFIO: GPU %s (%s) is Unhealthy: %s", g->pci.bdf, v->models[g->model].resource,
                     reason);
    }
    for (size_t m = 0; m < v->n_models && v->fn; m++)
        if (changed[m])
            v->fn(v->ud, m);
    return n;
}

static void on_inotify(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    struct vfio_node *v = ud;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool any = false;
    (void)events;
    for (;;) {
        ssize_t len = read(fd, buf, sizeof(buf));
        if (len <= 0)
            break;
        any = true;
        for (char *q = buf; q < buf + len;) {
            const struct inotify_event *e = (const void *)q;
            if (e->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
                /* the directory itself went: every group node with it */
                log_warn("VFIO: %s/vfio was removed: no group node is watched any more",
                         v->dev_root);
                ev_loop_del_io(loop, fd);
            }
            q += sizeof(*e) + e->len;
        }
    }
    if (any)
        vfio_node_recheck(v);
}

int vfio_node_watch(struct vfio_node *v, struct ev_loop *loop, vfio_changed_fn fn, void *ud)
{
    char dir[ACCELD_PATH_MAX + 8];
    v->fn = fn;
    v->ud = ud;
    if (!v->n_gpus)
        return 0;
    snprintf(dir, sizeof(dir), "%s/vfio", v->dev_root);
    v->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (v->ino_fd < 0)
        return -errno;
    if (inotify_add_watch(v->ino_fd, dir,
                          IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                              IN_MOVE_SELF) < 0) {
        int r = -errno;
        close(v->ino_fd);
        v->ino_fd = -1;
        return r;
    }
    int r = ev_loop_add_io(loop, v->ino_fd, EPOLLIN, on_inotify, v);
    if (r < 0) {
        close(v->ino_fd);
        v->ino_fd = -1;
        return r;
    }
    v->loop = loop;
    /* what changed between the scan and the watch */
    vfio_node_recheck(v);
    return 0;
}
