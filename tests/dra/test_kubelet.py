#!/usr/bin/python3
"""A python3-grpcio kubelet against the DRA plugin (tests/dra/dra-test-plugin):
finds the registration socket, GetInfo + NotifyRegistrationStatus, dials the
endpoint it names and calls NodePrepareResources / NodeUnprepareResources
(v1 and v1beta1) with claims served from JSON files shaped as `kubectl get
resourceclaim -o json` prints them. Prints TAP; exits 77 without grpcio or
protoc. Runs under /usr/bin/python3 (Debian's packages)."""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import traceback

try:
    import grpc
except ImportError:
    print("1..0 # SKIP python3-grpcio is not installed")
    sys.exit(77)
if not shutil.which("protoc"):
    print("1..0 # SKIP protoc is not installed")
    sys.exit(77)

SRC = os.environ.get("ACCEL_SOURCE_ROOT", ".")
BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
PLUGIN = os.path.join(BUILD, "tests/dra/dra-test-plugin")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import mountns  # noqa: E402
mountns.private()  # the claims' tmpfs region dirs acceld mounts go with this process
TMP = tempfile.mkdtemp(prefix="accel-dra-")
# each api.proto under its own name: protobuf's pool refuses two files named alike
for sub, name in (("pluginregistration/v1", "reg"), ("dra/v1", "drav1")):
    shutil.copy(os.path.join(SRC, "proto", sub, "api.proto"), os.path.join(TMP, name + ".proto"))
    subprocess.check_call(["protoc", "-I", TMP, "--python_out", TMP, name + ".proto"])
sys.path.insert(0, TMP)
import reg_pb2 as reg  # noqa: E402
import drav1_pb2 as dra  # noqa: E402
DRIVER = "gpu.accel.dev"
V1 = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
V1BETA1 = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"
GiB = 1 << 30
CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def wait_until(cond, timeout=10.0):
    """Polls cond until true or timeout (a failure bound, not a wait)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


class Node:
    def __init__(self, root, env=None, lib=None):
        self.root = root
        self.env = env
        self.dirs = {k: os.path.join(root, k) for k in
                     ("registry", "plugin", "cdi", "state", "claims")}
        for d in self.dirs.values():
            os.makedirs(d, exist_ok=True)
        self.lib = lib or os.path.join(root, "libvcuda.so")
        if not lib:
            open(self.lib, "w").close()
        self.proc = None

    def start(self):
        d = self.dirs
        self.proc = subprocess.Popen([PLUGIN, d["registry"], d["plugin"], d["cdi"], d["state"],
                                      d["claims"], self.lib], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=self.env)
        line = self.proc.stdout.readline()
        assert line.strip() == b"READY", "plugin did not start: %r" % line

    def stop(self):
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=10)
        assert rc == 0, "plugin exited with %d" % rc

    def claim(self, ns, name, uid, results):
        obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"namespace": ns, "name": name, "uid": uid},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                   "deviceClassName": "gpu.accel.dev"}}]}},
               "status": {"allocation": {"devices": {"results": results}}}}
        with open(os.path.join(self.dirs["claims"], "%s_%s.json" % (ns, name)), "w") as f:
            json.dump(obj, f)

    def reg_sock(self):
        return os.path.join(self.dirs["registry"], DRIVER + "-reg.sock")

    def register(self):
        """What the kubelet's plugin watcher does with a new socket."""
        with grpc.insecure_channel("unix:" + self.reg_sock()) as ch:
            info = ch.unary_unary("/pluginregistration.Registration/GetInfo",
                                  request_serializer=reg.InfoRequest.SerializeToString,
                                  response_deserializer=reg.PluginInfo.FromString)(
                reg.InfoRequest(), timeout=10)
            ch.unary_unary("/pluginregistration.Registration/NotifyRegistrationStatus",
                           request_serializer=reg.RegistrationStatus.SerializeToString,
                           response_deserializer=reg.RegistrationStatusResponse.FromString)(
                reg.RegistrationStatus(plugin_registered=True), timeout=10)
        return info

    def call(self, method, req, resp_type, prefix=V1):
        info = self.register()
        with grpc.insecure_channel("unix:" + info.endpoint) as ch:
            return ch.unary_unary(prefix + method, request_serializer=type(req).SerializeToString,
                                  response_deserializer=resp_type.FromString)(req, timeout=10)

    def prepare(self, claims, prefix=V1):
        req = dra.NodePrepareResourcesRequest(
            claims=[dra.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims])
        return self.call("NodePrepareResources", req, dra.NodePrepareResourcesResponse, prefix)

    def unprepare(self, claims):
        req = dra.NodeUnprepareResourcesRequest(
            claims=[dra.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims])
        return self.call("NodeUnprepareResources", req, dra.NodeUnprepareResourcesResponse)

    def files(self):
        out = []
        for d in ("cdi", "state"):
            for base, _, names in os.walk(self.dirs[d]):
                out += [os.path.relpath(os.path.join(base, n), self.root) for n in names]
        return sorted(out)


