#!/usr/bin/python3
"""bench/exporter.py — accel-exporter scrape latency and memory on an emulated node.

Usage: /usr/bin/python3 bench/exporter.py [BUILD_DIR] [GPUS] [SCRAPES] [PATH] [PODS]
(defaults build, 8, 3000, /metrics, 0; PATH / times the status page instead). PODS > 0 adds
that many pods: a fake kubelet pod-resources server (tests/exporter/fake-podresources) lists
one container per pod holding a time-sliced replica of a GPU (pods spread round-robin, 16
replicas per GPU in GetAllocatableResources), each container runs one emulated CUDA process
(tests/emu/emu-hold, 16 MiB) whose fake /proc/PID/cgroup names its pod, and acceld's SLI file
(version 2) is read from a state directory: every per-pod, cost and agent family is served. Makes an emulated machine with GPUS GPUs, starts the exporter
(100 ms sampling interval, so the sampler runs ~30 times during the run), scrapes /metrics
SCRAPES times over one keep-alive connection and prints p50/p99/max scrape time (client side,
request sent to last byte read), the body size, the exporter's RSS and peak RSS (VmHWM), and
its CPU time per scrape (user+sys from /proc/PID/stat, sampler included)."""
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
ngpus = int(sys.argv[2]) if len(sys.argv) > 2 else 8
n = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
path = sys.argv[4] if len(sys.argv) > 4 else "/metrics"
npods = int(sys.argv[5]) if len(sys.argv) > 5 else 0
tmp = tempfile.mkdtemp(prefix="bench-exporter-")
state = os.path.join(tmp, "m")
env = dict(os.environ, ACCEL_EMU_STATE=state,
           ACCEL_NVML_LIBRARY=os.path.join(build, "src/emu/libnvidia-ml.so.1"))
subprocess.run([os.path.join(build, "src/emu/accel-emu"), "--state", state, "init", "--gpus",
                str(ngpus)], check=True, env=env, stdout=subprocess.DEVNULL)
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
extra = []
helpers = []
if npods:
    import json
    uuids = [g["uuid"] for g in sorted(json.loads(subprocess.run(
        [os.path.join(build, "src/emu/accel-emu"), "--state", state, "status", "--json"],
        check=True, env=env, capture_output=True, text=True).stdout)["gpus"],
        key=lambda g: g["index"])]
    sock = os.path.join(tmp, "kubelet.sock")
    args = [f"ns-{k % 7}/pod-{k}/main={uuids[k % ngpus]}::{k // ngpus}" for k in range(npods)]
    args.append("alloc:nvidia.com/gpu=" + ",".join(f"{u}::{r}" for u in uuids for r in range(16)))
    fake = subprocess.Popen([os.path.join(build, "tests/exporter/fake-podresources"), sock] + args,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    helpers.append(fake)
    if fake.stdout.readline() != "ready\n":
        sys.exit("fake-podresources did not start")
    proc = os.path.join(tmp, "proc")
    henv = dict(env, LD_LIBRARY_PATH=os.path.join(build, "src/emu"))
    for k in range(npods):
        h = subprocess.Popen([os.path.join(build, "tests/emu/emu-hold"), str(k % ngpus), "16"],
                             env=henv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        helpers.append(h)
        if not h.stdout.readline().startswith("ready"):
            sys.exit("emu-hold did not start")
        os.makedirs(os.path.join(proc, str(h.pid)))
        with open(os.path.join(proc, str(h.pid), "cgroup"), "w") as f:
            f.write("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                    f"0b6c4a3e_{k:04d}_4c2a_9d5e_000000000000.slice/cri-containerd-"
                    f"{k:064x}.scope\n")
    agent = os.path.join(tmp, "agent")
    os.makedirs(agent)
    with open(os.path.join(agent, "acceld-stats.json"), "w") as f:
        b = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
        json.dump({"version": 2, "startTime": time.time(), "writeTime": time.time() + 3600,
                   "deviceInit": {"ok": ngpus, "failed": 0}, "allocateBuckets": b,
                   "resources": [{"name": "nvidia.com/gpu",
                                  "registrations": {"ok": 1, "failed": 0},
                                  "allocate": {"ok": npods, "error": 0, "sum": 0.1,
                                               "buckets": [npods] * len(b)}}],
                   "gpus": [{"index": i, "uuid": u, "toUnhealthy": 0, "toHealthy": 0,
                             "mpsRestarts": 0, "healthy": True, "reason": "", "mps": "none"}
                            for i, u in enumerate(uuids)],
                   "quotaFindings": {k: {"none": 0, "kill": 0, "freeze": 0}
                                     for k in ("memory", "under_report", "compute")}}, f)
    extra = ["--pod-resources-socket", sock, "--proc-root", proc, "--state-dir", agent,
             "--cost-currency", "USD", "--cost-gpu-hour-price", "nvidia.com/gpu=2.5"]
p = subprocess.Popen([os.path.join(build, "src/exporter/accel-exporter"), "--listen",
                      f"127.0.0.1:{port}", "--interval", "100ms"] + extra, env=env)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
deadline = time.monotonic() + 30
while True:
    try:
        c.request("GET", "/healthz")
        r = c.getresponse()
        r.read()
        if r.status == 200:
            break
    except OSError:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    if time.monotonic() > deadline:
        sys.exit("exporter did not become healthy")
    time.sleep(0.05)


def cpu_ticks():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


if npods:
    # wait until every pod's container has its series (cgroups read) and its GPU-seconds
    # (pod-resources asked). Twelve time-sliced containers per GPU leave the names empty
    # (docs/exporter.md, "Pod and container names"): pod_uid tells them apart.
    deadline = time.monotonic() + 60
    while True:
        c.request("GET", "/metrics")
        lines = c.getresponse().read().decode().splitlines()
        ctrs = sum(1 for l in lines if l.startswith("accel_container_gpu_memory_used_bytes{"))
        alloc = sum(1 for l in lines if l.startswith("accel_pod_gpu_allocated_seconds_total{"))
        if ctrs >= npods and alloc >= npods:
            break
        if time.monotonic() > deadline:
            for h in helpers + [p]:
                h.kill()
            sys.exit(f"after 60 s: {ctrs} containers, {alloc} allocations of {npods} pods")
        time.sleep(0.2)
t0 = cpu_ticks()
lat = []
size = 0
for _ in range(n):
    a = time.perf_counter()
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    lat.append(time.perf_counter() - a)
    size = len(body)
t1 = cpu_ticks()
st = dict(l.split(":", 1) for l in open(f"/proc/{p.pid}/status").read().splitlines() if ":" in l)
p.terminate()
p.wait()
for h in helpers:
    h.stdin.close()
    h.wait()
lat.sort()
hz = os.sysconf("SC_CLK_TCK")
print(f"GPUs {ngpus}, pods {npods}, {path}: scrapes {n}, body {size} bytes")
print(f"scrape p50 {lat[n // 2] * 1e3:.3f} ms, p99 {lat[int(n * 0.99)] * 1e3:.3f} ms, "
      f"max {lat[-1] * 1e3:.3f} ms")
print(f"RSS {st['VmRSS'].strip()}, peak RSS {st['VmHWM'].strip()}")
print(f"exporter CPU per scrape {(t1 - t0) / hz / n * 1e6:.0f} us (sampler included)")
