#!/usr/bin/env python3
"""test-exporter — accel-exporter on a 4-GPU emulated node: /healthz, /metrics in both
exposition formats, values that follow `accel-emu set`, an injected XID counted on the right
GPU, `promtool check metrics` clean, a real Prometheus (Debian's) scraping it, and bad flags
refused with exit 2. Prints TAP; exits 77 when the exporter was not built."""
import html.parser
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from taptest import case, check, run  # noqa: E402

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
EMU = os.path.join(BUILD, "src", "emu", "accel-emu")
EXPORTER = os.path.join(BUILD, "src", "exporter", "accel-exporter")
NVML = os.path.join(BUILD, "src", "emu", "libnvidia-ml.so.1")
HOLD = os.path.join(BUILD, "tests", "emu", "emu-hold")
SPIN = os.path.join(BUILD, "tests", "emu", "spin")
FAKE_PODRES = os.path.join(BUILD, "tests", "exporter", "fake-podresources")
SRC = os.environ.get("ACCEL_SOURCE_ROOT",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

if not os.path.exists(EXPORTER):
    print("1..0 # SKIP accel-exporter not built (libmicrohttpd missing)")
    sys.exit(77)

# Sanitized build: the utilization case opens the emulated NVML (sanitized) through ctypes, so
# ASan's runtime must come first in this interpreter; python itself is not leak-clean, so leak
# checks are off here and back on (the test's own ASAN_OPTIONS) for every program it starts.
if os.environ.get("EXPORTER_ASAN_RT") and not os.environ.get("LD_PRELOAD"):
    os.execve(sys.executable, [sys.executable] + sys.argv,
              dict(os.environ, LD_PRELOAD=os.environ["EXPORTER_ASAN_RT"],
                   EXPORTER_CHILD_ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", ""),
                   ASAN_OPTIONS="detect_leaks=0"))
if "EXPORTER_CHILD_ASAN_OPTIONS" in os.environ:
    os.environ["ASAN_OPTIONS"] = os.environ.pop("EXPORTER_CHILD_ASAN_OPTIONS")
    os.environ.pop("LD_PRELOAD")  # loaded here; the sanitized programs link it themselves

TMP = tempfile.mkdtemp(prefix="test-exporter-")
STATE = os.path.join(TMP, "machine")
ENV = dict(os.environ, ACCEL_EMU_STATE=STATE, ACCEL_NVML_LIBRARY=NVML)
procs = []




def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None, "", ""


def wait_for(fn, what, timeout=30.0):
    """Polls fn until it returns a true value; fails after timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


def emu(*args):
    p = subprocess.run([EMU, "--state", STATE] + list(args), capture_output=True, text=True,
                       env=ENV, timeout=60)
    check(p.returncode == 0, f"accel-emu {args}: {p.stderr}")
    return p.stdout


def samples(text, name, **labels):
    """The values of every series name{labels...} (a subset of its labels) in Prometheus
    text, in order."""
    out = []
    for line in text.splitlines():
        if not labels and line.startswith(name + " "):
            out.append(float(line.split()[1]))
            continue
        if not line.startswith(name + "{"):
            continue
        m = re.match(r"([a-z_]+)\{(.*)\} (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        if all(got.get(k) == str(v) for k, v in labels.items()):
            out.append(float(m.group(3)))
    return out


def sample(text, name, **labels):
    """The value of the first series name{labels...} in Prometheus text, or None."""
    v = samples(text, name, **labels)
    return v[0] if v else None


emu("init", "--gpus", "4")
UUIDS = [g["uuid"] for g in sorted(json.loads(emu("status", "--json"))["gpus"],
                                   key=lambda g: g["index"])]
# The kubelet's pod-resources (tests/exporter/fake-podresources.c on src/grpc): GPU 0
# time-sliced (acceld's replica IDs UUID::N) between ns-a/train-a/main and ns-b/train-b/worker,
# GPU 1 held by ns-a/train-a/main alone, GPU 2 time-sliced between two containers of which only
# one runs a process there (its names are ambiguous and must stay empty), GPU 3 listed for one
# container but running two (which one is which is unknown: names stay empty).
PODRES_SOCK = os.path.join(TMP, "kubelet.sock")
podres = subprocess.Popen([FAKE_PODRES, PODRES_SOCK, f"ns-a/train-a/main={UUIDS[0]}::0",
                           f"ns-b/train-b/worker={UUIDS[0]}::1", f"ns-a/train-a/main={UUIDS[1]}",
                           f"ns-c/p3/x={UUIDS[2]}::0", f"ns-d/p4/y={UUIDS[2]}::1",
                           f"ns-e/p5/z={UUIDS[3]}",
                           # GetAllocatableResources: GPU 0 has 4 replicas (so each holder of
                           # one holds a share of 0.25), GPU 2 two, GPUs 1 and 3 are whole
                           "alloc:nvidia.com/gpu=" + ",".join(
                               [f"{UUIDS[0]}::{k}" for k in range(4)] + [UUIDS[1]] +
                               [f"{UUIDS[2]}::{k}" for k in range(2)] + [UUIDS[3]])],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
procs.append(podres)
if podres.stdout.readline() != "ready\n":
    print("Bail out! fake-podresources did not start")
    sys.exit(1)
PORT = free_port()
BASE = f"http://127.0.0.1:{PORT}"
# acceld's state directory: the exporter reads its SLI file, acceld-stats.json
# (src/nodestate/acceld-stats.h), written here as acceld would (tmp + rename)
AGENT = os.path.join(TMP, "agent-state")
BOUNDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]


def agent_stats(alloc_ok=5, alloc_err=1, unhealthy=2, restarts=3, killed=1, buckets=None,
                mps="running"):
    b = buckets or [0, 2, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6]
    return {
        "version": 2, "startTime": 1764000000.5, "writeTime": time.time(),
        "deviceInit": {"ok": 4, "failed": 1},
        "allocateBuckets": BOUNDS,
        "resources": [
            {"name": "nvidia.com/gpu", "registrations": {"ok": 3, "failed": 1},
             "allocate": {"ok": alloc_ok, "error": alloc_err, "sum": 4.25, "buckets": b}},
            {"name": "tencent.com/vcuda-core", "registrations": {"ok": 1, "failed": 0},
             "allocate": {"ok": 0, "error": 0, "sum": 0, "buckets": [0] * len(BOUNDS)}}],
        "gpus": [{"index": i, "uuid": UUIDS[i], "toUnhealthy": unhealthy if i == 1 else 0,
                  "toHealthy": 1 if i == 1 else 0, "mpsRestarts": restarts if i == 2 else 0,
                  # version 2: GPU 1 unhealthy (XID 79), GPU 2 runs MPS
                  "healthy": i != 1, "reason": "XID 79" if i == 1 else "",
                  "mps": mps if i == 2 else "none"}
                 for i in range(4)],
        "quotaFindings": {"memory": {"none": 2, "kill": killed, "freeze": 0},
                          "under_report": {"none": 0, "kill": 0, "freeze": 0},
                          "compute": {"none": 0, "kill": 0, "freeze": 4}},
    }


def write_agent(d):
    os.makedirs(AGENT, exist_ok=True)
    tmp = os.path.join(AGENT, "acceld-stats.json.tmp")
    with open(tmp, "w") as f:
        f.write(d if isinstance(d, str) else json.dumps(d))
    os.replace(tmp, os.path.join(AGENT, "acceld-stats.json"))


write_agent(agent_stats())
# acceld's vGPU state in the same directory: status.json (src/modes/vgpu-status.c) with two
# containers sharing GPU 0 and a whole GPU (no region), and each container's usage region
# (src/vcuda/region.h), written by hand as libvcuda would
POD_V1, POD_V2 = "0b6c4a3e-6666-4c2a-9d5e-000000000006", "0b6c4a3e-7777-4c2a-9d5e-000000000007"
REGION_SIZE = 4096 + 1024 * 256


def vgpu_status(extra=None):
    a = [{"namespace": "ns-v", "pod": "vgpu-a", "podUID": POD_V1, "container": "main",
          "gpu": UUIDS[0], "cores": 30, "memoryBytes": 1 << 30, "whole": False, "complete": True},
         {"namespace": "ns-v", "pod": "vgpu-b", "podUID": POD_V2, "container": "side",
          "gpu": UUIDS[0], "cores": 50, "memoryBytes": 2 << 30, "whole": False, "complete": True},
         {"namespace": "ns-v", "pod": "vgpu-w", "podUID": POD_V2, "container": "whole",
          "gpu": UUIDS[3], "cores": 100, "memoryBytes": 0, "whole": True, "complete": True},
         # the vGPU container of the cost case (listed by the fake pod-resources): 40 cores
         {"namespace": "ns-v", "pod": "vpod", "podUID": "u-v", "container": "vc",
          "gpu": UUIDS[3], "cores": 40, "memoryBytes": 1 << 30, "whole": False,
          "complete": True}]
    return {"version": 1, "checkTime": 0, "overQuotaAction": "none", "checkIntervalMs": 1000,
            "gpus": [], "assignments": a + (extra or []), "findings": [], "recentFindings": []}


def write_vgpu_status(d):
    os.makedirs(os.path.join(AGENT, "vgpu"), exist_ok=True)
    tmp = os.path.join(AGENT, "vgpu", "status.json.tmp")
    with open(tmp, "w") as f:
        f.write(d if isinstance(d, str) else json.dumps(d))
    os.replace(tmp, os.path.join(AGENT, "vgpu", "status.json"))


def write_region(pod_uid, container, uuids, slots, gpu_time_ns, throttled_ns, magic=None):
    """A usage region: slots = [(pid, [bytes per device])]; pacing's GPU and throttled time."""
    import struct
    b = bytearray(REGION_SIZE)
    struct.pack_into("<QIIQIIIII", b, 0, magic or 0x3147455241554356, 1, 4096, REGION_SIZE, 1024,
                     256, 4096, 16, len(slots))
    struct.pack_into("<I", b, 192, 30)
    struct.pack_into("<Q", b, 232, gpu_time_ns)
    struct.pack_into("<Q", b, 264, throttled_ns)
    for d, u in enumerate(uuids):
        b[320 + 64 * d:320 + 64 * d + len(u)] = u.encode()
    for i, (pid, used) in enumerate(slots):
        struct.pack_into("<QQ", b, 4096 + 256 * i, pid, 0)
        for d, n in enumerate(used):
            struct.pack_into("<Q", b, 4096 + 256 * i + 16 + 8 * d, n)
    d = os.path.join(AGENT, "vgpu", pod_uid, container, "region")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "usage.tmp"), "wb") as f:
        f.write(b)
    os.replace(os.path.join(d, "usage.tmp"), os.path.join(d, "usage"))


