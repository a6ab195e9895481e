#!/usr/bin/env python3
"""test-accel-emu — the accel-emu command: init makes the state and the fixture trees and
prints the export lines; status (text and --json) shows the machine; set/xid/ecc/lose/restore
act on it; reset, mig create/destroy/list and vfio bind/unbind/audio/bridge change the MIG
instances and the sysfs and /dev trees as the driver and the kernel would; every bad argument
exits 2, names the bad word and changes nothing (state file and fixture tree byte-for-byte the
same, links included). Prints TAP."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
EMU = os.path.join(BUILD, "src", "emu", "accel-emu")

results = []


def case(name):
    def wrap(fn):
        results.append((name, fn))
        return fn
    return wrap


def run(*args, state=None, env_state=None):
    env = dict(os.environ)
    env.pop("ACCEL_EMU_STATE", None)
    if env_state:
        env["ACCEL_EMU_STATE"] = env_state
    cmd = [EMU] + (["--state", state] if state else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    return p.returncode, p.stdout, p.stderr


def snapshot(state):
    """Hash of the state file and of every file and link under its fixture tree."""
    h = hashlib.sha256()
    with open(state, "rb") as f:
        h.update(f.read())
    for root, dirs, files in sorted(os.walk(state + ".d")):
        dirs.sort()
        for name in sorted(files + dirs):
            p = os.path.join(root, name)
            h.update(p.encode())
            if os.path.islink(p):
                h.update(b"->" + os.readlink(p).encode())
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


TMP = tempfile.mkdtemp(prefix="test-accel-emu-")
STATE = os.path.join(TMP, "machine")


def check(cond, what):
    if not cond:
        raise AssertionError(what)


@case("init makes state, sysfs and dev trees and prints export lines")
def _():
    rc, out, err = run("init", "--gpus", "4", "--numa", "0,0,1,1", "--nvlink", "pairs",
                       "--model", "H100", "--memory", "40Gi", state=STATE)
    check(rc == 0, f"init rc {rc}: {err}")
    check(os.path.isfile(STATE), "no state file")
    check(f"export ACCEL_EMU_STATE={os.path.realpath(STATE)}" in out, "no export line:\n" + out)
    check("export LD_LIBRARY_PATH=" in out, "no LD_LIBRARY_PATH line")
    for i in range(4):
        check(os.path.isfile(os.path.join(STATE + ".d", "dev", f"nvidia{i}")), f"no nvidia{i}")
    for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        check(os.path.isfile(os.path.join(STATE + ".d", "dev", n)), f"no {n}")
    check(not os.path.exists(os.path.join(STATE + ".d", "dev", "nvidia4")), "nvidia4 exists")
    devs = os.path.join(STATE + ".d", "sysfs", "bus", "pci", "devices")
    buses = sorted(os.listdir(devs))
    check(len(buses) == 4, f"sysfs devices: {buses}")
    numas = [open(os.path.join(devs, b, "numa_node")).read().strip() for b in buses]
    check(numas == ["0", "0", "1", "1"], f"numa nodes {numas}")
    check(all(b.startswith("0000:") and b == b.lower() for b in buses), f"bus names {buses}")


@case("status --json parses and matches init")
def _():
    rc, out, err = run("status", "--json", state=STATE)
    check(rc == 0, f"status rc {rc}: {err}")
    s = json.loads(out)
    check(len(s["gpus"]) == 4, "gpu count")
    check(s["sysfs_root"].endswith(".d/sysfs"), "sysfs_root")
    check(s["proc_info_stride"] == 24, "default stride")
    for i, g in enumerate(s["gpus"]):
        check(g["index"] == i, "index")
        check(g["uuid"].startswith("GPU-") and len(g["uuid"]) == 40, "uuid")
        check(g["memory_total_bytes"] == 40 << 30, "memory override")
        check(g["memory_used_bytes"] == 0, "memory used")
        check(g["numa_node"] == (0 if i < 2 else 1), "numa")
        check(g["lost"] is False, "lost")
        check(g["processes"] == [], "processes")
        check(g["name"] == "NVIDIA H100 80GB HBM3", "name")
    rc, text, _ = run("status", env_state=STATE)
    check(rc == 0 and s["gpus"][3]["uuid"] in text, "text status")


@case("set, xid, ecc, lose and restore act on the machine")
def _():
    rc, out, err = run("set", "2", "temperature=80", "power=300", "fan=55", "pstate=2",
                       state=STATE)
    check(rc == 0, f"set rc {rc}: {err}")
    uuid1 = json.loads(run("status", "--json", state=STATE)[1])["gpus"][1]["uuid"]
    check(run("xid", uuid1, "43", state=STATE)[0] == 0, "xid by uuid")
    check(run("ecc", "1", "double", state=STATE)[0] == 0, "ecc")
    check(run("lose", "3", state=STATE)[0] == 0, "lose")
    g = json.loads(run("status", "--json", state=STATE)[1])["gpus"]
    check(g[2]["temperature_c"] == 80 and g[2]["power_mw"] == 300000, "sensors")
    check(g[2]["fan_percent"] == 55 and g[2]["pstate"] == 2, "fan/pstate")
    check(g[1]["ecc_double_bit"] == 1 and g[1]["events"] == 2, f"ecc/events {g[1]}")
    check(g[3]["lost"] is True and g[3]["events"] == 1, "lost")
    check(run("restore", "3", state=STATE)[0] == 0, "restore")
    check(json.loads(run("status", "--json", state=STATE)[1])["gpus"][3]["lost"] is False,
          "restored")
    # a GPU by PCI bus id
    bus = g[0]["pci_bus_id"]
    check(run("set", bus, "temperature=40", state=STATE)[0] == 0, "set by bus id")
    # the time slice between processes: 2000 us by default, per GPU
    check(g[1]["timeslice_us"] == 2000, f"default time slice {g[1]['timeslice_us']}")
    check(run("set", "1", "timeslice=50000", state=STATE)[0] == 0, "set timeslice")
    g = json.loads(run("status", "--json", state=STATE)[1])["gpus"]
    check(g[1]["timeslice_us"] == 50000 and g[0]["timeslice_us"] == 2000, "time slice set")
    check(run("set", "1", "timeslice=default", state=STATE)[0] == 0, "timeslice=default")
    g = json.loads(run("status", "--json", state=STATE)[1])["gpus"]
    check(g[1]["timeslice_us"] == 2000, "time slice back to the default")


@case("init --timeslice sets every GPU's time slice")
def _():
    other = os.path.join(TMP, "sliced")
    rc, out, err = run("init", "--gpus", "2", "--timeslice", "500", state=other)
    check(rc == 0, f"init rc {rc}: {err}")
    g = json.loads(run("status", "--json", state=other)[1])["gpus"]
    check([x["timeslice_us"] for x in g] == [500, 500], f"time slices {g}")


BAD = [
    (["init", "--gpus", "0"], "--gpus"),
    (["init", "--gpus", "17"], "--gpus"),
    (["init", "--gpus", "two"], "--gpus"),
    (["init", "--model", "GTX480"], "GTX480"),
    (["init", "--memory", "1K"], "--memory"),
    (["init", "--memory", "lots"], "--memory"),
    (["init", "--numa", "0,1"], "--numa"),
    (["init", "--numa", "0,x,1,1"], "'x'"),
    (["init", "--nvlink", "some"], "some"),
    (["init", "--proc-info-stride", "20"], "--proc-info-stride"),
    (["init", "--timeslice", "0"], "--timeslice"),
    (["init", "--timeslice", "1000001"], "--timeslice"),
    (["init", "--frobnicate", "1"], "--frobnicate"),
    (["init", "--gpus"], "--gpus"),
    (["xid", "9", "43"], "'9'"),
    (["xid", "GPU-nope", "43"], "GPU-nope"),
    (["xid", "0", "0"], "XID"),
    (["xid", "0", "4x"], "4x"),
    (["xid", "0"], "usage"),
    (["ecc", "0", "triple"], "triple"),
    (["set", "0", "temperature=999"], "temperature"),
    (["set", "0", "bogus=1"], "bogus"),
    (["set", "0", "temperature"], "key=value"),
    (["set", "0", "sm_clock=2500"], "maximum"),
    (["set", "0", "temperature=50", "power=-1"], "power"),
    (["set", "1", "compute_mode=sometimes"], "compute_mode"),
    (["set", "1", "timeslice=0"], "timeslice"),
    (["set", "1", "timeslice=2s"], "timeslice"),
    (["lose", "4"], "'4'"),
    (["restore"], "usage"),
    (["status", "--yaml"], "--yaml"),
    (["explode"], "explode"),
    (["init", "--iommu-groups", "pairs"], "--iommu-groups"),
    (["reset"], "usage"),
    (["mig", "0"], "usage"),
    (["mig", "0", "make", "1g.10gb"], "make"),
    (["mig", "0", "create"], "usage"),
    (["mig", "0", "create", "1g.11gb"], "1g.11gb"),
    (["mig", "0", "create", "1g.10gb,,3g.40gb"], "unknown MIG profile"),
    (["mig", "0", "create", "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb"],
     "more than"),
    (["mig", "0", "list", "--yaml"], "usage"),
    (["mig", "9", "list"], "'9'"),
    (["vfio", "0"], "usage"),
    (["vfio", "0", "attach"], "usage"),
    (["vfio", "0", "audio", "maybe"], "usage"),
    (["vfio", "GPU-nope", "bind"], "GPU-nope"),
]


@case("bad arguments exit 2, name the argument and change nothing")
def _():
    before = snapshot(STATE)
    for args, word in BAD:
        rc, out, err = run(*args, state=STATE)
        check(rc == 2, f"{args}: rc {rc}, want 2 ({err.strip()})")
        check(word in err, f"{args}: message does not name {word!r}: {err.strip()}")
        check(snapshot(STATE) == before, f"{args} changed the machine")


@case("without a machine: a clear message, exit 2")
def _():
    rc, out, err = run("status")
    check(rc == 2 and "ACCEL_EMU_STATE" in err, f"no state: rc {rc} {err}")
    rc, out, err = run("status", state=os.path.join(TMP, "missing"))
    check(rc == 2 and "accel-emu init" in err, f"missing state: rc {rc} {err}")
    junk = os.path.join(TMP, "junk")
    with open(junk, "w") as f:
        f.write("junk\n")
    rc, out, err = run("xid", "0", "43", state=junk)
    check(rc == 2 and "not an emulated machine" in err, f"junk state: rc {rc} {err}")
    with open(junk) as f:
        check(f.read() == "junk\n", "junk file changed")


@case("init makes the state file 0600 whatever the umask; --mode widens it; bad modes refused")
def _():
    state = os.path.join(TMP, "moded")
    old = os.umask(0)
    try:
        rc, out, err = run("init", "--gpus", "1", state=state)
        check(rc == 0, f"init rc {rc}: {err}")
        check(os.stat(state).st_mode & 0o7777 == 0o600, f"mode {os.stat(state).st_mode:o}")
        rc, out, err = run("init", "--gpus", "1", "--mode", "0660", state=state)
        check(rc == 0 and os.stat(state).st_mode & 0o7777 == 0o660, f"--mode 0660: {err}")
        before = snapshot(state)
        for bad in ["0400", "999", "1", "06660", "rw"]:
            rc, out, err = run("init", "--gpus", "2", "--mode", bad, state=state)
            check(rc == 2 and "bad mode" in err, f"--mode {bad}: rc {rc} {err}")
        check(snapshot(state) == before, "a refused init changed the machine")
    finally:
        os.umask(old)


@case("a damaged state file is refused with the field named, not shown")
def _():
    state = os.path.join(TMP, "damaged")
    rc, out, err = run("init", "--gpus", "2", state=state)
    check(rc == 0, f"init rc {rc}: {err}")
    with open(state, "r+b") as f:  # random bytes after the magic, version and GPU count
        f.seek(16)
        f.write(os.urandom(65536))
    for args in (["status"], ["status", "--json"], ["xid", "0", "43"]):
        rc, out, err = run(*args, state=state)
        check(rc == 2 and "not an emulated machine" in err and "accel-emu init" in err
              and out == "", f"{args}: rc {rc} out {out!r} err {err}")
        check("PiB" not in out + err, f"{args}: shown anyway: {out}")


@case("re-init with fewer GPUs removes the old fixtures; stride is kept")
def _():
    rc, out, err = run("init", "--gpus", "2", "--proc-info-stride", "32", state=STATE)
    check(rc == 0, f"re-init rc {rc}: {err}")
    dev = sorted(os.listdir(os.path.join(STATE + ".d", "dev")))
    check(dev == ["nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "nvidiactl", "vfio"],
          f"dev tree {dev}")
    vfio = sorted(os.listdir(os.path.join(STATE + ".d", "dev", "vfio")))
    check(vfio == ["vfio"], f"dev/vfio {vfio}")
    groups = sorted(os.listdir(os.path.join(STATE + ".d", "sysfs", "kernel", "iommu_groups")))
    check(groups == ["10", "11"], f"IOMMU groups {groups}")
    devs = os.listdir(os.path.join(STATE + ".d", "sysfs", "bus", "pci", "devices"))
    check(len(devs) == 2, f"sysfs {devs}")
    s = json.loads(run("status", "--json", state=STATE)[1])
    check(s["proc_info_stride"] == 32 and len(s["gpus"]) == 2, "stride/gpus")


def status(state):
    return json.loads(run("status", "--json", state=state)[1])


def sysfs(state, *parts):
    return os.path.join(state + ".d", "sysfs", *parts)


def read(path):
    with open(path) as f:
        return f.read()


@case("mig: mode on an idle GPU, create as nvidia-smi -cgi -C, list, all-or-nothing, destroy")
def _():
    st = os.path.join(TMP, "mig")
    check(run("init", "--gpus", "2", state=st)[0] == 0, "init")
    rc, out, err = run("mig", "0", "create", "1g.10gb", state=st)
    check(rc == 1 and "MIG mode is not enabled" in err and "set 0 mig=on" in err,
          f"create with MIG off: rc {rc} {err}")
    rc, out, err = run("set", "0", "mig=on", state=st)
    check(rc == 0, f"mig=on on an idle GPU: rc {rc} {err}")
    g = status(st)["gpus"]
    check(g[0]["mig_mode"] == 1 and g[0]["mig_mode_pending"] == 1 and g[1]["mig_mode"] == 0,
          f"modes {g[0]['mig_mode']}/{g[0]['mig_mode_pending']}")
    rc, out1, err = run("mig", "0", "create", "1g.10gb,9", state=st)
    check(rc == 0, f"create rc {rc}: {err}")
    # the driver's placement (the highest free one) and its IDs: 1g on slice 6 is GPU instance
    # 13, then the 3g fits only on the first half (ID 1)
    for line in ("Successfully created GPU instance ID 13 on GPU  0 using profile MIG 1g.10gb "
                 "(ID 19)",
                 "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.40gb "
                 "(ID  9)",
                 "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 "
                 "using profile MIG 3g.40gb (ID  2)"):
        check(line in out1, f"missing {line!r} in:\n{out1}")
    # a 2g fits (slices 4-5), the 4g after it does not: nothing of the list is created
    before = snapshot(st)
    rc, out, err = run("mig", "0", "create", "2g.20gb,4g.40gb", state=st)
    check(rc == 1 and "insufficient resources" in err and "4g.40gb" in err,
          f"no room: rc {rc} {err}")
    check(snapshot(st) == before, "a refused create changed the machine")
    rc, out2, err = run("mig", "0", "create", "MIG 2g.20gb", state=st)
    check(rc == 0 and "GPU instance ID  5 on GPU  0 using profile MIG 2g.20gb (ID 14)" in out2,
          f"2g: rc {rc} {out2} {err}")
    uuids = [x.split()[-1] for x in (out1 + out2).splitlines()
             if x.strip().startswith("MIG device MIG-")]
    check(len(uuids) == 3 and all(len(u) == 40 for u in uuids), f"MIG UUIDs {uuids}")
    rc, out, err = run("mig", "0", "list", "--json", state=st)
    m = json.loads(out)
    check(m["mig_capable"] and m["mig_mode"] == 1, "list: mode")
    ids = [(i["gpu_instance_id"], i["profile"], i["placement"]["start"], i["placement"]["size"])
           for i in m["instances"]]
    check(ids == [(1, "3g.40gb", 0, 4), (5, "2g.20gb", 4, 2), (13, "1g.10gb", 6, 1)],
          f"instances {ids}")
    check(m["instances"][0]["memory_total_bytes"] == 40448 << 20, "3g.40gb memory")
    cis = [c for i in m["instances"] for c in i["compute_instances"]]
    check(sorted(c["uuid"] for c in cis) == sorted(uuids), "UUIDs listed")
    check(all(c["compute_instance_id"] == 0 and c["processes"] == [] for c in cis), "CIs")
    check(status(st)["gpus"][0]["mig_instances"] == m["instances"], "status shows them too")
    rc, text, _ = run("mig", "0", "list", state=st)
    check(rc == 0 and "MIG 3g.40gb" in text and uuids[0] in text, f"text list:\n{text}")
    check(run("mig", "0", "destroy", state=st)[0] == 0, "destroy")
    check(json.loads(run("mig", "0", "list", "--json", state=st)[1])["instances"] == [],
          "destroyed")
    # a model without MIG
    other = os.path.join(TMP, "l4")
    check(run("init", "--gpus", "1", "--model", "L4", state=other)[0] == 0, "init L4")
    rc, _, err = run("set", "0", "mig=on", state=other)
    check(rc == 2 and "does not support MIG" in err, f"L4 mig=on: rc {rc} {err}")
    rc, _, err = run("mig", "0", "create", "1g.10gb", state=other)
    check(rc == 2 and "does not support MIG" in err, f"L4 create: rc {rc} {err}")


@case("vfio: bind/unbind move the driver links, driver_override and /dev/vfio/<group>")
def _():
    st = os.path.join(TMP, "vfio")
    check(run("init", "--gpus", "4", "--iommu-groups", "shared", "--numa", "0,0,1,1",
              state=st)[0] == 0, "init")
    g = status(st)["gpus"]
    check([x["iommu_group"] for x in g] == [10, 10, 11, 11], f"groups {g}")
    bdf = [x["pci_bus_id"][4:].lower() for x in g]
    dev = sysfs(st, "bus", "pci", "devices", bdf[2])
    check(read(os.path.join(dev, "vendor")) == "0x10de\n", "vendor")
    check(read(os.path.join(dev, "device")) == "0x2330\n", "device id (H100 SXM5)")
    check(read(os.path.join(dev, "class")) == "0x030200\n", "class: 3D controller")
    check(read(os.path.join(dev, "numa_node")) == "1\n", "numa_node")
    check(read(os.path.join(dev, "driver_override")) == "(null)\n", "no override")
    check(os.path.basename(os.readlink(os.path.join(dev, "driver"))) == "nvidia", "nvidia")
    check(os.path.basename(os.readlink(os.path.join(dev, "iommu_group"))) == "11", "group link")
    members = sorted(os.listdir(sysfs(st, "kernel", "iommu_groups", "11", "devices")))
    check(members == sorted([bdf[2], bdf[3]]), f"group 11 devices {members}")
    check(os.path.realpath(os.path.join(sysfs(st, "kernel", "iommu_groups", "11", "devices"),
                                        bdf[2])) == os.path.realpath(dev), "group member link")
    vfio_dir = os.path.join(st + ".d", "dev", "vfio")
    check(sorted(os.listdir(vfio_dir)) == ["vfio"], "no group node while nothing is bound")

    rc, out, err = run("vfio", "2", "bind", state=st)
    check(rc == 0 and "vfio-pci" in out, f"bind: rc {rc} {err}")
    check(os.path.basename(os.readlink(os.path.join(dev, "driver"))) == "vfio-pci", "driver")
    check(read(os.path.join(dev, "driver_override")) == "vfio-pci\n", "override")
    check(os.path.realpath(sysfs(st, "bus", "pci", "drivers", "vfio-pci", bdf[2])) ==
          os.path.realpath(dev), "vfio-pci lists it")
    check(not os.path.lexists(sysfs(st, "bus", "pci", "drivers", "nvidia", bdf[2])),
          "nvidia no longer lists it")
    check(sorted(os.listdir(vfio_dir)) == ["11", "vfio"], f"/dev/vfio {os.listdir(vfio_dir)}")
    g = status(st)["gpus"]
    check(g[2]["vfio"] is True and g[3]["vfio"] is False, "status vfio")
    # the audio function and a bridge join the group; unbinding clears the override and node
    check(run("vfio", "2", "audio", "on", state=st)[0] == 0, "audio on")
    audio = sysfs(st, "bus", "pci", "devices", bdf[2][:-1] + "1")
    check(read(os.path.join(audio, "class")) == "0x040300\n", "audio class")
    check(os.path.basename(os.readlink(os.path.join(audio, "driver"))) == "snd_hda_intel",
          "audio driver")
    check(os.path.basename(os.readlink(os.path.join(audio, "iommu_group"))) == "11",
          "audio's group")
    check(run("vfio", "3", "bridge", "on", state=st)[0] == 0, "bridge on")
    members = os.listdir(sysfs(st, "kernel", "iommu_groups", "11", "devices"))
    check(len(members) == 4, f"group 11 with audio and bridge {members}")
    bridge = [m for m in members if m.endswith(":01.0")]
    check(len(bridge) == 1 and read(sysfs(st, "bus", "pci", "devices", bridge[0], "class")) ==
          "0x060400\n", f"bridge {bridge}")
    check(status(st)["gpus"][2]["pci_functions"] == ["audio"], "status functions")
    check(run("vfio", "2", "audio", "off", state=st)[0] == 0, "audio off")
    check(not os.path.lexists(audio), "audio gone")
    check(run("vfio", "2", "unbind", state=st)[0] == 0, "unbind")
    check(os.path.basename(os.readlink(os.path.join(dev, "driver"))) == "nvidia", "back")
    check(read(os.path.join(dev, "driver_override")) == "(null)\n", "override cleared")
    check(sorted(os.listdir(vfio_dir)) == ["vfio"], "group node gone")
    # a GPU with MIG instances is not bound
    check(run("set", "0", "mig=on", state=st)[0] == 0 and
          run("mig", "0", "create", "1g.10gb", state=st)[0] == 0, "MIG instance")
    rc, _, err = run("vfio", "0", "bind", state=st)
    check(rc == 1 and "mig 0 destroy" in err, f"bind with MIG instances: rc {rc} {err}")


@case("models and help")
def _():
    rc, out, _ = run("models")
    check(rc == 0 and "H100" in out and "A100" in out and "T4" in out, "models")
    rc, out, _ = run("--help")
    check(rc == 0 and "lose GPU" in out and "--proc-info-stride" in out and "--mode" in out,
          "help")
    rc, _, err = run()
    check(rc == 2, "no command")


def main():
    if not os.access(EMU, os.X_OK):
        print("1..0 # SKIP accel-emu is not built")
        return 77
    print(f"1..{len(results)}")
    failed = 0
    for i, (name, fn) in enumerate(results, 1):
        try:
            fn()
            print(f"ok {i} - {name}")
        except Exception as e:  # a failed check or an unexpected error: both fail the case
            failed += 1
            print(f"not ok {i} - {name}")
            for line in str(e).splitlines():
                print(f"# {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
