"""kubelet.py — plays the kubelet's side of the device plugin API v1beta1 with
python3-grpcio (Debian), an independent gRPC implementation, for acceld's
interop tests and benchmarks.

- gen_pb2(): compiles proto/deviceplugin/v1beta1/api.proto with protoc into a
  temp dir at test time (nothing generated is committed) and imports it.
- FakeKubelet: the Registration service on <dir>/kubelet.sock. Like the real
  kubelet it calls GetDevicePluginOptions on the plugin's endpoint *before* it
  answers Register, and records every registration.
- Plugin: a client for a plugin socket (options, ListAndWatch in a thread,
  GetPreferredAllocation, Allocate, raw calls for bad input).
- Tap: TAP output (`ok N - name`), exit status, skip (77).

Method stubs are built with grpc's generic API (unary_unary / unary_stream and
method handlers), so only protoc's --python_out is needed."""
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc

SKIP = 77


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=None):
        self.n += 1
        if cond:
            print(f"ok {self.n} - {name}", flush=True)
        else:
            self.failed += 1
            print(f"not ok {self.n} - {name}", flush=True)
            if diag:
                for line in str(diag).splitlines():
                    print(f"# {line}", flush=True)
        return cond

    def skip(self, name, reason):
        self.n += 1
        print(f"ok {self.n} - {name} # SKIP {reason}", flush=True)

    def diag(self, msg):
        for line in str(msg).splitlines():
            print(f"# {line}", flush=True)

    def done(self):
        print(f"1..{self.n}", flush=True)
        sys.exit(1 if self.failed or self.n == 0 else 0)


def skip_all(reason):
    print(f"1..0 # SKIP {reason}", flush=True)
    sys.exit(SKIP)


def wait_until(cond, timeout_s, step_s=0.005):
    """Polls cond until true or timeout_s passes; returns its last value.
    The bound is a failure limit, never a "wait long enough"."""
    end = time.monotonic() + timeout_s
    while True:
        v = cond()
        if v or time.monotonic() >= end:
            return v
        time.sleep(step_s)


def gen_pb2(source_root, outdir):
    proto_root = os.path.join(source_root, "proto")
    os.makedirs(outdir, exist_ok=True)
    subprocess.run(["protoc", f"--python_out={outdir}", f"-I{proto_root}",
                    os.path.join(proto_root, "deviceplugin/v1beta1/api.proto")],
                   check=True)
    sys.path.insert(0, outdir)
    from deviceplugin.v1beta1 import api_pb2  # noqa: E402
    return api_pb2


def unix_target(path):
    return "unix://" + os.path.abspath(path)


class FakeKubelet:
    """Registration server at <plugin_dir>/kubelet.sock."""

    def __init__(self, pb, plugin_dir, answer_ok=True):
        self.pb = pb
        self.dir = plugin_dir
        self.registrations = []
        self.options_seen = []
        self.lock = threading.Lock()
        self.answer_ok = answer_ok
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                self._register,
                request_deserializer=pb.RegisterRequest.FromString,
                response_serializer=pb.Empty.SerializeToString),
        })
        self.server.add_generic_rpc_handlers((handler,))
        self.sock = os.path.join(plugin_dir, "kubelet.sock")
        self.server.add_insecure_port(unix_target(self.sock))

    def start(self):
        self.server.start()
        return self

    def stop(self):
        self.server.stop(0).wait()

    def _register(self, req, ctx):
        # The real kubelet dials the endpoint and asks for the options before
        # it answers; a plugin that blocks its loop on Register deadlocks here.
        endpoint = os.path.join(self.dir, req.endpoint)
        try:
            with grpc.insecure_channel(unix_target(endpoint)) as ch:
                opts = Plugin.options_on(ch, self.pb, timeout=5)
            with self.lock:
                self.options_seen.append(opts)
        except grpc.RpcError as e:
            ctx.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      f"cannot reach plugin at {endpoint}: {e.code()}")
        with self.lock:
            self.registrations.append(req)
        if not self.answer_ok:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "refused by the test")
        return self.pb.Empty()

    def count(self):
        with self.lock:
            return len(self.registrations)

    def last(self):
        with self.lock:
            return self.registrations[-1] if self.registrations else None


