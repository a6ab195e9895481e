/*
 * pci-sysfs.c — NVIDIA GPUs from Linux's PCI sysfs: the scan, one GPU's state again, the
 * bind to vfio-pci, the parsers of sysfs text and the names of the data-center boards. See
 * pci-sysfs.h for the sources.
 */
#include "pci-sysfs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inventory.h"
#include "util.h"

#define CLASS_BASE_DISPLAY 0x03u
#define CLASS_BASE_BRIDGE 0x06u

/* ---- parsers ---- */

int gpu_pci_parse_hex(const char *text, size_t len, unsigned *ret)
{
    while (len > 0 && text[len - 1] == '\n')
        len--;
    if (len < 3 || len > 10 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X'))
        return -EINVAL;
    unsigned long v = 0;
    for (size_t i = 2; i < len; i++) {
        int c = tolower((unsigned char)text[i]);
        if (!isxdigit(c))
            return -EINVAL;
        v = v * 16 + (unsigned long)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    if (v > 0xffffffu)
        return -EINVAL;
    *ret = (unsigned)v;
    return 0;
}

const char *gpu_pci_link_name(const char *link, size_t len, size_t *ret_len)
{
    if (memchr(link, '\0', len))
        return NULL;
    while (len > 0 && link[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && link[start - 1] != '/')
        start--;
    size_t n = len - start;
    if (n == 0 || (n == 1 && link[start] == '.') ||
        (n == 2 && link[start] == '.' && link[start + 1] == '.'))
        return NULL;
    *ret_len = n;
    return link + start;
}

int gpu_pci_parse_group(const char *link, size_t len, int *ret)
{
    size_t n;
    const char *name = gpu_pci_link_name(link, len, &n);
    if (!name || n > 9)
        return -EINVAL;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)name[i]))
            return -EINVAL;
        v = v * 10 + (name[i] - '0');
    }
    *ret = v;
    return 0;
}

bool gpu_pci_valid_bdf(const char *s)
{
    static const char shape[] = "xxxx:xx:xx.x";
    if (strlen(s) != sizeof(shape) - 1)
        return false;
    for (size_t i = 0; i < sizeof(shape) - 1; i++) {
        if (shape[i] != 'x') {
            if (s[i] != shape[i])
                return false;
        } else if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) {
            return false;
        }
    }
    unsigned dev = (unsigned)strtoul(s + 8, NULL, 16);
    return dev <= 0x1f && s[11] <= '7';
}

/* ---- names ---- */

/* NVIDIA data-center GPUs in the PCI ID Repository (https://pci-ids.ucw.cz, pci.ids version
 * 2026.08.22, vendor 10de): device id and name, as lspci prints them. A board missing here
 * gets its hex device id as its name, or one from vfio.resourceNames. */
static const struct {
    unsigned device;
    const char *name;
} names[] = {
    {0x1db1, "GV100GL [Tesla V100 SXM2 16GB]"},
    {0x1db4, "GV100GL [Tesla V100 PCIe 16GB]"},
    {0x1db5, "GV100GL [Tesla V100 SXM2 32GB]"},
    {0x1db6, "GV100GL [Tesla V100 PCIe 32GB]"},
    {0x1db8, "GV100GL [Tesla V100 SXM3 32GB]"},
    {0x1df6, "GV100GL [Tesla V100S PCIe 32GB]"},
    {0x1eb8, "TU104GL [Tesla T4]"},
    {0x20b0, "GA100 [A100 SXM4 40GB]"},
    {0x20b1, "GA100 [A100 PCIe 40GB]"},
    {0x20b2, "GA100 [A100 SXM4 80GB]"},
    {0x20b3, "GA100 [A100-SXM-64GB]"},
    {0x20b5, "GA100 [A100 PCIe 80GB]"},
    {0x20b7, "GA100GL [A30 PCIe]"},
    {0x20b8, "GA100 [A100X]"},
    {0x20b9, "GA100 [A30X]"},
    {0x20bd, "GA100 [A800 SXM4 40GB]"},
    {0x20f1, "GA100 [A100 PCIe 40GB]"},
    {0x20f3, "GA100 [A800-SXM4-80GB]"},
    {0x20f5, "GA100 [A800 80GB PCIe]"},
    {0x20f6, "GA100 [A800 40GB PCIe]"},
    {0x2235, "GA102GL [A40]"},
    {0x2236, "GA102GL [A10]"},
    {0x2237, "GA102GL [A10G]"},
    {0x25b6, "GA107GL [A2 / A16]"},
    {0x2313, "GH100 [H100 CNX]"},
    {0x2321, "GH100 [H100L 94GB]"},
    {0x2322, "GH100 [H800 PCIe]"},
    {0x2324, "GH100 [H800]"},
    {0x2329, "GH100 [H20]"},
    {0x2330, "GH100 [H100 SXM5 80GB]"},
    {0x2331, "GH100 [H100 PCIe]"},
    {0x2335, "GH100 [H200 SXM 141GB]"},
    {0x2336, "GH100 [H100]"},
    {0x2337, "GH100 [H100 SXM5 64GB]"},
    {0x2338, "GH100 [H100 SXM5 96GB]"},
    {0x2339, "GH100 [H100 SXM5 94GB]"},
    {0x233b, "GH100 [H200 NVL]"},
    {0x233d, "GH100 [H100 96GB]"},
    {0x2342, "GH100 [GH200 120GB / 480GB]"},
    {0x2348, "GH100 [GH200 144G HBM3e]"},
    {0x26b5, "AD102GL [L40]"},
    {0x26b7, "AD102GL [L20]"},
    {0x26b9, "AD102GL [L40S]"},
    {0x27b8, "AD104GL [L4]"},
    {0x2901, "GB100 [B200]"},
    {0x2909, "GB100 [HGX B200 168GB]"},
    {0x2920, "GB100 [TS4 / B100]"},
    {0x2941, "GB100 [HGX GB200]"},
};

