/*
 * cmd-gpus.c — `accelctl gpus`: the node's GPU inventory (src/gpu/inventory.h) as a table for
 * people or, with --json, as an array of objects for scripts; with --plugin-socket, next to
 * each GPU the health a device plugin (acceld) advertises for it.
 *
 * Why two healths: NVML can say now whether a GPU answers, but an XID is an event that only a
 * listener registered at the time sees (nvmlEventSetWait; there is no NVML query for past
 * XIDs), so after `accel-emu xid 1 79` (or a real XID 79) NVML still answers and only acceld,
 * which listens, knows the GPU is unhealthy.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accelctl.h"
#include "inventory.h"
#include "util.h"

static void gpus_usage(FILE *f)
{
    fprintf(f, "usage: accelctl gpus [--json] [--nvml PATH] [--sysfs-root DIR] [--plugin-socket "
               "PATH]\n"
               "\n"
               "Lists the node's GPUs: index, UUID, name, memory, PCI bus, NUMA node, compute\n"
               "capability and health, then the link between every two GPUs.\n"
               "\n"
               "  --json             print a JSON array of objects instead of a table\n"
               "  --nvml PATH        NVML library to load (default: $ACCEL_NVML_LIBRARY, else\n"
               "                     libnvidia-ml.so.1)\n"
               "  --sysfs-root DIR   where sysfs is mounted, for NUMA nodes (default /sys)\n"
               "  --plugin-socket PATH\n"
               "                     also show the health a device plugin (acceld) advertises\n"
               "                     for each GPU: XIDs are seen by acceld, not by NVML queries\n");
}

/* What a device plugin says about the GPUs (--plugin-socket). */
struct plugin_view {
    bool on;
    char **ids;
    bool *healthy;
    size_t n;
};

/* "Healthy"/"Unhealthy", or NULL when the plugin does not advertise this UUID. */
static const char *plugin_health(const struct plugin_view *v, const char *uuid)
{
    for (size_t i = 0; v->on && uuid[0] && i < v->n; i++)
        if (strcmp(v->ids[i], uuid) == 0)
            return v->healthy[i] ? "Healthy" : "Unhealthy";
    return NULL;
}

/* "NV4" when NVLinks join the two GPUs, else the PCIe word (nvidia-smi topo's notation). */
static void link_word(const struct gpu_link *l, char *buf, size_t len)
{
    if (l->nvlinks > 0)
        snprintf(buf, len, "NV%d", l->nvlinks);
    else if (l->pcie == GPU_LINK_UNKNOWN)
        snprintf(buf, len, "?");
    else
        snprintf(buf, len, "%s", gpu_link_kind_name(l->pcie));
}

static void print_links(const struct gpu_inventory *inv);

