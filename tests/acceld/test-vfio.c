/* test-vfio.c — VFIO mode on a hand-made PCI sysfs and /dev: which GPUs are served (bound to
 * vfio-pci, mode vfio by PCI address, alone in their IOMMU group but for bridges), the resource
 * per model and its KubeVirt env, Allocate's nodes, health from sysfs and the group node, the
 * bind at start, and src/gpu/pci-sysfs.c's parsers and names. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acceld-config.h"
#include "pci-sysfs.h"
#include "pgpu.h"
#include "provider.h"
#include "tap.h"
#include "vfio.h"

static char root[512], sys[600], dev[600];

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fputs(text, f);
    fclose(f);
}

static void mkdirs(const char *path)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

/* A function with its files, driver link (NULL: none) and group (-1: none). */
static void function(const char *bdf, unsigned vendor, unsigned device, unsigned cls,
                     const char *driver, int group, int numa)
{
    char p[900], t[1024];
    snprintf(p, sizeof(p), "%s/devices/pci0000:00/%s", sys, bdf);
    mkdirs(p);
    struct {
        const char *file;
        char text[32];
    } files[] = {{"vendor", ""},
                 {"device", ""},
                 {"class", ""},
                 {"numa_node", ""},
                 {"driver_override", "(null)\n"}};
    snprintf(files[0].text, sizeof(files[0].text), "0x%04x\n", vendor);
    snprintf(files[1].text, sizeof(files[1].text), "0x%04x\n", device);
    snprintf(files[2].text, sizeof(files[2].text), "0x%06x\n", cls);
    snprintf(files[3].text, sizeof(files[3].text), "%d\n", numa);
    for (size_t i = 0; i < 5; i++) {
        snprintf(t, sizeof(t), "%s/%s", p, files[i].file);
        put(t, files[i].text);
    }
    snprintf(t, sizeof(t), "%s/bus/pci/devices/%s", sys, bdf);
    char target[256];
    snprintf(target, sizeof(target), "../../../devices/pci0000:00/%s", bdf);
    unlink(t);
    if (symlink(target, t) < 0)
        abort();
    if (driver) {
        snprintf(t, sizeof(t), "%s/driver", p);
        snprintf(target, sizeof(target), "../../../bus/pci/drivers/%s", driver);
        unlink(t);
        if (symlink(target, t) < 0)
            abort();
    }
    if (group >= 0) {
        snprintf(t, sizeof(t), "%s/iommu_group", p);
        snprintf(target, sizeof(target), "../../../kernel/iommu_groups/%d", group);
        if (symlink(target, t) < 0)
            abort();
        snprintf(t, sizeof(t), "%s/kernel/iommu_groups/%d/devices", sys, group);
        mkdirs(t);
        snprintf(t + strlen(t), sizeof(t) - strlen(t), "/%s", bdf);
        snprintf(target, sizeof(target), "../../../../devices/pci0000:00/%s", bdf);
        if (symlink(target, t) < 0)
            abort();
    }
}

static void set_driver(const char *bdf, const char *driver)
{
    char t[1024], target[256];
    snprintf(t, sizeof(t), "%s/devices/pci0000:00/%s/driver", sys, bdf);
    snprintf(target, sizeof(target), "../../../bus/pci/drivers/%s", driver);
    unlink(t);
    if (symlink(target, t) < 0)
        abort();
}

static void group_node(int group, bool present)
{
    char p[700];
    snprintf(p, sizeof(p), "%s/vfio/%d", dev, group);
    if (present)
        put(p, "");
    else
        unlink(p);
}

/* 0000:18: H100 in vfio-pci, group 10, NUMA 0, a bridge in its group
 * 0000:2a: H100 in vfio-pci, group 11, NUMA 1
 * 0000:3a: A100 80GB in vfio-pci, group 12, with its audio function (refused)
 * 0000:5d: H100 on nvidia, group 13 (mode vfio: not served)
 * 0000:6e: NVSwitch (class 0x0680), 0000:7f: another vendor's GPU: not GPUs of ours */
