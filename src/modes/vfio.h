/* vfio.h — the VFIO mode (docs/vfio.md): NVIDIA GPUs bound to vfio-pci, each handed whole
 * to a virtual machine, served as KubeVirt expects from NVIDIA's kubevirt-gpu-device-plugin:
 * one resource per GPU model (nvidia.com/<PCI device name>, or vfio.resourceNames), device
 * ID = the GPU's PCI address, Allocate = /dev/vfio/vfio + /dev/vfio/<group> ("mrw") and
 * PCI_RESOURCE_NVIDIA_COM_<NAME>=<address,...>. Each model is a pgpu table (pgpu.h) with
 * those nodes and that env; NUMA from sysfs.
 *
 * NVML does not see these GPUs: they come from PCI sysfs (pci-sysfs.h). A GPU is served when
 * it is bound to vfio-pci and its mode, looked up by its PCI address, is vfio (mode: vfio, or
 * gpuModes: <address>=vfio). A GPU whose IOMMU group holds another device that is not a PCI
 * bridge is refused (a VM gets a whole group: the other device would go with it).
 *
 * Health: an inotify watch on <devRoot>/vfio — vfio-pci makes a group's node when it binds
 * the group's first device and removes it when it unbinds the last — and, on each event,
 * every served GPU's sysfs read again: Healthy while it is still bound to vfio-pci, in the
 * same group, alone in it (bridges aside) and its group node exists. Nothing is polled: an
 * idle node costs nothing.
 *
 * Threads: the event loop thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "acceld-config.h"

struct ev_loop;
struct pgpu;
struct vfio_node;

/* vfio.bind at start, before NVML is opened (the nvidia driver's unbind waits for every user
 * of the GPU, NVML's handles included): every NVIDIA GPU of mode vfio (by PCI address) that
 * vfio.bind names and is bound to another driver is bound to vfio-pci. Disruptive: whatever
 * ran on the GPU loses it. Logs each bind; returns how many failed. */
size_t vfio_bind_at_start(const struct acceld_config *cfg);

/* Scans sysfs and builds one table per model of the GPUs served (cfg copied where needed).
 * Returns 0 (possibly with none served: vfio_node_models 0), or -errno with a line in err. */
int vfio_node_new(const struct acceld_config *cfg, struct vfio_node **ret, char *err,
                  size_t errlen);
struct vfio_node *vfio_node_free(struct vfio_node *v); /* NULL ok; returns NULL */

size_t vfio_node_models(const struct vfio_node *v);
/* The model's resource name ("nvidia.com/GH100_H100_SXM5_80GB") and its table. Borrowed. */
const char *vfio_node_resource(const struct vfio_node *v, size_t model);
struct pgpu *vfio_node_table(struct vfio_node *v, size_t model);

/* Watches <devRoot>/vfio on loop; fn(ud, model) is called when a model's device list changed
 * (health). 0 or -errno. */
typedef void (*vfio_changed_fn)(void *ud, size_t model);
int vfio_node_watch(struct vfio_node *v, struct ev_loop *loop, vfio_changed_fn fn, void *ud);

/* Reads every served GPU's state again and applies it (what an inotify event does); fn is
 * called for each model that changed. Returns how many GPUs changed. */
size_t vfio_node_recheck(struct vfio_node *v);
