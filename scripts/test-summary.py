#!/usr/bin/env python3
"""Counts test cases across meson build dirs (and TAP files: --tap FILE, e.g. the end-to-end
suite's output) and prints one closing line: "N passed, N failed, N skipped".

Every test program prints TAP (tests/lib/tap.h); each `ok`/`not ok` line is a
case. A program that printed no TAP counts as one case by its exit status. A
program that failed or timed out although all its TAP lines said ok (it
crashed after the last case, or leaked under ASan) adds one failure, so a
crash is never hidden. Exit status: 1 when anything failed or nothing ran."""
import json
import os
import re
import sys

TAP = re.compile(r"^(not ok|ok)\b(.*)$")


def count(builddir):
    passed = failed = skipped = 0
    failures = []
    path = os.path.join(builddir, "meson-logs", "testlog.json")
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except FileNotFoundError:
        print(f"test-summary: {path} is missing: did meson test run?", file=sys.stderr)
        return 0, 1, 0, [f"{builddir}: no test log"]
    for line in lines:
        if not line.strip():
            continue
        t = json.loads(line)
        result = t.get("result", "")
        name = t.get("name", "?")
        out = t.get("stdout", "") or ""
        p = f = s = 0
        for l in out.splitlines():
            m = TAP.match(l)
            if not m:
                continue
            if m.group(1) == "not ok":
                f += 1
            elif "# SKIP" in m.group(2).upper():
                s += 1
            else:
                p += 1
        if result == "SKIP":
            s = max(s, 1) if p + f == 0 else s
        elif result in ("OK", "EXPECTEDFAIL"):
            if p + f + s == 0:
                p = 1
        else:  # FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS
            if f == 0:
                f += 1
            failures.append(f"{os.path.basename(builddir)}: {name} ({result})")
        passed += p
        failed += f
        skipped += s
    return passed, failed, skipped, failures


def count_tap(path):
    """The ok / not ok lines of a TAP file (tests/e2e/run.sh's output); a file with none, or
    missing, is one failure: a suite that did not run never passes silently."""
    passed = failed = skipped = 0
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except FileNotFoundError:
        return 0, 1, 0, [f"{path}: missing (the suite did not run)"]
    failures = []
    for l in lines:
        m = TAP.match(l)
        if not m:
            continue
        if m.group(1) == "not ok":
            failed += 1
            failures.append(f"{os.path.basename(path)}: {l}")
        elif "# SKIP" in m.group(2).upper():
            skipped += 1
        else:
            passed += 1
    if passed + failed + skipped == 0:
        return 0, 1, 0, [f"{path}: no TAP line"]
    return passed, failed, skipped, failures


def main():
    args = sys.argv[1:]
    taps = [args[i + 1] for i, a in enumerate(args) if a == "--tap" and i + 1 < len(args)]
    dirs = [a for i, a in enumerate(args) if a != "--tap" and (i == 0 or args[i - 1] != "--tap")]
    if not dirs and not taps:
        dirs = ["build"]
    tp = tf = ts = 0
    allfail = []
    for d in dirs:
        p, f, s, fl = count(d)
        print(f"{d}: {p} passed, {f} failed, {s} skipped")
        tp, tf, ts = tp + p, tf + f, ts + s
        allfail += fl
    for t in taps:
        p, f, s, fl = count_tap(t)
        print(f"{t}: {p} passed, {f} failed, {s} skipped")
        tp, tf, ts = tp + p, tf + f, ts + s
        allfail += fl
    for fl in allfail:
        print(f"FAILED: {fl}")
    print(f"{tp} passed, {tf} failed, {ts} skipped")
    return 1 if tf or tp == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
