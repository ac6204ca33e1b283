"""The objects a session owns besides its queues: events, completion flags
(``Flag``, with the ``WaitCondition`` of flag waits) and buffers; their
common base ``SessionObject``; and the checks of the values their calls
take that queues and sessions share. Internal to the package; the public
names are exported by ``gpustream``.

Ownership: an object holds its session's ``SessionCore`` and sends every
command through it; ids are per session, so an object given to a call is
first checked to belong to that call's session (``own_id``).
"""

from __future__ import annotations

import enum
import operator
import weakref
from typing import TYPE_CHECKING, Any, Optional, Tuple, Type, Union

import grpc

from gpustream._commands import queue_name
from gpustream._core import SessionCore
from gpustream._errors import Error
from gpustream._proto import pb
from gpustream._timeouts import (answer_wait, checked_timeout, deadline_of,
                                 timeout_ms)

if TYPE_CHECKING:  # Annotations only: both import this module.
    from gpustream._queue import Queue
    from gpustream._session import Session


class WaitCondition(enum.IntEnum):
    """When a flag wait is satisfied. ``GREATER_EQUAL`` compares as CUDA's
    stream memory operations: ``(int64)(flag - value) >= 0``."""

    EQUAL = pb.WAIT_CONDITION_EQUAL
    GREATER_EQUAL = pb.WAIT_CONDITION_GREATER_EQUAL


EQUAL = WaitCondition.EQUAL
GREATER_EQUAL = WaitCondition.GREATER_EQUAL


def wait_condition(condition: Union[WaitCondition, int, str]) -> int:
    """The wire value of ``condition``: a ``WaitCondition``, its value or
    its name (any case); raises INVALID_ARGUMENT otherwise."""
    if isinstance(condition, str):
        try:
            return WaitCondition[condition.upper()].value
        except KeyError:
            pass
    else:
        try:
            return WaitCondition(condition).value
        except ValueError:
            pass
    raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                f"condition must be EQUAL or GREATER_EQUAL, not {condition!r}")


def checked_int(value: Any, what: str, low: int, high: int,
                range_text: str) -> int:
    """``value`` as an int in [low, high]; raises ``Error`` naming ``what``
    otherwise (INVALID_ARGUMENT for a non-int or a bool, OUT_OF_RANGE
    outside ``range_text``)."""
    if isinstance(value, bool):
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    f"{what} must be an int, not a bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    f"{what} must be an int, not {type(value).__name__}"
                    ) from None
    if not low <= value <= high:
        raise Error(grpc.StatusCode.OUT_OF_RANGE,
                    f"{what} {value} is outside {range_text}")
    return value


def u64(value: Any, what: str) -> int:
    """``value`` as an int in [0, 2^64); raises ``Error`` otherwise."""
    return checked_int(value, what, 0, (1 << 64) - 1, "[0, 2^64)")


def _named(kind: str, object_id: int) -> str:
    """``buffer 5``; a queue as ``queue_name`` has it (``the default
    queue``)."""
    return queue_name(object_id) if kind == "queue" else f"{kind} {object_id}"


def own_id(core: SessionCore, obj: Any, cls: Type["SessionObject"],
         what: str) -> int:
    """The id of ``obj``, checked to be an open ``cls`` of ``core``'s
    session: ids are per session, so sent, another session's object would
    name this session's object with the same id. Raises INVALID_ARGUMENT
    (not a ``cls``, or of another session) or FAILED_PRECONDITION (closed),
    ``what`` naming the call."""
    name = cls.__name__.lower()
    if not isinstance(obj, cls):
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    f"{what}: expected a gpustream.{cls.__name__}, not "
                    f"{type(obj).__name__}")
    if obj._core is not core:
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    f"{what}: {_named(name, obj.id)} belongs to another "
                    "session")
    if obj._closed:
        raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                    f"{what}: {_named(name, obj.id)} is closed")
    return obj.id


