#!/usr/bin/python3
"""DRA per GPU beside the device-plugin modes, in one acceld, end to end on an emulated
2-GPU node: GPU 0 in pgpu mode, GPU 1 in dra mode (`--gpu-modes <GPU 1's UUID>=dra`, then,
after a restart, `--mode dra --gpu-modes 0=pgpu`). The kubelet is two: the python3-grpcio
device-plugin kubelet of tests/interop/kubelet.py (Register on kubelet.sock, ListAndWatch,
Allocate) and the DRA kubelet of test_kubelet.py (registration socket, NodePrepare); the
API server is tests/kube/fake-apiserver.py.

- the kubelet's nvidia.com/gpu lists GPU 0 only; the ResourceSlice holds gpu-1 only (a
  GPU is never offered by both sides); Allocate of GPU 0 works, of GPU 1 is refused;
- a claim on gpu-1 read from the API server is prepared; one naming gpu-0 is refused;
- an XID on GPU 1 taints gpu-1 in the slice and the DRA health stream says UNHEALTHY while
  nvidia.com/gpu keeps GPU 0 Healthy; an XID on GPU 0 turns it Unhealthy on ListAndWatch
  while gpu-1 stays untainted; both recover after health.recoverAfter;
- the SLI file (<stateDir>/acceld-stats.json) counts the Allocate of nvidia.com/gpu and the
  prepares of gpu.accel.dev, in one file;
- SIGTERM: exit 0, the device-plugin socket, the registration socket and dra.sock removed;
- restarted as `mode: dra` with GPU 0 an exception: the same split, the claim prepared
  before the restart unprepared after it; exit 0 again;
- `mode: dra` with GPU 0 an exception time-sliced by NVIDIA's sharing section: its replicas
  beside gpu-1's slice; one SIGHUP applies dra.taintEffect to the DRA side;
- GPU 0 vgpu beside GPU 1 dra: vcuda-core has GPU 0's units only, an XID on GPU 1 taints
  gpu-1 and leaves them Healthy; vgpu/ and the DRA checkpoint share the state dir;
- `mode: dra` alone (every GPU DRA's, its own loop) writes the SLI file too.

- without a node name, a node with a DRA GPU exits 2 before serving anything.

Every wait is bounded; nothing asserts timing. Exits 77 without grpcio/protoc, openssl or
the emulator."""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import drasetup as D  # noqa: E402  (exits 77 itself without grpcio/protoc)
from drasetup import K, T, k  # noqa: E402
import test_dra_mode as M  # noqa: E402  (HealthWatch, our_slices, device, claim_obj)

NODE = M.NODE
UID = "0f3c6a8e-7777-4a1b-9c2d-777777777777"
BAD = "0f3c6a8e-8888-4a1b-9c2d-888888888888"
TAINT = [{"key": "gpu.accel.dev/unhealthy", "value": "unhealthy", "effect": "NoSchedule"}]


def unhealthy(u):
    return {i for i, (h, _) in u.items() if h != "Healthy"}