write_vgpu_status(vgpu_status())
# pod V1: two processes on GPU 0 (and 5 MiB on a second device); a freed slot (owner 0) with
# stale bytes must not count; pod V2 over its 2 GiB limit (a tampered or bypassed libvcuda)
write_region(POD_V1, "main", [UUIDS[0], UUIDS[1]],
             [(101, [100 << 20, 5 << 20]), (0, [999 << 20]), (102, [28 << 20])],
             12_500_000_000, 3_250_000_000)
write_region(POD_V2, "side", [UUIDS[0]], [(201, [(2 << 30) + (64 << 20)])], 40_000_000_000, 0)
# A fake /proc: the exporter reads <pid>/cgroup from here, so test processes can stand in for
# containers of two pods (cgroup v2, systemd driver, containerd ids).
PROC = os.path.join(TMP, "proc")
exp = subprocess.Popen([EXPORTER, "--listen", f"127.0.0.1:{PORT}", "--interval", "100ms",
                        "--proc-root", PROC, "--pod-resources-socket", PODRES_SOCK,
                        "--state-dir", AGENT, "--cost-currency", "EUR",
                        "--cost-gpu-hour-price", "nvidia.com/gpu=3.6"],
                       # per-process utilization over 100 ms periods (the emulator's window)
                       env=dict(ENV, ACCEL_EMU_UTIL_WINDOW_MS="100"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
procs.append(exp)


def metrics():
    st, _, body = get(BASE + "/metrics")
    return body if st == 200 else None


@case("/healthz answers 200 once the first sample is taken")
def _():
    wait_for(lambda: get(BASE + "/healthz")[0] == 200, "/healthz 200")
    st, _, body = get(BASE + "/nope")
    check(st == 404 and "/metrics" in body, f"unknown path: {st} {body!r}")


@case("/metrics: text 0.0.4 with a series per GPU for every family, labelled by index and UUID")
def _():
    st, ctype, body = get(BASE + "/metrics")
    check(st == 200, f"status {st}")
    check("text/plain; version=0.0.4" in ctype, f"content type {ctype}")
    gpus = json.loads(emu("status", "--json"))["gpus"]
    check(len(gpus) == 4, f"emu status: {len(gpus)} GPUs")
    for g in gpus:
        idx, uuid = g["index"], g["uuid"]
        for fam in ("accel_gpu_info", "accel_gpu_temperature_celsius", "accel_gpu_power_watts",
                    "accel_gpu_sm_clock_hertz", "accel_gpu_utilization_ratio",
                    "accel_gpu_memory_used_bytes", "accel_gpu_memory_free_bytes"):
            check(sample(body, fam, gpu=idx, uuid=uuid) is not None, f"no {fam} for GPU {idx}")
        check(sample(body, "accel_gpu_memory_total_bytes", gpu=idx, uuid=uuid)
              == g["memory_total_bytes"], f"GPU {idx} memory total")
        check(sample(body, "accel_gpu_memory_clock_hertz", gpu=idx) == g["mem_clock_mhz"] * 1e6,
              f"GPU {idx} memory clock")


@case("values follow accel-emu set (temperature, power, SM clock) on the GPU set only")
def _():
    emu("set", "2", "temperature=83", "power=412", "sm_clock=1410")
    wait_for(lambda: (m := metrics()) and sample(m, "accel_gpu_temperature_celsius", gpu=2) == 83,
             "temperature 83 on GPU 2")
    m = metrics()
    check(sample(m, "accel_gpu_power_watts", gpu=2) == 412, "power 412 W")
    check(sample(m, "accel_gpu_sm_clock_hertz", gpu=2) == 1410e6, "SM clock 1410 MHz in hertz")
    check(sample(m, "accel_gpu_temperature_celsius", gpu=1) != 83, "GPU 1 changed too")
    check(sample(m, "accel_gpu_temperature_slowdown_celsius", gpu=2) == 89,
          "the emulator's slowdown threshold (89 °C)")


@case("health values follow accel-emu set: throttle reasons, energy, remapped rows, PCIe replays")
def _():
    emu("set", "3", "clocks_event_reasons=0x40", "energy=5000", "remapped_unc=2",
        "remap_pending=1", "pcie_replays=17")
    emu("ecc", "3", "double")

    def ok():
        m = metrics()
        return m and sample(m, "accel_gpu_pcie_replays_total", gpu=3) == 17 and m
    m = wait_for(ok, "PCIe replays 17 on GPU 3")
    check(sample(m, "accel_gpu_clock_event_reason", gpu=3, reason="hw_thermal_slowdown") == 1,
          "hw_thermal_slowdown not 1")
    check(sample(m, "accel_gpu_clock_event_reason", gpu=3, reason="sw_power_cap") == 0,
          "sw_power_cap not 0")
    check(sample(m, "accel_gpu_clock_event_reason", gpu=0, reason="hw_thermal_slowdown") == 0,
          "GPU 0 throttled")
    check(sample(m, "accel_gpu_energy_joules_total", gpu=3) >= 5000, "energy below 5000 J")
    check(sample(m, "accel_gpu_remapped_rows_uncorrectable", gpu=3) == 2, "remapped rows")
    check(sample(m, "accel_gpu_row_remap_pending", gpu=3) == 1, "remap pending")
    check(sample(m, "accel_gpu_ecc_errors_total", gpu=3, type="uncorrected") == 1, "ECC")
    check(sample(m, "accel_gpu_power_limit_watts", gpu=3) is not None, "power limit")


HOLDS = []  # emu-hold processes standing in for the pods' containers
POD_A, POD_B = "0b6c4a3e-1111-4c2a-9d5e-000000000001", "0b6c4a3e-2222-4c2a-9d5e-000000000002"
CID_A, CID_B = "a" * 64, "b" * 64


NAMES = {POD_A: ("ns-a", "train-a", "main"), POD_B: ("ns-b", "train-b", "worker")}
POD_C, CID_C = "0b6c4a3e-3333-4c2a-9d5e-000000000003", "c" * 64
POD_D, CID_D = "0b6c4a3e-4444-4c2a-9d5e-000000000004", "d" * 64
POD_E, CID_E = "0b6c4a3e-5555-4c2a-9d5e-000000000005", "e" * 64


@case("per MIG device: info, memory used and total, labelled with its GPU instance, compute "
      "instance and profile; gone with the instances")
def _():
    # an idle GPU (the mode change needs one), the last there is
    st = json.loads(subprocess.run([EMU, "--state", STATE, "status", "--json"],
                                   capture_output=True, text=True, env=ENV, timeout=60,
                                   check=True).stdout)
    idle = [g["index"] for g in st["gpus"] if not g["processes"]]
    check(idle, "an idle GPU for MIG")
    g = str(idle[-1])
    emu("set", g, "mig=on")
    emu("mig", g, "create", "1g.10gb,3g.40gb")
    out = subprocess.run([EMU, "--state", STATE, "mig", g, "list", "--json"],
                         capture_output=True, text=True, env=ENV, timeout=60, check=True).stdout
    want = {(ci["uuid"], str(gi["gpu_instance_id"]), str(ci["compute_instance_id"]),
             gi["profile"], gi["memory_total_bytes"])
            for gi in json.loads(out)["instances"] for ci in gi["compute_instances"]}

    def got():
        m = metrics()
        if not m:
            return None
        have = set()
        for line in m.splitlines():
            if line.startswith("accel_mig_device_memory_total_bytes{"):
                lab = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', line))
                if lab.get("gpu") == g and lab.get("uuid") == UUIDS[int(g)]:
                    have.add((lab["mig_uuid"], lab["gpu_instance_id"],
                              lab["compute_instance_id"], lab["mig_profile"],
                              int(float(line.split()[-1]))))
        return have == want and m
    m = wait_for(got, f"the two MIG devices of GPU {g} with their labels and memory")
    for u, gi, ci, prof, _ in want:
        check(sample(m, "accel_mig_device_info", gpu=g, mig_uuid=u, gpu_instance_id=gi,
                     compute_instance_id=ci, mig_profile=prof) == 1, f"info of {u}")
        check(sample(m, "accel_mig_device_memory_used_bytes", gpu=g, mig_uuid=u) == 0,
              f"{u}: nothing in use")
    check(sample(m, "accel_mig_device_info", gpu=0) is None, "no MIG series for GPU 0")
    emu("mig", g, "destroy")
    emu("set", g, "mig=off")
    wait_for(lambda: (m := metrics()) and sample(m, "accel_mig_device_info", gpu=g) is None and m,
             f"the MIG series of GPU {g} gone with its instances")


@case("two pods sharing GPU 0 each show their own memory, named through pod-resources")
def _():
    if not os.path.exists(HOLD):
        return "SKIP emu-hold not built"
    env = dict(ENV, LD_LIBRARY_PATH=os.path.join(BUILD, "src", "emu"))
    holds = {}
    # pod A also runs on GPU 1 (which it holds alone): that names its container, and pod B is
    # then the one holder of GPU 0 left; pod C is alone on GPU 2 but pod-resources lists two
    # containers there.
    for gpu, pod, cid, mib in ((0, POD_A, CID_A, 64), (0, POD_B, CID_B, 192),
                               (1, POD_A, CID_A, 32), (2, POD_C, CID_C, 16),
                               (3, POD_D, CID_D, 16), (3, POD_E, CID_E, 16)):
        h = subprocess.Popen([HOLD, str(gpu), str(mib)], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        procs.append(h)
        line = h.stdout.readline()
        check(line == f"ready {h.pid}\n", f"emu-hold: {line!r}")
        d = os.path.join(PROC, str(h.pid))
        os.makedirs(d, exist_ok=True)
        u = pod.replace("-", "_")
        with open(os.path.join(d, "cgroup"), "w") as f:
            f.write(f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/"
                    f"cri-containerd-{cid}.scope\n")
        if gpu == 0:
            holds[pod] = (h.pid, cid)
    nvs = {g["index"]: {p["pid"]: p["memory_bytes"] for p in g["processes"]}
           for g in json.loads(emu("status", "--json"))["gpus"]}
    nv = {pid: {"memory_bytes": b} for pid, b in nvs[0].items()}

    def all_there():
        m = metrics()
        return m and all(sample(m, "accel_container_gpu_memory_used_bytes", gpu=0, pod_uid=pod)
                         is not None for pod in holds) and \
            sample(m, "accel_container_gpu_memory_used_bytes", gpu=2, pod_uid=POD_C) is not None \
            and sample(m, "accel_container_gpu_memory_used_bytes", gpu=1, pod_uid=POD_A) \
            is not None \
            and all(sample(m, "accel_container_gpu_memory_used_bytes", gpu=3, pod_uid=pod)
                    is not None for pod in (POD_D, POD_E)) \
            and sample(m, "accel_exporter_pod_resources_up") == 1 and m
    m = wait_for(all_there, "per-container series for the three pods")
    got = {}
    for pod, (pid, cid) in holds.items():
        ns, name, ctr = NAMES[pod]
        per_proc = sample(m, "accel_gpu_process_memory_used_bytes", gpu=0, pid=pid, pod_uid=pod,
                          container_id=cid, namespace=ns, pod=name, container=ctr)
        per_ctr = sample(m, "accel_container_gpu_memory_used_bytes", gpu=0, pod_uid=pod,
                         container_id=cid, namespace=ns, pod=name, container=ctr)
        check(per_proc is not None and per_proc == per_ctr,
              f"pod {pod} ({ns}/{name}/{ctr}): {per_proc} vs {per_ctr}\n{m}")
        check(pid in nv, f"emulator does not list pid {pid}: {nv}")
        check(per_proc == nv[pid]["memory_bytes"],
              f"pod {pod}: exporter {per_proc}, emulator {nv[pid]['memory_bytes']}")
        got[pod] = per_proc
    check(got[POD_B] - got[POD_A] == 128 << 20,
          f"pods should differ by their allocations (128 MiB): {got}")
    check(sample(m, "accel_container_gpu_memory_used_bytes", gpu=1, pod_uid=POD_A,
                 namespace="ns-a", pod="train-a", container="main") == sum(nvs[1].values()),
          "pod A on GPU 1 (its sole holder) named")
    check(sample(m, "accel_container_gpu_memory_used_bytes", gpu=2, pod_uid=POD_C, namespace="",
                 pod="", container="") == sum(nvs[2].values()),
          "GPU 2: two holders, one container running: names must stay empty")
    for pod in (POD_D, POD_E):
        check(sample(m, "accel_container_gpu_memory_used_bytes", gpu=3, pod_uid=pod,
                     namespace="", pod="", container="") is not None,
              f"GPU 3: one holder, two containers running: {pod} must stay unnamed")
    promtool = shutil.which("promtool")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=m, capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 0 and not (p.stdout + p.stderr).strip(),
              f"promtool with pod series: {p.stdout}{p.stderr}")
    # the holders stay until the end: the dashboard's per-pod panels need them in Prometheus
    HOLDS.extend(procs[-6:])


@case("two pods on time-sliced GPU 0 at different duty show their own utilization, as NVML says")
def _():
    if not os.path.exists(SPIN) or not HOLDS:
        return "SKIP spin or the pods' holders missing"
    import ctypes

    class Sample(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                    ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                    ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]
    os.environ["ACCEL_EMU_STATE"] = STATE
    nv = ctypes.CDLL(os.path.abspath(NVML))
    check(nv.nvmlInit_v2() == 0, "nvmlInit_v2 on the emulator")
    dev = ctypes.c_void_p()
    check(nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0, "GPU 0 handle")

    def emulator_figures():
        """The emulator's own per-process SM utilization of its last period, 0..1."""
        # NVML refuses a buffer below its own sample buffer (72 entries on an H200)
        buf, cnt = (Sample * 256)(), ctypes.c_uint(256)
        r = nv.nvmlDeviceGetProcessUtilization(dev, buf, ctypes.byref(cnt), ctypes.c_ulonglong(0))
        return {buf[i].pid: buf[i].smUtil / 100 for i in range(cnt.value)} if r == 0 else {}
    env = dict(ENV, LD_LIBRARY_PATH=os.path.join(BUILD, "src", "emu"))
    spins = {}
    # pod A's container busy back to back, pod B's 10 ms in every ~40 ms: on one GPU the
    # timeline gives A about 3/4 and B about 1/4 (the emulator's kernels run one at a time)
    for pod, cid, extra in ((POD_A, CID_A, []), (POD_B, CID_B, ["--gap", "30"])):
        p = subprocess.Popen([SPIN, "10", "--go", "--repeat", "100000"] + extra, env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        d = os.path.join(PROC, str(p.pid))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "cgroup"), "w") as f:
            f.write(f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                    f"{pod.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n")
        spins[pod] = p
    for p in spins.values():
        line = p.stdout.readline()
        while line and "ready" not in line:  # "# ready" once its context exists
            line = p.stdout.readline()
        check("ready" in line, f"spin {p.pid} did not get ready")
    for p in spins.values():
        p.stdin.write("\n")
        p.stdin.flush()
    last = {}

    def close_to_nvml():
        m = metrics()
        emu_f = emulator_figures()
        if not m:
            return None
        got = {}
        for pod, p in spins.items():
            ns, name, ctr = NAMES[pod]
            per_proc = sample(m, "accel_gpu_process_utilization_ratio", gpu=0, uuid=UUIDS[0],
                              pid=p.pid, pod_uid=pod)
            per_ctr = sample(m, "accel_container_gpu_utilization_ratio", gpu=0, pod_uid=pod,
                             namespace=ns, pod=name, container=ctr)
            got[pod] = (per_proc, per_ctr, emu_f.get(p.pid))
        last.update(got)
        ok = all(a is not None and c is not None and e is not None and abs(a - e) <= 0.1
                 and abs(c - a) < 1e-9 for a, c, e in got.values())
        return ok and got[POD_A][0] - got[POD_B][0] >= 0.25 and got[POD_B][0] >= 0.1
    try:
        wait_for(close_to_nvml, "per-process utilization within 0.1 of the emulator's", 30)
    except AssertionError:
        check(False, f"exporter vs emulator (process, container, emulator): {last}")
    m = metrics()
    check(sample(m, "accel_gpu_process_utilization_ratio", gpu=0, pid=HOLDS[0].pid) == 0,
          "a process holding memory but never launching shows 0")
    for p in spins.values():
        p.terminate()
        p.wait(timeout=30)


@case("vGPU regions from --state-dir: each container's memory used and limit, share, times")
def _():
    def vg(m, name, pod_uid, **kw):
        return sample(m, name, gpu=0, uuid=UUIDS[0], pod_uid=pod_uid, **kw)
    m = wait_for(lambda: (m := metrics()) and
                 vg(m, "accel_vgpu_container_memory_used_bytes", POD_V1) is not None and m,
                 "accel_vgpu_* series")
    a = dict(namespace="ns-v", pod="vgpu-a", container="main")
    check(vg(m, "accel_vgpu_container_memory_used_bytes", POD_V1, **a) == 128 << 20,
          "V1 memory used: the live slots on its GPU 0 only (100 + 28 MiB)")
    check(vg(m, "accel_vgpu_container_memory_limit_bytes", POD_V1, **a) == 1 << 30, "V1 limit")
    check(vg(m, "accel_vgpu_container_core_share_ratio", POD_V1, **a) == 0.3, "V1 share")
    check(vg(m, "accel_vgpu_container_gpu_time_seconds_total", POD_V1, **a) == 12.5, "V1 GPU time")
    check(vg(m, "accel_vgpu_container_throttled_seconds_total", POD_V1, **a) == 3.25,
          "V1 throttled time")
    b = dict(namespace="ns-v", pod="vgpu-b", container="side")
    check(vg(m, "accel_vgpu_container_memory_used_bytes", POD_V2, **b) == (2 << 30) + (64 << 20),
          "V2 memory used, over its limit")
    check(vg(m, "accel_vgpu_container_memory_limit_bytes", POD_V2, **b) == 2 << 30, "V2 limit")
    check(vg(m, "accel_vgpu_container_core_share_ratio", POD_V2, **b) == 0.5, "V2 share")
    check(sample(m, "accel_vgpu_container_memory_limit_bytes", container="whole") is None,
          "a whole GPU has no vGPU series")
    check(sample(m, "accel_vgpu_status_up") == 1, "status up")
    # a region that is not one (bad magic): its usage series go, its limits stay
    write_region(POD_V2, "side", [UUIDS[0]], [(201, [1 << 20])], 1, 1, magic=0x1234)
    m = wait_for(lambda: (m := metrics()) and
                 vg(m, "accel_vgpu_container_memory_used_bytes", POD_V2) is None and m,
                 "the bad region's series gone")
    check(vg(m, "accel_vgpu_container_memory_limit_bytes", POD_V2) == 2 << 30,
          "limits stay without a region")
    # a bad status.json (cores over 100) keeps the last good assignments, with status_up 0
    write_vgpu_status(vgpu_status([{"namespace": "x", "pod": "y", "podUID": "z",
                                    "container": "c", "gpu": UUIDS[1], "cores": 500,
                                    "memoryBytes": 1, "whole": False, "complete": True}]))
    m = wait_for(lambda: (m := metrics()) and sample(m, "accel_vgpu_status_up") == 0 and m,
                 "accel_vgpu_status_up 0")
    check(vg(m, "accel_vgpu_container_memory_used_bytes", POD_V1) == 128 << 20,
          "last good assignments kept")
    check(sample(m, "accel_vgpu_container_core_share_ratio", gpu=1) is None,
          "the bad file's assignment not taken")
    st, _, _ = get(BASE + "/healthz")
    check(st == 200, "healthz")
    write_vgpu_status(vgpu_status())
    write_region(POD_V2, "side", [UUIDS[0]], [(201, [(2 << 30) + (64 << 20)])], 40_000_000_000, 0)
    wait_for(lambda: (m := metrics()) and sample(m, "accel_vgpu_status_up") == 1 and
             vg(m, "accel_vgpu_container_memory_used_bytes", POD_V2) is not None,
             "good files read again")


@case("MPS: with a server for this user, every container's clients counted on its GPU")
def _():
    mpsctl = os.path.join(BUILD, "src", "emu", "nvidia-cuda-mps-control")
    if not os.path.exists(mpsctl) or not HOLDS:
        return "SKIP the emulator's nvidia-cuda-mps-control or the pods' holders missing"
    env = dict(ENV, CUDA_MPS_PIPE_DIRECTORY=os.path.join(TMP, "mps", "pipe"),
               CUDA_MPS_LOG_DIRECTORY=os.path.join(TMP, "mps", "log"))
    m = metrics()
    check(sample(m, "accel_container_gpu_mps_clients", gpu=0, pod_uid=POD_A) is None,
          "no MPS clients before a server runs")

    def ctl(*lines):
        p = subprocess.run([mpsctl] + ([] if lines else ["-d"]), env=env, timeout=30,
                           input="".join(x + "\n" for x in lines), capture_output=True,
                           text=True)
        check(p.returncode == 0, f"nvidia-cuda-mps-control {lines}: {p.stderr}")
    ctl()
    try:
        # the emulator counts a process as an MPS client while a server runs for its user
        ctl(f"start_server -uid {os.getuid()}")
        want = {(0, POD_A): 1, (0, POD_B): 1, (1, POD_A): 1, (2, POD_C): 1, (3, POD_D): 1,
                (3, POD_E): 1}

        def counted():
            m = metrics()
            return m and all(sample(m, "accel_container_gpu_mps_clients", gpu=g, pod_uid=pod)
                             == n for (g, pod), n in want.items()) and m
        try:
            m = wait_for(counted, "one MPS client per container and GPU", 20)
        except AssertionError:
            check(False, "MPS clients: " + "".join(
                x + "\n" for x in (metrics() or "").splitlines() if "mps_clients{" in x))
        ns, name, ctr = NAMES[POD_B]
        check(sample(m, "accel_container_gpu_mps_clients", gpu=0, pod_uid=POD_B, namespace=ns,
                     pod=name, container=ctr) == 1, "named like the memory series")
    finally:
        ctl("quit")
    wait_for(lambda: (m := metrics()) and
             sample(m, "accel_container_gpu_mps_clients", gpu=0, pod_uid=POD_A) is None,
             "MPS client series gone with the daemon", 20)


@case("NVLink error counters and MIG mode (current and pending) follow accel-emu set, per GPU")
def _():
    emu("set", "1", "nvlink_link=2", "nvlink_replay=5", "nvlink_crc_data=3")
    # GPU 0 is held by the pods' processes: as the driver does, the emulator leaves the new MIG
    # mode pending (the GPU reset that makes it current needs an idle GPU) and says so (exit 1)
    p = subprocess.run([EMU, "--state", STATE, "set", "0", "mig=on"], capture_output=True,
                       text=True, env=ENV, timeout=60)
    check(p.returncode == 1 and "pending" in p.stderr, f"mig=on on a busy GPU: {p.stderr}")

    def ok():
        m = metrics()
        return m and sample(m, "accel_gpu_nvlink_errors_total", gpu=1, type="replay") == 5 \
            and sample(m, "accel_gpu_mig_mode_pending", gpu=0) == 1 and m
    m = wait_for(ok, "NVLink replays 5 on GPU 1 and MIG pending on GPU 0")
    check(sample(m, "accel_gpu_nvlink_errors_total", gpu=1, uuid=UUIDS[1],
                 type="crc_data") == 3, "crc_data 3")
    check(sample(m, "accel_gpu_nvlink_errors_total", gpu=1, type="ecc_data") == 0, "ecc_data 0")
    check(sample(m, "accel_gpu_nvlink_errors_total", gpu=0, type="replay") == 0, "GPU 0 changed")
    active = sample(m, "accel_gpu_nvlink_links_active", gpu=1, uuid=UUIDS[1])
    check(active is not None and active > 0, f"GPU 1 active links: {active}")
    check(sample(m, "accel_gpu_mig_mode", gpu=1, uuid=UUIDS[1]) == 0, "GPU 1 MIG off")
    check(sample(m, "accel_gpu_mig_mode", gpu=0) == 0, "GPU 0 MIG still off (pending on)")
    emu("set", "0", "mig=off")
    wait_for(lambda: (m := metrics()) and sample(m, "accel_gpu_mig_mode_pending", gpu=0) == 0,
             "MIG no longer pending on GPU 0")


def cost_series(m, name, **labels):
    return sample(m, name, **labels)


@case("cost: GPU-seconds by share, monotonic, priced; energy split adds up to the GPU's")
def _():
    if not HOLDS:
        return "SKIP the pods of the sharing case are not running"
    a = dict(gpu=0, namespace="ns-a", pod="train-a", container="main")
    b = dict(gpu=0, namespace="ns-b", pod="train-b", container="worker")
    g1 = dict(gpu=1, namespace="ns-a", pod="train-a", container="main")
    emu("set", "0", "power=400")

    def gpu0_idle():
        m = metrics()
        busy = [ln for ln in (m or "").splitlines()
                if ln.startswith("accel_gpu_process_utilization_ratio{") and 'gpu="0"' in ln
                and float(ln.split()[-1]) > 0]
        return m and sample(m, "accel_gpu_utilization_ratio", gpu=0) == 0 and not busy
    # the earlier cases' kernels on GPU 0 are over: energy then goes by allocation
    wait_for(gpu0_idle, "GPU 0 idle (no process with SM utilization)", 30)
    m1 = wait_for(lambda: (m := metrics()) and cost_series(
        m, "accel_pod_gpu_allocated_seconds_total", share="0.25", **a) and m,
        "GPU-seconds for pod A's replica on GPU 0")
    t1 = time.monotonic()
    time.sleep(1.5)
    seen = []
    for _ in range(5):  # every scrape: never lower than the one before
        seen.append(cost_series(metrics(), "accel_pod_gpu_allocated_seconds_total",
                                share="0.25", **a))
        time.sleep(0.1)
    m2 = metrics()
    t2 = time.monotonic()
    check(seen == sorted(seen), f"GPU-seconds went down between scrapes: {seen}")
    da = cost_series(m2, "accel_pod_gpu_allocated_seconds_total", share="0.25",
                     resource="nvidia.com/gpu", **a) - \
        cost_series(m1, "accel_pod_gpu_allocated_seconds_total", share="0.25", **a)
    # a replica of 4: a quarter of the wall time between the two snapshots (each up to one
    # 100 ms interval old)
    check(abs(da - 0.25 * (t2 - t1)) < 0.25 * 0.3, f"GPU 0 replica: {da} GPU-s in {t2 - t1} s")
    d1 = cost_series(m2, "accel_pod_gpu_allocated_seconds_total", share="1", **g1) - \
        cost_series(m1, "accel_pod_gpu_allocated_seconds_total", share="1", **g1)
    check(abs(d1 - 4 * da) < 0.25 * 0.3 * 4, f"a whole GPU counts 4x a quarter: {d1} vs {da}")
    check(cost_series(m2, "accel_pod_gpu_allocated_seconds_total", gpu=2, namespace="ns-c",
                      share="0.5") is not None, "GPU 2's replica of 2: share 0.5")
    v = dict(gpu=3, namespace="ns-v", pod="vpod", container="vc",
             resource="tencent.com/vcuda-core", share="0.4")
    dv = cost_series(m2, "accel_pod_gpu_allocated_seconds_total", **v) - \
        cost_series(m1, "accel_pod_gpu_allocated_seconds_total", **v)
    check(abs(dv - 0.4 * (t2 - t1)) < 0.4 * 0.3, f"vGPU 40 cores: {dv} GPU-s in {t2 - t1} s")
    cost = cost_series(m2, "accel_pod_gpu_cost_total", currency="EUR", share="0.25", **a)
    secs = cost_series(m2, "accel_pod_gpu_allocated_seconds_total", share="0.25", **a)
    check(cost is not None and abs(cost - secs * 3.6 / 3600) < 1e-9,
          f"cost {cost} EUR for {secs} GPU-s at 3.6 EUR/GPU-hour")
    # energy: nobody busy (the earlier cases' kernels are over and their processes gone: the
    # last samples of an ended process hold no energy), so GPU 0's energy goes by allocation:
    # 0.25 each to A and B, and the vGPU containers acceld's status.json puts on GPU 0 (the
    # vGPU case's, 30 and 50 cores): 1.3 GPUs' worth in all, so each gets its share / 1.3
    # (overcommitted) and nothing is unattributed; the parts add up to the GPU's counter
    # between snapshots

    def energy(m, **lab):
        return cost_series(m, "accel_pod_gpu_energy_joules_total", **lab)

    def parts(m):
        return sum(samples(m, "accel_pod_gpu_energy_joules_total", gpu=0)) + cost_series(
            m, "accel_gpu_energy_unattributed_joules_total", gpu=0)
    dg = sample(m2, "accel_gpu_energy_joules_total", gpu=0) - \
        sample(m1, "accel_gpu_energy_joules_total", gpu=0)
    check(dg > 100, f"GPU 0 energy grew {dg} J at 400 W")
    check(abs(parts(m2) - parts(m1) - dg) < 1e-6 * max(dg, 1), f"parts {parts(m2) - parts(m1)} vs GPU {dg}")
    held = 0.25 + 0.25 + 0.3 + 0.5
    va = dict(gpu=0, namespace="ns-v", pod="vgpu-a", container="main")
    vb = dict(gpu=0, namespace="ns-v", pod="vgpu-b", container="side")
    for who, lab, share in (("A", a, 0.25), ("B", b, 0.25), ("vGPU a", va, 0.3),
                            ("vGPU b", vb, 0.5)):
        e = energy(m2, **lab) - energy(m1, **lab)
        check(abs(e - share / held * dg) < 1e-6 * dg,
              f"{who} (share {share}) gets {share}/{held} of GPU 0's {dg} J: {e} J "
              f"(as if held {share * dg / e if e else float('inf'):.3f})")
    du = cost_series(m2, "accel_gpu_energy_unattributed_joules_total", gpu=0) - \
        cost_series(m1, "accel_gpu_energy_unattributed_joules_total", gpu=0)
    check(abs(du) < 1e-6 * dg, f"held {held} > 1: nothing unattributed, got {du} of {dg} J")
    # pod B's container runs a kernel on GPU 0: while it is the only busy process, every joule
    # of GPU 0 is B's
    if not os.path.exists(SPIN):
        return
    env = dict(ENV, LD_LIBRARY_PATH=os.path.join(BUILD, "src", "emu"))
    s = subprocess.Popen([SPIN, "4000", "--go"], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    procs.append(s)
    while (line := s.stdout.readline()) and line != "# ready\n":
        pass
    d = os.path.join(PROC, str(s.pid))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "cgroup"), "w") as f:
        f.write(f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                f"{POD_B.replace('-', '_')}.slice/cri-containerd-{CID_B}.scope\n")
    s.stdin.write("go\n")
    s.stdin.flush()
    time.sleep(1.5)  # the first utilization periods with the kernel running
    m3 = metrics()
    time.sleep(1.0)
    m4 = metrics()
    dg = sample(m4, "accel_gpu_energy_joules_total", gpu=0) - \
        sample(m3, "accel_gpu_energy_joules_total", gpu=0)
    eb = energy(m4, **b) - energy(m3, **b)
    ea = energy(m4, **a) - energy(m3, **a)
    check(dg > 0 and abs(eb - dg) < 1e-6 * dg and ea == 0,
          f"while B runs alone: B {eb} J, A {ea} J of {dg} J")
    s.stdin.close()
    s.wait(timeout=60)


