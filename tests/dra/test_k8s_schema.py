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
    objs.append(("rendered ResourceSlice %d (%d devices)" % (i, len(s["spec"]["devices"])), s,
                 True))
bad = copy.deepcopy(slices[0])
bad["spec"]["devices"][1]["taints"][0]["effect"] = "Sometimes"
objs.append(("control: taint effect outside the enum is refused", bad, False))
bad = copy.deepcopy(slices[0])
del bad["spec"]["pool"]
objs.append(("control: a slice without pool is refused", bad, False))

# Every DeviceClass selector the chart renders (`device.attributes["gpu.accel.dev"].X == "V"`,
# deploy/helm/accel with DRA agents publishing all three sharings) names an attribute and
# value some rendered device has: a class that matches nothing is a bug no schema sees.
SELECTOR = re.compile(r'device\.attributes\["gpu\.accel\.dev"\]\.(\w+) == "([^"]*)"')
selectors = []
helm = shutil.which("helm")
if helm:
    values = "agents:\n  gpu:\n    config:\n      mode: dra\n      dra:\n        sharing: shared\n" \
             "        gpuSharing: \"0=exclusive,1=mps\"\n"
    rendered = subprocess.run([helm, "template", "accel", os.path.join(SRC, "deploy/helm/accel"),
                               "-f", "-"], input=values, capture_output=True, text=True,
                              check=True).stdout
    for doc in rendered.split("\n---"):
        if "kind: DeviceClass" not in doc:
            continue
        name = re.search(r"^  name: (\S+)", doc, re.M)
        for attr, val in SELECTOR.findall(doc):
            selectors.append((name.group(1) if name else "?", attr, val))
devices = [d for s in slices for d in s["spec"]["devices"]]
selector_misses = [(n, a, v) for n, a, v in selectors
                   if not any(d["attributes"].get(a) == {"string": v} for d in devices)]

res = subprocess.run(["node", os.path.join(SRC, "tests/dra/validate-objects.mjs")],
                     input=json.dumps([o for _, o, _ in objs]), capture_output=True, text=True,
                     env=dict(os.environ, KUBERNETES_MODELS_DIR=KM))
lines = res.stdout.splitlines()
print("1..%d" % (len(objs) + 1))
failed = 0
for i, (name, _, want) in enumerate(objs):
    line = lines[i] if i < len(lines) else "missing (node said: %s)" % res.stderr.strip()
    ok = line == "ok %d" % i if want else line.startswith("invalid %d " % i)
    if not ok:
        failed += 1
    print("%s %d - %s" % ("ok" if ok else "not ok", i + 1, name))
    if not ok or not want:
        print("# " + line)
ok = len(selectors) >= 3 and not selector_misses
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
sys.exit(1 if failed or res.returncode else 0)
