#!/usr/bin/python3
"""test-acceld-vgpu-pods.py — vGPU mode end to end on an emulated 2-GPU node:
the fake API server (tests/kube/fake-apiserver.py: HTTPS, bearer token, pods
as `kubectl get pod -o json` prints them, watch streams), acceld with
`--mode vgpu --kubeconfig`, and the python3-grpcio kubelet admitting pods the
way the kubelet does (per container, per resource, random resource order, IDs
of its own choosing from its own free pool, after GetPreferredAllocation for
about half the calls and with the IDs it names, as the kubelet skips it on
some paths).

- Two pods share one GPU (binpack): 30 cores + 16 units (4 GiB) and 70 cores
  + 32 units (8 GiB); each container's config carries its own quota; only the
  cores response names the GPU (the memory response is empty); the assignment
  is PATCHed on the pod as an annotation naming the GPU.
- A pod that fits nowhere gets an Allocate error naming the largest fit.
- The watch cache lags: an Allocate for a pod the API server has not shown
  yet waits (acceld parks the call; the loop goes on) and is answered once the
  pod arrives; one for a pod that never comes is refused after allocateWait.
- 50 pods with the same request admitted back to back: each matched oldest
  first, each with its own directory.
- acceld killed with SIGKILL between a container's two Allocates: the kubelet's
  second call found no acceld and failed the pod; the restarted acceld frees the
  half share and refuses (after allocateWait) a later call meant for it.
- The API server gone: a new pod's Allocate fails saying so.
- The host-side check (vgpu.overQuotaAction kill): a process of an admitted
  pod (emu-hold, no libvcuda, its /proc/<pid>/cgroup faked under --proc-root)
  holding more than the pod's quota is killed and the log names pod, GPU,
  usage and quota; one within its quota is left running; `accelctl vgpu` shows
  the quota and usage of each container and the finding; the finding is one
  Warning Event (VGPUOverQuota) on the pod, valid for kubernetes-models.
- The container run for real (when `unshare -m` works here): every mount of
  the Allocate response bind-mounted onto its container path in a private
  mount namespace, the env applied, and cuda-demo on the emulator sees exactly
  the pod's 4 GiB, is refused past it and gets its 30 % of the GPU's time
  (libvcuda's pacing, event-measured GPU time over wall time, within 5
  points); a tenant raising VCUDA_MEMORY_LIMIT / VCUDA_CORE_LIMIT in its env
  gets the same.

Every wait is bounded; nothing asserts timing."""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet as K  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import fakeapi  # noqa: E402
import mountns  # noqa: E402

import grpc  # noqa: E402

T = 20
TOKEN = "vgpu-test-token"
CORE = "tencent.com/vcuda-core"
MEM = "tencent.com/vcuda-memory"


class ApiServer(fakeapi.ApiServer):
    def __init__(self, src, tmp):
        super().__init__(src, tmp, token=TOKEN, node="node-a", timeout=T)

    def add_pod(self, name, cores, mem, created, uid=None):
        return self.add_vgpu_pod(name, cores, mem, created, uid)


class Kubelet:
    """The kubelet's side of admission: its own free pool per resource, one
    Allocate per container per resource in random order."""

    def __init__(self, pb, core_sock, mem_sock, lists):
        self.plugins = {CORE: K.Plugin(pb, core_sock), MEM: K.Plugin(pb, mem_sock)}
        self.free = {r: sorted(ids) for r, ids in lists.items()}
        self.rng = random.Random(10)
        self.preferred = 0  # Allocates made with GetPreferredAllocation's IDs

    def allocate(self, res, n):
        ids = self.rng.sample(self.free[res], n)
        if self.rng.random() < 0.5:
            try:
                got = list(self.plugins[res].prefer(self.free[res], size=n, timeout=10)
                           .container_responses[0].deviceIDs)
                if len(got) == n and all(i in self.free[res] for i in got):
                    ids = got
                    self.preferred += 1
            except grpc.RpcError:
                pass
        resp = self.plugins[res].allocate(ids, timeout=10)
        for i in ids:
            self.free[res].remove(i)
        return resp.container_responses[0]

    def admit(self, cores, mem, order=None):
        """Returns {resource: response} or raises grpc.RpcError."""
        wants = [(CORE, cores), (MEM, mem)]
        if order is None:
            self.rng.shuffle(wants)
        elif order == "mem-first":
            wants.reverse()
        return {r: self.allocate(r, n) for r, n in wants if n}

    def when_seen(self, fn, *args):
        """fn(*args), retried while acceld's watch has not delivered the pod
        yet (a refused first Allocate changes nothing); bounded by T."""
        last = [None]

        def attempt():
            try:
                last[0] = fn(*args)
                return True
            except grpc.RpcError as e:
                if "no pending pod" not in e.details():
                    raise
                return False
        if not K.wait_until(attempt, T, step_s=0.02):
            raise RuntimeError("acceld never saw the pod")
        return last[0]

    def close(self):
        for p in self.plugins.values():
            p.close()


