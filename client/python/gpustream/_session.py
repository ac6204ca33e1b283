"""Sessions: a client's hold on one device, which creates the queues,
events, flags and buffers that live until closed or until it closes.
Internal to the package; ``Session`` is exported by ``gpustream``."""

from __future__ import annotations

from typing import Any, Optional

import grpc

from gpustream._core import SessionCore
from gpustream._errors import Error
from gpustream._objects import Buffer, Event, Flag, checked_int, u64
from gpustream._proto import pb
from gpustream._queue import Queue
from gpustream._shared import SharedBuffer, fetch_mapping
from gpustream._timeouts import checked_timeout, deadline_of, remaining

_MEMORY_KINDS = {
    "device": pb.MEMORY_KIND_DEVICE,
    "host_pinned": pb.MEMORY_KIND_HOST_PINNED,
}


def _int32(value: Any, what: str) -> int:
    """``value`` as an int in [-2^31, 2^31); raises ``Error`` otherwise."""
    return checked_int(value, what, -(1 << 31), (1 << 31) - 1,
                       "[-2^31, 2^31)")


class Session:
    """A session on one device: the objects it creates live until closed or
    until the session closes. Thread-safe. Use as a context manager, or call
    ``close()``: it returns within ``CLOSE_TIMEOUT_S`` (10) seconds."""

    def __init__(self, client: Any, response: Any, device_id: int,
                 enqueue_timeout: Optional[float] = None) -> None:
        self._client = client
        # The secret id: whoever has it can use the session. Never printed;
        # messages, logs and repr() use public_id ("s-" + 16 hex digits,
        # as gpustreamctl sessions and the daemon's log show it).
        self.id: str = response.session_id
        self.public_id: str = response.public_id
        self.device_id = device_id
        self.lease_seconds: int = response.lease_seconds
        self._core = SessionCore(client._channel, client._metadata, self.id,
                                 response.default_queue_id, self.public_id,
                                 enqueue_timeout)
        self.default_queue = Queue(self, response.default_queue_id,
                                   owned=False)
        self._share_socket: Optional[str] = None  # GetServerInfo's, asked once.

    @property
    def closed(self) -> bool:
        return self._core.closed

    def _check(self) -> None:
        if self._core.closed:
            raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                        f"session {self.public_id} is closed")

    def create_queue(self, priority: int = 0) -> Queue:
        """A new queue (pipelined: usable at once). ``priority`` within the
        device's [priority_greatest, priority_least] (the daemon checks);
        not an int32: INVALID_ARGUMENT / OUT_OF_RANGE at the call, nothing
        sent."""
        self._check()
        priority = _int32(priority, "create_queue: priority")
        queue_id = self._core.mint_id()

        def fill(command: Any) -> None:
            create = command.create_queue
            create.id = queue_id
            create.priority = priority

        self._core.enqueue(None, "create_queue", str(queue_id), fill)
        return Queue(self, queue_id, owned=True)

    def create_event(self, enable_timing: bool = False) -> Event:
        """A new event (pipelined). ``enable_timing`` (a bool, else
        INVALID_ARGUMENT at the call, nothing sent) allows ``elapsed_ms``."""
        self._check()
        if not isinstance(enable_timing, bool):
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        "create_event: enable_timing must be a bool, not "
                        f"{type(enable_timing).__name__}")
        event_id = self._core.mint_id()

        def fill(command: Any) -> None:
            create = command.create_event
            create.id = event_id
            create.enable_timing = enable_timing

        self._core.enqueue(None, "create_event", str(event_id), fill)
        return Event(self, event_id, enable_timing)

    def create_flag(self) -> Flag:
        """A new completion flag with value 0 (pipelined)."""
        self._check()
        flag_id = self._core.mint_id()
        self._core.enqueue(None, "create_flag", str(flag_id),
                           lambda c: setattr(c.create_flag, "id", flag_id))
        return Flag(self, flag_id)

    def allocate(self, size_bytes: int, kind: str = "device",
                 timeout: Optional[float] = None) -> Buffer:
        """Allocates ``size_bytes`` of ``kind`` ("device" or
        "host_pinned"); waits for the daemon, so errors (RESOURCE_EXHAUSTED,
        ...) are raised here. ``timeout`` (seconds; None: as long as the
        allocation takes, which is seconds for gigabytes, or until the
        session ends): past it DEADLINE_EXCEEDED is raised, and the daemon,
        which may still make the buffer, frees it right after (nothing
        more is reported)."""
        self._check()
        deadline = deadline_of(checked_timeout(timeout))
        if kind not in _MEMORY_KINDS:
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        "kind must be 'device' or 'host_pinned', not "
                        f"{kind!r}")
        size = u64(size_bytes, "size_bytes")
        buffer_id, memory_kind = self._core.mint_id(), _MEMORY_KINDS[kind]

        def fill(command: Any) -> None:
            allocate = command.allocate_buffer
            allocate.id = buffer_id
            allocate.size_bytes = size
            allocate.kind = memory_kind

        waiter = self._core.call(None, "allocate_buffer",
                                 f"{buffer_id} ({size} bytes, {kind})", fill,
                                 ack=True, deadline=deadline)
        try:
            waiter.wait(remaining(deadline))
        except Error as e:
            if e.code != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
            if waiter.done.is_set() and waiter.error is None:
                pass  # Answered as the timeout passed: it is made.
            else:
                # Whatever comes now is dropped with the waiter.
                self._free_quietly(buffer_id)
                raise
        return Buffer(self, buffer_id, size, kind)

    def _free_quietly(self, buffer_id: int) -> None:
        """Frees ``buffer_id`` whether or not it was made, unheard: the
        stream runs a session's commands in order, so this comes after its
        allocation, whichever way that went."""
        def fill(command: Any) -> None:
            command.free_buffer.buffer_id = buffer_id

        try:
            self._core.call(None, "free_buffer", str(buffer_id), fill,
                            ack=True, wait_for_room=False)
        except Error:
            pass  # Closed or broken: the session's end frees it.

    def allocate_shared(self, size_bytes: int) -> SharedBuffer:
        """Allocates ``size_bytes`` of HOST_SHARED memory that this process
        maps too (same host only): ``buffer.memory`` is a writable
        ``memoryview``, ``buffer.array(dtype)`` a numpy array over it.
        FAILED_PRECONDITION where the daemon serves no share socket."""
        self._check()
        size = u64(size_bytes, "size_bytes")
        if self._share_socket is None:
            info = self._core.unary("GetServerInfo", pb.GetServerInfoRequest())
            self._share_socket = info.share_socket
        if not self._share_socket:
            raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                        "allocate_shared: the daemon serves no share socket "
                        "(sharing is off there, or it listens on no unix "
                        "socket)")
        buffer_id = self._core.mint_id()

        def fill(command: Any) -> None:
            allocate = command.allocate_buffer
            allocate.id = buffer_id
            allocate.size_bytes = size
            allocate.kind = pb.MEMORY_KIND_HOST_SHARED

        result = self._core.call(None, "allocate_buffer",
                                 f"{buffer_id} ({size} bytes, host_shared)",
                                 fill).wait(None)
        try:
            mapping, _ = fetch_mapping(self._share_socket,
                                       self._core.session_id,
                                       result.allocate_buffer.share_ticket)
        except Error:
            Buffer(self, buffer_id, size, "host_shared").close()
            raise
        return SharedBuffer(self, buffer_id, size, mapping)

    def close(self) -> None:
        """Closes the session on the daemon (after the commands enqueued
        before) and frees everything it owns. Returns within
        ``CLOSE_TIMEOUT_S`` seconds even if the daemon does not answer.
        Raises the daemon's error for the close (e.g. NOT_FOUND when the
        lease had already expired). Idempotent; thread-safe."""
        self._close(None)

    def _close(self, deadline: Optional[float]) -> None:
        """``close()``, done by ``deadline`` (``time.monotonic()``; None:
        within ``CLOSE_TIMEOUT_S``) at the latest."""
        error = self._core.close(deadline)
        self._client._forget(self)
        if error is not None:
            raise error

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.close()
        except Error:
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return (f"<gpustream.Session {self.public_id} device "
                f"{self.device_id}{state}>")


__all__ = ["Session"]
