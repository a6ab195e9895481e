#!/usr/bin/python3
"""fake-apiserver.py — a Kubernetes API server for tests: pods and events of core/v1 over
HTTPS with a bearer token (or a client certificate), in the JSON shapes the real server and
`kubectl get pod -o json` use.

  /usr/bin/python3 fake-apiserver.py --dir DIR --token TOKEN

Generates a CA, a server certificate (localhost, 127.0.0.1) and a client certificate with the
openssl CLI into DIR (ca.crt, client.crt, client.key), listens on 127.0.0.1:<free port> and
writes the port to DIR/port when ready.

Served (Kubernetes API reference, core/v1):
  GET   /api/v1/pods?fieldSelector=spec.nodeName=N          PodList with metadata.resourceVersion
  GET   /api/v1/pods?...&watch=1&resourceVersion=RV         chunked watch: one JSON event a line
        (ADDED/MODIFIED/DELETED, BOOKMARK when allowWatchBookmarks=true, ERROR 410 when RV
        is older than the retained history)
  GET   /api/v1/namespaces/NS/pods/NAME                     Pod
  PATCH /api/v1/namespaces/NS/pods/NAME                     merge / strategic merge patch
        (other content types: 415)
  POST  /api/v1/namespaces/NS/events                        Event (201)
Served (resource.k8s.io/v1, for the DRA driver):
  GET    /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=N,spec.driver=D
         ResourceSliceList (either selector term optional)
  POST   /apis/resource.k8s.io/v1/resourceslices            201, 409 AlreadyExists
  GET    /apis/resource.k8s.io/v1/resourceslices?watch=true&fieldSelector=...[&resourceVersion=RV]
         chunked watch: ADDED for each matching slice first when no RV is given (as the real
         server does), then ADDED/MODIFIED/DELETED as slices change
  DELETE /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=N[,spec.driver=D]
         delete collection: what the kubelet does to a node's slices when it starts (and to a
         driver's 30 s after it is gone)
  GET/PUT/DELETE /apis/resource.k8s.io/v1/resourceslices/NAME
         PUT: 409 Conflict when metadata.resourceVersion is not the stored one
  GET    /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME
  GET    /apis/resource.k8s.io/v1/deviceclasses[/NAME]
Errors are Status objects: 401 for a missing or wrong token, 404, 409, 410, 415, 422.

Test controls (same token): POST /_fake/pod {"op":"add"|"modify"|"delete", ...},
/_fake/compact {"http410":bool}, /_fake/break, /_fake/bookmark, /_fake/reject {"on":bool};
pod API faults (tests/faults): /_fake/lag {"ms":N} (watch events go out N ms after they
happen), /_fake/hang {"on":bool} (watches stay open and send nothing; LIST still answers),
/_fake/fail {"n":K,"code":C} (the next K pod LIST/WATCH requests answer C, 503 by default),
/_fake/listdelay {"ms":N} (pod LIST answers N ms late);
GET /_fake/log (every request: method, path, content type, body), /_fake/events, /_fake/state.
DRA: POST /_fake/claim (a ResourceClaim as `kubectl get -o json` prints it; replaces one of the
same namespace/name; {"op":"delete","namespace":..,"name":..} removes), /_fake/deviceclass,
/_fake/slice (a ResourceSlice stored as-is: a stale or foreign one), /_fake/conflicts {"n":K}
(the next K slice writes answer 409 after a concurrent change bumps the resourceVersion),
/_fake/down {"on":bool} (resource.k8s.io answers 503); GET /_fake/slices;
/_fake/partitionable {"mode": "on"|"dropped"|"unknown"}: partitionable devices (KEP-4815:
sharedCounters, consumesCounters) kept (the default, with v1's checks: devices or
sharedCounters in one slice, at most 64 devices once one has taints or consumes counters, at
most 8 counter sets), dropped on write as an API server with the DRAPartitionableDevices gate
off does, or unknown to the schema (a write with fieldValidation=Strict answers 400
"unknown field", as an API server before the fields does).
"""
import argparse
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs

