"""Adversarial tests of the Python client against its promised contract.

Each test here failed against the client as reviewed; see the review report.
Every loop is bounded in count and time; daemons are real child processes
(CPU backend) on unix sockets / 127.0.0.1.
"""

import gc
import math
import os
import shutil
import signal
import tempfile
import threading
import time
import weakref

import grpc
import pytest

import gpustream
import gpustream._timeouts
from conftest import Daemon, runfile, wait_until


def _testmod_dir():
    """A folder holding only the test module (testmod: sum_bytes takes
    BYTES), as --modules loads every module of a folder."""
    env = os.environ.get("GPUSTREAM_TESTMOD_DIR")
    if env:
        return env
    try:
        so = runfile("tests/modules/libgpustream_testmod.so")
    except FileNotFoundError:
        pytest.skip("tests/modules/libgpustream_testmod.so is not built")
    folder = tempfile.mkdtemp(prefix="gs-testmod-")
    shutil.copy(so, folder)
    return folder


@pytest.fixture(scope="module")
def testmod_daemon():
    d = Daemon([f"--modules={_testmod_dir()}"])
    yield d
    d.stop()


QUOTA_OBJECTS = 16


@pytest.fixture(scope="module")
def quota_daemon(tmp_path_factory):
    """A daemon bounding objects per session and messages at 4 MiB, the
    size the client promises its SubmitRequests stay within."""
    config = tmp_path_factory.mktemp("cfg") / "server.textproto"
    config.write_text("limits { max_objects_per_session: %d "
                      "max_message_bytes: %d }\n" % (QUOTA_OBJECTS, 4 << 20))
    d = Daemon([f"--config={config}", f"--modules={_testmod_dir()}"])
    yield d
    d.stop()


@pytest.fixture
def private_daemon():
    """A daemon of its own: tests that freeze it with SIGSTOP."""
    d = Daemon()
    yield d
    d.stop()


# -- 5. An oversized single command fails alone ----------------------------

def test_oversized_bytes_argument_fails_alone(quota_daemon):
    with gpustream.connect(quota_daemon.unix_target) as client:
        with client.open_session() as session:
            out = session.allocate(8)
            q = session.create_queue()
            q.launch("testmod", "sum_bytes", 1, 1, out, b"\x01" * 16)
            q.synchronize(timeout=10)
            # A BYTES argument larger than a SubmitRequest may be.
            blob = b"\x01" * ((4 << 20) + 1024)
            try:
                q.launch("testmod", "sum_bytes", 1, 1, out, blob)
                try:
                    q.synchronize(timeout=10)
                except gpustream.Error:
                    pass  # Refused: fine, as long as it fails alone.
            except gpustream.Error:
                pass
            # The session must still work.
            q.launch("testmod", "sum_bytes", 1, 1, out, b"\x02" * 16)
            q.synchronize(timeout=10)
            assert int.from_bytes(out.read(), "little") == 32
            assert session._core.stats["max_request_bytes"] <= 4 << 20


def test_closed_queues_with_host_funcs_leave_no_daemon_objects(quota_daemon):
    with gpustream.connect(quota_daemon.unix_target) as client:
        with client.open_session() as session:
            ran = []
            for i in range(QUOTA_OBJECTS):
                q = session.create_queue()
                q.enqueue_host_func(lambda i=i: ran.append(i))
                q.synchronize(timeout=10)
                q.close()
                # Only this iteration's queue was alive: no quota trouble.
                session.default_queue.synchronize(timeout=10)
            assert ran == list(range(QUOTA_OBJECTS))


def test_closing_a_queue_with_a_pending_host_func_keeps_order(session):
    q = session.create_queue()
    gate, done = session.create_flag(), session.create_flag()
    order = []
    q.wait_for_host_value(gate, 1)
    q.enqueue_host_func(lambda: (time.sleep(0.3), order.append("fn")))
    q.write_flag(done, 1)
    q.close()
    gate.signal(1)
    done.wait(1, timeout=10)
    order.append("after")
    assert order == ["fn", "after"]


# -- 1. Launch arguments checked (range) before sending --------------------