static void make_node(void)
{
    static int made;
    snprintf(root, sizeof(root), "%s/node%d", tap_tmpdir(), made++); /* a fresh one each time */
    snprintf(sys, sizeof(sys), "%s/sys", root);
    snprintf(dev, sizeof(dev), "%s/dev", root);
    char p[700];
    snprintf(p, sizeof(p), "%s/bus/pci/devices", sys);
    mkdirs(p);
    for (size_t i = 0; i < 4; i++) {
        static const char *const drv[] = {"vfio-pci", "nvidia", "snd_hda_intel", "pcieport"};
        snprintf(p, sizeof(p), "%s/bus/pci/drivers/%s", sys, drv[i]);
        mkdirs(p);
        snprintf(p + strlen(p), sizeof(p) - strlen(p), "/bind");
        put(p, "");
        snprintf(p, sizeof(p), "%s/bus/pci/drivers/%s/unbind", sys, drv[i]);
        put(p, "");
    }
    snprintf(p, sizeof(p), "%s/vfio", dev);
    mkdirs(p);
    put(strcat(p, "/vfio"), "");
    function("0000:18:00.0", 0x10de, 0x2330, 0x030200, "vfio-pci", 10, 0);
    function("0000:18:01.0", 0x1000, 0x1af1, 0x060400, "pcieport", 10, 0);
    function("0000:2a:00.0", 0x10de, 0x2330, 0x030200, "vfio-pci", 11, 1);
    function("0000:3a:00.0", 0x10de, 0x20b2, 0x030200, "vfio-pci", 12, 0);
    function("0000:3a:00.1", 0x10de, 0x22ba, 0x040300, "snd_hda_intel", 12, 0);
    function("0000:5d:00.0", 0x10de, 0x2330, 0x030200, "nvidia", 13, -1);
    function("0000:6e:00.0", 0x10de, 0x22a3, 0x068000, "nvidia", 14, 0);
    function("0000:7f:00.0", 0x1002, 0x740f, 0x038000, "vfio-pci", 15, 0);
    for (int g = 10; g <= 12; g++)
        group_node(g, true);
}

static void config(struct acceld_config *c, const char *extra_key, const char *extra_value)
{
    char err[512];
    acceld_config_defaults(c);
    if (acceld_config_set(c, "sysfsRoot", sys, err, sizeof(err)) < 0 ||
        acceld_config_set(c, "devRoot", dev, err, sizeof(err)) < 0 ||
        acceld_config_set(c, "mode", "vfio", err, sizeof(err)) < 0 ||
        (extra_key && acceld_config_set(c, extra_key, extra_value, err, sizeof(err)) < 0)) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
}

