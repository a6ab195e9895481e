#!/usr/bin/env python3
"""libvcuda loads where glibc is 2.17 or newer (docs/vcuda.md, "Old images"): no symbol it
imports has a version newer than GLIBC_2.17 (`objdump -T`), and where it imports functions
that glibc 2.34 moved from libdl/libpthread into libc, it names libdl.so.2 and libpthread.so.0
so that an older glibc loads the libraries that define them. Prints TAP.
Usage: test-glibc.py LIBRARY [MAX_VERSION]"""
import re
import subprocess
import sys

lib = sys.argv[1]
limit = tuple(int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "2.17").split("."))

dyn = subprocess.run(["objdump", "-T", lib], capture_output=True, text=True, check=True).stdout
imports = []  # (version tuple, version string, symbol)
for line in dyn.splitlines():
    m = re.search(r"\*UND\*\s+\S+\s+\(?(GLIBC_([0-9.]+))\)?\s+(\S+)$", line)
    if m:
        imports.append((tuple(int(x) for x in m.group(2).split(".")), m.group(1), m.group(3)))
newer = sorted("%s@%s" % (s, v) for t, v, s in imports if t > limit)
moved = {s for t, v, s in imports if s.startswith(("dl", "pthread_"))}
needed = re.findall(r"Shared library: \[([^\]]+)\]",
                    subprocess.run(["readelf", "-d", lib], capture_output=True, text=True,
                                   check=True).stdout)
results = [
    ("objdump -T lists glibc imports", len(imports) > 10, "found %d" % len(imports)),
    ("no import newer than GLIBC_%s" % ".".join(map(str, limit)), not newer,
     "newer: %s (pin them in src/vcuda/glibc-compat.h)" % ", ".join(newer)),
    ("libdl.so.2 and libpthread.so.0 are needed where dl*/pthread_* are imported",
     not moved or {"libdl.so.2", "libpthread.so.0"} <= set(needed),
     "imports %s, NEEDED %s" % (sorted(moved), needed)),
]
print("1..%d" % len(results))
failed = 0
for i, (name, ok, why) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
    if not ok:
        print("# " + why)
        failed += 1
sys.exit(1 if failed else 0)
