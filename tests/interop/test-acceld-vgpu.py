#!/usr/bin/python3
"""test-acceld-vgpu.py — acceld with GPUs in two modes on an emulated 8-GPU
node, against the python3-grpcio kubelet (issue 10, provider seam and vGPU
endpoints):

- `--mode vgpu --gpu-modes 0=pgpu`: three resources, three sockets, three
  registrations with the fake kubelet (nvidia.com/gpu with GPU 0 only;
  tencent.com/vcuda-core with 100 units for each of the 7 other GPUs;
  tencent.com/vcuda-memory with one unit per 256 MiB of each).
- Every endpoint offers GetPreferredAllocation (vGPU: the IDs of the GPU
  Allocate will choose for the pending container).
- An injected XID on a vGPU GPU turns its units Unhealthy on both vGPU
  endpoints and nothing on the pGPU one.
- With no API server, a vGPU Allocate fails with a message that says so: it
  never guesses the pod.
- Hardening holds on the new endpoints: unknown and repeated IDs refused.
- Restart safety: a second acceld starts on a checkpoint with three
  assignments (one of a live container, one of a container that is gone, one
  still waiting for its second resource) and a fake kubelet pod-resources
  server listing only the live one, with its vGPU device IDs: the gone one is
  dropped and its directory removed, the live one kept with its files; the
  half one is freed at start (the kubelet's second Allocate found no acceld
  and failed its pod); checkpoint rewritten, 0600.

Every wait is bounded; nothing asserts timing."""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet as K  # noqa: E402

import grpc  # noqa: E402

T = 15


def refusals(tap, build, node, tmp):
    """vGPU mode hands libvcuda to every container: acceld will not serve it without one."""
    exe = os.path.join(build, "src/acceld/acceld")
    bad = os.path.join(tmp, "not-a-library.so")
    with open(bad, "w") as f:
        f.write("partial copy\n")
    for lib, says in ((os.path.join(tmp, "missing", "libvcuda.so"), "libvcuda is missing at"),
                      (bad, "is not a shared library"), (tmp, "is not a regular file")):
        pdir = os.path.join(tmp, "dp-refused")
        r = subprocess.run([exe, "--mode", "vgpu", "--no-register", "--device-plugin-dir", pdir,
                            "--sysfs-root", node.sysfs, "--dev-root", node.dev,
                            "--state-dir", os.path.join(tmp, "state-refused"),
                            "--vcuda-library", lib], env=node.env, capture_output=True, text=True,
                           timeout=T)
        tap.ok(r.returncode == 2 and f"{says}" in r.stderr and lib in r.stderr and
               "--vcuda-library" in r.stderr and not glob.glob(os.path.join(pdir, "*.sock")),
               f"--mode vgpu with vcudaLibrary {os.path.basename(lib)!r}: exit 2, names the path "
               "and the fix, serves nothing", r.stderr[-1500:])


def main():
    build, src = K.build_paths()
    K.require_tools(build)
    if not K.Node.available(build):
        K.skip_all("the emulator is not built (GPU memory sizes come from it)")
    tap = K.Tap()
    tmp = K.tmpdir()
    pb = K.gen_pb2(src, os.path.join(tmp, "pb"))
    node = K.Node(build, tmp)
    pdir = os.path.join(tmp, "dp")
    os.makedirs(pdir)
    kubelet = K.FakeKubelet(pb, pdir).start()
    agent = K.Acceld(build, node, pdir, tmp,
                     extra=("--mode", "vgpu", "--gpu-modes", "0=pgpu",
                            "--pod-resources-socket", os.path.join(tmp, "no-podres.sock")))
    second = None
    try:
        refusals(tap, build, node, tmp)
        uuids = run(tap, pb, node, pdir, agent, kubelet)
        if uuids:
            second = restart(tap, build, src, node, tmp, uuids)
    finally:
        if second is not None and second.alive():
            second.stop(signal.SIGKILL)
        if tap.failed and second is not None:
            tap.diag("second acceld log:\n" + second.log_text()[-6000:])
        if agent.alive():
            agent.stop(signal.SIGKILL)
        kubelet.stop()
        if tap.failed:
            tap.diag("acceld log:\n" + agent.log_text()[-6000:])
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


