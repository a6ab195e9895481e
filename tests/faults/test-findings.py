#!/usr/bin/python3
"""test-findings.py — one case per finding of issue 23's fault campaign, black-box against the
acceld binary (so that each fails on the acceld before the fix and passes after): an emulated
node, the fake API server, the kubelet model of faultlib.py (pod-resources included), and the
killat shim for cuts at exact writes.

1. A deleted pod's vGPU share is freed at once: on a 1-GPU node a 60-core pod deleted leaves
   room for the next 60-core pod.
2. DRA: a stale registration socket left by an unclean exit is replaced once; acceld does not
   take its own replacement for the kubelet removing it (no re-serve loop).
3. A pod whose Allocate acceld refused (the scheduler extender's GPU has no room), its Failed
   status 2 s late: the next identical pod gets its own share and directory, not the refused
   pod's identity, and keeps them once that status arrives.
4. The kubelet restarts after a pod's first Allocate and admits it again in the other resource
   order: the pod keeps its own directory and share; the identical pod after it gets its own.
5. A broken watch on a quiet node: an Allocate right after is answered (the cache is relisted
   at once); and a kubelet that Allocates as soon as acceld registers (the pod LIST answering
   1.5 s late) never sees a not-ready refusal.
6. DRA: a prepare cut after its files (acceld killed there) is undone by the kubelet's
   unprepare; an unprepare cut between its files and the checkpoint leaves a claim the next
   prepare writes again instead of answering "prepared" without files.
7. acceld killed between writing its checkpoint's temporary file and renaming it: the next
   start leaves no *.tmp.* behind.
8. The checkpoint deleted while a container lives: its share is taken back before the next pod
   is admitted (no GPU over-committed); a checkpoint with 3 x 60 cores on one GPU, one of them
   live, settles to that one.
9. Spare directories that cannot be made (the state dir out of inodes) are retried with
   backoff, one log line; a state dir of 300 inodes still starts (both on a tmpfs of acceld's
   own, when this runs as root with unshare -m); no UBSan report from an Allocate with no pod
   at all.

Every wait is bounded; nothing asserts timing."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib as F  # noqa: E402
from faultlib import K, CORE, MEM  # noqa: E402

T = 20
GiB = 1 << 30


class Rig:
    """A node with vGPU GPUs, the fake API server, pod-resources, the kubelet model, acceld."""

    def __init__(self, build, src, pb, gpus=1, late=0.0, extra=(), register=True, shim=False,
                 api_faults=None):
        self.build, self.src = build, src
        self.tmp = K.tmpdir()
        self.node = F.emu_node(build, self.tmp, gpus)
        self.api = F.Api(src, self.tmp)
        if api_faults:
            for what, body in api_faults:
                self.api.fault(what, **body)
        self.kc = os.path.join(self.tmp, "kubeconfig")
        self.api.kubeconfig(self.kc)
        self.pdir = os.path.join(self.tmp, "dp")
        os.makedirs(self.pdir)
        self.state = os.path.join(self.tmp, "state")
        self.rng, _ = F.new_rng(23)
        self.kubelet = F.DPKubelet(pb, self.pdir, self.api, self.rng, late_s=late)
        pr = F.pod_resources_pb(src, self.tmp)
        self.prsock = os.path.join(self.tmp, "podres.sock")
        self.podres = F.PodResources(pr, self.prsock, self.kubelet.live)
        args = ["--mode", "vgpu", "--device-plugin-dir", self.pdir,
                "--sysfs-root", self.node.sysfs, "--dev-root", self.node.dev,
                "--state-dir", self.state, "--cdi-dir", os.path.join(self.tmp, "cdi"),
                "--kubeconfig", self.kc, "--node-name", F.NODE,
                "--vcuda-library", os.path.join(build, "src/vcuda/libvcuda.so"),
                "--pod-resources-socket", self.prsock, "--allocate-wait", "3s", *extra]
        if not register:
            args.append("--no-register")
        shim_path = os.path.join(build, "tests/faults/killat.so") if shim else None
        self.agent = F.Agent(build, self.node, self.tmp, args, shim=shim_path)
        self.n = 0

    def start(self, kill_at=None, ready=True):
        with self.kubelet.reg.lock:  # a new acceld registers anew
            self.kubelet.reg.registrations.clear()
        self.agent.start(kill_at=kill_at)
        if ready:
            return self.ready()
        return True

    def ready(self):
        # in step with the API server first: a finding's case must not fail on finding 5's race
        ok = K.wait_until(lambda: self.agent.log_text().count("the pod watch is in step") >=
                          self.agent.starts, T) and \
            K.wait_until(lambda: self.kubelet.registered() and
                          all(os.path.exists(os.path.join(self.pdir, "accel-%s.sock" %
                                                          r.replace("/", "-")))
                              for r in (CORE, MEM)), T)
        if ok:
            self.kubelet.connect()
        return ok

    def pod(self, name, cores, mem):
        self.n += 1
        return self.kubelet.add(name, cores, mem, F.unique_created(self.n))

    def books(self):
        return F.books(self.state)

    def close(self, tap=None):
        """Stops everything; acceld's log goes to the TAP output when a case failed."""
        if tap is not None and tap.failed:
            tap.diag(self.agent.log_text()[-3000:])
        self.agent.stop()
        self.kubelet.close()
        self.podres.stop()
        self.api.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def uid_of_dir(d):
    return d and d.split("/")[-2]


