"""Queues: a session's ordered streams of device work (copies, fills,
kernel launches, event records and waits, flag writes and waits, host
functions), programmed like Modular MAX's DeviceQueue or CUDA streams.
Internal to the package; ``Queue`` is exported by ``gpustream``."""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import (TYPE_CHECKING, Any, Callable, Iterator, List, Optional,
                    Tuple, Union)

import grpc

from gpustream import _args
from gpustream._core import MAX_WRITE_PIECE
from gpustream._commands import Outgoing, queue_name
from gpustream._errors import Error
from gpustream._objects import (EQUAL, Buffer, Event, Flag, Graph,
                                SessionObject, WaitCondition, own_id, u64,
                                wait_condition)
from gpustream._proto import pb
from gpustream._timeouts import (answer_wait, checked_timeout, deadline_of,
                                 remaining, timeout_ms)

if TYPE_CHECKING:  # Annotations only: _session imports this module.
    from gpustream._session import Session


def _as_bytes_view(data: Any) -> memoryview:
    """A flat byte view of ``data``: bytes, bytearray, memoryview, a numpy
    array (any dtype; C order) or anything with the buffer protocol."""
    try:
        view = memoryview(data)
    except TypeError:
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    "data must be bytes, bytearray, memoryview or a numpy "
                    f"array, not {type(data).__name__}") from None
    if view.c_contiguous:
        return view.cast("B") if view.format != "B" or view.ndim != 1 else view
    # A strided view (e.g. a numpy slice): numpy copies it into C order.
    try:
        import numpy
    except ImportError:
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    "data is not contiguous; pass a contiguous copy") from None
    return memoryview(numpy.ascontiguousarray(data)).cast("B")


