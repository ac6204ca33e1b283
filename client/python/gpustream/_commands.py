"""A command between its call and its answer: ``Outgoing`` (built, ready
to submit), ``Waiter`` (the outcome a caller waits for), ``Pending`` (an
acknowledged-only command awaiting ``completed_seq``) and ``describe``
(how messages name the call). Internal to the package.

Ownership: the calling thread builds an ``Outgoing``; once submitted,
``SessionCore`` owns its bookkeeping under its lock. A ``Waiter`` is
completed once, by the Submit reader thread or by a stream failure, and
may be waited on from any thread.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import grpc

from gpustream._errors import Error


class Waiter:
    """The outcome of one command somebody waits for (or that is tracked to
    report its failure). Completed once, by the reader thread or by a
    stream failure; ``wait`` may be called from any thread."""

    __slots__ = ("seq", "queue_id", "op", "detail", "done", "result",
                 "error", "pieces", "detached", "then")

    def __init__(self, queue_id: Optional[int], op: str, detail: str,
                 detached: bool = False,
                 then: Optional[Callable[[], None]] = None) -> None:
        self.seq = 0
        self.queue_id = queue_id
        self.op = op
        self.detail = detail
        self.done = threading.Event()
        self.result: Any = None
        self.error: Optional[Error] = None
        self.pieces: Optional[bytearray] = None
        # Nobody waits: a failure is filed like a pipelined command's.
        self.detached = detached
        # Run by the reader thread once the daemon has answered (success or
        # failure; not when the stream broke), before the calls answered by
        # the same response are woken. It must not block: it may only
        # enqueue, without waiting for room.
        self.then = then

    def describe(self) -> str:
        return describe(self.op, self.detail, self.queue_id)

    def wait(self, timeout: Optional[float]) -> Any:
        """The command's result; raises its ``Error``. ``timeout`` (seconds,
        None: no limit) bounds the local wait, after which DEADLINE_EXCEEDED
        is raised (the command itself goes on)."""
        if not self.done.wait(timeout):
            raise Error(grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"{self.describe()}: no answer from the daemon within "
                        f"{timeout:.3f} s")
        if self.error is not None:
            raise self.error
        return self.result


class Outgoing:
    """One command built, ready for ``SessionCore.submit``: ``body``, the
    serialized ``Command`` without its seq (``seq``: 0 until submitted),
    and how its outcome is reported (``queue_id``/``op``/``detail`` name
    the call; ``waiter`` receives the outcome; ``ack``: acknowledged
    through ``completed_seq`` on success, else it always gets a result of
    its own)."""

    __slots__ = ("body", "seq", "queue_id", "op", "detail", "waiter", "ack")

    def __init__(self, body: bytes, queue_id: Optional[int], op: str,
                 detail: str, waiter: Optional[Waiter], ack: bool) -> None:
        self.body = body
        self.seq = 0
        self.queue_id = queue_id
        self.op = op
        self.detail = detail
        self.waiter = waiter
        self.ack = ack


# Ids this client mints are below 2**63; the daemon mints its own from
# 2**63 up, and the only queue of those a session holds is its default.
_FIRST_SERVER_ID = 1 << 63


def queue_name(queue_id: int) -> str:
    """``queue 5``, or ``the default queue``."""
    if queue_id >= _FIRST_SERVER_ID:
        return "the default queue"
    return f"queue {queue_id}"


def describe(op: str, detail: str, queue_id: Optional[int]) -> str:
    """How a message names a call, e.g. ``launch_kernel samples.noop on
    queue 5`` or ``... on the default queue``."""
    text = f"{op} {detail}" if detail else op
    return text if queue_id is None else f"{text} on {queue_name(queue_id)}"


class Pending:
    """An acknowledged-only command awaiting ``completed_seq``."""

    __slots__ = ("seq", "queue_id", "op", "detail", "waiter")

    def __init__(self, seq: int, queue_id: Optional[int], op: str,
                 detail: str, waiter: Optional[Waiter]) -> None:
        self.seq = seq
        self.queue_id = queue_id
        self.op = op
        self.detail = detail
        self.waiter = waiter