def start_acceld(build, node, tmp, pdir, kubeconfig, sub, interval="100ms"):
    """acceld in vGPU mode against the fake API server; the host-side check every interval
    (bench/acceld-vgpu.py starts it too)."""
    d = os.path.join(tmp, sub)
    os.makedirs(d, exist_ok=True)
    return K.Acceld(build, node, pdir, d,
                    extra=("--mode", "vgpu", "--no-register", "--kubeconfig", kubeconfig,
                           "--node-name", "node-a", "--state-dir", os.path.join(tmp, "state"),
                           "--vcuda-library", os.path.join(build, "src/vcuda/libvcuda.so"),
                           "--pod-resources-socket", os.path.join(tmp, "none.sock"),
                           "--proc-root", os.path.join(tmp, "proc"),
                           "--vgpu-check-interval", interval, "--allocate-wait", "2s",
                           "--vgpu-over-quota-action", "kill",
                           "--vgpu-compute-action", "freeze", "--vgpu-freeze-period", "400ms",
                           "--vgpu-cgroup-root", os.path.join(tmp, "cgroup")))


def lists_of(pb, socks):
    out = {}
    for r, s in socks.items():
        w = K.Plugin(pb, s).watch()
        u = w.wait_for(lambda x: len(x) > 0, T)
        w.cancel()
        out[r] = list(u or {})
    return out


def harness(body, gpus=3):
    """The vGPU end-to-end setting, shared with test-acceld-tenant.py: the skips, an emulated
    node of gpus GPUs, the fake API server and its kubeconfig, the plugin dir; then
    body(tap, build, pb, node, api, kc, tmp, pdir, agents), and whatever happened the acceld
    processes in agents killed, their logs when a case failed, the temp dir removed and the
    TAP plan printed."""
    build, src = K.build_paths()
    K.require_tools(build)
    if not K.Node.available(build):
        K.skip_all("the emulator is not built")
    if not os.path.exists(os.path.join(src, "tests/kube/fake-apiserver.py")):
        K.skip_all("no fake API server (src/kube not merged)")
    if not os.path.isfile(os.path.join(build, "src/modes/libaccel-modes-vgpukube.a")):
        K.skip_all("acceld is built without the Kubernetes client (libcurl missing)")
    if shutil.which("openssl") is None:
        K.skip_all("openssl CLI missing (the fake API server makes its certificates with it)")
    tap = K.Tap()
    tmp = K.tmpdir()
    pb = K.gen_pb2(src, os.path.join(tmp, "pb"))
    node = K.Node(build, tmp, gpus=gpus, numa=",".join(["0"] * gpus))
    api = ApiServer(src, tmp)
    kc = os.path.join(tmp, "kubeconfig")
    api.kubeconfig(kc)
    pdir = os.path.join(tmp, "dp")
    os.makedirs(pdir)
    agents = []
    try:
        body(tap, build, pb, node, api, kc, tmp, pdir, agents)
    finally:
        for a in agents:
            if a.alive():
                a.stop(signal.SIGKILL)
        api.stop()
        if tap.failed:
            for a in agents:
                tap.diag("acceld log:\n" + a.log_text()[-4000:])
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


def main():
    harness(run)


def config_of(resp):
    for m in resp.mounts:
        if m.container_path == "/etc/vcuda/config":
            with open(m.host_path) as f:
                return f.read()
    return None


