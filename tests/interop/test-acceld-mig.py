#!/usr/bin/python3
"""test-acceld-mig.py — MIG in the device plugin (issue 24, item 2): NVIDIA's migStrategy on an
emulated H100 node with instances created, against the python3-grpcio kubelet, compared with
what NVIDIA's k8s-device-plugin documents and does (docs/mig.md lists the differences):

- mixed: GPU 0 in MIG mode with 1g.10gb x2 and 3g.40gb, GPU 1 whole: nvidia.com/gpu (GPU 1),
  nvidia.com/mig-1g.10gb (2), nvidia.com/mig-3g.40gb (1); IDs = the MIG devices' UUIDs.
- Allocate (envvar): NVIDIA_VISIBLE_DEVICES=MIG-<uuid>,...; the parent's /dev/nvidia0 once,
  each instance's GPU-instance and compute-instance capability nodes from mig-minors
  (/dev/nvidia-caps/nvidia-capN), the control nodes. CDI: <vendor>/<class>=MIG-<uuid> and a
  spec per resource naming those nodes.
- An XID on GPU 0 marks every MIG device of it Unhealthy (both MIG resources), not GPU 1.
- single: every GPU in MIG mode with 1g.10gb devices: all on nvidia.com/gpu. NVIDIA's rules
  refuse two profiles and a GPU out of MIG mode beside MIG ones: exit 2 with a message.
- none: a GPU in MIG mode is served whole. NVIDIA's config key flags.migStrategy works too.

Every wait is bounded; nothing asserts timing."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet as K  # noqa: E402

T = 15
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def mig_list(node, gpu):
    out = subprocess.run([node.emu, "mig", str(gpu), "list", "--json"], env=node.env,
                         check=True, capture_output=True, text=True).stdout
    devs = []
    for gi in json.loads(out)["instances"]:
        for ci in gi["compute_instances"]:
            devs.append({"uuid": ci["uuid"], "profile": gi["profile"],
                         "gi": gi["gpu_instance_id"], "ci": ci["compute_instance_id"]})
    return devs


def gpu_uuids(node):
    out = subprocess.run([node.emu, "status", "--json"], env=node.env, check=True,
                         capture_output=True, text=True).stdout
    return [g["uuid"] for g in json.loads(out)["gpus"]]


def mig_minors(path, gpus=2):
    """/proc/driver/nvidia-caps/mig-minors as the MIG User Guide shows it: config, monitor,
    then per GPU every GPU instance's access and its compute instances' (minors in order)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines, m = ["config 1", "monitor 2"], 3
    table = {}
    for g in range(gpus):
        for gi in range(15):
            lines.append(f"gpu{g}/gi{gi}/access {m}")
            table[(g, gi, None)] = m
            m += 1
            for ci in range(8):
                lines.append(f"gpu{g}/gi{gi}/ci{ci}/access {m}")
                table[(g, gi, ci)] = m
                m += 1
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return table


def caps(table, gpu, d):
    return [f"/dev/nvidia-caps/nvidia-cap{table[(gpu, d['gi'], None)]}",
            f"/dev/nvidia-caps/nvidia-cap{table[(gpu, d['gi'], d['ci'])]}"]


def paths(resp):
    return sorted(d.host_path for d in resp.devices)


def start(build, node, d, extra, config=None):
    pdir = os.path.join(d, "dp")
    os.makedirs(pdir, exist_ok=True)
    kubelet = K.FakeKubelet(K.PB, pdir).start()
    agent = K.Acceld(build, node, pdir, d, extra=("--proc-root", os.path.join(d, "proc"), *extra),
                     config=config)
    return pdir, kubelet, agent