LOCK = threading.Condition()
STATE = {
    "rv": 100,           # last resourceVersion handed out
    "oldest": 0,         # watches from an rv below this get 410
    "history": [],       # (rv, type, pod) kept for watches
    "pods": {},          # uid -> pod
    "events": [],
    "log": [],
    "reject": False,
    "http410": False,
    "gen": 0,            # bumps on break / bookmark / compact to wake watchers
    "command": None,
    "watchers": 0,
    "slices": {},        # name -> ResourceSlice
    "slice_history": [], # (rv, type, slice) for slice watches
    "claims": {},        # (namespace, name) -> ResourceClaim
    "classes": {},       # name -> DeviceClass
    "conflicts": 0,      # slice writes still to answer 409
    "down": False,       # resource.k8s.io answers 503
    # pod API faults (tests/faults): watch events held back ms, watches that stop sending,
    # pod LIST/WATCH requests answered with an error, LIST answers delayed
    "lag_ms": 0,
    "hang": False,
    "fail": 0,
    "fail_code": 503,
    "list_delay_ms": 0,
    "partitionable": "on",  # on | dropped | unknown (see the docstring)
}
RES = "/apis/resource.k8s.io/v1/"
ARGS = None


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def next_rv():
    STATE["rv"] += 1
    return str(STATE["rv"])


def make_pod(d):
    """A pod as `kubectl get pod -o json` prints one."""
    containers = []
    for c in d.get("containers", [{"name": "main"}]):
        res = {}
        if c.get("requests"):
            res["requests"] = c["requests"]
        if c.get("limits"):
            res["limits"] = c["limits"]
        containers.append({
            "name": c["name"], "image": "registry.k8s.io/pause:3.9",
            "imagePullPolicy": "IfNotPresent", "resources": res,
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        })
    meta = {
        "name": d["name"], "namespace": d.get("namespace", "default"),
        "uid": d.get("uid", str(uuid.uuid4())), "resourceVersion": "",
        "creationTimestamp": d.get("creationTimestamp", now()),
        "labels": {"app": d["name"]},
    }
    if d.get("annotations"):
        meta["annotations"] = d["annotations"]
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {
            "containers": containers, "nodeName": d.get("node", ARGS.node),
            "restartPolicy": "Always", "schedulerName": "default-scheduler",
            "serviceAccountName": "default", "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0, "terminationGracePeriodSeconds": 30,
        },
        "status": {"phase": d.get("phase", "Pending"), "qosClass": "BestEffort"},
    }


def record(kind, pod):
    rv = next_rv()
    pod["metadata"]["resourceVersion"] = rv
    STATE["history"].append((int(rv), kind, json.loads(json.dumps(pod)), time.monotonic()))
    LOCK.notify_all()


def find_pod(ns, name):
    for p in STATE["pods"].values():
        if p["metadata"]["namespace"] == ns and p["metadata"]["name"] == name:
            return p
    return None


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def merge(dst, patch):
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict):
            if not isinstance(dst.get(k), dict):
                dst[k] = {}
            merge(dst[k], v)
        else:
            dst[k] = v


