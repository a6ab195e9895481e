#!/usr/bin/python3
"""test-acceld-tenant.py — issue 22's attacks on acceld (root, hostPID) in vGPU mode, each
made as a tenant makes it: with files in its own writable region dir and with its own pod
spec. acceld on an emulated 2-GPU node, the fake API server and the python3-grpcio kubelet
as in test-acceld-vgpu-pods.py; the host-side check every 100 ms, overQuotaAction kill.

- F11: pods on the node with 4097 annotations, or a NUL in an annotation value (no GPU
  request), there at acceld's first LIST and arriving by the watch later: every other pod's
  Allocate is still answered, and the bad pods get an AccelPodIgnored Warning Event.
- F3: a pod annotating itself accel.dev/vgpu-main with the GPU binpack would not choose is
  placed by the policy.
- F12: a container's region dir holds at most its small tmpfs: 4 MiB written into it stop
  with ENOSPC before 1 MiB.
- F1: `usage` in the region dir flipped, in a loop, between a symlink to a full-size file of
  the tenant's, one to a path that does not exist and one to acceld's checkpoint.json, while
  the check runs: nothing is created at the path, the checkpoint is untouched, acceld lives.
- F2: `usage` truncated to nothing and regrown in a loop: acceld lives through the passes
  and answers the next Allocate.

Against acceld before issue 22 each of these fails (F1: the file is created, the checkpoint
padded with NULs; F2: acceld dies of SIGBUS; F3: the pod gets its GPU; F11: every Allocate is
refused; F12: the writes fill the state filesystem): to see each on its own against another
build, TENANT_CASES=F1,F2 (a comma list) runs only those (F11's bad pods are made only when F11
runs). Every wait is bounded; nothing asserts timing."""
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet as K  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "vgpu_pods", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "test-acceld-vgpu-pods.py"))
P = importlib.util.module_from_spec(spec)
spec.loader.exec_module(P)

import grpc  # noqa: E402

T = 20
CORE, MEM = P.CORE, P.MEM
CASES = set((os.environ.get("TENANT_CASES") or "F1,F2,F3,F11,F12").split(","))
REGION_SIZE = 4096 + 1024 * 256  # VC_REGION_SIZE (src/vcuda/region.h)


def add_pod(api, name, created, cores=0, mem=0, annotations=None):
    c = {"name": "main", "limits": {}}
    if cores:
        c["limits"][CORE] = str(cores)
    if mem:
        c["limits"][MEM] = str(mem)
    d = {"op": "add", "name": name, "uid": "uid-" + name, "containers": [c],
         "creationTimestamp": created}
    if annotations:
        d["annotations"] = annotations
    return api.call("POST", "/_fake/pod", d)


def main():
    P.harness(run, gpus=2)


def region_of(resp):
    for m in resp.mounts:
        if m.container_path == "/var/run/vcuda":
            return m.host_path
    return None


def run(tap, build, pb, node, api, kc, tmp, pdir, agents):
    # ---- F11: bad pods there before acceld's first LIST
    many = {f"tenant.example/k{i}": "v" for i in range(4097)}
    if "F11" in CASES:
        add_pod(api, "many", "2026-01-01T00:00:01Z", annotations=many)
        add_pod(api, "nul", "2026-01-01T00:00:02Z", annotations={"note": "a\x00b"})
    add_pod(api, "good", "2026-01-01T00:00:03Z", cores=30, mem=16)
    agent = P.start_acceld(build, node, tmp, pdir, kc, "one")
    agents.append(agent)
    socks = {CORE: os.path.join(pdir, "accel-tencent.com-vcuda-core.sock"),
             MEM: os.path.join(pdir, "accel-tencent.com-vcuda-memory.sock")}
    if not tap.ok(K.wait_until(lambda: all(os.path.exists(s) for s in socks.values()), T),
                  "acceld serves both vGPU resources"):
        return
    kubelet = P.Kubelet(pb, socks[CORE], socks[MEM], P.lists_of(pb, socks))
    # (before issue 22 the watch never gets in step: its LIST is refused whole)
    K.wait_until(lambda: "pod watch is in step" in agent.log_text(), T)
    try:
        good = kubelet.when_seen(kubelet.admit, 30, 16)
        tap.ok(True, "F11: with a pod of 4097 annotations and one with a NUL in an annotation "
               "on the node, another pod's Allocate is answered")
    except (grpc.RpcError, RuntimeError) as e:
        tap.ok(False, "F11: another pod's Allocate is answered",
               getattr(e, "details", lambda: str(e))())
        return
    if "F11" in CASES:
        f11(tap, api, kubelet, many)

    if "F3" in CASES:
        f3(tap, api, node, kubelet, good)
    region = region_of(primary(good))
    if not tap.ok(region and os.path.isdir(region), "the container's region dir exists",
                  region):
        return
    if "F12" in CASES:
        f12(tap, region)
    if "F1" in CASES:
        f1(tap, agent, tmp, region)
    if "F2" in CASES:
        f2(tap, api, agent, kubelet, region)
    kubelet.close()
    tap.ok(agent.stop() == 0, "acceld exits 0 on SIGTERM")


