#!/usr/bin/python3
"""End to end on the emulator: the grpcio kubelet (test_kubelet.py) prepares
two claims on one shared GPU — 30 % + 4 GiB and 70 % + 8 GiB — and each
claim's CDI spec is applied as a runtime would (its mounts bind-mounted in a
private mount namespace, its env set; device nodes skipped: the emulator needs
none), then an unmodified CUDA program (demo/cuda-demo) runs there: it must
see its own quota as total memory and get the claim's share of the GPU's time
(within 5 points), and the usage region libvcuda creates must carry the claim's
core limit. Prints TAP; exits 77 when not root, without
unshare, or in the sanitizer build (libvcuda comes in through
/etc/ld.so.preload, before the ASan runtime)."""
import json
import os
import shutil
import struct
import subprocess
import sys
import traceback

if os.environ.get("ASAN_OPTIONS"):
    print("1..0 # SKIP sanitizer build: the ASan runtime must come before the preloaded libvcuda")
    sys.exit(77)
if os.geteuid() != 0 or not shutil.which("unshare"):
    print("1..0 # SKIP needs root and unshare for a private mount namespace")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_kubelet as k  # noqa: E402  (exits 77 itself without grpcio/protoc)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import mountns  # noqa: E402

BUILD = k.BUILD
EMU = os.path.join(BUILD, "src/emu/accel-emu")
DEMO = os.path.join(BUILD, "demo/cuda-demo")
LIBVCUDA = os.path.join(BUILD, "src/vcuda/libvcuda.so")
GiB = 1 << 30


def run_in_container(spec, argv, env):
    """Applies the spec's spec-wide mounts and env in a private mount namespace, runs argv."""
    edits = spec["containerEdits"]
    full_env = dict(env)
    full_env.update(e.split("=", 1) for e in edits.get("env", []))
    mounts = [(m["hostPath"], m["containerPath"], "ro" in m["options"])
              for m in edits.get("mounts", [])]
    return mountns.run(mounts, argv, full_env)


def main():
    tmp = k.TMP
    state = os.path.join(tmp, "emu.state")
    out = subprocess.check_output([EMU, "--state", state, "init", "--gpus", "2"], text=True)
    uuids = [w for line in out.splitlines() for w in line.split() if w.startswith("GPU-")]
    assert len(uuids) == 2, out
    node = k.Node(os.path.join(tmp, "n"), env=dict(os.environ,
                                                   DRA_TEST_GPU_UUIDS=",".join(uuids)),
                  lib=os.path.abspath(LIBVCUDA))
    shares = [("small", k.UID_A, "4Gi", "30", 4 * GiB, 30),
              ("large", k.UID_B, "8Gi", "70", 8 * GiB, 70)]
    env = dict(os.environ, ACCEL_EMU_STATE=state,
               LD_LIBRARY_PATH=os.path.abspath(os.path.join(BUILD, "src/emu")))
    env.pop("LD_PRELOAD", None)
    print("1..%d" % len(shares))
    failed = 0
    node.start()
    try:
        for i, (name, uid, mem, cores, want_bytes, want_cores) in enumerate(shares, 1):
            try:
                res = dict(k.SHARE[0], consumedCapacity={"memory": mem, "cores": cores},
                           shareID="7d1c3c43-4d42-4a79-b0d2-5b9d0c0e0e0%d" % i)
                node.claim("team", name, uid, [res])
                r = node.prepare([("team", name, uid)])
                assert r.claims[uid].error == "", r
                spec = json.load(open(os.path.join(node.dirs["cdi"],
                                                   "accel-dra-%s.json" % uid)))
                p = run_in_container(spec, [os.path.abspath(DEMO), "--alloc", "512",
                                            "--seconds", "2", "--kernel-ms", "5"], env)
                assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
                first = [ln for ln in p.stdout.splitlines() if ln.startswith("cuMemGetInfo")][0]
                assert first.endswith("of %d MiB" % (want_bytes >> 20)), p.stdout
                region = [m["hostPath"] for m in spec["containerEdits"]["mounts"]
                          if m["containerPath"] == "/var/run/vcuda"][0]
                with open(os.path.join(region, "usage"), "rb") as f:
                    hdr = f.read(4096)
                limit0 = struct.unpack_from("<Q", hdr, 64)[0]
                core = struct.unpack_from("<I", hdr, 192)[0]
                assert (limit0, core) == (want_bytes, want_cores), (limit0, core)
                # the compute share it got: libvcuda paces its launches to the claim's cores
                # (event-measured GPU time over wall time; a loaded machine only lowers it)
                got = [ln for ln in p.stdout.splitlines() if ln.startswith("ran ")][0]
                share = float(got.rsplit("a ", 1)[1].split()[0])
                assert abs(share - want_cores) <= 5, (share, want_cores, got)
                print("ok %d - claim_%s_sees_%s_and_gets_%s_percent (%s)" % (i, name, mem, cores,
                                                                      got))
            except Exception:
                failed += 1
                print("not ok %d - claim_%s" % (i, name))
                for line in traceback.format_exc().splitlines():
                    print("# " + line)
    finally:
        node.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
