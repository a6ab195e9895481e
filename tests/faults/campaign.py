#!/usr/bin/python3
"""campaign.py — issue 23's fault campaign in the tree: acceld killed with SIGKILL at random
moments and at exact state writes (the killat shim), while the kubelet model of faultlib.py
admits pods one at a time (random resource order, no retry of a refused Allocate, the Failed
status prompt or late), restarts mid-admission, and the fake API server fails, lags, closes
or hangs its watch. After each kill acceld is started again and, once things settle, the
books are checked:

  lost      an admitted container whose share, directory or GPU the books do not hold as it
            was answered (vGPU); a prepared claim without its record or files (DRA); an
            admitted container whose MPS daemon does not answer (MPS)
  doubled   two containers with one directory, a GPU over-committed (vGPU); a claim recorded
            twice (DRA); a second daemon on one pipe directory (MPS)
  dead      a share of a failed or deleted pod still held after a reconcile (vGPU); an
            unprepared claim's record or files (DRA); a daemon of no set (MPS)
  tmp       temporary files of interrupted writes (*.tmp.<pid>) under the state, CDI and
            plugin dirs
  notready  Allocates refused only because acceld was not ready (it registers once it is)
  sanitizer reports in acceld's log (the ASan+UBSan build)

  /usr/bin/python3 tests/faults/campaign.py [--mode vgpu|dra|mps|all] [--kills N]
      [--late-ms MS] [--seed S] [--short]

--short (make check) runs 3 kills a mode, the Failed status 400 ms late; the long run (100 a
mode, prompt and 400 ms late) is by hand, its figures in docs/testing.md. Prints TAP (one case
per mode and latency: every count 0) and the counts on a '# figures' line."""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib as F  # noqa: E402
from faultlib import K, CORE, MEM  # noqa: E402

import grpc  # noqa: E402

T = 20
TRACE = os.environ.get("FAULTS_TRACE")
# FAULTS_LOG=DIR: acceld's whole log of a mode that found something is copied there
KEEP = os.environ.get("FAULTS_LOG")


def trace(*a):
    if TRACE:
        print("# trace %.3f" % time.monotonic(), *a, flush=True)


SIZES = [(10, 2), (20, 4), (30, 4), (30, 8), (50, 8)]
# exact points: where a cut leaves a record and its files apart, or a temporary file behind
VGPU_POINTS = ["rename-before:checkpoint.json", "rename-after:checkpoint.json",
               "write-before:checkpoint.journal", "write-after:checkpoint.journal",
               "write-after:checkpoint.journal:2", "rename-before:/config",
               "rename-after:/main", "rename-before:status.json", "unlink-before:/config"]
DRA_POINTS = ["rename-before:dra-checkpoint.json", "rename-after:dra-checkpoint.json",
              "rename-before:accel-dra-", "rename-after:accel-dra-",
              "rename-before:/config", "rename-after:/ld.so.preload",
              "unlink-before:accel-dra-", "rename-before:dra-status.json",
              "rename-after:dra-checkpoint.json:2"]
MPS_POINTS = ["rename-before:acceld-stats.json", "rename-after:accel-"]


def keep_log(agent, mode):
    if KEEP:
        os.makedirs(KEEP, exist_ok=True)
        with open(os.path.join(KEEP, "acceld-%s-%d.log" % (mode, os.getpid())), "w") as f:
            f.write(agent.log_text())


class Counts:
    def __init__(self):
        self.kills = self.exact = self.restarts = 0
        self.lost = self.doubled = self.dead = self.tmp = self.notready = self.san = 0
        self.admitted = self.refused = 0
        self.detail = []

    def bad(self):
        return self.lost + self.doubled + self.dead + self.tmp + self.notready + self.san

    def line(self):
        return ("kills %d (%d at exact writes) kubelet-restarts %d admitted %d refused %d: "
                "lost %d doubled %d dead-held %d tmp %d not-ready %d sanitizer %d" %
                (self.kills, self.exact, self.restarts, self.admitted, self.refused, self.lost,
                 self.doubled, self.dead, self.tmp, self.notready, self.san))


