"""The load and kill-storm phases' harness (load.py): a gpustreamd on a
private unix socket with a tenant for the clients and an admin tenant,
watched through gpustreamctl --json and /proc, and soak_client processes."""

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import gsd  # tools/soak/gsd.py: /proc readings shared with abuse and drain.

CLIENT_TOKEN = "soak-client-token"
ADMIN_TOKEN = "soak-admin-token"
CLIENT_TENANT = "soak"


def log(*args):
    print(*args, flush=True)


def fail(message):
    raise SoakFailure(message)


class SoakFailure(Exception):
    pass


def wait_until(predicate, timeout_s, period_s=0.2):
    """Polls `predicate` until it returns a true value or `timeout_s` passes;
    returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(period_s)


def _sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


class Daemon:
    """One gpustreamd process and its private folder. Use as a context
    manager: the daemon is stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, bin_dir, extra_flags=(), max_sessions=4096):
        self.bin_dir = bin_dir
        self.dir = tempfile.mkdtemp(prefix="gs-soak-")
        self.socket = os.path.join(self.dir, "gs.sock")
        self.target = "unix:" + self.socket
        self.log_path = os.path.join(self.dir, "gpustreamd.log")
        self.ctl = os.path.join(bin_dir, "tools/gpustreamctl/gpustreamctl")
        config = os.path.join(self.dir, "config.txtpb")
        with open(config, "w") as f:
            f.write(
                f"limits {{ max_sessions: {max_sessions} }}\n"
                f"tenants {{ name: '{CLIENT_TENANT}' "
                f"token_sha256: '{_sha256(CLIENT_TOKEN)}' }}\n"
                f"tenants {{ name: 'ops' admin: true "
                f"token_sha256: '{_sha256(ADMIN_TOKEN)}' }}\n")
        ready = os.path.join(self.dir, "ready")
        with open(self.log_path, "w") as out:
            self.proc = subprocess.Popen(gsd.with_pdeathsig(
                [os.path.join(bin_dir, "server/gpustreamd"), "--backend=cpu",
                 "--config=" + config, "--listen=" + self.target,
                 "--ready_file=" + ready, *extra_flags]),
                stdout=out, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        if not wait_until(lambda: os.path.exists(ready) and
                          os.path.getsize(ready) > 0 or
                          self.proc.poll() is not None, 30, 0.05):
            self.stop()
            fail("gpustreamd did not become ready in 30 s")
        self.check_alive()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def remove_dir(self, success):
        """Stops the daemon; removes its folder (logs, client outputs) after
        a success, keeps it after a failure and prints where it is."""
        self.stop()
        if success:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            log(f"(daemon folder kept: {self.dir})")

    def check_alive(self):
        if self.proc.poll() is not None:
            fail(f"gpustreamd exited with {self.proc.returncode}; log "
                 f"{self.log_path}:\n{self.log_tail()}")

    def log_tail(self, lines=20):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def stop(self, timeout_s=30):
        """SIGTERM, bounded; returns the exit code (SIGKILL past it: -9)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def ctl_json(self, *command, timeout_s=20):
        """gpustreamctl --json as the admin; the parsed document."""
        env = dict(os.environ, GPUSTREAM_TOKEN=ADMIN_TOKEN)
        env.pop("GPUSTREAM_TARGET", None)
        try:
            out = subprocess.run(
                [self.ctl, "--target=" + self.target, "--json", *command],
                env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            fail(f"gpustreamctl {' '.join(command)} took over {timeout_s} s")
        if out.returncode != 0:
            self.check_alive()
            fail(f"gpustreamctl {' '.join(command)} exited "
                 f"{out.returncode}: {out.stderr.strip()}")
        return json.loads(out.stdout)

    def sessions(self):
        return self.ctl_json("sessions")["sessions"]

    def counters(self):
        """Everything that must come back after clients vanish: sessions and
        their objects, memory, commands in flight, staged bytes."""
        stats = self.ctl_json("stats")
        sessions = self.sessions()
        devices = self.ctl_json("devices")["devices"]
        c = {"sessions_listed": len(sessions)}
        for field in ("queues", "events", "flags", "buffers", "memoryBytes",
                      "inflightCommands", "openStreams"):
            c["listed_" + field] = sum(int(s.get(field, 0)) for s in sessions)
        for t in stats["tenants"]:
            for field in ("sessions", "queues", "memoryBytes",
                          "inflightCommands", "stagedBytes"):
                c[f"tenant_{t['tenant']}_{field}"] = int(t[field])
        for d in stats["devices"]:
            c[f"device{d['deviceId']}_memoryUsedBytes"] = int(
                d["memoryUsedBytes"])
        for d in devices:
            c[f"device{d['id']}_freeMemoryBytes"] = int(d["freeMemoryBytes"])
        return c

    def proc_status(self):
        """(VmRSS in KiB, Threads) of the daemon, from /proc."""
        rss, threads = gsd.proc_status(self.pid)
        if threads == 0:  # Gone: says why, if it died.
            self.check_alive()
        return rss // 1024, threads

    def thread_names(self):
        names = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            with contextlib.suppress(FileNotFoundError):
                with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                names[name] = names.get(name, 0) + 1
        return names


class Sampler:
    """Samples the daemon's RSS and thread count every `period_s` on a thread
    of its own, printing each sample; samples are (t, rss_kib, threads)."""

    def __init__(self, daemon, label, period_s=0.5, quiet=False):
        self.daemon, self.label, self.period_s = daemon, label, period_s
        self.quiet = quiet
        self.samples = []
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            rss, threads = self.daemon.proc_status()
            t = time.monotonic() - self._start
            self.samples.append((t, rss, threads))
            if not self.quiet:
                log(f"  [{self.label} t={t:6.1f}s] rss={rss / 1024:7.1f} MiB "
                    f"threads={threads}")
            self._stop.wait(self.period_s)

    def stop(self):
        self._stop.set()
        self._thread.join(5)
        return self.samples


def client_command(bin_dir, daemon, name, seed, ops, pace_us=0,
                   lease_seconds=0, deadline_s=600):
    return [os.path.join(bin_dir, "tools/soak/soak_client"),
            "--target=" + daemon.target, "--token=" + CLIENT_TOKEN,
            "--name=" + name, f"--seed={seed}", f"--ops={ops}",
            f"--pace_us={pace_us}", f"--lease_seconds={lease_seconds}",
            f"--deadline_s={deadline_s}"]


class Client:
    """One soak_client process; its stdout and stderr go to files in the
    daemon's folder, so the driver holds no descriptor per client."""

    def __init__(self, daemon, command, name):
        self.name = name
        self.out_path = os.path.join(daemon.dir, name + ".out")
        with open(self.out_path, "w") as out:
            self.proc = subprocess.Popen(gsd.with_pdeathsig(command), stdout=out,
                                         stderr=subprocess.STDOUT)
        self.started = time.monotonic()

    def summary(self):
        """The client's JSON summary line, or None."""
        with open(self.out_path, errors="replace") as f:
            for line in f:
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        return json.loads(line)
        return None

    def ready(self):
        """True once the client printed READY (its session and objects are
        set up: soak_client.cc prints it after Setup())."""
        with open(self.out_path, "rb") as f:
            return b"READY\n" in f.read(65536)

    def output(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()[-2000:]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)

    def wait(self, timeout_s):
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
            return None


def reap_all(clients):
    """SIGKILLs and reaps every client still running (cleanup path)."""
    for c in clients:
        c.kill()
    for c in clients:
        with contextlib.suppress(Exception):
            c.proc.wait(10)


def install_signal_cleanup():
    """SIGTERM/SIGINT/SIGHUP end the driver through its finally blocks (which
    kill the clients and stop the daemon) instead of dying on the spot."""
    def handler(signum, _frame):
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, handler)


def fd_limit():
    import resource
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def mib(kib):
    return kib / 1024.0


if __name__ == "__main__":
    sys.exit("harness.py is load.py's library; run load.py")
