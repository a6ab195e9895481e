#!/usr/bin/env bash
# A CUDA 13 toolkit (nvcc, cudart, cuda.h) for the tests that build programs with nvcc and run
# them on the emulator (docs/testing.md, "nvcc"). /usr/local/cuda is used where it holds CUDA 13;
# otherwise NVIDIA's wheels pinned in scripts/cuda-wheels.txt are installed from PyPI with pip
# into a cache directory keyed by that file's requirements:
#   ${XDG_CACHE_HOME:-~/.cache}/accel/cuda-wheels-KEY/      (toolkit root: its nvidia/cu13)
# Nothing goes into a Python environment or under /usr/local/cuda.
#
#   scripts/cuda-wheels.sh          install if needed; a second run does nothing (scripts/deps.sh)
#   scripts/cuda-wheels.sh --root   print the toolkit root to use, install nothing (meson's
#                                   default for -Dnvcc_root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pins=$here/cuda-wheels.txt
system=/usr/local/cuda
key=$(grep -v '^[[:space:]]*#' "$pins" | sha256sum | cut -c1-16)
cache=${XDG_CACHE_HOME:-$(cd ~ && pwd)/.cache}/accel
prefix=$cache/cuda-wheels-$key
root=$prefix/nvidia/cu13

system_ok() {
    [ -x "$system/bin/nvcc" ] && [ -e "$system/lib64/libcudart_static.a" ] &&
        grep -Eqs '^#define CUDA_VERSION 13[0-9]{3}' "$system/include/cuda.h"
}

case "${1:-}" in
--root)
    if system_ok; then echo "$system"; else echo "$root"; fi
    exit 0
    ;;
"") ;;
*) echo "usage: $0 [--root]" >&2; exit 2 ;;
esac
if system_ok || [ -f "$prefix/.installed" ]; then
    exit 0
fi

# pip: the first python3 on PATH, Debian's, or Debian's python3-pip installed now
pip=()
for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -m pip --version >/dev/null 2>&1; then
        pip=("$py" -m pip)
        break
    fi
done
if [ ${#pip[@]} -eq 0 ]; then
    sudo=
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends python3-pip
    pip=(/usr/bin/python3 -m pip)
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.cuda-wheels-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "cuda-wheels: no CUDA 13 in $system: installing NVIDIA's CUDA 13.0 wheels" \
     "(nvcc, cudart; 100 MB) into $prefix" >&2
start=$(date +%s)
if ! PIP_ROOT_USER_ACTION=ignore timeout 900 "${pip[@]}" install --quiet \
        --disable-pip-version-check --no-cache-dir --no-deps --only-binary=:all: \
        --require-hashes --target "$tmp" -r "$pins" >&2; then
    echo "cuda-wheels: pip could not install $pins (its message is above; PyPI unreachable?)." \
         "Run scripts/cuda-wheels.sh again when it is, or install CUDA 13 in $system." \
         "To build without (the tests that need nvcc are then skipped): meson setup build &&" \
         "meson compile -C build, which make build would have run after scripts/deps.sh." >&2
    exit 1
fi
# The two things a toolkit installer makes and the wheels do not: lib64, where nvcc's profile
# (bin/nvcc.profile) has the linker look, and libcudart.so, the name `-cudart shared` links by.
ln -s lib "$tmp/nvidia/cu13/lib64"
ln -s libcudart.so.13 "$tmp/nvidia/cu13/lib/libcudart.so"
if ! "$tmp/nvidia/cu13/bin/nvcc" --version | grep -q 'release 13\.0,'; then
    echo "cuda-wheels: the installed nvcc does not run or is not CUDA 13.0:" >&2
    "$tmp/nvidia/cu13/bin/nvcc" --version >&2 || true
    exit 1
fi
cp "$pins" "$tmp/.installed"
chmod 755 "$tmp"
# a run beside this one may have finished first: its directory is as good as ours
mv -T "$tmp" "$prefix" 2>/dev/null || [ -f "$prefix/.installed" ]
echo "cuda-wheels: nvcc $("$root/bin/nvcc" --version | sed -n 's/.*, V//p') in $root" \
     "($(($(date +%s) - start)) s)" >&2