def f1(tap, build, src, pb):
    r = Rig(build, src, pb, gpus=1)
    try:
        r.start()
        a = r.pod("a", 60, 8)
        ok_a = r.kubelet.admit(a)
        r.kubelet.delete(a)
        freed = K.wait_until(lambda: ("uid-a", "main") not in r.books(), T)
        b = r.pod("b", 60, 8)
        ok_b = r.kubelet.admit(b)
        tap.ok(ok_a and freed and ok_b and uid_of_dir(b.config_dir()) == "uid-b",
               "1: a deleted pod's share is freed at once: the next 60-core pod fits",
               (b.error, r.books().keys()))
    finally:
        r.close(tap)


def f3(tap, build, src, pb):
    r = Rig(build, src, pb, gpus=2, late=2.0, extra=("--vgpu-policy", "binpack"))
    try:
        r.start()
        x1, x2 = r.pod("x1", 60, 8), r.pod("x2", 60, 8)
        ok = r.kubelet.admit(x1) and r.kubelet.admit(x2)  # 60 cores on each GPU
        # p: 50 cores; the kubelet sees 80 free, but no GPU has 50: acceld refuses it (its
        # Failed status 2 s late)
        p = r.pod("p", 50, 8)
        refused = r.kubelet.admit(p) is False and "no healthy GPU" in (p.error or "")
        # x1 ends; q, identical to p, while p's Failed status is on its way: its own share,
        # its own directory (p is older, so the oldest-first match would take p's identity)
        r.kubelet.delete(x1)
        freed = K.wait_until(lambda: ("uid-x1", "main") not in r.books(), T)
        q = r.pod("q", 50, 8)
        got = r.kubelet.admit(q)
        own = uid_of_dir(q.config_dir()) == "uid-q"
        tap.ok(ok and refused and freed and got and own,
               "3: a refused pod (Failed status 2 s late) does not hand its identity to the next "
               "identical pod", (ok, p.error, freed, q.error, q.config_dir()))

        def settled():
            b = r.books()
            d = q.config_dir()
            return ("uid-q", "main") in b and ("uid-p", "main") not in b and \
                d and os.path.isfile(os.path.join(d, "config"))
        tap.ok(K.wait_until(settled, T), "3: once p's Failed status is in, q keeps its share and "
               "directory", r.books().keys())
    finally:
        r.close(tap)


def f4(tap, build, src, pb):
    r = Rig(build, src, pb, gpus=2, extra=("--vgpu-policy", "spread"))
    try:
        r.start()
        p = r.pod("p", 30, 16)
        r.pod("n", 30, 16)
        # p's cores, then the kubelet restarts before p's memory
        first = {}

        def restart_after_first(pod, res):
            if not first:
                first[res] = True
                return
            r.kubelet.restart()
            r.ready()
        order = [CORE, MEM]
        r.kubelet.rng.shuffle = lambda lst: lst.sort(key=lambda w: order.index(w[0]))
        got = r.kubelet.admit(p, before_each=restart_after_first)
        # admitted anew, the other order: memory, then cores
        order = [MEM, CORE]
        again = r.kubelet.admit(p) if got is None else got
        own = uid_of_dir(p.config_dir()) == "uid-p"
        n_none = not any(k[0] == "uid-n" for k in r.books())
        tap.ok(got is None and again and own and n_none,
               "4: the kubelet restarts mid-admission and admits the pod again, the other order: "
               "it keeps its own directory; the neighbour's is not touched",
               (got, again, p.config_dir(), list(r.books())))
        n = r.kubelet.pods["n"]
        ok_n = r.kubelet.admit(n)
        tap.ok(ok_n and uid_of_dir(n.config_dir()) == "uid-n" and
               os.path.isfile(os.path.join(p.config_dir() or "/nonexistent", "config")) and
               sorted(r.books()) == [("uid-n", "main"), ("uid-p", "main")],
               "4: the neighbour's admission gets its own share; the pod's directory stays",
               (n.error, n.config_dir(), list(r.books())))
    finally:
        r.close(tap)


