#!/usr/bin/env bash
# Run by up.sh as the first process of the node's new mount namespace: lays out the node's
# filesystem view, then exits (the namespace stays, pinned at $CL_MNTNS). Nothing here is
# visible to the host.
#   - a private /run (containerd's state, pod network namespaces, CDI specs in /var/run/cdi,
#     /run/accel, the CNI IP leases, the iptables lock)
#   - the node's state from build/cluster/node bound at the standard paths, so the chart's
#     defaults (/var/lib/kubelet/device-plugins, /var/lib/kubelet/plugins_registry, /etc/cdi,
#     /usr/lib/accel, ...) work unchanged
#   - /dev as an overlay of the host's /dev with an upper layer in the private /run, holding
#     real character devices for the emulated GPUs (see below)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
state=$1 gpus=$2 uvm_major=$3
shift 3
# the rest: "node-path state-subdir" pairs

mount --make-rprivate /
mount -t tmpfs -o mode=0755 tmpfs /run
while [ $# -ge 2 ]; do
    mkdir -p "$state/$2"
    mount --bind "$state/$2" "$1"
    shift 2
done

# /dev: the host's devices stay visible through the overlay's lower layer; what is made here
# lives in the upper layer, in this namespace's /run, and goes with it
mkdir -p /run/node-dev/host /run/node-dev/upper /run/node-dev/work
mount --rbind /dev /run/node-dev/host
mount -t overlay overlay -o lowerdir=/dev,upperdir=/run/node-dev/upper,workdir=/run/node-dev/work /dev
for m in pts shm mqueue hugepages; do
    if mountpoint -q "/run/node-dev/host/$m"; then
        mount --rbind "/run/node-dev/host/$m" "/dev/$m"
    fi
done

# The emulated GPUs' device nodes, numbered as NVIDIA's driver numbers them: character major
# 195, minor N for /dev/nvidiaN and 255 for /dev/nvidiactl (Linux's
# Documentation/admin-guide/devices.txt, "195 char Nvidia graphics devices"), mode 0666 as the
# driver makes them by default (NVIDIA's driver README on how the device files are created:
# NVreg_DeviceFileMode, default 0666). The
# driver's nvidia-uvm module takes a dynamic major (its installer reads it from /proc/devices):
# up.sh passes one that no driver on this machine has registered. The nodes open to nothing
# (ENXIO): they exist so that the runtime's CDI injection can stat and create them in
# containers, as on a GPU node; programs use the emulator's libraries, not the nodes.
# (On a machine with NVIDIA's driver the host's own nodes are hidden first: removing them here
# only whites them out in the upper layer.)
node() {
    rm -f "/dev/$1"
    mknod -m 0666 "/dev/$1" c "$2" "$3"
}
for ((i = 0; i < gpus; i++)); do
    node "nvidia$i" 195 "$i"
done
node nvidiactl 195 255
node nvidia-uvm "$uvm_major" 0
node nvidia-uvm-tools "$uvm_major" 1

# Every mount shared, as on a systemd host (systemd makes / rshared at boot): the runtime
# refuses a Bidirectional volume (acceld's state dir, where it mounts each container's region
# tmpfs) whose host path is not on a shared mount, and a HostToContainer one (the exporter's)
# not on a shared or slave mount; mounts made under the kubelet's dir reach containers. The
# peer groups are this namespace's own: nothing propagates to the host.
mount --make-rshared /
