#!/usr/bin/env python3
"""Writes libvcuda's linker version script from hooks.def: the hooked symbols
and dlsym, dlvsym are global, everything else local. Usage: gen-map.py hooks.def out.map"""
import re
import sys

names = []
with open(sys.argv[1], encoding="utf-8") as f:
    for line in f:
        m = re.match(r"\s*VC_HOOK_(?:CU|NVML)\((\w+)\)", line)
        if m:
            names.append(m.group(1))
if not names:
    sys.exit("gen-map.py: no VC_HOOK_* entries in " + sys.argv[1])
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write("/* generated from hooks.def by gen-map.py */\n{\n  global:\n    dlsym;\n    dlvsym;\n")
    for n in names:
        out.write("    %s;\n" % n)
    out.write("  local:\n    *;\n};\n")