const char *gpu_pci_device_name(unsigned device)
{
    for (size_t i = 0; i < ARRAY_SIZE(names); i++)
        if (names[i].device == device)
            return names[i].name;
    return NULL;
}

int gpu_pci_resource_name(const char *pci_name, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = pci_name; *p; p++) {
        char c = *p;
        if (isspace((unsigned char)c)) {
            while (isspace((unsigned char)p[1]))
                p++;
            c = '_';
        } else if (c == '/' || c == '.') {
            c = '_';
        } else if (isalnum((unsigned char)c)) {
            c = (char)toupper((unsigned char)c);
        } else if (c != '_') {
            continue;
        }
        if (n + 1 >= len)
            return -EINVAL;
        out[n++] = c;
    }
    if (n == 0)
        return -EINVAL;
    out[n] = '\0';
    return 0;
}

/* ---- sysfs ---- */

static int pathf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* A small sysfs file (ids, numa_node): at most len-1 bytes, NUL-terminated. */
static int read_small(const char *path, char *buf, size_t len, size_t *ret_n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, len - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    buf[n] = '\0';
    *ret_n = (size_t)n;
    return 0;
}

static int read_hex(const char *root, const char *bdf, const char *file, unsigned *ret)
{
    char path[PATH_MAX], buf[32];
    size_t n;
    int r = pathf(path, sizeof(path), "%s/bus/pci/devices/%s/%s", root, bdf, file);
    if (r == 0)
        r = read_small(path, buf, sizeof(buf), &n);
    return r < 0 ? r : gpu_pci_parse_hex(buf, n, ret);
}

/* The target of <root>/bus/pci/devices/<bdf>/<link> into buf. */
static int read_link(const char *root, const char *bdf, const char *link, char *buf, size_t len,
                     size_t *ret_n)
{
    char path[PATH_MAX];
    int r = pathf(path, sizeof(path), "%s/bus/pci/devices/%s/%s", root, bdf, link);
    if (r < 0)
        return r;
    ssize_t n = readlink(path, buf, len);
    if (n < 0)
        return -errno;
    if ((size_t)n >= len)
        return -ENAMETOOLONG;
    *ret_n = (size_t)n;
    return 0;
}

static void read_driver(const char *root, struct gpu_pci_gpu *g)
{
    char link[PATH_MAX];
    size_t n = 0, name_len = 0;
    const char *name;
    g->driver[0] = '\0';
    if (read_link(root, g->bdf, "driver", link, sizeof(link), &n) == 0 &&
        (name = gpu_pci_link_name(link, n, &name_len)) && name_len < sizeof(g->driver)) {
        memcpy(g->driver, name, name_len);
        g->driver[name_len] = '\0';
    }
}

/* The group's other functions that are not bridges. */
static void read_group(const char *root, struct gpu_pci_gpu *g)
{
    char link[PATH_MAX], dir[PATH_MAX];
    size_t n = 0;
    g->iommu_group = -1;
    g->n_others = 0;
    if (read_link(root, g->bdf, "iommu_group", link, sizeof(link), &n) < 0 ||
        gpu_pci_parse_group(link, n, &g->iommu_group) < 0)
        return;
    if (pathf(dir, sizeof(dir), "%s/kernel/iommu_groups/%d/devices", root, g->iommu_group) < 0)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, g->bdf) == 0)
            continue;
        unsigned cls;
        /* a function whose class cannot be read counts as a device: never a false "alone" */
        if (gpu_pci_valid_bdf(e->d_name) && read_hex(root, e->d_name, "class", &cls) == 0 &&
            (cls >> 16) == CLASS_BASE_BRIDGE)
            continue;
        if (g->n_others < GPU_PCI_OTHERS_LISTED)
            snprintf(g->others[g->n_others], sizeof(g->others[0]), "%.15s", e->d_name);
        g->n_others++;
    }
    closedir(d);
}

