#!/usr/bin/env python3
"""test-accelctl-agent — `accelctl agent` on SLI files written by hand in acceld's format
(src/nodestate/acceld-stats.h, version 3): each resource ready or not, with why not; a GPU
unhealthy with its reason; a file written long ago says acceld is not reporting; a version 2
file (no readiness) says unknown; no file or a broken one is exit 1 saying what to check;
--json prints the file as it is. acceld's own file is read end to end by the interop tests.
Prints TAP."""
import json
import os
import subprocess
import tempfile
import time

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
ACCELCTL = os.path.join(BUILD, "src", "cli", "accelctl")
BOUNDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]


def stats(version=3, written=None):
    def res(name, ok, ready, why):
        r = {"name": name, "registrations": {"ok": ok, "failed": 0},
             "allocate": {"ok": 0, "error": 0, "sum": 0, "buckets": [0] * len(BOUNDS)}}
        if version >= 3:
            r.update(ready=ready, notReady=why)
        return r
    return {
        "version": version, "startTime": time.time() - 100, "writeTime": written or time.time(),
        "deviceInit": {"ok": 2, "failed": 0}, "allocateBuckets": BOUNDS,
        "resources": [res("tencent.com/vcuda-core", 1, True, ""),
                      res("tencent.com/vcuda-memory", 0, False,
                          "the pods of this node are not listed yet")],
        "gpus": [{"index": 0, "uuid": "GPU-aaaa", "toUnhealthy": 0, "toHealthy": 0,
                  "mpsRestarts": 0, "healthy": True, "reason": "", "mps": "none"},
                 {"index": 1, "uuid": "GPU-bbbb", "toUnhealthy": 1, "toHealthy": 0,
                  "mpsRestarts": 0, "healthy": False, "reason": "XID 79", "mps": "none"}],
        "quotaFindings": {k: {"none": 0, "kill": 0, "freeze": 0}
                          for k in ("memory", "under_report", "compute")},
    }


def run(d, *args):
    p = subprocess.run([ACCELCTL, "agent", "--state-dir", d, *args], capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main():
    n = failed = 0

    def ok(cond, name, diag=""):
        nonlocal n, failed
        n += 1
        print(("ok %d - %s" if cond else "not ok %d - %s") % (n, name), flush=True)
        if not cond:
            failed += 1
            for line in str(diag).splitlines():
                print("# " + line)
    d = tempfile.mkdtemp(prefix="accelctl-agent-")
    path = os.path.join(d, "acceld-stats.json")
    rc, out, err = run(d)
    ok(rc == 1 and "acceld-stats.json" in err and "--state-dir" in err,
       "no file: exit 1, naming the file and what to check", err)
    with open(path, "w") as f:
        json.dump(stats(), f)
    rc, out, err = run(d)
    lines = out.splitlines()
    core = next((x for x in lines if x.startswith("tencent.com/vcuda-core ")), "")
    mem = next((x for x in lines if x.startswith("tencent.com/vcuda-memory ")), "")
    ok(rc == 0 and out.startswith("acceld: up") and " yes " in core and " no " in mem and
       "not listed yet" in mem and "1/1" in core, "each resource ready or not, with why", out)
    ok("GPU-bbbb" in out and "unhealthy" in out and "XID 79" in out,
       "a GPU unhealthy with its reason", out)
    with open(path, "w") as f:
        json.dump(stats(written=time.time() - 3600), f)
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    rc, out, err = run(d)
    ok(rc == 0 and "NOT REPORTING" in out, "a file written and touched an hour ago: not "
       "reporting", out)
    os.utime(path)  # acceld's heartbeat touches it
    rc, out, err = run(d)
    ok(rc == 0 and out.startswith("acceld: up"), "an old writeTime the heartbeat touched: up",
       out)
    with open(path, "w") as f:
        json.dump(stats(version=2), f)
    rc, out, err = run(d)
    ok(rc == 0 and "unknown" in out, "a version 2 file: readiness unknown", out)
    with open(path, "w") as f:
        f.write('{"version": 3,')
    rc, out, err = run(d)
    ok(rc == 1 and "cannot read" in err, "a broken file: exit 1, saying so", err)
    rc, out, err = run(d, "--json")
    ok(rc == 0 and out == '{"version": 3,', "--json prints the file as it is", out)
    rc, out, err = run(d, "--bogus")
    ok(rc == 2 and "usage" in err, "a bad option: exit 2 with the usage", err)
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