def test_huge_int_for_a_float_parameter_raises_gpustream_error(session):
    x, y = session.allocate(16), session.allocate(16)
    q = session.default_queue
    with pytest.raises(gpustream.Error) as error:
        q.launch("samples", "saxpy_f32", 1, 4, 10 ** 400, x, y, 4)
    assert error.value.code == grpc.StatusCode.OUT_OF_RANGE


# -- A value the proto field cannot hold -------------------------------------

def test_out_of_range_priority_raises_gpustream_error(session):
    with pytest.raises(gpustream.Error):
        session.create_queue(priority=1 << 40)  # int32 on the wire.


def test_refused_creates_leave_no_daemon_objects(quota_daemon):
    with gpustream.connect(quota_daemon.unix_target) as client:
        with client.open_session() as session:
            for _ in range(2 * QUOTA_OBJECTS):
                with pytest.raises(Exception):
                    session.create_queue(priority=1 << 40)
            # Nothing should exist for the refused calls: room for a flag.
            session.create_flag()
            session.default_queue.synchronize(timeout=10)


# -- 1./3. Objects of another session ----------------------------------------

def test_flag_of_another_session_is_refused_not_aliased(client):
    with client.open_session() as a, client.open_session() as b:
        flag_a = a.create_flag()
        flag_b = b.create_flag()
        assert flag_a.id == flag_b.id  # Both sessions mint ids from 1.
        qa = a.create_queue()
        try:
            qa.write_flag(flag_b, 7)  # A flag of session b on a queue of a.
            qa.synchronize(timeout=10)
        except gpustream.Error as error:
            assert error.code in (grpc.StatusCode.INVALID_ARGUMENT,
                                  grpc.StatusCode.NOT_FOUND)
        # Whatever happened, session a's own flag must not have been written.
        assert flag_a.read() == 0, "wrote session a's flag through b's Flag"


# -- 3. Call timeouts hold even if the daemon is frozen ---------------------

def test_synchronize_timeout_holds_under_backpressure_with_frozen_daemon(
        private_daemon):
    client = gpustream.connect(private_daemon.unix_target)
    session = client.open_session()
    size = 96 << 20
    buf = session.allocate(size)
    writer_q, sync_q = session.create_queue(), session.create_queue()
    sync_q.synchronize(timeout=10)
    pid = private_daemon.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        data = bytes(size)
        writer = threading.Thread(target=lambda: _swallow(
            lambda: writer_q.write(buf, data)), daemon=True)
        writer.start()
        # Wait until the writer is held by back-pressure.
        wait_until(lambda: session._core._queued_bytes
                   > gpustream._core.MAX_QUEUED_BYTES - (2 << 20),
                   timeout=20, what="back-pressure")
        outcome = []

        def sync():
            try:
                sync_q.synchronize(timeout=0.5)
                outcome.append("ok")
            except gpustream.Error as error:
                outcome.append(error.code)

        t = threading.Thread(target=sync, daemon=True)
        start = time.monotonic()
        t.start()
        # timeout 0.5 s + the documented 5 s grace, plus slack.
        t.join(0.5 + gpustream._timeouts.ANSWER_GRACE_S + 3)
        elapsed = time.monotonic() - start
        assert not t.is_alive(), (
            f"synchronize(timeout=0.5) still blocked after {elapsed:.1f} s")
        assert outcome == [grpc.StatusCode.DEADLINE_EXCEEDED]
    finally:
        os.kill(pid, signal.SIGCONT)
        try:
            session.close()
        except gpustream.Error:
            pass
        client.close()


def _freeze(pid):
    """SIGSTOP, then waits until every thread of ``pid`` has stopped: kill
    returns before they do, and a running one may still answer."""
    os.kill(pid, signal.SIGSTOP)

    def stopped():
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as stat:
                    if stat.read().rpartition(")")[2].split()[0] != "T":
                        return False
            except FileNotFoundError:
                pass  # The thread ended meanwhile.
        return True

    wait_until(stopped, timeout=5, what="the daemon's threads to stop")


