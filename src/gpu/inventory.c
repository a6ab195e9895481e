/*
 * inventory.c — builds struct gpu_inventory from NVML and sysfs: per-GPU properties, health
 * (a GPU whose essential queries fail is reported, not fatal) and the pairwise link matrix
 * (PCIe common ancestor + active NVLinks).
 */
#include "inventory.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *gpu_link_kind_name(enum gpu_link_kind k)
{
    switch (k) {
    case GPU_LINK_SYSTEM:
        return "SYS";
    case GPU_LINK_NODE:
        return "NODE";
    case GPU_LINK_HOSTBRIDGE:
        return "PHB";
    case GPU_LINK_MULTIPLE:
        return "PXB";
    case GPU_LINK_SINGLE:
        return "PIX";
    case GPU_LINK_BOARD:
        return "BOARD";
    case GPU_LINK_SELF:
        return "X";
    case GPU_LINK_UNKNOWN:
        break;
    }
    return "unknown";
}

/* Parses up to max_digits hex digits; at least one. */
static const char *parse_hex(const char *s, int max_digits, unsigned long *ret)
{
    unsigned long v = 0;
    int n = 0;

    while (n < max_digits && isxdigit((unsigned char)s[n])) {
        int c = tolower((unsigned char)s[n]);
        v = v * 16 + (unsigned long)(c <= '9' ? c - '0' : c - 'a' + 10);
        n++;
    }
    if (n == 0 || isxdigit((unsigned char)s[n]))
        return NULL;
    *ret = v;
    return s + n;
}