static void print_table(const struct gpu_inventory *inv, const struct plugin_view *pv)
{
    char mem[32], cc[16], numa[16];

    printf("driver %s, CUDA %d.%d, %d GPU%s\n", inv->driver_version[0] ? inv->driver_version : "?",
           inv->cuda_driver_version / 1000, (inv->cuda_driver_version % 1000) / 10, inv->count,
           inv->count == 1 ? "" : "s");
    if (inv->count == 0)
        return;
    if (pv->on)
        printf("\n%-3s  %-40s  %-24s  %10s  %-12s  %4s  %3s  %-9s  %s\n", "IDX", "UUID", "NAME",
               "MEMORY", "PCI BUS", "NUMA", "CC", "PLUGIN", "HEALTH (NVML)");
    else
        printf("\n%-3s  %-40s  %-24s  %10s  %-12s  %4s  %3s  %s\n", "IDX", "UUID", "NAME", "MEMORY",
               "PCI BUS", "NUMA", "CC", "HEALTH (NVML)");
    for (int i = 0; i < inv->count; i++) {
        const struct gpu_device *d = &inv->devices[i];
        if (d->memory_total_bytes > 0)
            format_bytes(d->memory_total_bytes, mem, sizeof(mem));
        else
            snprintf(mem, sizeof(mem), "-");
        if (d->cc_major >= 0)
            snprintf(cc, sizeof(cc), "%d.%d", d->cc_major, d->cc_minor);
        else
            snprintf(cc, sizeof(cc), "-");
        if (d->numa_node >= 0)
            snprintf(numa, sizeof(numa), "%d", d->numa_node);
        else
            snprintf(numa, sizeof(numa), "-");
        printf("%-3d  %-40s  %-24.24s  %10s  %-12s  %4s  %3s  ", d->index,
               d->uuid[0] ? d->uuid : "-", d->name[0] ? d->name : "-", mem,
               d->pci_bus_id[0] ? d->pci_bus_id : "-", numa, cc);
        if (pv->on) {
            const char *ph = plugin_health(pv, d->uuid);
            printf("%-9s  ", ph ? ph : "-");
        }
        printf("%s%s%s\n", d->healthy ? "healthy" : "unhealthy", d->healthy ? "" : ": ", d->error);
    }
    if (inv->count >= 2)
        print_links(inv);
    if (!pv->on)
        printf("\nHEALTH (NVML): whether the GPU answers NVML now. An XID (e.g. 79) is an event\n"
               "only a listener sees: for acceld's verdict add --plugin-socket SOCKET (acceld's:\n"
               "/var/lib/kubelet/device-plugins/accel-nvidia.com-gpu.sock); its log names the "
               "XID.\n");
}

static void print_links(const struct gpu_inventory *inv)
{
    printf("\nlinks (NV# = NVLinks, PIX/PXB/PHB/NODE/SYS = PCIe path, X = self, ? = unknown):\n");
    printf("%-5s", "");
    for (int j = 0; j < inv->count; j++)
        printf(j + 1 < inv->count ? " GPU%-3d" : " GPU%d", j);
    printf("\n");
    for (int i = 0; i < inv->count; i++) {
        printf("GPU%-2d", i);
        for (int j = 0; j < inv->count; j++) {
            char w[16];
            link_word(gpu_inventory_link(inv, i, j), w, sizeof(w));
            printf(j + 1 < inv->count ? " %-6s" : " %s", w);
        }
        printf("\n");
    }
}

/* json_object_set_new that reports allocation failure through *ok. */
static void set(json_t *o, const char *k, json_t *v, bool *ok)
{
    if (!v || json_object_set_new(o, k, v) < 0)
        *ok = false;
}

static json_t *int_or_null(long long v)
{
    return v < 0 ? json_null() : json_integer(v);
}

static json_t *device_json(const struct gpu_inventory *inv, int i, const struct plugin_view *pv,
                           bool *ok)
{
    const struct gpu_device *d = &inv->devices[i];
    json_t *o = json_object(), *links = json_array();
    char cc[16];

    if (!o || !links) {
        json_decref(o);
        json_decref(links);
        *ok = false;
        return NULL;
    }
    snprintf(cc, sizeof(cc), "%d.%d", d->cc_major, d->cc_minor);
    set(o, "index", json_integer(d->index), ok);
    set(o, "uuid", d->uuid[0] ? json_string(d->uuid) : json_null(), ok);
    set(o, "name", d->name[0] ? json_string(d->name) : json_null(), ok);
    set(o, "memory_total_bytes", json_integer((json_int_t)d->memory_total_bytes), ok);
    set(o, "pci_bus_id", d->pci_bus_id[0] ? json_string(d->pci_bus_id) : json_null(), ok);
    set(o, "minor", int_or_null(d->minor), ok);
    set(o, "numa_node", int_or_null(d->numa_node), ok);
    set(o, "compute_capability", d->cc_major >= 0 ? json_string(cc) : json_null(), ok);
    set(o, "mig", d->mig_enabled < 0 ? json_null() : json_boolean(d->mig_enabled), ok);
    set(o, "vbios", d->vbios[0] ? json_string(d->vbios) : json_null(), ok);
    set(o, "driver_version",
        inv->driver_version[0] ? json_string(inv->driver_version) : json_null(), ok);
    set(o, "cuda_driver_version",
        inv->cuda_driver_version > 0 ? json_integer(inv->cuda_driver_version) : json_null(), ok);
    set(o, "health", json_string(d->healthy ? "healthy" : "unhealthy"), ok);
    set(o, "error", d->healthy ? json_null() : json_string(d->error), ok);
    if (pv->on) {
        const char *ph = plugin_health(pv, d->uuid);
        set(o, "plugin_health", ph ? json_string(ph) : json_null(), ok);
    }

    /* One entry per other GPU. */
    for (int j = 0; j < inv->count; j++) {
        const struct gpu_link *l = gpu_inventory_link(inv, i, j);
        json_t *e;
        if (j == i)
            continue;
        e = json_object();
        if (!e || json_array_append_new(links, e) < 0) {
            *ok = false;
            continue;
        }
        set(e, "index", json_integer(j), ok);
        set(e, "uuid", inv->devices[j].uuid[0] ? json_string(inv->devices[j].uuid) : json_null(),
            ok);
        set(e, "pcie", json_string(gpu_link_kind_name(l->pcie)), ok);
        set(e, "nvlinks", json_integer(l->nvlinks), ok);
    }
    set(o, "links", links, ok);
    return o;
}