@case("pod-resources unreachable: accel_exporter_pod_resources_up 0, GPU series still served, "
      "one warning naming the socket")
def _():
    port = free_port()
    p = subprocess.Popen([EXPORTER, "--listen", f"127.0.0.1:{port}", "--interval", "100ms",
                          "--proc-root", PROC, "--pod-resources-socket",
                          os.path.join(TMP, "no-kubelet.sock")],
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(p)

    def scraped():
        st, _, body = get(f"http://127.0.0.1:{port}/metrics")
        return st == 200 and body
    m = wait_for(scraped, "the second exporter's first sample")
    check(sample(m, "accel_exporter_pod_resources_up") == 0, "pod_resources_up should be 0")
    check(sample(m, "accel_gpu_memory_total_bytes", gpu=0, uuid=UUIDS[0]) is not None,
          "GPU series served without the kubelet")
    p.terminate()
    out, _ = p.communicate(timeout=30)
    check(p.returncode == 0, "second exporter exit")
    # docs/exporter.md: a warning, once, naming the socket (it said nothing when the socket was
    # missing from the start)
    warned = [ln for ln in out.splitlines() if "pod-resources List on" in ln and "failed" in ln]
    check(len(warned) == 1 and "no-kubelet.sock" in warned[0],
          f"one warning naming the socket: {warned!r}")


@case("an injected XID is counted on its GPU and XID only")
def _():
    emu("xid", "1", "79")
    emu("xid", "1", "79")
    emu("xid", "3", "48")
    wait_for(lambda: (m := metrics()) and sample(m, "accel_gpu_xid_events_total", gpu=1, xid=79) == 2
             and sample(m, "accel_gpu_xid_events_total", gpu=3, xid=48) == 1, "XID counters")
    m = metrics()
    check(sample(m, "accel_gpu_xid_events_total", gpu=0) is None, "GPU 0 has an XID series")


class StatusPage(html.parser.HTMLParser):
    """The status page's GPU rows: {index: {"uuid", "health", "xids": [...], "pods": {name:
    bytes}, "text": the row's text}}, read from the data-* attributes status.c writes."""

    def __init__(self, page):
        super().__init__()
        self.rows, self.row = {}, None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "gpu" in (a.get("class") or "").split():
            self.row = {"uuid": a.get("data-uuid"), "health": a.get("data-health"),
                        "xids": [], "pods": {}, "text": ""}
            self.rows[int(a["data-gpu"])] = self.row
        elif tag == "li" and self.row is not None:
            if "data-xid" in a:
                self.row["xids"].append(int(a["data-xid"]))
            if "data-pod" in a:
                self.row["pods"][a["data-pod"]] = int(a["data-memory-bytes"])

    def handle_endtag(self, tag):
        if tag == "tr":
            self.row = None

    def handle_data(self, data):
        if self.row is not None:
            self.row["text"] += data


def check_status_page(page, where):
    """What the page shows against the emulator: every GPU by index and UUID, GPU 2's
    temperature, GPU 3 degraded (remap pending), the XIDs injected on GPUs 1 and 3 (fatal:
    degraded), none or the non-fatal 31 on GPU 0, and the two pods sharing GPU 0 with their own memory."""
    rows = StatusPage(page).rows
    gpus = sorted(json.loads(emu("status", "--json"))["gpus"], key=lambda g: g["index"])
    check(sorted(rows) == [g["index"] for g in gpus], f"{where}: rows {sorted(rows)}")
    for g in gpus:
        check(rows[g["index"]]["uuid"] == g["uuid"], f"{where}: GPU {g['index']} uuid")
    check("83 °C" in rows[2]["text"], f"{where}: GPU 2 temperature: {rows[2]['text']!r}")
    check(rows[1]["xids"][:2] == [79, 79] and rows[1]["health"] == "degraded",
          f"{where}: GPU 1 {rows[1]}")
    check(48 in rows[3]["xids"] and rows[3]["health"] == "degraded", f"{where}: GPU 3 {rows[3]}")
    check(rows[0]["xids"] in ([], [31]) and rows[0]["health"] == "ok",
          f"{where}: GPU 0 {rows[0]}")
    if HOLDS:
        nv = {p["pid"]: p["memory_bytes"] for p in gpus[0]["processes"]}
        pods = rows[0]["pods"]
        check(set(pods) == {"ns-a/train-a/main", "ns-b/train-b/worker"},
              f"{where}: GPU 0 pods {pods}")
        check(sorted(pods.values()) == sorted(nv.values()) and len(set(pods.values())) == 2,
              f"{where}: GPU 0 pod memory {pods} vs emulator {nv}")
    return rows


@case("status page at /: plain HTTP, HTML with every GPU, its health, XIDs and pods")
def _():
    st, ctype, page = get(BASE + "/")
    check(st == 200 and ctype.startswith("text/html"), f"{st} {ctype}")
    check(page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>"), page[:200])
    check(not re.search(r"""(src|href)=["']?(https?:)?//""", page), "external asset")
    check_status_page(page, "HTTP")


@case("status page in headless Chromium: the rendered DOM shows the GPUs and a new XID")
def _():
    chromium = shutil.which("chromium")
    if not chromium:
        return "SKIP chromium not installed (scripts/deps.sh installs it)"
    emu("xid", "0", "31")  # a non-fatal XID (MMU fault): listed, GPU 0 stays healthy
    wait_for(lambda: 31 in StatusPage(get(BASE + "/")[2]).rows[0]["xids"], "XID 31 on /")
    prof = os.path.join(TMP, "chromium")
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={prof}"]
    p = subprocess.run(args + ["--dump-dom", BASE + "/"], capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 0 and "</table>" in p.stdout, f"chromium rc {p.returncode}: "
          f"{p.stderr[-2000:]}")
    rows = check_status_page(p.stdout, "Chromium")
    check(rows[0]["xids"] == [31] and rows[0]["health"] == "ok", f"GPU 0 in Chromium {rows[0]}")
    shot = os.path.join(TMP, "status.png")
    p = subprocess.run(args + ["--hide-scrollbars", "--window-size=1400,420",
                               f"--screenshot={shot}", BASE + "/"],
                       capture_output=True, text=True, timeout=120)
    with open(shot, "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "screenshot is no PNG")
    if os.environ.get("ACCEL_STATUS_SCREENSHOT"):  # docs/exporter.md: how the picture is made
        shutil.copy(shot, os.environ["ACCEL_STATUS_SCREENSHOT"])


@case("acceld's SLIs from --state-dir: every family, a bad file keeps the values, up follows")
def _():
    def agent(m, name, **labels):
        return sample(m, name, **labels)
    m = wait_for(lambda: (lambda t: t if t and sample(t, "accel_agent_up") == 1 else None)(
        metrics()), "accel_agent_up 1")
    g = "nvidia.com/gpu"
    want = [
        (("accel_agent_start_time_seconds",), {}, 1764000000.5),
        (("accel_agent_registrations_total",), {"resource": g, "result": "ok"}, 3),
        (("accel_agent_registrations_total",), {"resource": g, "result": "failed"}, 1),
        (("accel_agent_registrations_total",),
         {"resource": "tencent.com/vcuda-core", "result": "ok"}, 1),
        (("accel_agent_allocate_total",), {"resource": g, "result": "ok"}, 5),
        (("accel_agent_allocate_total",), {"resource": g, "result": "error"}, 1),
        (("accel_agent_allocate_duration_seconds_bucket",), {"resource": g, "le": "0.0005"}, 0),
        (("accel_agent_allocate_duration_seconds_bucket",), {"resource": g, "le": "0.001"}, 2),
        (("accel_agent_allocate_duration_seconds_bucket",), {"resource": g, "le": "1.0"}, 5),
        (("accel_agent_allocate_duration_seconds_bucket",), {"resource": g, "le": "+Inf"}, 6),
        (("accel_agent_allocate_duration_seconds_sum",), {"resource": g}, 4.25),
        (("accel_agent_allocate_duration_seconds_count",), {"resource": g}, 6),
        (("accel_agent_device_init_total",), {"result": "ok"}, 4),
        (("accel_agent_device_init_total",), {"result": "failed"}, 1),
        (("accel_agent_health_transitions_total",), {"gpu": 1, "uuid": UUIDS[1],
                                                     "to": "unhealthy"}, 2),
        (("accel_agent_health_transitions_total",), {"gpu": 1, "uuid": UUIDS[1],
                                                     "to": "healthy"}, 1),
        (("accel_agent_health_transitions_total",), {"gpu": 0, "uuid": UUIDS[0],
                                                     "to": "unhealthy"}, 0),
        (("accel_agent_mps_daemon_restarts_total",), {"gpu": 2, "uuid": UUIDS[2]}, 3),
        (("accel_agent_quota_findings_total",), {"kind": "memory", "action": "kill"}, 1),
        (("accel_agent_quota_findings_total",), {"kind": "memory", "action": "none"}, 2),
        (("accel_agent_quota_findings_total",), {"kind": "compute", "action": "freeze"}, 4),
        (("accel_agent_quota_findings_total",), {"kind": "under_report", "action": "kill"}, 0),
    ]
    for (name,), labels, v in want:
        got = agent(m, name, **labels)
        check(got == v, f"{name}{labels}: {got}, want {v}")
    check(agent(m, "accel_agent_quota_findings_total", kind="compute", action="kill") is None,
          "an impossible kind/action pair is served")
    # version 2: each GPU's current health with its reason, recoveries, MPS daemon state
    check(agent(m, "accel_gpu_health", gpu=1, uuid=UUIDS[1], reason="XID 79") == 0,
          "GPU 1 should be unhealthy with reason XID 79")
    for i in (0, 2, 3):
        check(agent(m, "accel_gpu_health", gpu=i, uuid=UUIDS[i], reason="") == 1,
              f"GPU {i} should be healthy with an empty reason")
    check(agent(m, "accel_gpu_recoveries_total", gpu=1, uuid=UUIDS[1]) == 1, "GPU 1 recoveries")
    check(agent(m, "accel_gpu_recoveries_total", gpu=0, uuid=UUIDS[0]) == 0, "GPU 0 recoveries")
    check(agent(m, "accel_gpu_mps_daemon_state", gpu=2, state="running") == 1 and
          agent(m, "accel_gpu_mps_daemon_state", gpu=2, state="fault") == 0 and
          agent(m, "accel_gpu_mps_daemon_state", gpu=2, state="down") == 0, "GPU 2 MPS running")
    check(agent(m, "accel_gpu_mps_daemon_state", gpu=0) is None, "GPU 0 has no MPS: no series")
    check("# TYPE accel_agent_allocate_duration_seconds histogram" in m, "histogram TYPE")
    # a bad file (a bucket above the call count): up 0, the last good values kept
    write_agent(agent_stats(alloc_ok=1, alloc_err=0))
    m = wait_for(lambda: (lambda t: t if t and sample(t, "accel_agent_up") == 0 else None)(
        metrics()), "accel_agent_up 0 after a bad file")
    check(agent(m, "accel_agent_allocate_total", resource=g, result="ok") == 5,
          "a bad file changed the values")
    write_agent("{not json")
    write_agent(agent_stats(alloc_ok=7, unhealthy=3, restarts=4, killed=2,
                            buckets=[0, 2, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 8, 8], mps="fault"))
    m = wait_for(lambda: (lambda t: t if t and sample(t, "accel_agent_up") == 1 and sample(
        t, "accel_agent_allocate_total", resource=g, result="ok") == 7 else None)(metrics()),
        "the good file's new values")
    check(agent(m, "accel_agent_health_transitions_total", gpu=1, uuid=UUIDS[1],
                to="unhealthy") == 3, "health transitions not updated")
    check(agent(m, "accel_agent_mps_daemon_restarts_total", gpu=2, uuid=UUIDS[2]) == 4,
          "MPS restarts not updated")
    check(agent(m, "accel_agent_quota_findings_total", kind="memory", action="kill") == 2,
          "quota findings not updated")
    check(agent(m, "accel_agent_allocate_duration_seconds_count", resource=g) == 8,
          "histogram count not updated")
    check(agent(m, "accel_gpu_mps_daemon_state", gpu=2, state="fault") == 1 and
          agent(m, "accel_gpu_mps_daemon_state", gpu=2, state="running") == 0,
          "MPS state not updated to fault")
    # a stale file (acceld gone: no heartbeat for over 30 s) is not up
    stale = agent_stats(alloc_ok=7, unhealthy=3, restarts=4, killed=2,
                        buckets=[0, 2, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 8, 8])
    stale["writeTime"] = time.time() - 120
    write_agent(stale)
    wait_for(lambda: (lambda t: t and sample(t, "accel_agent_up") == 0)(metrics()),
             "accel_agent_up 0 for a stale file")
    write_agent(agent_stats(alloc_ok=7, unhealthy=3, restarts=4, killed=2,
                            buckets=[0, 2, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 8, 8]))


@case("OpenMetrics when Accept asks for it: counter families without _total, # EOF last")
def _():
    st, ctype, body = get(BASE + "/metrics",
                          {"Accept": "application/openmetrics-text; version=1.0.0,text/plain;q=0.5"})
    check(st == 200 and ctype.startswith("application/openmetrics-text"), f"{st} {ctype}")
    check(body.endswith("# EOF\n"), "no # EOF at the end")
    check("# TYPE accel_gpu_xid_events counter" in body, "counter family name")


@case("promtool check metrics reports nothing")
def _():
    promtool = shutil.which("promtool")
    if not promtool:
        return "SKIP promtool not installed (scripts/deps.sh installs prometheus)"
    p = subprocess.run([promtool, "check", "metrics"], input=metrics(), capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(),
          f"promtool: rc {p.returncode}\n{p.stdout}{p.stderr}")


PROM = []  # the port of the Prometheus the next case starts
RULES = os.path.join(SRC, "deploy", "prometheus", "accel-rules.yml")


def query(q, errors=None):
    """The result of an instant query on the test's Prometheus; None on an error (appended to
    errors when given)."""
    check(exp.poll() is None, f"the exporter exited ({exp.returncode})")
    st, _, body = get(f"http://127.0.0.1:{PROM[0]}/api/v1/query?"
                      + urllib.parse.urlencode({"query": q}))
    d = json.loads(body) if body.startswith("{") else {}
    if st != 200 or d.get("status") != "success":
        if errors is not None:
            errors.append(f"{q}: {st} {d.get('error', body[:200])}")
        return None
    return d["data"]["result"]


@case("a real Prometheus scrapes it: XID counter and temperature queryable over the HTTP API")
def _():
    prom = shutil.which("prometheus")
    if not prom:
        return "SKIP prometheus not installed (scripts/deps.sh installs it)"
    pport = free_port()
    cfg = os.path.join(TMP, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                f"rule_files: ['{os.path.abspath(RULES)}']\n"
                "scrape_configs:\n  - job_name: accel-exporter\n"
                f"    static_configs:\n      - targets: ['127.0.0.1:{PORT}']\n")
    p = subprocess.Popen([prom, f"--config.file={cfg}", f"--storage.tsdb.path={TMP}/tsdb",
                          f"--web.listen-address=127.0.0.1:{pport}"],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(TMP, "prom.log"), "w"))
    procs.append(p)
    PROM.append(pport)

    r = wait_for(lambda: query('accel_gpu_xid_events_total{gpu="1",xid="79"}'),
                 "Prometheus to have scraped the XID counter", timeout=90)
    check(float(r[0]["value"][1]) == 2, f"XID counter in Prometheus: {r}")
    r = wait_for(lambda: query('accel_gpu_temperature_celsius{gpu="2"}'), "temperature", 30)
    check(float(r[0]["value"][1]) == 83, f"temperature in Prometheus: {r}")
    up = wait_for(lambda: query('up{job="accel-exporter"}'), "up", 30)
    check(up[0]["value"][1] == "1", f"up: {up}")


@case("every Grafana dashboard query runs on that Prometheus without error and returns data")
def _():
    if not PROM:
        return "SKIP prometheus not installed (scripts/deps.sh installs it)"
    import dashboard
    d = dashboard.load()
    # a fresh fatal XID, so the alert rules loaded into Prometheus fire (ALERTS has data)
    emu("xid", "1", "79")
    wait_for(lambda: (r := query('accel_gpu_xid_events_total{gpu="1",xid="79"}'))
             and float(r[0]["value"][1]) == 3, "the third XID 79 in Prometheus", 30)
    wait_for(lambda: query('ALERTS{alertname="AccelGpuFatalXid",alertstate="firing"}'),
             "AccelGpuFatalXid firing in Prometheus", 30)
    qs = [(t, r, dashboard.expand(e, d)) for t, r, e in dashboard.queries(d)]
    check(len(qs) >= 20, f"only {len(qs)} queries")
    errors = []
    for t, r, q in qs:
        query(q, errors)
    check(not errors, "queries Prometheus refused:\n" + "\n".join(errors))
    # data: wait (bounded) until every query has a result; rates need two samples
    def empty():
        return [f"{t}/{r}: {q}" for t, r, q in qs if not query(q)]
    left = empty()
    end = time.monotonic() + 30
    while left and time.monotonic() < end:
        time.sleep(0.5)
        left = empty()
    check(not left, "panel queries with no data:\n" + "\n".join(left))
    # the per-pod panels show the two pods sharing GPU 0, each with its own value
    r = query(dashboard.expand([e for t, _, e in dashboard.queries(d)
                                if t == "Memory per container"][0], d))
    on0 = {s["metric"].get("pod_uid"): float(s["value"][1]) for s in r
           if s["metric"]["gpu"] == "0"}
    check(set(on0) == {POD_A, POD_B} and on0[POD_A] != on0[POD_B], f"GPU 0 pods: {on0}")
    for v in dashboard.variables(d).values():
        if v["type"] != "query":
            continue
        m = re.match(r"label_values\((.*), (\w+)\)$", dashboard.expand(v["query"]["query"], d))
        check(m, f"variable {v['name']}: {v['query']['query']}")
        res = query(f"count by ({m.group(2)}) ({m.group(1)})", errors)
        check(res, f"variable {v['name']}: no values ({errors})")
    # every rule of deploy/prometheus evaluates on the real series without error
    st, _, body = get(f"http://127.0.0.1:{PROM[0]}/api/v1/rules")
    check(st == 200, f"/api/v1/rules: {st}")
    rules = [r for g in json.loads(body)["data"]["groups"] for r in g["rules"]]
    bad = [f"{r['name']}: {r.get('health')} {r.get('lastError', '')}" for r in rules
           if r.get("health") != "ok"]
    check(len(rules) >= 20 and not bad, f"{len(rules)} rules; unhealthy: {bad}")
    for h in HOLDS:
        h.stdin.close()
        h.wait(timeout=30)


@case("--config: YAML settings applied, a flag wins over its key, disabled families left out")
def _():
    p1, p2 = free_port(), free_port()
    cfg = os.path.join(TMP, "exporter.yaml")
    with open(cfg, "w") as f:
        f.write(f"listen: 127.0.0.1:{p1}\ninterval: 100ms\npodResourcesSocket: ''\n"
                "metrics:\n  disable: [accel_gpu_power_watts, accel_gpu_xid_events_total]\n")
    p = subprocess.Popen([EXPORTER, "--config", cfg, "--listen", f"127.0.0.1:{p2}"], env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(p)

    def scraped():
        st, _, body = get(f"http://127.0.0.1:{p2}/metrics")
        return st == 200 and body
    m = wait_for(scraped, "the configured exporter on the flag's port")
    check(get(f"http://127.0.0.1:{p1}/metrics")[0] is None, "the config's listen won")
    check("accel_gpu_power_watts" not in m and "accel_gpu_xid_events_total" not in m,
          "a disabled family is served")
    check(sample(m, "accel_gpu_temperature_celsius", gpu=2) == 83, "other families missing")
    check(sample(m, "accel_exporter_pod_resources_up") is None, "podResourcesSocket '' ignored")
    p.terminate()
    check(p.wait(timeout=30) == 0, "configured exporter exit")


@case("the example config in docs/exporter.md is one the exporter takes")
def _():
    with open(os.path.join(SRC, "docs", "exporter.md")) as f:
        doc = f.read()
    m = re.search(r"## Configuration\n.*?```yaml\n(.*?)```", doc, re.S)
    check(m, "no yaml block under Configuration")
    cfg = os.path.join(TMP, "doc.yaml")
    with open(cfg, "w") as f:
        f.write(m.group(1))
    p = subprocess.run([EXPORTER, "--config", cfg, "--check-config"], capture_output=True,
                       text=True, timeout=30)
    check(p.returncode == 0 and "disable: [accel_gpu_process_memory_used_bytes]" in p.stdout,
          f"rc {p.returncode}: {p.stdout}{p.stderr}")


@case("--config with bad YAML or a bad value: exit 2 naming file, line and column")
def _():
    for text, want in (("interval: 1s\n\tlisten: x\n", ":2:1: YAML syntax error"),
                       ("listen: 127.0.0.1:1\ninterval: fast\n", ':2:11: bad interval "fast"'),
                       ("listen: 127.0.0.1:1\nmetrics:\n  disable: [accel_gpu_nope]\n",
                        ':3:13: metrics.disable: no metric family "accel_gpu_nope"')):
        cfg = os.path.join(TMP, "bad.yaml")
        with open(cfg, "w") as f:
            f.write(text)
        p = subprocess.run([EXPORTER, "--config", cfg], capture_output=True, text=True, env=ENV,
                           timeout=30)
        check(p.returncode == 2 and p.stderr.startswith(f"accel-exporter: {cfg}{want}"),
              f"{text!r}: rc {p.returncode} {p.stderr!r}")


@case("the families a config may disable are exactly the ones /metrics serves")
def _():
    with open(os.path.join(SRC, "src", "exporter", "expconfig.c")) as f:
        src = f.read()
    listed = re.findall(r'"(accel_[a-z_]+)",',
                        src[src.index("exporter_metric_families[]"):src.index("NULL,")])
    served = re.findall(r"^# HELP (\S+) ", metrics(), re.M)
    check(sorted(listed) == sorted(served) and len(listed) == len(set(listed)),
          f"only listed: {set(listed) - set(served)}, only served: {set(served) - set(listed)}")


@case("bad flags exit 2, say what to give, and start nothing")
def _():
    for args in (["--listen", "nowhere"], ["--listen", "127.0.0.1:99999"], ["--interval", "1ms"],
                 ["--bogus", "x"], ["--listen"], ["--config", os.path.join(TMP, "none.yaml")],
                 ["--disable-metrics", "accel_gpu_nope"]):
        p = subprocess.run([EXPORTER] + args, capture_output=True, text=True, env=ENV, timeout=30)
        check(p.returncode == 2, f"{args}: rc {p.returncode}")
        check(p.stderr.startswith("accel-exporter:") and len(p.stderr) > 30, f"{args}: {p.stderr!r}")


@case("SIGTERM stops it cleanly (exit 0)")
def _():
    exp.terminate()
    rc = exp.wait(timeout=30)
    out = exp.stdout.read()
    check(rc == 0, f"exit {rc}: {out}")
    # the bad SLI files were each logged once, naming the file and what is wrong
    check(re.search(r"acceld-stats\.json: resources\[0\]\.allocate\.buckets\[\d+\]: "
                    r"cumulative counts must not decrease nor exceed ok \+ error \(1\): keeping "
                    r"the last good values", out) and out.count("cumulative counts") == 1,
          f"no log line for the bad SLI file: {out[-3000:]}")
    # the bad vGPU status.json too, naming its JSON path; and that it read well again
    check(out.count("status.json: assignments[4].cores: want an integer 0..100: keeping the "
                    "last good assignments") == 1 and "status.json reads well again" in out,
          f"no log line for the bad vGPU status.json: {out[-3000:]}")




def cleanup():
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    shutil.rmtree(TMP, ignore_errors=True)


run(cleanup)
