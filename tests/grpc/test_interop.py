#!/usr/bin/python3
"""Interop tests for src/grpc with python3-grpcio as the independent peer.

Part 1: grpcio calls our server (grpc-test-server: the DevicePlugin API with
canned answers plus an echo test service). Part 2: our client
(grpc-test-client) calls a grpcio server. Prints TAP; exits 77 when grpcio
or protoc is missing. Runs under /usr/bin/python3 (Debian's packages)."""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

try:
    import grpc
except ImportError:
    print("1..0 # SKIP python3-grpcio is not installed")
    sys.exit(77)
if not shutil.which("protoc"):
    print("1..0 # SKIP protoc is not installed")
    sys.exit(77)

SRC = os.environ.get("ACCEL_SOURCE_ROOT", ".")
BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
SERVER = os.path.join(BUILD, "tests/grpc/grpc-test-server")
CLIENT = os.path.join(BUILD, "tests/grpc/grpc-test-client")
TMP = tempfile.mkdtemp(prefix="accel-grpc-")

subprocess.check_call(["protoc", "-I", os.path.join(SRC, "proto/deviceplugin/v1beta1"),
                       "--python_out", TMP, "api.proto"])
sys.path.insert(0, TMP)
import api_pb2 as dp  # noqa: E402

DP = "/v1beta1.DevicePlugin/"
ECHO = "/accel.test.Echo/"
MiB = 1 << 20

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def wait_until(cond, timeout=10.0):
    """Polls cond until true or timeout (a failure bound, not a wait)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


# --------------------------------------------------------------- our server

class OurServer:
    def __init__(self):
        self.sock = os.path.join(TMP, "server.sock")
        self.proc = subprocess.Popen([SERVER, self.sock], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if line.strip() != b"READY":
            raise RuntimeError("test server did not start: %r" % line)
        self.channel = grpc.insecure_channel("unix:" + self.sock)

    def unary(self, method, req, ser=None, de=None, timeout=10, channel=None, **kw):
        ch = channel or self.channel
        return ch.unary_unary(method, request_serializer=ser, response_deserializer=de)(
            req, timeout=timeout, **kw)

    def stream(self, method, req, ser=None, de=None, channel=None, **kw):
        ch = channel or self.channel
        return ch.unary_stream(method, request_serializer=ser, response_deserializer=de)(req, **kw)

    def stats(self):
        out = self.unary(ECHO + "Stats", b"").decode()
        return dict(kv.split("=") for kv in out.split())

    def stop(self):
        self.channel.close()
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def expect_code(fn, code):
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == code, "got %s (%s), want %s" % (e.code(), e.details(), code)
        return e.details() or ""
    raise AssertionError("call succeeded, want %s" % code)


@case
def grpcio_calls_get_device_plugin_options(s):
    o = s.unary(DP + "GetDevicePluginOptions", dp.Empty(), dp.Empty.SerializeToString,
                dp.DevicePluginOptions.FromString)
    assert o.get_preferred_allocation_available and not o.pre_start_required


@case
def grpcio_list_and_watch_first_update(s):
    it = s.stream(DP + "ListAndWatch", dp.Empty(), dp.Empty.SerializeToString,
                  dp.ListAndWatchResponse.FromString)
    first = next(it)
    got = [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in first.devices]
    assert got == [("GPU-0", "Healthy", [0]), ("GPU-1", "Healthy", [1])], got
    it.cancel()


@case
def grpcio_allocate_and_preferred(s):
    req = dp.AllocateRequest(container_requests=[
        dp.ContainerAllocateRequest(devices_ids=["GPU-1", "GPU-0"]),
        dp.ContainerAllocateRequest(devices_ids=["GPU-0"])])
    r = s.unary(DP + "Allocate", req, dp.AllocateRequest.SerializeToString,
                dp.AllocateResponse.FromString)
    envs = [dict(c.envs) for c in r.container_responses]
    assert envs == [{"NVIDIA_VISIBLE_DEVICES": "GPU-1,GPU-0"},
                    {"NVIDIA_VISIBLE_DEVICES": "GPU-0"}], envs
    preq = dp.PreferredAllocationRequest(container_requests=[
        dp.ContainerPreferredAllocationRequest(available_deviceIDs=["GPU-0", "GPU-1"],
                                               must_include_deviceIDs=["GPU-1"],
                                               allocation_size=1)])
    p = s.unary(DP + "GetPreferredAllocation", preq,
                dp.PreferredAllocationRequest.SerializeToString,
                dp.PreferredAllocationResponse.FromString)
    assert [list(c.deviceIDs) for c in p.container_responses] == [["GPU-1"]]


@case
def grpcio_allocate_unknown_id_is_invalid_argument(s):
    req = dp.AllocateRequest(container_requests=[
        dp.ContainerAllocateRequest(devices_ids=["GPU-0", "GPU-9"])])
    d = expect_code(lambda: s.unary(DP + "Allocate", req, dp.AllocateRequest.SerializeToString,
                                    dp.AllocateResponse.FromString),
                    grpc.StatusCode.INVALID_ARGUMENT)
    assert "GPU-9" in d, d


@case
def grpcio_malformed_protobuf_is_invalid_argument(s):
    # Field 1, length-delimited, length 5, but only 1 byte follows.
    d = expect_code(lambda: s.unary(DP + "Allocate", b"\x0a\x05\x0a"),
                    grpc.StatusCode.INVALID_ARGUMENT)
    assert "AllocateRequest" in d, d


@case
def grpcio_unknown_method_is_unimplemented(s):
    d = expect_code(lambda: s.unary("/v1beta1.DevicePlugin/NoSuchMethod", b""),
                    grpc.StatusCode.UNIMPLEMENTED)
    assert "NoSuchMethod" in d, d


@case
def grpcio_streaming_n_messages_then_status(s):
    it = s.stream(ECHO + "Count", b"25")
    msgs = [m.decode() for m in it]
    assert msgs == ["msg-%d" % i for i in range(25)], msgs
    assert it.code() == grpc.StatusCode.OK and it.details() == "counted 25", it.details()


@case
def grpcio_request_over_4mib_is_resource_exhausted(s):
    d = expect_code(lambda: s.unary(ECHO + "Unary", b"x" * (4 * MiB + 1)),
                    grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "larger than max" in d, d
    # Exactly 4 MiB is allowed both ways (kubelet's limit is inclusive).
    assert len(s.unary(ECHO + "Unary", b"y" * (4 * MiB))) == 4 * MiB


@case
def grpcio_reply_over_4mib_is_resource_exhausted(s):
    big = grpc.insecure_channel("unix:" + s.sock,
                                options=[("grpc.max_receive_message_length", 64 * MiB)])
    d = expect_code(lambda: s.unary(ECHO + "Big", str(4 * MiB + 1).encode(), channel=big),
                    grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "larger than max" in d, d
    big.close()


@case
def grpcio_compressed_request_is_unimplemented(s):
    d = expect_code(lambda: s.unary(ECHO + "Unary", b"z" * 4096,
                                    compression=grpc.Compression.Gzip),
                    grpc.StatusCode.UNIMPLEMENTED)
    assert "compress" in d, d


@case
def grpcio_100_concurrent_streams_then_cancel(s):
    base = int(s.stats()["cancelled"])
    calls = [s.stream(ECHO + "Hold", b"") for _ in range(100)]
    for c in calls:
        assert next(c) == b"hello"
    st = s.stats()
    assert st["held"] == "100" and st["conns"] == "1", st
    for c in calls:
        c.cancel()
    assert wait_until(lambda: s.stats()["held"] == "0"), s.stats()
    assert int(s.stats()["cancelled"]) == base + 100, s.stats()
    assert s.unary(ECHO + "Unary", b"still here") == b"still here"


@case
def grpcio_held_stream_released_by_server(s):
    it = s.stream(ECHO + "Hold", b"")
    assert next(it) == b"hello"
    assert s.unary(ECHO + "Release", b"") == b"released=1"
    assert list(it) == []
    assert it.code() == grpc.StatusCode.OK and it.details() == "released"


@case
def grpcio_client_vanishing_mid_stream(s):
    base = int(s.stats()["cancelled"])
    code = ("import grpc, os, sys\n"
            "ch = grpc.insecure_channel('unix:' + sys.argv[1])\n"
            "it = ch.unary_stream('/accel.test.Echo/Hold')(b'')\n"
            "assert next(it) == b'hello'\n"
            "print('got hello', flush=True)\n"
            "os._exit(0)\n")
    out = subprocess.run(["/usr/bin/python3", "-c", code, s.sock], capture_output=True,
                         timeout=30)
    assert b"got hello" in out.stdout, out
    assert wait_until(lambda: int(s.stats()["cancelled"]) == base + 1), s.stats()
    assert s.stats()["held"] == "0"
    assert s.unary(ECHO + "Unary", b"ok") == b"ok"


@case
def grpcio_many_channels_in_parallel(s):
    # A local subchannel pool: otherwise grpcio shares one connection.
    chans = [grpc.insecure_channel("unix:" + s.sock,
                                   options=[("grpc.use_local_subchannel_pool", 1)])
             for _ in range(8)]
    futs = []
    for i, ch in enumerate(chans):
        f = ch.unary_unary(ECHO + "Unary")
        for j in range(25):
            futs.append((b"%d-%d" % (i, j), f.future(b"%d-%d" % (i, j), timeout=20)))
    for want, fut in futs:
        assert fut.result() == want
    assert wait_until(lambda: int(s.stats()["conns"]) >= 9)
    for ch in chans:
        ch.close()
    assert wait_until(lambda: s.stats()["conns"] == "1"), s.stats()


# ------------------------------------------------------------- our client

class PeerServer:
    """A grpcio server on a unix socket with generic (bytes) handlers."""

    def __init__(self):
        from concurrent import futures
        self.sock = os.path.join(TMP, "peer.sock")
        self.slow_cancelled = threading.Event()
        peer = self

        def count(req, ctx):
            for i in range(int(req)):
                yield b"msg-%d" % i
            ctx.set_code(grpc.StatusCode.OK)
            ctx.set_details("counted %d" % int(req))

        def slow(req, ctx):
            done = threading.Event()
            ctx.add_callback(done.set)
            done.wait(20)
            if not ctx.is_active():
                peer.slow_cancelled.set()
            return b"late"

        def fail(req, ctx):
            ctx.abort(grpc.StatusCode.NOT_FOUND, "no GPU-7: 100% gone\nü")

        handlers = {
            ECHO + "Unary": grpc.unary_unary_rpc_method_handler(lambda r, c: r),
            ECHO + "Count": grpc.unary_stream_rpc_method_handler(count),
            ECHO + "Slow": grpc.unary_unary_rpc_method_handler(slow),
            ECHO + "Fail": grpc.unary_unary_rpc_method_handler(fail),
        }

        class H(grpc.GenericRpcHandler):
            def service(self, details):
                return handlers.get(details.method)

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self.server.add_generic_rpc_handlers((H(),))
        self.server.add_insecure_port("unix:" + self.sock)
        self.server.start()

    def call(self, *args):
        out = subprocess.run([CLIENT, self.sock] + [str(a) for a in args], capture_output=True,
                             timeout=60)
        assert out.returncode == 0, out
        return out.stdout.decode()

    def stop(self):
        self.server.stop(0)


@case
def our_client_unary_to_grpcio(p):
    out = p.call("unary", ECHO + "Unary", "hello")
    assert "status=0 OK\n" in out and "resp=hello\n" in out, out


@case
def our_client_stream_from_grpcio(p):
    out = p.call("stream", ECHO + "Count", "5")
    msgs = [l[4:] for l in out.splitlines() if l.startswith("msg=")]
    assert msgs == ["msg-%d" % i for i in range(5)], out
    assert "status=0 OK\n" in out and "message=counted 5\n" in out, out


@case
def our_client_deadline_against_grpcio(p):
    t0 = time.monotonic()
    out = p.call("unary", ECHO + "Slow", "x", 300)
    assert "status=4 DEADLINE_EXCEEDED" in out, out
    assert time.monotonic() - t0 < 15, "deadline not enforced"
    # The stream reset (and grpc-timeout) reached the server.
    assert p.slow_cancelled.wait(10)


@case
def our_client_reads_grpcio_error_status(p):
    out = p.call("unary", ECHO + "Fail")
    assert "status=5 NOT_FOUND" in out, out
    assert "message=no GPU-7: 100% gone\nü\n" in out, out
    out = p.call("unary", "/accel.test.Echo/Missing")
    assert "status=12 UNIMPLEMENTED" in out, out


@case
def our_client_100_concurrent_unary_to_grpcio(p):
    out = p.call("many", ECHO + "Unary", 100)
    assert out.strip() == "ok=100", out


def main():
    print("1..%d" % len(CASES))
    srv = OurServer()
    peer = None
    failed = 0
    for i, fn in enumerate(CASES, 1):
        try:
            if fn.__name__.startswith("our_client"):
                if peer is None:
                    peer = PeerServer()
                fn(peer)
            else:
                fn(srv)
            print("ok %d - %s" % (i, fn.__name__))
        except Exception:
            failed += 1
            print("not ok %d - %s" % (i, fn.__name__))
            for line in traceback.format_exc().splitlines():
                print("# " + line)
        sys.stdout.flush()
    srv.stop()
    if srv.proc.returncode != 0:
        print("# test server exited with %d" % srv.proc.returncode)
        failed += 1
    if peer:
        peer.stop()
    shutil.rmtree(TMP, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