def partitions(obj, q):
    """What the server does with a slice's partitionable-device fields (STATE["partitionable"]):
    None (kept, or dropped in place), or the (status, Status) answer of a refusal."""
    spec = obj["spec"]
    devs = spec.get("devices") or []
    has = "sharedCounters" in spec or any("consumesCounters" in d for d in devs)
    mode = STATE["partitionable"]
    if has and mode == "unknown" and "Strict" in q.get("fieldValidation", ""):
        field = "spec.sharedCounters" if "sharedCounters" in spec else \
            "spec.devices[0].consumesCounters"
        return 400, status(400, "BadRequest",
                           'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: '
                           'strict decoding error: unknown field "%s"' % field)
    if has and mode != "on":
        spec.pop("sharedCounters", None)
        for d in devs:
            d.pop("consumesCounters", None)
        return None
    if devs and spec.get("sharedCounters"):
        return 422, status(422, "Invalid", "spec: only one of devices and sharedCounters may "
                           "be set")
    strict = any("consumesCounters" in d or d.get("taints") for d in devs)
    if len(devs) > (64 if strict else 128):
        return 422, status(422, "Invalid", "spec.devices: Too many: %d: must have at most %d "
                           "items" % (len(devs), 64 if strict else 128))
    if len(spec.get("sharedCounters") or []) > 8:
        return 422, status(422, "Invalid", "spec.sharedCounters: Too many")
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authed(self):
        if self.request.getpeercert():
            return True  # verified against our CA by the TLS layer
        return self.headers.get("Authorization") == "Bearer " + ARGS.token

    def handle_any(self, method):
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        with LOCK:
            if not url.path.startswith("/_fake/"):
                STATE["log"].append({"method": method, "path": url.path, "query": q,
                                     "content_type": self.headers.get("Content-Type", ""),
                                     "body": body})
            reject = STATE["reject"]
        if not self.authed() or (reject and not url.path.startswith("/_fake/")):
            return self.send_json(401, status(401, "Unauthorized", "Unauthorized"))
        if url.path.startswith("/_fake/"):
            return self.control(method, url.path[7:], body)
        parts = url.path.strip("/").split("/")
        if url.path.startswith(RES):
            return self.resource(method, parts[3:], q, body)
        if method == "GET" and url.path == "/version":
            return self.send_json(200, {"major": "1", "minor": "34", "gitVersion": "v1.34.0",
                                        "platform": "linux/amd64"})
        if method == "GET" and url.path == "/api/v1/pods":
            with LOCK:
                failing = STATE["fail"] > 0
                if failing:
                    STATE["fail"] -= 1
                code = STATE["fail_code"]
            if failing:
                return self.send_json(code, status(code, "ServiceUnavailable",
                                                   "injected by the test (/_fake/fail)"))
            if q.get("watch") in ("1", "true"):
                return self.watch(q)
            return self.list(q)
        if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            return self.pod(method, parts[3], parts[5], body)
        if len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and \
                parts[4] == "events" and method == "POST":
            return self.event(parts[3], body)
        return self.send_json(404, status(404, "NotFound", "the server could not find the "
                                          "requested resource"))

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PATCH(self):
        self.handle_any("PATCH")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")

    def resource(self, method, parts, q, body):
        """resource.k8s.io/v1: ResourceSlices (read/write), ResourceClaims and DeviceClasses
        (read)."""
        with LOCK:
            if STATE["down"]:
                return self.send_json(503, status(503, "ServiceUnavailable",
                                                  "the server is currently unable to handle "
                                                  "the request"))
            if parts == ["resourceslices"] and method == "GET" and q.get("watch") in ("1", "true"):
                watch = True
            elif parts[:1] == ["resourceslices"]:
                return self.slice(method, parts[1] if len(parts) == 2 else None, q, body)
            else:
                watch = False
            if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "resourceclaims" \
                    and method == "GET":
                c = STATE["claims"].get((parts[1], parts[3]))
                if c is None:
                    return self.send_json(404, status(404, "NotFound",
                                                      'resourceclaims.resource.k8s.io "%s" not '
                                                      'found' % parts[3]))
                return self.send_json(200, c)
            if parts[:1] == ["deviceclasses"] and method == "GET":
                if len(parts) == 2:
                    c = STATE["classes"].get(parts[1])
                    if c is None:
                        return self.send_json(404, status(404, "NotFound", "not found"))
                    return self.send_json(200, c)
                return self.send_json(200, {"kind": "DeviceClassList",
                                            "apiVersion": "resource.k8s.io/v1",
                                            "metadata": {"resourceVersion": str(STATE["rv"])},
                                            "items": list(STATE["classes"].values())})
        if watch:
            return self.slice_watch(q)
        return self.send_json(404, status(404, "NotFound", "the server could not find the "
                                          "requested resource"))

    def slice_selector(self, q):
        """The fieldSelector of a slice request as {field: value}; None when unsupported."""
        sel = {}
        for term in filter(None, q.get("fieldSelector", "").split(",")):
            k, _, v = term.partition("=")
            if k not in ("spec.nodeName", "spec.driver"):
                return None
            sel[k] = v
        return sel

    def slice_watch(self, q):
        """A watch of ResourceSlices: chunked, one event a line, until the client goes."""
        sel = self.slice_selector(q)
        if sel is None:
            return self.send_json(400, status(400, "BadRequest", "field label not supported"))

        def matches(x):
            return all(x["spec"].get(k[5:]) == v for k, v in sel.items())

        def events():
            with LOCK:
                if q.get("resourceVersion"):
                    since = int(q["resourceVersion"])
                    initial = []
                else:
                    since = STATE["rv"]
                    initial = [x for x in STATE["slices"].values() if matches(x)]
            for x in initial:
                self.chunk({"type": "ADDED", "object": x})
            while True:
                with LOCK:
                    evs = [(rv, t, x) for rv, t, x in STATE["slice_history"] if rv > since]
                    if not evs:
                        LOCK.wait(0.1)
                        if self.peer_gone():
                            return
                        continue
                for rv, t, x in evs:
                    since = rv
                    if matches(x):
                        self.chunk({"type": t, "object": x})
        self.stream(events)

    def stream(self, events):
        """A chunked 200 answer: events() writes them (self.chunk) until the client goes or
        it returns; then the last chunk, unless events() returns False (it cut the
        connection itself)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with LOCK:
            STATE["watchers"] += 1
        try:
            if events() is not False:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass
        finally:
            with LOCK:
                STATE["watchers"] -= 1

    def slice(self, method, name, q, body):
        """Called with LOCK held."""
        slices = STATE["slices"]

        def record(t, x):
            STATE["slice_history"].append((STATE["rv"], t, json.loads(json.dumps(x))))
            LOCK.notify_all()
        if name is None and method in ("GET", "DELETE"):
            sel = self.slice_selector(q)
            if sel is None:
                return self.send_json(400, status(400, "BadRequest",
                                                  'field label not supported: ' +
                                                  q.get("fieldSelector", "")))
            items = [x for x in slices.values()
                     if all(x["spec"].get(k[5:]) == v for k, v in sel.items())]
            if method == "DELETE":
                # delete collection (the kubelet wiping a node's slices)
                for x in items:
                    del slices[x["metadata"]["name"]]
                    x["metadata"]["resourceVersion"] = next_rv()
                    record("DELETED", x)
            return self.send_json(200, {"kind": "ResourceSliceList",
                                        "apiVersion": "resource.k8s.io/v1",
                                        "metadata": {"resourceVersion": str(STATE["rv"])},
                                        "items": items})
        if method in ("POST", "PUT"):
            try:
                obj = json.loads(body)
                if obj.get("kind") != "ResourceSlice" or \
                        obj.get("apiVersion") != "resource.k8s.io/v1" or \
                        not isinstance(obj.get("spec"), dict):
                    raise ValueError
            except ValueError:
                return self.send_json(422, status(422, "Invalid", "not a resource.k8s.io/v1 "
                                                  "ResourceSlice"))
            meta = obj.setdefault("metadata", {})
            bad = partitions(obj, q)
            if bad:
                return self.send_json(*bad)
            if STATE["conflicts"] > 0 and name:
                # a concurrent writer got there first
                STATE["conflicts"] -= 1
                cur = slices.get(name)
                if cur is not None:
                    cur["metadata"]["resourceVersion"] = next_rv()
                return self.send_json(409, status(409, "Conflict",
                                                  'Operation cannot be fulfilled on '
                                                  'resourceslices.resource.k8s.io "%s": the '
                                                  'object has been modified; please apply your '
                                                  'changes to the latest version and try '
                                                  'again' % name))
        if method == "POST" and name is None:
            n = meta.get("name")
            if not n:
                return self.send_json(422, status(422, "Invalid", "metadata.name required"))
            if n in slices:
                return self.send_json(409, status(409, "AlreadyExists",
                                                  'resourceslices.resource.k8s.io "%s" already '
                                                  'exists' % n))
            meta.update(uid=str(uuid.uuid4()), resourceVersion=next_rv(), generation=1,
                        creationTimestamp=now())
            slices[n] = obj
            record("ADDED", obj)
            return self.send_json(201, obj)
        cur = slices.get(name) if name else None
        if cur is None:
            return self.send_json(404, status(404, "NotFound",
                                              'resourceslices.resource.k8s.io "%s" not found'
                                              % name))
        if method == "GET":
            return self.send_json(200, cur)
        if method == "DELETE":
            del slices[name]
            cur["metadata"]["resourceVersion"] = next_rv()
            record("DELETED", cur)
            return self.send_json(200, cur)
        if method == "PUT":
            if meta.get("name") != name:
                return self.send_json(422, status(422, "Invalid", "name does not match"))
            if meta.get("resourceVersion") != cur["metadata"]["resourceVersion"]:
                return self.send_json(409, status(409, "Conflict",
                                                  'Operation cannot be fulfilled on '
                                                  'resourceslices.resource.k8s.io "%s": the '
                                                  'object has been modified' % name))
            gen = cur["metadata"].get("generation", 1)
            if obj["spec"] != cur["spec"]:
                gen += 1
            meta.update(uid=cur["metadata"]["uid"], resourceVersion=next_rv(), generation=gen,
                        creationTimestamp=cur["metadata"]["creationTimestamp"])
            slices[name] = obj
            record("MODIFIED", obj)
            return self.send_json(200, obj)
        return self.send_json(405, status(405, "MethodNotAllowed", method))

    def node_of(self, q):
        fs = q.get("fieldSelector", "")
        return fs[len("spec.nodeName="):] if fs.startswith("spec.nodeName=") else None

    def list(self, q):
        node = self.node_of(q)
        with LOCK:
            delay = STATE["list_delay_ms"]
        if delay:
            time.sleep(delay / 1000)
        with LOCK:
            items = [p for p in STATE["pods"].values()
                     if node is None or p["spec"]["nodeName"] == node]
            rv = str(STATE["rv"])
            self.send_json(200, {"kind": "PodList", "apiVersion": "v1",
                                 "metadata": {"resourceVersion": rv}, "items": items})

    def chunk(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def peer_gone(self):
        """A watcher's client sends nothing: readable means it closed the connection."""
        r, _, _ = select.select([self.connection], [], [], 0)
        if not r:
            return False
        try:
            return self.connection.recv(1) == b""
        except (ssl.SSLError, OSError):
            return True

    def watch(self, q):
        node = self.node_of(q)
        bookmarks = q.get("allowWatchBookmarks") == "true"
        try:
            since = int(q.get("resourceVersion") or "0")
        except ValueError:
            return self.send_json(400, status(400, "BadRequest", "bad resourceVersion"))
        with LOCK:
            if since < STATE["oldest"] and STATE["http410"]:
                return self.send_json(410, status(410, "Expired", "too old resource version"))
        with LOCK:
            gen0 = STATE["gen"]

        def events():
            nonlocal since
            gen = gen0
            while True:
                with LOCK:
                    if since < STATE["oldest"]:
                        self.chunk({"type": "ERROR", "object": status(
                            410, "Expired", "too old resource version: %d (%d)" %
                            (since, STATE["oldest"]))})
                        return
                    # lag: only events older than lag_ms go out; hang: none does
                    ripe = time.monotonic() - STATE["lag_ms"] / 1000
                    evs = [] if STATE["hang"] else \
                        [(rv, t, p) for rv, t, p, at in STATE["history"] if rv > since]
                    held = [at for rv, t, p, at in STATE["history"] if rv > since and at > ripe]
                    if held and not STATE["hang"]:
                        evs = evs[:len(evs) - len(held)]
                    cmd = STATE["command"] if STATE["gen"] != gen else None
                    gen = STATE["gen"]
                    if not evs and cmd is None:
                        LOCK.wait(min(0.1, max(0.001, min(held) - ripe)) if held else 0.1)
                        if self.peer_gone():
                            return
                        continue
                for rv, t, p in evs:
                    since = rv
                    if node is None or p["spec"]["nodeName"] == node:
                        self.chunk({"type": t, "object": p})
                if cmd == "break":
                    # half a chunk, then the connection dies: a stream broken mid-event
                    self.wfile.write(b"40\r\n{\"type\":\"MODIF")
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return False
                if cmd == "bookmark" and bookmarks:
                    with LOCK:
                        rv = str(STATE["rv"])
                    self.chunk({"type": "BOOKMARK", "object": {
                        "kind": "Pod", "apiVersion": "v1",
                        "metadata": {"resourceVersion": rv}}})
        self.stream(events)

    def pod(self, method, ns, name, body):
        with LOCK:
            p = find_pod(ns, name)
            if p is None:
                return self.send_json(404, status(404, "NotFound",
                                                  'pods "%s" not found' % name))
            if method == "GET":
                return self.send_json(200, p)
            if method != "PATCH":
                return self.send_json(405, status(405, "MethodNotAllowed", method))
            ct = self.headers.get("Content-Type", "")
            if ct not in ("application/merge-patch+json",
                          "application/strategic-merge-patch+json"):
                return self.send_json(415, status(415, "UnsupportedMediaType",
                                                  "the body of the request was in an unknown "
                                                  "format - accepted media types include: "
                                                  "application/merge-patch+json"))
            try:
                patch = json.loads(body)
                if not isinstance(patch, dict):
                    raise ValueError
            except ValueError:
                return self.send_json(422, status(422, "Invalid", "bad patch"))
            merge(p, patch)
            record("MODIFIED", p)
            return self.send_json(200, p)

    def event(self, ns, body):
        try:
            ev = json.loads(body)
        except ValueError:
            return self.send_json(400, status(400, "BadRequest", "not JSON"))
        meta = ev.get("metadata", {})
        if ev.get("kind") != "Event" or meta.get("namespace") != ns or \
                not (meta.get("name") or meta.get("generateName")):
            return self.send_json(422, status(422, "Invalid", "not an Event for " + ns))
        with LOCK:
            meta["name"] = meta.get("name") or meta["generateName"] + uuid.uuid4().hex[:5]
            meta["uid"] = str(uuid.uuid4())
            meta["resourceVersion"] = next_rv()
            STATE["events"].append(ev)
        return self.send_json(201, ev)

    def control(self, method, what, body):
        d = json.loads(body) if body else {}
        with LOCK:
            if what == "pod":
                op = d["op"]
                if op == "add":
                    p = make_pod(d)
                    STATE["pods"][p["metadata"]["uid"]] = p
                    record("ADDED", p)
                else:
                    p = find_pod(d.get("namespace", "default"), d["name"])
                    if p is None:
                        return self.send_json(404, {})
                    if op == "delete":
                        del STATE["pods"][p["metadata"]["uid"]]
                        record("DELETED", p)
                    else:
                        if "phase" in d:
                            p["status"]["phase"] = d["phase"]
                        record("MODIFIED", p)
                return self.send_json(200, p)
            if what == "lag":
                STATE["lag_ms"] = int(d.get("ms", 0))
                LOCK.notify_all()
            elif what == "hang":
                STATE["hang"] = bool(d.get("on"))
                LOCK.notify_all()
            elif what == "fail":
                STATE["fail"] = int(d.get("n", 0))
                STATE["fail_code"] = int(d.get("code", 503))
            elif what == "listdelay":
                STATE["list_delay_ms"] = int(d.get("ms", 0))
            elif what == "compact":
                STATE["http410"] = bool(d.get("http410"))
                # every version so far is gone; a relist returns a new, watchable one
                STATE["oldest"] = int(next_rv())
                STATE["history"] = []
                LOCK.notify_all()
            elif what in ("break", "bookmark"):
                STATE["command"] = what
                STATE["gen"] += 1
                LOCK.notify_all()
            elif what == "claim":
                if d.get("op") == "delete":
                    STATE["claims"].pop((d["namespace"], d["name"]), None)
                else:
                    m = d["metadata"]
                    m.setdefault("uid", str(uuid.uuid4()))
                    m["resourceVersion"] = next_rv()
                    STATE["claims"][(m["namespace"], m["name"])] = d
                    return self.send_json(200, d)
            elif what == "deviceclass":
                STATE["classes"][d["metadata"]["name"]] = d
            elif what == "slice":
                m = d["metadata"]
                m.setdefault("uid", str(uuid.uuid4()))
                m.setdefault("generation", 1)
                m.setdefault("creationTimestamp", now())
                m["resourceVersion"] = next_rv()
                t = "MODIFIED" if m["name"] in STATE["slices"] else "ADDED"
                STATE["slices"][m["name"]] = d
                STATE["slice_history"].append((STATE["rv"], t, json.loads(json.dumps(d))))
                LOCK.notify_all()
            elif what == "slices":
                return self.send_json(200, list(STATE["slices"].values()))
            elif what == "conflicts":
                STATE["conflicts"] = int(d.get("n", 0))
            elif what == "down":
                STATE["down"] = bool(d.get("on"))
            elif what == "partitionable":
                STATE["partitionable"] = d.get("mode", "on")
            elif what == "reject":
                STATE["reject"] = bool(d.get("on"))
            elif what == "log":
                return self.send_json(200, STATE["log"])
            elif what == "events":
                return self.send_json(200, STATE["events"])
            elif what == "state":
                return self.send_json(200, {"watchers": STATE["watchers"],
                                            "rv": STATE["rv"]})
            else:
                return self.send_json(404, {})
        return self.send_json(200, {})


