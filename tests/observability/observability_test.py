"""The daemon as operators watch it: /metrics scraped over HTTP and parsed
with prometheus_client's parser, and its structured log, against a real
gpustreamd process with tenants, driven by the Python client.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import threading
import unittest
import urllib.error
import urllib.request
from typing import Dict, List, Tuple

import grpc
from prometheus_client.parser import text_string_to_metric_families

import gpustream
from gpustream.v1 import gpustream_pb2 as pb
from gpustream.v1 import gpustream_pb2_grpc as pb_grpc

ALICE_TOKEN = "alice-token-7f3a9c"
OPS_TOKEN = "ops-token-51bd02"


def runfile(relative: str) -> str:
    srcdir = os.environ.get("TEST_SRCDIR", "")
    for root in (os.path.join(srcdir, "gpustream"), os.getcwd(),
                 os.path.join(os.getcwd(), "bazel-bin")):
        path = os.path.join(root, relative)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(relative)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Daemon:
    """gpustreamd with two tenants, JSON logs and metrics on a free port."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="gs-obs-", dir="/tmp")
        config = os.path.join(self.dir, "config.textproto")
        with open(config, "w") as f:
            f.write(f'tenants {{ name: "alice" token_sha256: "{sha256(ALICE_TOKEN)}"'
                    ' weight: 2 quota { device_memory_bytes: 67108864'
                    ' max_sessions: 4 } }\n'
                    f'tenants {{ name: "ops" token_sha256: "{sha256(OPS_TOKEN)}"'
                    ' admin: true }\n')
        self.log_path = os.path.join(self.dir, "log")
        ready = os.path.join(self.dir, "ready")
        self.target = f"unix:{self.dir}/gs.sock"
        argv = [runfile("server/gpustreamd"), f"--listen={self.target}",
                f"--ready_file={ready}", "--backend=cpu",
                f"--config={config}", "--metrics_listen=127.0.0.1:0",
                "--log_format=json", "--log_level=debug"]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(argv, stdout=log,
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gpustreamd did not start: {self.log()}")
            time.sleep(0.01)
        listening = [e for e in self.events() if e["event"] == "metrics_listening"]
        self.metrics_url = f"http://{listening[0]['address']}/metrics"

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def events(self) -> List[dict]:
        """Every log line, each parsed as one JSON object."""
        return [json.loads(line) for line in self.log().splitlines() if line]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)
        return self.process.returncode

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


Sample = Tuple[str, Dict[str, str], float]


