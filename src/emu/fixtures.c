/* fixtures.c — accel-emu's sysfs and /dev trees; see fixtures.h.
 *
 * The sysfs layout is Linux's (Documentation/ABI/testing/sysfs-bus-pci and
 * sysfs-kernel-iommu_groups, Documentation/driver-api/vfio.rst): devices/pci0000:00/<bdf>/        a
 * PCI function: vendor, device, subsystem_vendor, subsystem_device, class ("0x10de\n" ...),
 * numa_node, driver_override ("(null)\n" when unset), and the links driver ->
 * bus/pci/drivers/<name> (absent when unbound) and iommu_group -> kernel/iommu_groups/<n>
 *   bus/pci/devices/<bdf>           -> the function's directory under devices/
 *   bus/pci/drivers/<name>/<bdf>    -> likewise, for each function the driver is bound to; the
 *                                    driver's bind, unbind, new_id and remove_id files
 *   kernel/iommu_groups/<n>/devices/<bdf> -> every function of the group
 * The emulated functions sit directly under one host bridge (pci0000:00); a real board's sit
 * behind root ports and switches, which only lengthens the links.
 *
 * /dev: nvidia<minor>, nvidiactl, nvidia-uvm, nvidia-uvm-tools, and vfio/vfio (the VFIO
 * container) and vfio/<group> for each group with a function bound to vfio-pci (vfio-pci
 * creates a group's node when it binds one of its devices). Plain files: a cluster script
 * mknods real character devices from them (docs/vfio.md: /dev/vfio/vfio is the misc device
 * 10:196, a group's major is allocated at boot). */
#define _GNU_SOURCE
#include "fixtures.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"
#include "util.h"

#define NVIDIA_VENDOR 0x10deu
#define CLASS_3D 0x030200u      /* display controller, 3D: data-center GPUs */
#define CLASS_AUDIO 0x040300u   /* multimedia, HD audio */
#define CLASS_BRIDGE 0x060400u  /* PCI-to-PCI bridge (a switch port) */
#define AUDIO_DEVICE_ID 0x22bau /* made up: no data-center board has an audio function */
#define BRIDGE_DEVICE_ID 0x1af1u
#define BRIDGE_VENDOR 0x1000u /* a switch vendor, not NVIDIA */

static const char *const drivers[] = {"nvidia", "vfio-pci", "snd_hda_intel", "pcieport"};

static void pathf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

void emu_fixtures_bdf(const struct emu_gpu *g, unsigned fn, char *buf, size_t len)
{
    /* sysfs names functions "0000:18:00.0": 4-digit domain, lower case */
    if (fn == EMU_PCI_FN_BRIDGE)
        pathf(buf, len, "%04x:%02x:01.0", g->pci_domain, g->pci_bus);
    else
        pathf(buf, len, "%04x:%02x:%02x.%u", g->pci_domain, g->pci_bus, g->pci_device,
              fn == EMU_PCI_FN_AUDIO ? 1 : 0);
}

struct ctx {
    const char *base;
    char *err;
    size_t errlen;
};

static int failed(struct ctx *c, const char *what, const char *path, int r)
{
    errbuf_printf(c->err, c->errlen, "cannot %s %s: %s", what, path, strerror(-r));
    return r;
}