class Watch:
    """A ListAndWatch stream read by a thread into a queue of
    {id: (health, numa)} dicts."""

    def __init__(self, channel, pb):
        self.pb = pb
        self.updates = []
        self.cond = threading.Condition()
        self.error = None
        call = channel.unary_stream(
            "/v1beta1.DevicePlugin/ListAndWatch",
            request_serializer=pb.Empty.SerializeToString,
            response_deserializer=pb.ListAndWatchResponse.FromString)
        self.stream = call(pb.Empty())
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for msg in self.stream:
                devs = {}
                for d in msg.devices:
                    numa = [n.ID for n in d.topology.nodes] if d.HasField("topology") else None
                    devs[d.ID] = (d.health, numa)
                with self.cond:
                    self.updates.append(devs)
                    self.cond.notify_all()
        except grpc.RpcError as e:
            with self.cond:
                self.error = e
                self.cond.notify_all()

    def latest(self):
        with self.cond:
            return self.updates[-1] if self.updates else None

    def wait_for(self, pred, timeout_s):
        """Waits until the latest update satisfies pred; returns it or None."""
        end = time.monotonic() + timeout_s
        with self.cond:
            while True:
                if self.updates and pred(self.updates[-1]):
                    return self.updates[-1]
                left = end - time.monotonic()
                if left <= 0 or self.error is not None:
                    return None
                self.cond.wait(left)

    def cancel(self):
        self.stream.cancel()
        self.thread.join(5)


class Plugin:
    def __init__(self, pb, sock, own_connection=False):
        """own_connection: a connection of its own. Without it, channels to the
        same target in this process share gRPC's global subchannel pool, so a
        "new" client may send on an older channel's connection, one acceld has
        just closed (the RPC then fails with UNAVAILABLE / Broken pipe)."""
        self.pb = pb
        self.sock = sock
        opts = [("grpc.use_local_subchannel_pool", 1)] if own_connection else None
        self.channel = grpc.insecure_channel(unix_target(sock), options=opts)

    def close(self):
        self.channel.close()

    @staticmethod
    def options_on(channel, pb, timeout=5):
        call = channel.unary_unary(
            "/v1beta1.DevicePlugin/GetDevicePluginOptions",
            request_serializer=pb.Empty.SerializeToString,
            response_deserializer=pb.DevicePluginOptions.FromString)
        return call(pb.Empty(), timeout=timeout)

    def options(self):
        return Plugin.options_on(self.channel, self.pb)

    def watch(self):
        return Watch(self.channel, self.pb)

    def prefer(self, available, must=(), size=1, timeout=5):
        pb = self.pb
        req = pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=list(available), must_include_deviceIDs=list(must),
                allocation_size=size)])
        call = self.channel.unary_unary(
            "/v1beta1.DevicePlugin/GetPreferredAllocation",
            request_serializer=pb.PreferredAllocationRequest.SerializeToString,
            response_deserializer=pb.PreferredAllocationResponse.FromString)
        return call(req, timeout=timeout)

    def allocate(self, *containers, timeout=5):
        pb = self.pb
        req = pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=list(ids)) for ids in containers])
        call = self.channel.unary_unary(
            "/v1beta1.DevicePlugin/Allocate",
            request_serializer=pb.AllocateRequest.SerializeToString,
            response_deserializer=pb.AllocateResponse.FromString)
        return call(req, timeout=timeout)

    def raw(self, method, payload, timeout=5):
        """Sends payload bytes as-is; returns the response bytes."""
        call = self.channel.unary_unary(method, request_serializer=None,
                                        response_deserializer=None)
        return call(payload, timeout=timeout)


def build_paths():
    build = os.environ.get("ACCEL_BUILD_ROOT")
    src = os.environ.get("ACCEL_SOURCE_ROOT")
    if not build or not src:
        here = os.path.dirname(os.path.abspath(__file__))
        src = src or os.path.dirname(os.path.dirname(here))
        build = build or os.path.join(src, "build")
    return build, src


class Node:
    """An emulated node (accel-emu init) in a temp dir."""

    can_inject = True

    def __init__(self, build, tmp, gpus=8, numa="0,0,0,0,1,1,1,1", nvlink="pairs", init_args=()):
        self.build = build
        self.numa = [int(n) for n in numa.split(",")] if numa else None
        self.emu = os.path.join(build, "src/emu/accel-emu")
        self.nvml = os.path.join(build, "src/emu/libnvidia-ml.so.1")
        self.state = os.path.join(tmp, "emu.state")
        self.env = dict(os.environ, ACCEL_EMU_STATE=self.state, ACCEL_NVML_LIBRARY=self.nvml)
        args = [self.emu, "init", "--gpus", str(gpus), "--nvlink", nvlink]
        if numa:
            args += ["--numa", numa]
        args += list(init_args)
        subprocess.run(args, env=self.env, check=True, stdout=subprocess.DEVNULL)
        self.sysfs = self.state + ".d/sysfs"
        self.dev = self.state + ".d/dev"

    def cmd(self, *args):
        return subprocess.run([self.emu, *map(str, args)], env=self.env, check=True,
                              stdout=subprocess.DEVNULL)

    @staticmethod
    def available(build):
        return all(os.path.exists(os.path.join(build, f))
                   for f in ("src/emu/accel-emu", "src/emu/libnvidia-ml.so.1"))