int gpu_pci_bus_id_normalize(const char *in, char *out, size_t outlen)
{
    unsigned long dom = 0, bus, dev, fn;
    const char *p, *colon;

    if (!in || !out || outlen < 13)
        return -EINVAL;
    /* With a domain there are two colons. */
    colon = strchr(in, ':');
    if (!colon)
        return -EINVAL;
    p = in;
    if (strchr(colon + 1, ':')) {
        p = parse_hex(p, 8, &dom);
        if (!p || *p != ':' || dom > 0xffff)
            return -EINVAL;
        p++;
    }
    p = parse_hex(p, 2, &bus);
    if (!p || *p != ':')
        return -EINVAL;
    p = parse_hex(p + 1, 2, &dev);
    if (!p || *p != '.' || dev > 0x1f)
        return -EINVAL;
    p = parse_hex(p + 1, 1, &fn);
    if (!p || *p != '\0' || fn > 7)
        return -EINVAL;
    snprintf(out, outlen, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
    return 0;
}

int gpu_parse_numa_node(const char *text, size_t len, int *ret_node)
{
    char buf[16];
    char *end;
    long v;

    /* Exactly one integer, optionally followed by a newline. */
    while (len > 0 && (text[len - 1] == '\n'))
        len--;
    if (len == 0 || len >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (!(isdigit((unsigned char)buf[0]) || (buf[0] == '-' && isdigit((unsigned char)buf[1]))))
        return -EINVAL;
    errno = 0;
    v = strtol(buf, &end, 10);
    if (errno || *end != '\0' || v < -1 || v > 65535)
        return -EINVAL;
    *ret_node = (int)v;
    return 0;
}

/* NUMA node of a PCI device from sysfs: 0 and the node (-1 if sysfs says unknown), or
 * -ENOENT when sysfs has no entry / an unreadable one. */
static int sysfs_numa_node(const char *root, const char *bus_id, int *ret_node)
{
    char path[PATH_MAX];
    char buf[32];
    ssize_t n;
    int fd, r;

    if (snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", root, bus_id) >=
        (int)sizeof(path))
        return -ENAMETOOLONG;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n <= 0)
        return -ENOENT;
    r = gpu_parse_numa_node(buf, (size_t)n, ret_node);
    return r < 0 ? -ENOENT : 0;
}

/* Records the first failure that makes a GPU unhealthy. */
static void mark_unhealthy(struct gpu_nvml *nvml, struct gpu_device *d, const char *call,
                           nvmlReturn_t r)
{
    if (!d->healthy)
        return;
    d->healthy = false;
    snprintf(d->error, sizeof(d->error), "%s: %s", call, gpu_nvml_strerror(nvml, r));
}

/* An optional query failed: only a lost GPU makes that a health problem. */
static void optional_failed(struct gpu_nvml *nvml, struct gpu_device *d, const char *call,
                            nvmlReturn_t r)
{
    if (r == NVML_ERROR_GPU_IS_LOST)
        mark_unhealthy(nvml, d, call, r);
}

static void load_device(struct gpu_nvml *nvml, const char *sysfs_root, int i, struct gpu_device *d,
                        nvmlDevice_t *ret_handle)
{
    nvmlDevice_t h = NULL;
    nvmlReturn_t r;

    d->index = i;
    d->minor = -1;
    d->numa_node = -1;
    d->cc_major = d->cc_minor = -1;
    d->mig_enabled = -1;
    d->healthy = true;
    *ret_handle = NULL;

    r = nvml->nvmlDeviceGetHandleByIndex_v2((unsigned int)i, &h);
    if (r != NVML_SUCCESS) {
        mark_unhealthy(nvml, d, "nvmlDeviceGetHandleByIndex_v2", r);
        return;
    }

    /* Essential: without a UUID the GPU cannot be allocated, without memory not shared. */
    if (!nvml->nvmlDeviceGetUUID)
        mark_unhealthy(nvml, d, "nvmlDeviceGetUUID", NVML_ERROR_FUNCTION_NOT_FOUND);
    else if ((r = nvml->nvmlDeviceGetUUID(h, d->uuid, sizeof(d->uuid))) != NVML_SUCCESS) {
        d->uuid[0] = '\0';
        mark_unhealthy(nvml, d, "nvmlDeviceGetUUID", r);
    }
    d->uuid[sizeof(d->uuid) - 1] = '\0';

    if (nvml->nvmlDeviceGetMemoryInfo_v2) {
        nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
        r = nvml->nvmlDeviceGetMemoryInfo_v2(h, &m);
        if (r == NVML_SUCCESS)
            d->memory_total_bytes = m.total;
    } else {
        r = NVML_ERROR_FUNCTION_NOT_FOUND;
    }
    if (r != NVML_SUCCESS && r != NVML_ERROR_GPU_IS_LOST && nvml->nvmlDeviceGetMemoryInfo) {
        nvmlMemory_t m;
        r = nvml->nvmlDeviceGetMemoryInfo(h, &m);
        if (r == NVML_SUCCESS)
            d->memory_total_bytes = m.total;
    }
    if (r != NVML_SUCCESS)
        mark_unhealthy(nvml, d, "nvmlDeviceGetMemoryInfo", r);

    if (nvml->nvmlDeviceGetName) {
        r = nvml->nvmlDeviceGetName(h, d->name, sizeof(d->name));
        if (r != NVML_SUCCESS) {
            d->name[0] = '\0';
            optional_failed(nvml, d, "nvmlDeviceGetName", r);
        }
        d->name[sizeof(d->name) - 1] = '\0';
    }

    if (nvml->nvmlDeviceGetPciInfo_v3) {
        nvmlPciInfo_t pci;
        memset(&pci, 0, sizeof(pci));
        r = nvml->nvmlDeviceGetPciInfo_v3(h, &pci);
        if (r == NVML_SUCCESS) {
            pci.busId[sizeof(pci.busId) - 1] = '\0';
            if (gpu_pci_bus_id_normalize(pci.busId, d->pci_bus_id, sizeof(d->pci_bus_id)) < 0)
                snprintf(d->pci_bus_id, sizeof(d->pci_bus_id), "%04x:%02x:%02x.0",
                         pci.domain & 0xffffu, pci.bus & 0xffu, pci.device & 0x1fu);
        } else {
            optional_failed(nvml, d, "nvmlDeviceGetPciInfo_v3", r);
        }
    }

    if (nvml->nvmlDeviceGetMinorNumber) {
        unsigned int minor;
        r = nvml->nvmlDeviceGetMinorNumber(h, &minor);
        if (r == NVML_SUCCESS && minor <= INT_MAX)
            d->minor = (int)minor;
        else
            optional_failed(nvml, d, "nvmlDeviceGetMinorNumber", r);
    }

    if (nvml->nvmlDeviceGetCudaComputeCapability) {
        int major, minor;
        r = nvml->nvmlDeviceGetCudaComputeCapability(h, &major, &minor);
        if (r == NVML_SUCCESS) {
            d->cc_major = major;
            d->cc_minor = minor;
        } else {
            optional_failed(nvml, d, "nvmlDeviceGetCudaComputeCapability", r);
        }
    }

    if (nvml->nvmlDeviceGetMigMode) {
        unsigned int cur, pending;
        r = nvml->nvmlDeviceGetMigMode(h, &cur, &pending);
        if (r == NVML_SUCCESS)
            d->mig_enabled = cur == NVML_DEVICE_MIG_ENABLE;
        else if (r == NVML_ERROR_NOT_SUPPORTED)
            d->mig_enabled = 0; /* not MIG-capable */
        else
            optional_failed(nvml, d, "nvmlDeviceGetMigMode", r);
    }

    if (nvml->nvmlDeviceGetVbiosVersion) {
        r = nvml->nvmlDeviceGetVbiosVersion(h, d->vbios, sizeof(d->vbios));
        if (r != NVML_SUCCESS) {
            d->vbios[0] = '\0';
            optional_failed(nvml, d, "nvmlDeviceGetVbiosVersion", r);
        }
        d->vbios[sizeof(d->vbios) - 1] = '\0';
    }

    /* NUMA: sysfs is what the kernel uses for placement; NVML only when sysfs has nothing. */
    if (d->pci_bus_id[0] && sysfs_numa_node(sysfs_root, d->pci_bus_id, &d->numa_node) == 0) {
        /* found (possibly -1 = the platform does not say) */
    } else if (nvml->nvmlDeviceGetNumaNodeId) {
        unsigned int node;
        r = nvml->nvmlDeviceGetNumaNodeId(h, &node);
        if (r == NVML_SUCCESS && node <= 65535)
            d->numa_node = (int)node;
        else if (r != NVML_SUCCESS)
            optional_failed(nvml, d, "nvmlDeviceGetNumaNodeId", r);
    }

    *ret_handle = h;
}

static enum gpu_link_kind level_to_kind(nvmlGpuTopologyLevel_t level)
{
    switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
        return GPU_LINK_BOARD;
    case NVML_TOPOLOGY_SINGLE:
        return GPU_LINK_SINGLE;
    case NVML_TOPOLOGY_MULTIPLE:
        return GPU_LINK_MULTIPLE;
    case NVML_TOPOLOGY_HOSTBRIDGE:
        return GPU_LINK_HOSTBRIDGE;
    case NVML_TOPOLOGY_NODE:
        return GPU_LINK_NODE;
    case NVML_TOPOLOGY_SYSTEM:
        return GPU_LINK_SYSTEM;
    }
    return GPU_LINK_UNKNOWN;
}