static int put(struct ctx *c, const char *path, mode_t mode, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int put(struct ctx *c, const char *path, mode_t mode, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    int r = fs_write_replace(path, buf, (size_t)n, mode);
    return r < 0 ? failed(c, "write", path, r) : 0;
}

/* path -> target, replacing what is there in one rename (a reader sees the old link or the new
 * one). */
static int link_to(struct ctx *c, const char *path, const char *target)
{
    char tmp[PATH_MAX + 8];
    pathf(tmp, sizeof(tmp), "%s.tmp", path);
    unlink(tmp);
    if (symlink(target, tmp) < 0 || rename(tmp, path) < 0) {
        int r = -errno;
        unlink(tmp);
        return failed(c, "link", path, r);
    }
    return 0;
}

static int gone(struct ctx *c, const char *path)
{
    if (unlink(path) < 0 && errno != ENOENT)
        return failed(c, "remove", path, -errno);
    return 0;
}

static int mkdirs(struct ctx *c, const char *path)
{
    int r = fs_mkdir_p(path, 0755);
    return r < 0 ? failed(c, "create", path, r) : 0;
}

/* One PCI function of the machine, as sync writes it. */
struct fn {
    char bdf[32];
    unsigned vendor, device, subsys, class;
    int numa;
    unsigned group;
    const char *driver;   /* NULL: unbound */
    const char *override; /* driver_override, NULL: unset */
};

static int write_function(struct ctx *c, const struct fn *f)
{
    char dir[PATH_MAX], p[PATH_MAX + 64], t[128];
    int r;
    pathf(dir, sizeof(dir), "%s/sysfs/devices/pci0000:00/%s", c->base, f->bdf);
    if ((r = mkdirs(c, dir)) < 0)
        return r;
    struct {
        const char *name;
        unsigned v;
        int width;
    } ids[] = {{"vendor", f->vendor, 4},
               {"device", f->device, 4},
               {"subsystem_vendor", f->vendor, 4},
               {"subsystem_device", f->subsys, 4},
               {"class", f->class, 6}};
    for (size_t i = 0; i < ARRAY_SIZE(ids); i++) {
        pathf(p, sizeof(p), "%s/%s", dir, ids[i].name);
        if ((r = put(c, p, 0444, "0x%0*x\n", ids[i].width, ids[i].v)) < 0)
            return r;
    }
    pathf(p, sizeof(p), "%s/numa_node", dir);
    if ((r = put(c, p, 0644, "%d\n", f->numa)) < 0)
        return r;
    pathf(p, sizeof(p), "%s/driver_override", dir);
    if ((r = put(c, p, 0644, "%s\n", f->override ? f->override : "(null)")) < 0)
        return r;
    pathf(p, sizeof(p), "%s/iommu_group", dir);
    pathf(t, sizeof(t), "../../../kernel/iommu_groups/%u", f->group);
    if ((r = link_to(c, p, t)) < 0)
        return r;
    pathf(p, sizeof(p), "%s/driver", dir);
    if (f->driver) {
        pathf(t, sizeof(t), "../../../bus/pci/drivers/%s", f->driver);
        r = link_to(c, p, t);
    } else {
        r = gone(c, p);
    }
    if (r < 0)
        return r;
    pathf(t, sizeof(t), "../../../../devices/pci0000:00/%s", f->bdf);
    for (size_t i = 0; i < ARRAY_SIZE(drivers); i++) {
        pathf(p, sizeof(p), "%s/sysfs/bus/pci/drivers/%s/%s", c->base, drivers[i], f->bdf);
        r = f->driver && strcmp(f->driver, drivers[i]) == 0 ? link_to(c, p, t) : gone(c, p);
        if (r < 0)
            return r;
    }
    pathf(p, sizeof(p), "%s/sysfs/bus/pci/devices/%s", c->base, f->bdf);
    pathf(t, sizeof(t), "../../../devices/pci0000:00/%s", f->bdf);
    if ((r = link_to(c, p, t)) < 0)
        return r;
    pathf(p, sizeof(p), "%s/sysfs/kernel/iommu_groups/%u/devices", c->base, f->group);
    if ((r = mkdirs(c, p)) < 0)
        return r;
    pathf(p, sizeof(p), "%s/sysfs/kernel/iommu_groups/%u/devices/%s", c->base, f->group, f->bdf);
    pathf(t, sizeof(t), "../../../../devices/pci0000:00/%s", f->bdf);
    return link_to(c, p, t);
}

/* A function that is not there (any more): every entry naming it. */
static int remove_function(struct ctx *c, const char *bdf, unsigned group)
{
    char p[PATH_MAX + 64];
    int r;
    for (size_t i = 0; i < ARRAY_SIZE(drivers); i++) {
        pathf(p, sizeof(p), "%s/sysfs/bus/pci/drivers/%s/%s", c->base, drivers[i], bdf);
        if ((r = gone(c, p)) < 0)
            return r;
    }
    pathf(p, sizeof(p), "%s/sysfs/bus/pci/devices/%s", c->base, bdf);
    if ((r = gone(c, p)) < 0)
        return r;
    pathf(p, sizeof(p), "%s/sysfs/kernel/iommu_groups/%u/devices/%s", c->base, group, bdf);
    if ((r = gone(c, p)) < 0)
        return r;
    static const char *const files[] = {"vendor",           "device",      "subsystem_vendor",
                                        "subsystem_device", "class",       "numa_node",
                                        "driver_override",  "iommu_group", "driver"};
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        pathf(p, sizeof(p), "%s/sysfs/devices/pci0000:00/%s/%s", c->base, bdf, files[i]);
        if ((r = gone(c, p)) < 0)
            return r;
    }
    pathf(p, sizeof(p), "%s/sysfs/devices/pci0000:00/%s", c->base, bdf);
    if (rmdir(p) < 0 && errno != ENOENT)
        return failed(c, "remove", p, -errno);
    return 0;
}

