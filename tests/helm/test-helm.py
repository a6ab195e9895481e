#!/usr/bin/python3
"""test-helm — the Helm chart deploy/helm/accel (docs/deploy.md, "Tests").

`helm lint` with the defaults and each values file of the chart's ci/ folder (one per mode:
pgpu, time-slicing, MPS, vGPU, DRA exclusive/shared/MPS, per node and per GPU, exporter off,
emulated nodes); `helm template` of each, and on every rendering:
  - every object validated against kubernetes-models' schemas (prometheus-operator's too);
  - each acceld config accepted by acceld itself (--print-config), each exporter config by the
    exporter (--check-config), every flag on a command line one the program knows;
  - every path an acceld or exporter config names is mounted in its container, every mount
    has its volume;
  - the image is image.repository:appVersion everywhere, appVersion = meson.build's version;
  - the exporter runs as a non-root user, unprivileged, every capability dropped, every mount
    read-only;
  - RBAC per mode: vGPU agents may patch pods, DRA agents write ResourceSlices, others get no
    token and no binding;
  - the DeviceClasses select exactly the sharings the DRA agents publish;
  - an MPS agent's memory limit is mps.memoryLimit (its daemons are its children), others'
    the measured default;
  - the PrometheusRule carries deploy/prometheus/accel-rules.yml's groups (runbook base
    replaced), the dashboard ConfigMap deploy/grafana/accel-dashboard.json;
  - renderings that must fail do, with a message (two agents on one node selector, a bad
    mode, a bad exporter.podResources).
Prints TAP; exits 77 without helm (scripts/deps.sh builds it from the Go module proxy).

  test-helm.py ACCELD ACCEL_EXPORTER"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

SRC = os.environ.get("ACCEL_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(SRC, "deploy", "helm", "accel")
KM = os.environ.get("KUBERNETES_MODELS_DIR", os.path.join(SRC, "tests/kube/k8s-validate"))
ACCELD, EXPORTER = sys.argv[1], sys.argv[2]
HELM = shutil.which("helm")
if not HELM:
    print("1..0 # SKIP helm is not installed (scripts/deps.sh builds it from the Go module proxy)")
    sys.exit(77)
HAVE_KM = shutil.which("node") and os.path.isdir(
    os.path.join(KM, "node_modules/@kubernetes-models/prometheus-operator"))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import Tap  # noqa: E402

T = Tap()


def report(ok, name, why=""):
    T.ok(ok, name, why)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def template(values, extra=()):
    args = [HELM, "template", "accel", CHART, "--namespace", "kube-system"]
    for v in values:
        args += ["-f", v]
    return run(args + list(extra))


with open(os.path.join(SRC, "meson.build")) as f:
    VERSION = re.search(r"version\s*:\s*'([^']+)'", f.read()).group(1)
with open(os.path.join(CHART, "Chart.yaml")) as f:
    chart = yaml.safe_load(f)
report(chart["appVersion"] == VERSION and chart["version"] == VERSION,
       "Chart.yaml's version and appVersion are meson.build's (%s)" % VERSION, chart)
IMAGE = "accel:" + VERSION
EXPORTER_HELP = run([EXPORTER, "--help"]).stdout
ACCELD_HELP = run([ACCELD, "--help"]).stdout
with open(os.path.join(SRC, "deploy/prometheus/accel-rules.yml")) as f:
    RULES_TEXT = f.read()
with open(os.path.join(SRC, "deploy/grafana/accel-dashboard.json")) as f:
    DASHBOARD = json.load(f)

# sharing value of dra.sharing / dra.gpuSharing -> the device attribute it publishes
PUBLISHES = {"exclusive": "exclusive", "shared": "vgpu", "mps": "mps"}
tmp = tempfile.mkdtemp(prefix="test-helm-")

r = run([HELM, "lint", "--strict", CHART])
report(r.returncode == 0, "helm lint --strict (defaults)", r.stdout + r.stderr)
modes = sorted(glob.glob(os.path.join(CHART, "ci", "*-values.yaml")))
report(len(modes) >= 10, "ci/ has a values file per mode (%d)" % len(modes))

to_validate = []  # (label, object)


def containers(pod):
    return pod.get("initContainers", []) + pod["containers"]


def mounted(c, vols, path):
    """Is path (a file or directory) inside one of c's mounts?"""
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            return True
    return False


