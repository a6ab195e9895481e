#!/usr/bin/env python3
"""test-install-dirs.py — the emulator's pieces that carry NVIDIA's names (libcuda.so.1,
libnvidia-ml.so.1, nvidia-cuda-mps-control) install into <libdir>/accel-emu/ only, never
beside a real driver or on the default PATH; accel-emu itself goes to <bindir>.

Reads Meson's install plan (meson-info/intro-installed.json in the build dir). Prints TAP."""
import json
import os
import sys

build = os.environ.get('ACCEL_BUILD_ROOT', 'build')
plan_path = os.path.join(build, 'meson-info', 'intro-installed.json')
try:
    with open(plan_path, encoding='utf-8') as f:
        plan = json.load(f)  # {built file: installed path}
except OSError as e:
    print('1..0 # SKIP no install plan: %s' % e)
    sys.exit(77)

by_name = {}
for src, dst in plan.items():
    by_name.setdefault(os.path.basename(src), []).append(dst)

cases = []
for name in ('libcuda.so.1', 'libnvidia-ml.so.1', 'nvidia-cuda-mps-control'):
    dsts = by_name.get(name, [])
    ok = len(dsts) == 1 and os.path.basename(os.path.dirname(dsts[0])) == 'accel-emu'
    cases.append((ok, '%s installs into <libdir>/accel-emu/ (%s)' % (name, dsts)))
dsts = by_name.get('accel-emu', [])
ok = len(dsts) == 1 and os.path.basename(os.path.dirname(dsts[0])) == 'bin'
cases.append((ok, 'accel-emu installs into <bindir> (%s)' % dsts))
# nothing else the emulator builds lands outside those two places under an NVIDIA name
stray = [d for d in plan.values()
         if os.path.basename(d).startswith(('libcuda', 'libnvidia', 'nvidia-'))
         and os.path.basename(os.path.dirname(d)) != 'accel-emu']
cases.append((not stray, 'no NVIDIA-named file installs elsewhere (%s)' % stray))

print('1..%d' % len(cases))
failed = 0
for i, (ok, what) in enumerate(cases, 1):
    print('%s %d - %s' % ('ok' if ok else 'not ok', i, what))
    failed += not ok
sys.exit(1 if failed else 0)