int emu_fixtures_sync(struct emu_state *st, const char *base, char *err, size_t errlen)
{
    struct ctx c = {base, err, errlen};
    char p[PATH_MAX + 64];
    int r;
    static const char *const dirs[] = {"sysfs/devices/pci0000:00", "sysfs/bus/pci/devices",
                                       "sysfs/kernel/iommu_groups", "dev/vfio"};
    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
        pathf(p, sizeof(p), "%s/%s", base, dirs[i]);
        if ((r = mkdirs(&c, p)) < 0)
            return r;
    }
    for (size_t i = 0; i < ARRAY_SIZE(drivers); i++) {
        static const char *const ctl[] = {"bind", "unbind", "new_id", "remove_id"};
        pathf(p, sizeof(p), "%s/sysfs/bus/pci/drivers/%s", base, drivers[i]);
        if ((r = mkdirs(&c, p)) < 0)
            return r;
        for (size_t k = 0; k < ARRAY_SIZE(ctl); k++) {
            pathf(p, sizeof(p), "%s/sysfs/bus/pci/drivers/%s/%s", base, drivers[i], ctl[k]);
            if (access(p, F_OK) != 0 && (r = put(&c, p, 0200, "%s", "")) < 0)
                return r;
        }
    }
    /* the VFIO container, once vfio is loaded (the emulated machine always has it) */
    pathf(p, sizeof(p), "%s/dev/vfio/vfio", base);
    if ((r = put(&c, p, 0666, "%s", "")) < 0)
        return r;
    unsigned n = emu_state_gpu_count(st);
    for (unsigned i = 0; i < n; i++) {
        const struct emu_gpu *g = emu_state_gpu(st, i);
        unsigned vfio = __atomic_load_n(&g->vfio, __ATOMIC_RELAXED);
        unsigned fns = __atomic_load_n(&g->pci_functions, __ATOMIC_RELAXED);
        struct fn f = {.vendor = NVIDIA_VENDOR,
                       .device = g->pci_device_id >> 16,
                       .subsys = ((g->pci_device_id >> 16) + 0x100u) & 0xffffu,
                       .class = CLASS_3D,
                       .numa = g->numa_node,
                       .group = g->iommu_group,
                       .driver = vfio ? "vfio-pci" : "nvidia",
                       .override = vfio ? "vfio-pci" : NULL};
        emu_fixtures_bdf(g, 0, f.bdf, sizeof(f.bdf));
        if ((r = write_function(&c, &f)) < 0)
            return r;
        struct fn audio = f, bridge = f;
        emu_fixtures_bdf(g, EMU_PCI_FN_AUDIO, audio.bdf, sizeof(audio.bdf));
        audio.device = AUDIO_DEVICE_ID;
        audio.subsys = f.subsys;
        audio.class = CLASS_AUDIO;
        audio.driver = "snd_hda_intel";
        audio.override = NULL;
        emu_fixtures_bdf(g, EMU_PCI_FN_BRIDGE, bridge.bdf, sizeof(bridge.bdf));
        bridge.vendor = BRIDGE_VENDOR;
        bridge.device = BRIDGE_DEVICE_ID;
        bridge.subsys = 0;
        bridge.class = CLASS_BRIDGE;
        bridge.driver = "pcieport";
        bridge.override = NULL;
        r = fns & EMU_PCI_FN_AUDIO ? write_function(&c, &audio)
                                   : remove_function(&c, audio.bdf, f.group);
        if (r == 0)
            r = fns & EMU_PCI_FN_BRIDGE ? write_function(&c, &bridge)
                                        : remove_function(&c, bridge.bdf, f.group);
        if (r < 0)
            return r;
    }
    /* a group's node exists while one of its functions is bound to vfio-pci (only GPUs are
     * bound to it here) */
    for (unsigned i = 0; i < n; i++) {
        const struct emu_gpu *g = emu_state_gpu(st, i);
        bool bound = false;
        for (unsigned k = 0; k < n; k++) {
            const struct emu_gpu *o = emu_state_gpu(st, k);
            bound |=
                o->iommu_group == g->iommu_group && __atomic_load_n(&o->vfio, __ATOMIC_RELAXED);
        }
        pathf(p, sizeof(p), "%s/dev/vfio/%u", base, g->iommu_group);
        r = bound ? put(&c, p, 0600, "%s", "") : gone(&c, p);
        if (r < 0)
            return r;
    }
    return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    int r = type == FTW_DP ? rmdir(path) : unlink(path);
    return r < 0 && errno != ENOENT ? -1 : 0;
}

int emu_fixtures_init(struct emu_state *st, const char *base, char *err, size_t errlen)
{
    struct ctx c = {base, err, errlen};
    char p[PATH_MAX + 64];
    int r;
    /* a previous machine's trees go whole (nothing followed outside them: FTW_PHYS) */
    static const char *const trees[] = {"sysfs", "dev"};
    for (size_t i = 0; i < ARRAY_SIZE(trees); i++) {
        pathf(p, sizeof(p), "%s/%s", base, trees[i]);
        if (nftw(p, remove_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
            return failed(&c, "clear", p, -errno);
    }
    pathf(p, sizeof(p), "%s/dev", base);
    if ((r = mkdirs(&c, p)) < 0)
        return r;
    for (unsigned i = 0; i < emu_state_gpu_count(st); i++) {
        pathf(p, sizeof(p), "%s/dev/nvidia%u", base, emu_state_gpu(st, i)->minor);
        if ((r = put(&c, p, 0666, "%s", "")) < 0)
            return r;
    }
    static const char *const ctl[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
    for (size_t i = 0; i < ARRAY_SIZE(ctl); i++) {
        pathf(p, sizeof(p), "%s/dev/%s", base, ctl[i]);
        if ((r = put(&c, p, 0666, "%s", "")) < 0)
            return r;
    }
    return emu_fixtures_sync(st, base, err, errlen);
}
