/* cgroup.h — which pod and container a process belongs to, from its /proc/<pid>/cgroup.
 *
 * Used by acceld's host-side quota check and by accel-exporter to turn an NVML process into
 * a pod and container. Understands the cgroup v1 and v2 path forms that the kubelet creates
 * with either cgroup driver and the container ids of containerd, CRI-O and docker
 * (cri-dockerd). libc only; no allocation; thread-safe. */
#pragma once

#include <stddef.h>
#include <sys/types.h>

enum kube_cgroup_runtime {
    KUBE_CGROUP_RUNTIME_UNKNOWN = 0, /* cgroupfs driver: the path names no runtime */
    KUBE_CGROUP_RUNTIME_CONTAINERD,  /* cri-containerd-<id>.scope */
    KUBE_CGROUP_RUNTIME_CRIO,        /* crio-<id>.scope */
    KUBE_CGROUP_RUNTIME_DOCKER,      /* docker-<id>.scope */
};

struct kube_cgroup_ref {
    char pod_uid[37];      /* lower-case, dashed: "0b6c4a3e-...", as metadata.uid prints it */
    char container_id[65]; /* 64 hex digits; "" for a process in the pod's cgroup itself */
    enum kube_cgroup_runtime runtime;
};

/* Parses the text of a /proc/<pid>/cgroup file (len bytes, need not be NUL-terminated).
 * The cgroup v2 line ("0::/...") wins over v1 lines when both name a pod. Returns 0,
 * -ENOENT when no line names a Kubernetes pod (a host process), -EPROTO when lines name
 * different pods or containers (the text cannot be trusted); *ret is untouched on failure. */
int kube_cgroup_parse(const char *text, size_t len, struct kube_cgroup_ref *ret);

/* Reads <proc_root>/<pid>/cgroup (proc_root NULL: "/proc") and parses it. Returns 0,
 * -EINVAL for pid <= 0, -errno of the read (-ENOENT: no such process), or as above. */
int kube_cgroup_read(const char *proc_root, pid_t pid, struct kube_cgroup_ref *ret);

/* "containerd", "cri-o", "docker" or "" — the scheme of a container status's containerID
 * ("containerd://<id>"). */
const char *kube_cgroup_runtime_name(enum kube_cgroup_runtime rt);
