"""Errors: exact codes, client-side argument checks, per-queue reporting."""

import math
import re
import threading
import time

import grpc
import numpy as np
import pytest

import gpustream

TOO_BIG_GRID = 1 << 31  # Beyond the CPU device's max_grid.x (2^31 - 1).


def code_of(fn, *args, **kwargs):
    with pytest.raises(gpustream.Error) as error:
        fn(*args, **kwargs)
    return error.value.code, error.value.message


def test_launch_arguments_are_checked_before_sending(session):
    q = session.default_queue
    buf = session.allocate(64)
    sent = session._core._next_seq
    code, message = code_of(q.launch, "samples", "fill_u32", 1, 1, buf, 1)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "samples.fill_u32 takes 3 argument(s) (BUFFER, U32, U64), got 2" \
        in message
    code, message = code_of(q.launch, "samples", "fill_u32", 1, 1, buf, 1.5,
                            4)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "argument 1 is a U32 parameter" in message
    code, message = code_of(q.launch, "samples", "fill_u32", 1, 1, buf,
                            1 << 32, 4)
    assert code == grpc.StatusCode.OUT_OF_RANGE
    assert "argument 1 is a U32 parameter" in message
    code, _ = code_of(q.launch, "samples", "fill_u32", 1, 1, buf, -1, 4)
    assert code == grpc.StatusCode.OUT_OF_RANGE
    code, message = code_of(q.launch, "samples", "fill_u32", 1, 1, 7, 1, 4)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "argument 0 is a BUFFER parameter" in message
    code, message = code_of(q.launch, "samples", "saxpy_f32", 1, 1, 1e39, buf,
                            buf, 1)
    assert code == grpc.StatusCode.OUT_OF_RANGE
    assert "argument 0 is a F32 parameter" in message
    code, _ = code_of(q.launch, "samples", "add_u64", 1, 1, buf, True)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, message = code_of(q.launch, "samples", "nope", 1, 1)
    assert code == grpc.StatusCode.NOT_FOUND and "'nope'" in message
    code, message = code_of(q.launch, "nosuch", "noop", 1, 1)
    assert code == grpc.StatusCode.NOT_FOUND and "'nosuch'" in message
    code, _ = code_of(q.launch, "samples", "noop", 0, 1)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert session._core._next_seq == sent  # Nothing was sent.
    q.launch("samples", "saxpy_f32", 1, 1, 2, buf, (buf, 4), np.uint64(3))
    q.synchronize()


def test_buffer_of_another_session_is_refused(client, session):
    with client.open_session() as other:
        foreign = other.allocate(16)
        code, message = code_of(session.default_queue.launch, "samples",
                                "add_u64", 1, 1, foreign, 1)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "another session" in message


def test_objects_of_another_session_or_closed_are_refused_at_the_call(
        client, session):
    q = session.create_queue()
    with client.open_session() as other:
        calls = {
            "write_flag": lambda: q.write_flag(other.create_flag(), 1),
            "wait_for_host_value": lambda: q.wait_for_host_value(
                other.create_flag(), 1),
            "record_event": lambda: q.record_event(other.create_event()),
            "wait_for": lambda: q.wait_for(other.create_event()),
            "wait_for queue": lambda: q.wait_for(other.default_queue),
            "elapsed_ms": lambda: session.create_event().elapsed_ms(
                other.create_event()),
            "copy": lambda: q.copy(other.allocate(8), session.allocate(8)),
        }
        for name, call in calls.items():
            code, message = code_of(call)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, name
            assert "belongs to another session" in message, name
    flag, event, buf = (session.create_flag(), session.create_event(),
                        session.allocate(8))
    for obj in (flag, event, buf):
        obj.close()
    sent = session._core._next_seq
    for call in (lambda: q.write_flag(flag, 1), lambda: q.record_event(event),
                 lambda: q.wait_for(event), lambda: q.write(buf, b"x"),
                 lambda: q.launch("samples", "add_u64", 1, 1, buf, 1)):
        code, message = code_of(call)
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert "closed" in message
    assert session._core._next_seq == sent  # Nothing was sent.
    q.synchronize(timeout=10)


