"""Ordering: events across queues, queue waits, flags gating work, host
functions."""

import threading
import time

import numpy as np

import gpustream

SPIN_NS = 300_000_000  # 0.3 s: long enough that unordered work would overtake.


def test_event_orders_work_across_queues(session):
    producer, consumer = session.create_queue(), session.create_queue()
    buf = session.allocate(4 * 1024)
    producer.launch("samples", "spin_ns", 1, 1, SPIN_NS)
    producer.launch("samples", "fill_u32", 4, 256, buf, 11, 1024)
    ready = producer.record_event()
    consumer.wait_for(ready)
    # Without the wait, the consumer's read would see zeros (the producer
    # is still spinning).
    assert set(consumer.read(buf, dtype=np.uint32).tolist()) == {11}
    assert ready.query()
    ready.synchronize(timeout=5)


def test_wait_for_queue(session):
    first, second = session.create_queue(), session.create_queue()
    buf = session.allocate(16)
    first.launch("samples", "spin_ns", 1, 1, SPIN_NS)
    first.launch("samples", "fill_u32", 1, 4, buf, 3, 4)
    second.wait_for(first)
    second.launch("samples", "add_u64", 1, 1, buf, 1)
    words = second.read(buf, dtype=np.uint32)
    assert words.tolist() == [4, 3, 3, 3]


def test_event_timing(session):
    q = session.default_queue
    start = q.record_event(enable_timing=True)
    q.launch("samples", "spin_ns", 1, 1, 50_000_000)
    end = q.record_event(enable_timing=True)
    end.synchronize()
    assert 45.0 <= start.elapsed_ms(end) < 5000.0


def test_flag_gates_work(session):
    counter = session.allocate(8)
    go, done = session.create_flag(), session.create_flag()
    gated, observer = session.create_queue(), session.create_queue()
    gated.wait_for_host_value(go, 1)
    gated.launch("samples", "add_u64", 1, 1, counter, 42)
    gated.write_flag(done, 7)
    time.sleep(0.2)
    assert observer.read(counter, dtype=np.uint64).tolist() == [0]
    assert done.read() == 0
    assert not gated.is_idle()
    go.signal(1)
    assert done.wait(7, timeout=10) == 7
    assert observer.read(counter, dtype=np.uint64).tolist() == [42]
    gated.synchronize(timeout=10)
    assert gated.is_idle()


def test_greater_equal_wait(session):
    flag = session.create_flag()
    q = session.create_queue()
    q.wait_for_host_value(flag, 5, gpustream.GREATER_EQUAL)
    q.write_flag(flag, 100)
    flag.signal(9)  # 9 >= 5: released, then the queue stores 100.
    assert flag.wait(100, timeout=10) == 100


def test_host_func_runs_between_kernels_in_order(session):
    counter = session.allocate(8)
    q, other = session.create_queue(), session.create_queue()
    seen = []

    def host_func():
        # The kernel before it has completed; the one after has not run.
        seen.append(int(other.read(counter, dtype=np.uint64)[0]))
        time.sleep(0.2)

    q.launch("samples", "add_u64", 1, 1, counter, 1)
    q.enqueue_host_func(host_func)
    q.launch("samples", "add_u64", 1, 1, counter, 10)
    q.synchronize(timeout=10)
    assert seen == [1]
    assert q.read(counter, dtype=np.uint64).tolist() == [11]


def test_host_funcs_keep_per_queue_order(session):
    queues = [session.create_queue() for _ in range(2)]
    order = []
    for i in range(20):
        for n, q in enumerate(queues):
            q.launch("samples", "noop", 1, 1)
            q.enqueue_host_func(lambda n=n, i=i: order.append((n, i)))
    for q in queues:
        q.synchronize(timeout=20)
    for n in range(2):
        assert [i for m, i in order if m == n] == list(range(20))


def test_host_func_exception_is_reported_and_the_queue_goes_on(session):
    q = session.create_queue()
    ran = []

    def broken():
        raise ValueError("boom")

    q.enqueue_host_func(broken)
    q.enqueue_host_func(lambda: ran.append(True))
    try:
        q.synchronize(timeout=10)
        raise AssertionError("synchronize did not raise")
    except gpustream.Error as error:
        assert error.code.name == "UNKNOWN"
        assert "ValueError: boom" in error.message
        assert f"queue {q.id}" in error.message
    q.synchronize(timeout=10)
    assert ran == [True]


def test_threads_enqueue_and_synchronize_their_own_queues(session):
    errors = []

    def worker(value):
        try:
            q = session.create_queue()
            buf = session.allocate(4 * 256)
            for _ in range(50):
                q.launch("samples", "fill_u32", 1, 256, buf, value, 256)
                q.launch("samples", "noop", 1, 1)
            q.synchronize(timeout=30)
            assert set(q.read(buf, dtype=np.uint32).tolist()) == {value}
        except BaseException as error:  # Reported by the main thread.
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(v,)) for v in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
