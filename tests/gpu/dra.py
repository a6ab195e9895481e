#!/usr/bin/python3
"""dra.py — the body of tests/gpu/dra.sh (read its header): `acceld --mode dra` on a real NVIDIA
node, or on accel-emu in the dry run. Reuses the emulator tests' helpers — the python3-grpcio
kubelet (tests/dra/test_kubelet.py), the fake API server (tests/lib/fakeapi.py), the private
mount namespace (tests/lib/mountns.py), the acceld child process (tests/interop/kubelet.py) and
the claim objects and kubernetes-models check of tests/dra/test_dra_mode.py / test_dra_mps.py —
and prints one PASS / FAIL / SKIP line per check, `#` lines with the measured figures, and a
record line for docs/gpu-validation.md.

    /usr/bin/python3 tests/gpu/dra.py BUILD_DIR DRY(0|1)

It never changes the GPU's settings: no nvidia-smi write option is run; the only MPS daemons
are the per-claim ones acceld starts under this run's temp state dir, and any still up at the
end is told to quit through its own pipe dir."""
import ctypes
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(sys.argv[1])
DRY = sys.argv[2] == "1"
os.environ["ACCEL_SOURCE_ROOT"] = SRC
os.environ["ACCEL_BUILD_ROOT"] = BUILD
for d in ("tests/dra", "tests/interop", "tests/lib"):
    sys.path.insert(0, os.path.join(SRC, d))
import test_kubelet as k  # noqa: E402  (exits 77 itself without grpcio/protoc)
import test_dra_mode as m  # noqa: E402
import test_dra_mps as mps  # noqa: E402
import kubelet as K  # noqa: E402
import fakeapi  # noqa: E402
import mountns  # noqa: E402

T = 30
GiB = 1 << 30
NODE = m.NODE
CLAIM_V = "0f3c6a8e-7777-4a1b-9c2d-aaaaaaaaaaaa"
CLAIM_M = "0f3c6a8e-8888-4a1b-9c2d-bbbbbbbbbbbb"
failed = False


def say(verdict, what, diag=None):
    global failed
    print("%s %s" % (verdict, what), flush=True)
    if verdict == "FAIL":
        failed = True
        if diag:
            for line in str(diag).splitlines()[-40:]:
                print("#   " + line, flush=True)


def check(cond, what, diag=None):
    say("PASS" if cond else "FAIL", what, diag)
    return cond


def note(msg):
    for line in str(msg).splitlines():
        print("# " + line, flush=True)


def facts_nvidia_smi():
    """Per GPU, what nvidia-smi says: uuid, name, memory MiB, compute capability, driver."""
    out = subprocess.check_output(
        ["nvidia-smi", "--query-gpu=uuid,name,memory.total,compute_cap,driver_version",
         "--format=csv,noheader,nounits"], text=True, timeout=T)
    gpus = []
    for line in out.strip().splitlines():
        uuid, name, mem, cc, drv = [x.strip() for x in line.split(",")]
        gpus.append({"uuid": uuid, "name": name, "mib": int(mem) if mem.isdigit() else mem,
                     "cc": cc, "driver": drv})
    return gpus


def facts_nvml():
    """The dry run has no nvidia-smi: the same facts straight from (the emulator's) NVML."""
    nv = ctypes.CDLL("libnvidia-ml.so.1")
    assert nv.nvmlInit_v2() == 0
    drv = ctypes.create_string_buffer(96)
    nv.nvmlSystemGetDriverVersion(drv, 96)
    n = ctypes.c_uint()
    nv.nvmlDeviceGetCount_v2(ctypes.byref(n))
    gpus = []
    for i in range(n.value):
        h = ctypes.c_void_p()
        nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
        uuid, name = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
        nv.nvmlDeviceGetUUID(h, uuid, 96)
        nv.nvmlDeviceGetName(h, name, 96)
        mem = (ctypes.c_ulonglong * 3)()
        nv.nvmlDeviceGetMemoryInfo(h, mem)
        ma, mi = ctypes.c_int(), ctypes.c_int()
        nv.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(ma), ctypes.byref(mi))
        gpus.append({"uuid": uuid.value.decode(), "name": name.value.decode(),
                     "mib": mem[0] >> 20, "cc": "%d.%d" % (ma.value, mi.value),
                     "driver": drv.value.decode()})
    nv.nvmlShutdown()
    return gpus


