#!/usr/bin/python3
"""acceld-vgpu.py — vGPU mode's costs on an emulated 8-GPU node (issue 10):

1. Allocate latency with 100 pods on the node: the fake API server
   (tests/kube/fake-apiserver.py) holds 100 pending pods (5 cores + 4 units
   each); once acceld's watch is in step, the python3-grpcio kubelet admits
   them one by one (cores then memory) and times each Allocate round trip.
   GetDevicePluginOptions, which does nothing, is timed on the same channel as
   the client's own floor; both are printed.
   acceld runs with its default vgpu.checkInterval (10 s) for this part, as
   on a node; acceld's own CPU time over the calls (utime + stime, in clock
   ticks) is printed too, as it does not depend on how busy the machine is.
2. The books' settling with the kubelet (issue 23) with the 100 containers: acceld
   restarted with a kubelet pod-resources server (tests/faults/faultlib.py) whose List
   names the 100 containers with the IDs the Allocates named; settled every 100 ms
   (vgpu.reconcileInterval) with the host-side check off; acceld's CPU over 5 s per
   settling, the List's round trip included, against the same acceld settling never
   (the floor).
3. The host-side check's CPU cost per pass with 100 containers: acceld is
   restarted (its checkpoint restores the 100 assignments) checking every
   100 ms; one emu-hold process per admitted pod (each in its pod's fake
   cgroup under --proc-root, holding 64 MiB); acceld's CPU time
   (/proc/<pid>/stat utime+stime) over 5 s divided by the passes in it. The
   same with no process running is the floor (idle loop, watch stream).

  /usr/bin/python3 bench/acceld-vgpu.py [BUILD_DIR]
  BENCH_TMPDIR=/dev/shm /usr/bin/python3 bench/acceld-vgpu.py [BUILD_DIR]   (no disk fsync)
"""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(SRC, "build"))
os.environ.setdefault("ACCEL_BUILD_ROOT", BUILD)
os.environ.setdefault("ACCEL_SOURCE_ROOT", SRC)
sys.path.insert(0, os.path.join(SRC, "tests/interop"))
import kubelet as K  # noqa: E402
sys.path.insert(0, os.path.join(SRC, "tests/faults"))
import faultlib as FL  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "vgpu_pods", os.path.join(SRC, "tests/interop/test-acceld-vgpu-pods.py"))
P = importlib.util.module_from_spec(spec)
spec.loader.exec_module(P)