def test_allocate_that_timed_out_is_freed_when_it_comes(private_daemon):
    # Two of these do not fit the CPU device's default 1 GiB.
    size = 640 << 20
    with gpustream.connect(private_daemon.unix_target) as client:
        with client.open_session() as session:
            pid = private_daemon.process.pid
            _freeze(pid)
            try:
                with pytest.raises(gpustream.Error) as error:
                    session.allocate(size, timeout=0.3)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            # Made once thawed, then freed: the memory comes back (on the
            # device's cleanup thread, so not at once).
            again = []

            def allocated():
                try:
                    again.append(session.allocate(size, timeout=10))
                    return True
                except gpustream.Error:
                    return False

            wait_until(allocated, timeout=20, what="the memory back")
            # Nothing about the late allocation or its free is reported.
            session.default_queue.synchronize(timeout=10)


def test_enqueue_timeout_gives_up_while_the_daemon_does_not_read(
        private_daemon):
    with gpustream.connect(private_daemon.unix_target) as client:
        with client.open_session(enqueue_timeout=0.3) as session:
            buf = session.allocate(1 << 20)
            q = session.create_queue()
            q.synchronize(timeout=10)
            pid = private_daemon.process.pid
            _freeze(pid)
            mib = b"x" * (1 << 20)
            try:
                with pytest.raises(gpustream.Error) as error:
                    for _ in range(512):  # Past the client's 64 MiB bound.
                        q.write(buf, mib)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "back-pressure" in error.value.message
            # Nothing of the refused write was sent; the rest arrives.
            q.synchronize(timeout=60)
            q.fill(buf, 0x61616161, size=4)
            assert q.read(buf, size=4, timeout=30) == b"aaaa"


def _swallow(fn):
    try:
        fn()
    except gpustream.Error:
        pass


def test_close_is_bounded_under_backpressure_with_frozen_daemon(
        private_daemon):
    client = gpustream.connect(private_daemon.unix_target)
    session = client.open_session()
    size = 96 << 20
    buf = session.allocate(size)
    q = session.create_queue()
    q.enqueue_host_func(lambda: None)
    q.synchronize(timeout=10)
    pid = private_daemon.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        data = bytes(size)
        writer = threading.Thread(target=lambda: _swallow(
            lambda: q.write(buf, data)), daemon=True)
        writer.start()
        wait_until(lambda: session._core._queued_bytes
                   > gpustream._core.MAX_QUEUED_BYTES - (2 << 20),
                   timeout=20, what="back-pressure")
        start = time.monotonic()
        try:
            session.close()
        except gpustream.Error:
            pass
        assert time.monotonic() - start <= gpustream.CLOSE_TIMEOUT_S + 1
        writer.join(5)
        assert not writer.is_alive()
        # Client.close (the end of a `with gpustream.connect(...)` block)
        # must be bounded too; run it where a hang cannot take the test.
        closer = threading.Thread(target=client.close, daemon=True)
        closer.start()
        closer.join(gpustream.CLOSE_TIMEOUT_S + 5)
        assert not closer.is_alive(), (
            "Client.close() still blocked after 15 s with a frozen daemon")
    finally:
        os.kill(pid, signal.SIGCONT)


# -- 2./Queue thread-safety: a write is one operation of its queue ----------

def _pause_after(core, op, other, limit=10.0):
    """Instruments ``core.enqueue``: right after the first command ``op``
    is enqueued, runs ``other()`` on another thread and waits for it (as a
    thread switch at that point would). Returns a function undoing it."""
    original = core.enqueue
    fired = []

    def enqueue(*args, **kwargs):
        seq = original(*args, **kwargs)
        if args[1] == op and not fired:
            fired.append(True)
            t = threading.Thread(target=other, daemon=True)
            t.start()
            t.join(limit)
        return seq

    core.enqueue = enqueue
    return lambda: core.__dict__.pop("enqueue", None)


def test_concurrent_large_writes_to_one_queue_do_not_interleave(session):
    size = 3 << 20  # Three 1 MiB pieces each.
    buf = session.allocate(size)
    q = session.create_queue()
    ones, twos = bytes([1]) * size, bytes([2]) * size
    # Thread B's write happens while thread A is inside its write() call,
    # after A's first piece went into the batch.
    undo = _pause_after(session._core, "write_buffer",
                        lambda: q.write(buf, twos))
    try:
        q.write(buf, ones)
    finally:
        undo()
    got = q.read(buf)
    pieces = [got[i] for i in range(0, size, 1 << 20)]
    assert got in (ones, twos), (
        f"the buffer holds a mix of two writes, per 1 MiB piece: {pieces}")