UID_A = "0f3c6a8e-1111-4a1b-9c2d-aaaaaaaaaaaa"
UID_B = "0f3c6a8e-2222-4a1b-9c2d-bbbbbbbbbbbb"
SHARE = [{"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0",
          "shareID": "7d1c3c43-4d42-4a79-b0d2-5b9d0c0e0e01",
          "consumedCapacity": {"memory": "4Gi", "cores": "30"}}]
WHOLE = [{"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-1"}]


@case
def registration_answers_get_info(n):
    info = n.register()
    assert info.type == "DRAPlugin", info
    assert info.name == DRIVER, info
    assert info.endpoint == os.path.join(n.dirs["plugin"], "dra.sock"), info
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"], info


@case
def share_prepared_with_exact_quota(n):
    n.claim("team", "train", UID_A, SHARE)
    r = n.prepare([("team", "train", UID_A)])
    assert list(r.claims) == [UID_A], r
    e = r.claims[UID_A]
    assert e.error == "", e.error
    assert [(d.pool_name, d.device_name, list(d.request_names), list(d.cdi_device_ids))
            for d in e.devices] == [("node-a", "gpu-0", ["gpu"],
                                     ["gpu.accel.dev/claim=%s-gpu-0" % UID_A])], e
    spec_path = os.path.join(n.dirs["cdi"], "accel-dra-%s.json" % UID_A)
    assert stat.S_IMODE(os.stat(spec_path).st_mode) == 0o644
    spec = json.load(open(spec_path))
    assert spec["kind"] == "gpu.accel.dev/claim"
    assert [d["name"] for d in spec["devices"]] == ["%s-gpu-0" % UID_A]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]
    edits = spec["containerEdits"]
    assert "NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000" in edits["env"]
    # the config is at libvcuda's own path: a VCUDA_CONFIG there only made libvcuda warn that
    # it ignores it, in every container (seen on the real cluster)
    assert not any(e.startswith("VCUDA_CONFIG=") for e in edits["env"]), edits["env"]
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    assert set(mounts) == {"/usr/local/vcuda/libvcuda.so", "/etc/vcuda/config",
                           "/etc/ld.so.preload", "/var/run/vcuda"}, mounts
    assert mounts["/usr/local/vcuda/libvcuda.so"]["hostPath"] == n.lib
    assert "ro" in mounts["/etc/vcuda/config"]["options"]
    assert "rw" in mounts["/var/run/vcuda"]["options"]
    conf = open(mounts["/etc/vcuda/config"]["hostPath"]).read()
    kv = dict(line.split(" = ") for line in conf.splitlines() if not line.startswith("#"))
    assert kv == {"memory_limit": str(4 * GiB), "core_limit": "30",
                  "region": "/var/run/vcuda/usage",
                  "devices": "GPU-00000000-0000-0000-0000-000000000000"}, kv
    assert stat.S_IMODE(os.stat(mounts["/etc/vcuda/config"]["hostPath"]).st_mode) == 0o444
    assert open(mounts["/etc/ld.so.preload"]["hostPath"]).read() == \
        "/usr/local/vcuda/libvcuda.so\n"
    ck = os.path.join(n.dirs["state"], "dra-checkpoint.json")
    assert stat.S_IMODE(os.stat(ck).st_mode) == 0o600