static int find_bus_id(const struct gpu_inventory *inv, const char *bus_id)
{
    for (int j = 0; j < inv->count; j++)
        if (inv->devices[j].pci_bus_id[0] && strcmp(inv->devices[j].pci_bus_id, bus_id) == 0)
            return j;
    return -1;
}

/* Link matrix. Any failure leaves GPU_LINK_UNKNOWN / 0 NVLinks; never an error. */
static void load_links(struct gpu_nvml *nvml, struct gpu_inventory *inv, nvmlDevice_t *handles)
{
    int n = inv->count;

    for (int i = 0; i < n; i++) {
        inv->links[i * n + i].pcie = GPU_LINK_SELF;
        for (int j = i + 1; j < n; j++) {
            nvmlGpuTopologyLevel_t level;
            enum gpu_link_kind k = GPU_LINK_UNKNOWN;
            if (handles[i] && handles[j] && nvml->nvmlDeviceGetTopologyCommonAncestor &&
                nvml->nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j], &level) ==
                    NVML_SUCCESS)
                k = level_to_kind(level);
            inv->links[i * n + j].pcie = k;
            inv->links[j * n + i].pcie = k;
        }
    }

    if (!nvml->nvmlDeviceGetNvLinkState || !nvml->nvmlDeviceGetNvLinkRemotePciInfo_v2)
        return;
    /* Each GPU counts its own active links by peer; the matrix row is that GPU's view. */
    for (int i = 0; i < n; i++) {
        if (!handles[i])
            continue;
        for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
            nvmlEnableState_t active;
            nvmlPciInfo_t pci;
            char bus_id[32];
            nvmlReturn_t r = nvml->nvmlDeviceGetNvLinkState(handles[i], l, &active);
            int j;
            if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT ||
                r == NVML_ERROR_GPU_IS_LOST)
                break; /* no (more) links on this GPU */
            if (r != NVML_SUCCESS || active != NVML_FEATURE_ENABLED)
                continue;
            memset(&pci, 0, sizeof(pci));
            if (nvml->nvmlDeviceGetNvLinkRemotePciInfo_v2(handles[i], l, &pci) != NVML_SUCCESS)
                continue;
            pci.busId[sizeof(pci.busId) - 1] = '\0';
            if (gpu_pci_bus_id_normalize(pci.busId, bus_id, sizeof(bus_id)) < 0)
                continue;
            j = find_bus_id(inv, bus_id);
            if (j >= 0 && j != i)
                inv->links[i * n + j].nvlinks++;
        }
    }
}