class SessionObject:
    """An object of a session, destroyed by ``close()`` (pipelined) or with
    the session. Usable as a context manager.

    It keeps its session alive, except the default queue (``weak``), which
    the session holds: a closed session is freed by reference counting."""

    _destroy_op = ""

    def __init__(self, session: "Session", object_id: int,
                 weak: bool = False) -> None:
        self._session_ref = weakref.ref(session)
        self._keep_session = None if weak else session
        self._core = session._core
        self.id = object_id
        self._closed = False

    @property
    def _session(self) -> "Session":
        session = self._session_ref()
        if session is None:  # Only a default queue outlives its session.
            raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                        f"session {self._core.public_id} is closed")
        return session

    def _check(self) -> None:
        if self._closed:
            raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                        f"{_named(type(self).__name__.lower(), self.id)} is "
                        "closed")

    def _fill_destroy(self, command: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Destroys the object on the daemon, pipelined (after the work
        enqueued before it is done with it). A failure is reported by the
        next synchronize of any queue. Idempotent; a no-op once the session
        is closed."""
        if self._closed:
            return
        self._closed = True
        if self._core.closed:
            return
        self._core.enqueue(None, self._destroy_op, str(self.id),
                           self._fill_destroy, wait_for_room=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<gpustream.{type(self).__name__} {self.id}{state}>"


class Event(SessionObject):
    """A point in a queue's work (``Queue.record_event``) that other queues
    wait for and the host synchronizes on. Thread-safe."""

    _destroy_op = "destroy_event"

    def __init__(self, session: "Session", event_id: int,
                 enable_timing: bool) -> None:
        super().__init__(session, event_id)
        self.enable_timing = enable_timing

    def _fill_destroy(self, command: Any) -> None:
        command.destroy_event.event_id = self.id

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Blocks until the event's last recorded point has completed.
        ``timeout`` in seconds (None: no limit); DEADLINE_EXCEEDED after it."""
        self._check()
        timeout = checked_timeout(timeout)
        deadline = deadline_of(timeout)
        event_id, ms = self.id, timeout_ms(timeout)

        def fill(command: Any) -> None:
            sync = command.synchronize_event
            sync.event_id = event_id
            sync.timeout_ms = ms

        self._core.call(None, "synchronize_event", str(event_id), fill,
                        deadline=deadline).wait(answer_wait(deadline))

    def query(self) -> bool:
        """Whether the recorded point has completed (a round trip)."""
        self._check()
        event_id = self.id

        def fill(command: Any) -> None:
            command.query_event.event_id = event_id

        result = self._core.call(None, "query_event", str(event_id),
                                 fill).wait(None)
        return result.query_event.complete

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds from this event to ``end`` on the device; both need
        ``enable_timing`` and must have completed."""
        self._check()
        start_id = self.id
        end_id = own_id(self._core, end, Event, "elapsed_ms")

        def fill(command: Any) -> None:
            elapsed = command.event_elapsed_time
            elapsed.start_event_id = start_id
            elapsed.end_event_id = end_id

        result = self._core.call(None, "event_elapsed_time",
                                 f"{start_id} to {end_id}", fill).wait(None)
        return result.event_elapsed_time.milliseconds


class Graph(SessionObject):
    """A captured graph: work recorded once on a queue (``Queue.capture``)
    and replayed by one command (``Queue.launch_graph``) on any queue of its
    session, any number of times; launches of one graph never overlap.
    ``close()`` destroys it: launches already enqueued still run, and the
    buffers it uses (even ones freed since) live until they have."""

    _destroy_op = "destroy_graph"

    def _fill_destroy(self, command: Any) -> None:
        command.destroy_graph.graph_id = self.id


class Flag(SessionObject):
    """A completion flag: a 64-bit value (starting at 0) that the host
    signals and queues wait on (``Queue.wait_for_host_value``), or that a
    queue writes (``Queue.write_flag``) and the host waits on. Thread-safe."""

    _destroy_op = "destroy_flag"

    def _fill_destroy(self, command: Any) -> None:
        command.destroy_flag.flag_id = self.id

    def signal(self, value: int) -> None:
        """Stores ``value`` now (pipelined: it leaves at once, behind what was
        enqueued before; a failure is reported by the next synchronize of any
        queue)."""
        self._check()
        flag_id, value = self.id, u64(value, "value")

        def fill(command: Any) -> None:
            signal = command.signal_flag
            signal.flag_id = flag_id
            signal.value = value

        self._core.enqueue(None, "signal_flag", f"{flag_id} = {value}", fill)

    def read(self) -> int:
        """The flag's value, read after everything enqueued before this call
        has reached the daemon (a round trip)."""
        self._check()
        flag_id = self.id

        def fill(command: Any) -> None:
            command.read_flag.flag_id = flag_id

        result = self._core.call(None, "read_flag", str(flag_id),
                                 fill).wait(None)
        return result.read_flag.value

    def wait(self, value: int,
             condition: Union[WaitCondition, int, str] = EQUAL,
             timeout: Optional[float] = None) -> int:
        """Blocks until the flag satisfies ``condition`` against ``value``;
        returns the value that satisfied it. ``timeout`` in seconds (None: no
        limit); DEADLINE_EXCEEDED after it."""
        self._check()
        flag_id, value = self.id, u64(value, "value")
        cond = wait_condition(condition)
        timeout = checked_timeout(timeout)
        deadline, ms = deadline_of(timeout), timeout_ms(timeout)

        def fill(command: Any) -> None:
            wait = command.wait_flag
            wait.flag_id = flag_id
            wait.value = value
            wait.condition = cond
            wait.timeout_ms = ms

        result = self._core.call(None, "wait_flag", str(flag_id), fill,
                                 deadline=deadline).wait(answer_wait(deadline))
        return result.wait_flag.value


class Buffer(SessionObject):
    """Memory of the session's device (``kind`` "device") or page-locked
    host memory mapped to it ("host_pinned"). ``write``/``read`` are the
    queue methods of the same names on ``queue`` (default: the session's
    default queue). Thread-safe."""

    _destroy_op = "free_buffer"

    def __init__(self, session: "Session", buffer_id: int, size: int,
                 kind: str) -> None:
        super().__init__(session, buffer_id)
        self.size = size
        self.kind = kind

    def _fill_destroy(self, command: Any) -> None:
        command.free_buffer.buffer_id = self.id

    def _buffer_arg(self, core: SessionCore, kernel: str, index: int,
                    offset: int) -> Tuple[int, int]:
        """(buffer_id, offset) as a launch argument on a queue of ``core``'s
        session."""
        if core is not self._core:
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        f"kernel {kernel}: argument {index} (BUFFER) is "
                        f"buffer {self.id} of another session")
        self._check()
        if not 0 <= offset <= self.size:
            raise Error(grpc.StatusCode.OUT_OF_RANGE,
                        f"kernel {kernel}: argument {index} (BUFFER): offset "
                        f"{offset} is outside buffer {self.id} of {self.size} "
                        "bytes")
        return self.id, offset

    def write(self, data: Any, offset: int = 0,
              queue: Optional["Queue"] = None) -> None:
        """``(queue or session.default_queue).write(self, data, offset)``."""
        (queue or self._session.default_queue).write(self, data, offset)

    def read(self, size: Optional[int] = None, offset: int = 0,
             dtype: Any = None, queue: Optional["Queue"] = None,
             timeout: Optional[float] = None) -> Any:
        """``(queue or session.default_queue).read(self, size, offset,
        dtype, timeout)``."""
        return (queue or self._session.default_queue).read(
            self, size, offset, dtype, timeout)
