#!/usr/bin/env python3
"""test-nvml-health — the emulated NVML's health and power entry points, called through ctypes
as any NVML client calls them, follow `accel-emu set` / `accel-emu ecc`:
nvmlDeviceGetCurrentClocksEventReasons, GetEccMode, GetTotalEnergyConsumption (integrates the
power draw), GetEnforcedPowerLimit, GetRemappedRows, GetPcieReplayCounter, and volatile vs
aggregate ECC counters kept apart. Bad values exit 2 and change nothing. Prints TAP."""
import ctypes
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from taptest import case, check, run  # noqa: E402

# Sanitized build: the ASan runtime must be loaded before the sanitized library ctypes opens.
if os.environ.get("NVML_HEALTH_ASAN_RT") and not os.environ.get("LD_PRELOAD"):
    os.execve(sys.executable, [sys.executable] + sys.argv,
              dict(os.environ, LD_PRELOAD=os.environ["NVML_HEALTH_ASAN_RT"],
                   ASAN_OPTIONS="detect_leaks=0"))

BUILD = os.environ.get("ACCEL_BUILD_ROOT", "build")
EMU = os.path.join(BUILD, "src", "emu", "accel-emu")
TMP = tempfile.mkdtemp(prefix="test-nvml-health-")
STATE = os.path.join(TMP, "machine")
os.environ["ACCEL_EMU_STATE"] = STATE




def emu(*args, rc=0):
    p = subprocess.run([EMU, "--state", STATE] + list(args), capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == rc, f"accel-emu {args}: rc {p.returncode}: {p.stderr}")
    return p


emu("init", "--gpus", "2")
nvml = ctypes.CDLL(os.path.join(BUILD, "src", "emu", "libnvidia-ml.so.1"))
check(nvml.nvmlInit_v2() == 0, "nvmlInit_v2")
U = ctypes.c_uint
ULL = ctypes.c_ulonglong


def dev(i):
    h = ctypes.c_void_p()
    check(nvml.nvmlDeviceGetHandleByIndex_v2(U(i), ctypes.byref(h)) == 0, f"handle {i}")
    return h


def call(name, i, *types):
    """Calls nvml<name>(device i, &out...) and returns the outputs."""
    outs = [t() for t in types]
    r = getattr(nvml, name)(dev(i), *[ctypes.byref(o) for o in outs])
    check(r == 0, f"{name}: NVML error {r}")
    return [o.value for o in outs]


@case("clocks event reasons follow set clocks_event_reasons (hex and decimal), per GPU")
def _():
    check(call("nvmlDeviceGetCurrentClocksEventReasons", 0, ULL) == [0], "fresh GPU throttled")
    emu("set", "0", "clocks_event_reasons=0x44")
    check(call("nvmlDeviceGetCurrentClocksEventReasons", 0, ULL) == [0x44], "0x44")
    check(call("nvmlDeviceGetCurrentClocksEventReasons", 1, ULL) == [0], "GPU 1 changed")
    emu("set", "0", "clocks_event_reasons=8")
    check(call("nvmlDeviceGetCurrentClocksEventReasons", 0, ULL) == [8], "8")


@case("ECC mode on by default; set ecc_mode=off shows disabled (current and pending)")
def _():
    check(call("nvmlDeviceGetEccMode", 1, U, U) == [1, 1], "default enabled")
    emu("set", "1", "ecc_mode=off")
    check(call("nvmlDeviceGetEccMode", 1, U, U) == [0, 0], "disabled")
    emu("set", "1", "ecc_mode=on")


@case("enforced power limit is the power limit set")
def _():
    emu("set", "0", "power_limit=350")
    check(call("nvmlDeviceGetEnforcedPowerLimit", 0, U) == [350000], "350 W in mW")


@case("energy counter: set energy=J restarts it; it grows by power x time, never backwards")
def _():
    emu("set", "1", "power=500", "energy=1000")
    t0 = time.monotonic()
    e0 = call("nvmlDeviceGetTotalEnergyConsumption", 1, ULL)[0]
    check(e0 >= 1000000, f"energy {e0} mJ below the 1000 J set")
    # wait (bounded) until the counter has moved: 500 W gives 0.5 J per ms
    end = time.monotonic() + 10
    e1 = e0
    while e1 <= e0 and time.monotonic() < end:
        time.sleep(0.02)
        e1 = call("nvmlDeviceGetTotalEnergyConsumption", 1, ULL)[0]
    t1 = time.monotonic()
    check(e1 > e0, "energy did not grow at 500 W")
    # never more than 500 W over the elapsed wall time (plus the set-to-read gap before t0)
    check(e1 - 1000000 <= 500 * (t1 - t0 + 1.0) * 1000, f"energy {e1} mJ grew faster than 500 W")
    emu("set", "1", "power=0")
    e2 = call("nvmlDeviceGetTotalEnergyConsumption", 1, ULL)[0]
    e3 = call("nvmlDeviceGetTotalEnergyConsumption", 1, ULL)[0]
    check(e2 >= e1 and e3 == e2, f"at 0 W the counter moved or went back: {e1} {e2} {e3}")


