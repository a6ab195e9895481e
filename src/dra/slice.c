/* slice.c — the node's ResourceSlice (resource.k8s.io/v1) as JSON, from the
 * GPUs the driver publishes. Shapes from the v1 API reference (ResourceSlice,
 * Device, DeviceAttribute, DeviceCapacity, CapacityRequestPolicy,
 * DeviceTaint); the consumable-capacity fields (allowMultipleAllocations,
 * requestPolicy) are KEP-5075's. See docs/dra.md for the shapes. */
#include "dra.h"
#include "dra-json.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Request policy of a shared GPU: memory in 256 MiB steps from 256 MiB
 * (default 1 GiB when a request names no amount), cores in 1 % steps from
 * 1 % (default 10 %). */
#define SHARE_MEM_STEP (256ull << 20)
#define SHARE_MEM_DEFAULT (1ull << 30)

static json_t *str_attr(const char *s)
{
    return json_pack("{s:s}", "string", s ? s : "");
}

static json_t *quantity(uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    return json_string(buf);
}

static json_t *capacity(uint64_t value, bool shared, uint64_t def, uint64_t min, uint64_t step)
{
    json_t *c = json_pack("{s:o}", "value", quantity(value));
    if (shared)
        json_object_set_new(c, "requestPolicy",
                            json_pack("{s:o,s:{s:o,s:o}}", "default", quantity(def), "validRange",
                                      "min", quantity(min), "step", quantity(step)));
    return c;
}

const char *dra_gpu_taint_effect(const struct dra_gpu *g)
{
    if (g->healthy)
        return NULL;
    const char *e = g->fatal ? (g->fatal_taint_effect ? g->fatal_taint_effect : "NoExecute")
                             : (g->taint_effect ? g->taint_effect : "NoSchedule");
    return e[0] ? e : NULL;
}

json_t *dra_gpu_taints_json(const char *driver_name, const struct dra_gpu *g)
{
    const char *effect = dra_gpu_taint_effect(g);
    if (!effect)
        return NULL;
    char key[300];
    snprintf(key, sizeof(key), "%s/unhealthy", driver_name);
    return json_pack("[{s:s,s:s,s:s}]", "key", key, "value", g->fatal ? "fatal-xid" : "unhealthy",
                     "effect", effect);
}

json_t *dra_gpu_device_json(const char *driver_name, const struct dra_gpu *g)
{
    char cc[32];
    snprintf(cc, sizeof(cc), "%d.%d.0", g->cc_major, g->cc_minor);
    json_t *attrs = json_pack("{s:o,s:o,s:o,s:{s:s},s:o,s:o,s:{s:b}}", "uuid", str_attr(g->uuid),
                              "productName", str_attr(g->product), "architecture",
                              str_attr(g->architecture), "cudaComputeCapability", "version", cc,
                              "driverVersion", str_attr(g->driver_version), "pciBusID",
                              str_attr(g->pci_bus_id), "migCapable", "bool", g->mig_capable);
    if (g->numa_node >= 0)
        json_object_set_new(attrs, "numaNode", json_pack("{s:i}", "int", g->numa_node));
    /* what the chart's DeviceClasses (deploy/helm/accel/templates/deviceclasses.yaml) select on */
    bool share = g->shared || g->mps;
    json_object_set_new(attrs, "shared", json_pack("{s:b}", "bool", share));
    json_object_set_new(attrs, "sharing",
                        str_attr(g->mps      ? "mps"
                                 : g->shared ? "vgpu"
                                             : "exclusive"));
    json_t *cap =
        json_pack("{s:o,s:o}", "memory",
                  capacity(g->memory, share, SHARE_MEM_DEFAULT, SHARE_MEM_STEP, SHARE_MEM_STEP),
                  "cores", capacity(100, share, 10, 1, 1));
    json_t *d = json_pack("{s:s,s:o,s:o}", "name", g->name, "attributes", attrs, "capacity", cap);
    if (share)
        json_object_set_new(d, "allowMultipleAllocations", json_true());
    json_t *taints = dra_gpu_taints_json(driver_name, g);
    if (taints)
        json_object_set_new(d, "taints", taints);
    return d;
}

int dra_slice_render(const char *driver_name, const char *node_name, const char *slice_name,
                     int64_t generation, const struct dra_gpu *gpus, size_t n_gpus, char **ret_json)
{
    if (!driver_name || !node_name || !slice_name || generation < 0 || n_gpus > 128)
        return -EINVAL; /* v1 caps a slice at 128 devices (ResourceSliceMaxDevices) */
    json_t *devs = json_array();
    for (size_t i = 0; i < n_gpus; i++)
        json_array_append_new(devs, dra_gpu_device_json(driver_name, &gpus[i]));
    json_t *root =
        json_pack("{s:s,s:s,s:{s:s},s:{s:s,s:s,s:{s:s,s:I,s:i},s:o}}", "apiVersion",
                  "resource.k8s.io/v1", "kind", "ResourceSlice", "metadata", "name", slice_name,
                  "spec", "driver", driver_name, "nodeName", node_name, "pool", "name", node_name,
                  "generation", (json_int_t)generation, "resourceSliceCount", 1, "devices", devs);
    char *s = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!s)
        return -ENOMEM;
    *ret_json = s;
    return 0;
}
