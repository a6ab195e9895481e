#!/usr/bin/env bash
# test-image.sh — checks the image archive `make image` wrote (docs/deploy.md, "Tests"):
#   - the archive names accel:<version> for podman/ctr (index.json) and docker (manifest.json);
#   - its size uncompressed is at most 120 MiB;
#   - unpacked, acceld, accelctl and accel-exporter run inside its own root filesystem
#     (chroot, every symbol bound at start: LD_BIND_NOW=1): --version and --help;
#   - the exporter's user: the image's default user and the `accel` account are uid 65532,
#     and accel-exporter runs as that user there;
#   - libvcuda.so in the image imports nothing newer than GLIBC_2.17;
#   - podman loads the archive (a private store) as docker.io/library/accel:<version>;
#   - ctr images import takes it as docker.io/library/accel:<version>, where containerd and
#     ctr are installed (a private containerd on a temporary socket), else reported as skipped;
#   - libvcuda loads in Debian 11's root filesystem (glibc 2.31, before the libdl/libpthread
#     merge and the stat symbols): bound at start into /bin/true, and hooking the dlsym that
#     perl's DynaLoader resolves POSIX.so with;
#   - the test image (accel-test, make test-image): cuda-demo under libvcuda on the emulator in
#     its root filesystem, held to its quota; its other programs find every library there.
# Prints TAP; needs root. Usage: test-image.sh [BUILD_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
archive=$build/accel-image.tar
version=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$root/meson.build" | head -n1)
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
check() { # check NAME COMMAND...: ok when COMMAND succeeds, its output shown when not
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then ok "$name"; else not_ok "$name" "$(printf '%s' "$out" | tail -n 8)"; fi
}

