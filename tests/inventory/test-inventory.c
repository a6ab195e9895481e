/*
 * test-inventory — gpu_inventory_load against the fake libnvidia-ml (tests/inventory/
 * fake-nvml.c) and a fixture sysfs tree: properties, NUMA from sysfs with the NVML fallback,
 * a lost GPU, the link matrix, and the parsers of outside data.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fs.h"
#include "inventory.h"
#include "tap.h"

static const char *fake_path(void)
{
    static char path[4096];
    const char *root = getenv("ACCEL_BUILD_ROOT");
    snprintf(path, sizeof(path), "%s/tests/inventory/libfake-nvml.so", root ? root : ".");
    return path;
}

/* <tmp>/<name>/bus/pci/devices/<bus>/numa_node = content (NULL: no file). */
static void sysfs_numa(const char *root, const char *bus, const char *content)
{
    char dir[4096], file[4200];

    snprintf(dir, sizeof(dir), "%s/bus/pci/devices/%s", root, bus);
    REQUIRE_EQ_INT(fs_mkdir_p(dir, 0755), 0);
    if (!content)
        return;
    snprintf(file, sizeof(file), "%s/numa_node", dir);
    FILE *f = fopen(file, "w");
    REQUIRE(f != NULL);
    fputs(content, f);
    fclose(f);
}

static struct gpu_inventory *load(int gpus, const char *sysfs_root)
{
    struct gpu_inventory_options o = {.nvml_path = fake_path(), .sysfs_root = sysfs_root};
    struct gpu_inventory *inv = NULL;
    char err[512] = "", n[16];

    snprintf(n, sizeof(n), "%d", gpus);
    setenv("FAKE_NVML_GPUS", n, 1);
    int r = gpu_inventory_load(&o, NULL, &inv, err, sizeof(err));
    if (r < 0)
        tap_diag("load: %s", err);
    CHECK_EQ_INT(r, 0);
    return inv;
}

static void clear_env(void)
{
    unsetenv("FAKE_NVML_LOST");
    unsetenv("FAKE_NVML_NVLINK");
    unsetenv("FAKE_NVML_TOPO_FAIL");
}

TEST(loads_every_gpu_and_its_properties)
{
    struct gpu_inventory *inv = load(4, "/nonexistent-sysfs");
    REQUIRE(inv != NULL);
    CHECK_EQ_INT(inv->count, 4);
    CHECK_EQ_STR(inv->driver_version, "580.65.06");
    CHECK_EQ_INT(inv->cuda_driver_version, 13000);
    for (int i = 0; i < inv->count; i++) {
        const struct gpu_device *d = &inv->devices[i];
        char uuid[96], bus[32], vbios[64];
        snprintf(uuid, sizeof(uuid), "GPU-fa4e0000-0000-4000-8000-00000000000%d", i);
        snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0x1a + 0x10 * i);
        snprintf(vbios, sizeof(vbios), "96.00.99.00.0%d", i);
        CHECK_EQ_INT(d->index, i);
        CHECK_EQ_STR(d->uuid, uuid);
        CHECK_EQ_STR(d->name, "Fake H100 80GB");
        CHECK_EQ_U64(d->memory_total_bytes, 80ull << 30);
        CHECK_EQ_STR(d->pci_bus_id, bus); /* normalized from "00000000:1A:00.0" */
        CHECK_EQ_INT(d->minor, i);
        CHECK_EQ_INT(d->cc_major, 9);
        CHECK_EQ_INT(d->cc_minor, 0);
        CHECK_EQ_STR(d->vbios, vbios);
        CHECK(d->healthy);
        CHECK_EQ_STR(d->error, "");
    }
    CHECK_EQ_INT(inv->devices[0].mig_enabled, 0);
    CHECK_EQ_INT(inv->devices[1].mig_enabled, 1);
    CHECK_EQ_INT(inv->devices[3].mig_enabled, 0); /* NOT_SUPPORTED: not MIG-capable */
    gpu_inventory_free(inv);
}

TEST(numa_from_sysfs_with_nvml_fallback)
{
    char root[4096];
    snprintf(root, sizeof(root), "%s/sys", tap_tmpdir());
    sysfs_numa(root, "0000:1a:00.0", "1\n");  /* sysfs wins over NVML's 0 */
    sysfs_numa(root, "0000:2a:00.0", "-1\n"); /* platform without NUMA: unknown */
    sysfs_numa(root, "0000:3a:00.0", NULL);   /* no file: NVML says 1 */
    sysfs_numa(root, "0000:4a:00.0", "junk"); /* unreadable: NVML says 1 */

    struct gpu_inventory *inv = load(4, root);
    REQUIRE(inv != NULL);
    CHECK_EQ_INT(inv->devices[0].numa_node, 1);
    CHECK_EQ_INT(inv->devices[1].numa_node, -1);
    CHECK_EQ_INT(inv->devices[2].numa_node, 1);
    CHECK_EQ_INT(inv->devices[3].numa_node, 1);
    gpu_inventory_free(inv);
}