class Queue(SessionObject):
    """A queue of device work: runs its operations in the order they were
    enqueued; different queues may run concurrently.

    Enqueue methods return at once, without a round trip: the command joins
    the session's Submit stream and leaves promptly. A command the daemon
    rejects (an unknown id, an out-of-range copy) is raised, with its code
    and a message naming the call, by the next ``synchronize()`` of this
    queue; never by another queue's. A failure on the device makes the
    queue's error sticky: ``synchronize()`` keeps raising it.

    Thread-safe; commands from several threads are enqueued in the order
    the calls take the session's lock.
    """

    _destroy_op = "destroy_queue"

    def __init__(self, session: "Session", queue_id: int, owned: bool) -> None:
        super().__init__(session, queue_id, weak=not owned)
        self._owned = owned
        # Guards the host-function flags and tickets, and closing.
        self._host_lock = threading.Lock()
        self._host_flag: Optional[int] = None
        self._reached_flag: Optional[int] = None
        self._host_funcs = 0
        self._capturing = False  # Between begin_capture and end_capture.

    def _fill_destroy(self, command: Any) -> None:
        command.destroy_queue.queue_id = self.id

    def close(self) -> None:
        """Destroys the queue (pipelined; the daemon first lets its pending
        work finish, host functions included). The flags of its host
        functions are destroyed once the daemon has answered the destroy:
        earlier, they would cancel the queue's wait for a pending host
        function and let the work behind it run early. The default queue
        lives as long as the session: closing it does nothing. Thread-safe;
        idempotent."""
        if not self._owned:
            return
        with self._host_lock:
            if self._closed:
                return
            self._closed = True
            flags = [f for f in (self._host_flag, self._reached_flag)
                     if f is not None]
        if self._core.closed:
            return
        core, queue_id = self._core, self.id

        def destroy_flags() -> None:
            core.submit([core.prepare(
                None, "destroy_flag",
                f"{flag_id} (host functions of {queue_name(queue_id)})",
                lambda c, f=flag_id: setattr(c.destroy_flag, "flag_id", f))
                for flag_id in flags], wait_for_room=False)

        # destroy_queue always answers: tracked so a failure is reported by
        # the next synchronize of any queue.
        core.call(None, "destroy_queue", str(queue_id),
                  lambda c: setattr(c.destroy_queue, "queue_id", queue_id),
                  detached=True, then=destroy_flags if flags else None,
                  wait_for_room=False)

    # -- ordering --------------------------------------------------------

    def record_event(self, event: Optional[Event] = None,
                     enable_timing: bool = False) -> Event:
        """Records ``event`` (an open event of this session, else
        INVALID_ARGUMENT / FAILED_PRECONDITION at the call) or a new one,
        created with ``enable_timing``, at this point of the queue; returns
        it."""
        self._check()
        if event is None:
            event = self._session.create_event(enable_timing)
        queue_id = self.id
        event_id = own_id(self._core, event, Event, "record_event")

        def fill(command: Any) -> None:
            record = command.record_event
            record.queue_id = queue_id
            record.event_id = event_id

        self._core.enqueue(queue_id, "record_event", str(event_id), fill)
        return event

    def wait_for(self, other: Union[Event, "Queue"]) -> None:
        """Later work waits until ``other`` — an event's latest recorded
        point, or all work enqueued on another queue so far — has
        completed. ``other`` must be an open object of this session
        (INVALID_ARGUMENT / FAILED_PRECONDITION at the call)."""
        self._check()
        queue_id = self.id
        if isinstance(other, Event):
            event_id = own_id(self._core, other, Event, "wait_for")

            def fill(command: Any) -> None:
                wait = command.wait_event
                wait.queue_id = queue_id
                wait.event_id = event_id

            self._core.enqueue(queue_id, "wait_event", str(event_id), fill)
        elif isinstance(other, Queue):
            other_id = own_id(self._core, other, Queue, "wait_for")

            def fill(command: Any) -> None:
                wait = command.wait_queue
                wait.queue_id = queue_id
                wait.other_queue_id = other_id

            self._core.enqueue(queue_id, "wait_queue",
                               f"for {queue_name(other_id)}", fill)
        else:
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        f"wait_for takes an Event or a Queue, not "
                        f"{type(other).__name__}")

    def wait_for_host_value(self, flag: Flag, value: int,
                            condition: Union[WaitCondition, int, str] = EQUAL
                            ) -> None:
        """Later work stalls until ``flag`` (an open flag of this session)
        satisfies ``condition`` against ``value``."""
        self._check()
        queue_id = self.id
        flag_id = own_id(self._core, flag, Flag, "wait_for_host_value")
        value, cond = u64(value, "value"), wait_condition(condition)
        self._core.submit((self._wait_host_value(queue_id, flag_id, value,
                                                 cond),))

    def _wait_host_value(self, queue_id: int, flag_id: int, value: int,
                         cond: int) -> Outgoing:
        def fill(command: Any) -> None:
            wait = command.wait_host_value
            wait.queue_id = queue_id
            wait.flag_id = flag_id
            wait.value = value
            wait.condition = cond

        condition = WaitCondition(cond).name
        return self._core.prepare(queue_id, "wait_host_value",
                                  f"flag {flag_id} {condition} {value}", fill)

    def _write_flag(self, queue_id: int, flag_id: int, value: int,
                    detail: str) -> Outgoing:
        def fill(command: Any) -> None:
            write = command.write_flag
            write.queue_id = queue_id
            write.flag_id = flag_id
            write.value = value

        return self._core.prepare(queue_id, "write_flag", detail, fill)

    def write_flag(self, flag: Flag, value: int) -> None:
        """The queue stores ``value`` into ``flag`` (an open flag of this
        session) when it reaches this point."""
        self._check()
        queue_id = self.id
        flag_id = own_id(self._core, flag, Flag, "write_flag")
        value = u64(value, "value")
        self._core.submit((self._write_flag(queue_id, flag_id, value,
                                            f"flag {flag_id} = {value}"),))

    def enqueue_host_func(self, fn: Callable[[], Any]) -> None:
        """Runs ``fn()`` on the session's host-function thread when the queue
        reaches this point; later work on the queue waits until it returns
        (as cudaLaunchHostFunc).

        Host functions of a session run one at a time, in the order their
        queues reach them. ``fn`` must not wait for work of this queue, nor
        for another host function. An exception it raises is reported (code
        UNKNOWN) by the next synchronize of this queue; the queue goes on.

        Thread-safe: the commands it takes go into the stream together, so
        work enqueued concurrently on the queue is before or after the host
        function, never between its parts.
        """
        self._check()
        if not callable(fn):
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        f"enqueue_host_func takes a callable, not "
                        f"{type(fn).__name__}")
        if self._capturing:
            # Its release protocol (a ticket per call on the queue's flags)
            # holds for one run, not for every launch of a graph.
            raise Error(grpc.StatusCode.UNIMPLEMENTED,
                        "enqueue_host_func cannot be captured by this client "
                        "(its blocking protocol runs once, not on every "
                        "launch of a graph); capture a write_flag and watch "
                        "the flag instead")
        core, queue_id = self._core, self.id
        with self._host_lock:
            self._check()
            items: List[Outgoing] = []
            flag_id, reached_id = self._host_flag, self._reached_flag
            if flag_id is None or reached_id is None:
                # Two flags per queue: the n-th host function releases the
                # queue by storing n into the first; the queue stores n into
                # the second as it reaches the n-th, so the client can tell
                # which host functions were reached if their notifications
                # were lost (a broken stream, an overflowing backlog).
                flag_id, reached_id = core.mint_id(), core.mint_id()
                items += [core.prepare(
                    None, "create_flag",
                    f"{f} (host functions of {queue_name(queue_id)})",
                    lambda c, f=f: setattr(c.create_flag, "id", f))
                    for f in (flag_id, reached_id)]
            ticket = self._host_funcs + 1
            callback_id = core.mint_id()

            def fill(command: Any) -> None:
                host = command.enqueue_host_func
                host.queue_id = queue_id
                host.callback_id = callback_id

            # The reached flag is written before the notification is sent:
            # whoever misses the notification finds the ticket there.
            items += [
                self._write_flag(queue_id, reached_id, ticket,
                                 f"flag {reached_id} = {ticket} (host "
                                 "function reached)"),
                core.prepare(queue_id, "enqueue_host_func",
                             f"callback {callback_id}", fill),
                self._wait_host_value(queue_id, flag_id, ticket,
                                      pb.WAIT_CONDITION_GREATER_EQUAL)]
            core.add_host_func(queue_id, fn, flag_id, reached_id, ticket,
                               callback_id)
            core.submit(items)
            self._host_flag, self._reached_flag = flag_id, reached_id
            self._host_funcs = ticket

    # -- graphs ----------------------------------------------------------

    def begin_capture(self) -> None:
        """From now on the queue records what is enqueued on it (launches,
        copies, fills, writes, ``write_flag``, ``wait_for_host_value``, and
        ``record_event``/``wait_for`` of events recorded within the capture)
        instead of running it; the daemon validates it all now, so a launch
        of the graph validates nothing. Meanwhile ``synchronize``, ``read``
        and ``is_idle`` of this queue fail with FAILED_PRECONDITION,
        ``wait_for(queue)`` with INVALID_ARGUMENT; ``enqueue_host_func``
        raises UNIMPLEMENTED. Prefer ``with queue.capture() as graph:``."""
        self._check()
        queue_id = self.id
        # Answered: refused (a failed queue, a capture already), the work
        # enqueued next would run instead of being recorded.
        self._core.call(
            queue_id, "begin_capture", "",
            lambda c: setattr(c.begin_capture, "queue_id", queue_id),
            ack=True).wait(None)
        self._capturing = True

    def end_capture(self, graph: Optional[Graph] = None) -> Graph:
        """Ends the capture and returns its graph (``graph``: the handle to
        fill in, as ``capture()`` does; None: a new one). Waits for the
        daemon: if it refuses (a quota: RESOURCE_EXHAUSTED, raised here) the
        queue goes on capturing."""
        self._check()
        if graph is None:
            graph = Graph(self._session, self._core.mint_id())
        queue_id, graph_id = self.id, graph.id

        def fill(command: Any) -> None:
            end = command.end_capture
            end.queue_id = queue_id
            end.id = graph_id

        # Answered: a refused EndCapture (a quota) leaves the queue capturing,
        # and the caller must know before enqueueing more.
        self._core.call(queue_id, "end_capture", str(graph_id), fill,
                        ack=True).wait(None)
        self._capturing = False
        return graph

    @contextlib.contextmanager
    def capture(self) -> Iterator[Graph]:
        """``with queue.capture() as graph: ...`` records the block's work
        on this queue into ``graph`` (usable once the block ends; see
        ``begin_capture``). If the block raises, the capture still ends and
        the graph is closed."""
        graph = Graph(self._session, self._core.mint_id())
        self.begin_capture()
        try:
            yield graph
        except BaseException:
            try:
                self.end_capture(graph)
                graph.close()
            except Error as refused:
                # The block's exception is the one raised; this one says
                # the queue is still capturing.
                if sys.version_info >= (3, 11):
                    exc = sys.exc_info()[1]
                    if exc is not None:
                        exc.add_note(f"end_capture after it: {refused}")
            raise
        self.end_capture(graph)

    def launch_graph(self, graph: Graph) -> None:
        """Enqueues ``graph``'s work here, as if its commands were enqueued
        in capture order. Launches of one graph never overlap (a launch on
        another queue waits for the previous one to end)."""
        self._check()
        queue_id = self.id
        graph_id = own_id(self._core, graph, Graph, "launch_graph")

        def fill(command: Any) -> None:
            launch = command.launch_graph
            launch.queue_id = queue_id
            launch.graph_id = graph_id

        self._core.enqueue(queue_id, "launch_graph", str(graph_id), fill)

    # -- kernels ---------------------------------------------------------

    def launch(self, module: str, kernel: str, grid: Any, block: Any,
               *args: Any, shared_memory_bytes: int = 0,
               cluster: Any = None, cooperative: bool = False) -> None:
        """Enqueues ``module.kernel<<<grid, block, shared_memory_bytes>>>
        (*args)``.

        ``grid``/``block``: an int or 1 to 3 ints. ``cluster`` (an int or 1
        to 3 ints; None: no clusters) groups consecutive blocks into thread
        block clusters: every grid dimension must be a multiple of it
        (INVALID_ARGUMENT) and its volume at most the device's
        ``max_cluster_size`` and the kernel's limit (OUT_OF_RANGE).
        ``cooperative=True`` makes every block co-resident, so blocks may
        synchronize grid-wide (OUT_OF_RANGE for a grid larger than the
        device holds). A device without the feature answers UNIMPLEMENTED;
        these come back from the queue's next ``synchronize()``. ``args`` are checked
        against the kernel's declared parameters (``Client.list_modules``,
        cached) before anything is sent: int → I32/U32/I64/U64
        (range-checked), float → F32/F64, ``Buffer`` or ``(Buffer, offset)``
        → BUFFER, bytes → BYTES. Raises ``Error`` at once for an unknown
        module or kernel (NOT_FOUND), a wrong count or kind
        (INVALID_ARGUMENT), a value out of range (OUT_OF_RANGE), a buffer of
        another session (INVALID_ARGUMENT) or a closed one
        (FAILED_PRECONDITION), and a launch too large for one SubmitRequest
        (4 MiB; INVALID_ARGUMENT, naming the sizes).
        """
        self._check()
        name = f"{module}.{kernel}"
        params = self._session._client._kernel_params(module, kernel)
        converted = _args.convert(name, params, args, self._core)
        g = _args.dim3(grid, f"{name}: grid")
        b = _args.dim3(block, f"{name}: block")
        if shared_memory_bytes:
            shared_memory_bytes = u64(shared_memory_bytes,
                                       "shared_memory_bytes")
        c3 = _args.cluster_dim3(cluster, f"{name}: cluster")
        if not isinstance(cooperative, bool):
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        f"{name}: cooperative must be a bool, not "
                        f"{cooperative!r:.60}")
        queue_id = self.id
        self._core.enqueue(
            queue_id, "launch_kernel", name,
            lambda c: _args.fill_launch(c, queue_id, module, kernel, g, b,
                                        shared_memory_bytes, converted,
                                        c3, cooperative))

    # -- memory ----------------------------------------------------------

    def _span(self, buffer: Buffer, offset: int, size: Optional[int],
              what: str) -> Tuple[int, int]:
        """(offset, size) of ``buffer``, an open buffer of this session,
        checked to lie within it (``size`` None: to the end)."""
        own_id(self._core, buffer, Buffer, what)
        offset = u64(offset, f"{what}: offset")
        if size is None:
            size = max(0, buffer.size - offset)
        size = u64(size, f"{what}: size")
        if offset + size > buffer.size:
            raise Error(grpc.StatusCode.OUT_OF_RANGE,
                        f"{what}: [{offset}, {offset + size}) is outside "
                        f"buffer {buffer.id} of {buffer.size} bytes")
        return offset, size

    def write(self, buffer: Buffer, data: Any, offset: int = 0) -> None:
        """Enqueues a copy of ``data`` (bytes, bytearray, memoryview, a numpy
        array in C order, any buffer-protocol object) into ``buffer`` at
        ``offset``. The bytes are copied before this returns, so ``data``
        may be reused at once. Writes above 1 MiB travel as several
        commands, which go into the stream together (after back-pressure
        room for them): writes on one queue from several threads never
        interleave."""
        self._check()
        view = _as_bytes_view(data)
        offset, size = self._span(buffer, offset, len(view), "write")
        queue_id, buffer_id = self.id, buffer.id
        pieces: List[Outgoing] = []
        for start in range(0, size, MAX_WRITE_PIECE):
            piece = bytes(view[start:start + MAX_WRITE_PIECE])
            piece_offset = offset + start

            def fill(command: Any, piece: bytes = piece,
                     piece_offset: int = piece_offset) -> None:
                write = command.write_buffer
                write.queue_id = queue_id
                write.buffer_id = buffer_id
                write.offset = piece_offset
                write.data = piece

            pieces.append(self._core.prepare(
                queue_id, "write_buffer",
                f"{buffer_id} [{piece_offset}, {piece_offset + len(piece)})",
                fill))
        if pieces:
            self._core.submit(pieces)

    def read(self, buffer: Buffer, size: Optional[int] = None,
             offset: int = 0, dtype: Any = None,
             timeout: Optional[float] = None) -> Any:
        """Blocks until the queue has reached and run a copy of ``size``
        bytes (default: to the end) of ``buffer`` from ``offset``; returns
        them as bytes, or, with ``dtype``, as a writable numpy array of that
        dtype (``dtype`` needs numpy: FAILED_PRECONDITION without it).
        ``timeout`` (seconds; None: until the queue reaches the copy, which
        is forever behind a wait nobody satisfies, or the session ends):
        past it DEADLINE_EXCEEDED is raised; the copy stays enqueued and
        its bytes are dropped when they come."""
        self._check()
        deadline = deadline_of(checked_timeout(timeout))
        numpy = None
        if dtype is not None:
            try:
                import numpy
            except ImportError:
                raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                            f"read(dtype={dtype!r}) needs numpy, which is not "
                            "installed; read() without a dtype returns "
                            "bytes") from None
        offset, size = self._span(buffer, offset, size, "read")
        queue_id, buffer_id = self.id, buffer.id

        def fill(command: Any) -> None:
            read = command.read_buffer
            read.queue_id = queue_id
            read.buffer_id = buffer_id
            read.offset = offset
            read.size = size

        data = self._core.call(queue_id, "read_buffer",
                               f"{buffer_id} [{offset}, {offset + size})",
                               fill, deadline=deadline).wait(
                                   remaining(deadline))
        if numpy is None:
            return bytes(data) if not isinstance(data, bytes) else data
        if isinstance(data, bytes):
            data = bytearray(data)
        return numpy.frombuffer(data, dtype=dtype)

    def copy(self, src: Buffer, dst: Buffer, size: Optional[int] = None,
             src_offset: int = 0, dst_offset: int = 0) -> None:
        """Enqueues a device copy of ``size`` bytes (default: the rest of
        ``src`` from ``src_offset``) from ``src`` to ``dst``."""
        self._check()
        src_offset, size = self._span(src, src_offset, size, "copy source")
        dst_offset, _ = self._span(dst, dst_offset, size, "copy destination")
        queue_id, src_id, dst_id = self.id, src.id, dst.id

        def fill(command: Any) -> None:
            copy = command.copy_buffer
            copy.queue_id = queue_id
            copy.src_buffer_id = src_id
            copy.src_offset = src_offset
            copy.dst_buffer_id = dst_id
            copy.dst_offset = dst_offset
            copy.size = size

        self._core.enqueue(queue_id, "copy_buffer",
                           f"{src_id} to {dst_id} ({size} bytes)", fill)

    def fill(self, buffer: Buffer, value: int, size: Optional[int] = None,
             offset: int = 0) -> None:
        """Enqueues a fill of ``buffer`` with the 32-bit pattern ``value``
        over [offset, offset + size) (default: to the end); offset and size
        are multiples of 4 (the daemon checks)."""
        self._check()
        if isinstance(value, bool) or not isinstance(value, int) or not (
                0 <= value <= 0xFFFFFFFF):
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        f"fill: value must be an int in [0, 2^32), not "
                        f"{value!r:.60}")
        offset, size = self._span(buffer, offset, size, "fill")
        queue_id, buffer_id = self.id, buffer.id

        def fill(command: Any) -> None:
            f = command.fill_buffer
            f.queue_id = queue_id
            f.buffer_id = buffer_id
            f.offset = offset
            f.size = size
            f.value = value

        self._core.enqueue(queue_id, "fill_buffer",
                           f"{buffer_id} [{offset}, {offset + size})", fill)

    # -- synchronization -------------------------------------------------

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Blocks until all work enqueued on the queue so far has completed.

        Raises, first, the first failure of a command enqueued on this queue
        since the last synchronize (or, if none, of a queue-less command of
        the session: create/destroy, signal); else
        the queue's sticky error. ``timeout`` in seconds (None: no limit):
        DEADLINE_EXCEEDED after it, the work going on; it also bounds the
        wait for back-pressure room to send the call.
        """
        self._check()
        timeout = checked_timeout(timeout)
        deadline = deadline_of(timeout)
        queue_id, ms = self.id, timeout_ms(timeout)

        def fill(command: Any) -> None:
            sync = command.synchronize_queue
            sync.queue_id = queue_id
            sync.timeout_ms = ms

        try:
            self._core.call(queue_id, "synchronize_queue", "", fill,
                            deadline=deadline).wait(answer_wait(deadline))
        except Error as own:
            earlier = self._core.take_error(queue_id)
            raise (earlier or own) from None
        # Failures of earlier commands arrived before this answer.
        earlier = self._core.take_error(queue_id)
        if earlier is not None:
            raise earlier

    def is_idle(self) -> bool:
        """Whether all work enqueued on the queue has completed (a round
        trip; does not raise the queue's errors)."""
        self._check()
        queue_id = self.id

        def fill(command: Any) -> None:
            command.query_queue.queue_id = queue_id

        result = self._core.call(queue_id, "query_queue", "", fill).wait(None)
        return result.query_queue.idle
