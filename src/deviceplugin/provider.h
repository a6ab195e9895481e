/* provider.h — the seam between the device-plugin transport (dp-service.c,
 * dp-wire.c: sockets, registration, protobuf) and a mode's device logic
 * (src/modes: pgpu.c, replicas.c, vgpu.c; DRA has a transport of its own, src/dra).
 * A provider serves one resource: it owns a device
 * list with health and NUMA topology, answers GetPreferredAllocation and
 * Allocate in plain C structs, and takes GPU health events. It never sees a
 * wire type; the transport never sees a mode's rules.
 *
 * What the transport guarantees before calling allocate (the hardening that
 * holds for every mode, in dp-wire.c): the request names at least one container,
 * each with at least one ID; the whole request names no more IDs than the
 * provider has devices; every ID is known (find), healthy, and named once in
 * the whole request. The provider gets device indices, not strings.
 *
 * A mode with several resources (vGPU: cores and memory) gives one provider
 * per resource over shared state; each is served on its own socket with its
 * own registration.
 *
 * Threads: the event loop thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ACCELD_ID_MAX 64 /* kubelet device IDs are at most 63 characters */

/* One advertised device. Strings borrowed from the provider. */
struct acceld_device {
    const char *id;
    bool healthy;
    int numa_node; /* -1 unknown */
};

struct acceld_kv {
    const char *key;
    const char *value;
};

struct acceld_mount {
    const char *container_path;
    const char *host_path;
    bool read_only;
};

struct acceld_devnode {
    const char *container_path;
    const char *host_path;
    const char *permissions; /* "rw", "rwm" */
};

/* One container's request, validated by the transport (see above). */
struct acceld_alloc_req {
    const size_t *devs; /* device indices */
    size_t n_devs;
};

/* One container's answer. Everything borrowed from the provider until its
 * next allocate call (the transport packs it before that). */
struct acceld_alloc {
    const struct acceld_kv *envs;
    size_t n_envs;
    const struct acceld_mount *mounts;
    size_t n_mounts;
    const struct acceld_devnode *devices;
    size_t n_devices;
    const char *const *cdi_devices; /* fully qualified CDI names */
    size_t n_cdi_devices;
    const struct acceld_kv *annotations;
    size_t n_annotations;
};

/* One container's GetPreferredAllocation. The transport has checked that the
 * lists are no longer than the provider's device count and that
 * 0 < size <= n_available + n_must_include. IDs may be unknown. */
struct acceld_prefer_req {
    const char *const *available;
    size_t n_available;
    const char *const *must_include;
    size_t n_must_include;
    size_t size;
};

struct acceld_provider_ops {
    size_t (*count)(void *self);
    void (*device)(void *self, size_t idx, struct acceld_device *out);
    /* Index of the device with this ID or -1; cost independent of the
     * request (a hash or a parse, never a scan of the request). */
    int (*find)(void *self, const char *id);
    /* Bumped on every change of the device list (health). */
    uint64_t (*generation)(void *self);
    /* Writes req->size IDs into out (strings borrowed from req or self).
     * 0, -EINVAL with a message in err, -ENOMEM. NULL: GetPreferredAllocation
     * is not offered for this resource. */
    int (*prefer)(void *self, const struct acceld_prefer_req *req, const char **out, char *err,
                  size_t errlen);
    /* Fills out[0..n). 0, or -errno with a message in err (the kubelet shows
     * it to the user: say what to do); on error nothing changed. -EAGAIN:
     * not yet (data the provider waits for, e.g. the pod in the watch
     * cache): the transport calls again until allocateWait has passed, then
     * sends err. */
    int (*allocate)(void *self, const struct acceld_alloc_req *reqs, size_t n,
                    struct acceld_alloc *out, char *err, size_t errlen);
    /* A GPU's health changed (uuid of the physical GPU; unknown ones are
     * ignored). Returns true when this provider's device list changed. */
    bool (*set_gpu_health)(void *self, const char *gpu_uuid, bool healthy);
};

struct acceld_provider {
    const struct acceld_provider_ops *ops;
    void *self;
};
