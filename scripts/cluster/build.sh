#!/usr/bin/env bash
# Builds the test cluster's components from the Go module proxy, at the versions pinned in
# scripts/versions.env, into the cache directory lib.sh's cl_bin_dir names
# (${ACCEL_CACHE:-/var/cache/accel}/k8s-<key>/bin). A complete cache is used as it is: the
# second run builds nothing. Prints the directory on stdout.
#
# Each project is built from a consumer module of our own (a go.mod that requires the
# project's module), so the dependency versions are the project's own, resolved by the go
# command. k8s.io/kubernetes replaces its staging modules (k8s.io/api, ...) with directories
# of its repository, which a consumer cannot see: its go.mod is read here and each such
# replace becomes one to the published module at v0.<minor>.<patch>.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cl_load_versions
cl_find_go

bin=$(cl_bin_dir)
if [ -f "$bin/.complete" ]; then
    echo "$bin"
    exit 0
fi
root=$(dirname "$bin")
mkdir -p "$root"
# one build at a time per cache (another checkout may be building the same versions)
exec 9>"$root/.lock"
flock -w 7200 9 || cl_die "another build of $root held its lock for 2 hours"
if [ -f "$bin/.complete" ]; then
    echo "$bin"
    exit 0
fi

work=$root/work
out=$root/bin.partial
rm -rf "$work" "$out"
mkdir -p "$work" "$out"
build_log=$root/build.log
: >"$build_log"

# The go.mod of MODULE@VERSION, fetched through the module proxy.
gomod_of() {
    timeout 900 go mod download -json "$1" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p'
}

# A consumer module in work/NAME requiring MODULE VERSION; its go line is the dependency's
# own, and anything on stdin is appended (replace and godebug blocks).
consumer() {
    local name=$1 mod=$2 ver=$3 dep_mod
    dep_mod=$(gomod_of "$mod@$ver")
    [ -s "$dep_mod" ] || cl_die "could not fetch $mod@$ver from the Go module proxy ($(go env GOPROXY))"
    mkdir -p "$work/$name"
    {
        echo "module accel.invalid/cluster-build/$name"
        echo
        grep -m1 '^go ' "$dep_mod"
        echo
        echo "require $mod $ver"
        echo
        cat
    } >"$work/$name/go.mod"
    echo "$dep_mod"
}

# go build in work/NAME, niced (the machine is shared), bounded (a stalled download fails
# the build rather than hanging it), timed into the build log.
gobuild() {
    local name=$1 start
    shift
    start=$(date +%s)
    cl_log "building $name (go build $*)"
    (cd "$work/$name" && timeout 5400 nice -n 10 go build -mod=mod "${CL_GO_FLAGS[@]}" "$@") >>"$build_log" 2>&1 || {
        tail -n 20 "$build_log" >&2
        cl_die "go build of $name failed (a registry hiccup? run make cluster again): see $build_log"
    }
    echo "$name: $(($(date +%s) - start)) s" >>"$root/build-times"
}

t0=$(date +%s)
: >"$root/build-times"

# k8s.io/kubernetes: one go build for every command, so they share the package builds
k8s_minor=${KUBERNETES_VERSION#v1.}
staging_ver=v0.$k8s_minor
k8s_mod=$(gomod_of "k8s.io/kubernetes@$KUBERNETES_VERSION")
[ -s "$k8s_mod" ] || cl_die "could not fetch k8s.io/kubernetes@$KUBERNETES_VERSION from the Go module proxy"
{
    # its godebug settings, so the binaries run with the defaults the project chose
    sed -n '/^godebug (/,/^)/p; /^godebug [^(]/p' "$k8s_mod"
    echo "replace ("
    sed -n 's|^[[:space:]]*\(k8s\.io/[A-Za-z0-9._/-]*\) => \./staging/.*$|\t\1 => \1 '"$staging_ver"'|p' "$k8s_mod"
    echo ")"
} | consumer kubernetes k8s.io/kubernetes "$KUBERNETES_VERSION" >/dev/null
grep -q "k8s.io/api => k8s.io/api $staging_ver" "$work/kubernetes/go.mod" ||
    cl_die "no staging replaces found in $k8s_mod: its layout changed, see scripts/cluster/build.sh"
vpkg=k8s.io/component-base/version
cpkg=k8s.io/client-go/pkg/version
k8s_ld="$CL_GO_LDFLAGS"
for p in $vpkg $cpkg; do
    k8s_ld+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=${k8s_minor%%.*}"
    k8s_ld+=" -X $p.gitTreeState=clean"
done
pkgs=()
for c in "${CL_K8S_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
gobuild kubernetes -ldflags="$k8s_ld" -o "$out/" "${pkgs[@]}"

# etcd and etcdctl (their main packages are their modules' roots)
consumer etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" </dev/null >/dev/null
echo "require go.etcd.io/etcd/etcdctl/v3 $ETCD_VERSION" >>"$work/etcd/go.mod"
gobuild etcd -ldflags="$CL_GO_LDFLAGS" -o "$out/etcd" go.etcd.io/etcd/server/v3
gobuild etcd -ldflags="$CL_GO_LDFLAGS" -o "$out/etcdctl" go.etcd.io/etcd/etcdctl/v3

# containerd, its runc shim and ctr (for importing images)
consumer containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" </dev/null >/dev/null
pkgs=()
for c in "${CL_CONTAINERD_CMDS[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$c"); done
gobuild containerd -tags "$CL_CONTAINERD_TAGS" \
    -ldflags="$CL_GO_LDFLAGS -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    -o "$out/" "${pkgs[@]}"

# crictl
consumer crictl sigs.k8s.io/cri-tools "$CRICTL_VERSION" </dev/null >/dev/null
gobuild crictl -ldflags="$CL_GO_LDFLAGS -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    -o "$out/crictl" sigs.k8s.io/cri-tools/cmd/crictl

for c in "${CL_K8S_CMDS[@]}" etcd etcdctl "${CL_CONTAINERD_CMDS[@]}" crictl; do
    [ -x "$out/$c" ] || cl_die "the build made no $c: see $build_log"
done
echo "total: $(($(date +%s) - t0)) s on $(nproc) cores, $(go env GOVERSION)" >>"$root/build-times"
cp "$root/build-times" "$out/.complete"
rm -rf "$bin"
mv "$out" "$bin"
rm -rf "$work"
cl_log "components built in $(($(date +%s) - t0)) s: $bin"
echo "$bin"