def mixed(tap, build, tmp):
    d = os.path.join(tmp, "mixed")
    os.makedirs(d)
    node = K.Node(build, d, gpus=2, numa="0,1", nvlink="none")
    node.cmd("set", 0, "mig=on")
    node.cmd("mig", 0, "create", "1g.10gb,1g.10gb,3g.40gb")
    table = mig_minors(os.path.join(d, "proc/driver/nvidia-caps/mig-minors"))
    migs = mig_list(node, 0)
    uuids = gpu_uuids(node)
    small = sorted(m["uuid"] for m in migs if m["profile"] == "1g.10gb")
    big = [m for m in migs if m["profile"] == "3g.40gb"]
    pdir, kubelet, agent = start(build, node, d, ("--mig-strategy", "mixed"))
    try:
        ok = K.wait_until(lambda: kubelet.count() >= 3, T)
        regs = {r.resource_name: r.endpoint for r in kubelet.registrations}
        tap.ok(ok and set(regs) == {"nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
                                    "nvidia.com/mig-3g.40gb"},
               "mixed: nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb", regs)
        if not ok:
            return
        p1 = K.Plugin(K.PB, os.path.join(pdir, regs["nvidia.com/mig-1g.10gb"]))
        p3 = K.Plugin(K.PB, os.path.join(pdir, regs["nvidia.com/mig-3g.40gb"]))
        pg = K.Plugin(K.PB, os.path.join(pdir, regs["nvidia.com/gpu"]))
        w1, w3, wg = p1.watch(), p3.watch(), pg.watch()
        l1 = w1.wait_for(lambda u: len(u) == 2, T)
        l3 = w3.wait_for(lambda u: len(u) == 1, T)
        lg = wg.wait_for(lambda u: len(u) == 1, T)
        tap.ok(l1 is not None and sorted(l1) == small and
               all(v == ("Healthy", [0]) for v in l1.values()),
               "mig-1g.10gb lists the two 1g.10gb MIG devices by UUID, Healthy, the GPU's NUMA",
               l1)
        tap.ok(l3 is not None and list(l3) == [big[0]["uuid"]], "mig-3g.40gb lists the 3g.40gb",
               l3)
        tap.ok(lg is not None and list(lg) == [uuids[1]], "nvidia.com/gpu lists GPU 1 only", lg)
        by_uuid = {m["uuid"]: m for m in migs}
        r = p1.allocate([small[0]]).container_responses[0]
        want = sorted(["/dev/nvidia0", *caps(table, 0, by_uuid[small[0]]), *CONTROL])
        tap.ok(dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": small[0]} and paths(r) == want,
               "Allocate(1g.10gb): NVIDIA_VISIBLE_DEVICES=MIG-<uuid>, /dev/nvidia0, its GI and CI "
               "capability nodes, the control nodes", (dict(r.envs), paths(r), want))
        r = p1.allocate(small).container_responses[0]
        want = sorted(["/dev/nvidia0", *caps(table, 0, by_uuid[small[0]]),
                       *caps(table, 0, by_uuid[small[1]]), *CONTROL])
        tap.ok(dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": ",".join(small)} and paths(r) == want,
               "Allocate(both): both UUIDs, the GPU's node once, four capability nodes",
               (dict(r.envs), paths(r)))
        node.cmd("xid", 0, 62)
        s1 = w1.wait_for(lambda u: all(v[0] == "Unhealthy" for v in u.values()), T)
        s3 = w3.wait_for(lambda u: all(v[0] == "Unhealthy" for v in u.values()), T)
        tap.ok(s1 is not None and s3 is not None,
               "XID 62 on GPU 0: every MIG device of it Unhealthy, on both MIG resources",
               (w1.latest(), w3.latest()))
        tap.ok(wg.latest() == {uuids[1]: ("Healthy", [1])},
               "GPU 1 (nvidia.com/gpu) stays Healthy", wg.latest())
        for w in (w1, w3, wg):
            w.cancel()
        for p in (p1, p3, pg):
            p.close()
    finally:
        K.stop_agent(tap, kubelet, agent)

    # CDI: the names NVIDIA's plugin sends, a spec per resource with the nodes
    d2 = os.path.join(d, "cdi-run")
    os.makedirs(d2)
    os.symlink(os.path.join(d, "proc"), os.path.join(d2, "proc"))
    pdir, kubelet, agent = start(build, node, d2, ("--mig-strategy", "mixed",
                                                   "--device-list-strategy", "cdi"))
    try:
        ok = K.wait_until(lambda: kubelet.count() >= 3, T)
        regs = {r.resource_name: r.endpoint for r in kubelet.registrations}
        p1 = K.Plugin(K.PB, os.path.join(pdir, regs["nvidia.com/mig-1g.10gb"]))
        r = p1.allocate([small[1]]).container_responses[0]
        tap.ok(ok and [c.name for c in r.cdi_devices] == [f"nvidia.com/gpu={small[1]}"] and
               not r.envs, "CDI: the MIG device is nvidia.com/gpu=MIG-<uuid>",
               [c.name for c in r.cdi_devices])
        with open(os.path.join(d2, "cdi", "accel-nvidia.com-gpu-mig-1g.10gb.json")) as f:
            spec = json.load(f)
        dev = {x["name"]: sorted(n["path"] for n in x["containerEdits"]["deviceNodes"])
               for x in spec["devices"]}
        tap.ok(spec["kind"] == "nvidia.com/gpu" and dev.get(small[1]) ==
               sorted(["/dev/nvidia0", *caps(table, 0, by_uuid[small[1]])]) and len(dev) == 2,
               "CDI spec accel-nvidia.com-gpu-mig-1g.10gb.json: each 1g.10gb device with its "
               "GPU's node and capability nodes", dev)
        p1.close()
    finally:
        K.stop_agent(tap, kubelet, agent)