def f5(tap, build, src, pb):
    r = Rig(build, src, pb, gpus=1)
    try:
        r.start()
        p = r.pod("p", 30, 4)
        # the watch has delivered p once it has delivered a pod added after it
        warm = r.pod("w", 10, 2)
        r.kubelet.admit(warm)
        r.api.fault("break")
        ok = r.kubelet.admit(p)
        tap.ok(ok, "5: a broken watch on a quiet node: an Allocate right after is answered",
               p.error)
    finally:
        r.close(tap)
    # the pod LIST answers late; the kubelet Allocates as soon as both resources registered
    r = Rig(build, src, pb, gpus=1, api_faults=[("listdelay", {"ms": 1500})])
    try:
        p = r.pod("early", 30, 4)
        r.start(ready=False)
        K.wait_until(r.kubelet.registered, T, step_s=0.001)
        r.kubelet.connect()
        ok = r.kubelet.admit(p)
        tap.ok(ok, "5: registered, then an Allocate at once: answered, not refused as not ready",
               p.error)
    finally:
        r.close(tap)


def f7(tap, build, src, pb):
    r = Rig(build, src, pb, gpus=1, shim=True)
    try:
        r.agent.start(kill_at="rename-before:checkpoint.json")
        died = r.agent.wait_exit(T) and r.agent.proc.returncode == -signal.SIGKILL
        left = F.temp_files(r.state)
        r.start()
        tap.ok(died and left and not F.temp_files(r.state),
               "7: killed before renaming its checkpoint: the next start removes the temporary "
               "file", (died, left, F.temp_files(r.state)))
    finally:
        r.close(tap)


def f8(tap, build, src, pb):
    r = Rig(build, src, pb, gpus=2, extra=("--vgpu-policy", "binpack"))
    try:
        r.start()
        p = r.pod("p", 30, 8)
        ok = r.kubelet.admit(p)
        r.agent.kill()
        for f in ("checkpoint.json", "checkpoint.journal"):
            try:
                os.unlink(os.path.join(r.state, "vgpu", f))
            except OSError:
                pass
        r.start()
        # 80 cores: the node has 170 free, but not on p's GPU (70 there)
        q = r.pod("q", 80, 8)
        got = r.kubelet.admit(q)
        b = r.books()
        tap.ok(ok and got and p.visible() != q.visible() and
               sorted(b) == [("uid-p", "main"), ("uid-q", "main")],
               "8: checkpoint deleted while a container lives: its share is taken back, the next "
               "pod does not over-commit its GPU", (q.error, p.visible(), q.visible(), list(b)))
    finally:
        r.close(tap)
    r = Rig(build, src, pb, gpus=1)
    try:
        uuid = json.loads(subprocess.check_output([r.node.emu, "status", "--json"],
                                                  env=r.node.env))["gpus"][0]["uuid"]
        os.makedirs(os.path.join(r.state, "vgpu"))
        ents = [{"podUID": "uid-x%d" % i, "namespace": "default", "pod": "x%d" % i,
                 "container": "main", "cores": 60, "memory": 4, "coresDone": True,
                 "memoryDone": True, "whole": False, "gpus": [uuid]} for i in range(3)]
        with open(os.path.join(r.state, "vgpu", "checkpoint.json"), "w") as f:
            json.dump({"version": 1, "assignments": ents}, f)
        x1 = F.Pod("x1", 60, 4, "2026-01-01T00:00:00Z")
        x1.state = "running"
        x1.ids = {CORE: ["%s-%d" % (uuid, k) for k in range(60)],
                  MEM: ["%s-%d" % (uuid, k) for k in range(4)]}
        r.kubelet.pods["x1"] = x1
        r.api.add_pod("x1", 60, 4, "2026-01-01T00:00:00Z")
        r.api.phase("x1", "Running")
        r.start()
        ok = K.wait_until(lambda: list(r.books()) == [("uid-x1", "main")], T)
        loud = "over-commits GPU" in r.agent.log_text()
        tap.ok(ok and loud, "8: a checkpoint over-committing a GPU (3 x 60 cores) is said so and "
               "settles to the live one", list(r.books()))
    finally:
        r.close(tap)


