#!/usr/bin/python3
"""test-acceld-kubelet.py — acceld against python3-grpcio playing the kubelet,
on an emulated 8-GPU node (NUMA 0,0,0,0,1,1,1,1; NVLink pairs 0-1 2-3 4-5 6-7).

Registration (options asked before Register is answered), ListAndWatch,
GetPreferredAllocation, Allocate; bad input (unknown IDs, malformed protobuf,
unknown method, a client vanishing mid-stream, garbage on the socket);
100 concurrent ListAndWatch streams; XID injection (fatal and ignored), a lost
GPU, recovery after health.recoverAfter; kubelet restart (dir wiped, the dir
itself removed); the plugin dir missing at start; a second acceld on the same
socket; a stale socket left by a killed acceld; SIGHUP with a broken and a
good config; SIGTERM removes the socket. Every wait is bounded; nothing asserts timing."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet as K  # noqa: E402

import grpc  # noqa: E402

RECOVER = "1500ms"
T = 15  # seconds: failure bound for every wait (sanitizer builds are slow)


def main():
    build, src = K.build_paths()
    K.require_tools(build)
    tap = K.Tap()
    tmp = K.tmpdir()
    pb = K.gen_pb2(src, os.path.join(tmp, "pb"))
    node = K.make_node(build, tmp)
    if not node.can_inject:
        tap.diag("emulator not built: fake NVML, fault-injection cases skipped")
    pdir = os.path.join(tmp, "dp")
    os.makedirs(pdir)
    cfg = os.path.join(tmp, "acceld.yaml")
    with open(cfg, "w") as f:
        f.write(f"logLevel: debug\nhealth:\n  recoverAfter: {RECOVER}\n")

    lost_at_start(tap, build, pb, node, tmp)
    cdi_strategy(tap, build, pb, node, tmp)
    kubelet_late(tap, build, pb, node, tmp)
    daemon_cases(tap, build, pb, node, tmp)
    kubelet = K.FakeKubelet(pb, pdir).start()
    agent = K.Acceld(build, node, pdir, tmp, config=cfg)
    try:
        run(tap, pb, node, pdir, tmp, cfg, kubelet, agent)
    finally:
        if agent.alive():
            agent.stop(signal.SIGKILL)
        kubelet.stop()
        if tap.failed:
            tap.diag("acceld log:\n" + agent.log_text()[-6000:])
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


def run(tap, pb, node, pdir, tmp, cfg, kubelet, agent):
    # ---- registration
    registered = K.wait_until(lambda: kubelet.count() >= 1, T)
    if not tap.ok(registered, "acceld registers with the kubelet"):
        return
    reg = kubelet.last()
    tap.ok(reg.version == "v1beta1", "Register version is v1beta1", reg.version)
    tap.ok(reg.endpoint == "accel-nvidia.com-gpu.sock", "Register endpoint is the bare socket name",
           reg.endpoint)
    tap.ok(reg.resource_name == "nvidia.com/gpu", "Register resource name", reg.resource_name)
    tap.ok(reg.options.get_preferred_allocation_available,
           "Register options announce GetPreferredAllocation")
    tap.ok(len(kubelet.options_seen) >= 1 and
           kubelet.options_seen[0].get_preferred_allocation_available,
           "plugin answered GetDevicePluginOptions while its Register was pending")

    plugin = K.Plugin(pb, agent.sock)
    watch = plugin.watch()
    first = watch.wait_for(lambda u: len(u) == 8, T)
    if not tap.ok(first is not None, "ListAndWatch sends 8 devices on connect", watch.latest()):
        return
    ids = sorted(first, key=lambda i: order(i, first))
    tap.ok(all(first[i][0] == "Healthy" for i in ids), "all devices Healthy at start")
    tap.ok([first[i][1] for i in ids] == [[n] for n in node.numa],
           "NUMA node of each device is in its topology", [first[i][1] for i in ids])

    # ---- GetPreferredAllocation
    r = plugin.prefer(ids, size=2)
    got = list(r.container_responses[0].deviceIDs)
    tap.ok(sorted(got) in (sorted([ids[a], ids[a + 1]]) for a in (0, 2, 4, 6)),
           "preferred pair of 2 is an NVLink pair", got)
    r = plugin.prefer(ids, must=[ids[5]], size=2)
    tap.ok(sorted(r.container_responses[0].deviceIDs) == sorted([ids[4], ids[5]]),
           "must_include is honoured and gets its NVLink partner",
           list(r.container_responses[0].deviceIDs))
    r = plugin.prefer([ids[0], ids[2], ids[4], ids[5], ids[7]], size=3)
    got = sorted(r.container_responses[0].deviceIDs)
    tap.ok(got == sorted([ids[4], ids[5], ids[7]]), "3 GPUs stay on one NUMA node with a pair",
           got)
    again = sorted(plugin.prefer([ids[7], ids[5], ids[4], ids[2], ids[0]], size=3)
                   .container_responses[0].deviceIDs)
    tap.ok(again == got, "preferred allocation is deterministic", again)
    r = plugin.prefer(ids[:3] + ["GPU-not-here"], size=4)
    tap.ok(len(r.container_responses[0].deviceIDs) == 4,
           "an unknown (lost) ID still gets an unaligned answer")

    # ---- Allocate
    r = plugin.allocate([ids[2], ids[3]])
    c = r.container_responses[0]
    tap.ok(c.envs.get("NVIDIA_VISIBLE_DEVICES") == f"{ids[2]},{ids[3]}",
           "Allocate sets NVIDIA_VISIBLE_DEVICES", dict(c.envs))
    paths = [(d.host_path, d.container_path, d.permissions) for d in c.devices]
    want = [("/dev/nvidia2", "/dev/nvidia2", "rw"), ("/dev/nvidia3", "/dev/nvidia3", "rw")]
    want += [(f"/dev/{n}", f"/dev/{n}", "rw") for n in ("nvidiactl", "nvidia-uvm",
                                                          "nvidia-uvm-tools")
             if os.path.exists(os.path.join(node.dev, n))]
    tap.ok(paths == want, "Allocate DeviceSpecs: GPU nodes and control nodes", paths)

    # ---- accelctl plugin: our own client reads the same answers
    accelctl_checks(tap, node, agent, ids, first)

    # ---- bad input
    try:
        plugin.allocate([ids[0], "GPU-bogus-1"], ["GPU-bogus-2"])
        tap.ok(False, "unknown device IDs are refused")
    except grpc.RpcError as e:
        tap.ok(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "GPU-bogus-1" in e.details()
               and "GPU-bogus-2" in e.details(),
               "unknown device IDs: INVALID_ARGUMENT naming them", f"{e.code()} {e.details()}")
    try:
        plugin.raw("/v1beta1.DevicePlugin/Allocate", b"\x0a\xff\xff\xff\x0f\x01")
        tap.ok(False, "malformed protobuf is refused")
    except grpc.RpcError as e:
        tap.ok(e.code() == grpc.StatusCode.INVALID_ARGUMENT, "malformed protobuf: INVALID_ARGUMENT",
               e.code())
    try:
        plugin.raw("/v1beta1.DevicePlugin/Frobnicate", b"")
        tap.ok(False, "unknown method is refused")
    except grpc.RpcError as e:
        tap.ok(e.code() == grpc.StatusCode.UNIMPLEMENTED, "unknown method: UNIMPLEMENTED", e.code())
    try:
        plugin.raw("/v1beta1.DevicePlugin/Allocate", b"\x0a" * (5 << 20), timeout=30)
        tap.ok(False, "a request over 4 MiB is refused")
    except grpc.RpcError as e:
        tap.ok(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
               "a request over 4 MiB: RESOURCE_EXHAUSTED", f"{e.code()} {e.details()}")
    # garbage on the socket, and a client that vanishes mid-stream
    s = socket.socket(socket.AF_UNIX)
    s.connect(agent.sock)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64)
    s.close()
    gone = K.Plugin(pb, agent.sock)
    w2 = gone.watch()
    w2.wait_for(lambda u: len(u) == 8, T)
    gone.close()
    r = plugin.allocate([ids[0]])
    tap.ok(r.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == ids[0],
           "still serving after garbage and a vanished stream")
    tap.ok(watch.latest() == first, "device list unchanged by the bad requests")

    # ---- 100 concurrent ListAndWatch streams
    chans = [K.Plugin(pb, agent.sock) for _ in range(10)]
    many = [chans[i % 10].watch() for i in range(100)]
    ok = all(w.wait_for(lambda u: len(u) == 8, T) for w in many)
    tap.ok(ok, "100 concurrent ListAndWatch streams each get the list")

    if node.can_inject:
        health(tap, plugin, watch, many, chans, node, ids)
    else:
        for name in ("fatal XID reaches all streams", "Allocate of an unhealthy device",
                     "ignored XID", "double-bit ECC", "recovery", "lost GPU", "restored GPU"):
            tap.skip(name, "emulator not built")
        for w in many:
            w.cancel()
        for ch in chans:
            ch.close()
    watch.cancel()
    plugin.close()
    sli_file(tap, node, tmp, ids)
    restart_and_signals(tap, pb, pdir, cfg, kubelet, agent)


def sli_file(tap, node, tmp, ids):
    """acceld's SLI file (src/nodestate/acceld-stats.h) counts what the cases above did."""
    build, _ = K.build_paths()
    with_cli = os.path.exists(os.path.join(build, "src/cli/accelctl"))
    # Allocates answered: [2,3], accelctl's [0], [0] after the garbage; refused: the bogus
    # IDs, accelctl's unknown ID, the unhealthy GPU 3 (the malformed and oversized
    # requests never reach Allocate)
    want_ok = 2 + with_cli
    want_err = 1 + with_cli + node.can_inject
    path = os.path.join(tmp, "state", "acceld-stats.json")
    # GPU 3 (XID 79), 5 (ECC) and 6 (lost) went Unhealthy and came back
    moved = {ids[g]: (1, 1) for g in (3, 5, 6)} if node.can_inject else {}

    def read():
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def done():
        d = read()
        if not d or not d["resources"]:
            return None
        a = d["resources"][0]["allocate"]
        g = {x["uuid"]: (x["toUnhealthy"], x["toHealthy"]) for x in d["gpus"]}
        if (a["ok"], a["error"]) == (want_ok, want_err) and \
                all(g.get(u) == v for u, v in moved.items()):
            return d
        return None

    d = K.wait_until(done, T, 0.05)
    tap.ok(d is not None, "SLI file: Allocate results and health transitions counted",
           json.dumps(read())[:3000])
    if d is None:
        return
    r = d["resources"][0]
    tap.ok(r["name"] == "nvidia.com/gpu" and r["registrations"]["ok"] >= 1,
           "SLI file: the registration counted", r)
    n = r["allocate"]["ok"] + r["allocate"]["error"]
    b = r["allocate"]["buckets"]
    tap.ok(len(b) == len(d["allocateBuckets"]) and b == sorted(b) and b[-1] <= n and
           b[-1] >= 1 and r["allocate"]["sum"] > 0,
           "SLI file: the latency histogram holds the calls", r["allocate"])
    tap.ok(d["deviceInit"] == {"ok": 8, "failed": 0} and len(d["gpus"]) == 8 and
           sorted(x["index"] for x in d["gpus"]) == list(range(8)),
           "SLI file: 8 GPUs initialised", d["deviceInit"])
    others = [x for x in d["gpus"] if x["uuid"] not in moved]
    tap.ok(all(x["toUnhealthy"] == 0 and x["toHealthy"] == 0 and x["mpsRestarts"] == 0
               for x in others), "SLI file: the other GPUs never changed")
    # version 2: every GPU back to healthy (no reason left), no MPS in this mode
    tap.ok(d["version"] == 2 and all(x["healthy"] is True and x["reason"] == "" and
                                     x["mps"] == "none" for x in d["gpus"]),
           "SLI file: version 2, every GPU healthy again, no MPS", d["gpus"])
    tap.ok(abs(d["writeTime"] - time.time()) < 60 and
           d["startTime"] <= d["writeTime"], "SLI file: start and write times")
    exporter_reads(tap, build, node, os.path.join(tmp, "state"), d)