@case
def prepare_twice_same_answer(n):
    n.claim("team", "train", UID_A, SHARE)
    first = n.prepare([("team", "train", UID_A)])
    files = n.files()
    os.unlink(os.path.join(n.dirs["claims"], "team_train.json"))  # the answer is the checkpoint's
    again = n.prepare([("team", "train", UID_A)], prefix=V1BETA1)
    assert again == first, (again, first)
    assert n.files() == files


@case
def every_claim_gets_an_entry_and_api_failure_writes_nothing(n):
    n.claim("team", "whole", UID_B, WHOLE)
    r = n.prepare([("team", "whole", UID_B), ("team", "missing", UID_A)])
    assert set(r.claims) == {UID_A, UID_B}, r
    assert r.claims[UID_B].error == "" and len(r.claims[UID_B].devices) == 1
    assert "cannot read ResourceClaim team/missing" in r.claims[UID_A].error, r
    assert not any(UID_A in f for f in n.files()), n.files()
    spec = json.load(open(os.path.join(n.dirs["cdi"], "accel-dra-%s.json" % UID_B)))
    assert "mounts" not in spec["containerEdits"]  # a whole GPU gets no libvcuda


@case
def bad_allocation_is_an_error_in_the_entry(n):
    bad = [dict(SHARE[0], device="gpu-9")]
    n.claim("team", "train", UID_A, bad)
    r = n.prepare([("team", "train", UID_A)])
    assert "gpu-9 is not a GPU of this node" in r.claims[UID_A].error, r
    assert n.files() == [], n.files()


@case
def claim_of_other_drivers_only_writes_no_spec(n):
    n.claim("team", "nic", UID_B, [dict(WHOLE[0], driver="nic.example.com")])
    r = n.prepare([("team", "nic", UID_B)])
    assert r.claims[UID_B].error == "" and len(r.claims[UID_B].devices) == 0, r
    assert n.files() == ["state/dra-checkpoint.json"], n.files()
    assert n.unprepare([("team", "nic", UID_B)]).claims[UID_B].error == ""


@case
def unprepare_unknown_claim_succeeds(n):
    r = n.unprepare([("team", "nothing", UID_B)])
    assert list(r.claims) == [UID_B] and r.claims[UID_B].error == "", r


@case
def unprepare_after_restart(n):
    n.claim("team", "train", UID_A, SHARE)
    assert n.prepare([("team", "train", UID_A)]).claims[UID_A].error == ""
    n.stop()
    n.start()
    r = n.unprepare([("team", "train", UID_A)])
    assert r.claims[UID_A].error == "", r
    assert n.files() == ["state/dra-checkpoint.json"], n.files()
    ck = json.load(open(os.path.join(n.dirs["state"], "dra-checkpoint.json")))
    assert ck["claims"] == [], ck


@case
def registration_socket_recreated_when_removed(n):
    n.register()
    os.unlink(n.reg_sock())
    assert wait_until(lambda: os.path.exists(n.reg_sock())), "socket not re-created"
    info = n.register()
    assert info.name == DRIVER


def main():
    print("1..%d" % len(CASES))
    failed = 0
    for i, fn in enumerate(CASES, 1):
        node = Node(os.path.join(TMP, "c%d" % i))  # short: sun_path is 108 bytes
        try:
            node.start()
            fn(node)
            node.stop()  # exit status 0: no sanitizer report at exit
            print("ok %d - %s" % (i, fn.__name__))
        except Exception:
            failed += 1
            print("not ok %d - %s" % (i, fn.__name__))
            for line in traceback.format_exc().splitlines():
                print("# " + line)
        finally:
            if node.proc and node.proc.poll() is None:
                node.proc.stdin.close()
                node.proc.wait(timeout=10)
    shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
