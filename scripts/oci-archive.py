#!/usr/bin/env python3
"""oci-archive.py — the image archive that scripts/image.sh writes, made loadable everywhere,
measured and unpacked.

  oci-archive.py ARCHIVE NAME:TAG   adds, beside the OCI layout buildah wrote (oci-layout,
                                    index.json, blobs/), a Docker manifest.json naming the same
                                    blobs with RepoTags [NAME:TAG], and the containerd image-name
                                    annotation (docker.io/library/NAME:TAG) in index.json: then
                                    `docker load` (any version), `podman load` and
                                    `ctr images import` all take it and name it NAME:TAG.
  oci-archive.py --size ARCHIVE     prints the image's size uncompressed (the bytes of its
                                    layers' tar streams, as `podman images` counts).
  oci-archive.py --unpack ARCHIVE DIR
                                    applies the layers in order into DIR (whiteouts honoured,
                                    numeric owners kept): the image's root filesystem.
  oci-archive.py --config ARCHIVE   prints the image config (JSON: User, Entrypoint, ...).
"""
import gzip
import io
import json
import os
import shutil
import sys
import tarfile


def read_archive(path):
    with tarfile.open(path) as t:
        members = {m.name.lstrip("./"): m for m in t.getmembers()}
        index = json.load(t.extractfile(members["index.json"]))
    return members, index


def blob(t, digest):
    algo, hexd = digest.split(":", 1)
    return t.extractfile("blobs/%s/%s" % (algo, hexd))


def manifest_of(t, index):
    if len(index["manifests"]) != 1:
        sys.exit("oci-archive.py: expected one manifest in index.json, found %d"
                 % len(index["manifests"]))
    return json.load(blob(t, index["manifests"][0]["digest"]))


def layer_stream(t, layer):
    f = blob(t, layer["digest"])
    mt = layer.get("mediaType", "")
    if mt.endswith("+gzip") or mt.endswith(".gzip"):
        return gzip.GzipFile(fileobj=f)
    if "zstd" in mt:
        sys.exit("oci-archive.py: zstd layers are not handled (%s)" % mt)
    return f


def fix(path, ref):
    name, _, tag = ref.rpartition(":")
    with tarfile.open(path) as t:
        index = json.load(t.extractfile("index.json"))
        man = manifest_of(t, index)
        desc = index["manifests"][0]
        ann = desc.setdefault("annotations", {})
        ann["io.containerd.image.name"] = "docker.io/library/%s:%s" % (name, tag)
        ann["org.opencontainers.image.ref.name"] = tag
        docker = [{
            "Config": "blobs/%s" % man["config"]["digest"].replace(":", "/"),
            "RepoTags": [ref],
            "Layers": ["blobs/%s" % l["digest"].replace(":", "/") for l in man["layers"]],
        }]
        tmp = path + ".fix"
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as out:
            for m in t.getmembers():
                if m.name.lstrip("./") in ("index.json", "manifest.json"):
                    continue
                out.addfile(m, t.extractfile(m) if m.isfile() else None)
            for fname, obj in (("index.json", index), ("manifest.json", docker)):
                data = json.dumps(obj, separators=(",", ":")).encode()
                ti = tarfile.TarInfo(fname)
                ti.size = len(data)
                ti.mode = 0o644
                out.addfile(ti, io.BytesIO(data))
    os.replace(tmp, path)


def size(path):
    total = 0
    with tarfile.open(path) as t:
        man = manifest_of(t, json.load(t.extractfile("index.json")))
        for layer in man["layers"]:
            s = layer_stream(t, layer)
            while True:
                chunk = s.read(1 << 20)
                if not chunk:
                    break
                total += len(chunk)
    print(total)


def config(path):
    with tarfile.open(path) as t:
        man = manifest_of(t, json.load(t.extractfile("index.json")))
        print(json.dumps(json.load(blob(t, man["config"]["digest"])).get("config", {})))


def remove(p):
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
    elif os.path.lexists(p):
        os.unlink(p)


def unpack(path, dest):
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(path) as t:
        man = manifest_of(t, json.load(t.extractfile("index.json")))
        for layer in man["layers"]:
            with tarfile.open(fileobj=layer_stream(t, layer), mode="r|") as lt:
                for m in lt:
                    name = os.path.normpath(m.name.lstrip("/"))
                    if name.startswith(".."):
                        sys.exit("oci-archive.py: layer entry outside the root: %s" % m.name)
                    d, base = os.path.split(name)
                    if base == ".wh..wh..opq":
                        target = os.path.join(dest, d)
                        for e in os.listdir(target) if os.path.isdir(target) else []:
                            remove(os.path.join(target, e))
                        continue
                    if base.startswith(".wh."):
                        remove(os.path.join(dest, d, base[4:]))
                        continue
                    target = os.path.join(dest, name)
                    if os.path.lexists(target) and not (m.isdir() and os.path.isdir(target)):
                        remove(target)
                    lt.extract(m, dest, numeric_owner=True, set_attrs=True)


def main(argv):
    if len(argv) == 3 and argv[0] == "--unpack":
        unpack(argv[1], argv[2])
    elif len(argv) == 2 and argv[0] == "--size":
        size(argv[1])
    elif len(argv) == 2 and argv[0] == "--config":
        config(argv[1])
    elif len(argv) == 2 and not argv[0].startswith("-"):
        fix(argv[0], argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
