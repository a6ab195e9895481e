#!/usr/bin/env bash
# make cluster: a real single-node Kubernetes inside a network namespace and a mount
# namespace made here (docs/e2e.md). Cleans up what a previous run left (down.sh), builds or
# reuses the components (build.sh), makes certificates and configs, starts etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, containerd and the kubelet, and
# waits (bounded) until the node is Ready. Every component logs to build/cluster/logs/NAME.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ "$(id -u)" -eq 0 ] || cl_die "needs root (namespaces, mounts, cgroups, device nodes): run as root"
cl_load_versions
cl_find_go
t_start=$(date +%s)

for t in ip nsenter unshare mount mountpoint openssl runc iptables flock mknod gcc python3; do
    command -v "$t" >/dev/null || cl_die "$t is missing: run scripts/deps.sh (make deps)"
done
[ -x /usr/lib/cni/bridge ] || cl_die "no CNI plugins in /usr/lib/cni: run scripts/deps.sh (make deps)"
emu=$CL_REPO/build/src/emu/accel-emu
[ -x "$emu" ] || cl_die "no $emu: run make build first"

bash "$here/down.sh" --quiet || cl_die "could not clean up the previous cluster (see above)"
bin=$(bash "$here/build.sh")

logs=$CL_DIR/logs pki=$CL_DIR/pki etc=$CL_DIR/etc state=$CL_DIR/node
rm -rf "$logs"
mkdir -p "$logs" "$pki" "$etc" "$state"
nsx=(nsenter "--net=/run/netns/$CL_NETNS" "--mount=$CL_MNTNS" --)

# ---------------------------------------------------------------- certificates (openssl, P-256)
cl_log "certificates"
ossl() { openssl "$@" 2>>"$logs/openssl.log" || cl_die "openssl $1 failed: see $logs/openssl.log"; }
ossl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -days 365 \
    -subj "/CN=$CL_NAME-ca" -keyout "$pki/ca.key" -out "$pki/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
