/* fixtures.h — the kernel's view of the emulated machine, which accel-emu writes next to the
 * state file for the code that reads the kernel's files: <state>.d/sysfs (PCI devices, the
 * drivers they are bound to, IOMMU groups, in the layout of Linux's sysfs) and <state>.d/dev
 * (the device nodes, as plain files). docs/emulator.md ("The fixture trees") and docs/vfio.md
 * say what is in them and where the layout comes from.
 *
 * Only accel-emu writes them (one process at a time per machine: the state's lock is not held
 * meanwhile, a reader may see a change half made, as with the kernel's own sysfs). */
#pragma once

#include <stddef.h>

#include "state.h"

/* Writes both trees for the machine from scratch under base ("<state>.d"), removing whatever a
 * previous machine left there. 0 or -errno with one line in err. */
int emu_fixtures_init(struct emu_state *st, const char *base, char *err, size_t errlen);

/* Brings the trees in line with the machine after a change (a GPU bound to vfio-pci or back, a
 * function added to or removed from an IOMMU group): drivers' links, driver_override, the
 * group's /dev/vfio node. 0 or -errno with one line in err. */
int emu_fixtures_sync(struct emu_state *st, const char *base, char *err, size_t errlen);

/* The name sysfs gives GPU g's PCI function fn ("0000:18:00.0" for fn 0; the audio function is
 * "0000:18:00.1", the bridge "0000:18:01.0"). */
void emu_fixtures_bdf(const struct emu_gpu *g, unsigned fn, char *buf, size_t len);