int gpu_pci_refresh(const char *root, struct gpu_pci_gpu *g)
{
    char path[PATH_MAX];
    int r = pathf(path, sizeof(path), "%s/bus/pci/devices/%s", root, g->bdf);
    if (r < 0)
        return r;
    if (access(path, F_OK) != 0)
        return -ENOENT;
    read_driver(root, g);
    read_group(root, g);
    return 0;
}

static int cmp_gpu(const void *a, const void *b)
{
    return strcmp(((const struct gpu_pci_gpu *)a)->bdf, ((const struct gpu_pci_gpu *)b)->bdf);
}

int gpu_pci_scan(const char *root, struct gpu_pci_gpu **ret, size_t *ret_n, char *err,
                 size_t errlen)
{
    char dir[PATH_MAX];
    if (pathf(dir, sizeof(dir), "%s/bus/pci/devices", root) < 0)
        return errbuf_printf(err, errlen, "%s: path too long", root), -ENAMETOOLONG;
    DIR *d = opendir(dir);
    if (!d) {
        int r = -errno;
        errbuf_printf(err, errlen, "cannot list %s: %s", dir, strerror(-r));
        return r;
    }
    struct gpu_pci_gpu *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int r = 0;
    while ((e = readdir(d))) {
        unsigned vendor, cls, device;
        if (!gpu_pci_valid_bdf(e->d_name) || read_hex(root, e->d_name, "vendor", &vendor) < 0 ||
            vendor != GPU_PCI_VENDOR_NVIDIA || read_hex(root, e->d_name, "class", &cls) < 0 ||
            (cls >> 16) != CLASS_BASE_DISPLAY || read_hex(root, e->d_name, "device", &device) < 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct gpu_pci_gpu *nv = realloc(v, ncap * sizeof(*v));
            if (!nv) {
                r = -ENOMEM;
                errbuf_printf(err, errlen, "out of memory");
                break;
            }
            v = nv;
            cap = ncap;
        }
        struct gpu_pci_gpu *g = &v[n++];
        memset(g, 0, sizeof(*g));
        snprintf(g->bdf, sizeof(g->bdf), "%.15s", e->d_name);
        g->device = device;
        char path[PATH_MAX], buf[32];
        size_t len;
        g->numa_node = -1;
        if (pathf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", root, g->bdf) == 0 &&
            read_small(path, buf, sizeof(buf), &len) == 0 &&
            gpu_parse_numa_node(buf, len, &g->numa_node) < 0)
            g->numa_node = -1;
        read_driver(root, g);
        read_group(root, g);
    }
    closedir(d);
    if (r < 0) {
        free(v);
        return r;
    }
    if (n)
        qsort(v, n, sizeof(*v), cmp_gpu);
    *ret = v;
    *ret_n = n;
    return 0;
}

/* Writes text into <root>/bus/pci/<rel> (a sysfs control file). */
static int write_ctl(const char *root, const char *rel, const char *text, char *err, size_t errlen)
{
    char path[PATH_MAX];
    int r = pathf(path, sizeof(path), "%s/bus/pci/%s", root, rel);
    if (r < 0)
        return errbuf_printf(err, errlen, "%s: path too long", rel), r;
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        r = -errno;
        errbuf_printf(err, errlen, "cannot open %s: %s", path, strerror(-r));
        return r;
    }
    size_t len = strlen(text);
    ssize_t n = write(fd, text, len);
    r = n < 0 ? -errno : (size_t)n != len ? -EIO : 0;
    close(fd);
    if (r < 0)
        errbuf_printf(err, errlen, "cannot write \"%s\" into %s: %s", text, path, strerror(-r));
    return r;
}

int gpu_pci_bind_vfio(const char *root, const char *bdf, char *err, size_t errlen)
{
    if (!gpu_pci_valid_bdf(bdf))
        return errbuf_printf(err, errlen, "\"%s\" is not a PCI address", bdf), -EINVAL;
    struct gpu_pci_gpu g = {0};
    snprintf(g.bdf, sizeof(g.bdf), "%.15s", bdf);
    read_driver(root, &g);
    if (strcmp(g.driver, "vfio-pci") == 0)
        return 0;
    char rel[96];
    snprintf(rel, sizeof(rel), "devices/%s/driver_override", bdf);
    int r = write_ctl(root, rel, "vfio-pci", err, errlen);
    if (r == 0 && g.driver[0]) {
        snprintf(rel, sizeof(rel), "drivers/%s/unbind", g.driver);
        r = write_ctl(root, rel, bdf, err, errlen);
    }
    if (r == 0)
        r = write_ctl(root, "drivers/vfio-pci/bind", bdf, err, errlen);
    return r;
}
