#!/usr/bin/env bash
# make cluster-down: stops the test cluster and removes what scripts/cluster/up.sh made — its
# processes (every one in its cgroups or its namespaces), cgroups, mounts, namespaces, the
# mount points it had to create on the host, and its state under build/cluster (certificates,
# etcd, containerd and kubelet data). The components' logs stay in build/cluster/logs for a
# post-mortem; the next `make cluster` starts them anew. Safe to run at any time, also after a
# crash or with nothing running: up.sh runs it first.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || cl_die "needs root: run as root"
quiet=${1:-}
say() { [ "$quiet" = --quiet ] || cl_log "$@"; }

# v1: one hierarchy per controller (and name=systemd); v2: the unified one
cg_roots() {
    local h
    for h in /sys/fs/cgroup /sys/fs/cgroup/*; do
        [ -d "$h/$CL_NAME" ] && echo "$h/$CL_NAME"
    done
}

# pids of the cluster: in its cgroups, or in its namespaces (a shell left by
# build/cluster/enter, a process that left the cgroups)
cluster_pids() {
    local root mnt_id="" net_id="" p
    for root in $(cg_roots); do
        find "$root" -name cgroup.procs -exec cat {} + 2>/dev/null
    done
    [ -e "$CL_MNTNS" ] && mnt_id=$(stat -L -c %i "$CL_MNTNS" 2>/dev/null)
    [ -e "/run/netns/$CL_NETNS" ] && net_id=$(stat -L -c %i "/run/netns/$CL_NETNS" 2>/dev/null)
    if [ -n "$mnt_id$net_id" ]; then
        for p in /proc/[0-9]*; do
            case "$(readlink "$p/ns/mnt" 2>/dev/null) $(readlink "$p/ns/net" 2>/dev/null)" in
            *"mnt:[$mnt_id]"* | *"net:[$net_id]"*) echo "${p#/proc/}" ;;
            esac
        done
    fi
}

stop_all() {
    local round pids
    for round in $(seq 1 40); do
        pids=$(cluster_pids | sort -un | grep -vx "$$")
        [ -z "$pids" ] && return 0
        if [ "$round" -eq 1 ]; then
            say "stopping $(echo "$pids" | wc -w) processes"
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null
        elif [ "$round" -ge 6 ]; then
            # shellcheck disable=SC2086
            kill -KILL $pids 2>/dev/null
        fi
        sleep 0.5
    done
    cl_log "processes still running after 20 s: $(cluster_pids | sort -un | tr '\n' ' ')"
    return 1
}

rc=0
stop_all || rc=1

# cgroups, deepest first (the kubelet's pod cgroups are below ours)
for root in $(cg_roots); do
    find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -d "$root" ] && {
        cl_log "could not remove $root"
        rc=1
    }
done

# the mount namespace goes with its last process and its pin
if mountpoint -q "$CL_MNTNS" 2>/dev/null; then
    umount "$CL_MNTNS" || rc=1
fi
if mountpoint -q "$CL_RUN" 2>/dev/null; then
    umount "$CL_RUN" || rc=1
fi
rm -f "$CL_MNTNS"
rmdir "$CL_RUN" 2>/dev/null
[ -e "/run/netns/$CL_NETNS" ] && { ip netns delete "$CL_NETNS" || rc=1; }

# mount points up.sh created on the host (only while empty: anything else is not ours)
if [ -f "$CL_DIR/created-dirs" ]; then
    tac "$CL_DIR/created-dirs" | while IFS= read -r d; do
        if mountpoint -q "$d" && [ -z "$(ls -A "$d")" ]; then umount "$d"; fi
        [ -d "$d" ] && find "$d" -depth -type d -empty -delete 2>/dev/null
        [ -e "$d" ] && cl_log "left $d: not empty"
    done
    rm -f "$CL_DIR/created-dirs"
fi

rm -rf "$CL_DIR/node" "$CL_DIR/pki" "$CL_DIR/etc" "$CL_DIR/images" "$CL_DIR/helm-home"
rm -f "$CL_DIR/kubectl" "$CL_DIR/helm" "$CL_DIR/kubelet-restart" "$CL_DIR/ctr-import" "$CL_DIR/emu" "$CL_DIR/enter" "$CL_DIR/crictl"
[ $rc -eq 0 ] && say "down"
exit $rc
