"""Fixtures: gpustreamd as a real child process, clients and sessions.

The daemon binary is found at $GPUSTREAMD, else in the Bazel runfiles
(server/gpustreamd), else at bazel-bin/server/gpustreamd of the repository.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Iterator, List, Optional

import pytest

import gpustream

REPO_ROOT = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def runfile(relative: str) -> str:
    """A file of the repository: in the Bazel runfiles when run by Bazel,
    else in the source tree (generated files under bazel-bin)."""
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        path = os.path.join(srcdir, "gpustream", relative)
        if os.path.exists(path):
            return path
    for root in (REPO_ROOT, os.path.join(REPO_ROOT, "bazel-bin")):
        path = os.path.join(root, relative)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{relative} not found (build it with bazel)")


def daemon_binary() -> str:
    return os.environ.get("GPUSTREAMD") or runfile("server/gpustreamd")


class Daemon:
    """One gpustreamd on a fresh unix socket and a free port of 127.0.0.1.

    A short directory under /tmp: unix socket paths must fit in 108 bytes.
    """

    def __init__(self, extra_args: Optional[List[str]] = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="gs-py-", dir="/tmp")
        self.log_path = os.path.join(self.dir, "log")
        ready = os.path.join(self.dir, "ready")
        argv = [daemon_binary(),
                f"--listen=unix:{self.dir}/gs.sock,127.0.0.1:0",
                f"--ready_file={ready}", "--backend=cpu"]
        argv += extra_args or []
        # Lock-order checks on even in an optimized daemon.
        env = dict(os.environ, GPUSTREAM_CHECK_LOCK_ORDER="1")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(argv, stdout=log,
                                            stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        lines: List[str] = []
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gpustreamd exited at start: {self.log()}")
            if os.path.exists(ready):
                with open(ready) as f:
                    lines = f.read().split()
                if len(lines) == 2:
                    break
            time.sleep(0.01)
        else:
            self.stop()
            raise RuntimeError(
                f"gpustreamd did not become ready: {self.log()}")
        self.unix_target, self.tcp_target = lines

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self) -> None:
        """Stops the daemon; fails if it crashed or a sanitizer reported.

        Under --config=asan/tsan the daemon is instrumented and aborts on its
        first report: the tests' later calls would only see UNAVAILABLE.
        """
        crashed = self.process.poll() in (-signal.SIGSEGV, -signal.SIGABRT,
                                          66)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(30)
        log = self.log()
        shutil.rmtree(self.dir, ignore_errors=True)
        if crashed or "Sanitizer" in log:
            raise AssertionError(
                f"gpustreamd crashed or reported a sanitizer error:\n{log}")


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    # A launch running past 2 s fails its queue (the sticky-error test).
    d = Daemon(["--kernel_time_limit_ms=2000"])
    yield d
    d.stop()


@pytest.fixture(scope="session")
def client(daemon: Daemon) -> Iterator[gpustream.Client]:
    with gpustream.connect(daemon.unix_target) as c:
        yield c


@pytest.fixture(scope="session")
def tcp_client(daemon: Daemon) -> Iterator[gpustream.Client]:
    with gpustream.connect(daemon.tcp_target) as c:
        yield c


@pytest.fixture
def session(client: gpustream.Client) -> Iterator[gpustream.Session]:
    with client.open_session(client_name="pytest") as s:
        yield s


def wait_until(predicate, timeout: float = 10.0, what: str = "") -> None:
    """Polls ``predicate`` every 10 ms for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
