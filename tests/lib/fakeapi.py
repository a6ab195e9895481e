"""fakeapi — tests/kube/fake-apiserver.py as a child process for Python tests: started in a
temp dir (its CA, port file and log there), called with the bearer token, and a kubeconfig
file written for acceld.

    api = fakeapi.ApiServer(src, tmp, token="t")
    api.kubeconfig(path); api.call("GET", "/_fake/slices"); api.stop()"""
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request


class ApiServer:
    def __init__(self, src, tmp, token="test-token", node="node-a", timeout=20):
        self.token = token
        self.dir = os.path.join(tmp, "api")
        os.makedirs(self.dir)
        script = os.path.join(src, "tests/kube/fake-apiserver.py")
        self.log = open(os.path.join(tmp, "api.log"), "ab")
        self.proc = subprocess.Popen(["/usr/bin/python3", script, "--dir", self.dir,
                                      "--token", token, "--node", node],
                                     stdout=self.log, stderr=self.log)
        port = os.path.join(self.dir, "port")
        end = time.monotonic() + timeout
        while not os.path.exists(port):
            if time.monotonic() > end or self.proc.poll() is not None:
                raise RuntimeError("the fake API server did not start")
            time.sleep(0.02)
        with open(port) as f:
            self.port = int(f.read())
        self.ctx = ssl.create_default_context(cafile=os.path.join(self.dir, "ca.crt"))

    def call(self, method, path, body=None):
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": "Bearer " + self.token,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
            return json.loads(r.read() or b"null")

    def add_vgpu_pod(self, name, cores, mem, created, uid=None, annotations=None,
                     core="tencent.com/vcuda-core", memory="tencent.com/vcuda-memory"):
        """A pending pod of one container "main" asking for vGPU cores and memory units (0:
        none), as the scheduler binds it to this node."""
        c = {"name": "main", "limits": {}}
        if cores:
            c["limits"][core] = str(cores)
        if mem:
            c["limits"][memory] = str(mem)
        return self.call("POST", "/_fake/pod", {"op": "add", "name": name,
                                                "uid": uid or "uid-" + name, "containers": [c],
                                                "creationTimestamp": created,
                                                "annotations": annotations})

    def kubeconfig(self, path):
        with open(path, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: https://127.0.0.1:{self.port}
    certificate-authority: {self.dir}/ca.crt
users:
- name: acceld
  user:
    token: {self.token}
contexts:
- name: fake
  context: {{cluster: fake, user: acceld}}
current-context: fake
""")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
