#!/usr/bin/python3
"""`acceld --mode dra` end to end on an emulated 2-GPU node: the fake API server
(tests/kube/fake-apiserver.py: HTTPS, bearer token, resource.k8s.io/v1 ResourceSlices and
ResourceClaims as `kubectl get -o json` prints them) and the python3-grpcio kubelet of
test_kubelet.py (registration socket, then NodePrepare/NodeUnprepare on the endpoint).

- the node's ResourceSlice is published: one slice, gpu-0 shared and gpu-1 exclusive
  (--dra-sharing shared --dra-gpu-sharing 1=exclusive), and every
  object acceld wrote (each POST/PUT body) valid resource.k8s.io/v1 per kubernetes-models;
- a claim for 30 % + 4 GiB of gpu-0 and one for 70 % + 8 GiB of the same GPU, read from the
  API server, are prepared: the CDI spec and the libvcuda config carry exactly that; each
  container run for real (private mount namespace, when root) sees its 4096 / 8192 MiB;
  prepared twice = same answer (the claim gone from the API server by then); unprepared:
  spec and checkpoint entry gone; a claim prepared before a restart is unprepared after it;
- a claim the API server does not have: the bounded wait ends in an error naming it, and
  nothing is written; the API server down (503): the same;
- XID 79 on GPU 1 (with a 409 Conflict injected on the next slice write): the device gets a
  NoExecute taint, and loses it after health.recoverAfter;
- `accelctl dra` shows the slice, the devices' health and the prepared claim;
- restart with a stale slice of this node and driver, a slice of another node, and our slice
  changed behind acceld's back: the stale one deleted, the other node's kept, ours updated
  in place (no second create, generation bumped); restart with a GPU gone from the node: the
  slice updated to the one left.

Every wait is bounded; nothing asserts timing. Exits 77 without grpcio/protoc, openssl or
the emulator."""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import drasetup as D  # noqa: E402  (exits 77 itself without grpcio/protoc)
from drasetup import K, T, k  # noqa: E402
import mountns  # noqa: E402  (tests/lib, on the path drasetup set)

GiB = 1 << 30
# the kubelet's DRA resource-health API (dra-health v1alpha1)
shutil.copy(os.path.join(k.SRC, "proto/dra-health/v1alpha1/api.proto"),
            os.path.join(k.TMP, "drahealth.proto"))
subprocess.check_call(["protoc", "-I", k.TMP, "--python_out", k.TMP, "drahealth.proto"])
import drahealth_pb2 as health  # noqa: E402
NODE = "node-a"
SLICE = NODE + "-" + k.DRIVER
KM = os.environ.get("KUBERNETES_MODELS_DIR",
                    os.path.join(k.SRC, "tests/kube/k8s-validate"))


def claim_obj(ns, name, uid, results):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": ns, "name": name, "uid": uid,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu-share.accel.dev",
                "capacity": {"requests": {"memory": "4Gi", "cores": "30"}}}}]}},
            "status": {"allocation": {"devices": {"results": results}}}}


def validate(objs):
    """kubernetes-models' verdict per object, or None when it is not installed."""
    if not shutil.which("node") or \
            not os.path.isdir(os.path.join(KM, "node_modules/kubernetes-models/resource.k8s.io")):
        return None
    res = subprocess.run(["node", os.path.join(k.SRC, "tests/dra/validate-objects.mjs")],
                         input=json.dumps(objs), capture_output=True, text=True,
                         env=dict(os.environ, KUBERNETES_MODELS_DIR=KM))
    return res.stdout.splitlines()


