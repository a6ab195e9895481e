# Shared by the scripts under scripts/cluster/ (sourced, not run): names, paths and the pinned
# versions of the test cluster (docs/e2e.md). Every path and name can be overridden from the
# environment; the defaults make one cluster per machine.

CL_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# the cluster's files: certificates, configs, component state, logs and the entry points
CL_DIR=${ACCEL_CLUSTER_DIR:-$CL_REPO/build/cluster}
# the network namespace (ip netns), the cgroup under every hierarchy, and /run/$CL_NAME
# (where the mount namespace is pinned)
CL_NAME=${ACCEL_CLUSTER_NAME:-accel-cluster}
CL_NETNS=$CL_NAME
CL_RUN=/run/$CL_NAME
CL_MNTNS=$CL_RUN/mnt
# addresses inside the network namespace only (a dummy interface; nothing is routed out)
CL_NODE_NAME=accel-node
CL_NODE_IP=10.99.0.2
CL_POD_CIDR=10.88.0.0/16
CL_SERVICE_CIDR=10.96.0.0/16
CL_API_SERVICE_IP=10.96.0.1
# emulated GPUs on the node (accel-emu init --gpus), their state file on the node: the Helm
# chart's emulator.state default
CL_GPUS=${ACCEL_CLUSTER_GPUS:-4}
CL_EMU_STATE=/var/lib/accel-emu/emu.state
# the feature gates given to every control-plane component and the kubelet (docs/e2e.md says
# which are beta and which GA in the pinned release)
CL_FEATURE_GATES=DRAConsumableCapacity=true,DRAExtendedResource=true,ResourceHealthStatus=true,DRADeviceTaints=true,DRAPartitionableDevices=true
# images built locally and imported into the node's containerd (no registry anywhere)
CL_PAUSE_IMAGE=localhost/accel/pause:1
CL_BUSYBOX_IMAGE=localhost/accel/busybox:1

cl_die() {
    echo "cluster: $*" >&2
    exit 1
}

cl_log() {
    echo "cluster: $*" >&2
}

# The pins of scripts/versions.env as shell variables (KEY=value lines; anything else is
# ignored, nothing in the file is run).
cl_load_versions() {
    local line
    while IFS= read -r line || [ -n "$line" ]; do
        if [[ $line =~ ^([A-Z][A-Z0-9_]*)=([A-Za-z0-9._+-]+)$ ]]; then
            printf -v "${BASH_REMATCH[1]}" '%s' "${BASH_REMATCH[2]}"
        fi
    done <"$CL_REPO/scripts/versions.env"
    local v
    for v in KUBERNETES_VERSION ETCD_VERSION CONTAINERD_VERSION CRICTL_VERSION; do
        [ -n "${!v:-}" ] || cl_die "scripts/versions.env has no $v=..."
    done
}

# What build.sh builds and how. These, the pins and the Go version make the cache key, so a
# change here rebuilds (comments and the rest of build.sh do not).
CL_GO_FLAGS=(-trimpath)
CL_GO_LDFLAGS="-s -w"
CL_K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
CL_CONTAINERD_CMDS=(containerd containerd-shim-runc-v2 ctr)
CL_CONTAINERD_TAGS="urfave_cli_no_docs no_btrfs no_devmapper no_zfs no_tracing"
CL_RECIPE=1

# Go: on PATH, else where the official tarball puts it.
cl_find_go() {
    if ! command -v go >/dev/null; then
        [ -x /usr/local/go/bin/go ] ||
            cl_die "no Go toolchain (go on PATH or /usr/local/go/bin/go): install Go >= 1.26 first"
        PATH=/usr/local/go/bin:$PATH
    fi
    export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
}

# The directory of the built components, keyed by what goes into them.
cl_bin_dir() {
    local key
    key=$({
        echo "$KUBERNETES_VERSION $ETCD_VERSION $CONTAINERD_VERSION $CRICTL_VERSION"
        go env GOVERSION GOARCH
        echo "${CL_GO_FLAGS[*]}|$CL_GO_LDFLAGS|${CL_K8S_CMDS[*]}|${CL_CONTAINERD_CMDS[*]}"
        echo "$CL_CONTAINERD_TAGS|$CL_RECIPE"
    } | sha256sum | cut -c1-16)
    echo "${ACCEL_CACHE:-/var/cache/accel}/k8s-$key/bin"
}