TEST(lost_gpu_is_unhealthy_and_the_rest_load)
{
    setenv("FAKE_NVML_LOST", "2", 1);
    struct gpu_inventory *inv = load(4, "/nonexistent-sysfs");
    clear_env();
    REQUIRE(inv != NULL);
    REQUIRE_EQ_INT(inv->count, 4);
    CHECK(!inv->devices[2].healthy);
    tap_diag("lost GPU error: %s", inv->devices[2].error);
    CHECK(strstr(inv->devices[2].error, "GPU is lost") != NULL);
    CHECK_EQ_STR(inv->devices[2].uuid, "");
    CHECK_EQ_INT(inv->devices[2].index, 2);
    for (int i = 0; i < 4; i++) {
        if (i == 2)
            continue;
        CHECK(inv->devices[i].healthy);
        CHECK(inv->devices[i].uuid[0] != '\0');
        CHECK_EQ_INT(gpu_inventory_link(inv, i, 2)->pcie, GPU_LINK_UNKNOWN);
    }
    gpu_inventory_free(inv);
}

TEST(link_matrix_pcie_and_nvlink)
{
    setenv("FAKE_NVML_NVLINK", "pairs", 1);
    struct gpu_inventory *inv = load(8, "/nonexistent-sysfs");
    clear_env();
    REQUIRE(inv != NULL);
    REQUIRE_EQ_INT(inv->count, 8);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            const struct gpu_link *l = gpu_inventory_link(inv, i, j);
            const struct gpu_link *t = gpu_inventory_link(inv, j, i);
            enum gpu_link_kind want = i == j           ? GPU_LINK_SELF
                                      : i / 2 == j / 2 ? GPU_LINK_SINGLE
                                      : i / 4 == j / 4 ? GPU_LINK_NODE
                                                       : GPU_LINK_SYSTEM;
            REQUIRE(l != NULL);
            CHECK_EQ_INT(l->pcie, want);
            CHECK_EQ_INT(l->pcie, t->pcie);
            CHECK_EQ_INT(l->nvlinks, (i != j && (i ^ 1) == j) ? 4 : 0);
        }
    CHECK(gpu_inventory_link(inv, 8, 0) == NULL);
    CHECK(gpu_inventory_link(inv, -1, 0) == NULL);
    gpu_inventory_free(inv);
}

TEST(topology_failure_is_unknown_not_an_error)
{
    setenv("FAKE_NVML_TOPO_FAIL", "1", 1);
    struct gpu_inventory *inv = load(2, "/nonexistent-sysfs");
    clear_env();
    REQUIRE(inv != NULL);
    CHECK_EQ_INT(gpu_inventory_link(inv, 0, 1)->pcie, GPU_LINK_UNKNOWN);
    CHECK_EQ_INT(gpu_inventory_link(inv, 0, 0)->pcie, GPU_LINK_SELF);
    CHECK(inv->devices[0].healthy);
    gpu_inventory_free(inv);
}

TEST(find_uuid)
{
    struct gpu_inventory *inv = load(3, "/nonexistent-sysfs");
    REQUIRE(inv != NULL);
    const struct gpu_device *d =
        gpu_inventory_find_uuid(inv, "GPU-fa4e0000-0000-4000-8000-000000000002");
    REQUIRE(d != NULL);
    CHECK_EQ_INT(d->index, 2);
    CHECK(gpu_inventory_find_uuid(inv, "GPU-nope") == NULL);
    CHECK(gpu_inventory_find_uuid(inv, "") == NULL);
    CHECK(gpu_inventory_find_uuid(NULL, "x") == NULL);
    gpu_inventory_free(inv);
}

TEST(zero_gpus_is_an_empty_inventory)
{
    struct gpu_inventory *inv = load(0, "/nonexistent-sysfs");
    REQUIRE(inv != NULL);
    CHECK_EQ_INT(inv->count, 0);
    gpu_inventory_free(inv);
}

