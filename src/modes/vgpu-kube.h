/* vgpu-kube.h — the vGPU pod source (struct vgpu_pods, vgpu.h) over the
 * Kubernetes client's watch cache of this node's pods (src/kube): Allocate
 * reads the cache, never the API server; a cache that is not in step (API
 * server down, token refused, watch broken) makes the source answer
 * -EHOSTUNREACH with the reason, so vgpu waits (allocateWait) and then
 * refuses instead of guessing.
 *
 * Threads: the event loop thread only. */
#pragma once

#include "vgpu.h"

struct ev_loop;
struct vgpu_kube;

/* Where the API server is and which resources count. Strings borrowed
 * during vgpu_kube_new. */
struct vgpu_kube_options {
    const char *node_name;  /* "" or NULL: $NODE_NAME */
    const char *kubeconfig; /* "" or NULL: in-cluster */
    const char *core_resource;
    const char *memory_resource;
};

/* Connects (kubeconfig or in-cluster) and starts the LIST + WATCH of the
 * node's pods. Returns 0, or -errno with why in err (no node name, no
 * credentials). */
int vgpu_kube_new(struct ev_loop *loop, const struct vgpu_kube_options *opts,
                  struct vgpu_kube **ret, char *err, size_t errlen);
struct vgpu_kube *vgpu_kube_free(struct vgpu_kube *k);
/* The reasons of the host-side check's Events (type Warning). */
#define VGPU_EVENT_OVER_QUOTA "VGPUOverQuota"
#define VGPU_EVENT_UNDER_REPORT "VGPUUsageUnderReported"
#define VGPU_EVENT_OVER_SHARE "VGPUComputeOverShare"
#define VGPU_EVENT_FOREIGN_GPU "VGPUForeignGPU"
#define VGPU_EVENT_REGION_BAD "VGPURegionInvalid"
#define VGPU_EVENT_POD_IGNORED "AccelPodIgnored"

/* Posts a core/v1 Event of type Warning about the pod (POST
 * /api/v1/namespaces/<ns>/events, asynchronous on the loop: it never waits;
 * a failure is logged). Returns 1 when posted, 0 when the same (pod uid,
 * container, reason) was posted less than KUBE_EVENT_REPEAT_S (5 minutes,
 * src/kube/events.h) ago: a finding that persists pass after pass is one
 * Event, not one per vgpu.checkInterval; or -errno. */
int vgpu_kube_event(struct vgpu_kube *k, const char *ns, const char *pod, const char *pod_uid,
                    const char *container, const char *reason, const char *message);

/* The runtime id of the container of the pod with this uid, from the watch cache's
 * status.containerStatuses (borrowed until the loop runs again), or NULL when not known
 * (the pod or container not seen, not started yet). */
const char *vgpu_kube_container_id(struct vgpu_kube *k, const char *pod_uid, const char *container);

/* The agent's hooks (NULL: none): gone(ctx, uid) when a pod is deleted or reaches a terminal
 * phase (Succeeded, Failed), so its shares can be settled with the kubelet at once;
 * state(ctx, in_step) after each LIST or failure of the watch. */
void vgpu_kube_set_hooks(struct vgpu_kube *k, void (*gone)(void *ctx, const char *pod_uid),
                         void (*state)(void *ctx, bool in_step), void *ctx);

/* The pod source over k (k must outlive its use). */
struct vgpu_pods vgpu_kube_pods(struct vgpu_kube *k);
