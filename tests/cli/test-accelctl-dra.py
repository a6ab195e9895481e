#!/usr/bin/env python3
"""test-accelctl-dra — `accelctl dra` on a state dir shaped as acceld --mode dra leaves it
(dra-status.json, dra-checkpoint.json, claims/<uid>/config): the slice and its generation,
each device's health and taint, the prepared claims with their devices, CDI IDs and a share's
limits; --json carries both files; a state dir without DRA mode fails with a message naming
the file. Prints TAP (tests/lib/taptest.py). The end-to-end use is in tests/dra/test_dra_mode.py."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from taptest import case, check, run  # noqa: E402

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
ACCELCTL = os.path.join(BUILD, "src", "cli", "accelctl")
TMP = tempfile.mkdtemp(prefix="test-accelctl-dra-")
UID = "0f3c6a8e-1111-4a1b-9c2d-aaaaaaaaaaaa"
MPS_UID = "0f3c6a8e-2222-4a1b-9c2d-bbbbbbbbbbbb"
STATUS = {"driver": "gpu.accel.dev", "node": "node-a", "slice": "node-a-gpu.accel.dev",
          "generation": 3, "synced": False, "error": "list: the API server answered 503",
          "counts": {"creates": 1, "updates": 2, "deletes": 0, "conflicts": 1, "failures": 1},
          "devices": [
              {"name": "gpu-0", "uuid": "GPU-aaaa", "memory": 80 << 30, "shared": True,
               "healthy": True, "taint": "", "reason": "", "pciBusID": "0000:18:00.0"},
              {"name": "gpu-1", "uuid": "GPU-bbbb", "memory": 80 << 30, "shared": True,
               "healthy": False, "taint": "NoExecute", "reason": "XID 79",
               "pciBusID": "0000:2a:00.0"},
              {"name": "gpu-2", "uuid": "GPU-cccc", "memory": 80 << 30, "shared": False,
               "sharing": "mps", "healthy": False, "taint": "", "reason": "XID 62",
               "pciBusID": "0000:3b:00.0"}]}
CHECKPOINT = {"version": 1, "claims": [
    {"uid": UID, "devices": [{"requests": ["gpu"], "pool": "node-a", "device": "gpu-0",
                              "cdi": "gpu.accel.dev/claim=%s-gpu-0" % UID}]},
    {"uid": MPS_UID, "devices": [{"requests": ["gpu"], "pool": "node-a", "device": "gpu-2",
                                  "cdi": "gpu.accel.dev/claim=%s-gpu-2" % MPS_UID}],
     "mps": {"uuids": "GPU-cccc", "n": 1, "cores": 25, "memory": 10 << 30}}]}
with open(os.path.join(TMP, "dra-status.json"), "w") as f:
    json.dump(STATUS, f)
with open(os.path.join(TMP, "dra-checkpoint.json"), "w") as f:
    json.dump(CHECKPOINT, f)
os.makedirs(os.path.join(TMP, "claims", UID))
with open(os.path.join(TMP, "claims", UID, "config"), "w") as f:
    f.write("memory_limit = 4294967296\ncore_limit = 30\nregion = /var/run/vcuda/usage\n")


def accelctl(*args):
    return subprocess.run([ACCELCTL, "dra", *args], capture_output=True, text=True, timeout=30)


@case("the slice, its generation and why it is not in step")
def _():
    p = accelctl("--state-dir", TMP)
    check(p.returncode == 0, p.stderr)
    check("slice node-a-gpu.accel.dev: pool generation 3, not in step" in p.stdout, p.stdout)
    check("last error: list: the API server answered 503" in p.stdout, p.stdout)


@case("each device's health and taint")
def _():
    lines = accelctl("--state-dir", TMP).stdout.splitlines()
    g0 = [ln for ln in lines if ln.startswith("gpu-0 ")]
    g1 = [ln for ln in lines if ln.startswith("gpu-1 ")]
    check(g0 and "Healthy" in g0[0] and "81920 MiB" in g0[0] and "shared" in g0[0], lines)
    check(g1 and "Unhealthy" in g1[0] and "NoExecute (XID 79)" in g1[0], lines)
    g2 = [ln for ln in lines if ln.startswith("gpu-2 ")]
    # an MPS share; unhealthy with dra.taintEffect None: no taint
    check(g2 and " mps " in g2[0] and "none (XID 62)" in g2[0], lines)


@case("the prepared claim: its device, CDI ID and share limits")
def _():
    out = accelctl("--state-dir", TMP).stdout
    check("prepared claims (2):" in out, out)
    check("%s: share: 4096 MiB, 30%% of the cores" % UID in out, out)
    check("%s: MPS share: 10240 MiB, 25%% of the cores (its own MPS daemon)" % MPS_UID in out,
          out)
    check("node-a/gpu-0 -> gpu.accel.dev/claim=%s-gpu-0" % UID in out, out)


@case("--json carries the status and the checkpoint")
def _():
    p = accelctl("--state-dir", TMP, "--json")
    o = json.loads(p.stdout)
    check(o == {"status": STATUS, "checkpoint": CHECKPOINT}, o)


@case("a state dir without DRA mode: exit 1 naming the file")
def _():
    p = accelctl("--state-dir", os.path.join(TMP, "claims"))
    check(p.returncode == 1 and "dra-status.json" in p.stderr, (p.returncode, p.stderr))


@case("a bad option: usage, exit 2")
def _():
    p = accelctl("--nope")
    check(p.returncode == 2 and "usage: accelctl dra" in p.stderr, (p.returncode, p.stderr))


run(lambda: shutil.rmtree(TMP, ignore_errors=True))
