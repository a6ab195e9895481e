#!/usr/bin/python3
"""Validates the ResourceSlices src/dra/slice.c renders (tests/dra/dra-slice-dump)
against the kubernetes-models npm package's resource.k8s.io/v1 schemas
(the chart's DeviceClasses are validated by tests/helm, the examples in
deploy/examples by tests/kube's k8s-validate, on the same install). Two broken objects are
checked too, so a validator that accepts anything fails here. Uses the
kubernetes-models install of tests/kube/k8s-validate (scripts/deps.sh puts it
there; KUBERNETES_MODELS_DIR overrides). Prints TAP; exits 77 without node
or kubernetes-models."""
import copy
import json
import os
import re
import shutil
import subprocess
import sys

SRC = os.environ.get("ACCEL_SOURCE_ROOT", ".")
BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
KM = os.environ.get("KUBERNETES_MODELS_DIR", os.path.join(SRC, "tests/kube/k8s-validate"))
if not shutil.which("node"):
    print("1..0 # SKIP node is not installed")
    sys.exit(77)
if not os.path.isdir(os.path.join(KM, "node_modules/kubernetes-models/resource.k8s.io/v1")):
    print("1..0 # SKIP kubernetes-models (with resource.k8s.io/v1) is not under %s" % KM)
    sys.exit(77)

objs = []  # (name, object, want_valid)
out = subprocess.check_output([os.path.join(BUILD, "tests/dra/dra-slice-dump")], text=True)
slices = [json.loads(line) for line in out.splitlines()]
for i, s in enumerate(slices):
    what = ("%d devices" % len(s["spec"]["devices"]) if "devices" in s["spec"] else
            "%d counter sets" % len(s["spec"]["sharedCounters"]))
    objs.append(("rendered ResourceSlice %d (%s)" % (i, what), s, True))
# the pool with MIG partitions (src/dra/partition.c): its slices agree and keep v1's limits
pool = [s for s in slices if s["spec"]["pool"]["generation"] == 3]
parts = [d for s in pool for d in s["spec"].get("devices", []) if "consumesCounters" in d]
sets = {c["name"]: c["counters"] for s in pool for c in s["spec"].get("sharedCounters", [])}
pool_ok = (len(pool) >= 3 and all(s["spec"]["pool"]["resourceSliceCount"] == len(pool)
                                  for s in pool) and
           all(("devices" in s["spec"]) != ("sharedCounters" in s["spec"]) for s in pool) and
           all(len(s["spec"].get("devices", [])) <= 64 for s in pool) and
           all(len(s["spec"].get("sharedCounters", [])) <= 8 for s in pool) and
           len(parts) == 3 * 25 and
           all(all(k in sets.get(c["counterSet"], {}) for k in c["counters"])
               for d in parts for c in d["consumesCounters"]))
if pool:
    bad = copy.deepcopy(next(s for s in pool if "sharedCounters" in s["spec"]))
    del bad["spec"]["sharedCounters"][0]["name"]
    objs.append(("control: a counter set without a name is refused", bad, False))
    bad = copy.deepcopy(next(s for s in pool if "devices" in s["spec"]))
    del bad["spec"]["devices"][0]["consumesCounters"][0]["counterSet"]
    objs.append(("control: consumesCounters without its counterSet is refused", bad, False))
bad = copy.deepcopy(slices[0])
bad["spec"]["devices"][1]["taints"][0]["effect"] = "Sometimes"
objs.append(("control: taint effect outside the enum is refused", bad, False))
bad = copy.deepcopy(slices[0])
del bad["spec"]["pool"]
objs.append(("control: a slice without pool is refused", bad, False))

# Every DeviceClass selector the chart renders (`device.attributes["gpu.accel.dev"].X == "V"`,
# deploy/helm/accel with DRA agents publishing all four sharings) names an attribute and
# value some rendered device has: a class that matches nothing is a bug no schema sees.
SELECTOR = re.compile(r'device\.attributes\["gpu\.accel\.dev"\]\.(\w+) == "([^"]*)"')
selectors = []
helm = shutil.which("helm")
if helm:
    values = "agents:\n  gpu:\n    config:\n      mode: dra\n      dra:\n        sharing: shared\n" \
             "        gpuSharing: \"0=exclusive,1=mps\"\n        mig: true\n"
    rendered = subprocess.run([helm, "template", "accel", os.path.join(SRC, "deploy/helm/accel"),
                               "-f", "-"], input=values, capture_output=True, text=True,
                              check=True).stdout
    for doc in rendered.split("\n---"):
        if "kind: DeviceClass" not in doc:
            continue
        name = re.search(r"^  name: (\S+)", doc, re.M)
        for attr, val in SELECTOR.findall(doc):
            selectors.append((name.group(1) if name else "?", attr, val))
devices = [d for s in slices for d in s["spec"].get("devices", [])]
selector_misses = [(n, a, v) for n, a, v in selectors
                   if not any(d["attributes"].get(a) == {"string": v} for d in devices)]

res = subprocess.run(["node", os.path.join(SRC, "tests/dra/validate-objects.mjs")],
                     input=json.dumps([o for _, o, _ in objs]), capture_output=True, text=True,
                     env=dict(os.environ, KUBERNETES_MODELS_DIR=KM))
lines = res.stdout.splitlines()
print("1..%d" % (len(objs) + 2))
failed = 0
for i, (name, _, want) in enumerate(objs):
    line = lines[i] if i < len(lines) else "missing (node said: %s)" % res.stderr.strip()
    ok = line == "ok %d" % i if want else line.startswith("invalid %d " % i)
    if not ok:
        failed += 1
    print("%s %d - %s" % ("ok" if ok else "not ok", i + 1, name))
    if not ok or not want:
        print("# " + line)
ok = len(selectors) >= 4 and not selector_misses
if not helm:
    print("ok %d - every DeviceClass selector of the chart matches a rendered device"
          " # SKIP helm is not installed (scripts/deps.sh builds it)" % (len(objs) + 1))
    ok = True
else:
    print("%s %d - every DeviceClass selector of the chart matches a rendered device (%d)" %
          ("ok" if ok else "not ok", len(objs) + 1, len(selectors)))
if not ok:
    failed += 1
    print("# no device for %s" % selector_misses)
print("%s %d - the MIG pool: slice count, devices or counters per slice, v1's limits, 25 "
      "partitions per H100, every consumed counter in its set" %
      ("ok" if pool_ok else "not ok", len(objs) + 2))
if not pool_ok:
    failed += 1
sys.exit(1 if failed or res.returncode else 0)