class Killer:
    """SIGKILLs acceld after a random delay, unless cancelled."""

    def __init__(self, agent, delay):
        self.agent, self.cancelled = agent, threading.Event()
        self.t = threading.Thread(target=self._run, args=(delay,), daemon=True)
        self.t.start()

    def _run(self, delay):
        if not self.cancelled.wait(delay) and self.agent.alive():
            self.agent.proc.send_signal(signal.SIGKILL)

    def cancel(self):
        self.cancelled.set()
        self.t.join()


# ------------------------------------------------------------------------- vGPU

class VgpuRun:
    def __init__(self, build, src, pb, rng, late):
        self.rng = rng
        self.tmp = K.tmpdir()
        self.node = F.emu_node(build, self.tmp, 2)
        self.api = F.Api(src, self.tmp)
        kc = os.path.join(self.tmp, "kubeconfig")
        self.api.kubeconfig(kc)
        self.pdir = os.path.join(self.tmp, "dp")
        os.makedirs(self.pdir)
        self.state = os.path.join(self.tmp, "state")
        self.kubelet = F.DPKubelet(pb, self.pdir, self.api, rng, late_s=late)
        pr = F.pod_resources_pb(src, self.tmp)
        prsock = os.path.join(self.tmp, "podres.sock")
        self.podres = F.PodResources(pr, prsock, self.kubelet.live)
        args = ["--mode", "vgpu", "--device-plugin-dir", self.pdir,
                "--sysfs-root", self.node.sysfs, "--dev-root", self.node.dev,
                "--state-dir", self.state, "--cdi-dir", os.path.join(self.tmp, "cdi"),
                "--kubeconfig", kc, "--node-name", F.NODE,
                "--vcuda-library", os.path.join(build, "src/vcuda/libvcuda.so"),
                "--pod-resources-socket", prsock, "--allocate-wait", "3s",
                "--vgpu-reconcile-interval", "1s", "--vgpu-check-interval", "0",
                "--vgpu-policy", rng.choice(["binpack", "spread"])]
        self.agent = F.Agent(build, self.node, self.tmp, args,
                             shim=os.path.join(build, "tests/faults/killat.so"))
        self.n = 0
        out = subprocess.check_output([self.node.emu, "status", "--json"], env=self.node.env)
        self.capacity = json.loads(out)["gpus"][0]["memory_total_bytes"] // (256 << 20)

    def start(self, kill_at=None):
        with self.kubelet.reg.lock:
            self.kubelet.reg.registrations.clear()
        self.agent.start(kill_at=kill_at)

    def ready(self):
        ok = K.wait_until(lambda: self.kubelet.registered() or not self.agent.alive(), T)
        if ok and self.agent.alive():
            self.kubelet.connect()
        return ok and self.agent.alive()

    def op(self, c):
        """One step of activity; False once acceld is dead."""
        k, rng = self.kubelet, self.rng
        with k.lock:
            running = [p for p in k.pods.values() if p.state == "running"]
        r = rng.random()
        if r < 0.3 and running:
            victim = rng.choice(running)
            trace("delete", victim.name)
            k.delete(victim)
        elif r < 0.35:
            what = rng.choice(["break", "lag", "hang", "fail"])
            trace("api", what)
            if what == "break":
                self.api.fault("break")
            elif what == "lag":
                self.api.fault("lag", ms=rng.choice([50, 200, 400]))
            elif what == "hang":
                self.api.fault("hang", on=True)
            else:
                self.api.fault("fail", n=rng.randint(1, 3))
        else:
            self.n += 1
            cores, mem = rng.choice(SIZES)
            pod = k.add("p%d" % self.n, cores, mem, F.unique_created(self.n))
            restart = rng.random() < 0.08

            def maybe_restart(p, res, state={"done": 0}):
                state["done"] += 1
                if restart and state["done"] == 2:
                    k.restart()
                    c.restarts += 1
                    self.ready()
            got = k.admit(pod, before_each=maybe_restart)
            if got is None:  # forgotten by the kubelet restart: admitted anew (with acceld
                got = k.admit(pod)  # dead, the Allocate fails and so does the pod)
            trace("admit", pod.name, cores, mem, got, pod.config_dir(), pod.visible(),
                  pod.error)
            c.admitted += got is True
            c.refused += got is False
        return self.agent.alive()

    def settle(self, c):
        self.api.fault("lag", ms=0)
        self.api.fault("hang", on=False)
        self.api.fault("fail", n=0)
        v = F.wait_settled(lambda: F.check_books(self.state, self.kubelet, self.capacity), 15)
        c.lost += v[0]
        c.doubled += v[1]
        c.dead += v[2]
        if sum(v[:3]):
            c.detail.append(v[3])
        tmp = F.temp_files(self.state, os.path.join(self.tmp, "cdi"), self.pdir)
        c.tmp += len(tmp)
        if tmp:
            c.detail.append(("tmp", tmp))

    def close(self):
        self.agent.stop()
        self.kubelet.close()
        self.podres.stop()
        self.api.stop()