def primary(r):
    return r[CORE] if CORE in r else r[MEM]


def run(tap, build, pb, node, api, kc, tmp, pdir, agents):
    api.add_pod("a", 30, 16, "2026-01-01T00:00:01Z")
    api.add_pod("b", 70, 32, "2026-01-01T00:00:02Z")
    api.add_pod("huge", 10, 100000, "2026-01-01T00:00:03Z")
    agent = start_acceld(build, node, tmp, pdir, kc, "one")
    agents.append(agent)
    socks = {CORE: os.path.join(pdir, "accel-tencent.com-vcuda-core.sock"),
             MEM: os.path.join(pdir, "accel-tencent.com-vcuda-memory.sock")}
    if not tap.ok(K.wait_until(lambda: all(os.path.exists(s) for s in socks.values()), T),
                  "acceld serves both vGPU resources"):
        return
    synced = K.wait_until(lambda: "pod watch is in step" in agent.log_text(), T)
    tap.ok(synced, "acceld's pod watch is in step with the API server")
    lists = lists_of(pb, socks)
    kubelet = Kubelet(pb, socks[CORE], socks[MEM], lists)

    # ---- two pods share one GPU, each with its own quota
    ra = kubelet.admit(30, 16)
    rb = kubelet.admit(70, 32, order="mem-first")
    vis = {n: {r.envs.get("NVIDIA_VISIBLE_DEVICES") for r in x.values()}
           for n, x in (("a", ra), ("b", rb))}
    tap.ok(all(primary(x).envs.get("NVIDIA_VISIBLE_DEVICES") and
               x[MEM].envs.get("NVIDIA_VISIBLE_DEVICES") is None and not x[MEM].mounts and
               not x[MEM].devices for x in (ra, rb)),
           "NVIDIA_VISIBLE_DEVICES, the mounts and device nodes come with the cores response "
           "alone (the memory response is empty: the kubelet keeps either of two values)", vis)
    vis = {n: {primary(x).envs.get("NVIDIA_VISIBLE_DEVICES")} for n, x in (("a", ra), ("b", rb))}
    tap.ok(vis["a"] == vis["b"], "binpack: both pods on the same GPU", vis)
    ca, cb = config_of(primary(ra)), config_of(primary(rb))
    tap.ok(ca and "memory_limit = 4294967296\n" in ca and "core_limit = 30\n" in ca,
           "pod a's config: 4 GiB, 30 %", ca)
    tap.ok(cb and "memory_limit = 8589934592\n" in cb and "core_limit = 70\n" in cb,
           "pod b's config: 8 GiB, 70 %", cb)
    gpu = next(iter(vis["a"]))

    def annotated():
        try:
            p = api.call("GET", "/api/v1/namespaces/default/pods/a")
        except Exception:  # noqa: BLE001
            return False
        return p["metadata"].get("annotations", {}).get("accel.dev/vgpu-main") == gpu
    tap.ok(K.wait_until(annotated, T), "the assignment is PATCHed on the pod, naming the GPU")

    # ---- fits nowhere
    try:
        kubelet.admit(10, 100000)
        tap.ok(False, "a pod that fits nowhere is refused")
    except grpc.RpcError as e:
        tap.ok("largest fit" in e.details() and "default/huge" in e.details(),
               "a pod that fits nowhere: the error names the pod and the largest fit",
               e.details())

    # ---- the watch cache lags: the Allocate waits (off the loop) for the pod
    # (2 cores: the 200 of the two GPUs are all handed out by the end of the test)
    late = {}

    def admit_late():
        try:
            late["r"] = kubelet.admit(2, 3, order="core-first")
        except grpc.RpcError as e:
            late["e"] = e.details()
    th = threading.Thread(target=admit_late)
    th.start()
    # acceld has the call parked when its log says so; the pod arrives after
    parked = K.wait_until(lambda: "waits for its pod" in agent.log_text(), T)
    api.add_pod("late", 2, 3, "2026-01-01T00:00:05Z")
    th.join(T)
    cl = config_of(primary(late["r"])) if "r" in late else None
    tap.ok(parked and cl and "core_limit = 2\n" in cl,
           "a pod that reaches the watch cache after its Allocate: the Allocate waits and is "
           "answered for it", (late.get("e"), cl))
    try:
        kubelet.allocate(CORE, 17)
        tap.ok(False, "a pod that never arrives: refused after allocateWait")
    except grpc.RpcError as e:
        tap.ok("no pending pod" in e.details() and "exactly 17 vcuda-core" in e.details(),
               "a pod that never arrives: refused after allocateWait, saying why", e.details())

    # ---- the kubelet gives up on a parked Allocate (its deadline passes: gRPC cancels the
    # call): acceld drops it, and the pod that arrives afterwards is not taken by it
    ids = kubelet.free[CORE][:19]
    try:
        kubelet.plugins[CORE].allocate(ids, timeout=0.3)
        tap.ok(False, "a parked Allocate the kubelet cancels: the kubelet sees its deadline")
    except grpc.RpcError as e:
        tap.ok(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED,
               "a parked Allocate the kubelet cancels: the kubelet sees its deadline", e.code())
    api.add_pod("after", 19, 2, "2026-01-01T00:00:06Z")
    time.sleep(0.5)  # ~25 of the parked call's retries, were it still parked
    tap.ok(not os.path.exists(os.path.join(tmp, "state", "vgpu", "uid-after")) and
           agent.alive(), "the cancelled call is dropped: the pod that arrives is not assigned "
           "to it, and acceld lives on")
    r = kubelet.when_seen(kubelet.admit, 19, 2)
    cf = config_of(primary(r))
    tap.ok(cf and "core_limit = 19\n" in cf,
           "the pod's own Allocates are answered for it afterwards", cf)

    # ---- 50 pods with the same request, admitted back to back: each Allocate
    # pair goes to the oldest unassigned one, each gets its own directory
    for i in range(50):
        api.add_pod(f"p{i:02d}", 1, 2, f"2026-01-01T00:01:{i:02d}Z")
    got = []
    for i in range(50):
        try:
            r = kubelet.when_seen(kubelet.admit, 1, 2)
            host = next((m.host_path for m in primary(r).mounts
                         if m.container_path == "/etc/vcuda/config"), "")
            got.append(host.split("/")[-3] if host else "")
        except (grpc.RpcError, RuntimeError) as e:
            got.append(f"error: {e}")
    tap.ok(got == [f"uid-p{i:02d}" for i in range(50)],
           "50 identical pods back to back: matched oldest first, one directory each", got[:5])
    tap.ok(kubelet.preferred > 10, "GetPreferredAllocation answered with free IDs of the right "
           "size, and Allocates with those IDs succeed", kubelet.preferred)

    # ---- SIGKILL between a container's two Allocates: the real kubelet's second call finds
    # no acceld and fails the pod for good (it never calls again). The restarted acceld frees
    # the half share and does not take the next call of that size for d's (issue 23)
    api.add_pod("d", 20, 8, "2026-01-01T00:00:04Z")
    kubelet.when_seen(kubelet.allocate, CORE, 20)
    d_dir = os.path.join(tmp, "state", "vgpu", "uid-d")
    had_dir = os.path.isdir(d_dir)
    agent.stop(signal.SIGKILL)
    agent2 = start_acceld(build, node, tmp, pdir, kc, "two")
    agents.append(agent2)
    ok = K.wait_until(lambda: "pod watch is in step" in agent2.log_text(), T)
    for p in kubelet.plugins.values():
        p.close()
    kubelet.plugins = {CORE: K.Plugin(pb, socks[CORE]), MEM: K.Plugin(pb, socks[MEM])}
    freed = K.wait_until(lambda: not os.path.exists(d_dir), T)
    try:
        kubelet.allocate(MEM, 8)
        refused = None
    except grpc.RpcError as e:
        refused = e.details()
    tap.ok(ok and had_dir and freed and refused and "no pending pod" in refused,
           "kill -9 between the two Allocates: the restarted acceld frees the half share and "
           "takes no later call for the failed pod's", (had_dir, freed, refused))
    api.call("POST", "/_fake/pod", {"op": "modify", "name": "d", "phase": "Failed"})

    # ---- the container, for real
    ran = container_run(tap, build, node, ra)

    # ---- the host-side check catches a process that bypasses libvcuda
    host_check(tap, build, node, api, kubelet, agent2, tmp)

    # ---- accel-exporter reads acceld's status.json and the container's region
    exporter_reads(tap, build, node, tmp, ra, ran)

    # ---- the API server gone: refused, saying so
    api.add_pod("e", 5, 4, "2026-01-01T00:00:05Z")
    api.stop()
    K.wait_until(lambda: "not in step" in agent2.log_text(), T)
    try:
        kubelet.admit(5, 4)
        tap.ok(False, "API server down: Allocate refused")
    except grpc.RpcError as e:
        tap.ok("API server" in e.details() and "does not guess" in e.details(),
               "API server down: Allocate refused, saying so", e.details())
    kubelet.close()
    tap.ok(agent2.stop() == 0, "acceld exits 0 on SIGTERM")


