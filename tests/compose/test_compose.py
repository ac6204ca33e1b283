"""The compose suite's client side: pytest in the client container against
the gpustreamd container (tools/compose-test.sh runs it).

Every test drives the daemon across a container boundary, over the compose
network with TLS (tokens, and one mTLS client certificate) or over the unix
socket shared through a volume, and checks results read back from the
daemon, not only that calls returned. The targets and credentials come from
the environment deploy/docker-compose.yml gives the client service:

  GPUSTREAM_TCP_TARGET   gpustreamd:50051 (TLS)
  GPUSTREAM_UNIX_TARGET  unix:/run/gpustream/gpustreamd.sock
  GPUSTREAM_CLIENT_DIR   ca.crt, {ops,team-a,team-b}.token, team-b.{crt,key}
                         (deploy/compose/make-credentials.sh)
"""

import os
import struct
import threading
import uuid

import grpc
import numpy as np
import pytest

import gpustream
from gpustream.v1 import gpustream_pb2 as pb
from gpustream.v1 import gpustream_pb2_grpc as pb_grpc

TCP = os.environ.get("GPUSTREAM_TCP_TARGET", "gpustreamd:50051")
UNIX = os.environ.get("GPUSTREAM_UNIX_TARGET",
                      "unix:/run/gpustream/gpustreamd.sock")
CLIENT_DIR = os.environ.get("GPUSTREAM_CLIENT_DIR", "/etc/gpustream-client")
# Calls that must answer at once get this long (seconds): a wedged daemon
# fails the test instead of hanging the suite.
DEADLINE = 30


def _read(name: str) -> bytes:
    with open(os.path.join(CLIENT_DIR, name), "rb") as f:
        return f.read()


def token(tenant: str) -> str:
    return _read(f"{tenant}.token").decode().strip()


def connect(tenant: str, target: str = TCP, **kwargs) -> gpustream.Client:
    """A client of `tenant` by bearer token; TLS for TCP targets."""
    if not target.startswith("unix:"):
        kwargs.setdefault("root_certificates", _read("ca.crt"))
    return gpustream.connect(target, token=token(tenant), timeout=DEADLINE,
                             **kwargs)


def stub_channel(tenant: str):
    """A raw TLS channel and the metadata that authenticates `tenant`, for
    calls the gpustream package does not expose (Admin, foreign ids)."""
    creds = grpc.ssl_channel_credentials(root_certificates=_read("ca.crt"))
    channel = grpc.secure_channel(TCP, creds)
    return channel, (("authorization", f"Bearer {token(tenant)}"),)


def u64(data: bytes) -> int:
    return struct.unpack("<Q", data)[0]


@pytest.fixture
def session_a():
    with connect("team-a") as client, client.open_session(
            client_name=f"compose-{uuid.uuid4().hex[:8]}") as session:
        yield session