static int print_json(const struct gpu_inventory *inv, const struct plugin_view *pv)
{
    json_t *arr = json_array();
    bool ok = arr != NULL;
    char *s;

    for (int i = 0; ok && i < inv->count; i++) {
        json_t *o = device_json(inv, i, pv, &ok);
        if (o && json_array_append_new(arr, o) < 0)
            ok = false;
    }
    s = ok ? json_dumps(arr, JSON_INDENT(2)) : NULL;
    json_decref(arr);
    if (!s) {
        fprintf(stderr, "accelctl: out of memory formatting JSON\n");
        return ACCELCTL_EXIT_FAILURE;
    }
    printf("%s\n", s);
    free(s);
    return ACCELCTL_EXIT_OK;
}

int accelctl_cmd_gpus(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"nvml", required_argument, NULL, 'n'},
        {"sysfs-root", required_argument, NULL, 's'},
        {"plugin-socket", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    struct gpu_inventory_options o = {0};
    struct gpu_inventory *inv = NULL;
    struct plugin_view pv = {0};
    const char *plugin_socket = NULL;
    bool json = false;
    char err[512] = "";
    int c, rc;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 'n':
            o.nvml_path = optarg;
            break;
        case 's':
            o.sysfs_root = optarg;
            break;
        case 'p':
            plugin_socket = optarg;
            break;
        case 'h':
            gpus_usage(stdout);
            return ACCELCTL_EXIT_OK;
        default:
            fprintf(stderr, "accelctl gpus: bad option '%s'\n", argv[optind - 1]);
            gpus_usage(stderr);
            return ACCELCTL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "accelctl gpus: unexpected argument '%s'\n", argv[optind]);
        gpus_usage(stderr);
        return ACCELCTL_EXIT_USAGE;
    }

    rc = gpu_inventory_load(&o, NULL, &inv, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "accelctl: %s\n", err);
        return ACCELCTL_EXIT_FAILURE;
    }
    if (plugin_socket) {
        if (accelctl_plugin_health(plugin_socket, &pv.ids, &pv.healthy, &pv.n) < 0) {
            gpu_inventory_free(inv);
            return ACCELCTL_EXIT_FAILURE;
        }
        pv.on = true;
    }
    if (json)
        rc = print_json(inv, &pv);
    else {
        print_table(inv, &pv);
        rc = ACCELCTL_EXIT_OK;
    }
    gpu_inventory_free(inv);
    for (size_t i = 0; i < pv.n; i++)
        free(pv.ids[i]);
    free(pv.ids);
    free(pv.healthy);
    if (fflush(stdout) != 0) {
        perror("accelctl: writing output");
        return ACCELCTL_EXIT_FAILURE;
    }
    return rc;
}