def host_check(tap, build, node, api, kubelet, agent, tmp):
    hold = os.path.join(build, "tests/emu/emu-hold")
    if not os.path.exists(hold):
        tap.skip("host-side check", "tests/emu/emu-hold is not built")
        return
    out = subprocess.run([node.emu, "status", "--json"], env=node.env, check=True,
                         capture_output=True, text=True).stdout
    index = {g["uuid"]: g["index"] for g in json.loads(out)["gpus"]}
    env = dict(node.env, LD_LIBRARY_PATH=os.path.join(build, "src/emu"))
    holds = {}
    # x: 1 unit (256 MiB) holding 512 MiB; y: 8 units (2 GiB) holding 64 MiB
    for name, cores, units, mib, n in (("x", 11, 1, 512, 6), ("y", 12, 8, 64, 7)):
        uid = f"0b6c4a3e-{n}{n}{n}{n}-4c2a-9d5e-00000000000{n}"
        api.add_pod(name, cores, units, f"2026-01-01T00:00:0{n}Z", uid=uid)
        r = kubelet.when_seen(kubelet.admit, cores, units)
        gpu = primary(r).envs.get("NVIDIA_VISIBLE_DEVICES")
        h = subprocess.Popen([hold, str(index[gpu]), str(mib)], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        line = h.stdout.readline()
        d = os.path.join(tmp, "proc", str(h.pid))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "cgroup"), "w") as f:
            f.write("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                    f"{uid.replace('-', '_')}.slice/cri-containerd-{'c' * 64}.scope\n")
        holds[name] = (h, line, gpu)
    hx, lx, gx = holds["x"]
    hy, ly, _ = holds["y"]
    tap.ok(lx.startswith("ready") and ly.startswith("ready"), "emu-hold processes started",
           (lx, ly))
    killed = K.wait_until(lambda: hx.poll() is not None, T)
    tap.ok(killed and hx.returncode == -signal.SIGKILL,
           "host-side check: the process over its pod's quota is killed (SIGKILL)", hx.returncode)
    logged = K.wait_until(lambda: "default/x container main on GPU " + gx in agent.log_text()
                          and "over its quota of 270532608" in agent.log_text(), T)
    tap.ok(logged, "the log line names pod, container, GPU, usage and quota",
           [ln for ln in agent.log_text().splitlines() if "vGPU check" in ln][-3:])
    tap.ok(hy.poll() is None, "a process within its quota is left running")
    stats = os.path.join(tmp, "state", "acceld-stats.json")

    def killed_counted():
        try:
            with open(stats) as f:
                return json.load(f)["quotaFindings"]["memory"]["kill"] >= 1
        except (OSError, ValueError, KeyError):
            return False
    tap.ok(K.wait_until(killed_counted, T, 0.05),
           "SLI file: the over-quota finding counted as memory/kill")
    accelctl_vgpu(tap, build, tmp, gx)
    events_posted(tap, api, tmp)
    for h, _, _ in holds.values():
        if h.poll() is None:
            h.stdin.close()
            h.wait(timeout=T)
        h.stdout.close()
    duty_cycle(tap, build, node, api, kubelet, agent, tmp, index)


def duty_cycle(tap, build, node, api, kubelet, agent, tmp, index):
    """vgpu.computeAction freeze: a container of 20 cores whose process keeps its GPU busy
    (tests/emu/spin, one 60 s kernel) is duty-cycled: its cgroup.freeze (a file under a fake
    cgroup root here: nothing really stops) goes 1, 0, 1 ... frozen 80 % of each 400 ms period,
    and the finding says so; once the process is gone the cycle ends, thawed."""
    spin = os.path.join(build, "tests/emu/spin")
    if not os.path.exists(spin):
        tap.skip("duty cycle", "tests/emu/spin is not built")
        return
    uid = "0b6c4a3e-8888-4c2a-9d5e-000000000008"
    api.add_pod("z", 20, 2, "2026-01-01T00:00:08Z", uid=uid)
    r = kubelet.when_seen(kubelet.admit, 20, 2)
    gpu = primary(r).envs.get("NVIDIA_VISIBLE_DEVICES")
    cg = (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
          f"{uid.replace('-', '_')}.slice/cri-containerd-{'d' * 64}.scope")
    freeze = os.path.join(tmp, "cgroup") + cg + "/cgroup.freeze"
    os.makedirs(os.path.dirname(freeze), exist_ok=True)
    with open(freeze, "w") as f:
        f.write("0\n")
    env = dict(node.env, LD_LIBRARY_PATH=os.path.join(build, "src/emu"))
    p = subprocess.Popen([spin, "60000", "--device", str(index[gpu])], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d = os.path.join(tmp, "proc", str(p.pid))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "cgroup"), "w") as f:
        f.write(f"0::{cg}\n")

    def state():
        with open(freeze) as f:
            return f.read(1)
    seen = []
    deadline = time.monotonic() + T
    while time.monotonic() < deadline and seen[-3:] != ["1", "0", "1"]:
        v = state()
        if not seen or seen[-1] != v:
            seen.append(v)
        time.sleep(0.01)
    tap.ok(seen[-3:] == ["1", "0", "1"], "over its share: the container's cgroup is frozen, "
           "thawed and frozen again (a duty cycle)", seen)
    logged = K.wait_until(lambda: "duty-cycled: frozen 80.0 %" in agent.log_text(), T)
    tap.ok(logged, "the finding says how much of each period it is frozen",
           [ln for ln in agent.log_text().splitlines() if "vGPU check" in ln][-2:])
    # frozen about 80 % of the time: sample it for 2 s
    t_end, frozen, total = time.monotonic() + 2, 0, 0
    while time.monotonic() < t_end:
        frozen += state() == "1"
        total += 1
        time.sleep(0.005)
    tap.ok(total and 0.65 <= frozen / total <= 0.92, "frozen about 80 % of the time",
           round(frozen / max(total, 1), 2))
    p.kill()
    p.wait()
    # the GPU idle for 2 s (VGPU_CHECK_IDLE_US): the cycle ends; thawed for good, so the
    # file stays 0 for more than a period
    since = [time.monotonic()]

    def thawed_for_good():
        if state() != "0":
            since[0] = time.monotonic()
        return time.monotonic() - since[0] > 1.0
    ended = K.wait_until(thawed_for_good, 15, 0.01)
    tap.ok(ended, "the process gone: the cycle ends, thawed")


