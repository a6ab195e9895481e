#!/usr/bin/python3
"""test-acceld-vfio.py — VFIO mode (issue 24, item 1) on an emulated node with IOMMU groups,
against the python3-grpcio kubelet:

- 4 H100s, GPUs 0-2 bound to vfio-pci, GPU 2 with its audio function in its group, GPU 3 on
  the nvidia driver and served whole by its PCI address (`mode: vfio`,
  `gpuModes: <GPU 3's address>=pgpu`): two resources registered,
  nvidia.com/GH100_H100_SXM5_80GB (GPUs 0 and 1, IDs = PCI addresses, NUMA from sysfs) and
  nvidia.com/gpu (GPU 3); GPU 2 refused with a message naming the audio function.
- Allocate as NVIDIA's kubevirt-gpu-device-plugin answers it: /dev/vfio/vfio and each GPU's
  /dev/vfio/<group> ("mrw"), PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB=<addresses>.
- Unbinding GPU 1 (`accel-emu vfio 1 unbind`) marks it Unhealthy on ListAndWatch; binding it
  again Healthy.
- `init --iommu-groups shared`: GPUs 0 and 1 share a group, both refused with a message.
- No NVML at all (a passthrough node without the nvidia driver): mode vfio still serves.

Every wait is bounded; nothing asserts timing."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet as K  # noqa: E402

T = 15
RES = "nvidia.com/GH100_H100_SXM5_80GB"
ENV = "PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB"


def status(node):
    out = subprocess.run([node.emu, "status", "--json"], env=node.env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["gpus"]


def sysfs_bdf(nvml_bus_id):
    """NVML's "00000000:2A:00.0" as sysfs names it: "0000:2a:00.0"."""
    return nvml_bus_id[4:].lower()


def specs(resp):
    return sorted((d.container_path, d.host_path, d.permissions) for d in resp.devices)


def served(tap, pb, build, tmp):
    os.makedirs(os.path.join(tmp, "a"))
    node = K.Node(build, os.path.join(tmp, "a"), gpus=4, numa="0,0,1,1", nvlink="none")
    for i in (0, 1, 2):
        node.cmd("vfio", i, "bind")
    node.cmd("vfio", 2, "audio", "on")
    gpus = status(node)
    bdf = [sysfs_bdf(g["pci_bus_id"]) for g in gpus]
    group = [g["iommu_group"] for g in gpus]
    pdir = os.path.join(tmp, "a", "dp")
    os.makedirs(pdir)
    kubelet = K.FakeKubelet(pb, pdir).start()
    agent = K.Acceld(build, node, pdir, os.path.join(tmp, "a"),
                     extra=("--mode", "vfio", "--gpu-modes", f"{bdf[3]}=pgpu"))
    try:
        ok = K.wait_until(lambda: kubelet.count() >= 2, T)
        regs = {r.resource_name: r.endpoint for r in kubelet.registrations}
        tap.ok(ok and regs == {RES: f"accel-{RES.replace('/', '-')}.sock",
                               "nvidia.com/gpu": "accel-nvidia.com-gpu.sock"},
               "two resources: the H100 model's (VFIO) and nvidia.com/gpu (GPU 3 by its address)",
               regs)
        if not ok:
            return
        log = agent.log_text()
        tap.ok(f"GPU {bdf[2]} is not served: its IOMMU group {group[2]} also holds 1 other "
               f"device(s) ({bdf[2][:-1]}1)" in log,
               "GPU 2 refused: its group holds its audio function, named in the log",
               log[-2000:])
        vf = K.Plugin(pb, os.path.join(pdir, regs[RES]))
        pg = K.Plugin(pb, os.path.join(pdir, regs["nvidia.com/gpu"]))
        w = vf.watch()
        first = w.wait_for(lambda u: len(u) == 2, T)
        tap.ok(first is not None and sorted(first) == sorted(bdf[:2]) and
               all(v == ("Healthy", [0]) for v in first.values()),
               "ListAndWatch: GPUs 0 and 1 by PCI address, Healthy, NUMA 0 from sysfs", first)
        wp = pg.watch()
        lp = wp.wait_for(lambda u: len(u) == 1, T)
        tap.ok(lp is not None and list(lp) == [gpus[3]["uuid"]],
               "nvidia.com/gpu lists GPU 3 (UUID) only", lp)
        r = vf.allocate([bdf[0]]).container_responses[0]
        tap.ok(specs(r) == sorted([("/dev/vfio/vfio", "/dev/vfio/vfio", "mrw"),
                                   (f"/dev/vfio/{group[0]}", f"/dev/vfio/{group[0]}", "mrw")]),
               "Allocate(GPU 0): /dev/vfio/vfio and its group's node, mrw", specs(r))
        tap.ok(dict(r.envs) == {ENV: bdf[0]} and not r.cdi_devices and not r.mounts,
               f"Allocate(GPU 0): {ENV}=<its address>, nothing else", dict(r.envs))
        r = vf.allocate([bdf[1], bdf[0]]).container_responses[0]
        tap.ok(sorted(p for p, _, _ in specs(r)) ==
               sorted(["/dev/vfio/vfio", f"/dev/vfio/{group[0]}", f"/dev/vfio/{group[1]}"]) and
               dict(r.envs) == {ENV: f"{bdf[1]},{bdf[0]}"},
               "Allocate(two): both groups' nodes, the container node once, the addresses in "
               "request order", (specs(r), dict(r.envs)))
        try:
            vf.allocate([bdf[2]])
            tap.ok(False, "Allocate of the refused GPU 2 fails")
        except K.grpc.RpcError as e:
            tap.ok("unknown" in (e.details() or ""), "Allocate of the refused GPU 2 fails: unknown",
                   e.details())
        node.cmd("vfio", 1, "unbind")
        sick = w.wait_for(lambda u: u.get(bdf[1], ("",))[0] == "Unhealthy", T)
        tap.ok(sick is not None and sick[bdf[0]][0] == "Healthy",
               "GPU 1 unbound from vfio-pci: Unhealthy on ListAndWatch, GPU 0 still Healthy", sick)
        node.cmd("vfio", 1, "bind")
        back = w.wait_for(lambda u: u.get(bdf[1], ("",))[0] == "Healthy", T)
        tap.ok(back is not None, "GPU 1 bound again: Healthy", w.latest())
        log = agent.log_text()
        tap.ok(f"VFIO: GPU {bdf[1]} ({RES}) is Unhealthy: " in log and
               f"VFIO: GPU {bdf[1]} ({RES}) is Healthy again" in log,
               "both changes logged with the reason", log[-1500:])
        w.cancel()
        wp.cancel()
        vf.close()
        pg.close()
    finally:
        K.stop_agent(tap, kubelet, agent)