def stats(state):
    try:
        with open(os.path.join(state, "acceld-stats.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def resource(st, name):
    return next((r for r in (st or {}).get("resources", []) if r.get("name") == name), None)


def start(build, emu, dp, tmp, n, knode, kc, modes, config=None):
    d = knode.dirs
    return K.Acceld(build, emu, dp, os.path.join(tmp, "a%d" % n), config=config, extra=(
        *modes, "--node-name", NODE, "--kubeconfig", kc,
        "--plugin-registry-dir", d["registry"], "--dra-plugin-dir", d["plugin"],
        "--vcuda-library", knode.lib, "--dra-claim-wait", "2s", "--recover-after", "1s",
        "--state-dir", d["state"], "--cdi-dir", d["cdi"]))


SLICING = """\
mode: dra
gpuModes: "0=pgpu"
dra:
  taintEffect: %s
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""


def split(tap, api, pl, uuids, what):
    """nvidia.com/gpu has GPU 0 only, the slice gpu-1 only."""
    w = pl.watch()
    first = w.wait_for(lambda u: True, T)
    ok = K.wait_until(lambda: len(M.our_slices(api)) == 1, T)
    devs = M.our_slices(api)[0]["spec"]["devices"] if ok else []
    tap.ok(first is not None and set(first) == {uuids[0]} and
           [(x["name"], x["attributes"]["uuid"]["string"]) for x in devs] ==
           [("gpu-1", uuids[1])],
           what + ": nvidia.com/gpu lists GPU 0 only, the ResourceSlice gpu-1 only",
           json.dumps([first, devs]))
    return w


def run(tap, build, emu, api, knode, kc, pb, tmp, uuids):
    dp = os.path.join(tmp, "dp")
    os.makedirs(dp)
    kubelet = K.FakeKubelet(pb, dp).start()
    env = dict(emu.env)
    env.pop("NODE_NAME", None)
    p = subprocess.run([os.path.join(build, "src/acceld/acceld"), "--gpu-modes", "1=dra",
                        "--device-plugin-dir", dp, "--sysfs-root", emu.sysfs, "--dev-root",
                        emu.dev, "--state-dir", os.path.join(tmp, "nonode"), "--kubeconfig", kc,
                        "--plugin-registry-dir", knode.dirs["registry"]],
                       env=env, capture_output=True, text=True, timeout=T)
    tap.ok(p.returncode == 2 and "node name is needed" in p.stderr and kubelet.count() == 0 and
           "serving" not in p.stderr,
           "GPU 1 in mode dra without a node name: exit 2 saying so, before serving anything",
           p.stderr[-2000:])
    agent = start(build, emu, dp, tmp, 1, knode, kc, ("--gpu-modes", uuids[1] + "=dra"))
    try:
        ok = K.wait_until(lambda: kubelet.count() >= 1 and os.path.exists(knode.reg_sock()), T)
        if not tap.ok(ok and kubelet.last().resource_name == "nvidia.com/gpu",
                      "one acceld registers nvidia.com/gpu with the kubelet and serves the DRA "
                      "registration socket", agent.log_text()[-3000:]):
            return
        info = knode.register()
        pl = K.Plugin(pb, agent.sock)
        w = split(tap, api, pl, uuids, "GPU 0 pgpu, GPU 1 dra (by UUID)")

        # ---- a claim on gpu-1 prepared; one on gpu-0 refused; Allocate of GPU 0 works
        api.call("POST", "/_fake/claim", M.claim_obj("team", "whole", UID, k.WHOLE))
        r = knode.prepare([("team", "whole", UID)])
        e = r.claims[UID]
        spec = os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % UID)
        tap.ok(e.error == "" and [(x.device_name, list(x.cdi_device_ids)) for x in e.devices] ==
               [("gpu-1", ["gpu.accel.dev/claim=%s-gpu-1" % UID])] and os.path.exists(spec),
               "a claim on gpu-1 is prepared (CDI spec written)", r)
        api.call("POST", "/_fake/claim", M.claim_obj("team", "other", BAD, [
            dict(k.WHOLE[0], device="gpu-0")]))
        r = knode.prepare([("team", "other", BAD)])
        tap.ok("gpu-0" in r.claims[BAD].error and
               not os.path.exists(os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % BAD)),
               "a claim naming gpu-0 (a device-plugin GPU) is refused, nothing written",
               r.claims[BAD].error)
        a = pl.allocate([uuids[0]])
        envs = dict(a.container_responses[0].envs)
        tap.ok(envs.get("NVIDIA_VISIBLE_DEVICES") == uuids[0],
               "Allocate of GPU 0 on nvidia.com/gpu works", a)
        try:
            pl.allocate([uuids[1]])
            refused = False
        except K.grpc.RpcError as err:
            refused = err.code() == K.grpc.StatusCode.INVALID_ARGUMENT
        tap.ok(refused, "Allocate of GPU 1 (DRA's) is refused")

        # ---- XID on GPU 1: the DRA side only; then on GPU 0: the device plugin only
        hw = M.HealthWatch(info.endpoint)
        ok = K.wait_until(lambda: hw.last() == {"gpu-1": "HEALTHY"}, T)
        tap.ok(ok, "the DRA health stream lists gpu-1 only, HEALTHY", hw.msgs)
        emu.cmd("xid", 1, 94)
        ok = K.wait_until(lambda: (M.device(api, "gpu-1") or {}).get("taints") == TAINT, T)
        ok = ok and K.wait_until(lambda: hw.last() == {"gpu-1": "UNHEALTHY"}, T)
        tap.ok(ok and not unhealthy(w.latest()),
               "XID 94 on GPU 1: gpu-1 tainted NoSchedule and UNHEALTHY on the health stream; "
               "GPU 0 stays Healthy on nvidia.com/gpu", json.dumps([M.device(api, "gpu-1"),
                                                                    hw.msgs, w.latest()]))
        ok = K.wait_until(lambda: "taints" not in (M.device(api, "gpu-1") or {"taints": 1}), T)
        tap.ok(ok, "gpu-1's taint is removed after health.recoverAfter", M.device(api, "gpu-1"))
        emu.cmd("xid", 0, 94)
        down = w.wait_for(lambda u: unhealthy(u) == {uuids[0]}, T)
        tap.ok(down is not None and "taints" not in (M.device(api, "gpu-1") or {"taints": 1}) and
               hw.last() == {"gpu-1": "HEALTHY"},
               "XID 94 on GPU 0: Unhealthy on nvidia.com/gpu; gpu-1 untainted and HEALTHY",
               json.dumps([w.latest(), M.device(api, "gpu-1"), hw.msgs[-2:]]))
        back = w.wait_for(lambda u: not unhealthy(u), T)
        tap.ok(back is not None, "GPU 0 Healthy again after health.recoverAfter", w.latest())
        hw.close()

        # ---- one SLI file for both sides
        def gpu_stat(st, uuid):
            return next((g for g in (st or {}).get("gpus", []) if g["uuid"] == uuid), {})

        def counted():
            st = stats(knode.dirs["state"])
            return ((resource(st, "nvidia.com/gpu") or {}).get("allocate", {}).get("ok") == 1 and
                    (resource(st, k.DRIVER) or {}).get("allocate", {}).get("ok") == 1 and
                    (resource(st, k.DRIVER) or {}).get("allocate", {}).get("error") == 1 and
                    (resource(st, k.DRIVER) or {}).get("registrations", {}).get("ok", 0) >= 1 and
                    gpu_stat(st, uuids[0]).get("toUnhealthy") == 1 and
                    gpu_stat(st, uuids[1]).get("toUnhealthy") == 1 and
                    gpu_stat(st, uuids[1]).get("toHealthy") == 1)
        ok = K.wait_until(counted, T)
        tap.ok(ok, "acceld-stats.json, one file for both sides: nvidia.com/gpu's Allocate, "
               "gpu.accel.dev's prepares (1 ok, 1 error) and registration, each GPU's health "
               "transitions", json.dumps(stats(knode.dirs["state"])))

        w.cancel()
        pl.close()
        rc = agent.stop(signal.SIGTERM, timeout=T)
        socks = [agent.sock, knode.reg_sock(), os.path.join(knode.dirs["plugin"], "dra.sock")]
        tap.ok(rc == 0 and not [s for s in socks if os.path.exists(s)],
               "SIGTERM: exit 0, the device-plugin, registration and DRA sockets removed",
               agent.log_text()[-3000:])

        # ---- mode dra with GPU 0 an exception: the same split; the claim survives
        agent = start(build, emu, dp, tmp, 2, knode, kc, ("--mode", "dra", "--gpu-modes", "0=pgpu"))
        ok = K.wait_until(lambda: kubelet.count() >= 2 and os.path.exists(knode.reg_sock()), T)
        if not tap.ok(ok, "restarted as mode dra with gpuModes 0=pgpu: both sides serve",
                      agent.log_text()[-3000:]):
            return
        pl = K.Plugin(pb, agent.sock, own_connection=True)
        w = split(tap, api, pl, uuids, "mode dra, GPU 0 pgpu (by index)")
        r = knode.unprepare([("team", "whole", UID)])
        tap.ok(r.claims[UID].error == "" and not os.path.exists(spec),
               "the claim prepared before the restart is unprepared after it", r)
        w.cancel()
        pl.close()
        rc = agent.stop(signal.SIGTERM, timeout=T)
        tap.ok(rc == 0 and not os.path.exists(agent.sock) and
               not os.path.exists(knode.reg_sock()), "and exits 0 on SIGTERM",
               agent.log_text()[-3000:])

        # ---- mode dra, GPU 0 time-sliced (NVIDIA's sharing section), one SIGHUP for both
        cfg = os.path.join(tmp, "slicing.yaml")
        with open(cfg, "w") as f:
            f.write(SLICING % "NoSchedule")
        agent = start(build, emu, dp, tmp, 3, knode, kc, (), config=cfg)
        ok = K.wait_until(lambda: kubelet.count() >= 3 and os.path.exists(knode.reg_sock()), T)
        pl = K.Plugin(pb, agent.sock, own_connection=True)
        w = pl.watch()
        first = w.wait_for(lambda u: True, T)
        tap.ok(ok and first is not None and
               set(first) == {uuids[0] + "::0", uuids[0] + "::1"} and
               [x["name"] for x in M.our_slices(api)[0]["spec"]["devices"]] == ["gpu-1"],
               "mode dra, GPU 0 pgpu with time-slicing: its 2 replicas on nvidia.com/gpu, gpu-1 "
               "alone in the slice", json.dumps([first, agent.log_text()[-2000:]]))
        with open(cfg, "w") as f:
            f.write(SLICING % "NoExecute")
        agent.proc.send_signal(signal.SIGHUP)
        ok = K.wait_until(lambda: "dra.taintEffect" in agent.log_text(), T)
        emu.cmd("xid", 1, 94)
        ok = ok and K.wait_until(lambda: [t.get("effect") for t in (M.device(api, "gpu-1") or
                                                                     {}).get("taints", [])] ==
                                 ["NoExecute"], T)
        tap.ok(ok and not unhealthy(w.latest()) and
               agent.log_text().count("SIGHUP: reloading") == 1,
               "SIGHUP (read once): dra.taintEffect NoExecute reaches the DRA side: an XID on "
               "GPU 1 taints gpu-1 NoExecute; GPU 0's replicas stay Healthy",
               json.dumps([M.device(api, "gpu-1"), w.latest()]))
        w.cancel()
        pl.close()
        rc = agent.stop(signal.SIGTERM, timeout=T)
        tap.ok(rc == 0 and not os.path.exists(agent.sock) and
               not os.path.exists(knode.reg_sock()), "and exits 0 on SIGTERM",
               agent.log_text()[-3000:])

        # ---- GPU 0 vgpu beside GPU 1 dra: vcuda-core/-memory on GPU 0 only
        agent = start(build, emu, dp, tmp, 5, knode, kc,
                      ("--gpu-modes", "0=vgpu,1=dra",
                       "--pod-resources-socket", os.path.join(tmp, "no-podres.sock")))
        core_sock = os.path.join(dp, "accel-tencent.com-vcuda-core.sock")
        mem_sock = os.path.join(dp, "accel-tencent.com-vcuda-memory.sock")
        ok = K.wait_until(lambda: {"tencent.com/vcuda-core", "tencent.com/vcuda-memory"} <=
                          {r.resource_name for r in kubelet.registrations} and
                          os.path.exists(knode.reg_sock()), T)
        core = K.Plugin(pb, core_sock, own_connection=True)
        wc = core.watch()
        units = wc.wait_for(lambda u: len(u) == 100, T)
        tap.ok(ok and units is not None and all(i.startswith(uuids[0] + "-") for i in units) and
               not os.path.exists(agent.sock) and
               [x["name"] for x in M.our_slices(api)[0]["spec"]["devices"]] == ["gpu-1"],
               "GPU 0 vgpu, GPU 1 dra: vcuda-core has GPU 0's 100 units only, no nvidia.com/gpu, "
               "gpu-1 alone in the slice", json.dumps([sorted(units or {})[:2],
                                                       agent.log_text()[-2000:]]))
        emu.cmd("xid", 1, 94)
        ok = K.wait_until(lambda: (M.device(api, "gpu-1") or {}).get("taints") == TAINT, T)
        tap.ok(ok and not unhealthy(wc.latest()),
               "XID 94 on GPU 1 taints gpu-1; GPU 0's vGPU units stay Healthy",
               json.dumps(M.device(api, "gpu-1")))
        wc.cancel()
        core.close()
        rc = agent.stop(signal.SIGTERM, timeout=T)
        socks = [core_sock, mem_sock, knode.reg_sock(),
                 os.path.join(knode.dirs["plugin"], "dra.sock")]
        tap.ok(rc == 0 and not [x for x in socks if os.path.exists(x)] and
               os.path.isdir(os.path.join(knode.dirs["state"], "vgpu")) and
               os.path.exists(os.path.join(knode.dirs["state"], "dra-checkpoint.json")),
               "SIGTERM: exit 0, the vGPU and DRA sockets removed; vgpu/ and the DRA "
               "checkpoint side by side in the state dir", agent.log_text()[-3000:])

        # ---- mode dra alone (every GPU): its SLI file too
        os.unlink(os.path.join(knode.dirs["state"], "acceld-stats.json"))
        agent = start(build, emu, dp, tmp, 4, knode, kc, ("--mode", "dra"))
        ok = K.wait_until(lambda: os.path.exists(knode.reg_sock()), T)
        knode.register()
        api.call("POST", "/_fake/claim", M.claim_obj("team", "again", UID, k.WHOLE))
        r = knode.prepare([("team", "again", UID)])
        ok = ok and r.claims[UID].error == "" and K.wait_until(
            lambda: (resource(stats(knode.dirs["state"]), k.DRIVER) or
                     {}).get("allocate", {}).get("ok") == 1, T)
        st = stats(knode.dirs["state"]) or {}
        tap.ok(ok and (resource(st, k.DRIVER) or {}).get("registrations", {}).get("ok", 0) >= 1 and
               sorted(g["uuid"] for g in st.get("gpus", [])) == sorted(uuids) and
               st.get("deviceInit", {}).get("ok") == 2 and
               resource(st, "nvidia.com/gpu") is None,
               "mode dra alone writes acceld-stats.json: its prepare and registration, both GPUs",
               json.dumps(st))
        knode.unprepare([("team", "again", UID)])
        rc = agent.stop(signal.SIGTERM, timeout=T)
        tap.ok(rc == 0 and not os.path.exists(knode.reg_sock()), "and exits 0 on SIGTERM",
               agent.log_text()[-3000:])
    finally:
        if agent.alive():
            agent.stop(signal.SIGKILL)
        if tap.failed:
            tap.diag("acceld log:\n" + agent.log_text()[-6000:])
        kubelet.stop()


def main():
    build = os.path.abspath(k.BUILD)
    D.require_dra(build)
    tap = K.Tap()
    tmp = k.TMP
    src = os.path.abspath(k.SRC)
    pb = K.gen_pb2(src, os.path.join(tmp, "pb"))
    emu, uuids, knode, api, kc = D.start_node(build, tmp, NODE)
    D.guarded(tap, lambda: run(tap, build, emu, api, knode, kc, pb, tmp, uuids), api, tmp)


if __name__ == "__main__":
    main()
