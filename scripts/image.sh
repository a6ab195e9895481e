#!/usr/bin/env bash
# image.sh — builds accel's image from the repository's Containerfile with buildah, offline: no
# registry, no Docker daemon (docs/deploy.md, "Building the image").
#
#   scripts/image.sh [runtime|test] [BUILD_DIR]
#   scripts/image.sh rootfs SUITE DIR    (a cached debootstrap of SUITE, e.g. bullseye, into DIR:
#                                         tests/image loads libvcuda in Debian 11's glibc 2.31)
#
# runtime (the default) tags accel:<version> and writes BUILD_DIR/accel-image.tar; test tags
# accel-test:<version> (the runtime image plus the emulator, cuda-demo and the test programs)
# and writes BUILD_DIR/accel-test-image.tar. <version> is meson.build's. The archives are OCI
# image layouts with a Docker manifest.json beside index.json, so `podman load`, `docker load`
# and `ctr images import` all take them.
#
# The Containerfile starts FROM debian:bookworm-slim. That base is made here: debootstrap
# --variant=minbase bookworm from the Debian mirror apt is configured with, trimmed as Debian's
# slim images are (no docs but copyright files, no man pages, no locales), imported under that
# name. It is cached in $ACCEL_IMAGE_CACHE (default /var/cache/accel-image) as a tarball keyed
# by the mirror and the Date of the suite's InRelease, so it is made again only when Debian
# publishes a new bookworm release on that mirror (offline: the newest cached one is used).
# Layers are cached by buildah (--layers) and the meson build dir by a cache mount, so a second
# build recompiles only what changed (by content: the Containerfile touches the files whose
# sha256 differs from the last build's before ninja runs).
#
# Environment: ACCEL_DEBIAN_MIRROR, ACCEL_DEBIAN_SECURITY_MIRROR (default: apt's), 
# ACCEL_IMAGE_CACHE, ACCEL_BUILDAH_OPTS (global buildah options, e.g. "--storage-driver vfs"
# where overlay is not available), BUILDAH_ISOLATION (default chroot: works on cgroup v1
# hosts and inside containers).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:-runtime}
build_dir=${2:-$root/build}
suite=bookworm
case $target in
    runtime) name=accel; out=$build_dir/accel-image.tar ;;
    test) name=accel-test; out=$build_dir/accel-test-image.tar ;;
    rootfs) [ $# -eq 3 ] || { echo "usage: image.sh rootfs SUITE DIR" >&2; exit 2; }
            suite=$2 ;;
    *) echo "image.sh: unknown target '$target' (runtime, test or rootfs)" >&2; exit 2 ;;
esac
version=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$root/meson.build" | head -n1)
[ -n "$version" ] || { echo "image.sh: no version in meson.build" >&2; exit 1; }
base_name=docker.io/library/debian:bookworm-slim
cache=${ACCEL_IMAGE_CACHE:-/var/cache/accel-image}
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
read -r -a buildah_opts <<<"${ACCEL_BUILDAH_OPTS:-}"
bah() { buildah "${buildah_opts[@]}" "$@"; }

for tool in buildah debootstrap curl python3; do
    command -v "$tool" >/dev/null || {
        echo "image.sh: $tool is missing: run scripts/deps.sh (it installs buildah and debootstrap)" >&2
        exit 1
    }
done
[ "$(id -u)" -eq 0 ] || { echo "image.sh: run as root (debootstrap and buildah's storage)" >&2; exit 1; }
mkdir -p "$cache"

