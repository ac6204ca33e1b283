"""Bearer tokens and TLS."""

import hashlib
import subprocess

import grpc
import numpy as np
import pytest

import gpustream
from conftest import Daemon

TOKEN = "py-client-token-5e1d"

OPENSSL_CONFIG = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def openssl(*args, cwd):
    subprocess.run(["/usr/bin/openssl", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def secure_daemon(tmp_path_factory):
    """A daemon with one tenant (a bearer token) and TLS on TCP."""
    d = tmp_path_factory.mktemp("certs")
    (d / "openssl.cnf").write_text(OPENSSL_CONFIG)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=test-ca",
            "-config", "openssl.cnf", "-extensions", "ca_ext", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=localhost", "-config",
            "openssl.cnf", cwd=d)
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
            "ca.key", "-CAcreateserial", "-days", "2", "-out", "server.pem",
            "-extfile", "openssl.cnf", "-extensions", "server_ext", cwd=d)
    sha = hashlib.sha256(TOKEN.encode()).hexdigest()
    (d / "config.textproto").write_text(
        f'tenants {{ name: "py" token_sha256: "{sha}" }}\n')
    daemon = Daemon([f"--config={d}/config.textproto",
                     f"--tls_cert={d}/server.pem",
                     f"--tls_key={d}/server.key"])
    daemon.ca = (d / "ca.pem").read_bytes()
    yield daemon
    daemon.stop()


def test_token_is_required(secure_daemon):
    for token in (None, "wrong-token"):
        with pytest.raises(gpustream.Error) as error:
            gpustream.connect(secure_daemon.unix_target, token=token,
                              timeout=5)
        assert error.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_token_authenticates_every_call(secure_daemon):
    with gpustream.connect(secure_daemon.unix_target, token=TOKEN) as client:
        with client.open_session() as session:
            buf = session.allocate(64)
            q = session.create_queue()
            ran = []
            q.launch("samples", "fill_u32", 1, 16, buf, 4, 16)
            q.enqueue_host_func(lambda: ran.append(True))  # The watch stream.
            q.synchronize(timeout=10)
            assert ran == [True]
            assert set(q.read(buf, dtype=np.uint32).tolist()) == {4}


def test_tls(secure_daemon):
    with gpustream.connect(secure_daemon.tcp_target, token=TOKEN,
                           root_certificates=secure_daemon.ca) as client:
        with client.open_session() as session:
            buf = session.allocate(16)
            session.default_queue.fill(buf, 0x01020304)
            assert buf.read() == bytes([4, 3, 2, 1]) * 4


def test_plaintext_to_a_tls_listener_fails(secure_daemon):
    with pytest.raises(gpustream.Error) as error:
        gpustream.connect(secure_daemon.tcp_target, token=TOKEN, timeout=10)
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    assert error.value.message.startswith(
        f"connect to {secure_daemon.tcp_target}: TLS handshake failed: the "
        "server wants TLS"), error.value.message


def test_tls_to_a_plaintext_listener_fails(daemon, secure_daemon):
    with pytest.raises(gpustream.Error) as error:
        gpustream.connect(daemon.tcp_target, timeout=10,
                          root_certificates=secure_daemon.ca)
    assert error.value.code == grpc.StatusCode.UNAVAILABLE
    assert "TLS handshake failed: the server does not speak TLS" in \
        error.value.message


def test_token_from_the_environment(secure_daemon, monkeypatch):
    monkeypatch.setenv("GPUSTREAM_TOKEN", TOKEN)
    with gpustream.connect(secure_daemon.tcp_target,
                           root_certificates=secure_daemon.ca) as client:
        with client.open_session() as session:
            assert session.allocate(8) is not None
    monkeypatch.setenv("GPUSTREAM_TOKEN", "not-a-token")
    with pytest.raises(gpustream.Error) as error:
        gpustream.connect(secure_daemon.tcp_target,
                          root_certificates=secure_daemon.ca)
    assert error.value.code == grpc.StatusCode.UNAUTHENTICATED