@case("remapped rows and pending/failure flags follow set")
def _():
    check(call("nvmlDeviceGetRemappedRows", 0, U, U, U, U) == [0, 0, 0, 0], "fresh")
    emu("set", "0", "remapped_corr=3", "remapped_unc=1", "remap_pending=1", "remap_failure=0")
    check(call("nvmlDeviceGetRemappedRows", 0, U, U, U, U) == [3, 1, 1, 0], "after set")


@case("PCIe replay counter follows set pcie_replays")
def _():
    emu("set", "1", "pcie_replays=4242")
    check(call("nvmlDeviceGetPcieReplayCounter", 1, U) == [4242], "4242")
    check(call("nvmlDeviceGetPcieReplayCounter", 0, U) == [0], "GPU 0 changed")


def nvlink_err(i, link, counter):
    v = ULL()
    r = nvml.nvmlDeviceGetNvLinkErrorCounter(dev(i), U(link), U(counter), ctypes.byref(v))
    return r, v.value


@case("NVLink error counters follow set nvlink_*: on the link set, 0 on the others")
def _():
    check(nvlink_err(0, 0, 0) == (0, 0), f"fresh link 0 replay: {nvlink_err(0, 0, 0)}")
    emu("set", "0", "nvlink_link=1", "nvlink_replay=7", "nvlink_recovery=2",
        "nvlink_crc_flit=11", "nvlink_crc_data=13", "nvlink_ecc_data=17")
    got = [nvlink_err(0, 1, c) for c in range(5)]
    check(got == [(0, 7), (0, 2), (0, 11), (0, 13), (0, 17)], f"link 1 counters: {got}")
    check(nvlink_err(0, 0, 0) == (0, 0), "link 0 should read 0")
    check(nvlink_err(1, 1, 0) == (0, 0), "GPU 1 changed")
    check(nvlink_err(0, 1, 5)[0] == 2, "counter 5 should be INVALID_ARGUMENT")
    check(nvlink_err(0, 18, 0)[0] == 2, "link 18 (past NVML's 18 links) should be INVALID_ARGUMENT")
    p = emu("set", "0", "nvlink_link=18", rc=2)
    check("nvlink_link" in p.stderr, p.stderr)
    p = emu("set", "0", "nvlink_bogus=1", rc=2)
    check("unknown setting" in p.stderr, p.stderr)


def ecc(i, typ, counter):
    v = ULL()
    r = nvml.nvmlDeviceGetTotalEccErrors(dev(i), U(typ), U(counter), ctypes.byref(v))
    check(r == 0, f"nvmlDeviceGetTotalEccErrors: {r}")
    return v.value


@case("volatile and aggregate ECC counters are distinct: clearing volatile keeps aggregate")
def _():
    emu("ecc", "0", "single")
    emu("ecc", "0", "single")
    emu("ecc", "0", "double")
    check([ecc(0, 0, 0), ecc(0, 1, 0), ecc(0, 0, 1), ecc(0, 1, 1)] == [2, 1, 2, 1], "counts")
    emu("set", "0", "ecc_volatile=clear")
    emu("ecc", "0", "double")
    got = [ecc(0, 0, 0), ecc(0, 1, 0), ecc(0, 0, 1), ecc(0, 1, 1)]
    check(got == [0, 1, 2, 2], f"volatile corr/unc, aggregate corr/unc: {got}")


@case("bad values exit 2, name the key and change nothing")
def _():
    before = open(STATE, "rb").read()
    for kv in ("clocks_event_reasons=0x", "clocks_event_reasons=0x-5",
               "clocks_event_reasons=0x 5", "clocks_event_reasons=zz", "energy=-1", "ecc_mode=maybe",
               "remapped_corr=70000", "remap_pending=2", "pcie_replays=4294967296",
               "ecc_volatile=0"):
        p = emu("set", "0", "remapped_corr=9", kv, rc=2)
        check(kv.split("=")[0] in p.stderr, f"{kv}: {p.stderr!r}")
    check(call("nvmlDeviceGetRemappedRows", 0, U, U, U, U)[0] == 3, "a refused set changed rows")
    check(len(open(STATE, "rb").read()) == len(before), "state file size changed")


run(nvml.nvmlShutdown)