N = 100
INTERVAL_S = 0.1
CORE, MEM = P.CORE, P.MEM


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ns_s(pid):
    """The process's CPU time in seconds from its threads' schedstat (ns, not clock ticks)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


def check_cost(agent, seconds=5.0):
    pid = agent.proc.pid
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_s(pid), time.monotonic()
    passes = (t1 - t0) / INTERVAL_S
    return (c1 - c0) / passes * 1e6  # µs of CPU per pass


def settle_cost(node, tmp, pdir, kc, held):
    """Part 2: acceld's CPU per settling of its books with the kubelet's List."""
    pr = FL.pod_resources_pb(SRC, tmp)
    sock = os.path.join(tmp, "podres.sock")
    live = [("default", f"b{i:03d}", "main", held[i]) for i in range(N)]
    server = FL.PodResources(pr, sock, lambda: live)
    try:
        cost = {}
        for label, every in (("floor", "0"), ("settling", "100ms")):
            d = os.path.join(tmp, "settle-" + label)
            os.makedirs(d, exist_ok=True)
            a = K.Acceld(BUILD, node, pdir, d,
                         extra=("--mode", "vgpu", "--no-register", "--kubeconfig", kc,
                                "--node-name", "node-a", "--state-dir", os.path.join(tmp, "state"),
                                "--vcuda-library", os.path.join(BUILD, "src/vcuda/libvcuda.so"),
                                "--pod-resources-socket", sock, "--vgpu-check-interval", "0",
                                "--vgpu-reconcile-interval", every))
            try:
                if not K.wait_until(lambda: "pod watch is in step" in a.log_text(), 30):
                    raise RuntimeError("acceld's watch never got in step")
                time.sleep(1)  # the start's settling is done
                c0, t0 = cpu_ns_s(a.proc.pid), time.monotonic()
                time.sleep(5)
                c1, t1 = cpu_ns_s(a.proc.pid), time.monotonic()
                cost[label] = (c1 - c0) / (t1 - t0)
                if label == "settling" and "settling the books" in a.log_text():
                    raise RuntimeError("a settling failed")
            finally:
                a.stop(signal.SIGTERM)
        per = (cost["settling"] - cost["floor"]) / 10 * 1e6
        print(f"books settled with the kubelet's List of {N} containers every 100 ms: "
              f"{per:.0f} us of acceld CPU per settling (List round trip included; "
              f"{cost['settling'] * 1e3:.2f} ms/s settling, {cost['floor'] * 1e3:.2f} ms/s "
              f"floor)")
    finally:
        server.stop()


def start(node, tmp, pdir, kc, sub, interval):
    """acceld in vGPU mode as the pods test starts it, with this check interval."""
    return P.start_acceld(BUILD, node, tmp, pdir, kc, sub, interval)


def main():
    # BENCH_TMPDIR=/dev/shm: the state dir (checkpoint, per-container files) on tmpfs, so
    # the figures show acceld's own cost without the disk's fsync
    sys.path.insert(0, os.path.join(SRC, "tests/lib"))
    import mountns
    mountns.private()  # the containers' tmpfs region dirs go with this process
    tmp = tempfile.mkdtemp(prefix="acceld-", dir=os.environ.get("BENCH_TMPDIR", "/tmp"))
    pb = K.gen_pb2(SRC, os.path.join(tmp, "pb"))
    node = K.Node(BUILD, tmp, gpus=8)
    api = P.ApiServer(SRC, tmp)
    kc = os.path.join(tmp, "kubeconfig")
    api.kubeconfig(kc)
    pdir = os.path.join(tmp, "dp")
    os.makedirs(pdir)
    holds = []
    agent = None
    try:
        for i in range(N):
            api.add_pod(f"b{i:03d}", 5, 4, f"2026-01-01T01:{i // 60:02d}:{i % 60:02d}Z",
                        uid=f"0b6c4a3e-{i:04d}-4c2a-9d5e-000000000000")
        agent = start(node, tmp, pdir, kc, "bench", "10s")
        socks = {CORE: os.path.join(pdir, "accel-tencent.com-vcuda-core.sock"),
                 MEM: os.path.join(pdir, "accel-tencent.com-vcuda-memory.sock")}
        if not K.wait_until(lambda: "pod watch is in step" in agent.log_text(), 30):
            raise RuntimeError("acceld's watch never got in step")
        lists = P.lists_of(pb, socks)
        kub = P.Kubelet(pb, socks[CORE], socks[MEM], lists)
        kub.rng.random = lambda: 1.0  # no GetPreferredAllocation: Allocate alone is timed
        # the kubelet's connections to the two endpoints are long-lived: both are warm
        # before the first Allocate (the floor alternates between them)
        floor = []
        for k in range(300):
            plug = kub.plugins[CORE if k % 2 else MEM]
            t = time.perf_counter()
            plug.options()
            floor.append((time.perf_counter() - t) * 1e6)
        lat = []
        gpus = {}
        held = {}  # pod index -> {resource: [IDs]}, for the pod-resources List of part 2
        cpu0 = cpu_s(agent.proc.pid)
        for i in range(N):
            for res, n in ((CORE, 5), (MEM, 4)):
                before = set(kub.free[res])
                t = time.perf_counter()
                r = kub.allocate(res, n)
                lat.append((time.perf_counter() - t) * 1e6)
                held.setdefault(i, {})[res] = sorted(before - set(kub.free[res]))
                if res == CORE:
                    gpus[i] = r.envs["NVIDIA_VISIBLE_DEVICES"]
        cpu_alloc = (cpu_s(agent.proc.pid) - cpu0) / len(lat) * 1e6
        print(f"Allocate round trip, {N} pods pending then admitted ({len(lat)} calls): "
              f"p50 {pct(lat, 0.5):.0f} us, p99 {pct(lat, 0.99):.0f} us, max {max(lat):.0f} us")
        slow = sorted(range(len(lat)), key=lambda k: -lat[k])[:4]
        print("slowest calls (index: us): " + ", ".join(f"{k}: {lat[k]:.0f}" for k in slow))
        print(f"acceld CPU per Allocate (utime + stime over the {len(lat)} calls; "
              f"clock ticks of {1e6 / os.sysconf('SC_CLK_TCK'):.0f} us): {cpu_alloc:.0f} us")
        print(f"GetDevicePluginOptions round trip (the Python client's floor): "
              f"p50 {pct(floor, 0.5):.0f} us, p99 {pct(floor, 0.99):.0f} us")
        # acceld's own view of the same calls (its SLI histogram: from a request's arrival to
        # its answer, so the client's and the socket's time are out of it); the file is
        # rewritten at most once a second, and at exit
        kub.close()
        agent.stop(signal.SIGTERM)
        with open(os.path.join(tmp, "state", "acceld-stats.json")) as f:
            stats = json.load(f)
        bounds = stats["allocateBuckets"]
        for r in stats["resources"]:
            a = r["allocate"]
            n = a["ok"] + a["error"]
            if not n or "vcuda" not in r["name"]:
                continue
            within = {b: c for b, c in zip(bounds, a["buckets"])}
            print(f"acceld's own Allocate time, {r['name']} ({n} calls): mean "
                  f"{a['sum'] / n * 1e6:.0f} us, <= 0.5 ms {within[0.0005] / n:.1%}, "
                  f"<= 1 ms {within[0.001] / n:.1%}, <= 2.5 ms {within[0.0025] / n:.1%}")
        settle_cost(node, tmp, pdir, kc, held)
        agent = start(node, tmp, pdir, kc, "bench-check", "100ms")
        if not K.wait_until(lambda: "100 assignment(s) restored" in agent.log_text(), 30):
            raise RuntimeError("the restarted acceld did not restore the 100 assignments")
        if not K.wait_until(lambda: "pod watch is in step" in agent.log_text(), 30):
            raise RuntimeError("acceld's watch never got in step")
        idle = check_cost(agent)
        out = subprocess.run([node.emu, "status", "--json"], env=node.env, check=True,
                             capture_output=True, text=True).stdout
        index = {g["uuid"]: g["index"] for g in json.loads(out)["gpus"]}
        env = dict(node.env, LD_LIBRARY_PATH=os.path.join(BUILD, "src/emu"))
        hold = os.path.join(BUILD, "tests/emu/emu-hold")
        for i in range(N):
            h = subprocess.Popen([hold, str(index[gpus[i]]), "64"], env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            h.stdout.readline()
            d = os.path.join(tmp, "proc", str(h.pid))
            os.makedirs(d, exist_ok=True)
            uid = f"0b6c4a3e-{i:04d}-4c2a-9d5e-000000000000"
            with open(os.path.join(d, "cgroup"), "w") as f:
                f.write("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                        f"{uid.replace('-', '_')}.slice/cri-containerd-{'c' * 64}.scope\n")
            holds.append(h)
        busy = check_cost(agent)
        print(f"host-side check, acceld CPU per pass (every {INTERVAL_S * 1000:.0f} ms): "
              f"{busy:.0f} us with {N} containers each running a process, "
              f"{idle:.0f} us with none running (floor)")
        st = json.load(open(os.path.join(tmp, "state", "vgpu", "status.json")))
        seen = sum(1 for a in st["assignments"] if a.get("nvmlProcesses") == 1)
        print(f"(the last pass saw {seen} of {N} containers with their process)")
    finally:
        for h in holds:
            if h.poll() is None:
                h.stdin.close()
                h.wait()
        if agent and agent.alive():
            agent.stop(signal.SIGTERM)
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