int gpu_inventory_load(const struct gpu_inventory_options *opts, struct gpu_nvml *nvml,
                       struct gpu_inventory **ret, char *err, size_t errlen)
{
    const char *sysfs_root = opts && opts->sysfs_root ? opts->sysfs_root : "/sys";
    struct gpu_nvml *owned = NULL;
    struct gpu_inventory *inv = NULL;
    nvmlDevice_t *handles = NULL;
    unsigned int count = 0;
    nvmlReturn_t r;
    int rc;

    if (!nvml) {
        rc = gpu_nvml_open(opts ? opts->nvml_path : NULL, &owned, err, errlen);
        if (rc < 0)
            return rc;
        nvml = owned;
    }

    r = nvml->nvmlDeviceGetCount_v2(&count);
    if (r != NVML_SUCCESS) {
        errbuf_printf(err, errlen, "cannot count GPUs: nvmlDeviceGetCount_v2: %s",
                      gpu_nvml_strerror(nvml, r));
        rc = gpu_nvml_errno(r);
        goto out;
    }
    if (count > 4096) {
        errbuf_printf(err, errlen, "NVML reports an implausible GPU count (%u)", count);
        rc = -EPROTO;
        goto out;
    }

    rc = -ENOMEM;
    inv = calloc(1, sizeof(*inv));
    if (!inv)
        goto oom;
    inv->count = (int)count;
    if (count > 0) {
        inv->devices = calloc(count, sizeof(*inv->devices));
        inv->links = calloc((size_t)count * count, sizeof(*inv->links));
        handles = calloc(count, sizeof(*handles));
        if (!inv->devices || !inv->links || !handles)
            goto oom;
    }

    if (nvml->nvmlSystemGetDriverVersion &&
        nvml->nvmlSystemGetDriverVersion(inv->driver_version, sizeof(inv->driver_version)) !=
            NVML_SUCCESS)
        inv->driver_version[0] = '\0';
    inv->driver_version[sizeof(inv->driver_version) - 1] = '\0';
    {
        int v = 0;
        if ((nvml->nvmlSystemGetCudaDriverVersion_v2 &&
             nvml->nvmlSystemGetCudaDriverVersion_v2(&v) == NVML_SUCCESS) ||
            (nvml->nvmlSystemGetCudaDriverVersion &&
             nvml->nvmlSystemGetCudaDriverVersion(&v) == NVML_SUCCESS))
            inv->cuda_driver_version = v;
    }

    for (unsigned int i = 0; i < count; i++)
        load_device(nvml, sysfs_root, (int)i, &inv->devices[i], &handles[i]);
    if (count > 0)
        load_links(nvml, inv, handles);

    *ret = inv;
    inv = NULL;
    rc = 0;
    goto out;

oom:
    errbuf_printf(err, errlen, "out of memory loading the GPU inventory");
out:
    free(handles);
    gpu_inventory_free(inv);
    gpu_nvml_free(owned);
    return rc;
}

struct gpu_inventory *gpu_inventory_free(struct gpu_inventory *inv)
{
    if (!inv)
        return NULL;
    free(inv->devices);
    free(inv->links);
    free(inv);
    return NULL;
}

const struct gpu_device *gpu_inventory_find_uuid(const struct gpu_inventory *inv, const char *uuid)
{
    if (!inv || !uuid)
        return NULL;
    for (int i = 0; i < inv->count; i++)
        if (inv->devices[i].uuid[0] && strcmp(inv->devices[i].uuid, uuid) == 0)
            return &inv->devices[i];
    return NULL;
}

const struct gpu_link *gpu_inventory_link(const struct gpu_inventory *inv, int i, int j)
{
    if (!inv || i < 0 || j < 0 || i >= inv->count || j >= inv->count)
        return NULL;
    return &inv->links[i * inv->count + j];
}
