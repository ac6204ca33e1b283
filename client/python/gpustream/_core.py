"""The engine of one session: the Submit stream, batching, results by seq
and closing. Internal to the package.

What it builds on: ``_commands`` (the records of a command in flight),
``_error_routing`` (failures filed for a queue's next synchronize),
``_host_funcs`` (host functions and the notification stream, mixed into
``SessionCore``) and ``_timeouts`` (the timeouts calls take).

How a command travels
---------------------
A call builds its command(s) standalone (``prepare``: a ``Command`` filled
and serialized outside any lock, so a value the message cannot hold or a
command too large for a request is refused before anything is queued), then
``submit`` gives them their seqs and appends them to the open batch under
one hold of ``_mu``, and returns: the commands of one call (a large write's
pieces, a host function's three) are never interleaved with another
thread's. The request iterator handed to the Submit call (``_requests``)
runs on gRPC's sending thread: it blocks until a batch is ready, takes the
oldest one and yields it as one serialized ``SubmitRequest`` (each
command's bytes behind its seq field: protobuf fields may come in any
order); gRPC writes it and calls the iterator again only once the write has
completed. So a command enqueued while no write is in flight leaves at
once, and commands enqueued while one is in flight are coalesced into the
next request. No lock is held while a request is built or written:
``_requests`` yields outside ``_mu``.

Batches are bounded by ``MAX_BATCH_COMMANDS`` commands and
``MAX_BATCH_BYTES`` serialized bytes (counted exactly, seq and framing
included); a single command that could not fit a request alone is refused
with INVALID_ARGUMENT at its call. A buffer write is split into pieces of at
most ``MAX_WRITE_PIECE`` bytes. Producers wait (back-pressure, bounded by
the call's timeout) while more than ``MAX_QUEUED_BYTES`` wait to be sent.

Results
-------
The reader thread (``_read_loop``) matches ``CommandResult`` s by seq. A
command that succeeds without data is acknowledged only through
``completed_seq``; its description (op name, ids, queue) is kept in
``_acks`` until then, so a failure names the call and is filed under the
queue it targeted (``None``: a queue-less command). Read results arriving in
pieces (``chunk_offset``/``more``) are joined before the waiter sees them.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import grpc

from gpustream._commands import Outgoing, Pending, Waiter, describe
from gpustream._error_routing import ErrorRouter
from gpustream._errors import Error, code_from_int, from_rpc_error
from gpustream._host_funcs import HostFuncs
from gpustream._proto import pb, pb_grpc

_log = logging.getLogger("gpustream")

# Commands per SubmitRequest.
MAX_BATCH_COMMANDS = 512
# Serialized bytes per SubmitRequest, at most: gRPC's default message bound
# (the daemon's limits.max_message_bytes is 256 MiB by default and may be
# set as low as this). A command that cannot fit one request alone is
# refused.
MAX_BATCH_BYTES = 4 << 20
# The largest WriteBuffer piece; larger writes become several commands.
MAX_WRITE_PIECE = 1 << 20
# Bytes enqueued and not yet handed to gRPC before producers wait.
MAX_QUEUED_BYTES = 64 << 20
# What a command's seq may add to its serialized size: a tag byte and a
# varint of up to 10 bytes (the command is measured before it has one).
_SEQ_BYTES = 11
# Tags (field number << 3 | wire type) of Command.seq (varint),
# SubmitRequest.session_id and SubmitRequest.commands (length-delimited).
_SEQ_TAG = b"\x08"
_SESSION_ID_TAG = b"\x0a"
_COMMANDS_TAG = b"\x12"
# The Submit method, sent serialized requests as they are.
_SUBMIT_METHOD = "/{}/{}".format(
    pb.DESCRIPTOR.services_by_name["GpuStream"].full_name, "Submit")
# Session.close() returns within this many seconds, whatever the daemon does;
# so does Client.close(), its sessions' closes included.
CLOSE_TIMEOUT_S = 10.0


def _varint_bytes(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _framed(body: int) -> int:
    """What a field of ``body`` bytes with a one-byte tag takes."""
    return 1 + _varint_bytes(body) + body


class SessionCore(HostFuncs):
    """One session's Submit stream and, through ``HostFuncs``, its
    notification stream.

    Thread-safe: any thread may enqueue, call and wait. ``_mu`` guards the
    batches, the bookkeeping of commands in flight, the error router and
    the host-function registry; it is held only for short, non-blocking
    work, never across a stream write or a wait for the daemon.
    """

    def __init__(self, channel: grpc.Channel, metadata: Tuple, session_id: str,
                 default_queue_id: int, public_id: str,
                 enqueue_timeout: Optional[float] = None) -> None:
        self.session_id = session_id  # Secret: sent, never put in a message.
        # How long a call without a deadline of its own waits for room
        # (back-pressure); None: as long as the session lives.
        self.enqueue_timeout = enqueue_timeout
        self.public_id = public_id
        self.default_queue_id = default_queue_id
        self._metadata = metadata
        self._stub = pb_grpc.GpuStreamStub(channel)
        self._ids = itertools.count(1)

        self._mu = threading.Lock()
        self._have_batch = threading.Condition(self._mu)
        self._have_room = threading.Condition(self._mu)
        # Batches to send, oldest first; the last one is open for appends.
        # [commands, their bytes in a request] each.
        self._batches: Deque[List[Any]] = collections.deque()
        # A request's bytes before its commands: the session id.
        session_id_bytes = session_id.encode()
        self._request_header = (_SESSION_ID_TAG
                                + _varint(len(session_id_bytes))
                                + session_id_bytes)
        self._request_bytes = len(self._request_header)
        self._queued_bytes = 0
        self._next_seq = 1
        self._half_closed = False  # No more commands: the stream half-closes.
        self._closed = False
        self._stream_error: Optional[Error] = None
        self._acks: Deque[Pending] = collections.deque()
        self._waiters: Dict[int, Waiter] = {}
        # Failures nobody waits for, by queue (guarded by ``_mu``).
        self._errors = ErrorRouter()
        self._stopping = threading.Event()  # Set by close(): threads end.
        self._init_host_funcs()
        # What the stream carried: SubmitRequests, and the most commands and
        # serialized bytes in one. Written by the sending thread only.
        self.stats = {"requests": 0, "max_request_commands": 0,
                      "max_request_bytes": 0}

        submit = channel.stream_stream(
            _SUBMIT_METHOD, request_serializer=None,
            response_deserializer=pb.SubmitResponse.FromString)
        self._call = submit(self._requests(), metadata=self._metadata)
        self._reader = threading.Thread(
            target=self._read_loop, name=f"gpustream-reader-{public_id}",
            daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------
    # Ids and enqueueing.

    def mint_id(self) -> int:
        """A fresh object id from the client range [1, 2^63)."""
        return next(self._ids)

    def _check_open_locked(self) -> None:
        if self._stream_error is not None:
            raise self._stream_error
        if self._half_closed:
            raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                        f"session {self.public_id} is closed")

    def prepare(self, queue_id: Optional[int], op: str, detail: str,
                fill: Callable[[Any], None], waiter: Optional[Waiter] = None,
                ack: bool = True) -> Outgoing:
        """Builds one command standalone, queues nothing: ``fill(command)``
        sets its op on a fresh ``Command``. ``queue_id``/``op``/``detail``
        name the call in error messages and choose whose ``synchronize``
        reports a failure; see ``Outgoing`` for ``waiter`` and ``ack``.

        Raises ``Error`` at once: OUT_OF_RANGE or INVALID_ARGUMENT for a
        value the message cannot hold (``fill`` raised ValueError or
        TypeError), INVALID_ARGUMENT for a command larger than one
        SubmitRequest may carry. Thread-safe (no lock taken)."""
        command = pb.Command()
        try:
            fill(command)
        except ValueError as error:
            raise Error(grpc.StatusCode.OUT_OF_RANGE,
                        f"{describe(op, detail, queue_id)}: {error}") from None
        except TypeError as error:
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        f"{describe(op, detail, queue_id)}: {error}") from None
        body = command.SerializeToString()
        room = MAX_BATCH_BYTES - self._request_bytes
        size = _framed(len(body) + _SEQ_BYTES)
        if size > room:
            # Sent, it would end the stream (every queue's work with it) at
            # the daemon's message bound: refused alone.
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        f"{describe(op, detail, queue_id)}: the command is "
                        f"{size} bytes; one SubmitRequest carries at most "
                        f"{room} bytes of commands")
        return Outgoing(body, queue_id, op, detail, waiter, ack)

    def submit(self, items: Sequence[Outgoing],
               deadline: Optional[float] = None,
               wait_for_room: bool = True) -> None:
        """Appends ``items`` (one or more, from ``prepare``) to the stream,
        in order and under one hold of the lock: no other command comes
        between them.

        With ``wait_for_room``, first waits (back-pressure) while more than
        ``MAX_QUEUED_BYTES`` wait to be sent; past ``deadline``
        (``time.monotonic()``; None: the session's ``enqueue_timeout``, if
        any, from now) raises DEADLINE_EXCEEDED and appends nothing. Raises the session's error once it is closed or
        broken. Thread-safe; it blocks only for back-pressure."""
        if deadline is None and self.enqueue_timeout is not None:
            deadline = time.monotonic() + self.enqueue_timeout
        with self._mu:
            if wait_for_room:
                self._wait_for_room_locked(deadline, items[0])
            else:
                self._check_open_locked()
            for item in items:
                self._append_locked(item)

    def _append_locked(self, item: Outgoing) -> None:
        """Gives ``item`` its seq, files how its outcome is reported and
        adds it to the open batch (opening a new one when the last is
        full)."""
        seq = self._next_seq
        self._next_seq += 1
        item.seq = seq
        if item.waiter is not None:
            item.waiter.seq = seq
        if item.ack:
            self._acks.append(Pending(seq, item.queue_id, item.op,
                                       item.detail, item.waiter))
        else:
            self._waiters[seq] = item.waiter
        inner = len(item.body) + 1 + _varint_bytes(seq)
        size = inner + (2 if inner < 0x80 else 1 + _varint_bytes(inner))
        batches = self._batches
        last = batches[-1] if batches else None
        if last is None or (
                len(last[0]) >= MAX_BATCH_COMMANDS
                or self._request_bytes + last[1] + size > MAX_BATCH_BYTES):
            last = [[], 0]
            batches.append(last)
            if len(batches) == 1:
                self._have_batch.notify()
        last[0].append((seq, item.body))
        last[1] += size
        self._queued_bytes += size

    def _wait_for_room_locked(self, deadline: Optional[float],
                              first: Outgoing) -> None:
        """Back-pressure: waits (with ``_mu`` released) while too many bytes
        wait to be sent, until ``deadline`` at most (then DEADLINE_EXCEEDED,
        naming ``first``'s call)."""
        while self._queued_bytes > MAX_QUEUED_BYTES:
            self._check_open_locked()
            wait = 0.5
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Error(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"{describe(first.op, first.detail, first.queue_id)}:"
                        f" not sent within the timeout: "
                        f"{self._queued_bytes} bytes wait to be sent "
                        "(back-pressure)")
                wait = min(wait, left)
            self._have_room.wait(wait)
        self._check_open_locked()

    def enqueue(self, queue_id: Optional[int], op: str, detail: str,
                fill: Callable[[Any], None], waiter: Optional[Waiter] = None,
                ack: bool = True, deadline: Optional[float] = None,
                wait_for_room: bool = True) -> int:
        """``prepare`` and ``submit`` of one command; returns its seq.
        Releases (a destroy, a free) pass ``wait_for_room=False``: they
        are never refused for lack of room."""
        item = self.prepare(queue_id, op, detail, fill, waiter, ack)
        self.submit((item,), deadline, wait_for_room)
        return item.seq

    def call(self, queue_id: Optional[int], op: str, detail: str,
             fill: Callable[[Any], None], ack: bool = False,
             detached: bool = False, deadline: Optional[float] = None,
             then: Optional[Callable[[], None]] = None,
             wait_for_room: bool = True) -> Waiter:
        """Enqueues a command whose outcome the caller waits for; returns its
        ``Waiter``. ``detached``: nobody waits; a failure is reported like a
        pipelined command's. ``deadline`` bounds the wait for back-pressure
        room; ``then`` runs once the daemon has answered (see ``Waiter``)."""
        waiter = Waiter(queue_id, op, detail, detached=detached, then=then)
        self.enqueue(queue_id, op, detail, fill, waiter=waiter, ack=ack,
                     deadline=deadline, wait_for_room=wait_for_room)
        return waiter

    # ------------------------------------------------------------------
    # The sending side.

    def _requests(self):
        """The Submit request iterator, run by gRPC's sending thread: one
        serialized SubmitRequest per call, blocking until one is ready; ends
        (half-close) once the session closes and everything was handed
        over."""
        while True:
            with self._mu:
                while not self._batches and not self._half_closed:
                    self._have_batch.wait()
                if not self._batches:
                    return
                commands, size = self._batches.popleft()
                self._queued_bytes -= size
                self._have_room.notify_all()
            parts = [self._request_header]
            for seq, body in commands:
                seq_bytes = _varint(seq)
                parts += (_COMMANDS_TAG,
                          _varint(len(body) + 1 + len(seq_bytes)), _SEQ_TAG,
                          seq_bytes, body)
            request = b"".join(parts)
            stats = self.stats
            stats["requests"] += 1
            if len(commands) > stats["max_request_commands"]:
                stats["max_request_commands"] = len(commands)
            if len(request) > stats["max_request_bytes"]:
                stats["max_request_bytes"] = len(request)
            yield request

    # ------------------------------------------------------------------
    # The receiving side.

    def _read_loop(self) -> None:
        error: Optional[Error] = None
        try:
            for response in self._call:
                self._on_response(response)
        except grpc.RpcError as rpc_error:
            error = from_rpc_error(rpc_error, f"session {self.public_id}: "
                                   "the Submit stream ended")
        except Exception as unexpected:  # Keep waiters from hanging.
            _log.exception("gpustream: Submit reader failed")
            error = Error(grpc.StatusCode.INTERNAL,
                          f"session {self.public_id}: the Submit reader "
                          f"failed: {unexpected!r}")
        if error is None or self._closed:
            error = Error(grpc.StatusCode.FAILED_PRECONDITION,
                          f"session {self.public_id} is closed")
        self._fail_all(error)

    def _on_response(self, response: Any) -> None:
        completed: List[Waiter] = []
        for result in response.results:
            code = result.status.code
            with self._mu:
                waiter = self._waiters.get(result.seq)
            if code == 0 and result.WhichOneof("result") == "read_buffer":
                if waiter is None:
                    continue
                piece = result.read_buffer
                if (piece.more or piece.chunk_offset
                        or waiter.pieces is not None):
                    if waiter.pieces is None:
                        waiter.pieces = bytearray()
                    if piece.chunk_offset != len(waiter.pieces):
                        waiter.error = Error(
                            grpc.StatusCode.INTERNAL,
                            f"{waiter.describe()}: a read result's piece at "
                            f"{piece.chunk_offset} follows "
                            f"{len(waiter.pieces)} bytes; the daemon broke "
                            "the protocol")
                    else:
                        waiter.pieces += piece.data
                        if piece.more:
                            continue
                        waiter.result = waiter.pieces
                    waiter.pieces = None
                else:
                    waiter.result = piece.data
                with self._mu:
                    self._waiters.pop(result.seq, None)
                completed.append(waiter)
                continue
            if waiter is not None:
                with self._mu:
                    self._waiters.pop(result.seq, None)
                    if code != 0:
                        error = Error(code_from_int(code),
                                      f"{waiter.describe()}: "
                                      f"{result.status.message}")
                        if waiter.detached:
                            self._errors.file(waiter.queue_id, error)
                        else:
                            waiter.error = error
                    else:
                        waiter.result = result
                completed.append(waiter)
                continue
            if code == 0:
                continue  # A plain success sent anyway: nothing to do.
            with self._mu:
                pending = None
                for entry in self._acks:
                    if entry.seq == result.seq:
                        pending = entry
                        break
                    if entry.seq > result.seq:
                        break
                if pending is None:
                    error = Error(code_from_int(code),
                                  f"command seq {result.seq}: "
                                  f"{result.status.message}")
                    self._errors.file(None, error)
                    continue
                call = describe(pending.op, pending.detail, pending.queue_id)
                error = Error(code_from_int(code),
                              f"{call}: {result.status.message}")
                if pending.waiter is not None and not pending.waiter.detached:
                    pending.waiter.error = error
                    completed.append(pending.waiter)
                    pending.waiter = None
                else:
                    self._errors.file(pending.queue_id, error)
        # Commands up to completed_seq without a result have succeeded; this
        # response's results were handled first.
        done_seq = response.completed_seq
        with self._mu:
            acks = self._acks
            while acks and acks[0].seq <= done_seq:
                entry = acks.popleft()
                if entry.waiter is not None:
                    completed.append(entry.waiter)
        for waiter in completed:
            if waiter.then is not None:
                try:
                    waiter.then()
                except Error:
                    pass  # The session is closed or broken: nothing to do.
        for waiter in completed:
            waiter.done.set()


    def file_error(self, queue_id: Optional[int], error: Error) -> None:
        """Files ``error`` for the next synchronize of ``queue_id`` (None:
        of any queue)."""
        with self._mu:
            self._errors.file(queue_id, error)

    def take_error(self, queue_id: int) -> Optional[Error]:
        """The queue's first unreported failure, else the session's (errors
        of queue-less commands); None if neither.
        Taking it clears it."""
        with self._mu:
            slot = self._errors.take(queue_id)
        return None if slot is None else slot.take()

    def _fail_all(self, error: Error) -> None:
        """The stream is gone: every waiting call fails with ``error``."""
        with self._mu:
            if self._stream_error is None:
                self._stream_error = error
            waiters = list(self._waiters.values())
            self._waiters.clear()
            for entry in self._acks:
                if entry.waiter is not None:
                    waiters.append(entry.waiter)
            self._acks.clear()
            self._batches.clear()
            self._queued_bytes = 0
            self._half_closed = True
            self._have_batch.notify_all()
            self._have_room.notify_all()
        for waiter in waiters:
            if not waiter.done.is_set():
                waiter.error = Error(error.code,
                                     f"{waiter.describe()}: {error.message}")
                waiter.done.set()

    # ------------------------------------------------------------------
    # Unary RPCs on the session's channel.

    def unary(self, method: str, request: Any, timeout: Optional[float] = None
              ) -> Any:
        """Calls the unary RPC ``method``; raises ``Error``."""
        try:
            return getattr(self._stub, method)(request, timeout=timeout,
                                               metadata=self._metadata)
        except grpc.RpcError as rpc_error:
            raise from_rpc_error(rpc_error, method) from None

    # ------------------------------------------------------------------
    # Closing.

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, deadline: Optional[float] = None) -> Optional[Error]:
        """Ends the session within ``CLOSE_TIMEOUT_S`` seconds, or by
        ``deadline`` (``time.monotonic()``) if that is sooner.

        Sends CloseSession behind everything enqueued (in stream order),
        half-closes the stream and waits for the daemon to finish it; if
        that does not happen in time (the daemon is wedged or unreachable),
        falls back to a unary CloseSession and then cancels the streams.
        Returns the daemon's error for the close, if any (DEADLINE_EXCEEDED
        when nobody confirmed it in time). Whatever happens, the streams are
        cancelled and every waiting call fails before it returns.
        Idempotent: later calls return None at once. Thread-safe.
        """
        own_deadline = time.monotonic() + CLOSE_TIMEOUT_S
        deadline = (own_deadline if deadline is None
                    else min(deadline, own_deadline))
        with self._mu:
            if self._closed:
                return None
            self._closed = True
            waiter: Optional[Waiter] = None
            if self._stream_error is None and not self._half_closed:
                waiter = Waiter(None, "close_session", self.public_id)
                item = Outgoing(
                    pb.Command(close_session={}).SerializeToString(), None,
                    "close_session", self.public_id, waiter, ack=False)
                self._append_locked(item)
            self._half_closed = True
            self._have_batch.notify_all()
            self._have_room.notify_all()
        error: Optional[Error] = None
        answered = False
        if waiter is not None:
            answered = waiter.done.wait(
                max(0.0, min(5.0, deadline - time.monotonic())))
            if answered and waiter.error is not None:
                error = waiter.error
                # A stream that broke before the close arrived: close directly.
                answered = error.code not in (
                    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                    grpc.StatusCode.FAILED_PRECONDITION)
        if not answered:
            left = deadline - time.monotonic()
            error = error or Error(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"session {self.public_id}: the daemon did not confirm the "
                "close in time; the client side is closed")
            if left > 0.1:
                try:
                    self.unary(
                        "CloseSession",
                        pb.CloseSessionRequest(session_id=self.session_id),
                        timeout=min(3.0, left - 0.1))
                    error = None
                except Error as close_error:
                    error = Error(close_error.code,
                                  f"{close_error.message}; the client side "
                                  "is closed")
        with self._mu:
            self._stopping.set()
        self._reader.join(
            max(0.0, min(1.0, deadline - time.monotonic() - 0.5)))
        # Cancelling an ended call does nothing; a live one (a frozen
        # daemon, a write in flight) must not outlive the session.
        self._call.cancel()
        self._stop_host_funcs()
        # Fails every waiting call: a recovery pass waiting for a flag ends.
        self._fail_all(Error(grpc.StatusCode.FAILED_PRECONDITION,
                             f"session {self.public_id} is closed"))
        for thread in (self._reader, *self._host_func_threads()):
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        return error