def test_refused_creates_send_nothing(session):
    sent = session._core._next_seq
    assert code_of(session.create_queue, priority=1 << 40)[0] == \
        grpc.StatusCode.OUT_OF_RANGE
    assert code_of(session.create_queue, priority="high")[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(session.create_event, enable_timing="yes")[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert session._core._next_seq == sent


def test_timeouts_none_and_inf_mean_no_limit(session):
    q = session.create_queue()
    flag = session.create_flag()
    event = q.record_event()
    for timeout in (None, math.inf, 10 ** 400):
        q.synchronize(timeout=timeout)
        event.synchronize(timeout=timeout)
        assert flag.wait(0, timeout=timeout) == 0
    for timeout in (-1, math.nan, "1"):
        assert code_of(q.synchronize, timeout=timeout)[0] == \
            grpc.StatusCode.INVALID_ARGUMENT


def test_rejected_command_is_raised_by_its_own_queue_only(session):
    bad, good = session.create_queue(), session.create_queue()
    buf = session.allocate(16)
    bad.launch("samples", "fill_u32", TOO_BIG_GRID, 1, buf, 1, 4)
    good.launch("samples", "fill_u32", 1, 4, buf, 2, 4)
    good.synchronize(timeout=10)  # Not bad's error.
    with pytest.raises(gpustream.Error) as error:
        bad.synchronize(timeout=10)
    assert error.value.code == grpc.StatusCode.OUT_OF_RANGE
    assert (f"launch_kernel samples.fill_u32 on queue {bad.id}"
            in error.value.message)
    bad.synchronize(timeout=10)  # Reported once; the queue is fine.
    good.synchronize(timeout=10)


def test_one_thread_never_gets_another_queues_error(session):
    bad, good = session.create_queue(), session.create_queue()
    stop = threading.Event()
    good_errors = []
    good_syncs = [0]

    def sync_good():
        while not stop.is_set() and good_syncs[0] < 10_000:
            try:
                good.launch("samples", "noop", 1, 1)
                good.synchronize(timeout=10)
                good_syncs[0] += 1
            except gpustream.Error as error:
                good_errors.append(error)

    thread = threading.Thread(target=sync_good)
    thread.start()
    bad_codes = []
    for _ in range(20):
        bad.launch("samples", "noop", TOO_BIG_GRID, 1)
        with pytest.raises(gpustream.Error) as error:
            bad.synchronize(timeout=10)
        bad_codes.append(error.value.code)
    stop.set()
    thread.join(30)
    assert not thread.is_alive()
    assert good_errors == []
    assert good_syncs[0] > 0
    assert set(bad_codes) == {grpc.StatusCode.OUT_OF_RANGE}


def test_every_failure_of_a_queue_is_reported_in_order(session):
    q = session.create_queue()
    buf = session.allocate(16)
    q.fill(buf, 1, size=6)  # Not a multiple of 4: INVALID_ARGUMENT.
    q.launch("samples", "noop", 1, 1)
    q.fill(buf, 2, size=10)  # Again.
    code, message = code_of(q.synchronize, timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    first = message.index(f"fill_buffer {buf.id} [0, 6)")
    second = message.index(f"; then INVALID_ARGUMENT: fill_buffer {buf.id} "
                           "[0, 10)")
    assert first < second, message
    q.synchronize(timeout=10)  # Reported once.


def test_queue_less_error_is_raised_by_any_queue(session):
    ghost = gpustream.Buffer(session, 999_999, 16, "device")
    ghost.close()  # free_buffer of an unknown id: NOT_FOUND, queue-less.
    q = session.create_queue()
    with pytest.raises(gpustream.Error) as error:
        q.synchronize(timeout=10)
    assert error.value.code == grpc.StatusCode.NOT_FOUND
    assert "free_buffer 999999" in error.value.message
    session.default_queue.synchronize(timeout=10)


def test_sticky_device_error(session):
    # The daemon stops launches running past 2 s (--kernel_time_limit_ms).
    q = session.create_queue()
    q.launch("samples", "spin_ns", 1, 1, 30_000_000_000)
    with pytest.raises(gpustream.Error) as first:
        q.synchronize(timeout=20)
    assert first.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    q.launch("samples", "noop", 1, 1)
    with pytest.raises(gpustream.Error) as later:
        q.synchronize(timeout=10)
    assert later.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert f"launch_kernel samples.noop on queue {q.id}" in later.value.message
    session.default_queue.synchronize(timeout=10)  # Other queues are fine.


def test_synchronize_timeout(session):
    q = session.create_queue()
    q.launch("samples", "spin_ns", 1, 1, 1_000_000_000)
    start = time.monotonic()
    with pytest.raises(gpustream.Error) as error:
        q.synchronize(timeout=0.1)
    assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - start < 0.9
    q.synchronize(timeout=10)  # The work went on and completes.


def test_flag_wait_timeout(session):
    flag = session.create_flag()
    code, _ = code_of(flag.wait, 1, timeout=0.05)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_read_timeout_gives_up_and_the_queue_goes_on(session):
    buf = session.allocate(8)
    q = session.create_queue()
    gate = session.create_flag()
    q.fill(buf, 0x07070707)
    q.wait_for_host_value(gate, 1)
    start = time.monotonic()
    code, _ = code_of(q.read, buf, timeout=0.2)
    took = time.monotonic() - start
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0.2 <= took < 5
    # The copy stays enqueued; its bytes go nowhere, the next read gets its
    # own.
    gate.signal(1)
    assert q.read(buf, timeout=30) == b"\x07" * 8
    q.synchronize(timeout=30)


def test_allocate_errors_are_raised_at_allocate(session):
    code, message = code_of(session.allocate, 1 << 50)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "allocate_buffer" in message
    code, _ = code_of(session.allocate, 16, kind="managed")
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_out_of_range_memory_operations(session):
    buf = session.allocate(16)
    q = session.default_queue
    assert code_of(q.read, buf, 8, offset=12)[0] == \
        grpc.StatusCode.OUT_OF_RANGE
    assert code_of(q.write, buf, b"x" * 17)[0] == grpc.StatusCode.OUT_OF_RANGE
    q.fill(buf, 1, size=6)  # Not a multiple of 4: the daemon refuses it.
    code, message = code_of(q.synchronize, timeout=10)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"fill_buffer {buf.id} [0, 6) on the default queue" in message
    assert str(q.id) not in message


def test_use_after_close(client):
    session = client.open_session()
    q = session.create_queue()
    flag = session.create_flag()
    q.close()
    assert code_of(q.launch, "samples", "noop", 1, 1)[0] == \
        grpc.StatusCode.FAILED_PRECONDITION
    session.close()
    assert code_of(flag.read)[0] == grpc.StatusCode.FAILED_PRECONDITION
    code, message = code_of(session.allocate, 16)
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    # Named by its public id, never by the secret one.
    assert re.fullmatch(r"s-[0-9a-f]{16}", session.public_id)
    assert f"session {session.public_id} is closed" in message
    assert session.id not in message and session.id not in repr(session)
    session.close()  # Idempotent.
