"""What the `acceld --mode dra` end-to-end tests (test_dra_mode.py, test_dra_mps.py,
test_dra_pergpu.py) share: the import path to tests/interop and tests/lib, their skips, the
emulated 2-GPU node beside the fake API server, and the guard that makes a crash a failed case
and always cleans up. Importing it exits 77 without grpcio/protoc (test_kubelet does)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_kubelet as k  # noqa: E402  (exits 77 itself without grpcio/protoc)
sys.path.insert(0, os.path.join(HERE, "..", "interop"))
import kubelet as K  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import fakeapi  # noqa: E402

T = 20


def require_dra(build):
    """Exits 77 unless the emulator, acceld's DRA mode and the openssl CLI are here."""
    if not K.Node.available(build):
        K.skip_all("the emulator is not built")
    if not os.path.isfile(os.path.join(build, "src/dra/libaccel-dra-acceld.a")):
        K.skip_all("acceld is built without DRA mode (libcurl missing)")
    if shutil.which("openssl") is None:
        K.skip_all("openssl CLI missing (the fake API server makes its certificates with it)")


def start_node(build, tmp, node):
    """The emulated 2-GPU node, its GPUs' UUIDs, the kubelet's node dirs (k.Node), the fake API
    server for `node` and a kubeconfig for it: (emu, uuids, knode, api, kubeconfig)."""
    emu = K.Node(build, tmp, gpus=2, numa="0,0")
    out = subprocess.check_output([emu.emu, "status", "--json"], env=emu.env, text=True)
    uuids = [g["uuid"] for g in json.loads(out)["gpus"]]
    knode = k.Node(os.path.join(tmp, "n"), lib=os.path.join(build, "src/vcuda/libvcuda.so"))
    api = fakeapi.ApiServer(k.SRC, tmp, token="dra-test-token", node=node, timeout=T)
    kc = os.path.join(tmp, "kubeconfig")
    api.kubeconfig(kc)
    return emu, uuids, knode, api, kc


def guarded(tap, body, api, tmp, drv=None):
    """body(); an exception is a failed case with its traceback. Then, whatever happened: drv's
    acceld (when given) killed, the API server stopped, acceld's log when a case failed, tmp
    removed, and the TAP plan printed."""
    try:
        body()
    except Exception as e:  # noqa: BLE001 - a crash is a failed case, with the logs
        tap.ok(False, "no exception", traceback.format_exc() + str(e))
    finally:
        if drv is not None and drv.agent and drv.agent.alive():
            drv.agent.stop(signal.SIGKILL)
        api.stop()
        if drv is not None and tap.failed and drv.agent:
            tap.diag("acceld log:\n" + drv.agent.log_text()[-6000:])
        shutil.rmtree(tmp, ignore_errors=True)
    tap.done()