# The mirrors apt uses here for bookworm and bookworm-security.
apt_site() {
    apt-get indextargets --format '$(SITE) $(RELEASE)' 'Created-By: Packages' 2>/dev/null |
        awk -v r="$1" '$2 == r { print $1; exit }'
}
mirror=${ACCEL_DEBIAN_MIRROR:-$(apt_site bookworm)}
mirror=${mirror:-http://deb.debian.org/debian}
security=${ACCEL_DEBIAN_SECURITY_MIRROR:-$(apt_site bookworm-security)}
security=${security:-http://deb.debian.org/debian-security}
mirror_key=$(printf '%s' "$mirror" | sha256sum | cut -c1-12)

# ---- the base image ----
base_tar=
release_date=$(curl -fsS --max-time 30 "$mirror/dists/$suite/InRelease" 2>/dev/null |
    sed -n 's/^Date: //p' | head -n1 || true)
if [ -n "$release_date" ]; then
    key=$suite-$mirror_key-$(date -u -d "$release_date" +%Y%m%dT%H%M%SZ)
    base_tar=$cache/base-$key.tar
else
    base_tar=$(ls -1t "$cache"/base-"$suite-$mirror_key"-*.tar 2>/dev/null | head -n1 || true)
    [ -n "$base_tar" ] || {
        echo "image.sh: cannot read $mirror/dists/$suite/InRelease and no base is cached in $cache" >&2
        exit 1
    }
    echo "image.sh: $mirror unreachable: using the cached base $base_tar" >&2
fi

make_base() {
    local rootfs
    rootfs=$(mktemp -d "$cache/rootfs.XXXXXX")
    # debootstrap mounts /proc and /sys inside while it works; never leave them behind
    trap 'for m in proc sys dev/pts; do umount -l "'"$rootfs"'/$m" 2>/dev/null || true; done;
          rm -rf --one-file-system "'"$rootfs"'"' RETURN
    echo "image.sh: debootstrap --variant=minbase $suite from $mirror (once per Debian release)" >&2
    debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
        echo "image.sh: debootstrap failed; its log: $cache/debootstrap.log" >&2
        tail -n 20 "$cache/debootstrap.log" >&2
        return 1
    }
    # Trimmed as Debian's slim images are: packages installed later are trimmed too.
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/accel-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
    cat >"$rootfs/etc/apt/apt.conf.d/accel-slim" <<'EOF'
APT::Install-Recommends "false";
Acquire::Languages "none";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
EOF
    find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
        "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* \
        "$rootfs"/etc/apt/sources.list
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    : >"$rootfs/etc/resolv.conf"
    rm -f "$rootfs/etc/hostname"
    tar --numeric-owner --xattrs -C "$rootfs" -cf "$base_tar.tmp" .
    mv "$base_tar.tmp" "$base_tar"
}

import_base() {
    local ctr mnt id
    ctr=$(bah from --pull=never scratch)
    mnt=$(bah mount "$ctr")
    tar --numeric-owner --xattrs -C "$mnt" -xf "$base_tar"
    bah umount "$ctr" >/dev/null
    bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd bash --label accel.base="$(basename "$base_tar" .tar)" "$ctr"
    bah commit --rm -q "$ctr" "$base_name" >/dev/null
    id=$(bah images --noheading --no-trunc --format '{{.ID}}' "$base_name")
    echo "$id" >"$base_tar.imported"
}

[ -f "$base_tar" ] || make_base
if [ "$target" = rootfs ]; then
    mkdir -p "$3"
    tar --numeric-owner --xattrs -C "$3" -xf "$base_tar"
    exit 0
fi
mkdir -p "$build_dir"
have=$(bah images --noheading --no-trunc --format '{{.ID}}' "$base_name" 2>/dev/null || true)
if [ -z "$have" ] || [ "$have" != "$(cat "$base_tar.imported" 2>/dev/null)" ]; then
    echo "image.sh: importing $(basename "$base_tar") as $base_name" >&2
    import_base
fi

# ---- the image ----
echo "image.sh: building $name:$version (Containerfile, target $target)" >&2
bah bud --layers --pull=never --network host -f "$root/Containerfile" --target "$target" \
    --build-arg DEBIAN_IMAGE="$base_name" -t "localhost/$name:$version" "$root"
rm -f "$out.tmp"
bah push -q "localhost/$name:$version" "oci-archive:$out.tmp:$name:$version" >/dev/null
python3 "$root/scripts/oci-archive.py" "$out.tmp" "$name:$version"
mv "$out.tmp" "$out"
echo "image.sh: wrote $out ($name:$version, $(python3 "$root/scripts/oci-archive.py" --size "$out") bytes uncompressed)" >&2