def check_rendering(label, objs, values):
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    for o in objs:
        to_validate.append(("%s: %s %s" % (label, o["kind"], o["metadata"]["name"]), o))
    problems = []
    dss = by_kind.get("DaemonSet", [])
    cms = {o["metadata"]["name"]: o for o in by_kind.get("ConfigMap", [])}
    sas = {o["metadata"]["name"]: o for o in by_kind.get("ServiceAccount", [])}
    bindings = by_kind.get("ClusterRoleBinding", [])
    roles = {o["metadata"]["name"]: o for o in by_kind.get("ClusterRole", [])}
    published = set()
    agents = 0
    for ds in dss:
        pod = ds["spec"]["template"]["spec"]
        vols = {v["name"] for v in pod.get("volumes", [])}
        name = ds["metadata"]["name"]
        if pod.get("nodeSelector", {}).get("accel.io/gpu") != "true":
            problems.append("%s: not limited to accel.io/gpu=true nodes" % name)
        for c in containers(pod):
            if c["image"] != IMAGE:
                problems.append("%s/%s: image %s, not %s" % (name, c["name"], c["image"], IMAGE))
            for m in c.get("volumeMounts", []):
                if m["name"] not in vols:
                    problems.append("%s/%s: mount %s has no volume" % (name, c["name"], m["name"]))
        role = ds["metadata"]["labels"]["app.kubernetes.io/name"]
        main = [c for c in pod["containers"] if c["name"] == role][0]
        cfgvol = [v for v in pod["volumes"] if v["name"] == "config"][0]["configMap"]["name"]
        if role == "acceld":
            agents += 1
            cfg = yaml.safe_load(cms[cfgvol]["data"]["acceld.yaml"])
            path = os.path.join(tmp, "acceld-%s.yaml" % name)
            with open(path, "w") as f:
                f.write(cms[cfgvol]["data"]["acceld.yaml"])
            p = run([ACCELD, "--config", path, "--print-config"])
            if p.returncode != 0:
                problems.append("%s: acceld refuses its config: %s" % (name, p.stderr.strip()))
            for a in main["command"][1:]:
                if a.startswith("--") and a not in ACCELD_HELP:
                    problems.append("%s: %s is not an acceld flag" % (name, a))
            paths = [cfg.get("stateDir"), cfg.get("cdi", {}).get("dir"),
                     os.path.dirname(cfg.get("vcudaLibrary", "")), cfg.get("devicePluginDir"),
                     cfg.get("podResourcesSocket") and os.path.dirname(cfg["podResourcesSocket"]),
                     cfg.get("dra", {}).get("registryDir") if cfg.get("mode") == "dra" or
                     "=dra" in str(cfg.get("gpuModes", "")) else None,
                     os.path.dirname(cfg.get("nvmlLibrary", "")), cfg.get("mpsControl"),
                     cfg.get("sysfsRoot"), cfg.get("devRoot")]
            for pth in paths:
                if pth and not mounted(main, vols, pth):
                    problems.append("%s: config names %s, not mounted" % (name, pth))
            dra = cfg.get("mode") == "dra" or re.search(r"=dra(,|$)", str(cfg.get("gpuModes", "")))
            vgpu = cfg.get("mode") == "vgpu" or re.search(r"=vgpu(,|$)", str(cfg.get("gpuModes", "")))
            mine = set()
            if dra:
                d = cfg.get("dra", {})
                mine.add(PUBLISHES[d.get("sharing", "exclusive")])
                for e in filter(None, str(d.get("gpuSharing", "")).split(",")):
                    mine.add(PUBLISHES[e.split("=")[1]])
                if d.get("mig"):
                    mine.add("mig")  # its GPUs in MIG mode are MIG partitions (docs/mig.md)
            bind = str(cfg.get("vfio", {}).get("bind", ""))
            sys_ro = next((m.get("readOnly", False) for m in main.get("volumeMounts", [])
                           if m["mountPath"] == "/sys"), None)
            if sys_ro is not None and sys_ro != (bind == ""):
                problems.append("%s: /sys mounted %s with vfio.bind %r" %
                                (name, "read-only" if sys_ro else "writable", bind))
            published |= mine
            mps = "mps" in cfg.get("sharing", {}) or "mps" in mine
            limit = main.get("resources", {}).get("limits", {}).get("memory")
            want = "1Gi" if mps else "64Mi"
            if limit != want:
                problems.append("%s: memory limit %s, want %s (%s)" % (
                    name, limit, want, "MPS daemons are its children" if mps else "measured"))
            sa = pod["serviceAccountName"]
            bound = {b["roleRef"]["name"] for b in bindings
                     if any(s["name"] == sa for s in b["subjects"])}
            verbs = {(res, v) for rn in bound for rule in roles[rn]["rules"]
                     for res in rule["resources"] for v in rule["verbs"]}
            if bool(vgpu) != (("pods", "patch") in verbs):
                problems.append("%s: vGPU %s but pods/patch %s" % (name, bool(vgpu), verbs))
            if bool(dra) != (("resourceslices", "create") in verbs):
                problems.append("%s: DRA %s but resourceslices/create %s" % (name, bool(dra), verbs))
            if not vgpu and not dra and (bound or sas[sa].get("automountServiceAccountToken")):
                problems.append("%s: needs no API server, yet has a token or a binding" % name)
            inits = [c["name"] for c in pod.get("initContainers", [])]
            if "install-libvcuda" not in inits:
                problems.append("%s: no install-libvcuda init container" % name)
            if values.get("emulator", {}).get("enabled"):
                env = {e["name"]: e.get("value") for e in main.get("env", [])}
                if env.get("ACCEL_EMU_STATE") != values["emulator"]["state"]:
                    problems.append("%s: ACCEL_EMU_STATE %s" % (name, env.get("ACCEL_EMU_STATE")))
                if not cfg.get("nvmlLibrary", "").startswith(values["emulator"]["libDir"]):
                    problems.append("%s: nvmlLibrary %s is not the emulator's" % (name, cfg.get("nvmlLibrary")))
        elif role == "accel-exporter":
            data = cms[cfgvol]["data"]["config.yaml"]
            path = os.path.join(tmp, "exporter-%s.yaml" % label)
            with open(path, "w") as f:
                f.write(data)
            p = run([EXPORTER, "--config", path, "--check-config"])
            if p.returncode != 0:
                problems.append("exporter refuses its config: %s" % p.stderr.strip())
            for a in main["command"][1:]:
                if a.startswith("--") and a not in EXPORTER_HELP:
                    problems.append("%s is not an accel-exporter flag" % a)
            sc = main["securityContext"]
            if not (sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0):
                problems.append("exporter runs as root: %s" % sc)
            if sc.get("privileged") is not False or sc.get("allowPrivilegeEscalation") is not False \
                    or sc.get("capabilities", {}).get("drop") != ["ALL"]:
                problems.append("exporter not unprivileged: %s" % sc)
            for m in main["volumeMounts"]:
                # the emulator's state file is the emulated GPUs' device: its NVML maps it
                # read-write, as the real one opens /dev/nvidiactl read-write
                if m.get("readOnly") is not True and m["name"] != "emu-state":
                    problems.append("exporter mount %s is writable" % m["name"])
            acl = [c for c in pod["containers"] if c["name"] == "pod-resources-acl"]
            podres = values.get("exporter", {}).get("podResources", "acl")
            if bool(acl) != (podres == "acl"):
                problems.append("pod-resources-acl container %s with podResources %s" % (
                    bool(acl), podres))
            for c in acl:
                sc = c["securityContext"]
                if sc.get("capabilities", {}).get("drop") != ["ALL"] or c.get("ports"):
                    problems.append("pod-resources-acl has capabilities or ports: %s" % c)
            cfg = yaml.safe_load(data)
            for pth in (cfg.get("stateDir"), os.path.dirname(cfg.get("nvmlLibrary", "")),
                        cfg.get("podResourcesSocket") and os.path.dirname(cfg["podResourcesSocket"])):
                if pth and not mounted(main, vols, pth):
                    problems.append("exporter config names %s, not mounted" % pth)
    report(not problems, "%s: acceld and exporter pods match their configs, images, RBAC, "
           "limits and security" % label, "\n".join(problems))
    report(agents == len(values.get("agents", {"gpu": 1})),
           "%s: one acceld DaemonSet per agent (%d)" % (label, agents))
    classes = set()
    for dc in by_kind.get("DeviceClass", []):
        for s in dc["spec"]["selectors"]:
            classes |= set(re.findall(r'\.sharing == "(\w+)"', s["cel"]["expression"]))
    report(classes == published, "%s: DeviceClasses select what the DRA agents publish (%s)" % (
        label, sorted(published)), "classes %s" % sorted(classes))
    exp = values.get("exporter", {}).get("enabled", True)
    svc = [s for s in by_kind.get("Service", []) if s["metadata"]["name"] == "accel-exporter"]
    ok = bool(svc) == exp and (not svc or
                               svc[0]["metadata"]["annotations"]["prometheus.io/scrape"] == "true")
    report(ok, "%s: exporter Service with prometheus.io annotations iff the exporter is on" % label)
    for pr in by_kind.get("PrometheusRule", []):
        text = RULES_TEXT
        base = values.get("exporter", {}).get("prometheusRule", {}).get("runbookBase")
        if base:
            text = text.replace("https://github.com/accel/accel/blob/main/docs/runbooks.md#",
                                base.rstrip("/") + "#")
        report(pr["spec"] == yaml.safe_load(text),
               "%s: PrometheusRule = deploy/prometheus/accel-rules.yml (runbook base %s)" % (
                   label, base or "default"))
    for cm in by_kind.get("ConfigMap", []):
        if "accel-dashboard.json" in cm.get("data", {}):
            report(json.loads(cm["data"]["accel-dashboard.json"]) == DASHBOARD,
                   "%s: dashboard ConfigMap = deploy/grafana/accel-dashboard.json" % label)