class Driver:
    def __init__(self, build, emu, knode, kc, tmp):
        self.args = ["--mode", "dra", "--node-name", NODE, "--kubeconfig", kc,
                     "--plugin-registry-dir", knode.dirs["registry"],
                     "--dra-plugin-dir", knode.dirs["plugin"],
                     "--vcuda-library", knode.lib, "--dra-sharing", "shared",
                     "--dra-gpu-sharing", "1=exclusive",
                     "--dra-claim-wait", "2s", "--recover-after", "1s"]
        self.build, self.emu, self.knode, self.tmp = build, emu, knode, tmp
        self.n = 0
        self.agent = None

    def start(self):
        self.n += 1
        d = self.knode.dirs
        self.agent = K.Acceld(self.build, self.emu, os.path.join(self.tmp, "dp"),
                              os.path.join(self.tmp, "a%d" % self.n),
                              extra=(*self.args, "--state-dir", d["state"], "--cdi-dir",
                                     d["cdi"]))
        return self.agent

    def status(self):
        try:
            with open(os.path.join(self.knode.dirs["state"], "dra-status.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def our_slices(api):
    return [s for s in api.call("GET", "/_fake/slices")
            if s["spec"]["nodeName"] == NODE and s["spec"]["driver"] == k.DRIVER]


def device(api, name):
    s = our_slices(api)
    if len(s) != 1:
        return None
    return next((d for d in s[0]["spec"]["devices"] if d["name"] == name), None)


class HealthWatch:
    """The kubelet's NodeWatchResources stream, read on a thread: every message as
    {device name: health name}."""

    def __init__(self, endpoint):
        self.ch = k.grpc.insecure_channel("unix:" + endpoint)
        call = self.ch.unary_stream("/v1alpha1.DRAResourceHealth/NodeWatchResources",
                                    request_serializer=health.NodeWatchResourcesRequest
                                    .SerializeToString,
                                    response_deserializer=health.NodeWatchResourcesResponse
                                    .FromString)
        self.stream = call(health.NodeWatchResourcesRequest())
        self.msgs = []
        self.pools = set()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for m in self.stream:
                self.pools |= {d.device.pool_name for d in m.devices}
                self.msgs.append({d.device.device_name: health.HealthStatus.Name(d.health)
                                  for d in m.devices})
        except k.grpc.RpcError:
            pass

    def last(self):
        return self.msgs[-1] if self.msgs else None

    def close(self):
        self.stream.cancel()
        self.ch.close()


def run(tap, build, emu, api, drv, knode, uuids):
    env = dict(emu.env)
    env.pop("NODE_NAME", None)
    p = subprocess.run([os.path.join(build, "src/acceld/acceld"), "--mode", "dra",
                        "--sysfs-root", emu.sysfs, "--state-dir", knode.dirs["state"]],
                       env=env, capture_output=True, text=True, timeout=T)
    tap.ok(p.returncode == 2 and "node name is needed" in p.stderr,
           "without a node name: exit 2 saying so", p.stderr)
    # a shared GPU hands libvcuda to every claim's container: no library, no start
    missing = os.path.join(knode.dirs["state"], "no-such-dir", "libvcuda.so")
    p = subprocess.run([os.path.join(build, "src/acceld/acceld"), "--mode", "dra",
                        "--dra-sharing", "shared", "--node-name", "node-a",
                        "--sysfs-root", emu.sysfs, "--state-dir", knode.dirs["state"],
                        "--vcuda-library", missing],
                       env=env, capture_output=True, text=True, timeout=T)
    tap.ok(p.returncode == 2 and f"libvcuda is missing at {missing}" in p.stderr and
           "vcudaLibrary" in p.stderr and not os.path.exists(knode.reg_sock()),
           "dra.sharing shared without libvcuda at vcudaLibrary: exit 2 naming the path and the "
           "fix, nothing served", p.stderr)
    agent = drv.start()
    ok = K.wait_until(lambda: os.path.exists(knode.reg_sock()), T)
    if not tap.ok(ok, "acceld --mode dra serves the registration socket", agent.log_text()):
        return
    info = knode.register()
    tap.ok(info.type == "DRAPlugin" and info.name == k.DRIVER and
           info.endpoint == os.path.join(knode.dirs["plugin"], "dra.sock"),
           "GetInfo names the DRA endpoint", info)

    # ---- the slice
    ok = K.wait_until(lambda: len(our_slices(api)) == 1, T)
    slices = our_slices(api)
    devs = slices[0]["spec"]["devices"] if slices else []
    tap.ok(ok and slices[0]["metadata"]["name"] == SLICE and
           [d["name"] for d in devs] == ["gpu-0", "gpu-1"] and
           devs[0].get("allowMultipleAllocations") and
           devs[0]["attributes"]["sharing"] == {"string": "vgpu"} and
           "allowMultipleAllocations" not in devs[1] and
           devs[1]["attributes"]["sharing"] == {"string": "exclusive"} and
           slices[0]["spec"]["pool"] == {"name": NODE, "generation": 1,
                                         "resourceSliceCount": 1},
           "one ResourceSlice published: gpu-0 shared, gpu-1 exclusive (dra.gpuSharing), "
           "pool = node", slices)
    attrs = slices[0]["spec"]["devices"][0]["attributes"] if slices else {}
    tap.ok(attrs.get("uuid") == {"string": uuids[0]} and "productName" in attrs and
           "driverVersion" in attrs and "pciBusID" in attrs,
           "the device's attributes come from the inventory", attrs)

    # ---- the kubelet deletes every slice of its node when it starts, and a driver's 30 s after
    # the driver is gone (pkg/kubelet/cm/dra/plugin, wipeResourceSlices: a delete collection):
    # acceld sees it on its watch and writes its slice again (the real cluster's kubelet
    # restart left the node without one: pods with claims Pending for good)
    api.call("DELETE", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D"
             + NODE)
    t0 = time.monotonic()
    ok = K.wait_until(lambda: len(our_slices(api)) == 1, T)
    again = our_slices(api)
    tap.ok(ok and [d["name"] for d in again[0]["spec"]["devices"]] == ["gpu-0", "gpu-1"],
           "the node's slices deleted as the kubelet does at its start: acceld writes its slice "
           "again (%.2f s)" % (time.monotonic() - t0), [again, agent.log_text()[-3000:]])

    # ---- a claim from the API server
    uid = k.UID_A
    api.call("POST", "/_fake/claim", claim_obj("team", "train", uid, k.SHARE))
    r = knode.prepare([("team", "train", uid)])
    e = r.claims[uid]
    tap.ok(e.error == "" and [(d.device_name, list(d.cdi_device_ids)) for d in e.devices] ==
           [("gpu-0", ["gpu.accel.dev/claim=%s-gpu-0" % uid])],
           "a claim read from the API server is prepared", r)
    spec_path = os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % uid)
    spec = json.load(open(spec_path)) if os.path.exists(spec_path) else {}
    nodes = [n["path"] for d in spec.get("devices", [])
             for n in d["containerEdits"].get("deviceNodes", [])]
    tap.ok(nodes == ["/dev/nvidia0"], "its CDI device is /dev/nvidia0 (container path, whatever "
           "--dev-root is)", spec)
    mounts = {m["containerPath"]: m["hostPath"]
              for m in spec.get("containerEdits", {}).get("mounts", [])}
    conf = open(mounts["/etc/vcuda/config"]).read() if "/etc/vcuda/config" in mounts else ""
    tap.ok("memory_limit = %d" % (4 * GiB) in conf and "core_limit = 30" in conf and
           "devices = %s" % uuids[0] in conf,
           "its libvcuda config has exactly the consumed capacity on its GPU", conf)
    container_run(tap, build, emu, spec, 4096)
    # a second share of the same GPU: 70 % + 8 GiB, its own config and view
    big = "0f3c6a8e-6666-4a1b-9c2d-ffffffffffff"
    api.call("POST", "/_fake/claim", claim_obj("team", "large", big, [
        dict(k.SHARE[0], shareID="7d1c3c43-4d42-4a79-b0d2-5b9d0c0e0e02",
             consumedCapacity={"memory": "8Gi", "cores": "70"})]))
    rb = knode.prepare([("team", "large", big)])
    big_spec_path = os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % big)
    big_spec = json.load(open(big_spec_path)) if os.path.exists(big_spec_path) else {}
    big_conf = [m["hostPath"] for m in big_spec.get("containerEdits", {}).get("mounts", [])
                if m["containerPath"] == "/etc/vcuda/config"]
    conf = open(big_conf[0]).read() if big_conf else ""
    tap.ok(rb.claims[big].error == "" and "memory_limit = %d" % (8 * GiB) in conf and
           "core_limit = 70" in conf, "a second share of gpu-0 (70 % + 8 GiB) gets its own "
           "config", rb)
    container_run(tap, build, emu, big_spec, 8192)
    check(knode.unprepare([("team", "large", big)]).claims[big].error == "", "unprepare large")

    again = knode.prepare([("team", "train", uid)])
    api.call("POST", "/_fake/claim", {"op": "delete", "namespace": "team", "name": "train"})
    third = knode.prepare([("team", "train", uid)])
    tap.ok(again == r and third == r, "prepared twice, and again with the claim gone from the "
           "API server: the same answer")

    # ---- claims that cannot be read
    ghost = "0f3c6a8e-3333-4a1b-9c2d-cccccccccccc"
    r = knode.prepare([("team", "ghost", ghost)])
    err = r.claims[ghost].error
    tap.ok("team/ghost" in err and "not found" in err and "after 2.0 s" in err and
           not os.path.exists(os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % ghost)),
           "a claim the API server does not have: error after the bounded wait, nothing "
           "written", err)
    api.call("POST", "/_fake/claim", claim_obj("team", "late", ghost, k.WHOLE))
    api.call("POST", "/_fake/down", {"on": True})
    r = knode.prepare([("team", "late", ghost)])
    api.call("POST", "/_fake/down", {"on": False})
    err = r.claims[ghost].error
    tap.ok("team/late" in err and ("503" in err or "unavailable" in err.lower()) and
           not any(ghost in f for f in knode.files()),
           "the API server down during prepare: the error in the claim's entry, nothing "
           "half-written", err)

    # ---- XID 79 -> taint (through a 409 on the write), recovery -> no taint
    hw = HealthWatch(info.endpoint)
    ok = K.wait_until(lambda: hw.last() == {"gpu-0": "HEALTHY", "gpu-1": "HEALTHY"}, T)
    tap.ok(ok and hw.pools == {NODE}, "NodeWatchResources (dra-health v1alpha1): both devices "
           "HEALTHY in pool " + NODE, hw.msgs)
    api.call("POST", "/_fake/conflicts", {"n": 1})
    t0 = time.monotonic()
    emu.cmd("xid", 1, 79)
    ok = K.wait_until(lambda: (device(api, "gpu-1") or {}).get("taints") ==
                      [{"key": "gpu.accel.dev/unhealthy", "value": "fatal-xid",
                        "effect": "NoExecute"}], T)
    # a figure for docs/dra.md, not an assertion (a LIST, a 409, a LIST and a PUT in it)
    tap.diag("XID 79 -> taint stored on the API server: %.0f ms" % ((time.monotonic() - t0) * 1e3))
    # the status file follows the answer to the write
    ok = ok and K.wait_until(lambda: (drv.status() or {}).get("synced") and
                             drv.status()["devices"][1]["taint"] == "NoExecute", T)
    st = drv.status() or {}
    tap.ok(ok and st.get("counts", {}).get("conflicts", 0) >= 1 and
           not (device(api, "gpu-0") or {}).get("taints"),
           "XID 79 taints gpu-1 NoExecute (after a 409 Conflict: listed again, written)",
           json.dumps([device(api, "gpu-1"), st.get("counts")]))
    ok = K.wait_until(lambda: hw.last() == {"gpu-0": "HEALTHY", "gpu-1": "UNHEALTHY"}, T)
    tap.ok(ok, "the kubelet's health stream reports gpu-1 UNHEALTHY", hw.msgs)
    acctl = accelctl(build, knode, "dra")
    tap.ok(acctl.returncode == 0 and SLICE in acctl.stdout and "NoExecute" in acctl.stdout and
           uid in acctl.stdout and "gpu-0" in acctl.stdout,
           "accelctl dra shows the slice, the taint and the prepared claim",
           acctl.stdout + acctl.stderr)
    ok = K.wait_until(lambda: device(api, "gpu-1") is not None and
                      "taints" not in device(api, "gpu-1"), T)
    tap.ok(ok, "the taint is removed after health.recoverAfter", device(api, "gpu-1"))
    ok = K.wait_until(lambda: hw.last() == {"gpu-0": "HEALTHY", "gpu-1": "HEALTHY"}, T)
    tap.ok(ok, "and the health stream reports gpu-1 HEALTHY again", hw.msgs[-3:])
    hw.close()

    # ---- a GPU that falls off the bus: tainted while gone, untainted once back and quiet;
    # its slice write meets 7 conflicts: 5 re-LISTs at once, then a backoff, then through
    before = (drv.status() or {}).get("counts", {})
    api.call("POST", "/_fake/conflicts", {"n": 7})
    emu.cmd("lose", 0)
    ok = K.wait_until(lambda: [t.get("effect") for t in
                               (device(api, "gpu-0") or {}).get("taints", [])] == ["NoExecute"],
                      T)
    tap.ok(ok and len(our_slices(api)[0]["spec"]["devices"]) == 2,
           "a lost GPU stays in the slice with a NoExecute taint", device(api, "gpu-0"))
    ok = K.wait_until(lambda: (drv.status() or {}).get("synced"), T)
    after = (drv.status() or {}).get("counts", {})
    tap.ok(ok and after.get("conflicts", 0) - before.get("conflicts", 0) == 7 and
           after.get("failures", 0) - before.get("failures", 0) == 1,
           "7 conflicts in a row: the sixth backs off (one failure), then the write goes through",
           [before, after])
    emu.cmd("restore", 0)
    ok = K.wait_until(lambda: device(api, "gpu-0") is not None and
                      "taints" not in device(api, "gpu-0"), T)
    tap.ok(ok, "restored and quiet for health.recoverAfter: the taint is gone",
           device(api, "gpu-0"))

    # ---- everything written is valid resource.k8s.io/v1
    log = api.call("GET", "/_fake/log")
    written = [json.loads(x["body"]) for x in log
               if x["method"] in ("POST", "PUT") and "resourceslices" in x["path"]]
    verdicts = validate(written)
    if verdicts is None:
        tap.skip("every ResourceSlice acceld wrote is valid resource.k8s.io/v1",
                 "kubernetes-models not installed")
    else:
        tap.ok(len(written) >= 3 and verdicts == ["ok %d" % i for i in range(len(written))],
               "every ResourceSlice acceld wrote (%d) is valid resource.k8s.io/v1" % len(written),
               "\n".join(verdicts))

    # ---- unprepare
    r = knode.unprepare([("team", "train", uid)])
    tap.ok(r.claims[uid].error == "" and not os.path.exists(spec_path),
           "unprepared: the CDI spec is gone", r)

    # ---- restart: reconcile, do not duplicate; a claim prepared before is unprepared after
    whole = "0f3c6a8e-4444-4a1b-9c2d-dddddddddddd"
    api.call("POST", "/_fake/claim", claim_obj("team", "whole", whole, k.WHOLE))
    r = knode.prepare([("team", "whole", whole)])
    check(r.claims[whole].error == "", r)
    # SIGTERM while a prepare waits for the API server (down): the call ends UNAVAILABLE
    api.call("POST", "/_fake/down", {"on": True})
    slow = "0f3c6a8e-5555-4a1b-9c2d-eeeeeeeeeeee"
    got = {}

    def prepare_slow():
        try:
            got["resp"] = knode.prepare([("team", "slow", slow)])
        except k.grpc.RpcError as e:
            got["code"] = e.code()

    th = threading.Thread(target=prepare_slow, daemon=True)
    th.start()
    K.wait_until(lambda: any(x["path"].endswith("/resourceclaims/slow")
                             for x in api.call("GET", "/_fake/log")), T)
    rc = agent.stop(signal.SIGTERM)
    th.join(T)
    api.call("POST", "/_fake/down", {"on": False})
    tap.ok(rc == 0 and got.get("code") == k.grpc.StatusCode.UNAVAILABLE,
           "SIGTERM while a prepare waits for the API server: that call ends UNAVAILABLE, "
           "exit 0 (no sanitizer report, nothing leaked)", [rc, got, agent.log_text()[-3000:]])
    cur = our_slices(api)[0]
    gen = cur["spec"]["pool"]["generation"]
    stale = json.loads(json.dumps(cur))
    stale["metadata"] = {"name": NODE + "-old-" + k.DRIVER}
    other = json.loads(json.dumps(cur))
    other["metadata"] = {"name": "node-b-" + k.DRIVER}
    other["spec"]["nodeName"] = "node-b"
    other["spec"]["pool"]["name"] = "node-b"
    cur["spec"]["devices"][0]["attributes"]["productName"] = {"string": "edited elsewhere"}
    for s in (stale, other, cur):
        api.call("POST", "/_fake/slice", s)
    before = len(api.call("GET", "/_fake/log"))
    os.unlink(os.path.join(knode.dirs["state"], "dra-status.json"))  # the last run's
    agent = drv.start()

    def reconciled():
        st = drv.status() or {}
        return st.get("synced") and st.get("counts", {}).get("updates", 0) >= 1

    ok = K.wait_until(reconciled, T)
    names = sorted(s["metadata"]["name"] for s in api.call("GET", "/_fake/slices"))
    mine = our_slices(api)
    log = api.call("GET", "/_fake/log")[before:]
    posts = [x for x in log if x["method"] == "POST" and "resourceslices" in x["path"]]
    tap.ok(ok and names == sorted([SLICE, "node-b-" + k.DRIVER]) and len(mine) == 1 and
           mine[0]["spec"]["pool"]["generation"] == gen + 1 and
           mine[0]["spec"]["devices"][0]["attributes"]["productName"] != {
               "string": "edited elsewhere"} and not posts,
           "restart: the stale slice deleted, another node's kept, ours updated in place "
           "(no second create, generation + 1)", json.dumps([names, drv.status()]))
    api.call("POST", "/_fake/claim", {"op": "delete", "namespace": "team", "name": "whole"})
    r = knode.unprepare([("team", "whole", whole)])
    tap.ok(r.claims[whole].error == "" and not any(whole in f for f in knode.files()),
           "a claim prepared before the restart is unprepared after it", r)
    rc = agent.stop(signal.SIGTERM)
    tap.ok(rc == 0, "the restarted acceld exits 0 too", agent.log_text()[-3000:])

    # ---- a GPU gone from the node across a restart: the slice is updated to one device
    subprocess.run([emu.emu, "init", "--gpus", "1"], env=emu.env, check=True,
                   stdout=subprocess.DEVNULL)
    gen = our_slices(api)[0]["spec"]["pool"]["generation"]
    before = len(api.call("GET", "/_fake/log"))
    os.unlink(os.path.join(knode.dirs["state"], "dra-status.json"))
    agent = drv.start()
    ok = K.wait_until(lambda: (drv.status() or {}).get("synced") and
                      drv.status()["counts"]["updates"] >= 1, T)
    mine = our_slices(api)
    log = api.call("GET", "/_fake/log")[before:]
    tap.ok(ok and len(mine) == 1 and [d["name"] for d in mine[0]["spec"]["devices"]] ==
           ["gpu-0"] and mine[0]["spec"]["pool"]["generation"] == gen + 1 and
           not [x for x in log if x["method"] == "POST"],
           "a GPU gone across a restart: the slice updated in place to the one left",
           json.dumps([mine, drv.status()]))
    rc = agent.stop(signal.SIGTERM)
    tap.ok(rc == 0, "and acceld exits 0", agent.log_text()[-3000:])
    return agent


