"""mountns.py — runs a program with a container's mounts, without a container runtime: in a
private mount namespace (unshare -m) every mount is bind-mounted onto its container path.

A container path missing on the host (/etc/vcuda/config, /etc/ld.so.preload) is made inside an
overlay of its nearest existing ancestor, mounted in that namespace only, so the host's tree never
changes: an empty /etc/vcuda/config made on the host, even for a moment, is the agent's config
for every libvcuda process of every other test running meanwhile."""
import os
import shlex
import subprocess
import tempfile


def _ancestor(path):
    d = path
    while not os.path.lexists(d):
        d = os.path.dirname(d)
    return d


def _overlay_roots(paths):
    """The nearest existing ancestors of the missing paths, none under another."""
    roots = sorted({_ancestor(p) for p in paths if not os.path.lexists(p)}, key=len)
    kept = []
    for r in roots:
        if r == "/":
            raise ValueError("mountns: cannot overlay / to make a mount point under it")
        if not any(r == k or r.startswith(k + "/") for k in kept):
            kept.append(r)
    return kept


def run(mounts, argv, env, timeout=120):
    """mounts: (host_path, container_path, read_only) tuples; argv runs after they are in place.
    Returns the subprocess.CompletedProcess (stdout and stderr captured as text)."""
    q = shlex.quote
    with tempfile.TemporaryDirectory(prefix="accel-mountns-") as tmp:
        script = ["set -e"]
        for i, root in enumerate(_overlay_roots([cp for _, cp, _ in mounts])):
            up, work = os.path.join(tmp, "up%d" % i), os.path.join(tmp, "work%d" % i)
            os.mkdir(up)
            os.mkdir(work)
            script.append("mount -t overlay overlay -o lowerdir=%s,upperdir=%s,workdir=%s %s"
                          % (root, up, work, q(root)))
        for host, cp, ro in mounts:
            if os.path.isdir(host):
                script.append("mkdir -p %s" % q(cp))
            else:
                script.append("mkdir -p %s; [ -e %s ] || : > %s" % (q(os.path.dirname(cp)), q(cp),
                                                                   q(cp)))
            script.append("mount --bind %s %s" % (q(host), q(cp)))
            if ro:
                script.append("mount -o remount,bind,ro %s" % q(cp))
        script.append('exec "$@"')
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               "\n".join(script), "container"] + list(argv), env=env,
                              capture_output=True, text=True, timeout=timeout)


def private():
    """As root: this process (and everything it starts afterwards: acceld, its "containers")
    moves to a private mount namespace, so the tmpfs region dirs acceld mounts under a test's
    temp dir go when the test exits, whatever happens. Call before starting anything. Returns
    False where it cannot (not root): mounts acceld makes then land in the caller's namespace,
    and acceld falls back to plain directories where it may not mount."""
    import ctypes
    if os.geteuid() != 0:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x00020000, 0x4000, 1 << 18
    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    return libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0