for vf in modes:
    label = os.path.basename(vf).replace("-values.yaml", "")
    with open(vf) as f:
        values = yaml.safe_load(f) or {}
    r = run([HELM, "lint", "--strict", CHART, "-f", vf])
    report(r.returncode == 0, "%s: helm lint --strict" % label, r.stdout + r.stderr)
    r = template([vf])
    if r.returncode != 0:
        report(False, "%s: helm template" % label, r.stderr)
        continue
    objs = [o for o in yaml.safe_load_all(r.stdout) if o]
    check_rendering(label, objs, values)

# prometheus-operator's objects follow the cluster's API (auto) or the value
r = template([], ["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"])
kinds = [o["kind"] for o in yaml.safe_load_all(r.stdout) if o]
report("PrometheusRule" in kinds and "ServiceMonitor" not in kinds,
       "defaults: a PrometheusRule when the cluster serves monitoring.coreos.com/v1, "
       "no ServiceMonitor (off by default)", kinds)
r = template([])
kinds = [o["kind"] for o in yaml.safe_load_all(r.stdout) if o]
report("PrometheusRule" not in kinds, "defaults: no PrometheusRule without the API")
r = template([], ["--set", "exporter.podResources=root"])
ex = [o for o in yaml.safe_load_all(r.stdout) if o and o["kind"] == "DaemonSet"
      and "exporter" in o["metadata"]["name"]][0]["spec"]["template"]["spec"]
