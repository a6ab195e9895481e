"""faultlib.py — what the fault tests (tests/faults: test-findings.py, campaign.py) share: an
emulated node, acceld started and killed (optionally under the killat shim, which SIGKILLs it
at a named rename or write), the fake API server (tests/kube/fake-apiserver.py, with its pod
faults), a kubelet pod-resources server, a device-plugin kubelet model and the books as acceld
recorded them (checkpoint + journal), plus the checks the campaign counts.

The kubelet model does what the real one does where it matters to acceld: it registers a
resource and may Allocate at once; it admits pods one at a time (its own free pool of IDs,
GetPreferredAllocation for about half the calls), each container's resources in random order
(Go map order); it never retries a refused Allocate (the pod fails for good:
UnexpectedAdmissionError) and posts the Failed status a little late (the status manager's lag);
its pod-resources List names the containers of active pods (running, or being admitted) with
the IDs the device manager holds for them; a restart forgets the admission it had not finished
(the device manager checkpoints a container's devices once all of its resources are
allocated), makes kubelet.sock again, and admits that pod anew. Runs under /usr/bin/python3."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "interop"))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import kubelet as K  # noqa: E402
import fakeapi  # noqa: E402

import grpc  # noqa: E402

CORE = "tencent.com/vcuda-core"
MEM = "tencent.com/vcuda-memory"
TOKEN = "faults-token"
NODE = "node-a"
# Messages of a refusal that only says acceld was not ready yet (the campaign counts them)
NOT_READY = ("not listed yet", "not reconciled", "pod list is not available", "not in step",
             "has not succeeded yet")


def require(build):
    """Exits 77 unless what the fault tests need is here."""
    K.require_tools(build)
    if not K.Node.available(build):
        K.skip_all("the emulator is not built")
    if not os.path.isfile(os.path.join(build, "src/modes/libaccel-modes-vgpukube.a")):
        K.skip_all("acceld is built without the Kubernetes client (libcurl missing)")
    if shutil.which("openssl") is None:
        K.skip_all("openssl CLI missing (the fake API server makes its certificates with it)")


def setup():
    """What a fault test needs before its cases: (build, src, tap, tmp, pb); exits 77 when
    something is missing."""
    build, src = K.build_paths()
    require(build)
    if not os.path.exists(os.path.join(build, "tests/faults/killat.so")):
        K.skip_all("the killat shim is not built")
    tmp = K.tmpdir()
    return build, src, K.Tap(), tmp, K.gen_pb2(src, os.path.join(tmp, "pb"))


def asan_runtime(exe):
    """The ASan runtime exe was linked with, or None (it must come first in LD_PRELOAD)."""
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if "libasan" in line and "=>" in line:
            return line.split("=>")[1].split()[0]
    return None


def pod_resources_pb(src, tmp):
    out = os.path.join(tmp, "pbpr")
    os.makedirs(out, exist_ok=True)
    subprocess.run(["protoc", f"--python_out={out}", f"-I{os.path.join(src, 'proto')}",
                    os.path.join(src, "proto", "podresources/v1/api.proto")], check=True)
    sys.path.insert(0, out)
    from podresources.v1 import api_pb2 as pr  # noqa: E402
    return pr


class PodResources:
    """The kubelet's pod-resources v1 server; List answers live() = [(ns, pod, container,
    {resource: [IDs]})]."""

    def __init__(self, pr, sock, live):
        self.pr, self.live = pr, live

        def list_(req, ctx):
            pods = {}
            for ns, pod, c, devs in self.live():
                devices = [pr.ContainerDevices(resource_name=r, device_ids=list(ids))
                           for r, ids in devs.items() if ids]
                pods.setdefault((ns, pod), []).append(pr.ContainerResources(name=c,
                                                                            devices=devices))
            return pr.ListPodResourcesResponse(pod_resources=[
                pr.PodResources(namespace=ns, name=pod, containers=cs)
                for (ns, pod), cs in pods.items()])
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(
                list_, request_deserializer=pr.ListPodResourcesRequest.FromString,
                response_serializer=pr.ListPodResourcesResponse.SerializeToString)})
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(K.unix_target(sock))
        self.server.start()

    def stop(self):
        self.server.stop(0).wait()


class Api(fakeapi.ApiServer):
    def __init__(self, src, tmp):
        super().__init__(src, tmp, token=TOKEN, node=NODE, timeout=20)

    def add_pod(self, name, cores, mem, created, uid=None, annotations=None):
        return self.add_vgpu_pod(name, cores, mem, created, uid, annotations)

    def phase(self, name, phase):
        try:
            self.call("POST", "/_fake/pod", {"op": "modify", "name": name, "phase": phase})
        except Exception:  # noqa: BLE001 - the pod may be gone already
            pass

    def delete(self, name):
        try:
            self.call("POST", "/_fake/pod", {"op": "delete", "name": name})
        except Exception:  # noqa: BLE001
            pass

    def fault(self, what, **body):
        self.call("POST", "/_fake/" + what, body)


class Agent:
    """acceld as a child process; restarted by start(); its logs appended to one file."""

    def __init__(self, build, node, tmp, args, shim=None):
        self.build, self.node, self.tmp, self.args = build, node, tmp, list(args)
        self.exe = os.path.join(build, "src/acceld/acceld")
        self.shim = shim
        self.log_path = os.path.join(tmp, "acceld.log")
        self.proc = None
        self.starts = 0
        self.asan = asan_runtime(self.exe)

    def start(self, kill_at=None):
        env = dict(self.node.env)
        env.pop("ACCEL_KILL_AT", None)
        if kill_at and self.shim:
            env["ACCEL_KILL_AT"] = kill_at
            env["LD_PRELOAD"] = ":".join(x for x in (self.asan, self.shim) if x)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.exe, *self.args], env=env, stdout=self.log,
                                     stderr=self.log)
        self.starts += 1
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
            self.log.close()

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.log.close()
        return self.proc.returncode if self.proc else None

    def wait_exit(self, timeout):
        try:
            self.proc.wait(timeout)
            self.log.close()
            return True
        except subprocess.TimeoutExpired:
            return False

    def log_text(self):
        with open(self.log_path, "r", errors="replace") as f:
            return f.read()


def attempt(fn):
    """fn(); whether it returned without raising (a gRPC call to an acceld that may be
    restarting)."""
    try:
        fn()
        return True
    except Exception:  # noqa: BLE001
        return False


def sanitizer_reports(text):
    return sum(text.count(s) for s in ("runtime error:", "ERROR: AddressSanitizer",
                                       "ERROR: LeakSanitizer"))


def temp_files(*dirs):
    """Temporary files of interrupted writes left anywhere under dirs: <name>.tmp.<pid> of a
    process that is gone (a live acceld's write in flight is not left behind)."""
    out = []
    for d in dirs:
        for base, _, names in os.walk(d):
            for n in names:
                pid = n.rsplit(".tmp.", 1)[1] if ".tmp." in n else ""
                if pid.isdigit() and not os.path.exists("/proc/" + pid):
                    out.append(os.path.join(base, n))
    return out


def books(state):
    """The vGPU assignments as acceld recorded them: the snapshot with the journal applied
    (vgpu.c, checkpoint_load), keyed (podUID, container)."""
    vdir = os.path.join(state, "vgpu")
    out = {}
    try:
        with open(os.path.join(vdir, "checkpoint.json")) as f:
            for a in json.load(f)["assignments"]:
                out[(a["podUID"], a["container"])] = a
    except (OSError, ValueError, KeyError):
        pass
    try:
        with open(os.path.join(vdir, "checkpoint.journal")) as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                rec = json.loads(line)
                if "set" in rec:
                    a = rec["set"]
                    out[(a["podUID"], a["container"])] = a
                elif "drop" in rec:
                    out.pop((rec["drop"]["podUID"], rec["drop"]["container"]), None)
    except (OSError, ValueError):
        pass
    return out


def assign_dir(state, a):
    return a.get("dir") or os.path.join(state, "vgpu", a["podUID"], a["container"])


class Pod:
    def __init__(self, name, cores, mem, created):
        self.name, self.cores, self.mem, self.created = name, cores, mem, created
        self.uid = "uid-" + name
        self.state = "pending"  # pending, admitting, running, failed, deleted
        self.ids = {}           # resource -> [IDs] the kubelet allocated (held while active)
        self.resp = {}          # resource -> ContainerAllocateResponse
        self.error = None

    def wants(self):
        return [(r, n) for r, n in ((CORE, self.cores), (MEM, self.mem)) if n]

    def config_dir(self):
        r = self.resp.get(CORE if self.cores else MEM)
        for m in (r.mounts if r else []):
            if m.container_path == "/etc/vcuda/config":
                return os.path.dirname(m.host_path)
        return None

    def visible(self):
        """The container's GPUs. The kubelet keeps the first value of an env name across a
        container's resources, in map order: answers that disagree give it either, so they
        are reported as a conflict (never equal to the books' GPUs)."""
        vals = {r.envs["NVIDIA_VISIBLE_DEVICES"] for r in self.resp.values()
                if "NVIDIA_VISIBLE_DEVICES" in r.envs}
        if len(vals) > 1:
            return "conflict: " + " / ".join(sorted(vals))
        return vals.pop() if vals else None


class DPKubelet:
    """The device-plugin kubelet model for vGPU's two resources (see the module's text)."""

    def __init__(self, pb, pdir, api, rng, late_s=0.0):
        self.pb, self.pdir, self.api, self.rng, self.late = pb, pdir, api, rng, late_s
        self.lock = threading.RLock()
        self.pods = {}
        self.reg = None
        self.plugins = {}
        self.all_ids = {}
        self.refusals = []     # (pod, message)
        self.timers = []
        self.session = 0       # registrations seen by the current registration server
        self.restarts = 0
        self.start_registration()

    # ---- registration and the plugins
    def start_registration(self):
        self.reg = K.FakeKubelet(self.pb, self.pdir).start()

    def restart(self):
        """The kubelet restarts: kubelet.sock made again (acceld registers anew); the admission
        it had not finished is forgotten (its pod is admitted anew)."""
        with self.lock:
            self.restarts += 1
            for p in self.pods.values():
                if p.state == "admitting":
                    p.state, p.ids, p.resp = "pending", {}, {}
        self.reg.stop()
        try:
            os.unlink(os.path.join(self.pdir, "kubelet.sock"))
        except OSError:
            pass
        self.start_registration()

    def registered(self):
        """Both resources registered with the current registration server."""
        names = {r.resource_name for r in self.reg.registrations}
        return CORE in names and MEM in names

    def connect(self):
        for p in self.plugins.values():
            p.close()
        self.plugins = {r: K.Plugin(self.pb, os.path.join(self.pdir, "accel-%s.sock" %
                                                          r.replace("/", "-")),
                                    own_connection=True)
                        for r in (CORE, MEM)}
        for r, p in self.plugins.items():
            w = p.watch()
            u = w.wait_for(lambda x: len(x) > 0, 20)
            w.cancel()
            if u:
                self.all_ids[r] = sorted(u)

    # ---- pods
    def add(self, name, cores, mem, created):
        pod = Pod(name, cores, mem, created)
        with self.lock:
            self.pods[name] = pod
        self.api.add_pod(name, cores, mem, created)
        return pod

    def free(self, r):
        with self.lock:
            held = {i for p in self.pods.values() if p.state in ("admitting", "running")
                    for i in p.ids.get(r, [])}
            # a failed pod's IDs stay held until its status is posted (it is active till then
            # for the device manager's cleanup); model: released at once
        return [i for i in self.all_ids.get(r, []) if i not in held]

    def live(self):
        """pod-resources List: active pods' containers and the IDs held for them."""
        with self.lock:
            return [("default", p.name, "main", dict(p.ids)) for p in self.pods.values()
                    if p.state in ("admitting", "running") and p.ids]

    def fail(self, pod, msg):
        with self.lock:
            pod.state, pod.error, pod.ids = "failed", msg, {}
            self.refusals.append((pod.name, msg))
        if self.late:
            t = threading.Timer(self.late, self.api.phase, (pod.name, "Failed"))
            t.daemon = True
            t.start()
            self.timers.append(t)
        else:
            self.api.phase(pod.name, "Failed")

    def admit(self, pod, before_each=None):
        """Admits pod: its resources in random order; False when refused (pod failed)."""
        wants = pod.wants()
        self.rng.shuffle(wants)
        with self.lock:
            pod.state = "admitting"
        for r, n in wants:
            if before_each:
                before_each(pod, r)
            with self.lock:
                if pod.state != "admitting":
                    return None  # a kubelet restart forgot it: admitted anew by the caller
            free = self.free(r)
            if len(free) < n:
                self.fail(pod, "kubelet: not enough free %s" % r)
                return False
            ids = self.rng.sample(free, n)
            try:
                if self.rng.random() < 0.5:
                    got = list(self.plugins[r].prefer(free, size=n, timeout=10)
                               .container_responses[0].deviceIDs)
                    if len(got) == n and set(got) <= set(free):
                        ids = got
                resp = self.plugins[r].allocate(ids, timeout=15).container_responses[0]
            except grpc.RpcError as e:
                self.fail(pod, "%s: %s" % (e.code().name, e.details()))
                return False
            with self.lock:
                if pod.state != "admitting":
                    return None
                pod.ids[r] = ids
                pod.resp[r] = resp
        with self.lock:
            pod.state = "running"
        self.api.phase(pod.name, "Running")
        return True

    def delete(self, pod):
        with self.lock:
            pod.state, pod.ids = "deleted", {}
        self.api.delete(pod.name)

    def close(self):
        for t in self.timers:
            t.cancel()
        for p in self.plugins.values():
            p.close()
        if self.reg:
            self.reg.stop()


def check_books(state, kubelet, capacity):
    """The campaign's verdict on vGPU's books against the kubelet model: (lost, doubled,
    dead_held, detail)."""
    b = books(state)
    with kubelet.lock:
        running = [p for p in kubelet.pods.values() if p.state == "running"]
        dead = {p.uid for p in kubelet.pods.values() if p.state in ("failed", "deleted")}
    lost, doubled, detail = 0, 0, []
    dirs = {}
    for p in running:
        a = b.get((p.uid, "main"))
        d = p.config_dir()
        ok = a is not None and a["gpus"] and p.visible() == ",".join(a["gpus"]) and \
            (a.get("whole") or (d == assign_dir(state, a) and
                                os.path.isfile(os.path.join(d, "config"))))
        if not ok:
            lost += 1
            detail.append(("lost", p.name, d, a and assign_dir(state, a), p.visible(),
                           a and a["gpus"]))
        if d:
            if d in dirs:
                doubled += 1
                detail.append(("same dir", p.name, dirs[d], d))
            dirs[d] = p.name
    use = {}
    for a in b.values():
        for g in a["gpus"]:
            c, m = use.get(g, (0, 0))
            use[g] = (c + (100 if a["whole"] else a["cores"]), m + a["memory"])
    for g, (c, m) in use.items():
        if c > 100 or m > capacity:
            doubled += 1
            detail.append(("over-committed", g, c, m))
    held = [k for k in b if k[0] in dead]
    if held:
        detail.append(("dead held", held))
    return lost, doubled, len(held), detail


def wait_settled(fn, timeout):
    """Polls fn() -> (bad count, ...) until its first value is 0 or timeout passes; returns
    the last value (a failure bound, not a wait)."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if sum(v[:3]) == 0 or time.monotonic() >= end:
            return v
        time.sleep(0.2)


def pick(rng, choices):
    return choices[rng.randrange(len(choices))]


def unique_created(i):
    return "2026-01-01T%02d:%02d:%02dZ" % (i // 3600 % 24, i // 60 % 60, i % 60)


def emu_node(build, tmp, gpus):
    return K.Node(build, tmp, gpus=gpus, numa=",".join("0" * gpus))


def new_rng(seed=None):
    seed = seed if seed is not None else int(os.environ.get("FAULTS_SEED", "0")) or \
        random.randrange(1 << 30)
    return random.Random(seed), seed