def in_tmpfs(r, opts):
    """acceld in a mount namespace of its own with its state dir on a tmpfs (root only)."""
    os.makedirs(r.state, exist_ok=True)
    exe = r.agent.exe
    r.agent.exe = "/usr/bin/unshare"
    r.agent.args = ["-m", "sh", "-c", 'mount -t tmpfs -o %s none "$0" && exec "$@"' % opts,
                    r.state, exe, *r.agent.args]


def can_mount():
    return os.geteuid() == 0 and shutil.which("unshare") is not None and \
        subprocess.run(["unshare", "-m", "true"]).returncode == 0


def f9(tap, build, src, pb):
    if not can_mount():
        tap.skip("9: spares on a full state dir", "needs root and unshare -m (a tmpfs mount)")
        tap.skip("9: a state dir of 300 inodes", "needs root and unshare -m (a tmpfs mount)")
    else:
        f9_full(tap, build, src, pb)
        f9_inodes(tap, build, src, pb)
    r = Rig(build, src, pb, gpus=1)
    try:
        r.start()
        # an Allocate with no pod at all (the pending list empty: qsort of nothing)
        try:
            r.kubelet.plugins[CORE].allocate(r.kubelet.all_ids[CORE][-3:], timeout=10)
        except Exception:  # noqa: BLE001 - refused after allocateWait: expected
            pass
        tap.ok(F.sanitizer_reports(r.agent.log_text()) == 0,
               "9: no sanitizer report (UBSan: qsort of an empty pending list)")
    finally:
        r.close(tap)


def f9_full(tap, build, src, pb):
    r = Rig(build, src, pb, gpus=1)
    try:
        in_tmpfs(r, "nr_inodes=4000,size=64m")
        r.start()
        a = r.pod("a", 10, 2)
        r.kubelet.admit(a)  # takes a spare: a refill follows once Allocates pause
        # the state dir runs out of inodes, through acceld's own view of it
        fill = "/proc/%d/root%s/fill" % (r.agent.proc.pid, r.state)
        os.makedirs(fill)
        try:
            for i in range(100000):
                open(os.path.join(fill, str(i)), "w").close()
        except OSError:
            pass
        for i in range(3):
            r.kubelet.admit(r.pod("s%d" % i, 10, 2))

        def lines():
            return r.agent.log_text().count("spare container director")
        warned = K.wait_until(lambda: lines() >= 1, T)
        # a negative: watched for 1.5 s, the one line stays one (a 10 ms retry logged ~150)
        more = K.wait_until(lambda: lines() > 1, 1.5, step_s=0.05)
        tap.ok(warned and not more, "9: spares that cannot be made (the state dir full): "
               "backoff, one log line (%d)" % lines())
    finally:
        r.close(tap)


def f9_inodes(tap, build, src, pb):
    r = Rig(build, src, pb, gpus=1)
    try:
        in_tmpfs(r, "nr_inodes=300,size=64m")
        ok = r.start()
        tap.ok(ok and r.agent.alive(), "9: a state dir of 300 inodes: acceld starts and serves "
               "(the spares keep off the inodes the checkpoint needs)")
    finally:
        r.close(tap)


# ---------------------------------------------------------------- DRA (findings 2 and 6)

def dra_rig(build, src, tmp, shim=False):
    sys.path.insert(0, os.path.join(F.HERE, "..", "dra"))
    import drasetup as D
    emu, uuids, knode, api, kc = D.start_node(build, tmp, F.NODE)
    args = ["--mode", "dra", "--node-name", F.NODE, "--kubeconfig", kc,
            "--plugin-registry-dir", knode.dirs["registry"],
            "--dra-plugin-dir", knode.dirs["plugin"], "--vcuda-library", knode.lib,
            "--dra-sharing", "shared", "--dra-claim-wait", "2s",
            "--sysfs-root", emu.sysfs, "--dev-root", emu.dev,
            "--state-dir", knode.dirs["state"], "--cdi-dir", knode.dirs["cdi"]]
    agent = F.Agent(build, emu, tmp, args,
                    shim=os.path.join(build, "tests/faults/killat.so") if shim else None)
    return D, emu, uuids, knode, api, agent


