#!/usr/bin/env python3
"""test-readme — the README's emulator lines, run as written: the whole "Using the emulator by
hand" block (but `make build`: this build is the one tested), then the libvcuda lines of "The
components by hand" (the demo under a 4 GiB quota and a 30 % share), in one shell as a newcomer
pastes them. The only changes: paths under /tmp go to a private directory, `build/` is this
build's root, and the sanitizer build puts the ASan runtime ahead of libvcuda in LD_PRELOAD.
Checks what the README says the reader sees: four GPUs, the XID accepted, and the demo's memory
figures (the context charge paragraph) and share line. Prints TAP."""
import os
import re
import subprocess
import sys
import tempfile

SRC = os.environ.get("ACCEL_SOURCE_ROOT", ".")
BUILD = os.path.abspath(os.environ.get("ACCEL_BUILD_ROOT", "build"))
ASAN_RT = os.environ.get("VCUDA_TEST_ASAN_RT", "")


def block_after(text, heading):
    """The first ```sh block after the heading line."""
    at = text.index(heading)
    m = re.compile(r"```sh\n(.*?)```", re.S).search(text, at)
    return m.group(1)


def adapt(script, tmp):
    out = []
    for line in script.splitlines():
        if line.startswith("make "):
            continue
        # /tmp first: the build root itself may lie under /tmp (a fresh clone there)
        line = line.replace("/tmp/", tmp + "/")
        line = line.replace("$PWD/build/", BUILD + "/")
        line = re.sub(r"(?<![\w/.$-])build/", BUILD + "/", line)
        if ASAN_RT:
            line = line.replace("LD_PRELOAD=", "LD_PRELOAD=" + ASAN_RT + ":")
            if line.startswith(tmp + "/rt-prog"):
                # nvcc's program is not instrumented; the emulated libcuda it loads is
                line = f"LD_PRELOAD={ASAN_RT} ASAN_OPTIONS=detect_leaks=0 " + line
        out.append(line)
    return "\n".join(out) + "\n"


def main():
    for exe in ("src/emu/accel-emu", "src/cli/accelctl", "demo/cuda-demo", "src/vcuda/libvcuda.so"):
        if not os.path.exists(os.path.join(BUILD, exe)):
            print(f"1..0 # SKIP {exe} is not built")
            return 77
    if os.path.exists("/etc/vcuda/config"):
        print("1..0 # SKIP /etc/vcuda/config exists: libvcuda would ignore the README's variables")
        return 77
    with open(os.path.join(SRC, "README.md")) as f:
        readme = f.read()
    by_hand = block_after(readme, "## Using the emulator by hand")
    comp = block_after(readme, "## The components by hand")
    vcuda = comp[comp.index("# libvcuda"):]
    tmp = tempfile.mkdtemp(prefix="test-readme-")
    script = adapt(by_hand, tmp) + adapt(vcuda, tmp)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_EMU_", "VCUDA_", "ACCEL_NVML")) and k not in
           ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=SRC, env=env,
                       capture_output=True, text=True, timeout=120)
    out = p.stdout
    results = []

    def check(cond, what):
        results.append((bool(cond), what))

    check(p.returncode == 0, f"the README's lines run (rc {p.returncode})")
    check(re.search(r"\b4 GPUs\b", out) and len(re.findall(r"^\d+\s+GPU-", out, re.M)) == 4,
          "accelctl gpus lists the four emulated GPUs")
    check("GPU 1: XID 79 injected" in out, "accel-emu xid is accepted")
    # the paragraph's figures are the demo's
    m = re.search(r"sees (\d+) MiB in all and (\d+) MiB free", readme)
    check(m, "the README states the demo's memory figures")
    total, free = (m.group(1), m.group(2)) if m else ("?", "?")
    check(f"cuMemGetInfo: free {free} MiB of {total} MiB" in out,
          f"the demo sees {total} MiB in all, {free} MiB free, as the README says")
    got = int(free) // 256 * 256 if free.isdigit() else -1
    check(re.search(rf"allocated {got} MiB in 256 MiB blocks, then CUDA_ERROR_OUT_OF_MEMORY", out),
          "the quota stops the demo's allocations")
    share = re.search(r"a (\d+) % share", out)
    check(share and int(share.group(1)) <= 100, "the demo reports its share")
    # the emulator's context cost (the demo alone on the machine, no libvcuda: total - free
    # before it allocates) is the VCUDA_CONTEXT_MEMORY the README names, and libvcuda charges
    # the context exactly that
    emu_env = dict(env, ACCEL_EMU_STATE=os.path.join(tmp, "emu.state"),
                   LD_LIBRARY_PATH=os.path.join(BUILD, "src", "emu"))
    demo = os.path.join(BUILD, "demo", "cuda-demo")
    alone = subprocess.run([demo, "--seconds", "1", "--alloc", "256"], env=emu_env,
                           capture_output=True, text=True, timeout=60)
    m = re.search(r"cuMemGetInfo: free (\d+) MiB of (\d+) MiB", alone.stdout)
    cost = int(m.group(2)) - int(m.group(1)) if m else -1
    named = re.search(r"`VCUDA_CONTEXT_MEMORY=(\d+)Mi` here", readme)
    check(named and int(named.group(1)) == cost,
          f"the README's VCUDA_CONTEXT_MEMORY ({named.group(1) if named else '?'} MiB) is the "
          f"emulator's context cost ({cost} MiB)")
    line = [l for l in adapt(vcuda, tmp).splitlines() if not l.startswith("#")]
    agree = f"VCUDA_CONTEXT_MEMORY={cost}Mi " + " ".join(x.rstrip("\\").strip() for x in line) + \
        " --seconds 1 --alloc 256"
    q = subprocess.run(["bash", "-euo", "pipefail", "-c", agree], cwd=SRC, env=emu_env,
                       capture_output=True, text=True, timeout=60)
    check(q.returncode == 0 and f"cuMemGetInfo: free {4096 - cost} MiB of 4096 MiB" in q.stdout,
          "with it, libvcuda charges the context what the emulator does")

    print(f"1..{len(results)}")
    for i, (ok, what) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {what}")
    if not all(ok for ok, _ in results):
        for l in (script + "\n--- stdout\n" + out + "--- stderr\n" + p.stderr + q.stderr).splitlines():
            print(f"# {l}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