def accelctl_vgpu(tap, build, tmp, gpu):
    """`accelctl vgpu` reads what the host-side check saw: the finding stays among the recent
    ones after its process is gone, and y's quota and NVML usage are shown side by side."""
    exe = os.path.join(build, "src/cli/accelctl")
    if not os.path.exists(exe):
        tap.skip("accelctl vgpu", "accelctl is not built")
        return
    cmd = [exe, "vgpu", "--state-dir", os.path.join(tmp, "state")]
    seen = {}

    def shows():
        p = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=T)
        if p.returncode != 0:
            return False
        st = json.loads(p.stdout)
        seen["json"] = st
        ys = [a for a in st["assignments"] if a["pod"] == "y"]
        return (any(f["kind"] == "overQuota" and f["pod"] == "x" and "killed" in f["action"]
                    for f in st["recentFindings"])
                and ys and ys[0].get("nvmlProcesses") == 1)
    ok = K.wait_until(shows, T)
    tap.ok(ok, "accelctl vgpu --json: x's over-quota finding (killed) and y's NVML usage",
           json.dumps(seen.get("json"))[-2000:])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=T)
    out = p.stdout
    tap.ok(p.returncode == 0 and f"GPU {gpu} (healthy): cores " in out
           and "default/y main: quota 12 cores, 2 GiB memory; usage: region none, NVML " in out
           and "(1 process)" in out and "overQuota default/x: container main on GPU" in out,
           "accelctl vgpu: shares per GPU, y's quota and usage, x's finding", out)