def single(tap, build, tmp):
    d = os.path.join(tmp, "single")
    os.makedirs(d)
    node = K.Node(build, d, gpus=2, numa="0,1", nvlink="none")
    for g in (0, 1):
        node.cmd("set", g, "mig=on")
        node.cmd("mig", g, "create", "1g.10gb,1g.10gb")
    want = sorted(m["uuid"] for g in (0, 1) for m in mig_list(node, g))
    pdir, kubelet, agent = start(build, node, d, ("--mig-strategy", "single"))
    try:
        ok = K.wait_until(lambda: kubelet.count() >= 1, T)
        regs = {r.resource_name: r.endpoint for r in kubelet.registrations}
        tap.ok(ok and list(regs) == ["nvidia.com/gpu"], "single: one resource, nvidia.com/gpu",
               regs)
        if ok:
            p = K.Plugin(K.PB, os.path.join(pdir, regs["nvidia.com/gpu"]))
            w = p.watch()
            got = w.wait_for(lambda u: len(u) == 4, T)
            tap.ok(got is not None and sorted(got) == want,
                   "single: the four 1g.10gb MIG devices of both GPUs, by UUID", got)
            r = p.allocate([want[0]]).container_responses[0]
            tap.ok(dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": want[0]},
                   "single: Allocate names the MIG device", dict(r.envs))
            w.cancel()
            p.close()
    finally:
        K.stop_agent(tap, kubelet, agent)
    node.cmd("mig", 1, "destroy")
    node.cmd("mig", 1, "create", "3g.40gb")
    rc, socks, out = K.run_acceld_once(build, node, d, ("--mig-strategy", "single"))
    tap.ok(rc == 2 and not socks and "MIG devices of two profiles" in out and "use mixed" in out,
           "single with two profiles: refused at start (exit 2), saying why and what to do",
           out[-800:])
    node.cmd("mig", 1, "destroy")
    node.cmd("set", 1, "mig=off")
    rc, socks, out = K.run_acceld_once(build, node, d, ("--mig-strategy", "single"))
    tap.ok(rc == 2 and "1 GPU(s) are in MIG mode and 1 are not" in out,
           "single with a GPU out of MIG mode beside a MIG one: refused (NVIDIA's rule)",
           out[-800:])
    # none: the MIG GPU whole; NVIDIA's flags.migStrategy from the config file
    rc, socks, out = K.run_acceld_once(build, node, d, ())
    tap.ok(socks == ["accel-nvidia.com-gpu.sock"] and "MIG (" not in out,
           "none (the default): GPUs served whole, MIG ignored", (socks, out[-500:]))
    cfg = os.path.join(d, "nvidia.yaml")
    with open(cfg, "w") as f:
        f.write("version: v1\nflags:\n  migStrategy: mixed\n  failOnInitError: true\n")
    rc, socks, out = K.run_acceld_once(build, node, d, (), config=cfg)
    tap.ok("MIG (migStrategy mixed): 2 MIG device(s) as nvidia.com/mig-1g.10gb" in out,
           "NVIDIA's config key flags.migStrategy selects the strategy", out[-800:])


def main():
    build, src = K.build_paths()
    K.require_tools(build)
    if not K.Node.available(build):
        K.skip_all("the emulator is not built (it models MIG)")
    tap = K.Tap()
    tmp = K.tmpdir()
    K.PB = K.gen_pb2(src, os.path.join(tmp, "pb"))
    try:
        mixed(tap, build, tmp)
        single(tap, build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


if __name__ == "__main__":
    main()
