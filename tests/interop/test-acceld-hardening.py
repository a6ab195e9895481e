#!/usr/bin/python3
"""test-acceld-hardening.py — acceld against hostile or careless clients and a
newcomer's first commands, on an emulated 8-GPU node, with python3-grpcio as
the client (issue 8, items 5-7 and the README path).

- Started under umask 000 with --no-register and a plugin dir that does not
  exist: the dir is made (0750), the socket is 0600, and `accelctl plugin
  devices --wait` run right after the start gets the list.
- GetPreferredAllocation and Allocate with 10,000 IDs: INVALID_ARGUMENT at once,
  naming the node's device count; a request over 1 MiB: RESOURCE_EXHAUSTED;
  Allocate naming a device twice: refused; a request the node's size whose IDs
  are all unknown still gets an answer.
- The connection cap (64) filled with idle connections (preface and SETTINGS,
  then nothing): a new client is still served; a bare preface is closed after
  the handshake timeout.
- An injected XID 79: `accelctl gpus --plugin-socket` shows acceld's Unhealthy
  next to NVML's "healthy".
- `--recover-after 0.0000001ms` (rounds to 0 = never) is refused, naming the flag.
- SIGTERM ends acceld and removes its socket.

Every wait is bounded; nothing asserts timing."""
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubelet as K  # noqa: E402

import grpc  # noqa: E402

T = 15  # seconds: failure bound for every wait (sanitizer builds are slow)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def main():
    build, src = K.build_paths()
    K.require_tools(build)
    tap = K.Tap()
    tmp = K.tmpdir()
    pb = K.gen_pb2(src, os.path.join(tmp, "pb"))
    node = K.make_node(build, tmp)
    pdir = os.path.join(tmp, "new", "dp")  # neither exists yet
    old = os.umask(0)
    try:
        agent = K.Acceld(build, node, pdir, tmp,
                         extra=("--no-register", "--handshake-timeout", "300ms",
                                "--idle-timeout", "60s"))
    finally:
        os.umask(old)
    try:
        run(tap, build, pb, node, pdir, agent)
    finally:
        if agent.alive():
            agent.stop(signal.SIGKILL)
        if tap.failed:
            tap.diag("acceld log:\n" + agent.log_text()[-6000:])
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()


def accelctl(build, *args, env=None):
    exe = os.path.join(build, "src/cli/accelctl")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, env=env)


