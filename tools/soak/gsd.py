"""Helpers of the abuse and drain soak phases: gpustreamd as a child, stubs.

`Daemon` starts the opt build of gpustreamd in a temp dir on a unix socket
and TCP 127.0.0.1 (a free port), waits for its ready file, samples VmRSS and
Threads from /proc, and stops it (SIGTERM, then SIGKILL after a bound).
`stubs(tmp)` generates the Python protocol modules from proto/ with protoc
and grpc_python_plugin (as docs/api.md shows) and returns (pb, rpc).
Only /usr/bin/python3 has grpc; every wait here is bounded.
"""

import atexit
import os
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DAEMON_BIN = os.path.join(REPO, "bazel-out/k8-opt/bin/server/gpustreamd")

_children = []  # Popen objects to kill at exit, whatever happens.


def _kill_children():
    for p in _children:
        if p.poll() is None:
            try:
                p.kill()
                p.wait(timeout=5)
            except Exception:
                pass


atexit.register(_kill_children)


def _on_signal(signum, frame):
    _kill_children()
    sys.exit(128 + signum)


def install_signal_cleanup():
    """SIGINT/SIGTERM to this script kill every child first."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def with_pdeathsig(command):
    """The command run through util-linux's setpriv, which sets
    PR_SET_PDEATHSIG (SIGKILL) and execs it: the child dies when the driver
    does. (A preexec_fn calling prctl is unsafe in a process with threads,
    which the drivers have: their samplers.)"""
    return ["setpriv", "--pdeathsig", "KILL", "--", *command]


def spawn(cmd, nice=None, **kwargs):
    """Popen that dies with this script (with_pdeathsig) and is killed at
    its exit. nice: run it under
    `nice -n NICE` (abusers, so they do not starve the daemon and the good
    client on a small machine)."""
    if nice is not None:
        cmd = ["nice", "-n", str(nice), *cmd]
    p = subprocess.Popen(with_pdeathsig(cmd), **kwargs)
    _children.append(p)
    return p


def build_daemon(skip=False):
    """bazel build //server:gpustreamd (a no-op when it is up to date)."""
    if not skip:
        subprocess.run(["bazel", "build", "//server:gpustreamd"], cwd=REPO,
                       check=True, timeout=1800)
    if not os.access(DAEMON_BIN, os.X_OK):
        raise SystemExit(f"no daemon at {DAEMON_BIN}: bazel build //server:gpustreamd")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stubs(tmp):
    """The protocol modules, generated into tmp/gen once, imported."""
    out = os.path.join(tmp, "gen")
    if not os.path.exists(os.path.join(out, "gpustream/v1/__init__.py")):
        _generate(out)
    if out not in sys.path:
        sys.path.insert(0, out)
    from gpustream.v1 import gpustream_pb2 as pb
    from gpustream.v1 import gpustream_pb2_grpc as rpc
    return pb, rpc


def _generate(out):
    os.makedirs(out, exist_ok=True)
    plugin = subprocess.run(["which", "grpc_python_plugin"], check=True,
                            capture_output=True, text=True).stdout.strip()
    subprocess.run(
        ["protoc", "-I" + os.path.join(REPO, "proto"), "--python_out=" + out,
         "--grpc_python_out=" + out,
         "--plugin=protoc-gen-grpc_python=" + plugin,
         os.path.join(REPO, "proto/gpustream/v1/gpustream.proto")],
        check=True, timeout=60)
    for d in ("gpustream", "gpustream/v1"):
        open(os.path.join(out, d, "__init__.py"), "a").close()


def proc_status(pid):
    """(VmRSS bytes, Threads) of pid, or (0, 0) if it is gone."""
    rss = threads = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
    except OSError:
        pass
    return rss, threads


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class Daemon:
    """gpustreamd on unix:<tmp>/gs.sock and 127.0.0.1:<free port>."""

    def __init__(self, tmp, extra_flags=(), config_text=None, port=None,
                 log_name="gpustreamd.log"):
        self.tmp = tmp
        self.sock_path = os.path.join(tmp, "gs.sock")
        self.unix = "unix:" + self.sock_path
        self.port = port or free_port()
        self.tcp = f"127.0.0.1:{self.port}"
        self.ready = os.path.join(tmp, "gs.ready")
        self.log_path = os.path.join(tmp, log_name)
        self.extra_flags = list(extra_flags)
        self.config = None
        if config_text is not None:
            self.config = os.path.join(tmp, "gs.textproto")
            with open(self.config, "w") as f:
                f.write(config_text)
        self.proc = None

    def start(self, timeout=30):
        if os.path.exists(self.ready):
            os.unlink(self.ready)
        flags = [f"--listen={self.unix},{self.tcp}", "--backend=cpu",
                 f"--ready_file={self.ready}"] + self.extra_flags
        if self.config:
            flags.append(f"--config={self.config}")
        with open(self.log_path, "ab") as log:
            self.proc = spawn([DAEMON_BIN] + flags, stdout=log,
                              stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gpustreamd exited {self.proc.returncode}"
                                   f" at start; see {self.log_path}")
            if os.path.exists(self.ready) and os.path.getsize(self.ready):
                return self
            time.sleep(0.02)
        raise RuntimeError(f"gpustreamd not ready in {timeout} s")

    @property
    def pid(self):
        return self.proc.pid

    def status(self):
        return proc_status(self.proc.pid)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout=15):
        """SIGTERM; returns (exit status, or None if it had to be killed or
        never started; seconds from the signal to the exit)."""
        if self.proc is None:
            return None, 0.0
        if not self.alive():
            return self.proc.returncode, 0.0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            rc = None
        return rc, time.monotonic() - t0

    def log_tail(self, n=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(q / 100.0 * (len(s) - 1)))))
    return s[k]
