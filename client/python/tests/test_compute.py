"""Kernels and memory: values read back."""

import os
import subprocess
import sys

import grpc
import numpy as np
import pytest

import gpustream

N = 1 << 20  # 1M floats: 4 MiB per vector.
BLOCK = 256


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_vector_add_then_saxpy_on_1m_floats(client, tcp_client, transport):
    c = client if transport == "unix" else tcp_client
    with c.open_session(client_name="compute") as session:
        queue = session.default_queue
        a, b, out = (session.allocate(N * 4) for _ in range(3))
        x = np.arange(N, dtype=np.float32)
        y = np.full(N, 0.25, dtype=np.float32)
        a.write(x)
        queue.write(b, y)
        grid = (N + BLOCK - 1) // BLOCK
        queue.launch("samples", "vector_add_f32", grid, BLOCK, a, b, out, N)
        added = queue.read(out, dtype=np.float32)
        np.testing.assert_array_equal(added, x + y)
        queue.launch("samples", "saxpy_f32", grid, BLOCK, 2.0, a, out, N)
        queue.synchronize()
        result = out.read(dtype=np.float32)
        np.testing.assert_array_equal(result, np.float32(2.0) * x + (x + y))
        assert result.flags.writeable


def test_writes_larger_than_a_request_round_trip(session):
    size = 9 * (1 << 20) + 3  # Ten 1 MiB pieces, over two 4 MiB requests.
    data = np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8)
    buf = session.allocate(size + 5)
    before = session._core.stats["requests"]
    buf.write(data, offset=5)
    assert bytes(buf.read(size, offset=5)) == data.tobytes()
    stats = session._core.stats
    assert stats["max_request_bytes"] <= 4 << 20
    assert stats["requests"] - before >= 3  # 10 pieces: at most 3 a request.


def test_bytes_bytearray_memoryview_and_read_without_dtype(session):
    buf = session.allocate(12)
    q = session.default_queue
    q.write(buf, b"abcd")
    q.write(buf, bytearray(b"efgh"), offset=4)
    q.write(buf, memoryview(b"xxijkl")[2:], offset=8)
    data = q.read(buf)
    assert isinstance(data, bytes) and data == b"abcdefghijkl"
    assert buf.read(4, offset=4) == b"efgh"


def test_strided_numpy_input_is_written_in_c_order(session):
    matrix = np.arange(16, dtype=np.uint32).reshape(4, 4)
    column = matrix[:, 1]  # Not contiguous.
    buf = session.allocate(16)
    buf.write(column)
    np.testing.assert_array_equal(buf.read(dtype=np.uint32), [1, 5, 9, 13])


def test_fill_copy_and_kernel_fill(session):
    q = session.default_queue
    a, b = session.allocate(64), session.allocate(64)
    q.fill(a, 0xDEADBEEF)
    q.copy(a, b, size=32, dst_offset=32)
    q.launch("samples", "fill_u32", 1, 8, b, 5, 8)
    words = q.read(b, dtype=np.uint32)
    np.testing.assert_array_equal(words[:8], [5] * 8)
    np.testing.assert_array_equal(words[8:], [0xDEADBEEF] * 8)


def test_clusters_and_a_cooperative_grid_barrier(session):
    q = session.default_queue
    ranks = session.allocate(16 * 4)
    q.launch("samples", "block_rank_u32", (8, 2), 1, ranks, cluster=(4, 2))
    got = q.read(ranks, dtype=np.uint32).reshape(2, 8)
    np.testing.assert_array_equal(
        got, [[x % 4 + 4 * y for x in range(8)] for y in range(2)])
    words = session.allocate(2 * 8 * 32 * 4)
    q.launch("samples", "grid_barrier_u32", 8, 32, words, cooperative=True)
    barrier = q.read(words, dtype=np.uint32)[:16]
    np.testing.assert_array_equal(barrier[:8], np.arange(1, 9))
    np.testing.assert_array_equal(barrier[8:], [36] * 8)