# cert NAME SUBJECT EXTENDED-KEY-USAGE [SUBJECT-ALT-NAMES]
cert() {
    local ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$3"
    [ -n "${4:-}" ] && ext+="
subjectAltName=$4"
    ossl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -subj "$2" \
        -keyout "$pki/$1.key" -out "$pki/$1.csr"
    ossl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
        -days 365 -extfile <(echo "$ext") -out "$pki/$1.crt"
    rm -f "$pki/$1.csr"
}
cert etcd-server "/CN=etcd" serverAuth,clientAuth "IP:127.0.0.1,DNS:localhost"
cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:$CL_NODE_IP,IP:$CL_API_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
# the API server's client certificate for the kubelet (logs, exec): the masters group, as in
# a test cluster nothing else needs narrower rights
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=accel-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert kubelet "/O=system:nodes/CN=system:node:$CL_NODE_NAME" clientAuth
cert kubelet-server "/CN=system:node:$CL_NODE_NAME" serverAuth "IP:$CL_NODE_IP,DNS:$CL_NODE_NAME"
ossl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key"
ossl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
chmod 600 "$pki"/*.key

# kubeconfig NAME CERT: the API server at the node IP, with CERT's client certificate
kubeconfig() {
    cat >"$etc/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CL_NAME
  cluster:
    server: https://$CL_NODE_IP:6443
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $pki/$2.crt
    client-key: $pki/$2.key
contexts:
- name: $CL_NAME
  context: {cluster: $CL_NAME, user: $2}
current-context: $CL_NAME
EOF
}
kubeconfig admin admin
kubeconfig controller-manager controller-manager
kubeconfig scheduler scheduler
kubeconfig kubelet kubelet

# ---------------------------------------------------------------- the network namespace
cl_log "namespaces"
: >"$CL_DIR/created-dirs"
# ip netns makes /run/netns (a mount on itself) when missing: down.sh removes it again
[ -e /run/netns ] || echo /run/netns >>"$CL_DIR/created-dirs"
ip netns add "$CL_NETNS"
ipn() { ip netns exec "$CL_NETNS" "$@"; }
ipn ip link set lo up
# the node IP's interface: a dummy where the kernel has the driver, else a veth pair whose
# peer stays in the namespace (either way nothing leaves it)
if ! ipn ip link add accel0 type dummy 2>/dev/null; then
    ipn ip link add accel0 type veth peer name accel0-peer
    ipn ip link set accel0-peer up
fi
ipn ip addr add "$CL_NODE_IP/24" dev accel0
ipn ip link set accel0 up
# pods on the bridge reach the node IP through the node's routing
ipn sysctl -qw net.ipv4.ip_forward=1
# The kubernetes Service (what in-cluster clients use) without kube-proxy: its one address
# and port to the API server, for pods on the bridge (PREROUTING) and host-network ones
# (OUTPUT)
for chain in PREROUTING OUTPUT; do
    ipn iptables -t nat -A "$chain" -d "$CL_API_SERVICE_IP/32" -p tcp --dport 443 \
        -j DNAT --to-destination "$CL_NODE_IP:6443"
done
# (a host-network process's packet needs a route before OUTPUT rewrites its destination)
ipn ip route add "$CL_SERVICE_CIDR" dev accel0

# ---------------------------------------------------------------- the mount namespace
# The emulator's libraries (its "driver": libnvidia-ml.so.1, libcuda.so.1,
# nvidia-cuda-mps-control) where `meson install` puts them, <libdir>/accel-emu: the chart's
# emulator.libDir default, mounted into acceld and the exporter from the node
emu_libdir=/usr/lib/$(gcc -print-multiarch)/accel-emu
# where the chart and the components expect them, each backed by a folder of $state
node_paths=(
    /var/lib/kubelet kubelet
    /var/lib/containerd containerd
    /var/lib/accel accel
    /var/lib/accel-emu emu
    "$emu_libdir" emu-lib
    /usr/lib/accel lib-accel
    /etc/cni/net.d cni
    /etc/cdi cdi
    /var/log/pods log-pods
    /var/log/containers log-containers
)
for ((i = 0; i < ${#node_paths[@]}; i += 2)); do
    p=${node_paths[i]}
    # a mount point must exist on the host: note the first folder made, down.sh removes it
    if [ ! -e "$p" ]; then
        top=$p
        while [ ! -e "$(dirname "$top")" ]; do top=$(dirname "$top"); done
        echo "$top" >>"$CL_DIR/created-dirs"
        mkdir -p "$p"
    fi
done
# nvidia-uvm's major: the first of devices.txt's dynamic range that no driver here holds
uvm_major=
for m in $(seq 234 254); do
    awk -v m="$m" '$1 == m { found = 1 } END { exit !found }' /proc/devices || {
        uvm_major=$m
        break
    }
done
[ -n "$uvm_major" ] || cl_die "no free character major in 234-254 for the emulated nvidia-uvm"
mkdir -p "$CL_RUN"
mount --bind "$CL_RUN" "$CL_RUN"
mount --make-private "$CL_RUN"
touch "$CL_MNTNS"
unshare --mount="$CL_MNTNS" --propagation private \
    bash "$here/node-mounts.sh" "$state" "$CL_GPUS" "$uvm_major" "${node_paths[@]}" \
    >>"$logs/node-mounts.log" 2>&1 || cl_die "could not lay out the node's mounts: see $logs/node-mounts.log"

# ---------------------------------------------------------------- cgroups
# Everything started here, and the kubelet's pods (cgroupRoot), below /$CL_NAME in every
# hierarchy, so down.sh finds every process and removes every cgroup.
cg_unified=false
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && cg_unified=true
cg_hierarchies=()
if $cg_unified; then
    cg_hierarchies=(/sys/fs/cgroup)
else
    for h in /sys/fs/cgroup/*; do
        [ -f "$h/cgroup.procs" ] && cg_hierarchies+=("$h")
    done
fi
for h in "${cg_hierarchies[@]}"; do
    for d in "$h/$CL_NAME" "$h/$CL_NAME/system"; do
        mkdir -p "$d"
        # a v1 cpuset starts empty, and a process cannot join an empty one
        if [ -f "$d/cpuset.cpus" ] && [ -z "$(cat "$d/cpuset.cpus")" ]; then
            cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"
            cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
        fi
    done
done
if $cg_unified; then
    ctl=$(sed 's/\([^ ]*\)/+\1/g' /sys/fs/cgroup/cgroup.subtree_control)
    [ -z "$ctl" ] || echo "$ctl" >"/sys/fs/cgroup/$CL_NAME/cgroup.subtree_control"
fi

# start NAME ARGS...: runs ARGS in the node's namespaces and cgroups, detached, logging to
# $logs/NAME.log
start() {
    local name=$1
    shift
    # shellcheck disable=SC2016
    setsid bash -c 'for h in "${@:2:$1}"; do echo $$ >"$h/cgroup.procs"; done; shift $(($1 + 1)); exec "$@"' \
        start "${#cg_hierarchies[@]}" "${cg_hierarchies[@]/%//$CL_NAME/system}" "${nsx[@]}" "$@" \
        </dev/null >>"$logs/$name.log" 2>&1 &
}

# wait_for WHAT SECONDS LOG CMD...: until CMD succeeds, or fail naming the log
wait_for() {
    local what=$1 secs=$2 log=$3 deadline
    shift 3
    deadline=$(($(date +%s) + secs))
    until "$@" >/dev/null 2>&1; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            cl_log "$what not up after $secs s; its log ($log) ends:"
            tail -n 15 "$log" >&2 || true
            cl_die "bring-up failed (all logs in $logs/; make cluster-down cleans up)"
        fi
        sleep 0.5
    done
}

# ---------------------------------------------------------------- the entry points
cat >"$CL_DIR/kubectl" <<EOF
#!/bin/sh
# kubectl against the test cluster (made by scripts/cluster/up.sh; docs/e2e.md)
exec nsenter --net=/run/netns/$CL_NETNS -- "$bin/kubectl" --kubeconfig="$etc/admin.kubeconfig" "\$@"
EOF
cat >"$CL_DIR/ctr-import" <<EOF
#!/bin/sh
# Loads an OCI or Docker image archive into the node's containerd, where the kubelet finds it
# (namespace k8s.io). Usage: ctr-import FILE.tar (made by scripts/cluster/up.sh; docs/e2e.md)
[ \$# -eq 1 ] || { echo "usage: \$0 FILE.tar" >&2; exit 2; }
exec ${nsx[*]} "$bin/ctr" --address /run/containerd/containerd.sock -n k8s.io \\
    images import --platform linux/amd64 - <"\$1"
EOF
cat >"$CL_DIR/emu" <<EOF
#!/bin/sh
# accel-emu on the node's emulated GPUs, e.g. \`emu xid 1 79\` (made by scripts/cluster/up.sh)
exec ${nsx[*]} env ACCEL_EMU_STATE=$CL_EMU_STATE "$emu" "\$@"
EOF
cat >"$CL_DIR/enter" <<EOF
#!/bin/sh
# A command (default: a shell) in the node's namespaces, e.g. \`enter ls -l /dev/nvidia0\`
[ \$# -gt 0 ] || set -- "\${SHELL:-/bin/sh}"
exec ${nsx[*]} "\$@"
EOF
cat >"$CL_DIR/helm" <<EOF
#!/bin/sh
# helm against the test cluster (made by scripts/cluster/up.sh; docs/e2e.md); its caches and
# repositories stay in build/cluster/helm-home
exec nsenter --net=/run/netns/$CL_NETNS -- env KUBECONFIG="$etc/admin.kubeconfig" \\
    HELM_CACHE_HOME="$CL_DIR/helm-home/cache" HELM_CONFIG_HOME="$CL_DIR/helm-home/config" \\
    HELM_DATA_HOME="$CL_DIR/helm-home/data" helm "\$@"
EOF
printf 'runtime-endpoint: unix:///run/containerd/containerd.sock\nimage-endpoint: unix:///run/containerd/containerd.sock\ntimeout: 30\n' \
    >"$etc/crictl.yaml"
cat >"$CL_DIR/crictl" <<EOF
#!/bin/sh
# crictl against the node's containerd (made by scripts/cluster/up.sh)
exec ${nsx[*]} "$bin/crictl" --config "$etc/crictl.yaml" "\$@"
EOF
chmod 755 "$CL_DIR/kubectl" "$CL_DIR/helm" "$CL_DIR/ctr-import" "$CL_DIR/emu" "$CL_DIR/enter" "$CL_DIR/crictl"
kubectl=$CL_DIR/kubectl

# ---------------------------------------------------------------- the emulated GPUs
# the node's copy of the emulator's libraries (a rebuild does not change them under its pods)
cp "$CL_REPO"/build/src/emu/{libnvidia-ml.so.1,libcuda.so.1,nvidia-cuda-mps-control} "$state/emu-lib/" ||
    cl_die "could not copy the emulator's libraries from build/src/emu: run make build first"
numa=
for ((i = 0; i < CL_GPUS; i++)); do numa+="${numa:+,}$((i * 2 / CL_GPUS))"; done
"$CL_DIR/emu" init --gpus "$CL_GPUS" --numa "$numa" --nvlink pairs --mode 0666 >"$logs/emu.log" 2>&1 ||
    cl_die "accel-emu init failed: see $logs/emu.log"

# ---------------------------------------------------------------- etcd
cl_log "etcd $ETCD_VERSION"
start etcd "$bin/etcd" --name "$CL_NODE_NAME" --data-dir "$state/etcd" \
    --listen-client-urls https://127.0.0.1:2379 --advertise-client-urls https://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$CL_NODE_NAME=http://127.0.0.1:2380" --listen-metrics-urls http://127.0.0.1:2381 \
    --client-cert-auth --trusted-ca-file "$pki/ca.crt" \
    --cert-file "$pki/etcd-server.crt" --key-file "$pki/etcd-server.key" \
    --unsafe-no-fsync
wait_for etcd 30 "$logs/etcd.log" "${nsx[@]}" "$bin/etcdctl" --endpoints https://127.0.0.1:2379 \
    --cacert "$pki/ca.crt" --cert "$pki/apiserver-etcd-client.crt" --key "$pki/apiserver-etcd-client.key" \
    endpoint health

# ---------------------------------------------------------------- the control plane
cl_log "kube-apiserver $KUBERNETES_VERSION (feature gates $CL_FEATURE_GATES)"
start kube-apiserver "$bin/kube-apiserver" \
    --advertise-address "$CL_NODE_IP" --secure-port 6443 \
    --etcd-servers https://127.0.0.1:2379 --etcd-cafile "$pki/ca.crt" \
    --etcd-certfile "$pki/apiserver-etcd-client.crt" --etcd-keyfile "$pki/apiserver-etcd-client.key" \
    --client-ca-file "$pki/ca.crt" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range "$CL_SERVICE_CIDR" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true --profiling=false \
    --feature-gates "$CL_FEATURE_GATES"
wait_for kube-apiserver 90 "$logs/kube-apiserver.log" "$kubectl" get --raw /readyz

cl_log "kube-controller-manager, kube-scheduler"
start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$etc/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$etc/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$etc/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --profiling=false --feature-gates "$CL_FEATURE_GATES"
start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$etc/scheduler.kubeconfig" \
    --authentication-kubeconfig "$etc/scheduler.kubeconfig" \
    --authorization-kubeconfig "$etc/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false \
    --feature-gates "$CL_FEATURE_GATES"

# ---------------------------------------------------------------- containerd
cl_log "containerd $CONTAINERD_VERSION"
# Pods on Debian's bridge plugin; portmap after it serves hostPort (the exporter's 9835 on the
# node IP, as the runbooks reach it), which the bridge alone silently ignores
cat >"$state/cni/10-accel.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "accel-pods",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "/run/cni-ipam",
        "ranges": [[{"subnet": "$CL_POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
# Processes here lack CAP_SYS_RESOURCE: restrict_oom_score_adj keeps each container's
# oom_score_adj at or above containerd's own, which runc can then set (without it every
# sandbox fails: "can't get final child's PID from pipe: EOF"). CDI is always on in
# containerd 2.4; the spec directories are named for the reader. (Config version 4 is 2.4's:
# the same tables as 3 for what is set here. Its streaming server for exec and logs listens
# on 127.0.0.1 by default, in the namespace.)
cat >"$etc/containerd.toml" <<EOF
version = 4
root = "/var/lib/containerd"
state = "/run/containerd"
oom_score = 0

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$CL_PAUSE_IMAGE"
EOF
# the shim is found on PATH
start containerd env PATH="$bin:$PATH" "$bin/containerd" --config "$etc/containerd.toml"
wait_for containerd 30 "$logs/containerd.log" "${nsx[@]}" "$bin/ctr" \
    --address /run/containerd/containerd.sock version
mkdir -p "$CL_DIR/images"
bash "$here/images.sh" "$CL_DIR/images" >>"$logs/images.log" 2>&1 ||
    cl_die "could not build the local images: see $logs/images.log"
for img in pause busybox; do
    "$CL_DIR/ctr-import" "$CL_DIR/images/$img.tar" >>"$logs/images.log" 2>&1 ||
        cl_die "could not import $img.tar into containerd: see $logs/images.log"
done

# ---------------------------------------------------------------- the kubelet
cl_log "kubelet"
gates_yaml=$(echo "$CL_FEATURE_GATES" | tr ',' '\n' | sed 's/^\(.*\)=\(.*\)$/  \1: \2/')
cat >"$etc/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# this machine is cgroup v1 (the kubelet refuses it unless told), and has no systemd here
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CL_NAME
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $CL_NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-server.crt
tlsPrivateKeyFile: $pki/kubelet-server.key
# no CAP_SYS_RESOURCE: the kubelet cannot lower its own score below 0 (default -999)
oomScoreAdj: 0
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# a shared disk: evict only when it is really full, and never collect the local images
# (nothing could pull them back)
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
# the node's status (allocatable included) checked every second, not every 10 s: the suite
# times acceld's reaction to an XID (allocatable lower within 5 s), not the kubelet's period;
# a changed status is written at once, an unchanged one every nodeStatusReportFrequency (5 m)
nodeStatusUpdateFrequency: 1s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
featureGates:
$gates_yaml
EOF
kubelet_cmd=("$bin/kubelet" --config "$etc/kubelet.yaml" --kubeconfig "$etc/kubelet.kubeconfig"
    --hostname-override "$CL_NODE_NAME" --node-ip "$CL_NODE_IP" --v 2)
start kubelet "${kubelet_cmd[@]}"
# build/cluster/kubelet-restart: the kubelet stopped (SIGTERM, as a service manager stops it)
# and started again with the same command line, in the same namespaces and cgroups — what a
# node upgrade or a crash does to the device plugins and the DRA driver (tests/e2e)
{
    echo '#!/usr/bin/env bash'
    echo '# Restarts the test cluster'"'"'s kubelet (made by scripts/cluster/up.sh; docs/e2e.md)'
    echo 'set -euo pipefail'
    printf 'exe=%q conf=%q log=%q\n' "$bin/kubelet" "$etc/kubelet.yaml" "$logs/kubelet.log"
    printf 'hierarchies=(%s)\n' "$(printf '%q ' "${cg_hierarchies[@]/%//$CL_NAME/system}")"
    printf 'cmd=(%s)\n' "$(printf '%q ' "${nsx[@]}" "${kubelet_cmd[@]}")"
    cat <<'EOS'
# the cluster's kubelet: the process running that binary with that config
kubelet_pid() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/exe" 2>/dev/null)" = "$exe" ] &&
            tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "--config $conf " &&
            echo "${p#/proc/}" && return 0
    done
    return 1
}
if pid=$(kubelet_pid); then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && { echo "kubelet-restart: kubelet $pid did not stop in 10 s" >&2; exit 1; }
fi
echo "---- kubelet restarted $(date -u +%FT%TZ) ----" >>"$log"
# shellcheck disable=SC2016
setsid bash -c 'for h in "${@:2:$1}"; do echo $$ >"$h/cgroup.procs"; done; shift $(($1 + 1)); exec "$@"' \
    start "${#hierarchies[@]}" "${hierarchies[@]}" "${cmd[@]}" </dev/null >>"$log" 2>&1 &
echo "kubelet-restart: kubelet started again (pid $!)"
EOS
} >"$CL_DIR/kubelet-restart"
chmod 755 "$CL_DIR/kubelet-restart"

node_ready() {
    [ "$("$kubectl" get node "$CL_NODE_NAME" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_for "the node (kubelet)" 180 "$logs/kubelet.log" node_ready
# every pod needs its namespace's default ServiceAccount, which the controller-manager makes
wait_for "the default ServiceAccount (kube-controller-manager)" 60 "$logs/kube-controller-manager.log" \
    "$kubectl" get serviceaccount default
cl_log "node $CL_NODE_NAME Ready in $(($(date +%s) - t_start)) s ($CL_GPUS emulated GPUs);" \
    "kubectl: $CL_DIR/kubectl, logs: $logs/"
