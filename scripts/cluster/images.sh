#!/usr/bin/env bash
# Builds the test cluster's two local images into DIR as OCI archives (oci-image.py):
#   pause.tar    $CL_PAUSE_IMAGE, the sandbox image: pause.c compiled static
#   busybox.tar  $CL_BUSYBOX_IMAGE, for the smoke test: Debian's busybox-static with its applets
# No registry is involved; build/cluster/ctr-import loads them.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
out=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out" "$tmp/pause" "$tmp/busybox/bin"

gcc -static -O2 -s -Wall -Werror -o "$tmp/pause/pause" "$here/pause.c" ||
    cl_die "could not build pause.c statically (Debian's libc6-dev has the static libc: make deps)"
python3 "$here/oci-image.py" --name "$CL_PAUSE_IMAGE" --out "$out/pause.tar" \
    --entrypoint /pause "$tmp/pause"

bb=/bin/busybox
# (ldd refuses a static program)
[ -x "$bb" ] && ! ldd "$bb" >/dev/null 2>&1 || cl_die "$bb is missing or not static: install busybox-static (make deps)"
cp "$bb" "$tmp/busybox/bin/busybox"
for applet in $("$bb" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$tmp/busybox/bin/$applet"
done
python3 "$here/oci-image.py" --name "$CL_BUSYBOX_IMAGE" --out "$out/busybox.tar" \
    --cmd /bin/sh "$tmp/busybox"
