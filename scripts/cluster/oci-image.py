#!/usr/bin/env python3
"""Writes a one-layer OCI image archive from a directory, for the test cluster's local images
(the pause image, the smoke test's busybox): no registry and no image builder needed, and
`ctr images import` (build/cluster/ctr-import) loads the result.

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...) in a tar, as
the OCI image spec defines it; the index names the image with the annotation containerd's
importer reads (io.containerd.image.name) and the spec's own ref.name. The layer is
uncompressed and reproducible: sorted entries, owner root, time 0.

  oci-image.py --name REF --out FILE.tar [--entrypoint ARG]... [--cmd ARG]... ROOTFS
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def layer_tar(rootfs):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                path = os.path.join(dirpath, name)
                arc = os.path.relpath(path, rootfs)
                info = tar.gettarinfo(path, arcname=arc)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buf.getvalue()


def blob(out, data, media_type):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest[7:])
    info.size = len(data)
    info.mode = 0o644
    out.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True, help="image reference, e.g. localhost/accel/pause:1")
    ap.add_argument("--out", required=True)
    ap.add_argument("--entrypoint", action="append", default=[])
    ap.add_argument("--cmd", action="append", default=[])
    ap.add_argument("rootfs")
    args = ap.parse_args()
    if not os.path.isdir(args.rootfs):
        sys.exit(f"oci-image: {args.rootfs}: not a directory")

    layer = layer_tar(args.rootfs)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Entrypoint": args.entrypoint or None,
            "Cmd": args.cmd or None,
        },
        "rootfs": {"type": "layers",
                   "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }
    tmp = args.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as out:
        layout = json.dumps({"imageLayoutVersion": "1.0.0"}).encode()
        info = tarfile.TarInfo("oci-layout")
        info.size = len(layout)
        out.addfile(info, io.BytesIO(layout))
        cfg = blob(out, json.dumps(config, sort_keys=True).encode(),
                   "application/vnd.oci.image.config.v1+json")
        lay = blob(out, layer, "application/vnd.oci.image.layer.v1.tar")
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": cfg, "layers": [lay]}
        man = blob(out, json.dumps(manifest, sort_keys=True).encode(), manifest["mediaType"])
        man["platform"] = {"architecture": "amd64", "os": "linux"}
        man["annotations"] = {"io.containerd.image.name": args.name,
                              "org.opencontainers.image.ref.name": args.name.rsplit(":", 1)[-1]}
        index = json.dumps({"schemaVersion": 2,
                            "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": [man]}, sort_keys=True).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(index)
        out.addfile(info, io.BytesIO(index))
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