def events_posted(tap, api, tmp):
    """The finding is a Warning Event on x's pod, posted once however many passes see it, and
    the Event the API server got is a valid core/v1 Event (kubernetes-models)."""
    def of_x():
        return [e for e in api.call("GET", "/_fake/events")
                if e.get("reason") == "VGPUOverQuota"
                and e.get("involvedObject", {}).get("name") == "x"]
    got = K.wait_until(lambda: len(of_x()) > 0, T)
    evs = of_x()
    e = evs[0] if evs else {}
    tap.ok(got and e.get("type") == "Warning"
           and e["involvedObject"].get("uid") == "0b6c4a3e-6666-4c2a-9d5e-000000000006"
           and e["involvedObject"].get("kind") == "Pod"
           and "container main on GPU" in e.get("message", "")
           and "killed" in e.get("message", "")
           and e.get("source", {}).get("host") == "node-a",
           "over quota: a Warning Event VGPUOverQuota on the pod, naming container and action",
           json.dumps(evs)[:2000])
    tap.ok(len(evs) == 1, "one Event for the finding, not one per pass", len(evs))
    _, src = K.build_paths()
    node = shutil.which("node") or shutil.which("nodejs")
    vdir = os.path.join(src, "tests/kube/k8s-validate")
    if not node or not os.path.isdir(os.path.join(vdir, "node_modules")):
        tap.skip("the posted Event against kubernetes-models", "node or kubernetes-models missing")
        return
    dump = os.path.join(tmp, "events.json")
    with open(dump, "w") as f:
        json.dump({"objects": evs, "podPatches": []}, f)
    script = os.path.join(tmp, "events-dump.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\nexec cat '{dump}'\n")
    os.chmod(script, 0o755)
    p = subprocess.run([node, os.path.join(vdir, "validate.mjs"),
                        os.path.join(src, "deploy", "examples"), script],
                       capture_output=True, text=True, timeout=120)
    tap.ok(p.returncode == 0 and "ok" in p.stdout,
           "the Event the API server got is a valid core/v1 Event (kubernetes-models)",
           p.stdout[-2000:] + p.stderr[-1000:])


