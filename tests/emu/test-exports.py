#!/usr/bin/env python3
"""test-exports.py — the emulated libraries export every entry point they are meant to (issue 9).

Interposers (HAMi-core's loader, libvcuda) resolve hundreds of driver and NVML functions at load;
a missing symbol breaks them where a real driver would not. Checks, with `nm -D`:
  - libcuda.so.1 exports every name in src/emu/stubs/cuda-entry-points.txt, every function
    src/gpu/cuda_api.h declares, and every function NVIDIA's cuda.h declares (as written and
    after its versioning macros), the CUDA 13 toolkit's in $ACCEL_CUDA_ROOT (-Dnvcc_root;
    skipped where there is none);
  - libnvidia-ml.so.1 likewise with stubs/nvml-entry-points.txt and src/gpu/nvml_api.h;
  - a stub answers NOT_SUPPORTED and reports itself once on stderr (in a child process), and
    cuGetProcAddress_v2 still hands out no pointer (SYMBOL_NOT_FOUND) for an entry point that
    is only a stub.
Usage: test-exports.py SRC_ROOT EMU_LIBDIR
"""
import ctypes
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import Tap  # noqa: E402

T = Tap()
ok = T.ok


def exports(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                         check=True).stdout
    return {l.split()[-1] for l in out.splitlines() if l.split()[1:2] in (["T"], ["W"])}


def listed(path):
    return {l.split("#", 1)[0].strip() for l in open(path)} - {""}


def declared(text, ret, prefix):
    return set(re.findall(r"%s\s+(?:CUDAAPI\s+|DECLDIR\s+)?(%s\w+)\s*\(" % (ret, prefix), text))


def cuda_h_names():
    root = os.environ.get("ACCEL_CUDA_ROOT", "")
    h = os.path.join(root, "include", "cuda.h") if root else ""
    if h and os.path.isfile(h):
        text = open(h).read()
        pp = subprocess.run(["cc", "-E", "-I" + os.path.dirname(h), h], capture_output=True,
                            text=True).stdout
        return h, declared(text, "CUresult", "cu") | declared(pp, "CUresult", "cu")
    return None, set()


def main():
    src, libdir = sys.argv[1:3]
    cuda = exports(os.path.join(libdir, "libcuda.so.1"))
    nvml = exports(os.path.join(libdir, "libnvidia-ml.so.1"))
    def covers(exported, names, what):
        miss = sorted(names - exported)
        ok(not miss, "%s exports all %d %s" % (what[0], len(names), what[1]), " ".join(miss))

    covers(cuda, listed(os.path.join(src, "src/emu/stubs/cuda-entry-points.txt")),
           ("libcuda", "listed entry points"))
    covers(cuda, declared(open(os.path.join(src, "src/gpu/cuda_api.h")).read(), "CUresult", "cu"),
           ("libcuda", "functions cuda_api.h declares"))
    h, names = cuda_h_names()
    if h:
        covers(cuda, names, ("libcuda", "functions %s declares" % h))
    else:
        T.skip("libcuda exports every function NVIDIA's cuda.h declares",
               "no CUDA 13 toolkit (-Dnvcc_root): run scripts/cuda-wheels.sh")
    covers(nvml, listed(os.path.join(src, "src/emu/stubs/nvml-entry-points.txt")),
           ("libnvidia-ml", "listed entry points"))
    covers(nvml, declared(open(os.path.join(src, "src/gpu/nvml_api.h")).read(), "nvmlReturn_t",
                          "nvml"), ("libnvidia-ml", "functions nvml_api.h declares"))

    # a stub, called (child process: the instrumented build needs its runtime preloaded)
    child = r"""
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1] + "/libcuda.so.1")
nv = ctypes.CDLL(sys.argv[1] + "/libnvidia-ml.so.1")
a = cu.cuGraphAddHostNode(None, None, None, 0, None)
b = cu.cuGraphAddHostNode(None, None, None, 0, None)
c = nv.nvmlDeviceGetBAR1MemoryInfo(None, None)
fn = ctypes.c_void_p(1)
st = ctypes.c_int(-1)
cu.cuInit(0)
d = cu.cuGetProcAddress_v2(b"cuGraphAddHostNode", ctypes.byref(fn), 12000, 0, ctypes.byref(st))
print(a, b, c, d, fn.value, st.value)
"""
    env = dict(os.environ)
    if os.environ.get("EXPORTS_ASAN_RT"):
        env["LD_PRELOAD"] = os.environ["EXPORTS_ASAN_RT"]
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    p = subprocess.run([sys.executable, "-c", child, libdir], capture_output=True, text=True,
                       env=env)
    ok(p.returncode == 0 and p.stdout.split()[:3] == ["801", "801", "3"],
       "stubs answer CUDA_ERROR_NOT_SUPPORTED / NVML_ERROR_NOT_SUPPORTED", p.stdout + p.stderr)
    ok(p.stderr.count("cuGraphAddHostNode is not emulated") == 1
       and "nvmlDeviceGetBAR1MemoryInfo is not emulated" in p.stderr,
       "a stub says once that it is not emulated", p.stderr)
    ok(p.stdout.split()[3:] == ["0", "None", "1"],
       "cuGetProcAddress: no pointer (SYMBOL_NOT_FOUND) for a stub-only entry point", p.stdout)
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