class FakeNode:
    """Fallback when the emulator is not built: src/gpu's test NVML
    (tests/inventory/fake-nvml.c: NVLink pairs, NUMA node = index / 2) and
    hand-made /dev and sysfs dirs. No fault injection."""

    can_inject = False

    def __init__(self, build, tmp, gpus=8):
        self.nvml = os.path.join(build, "tests/inventory/libfake-nvml.so")
        self.env = dict(os.environ, FAKE_NVML_GPUS=str(gpus), FAKE_NVML_NVLINK="pairs",
                        ACCEL_NVML_LIBRARY=self.nvml)
        self.sysfs = os.path.join(tmp, "sysfs")
        self.dev = os.path.join(tmp, "dev")
        os.makedirs(self.sysfs)
        os.makedirs(self.dev)
        for n in ["nvidiactl", "nvidia-uvm"] + [f"nvidia{i}" for i in range(gpus)]:
            open(os.path.join(self.dev, n), "w").close()
        self.numa = [i // 2 for i in range(gpus)]

    @staticmethod
    def available(build):
        return os.path.exists(os.path.join(build, "tests/inventory/libfake-nvml.so"))


def make_node(build, tmp):
    """The emulated node when the emulator is built, else the fake NVML."""
    if Node.available(build):
        return Node(build, tmp)
    return FakeNode(build, tmp)


class Acceld:
    """acceld as a child process with its log in a file."""

    def __init__(self, build, node, plugin_dir, tmp, extra=(), config=None):
        self.exe = os.path.join(build, "src/acceld/acceld")
        os.makedirs(tmp, exist_ok=True)
        self.log_path = os.path.join(tmp, "acceld.log")
        self.plugin_dir = plugin_dir
        # libvcuda as built: acceld refuses vGPU mode when vcudaLibrary names no library
        args = [self.exe, "--device-plugin-dir", plugin_dir, "--sysfs-root", node.sysfs,
                "--dev-root", node.dev, "--state-dir", os.path.join(tmp, "state"),
                "--cdi-dir", os.path.join(tmp, "cdi"),
                "--vcuda-library", os.path.join(build, "src/vcuda/libvcuda.so"), *extra]
        if config:
            args = [args[0], "--config", config, *args[1:]]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, env=node.env, stdout=self.log, stderr=self.log)
        self.sock = os.path.join(plugin_dir, "accel-nvidia.com-gpu.sock")

    def log_text(self):
        with open(self.log_path, "r", errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=15, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def stop_agent(tap, kubelet, agent, tail=5000):
    """Stops acceld and the fake kubelet; acceld's log's end in the TAP output when a case
    failed."""
    if agent.alive():
        agent.stop()
    kubelet.stop()
    if tap.failed:
        tap.diag("acceld log:\n" + agent.log_text()[-tail:])


def run_acceld_once(build, node, d, extra, env=None, config=None, timeout=15):
    """acceld --no-register with a plugin and state dir under d, until it serves a socket or
    exits, then SIGTERM: (exit status, socket names, its output)."""
    pdir = os.path.join(d, "dp-once")
    os.makedirs(pdir, exist_ok=True)
    args = [os.path.join(build, "src/acceld/acceld"), "--no-register", "--device-plugin-dir",
            pdir, "--sysfs-root", node.sysfs, "--dev-root", node.dev, "--state-dir",
            os.path.join(d, "state-once"), *extra]
    if config:
        args[1:1] = ["--config", config]
    p = subprocess.Popen(args, env=env or node.env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    wait_until(lambda: any(f.endswith(".sock") for f in os.listdir(pdir)) or
               p.poll() is not None, timeout)
    socks = sorted(f for f in os.listdir(pdir) if f.endswith(".sock"))
    if p.poll() is None:
        p.send_signal(15)
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, socks, out


def require_tools(build):
    """Skips the whole test when something it needs is not here."""
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        skip_all("python3-protobuf not installed")
    if not os.path.exists(os.path.join(build, "src/acceld/acceld")):
        skip_all("acceld not built")
    if not Node.available(build) and not FakeNode.available(build):
        skip_all("neither the emulator nor the fake NVML is built")
    if subprocess.run(["which", "protoc"], stdout=subprocess.DEVNULL).returncode != 0:
        skip_all("protoc not installed")


def tmpdir():
    """The test's temp dir. First, as root, the test moves to a private mount namespace
    (mountns.private): the tmpfs region dirs acceld mounts go with the test."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import mountns
    mountns.private()
    # unix socket paths must stay under 108 bytes: keep the temp dir short
    return tempfile.mkdtemp(prefix="acceld-", dir="/tmp")