def vgpu(build, src, pb, rng, kills, late):
    c = Counts()
    run = VgpuRun(build, src, pb, rng, late)
    try:
        run.start()
        run.ready()
        for i in range(kills):
            exact = i % 3 == 2
            if exact:  # restarted under the shim: it dies at that write
                run.agent.kill()
                run.start(kill_at=rng.choice(VGPU_POINTS))
                run.ready()
                killer = Killer(run.agent, 4.0)  # a point never reached: killed anyway
            else:
                killer = Killer(run.agent, rng.uniform(0.05, 1.5))
            ops = 0
            while run.op(c) and ops < 60:
                ops += 1
            killer.cancel()
            run.agent.kill()
            c.kills += 1
            trace("killed", c.kills)
            c.exact += exact and "killat: SIGKILL" in run.agent.log_text()[-4000:]
            run.start()
            run.ready()
            run.settle(c)
            trace("settled", c.lost, c.doubled, c.dead, c.tmp)
            # a kubelet that Allocates as soon as acceld registered: refused as not ready?
        nr = [(p, m) for p, m in run.kubelet.refusals if any(s in m for s in F.NOT_READY)]
        c.notready = len(nr)
        if nr:
            c.detail.append(("not-ready refusals", nr))
        c.san = F.sanitizer_reports(run.agent.log_text())
    finally:
        run.close()
        if c.bad():
            c.detail.append(("log", run.agent.log_text()[-6000:]))
            keep_log(run.agent, "vgpu")
        shutil.rmtree(run.tmp, ignore_errors=True)
    return c


# ------------------------------------------------------------------------- DRA

