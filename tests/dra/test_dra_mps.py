#!/usr/bin/python3
"""`acceld --mode dra` with an MPS-shared GPU, end to end on an emulated 2-GPU node (the
fake API server, the python3-grpcio kubelet of test_kubelet.py, the emulator's
nvidia-cuda-mps-control as --mps-control):

- the slice publishes gpu-0 as an MPS share (sharing=mps, consumable memory and cores,
  allowMultipleAllocations) and gpu-1 exclusive; every slice written is valid
  resource.k8s.io/v1 per kubernetes-models (when installed);
- a claim of 30 % + 4 GiB of gpu-0 (DeviceClass gpu-mps.accel.dev) prepared through the
  kubelet API: its CDI spec mounts the claim's own daemon's pipe directory and its own
  /dev/shm (a tmpfs, the daemon's /dev/shm too) and sets CUDA_MPS_PIPE_DIRECTORY /
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 / CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M; the daemon
  runs with exactly those caps as its defaults;
- the container run in a private mount namespace with the spec's mounts and env: an
  unmodified CUDA program (tests/emu/emu-mps-client) is refused memory past 4 GiB, also when
  it raises its own limit, and tests/emu/spin runs on 30 % of the SMs, also when it raises its
  own percentage;
- a second claim (70 % + 8 GiB) of the same GPU gets its own daemon with its own caps;
- prepared again: the same answer, no second daemon; a fatal error hits a client of the
  claim's daemon (XID 43, ignored by NVML health): its server's FAULT taints gpu-0 and
  reports it UNHEALTHY on the health stream until the client exits; acceld restarted: the
  daemon of the prepared claim is started again from the checkpoint, with its caps, and the claim is
  unprepared after the restart: spec, daemon and its directories gone; a daemon that never
  comes up: the claim's entry is an error after dra.claimWait, nothing stays;
- SIGHUP (docs/dra.md, "Reloading the config"): dra.gpuSharing changed to make gpu-1 shared
  republishes the slice (generation + 1); a change of a GPU with a prepared claim is refused
  with a log line; dra.taintEffect None then means an XID leaves no taint.

Every wait is bounded. Exits 77 without grpcio/protoc, openssl or the emulator; the container
part is skipped when not root or in the sanitizer build."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import drasetup as D  # noqa: E402  (exits 77 itself without grpcio/protoc)
from drasetup import K, T, k  # noqa: E402
import test_dra_mode as m  # noqa: E402
import mountns  # noqa: E402  (tests/lib, on the path drasetup set)

GiB = 1 << 30
NODE = m.NODE
CLAIM_A = "0f3c6a8e-1111-4a1b-9c2d-aaaaaaaaaaaa"
CLAIM_B = "0f3c6a8e-2222-4a1b-9c2d-bbbbbbbbbbbb"


def claim_obj(name, uid, mem, cores, share):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "team", "name": name, "uid": uid,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu-mps.accel.dev",
                "capacity": {"requests": {"memory": mem, "cores": cores}}}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": k.DRIVER, "pool": NODE, "device": "gpu-0",
                 "shareID": share, "consumedCapacity": {"memory": mem, "cores": cores}}]}}}}


class Driver(m.Driver):
    def __init__(self, build, emu, knode, kc, tmp, control, config):
        super().__init__(build, emu, knode, kc, tmp)
        self.args = ["--mode", "dra", "--node-name", NODE, "--kubeconfig", kc,
                     "--plugin-registry-dir", knode.dirs["registry"],
                     "--dra-plugin-dir", knode.dirs["plugin"],
                     "--vcuda-library", knode.lib, "--mps-control", control,
                     "--config", config, "--dra-claim-wait", "5s", "--recover-after", "1s"]


def mps_ctl(emu, control, pipe, cmd):
    """One command through the front end; the reply's text."""
    p = subprocess.run([control], input=cmd + "\n", capture_output=True, text=True, timeout=T,
                       env=dict(emu.env, CUDA_MPS_PIPE_DIRECTORY=pipe))
    return p.stdout.strip()