TEST(borrowed_nvml_is_not_closed)
{
    struct gpu_nvml *n = NULL;
    struct gpu_inventory *inv = NULL;
    char err[256];
    unsigned int c = 0;

    setenv("FAKE_NVML_GPUS", "2", 1);
    REQUIRE_EQ_INT(gpu_nvml_open(fake_path(), &n, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(gpu_inventory_load(NULL, n, &inv, err, sizeof(err)), 0);
    CHECK_EQ_INT(inv->count, 2);
    /* Still initialised: the inventory did not shut the caller's NVML down. */
    CHECK_EQ_INT(n->nvmlDeviceGetCount_v2(&c), NVML_SUCCESS);
    gpu_inventory_free(inv);
    gpu_nvml_free(n);
}

TEST(no_nvml_is_one_clear_error)
{
    struct gpu_inventory_options o = {.nvml_path = "/nonexistent/libnvidia-ml.so.1"};
    struct gpu_inventory *inv = (struct gpu_inventory *)0x1;
    char err[512] = "";

    CHECK_EQ_INT(gpu_inventory_load(&o, NULL, &inv, err, sizeof(err)), -ENOENT);
    CHECK(inv == (struct gpu_inventory *)0x1);
    CHECK(strstr(err, "NVML not found") == err);
}

static nvmlReturn_t count_fails(unsigned int *c)
{
    return NVML_ERROR_DRIVER_NOT_LOADED;
}

TEST(count_failure_is_an_error)
{
    struct gpu_nvml n;
    struct gpu_inventory *inv = NULL;
    char err[256] = "";

    memset(&n, 0, sizeof(n));
    n.nvmlDeviceGetCount_v2 = count_fails;
    CHECK(gpu_inventory_load(NULL, &n, &inv, err, sizeof(err)) < 0);
    CHECK(inv == NULL);
    CHECK(strstr(err, "nvmlDeviceGetCount_v2") != NULL);
}

TEST(link_kind_names)
{
    CHECK_EQ_STR(gpu_link_kind_name(GPU_LINK_SYSTEM), "SYS");
    CHECK_EQ_STR(gpu_link_kind_name(GPU_LINK_NODE), "NODE");
    CHECK_EQ_STR(gpu_link_kind_name(GPU_LINK_HOSTBRIDGE), "PHB");
    CHECK_EQ_STR(gpu_link_kind_name(GPU_LINK_MULTIPLE), "PXB");
    CHECK_EQ_STR(gpu_link_kind_name(GPU_LINK_SINGLE), "PIX");
    CHECK_EQ_STR(gpu_link_kind_name(GPU_LINK_SELF), "X");
    CHECK_EQ_STR(gpu_link_kind_name(GPU_LINK_UNKNOWN), "unknown");
    CHECK_EQ_STR(gpu_link_kind_name((enum gpu_link_kind)99), "unknown");
}

TEST(pci_bus_id_normalize)
{
    char out[32];
    static const char *const bad[] = {
        "",
        "3b",
        "3b:00",
        "0000:3b:00",
        "0000:3b:00.8",
        "0000:3b:20.0",
        "000000000:3b:00.0",
        "0000:3b:00.0 ",
        "0000:3b:00.0x",
        "zz:00.0",
        "10000:3b:00.0",
        "0000:13b:00.0",
        ":3b:00.0",
        "0000::00.0",
        "0000:3b:.0",
    };

    REQUIRE_EQ_INT(gpu_pci_bus_id_normalize("00000000:3B:00.0", out, sizeof(out)), 0);
    CHECK_EQ_STR(out, "0000:3b:00.0");
    REQUIRE_EQ_INT(gpu_pci_bus_id_normalize("0001:AF:1f.7", out, sizeof(out)), 0);
    CHECK_EQ_STR(out, "0001:af:1f.7");
    REQUIRE_EQ_INT(gpu_pci_bus_id_normalize("3b:00.0", out, sizeof(out)), 0);
    CHECK_EQ_STR(out, "0000:3b:00.0");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        strcpy(out, "untouched");
        if (gpu_pci_bus_id_normalize(bad[i], out, sizeof(out)) != -EINVAL)
            tap_fail(__FILE__, __LINE__, "accepted \"%s\"", bad[i]);
        CHECK_EQ_STR(out, "untouched");
    }
    CHECK_EQ_INT(gpu_pci_bus_id_normalize("0000:3b:00.0", out, 12), -EINVAL);
}

TEST(numa_node_parse)
{
    int n = 42;
    static const char *const bad[] = {"",   "\n", "x",        "1x", "-2",  "- 1",
                                      " 1", "1 ", "99999999", "-",  "0x1", "1\n2"};

    CHECK_EQ_INT(gpu_parse_numa_node("0\n", 2, &n), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(gpu_parse_numa_node("-1\n", 3, &n), 0);
    CHECK_EQ_INT(n, -1);
    CHECK_EQ_INT(gpu_parse_numa_node("3", 1, &n), 0);
    CHECK_EQ_INT(n, 3);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        n = 42;
        if (gpu_parse_numa_node(bad[i], strlen(bad[i]), &n) != -EINVAL)
            tap_fail(__FILE__, __LINE__, "accepted \"%s\"", bad[i]);
        CHECK_EQ_INT(n, 42);
    }
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