TEST(scan_finds_the_nvidia_gpus_with_driver_group_and_numa)
{
    make_node();
    struct gpu_pci_gpu *g = NULL;
    size_t n = 0;
    char err[256];
    REQUIRE_EQ_INT(gpu_pci_scan(sys, &g, &n, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(n, 4); /* not the NVSwitch, not another vendor's GPU, not the audio */
    CHECK_EQ_STR(g[0].bdf, "0000:18:00.0");
    CHECK_EQ_INT(g[0].device, 0x2330);
    CHECK_EQ_STR(g[0].driver, "vfio-pci");
    CHECK_EQ_INT(g[0].iommu_group, 10);
    CHECK_EQ_INT(g[0].n_others, 0); /* the bridge does not count */
    CHECK_EQ_INT(g[1].numa_node, 1);
    CHECK_EQ_STR(g[2].bdf, "0000:3a:00.0");
    CHECK_EQ_INT(g[2].n_others, 1);
    CHECK_EQ_STR(g[2].others[0], "0000:3a:00.1");
    CHECK_EQ_STR(g[3].driver, "nvidia");
    CHECK_EQ_INT(g[3].numa_node, -1);
    free(g);
    char missing[700];
    snprintf(missing, sizeof(missing), "%s/none", root);
    CHECK_EQ_INT(gpu_pci_scan(missing, &g, &n, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "cannot list") != NULL);
}

/* Allocate through the provider seam: the answer of one container. */
static int allocate(struct pgpu *p, const size_t *idx, size_t n, struct acceld_alloc *out)
{
    struct acceld_provider prov = pgpu_provider(p);
    struct acceld_alloc_req req = {idx, n};
    char err[256];
    return prov.ops->allocate(prov.self, &req, 1, out, err, sizeof(err));
}

static bool has_node(const struct acceld_alloc *a, const char *path)
{
    for (size_t i = 0; i < a->n_devices; i++)
        if (strcmp(a->devices[i].host_path, path) == 0 &&
            strcmp(a->devices[i].container_path, path) == 0 &&
            strcmp(a->devices[i].permissions, "mrw") == 0)
            return true;
    return false;
}

TEST(serves_alone_vfio_gpus_per_model_as_kubevirt_expects)
{
    make_node();
    struct acceld_config c;
    config(&c, NULL, NULL);
    struct vfio_node *v = NULL;
    char err[512];
    REQUIRE_EQ_INT(vfio_node_new(&c, &v, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(vfio_node_models(v), 1); /* the A100 is refused: its audio function */
    CHECK_EQ_STR(vfio_node_resource(v, 0), "nvidia.com/GH100_H100_SXM5_80GB");
    struct pgpu *t = vfio_node_table(v, 0);
    REQUIRE_EQ_INT(pgpu_count(t), 2);
    CHECK_EQ_STR(pgpu_id(t, 0), "0000:18:00.0");
    CHECK_EQ_STR(pgpu_id(t, 1), "0000:2a:00.0");
    struct acceld_provider prov = pgpu_provider(t);
    struct acceld_device d;
    prov.ops->device(prov.self, 1, &d);
    CHECK_EQ_INT(d.numa_node, 1);
    CHECK(d.healthy);

    struct acceld_alloc a;
    size_t both[] = {0, 1};
    REQUIRE_EQ_INT(allocate(t, both, 2, &a), 0);
    REQUIRE_EQ_INT(a.n_envs, 1);
    CHECK_EQ_STR(a.envs[0].key, "PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB");
    CHECK_EQ_STR(a.envs[0].value, "0000:18:00.0,0000:2a:00.0");
    CHECK_EQ_INT(a.n_devices, 3);
    CHECK(has_node(&a, "/dev/vfio/10"));
    CHECK(has_node(&a, "/dev/vfio/11"));
    CHECK(has_node(&a, "/dev/vfio/vfio"));
    CHECK_EQ_INT(a.n_cdi_devices, 0);
    CHECK_EQ_INT(a.n_mounts, 0);
    vfio_node_free(v);

    /* gpuModes by PCI address: only the one named is VFIO's */
    config(&c, "mode", "pgpu");
    REQUIRE_EQ_INT(acceld_config_set(&c, "gpuModes", "0000:2A:00.0=vfio", err, sizeof(err)), 0);
    REQUIRE_EQ_INT(vfio_node_new(&c, &v, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(vfio_node_models(v), 1);
    REQUIRE_EQ_INT(pgpu_count(vfio_node_table(v, 0)), 1);
    CHECK_EQ_STR(pgpu_id(vfio_node_table(v, 0), 0), "0000:2a:00.0");
    vfio_node_free(v);
}

TEST(resource_names_come_from_the_pci_ids_or_the_config)
{
    make_node();
    struct acceld_config c;
    struct vfio_node *v = NULL;
    char err[512];
    config(&c, "vfio.resourceNames", "2330=H100");
    REQUIRE_EQ_INT(vfio_node_new(&c, &v, err, sizeof(err)), 0);
    CHECK_EQ_STR(vfio_node_resource(v, 0), "nvidia.com/H100");
    struct acceld_alloc a;
    size_t one[] = {0};
    REQUIRE_EQ_INT(allocate(vfio_node_table(v, 0), one, 1, &a), 0);
    CHECK_EQ_STR(a.envs[0].key, "PCI_RESOURCE_NVIDIA_COM_H100");
    vfio_node_free(v);
    config(&c, "vfio.resourceNames", "20b2=example.com/a100.sxm,2330=H100");
    REQUIRE_EQ_INT(vfio_node_new(&c, &v, err, sizeof(err)), 0);
    CHECK_EQ_STR(vfio_node_resource(v, 0), "nvidia.com/H100");
    vfio_node_free(v);
    CHECK_EQ_INT(acceld_config_set(&c, "vfio.resourceNames", "2330", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "DEVICEID=NAME") != NULL);
    CHECK_EQ_INT(acceld_config_set(&c, "vfio.resourceNames", "233=H100", err, sizeof(err)),
                 -EINVAL);
    CHECK_EQ_INT(acceld_config_set(&c, "vfio.resourceNames", "2330=bad name", err, sizeof(err)),
                 -EINVAL);
    char buf[128];
    REQUIRE_EQ_INT(
        acceld_config_set(&c, "vfio.resourceNames", "20b2=example.com/a100.sxm", err, sizeof(err)),
        0);
    CHECK_EQ_INT(acceld_config_vfio_name(&c, 0x20b2, buf, sizeof(buf)), 1);
    CHECK_EQ_STR(buf, "example.com/a100.sxm");
    CHECK_EQ_INT(acceld_config_vfio_name(&c, 0x2330, buf, sizeof(buf)), 0);

    /* the PCI ID Repository's names, made into resource names as NVIDIA's plugin makes them */
    CHECK_EQ_STR(gpu_pci_device_name(0x2335), "GH100 [H200 SXM 141GB]");
    CHECK(gpu_pci_device_name(0x1234) == NULL);
    CHECK_EQ_INT(gpu_pci_resource_name("GH100 [H100 SXM5 80GB]", buf, sizeof(buf)), 0);
    CHECK_EQ_STR(buf, "GH100_H100_SXM5_80GB");
    CHECK_EQ_INT(gpu_pci_resource_name("GA107GL [A2 / A16]", buf, sizeof(buf)), 0);
    CHECK_EQ_STR(buf, "GA107GL_A2___A16");
    CHECK_EQ_INT(gpu_pci_resource_name("GA100 [A100-SXM-64GB]", buf, sizeof(buf)), 0);
    CHECK_EQ_STR(buf, "GA100_A100SXM64GB");
    CHECK_EQ_INT(gpu_pci_resource_name("[]", buf, sizeof(buf)), -EINVAL);
    CHECK_EQ_INT(gpu_pci_resource_name("GH100 [H100 SXM5 80GB]", buf, 8), -EINVAL);
}

TEST(health_follows_the_binding_the_group_and_its_node)
{
    make_node();
    struct acceld_config c;
    struct vfio_node *v = NULL;
    char err[512];
    config(&c, NULL, NULL);
    REQUIRE_EQ_INT(vfio_node_new(&c, &v, err, sizeof(err)), 0);
    struct pgpu *t = vfio_node_table(v, 0);
    CHECK_EQ_INT(vfio_node_recheck(v), 0);
    group_node(11, false);
    CHECK_EQ_INT(vfio_node_recheck(v), 1);
    CHECK(!pgpu_healthy(t, 1));
    CHECK(pgpu_healthy(t, 0));
    group_node(11, true);
    CHECK_EQ_INT(vfio_node_recheck(v), 1);
    CHECK(pgpu_healthy(t, 1));
    uint64_t gen = pgpu_generation(t);
    set_driver("0000:18:00.0", "nvidia");
    CHECK_EQ_INT(vfio_node_recheck(v), 1);
    CHECK(!pgpu_healthy(t, 0));
    CHECK(pgpu_generation(t) > gen);
    set_driver("0000:18:00.0", "vfio-pci");
    CHECK_EQ_INT(vfio_node_recheck(v), 1);
    CHECK(pgpu_healthy(t, 0));
    /* a device joins the group: it is no longer a VM's alone */
    function("0000:18:00.1", 0x10de, 0x22ba, 0x040300, "snd_hda_intel", 10, 0);
    CHECK_EQ_INT(vfio_node_recheck(v), 1);
    CHECK(!pgpu_healthy(t, 0));
    vfio_node_free(v);
}

TEST(a_gpu_whose_node_is_missing_at_start_is_unhealthy)
{
    make_node();
    group_node(10, false);
    struct acceld_config c;
    struct vfio_node *v = NULL;
    char err[512];
    config(&c, NULL, NULL);
    REQUIRE_EQ_INT(vfio_node_new(&c, &v, err, sizeof(err)), 0);
    CHECK(!pgpu_healthy(vfio_node_table(v, 0), 0));
    CHECK(pgpu_healthy(vfio_node_table(v, 0), 1));
    vfio_node_free(v);
}

static void read_file(const char *rel, char *buf, size_t len)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", sys, rel);
    int fd = open(p, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;
    buf[n > 0 ? n : 0] = '\0';
    if (fd >= 0)
        close(fd);
}

TEST(bind_at_start_writes_the_override_then_unbind_then_bind)
{
    make_node();
    struct acceld_config c;
    char err[512], buf[64];
    config(&c, "vfio.bind", "0000:5d:00.0");
    CHECK(acceld_config_vfio_bind(&c, "0000:5d:00.0"));
    CHECK(!acceld_config_vfio_bind(&c, "0000:18:00.0"));
    CHECK_EQ_INT(vfio_bind_at_start(&c), 0);
    read_file("devices/pci0000:00/0000:5d:00.0/driver_override", buf, sizeof(buf));
    CHECK_EQ_STR(buf, "vfio-pci");
    read_file("bus/pci/drivers/nvidia/unbind", buf, sizeof(buf));
    CHECK_EQ_STR(buf, "0000:5d:00.0");
    read_file("bus/pci/drivers/vfio-pci/bind", buf, sizeof(buf));
    CHECK_EQ_STR(buf, "0000:5d:00.0");
    /* one already on vfio-pci is left alone */
    CHECK_EQ_INT(gpu_pci_bind_vfio(sys, "0000:18:00.0", err, sizeof(err)), 0);
    read_file("devices/pci0000:00/0000:18:00.0/driver_override", buf, sizeof(buf));
    CHECK_EQ_STR(buf, "(null)\n");
    CHECK_EQ_INT(gpu_pci_bind_vfio(sys, "18:00.0", err, sizeof(err)), -EINVAL);
    /* "all" in mode pgpu binds nothing: the mode decides */
    make_node();
    config(&c, "vfio.bind", "all");
    REQUIRE_EQ_INT(acceld_config_set(&c, "mode", "pgpu", err, sizeof(err)), 0);
    CHECK_EQ_INT(vfio_bind_at_start(&c), 0);
    read_file("devices/pci0000:00/0000:5d:00.0/driver_override", buf, sizeof(buf));
    CHECK_EQ_STR(buf, "(null)\n");
    CHECK_EQ_INT(acceld_config_set(&c, "vfio.bind", "0000:5d:00", err, sizeof(err)), -EINVAL);
    CHECK_EQ_INT(acceld_config_set(&c, "vfio.bind", "all,0000:5D:00.0", err, sizeof(err)), 0);
}

TEST(sysfs_text_parsers)
{
    unsigned v = 0;
    int g = 0;
    size_t n = 0;
    CHECK_EQ_INT(gpu_pci_parse_hex("0x10de\n", 7, &v), 0);
    CHECK_EQ_INT(v, 0x10de);
    CHECK_EQ_INT(gpu_pci_parse_hex("0x030200", 8, &v), 0);
    CHECK_EQ_INT(v, 0x030200);
    CHECK_EQ_INT(gpu_pci_parse_hex("10de\n", 5, &v), -EINVAL);
    CHECK_EQ_INT(gpu_pci_parse_hex("0x\n", 3, &v), -EINVAL);
    CHECK_EQ_INT(gpu_pci_parse_hex("0x10dg", 6, &v), -EINVAL);
    CHECK_EQ_INT(gpu_pci_parse_hex("0x1000000", 9, &v), -EINVAL);
    const char *name = gpu_pci_link_name("../../bus/pci/drivers/vfio-pci", 30, &n);
    REQUIRE(name != NULL);
    CHECK_EQ_INT(n, 8);
    CHECK(strncmp(name, "vfio-pci", n) == 0);
    CHECK(gpu_pci_link_name("../..", 5, &n) == NULL);
    CHECK(gpu_pci_link_name("", 0, &n) == NULL);
    CHECK_EQ_INT(gpu_pci_parse_group("../../../kernel/iommu_groups/17", 31, &g), 0);
    CHECK_EQ_INT(g, 17);
    CHECK_EQ_INT(gpu_pci_parse_group("../../iommu_groups/x7", 21, &g), -EINVAL);
    CHECK_EQ_INT(gpu_pci_parse_group("../../iommu_groups/1234567890", 29, &g), -EINVAL);
    CHECK(gpu_pci_valid_bdf("0000:18:00.0"));
    CHECK(gpu_pci_valid_bdf("ffff:ff:1f.7"));
    CHECK(!gpu_pci_valid_bdf("0000:18:20.0"));
    CHECK(!gpu_pci_valid_bdf("0000:18:00.8"));
    CHECK(!gpu_pci_valid_bdf("0000:1A:00.0"));
    CHECK(!gpu_pci_valid_bdf("18:00.0"));
}

TEST(modes_by_pci_address)
{
    struct acceld_config c;
    char err[512];
    acceld_config_defaults(&c);
    REQUIRE_EQ_INT(acceld_config_set(&c, "gpuModes", "1=vgpu,0000:18:00.0=vfio", err, sizeof(err)),
                   0);
    CHECK_EQ_INT(acceld_config_pci_mode(&c, "0000:18:00.0"), ACCELD_MODE_VFIO);
    CHECK_EQ_INT(acceld_config_pci_mode(&c, "0000:2a:00.0"), ACCELD_MODE_PGPU);
    CHECK_EQ_INT(acceld_config_gpu_mode_at(&c, 1, "GPU-x", "0000:18:00.0"), ACCELD_MODE_VGPU);
    CHECK_EQ_INT(acceld_config_gpu_mode_at(&c, 0, "GPU-x", "0000:18:00.0"), ACCELD_MODE_VFIO);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 0, "GPU-x"), ACCELD_MODE_PGPU);
    REQUIRE_EQ_INT(acceld_config_set(&c, "mode", "vfio", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_pci_mode(&c, "0000:2a:00.0"), ACCELD_MODE_VFIO);
    CHECK(!acceld_config_dra_only(&c));
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "0=vm", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "pgpu|vgpu|dra|vfio") != NULL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
