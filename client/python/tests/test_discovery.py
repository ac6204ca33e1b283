"""Connecting, version negotiation, discovery."""

import socket
import time

import grpc
import pytest

import gpustream
from gpustream.v1 import gpustream_pb2 as pb


def test_server_info(client):
    info = client.server_info()
    assert client.protocol_version == 1
    assert info.protocol_version == 1
    assert list(info.backends) == ["cpu"]
    assert "submit_stream" in info.features
    assert "client_minted_ids" in info.features
    # One version number for the daemon and both clients.
    assert info.server_version == gpustream.__version__


def test_devices(client):
    devices = client.list_devices()
    assert [d.id for d in devices] == [0]
    assert devices[0].backend == "cpu"
    assert devices[0].supports_host_func
    assert devices[0].max_cluster_size == 8
    assert devices[0].supports_cooperative_launch


def test_modules_declare_the_sample_kernels(client):
    modules = {m.name: m for m in client.list_modules()}
    kernels = {k.name: list(k.params) for k in modules["samples"].kernels}
    assert kernels["vector_add_f32"] == [pb.PARAM_KIND_BUFFER] * 3 + [
        pb.PARAM_KIND_U64]
    assert kernels["saxpy_f32"] == [pb.PARAM_KIND_F32, pb.PARAM_KIND_BUFFER,
                                    pb.PARAM_KIND_BUFFER, pb.PARAM_KIND_U64]
    assert kernels["noop"] == []


def test_connect_to_nobody_is_unavailable_at_once_naming_the_cause(tmp_path):
    target = f"unix:{tmp_path}/nobody.sock"
    started = time.monotonic()
    with pytest.raises(gpustream.Error) as error:
        gpustream.connect(target, timeout=10)
    assert time.monotonic() - started < 3
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    assert error.value.message.startswith(
        f"connect to {target}: no such socket"), error.value.message
    # A socket file nobody listens on (a daemon that died left it).
    stale = tmp_path / "stale.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(stale))
    listener.close()
    with pytest.raises(gpustream.Error) as error:
        gpustream.connect(f"unix:{stale}", timeout=10)
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    assert "nobody listens on this socket" in error.value.message


def test_target_and_token_from_the_environment(daemon, monkeypatch):
    monkeypatch.setenv("GPUSTREAM_TARGET", daemon.unix_target)
    with gpustream.connect() as client:
        assert client.target == daemon.unix_target
        assert client.list_devices()
    monkeypatch.setenv("GPUSTREAM_TARGET", "unix:/nonexistent/gs.sock")
    with pytest.raises(gpustream.Error) as error:
        gpustream.connect()
    assert "connect to unix:/nonexistent/gs.sock: no such socket" in \
        error.value.message
    # An explicit target wins over the environment.
    with gpustream.connect(daemon.unix_target) as client:
        assert client.target == daemon.unix_target


def test_tcp_client(tcp_client):
    with tcp_client.open_session() as session:
        buf = session.allocate(64)
        session.default_queue.launch("samples", "fill_u32", 1, 16, buf, 9, 16)
        assert buf.read() == (9).to_bytes(4, "little") * 16


def test_client_close_closes_its_sessions(daemon):
    client = gpustream.connect(daemon.unix_target)
    session = client.open_session()
    client.close()
    assert session.closed
    with pytest.raises(gpustream.Error) as error:
        session.create_queue()
    assert error.value.code == grpc.StatusCode.FAILED_PRECONDITION
