/* vgpu-kube.h — the vGPU pod source (struct vgpu_pods, vgpu.h) over the
 * Kubernetes client's watch cache of this node's pods (src/kube): Allocate
 * reads the cache, never the API server; a cache that is not in step (API
 * server down, token refused, watch broken) makes the source answer
 * -EHOSTUNREACH with the reason, so vgpu refuses instead of guessing.
 *
 * It lives in its own directory because src/kube and src/plugin both have a
 * config.h: this file sees src/kube's.
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
/* The pod source over k (k must outlive its use). */
struct vgpu_pods vgpu_kube_pods(struct vgpu_kube *k);
