#!/usr/bin/env python3
"""test-slow-clients — accel-exporter keeps answering /metrics while slow clients hold
connections (issue 22, F8: 80 connections sending one header line every few seconds used to
leave 0 of 30 scrapes answered in 30 s). With its default limits:
  - 80 slow clients from one address: a scrape from another address is answered, every time
    (the per-address limit);
  - 80 slow clients from 80 addresses: the same (the connection limit is above 80, and each
    one is cut when its headers are overdue);
  - a slow client is closed by the exporter once its headers are overdue (requestHeaderTimeout,
    5 s), within a generous bound, although it is never silent long enough for the idle timeout.
No speed is asserted: a scrape must be answered at all within 10 s (bench/exporter-slow.py
measures how fast). Prints TAP; exits 77 when the exporter was not built."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import slowclients  # noqa: E402
from slowclients import SlowClients  # noqa: E402
from taptest import case, check, run  # noqa: E402

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
EMU = os.path.join(BUILD, "src", "emu", "accel-emu")
EXPORTER = os.path.join(BUILD, "src", "exporter", "accel-exporter")
NVML = os.path.join(BUILD, "src", "emu", "libnvidia-ml.so.1")
if not os.path.exists(EXPORTER):
    print("1..0 # SKIP accel-exporter not built (libmicrohttpd missing)")
    sys.exit(77)

TMP = tempfile.mkdtemp(prefix="test-slow-clients-")
STATE = os.path.join(TMP, "machine")
ENV = dict(os.environ, ACCEL_EMU_STATE=STATE, ACCEL_NVML_LIBRARY=NVML)
subprocess.run([EMU, "--state", STATE, "init", "--gpus", "2"], check=True, env=ENV,
               stdout=subprocess.DEVNULL)
s = socket.socket()
s.bind(("127.0.0.1", 0))
PORT = s.getsockname()[1]
s.close()
exp = subprocess.Popen([EXPORTER, "--listen", f"127.0.0.1:{PORT}", "--interval", "100ms",
                        "--pod-resources-socket", ""], env=ENV, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def scrape(timeout=10.0):
    """One /metrics scrape on a new connection from 127.0.0.1: the status, or None."""
    return slowclients.scrape(PORT, timeout)[0]


def scrapes_answered(n=30):
    """n scrapes one after another; stops at the third unanswered. (answered, tried)."""
    ok = tried = 0
    for _ in range(n):
        tried += 1
        if scrape() == 200:
            ok += 1
        elif tried - ok >= 3:
            break
    return ok, tried


def cleanup():
    exp.terminate()
    try:
        exp.wait(timeout=10)
    except subprocess.TimeoutExpired:
        exp.kill()
    shutil.rmtree(TMP, ignore_errors=True)


@case("the exporter serves /metrics")
def _():
    end = time.monotonic() + 30
    while scrape(2.0) != 200:
        check(time.monotonic() < end and exp.poll() is None, "no /metrics answer in 30 s")
        time.sleep(0.1)


@case("80 slow clients from one address: every scrape from another is answered")
def _():
    with SlowClients("127.0.0.1", PORT, count=80, sources=["127.0.0.2"], drip=1.0) as sc:
        ok, tried = scrapes_answered()
    check(ok == tried == 30, f"{ok} of {tried} scrapes answered (slow clients opened "
          f"{sc.opened} connections, {sc.closed_by_server} ended by the exporter)")


@case("80 slow clients from 80 addresses: every scrape is answered")
def _():
    srcs = [f"127.0.1.{i}" for i in range(1, 81)]
    with SlowClients("127.0.0.1", PORT, count=80, sources=srcs, drip=1.0) as sc:
        ok, tried = scrapes_answered()
    check(ok == tried == 30, f"{ok} of {tried} scrapes answered (slow clients opened "
          f"{sc.opened} connections, {sc.closed_by_server} ended by the exporter)")


@case("a client whose headers never end is closed, though never silent for the idle timeout")
def _():
    c = socket.create_connection(("127.0.0.1", PORT), source_address=("127.0.0.3", 0))
    c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    start = time.monotonic()
    closed = None
    c.settimeout(1.0)
    try:
        while time.monotonic() - start < 20:   # requestHeaderTimeout is 5 s
            try:
                if c.recv(4096) == b"":
                    closed = time.monotonic() - start
                    break
            except socket.timeout:
                c.sendall(b"X-Drip: 1\r\n")
    except OSError:
        closed = time.monotonic() - start
    finally:
        c.close()
    check(closed is not None, "still open after 20 s of one header line a second")
    return None


@case("the limits are settings: --check-config shows them, bad values are refused")
def _():
    p = subprocess.run([EXPORTER, "--connection-limit", "32", "--per-ip-connection-limit", "0",
                        "--request-header-timeout", "2s", "--idle-timeout", "1500ms",
                        "--check-config"], env=ENV, capture_output=True, text=True)
    check(p.returncode == 0, p.stdout + p.stderr)
    for want in ("connectionLimit: 32\n", "perIpConnectionLimit: 0\n",
                 "requestHeaderTimeout: 2000000000ns\n", "idleTimeout: 2000000000ns\n"):
        check(want in p.stdout, f"{want!r} not in {p.stdout!r}")
    p = subprocess.run([EXPORTER, "--connection-limit", "0", "--check-config"], env=ENV,
                       capture_output=True, text=True)
    check(p.returncode == 2 and "connectionLimit" in p.stderr, p.stderr)
    p = subprocess.run([EXPORTER, "--request-header-timeout", "10ms", "--check-config"], env=ENV,
                       capture_output=True, text=True)
    check(p.returncode == 2 and "requestHeaderTimeout" in p.stderr, p.stderr)


run(cleanup)
