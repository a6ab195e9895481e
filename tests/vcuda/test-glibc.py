#!/usr/bin/env python3
"""libvcuda loads where glibc is 2.17 or newer (docs/vcuda.md, "Old images"): no symbol it
imports has a version newer than GLIBC_2.17 (`objdump -T`), and where it imports functions
that glibc 2.34 moved from libdl/libpthread into libc, it names libdl.so.2 and libpthread.so.0
so that an older glibc loads the libraries that define them. Prints TAP.
Usage: test-glibc.py LIBRARY [MAX_VERSION]"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import Tap  # noqa: E402

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
t = Tap()
t.ok(len(imports) > 10, "objdump -T lists glibc imports", "found %d" % len(imports))
t.ok(not newer, "no import newer than GLIBC_%s" % ".".join(map(str, limit)),
     "newer: %s (pin them in src/vcuda/glibc-compat.h)" % ", ".join(newer))
t.ok(not moved or {"libdl.so.2", "libpthread.so.0"} <= set(needed),
     "libdl.so.2 and libpthread.so.0 are needed where dl*/pthread_* are imported",
     "imports %s, NEEDED %s" % (sorted(moved), needed))
sys.exit(t.done())