report([c["securityContext"]["runAsUser"] for c in ex["containers"]] == [0],
       "exporter.podResources=root: the exporter alone, as uid 0 (no ACL container)")

# renderings that must fail, and say why
for why, args, want in (
        ("two agents on one nodeSelector", ["--set", "agents.vgpu.config.mode=vgpu"],
         "same nodeSelector"),
        ("a bad mode", ["--set", "agents.gpu.config.mode=fast"], "is not pgpu, vgpu, dra or vfio"),
        ("a bad exporter.podResources", ["--set", "exporter.podResources=maybe"],
         "is not acl, root or none")):
    r = template([], args)
    report(r.returncode != 0 and want in r.stderr, "refused: %s" % why, r.stderr or r.stdout[:300])

if HAVE_KM:
    res = run(["node", os.path.join(SRC, "tests/dra/validate-objects.mjs")],
              input=json.dumps([o for _, o in to_validate]),
              env=dict(os.environ, KUBERNETES_MODELS_DIR=KM))
    lines = res.stdout.splitlines()
    bad = [(to_validate[i][0], line) for i, line in enumerate(lines) if line != "ok %d" % i]
    report(len(lines) == len(to_validate) and not bad,
           "kubernetes-models: every rendered object valid (%d)" % len(to_validate),
           "\n".join("%s: %s" % b for b in bad[:10]) + res.stderr)
else:
    print("# kubernetes-models is not installed in %s (scripts/deps.sh): schemas not checked" % KM)
    report(False, "kubernetes-models with prometheus-operator installed (scripts/deps.sh)")

shutil.rmtree(tmp, ignore_errors=True)
sys.exit(T.done())