def run(tap, pb, node, pdir, agent, kubelet):
    names = {"nvidia.com/gpu": "accel-nvidia.com-gpu.sock",
             "tencent.com/vcuda-core": "accel-tencent.com-vcuda-core.sock",
             "tencent.com/vcuda-memory": "accel-tencent.com-vcuda-memory.sock"}
    ok = K.wait_until(lambda: kubelet.count() >= 3, T)
    regs = {r.resource_name: r.endpoint for r in kubelet.registrations}
    tap.ok(ok and regs == names, "three resources registered, one socket each", regs)
    if not ok:
        return
    opts = {o.get_preferred_allocation_available for o in kubelet.options_seen}
    tap.ok(opts == {True}, "GetPreferredAllocation offered by every endpoint", opts)
    sock = {r: os.path.join(pdir, s) for r, s in names.items()}
    for r, s in sock.items():
        tap.ok(os.stat(s).st_mode & 0o777 == 0o600, f"{r}: socket is 0600")
    pg = K.Plugin(pb, sock["nvidia.com/gpu"])
    core = K.Plugin(pb, sock["tencent.com/vcuda-core"])
    mem = K.Plugin(pb, sock["tencent.com/vcuda-memory"])
    wp, wc, wm = pg.watch(), core.watch(), mem.watch()
    lp = wp.wait_for(lambda u: len(u) == 1, T)
    lc = wc.wait_for(lambda u: len(u) == 700, T)
    lm = wm.wait_for(lambda u: len(u) > 0, T)
    tap.ok(lp is not None, "pGPU lists GPU 0 only", wp.latest() and list(wp.latest()))
    tap.ok(lc is not None, "vcuda-core lists 100 units for each of 7 GPUs",
           wc.latest() and len(wc.latest()))
    if lp is None or lc is None or lm is None:
        return
    gpu0 = next(iter(lp))
    per_gpu = {}
    for i in lm:
        u = i.rsplit("-", 1)[0]
        per_gpu[u] = per_gpu.get(u, 0) + 1
    tap.ok(len(per_gpu) == 7 and gpu0 not in per_gpu and len(set(per_gpu.values())) == 1,
           "vcuda-memory: the same unit count on each of the 7 vGPU GPUs, none on GPU 0",
           per_gpu)
    tap.ok(all(len(i) <= 63 for i in list(lc) + list(lm)), "every device ID ≤ 63 characters")
    tap.ok(all(h == "Healthy" for h, _ in lc.values()), "all units Healthy at start")

    # ---- health: XID 79 on GPU 3 (vGPU) takes its units on both endpoints
    node.cmd("xid", 3, 79)
    uuid3 = sorted(per_gpu)[0]  # any; find the one that turns unhealthy

    def unhealthy(u):
        return {i.rsplit("-", 1)[0] for i, (h, _) in u.items() if h == "Unhealthy"}
    gc = wc.wait_for(lambda u: len(unhealthy(u)) == 1, T)
    gm = wm.wait_for(lambda u: len(unhealthy(u)) == 1, T)
    tap.ok(gc is not None and gm is not None and unhealthy(gc) == unhealthy(gm),
           "XID 79 on a vGPU GPU: its units Unhealthy on both vGPU endpoints",
           gc and unhealthy(gc))
    if gc is not None:
        uuid3 = next(iter(unhealthy(gc)))
        n_bad = sum(1 for i, (h, _) in gc.items() if h == "Unhealthy")
        tap.ok(n_bad == 100, "all 100 core units of that GPU", n_bad)
    tap.ok(wp.latest()[gpu0][0] == "Healthy", "the pGPU endpoint is untouched")

    # ---- no API server: a vGPU Allocate says so, never guesses
    ids = [i for i in sorted(lc) if not i.startswith(uuid3)][:30]
    try:
        core.allocate(ids)
        tap.ok(False, "vGPU Allocate without an API server is refused")
    except grpc.RpcError as e:
        tap.ok(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "API server" in e.details(),
               "vGPU Allocate without an API server: refused, saying why", e.details())
    # ---- the shared checks hold on the new endpoints
    for what, req, word in (("unknown", [ids[0], uuid3 + "-100"], "unknown"),
                            ("repeated", [ids[0], ids[0]], "more than once"),
                            ("unhealthy", [uuid3 + "-1"], "unhealthy")):
        try:
            core.allocate(req)
            tap.ok(False, f"{what} IDs refused")
        except grpc.RpcError as e:
            tap.ok(e.code() == grpc.StatusCode.INVALID_ARGUMENT and word in e.details(),
                   f"{what} IDs: INVALID_ARGUMENT naming them", e.details())
    for w in (wp, wc, wm):
        w.cancel()
    for p in (pg, core, mem):
        p.close()
    # ---- SIGTERM removes every socket
    rc = agent.stop()
    tap.ok(rc == 0 and not any(os.path.exists(s) for s in sock.values()),
           "SIGTERM: exit 0, all three sockets removed", rc)
    return sorted(u for u in per_gpu if u != uuid3)