def dra(build, src, rng, kills, late):
    sys.path.insert(0, os.path.join(F.HERE, "..", "dra"))
    import drasetup as D
    import test_kubelet as k
    c = Counts()
    tmp = K.tmpdir()
    emu, uuids, knode, api, kc = D.start_node(build, tmp, F.NODE)
    args = ["--mode", "dra", "--node-name", F.NODE, "--kubeconfig", kc,
            "--plugin-registry-dir", knode.dirs["registry"],
            "--dra-plugin-dir", knode.dirs["plugin"], "--vcuda-library", knode.lib,
            "--dra-sharing", "shared", "--dra-gpu-sharing", "1=exclusive",
            "--dra-claim-wait", "2s", "--sysfs-root", emu.sysfs, "--dev-root", emu.dev,
            "--state-dir", knode.dirs["state"], "--cdi-dir", knode.dirs["cdi"]]
    agent = F.Agent(build, emu, tmp, args, shim=os.path.join(build, "tests/faults/killat.so"))
    prepared, gone, n = set(), set(), [0]
    cut_prep, cut_unprep = [], []  # calls a kill cut: the kubelet retries them

    def claim(uid):
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"namespace": "team", "name": name(uid), "uid": uid,
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu-share.accel.dev"}}]}},
                "status": {"allocation": {"devices": {"results": k.SHARE}}}}

    def name(uid):
        return "c-" + uid[-6:]

    def up():
        return K.wait_until(lambda: not agent.alive() or F.attempt(knode.register), T)

    def call(fn, uid):
        """One prepare or unprepare; True when the claim's entry says done; None when the call
        failed (acceld died under it, or was dying): the kubelet retries it after the restart."""
        try:
            res = fn([("team", name(uid), uid)])
            ok = uid in res.claims and res.claims[uid].error == ""
            trace(fn.__name__, uid, ok, "" if ok else res.claims[uid].error)
            return ok
        except grpc.RpcError as e:
            trace(fn.__name__, uid, "rpc", e.code().name, agent.alive())
            return None

    def op():
        if rng.random() < 0.4 and prepared:
            uid = rng.choice(sorted(prepared))
            done = call(knode.unprepare, uid)
            if done is None:
                cut_unprep.append(uid)
            elif done:
                gone.add(uid)
            if done is not False:
                prepared.discard(uid)
        else:
            n[0] += 1
            uid = "0f3c6a8e-%04d-4a1b-9c2d-%012d" % (n[0] % 10000, n[0])
            api.call("POST", "/_fake/claim", claim(uid))
            done = call(knode.prepare, uid)
            if done:
                prepared.add(uid)
                c.admitted += 1
            elif done is None:
                cut_prep.append(uid)
            else:
                c.refused += 1
        return agent.alive()

    try:
        agent.start()
        up()
        for i in range(kills):
            exact = i % 3 == 2
            if exact:
                agent.kill()
                agent.start(kill_at=rng.choice(DRA_POINTS))
                up()
                killer = Killer(agent, 4.0)
            else:
                killer = Killer(agent, rng.uniform(0.05, 1.5))
            ops = 0
            while op() and ops < 40:
                ops += 1
            killer.cancel()
            agent.kill()
            c.kills += 1
            c.exact += exact and "killat: SIGKILL" in agent.log_text()[-4000:]
            agent.start()
            up()
            # the kubelet retries what a kill cut: a prepare (or, its pod gone meanwhile, an
            # unprepare instead) and an unprepare
            for uid in cut_prep:
                if rng.random() < 0.5 and call(knode.prepare, uid):
                    prepared.add(uid)
                    c.admitted += 1
                else:
                    cut_unprep.append(uid)
            for uid in cut_unprep:
                if call(knode.unprepare, uid):
                    gone.add(uid)
            cut_prep.clear()
            cut_unprep.clear()
            lost, dead, doubled, detail = dra_check(knode, prepared, gone - prepared)
            c.lost += lost
            c.dead += dead
            c.doubled += doubled
            if detail:
                c.detail.append(detail)
            t = F.temp_files(knode.dirs["state"], knode.dirs["cdi"], knode.dirs["registry"],
                             knode.dirs["plugin"])
            c.tmp += len(t)
            if t:
                c.detail.append(("tmp", t))
        c.san = F.sanitizer_reports(agent.log_text())
    finally:
        agent.stop()
        api.stop()
        if c.bad():
            c.detail.append(("log", agent.log_text()[-6000:]))
        shutil.rmtree(tmp, ignore_errors=True)
    del late
    return c