def accelctl(build, knode, *args):
    return subprocess.run([os.path.join(build, "src/cli/accelctl"), *args, "--state-dir",
                           knode.dirs["state"]], capture_output=True, text=True, timeout=T)


def container_run(tap, build, emu, spec, mib):
    """The claim's CDI spec applied in a private mount namespace; cuda-demo sees mib MiB."""
    name = "a container with the claim's CDI edits sees its %d MiB" % mib
    if os.environ.get("ASAN_OPTIONS"):
        return tap.skip(name, "sanitizer build (libvcuda comes through /etc/ld.so.preload)")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return tap.skip(name, "needs root and unshare")
    edits = spec.get("containerEdits", {})
    env = dict(emu.env, LD_LIBRARY_PATH=os.path.join(build, "src/emu"))
    env.pop("LD_PRELOAD", None)
    env.update(e.split("=", 1) for e in edits.get("env", []))
    mounts = [(m["hostPath"], m["containerPath"], "ro" in m["options"])
              for m in edits.get("mounts", [])]
    p = mountns.run(mounts, [os.path.join(build, "demo/cuda-demo"), "--alloc", "512",
                             "--seconds", "1"], env)
    first = [ln for ln in p.stdout.splitlines() if ln.startswith("cuMemGetInfo")]
    tap.ok(p.returncode == 0 and first and first[0].endswith("of %d MiB" % mib), name,
           p.stdout + p.stderr)


def main():
    build = os.path.abspath(k.BUILD)
    D.require_dra(build)
    tap = K.Tap()
    tmp = k.TMP
    emu, uuids, knode, api, kc = D.start_node(build, tmp, NODE)
    drv = Driver(build, emu, knode, kc, tmp)
    D.guarded(tap, lambda: run(tap, build, emu, api, drv, knode, uuids), api, tmp, drv)


if __name__ == "__main__":
    main()
