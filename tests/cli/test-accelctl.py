#!/usr/bin/env python3
"""test-accelctl — runs the accelctl binary against the fake libnvidia-ml (tests/inventory/
fake-nvml.c) and a fixture sysfs tree; prints TAP. The JSON is checked with Python's json module.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BUILD = os.environ.get('ACCEL_BUILD_ROOT', 'build')
ACCELCTL = os.path.join(BUILD, 'src', 'cli', 'accelctl')
FAKE = os.path.join(BUILD, 'tests', 'inventory', 'libfake-nvml.so')
EMU_NVML = os.path.join(BUILD, 'src', 'emu', 'libnvidia-ml.so.1')
EMU = os.path.join(BUILD, 'src', 'emu', 'accel-emu')


class Skip(Exception):
    pass

results = []


def case(fn):
    results.append(fn)
    return fn


def run(*args, env_extra=None, gpus=4):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('FAKE_NVML_') and k != 'ACCEL_NVML_LIBRARY'}
    env['FAKE_NVML_GPUS'] = str(gpus)
    env.update(env_extra or {})
    p = subprocess.run([ACCELCTL, *args], env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


@case
def help_and_version():
    rc, out, _ = run('--help')
    expect(rc == 0 and 'gpus' in out, f'--help: rc={rc} out={out!r}')
    rc, out, _ = run('--version')
    expect(rc == 0 and out.startswith('accelctl '), f'--version: rc={rc} out={out!r}')
    rc, out, _ = run('gpus', '--help')
    expect(rc == 0 and '--sysfs-root' in out, f'gpus --help: rc={rc}')


@case
def usage_errors_exit_2():
    rc, _, err = run('no-such-command')
    expect(rc == 2 and "unknown command 'no-such-command'" in err, f'rc={rc} err={err!r}')
    rc, _, err = run()
    expect(rc == 2 and 'usage:' in err, f'no args: rc={rc}')
    rc, _, err = run('gpus', '--bogus', '--nvml', FAKE)
    expect(rc == 2 and 'bad option' in err, f'bad option: rc={rc} err={err!r}')
    rc, _, err = run('gpus', 'extra', '--nvml', FAKE)
    expect(rc == 2, f'extra argument: rc={rc}')


@case
def no_nvml_is_one_clear_line_exit_1():
    rc, out, err = run('gpus', '--nvml', '/nonexistent/libnvidia-ml.so.1')
    expect(rc == 1, f'rc={rc}')
    expect(out == '', f'stdout not empty: {out!r}')
    lines = err.strip().splitlines()
    expect(len(lines) == 1, f'want one line, got {lines!r}')
    expect(lines[0].startswith('accelctl: NVML not found: /nonexistent/libnvidia-ml.so.1'),
           lines[0])
    expect('ACCEL_NVML_LIBRARY' in lines[0], lines[0])


@case
def table_lists_every_gpu():
    rc, out, err = run('gpus', '--nvml', FAKE)
    expect(rc == 0, f'rc={rc} err={err!r}')
    for i in range(4):
        expect(f'GPU-fa4e0000-0000-4000-8000-00000000000{i}' in out, f'GPU {i} missing:\n{out}')
    expect(out.count('healthy') == 4 and 'unhealthy' not in out, out)
    expect('driver 580.65.06, CUDA 13.0, 4 GPUs' in out, out)
    expect('80.00 GiB' in out and '0000:1a:00.0' in out, out)


@case
def json_has_the_documented_fields():
    root = tempfile.mkdtemp()
    try:
        json_checks(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def json_checks(root):
    for bus, node in (('0000:1a:00.0', '-1\n'), ('0000:2a:00.0', '1\n')):
        d = os.path.join(root, 'bus', 'pci', 'devices', bus)
        os.makedirs(d)
        with open(os.path.join(d, 'numa_node'), 'w') as f:
            f.write(node)
    rc, out, err = run('gpus', '--json', '--nvml', FAKE, '--sysfs-root', root,
                       env_extra={'FAKE_NVML_NVLINK': 'pairs'})
    expect(rc == 0, f'rc={rc} err={err!r}')
    gpus = json.loads(out)
    expect(isinstance(gpus, list) and len(gpus) == 4, f'want 4 objects: {out}')
    for i, g in enumerate(gpus):
        for k in ('index', 'uuid', 'name', 'memory_total_bytes', 'numa_node', 'health',
                  'pci_bus_id', 'minor', 'compute_capability', 'mig', 'links'):
            expect(k in g, f'GPU {i} lacks {k}')
        expect(g['index'] == i and g['health'] == 'healthy', g)
        expect(g['memory_total_bytes'] == 80 << 30, g)
        expect(g['compute_capability'] == '9.0' and g['minor'] == i, g)
        expect(len(g['links']) == 3, g['links'])
    expect(gpus[0]['numa_node'] is None, 'sysfs -1 must be null')
    expect(gpus[1]['numa_node'] == 1, 'sysfs value must win')
    expect(gpus[2]['numa_node'] == 1, 'NVML fallback when sysfs has no entry')
    link01 = [l for l in gpus[0]['links'] if l['index'] == 1][0]
    expect(link01['nvlinks'] == 4 and link01['pcie'] == 'PIX', link01)
    link02 = [l for l in gpus[0]['links'] if l['index'] == 2][0]
    expect(link02['nvlinks'] == 0 and link02['pcie'] == 'NODE', link02)


@case
def lost_gpu_is_reported_unhealthy():
    rc, out, err = run('gpus', '--json', '--nvml', FAKE, env_extra={'FAKE_NVML_LOST': '1'})
    expect(rc == 0, f'rc={rc} err={err!r}')
    gpus = json.loads(out)
    expect(len(gpus) == 4, out)
    expect(gpus[1]['health'] == 'unhealthy' and 'lost' in gpus[1]['error'], gpus[1])
    # What could not be read is null, not a made-up value.
    for k in ('uuid', 'name', 'pci_bus_id', 'minor', 'numa_node', 'compute_capability', 'mig'):
        expect(gpus[1][k] is None, f'{k} of the lost GPU: {gpus[1][k]!r}')
    expect(all(g['health'] == 'healthy' and g['error'] is None
               for i, g in enumerate(gpus) if i != 1), out)
    rc, out, _ = run('gpus', '--nvml', FAKE, env_extra={'FAKE_NVML_LOST': '1'})
    expect(rc == 0 and 'unhealthy: nvmlDeviceGetUUID: GPU is lost' in out, out)


@case
def library_from_environment():
    rc, out, err = run('gpus', '--json', gpus=2, env_extra={'ACCEL_NVML_LIBRARY': FAKE})
    expect(rc == 0 and len(json.loads(out)) == 2, f'rc={rc} err={err!r}')


@case
def zero_gpus():
    rc, out, _ = run('gpus', '--json', '--nvml', FAKE, gpus=0)
    expect(rc == 0 and json.loads(out) == [], out)
    rc, out, _ = run('gpus', '--nvml', FAKE, gpus=0)
    expect(rc == 0 and '0 GPUs' in out, out)


@case
def plugin_unreachable_says_what_to_check():
    tmp = tempfile.mkdtemp()
    try:
        missing = os.path.join(tmp, 'none.sock')
        rc, _, err = run('plugin', 'info', '--socket', missing, '--wait', '100ms')
        expect(rc == 1 and 'no socket there' in err and missing in err,
               f'missing socket: rc={rc} err={err!r}')
        import socket
        dead = os.path.join(tmp, 'dead.sock')
        s = socket.socket(socket.AF_UNIX)
        s.bind(dead)
        s.close()  # the file stays; nobody listens
        rc, _, err = run('plugin', 'devices', '--socket', dead, '--wait', '0')
        expect(rc == 1 and 'nothing listens on it' in err, f'dead socket: rc={rc} err={err!r}')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@case
def plugin_wait_for_the_socket():
    """--wait: a socket that appears after accelctl started is waited for (as
    right after `acceld &`). The listener here is no gRPC server: it accepts
    and never answers, so accelctl gets past connecting and its call runs
    into --timeout, which is not the 'no socket there' of a missing socket."""
    import socket
    import threading
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, 'late.sock')
        env = {k: v for k, v in os.environ.items() if k != 'ACCEL_NVML_LIBRARY'}
        p = subprocess.Popen([ACCELCTL, 'plugin', 'info', '--socket', path, '--wait', '60s',
                              '--timeout', '1s'], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.listen(8)
        s.settimeout(60)

        held = []

        def serve():
            try:
                while True:
                    held.append(s.accept()[0])
            except OSError:
                pass
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        _, err = p.communicate(timeout=60)
        s.close()
        for c in held:
            c.close()
        expect(p.returncode == 1 and 'GetDevicePluginOptions: DEADLINE_EXCEEDED' in err,
               f'rc={p.returncode} err={err!r}')
        rc, _, err = run('plugin', 'info', '--socket', path, '--wait', 'soon')
        expect(rc == 2 and '--wait' in err, f'bad --wait: rc={rc} err={err!r}')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def emu_machine(tmp, *init_args):
    if not (os.access(EMU_NVML, os.R_OK) and os.access(EMU, os.X_OK)):
        raise Skip('emulator not built')
    state = os.path.join(tmp, 'state')
    p = subprocess.run([EMU, '--state', state, 'init', *init_args], capture_output=True,
                       text=True, timeout=60)
    expect(p.returncode == 0, f'accel-emu init: {p.stderr}')
    env = {'ACCEL_EMU_STATE': state, 'ACCEL_NVML_LIBRARY': EMU_NVML}
    return state, state + '.d/sysfs', env


@case
def emulated_four_gpus_json():
    tmp = tempfile.mkdtemp()
    try:
        _, sysfs, env = emu_machine(tmp, '--gpus', '4', '--numa', '0,0,1,1', '--nvlink', 'pairs')
        rc, out, err = run('gpus', '--json', '--sysfs-root', sysfs, env_extra=env)
        expect(rc == 0, f'rc={rc} err={err!r}')
        gpus = json.loads(out)
        expect(len(gpus) == 4, out)
        expect([g['numa_node'] for g in gpus] == [0, 0, 1, 1], out)
        expect(all(g['health'] == 'healthy' for g in gpus), out)
        expect(len({g['uuid'] for g in gpus}) == 4, 'UUIDs must differ')
        link01 = [l for l in gpus[0]['links'] if l['index'] == 1][0]
        expect(link01['nvlinks'] > 0, link01)
        rc, out, err = run('gpus', '--sysfs-root', sysfs, env_extra=env)
        expect(rc == 0 and all(g['uuid'] in out for g in gpus), out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@case
def emulated_lost_gpu():
    tmp = tempfile.mkdtemp()
    try:
        state, sysfs, env = emu_machine(tmp, '--gpus', '4')
        p = subprocess.run([EMU, '--state', state, 'lose', '1'], capture_output=True, text=True,
                           timeout=60)
        expect(p.returncode == 0, f'accel-emu lose: {p.stderr}')
        rc, out, err = run('gpus', '--json', '--sysfs-root', sysfs, env_extra=env)
        expect(rc == 0, f'rc={rc} err={err!r}')
        gpus = json.loads(out)
        expect(len(gpus) == 4, out)
        expect(gpus[1]['health'] == 'unhealthy' and gpus[1]['error'], gpus[1])
        expect(all(g['health'] == 'healthy' for i, g in enumerate(gpus) if i != 1), out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    if not os.access(ACCELCTL, os.X_OK):
        print(f'1..0 # SKIP {ACCELCTL} not built')
        return 77
    print(f'1..{len(results)}')
    failed = 0
    for n, fn in enumerate(results, 1):
        try:
            fn()
            print(f'ok {n} - {fn.__name__}')
        except Skip as e:
            print(f'ok {n} - {fn.__name__} # SKIP {e}')
        except Exception as e:  # noqa: BLE001 - report every failure as TAP
            failed += 1
            for line in str(e).splitlines() or ['']:
                print(f'# {line}')
            print(f'not ok {n} - {fn.__name__}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