def shared_group(tap, build, tmp):
    d = os.path.join(tmp, "b")
    os.makedirs(d)
    node = K.Node(build, d, gpus=4, numa=None, nvlink="none",
                  init_args=("--iommu-groups", "shared"))
    for i in (0, 1):
        node.cmd("vfio", i, "bind")
    bdf = [sysfs_bdf(g["pci_bus_id"]) for g in status(node)]
    _, socks, log = K.run_acceld_once(build, node, d, ("--mode", "vfio"))
    tap.ok(f"GPU {bdf[0]} is not served: its IOMMU group 10 also holds 1 other device(s) "
           f"({bdf[1]})" in log and
           f"GPU {bdf[1]} is not served: its IOMMU group 10 also holds 1 other device(s) "
           f"({bdf[0]})" in log and not any("GH100" in s for s in socks),
           "two GPUs in one group: both refused with a message, no VFIO resource", log[-2000:])


def no_nvml(tap, build, tmp):
    d = os.path.join(tmp, "c")
    os.makedirs(d)
    node = K.Node(build, d, gpus=2, numa="1,1", nvlink="none")
    node.cmd("vfio", 0, "bind")
    node.cmd("vfio", 1, "bind")
    env = dict(node.env, ACCEL_NVML_LIBRARY=os.path.join(d, "no-libnvidia-ml.so.1"))
    _, socks, log = K.run_acceld_once(build, node, d, ("--mode", "vfio"), env=env)
    tap.ok(socks == [f"accel-{RES.replace('/', '-')}.sock"] and "no NVML" in log and
           f"VFIO mode: 2 GPU(s) as {RES}" in log,
           "no NVML (no nvidia driver on a passthrough node): mode vfio serves the VFIO GPUs",
           (socks, log[-1500:]))
    _, socks, log = K.run_acceld_once(build, node, d, ("--mode", "pgpu"), env=env)
    tap.ok("cannot open NVML" in log and not socks,
           "without NVML in mode pgpu acceld still refuses to start", (socks, log[-800:]))


def main():
    build, src = K.build_paths()
    K.require_tools(build)
    if not K.Node.available(build):
        K.skip_all("the emulator is not built (it models vfio-pci and IOMMU groups)")
    tap = K.Tap()
    tmp = K.tmpdir()
    pb = K.gen_pb2(src, os.path.join(tmp, "pb"))
    try:
        served(tap, pb, build, tmp)
        shared_group(tap, build, tmp)
        no_nvml(tap, build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


if __name__ == "__main__":
    main()