def test_kernels_compute_over_tls(session_a):
    n = 1 << 16
    x, y, c = (session_a.allocate(4 * n) for _ in range(3))
    q = session_a.default_queue
    xs = np.arange(n, dtype=np.float32)
    x.write(xs)
    y.write(np.ones(n, dtype=np.float32))
    q.launch("samples", "vector_add_f32", n // 256, 256, x, y, c, n)
    q.launch("samples", "saxpy_f32", n // 256, 256, 2.0, x, y, n)
    q.synchronize(timeout=DEADLINE)
    np.testing.assert_array_equal(c.read(dtype=np.float32), xs + 1)
    np.testing.assert_array_equal(y.read(dtype=np.float32), 2 * xs + 1)


def test_unix_socket_shared_through_a_volume():
    with connect("team-a", target=UNIX) as client, \
            client.open_session(client_name="compose-unix") as session:
        buf = session.allocate(4 * 1024)
        session.default_queue.launch("samples", "fill_u32", 4, 256, buf,
                                     0xC0FFEE, 1024)
        values = buf.read(dtype=np.uint32)
    assert values.shape == (1024,)
    assert (values == 0xC0FFEE).all()


def test_event_orders_work_across_queues(session_a):
    # The producer is slow (200 ms of spinning) before it fills; a consumer
    # copying without the event would read zeros.
    n = 4096
    src, dst = session_a.allocate(4 * n), session_a.allocate(4 * n)
    producer, consumer = session_a.create_queue(), session_a.create_queue()
    producer.launch("samples", "spin_ns", 1, 1, 200_000_000)
    producer.launch("samples", "fill_u32", n // 256, 256, src, 7, n)
    ready = producer.record_event()
    consumer.wait_for(ready)
    consumer.copy(src, dst)
    consumer.synchronize(timeout=DEADLINE)
    assert ready.query()
    assert (dst.read(dtype=np.uint32) == 7).all()

    # Waiting on a queue: everything enqueued on it so far comes first.
    producer.launch("samples", "spin_ns", 1, 1, 100_000_000)
    producer.fill(src, 9)
    consumer.wait_for(producer)
    consumer.copy(src, dst)
    assert (consumer.read(dst, dtype=np.uint32) == 9).all()


def test_flag_gates_work_until_the_host_signals(session_a):
    counter = session_a.allocate(8)
    go, done = session_a.create_flag(), session_a.create_flag()
    gated, observer = session_a.create_queue(), session_a.create_queue()
    gated.wait_for_host_value(go, 1)
    gated.launch("samples", "add_u64", 1, 1, counter, 42)
    gated.write_flag(done, 7)
    assert u64(observer.read(counter)) == 0
    assert not gated.is_idle()
    go.signal(1)
    done.wait(7, timeout=DEADLINE)
    assert u64(observer.read(counter)) == 42
    assert done.read() == 7


def test_host_function_holds_its_queue_between_kernels(session_a):
    counter = session_a.allocate(8)
    q, observer = session_a.create_queue(), session_a.create_queue()
    started, release = threading.Event(), threading.Event()
    calls = []

    def host_func():
        calls.append(threading.current_thread().name)
        started.set()
        release.wait(DEADLINE)

    q.launch("samples", "add_u64", 1, 1, counter, 1)
    q.enqueue_host_func(host_func)
    q.launch("samples", "add_u64", 1, 1, counter, 10)
    assert started.wait(DEADLINE), "the host function never ran"
    # The first kernel ran, the second waits behind the host function.
    assert u64(observer.read(counter)) == 1
    release.set()
    q.synchronize(timeout=DEADLINE)
    assert u64(observer.read(counter)) == 11
    assert len(calls) == 1


def test_wrong_or_missing_token_is_unauthenticated():
    ca = _read("ca.crt")
    for bad in ("not-a-token", None):
        with pytest.raises(gpustream.Error) as error:
            gpustream.connect(TCP, token=bad, root_certificates=ca,
                              timeout=DEADLINE)
        assert error.value.code == grpc.StatusCode.UNAUTHENTICATED, error.value
    # The unix socket needs a token too: it is only another transport.
    with pytest.raises(gpustream.Error) as error:
        gpustream.connect(UNIX, token="not-a-token", timeout=DEADLINE)
    assert error.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_client_certificate_maps_to_its_tenant():
    with gpustream.connect(TCP, root_certificates=_read("ca.crt"),
                           private_key=_read("team-b.key"),
                           certificate_chain=_read("team-b.crt"),
                           timeout=DEADLINE) as client, \
            client.open_session(client_name="compose-mtls") as session:
        buf = session.allocate(8)
        session.default_queue.launch("samples", "add_u64", 1, 1, buf, 5)
        assert u64(buf.read()) == 5
        channel, ops = stub_channel("ops")
        with channel:
            sessions = pb_grpc.AdminStub(channel).ListSessions(
                pb.ListSessionsRequest(), metadata=ops,
                timeout=DEADLINE).sessions
        mine = [s for s in sessions if s.client_name == "compose-mtls"]
        assert [s.tenant for s in mine] == ["team-b"]


def test_another_tenants_ids_are_not_found(session_a):
    buf = session_a.allocate(64)
    session_a.default_queue.fill(buf, 3)
    session_a.default_queue.synchronize(timeout=DEADLINE)
    channel, team_b = stub_channel("team-b")
    with channel:
        stub = pb_grpc.GpuStreamStub(channel)

        def read(session_id: str) -> grpc.RpcError:
            with pytest.raises(grpc.RpcError) as error:
                stub.ReadBuffer(pb.ReadBufferRequest(
                    session_id=session_id,
                    queue_id=session_a.default_queue.id,
                    buffer_id=buf.id, size=64), metadata=team_b,
                    timeout=DEADLINE)
            return error.value

        foreign = read(session_a.id)
        made_up = "0" * len(session_a.id)
        unknown = read(made_up)
    assert foreign.code() == grpc.StatusCode.NOT_FOUND, foreign
    assert unknown.code() == grpc.StatusCode.NOT_FOUND, unknown
    # Word for word what an id that does not exist gets: nothing tells
    # team-b that the session exists.
    assert (foreign.details().replace(session_a.id, "<id>") ==
            unknown.details().replace(made_up, "<id>"))
    # The owner still reads its data.
    assert (buf.read(dtype=np.uint32) == 3).all()


def test_admin_service_is_for_admin_tenants_only():
    channel, team_a = stub_channel("team-a")
    with channel:
        with pytest.raises(grpc.RpcError) as error:
            pb_grpc.AdminStub(channel).ListSessions(
                pb.ListSessionsRequest(), metadata=team_a, timeout=DEADLINE)
    assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED

    name = f"compose-admin-{uuid.uuid4().hex[:8]}"
    with connect("team-a") as client:
        session = client.open_session(client_name=name)
        counter = session.allocate(8)
        session.default_queue.launch("samples", "add_u64", 1, 1, counter, 1)
        session.default_queue.synchronize(timeout=DEADLINE)
        channel, ops = stub_channel("ops")
        with channel:
            admin = pb_grpc.AdminStub(channel)
            stats = admin.GetStats(pb.GetStatsRequest(), metadata=ops,
                                   timeout=DEADLINE)
            team = {t.tenant: t for t in stats.tenants}["team-a"]
            assert team.sessions >= 1 and team.weight == 2
            assert team.commands_completed >= 1

            listed = admin.ListSessions(pb.ListSessionsRequest(),
                                        metadata=ops, timeout=DEADLINE)
            mine = [s for s in listed.sessions if s.client_name == name]
            assert len(mine) == 1, listed
            assert (mine[0].tenant, mine[0].buffers) == ("team-a", 1)
            # The listing never shows the secret session id.
            assert session.id not in str(listed)

            # The admin ends the session; its owner's next call is ABORTED.
            admin.KillSession(pb.KillSessionRequest(
                public_id=mine[0].public_id), metadata=ops, timeout=DEADLINE)
        with pytest.raises(gpustream.Error) as error:
            counter.read()
        assert error.value.code == grpc.StatusCode.ABORTED, error.value