class Server(ThreadingHTTPServer):
    """TLS per connection in the connection's own thread: a client that never finishes its
    handshake must not stall accept() for everyone."""
    daemon_threads = True
    ctx = None

    def handle_error(self, request, client_address):
        pass  # clients that hang up mid-answer are part of the tests

    def finish_request(self, request, client_address):
        request.settimeout(10)
        try:
            conn = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        conn.settimeout(None)
        try:
            self.RequestHandlerClass(conn, client_address, self)
        finally:
            try:
                conn.close()
            except OSError:
                pass


def openssl(*a):
    subprocess.run(["openssl", *a], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_certs(d):
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", d + "/ca.key", "-out", d + "/ca.crt",
            "-days", "2", "-subj", "/CN=fake-apiserver-ca")
    with open(d + "/san.ext", "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, cn in (("server", "localhost"), ("client", "system:node:fake")):
        openssl("req", *ec, "-keyout", "%s/%s.key" % (d, name), "-out",
                "%s/%s.csr" % (d, name), "-subj", "/CN=" + cn)
        extra = ["-extfile", d + "/san.ext"] if name == "server" else []
        openssl("x509", "-req", "-in", "%s/%s.csr" % (d, name), "-CA", d + "/ca.crt",
                "-CAkey", d + "/ca.key", "-CAcreateserial", "-days", "2",
                "-out", "%s/%s.crt" % (d, name), *extra)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--node", default="node-a")
    ARGS = ap.parse_args()
    make_certs(ARGS.dir)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ARGS.dir + "/server.crt", ARGS.dir + "/server.key")
    ctx.load_verify_locations(ARGS.dir + "/ca.crt")
    ctx.verify_mode = ssl.CERT_OPTIONAL
    Server.ctx = ctx
    srv = Server(("127.0.0.1", 0), Handler)
    tmp = ARGS.dir + "/port.tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, ARGS.dir + "/port")
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