def container_run(tap, build, node, resp):
    """Runs cuda-demo as pod a's container would: its mounts in a private
    mount namespace, its env."""
    demo = os.path.join(build, "demo/cuda-demo")
    if os.geteuid() != 0 or shutil.which("unshare") is None or not os.path.exists(demo):
        tap.skip("container run", "needs root, unshare and build/demo/cuda-demo")
        return False
    if subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        tap.skip("container run", "unshare -m is not permitted here")
        return False
    p = primary(resp)
    mounts = [(m.host_path, m.container_path, m.read_only) for m in p.mounts]
    env = dict(node.env)
    env.update(dict(p.envs))
    env["LD_LIBRARY_PATH"] = os.path.join(build, "src/emu")
    asan = os.environ.get("VGPU_ASAN_RT")
    if asan:  # the instrumented libvcuda needs the ASan runtime first
        env["LD_PRELOAD"] = asan
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    for k in list(env):
        if k.startswith("VCUDA_"):
            del env[k]
    args = [demo, "--alloc", "8192", "--seconds", "2", "--kernel-ms", "5"]
    r = mountns.run(mounts, args, env)
    out = r.stdout + r.stderr
    tap.ok(r.returncode == 0 and "cuMemGetInfo: free" in out and "of 4096 MiB" in out,
           "in the container, cuda-demo sees exactly the pod's 4 GiB", out[-2000:])
    tap.ok("allocated 3" in out and "CUDA_ERROR_OUT_OF_MEMORY" in out,
           "and is refused past it", out[-2000:])
    share = demo_share(out)
    tap.ok(share is not None and abs(share - 30) <= 5,
           "and gets the pod's 30 % of the GPU's time (within 5 points)", out[-600:])
    # a tenant raising libvcuda's variables in its own env gets no more: with the agent's
    # config in place they can only tighten (docs/vcuda.md, "Threat model")
    tenant = dict(env, VCUDA_MEMORY_LIMIT=str(16 << 30), VCUDA_CORE_LIMIT="100")
    r = mountns.run(mounts, args, tenant)
    out = r.stdout + r.stderr
    share = demo_share(out)
    tap.ok(r.returncode == 0 and "of 4096 MiB" in out and "allocated 3" in out and
           share is not None and abs(share - 30) <= 5,
           "a tenant setting VCUDA_MEMORY_LIMIT=16 GiB and VCUDA_CORE_LIMIT=100 still gets "
           "4 GiB and 30 %", out[-2000:])
    return True