class Driver(m.Driver):
    """acceld --mode dra with this node's GPUs: shared (libvcuda) or, with a control binary,
    GPU 0 an MPS share."""

    def __init__(self, node, knode, kc, tmp, control=None):
        super().__init__(BUILD, node, knode, kc, tmp)
        self.args = ["--mode", "dra", "--node-name", NODE, "--kubeconfig", kc,
                     "--plugin-registry-dir", knode.dirs["registry"],
                     "--dra-plugin-dir", knode.dirs["plugin"], "--vcuda-library", knode.lib,
                     "--dra-sharing", "shared", "--dra-claim-wait", "10s"]
        if control:
            self.args += ["--dra-gpu-sharing", "0=mps", "--mps-control", control]


def container_env(spec, extra=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(e.split("=", 1) for e in spec.get("containerEdits", {}).get("env", []))
    env.update(extra or {})
    return env


def container(spec, argv, extra=None):
    """argv with the claim's CDI edits: its mounts in a private mount namespace, its env."""
    mounts = [(x["hostPath"], x["containerPath"], "ro" in x["options"])
              for x in spec.get("containerEdits", {}).get("mounts", [])]
    return mountns.run(mounts, argv, container_env(spec, extra), timeout=120)


def demo_figures(out):
    """cuda-demo's output: (total MiB seen first, MiB it could allocate, share %)."""
    tot = re.search(r"^cuMemGetInfo: free \d+ MiB of (\d+) MiB", out, re.M)
    got = re.search(r"^allocated (\d+) MiB", out, re.M)
    share = re.search(r"a (\d+) % share$", out, re.M)
    return (int(tot.group(1)) if tot else None, int(got.group(1)) if got else None,
            int(share.group(1)) if share else None)


def registration_and_slice(drv, knode, api, facts, sharing0):
    ok = K.wait_until(lambda: os.path.exists(knode.reg_sock()), T)
    if not check(ok, "acceld --mode dra serves the registration socket",
                 drv.agent.log_text()):
        return False
    info = knode.register()
    check(info.type == "DRAPlugin" and info.name == k.DRIVER and
          info.endpoint == os.path.join(knode.dirs["plugin"], "dra.sock"),
          "registration: GetInfo names the DRA endpoint, NotifyRegistrationStatus answered",
          info)
    ok = K.wait_until(lambda: len(m.our_slices(api)) == 1 and
                      m.device(api, "gpu-0") is not None and
                      m.device(api, "gpu-0")["attributes"].get("sharing") ==
                      {"string": sharing0}, T)
    slices = m.our_slices(api)
    return check(ok, "one ResourceSlice published for the node, gpu-0 a %s share" % sharing0,
                 json.dumps(slices)[:3000] + "\n" + drv.agent.log_text())


def slice_attributes(api, facts):
    devs = m.our_slices(api)[0]["spec"]["devices"]
    check(len(devs) == len(facts), "the slice has one device per GPU (%d)" % len(facts),
          [d["name"] for d in devs])
    src = "NVML" if DRY else "nvidia-smi --query-gpu"
    for i, g in enumerate(facts):
        d = next((x for x in devs if x["name"] == "gpu-%d" % i), {})
        a = d.get("attributes", {})
        mem = int(d.get("capacity", {}).get("memory", {}).get("value", "0"))
        got = {"uuid": a.get("uuid", {}).get("string"),
               "name": a.get("productName", {}).get("string"),
               "mib": mem >> 20,
               "cc": a.get("cudaComputeCapability", {}).get("version", "").rsplit(".0", 1)[0],
               "driver": a.get("driverVersion", {}).get("string")}
        note("gpu-%d: %s" % (i, json.dumps(got)))
        same = all(got[x] == g[x] for x in ("uuid", "name", "cc", "driver")) and \
            isinstance(g["mib"], int) and abs(got["mib"] - g["mib"]) <= 1
        check(same, "gpu-%d: UUID, product, memory, compute capability, driver version match %s"
              % (i, src), json.dumps({"slice": got, src: g}))


def validity(api):
    written = [json.loads(x["body"]) for x in api.call("GET", "/_fake/log")
               if x["method"] in ("POST", "PUT") and "resourceslices" in x["path"]]
    verdicts = m.validate(written)
    if verdicts is None:
        say("SKIP", "ResourceSlices valid resource.k8s.io/v1: kubernetes-models or node missing "
            "(tests/kube/k8s-validate: npm ci there)")
    else:
        check(written and verdicts == ["ok %d" % i for i in range(len(written))],
              "every ResourceSlice acceld wrote (%d) is valid resource.k8s.io/v1 "
              "(kubernetes-models)" % len(written), "\n".join(verdicts))


def can_unshare():
    return os.geteuid() == 0 and shutil.which("unshare") is not None


def vgpu_claim(api, knode, demo, facts):
    api.call("POST", "/_fake/claim", m.claim_obj("team", "share", CLAIM_V, [
        dict(k.SHARE[0], pool=NODE)]))
    r = knode.prepare([("team", "share", CLAIM_V)])
    e = r.claims[CLAIM_V]
    check(e.error == "" and [(d.device_name, list(d.cdi_device_ids)) for d in e.devices] ==
          [("gpu-0", ["gpu.accel.dev/claim=%s-gpu-0" % CLAIM_V])],
          "a shared claim of 30 % + 4 GiB of gpu-0 is prepared through NodePrepareResources", r)
    spec = mps.spec_of(knode, CLAIM_V)
    env, mounts = mps.edits_of(spec)
    conf_path = mounts.get("/etc/vcuda/config", {}).get("hostPath", "")
    conf = open(conf_path).read() if os.path.exists(conf_path) else ""
    check("memory_limit = %d" % (4 * GiB) in conf and "core_limit = 30" in conf and
          "devices = %s" % facts[0]["uuid"] in conf and
          env.get("NVIDIA_VISIBLE_DEVICES") == facts[0]["uuid"] and
          "/etc/ld.so.preload" in mounts,
          "its CDI spec: libvcuda preloaded, config 4 GiB / 30 % on gpu-0's UUID", spec)
    nodes = [n["path"] for d in spec.get("devices", [])
             for n in d.get("containerEdits", {}).get("deviceNodes", [])]
    if DRY:
        check(len(nodes) == 1 and re.fullmatch(r"/dev/nvidia\d+", nodes[0]),
              "its CDI device node: " + ", ".join(nodes), spec)
    else:
        q = subprocess.run(["nvidia-smi", "-q", "-i", "0"], capture_output=True, text=True,
                           timeout=T).stdout
        minor = re.search(r"Minor Number\s*:\s*(\d+)", q)
        want = "/dev/nvidia%s" % (minor.group(1) if minor else "?")
        check(nodes == [want] and os.path.exists(want) and stat.S_ISCHR(os.stat(want).st_mode),
              "its CDI device node is gpu-0's: %s (nvidia-smi -q: minor number)" % want,
              (nodes, spec))
    name = "an unmodified CUDA program (cuda-demo) with the claim's CDI edits sees 4096 MiB, " \
        "is refused past it and gets ~30 % of the GPU's time"
    if not can_unshare():
        say("SKIP", name + ": needs root and unshare (a private mount namespace)")
    else:
        # the same program without the claim: its share is the measure of "all of the GPU"
        base = subprocess.run([demo, "--alloc", "256", "--seconds", "3", "--kernel-ms", "5"],
                              env=container_env({}), capture_output=True, text=True, timeout=120)
        p = container(spec, [demo, "--alloc", "5120", "--seconds", "6", "--kernel-ms", "5"])
        total, alloc, share = demo_figures(p.stdout)
        full = demo_figures(base.stdout)[2]
        note("cuda-demo alone: %s %% share; with the claim: total %s MiB, allocated %s MiB of "
             "5120 asked, %s %% share" % (full, total, alloc, share))
        ratio = share / full if share is not None and full else None
        if ratio is not None:
            note("measured compute share with a 30 %% claim: %.2f of unlimited" % ratio)
        # loose on real hardware (clocks, other tenants); the figure above is the result
        check(p.returncode == 0 and total == 4096 and alloc is not None and
              2048 <= alloc <= 4096 and ratio is not None and 0.15 <= ratio <= 0.45, name,
              base.stdout + base.stderr + p.stdout + p.stderr)
    r = knode.unprepare([("team", "share", CLAIM_V)])
    ck = os.path.join(knode.dirs["state"], "dra-checkpoint.json")
    claims = json.load(open(ck)).get("claims", []) if os.path.exists(ck) else []
    check(r.claims[CLAIM_V].error == "" and not mps.spec_of(knode, CLAIM_V) and
          not (conf_path and os.path.exists(os.path.dirname(conf_path))) and
          not any(c.get("uid") == CLAIM_V for c in claims),
          "unprepared: CDI spec, libvcuda config dir and checkpoint entry gone",
          (r, knode.files()))


def mps_claim(api, knode, demo, control, facts):
    api.call("POST", "/_fake/claim", mps.claim_obj("mps", CLAIM_M, "4Gi", "30",
                                                   "7d1c3c43-4d42-4a79-b0d2-5b9d0c0e0e09"))
    r = knode.prepare([("team", "mps", CLAIM_M)])
    check(r.claims[CLAIM_M].error == "" and
          [d.device_name for d in r.claims[CLAIM_M].devices] == ["gpu-0"],
          "an MPS claim of 30 % + 4 GiB of gpu-0 is prepared", r)
    spec = mps.spec_of(knode, CLAIM_M)
    env, mounts = mps.edits_of(spec)
    pipe = mounts.get("/run/accel-mps/pipe", {}).get("hostPath", "")
    pid = mps.daemon_pid(pipe) if pipe else 0
    node_env = types.SimpleNamespace(env=dict(os.environ))
    lim = mps.mps_ctl(node_env, control, pipe, "get_default_device_pinned_mem_limit 0") \
        if pid else ""
    pct = mps.mps_ctl(node_env, control, pipe, "get_default_active_thread_percentage") \
        if pid else ""
    note("the claim's daemon (pid %d, pipe %s): pinned limit %r, thread %% %r"
         % (pid, pipe, lim, pct))
    check(pid > 0 and mps.alive(pid) and pipe.startswith(knode.dirs["state"]) and
          env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == "0=4096M" and
          env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "30" and
          lim.splitlines()[-1:] == ["4G"] and pct.splitlines()[-1:] == ["30.0"],
          "the claim's own MPS control daemon runs under this run's temp dir with 4G / 30 %",
          (spec, lim, pct))
    name = "an unmodified CUDA program in the MPS claim's container is refused memory past 4 GiB"
    if not can_unshare():
        say("SKIP", name + ": needs root and unshare (a private mount namespace)")
    else:
        for extra, what in ((None, ""), ({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=65536M"},
                                         ", also when it raises its own limit")):
            p = container(spec, [demo, "--alloc", "6144", "--seconds", "2", "--kernel-ms", "5"],
                          extra)
            total, alloc, share = demo_figures(p.stdout)
            note("MPS client%s: total %s MiB, allocated %s MiB of 6144 asked, %s %% share"
                 % (what, total, alloc, share))
            check(p.returncode == 0 and alloc is not None and 1024 <= alloc <= 4096,
                  name + what, p.stdout + p.stderr)
    r = knode.unprepare([("team", "mps", CLAIM_M)])

    def unprepared():
        # acceld answers before the daemon has gone (it stops it without blocking its loop)
        # and removes the claim's directories once it sees the daemon exit: wait for all three
        return ((not pid or not mps.alive(pid)) and not mps.spec_of(knode, CLAIM_M) and
                not (pipe and os.path.exists(os.path.dirname(pipe))))
    check(r.claims[CLAIM_M].error == "" and K.wait_until(unprepared, T),
          "MPS claim unprepared: its daemon stopped, its spec and directories gone", r)
    return pipe


def quit_daemons(state, control):
    """Safety net: a claim daemon still up (a failed check above) is told to quit."""
    root = os.path.join(state, "mps")
    for d in os.listdir(root) if os.path.isdir(root) else []:
        pipe = os.path.join(root, d, "pipe")
        if mps.daemon_pid(pipe) and mps.alive(mps.daemon_pid(pipe)):
            note("stopping a leftover MPS daemon in " + pipe)
            subprocess.run([control], input="quit\n", text=True, timeout=T,
                           env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe),
                           capture_output=True)


def main():
    facts = facts_nvml() if DRY else facts_nvidia_smi()
    if not facts:
        say("SKIP", "no GPU listed")
        sys.exit(77)
    for i, g in enumerate(facts):
        note("GPU %d: %s" % (i, json.dumps(g)))
    tmp = k.TMP
    if DRY:
        state = os.environ["ACCEL_EMU_STATE"]
        node = types.SimpleNamespace(sysfs=state + ".d/sysfs", dev=state + ".d/dev",
                                     env=dict(os.environ))
        control = os.path.join(BUILD, "src/emu/nvidia-cuda-mps-control")
        control = control if os.path.exists(control) else None
    else:
        env = dict(os.environ)
        for v in ("ACCEL_EMU_STATE", "ACCEL_NVML_LIBRARY"):
            env.pop(v, None)
        node = types.SimpleNamespace(sysfs="/sys", dev="/dev", env=env)
        control = shutil.which("nvidia-cuda-mps-control")
    demo = os.path.join(BUILD, "demo/cuda-demo")
    knode = k.Node(os.path.join(tmp, "n"), lib=os.path.join(BUILD, "src/vcuda/libvcuda.so"))
    api = fakeapi.ApiServer(SRC, tmp, token="dra-gpu-token", node=NODE, timeout=T)
    kc = os.path.join(tmp, "kubeconfig")
    api.kubeconfig(kc)
    drv = Driver(node, knode, kc, tmp)
    try:
        drv.start()
        if registration_and_slice(drv, knode, api, facts, "vgpu"):
            slice_attributes(api, facts)
            vgpu_claim(api, knode, demo, facts)
        rc = drv.agent.stop(signal.SIGTERM)
        check(rc == 0, "acceld exits 0 on SIGTERM", drv.agent.log_text()[-3000:])
        if not control:
            say("SKIP", "MPS claim: no nvidia-cuda-mps-control (on PATH; in the dry run, "
                "the build's)")
        else:
            drv = Driver(node, knode, kc, tmp, control)
            drv.n = 1  # its own log dir
            drv.start()
            if registration_and_slice(drv, knode, api, facts, "mps"):
                mps_claim(api, knode, demo, control, facts)
            rc = drv.agent.stop(signal.SIGTERM)
            check(rc == 0, "acceld (gpu-0 an MPS share) exits 0 on SIGTERM",
                  drv.agent.log_text()[-3000:])
        validity(api)
    except Exception:  # noqa: BLE001 - a crash is a failed check, with the logs
        import traceback
        check(False, "no exception", traceback.format_exc())
    finally:
        if drv.agent and drv.agent.alive():
            drv.agent.stop(signal.SIGKILL)
        if control:
            quit_daemons(knode.dirs["state"], control)
        api.stop()
        if failed and drv.agent:
            note("acceld log:\n" + drv.agent.log_text()[-6000:])
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