def claim(D, ns, name, uid):
    import test_kubelet as k
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": ns, "name": name, "uid": uid,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu-share.accel.dev",
                "capacity": {"requests": {"memory": "4Gi", "cores": "30"}}}}]}},
            "status": {"allocation": {"devices": {"results": k.SHARE}}}}


def f2(tap, build, src):
    tmp = K.tmpdir()
    D, emu, uuids, knode, api, agent = dra_rig(build, src, tmp)
    try:
        stale = knode.reg_sock()
        s = socket.socket(socket.AF_UNIX)
        s.bind(stale)
        s.close()  # a socket file nobody serves: an unclean exit's
        agent.start()
        registered = K.wait_until(lambda: F.attempt(knode.register), T)
        for _ in range(3):
            registered = registered and F.attempt(knode.register)
        n = agent.log_text().count("was removed: serving it again")
        tap.ok(registered and n == 0 and agent.alive(),
               "2: DRA: a stale registration socket is replaced once, not taken for the "
               "kubelet's doing (%d re-serves)" % n)
    finally:
        if tap.failed:
            tap.diag(agent.log_text()[-3000:])
        agent.stop()
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def retry(fn):
    """fn()'s result, tried again until it does not raise (bounded by T); None if it never
    succeeds."""
    out = []
    K.wait_until(lambda: F.attempt(lambda: out.append(fn())), T, step_s=0.05)
    return out[0] if out else None


def entry_error(r, uid):
    return "no answer" if r is None else r.claims[uid].error if uid in r.claims else "no entry"


def f6(tap, build, src):
    tmp = K.tmpdir()
    D, emu, uuids, knode, api, agent = dra_rig(build, src, tmp, shim=True)
    uid = "0f3c6a8e-6666-4a1b-9c2d-666666666666"
    spec = os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % uid)
    cdir = os.path.join(knode.dirs["state"], "claims", uid)
    try:
        api.call("POST", "/_fake/claim", claim(D, "team", "cut", uid))
        # a prepare killed right after its CDI spec is in place
        agent.start(kill_at="rename-after:accel-dra-")
        K.wait_until(lambda: F.attempt(knode.register), T)
        F.attempt(lambda: knode.prepare([("team", "cut", uid)]))
        died = agent.wait_exit(T)
        agent.start()
        # the pod is gone before the kubelet's retry: only an unprepare comes
        err = entry_error(retry(lambda: knode.unprepare([("team", "cut", uid)])), uid)
        tap.ok(died and err == "" and not os.path.exists(spec) and not os.path.exists(cdir),
               "6: a prepare cut after its files: the unprepare removes them",
               (died, err, os.path.exists(spec), os.path.exists(cdir)))
        agent.stop()
        # an unprepare cut between removing the files and writing the checkpoint
        agent.start()
        retry(lambda: knode.prepare([("team", "cut", uid)]))
        agent.stop()
        agent.start(kill_at="rename-before:dra-checkpoint.json")
        K.wait_until(lambda: F.attempt(knode.register), T)
        F.attempt(lambda: knode.unprepare([("team", "cut", uid)]))
        died = agent.wait_exit(T)
        agent.start()
        err = entry_error(retry(lambda: knode.prepare([("team", "cut", uid)])), uid)
        tap.ok(died and err == "" and os.path.exists(spec) and
               os.path.exists(os.path.join(cdir, "config")),
               "6: an unprepare cut before its checkpoint: the next prepare writes the files "
               "again, never \"prepared\" without them",
               (died, err, os.path.exists(spec), os.path.exists(cdir)))
    finally:
        if tap.failed:
            tap.diag(agent.log_text()[-3000:])
        agent.stop()
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    """test-findings.py [f1 f3 ...]: those findings' cases only (default: all)."""
    want = set(sys.argv[1:])
    build, src, tap, tmp, pb = F.setup()
    for case in (f1, f3, f4, f5, f7, f8, f9, f2, f6):
        if want and case.__name__ not in want:
            continue
        try:
            if case in (f2, f6):
                case(tap, build, src)
            else:
                case(tap, build, src, pb)
        except Exception:  # noqa: BLE001 - a crash is a failed case
            tap.ok(False, case.__name__, traceback.format_exc())
    shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


if __name__ == "__main__":
    main()