def podresources_server(src, tmp, sock, live):
    """A kubelet pod-resources v1 server whose List names the live
    (namespace, pod, container[, {resource: [IDs]}]) entries."""
    out = os.path.join(tmp, "pbpr")
    os.makedirs(out, exist_ok=True)
    proto_root = os.path.join(src, "proto")
    subprocess.run(["protoc", f"--python_out={out}", f"-I{proto_root}",
                    os.path.join(proto_root, "podresources/v1/api.proto")], check=True)
    sys.path.insert(0, out)
    from podresources.v1 import api_pb2 as pr  # noqa: E402

    def list_(req, ctx):
        pods = {}
        for ns, pod, c, *devs in live:
            devices = [pr.ContainerDevices(resource_name=r, device_ids=ids)
                       for r, ids in (devs[0] if devs else {}).items()]
            pods.setdefault((ns, pod), []).append(pr.ContainerResources(name=c,
                                                                        devices=devices))
        return pr.ListPodResourcesResponse(pod_resources=[
            pr.PodResources(namespace=ns, name=pod, containers=cs)
            for (ns, pod), cs in pods.items()])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(
            list_, request_deserializer=pr.ListPodResourcesRequest.FromString,
            response_serializer=pr.ListPodResourcesResponse.SerializeToString)})
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(K.unix_target(sock))
    server.start()
    return server


def restart(tap, build, src, node, tmp, uuids):
    tmp2 = os.path.join(tmp, "second")
    vdir = os.path.join(tmp2, "state", "vgpu")
    os.makedirs(vdir)
    entries = []
    for uid, pod, cores_done, mem_done in (("uid-keep", "keep", True, True),
                                           ("uid-gone", "gone", True, True),
                                           ("uid-half", "half", True, False)):
        d = os.path.join(vdir, uid, "main", "region")
        os.makedirs(d)
        open(os.path.join(d, "usage"), "w").close()
        open(os.path.join(vdir, uid, "main", "config"), "w").close()
        entries.append({"podUID": uid, "namespace": "default", "pod": pod, "container": "main",
                        "cores": 30, "memory": 16, "coresDone": cores_done,
                        "memoryDone": mem_done, "whole": False, "gpus": [uuids[0]]})
    cp = os.path.join(vdir, "checkpoint.json")
    with open(cp, "w") as f:
        json.dump({"version": 1, "assignments": entries}, f)
    prsock = os.path.join(tmp, "podres.sock")
    keep_ids = {"tencent.com/vcuda-core": [f"{uuids[0]}-{k}" for k in range(30)],
                "tencent.com/vcuda-memory": [f"{uuids[0]}-{k}" for k in range(16)]}
    server = podresources_server(src, tmp, prsock, [("default", "keep", "main", keep_ids),
                                                    ("default", "other", "sidecar")])
    pdir = os.path.join(tmp2, "dp")
    os.makedirs(pdir)
    agent = K.Acceld(build, node, pdir, tmp2,
                     extra=("--mode", "vgpu", "--no-register", "--pod-resources-socket", prsock))
    try:
        gone = os.path.join(vdir, "uid-gone")
        ok = K.wait_until(lambda: not os.path.exists(gone), T)
        tap.ok(ok, "restart: the directory of a container that no longer exists is removed")

        def pods():
            try:
                with open(cp) as f:
                    return sorted(a["pod"] for a in json.load(f)["assignments"])
            except (OSError, ValueError, KeyError):
                return None
        ok = K.wait_until(lambda: pods() == ["keep"], T)
        tap.ok(ok, "restart: the checkpoint keeps the live container; the one that was waiting "
               "for its second resource is freed", pods())
        tap.ok(os.path.exists(os.path.join(vdir, "uid-keep", "main", "region", "usage")),
               "restart: the live container's files are untouched")
        tap.ok(os.stat(cp).st_mode & 0o777 == 0o600, "the checkpoint is 0600")
    finally:
        server.stop(0).wait()
    return agent


if __name__ == "__main__":
    main()