[ "$(id -u)" -eq 0 ] || { echo "1..0 # SKIP needs root (chroot, podman's store)"; exit 77; }
[ -f "$archive" ] || { echo "Bail out! $archive is missing: run make image"; exit 1; }
tmp=$(mktemp -d /var/tmp/accel-image-test.XXXXXX)
cleanup() {
    [ -n "${ctrd_pid:-}" ] && kill "$ctrd_pid" 2>/dev/null && wait "$ctrd_pid" 2>/dev/null
    umount -R "$tmp/containerd-root" 2>/dev/null
    rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT
oci=$root/scripts/oci-archive.py

# ---- the archive ----
tar -xOf "$archive" index.json >"$tmp/index.json" 2>/dev/null
tar -xOf "$archive" manifest.json >"$tmp/manifest.json" 2>/dev/null
check "index.json names docker.io/library/accel:$version, manifest.json accel:$version" \
    python3 -c '
import json, sys
i = json.load(open(sys.argv[1])); m = json.load(open(sys.argv[2])); v = sys.argv[3]
a = i["manifests"][0]["annotations"]
assert a["io.containerd.image.name"] == "docker.io/library/accel:" + v, a
assert m[0]["RepoTags"] == ["accel:" + v], m' "$tmp/index.json" "$tmp/manifest.json" "$version"

size=$(python3 "$oci" --size "$archive")
if [ "$size" -le $((120 * 1024 * 1024)) ]; then
    ok "uncompressed size $((size / 1024 / 1024)) MiB ($size bytes) <= 120 MiB"
else
    not_ok "uncompressed size $((size / 1024 / 1024)) MiB <= 120 MiB"
fi

# ---- its root filesystem ----
rootfs=$tmp/rootfs
python3 "$oci" --unpack "$archive" "$rootfs"
in_image() { env -i PATH=/usr/bin:/bin LD_BIND_NOW=1 /usr/sbin/chroot "$@"; }
for prog in acceld accelctl accel-exporter; do
    out=$(in_image "$rootfs" "/usr/bin/$prog" --version 2>&1)
    if [ $? -eq 0 ] && [[ "$out" == *"$version"* ]]; then
        ok "$prog --version in the image's root filesystem: $out"
    else
        not_ok "$prog --version in the image's root filesystem" "$out"
    fi
    check "$prog --help in the image's root filesystem" in_image "$rootfs" "/usr/bin/$prog" --help
done
user=$(python3 "$oci" --config "$archive" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("User",""))')
pw=$(grep '^accel:' "$rootfs/etc/passwd" || true)
if [ "$user" = "65532:65532" ] && [[ "$pw" == accel:x:65532:65532:* ]]; then
    ok "the image's user is accel, uid 65532 (not root)"
else
    not_ok "the image's user is accel, uid 65532 (not root)" "User '$user', passwd '$pw'"
fi
out=$(in_image --userspec=65532:65532 "$rootfs" /bin/sh -c \
    'id -u; /usr/bin/accel-exporter --version' 2>&1)
if [ $? -eq 0 ] && [ "$(printf '%s' "$out" | head -n1)" = 65532 ]; then
    ok "accel-exporter runs as uid 65532 in the image"
else
    not_ok "accel-exporter runs as uid 65532 in the image" "$out"
fi
check "libvcuda.so in the image: no import newer than GLIBC_2.17" \
    python3 "$root/tests/vcuda/test-glibc.py" "$rootfs/usr/lib/accel/libvcuda.so" 2.17
check "the image carries accel's copyright file and the version" \
    test -s "$rootfs/usr/share/doc/accel/copyright" -a "$(cat "$rootfs/usr/share/accel/version")" = "$version"

# ---- the chart's libvcuda installer, run in the image as the init container runs it ----
if command -v helm >/dev/null; then
    script=$(helm template accel "$root/deploy/helm/accel" -n kube-system | python3 -c '
import sys, yaml
for o in yaml.safe_load_all(sys.stdin):
    if o and o["kind"] == "DaemonSet":
        for c in o["spec"]["template"]["spec"].get("initContainers", []):
            if c["name"] == "install-libvcuda":
                print(c["command"][-1]); sys.exit(0)
sys.exit(1)')
    hostlib=$tmp/host-lib
    mkdir -p "$hostlib" "$rootfs/host-lib"
    install_lib() {
        unshare -m sh -c 'mount --bind "$1" "$2/host-lib" && exec env -i /usr/sbin/chroot "$2" /bin/sh -ec "$3"' \
            sh "$hostlib" "$rootfs" "$script"
    }
    lib=$rootfs/usr/lib/accel/libvcuda.so
    out1=$(install_lib 2>&1)
    first=$(readlink "$hostlib/libvcuda.so")
    ino1=$(stat -c %i "$hostlib/$first" 2>/dev/null)
    sum1=$(sha256sum "$hostlib/$first" 2>/dev/null | cut -c1-64)
    printf 'x' >>"$lib"   # a new build of the library
    out2=$(install_lib 2>&1)
    second=$(readlink "$hostlib/libvcuda.so")
    if [[ "$first" == libvcuda.so.$version-* ]] && [ "$second" != "$first" ] &&
        [ "$(stat -c %i "$hostlib/$first")" = "$ino1" ] &&
        [ "$(sha256sum "$hostlib/$first" | cut -c1-64)" = "$sum1" ] &&
        cmp -s "$lib" "$hostlib/libvcuda.so"; then
        ok "libvcuda installer: versioned file, symlink moved by rename, the old file untouched"
    else
        not_ok "libvcuda installer: versioned file, symlink moved by rename, the old file untouched" \
            "$out1" "$out2" "first $first second $second" "$(ls -la "$hostlib")"
    fi
    for x in 1 2 3; do printf 'x' >>"$lib"; sleep 1; install_lib >/dev/null 2>&1; done
    left=$(ls "$hostlib" | grep -c '^libvcuda\.so\.')
    if [ "$left" -eq 3 ] && cmp -s "$lib" "$hostlib/libvcuda.so" && [ ! -e "$hostlib/$first" ]; then
        ok "libvcuda installer keeps the 3 newest versions (libvcuda.keep)"
    else
        not_ok "libvcuda installer keeps the 3 newest versions (libvcuda.keep)" "$(ls -la "$hostlib")"
    fi
    truncate -s -4 "$lib"   # the image's file as it was (4 bytes appended above)

    # the exporter's pod-resources ACL, kept by its pod-resources-acl container, on a directory
    # as the kubelet makes it (root's, mode 0750: Kubernetes 1.37's kubelet.go, MkdirAll of the
    # pod-resources dir; the test cluster's exporter got "Permission denied" while the test
    # had 0755 here) with a root-owned socket: uid 65532 can connect to it, and to a socket
    # made there afterwards (a restarted kubelet)
    acl_script=$(helm template accel "$root/deploy/helm/accel" -n kube-system | python3 -c '
import sys, yaml
for o in yaml.safe_load_all(sys.stdin):
    if o and o["kind"] == "DaemonSet":
        for c in o["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "pod-resources-acl":
                print(c["command"][-1]); sys.exit(0)
sys.exit(1)')
    podres=$tmp/pod-resources
    mkdir -p "$podres" "$rootfs/var/lib/kubelet/pod-resources"
    chmod 0755 "$tmp"     # uid 65532 walks to the kubelet's dir
    chmod 0750 "$podres"  # and the kubelet's dir is 0750
    listen() { # listen PATH: a root-owned unix socket, mode 0755, served until the test ends
        python3 -c 'import os, socket, sys, time
os.umask(0o022); s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
time.sleep(120)' "$1" &
        for _ in $(seq 50); do [ -S "$1" ] && break; sleep 0.1; done
    }
    connects() { # connects PATH: can uid 65532 connect?
        python3 -c 'import os, socket, sys
os.setgid(65532); os.setgroups([]); os.setuid(65532)
socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$1" 2>&1
    }
    wait_connects() { # wait_connects PATH: until uid 65532 connects, at most 30 s
        local r
        for _ in $(seq 60); do r=$(connects "$1") && return 0; sleep 0.5; done
        echo "$r"
        return 1
    }
    listen "$podres/kubelet.sock"
    before=$(connects "$podres/kubelet.sock")
    timeout 60 unshare -m sh -c 'mount --bind "$1" "$2/var/lib/kubelet/pod-resources" && exec env -i /usr/sbin/chroot "$2" /bin/sh -c "$3"' \
        sh "$podres" "$rootfs" "$acl_script" >"$tmp/acl.log" 2>&1 &
    after=$(wait_connects "$podres/kubelet.sock")
    listen "$podres/second.sock"
    later=$(wait_connects "$podres/second.sock")
    if [[ "$before" == *"Permission denied"* ]] && [ -z "$after" ] && [ -z "$later" ]; then
        ok "exporter's pod-resources ACL: uid 65532 connects to the kubelet's socket and to one made later"
    else
        not_ok "exporter's pod-resources ACL: uid 65532 connects to the kubelet's socket and to one made later" \
            "before: $before" "after: $after" "later: $later" "$(cat "$tmp/acl.log")"
    fi
    kill $(jobs -p) 2>/dev/null
else
    not_ok "helm renders the libvcuda installer" "helm is missing: run scripts/deps.sh"
fi

# ---- loaders ----
if command -v podman >/dev/null; then
    p=(podman --root "$tmp/podman" --runroot "$tmp/podman-run" --storage-driver vfs)
    out=$("${p[@]}" load -i "$archive" 2>&1)
    names=$("${p[@]}" images --format '{{.Repository}}:{{.Tag}}' 2>&1)
    if [[ "$names" == *"docker.io/library/accel:$version"* ]]; then
        ok "podman load: docker.io/library/accel:$version"
    else
        not_ok "podman load: docker.io/library/accel:$version" "$out" "images: $names"
    fi
    "${p[@]}" rmi -a -f >/dev/null 2>&1
else
    not_ok "podman load" "podman is missing: run scripts/deps.sh"
fi
if command -v containerd >/dev/null && command -v ctr >/dev/null; then
    sock=$tmp/containerd.sock
    mkdir -p "$tmp/containerd-root" "$tmp/containerd-state"
    containerd --root "$tmp/containerd-root" --state "$tmp/containerd-state" \
        --address "$sock" --config /dev/null >"$tmp/containerd.log" 2>&1 &
    ctrd_pid=$!
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
    out=$(timeout 120 ctr -a "$sock" images import "$archive" 2>&1)
    names=$(ctr -a "$sock" images ls -q 2>&1)
    if [[ "$names" == *"docker.io/library/accel:$version"* ]]; then
        ok "ctr images import: docker.io/library/accel:$version"
    else
        not_ok "ctr images import: docker.io/library/accel:$version" "$out" "images: $names" \
            "$(tail -n 3 "$tmp/containerd.log")"
    fi
else
    skip "ctr images import" "containerd and ctr are not installed"
fi

# ---- libvcuda where glibc is 2.31 ----
old=$tmp/bullseye
if bash "$root/scripts/image.sh" rootfs bullseye "$old" >"$tmp/bullseye.log" 2>&1; then
    cp "$rootfs/usr/lib/accel/libvcuda.so" "$old/libvcuda.so"
    glibc=$(/usr/sbin/chroot "$old" /usr/bin/ldd --version 2>&1 | head -n1)
    out=$(env -i /usr/sbin/chroot "$old" /usr/bin/env LD_BIND_NOW=1 LD_PRELOAD=/libvcuda.so /bin/true 2>&1)
    if [ $? -eq 0 ] && [ -z "$out" ]; then
        ok "libvcuda loads, every symbol bound, in Debian 11 ($glibc)"
    else
        not_ok "libvcuda loads, every symbol bound, in Debian 11 ($glibc)" "$out"
    fi
    out=$(env -i /usr/sbin/chroot "$old" /usr/bin/env LD_PRELOAD=/libvcuda.so \
        /usr/bin/perl -MPOSIX -e 'print POSIX::floor(2.5), "\n"' 2>&1)
    if [ "$out" = 2 ]; then
        ok "under libvcuda, perl resolves POSIX.so's symbols through the hooked dlsym (glibc 2.31)"
    else
        not_ok "under libvcuda, perl resolves POSIX.so's symbols through the hooked dlsym (glibc 2.31)" "$out"
    fi
else
    not_ok "a Debian 11 root filesystem (scripts/image.sh rootfs bullseye)" "$(tail -n 5 "$tmp/bullseye.log")"
fi

# ---- the test image: the emulator and cuda-demo under libvcuda in its root filesystem ----
test_archive=$build/accel-test-image.tar
if [ -f "$test_archive" ]; then
    trootfs=$tmp/test-rootfs
    python3 "$oci" --unpack "$test_archive" "$trootfs"
    out=$(env -i /usr/sbin/chroot "$trootfs" /bin/sh -c 'export ACCEL_EMU_STATE=/tmp/emu.state
accel-emu init --gpus 1 >/dev/null &&
LD_LIBRARY_PATH=/usr/lib/accel-emu LD_PRELOAD=/usr/lib/accel/libvcuda.so VCUDA_MEMORY_LIMIT=1Gi \
VCUDA_REGION=/tmp/quota.region cuda-demo' 2>&1)
    if [[ "$out" == *"free 544 MiB of 1024 MiB"* ]] && [[ "$out" == *"then CUDA_ERROR_OUT_OF_MEMORY"* ]]; then
        ok "accel-test: cuda-demo under libvcuda on the emulator, held to a 1 GiB quota, in its root filesystem"
    else
        not_ok "accel-test: cuda-demo under libvcuda on the emulator, held to a 1 GiB quota" "$out"
    fi
    for p in spin emu-hold emu-mps-client; do
        out=$(env -i /usr/sbin/chroot "$trootfs" /lib64/ld-linux-x86-64.so.2 --list \
            "/usr/lib/accel-test/$p" 2>&1)
        if [ $? -eq 0 ] && [[ "$out" != *"not found"* ]]; then
            ok "accel-test: every library of /usr/lib/accel-test/$p is in the image"
        else
            not_ok "accel-test: every library of /usr/lib/accel-test/$p is in the image" "$out"
        fi
    done
else
    not_ok "accel-test image" "$test_archive is missing: run make test-image"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