def exporter_reads(tap, build, node, tmp, resp, ran):
    """accel-exporter --state-dir on this acceld's state directory: pod a's limits from the
    status.json acceld wrote (4 GiB, 30 %), and, once cuda-demo ran in its container, its GPU
    time and throttled time from the region libvcuda wrote (both grown; nothing held after it
    exited)."""
    exe = os.path.join(build, "src/exporter/accel-exporter")
    if not os.path.exists(exe):
        tap.skip("accel-exporter on acceld's state", "accel-exporter is not built")
        return
    import socket
    import urllib.request
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    gpu = primary(resp).envs.get("NVIDIA_VISIBLE_DEVICES")
    p = subprocess.Popen([exe, "--listen", f"127.0.0.1:{port}", "--interval", "100ms",
                          "--pod-resources-socket", "", "--state-dir",
                          os.path.join(tmp, "state")], env=node.env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = {}

    def value(text, name):
        for ln in text.splitlines():
            if ln.startswith(name + "{") and 'pod="a"' in ln and f'uuid="{gpu}"' in ln \
                    and 'namespace="default"' in ln and 'container="main"' in ln:
                return float(ln.rsplit(" ", 1)[1])
        return None

    def scraped():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                m = r.read().decode()
        except OSError:
            return False
        seen["m"] = m
        return value(m, "accel_vgpu_container_memory_limit_bytes") is not None and \
            (not ran or value(m, "accel_vgpu_container_gpu_time_seconds_total") is not None)
    try:
        ok = K.wait_until(scraped, T)
        m = seen.get("m", "")
        tap.ok(ok and value(m, "accel_vgpu_container_memory_limit_bytes") == 4 << 30
               and value(m, "accel_vgpu_container_core_share_ratio") == 0.3
               and "accel_vgpu_status_up 1" in m,
               "accel-exporter: pod a's limits from acceld's status.json (4 GiB, 30 %)",
               "\n".join(ln for ln in m.splitlines() if "vgpu" in ln)[-3000:])
        mode = os.stat(os.path.join(tmp, "state", "vgpu", "status.json")).st_mode & 0o777
        tap.ok(mode == 0o644, "status.json is 0644: the chart's exporter reads it as uid 65532",
               oct(mode))
        if ran:
            tap.ok((value(m, "accel_vgpu_container_gpu_time_seconds_total") or 0) > 0.5
                   and (value(m, "accel_vgpu_container_throttled_seconds_total") or 0) > 0.5
                   and value(m, "accel_vgpu_container_memory_used_bytes") == 0,
                   "accel-exporter: its GPU time and throttled time from libvcuda's region, "
                   "no memory held after it exited",
                   "\n".join(ln for ln in m.splitlines() if "vgpu" in ln)[-3000:])
    finally:
        p.terminate()
        p.wait(timeout=T)


def demo_share(out):
    """cuda-demo's "ran N kernels ...: a S % share" line: S, or None."""
    m = re.search(r"^ran \d+ kernels .* a (\d+) % share$", out, re.M)
    return int(m.group(1)) if m else None


if __name__ == "__main__":
    main()