def run(tap, build, pb, node, pdir, agent):
    # ---- a duration that rounds to 0 (= never recover) is refused, naming the flag
    r = subprocess.run([os.path.join(build, "src/acceld/acceld"), "--recover-after",
                        "0.0000001ms", "--print-config"], capture_output=True, text=True,
                       timeout=60)
    tap.ok(r.returncode == 2 and "flag --recover-after: health.recoverAfter: \"0.0000001ms\" is "
           "below 1ns" in r.stderr, "--recover-after 0.0000001ms: exit 2, says why",
           r.stderr)
    # ---- --print-config is a config file acceld reads back: YAML, each key and section once
    acceld = os.path.join(build, "src/acceld/acceld")
    r = subprocess.run([acceld, "--print-config"], capture_output=True, text=True, timeout=60)
    keys, dups, section = set(), [], None
    for line in r.stdout.splitlines():
        name = line.split(":", 1)[0]
        section = name if not line.startswith(" ") and line.endswith(":") else \
            (section if line.startswith(" ") else None)
        full = "%s.%s" % (section, name.strip()) if line.startswith(" ") else name
        dups += [full] if full in keys else []
        keys.add(full)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(r.stdout)
        path = f.name
    again = subprocess.run([acceld, "--config", path, "--print-config"], capture_output=True,
                           text=True, timeout=60)
    tap.ok(r.returncode == 0 and not dups and "vgpu.reconcileInterval" in keys and
           "dra.mig" in keys and again.returncode == 0 and again.stdout == r.stdout,
           "--print-config names each key once, under one header a section, and reads back "
           "the same", (dups, again.stderr))
    os.unlink(path)
    # ---- the newcomer path: right after the start, with --wait
    r = accelctl(build, "plugin", "devices", "--json", "--socket", agent.sock, "--wait", f"{T}s")
    try:
        devs = json.loads(r.stdout)
    except ValueError:
        devs = []
    if not tap.ok(r.returncode == 0 and len(devs) == 8,
                  "accelctl plugin devices --wait, right after starting acceld: 8 devices",
                  r.stdout + r.stderr):
        return
    ids = [d["id"] for d in devs]
    mode = stat.S_IMODE(os.stat(pdir).st_mode)
    tap.ok(mode == 0o750, "a missing plugin dir is made, 0750 (noRegister)", oct(mode))
    st = os.stat(agent.sock)
    tap.ok(stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600,
           "the socket is 0600 under umask 000", oct(st.st_mode))

    plugin = K.Plugin(pb, agent.sock)
    many = [f"GPU-unknown-{i:05d}" for i in range(10000)]

    # ---- item 5: more IDs than devices, duplicates
    def refused(fn, want, name):
        try:
            fn()
            tap.ok(False, name, "answered OK")
        except grpc.RpcError as e:
            tap.ok(e.code() == grpc.StatusCode.INVALID_ARGUMENT and want in e.details(), name,
                   f"{e.code()} {e.details()}")

    refused(lambda: plugin.prefer(many, size=2, timeout=T),
            "names 10000 device IDs, more than the 8 devices",
            "GetPreferredAllocation with 10,000 IDs: INVALID_ARGUMENT")
    refused(lambda: plugin.prefer(ids, must=many, size=2, timeout=T),
            "must_include_deviceIDs names 10000",
            "GetPreferredAllocation with 10,000 must-include IDs: INVALID_ARGUMENT")
    refused(lambda: plugin.allocate(many, timeout=T), "names 10000 device IDs",
            "Allocate with 10,000 IDs: INVALID_ARGUMENT")
    refused(lambda: plugin.allocate([ids[0], ids[1]], [ids[1]], timeout=T),
            f"named more than once: {ids[1]}",
            "Allocate naming a device twice (two containers): INVALID_ARGUMENT")
    huge = [f"GPU-ffffffff-0000-4000-8000-{i:012d}" for i in range(50000)]  # ~2.1 MB
    try:
        plugin.allocate(huge, timeout=T)
        tap.ok(False, "a 2 MiB request is refused on its size", "answered OK")
    except grpc.RpcError as e:
        tap.ok(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED,
               "a 2 MiB request (over acceld's 1 MiB limit): RESOURCE_EXHAUSTED",
               f"{e.code()} {e.details()}")
    r = plugin.prefer(many[:8], size=8, timeout=T)
    tap.ok(sorted(r.container_responses[0].deviceIDs) == many[:8],
           "GetPreferredAllocation at the bound, every ID unknown: answered",
           list(r.container_responses[0].deviceIDs))
    r = plugin.allocate([ids[0], ids[1]], timeout=T)
    tap.ok(r.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == f"{ids[0]},{ids[1]}",
           "a good Allocate after the refusals")

    # ---- item 6: idle connections cannot lock out a client
    idle = []
    for _ in range(64):
        s = socket.socket(socket.AF_UNIX)
        s.connect(agent.sock)
        s.sendall(PREFACE + EMPTY_SETTINGS)
        idle.append(s)
    # A connection of its own: the shared one may be the idle connection
    # acceld just evicted to make room (closed, the client not yet told).
    fresh = K.Plugin(pb, agent.sock, own_connection=True)
    try:
        o = fresh.options()
        tap.ok(o.get_preferred_allocation_available,
               "64 idle connections (the cap): a new client is still served")
    except grpc.RpcError as e:
        tap.ok(False, "64 idle connections (the cap): a new client is still served",
               f"{e.code()} {e.details()}")
    fresh.close()
    for s in idle:
        s.close()
    bare = socket.socket(socket.AF_UNIX)
    bare.connect(agent.sock)
    bare.sendall(PREFACE)
    bare.settimeout(T)
    closed = False
    try:
        while bare.recv(4096):
            pass
        closed = True
    except ConnectionResetError:
        closed = True
    except socket.timeout:
        pass
    bare.close()
    tap.ok(closed, "a bare HTTP/2 preface is closed after the handshake timeout")

    # ---- the XID is visible from accelctl gpus
    if node.can_inject:
        watch = plugin.watch()
        node.cmd("xid", 1, 79)
        tap.ok(watch.wait_for(lambda u: u.get(ids[1], ("",))[0] == "Unhealthy", T) is not None,
               "XID 79 on GPU 1: Unhealthy on ListAndWatch")
        watch.cancel()
        r = accelctl(build, "gpus", "--json", "--sysfs-root", node.sysfs, "--plugin-socket",
                     agent.sock, env=node.env)
        try:
            gpus = {g["uuid"]: g for g in json.loads(r.stdout)}
        except ValueError:
            gpus = {}
        g1 = gpus.get(ids[1], {})
        tap.ok(r.returncode == 0 and g1.get("plugin_health") == "Unhealthy" and
               g1.get("health") == "healthy" and
               gpus.get(ids[0], {}).get("plugin_health") == "Healthy",
               "accelctl gpus --plugin-socket: acceld's Unhealthy next to NVML's healthy",
               r.stdout[-2000:] + r.stderr)
        r = accelctl(build, "gpus", "--sysfs-root", node.sysfs, env=node.env)
        tap.ok(r.returncode == 0 and "--plugin-socket" in r.stdout,
               "accelctl gpus without it says where acceld's verdict is", r.stdout[-600:])
    else:
        tap.skip("XID visible from accelctl gpus", "emulator not built")
    plugin.close()

    # ---- SIGTERM still works (nothing holds the loop)
    rc = agent.stop(signal.SIGTERM, timeout=T)
    tap.ok(rc == 0 and not os.path.exists(agent.sock), "SIGTERM: clean exit, socket removed",
           rc)


if __name__ == "__main__":
    main()
