#!/usr/bin/python3
"""Issue 22's DRA items against `acceld --mode dra` on an emulated 2-GPU node (gpu-0 shared,
gpu-1 exclusive), with the fake API server and the python3-grpcio kubelet:

- F10: a shared claim of 1 GiB of gpu-0, reserved for pod `tenant`; a process of that pod
  (emu-hold, no libvcuda: a loader bypass) holding 3 GiB on gpu-0 is found by the host-side
  check (every 200 ms) and killed (dra.overQuotaAction's default, kill), with a Warning
  Event DRAShareOverQuota on the pod and the finding in dra-status.json / `accelctl dra`;
  a process of the same pod within the claim is left alone.
- F4: a process of that pod on gpu-1, which the claim does not hold, is a finding
  (foreignGpu) and killed too; a host process there is left alone.

The processes are mapped to the pod through /proc/<pid>/cgroup faked under --proc-root.
Before issue 22 DRA mode had no host-side check at all: nothing is found, nothing killed.
Every wait is bounded; nothing asserts timing."""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import drasetup as D  # noqa: E402  (exits 77 itself without grpcio/protoc)
from drasetup import K, T, k  # noqa: E402

NODE = "node-a"
POD_UID = "0b6c4a3e-7777-4c2a-9d5e-000000000007"
GiB = 1 << 30


def claim_obj(uid):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "team", "name": "small", "uid": uid,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu-share.accel.dev",
                "capacity": {"requests": {"memory": "1Gi", "cores": "30"}}}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": k.DRIVER, "pool": NODE, "device": "gpu-0",
                 "shareID": "7d1c3c43-4d42-4a79-b0d2-5b9d0c0e0e07",
                 "consumedCapacity": {"memory": "1Gi", "cores": "30"}}]}},
                "reservedFor": [{"resource": "pods", "name": "tenant", "uid": POD_UID}]}}


def hold(build, emu, proc, gpu, mib, pod_uid):
    """emu-hold holding mib MiB on GPU gpu, in pod_uid's cgroup under the fake /proc."""
    env = dict(emu.env, LD_LIBRARY_PATH=os.path.join(build, "src/emu"))
    h = subprocess.Popen([os.path.join(build, "tests/emu/emu-hold"), str(gpu), str(mib)],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = h.stdout.readline()
    if pod_uid:
        d = os.path.join(proc, str(h.pid))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "cgroup"), "w") as f:
            f.write("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                    f"{pod_uid.replace('-', '_')}.slice/cri-containerd-{'d' * 64}.scope\n")
    return h, line


def run(tap, build, emu, api, knode, tmp):
    proc = os.path.join(tmp, "proc")
    os.makedirs(proc, exist_ok=True)
    agent = K.Acceld(build, emu, os.path.join(tmp, "dp"), os.path.join(tmp, "a1"),
                     extra=("--mode", "dra", "--node-name", NODE, "--kubeconfig",
                            os.path.join(tmp, "kubeconfig"),
                            "--plugin-registry-dir", knode.dirs["registry"],
                            "--dra-plugin-dir", knode.dirs["plugin"],
                            "--vcuda-library", knode.lib, "--dra-sharing", "shared",
                            "--dra-gpu-sharing", "1=exclusive", "--dra-claim-wait", "2s",
                            "--state-dir", knode.dirs["state"], "--cdi-dir", knode.dirs["cdi"],
                            "--proc-root", proc, "--dra-check-interval", "200ms"))
    try:
        if not tap.ok(K.wait_until(lambda: os.path.exists(knode.reg_sock()), T),
                      "acceld --mode dra serves the registration socket"):
            return
        knode.register()
        uid = k.UID_A
        api.call("POST", "/_fake/claim", claim_obj(uid))
        r = knode.prepare([("team", "small", uid)])
        tap.ok(r.claims[uid].error == "", "a 1 GiB share of gpu-0 reserved for pod tenant is "
               "prepared", r)
        within, l1 = hold(build, emu, proc, 0, 256, POD_UID)
        over, l2 = hold(build, emu, proc, 0, 3072, POD_UID)
        stray, l3 = hold(build, emu, proc, 1, 64, POD_UID)
        host, l4 = hold(build, emu, proc, 1, 64, None)
        tap.ok(all(x.startswith("ready") for x in (l1, l2, l3, l4)), "emu-hold processes run",
               (l1, l2, l3, l4))
        killed = K.wait_until(lambda: over.poll() is not None, T)
        tap.ok(killed and over.returncode == -signal.SIGKILL,
               "F10: the pod's process holding 3 GiB under its 1 GiB claim is killed",
               over.returncode)
        killed = K.wait_until(lambda: stray.poll() is not None, T)
        tap.ok(killed and stray.returncode == -signal.SIGKILL,
               "F4: the pod's process on gpu-1, which its claim does not hold, is killed",
               stray.returncode)
        tap.ok(within.poll() is None and host.poll() is None,
               "a process within the claim, and a host process on gpu-1, are left alone")

        def events():
            return {e.get("reason") for e in api.call("GET", "/_fake/events")
                    if e.get("involvedObject", {}).get("uid") == POD_UID}
        tap.ok(K.wait_until(lambda: {"DRAShareOverQuota", "DRAShareForeignGPU"} <= events(), T),
               "Warning Events on the pod: DRAShareOverQuota and DRAShareForeignGPU", events())

        def kinds():
            try:
                with open(os.path.join(knode.dirs["state"], "dra-status.json")) as f:
                    return {x["kind"] for x in json.load(f)["hostCheck"]["recentFindings"]}
            except (OSError, ValueError, KeyError):
                return set()
        tap.ok(K.wait_until(lambda: {"overQuota", "foreignGpu"} <= kinds(), T),
               "dra-status.json lists the findings (overQuota, foreignGpu)", kinds())
        ctl = subprocess.run([os.path.join(build, "src/cli/accelctl"), "dra", "--state-dir",
                              knode.dirs["state"]], capture_output=True, text=True, timeout=T)
        tap.ok(ctl.returncode == 0 and "host-side check" in ctl.stdout and
               "overQuota" in ctl.stdout and "team/tenant" in ctl.stdout,
               "accelctl dra shows the check's findings and the claim's pod",
               ctl.stdout + ctl.stderr)
        for h in (within, host):
            h.stdin.close()
            h.wait(timeout=T)
        for h in (within, over, stray, host):
            h.stdout.close()
        tap.ok(agent.stop() == 0, "acceld exits 0 on SIGTERM")
    finally:
        if agent.alive():
            agent.stop(signal.SIGKILL)
        if tap.failed:
            tap.diag("acceld log:\n" + agent.log_text()[-5000:])


def main():
    build = os.path.abspath(k.BUILD)
    D.require_dra(build)
    if not os.path.exists(os.path.join(build, "tests/emu/emu-hold")):
        K.skip_all("tests/emu/emu-hold is not built")
    tap = K.Tap()
    tmp = k.TMP
    emu, uuids, knode, api, kc = D.start_node(build, tmp, NODE)
    D.guarded(tap, lambda: run(tap, build, emu, api, knode, tmp), api, tmp)


if __name__ == "__main__":
    main()
