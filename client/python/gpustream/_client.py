"""Connecting to gpustreamd: discovery and sessions."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import grpc

from gpustream._connect_failure import (explain_connect_failure,
                                       resolve_target, resolve_token)
from gpustream._core import CLOSE_TIMEOUT_S
from gpustream._errors import Error, from_rpc_error
from gpustream._proto import pb, pb_grpc
from gpustream._session import Session
from gpustream._timeouts import checked_timeout

# The protocol versions this library speaks.
MIN_VERSION = 1
MAX_VERSION = 1


def connect(target: Optional[str] = None, token: Optional[str] = None,
            timeout: float = 10.0,
            root_certificates: Optional[bytes] = None,
            private_key: Optional[bytes] = None,
            certificate_chain: Optional[bytes] = None,
            server_name_override: Optional[str] = None,
            options: Sequence[Tuple[str, Any]] = (),
            rpc_timeout: float = 30.0) -> "Client":
    """Connects to the daemon at ``target`` ("unix:/path" or "host:port";
    None: ``$GPUSTREAM_TARGET`` if set, else "unix:/tmp/gpustreamd.sock")
    and negotiates the protocol version.

    ``token``: a bearer token, sent as ``authorization: Bearer <token>`` on
    every call (None: ``$GPUSTREAM_TOKEN`` if set). ``root_certificates`` (PEM bytes) turns on TLS, verifying the
    daemon against those CAs; ``private_key``/``certificate_chain`` add a
    client certificate (mTLS); ``server_name_override`` checks the
    daemon's certificate for that name instead of the target's host.
    ``options``: extra gRPC channel options. ``rpc_timeout`` bounds each
    discovery and session-opening RPC (DEADLINE_EXCEEDED after it).

    Raises ``Error``: UNAVAILABLE at once when the daemon cannot be reached,
    naming the target and the cause ("no such socket", "TLS handshake
    failed: the server wants TLS"...), or when it does not answer within
    ``timeout`` seconds; FAILED_PRECONDITION if no protocol version is
    shared; UNAUTHENTICATED for missing or wrong credentials. Nothing is
    retried: a daemon still starting is not there yet.
    """
    target = resolve_target(target)
    token = resolve_token(token)
    channel_options = [("grpc.max_receive_message_length", -1),
                       ("grpc.max_send_message_length", -1)]
    if server_name_override:
        channel_options.append(("grpc.ssl_target_name_override",
                                server_name_override))
    channel_options.extend(options)
    tls = root_certificates is not None or certificate_chain is not None
    if tls:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=root_certificates, private_key=private_key,
            certificate_chain=certificate_chain)
        channel = grpc.secure_channel(target, credentials,
                                      options=channel_options)
    else:
        channel = grpc.insecure_channel(target, options=channel_options)
    metadata: Tuple[Tuple[str, str], ...] = ()
    if token:
        metadata = (("authorization", f"Bearer {token}"),)
    try:
        response = pb_grpc.GpuStreamStub(channel).GetVersion(
            pb.GetVersionRequest(min_version=MIN_VERSION,
                                 max_version=MAX_VERSION),
            timeout=timeout, metadata=metadata, wait_for_ready=False)
    except grpc.RpcError as rpc_error:
        channel.close()
        raise explain_connect_failure(target, tls, timeout,
                                      rpc_error) from None
    return Client(channel, metadata, response.version, target, rpc_timeout)


class Client:
    """A connection to one gpustreamd. Thread-safe. ``close()`` (or leaving
    the ``with`` block) closes the sessions opened through it that are
    still open, then the channel, within ``CLOSE_TIMEOUT_S`` seconds."""

    def __init__(self, channel: grpc.Channel, metadata: Tuple,
                 version: int, target: str, rpc_timeout: float = 30.0) -> None:
        self._channel = channel
        self._metadata = metadata
        self._stub = pb_grpc.GpuStreamStub(channel)
        self.protocol_version = version
        self.target = target
        self._rpc_timeout = rpc_timeout
        self._mu = threading.Lock()
        self._sessions: List[Session] = []
        # module -> kernel -> declared parameter kinds (ListModules).
        self._kernels: Optional[Dict[str, Dict[str, Tuple[int, ...]]]] = None
        self._closed = False

    def _unary(self, method: str, request: Any) -> Any:
        try:
            return getattr(self._stub, method)(request,
                                               timeout=self._rpc_timeout,
                                               metadata=self._metadata)
        except grpc.RpcError as rpc_error:
            raise from_rpc_error(rpc_error, method) from None

    def server_info(self) -> Any:
        """The daemon's ``GetServerInfoResponse`` (server_version,
        protocol_version, backends, features)."""
        return self._unary("GetServerInfo", pb.GetServerInfoRequest())

    def list_devices(self) -> List[Any]:
        """The daemon's devices, as ``gpustream.v1.Device`` messages."""
        response = self._unary("ListDevices", pb.ListDevicesRequest())
        return list(response.devices)

    def list_modules(self) -> List[Any]:
        """The loaded kernel modules, as ``gpustream.v1.Module`` messages;
        refreshes the cache that ``Queue.launch`` checks arguments
        against."""
        modules = list(self._unary("ListModules",
                                   pb.ListModulesRequest()).modules)
        kernels: Dict[str, Dict[str, Tuple[int, ...]]] = {}
        for module in modules:
            table = kernels.setdefault(module.name, {})
            for kernel in module.kernels:
                table[kernel.name] = tuple(kernel.params)
        with self._mu:
            self._kernels = kernels
        return modules

    def _kernel_params(self, module: str, kernel: str) -> Tuple[int, ...]:
        """The declared parameter kinds of ``module.kernel``; fetches
        ListModules once, and again on a miss (the daemon may have loaded
        modules since). Raises NOT_FOUND for an unknown module or kernel."""
        kernels = self._kernels
        if kernels is not None:
            params = kernels.get(module, {}).get(kernel)
            if params is not None:
                return params
        self.list_modules()
        kernels = self._kernels or {}
        if module not in kernels:
            raise Error(grpc.StatusCode.NOT_FOUND,
                        f"module {module!r} is not loaded (modules: "
                        f"{', '.join(sorted(kernels)) or 'none'})")
        params = kernels[module].get(kernel)
        if params is None:
            raise Error(grpc.StatusCode.NOT_FOUND,
                        f"module {module!r} has no kernel {kernel!r} "
                        f"(kernels: {', '.join(sorted(kernels[module]))})")
        return params

    def open_session(self, device_id: int = 0, client_name: str = "",
                     lease_seconds: int = 0,
                     enqueue_timeout: Optional[float] = None) -> Session:
        """Opens a session on device ``device_id``. ``lease_seconds``: how
        long the session survives without any call or open stream (0: the
        daemon's default); the session's open Submit stream keeps it
        alive. ``enqueue_timeout`` (seconds): how long a call without a
        timeout of its own (launch, write, ...) waits for room while
        ``MAX_QUEUED_BYTES`` of commands wait to be sent (the daemon is not
        reading them); past it the call raises DEADLINE_EXCEEDED and sends
        nothing. None: it waits as long as the session lives."""
        enqueue_timeout = checked_timeout(enqueue_timeout)
        with self._mu:
            if self._closed:
                raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                            f"the client of {self.target} is closed")
        response = self._unary("OpenSession", pb.OpenSessionRequest(
            device_id=device_id, client_name=client_name,
            lease_seconds=lease_seconds))
        session = Session(self, response, device_id, enqueue_timeout)
        with self._mu:
            self._sessions.append(session)
        return session

    def _forget(self, session: Session) -> None:
        with self._mu:
            if session in self._sessions:
                self._sessions.remove(session)

    def close(self) -> None:
        """Closes the sessions still open (see ``Session.close``), then the
        channel; returns within ``CLOSE_TIMEOUT_S`` seconds in all, whatever
        the daemon does: the sessions' closes share that budget (each
        cancels its streams before it returns), and the channel is closed
        on a daemon thread that is waited for only with what is left of it.
        Errors of those closes are not raised. Idempotent; thread-safe."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        with self._mu:
            if self._closed:
                return
            self._closed = True
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            try:
                session._close(deadline)
            except Error:
                pass
        closer = threading.Thread(target=self._channel.close,
                                  name="gpustream-channel-close", daemon=True)
        closer.start()
        closer.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<gpustream.Client {self.target} protocol "
                f"v{self.protocol_version}>")