def exporter_reads(tap, build, node, state, d):
    """accel-exporter --state-dir serves what this acceld wrote."""
    exe = os.path.join(build, "src/exporter/accel-exporter")
    if not os.path.exists(exe):
        tap.skip("accel-exporter serves acceld's SLIs", "accel-exporter not built")
        return
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = subprocess.Popen([exe, "--listen", f"127.0.0.1:{port}", "--interval", "100ms",
                          "--pod-resources-socket", "", "--state-dir", state], env=node.env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    r = d["resources"][0]
    want = {
        'accel_agent_up': 1,
        'accel_agent_allocate_total{resource="nvidia.com/gpu",result="ok"}': r["allocate"]["ok"],
        'accel_agent_allocate_total{resource="nvidia.com/gpu",result="error"}':
            r["allocate"]["error"],
        'accel_agent_allocate_duration_seconds_count{resource="nvidia.com/gpu"}':
            r["allocate"]["ok"] + r["allocate"]["error"],
        'accel_agent_device_init_total{result="ok"}': 8,
    }
    for g in d["gpus"]:
        want['accel_agent_health_transitions_total{gpu="%d",uuid="%s",to="unhealthy"}'
             % (g["index"], g["uuid"])] = g["toUnhealthy"]
        want['accel_gpu_health{gpu="%d",uuid="%s",reason=""}' % (g["index"], g["uuid"])] = 1
        want['accel_gpu_recoveries_total{gpu="%d",uuid="%s"}' % (g["index"], g["uuid"])] = \
            g["toHealthy"]
    seen = {}

    def served():
        import urllib.request
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            return False
        for line in text.splitlines():
            if line.startswith(("accel_agent_", "accel_gpu_health", "accel_gpu_recoveries")):
                k, v = line.rsplit(" ", 1)
                seen[k] = float(v)
        return all(seen.get(k) == v for k, v in want.items())
    try:
        ok = K.wait_until(served, T, 0.1)
        tap.ok(ok, "accel-exporter --state-dir serves this acceld's counts",
               {k: (seen.get(k), v) for k, v in want.items() if seen.get(k) != v})
    finally:
        p.terminate()
        p.wait(timeout=T)
        p.stdout.close()


def health(tap, plugin, watch, many, chans, node, ids):
    # ---- health: fatal XID reaches every stream
    node.cmd("xid", 3, 79)
    unhealthy3 = lambda u: u.get(ids[3], ("",))[0] == "Unhealthy"  # noqa: E731
    tap.ok(watch.wait_for(unhealthy3, T) is not None, "fatal XID: GPU 3 Unhealthy on the stream")
    tap.ok(all(w.wait_for(unhealthy3, T) for w in many),
           "fatal XID reaches all 100 other streams")
    for w in many:
        w.cancel()
    for ch in chans:
        ch.close()
    try:
        plugin.allocate([ids[3]])
        tap.ok(False, "unhealthy device is refused")
    except grpc.RpcError as e:
        tap.ok(e.code() == grpc.StatusCode.INVALID_ARGUMENT and ids[3] in e.details(),
               "Allocate of an unhealthy device: INVALID_ARGUMENT naming it", e.details())

    # ---- ignored XID: no change (fenced by a fatal one on another GPU after it)
    node.cmd("xid", 4, 43)
    node.cmd("ecc", 5, "double")
    u = watch.wait_for(lambda u: u.get(ids[5], ("",))[0] == "Unhealthy", T)
    tap.ok(u is not None, "double-bit ECC: GPU 5 Unhealthy")
    tap.ok(u is not None and u[ids[4]][0] == "Healthy", "ignored XID 43 left GPU 4 Healthy")

    # ---- recovery after the quiet period
    tap.ok(watch.wait_for(lambda u: u[ids[3]][0] == "Healthy" and u[ids[5]][0] == "Healthy", T)
           is not None, f"GPUs recover after recoverAfter={RECOVER}")

    # ---- lost GPU
    node.cmd("lose", 6)
    tap.ok(watch.wait_for(lambda u: u[ids[6]][0] == "Unhealthy", T) is not None,
           "lost GPU: Unhealthy")
    node.cmd("restore", 6)
    tap.ok(watch.wait_for(lambda u: u[ids[6]][0] == "Healthy", T) is not None,
           "restored GPU recovers")


def restart_and_signals(tap, pb, pdir, cfg, kubelet, agent):
    # ---- kubelet restart: sockets wiped, kubelet.sock recreated
    before = kubelet.count()
    kubelet.stop()
    for name in os.listdir(pdir):
        os.unlink(os.path.join(pdir, name))
    k2 = K.FakeKubelet(pb, pdir).start()
    try:
        tap.ok(K.wait_until(lambda: k2.count() >= 1, T), "re-registers after a kubelet restart")
        tap.ok(os.path.exists(agent.sock), "socket served again after the wipe")
        # the whole dir removed and made again
        k2.stop()
        # renamed away first, so that nothing can be created in it while it goes
        os.rename(pdir, pdir + ".old")
        shutil.rmtree(pdir + ".old")
        os.makedirs(pdir)
        k3 = K.FakeKubelet(pb, pdir).start()
        try:
            tap.ok(K.wait_until(lambda: k3.count() >= 1, T),
                   "re-registers after the plugin dir was removed and recreated")
            p3 = K.Plugin(pb, agent.sock)
            tap.ok(p3.options().get_preferred_allocation_available, "serving in the new dir")
            p3.close()
        finally:
            k3.stop()
    finally:
        k2.stop()
    del before

    # ---- SIGHUP: a broken config is refused, a good one applied
    with open(cfg, "w") as f:
        f.write("logLevel: debug\nhealth:\n  recoverAfter: [oops\n")
    agent.proc.send_signal(signal.SIGHUP)
    tap.ok(K.wait_until(lambda: "config reload refused" in agent.log_text(), T),
           "SIGHUP with a broken config: refused, logged")
    tap.ok(agent.alive() and os.path.exists(agent.sock), "still running on the old config")
    with open(cfg, "w") as f:
        f.write("logLevel: info\nhealth:\n  recoverAfter: 2s\n")
    agent.proc.send_signal(signal.SIGHUP)
    tap.ok(K.wait_until(lambda: "health.recoverAfter: \"1500ms\" -> \"2s\"" in agent.log_text(),
                        T), "SIGHUP with a good config logs what changed")

    # ---- SIGTERM: clean exit, socket removed
    rc = agent.stop(signal.SIGTERM)
    tap.ok(rc == 0, "SIGTERM: exit status 0", rc)
    tap.ok(not os.path.exists(agent.sock), "SIGTERM: socket removed")


def lost_at_start(tap, build, pb, node, tmp):
    """A GPU lost before acceld starts: left out (no UUID) or listed
    Unhealthy; the others are served Healthy."""
    d = os.path.join(tmp, "dp-lost")
    os.makedirs(d)
    if node.can_inject:
        node.cmd("lose", 2)
        extra_env = {}
    else:
        extra_env = {"FAKE_NVML_LOST": "2"}
    saved = node.env
    node.env = dict(saved, **extra_env)
    a = K.Acceld(build, node, d, os.path.join(tmp, "lost"), extra=["--no-register"])
    node.env = saved
    try:
        ok = K.wait_until(lambda: os.path.exists(a.sock) or not a.alive(), T)
        if not tap.ok(ok and a.alive(), "acceld starts with a GPU lost", a.log_text()):
            return
        p = K.Plugin(pb, a.sock)
        w = p.watch()
        u = w.wait_for(lambda u: len(u) >= 7, T) or {}
        healthy = [i for i, (h, _) in u.items() if h == "Healthy"]
        tap.ok(len(healthy) == 7 and len(u) in (7, 8),
               "a GPU lost at start is left out or Unhealthy, the other 7 Healthy", u)
        w.cancel()
        p.close()
    finally:
        a.stop()
        if node.can_inject:
            node.cmd("restore", 2)


def cdi_strategy(tap, build, pb, node, tmp):
    """deviceListStrategy cdi: Allocate names CDI devices; the spec on disk
    lists every advertised GPU."""
    d = os.path.join(tmp, "dp-cdi")
    os.makedirs(d)
    t = os.path.join(tmp, "cdi-run")
    a = K.Acceld(build, node, d, t, extra=["--no-register", "--device-list-strategy", "cdi",
                                           "--cdi-vendor", "example.com"])
    try:
        if not tap.ok(K.wait_until(lambda: os.path.exists(a.sock) or not a.alive(), T)
                      and a.alive(), "acceld starts with the cdi strategy", a.log_text()):
            return
        p = K.Plugin(pb, a.sock)
        w = p.watch()
        u = w.wait_for(lambda u: len(u) == 8, T) or {}
        w.cancel()
        ids = list(u)
        r = p.allocate(ids[:2]).container_responses[0]
        p.close()
        names = [c.name for c in r.cdi_devices]
        tap.ok(names == [f"example.com/gpu={i}" for i in ids[:2]] and not r.envs,
               "cdi strategy: Allocate returns CDI device names, no env", names)
        spec_path = os.path.join(t, "cdi", "accel-example.com-gpu.json")
        try:
            with open(spec_path) as f:
                spec = json.load(f)
        except (OSError, ValueError) as e:
            spec = {"error": str(e)}
        tap.ok(spec.get("kind") == "example.com/gpu" and
               sorted(dev["name"] for dev in spec.get("devices", [])) == sorted(ids),
               "cdi strategy: the CDI spec lists every GPU", spec)
    finally:
        a.stop()


def kubelet_late(tap, build, pb, node, tmp):
    """No kubelet at start: retries with backoff, one log line for the whole
    outage, registers once the kubelet appears."""
    d = os.path.join(tmp, "dp-late")
    os.makedirs(d)
    a = K.Acceld(build, node, d, os.path.join(tmp, "late"), extra=["--log-level", "debug"])
    k = None
    try:
        tap.ok(K.wait_until(lambda: "(attempt 4)" in a.log_text() or not a.alive(), T)
               and a.alive(), "kubelet absent: acceld keeps retrying", a.log_text())
        n = a.log_text().count("kubelet not reachable")
        tap.ok(n == 1, "kubelet absent: logged once, not once per retry", n)
        k = K.FakeKubelet(pb, d).start()
        tap.ok(K.wait_until(lambda: k.count() >= 1, T), "registers when the kubelet appears")
    finally:
        if k:
            k.stop()
        a.stop()


def answers(pb, sock):
    """True when a device plugin answers GetDevicePluginOptions on sock."""
    p = K.Plugin(pb, sock)
    try:
        return p.options().get_preferred_allocation_available
    except grpc.RpcError:
        return False
    finally:
        p.close()


def daemon_cases(tap, build, pb, node, tmp):
    """The plugin dir missing at start (waited for), a second acceld on the
    same socket (refused, the first keeps serving), a socket file left by a
    killed acceld (replaced), inotify's queue overflowing (checked again)."""
    d = os.path.join(tmp, "dp-missing")
    a = K.Acceld(build, node, d, os.path.join(tmp, "missing"))
    k = None
    try:
        tap.ok(K.wait_until(lambda: "does not exist" in a.log_text() or not a.alive(), T)
               and a.alive(), "plugin dir missing at start: acceld waits for it", a.log_text())
        os.makedirs(d)
        k = K.FakeKubelet(pb, d).start()
        tap.ok(K.wait_until(lambda: k.count() >= 1, T),
               "plugin dir made later: serves and registers", a.log_text())
        k.stop()
        k = None
        b = K.Acceld(build, node, d, os.path.join(tmp, "second"),
                     extra=["--no-register", "--device-list-strategy", "cdi"])
        try:
            rc = b.proc.wait(T)
        except subprocess.TimeoutExpired:
            rc = None
        b.stop()
        tap.ok(rc == 1 and "another process is serving" in b.log_text(),
               "a second acceld on the same socket exits 1 saying why", b.log_text())
        cdi = os.path.join(tmp, "second", "cdi")
        tap.ok(not os.path.exists(cdi) or not os.listdir(cdi),
               "the refused acceld wrote no CDI spec")
        tap.ok(not os.path.exists(os.path.join(tmp, "second", "state", "acceld-stats.json")),
               "the refused acceld wrote no SLI file (the first one's is left alone)")
        tap.ok(answers(pb, a.sock), "the first acceld still serves its socket")
        a.stop(signal.SIGKILL)
        tap.ok(os.path.exists(a.sock), "a killed acceld leaves its socket file")
        c = K.Acceld(build, node, d, os.path.join(tmp, "third"), extra=["--no-register"])
        try:
            tap.ok(K.wait_until(lambda: not c.alive() or answers(pb, c.sock), T) and c.alive(),
                   "the next acceld replaces the stale socket and serves", c.log_text())
            # inotify's queue overflows (more events than it holds while acceld
            # is stopped) and the deletion of our socket is among the lost ones
            with open("/proc/sys/fs/inotify/max_queued_events") as f:
                qmax = int(f.read())
            if qmax <= 100000:
                c.proc.send_signal(signal.SIGSTOP)
                for i in range(qmax + 100):
                    open(os.path.join(d, f"f{i}"), "w").close()
                os.unlink(c.sock)
                c.proc.send_signal(signal.SIGCONT)
                tap.ok(K.wait_until(lambda: answers(pb, c.sock), T),
                       "inotify overflow: the socket is served again", c.log_text()[-2000:])
            else:
                tap.skip("inotify overflow: the socket is served again",
                         f"max_queued_events is {qmax}")
        finally:
            c.stop()
    finally:
        if k:
            k.stop()
        a.stop()


def accelctl_checks(tap, node, agent, ids, first):
    build, _ = K.build_paths()
    exe = os.path.join(build, "src/cli/accelctl")
    if not os.path.exists(exe):
        tap.skip("accelctl plugin devices/prefer/allocate", "accelctl not built")
        return

    def run(*args):
        return subprocess.run([exe, "plugin", *args, "--socket", agent.sock],
                              capture_output=True, text=True, timeout=30)

    r = run("devices", "--json")
    try:
        devs = json.loads(r.stdout)
    except ValueError:
        devs = None
    tap.ok(r.returncode == 0 and devs is not None and
           {d["id"]: (d["health"], d["numa_nodes"]) for d in devs} == first,
           "accelctl plugin devices --json matches the python client's list", r.stdout + r.stderr)
    r = run("prefer", "--size", "2", "--must", ids[1])
    tap.ok(r.returncode == 0 and r.stdout.split() == [ids[0], ids[1]],
           "accelctl plugin prefer", r.stdout + r.stderr)
    r = run("allocate", ids[0], "--json")
    try:
        c = json.loads(r.stdout)["container_responses"][0]
    except (ValueError, KeyError, IndexError):
        c = {}
    tap.ok(r.returncode == 0 and c.get("envs", {}).get("NVIDIA_VISIBLE_DEVICES") == ids[0],
           "accelctl plugin allocate --json", r.stdout + r.stderr)
    r = run("allocate", "GPU-unknown")
    tap.ok(r.returncode == 1 and "INVALID_ARGUMENT" in r.stderr and "GPU-unknown" in r.stderr,
           "accelctl plugin allocate of an unknown ID: exit 1 with the plugin's message",
           r.stderr)


def order(dev_id, devs):
    """Devices are listed in inventory order; keep that order."""
    return list(devs).index(dev_id)


if __name__ == "__main__":
    main()