def test_launch_configuration_errors(session):
    q = session.default_queue
    out = session.allocate(1 << 16)
    q.launch("samples", "block_rank_u32", 6, 1, out, cluster=4)
    with pytest.raises(gpustream.Error) as e:
        q.synchronize()
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a multiple of cluster" in str(e.value)
    q.launch("samples", "block_rank_u32", 16, 1, out, cluster=16)
    with pytest.raises(gpustream.Error) as e:
        q.synchronize()
    assert e.value.code == grpc.StatusCode.OUT_OF_RANGE
    assert "max_cluster_size 8" in str(e.value)
    with pytest.raises(gpustream.Error) as e:
        q.launch("samples", "noop", 1, 1, cluster=(1, 2, 3, 4))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    q.launch("samples", "noop", 1, 1, cluster=(0, 0, 0))  # none
    q.launch("samples", "noop", 1, 1, cluster=0)
    q.synchronize()
    with pytest.raises(gpustream.Error) as e:
        q.launch("samples", "noop", 1, 1, cooperative=1)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_graph_capture_and_replay(session):
    q, other = session.create_queue(), session.create_queue()
    counter, src, dst = (session.allocate(16) for _ in range(3))
    with q.capture() as graph:
        q.fill(src, 0x01020304)
        q.copy(src, dst)
        q.launch("samples", "add_u64", 1, 1, counter, 5)
        with pytest.raises(gpustream.Error) as e:
            q.enqueue_host_func(lambda: None)
        assert e.value.code == grpc.StatusCode.UNIMPLEMENTED
    assert isinstance(graph, gpustream.Graph)
    assert counter.read(dtype=np.uint64)[0] == 0  # Nothing ran yet.
    src.close()  # The graph keeps it.
    for _ in range(3):
        q.launch_graph(graph)
    other.launch_graph(graph)  # Waits for the launches on q.
    other.synchronize()
    assert counter.read(dtype=np.uint64)[0] == 20
    np.testing.assert_array_equal(dst.read(dtype=np.uint32), [0x01020304] * 4)
    graph.close()
    with pytest.raises(gpustream.Error) as e:
        q.launch_graph(graph)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_graph_capture_rules(session):
    q = session.create_queue()
    q.begin_capture()
    with pytest.raises(gpustream.Error) as e:
        q.begin_capture()  # Answered at once: captures do not nest.
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(gpustream.Error) as e:
        q.synchronize()
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "capture" in str(e.value)
    q.wait_for(session.default_queue)
    graph = q.end_capture()
    with pytest.raises(gpustream.Error) as e:
        q.synchronize()
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "WaitQueue cannot be captured" in str(e.value)
    q.launch_graph(graph)  # Empty: the refused wait was not recorded.
    q.synchronize()


def test_add_u64_and_buffer_offsets(session):
    counter = session.allocate(16)
    q = session.create_queue()
    q.fill(counter, 0)
    q.launch("samples", "add_u64", 1, 1, (counter, 8), 40)
    q.launch("samples", "add_u64", 1, 1, (counter, 8), 2)
    np.testing.assert_array_equal(q.read(counter, dtype=np.uint64), [0, 42])
    q.close()


def test_host_pinned_buffers(session):
    buf = session.allocate(4096, kind="host_pinned")
    assert buf.kind == "host_pinned"
    session.default_queue.launch("samples", "fill_u32", 4, 256, buf, 3, 1024)
    assert set(buf.read(dtype=np.uint32).tolist()) == {3}


def test_the_package_works_without_numpy(daemon):
    """numpy blocked from import: bytes in and out; a dtype is refused."""
    script = (
        "import sys\n"
        "sys.modules['numpy'] = None  # import numpy now raises ImportError\n"
        "import grpc, gpustream\n"
        "with gpustream.connect(sys.argv[1]) as client:\n"
        "    with client.open_session() as session:\n"
        "        buf = session.allocate(8)\n"
        "        buf.write(bytearray(b'12345678'))\n"
        "        assert buf.read() == b'12345678'\n"
        "        try:\n"
        "            buf.read(dtype='float32')\n"
        "            raise SystemExit('read(dtype=...) did not raise')\n"
        "        except gpustream.Error as error:\n"
        "            assert error.code == \\\n"
        "                grpc.StatusCode.FAILED_PRECONDITION\n"
        "print('no numpy ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", script, daemon.unix_target],
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no numpy ok" in run.stdout


def test_shared_buffer_is_the_data_plane(session):
    size = (1 << 20) + 12  # Not a whole page.
    shared = session.allocate_shared(size)
    assert isinstance(shared, gpustream.SharedBuffer)
    assert len(shared.memory) == size and not shared.memory.readonly
    assert shared.array().sum() == 0  # Zeroed, like every buffer.
    data = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8)
    shared.array()[:] = data
    device = session.allocate(size)
    queue = session.default_queue
    queue.copy(shared, device)
    assert bytes(queue.read(device)) == data.tobytes()
    # Device work's bytes show in the mapping once synchronized.
    queue.fill(device, 0xA5A5A5A5, size=4096)
    queue.copy(device, shared, size=4096, dst_offset=8)
    queue.synchronize()
    assert bytes(shared.memory[8:8 + 4096]) == b"\xa5" * 4096
    assert shared.memory[8 + 4096] == data[8 + 4096]
    # Still mapped after the buffer is freed.
    view = shared.array(np.uint32)
    shared.close()
    queue.synchronize()
    view[0] = 7
    assert view[0] == 7