def dra_check(knode, prepared, gone):
    """(lost, dead, doubled, detail): a prepared claim needs its record, CDI spec and libvcuda
    config; an unprepared one has none of them."""
    try:
        with open(os.path.join(knode.dirs["state"], "dra-checkpoint.json")) as f:
            recs = [x["uid"] for x in json.load(f)["claims"]]
    except (OSError, ValueError, KeyError):
        recs = []
    lost, dead, detail = 0, 0, []
    for uid in prepared:
        spec = os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % uid)
        conf = os.path.join(knode.dirs["state"], "claims", uid, "config")
        if uid not in recs or not os.path.exists(spec) or not os.path.exists(conf):
            lost += 1
            detail.append(("lost", uid, uid in recs, os.path.exists(spec)))
    for uid in gone:
        spec = os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % uid)
        cdir = os.path.join(knode.dirs["state"], "claims", uid)
        if uid in recs or os.path.exists(spec) or os.path.exists(cdir):
            dead += 1
            detail.append(("dead", uid, uid in recs, os.path.exists(spec)))
    doubled = len(recs) - len(set(recs))
    return lost, dead, doubled, detail


# ------------------------------------------------------------------------- MPS

def mps(build, src, pb, rng, kills, late):
    c = Counts()
    tmp = K.tmpdir()
    node = F.emu_node(build, tmp, 2)
    pdir = os.path.join(tmp, "dp")
    os.makedirs(pdir)
    state = os.path.join(tmp, "state")
    cfg = os.path.join(tmp, "mps.yaml")
    with open(cfg, "w") as f:
        f.write("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
                "      replicas: 2\n")
    control = os.path.join(build, "src/emu/nvidia-cuda-mps-control")
    agent = F.Agent(build, node, tmp, ["--config", cfg, "--device-plugin-dir", pdir,
                                      "--sysfs-root", node.sysfs, "--dev-root", node.dev,
                                      "--state-dir", state, "--cdi-dir",
                                      os.path.join(tmp, "cdi"), "--mps-control", control],
                    shim=os.path.join(build, "tests/faults/killat.so"))
    reg = K.FakeKubelet(pb, pdir).start()
    sock = os.path.join(pdir, "accel-nvidia.com-gpu.sock")
    admitted = []  # pipe dirs the admitted containers mount

    def allocate_at_once():
        """Registered: Allocate at once, as a kubelet may."""
        if not K.wait_until(lambda: reg.count() > 0 or not agent.alive(), T) or \
                not agent.alive():
            return
        p = K.Plugin(pb, sock, own_connection=True)
        try:
            w = p.watch()
            u = w.wait_for(lambda x: len(x) > 0, T)
            w.cancel()
            ids = sorted(i for i, (h, _) in (u or {}).items() if h == "Healthy")
            if not ids:  # registered before any daemon answered: not ready
                if agent.alive():
                    c.notready += 1
                    c.detail.append(("registered with no healthy replica", u))
                return
            want = rng.randint(1, 2)
            gpu_ids = [i for i in ids if i.startswith(ids[0].split("::")[0] + "::")][:want]
            r = p.allocate(gpu_ids, timeout=10)
            m = {x.container_path: x.host_path for x in r.container_responses[0].mounts}
            admitted.append(m.get("/run/accel-mps/pipe"))
            c.admitted += 1
        except grpc.RpcError as e:
            if agent.alive():
                c.refused += 1
                if any(s in e.details() for s in ("not ready", "not answered",
                                                  "Unhealthy", "unhealthy")):
                    c.notready += 1
                    c.detail.append(("refused", e.details()))
        finally:
            p.close()

    try:
        for i in range(kills):
            exact = i % 3 == 2
            with reg.lock:
                reg.registrations.clear()
            agent.start(kill_at=rng.choice(MPS_POINTS) if exact else None)
            allocate_at_once()
            killer = Killer(agent, rng.uniform(0.05, 1.5) if not exact else 3.0)
            K.wait_until(lambda: not agent.alive(), 5)
            killer.cancel()
            agent.kill()
            c.kills += 1
            c.exact += exact and "killat: SIGKILL" in agent.log_text()[-4000:]
            # restart and settle: every daemon answers, one per set, none left over
            with reg.lock:
                reg.registrations.clear()
            agent.start()
            allocate_at_once()
            K.wait_until(lambda: reg.count() > 0, T)
            lost, doubled, dead, detail = mps_check(state, admitted)
            c.lost += lost
            c.doubled += doubled
            c.dead += dead
            if detail:
                c.detail.append(detail)
            t = F.temp_files(state, os.path.join(tmp, "cdi"), pdir)
            c.tmp += len(t)
            if t:
                c.detail.append(("tmp", t))
            agent.kill()
        c.san = F.sanitizer_reports(agent.log_text())
    finally:
        agent.stop()
        # the daemons of the last run go with a clean stop
        agent.start()
        K.wait_until(lambda: reg.count() > 0, T)
        agent.stop()
        reg.stop()
        if c.bad():
            c.detail.append(("log", agent.log_text()[-6000:]))
        shutil.rmtree(tmp, ignore_errors=True)
    del late, src
    return c


