#!/usr/bin/env python3
"""libvcuda exports exactly the hooked symbols of hooks.def plus dlsym and dlvsym (nm -D),
and links nothing but libc/libdl/libpthread. Prints TAP.
Usage: test-exports.py LIBVCUDA HOOKS_DEF"""
import re
import subprocess
import sys

lib, hooks = sys.argv[1], sys.argv[2]
want = {"dlsym", "dlvsym"}
real_only = set()
with open(hooks, encoding="utf-8") as f:
    for line in f:
        m = re.match(r"\s*VC_HOOK_(?:CU|NVML)\((\w+)\)", line)
        if m:
            want.add(m.group(1))
        m = re.match(r"\s*VC_REAL_(?:CU|NVML)\((\w+)\)", line)
        if m:
            real_only.add(m.group(1))

out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                     check=True).stdout
have = set()
for line in out.splitlines():
    parts = line.split()
    if len(parts) >= 3 and parts[1] in "TtWwDdBbRrVvi":
        have.add(parts[2].split("@")[0])

results = []
missing = sorted(want - have)
extra = sorted(have - want)
results.append(("every hooked symbol is exported", not missing, "missing: %s" % missing))
results.append(("nothing else is exported", not extra, "extra: %s" % extra))
results.append(("called-only driver functions are not exported", not (real_only & have),
                 "exported: %s" % sorted(real_only & have)))
needed = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
libs = re.findall(r"Shared library: \[([^\]]+)\]", needed)
allowed = re.compile(r"^(libc|libdl|libpthread|librt|libm|ld-linux.*|libasan|libubsan)\.so")
bad = [l for l in libs if not allowed.match(l)]
results.append(("links only libc (+libdl, libpthread)", not bad, "also links: %s" % bad))

print("1..%d" % len(results))
failed = 0
for i, (name, ok, why) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
    if not ok:
        print("# " + why)
        failed += 1
sys.exit(1 if failed else 0)
