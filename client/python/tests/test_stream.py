"""The Submit stream: prompt flushing, batching, closing within its bound;
the notification stream: dropped notifications, reconnection."""

import os
import signal
import threading
import time

import grpc
import pytest

import gpustream
from conftest import Daemon, wait_until
from gpustream.v1 import gpustream_pb2 as pb
from gpustream.v1 import gpustream_pb2_grpc as pb_grpc


def unary_read_flag(target, session, flag):
    """The flag's value through the unary ReadFlag RPC: a path of its own
    that flushes nothing of the session's Submit stream."""
    with grpc.insecure_channel(target) as channel:
        return pb_grpc.GpuStreamStub(channel).ReadFlag(
            pb.ReadFlagRequest(session_id=session.id, flag_id=flag.id),
            timeout=5).value


def test_enqueued_work_leaves_without_any_flush(daemon, session):
    flag = session.create_flag()
    q = session.create_queue()
    q.synchronize(timeout=10)  # The flag exists on the daemon.
    q.launch("samples", "spin_ns", 1, 1, 1_000_000)
    q.write_flag(flag, 5)
    # No synchronize, read or flush from here on: only the unary RPC looks.
    wait_until(lambda: unary_read_flag(daemon.unix_target, session, flag) == 5,
               timeout=5, what="the write_flag to reach the daemon and run")


def test_commands_are_coalesced_into_bounded_requests(session):
    q = session.create_queue()
    q.synchronize(timeout=10)
    before = dict(session._core.stats)
    for _ in range(5000):
        q.launch("samples", "noop", 1, 1)
    q.synchronize(timeout=60)
    stats = session._core.stats
    requests = stats["requests"] - before["requests"]
    assert stats["max_request_commands"] <= 512
    assert requests >= 5001 // 512
    assert requests < 5001  # Coalesced while a write was in flight.


def test_dropped_notifications_lose_no_host_function(session):
    core = session._core
    raw = session.create_queue()
    q1, q2 = session.create_queue(), session.create_queue()
    # Host-function notifications nobody watches yet: the daemon keeps 4096
    # and counts the rest as dropped.
    for i in range(4200):
        core.enqueue(raw.id, "enqueue_host_func", "raw",
                     lambda c, i=i: (setattr(c.enqueue_host_func, "queue_id",
                                             raw.id),
                                     setattr(c.enqueue_host_func,
                                             "callback_id", 1 << 40 | i)))
    raw.synchronize(timeout=30)
    # The backlog is full: the first of these may be reached before the
    # watcher (started by the first) has drained it, and be dropped too.
    ran = []
    expected = []
    for n in range(3):
        for name, q in (("a", q1), ("b", q2)):
            q.enqueue_host_func(lambda t=(name, n): ran.append(t))
            expected.append((name, n))
    # Nothing the client relies on was lost: no error.
    q1.synchronize(timeout=20)
    q2.synchronize(timeout=20)
    wait_until(lambda: core.dropped_notifications >= 104, timeout=10,
               what="the NotificationsDropped report")
    time.sleep(0.3)  # A late notification must not run one again.
    assert sorted(ran) == sorted(expected), "each runs exactly once"
    for name in ("a", "b"):  # In the order their queue reached them.
        assert [t for t in ran if t[0] == name] == [(name, n)
                                                    for n in range(3)]
    q1.synchronize(timeout=10)


def test_host_funcs_survive_a_broken_notification_stream(session):
    q = session.create_queue()
    ran = []
    q.enqueue_host_func(lambda: ran.append(1))
    q.synchronize(timeout=10)
    core = session._core
    for attempt in range(3):
        core._watch_call.cancel()  # As if the connection broke.
        q.enqueue_host_func(lambda a=attempt: ran.append(a + 2))
        q.synchronize(timeout=20)
    assert ran == [1, 2, 3, 4]
    assert core.watch_reconnects >= 3


def test_close_releases_a_parked_synchronize(client):
    session = client.open_session()
    flag = session.create_flag()
    q = session.create_queue()
    q.wait_for_host_value(flag, 1)  # Never signalled.
    outcome = []

    def sync():
        try:
            q.synchronize()
            outcome.append("ok")
        except gpustream.Error as error:
            outcome.append(error.code)

    thread = threading.Thread(target=sync)
    thread.start()
    time.sleep(0.2)
    start = time.monotonic()
    session.close()
    thread.join(10)
    assert time.monotonic() - start < 3
    assert not thread.is_alive()
    assert outcome == [grpc.StatusCode.CANCELLED]


def test_close_is_bounded_when_the_daemon_is_wedged():
    daemon = Daemon()
    try:
        client = gpustream.connect(daemon.unix_target)
        session = client.open_session()
        q = session.create_queue()
        q.launch("samples", "noop", 1, 1)  # ListModules is cached.
        q.enqueue_host_func(lambda: None)
        q.synchronize(timeout=10)
        outcome = []

        def sync():
            try:
                q.launch("samples", "spin_ns", 1, 1, 10_000_000)
                q.synchronize()
                outcome.append("ok")
            except gpustream.Error as error:
                outcome.append(error.code)

        os.kill(daemon.process.pid, signal.SIGSTOP)
        thread = threading.Thread(target=sync)
        thread.start()
        start = time.monotonic()
        with pytest.raises(gpustream.Error) as error:
            session.close()
        elapsed = time.monotonic() - start
        assert elapsed <= gpustream.CLOSE_TIMEOUT_S + 1.0
        # Nobody confirmed the close; the client side is closed anyway.
        assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "the client side is closed" in error.value.message
        assert session.closed
        thread.join(5)
        assert not thread.is_alive()
        assert outcome and outcome[0] != "ok"
        os.kill(daemon.process.pid, signal.SIGCONT)
        client.close()
    finally:
        daemon.stop()
