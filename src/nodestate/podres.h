/*
 * podres.h — which Kubernetes containers hold which GPU, from the kubelet's pod-resources API
 * (v1 PodResourcesLister/List over src/grpc's client, proto/podresources/v1).
 *
 * The API names pods and containers (namespace, pod, container) and the device IDs a device
 * plugin handed them: for acceld's pGPU mode the GPU's UUID, for its time-slicing replicas
 * "UUID::N" (src/modes/sharing-config.c), both filed here under the GPU's UUID; its vGPU resources'
 * unit IDs ("<uuid>-<k>", tencent.com/vcuda-core and -memory) are skipped (no GPU of their
 * own; cost.c takes vGPU containers from acceld's status.json). It names no pod UID
 * or container ID, so the exporter joins it with /proc/<pid>/cgroup only where that is
 * unambiguous (accel-exporter.c, docs/exporter.md "Pod and container names").
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define PODRES_MAX 512 /* (GPU, container) pairs kept from one List */

struct podres_entry {
    char gpu_uuid[96];   /* the device ID up to its "::" replica suffix */
    char namespace_[64]; /* Kubernetes: a namespace and a container name are ≤ 63 characters */
    char pod[254];       /* a pod name ≤ 253 */
    char container[64];
    /* for cost (cost.c): the resource the devices came as, how many device IDs of this GPU
     * the container holds, and whether they are replica IDs ("UUID::N") or the GPU itself */
    char resource[128];
    unsigned ids;
    unsigned replica; /* 0: the GPU itself; 1: replica IDs; 2 (cost.c's vGPU): ids = cores % */
};

struct podres {
    struct podres_entry e[PODRES_MAX]; /* each (GPU, container) once */
    size_t n;
};

/* Fills *ret from a List response (len bytes of protobuf). Returns 0 or -EPROTO when it does
 * not decode (then *ret is left as it was); pairs past PODRES_MAX and names too long
 * for their field are dropped. */
int podres_parse(const uint8_t *msg, size_t len, struct podres *ret);

/* Calls List on the kubelet's socket (at most timeout_ms) and parses the answer. Returns 0,
 * -errno when the socket cannot be reached, -EPROTO / -EIO on a bad or failed call. */
int podres_list(const char *socket_path, unsigned int timeout_ms, struct podres *ret);

/* How many containers hold gpu_uuid; *ret_first (may be NULL) gets the first of them. */
size_t podres_holders(const struct podres *pr, const char *gpu_uuid,
                      const struct podres_entry **ret_first);

/* 1 when a and b name the same container (namespace, pod, container), else 0. */
int podres_same_container(const struct podres_entry *a, const struct podres_entry *b);