def f11(tap, api, kubelet, many):
    """The same bad pods arriving by the watch, then a good one."""
    add_pod(api, "nul2", "2026-01-01T00:00:04Z", annotations={"note": "\x00"})
    add_pod(api, "many2", "2026-01-01T00:00:05Z", annotations=many)
    add_pod(api, "good2", "2026-01-01T00:00:06Z", cores=5, mem=2)
    try:
        kubelet.when_seen(kubelet.admit, 5, 2)
        tap.ok(True, "F11: bad pods arriving by the watch: the next pod's Allocate is answered")
    except (grpc.RpcError, RuntimeError) as e:
        tap.ok(False, "F11: bad pods arriving by the watch: the next pod's Allocate is answered",
               getattr(e, "details", lambda: str(e))())

    def ignored():
        return {e.get("involvedObject", {}).get("name")
                for e in api.call("GET", "/_fake/events")
                if e.get("reason") == "AccelPodIgnored"}
    tap.ok(K.wait_until(lambda: {"many", "nul", "nul2", "many2"} <= ignored(), T),
           "F11: each bad pod gets one AccelPodIgnored Warning Event", ignored())


def f3(tap, api, node, kubelet, good):
    """The pod names its GPU; binpack chooses the one pod good is on."""
    gpu_good = primary(good).envs.get("NVIDIA_VISIBLE_DEVICES")
    out = json.loads(subprocess.run([node.emu, "status", "--json"], env=node.env, check=True,
                                    capture_output=True, text=True).stdout)
    other = next(g["uuid"] for g in out["gpus"] if g["uuid"] != gpu_good)
    add_pod(api, "steer", "2026-01-01T00:00:07Z", cores=10, mem=4,
            annotations={"accel.dev/vgpu-main": other})
    r = kubelet.when_seen(kubelet.admit, 10, 4)
    got = primary(r).envs.get("NVIDIA_VISIBLE_DEVICES")
    tap.ok(got == gpu_good, "F3: a pod's own accel.dev/vgpu-main does not choose its GPU: "
           "binpack does", (got, gpu_good, other))


def f12(tap, region):
    """The region dir is bounded."""
    wrote, err = 0, None
    try:
        with open(os.path.join(region, "fill"), "wb") as f:
            for _ in range(64):
                f.write(b"\0" * 65536)
                f.flush()
                wrote += 65536
    except OSError as e:
        err = e.errno
    os.unlink(os.path.join(region, "fill"))
    tap.ok(err == 28 and wrote < (1 << 20), "F12: 4 MiB written into the region dir stop with "
           "ENOSPC before 1 MiB", (wrote, err))


def f1(tap, agent, tmp, region):
    """usage flipped between symlinks while the check runs."""
    checkpoint = os.path.join(tmp, "state", "vgpu", "checkpoint.json")
    with open(checkpoint, "rb") as f:
        before = f.read()
    big = os.path.join(region, "big")
    with open(big, "wb") as f:
        f.write(b"\0" * REGION_SIZE)
    victim = os.path.join(tmp, "created-by-acceld")
    targets = [big, victim, checkpoint]
    stop = threading.Event()

    def flip():
        i = 0
        tmpl = os.path.join(region, "l")
        usage = os.path.join(region, "usage")
        while not stop.is_set():
            try:
                os.symlink(targets[i % 3], tmpl)
                os.rename(tmpl, usage)
            except OSError:
                pass
            i += 1
    th = threading.Thread(target=flip)
    th.start()
    t_end = time.monotonic() + 6
    while time.monotonic() < t_end and not os.path.lexists(victim):
        time.sleep(0.05)
    stop.set()
    th.join(T)
    with open(checkpoint, "rb") as f:
        after = f.read()
    tap.ok(not os.path.lexists(victim),
           "F1: acceld never created a file at the path the tenant's symlink named")
    tap.ok(after == before and b"\0" not in after,
           "F1: acceld's checkpoint.json is untouched (no header, no NUL padding)",
           (len(before), len(after)))
    tap.ok(agent.alive(), "F1: acceld lives on")
    for n in ("usage", "l", "big"):
        try:
            os.unlink(os.path.join(region, n))
        except OSError:
            pass


def f2(tap, api, agent, kubelet, region):
    """usage truncated and regrown in a loop while the check runs."""
    usage = os.path.join(region, "usage")
    with open(usage, "wb") as f:
        f.write(b"\0" * REGION_SIZE)
    stop = threading.Event()

    def truncate():
        fd = os.open(usage, os.O_RDWR)
        while not stop.is_set():
            os.ftruncate(fd, 0)
            time.sleep(0.00005)
            os.ftruncate(fd, REGION_SIZE)
            time.sleep(0.00005)
        os.close(fd)
    th = threading.Thread(target=truncate)
    th.start()
    t_end = time.monotonic() + 3  # 30 check passes
    while time.monotonic() < t_end and agent.alive():
        time.sleep(0.05)
    stop.set()
    th.join(T)
    tap.ok(agent.alive(), "F2: acceld lives through 3 s of check passes over a region "
           "truncated in a loop", agent.proc.returncode)
    add_pod(api, "after", "2026-01-01T00:00:08Z", cores=3, mem=1)
    try:
        kubelet.when_seen(kubelet.admit, 3, 1)
        tap.ok(True, "F2: the next Allocate is answered")
    except (grpc.RpcError, RuntimeError) as e:
        tap.ok(False, "F2: the next Allocate is answered", str(e))


def primary(r):
    return r[CORE] if CORE in r else r[MEM]


if __name__ == "__main__":
    main()