def scrape(url: str) -> Dict[str, object]:
    """name -> family, parsed by prometheus_client (which drops _total from
    counter family names)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families, family: str, sample: str, **labels) -> float:
    for s in families[family].samples:
        if s.name == sample and all(s.labels.get(k) == v
                                    for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no {sample}{labels} in {families[family].samples}")


class ObservabilityTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        cls.daemon = Daemon()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.daemon.remove()

    def work(self, client_name: str, launches: int) -> str:
        """One session of `alice`: fills and reads back a buffer; returns the
        session's secret id (which must never reach the log)."""
        with gpustream.connect(self.daemon.target, token=ALICE_TOKEN) as client:
            with client.open_session(client_name=client_name) as session:
                buf = session.allocate(4 * 1024)
                queue = session.default_queue
                for i in range(launches):
                    queue.launch("samples", "fill_u32", 4, 256, buf, i, 1024)
                data = buf.read()
                queue.synchronize()
                self.assertEqual(bytes(data[:4]),
                                 (launches - 1).to_bytes(4, "little"))
                return session.id

    def admin_stub(self, token: str) -> Tuple[pb_grpc.AdminStub, tuple]:
        channel = grpc.insecure_channel(self.daemon.target)
        self.addCleanup(channel.close)
        return pb_grpc.AdminStub(channel), (("authorization",
                                             f"Bearer {token}"),)

    def test_metrics_count_calls_streams_and_tenant_work(self) -> None:
        before = scrape(self.daemon.metrics_url)
        completed_before = value(before, "gpustream_tenant_commands_completed",
                                 "gpustream_tenant_commands_completed_total",
                                 tenant="alice")
        self.work("metrics-job", launches=20)
        # A wrong token: UNAUTHENTICATED at the handshake (GetVersion),
        # counted under its method.
        with self.assertRaises(gpustream.Error) as refused:
            with gpustream.connect(self.daemon.target, token="wrong") as c:
                c.open_session()
        self.assertEqual(refused.exception.code, grpc.StatusCode.UNAUTHENTICATED)

        # A call is counted once its status has gone out, which the client
        # may see first: scrape until the refused call shows (at most 5 s).
        deadline = time.monotonic() + 5
        while True:
            after = scrape(self.daemon.metrics_url)
            if any(s.name == "gpustream_rpc_requests_total" and
                   s.labels.get("method") == "GetVersion" and
                   s.labels.get("code") == "UNAUTHENTICATED"
                   for s in after["gpustream_rpc_requests"].samples):
                break
            if time.monotonic() > deadline:
                break  # The assertion below says what is missing.
            time.sleep(0.05)
        rpc = "gpustream_rpc_requests"
        self.assertEqual(after[rpc].type, "counter")
        self.assertGreaterEqual(
            value(after, rpc, "gpustream_rpc_requests_total",
                  service="gpustream.v1.GpuStream", method="OpenSession",
                  code="OK"), 1)
        self.assertGreaterEqual(
            value(after, rpc, "gpustream_rpc_requests_total",
                  service="gpustream.v1.GpuStream", method="GetVersion",
                  code="UNAUTHENTICATED"), 1)
        hist = "gpustream_rpc_duration_seconds"
        self.assertEqual(after[hist].type, "histogram")
        count = value(after, hist, "gpustream_rpc_duration_seconds_count",
                      method="OpenSession")
        inf = value(after, hist, "gpustream_rpc_duration_seconds_bucket",
                    method="OpenSession", le="+Inf")
        self.assertEqual(count, inf)
        self.assertGreaterEqual(count, 2)
        self.assertGreater(value(after, hist, "gpustream_rpc_duration_seconds_sum",
                                 method="OpenSession"), 0)
        # 20 launches, a read and a synchronize went over one Submit stream.
        self.assertGreaterEqual(
            value(after, "gpustream_submit_streams",
                  "gpustream_submit_streams_total"), 1)
        self.assertGreaterEqual(
            value(after, "gpustream_submit_commands",
                  "gpustream_submit_commands_total", code="OK"), 20)
        self.assertGreaterEqual(
            value(after, "gpustream_tenant_commands_completed",
                  "gpustream_tenant_commands_completed_total", tenant="alice")
            - completed_before, 20)
        self.assertGreater(
            value(after, "gpustream_tenant_busy_seconds",
                  "gpustream_tenant_busy_seconds_total", tenant="alice"), 0)
        self.assertEqual(
            value(after, "gpustream_tenant_weight", "gpustream_tenant_weight",
                  tenant="alice"), 2)
        self.assertEqual(
            value(after, "gpustream_tenant_quota_limit",
                  "gpustream_tenant_quota_limit", tenant="alice",
                  resource="memory_bytes"), 64 << 20)
        self.assertGreater(
            value(after, "gpustream_device_memory_total_bytes",
                  "gpustream_device_memory_total_bytes", device="0",
                  backend="cpu"), 0)
        # The session was closed: nothing of alice's is held any more.
        self.assertEqual(value(after, "gpustream_tenant_sessions",
                               "gpustream_tenant_sessions", tenant="alice"), 0)
        self.assertEqual(value(after, "gpustream_tenant_memory_bytes",
                               "gpustream_tenant_memory_bytes", tenant="alice"),
                         0)

    def test_only_metrics_path_answers_and_head_is_get(self) -> None:
        base = self.daemon.metrics_url[:-len("/metrics")]
        for path in ("/metricsx", "/metrics/x", "/", "/metric"):
            with self.assertRaises(urllib.error.HTTPError) as missing:
                urllib.request.urlopen(base + path, timeout=10)
            self.assertEqual(missing.exception.code, 404, path)
        with urllib.request.urlopen(self.daemon.metrics_url,
                                    timeout=10) as response:
            get_type = response.headers["Content-Type"]
        head = urllib.request.Request(self.daemon.metrics_url, method="HEAD")
        with urllib.request.urlopen(head, timeout=10) as response:
            self.assertEqual(response.status, 200)
            self.assertEqual(response.headers["Content-Type"], get_type)
            self.assertEqual(response.read(), b"")
        # A query string is still /metrics.
        with urllib.request.urlopen(self.daemon.metrics_url + "?x=1",
                                    timeout=10) as response:
            self.assertIn(b"gpustream_rpc_requests_total", response.read())

    def test_streams_whose_client_vanished_count_as_cancelled(self) -> None:
        rpc = "gpustream_rpc_requests"

        def cancelled(families, method: str) -> float:
            try:
                return value(families, rpc, "gpustream_rpc_requests_total",
                             method=method, code="CANCELLED")
            except AssertionError:
                return 0

        before = scrape(self.daemon.metrics_url)
        channel = grpc.insecure_channel(self.daemon.target)
        self.addCleanup(channel.close)
        stub = pb_grpc.GpuStreamStub(channel)
        auth = (("authorization", f"Bearer {ALICE_TOKEN}"),)
        session = stub.OpenSession(pb.OpenSessionRequest(client_name="gone"),
                                   metadata=auth).session_id
        # Each stream is opened, seen by the daemon, then cancelled by its
        # client: the daemon finishes it OK on its side, the client never
        # gets that status.
        release = threading.Event()
        self.addCleanup(release.set)

        def requests():  # The first request, then an open, idle stream.
            yield pb.SubmitRequest(session_id=session)
            release.wait(30)

        submit = stub.Submit(requests(), metadata=auth)
        watch = stub.WatchNotifications(
            pb.WatchNotificationsRequest(session_id=session), metadata=auth)
        # Both streams reached the daemon (its open-stream gauges say so)
        # before they are cancelled.
        deadline = time.monotonic() + 10
        while True:
            now = scrape(self.daemon.metrics_url)
            if (value(now, "gpustream_submit_streams_open",
                      "gpustream_submit_streams_open") >= 1 and
                    value(now, "gpustream_notification_streams_open",
                          "gpustream_notification_streams_open") >= 1):
                break
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        submit.cancel()
        watch.cancel()
        deadline = time.monotonic() + 5
        while True:
            after = scrape(self.daemon.metrics_url)
            if (cancelled(after, "Submit") > cancelled(before, "Submit") and
                    cancelled(after, "WatchNotifications") >
                    cancelled(before, "WatchNotifications")):
                break
            self.assertLess(time.monotonic(), deadline,
                            [s for s in after[rpc].samples
                             if s.labels.get("method") in
                             ("Submit", "WatchNotifications")])
            time.sleep(0.05)
        stub.CloseSession(pb.CloseSessionRequest(session_id=session),
                          metadata=auth)

    def test_live_session_shows_in_gauges(self) -> None:
        with gpustream.connect(self.daemon.target, token=ALICE_TOKEN) as client:
            with client.open_session(client_name="gauge-job") as session:
                session.allocate(1 << 20)
                families = scrape(self.daemon.metrics_url)
                self.assertEqual(value(families, "gpustream_tenant_sessions",
                                       "gpustream_tenant_sessions",
                                       tenant="alice"), 1)
                self.assertEqual(value(families, "gpustream_tenant_memory_bytes",
                                       "gpustream_tenant_memory_bytes",
                                       tenant="alice"), 1 << 20)
                self.assertAlmostEqual(
                    value(families, "gpustream_tenant_quota_usage_ratio",
                          "gpustream_tenant_quota_usage_ratio", tenant="alice",
                          resource="memory_bytes"), 1 / 64)

    def test_log_has_lifecycle_and_admin_events_and_no_secrets(self) -> None:
        secret = self.work("log-job", launches=2)
        stub, metadata = self.admin_stub(OPS_TOKEN)
        sessions = stub.ListSessions(pb.ListSessionsRequest(), metadata=metadata)
        self.assertEqual(len(sessions.sessions), 0)
        stub.GetStats(pb.GetStatsRequest(), metadata=metadata)
        with self.assertRaises(grpc.RpcError) as denied:
            alice, alice_metadata = self.admin_stub(ALICE_TOKEN)
            alice.GetStats(pb.GetStatsRequest(), metadata=alice_metadata)
        self.assertEqual(denied.exception.code(),
                         grpc.StatusCode.PERMISSION_DENIED)
        with self.assertRaises(grpc.RpcError) as missing:
            stub.KillSession(pb.KillSessionRequest(public_id="s-nope"),
                             metadata=metadata)
        self.assertEqual(missing.exception.code(), grpc.StatusCode.NOT_FOUND)
        # A call naming a session id that does not exist: its message
        # carries the id, the log must not.
        forged = "0123456789abcdef" * 2
        channel = grpc.insecure_channel(self.daemon.target)
        self.addCleanup(channel.close)
        with self.assertRaises(grpc.RpcError):
            pb_grpc.GpuStreamStub(channel).KeepAlive(
                pb.KeepAliveRequest(session_id=forged),
                metadata=(("authorization", f"Bearer {ALICE_TOKEN}"),))

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            events = self.daemon.events()
            if any(e["event"] == "rpc_failed" and "KeepAlive" in e.get("method", "")
                   for e in events):
                break
            time.sleep(0.05)
        for e in events:
            self.assertIn("ts", e)
            self.assertIn(e["level"], ("debug", "info", "warning", "error"))
        opened = [e for e in events if e["event"] == "session_opened"
                  and e.get("client") == "log-job"]
        self.assertEqual(len(opened), 1, events)
        self.assertEqual(opened[0]["tenant"], "alice")
        self.assertTrue(opened[0]["session"].startswith("s-"))
        ended = [e for e in events if e["event"] == "session_ended"
                 and e.get("session") == opened[0]["session"]]
        self.assertEqual(len(ended), 1, events)
        self.assertEqual(ended[0]["cause"], "closed")
        self.assertEqual(ended[0]["client"], "log-job")
        names = [e["event"] for e in events]
        for name in ("starting", "listening", "metrics_listening",
                     "admin_list_sessions", "admin_get_stats"):
            self.assertIn(name, names)
        denied_events = [e for e in events if e["event"] == "admin_denied"]
        self.assertEqual(denied_events[-1]["tenant"], "alice")
        self.assertEqual(denied_events[-1]["action"], "GetStats")
        kills = [e for e in events if e["event"] == "admin_kill_session"]
        self.assertEqual(kills[-1]["code"], "NOT_FOUND")
        self.assertEqual(kills[-1]["level"], "warning")
        failed = [e for e in events if e["event"] == "rpc_failed"
                  and e["method"].endswith("/KeepAlive")]
        self.assertEqual(failed[-1]["level"], "debug")
        # The daemon never echoes a session id; its messages name the field.
        self.assertIn("unknown session_id", failed[-1]["error"])
        text = self.daemon.log()
        for secret_text in (ALICE_TOKEN, OPS_TOKEN, secret, forged):
            self.assertNotIn(secret_text, text)

    def test_raw_bytes_from_callers_keep_every_line_json(self) -> None:
        # client_name (field 2) that is not UTF-8, sent as raw bytes: the
        # request cannot be parsed, and what protobuf and gRPC say about it
        # comes out as events of the log, not as lines of their own.
        channel = grpc.insecure_channel(self.daemon.target)
        self.addCleanup(channel.close)
        open_raw = channel.unary_unary(
            "/gpustream.v1.GpuStream/OpenSession",
            request_serializer=None, response_deserializer=None)
        with self.assertRaises(grpc.RpcError):
            open_raw(b"\x12\x03a\xffb", metadata=(
                ("authorization", f"Bearer {ALICE_TOKEN}"),), timeout=10)
        # And a method path that is not UTF-8 either.
        junk = channel.unary_unary("/gpu\u00ffstream.v1/Op",
                                   request_serializer=None,
                                   response_deserializer=None)
        with self.assertRaises(grpc.RpcError):
            junk(b"", timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            events = self.daemon.events()  # Raises if a line is not JSON.
            if any(e["event"] == "protobuf" for e in events):
                break
            time.sleep(0.05)
        protobuf = [e for e in events if e["event"] == "protobuf"]
        self.assertTrue(protobuf, "protobuf's message was not captured")
        self.assertEqual(protobuf[-1]["level"], "debug")
        self.assertIn("UTF-8", protobuf[-1]["message"])

    def test_zz_clean_stop_is_logged(self) -> None:
        # Runs last (unittest sorts by name): stops the shared daemon.
        self.assertEqual(self.daemon.stop(), 0)
        # The daemon's own events at info and above, without gRPC's and
        # protobuf's: debug ones (heap_trimmed, from the housekeeper) may
        # come at any time, between these two too.
        names = [e["event"] for e in self.daemon.events()
                 if e["event"] not in ("grpc", "protobuf")
                 and e["level"] != "debug"]
        self.assertEqual(names[-2:], ["shutting_down", "stopped"])


class StartFailureTest(unittest.TestCase):

    def run_daemon(self, *args: str) -> Tuple[int, str]:
        run = subprocess.run([runfile("server/gpustreamd"), "--backend=cpu",
                              "--listen=unix:/tmp/gs-obs-unused.sock", *args],
                             capture_output=True, text=True, timeout=30)
        return run.returncode, run.stderr

    def test_bad_flags_exit_2_naming_them(self) -> None:
        code, err = self.run_daemon("--log_level=loud")
        self.assertEqual(code, 2)
        self.assertIn("--log_level=loud", err)
        code, err = self.run_daemon("--metrics_listen=nohost")
        self.assertEqual(code, 2)
        self.assertIn("--metrics_listen=nohost", err)
        self.assertIn("event=start_failed", err)
        # One address only (civetweb would take a comma as a list).
        code, err = self.run_daemon("--metrics_listen=127.0.0.1:0,127.0.0.1:0")
        self.assertEqual(code, 2)
        self.assertIn("expected one HOST:PORT", err)

    def test_busy_metrics_port_stops_the_start(self) -> None:
        import socket
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            port = taken.getsockname()[1]
            code, err = self.run_daemon(f"--metrics_listen=127.0.0.1:{port}")
        self.assertEqual(code, 2)
        self.assertIn(f"--metrics_listen=127.0.0.1:{port}", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
