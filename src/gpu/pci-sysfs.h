/*
 * pci-sysfs.h — the node's NVIDIA GPUs as Linux's PCI sysfs shows them, for the GPUs NVML
 * cannot see: those bound to vfio-pci for passthrough to a VM (docs/vfio.md).
 *
 * Sources: Documentation/ABI/testing/sysfs-bus-pci (/sys/bus/pci/devices/<bdf>/{vendor,
 * device,class,numa_node,driver_override}, the `driver` link, the drivers' `bind` and `unbind`),
 * Documentation/ABI/testing/sysfs-kernel-iommu_groups (the `iommu_group` link and
 * /sys/kernel/iommu_groups/<n>/devices/), Documentation/driver-api/vfio.rst (a group is given to
 * a user whole; its "viable" rule). A GPU is a function of NVIDIA's vendor id 0x10de with a
 * display-controller class (base class 0x03).
 *
 * sysfs is the kernel's (root-owned), but every file is still read bounded and parsed strictly
 * (the parsers below are fuzzed: tests/fuzz/fuzz-pci-sysfs.c). Any thread; no state.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define GPU_PCI_VENDOR_NVIDIA 0x10deu
#define GPU_PCI_BDF_SIZE 16 /* "0000:18:00.0" and its NUL, with room */
#define GPU_PCI_OTHERS_LISTED 4

struct gpu_pci_gpu {
    char bdf[GPU_PCI_BDF_SIZE]; /* as sysfs names it: "0000:18:00.0" */
    unsigned device;            /* PCI device id (0x2330) */
    int numa_node;              /* -1 unknown */
    char driver[32];            /* the bound driver's name ("vfio-pci", "nvidia"), "" none */
    int iommu_group;            /* -1: none (no IOMMU, or it is off) */
    /* the other functions of its IOMMU group that are not PCI bridges (base class 0x06): any
     * of them keeps the group from being given to one VM with the GPU alone */
    size_t n_others;
    char others[GPU_PCI_OTHERS_LISTED][GPU_PCI_BDF_SIZE]; /* the first of them */
};

/* Every NVIDIA display function under <sysfs_root>/bus/pci/devices, sorted by address.
 * *ret (NULL when none) is owned by the caller (free). Returns 0, or -errno with a line in
 * err (the directory unreadable; a function whose files cannot be read is skipped). */
int gpu_pci_scan(const char *sysfs_root, struct gpu_pci_gpu **ret, size_t *ret_n, char *err,
                 size_t errlen);

/* Reads g->bdf's driver, IOMMU group and group members again (health). Returns 0, or -ENOENT
 * when the function is gone from sysfs. */
int gpu_pci_refresh(const char *sysfs_root, struct gpu_pci_gpu *g);

/* Binds the function to vfio-pci the way the kernel documents for one device: "vfio-pci"
 * into its driver_override, its address into its driver's `unbind` (when bound), then into
 * vfio-pci's `bind`. Blocks while the old driver has users (a process on the GPU). Returns 0
 * or -errno with a line in err. */
int gpu_pci_bind_vfio(const char *sysfs_root, const char *bdf, char *err, size_t errlen);

/* ---- parsers of sysfs text (pure) ---- */

/* A sysfs id file: "0x10de\n" (vendor, device) or "0x030200\n" (class): 0 and the value,
 * or -EINVAL. */
int gpu_pci_parse_hex(const char *text, size_t len, unsigned *ret);

/* The last component of a link's target ("../../../bus/pci/drivers/vfio-pci" -> "vfio-pci"):
 * a pointer into link and its length; NULL when it is empty, ".", "..", or the text holds a
 * NUL byte. */
const char *gpu_pci_link_name(const char *link, size_t len, size_t *ret_len);

/* An iommu_group link's target (".../kernel/iommu_groups/10"): 0 and the group, or -EINVAL. */
int gpu_pci_parse_group(const char *link, size_t len, int *ret);

/* True when s is a PCI address as sysfs writes it: 4 hex digits of domain, "dddd:bb:dd.f"
 * (lower case), device <= 0x1f, function <= 7. */
bool gpu_pci_valid_bdf(const char *s);

/* ---- names ---- */

/* The PCI ID Repository's name of an NVIDIA data-center GPU ("GH100 [H100 SXM5 80GB]"), or
 * NULL for a device id the built-in table lacks. */
const char *gpu_pci_device_name(unsigned device);

/* A resource name's last part from a PCI name, as NVIDIA's kubevirt-gpu-device-plugin makes
 * it (so KubeVirt's permittedHostDevices keep working): upper case; '/' and '.' become '_',
 * each run of blanks one '_'; anything else but [A-Za-z0-9_] dropped: "GH100 [H100 SXM5 80GB]"
 * -> "GH100_H100_SXM5_80GB". Returns 0, or -EINVAL when nothing is left or it does not fit. */
int gpu_pci_resource_name(const char *pci_name, char *out, size_t len);