def daemons():
    """{pipe dir: [pids]} of the MPS control daemons running (comm nvidia-cuda-mps, started
    with -d or -f: a front end acceld runs for a probe has the same name and pipe dir)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % pid) as f:
                if not f.read().startswith("nvidia-cuda-mps"):
                    continue
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if not {b"-d", b"-f"} & set(f.read().split(b"\0")[1:]):
                    continue
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
            with open("/proc/%s/stat" % pid) as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    continue
        except (OSError, ValueError):
            continue
        d = env.get(b"CUDA_MPS_PIPE_DIRECTORY", b"").decode()
        out.setdefault(d, []).append(int(pid))
    return out


def mps_check(state, admitted):
    sets = sorted(os.path.join(state, "mps", d, "pipe")
                  for d in os.listdir(os.path.join(state, "mps")))

    def counts():
        ds = daemons()
        mine = {d: p for d, p in ds.items() if d.startswith(os.path.join(state, "mps"))}
        return mine
    seen = {}

    def settled():
        seen.clear()
        seen.update(counts())
        return all(len(seen.get(s, [])) == 1 for s in sets)
    ok = K.wait_until(settled, T)
    mine = dict(seen)  # the sample the wait ended on
    lost = sum(1 for d in admitted if len(mine.get(d, [])) != 1)
    doubled = sum(1 for s in sets if len(mine.get(s, [])) > 1)
    dead = sum(1 for d in mine if d not in sets)
    detail = None if ok and not (lost + doubled + dead) else ("daemons", mine, sets)
    return lost, doubled, dead, detail


# ------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="all", choices=["vgpu", "dra", "mps", "all"])
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--late-ms", type=int, action="append")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--short", action="store_true")
    a = ap.parse_args()
    if a.short:
        a.kills = 3
        a.late_ms = a.late_ms or [400]
    lates = a.late_ms or [0, 400]
    build, src, tap, tmp, pb = F.setup()
    modes = ["vgpu", "dra", "mps"] if a.mode == "all" else [a.mode]
    for mode in modes:
        for late in (lates if mode == "vgpu" else [lates[-1]]):
            rng, seed = F.new_rng(a.seed)
            t0 = time.monotonic()
            try:
                if mode == "vgpu":
                    c = vgpu(build, src, pb, rng, a.kills, late / 1000)
                elif mode == "dra":
                    c = dra(build, src, rng, a.kills, late / 1000)
                else:
                    c = mps(build, src, pb, rng, a.kills, late / 1000)
            except Exception:  # noqa: BLE001 - a crash is a failed case
                tap.ok(False, "%s: the campaign ran (seed %d)" % (mode, seed),
                       traceback.format_exc())
                continue
            name = "%s%s: %s (seed %d, %.0f s)" % (
                mode, ", Failed status %d ms late" % late if mode == "vgpu" else "", c.line(),
                seed, time.monotonic() - t0)
            print("# figures %s" % name, flush=True)
            tap.ok(c.bad() == 0, name, "\n".join(str(d)[:3000] for d in c.detail))
    shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


if __name__ == "__main__":
    main()
