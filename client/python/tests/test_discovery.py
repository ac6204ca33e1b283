"""Connecting, version negotiation, discovery."""

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


def test_devices(client):
    devices = client.list_devices()
    assert [d.id for d in devices] == [0]
    assert devices[0].backend == "cpu"
    assert devices[0].supports_host_func


def test_modules_declare_the_sample_kernels(client):
    modules = {m.name: m for m in client.list_modules()}
    kernels = {k.name: list(k.params) for k in modules["samples"].kernels}
    assert kernels["vector_add_f32"] == [pb.PARAM_KIND_BUFFER] * 3 + [
        pb.PARAM_KIND_U64]
    assert kernels["saxpy_f32"] == [pb.PARAM_KIND_F32, pb.PARAM_KIND_BUFFER,
                                    pb.PARAM_KIND_BUFFER, pb.PARAM_KIND_U64]
    assert kernels["noop"] == []


def test_connect_to_nobody_is_unavailable_within_the_timeout(tmp_path):
    with pytest.raises(gpustream.Error) as error:
        gpustream.connect(f"unix:{tmp_path}/nobody.sock", timeout=0.5)
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    assert "connect to unix:" in error.value.message


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
