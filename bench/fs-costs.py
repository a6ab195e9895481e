#!/usr/bin/python3
"""fs-costs.py — what the vGPU Allocate path would pay the disk, on a directory's filesystem
(docs/vgpu.md, "Restart safety"): an appended line made durable with fdatasync (what acceld
now does off the loop, through Linux AIO), and the inodes an Allocate used to create (mkdir,
a new file), which the spare directories now make ahead.

  /usr/bin/python3 bench/fs-costs.py [DIR]     (default /tmp; /var/lib/accel on a node)
"""
import os
import shutil
import sys
import tempfile
import time

N = 300


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


def timed(fn):
    out = []
    for i in range(N):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def main():
    d = tempfile.mkdtemp(prefix="fs-costs-", dir=sys.argv[1] if len(sys.argv) > 1 else "/tmp")
    try:
        fd = os.open(os.path.join(d, "journal"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        line = b'{"set":{"podUID":"x","container":"main","cores":30,"memory":16}}\n'

        def append_sync(i):
            os.write(fd, line)
            os.fdatasync(fd)
        rows = [("append one line + fdatasync", timed(append_sync)),
                ("append one line (page cache only)", timed(lambda i: os.write(fd, line))),
                ("mkdir", timed(lambda i: os.mkdir(os.path.join(d, f"d{i}")))),
                ("create a file", timed(lambda i: os.close(os.open(
                    os.path.join(d, f"f{i}"), os.O_WRONLY | os.O_CREAT, 0o644)))),
                ("rename a directory", timed(lambda i: os.rename(
                    os.path.join(d, f"d{i}"), os.path.join(d, f"r{i}"))))]
        os.close(fd)
        for name, xs in rows:
            print(f"{name}: p50 {pct(xs, 0.5):.3f} ms, p99 {pct(xs, 0.99):.3f} ms ({N} times)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