def daemon_pid(pipe):
    try:
        with open(os.path.join(pipe, "nvidia-cuda-mps-control.pid")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def alive(pid):
    """Running (a zombie left for a parent that does not reap counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def spec_of(knode, uid):
    path = os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % uid)
    return json.load(open(path)) if os.path.exists(path) else {}


def edits_of(spec):
    e = spec.get("containerEdits", {})
    env = dict(x.split("=", 1) for x in e.get("env", []))
    mounts = {x["containerPath"]: x for x in e.get("mounts", [])}
    return env, mounts


def container(build, emu, spec, argv, extra_env=None):
    """argv run with the spec's mounts and env in a private mount namespace."""
    env_, mounts = edits_of(spec)
    env = dict(emu.env, LD_LIBRARY_PATH=os.path.join(build, "src/emu"))
    env.pop("LD_PRELOAD", None)
    env.update(env_)
    env.update(extra_env or {})
    mnts = [(x["hostPath"], x["containerPath"], "ro" in x["options"]) for x in mounts.values()]
    return mountns.run(mnts, argv, env, timeout=T)


def container_checks(tap, build, emu, spec, cap_mib, pct):
    name = "the claim's container: memory refused past %d MiB, %d %% of the SMs" % (cap_mib, pct)
    if os.environ.get("ASAN_OPTIONS"):
        return tap.skip(name, "sanitizer build")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return tap.skip(name, "needs root and unshare")
    client = os.path.join(build, "tests/emu/emu-mps-client")
    spin = os.path.join(build, "tests/emu/spin")
    sizes = [cap_mib - 1024, 2048, 512]  # fits, crosses the cap, fits again
    oom = "error 2"  # CUDA_ERROR_OUT_OF_MEMORY

    def alloc(extra=None):
        p = container(build, emu, spec, [client, "0"] + [str(x) for x in sizes], extra)
        return p.stdout.split("\n")[:len(sizes)], p.stdout + p.stderr
    got, out = alloc()
    tap.ok(got == ["ok", oom, "ok"], "an unmodified CUDA program in the claim's container: "
           "allocations past %d MiB refused (the daemon's default limit)" % cap_mib, out)
    got, out = alloc({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=65536M"})
    tap.ok(got == ["ok", oom, "ok"], "raising CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in the container "
           "gets it no more", out)
    pat = re.compile(r"^ok 2 - \d+ cycles x \d+ wave\(s\) \(\d+ blocks, (\d+) SMs\)", re.M)
    outside = subprocess.run([spin, "20", "--blocks", "1"], text=True, capture_output=True,
                             timeout=T, env=dict(emu.env,
                                                 LD_LIBRARY_PATH=os.path.join(build, "src/emu")))
    mo = pat.search(outside.stdout)
    if not tap.ok(mo is not None, "spin outside MPS reports the GPU's SMs", outside.stdout):
        return
    sms = int(mo.group(1))
    want = max(1, sms * pct // 100)
    for extra, what in ((None, "runs on"), ({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"},
                                            "raising CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to 100: "
                                            "still")):
        p = container(build, emu, spec, [spin, "20", "--blocks", "1"], extra)
        mi = pat.search(p.stdout)
        tap.ok(mi is not None and int(mi.group(1)) == want,
               "spin in the claim's container %s %d of %d SMs (%d %%)" % (what, want, sms, pct),
               p.stdout + p.stderr)


def run(tap, build, emu, api, drv, knode, uuids, control, config):
    agent = drv.start()
    ok = K.wait_until(lambda: os.path.exists(knode.reg_sock()), T)
    if not tap.ok(ok, "acceld --mode dra (dra.sharing mps) serves the registration socket",
                  agent.log_text()):
        return
    knode.register()
    ok = K.wait_until(lambda: len(m.our_slices(api)) == 1, T)
    devs = m.our_slices(api)[0]["spec"]["devices"] if ok else []
    d0 = devs[0] if devs else {}
    tap.ok(ok and [d["name"] for d in devs] == ["gpu-0", "gpu-1"] and
           d0["attributes"]["sharing"] == {"string": "mps"} and
           d0.get("allowMultipleAllocations") is True and
           d0["capacity"]["cores"]["value"] == "100" and
           "requestPolicy" in d0["capacity"]["memory"] and
           devs[1]["attributes"]["sharing"] == {"string": "exclusive"},
           "the slice: gpu-0 an MPS share with consumable memory and cores, gpu-1 exclusive",
           devs)

    # ---- a claim of 30 % + 4 GiB
    api.call("POST", "/_fake/claim", claim_obj("mps-a", CLAIM_A, "4Gi", "30",
                                               "7d1c3c43-4d42-4a79-b0d2-5b9d0c0e0e01"))
    r = knode.prepare([("team", "mps-a", CLAIM_A)])
    e = r.claims[CLAIM_A]
    tap.ok(e.error == "" and [(d.device_name, list(d.cdi_device_ids)) for d in e.devices] ==
           [("gpu-0", ["gpu.accel.dev/claim=%s-gpu-0" % CLAIM_A])],
           "an MPS claim (30 % + 4 GiB) is prepared through the kubelet API", r)
    spec = spec_of(knode, CLAIM_A)
    env, mounts = edits_of(spec)
    pipe = mounts.get("/run/accel-mps/pipe", {}).get("hostPath", "")
    shm = mounts.get("/dev/shm", {}).get("hostPath", "")
    tap.ok(env.get("CUDA_MPS_PIPE_DIRECTORY") == "/run/accel-mps/pipe" and
           "CUDA_MPS_LOG_DIRECTORY" not in env and "/run/accel-mps/log" not in mounts and
           env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "30" and
           env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == "0=4096M" and
           env.get("NVIDIA_VISIBLE_DEVICES") == uuids[0] and "VCUDA_CONFIG" not in env and
           pipe.endswith("/mps/mps-dra-%s/pipe" % CLAIM_A) and
           shm.endswith("/mps/mps-dra-%s/shm" % CLAIM_A) and
           "rw" in mounts["/run/accel-mps/pipe"]["options"] and
           "/etc/ld.so.preload" not in mounts,
           "its CDI spec: the claim's daemon's pipe dir, the daemon's own /dev/shm (never the "
           "host's: issue 22, F7), no log dir, and the caps in the CUDA_MPS_* env", spec)
    pid_a = daemon_pid(pipe)
    pct = mps_ctl(emu, control, pipe, "get_default_active_thread_percentage")
    lim = mps_ctl(emu, control, pipe, "get_default_device_pinned_mem_limit 0")
    tap.ok(pid_a > 0 and alive(pid_a) and pct.splitlines()[-1:] == ["30.0"] and
           lim.splitlines()[-1:] == ["4G"],
           "the claim's own control daemon runs with defaults 30 % and 4G (the caps)",
           (pid_a, pct, lim))
    acctl = m.accelctl(build, knode, "dra")
    g0 = [ln for ln in acctl.stdout.splitlines() if ln.startswith("gpu-0 ")]
    tap.ok(acctl.returncode == 0 and g0 and " mps " in g0[0] and
           "%s: MPS share: 4096 MiB, 30%% of the cores" % CLAIM_A in acctl.stdout,
           "accelctl dra: gpu-0 an MPS share, the claim's caps", acctl.stdout + acctl.stderr)
    container_checks(tap, build, emu, spec, 4096, 30)

    # ---- a second claim of the same GPU: its own daemon
    api.call("POST", "/_fake/claim", claim_obj("mps-b", CLAIM_B, "8Gi", "70",
                                               "7d1c3c43-4d42-4a79-b0d2-5b9d0c0e0e02"))
    rb = knode.prepare([("team", "mps-b", CLAIM_B)])
    env_b, mounts_b = edits_of(spec_of(knode, CLAIM_B))
    pipe_b = mounts_b.get("/run/accel-mps/pipe", {}).get("hostPath", "")
    pct_b = mps_ctl(emu, control, pipe_b, "get_default_active_thread_percentage") if pipe_b else ""
    tap.ok(rb.claims[CLAIM_B].error == "" and pipe_b and pipe_b != pipe and
           env_b.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "70" and
           env_b.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == "0=8192M" and
           pct_b.splitlines()[-1:] == ["70.0"],
           "a second claim (70 % + 8 GiB) of gpu-0 gets its own daemon with its caps",
           (rb, env_b, pct_b))
    t0 = time.monotonic()
    check_unprep = knode.unprepare([("team", "mps-b", CLAIM_B)]).claims[CLAIM_B].error == ""
    tap.ok(time.monotonic() - t0 < 1.0, "unprepare answers at once (the daemon quits on the "
           "loop, awaited without blocking it)", time.monotonic() - t0)
    # the daemon's exit is awaited on the loop: its directories go once it is gone
    K.wait_until(lambda: not os.path.exists(os.path.dirname(pipe_b)), T)
    tap.ok(check_unprep and not os.path.exists(os.path.dirname(pipe_b)) and
           not os.path.exists(os.path.join(knode.dirs["cdi"], "accel-dra-%s.json" % CLAIM_B)),
           "unprepared: its spec, its daemon and its directories are gone", pipe_b)

    again = knode.prepare([("team", "mps-a", CLAIM_A)])
    tap.ok(again == r and daemon_pid(pipe) == pid_a,
           "prepared again: the same answer, the same daemon", again)

    # ---- a hung daemon (SIGSTOPped) holds up neither its unprepare nor the next call
    rb2 = knode.prepare([("team", "mps-b", CLAIM_B)])
    _, mounts_b2 = edits_of(spec_of(knode, CLAIM_B))
    pipe_b2 = mounts_b2.get("/run/accel-mps/pipe", {}).get("hostPath", "")
    pid_b = daemon_pid(pipe_b2) if pipe_b2 else 0
    if tap.ok(rb2.claims[CLAIM_B].error == "" and pid_b > 0,
              "claim b prepared again: its own daemon", rb2):
        os.kill(pid_b, signal.SIGSTOP)
        t0 = time.monotonic()
        u2 = knode.unprepare([("team", "mps-b", CLAIM_B)])
        t_unprep = time.monotonic() - t0
        t0 = time.monotonic()
        again2 = knode.prepare([("team", "mps-a", CLAIM_A)])
        t_next = time.monotonic() - t0
        tap.ok(u2.claims[CLAIM_B].error == "" and t_unprep < 1.0 and again2 == r and
               t_next < 1.0, "a hung daemon: its unprepare and the next prepare answer at once",
               (t_unprep, t_next))
        gone = K.wait_until(lambda: not alive(pid_b) and
                            not os.path.exists(os.path.dirname(pipe_b2)), T)
        tap.ok(gone, "and the hung daemon is killed after the stop's bound (2 s), its "
               "directories removed", agent.log_text()[-1500:])

    fault_checks(tap, build, emu, api, knode, agent, spec, pipe)

    # ---- SIGHUP (docs/dra.md, "Reloading the config")
    if not os.environ.get("DRA_MPS_SKIP_HUP"):
        sighup_checks(tap, api, drv, knode, emu, config)

    # ---- restart: the daemon comes back from the checkpoint
    check_rc = agent.stop(signal.SIGTERM)
    tap.ok(check_rc == 0 and K.wait_until(lambda: not alive(pid_a), T), "acceld exits 0 and stops the claim's daemon",
           agent.log_text()[-3000:])
    agent = drv.start()
    ok = K.wait_until(lambda: daemon_pid(pipe) > 0 and alive(daemon_pid(pipe)) and
                      mps_ctl(emu, control, pipe, "get_default_active_thread_percentage")
                      .splitlines()[-1:] == ["30.0"], T)
    tap.ok(ok, "restarted: the prepared claim's daemon runs again with its caps (checkpoint)",
           agent.log_text()[-3000:])
    K.wait_until(lambda: os.path.exists(knode.reg_sock()), T)
    third = knode.prepare([("team", "mps-a", CLAIM_A)])
    tap.ok(third == r, "and the claim prepared again gets the same answer", third)
    pid = daemon_pid(pipe)
    u = knode.unprepare([("team", "mps-a", CLAIM_A)])
    gone = K.wait_until(lambda: not alive(pid) and not os.path.exists(os.path.dirname(pipe)),
                        T)
    tap.ok(u.claims[CLAIM_A].error == "" and gone and
           not os.path.exists(os.path.dirname(pipe)) and not spec_of(knode, CLAIM_A),
           "unprepared after the restart: spec, daemon and directories gone", u)
    written = [json.loads(x["body"]) for x in api.call("GET", "/_fake/log")
               if x["method"] in ("POST", "PUT") and "resourceslices" in x["path"]]
    verdicts = m.validate(written)
    if verdicts is None:
        tap.skip("every slice written is valid resource.k8s.io/v1", "kubernetes-models missing")
    else:
        tap.ok(written and verdicts == ["ok %d" % i for i in range(len(written))],
               "every ResourceSlice acceld wrote (%d) is valid resource.k8s.io/v1 "
               "(kubernetes-models)" % len(written), "\n".join(verdicts))
    rc = agent.stop(signal.SIGTERM)
    tap.ok(rc == 0, "acceld exits 0", agent.log_text()[-3000:])

    # ---- a daemon that never comes up: the claim's entry is an error, nothing stays
    drv.args[drv.args.index(control)] = shutil.which("false") or "/bin/false"
    agent = drv.start()
    K.wait_until(lambda: os.path.exists(knode.reg_sock()), T)
    bad = "0f3c6a8e-3333-4a1b-9c2d-cccccccccccc"
    api.call("POST", "/_fake/claim", claim_obj("mps-c", bad, "1Gi", "10",
                                               "7d1c3c43-4d42-4a79-b0d2-5b9d0c0e0e03"))
    rc_ = knode.prepare([("team", "mps-c", bad)])
    err = rc_.claims[bad].error
    state = knode.dirs["state"]
    ck = json.load(open(os.path.join(state, "dra-checkpoint.json")))
    K.wait_until(lambda: not os.path.exists(os.path.join(state, "mps", "mps-dra-" + bad)), T)
    tap.ok("MPS control daemon is not up after 5.0 s" in err and not rc_.claims[bad].devices and
           not spec_of(knode, bad) and not any(c["uid"] == bad for c in ck["claims"]) and
           not os.path.exists(os.path.join(state, "mps", "mps-dra-" + bad)),
           "a daemon that never comes up (--mps-control false): after dra.claimWait the "
           "claim's entry says so, and no spec, checkpoint entry or directory stays", (err, ck))
    rc = agent.stop(signal.SIGTERM)
    tap.ok(rc == 0, "and acceld exits 0", agent.log_text()[-3000:])


def fault_checks(tap, build, emu, api, knode, agent, spec, pipe):
    """A fatal error hits a client of the claim's daemon (XID 43 on gpu-0 while emu-hold runs
    under the claim's env: the emulated server goes to FAULT, MPS guide "Error
    Containment"); XID 43 is in health.ignoredXids, so only the daemon's FAULT, read by the
    supervisor's probe, can mark gpu-0: tainted NoSchedule and UNHEALTHY on the health stream
    until the hit client exits and the server is ACTIVE again."""
    env_, _ = edits_of(spec)
    env = dict(emu.env, LD_LIBRARY_PATH=os.path.join(build, "src/emu"), **env_)
    env.pop("LD_PRELOAD", None)
    env.update(CUDA_MPS_PIPE_DIRECTORY=pipe)
    hold = subprocess.Popen([os.path.join(build, "tests/emu/emu-hold"), "0", "64"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hw = m.HealthWatch(os.path.join(knode.dirs["plugin"], "dra.sock"))
    taint = [{"key": "gpu.accel.dev/unhealthy", "value": "unhealthy", "effect": "NoSchedule"}]
    try:
        line = hold.stdout.readline()
        if not tap.ok(line == "ready %d\n" % hold.pid, "a client of the claim's daemon runs",
                      line):
            return
        ok = K.wait_until(lambda: (hw.last() or {}).get("gpu-0") == "HEALTHY", T)
        emu.cmd("xid", 0, 43)
        ok = ok and K.wait_until(lambda: (m.device(api, "gpu-0") or {}).get("taints") == taint,
                                 T)
        ok = ok and K.wait_until(lambda: (hw.last() or {}).get("gpu-0") == "UNHEALTHY", T)
        tap.ok(ok and "an MPS claim's control daemon is down" in agent.log_text() and
               "fault state" in agent.log_text(),
               "XID 43 (ignored by NVML health) puts the claim's MPS server in FAULT: gpu-0 "
               "tainted NoSchedule and UNHEALTHY on the health stream",
               json.dumps([m.device(api, "gpu-0"), hw.msgs[-2:]]))
        hold.stdin.close()
        hold.wait(timeout=T)
        ok = K.wait_until(lambda: "taints" not in (m.device(api, "gpu-0") or {"taints": 1}), T)
        ok = ok and K.wait_until(lambda: (hw.last() or {}).get("gpu-0") == "HEALTHY", T)
        tap.ok(ok, "the hit client exits: the server is ACTIVE, the taint is gone and gpu-0 "
               "HEALTHY again", json.dumps([m.device(api, "gpu-0"), hw.msgs[-2:]]))
    finally:
        hw.close()
        if hold.poll() is None:
            hold.kill()
            hold.wait()
        hold.stdout.close()


def write_config(path, gpu_sharing, taint="NoSchedule", extra=""):
    with open(path, "w") as f:
        f.write("%sdra:\n  sharing: mps\n  gpuSharing: \"%s\"\n  taintEffect: %s\n"
                % (extra, gpu_sharing, taint))


def sighup_checks(tap, api, drv, knode, emu, config):
    agent = drv.agent

    def gen():
        s = m.our_slices(api)
        return s[0]["spec"]["pool"]["generation"] if len(s) == 1 else -1
    g0 = gen()
    with open(config, "w") as f:
        f.write("dra:\n  taintEffect: Sometimes\n")
    agent.proc.send_signal(signal.SIGHUP)
    ok = K.wait_until(lambda: "config reload refused" in agent.log_text(), T)
    tap.ok(ok and "Sometimes" in agent.log_text() and gen() == g0,
           "SIGHUP with a broken config: refused with a log line, the slice untouched",
           agent.log_text()[-1000:])
    write_config(config, "1=shared")
    agent.proc.send_signal(signal.SIGHUP)
    ok = K.wait_until(lambda: m.device(api, "gpu-1") and
                      m.device(api, "gpu-1")["attributes"]["sharing"] == {"string": "vgpu"}, T)
    tap.ok(ok and gen() == g0 + 1, "SIGHUP: dra.gpuSharing 1=shared republishes gpu-1 as a vGPU "
           "share (generation + 1)", (g0, gen(), m.device(api, "gpu-1")))
    # gpu-0 holds a prepared MPS claim: turning it exclusive is refused
    write_config(config, "0=exclusive,1=shared")
    agent.proc.send_signal(signal.SIGHUP)
    ok = K.wait_until(lambda: "gpu-0" in agent.log_text() and
                      "has prepared claims" in agent.log_text(), T)
    tap.ok(ok and m.device(api, "gpu-0")["attributes"]["sharing"] == {"string": "mps"},
           "SIGHUP: changing the sharing of gpu-0, which has a prepared claim, is refused with "
           "a log line; gpu-0 stays an MPS share", agent.log_text()[-2000:])
    # taint effect None: an XID on gpu-1 leaves no taint; a key read at start only is refused
    write_config(config, "0=mps,1=shared", taint="None",
                 extra="nvmlLibrary: /nonexistent/libnvidia-ml.so.1\n")
    agent.proc.send_signal(signal.SIGHUP)
    pat = re.compile(r"nvmlLibrary: .* refused: DRA mode reads it at start only")
    ok = K.wait_until(lambda: pat.search(agent.log_text()) and
                      re.search(r'dra.taintEffect: "NoSchedule" -> "None"', agent.log_text()), T)
    log = agent.log_text()
    tap.ok(ok,
           "SIGHUP: a key DRA mode reads at start only (nvmlLibrary) is refused with a log line",
           log[-1500:])
    emu.cmd("xid", 1, 62)
    ok = K.wait_until(lambda: "XID 62" in agent.log_text() or
                      "not tainted" in agent.log_text(), T)
    tap.ok(ok and "not tainted (taint effect None)" in agent.log_text() and
           "taints" not in (m.device(api, "gpu-1") or {}),
           "SIGHUP: dra.taintEffect None: an unhealthy gpu-1 gets no taint",
           (m.device(api, "gpu-1"), agent.log_text()[-1500:]))
    # NoExecute for a plain XID now
    write_config(config, "0=mps,1=shared", taint="NoExecute")
    emu.cmd("xid", 1, 62)
    agent.proc.send_signal(signal.SIGHUP)
    def tainted_noexecute():
        # every slice written, not the current one: recovery (1 s) may have removed it already
        for x in api.call("GET", "/_fake/log"):
            if x["method"] in ("POST", "PUT") and "resourceslices" in x["path"]:
                for d in json.loads(x["body"])["spec"]["devices"]:
                    if d["name"] == "gpu-1" and [t.get("effect") for t in
                                                 d.get("taints", [])] == ["NoExecute"]:
                        return True
        return False
    ok = K.wait_until(tainted_noexecute, T)
    tap.ok(ok, "SIGHUP: dra.taintEffect NoExecute: gpu-1, still unhealthy, is tainted NoExecute",
           (m.device(api, "gpu-1"), agent.log_text()[-1500:]))


def main():
    build = os.path.abspath(k.BUILD)
    D.require_dra(build)
    control = os.path.join(build, "src/emu/nvidia-cuda-mps-control")
    if not os.path.exists(control):
        K.skip_all("the emulator's nvidia-cuda-mps-control is not built")
    tap = K.Tap()
    tmp = k.TMP
    emu, uuids, knode, api, kc = D.start_node(build, tmp, NODE)
    config = os.path.join(tmp, "acceld.yaml")
    write_config(config, "1=exclusive")
    drv = Driver(build, emu, knode, kc, tmp, control, config)
    D.guarded(tap, lambda: run(tap, build, emu, api, drv, knode, uuids, control, config),
              api, tmp, drv)


if __name__ == "__main__":
    main()
