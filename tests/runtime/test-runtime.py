#!/usr/bin/env python3
"""test-runtime.py — NVIDIA's CUDA runtime on the emulator (issue 9).

Runs rt-prog (rt-prog.cu, built by nvcc with static and with shared cudart) in each of its
modes on a fresh emulated machine, bare and under libvcuda with a memory quota and a compute
share, and checks what it prints:
  - memory, streams/events, graphs, __device__/__constant__ variables, cudaDeviceReset, several
    processes and a spin workload all complete, with the values the emulator's contract gives
    (a spin kernel runs cycles / SM clock of emulated time, measured with the runtime's events);
  - under libvcuda: cudaMemGetInfo's total is the quota, the allocation past it fails with
    cudaErrorMemoryAllocation, and the spin workload's share of the emulator's timeline
    (kernel time / event span, both emulated time) is the core limit within 3 points;
  - the export tables and slots the runtime used (ACCEL_EMU_DEBUG_LOG) are all answered, and
    for CUDA 13.0 exactly the ones pinned below: a new release that asks for something the
    emulator does not answer fails here, naming it.
Usage: test-runtime.py [rt-prog-static rt-prog-shared]; without programs (no nvcc) exit 77.
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import Tap  # noqa: E402

T = Tap()
ok = T.ok

# What the 13.0 runtime uses (docs/emulator-cuda.md): (table, slot) and the tables it asks for.
# Every run uses ALWAYS_13_0; the rest of the slots only in some environments (a process with
# LD_PRELOAD set, as under the sanitizer build, never calls TOOLS_TLS 2 and the hooks' 1 and 4).
ALWAYS_13_0 = {
    ("CUDART_INTERFACE", 2), ("TOOLS_RUNTIME_CALLBACK_HOOKS", 2),
    ("TOOLS_RUNTIME_CALLBACK_HOOKS", 6), ("CONTEXT_LOCAL_STORAGE", 0),
    ("CONTEXT_LOCAL_STORAGE", 1), ("CONTEXT_LOCAL_STORAGE", 2), ("CONTEXT_CHECKS", 2),
    ("CONTEXT_CHECKS", 3), ("INTEGRITY_CHECK", 1),
}
PINNED_13_0 = {
    "slots": {
        ("CUDART_INTERFACE", 2), ("TOOLS_RUNTIME_CALLBACK_HOOKS", 1),
        ("TOOLS_RUNTIME_CALLBACK_HOOKS", 2), ("TOOLS_RUNTIME_CALLBACK_HOOKS", 4),
        ("TOOLS_RUNTIME_CALLBACK_HOOKS", 6), ("TOOLS_TLS", 2),
        ("CONTEXT_LOCAL_STORAGE", 0), ("CONTEXT_LOCAL_STORAGE", 1),
        ("CONTEXT_LOCAL_STORAGE", 2), ("CONTEXT_CHECKS", 2), ("CONTEXT_CHECKS", 3),
        ("INTEGRITY_CHECK", 1),
    },
    "tables": {
        "CUDART_INTERFACE", "TOOLS_RUNTIME_CALLBACK_HOOKS", "TOOLS_TLS",
        "CONTEXT_LOCAL_STORAGE", "CONTEXT_CHECKS", "INTEGRITY_CHECK", "REQUIREMENTS",
    },
}

QUOTA = 1 << 30  # 1 GiB
SHARE = 30       # per cent



def kv(out):
    return dict(re.findall(r"(\w+)=([^\s]+)", out))


def nvcc_version():
    nvcc = os.environ.get("RT_NVCC", "")
    if not nvcc:
        return ""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else ""


def main():
    progs = sys.argv[1:]
    if not progs:
        print("1..0 # SKIP no CUDA 13 toolkit (nvcc): run scripts/cuda-wheels.sh (PyPI), then "
              "meson setup --reconfigure")
        return 77
    emu = os.environ["RT_ACCEL_EMU"]
    libdir = os.environ["RT_EMU_LIBDIR"]
    vcuda = os.environ["RT_LIBVCUDA"]
    asan = os.environ.get("RT_ASAN_RT", "")
    # libcudart.so.13 of the shared-cudart program: the toolkit's lib64
    cuda_lib = os.environ.get("RT_CUDA_LIBDIR", "")
    tmp = tempfile.mkdtemp(prefix="rt-test-")
    state = os.path.join(tmp, "emu.state")
    subprocess.run([emu, "--state", state, "init", "--gpus", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    log = os.path.join(tmp, "debug.log")
    said = []

    def run(prog, args, vc=None):
        env = dict(os.environ)
        env["ACCEL_EMU_STATE"] = state
        env["ACCEL_EMU_DEBUG_LOG"] = log
        env["LD_LIBRARY_PATH"] = libdir + (":" + cuda_lib if cuda_lib else "")
        pre = [asan] if asan else []
        if asan:  # leaks of NVIDIA's runtime are not ours to find
            env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
        for k in list(env):
            if k.startswith("VCUDA_"):
                del env[k]
        if vc is not None:
            pre.append(vcuda)
            env["VCUDA_CONFIG"] = "/nonexistent/vcuda-config"
            env["VCUDA_REGION"] = os.path.join(tmp, "region-%d" % len(os.listdir(tmp)))
            env.update(vc)
        if pre:
            env["LD_PRELOAD"] = ":".join(pre)
        p = subprocess.run([prog] + args, env=env, capture_output=True, text=True, timeout=120)
        # the emulator's own complaints: an unanswered slot, an unknown table, a stub called
        said.extend(l for l in p.stderr.splitlines() if l.startswith("accel-emu "))
        return p.returncode, p.stdout + p.stderr

    for prog in progs:
        kind = "shared" if prog.endswith("shared") else "static"
        # bare on the emulator
        rc, out = run(prog, ["mem"])
        ok(rc == 0 and "ok mem" in out, "%s: memory (Malloc/Async/Pitch/Managed/3D)" % kind, out)
        rc, out = run(prog, ["stream"])
        v = kv(out)
        # the second kernel cannot start before the first ends; it may start later when this
        # host is slow to queue it, so only the lower bound is exact
        ok(rc == 0 and v.get("first_ms") == "5.000" and float(v.get("both_ms", 0)) >= 10.0,
           "%s: streams and events (5 ms spin, then one waiting on it)" % kind, out)
        rc, out = run(prog, ["graph"])
        v = kv(out)
        ok(rc == 0 and v.get("captured_nodes") == "2" and "ok graph" in out
           and float(v.get("explicit_ms", 0)) == 4.0,
           "%s: graphs, captured and built node by node" % kind, out)
        rc, out = run(prog, ["global"])
        v = kv(out)
        ok(rc == 0 and v.get("initial") == "5" and v.get("written") == "1234"
           and v.get("const") == "1.5,2.5,3.5,4.5" and v.get("big_size") == "512"
           and v.get("big_last") == "1063",
           "%s: __device__ / __constant__ variables through the symbol API" % kind, out)
        rc, out = run(prog, ["reset"])
        v = kv(out)
        ok(rc == 0 and v.get("freed_by_reset") == "1" and v.get("after_reset") == "77"
           and v.get("counter") == "5" and "ok reset" in out,
           "%s: cudaDeviceReset, then memory, kernels and variables work again" % kind, out)
        rc, out = run(prog, ["multi", "3"])
        ok(rc == 0 and "ok multi" in out, "%s: three processes at once" % kind, out)
        rc, out = run(prog, ["spin", "10", "5"])
        v = kv(out)
        ok(rc == 0 and v.get("busy_ms") == "50.000",
           "%s: spin kernels run their cycles of emulated time" % kind, out)

        # under libvcuda: memory quota
        rc, out = run(prog, ["mem", str(QUOTA)], {"VCUDA_MEMORY_LIMIT": str(QUOTA)})
        v = kv(out)
        ok(rc == 0 and v.get("total") == str(QUOTA)
           and v.get("over_quota") == "cudaErrorMemoryAllocation"
           and v.get("over_quota_async") == "cudaErrorMemoryAllocation",
           "%s under libvcuda: cudaMemGetInfo shows the quota, past it cudaMalloc and "
           "cudaMallocAsync fail with cudaErrorMemoryAllocation" % kind, out)
        # compute share, on the emulator's timeline
        rc, out = run(prog, ["spin", "10", "30"],
                      {"VCUDA_CORE_LIMIT": str(SHARE), "VCUDA_CORE_POLICY": "hard"})
        v = kv(out)
        share = (100.0 * float(v["busy_ms"]) / float(v["span_ms"])
                 if rc == 0 and float(v.get("span_ms", 0)) > 0 else -1)
        ok(abs(share - SHARE) <= 3,
           "%s under libvcuda: core limit %d%%, achieved %.1f%%" % (kind, SHARE, share), out)

    # the tables and slots the runtime used
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    bad = sorted({l for l in lines if l.endswith("unanswered") or l.endswith("unknown")})
    ok(not bad, "every export table and slot the runtime called is answered", "\n".join(bad))
    ok(not said, "the emulator reported nothing unmodelled (no stub called)",
       "\n".join(sorted(set(said))))
    slots = {(m.group(1), int(m.group(2))) for m in
             (re.match(r"export-slot (\S+) (\d+) answered$", l) for l in lines) if m}
    tables = {m.group(1) for m in
              (re.match(r"export-table \S+ (\S+) (answered|refused)$", l) for l in lines) if m}
    ver = nvcc_version()
    print("# CUDA %s runtime used tables %s" % (ver, sorted(tables)))
    print("# and slots %s" % sorted(slots))
    if ver == "13.0":
        ok(ALWAYS_13_0 <= slots <= PINNED_13_0["slots"] and tables == PINNED_13_0["tables"],
           "CUDA 13.0: the tables and slots used are the pinned ones",
           "used %s\npinned %s" % (sorted(slots), sorted(PINNED_13_0["slots"])))
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