# -- 4. A host function blocks the work behind it ----------------------------

def test_host_func_blocks_work_enqueued_concurrently(session):
    q = session.create_queue()
    seen = session.create_flag()
    q.synchronize(timeout=10)
    observed = []

    def fn():
        before = seen.read()
        time.sleep(0.3)
        observed.append((before, seen.read()))

    # Another thread's launch + write_flag land while this thread is inside
    # enqueue_host_func, right after the EnqueueHostFunc command.
    def other():
        q.launch("samples", "spin_ns", 1, 1, 150_000_000)  # 150 ms
        q.write_flag(seen, 1)

    undo = _pause_after(session._core, "enqueue_host_func", other)
    try:
        q.enqueue_host_func(fn)
    finally:
        undo()
    q.synchronize(timeout=20)
    # The write is either before the host function (seen == 1 throughout)
    # or after it (0 throughout); never during it.
    assert observed in ([(0, 0)], [(1, 1)]), (
        f"work of the queue ran while its host function ran: {observed}")


# -- 4. Host functions: a notification in flight at the break ----------------

def test_host_func_whose_notification_is_lost_at_a_break_runs_once(session):
    core = session._core
    q = session.create_queue()
    gate = session.create_flag()
    ran = []
    q.enqueue_host_func(lambda: ran.append(0))
    q.synchronize(timeout=10)
    original = core._on_notification
    lost = []

    def lose_first(notification):
        if (not lost and notification.WhichOneof("kind")
                == "host_func_reached"):
            lost.append(notification)
            core._watch_call.cancel()  # The stream breaks with it.
            return
        original(notification)

    core._on_notification = lose_first
    q.wait_for_host_value(gate, 1)
    q.enqueue_host_func(lambda: ran.append(1))
    gate.signal(1)
    q.synchronize(timeout=20)
    time.sleep(0.5)
    assert lost and ran == [0, 1]
    # The daemon replayed it to the next stream (acknowledged_id): no
    # reached flag had to be read.
    assert core.recovered_host_funcs == 0


# -- 5. Reads larger than 4 MiB ----------------------------------------------

def test_read_larger_than_a_message_is_reassembled(session):
    size = (9 << 20) + 12
    buf = session.allocate(size)
    data = bytes(range(251)) * (size // 251) + bytes(size % 251)
    buf.write(data)
    assert buf.read() == data
    assert buf.read(5 << 20, offset=7) == data[7:7 + (5 << 20)]


# -- 3. timeouts are validated as documented ---------------------------------

def test_infinite_timeout_is_an_error_or_no_limit(session):
    try:
        session.default_queue.synchronize(timeout=math.inf)
    except gpustream.Error:
        pass  # A gpustream.Error is fine; an OverflowError is not.


# -- 4. Nothing runs after close --------------------------------------------

def test_no_gpustream_threads_after_close(client):
    before = {t.ident for t in threading.enumerate()}
    session = client.open_session()
    q = session.create_queue()
    q.enqueue_host_func(lambda: None)
    q.synchronize(timeout=10)
    for _ in range(3):
        session._core._watch_call.cancel()
        q.enqueue_host_func(lambda: None)
        q.synchronize(timeout=20)
    session.close()
    left = [t.name for t in threading.enumerate()
            if t.ident not in before and t.is_alive()
            and t.name.startswith("gpustream")]
    assert not left, f"threads still running after close: {left}"


def test_closed_session_is_freed_without_the_cycle_collector(client):
    gc.collect()
    gc.disable()
    try:
        session = client.open_session()
        q = session.create_queue()
        q.launch("samples", "noop", 1, 1)
        q.synchronize(timeout=10)
        core_ref = weakref.ref(session._core)
        session_ref = weakref.ref(session)
        session.close()
        del session, q
        time.sleep(0.2)
        alive = [name for name, ref in (("Session", session_ref),
                                        ("SessionCore", core_ref))
                 if ref() is not None]
        assert not alive, f"kept alive by reference cycles: {alive}"
    finally:
        gc.enable()
