#!/usr/bin/env python3
"""test-accelctl-vgpu — `accelctl vgpu` on status files written by hand in acceld's format
(src/modes/vgpu-status.c): no file or a file of another version is exit 1 with a message
that says what to check; a valid one shows each GPU's shares, a whole-GPU assignment, one
waiting for its second Allocate, one not checked yet, one with region and NVML usage, and
the findings; --json prints the object as it is. The end-to-end run against acceld is in
tests/interop/test-acceld-vgpu-pods.py. Prints TAP."""
import json
import os
import subprocess
import sys
import tempfile

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
ACCELCTL = os.path.join(BUILD, "src", "cli", "accelctl")
GIB = 1 << 30
G0 = "GPU-00000000-1111-2222-3333-444444444444"
G1 = "GPU-00000000-1111-2222-3333-555555555555"


def assignment(pod, ctr, gpu, cores, mem, **kw):
    a = {"namespace": "default", "pod": pod, "podUID": "uid-" + pod, "container": ctr,
         "gpu": gpu, "cores": cores, "memoryBytes": mem, "whole": False, "complete": True}
    a.update(kw)
    return a


STATUS = {
    "version": 1, "checkTime": 1767225600, "overQuotaAction": "kill", "checkIntervalMs": 10000,
    "gpus": [
        {"uuid": G0, "healthy": True, "cores": 100, "usedCores": 100, "memoryUnits": 64,
         "usedMemoryUnits": 28, "memoryBytes": 16 * GIB},
        {"uuid": G1, "healthy": False, "cores": 100, "usedCores": 0, "memoryUnits": 64,
         "usedMemoryUnits": 0, "memoryBytes": 16 * GIB},
    ],
    "assignments": [
        assignment("a", "main", G0, 30, 4 * GIB, nvmlBytes=5 * GIB, nvmlProcesses=2,
                   regionBytes=GIB + GIB // 2),
        assignment("b", "side", G0, 70, 3 * GIB, complete=False),
        assignment("c", "late", G0, 0, GIB),
    ],
    "findings": [
        {"kind": "overQuota", "namespace": "default", "pod": "a", "container": "main", "gpu": G0,
         "pid": 4242, "used": 5 * GIB, "limit": 4 * GIB, "action": "process 4242 killed",
         "message": "container main on GPU " + G0 + " uses 5368709120 bytes: killed"}],
    "recentFindings": [
        {"time": 1767225600, "kind": "underReport", "namespace": "default", "pod": "a",
         "container": "main", "gpu": G0, "pid": 4242, "action": "reported",
         "message": "process 4242 has no slot"}],
}


def run(*args):
    p = subprocess.run([ACCELCTL, "vgpu", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main():
    n = failed = 0

    def ok(cond, what, detail=""):
        nonlocal n, failed
        n += 1
        print(("ok" if cond else "not ok") + f" {n} - {what}")
        if not cond:
            failed += 1
            for line in str(detail).splitlines():
                print("# " + line)

    tmp = tempfile.mkdtemp(prefix="test-accelctl-vgpu-")
    rc, out, err = run("--state-dir", tmp)
    ok(rc == 1 and "is acceld running in vgpu mode" in err, "no status file: exit 1, says why",
       err)
    os.makedirs(os.path.join(tmp, "vgpu"))
    path = os.path.join(tmp, "vgpu", "status.json")
    with open(path, "w") as f:
        json.dump(dict(STATUS, version=9), f)
    rc, out, err = run("--state-dir", tmp)
    ok(rc == 1 and "not a version 1 vGPU status file" in err, "another version: exit 1", err)
    with open(path, "w") as f:
        json.dump(STATUS, f)
    rc, out, err = run("--state-dir", tmp)
    ok(rc == 0, "a valid status file: exit 0", err)
    ok("last pass 2026-01-01T00:00:00Z" in out and "every 10000 ms" in out
       and "over-quota action kill" in out, "the check's last pass, interval and action", out)
    ok(f"GPU {G0} (healthy): cores 100/100 handed out, memory 28/64 units (7 GiB of 16 GiB)"
       in out, "GPU 0's shares", out)
    ok(f"GPU {G1} (UNHEALTHY)" in out and "(no shares handed out)" in out,
       "an unhealthy GPU with no shares", out)
    ok("default/a main: quota 30 cores, 4 GiB memory; usage: region 1.5 GiB, NVML 5 GiB "
       "(2 processes)" in out, "quota, region and NVML usage side by side", out)
    ok("default/b side: quota 70 cores, 3 GiB memory; waiting for its other resource's Allocate"
       in out, "an assignment waiting for its second Allocate", out)
    ok("default/c late: quota 0 cores, 1 GiB memory; usage: not checked yet" in out,
       "an assignment the check has not seen yet", out)
    ok("findings at the last pass:\n  overQuota default/a: container main on GPU" in out,
       "the last pass's finding", out)
    ok("recent findings (newest first):\n  2026-01-01T00:00:00Z underReport default/a: "
       "process 4242 has no slot" in out, "the recent findings with their time", out)
    rc, out, err = run("--state-dir", tmp, "--json")
    ok(rc == 0 and json.loads(out) == STATUS, "--json prints the object as it is", out)
    rc, out, err = run("--state-dir", tmp, "extra")
    ok(rc == 2, "a stray argument is a usage error (exit 2)")
    print(f"1..{n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
