#!/usr/bin/python3
"""bench/exporter.py — accel-exporter scrape latency and memory on an emulated node.

Usage: /usr/bin/python3 bench/exporter.py [BUILD_DIR] [GPUS] [SCRAPES] [PATH]
(defaults build, 8, 3000, /metrics; PATH / times the status page instead). Makes an emulated machine with GPUS GPUs, starts the exporter
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
p = subprocess.Popen([os.path.join(build, "src/exporter/accel-exporter"), "--listen",
                      f"127.0.0.1:{port}", "--interval", "100ms"], env=env)
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
lat.sort()
hz = os.sysconf("SC_CLK_TCK")
print(f"GPUs {ngpus}, {path}: scrapes {n}, body {size} bytes")
print(f"scrape p50 {lat[n // 2] * 1e3:.3f} ms, p99 {lat[int(n * 0.99)] * 1e3:.3f} ms, "
      f"max {lat[-1] * 1e3:.3f} ms")
print(f"RSS {st['VmRSS'].strip()}, peak RSS {st['VmHWM'].strip()}")
print(f"exporter CPU per scrape {(t1 - t0) / hz / n * 1e6:.0f} us (sampler included)")
