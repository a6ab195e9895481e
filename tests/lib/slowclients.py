"""slowclients — the slow-header attack on an HTTP server (issue 22, F8), for the exporter's
test and bench/exporter-slow.py.

    with SlowClients("127.0.0.1", port, count=80, sources=["127.0.0.2"], drip=5.0):
        ...   # 80 connections from 127.0.0.2, each sending one header line every 5 s

Each connection sends a request line and then one header line every `drip` seconds, never the
blank line that ends the headers, so the server waits for more; when the server closes it, it
connects again at once (as an attacker would). `sources` are the local addresses to connect
from, used in turn (127.0.0.0/8 is all loopback on Linux: one address per simulated host).
Threads, all stopped (and every socket closed) when the block ends. `opened` counts
connections made, `closed_by_server` those the server ended.

    scrape(port)   # one legitimate GET /metrics from 127.0.0.1 on a new connection
"""
import http.client
import socket
import threading
import time


class SlowClients:
    def __init__(self, host, port, count=80, sources=("127.0.0.2",), drip=5.0, reconnect=True):
        self.host, self.port, self.count = host, port, count
        self.sources, self.drip, self.reconnect = list(sources), drip, reconnect
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.opened = 0
        self.closed_by_server = 0
        self.threads = []

    def _one(self, i):
        src = self.sources[i % len(self.sources)]
        while not self.stop.is_set():
            s = socket.socket()
            try:
                s.settimeout(2.0)
                s.bind((src, 0))
                s.connect((self.host, self.port))
                with self.lock:
                    self.opened += 1
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                n = 0
                while not self.stop.wait(self.drip):
                    s.sendall(b"X-Slow-%d: %d\r\n" % (i, n))
                    n += 1
                    s.setblocking(False)
                    try:
                        if s.recv(4096) == b"":
                            raise ConnectionResetError
                    except BlockingIOError:
                        pass
                    s.setblocking(True)
            except OSError:
                if not self.stop.is_set():
                    with self.lock:
                        self.closed_by_server += 1
            finally:
                s.close()
            if not self.reconnect:
                return
            self.stop.wait(0.05)

    def __enter__(self):
        for i in range(self.count):
            t = threading.Thread(target=self._one, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)
        # every client connected once (or refused) before the caller goes on
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with self.lock:
                if self.opened + self.closed_by_server >= self.count:
                    break
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=self.drip + 3)
        return False


def scrape(port, timeout=10.0):
    """One GET /metrics on a new connection from 127.0.0.1: (HTTP status or None, seconds from
    the request sent to the last byte read)."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                   source_address=("127.0.0.1", 0))
    try:
        c.request("GET", "/metrics")
        r = c.getresponse()
        r.read()
        return r.status, time.monotonic() - t0
    except OSError:
        return None, time.monotonic() - t0
    finally:
        c.close()
