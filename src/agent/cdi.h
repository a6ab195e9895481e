/* cdi.h — the CDI spec (Container Device Interface, JSON) acceld writes for
 * the cdi device-list strategy: one device per GPU named by its UUID, with its
 * /dev/nvidiaN node, plus the control nodes every GPU container needs in the
 * spec-wide edits. The runtime reads it from the CDI dir; Allocate then only
 * names `<vendor>/<class>=<uuid>`.
 *
 * The file is `<dir>/accel-<vendor>-<class>.json`, replaced atomically
 * (fs_write_atomic), so a runtime never reads half a spec. Any thread. */
#pragma once

#include <stddef.h>

#define CDI_SPEC_VERSION "0.5.0"

struct cdi_device {
    const char *name;         /* CDI device name: the GPU UUID */
    const char *const *nodes; /* device node paths (host = container path) */
    size_t n_nodes;
};

/* Renders the spec as JSON. kind is "<vendor>/<class>". *ret_json is owned by
 * the caller (free). Returns 0, -EINVAL for an invalid kind or device name,
 * -ENOMEM. */
int cdi_spec_render(const char *vendor, const char *class, const struct cdi_device *devs,
                    size_t n_devs, const char *const *common_nodes, size_t n_common,
                    char **ret_json);

/* The spec's path for vendor/class under dir, into buf. Returns 0 or -ENAMETOOLONG. */
int cdi_spec_path(const char *dir, const char *vendor, const char *class, char *buf, size_t len);

/* Renders and writes the spec atomically under dir (created if missing).
 * Returns 0 or -errno; on failure the previous file is untouched. */
int cdi_spec_write(const char *dir, const char *vendor, const char *class,
                   const struct cdi_device *devs, size_t n_devs, const char *const *common_nodes,
                   size_t n_common);

/* The same with the file named accel-<vendor>-<class>-<tag>.json (tag NULL:
 * the name above), so that two resources of one kind (nvidia.com/gpu's whole
 * GPUs and a MIG profile's devices) each have their own spec. tag: a CDI
 * device name. */
int cdi_spec_path_tagged(const char *dir, const char *vendor, const char *class, const char *tag,
                         char *buf, size_t len);
int cdi_spec_write_tagged(const char *dir, const char *vendor, const char *class, const char *tag,
                          const struct cdi_device *devs, size_t n_devs,
                          const char *const *common_nodes, size_t n_common);

/* True when name is a valid CDI device name ([A-Za-z0-9][A-Za-z0-9_.:-]*). */
int cdi_valid_device_name(const char *name);
