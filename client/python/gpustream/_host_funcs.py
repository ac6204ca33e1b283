"""Host functions of a session: the registry of host functions not yet
run, the notification watcher that learns when a queue reaches one, the
host-function thread that runs them, and the recovery of those whose
notification the daemon could not keep (NotificationsDropped; a broken
stream is resumed from the last notification handled, and the daemon
replays the rest). Internal to the package.

How a host function runs
------------------------
``Queue.enqueue_host_func`` registers the function (``add_host_func``)
and then submits three commands: the queue writes the host function's
ticket into its *reached* flag, the daemon notifies the client
(HostFuncReached on the WatchNotifications stream) and the queue waits for
its *release* flag to hold the ticket. The watcher thread (``_watch_loop``)
hands the function to the host-function thread (``_callback_loop``), which
runs it and then signals the release flag. When the daemon reports
notifications dropped, a recovery pass (``_recover_host_funcs``) reads
the reached flags and runs the host functions their queues have reached. Each host
function is popped from the registry, under the lock, by whoever hands it
on, so none runs twice.
"""

from __future__ import annotations

import queue as queue_module
import threading
from typing import Any, Callable, Dict, List, Optional

import grpc

from gpustream._commands import queue_name
from gpustream._errors import Error
from gpustream._proto import pb
from gpustream._timeouts import ANSWER_GRACE_S, deadline_of

# Reconnection backoff of the notification stream.
_WATCH_BACKOFF_FIRST_S = 0.05
_WATCH_BACKOFF_MAX_S = 2.0
# When, after a report of dropped notifications (or a reconnection to a
# daemon that replays none), to look for host functions whose notification
# was lost (seconds, each after the previous).
_RECOVERY_DELAYS_S = (0.0, 0.2, 0.8, 2.0)

# Stream-ending codes after which the session is gone: no reconnection.
_SESSION_GONE = frozenset({
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.FAILED_PRECONDITION,
})


class _HostFunc:
    """A host function not yet run: ``fn``, then ``flag_id`` := ``ticket``
    releases its queue; the queue stores ``ticket`` into ``reached_id`` as
    it reaches the host function."""

    __slots__ = ("fn", "queue_id", "flag_id", "reached_id", "ticket")

    def __init__(self, fn: Callable[[], Any], queue_id: int, flag_id: int,
                 reached_id: int, ticket: int) -> None:
        self.fn = fn
        self.queue_id = queue_id
        self.flag_id = flag_id
        self.reached_id = reached_id
        self.ticket = ticket


_STOP = object()  # Ends the host-function thread.


class HostFuncs:
    """The host-function side of ``SessionCore``, which mixes it in.

    Contract with the class mixing it in: it provides ``session_id`` (the
    secret, sent only), ``public_id`` (for thread names and messages),
    ``_stub`` and ``_metadata`` (the session's GpuStream stub and call
    metadata), ``_mu`` (the lock that also guards this registry and these
    threads), ``_stopping`` (set by ``close``: every thread here ends),
    ``_check_open_locked``, ``call``, ``enqueue`` and ``file_error``; it
    calls ``_init_host_funcs`` from its constructor, and from ``close``,
    once ``_stopping`` is set, ``_stop_host_funcs`` and then joins
    ``_host_func_threads``.

    Threads: the watcher, the host-function thread (both started on first
    use) and short-lived recovery threads. Host functions run one at a
    time, on the host-function thread only.
    """

    session_id: str
    public_id: str
    _stub: Any
    _metadata: Any
    _mu: threading.Lock
    _stopping: threading.Event

    def _init_host_funcs(self) -> None:
        # Host functions registered and not yet handed on, by callback id.
        self._host_funcs: Dict[int, _HostFunc] = {}
        self._watcher: Optional[threading.Thread] = None
        # Threads looking for lost host functions (``_start_recovery``).
        self._recoveries: List[threading.Thread] = []
        self._watch_call: Any = None
        # The id of the last notification handled (watcher thread only).
        self._handled_id = 0
        self._callbacks: Optional[queue_module.SimpleQueue] = None
        self._callback_thread: Optional[threading.Thread] = None
        # How often the notification stream was reopened, and how many host
        # functions were found reached without their notification.
        self.watch_reconnects = 0
        self.recovered_host_funcs = 0
        # Notifications the daemon reported dropped (NotificationsDropped).
        self.dropped_notifications = 0

    def add_host_func(self, queue_id: int, fn: Callable[[], Any],
                      flag_id: int, reached_id: int, ticket: int,
                      callback_id: int) -> None:
        """Registers ``fn`` for ``callback_id`` (minted by ``mint_id``),
        before the command naming it is submitted: when its HostFuncReached
        arrives (or the queue's ``reached_id`` flag shows it was reached, see
        ``_recover_host_funcs``), ``fn`` runs on the session's host-function
        thread, then ``flag_id`` is signalled with ``ticket``. Starts the
        notification watcher on first use. Thread-safe."""
        with self._mu:
            self._check_open_locked()
            self._host_funcs[callback_id] = _HostFunc(fn, queue_id, flag_id,
                                                      reached_id, ticket)
            if self._watcher is None:
                self._callbacks = queue_module.SimpleQueue()
                self._callback_thread = threading.Thread(
                    target=self._callback_loop,
                    name=f"gpustream-hostfunc-{self.public_id}",
                    daemon=True)
                self._watcher = threading.Thread(
                    target=self._watch_loop,
                    name=f"gpustream-watch-{self.public_id}", daemon=True)
                self._callback_thread.start()
                self._watcher.start()

    def _watch_loop(self) -> None:
        """Reads the notification stream; reopens it with bounded backoff
        when it breaks, for as long as the session is open, from the id of
        the last notification handled: the daemon replays those after it,
        so none the broken stream took with it is lost."""
        backoff = _WATCH_BACKOFF_FIRST_S
        while not self._stopping.is_set():
            request = pb.WatchNotificationsRequest(
                session_id=self.session_id,
                acknowledged_id=self._handled_id)
            call = self._stub.WatchNotifications(request,
                                                 metadata=self._metadata)
            with self._mu:
                self._watch_call = call
            if self._stopping.is_set():
                call.cancel()
                return
            if self.watch_reconnects > 0 and self._handled_id == 0:
                # A daemon that numbers no notification (older than
                # "notification_resume") replays nothing: the reached
                # flags show what the broken stream lost.
                self._start_recovery()
            gone = False
            try:
                for notification in call:
                    backoff = _WATCH_BACKOFF_FIRST_S
                    self._on_notification(notification)
            except grpc.RpcError as rpc_error:
                gone = rpc_error.code() in _SESSION_GONE
                if rpc_error.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    # The daemon refused the acknowledged id (it never
                    # sent it): start over, every kept notification
                    # again (those handled are ignored) and the flags.
                    self._handled_id = 0
            if self._stopping.is_set() or gone:
                return
            self.watch_reconnects += 1
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, _WATCH_BACKOFF_MAX_S)

    def _start_recovery(self) -> None:
        """Checks for lost host functions now and a few times more: the
        daemon may still deliver to a stream that is already broken for a
        moment after the client notices."""
        def passes() -> None:
            for delay in _RECOVERY_DELAYS_S:
                if self._stopping.wait(delay):
                    return
                with self._mu:
                    if not self._host_funcs:
                        return
                self._recover_host_funcs()

        thread = threading.Thread(
            target=passes, daemon=True,
            name=f"gpustream-recover-{self.public_id}")
        with self._mu:
            if self._stopping.is_set():
                return
            self._recoveries = [t for t in self._recoveries if t.is_alive()]
            self._recoveries.append(thread)
        thread.start()

    def _recover_host_funcs(self) -> None:
        """Runs the host functions that their queues have reached (their
        ``reached_id`` flag holds their ticket or more) but whose
        notification never came. A late notification finds the host
        function gone and is ignored, so none runs twice.

        Order: a queue waits for each host function to return before it
        goes on, so at most one host function per queue is reached and not
        yet run; those found are handed to the host-function thread sorted
        by queue and ticket, i.e. in the order their queues reached them."""
        with self._mu:
            reached_ids = {h.reached_id for h in self._host_funcs.values()}
        reached = {}
        for reached_id in reached_ids:
            def fill(command: Any, f: int = reached_id) -> None:
                command.read_flag.flag_id = f

            try:
                result = self.call(
                    None, "read_flag", str(reached_id), fill,
                    deadline=deadline_of(ANSWER_GRACE_S)
                ).wait(ANSWER_GRACE_S)
            except Error:
                continue
            reached[reached_id] = result.read_flag.value
        with self._mu:
            lost = sorted(
                ((h.queue_id, h.ticket, callback_id)
                 for callback_id, h in self._host_funcs.items()
                 if h.reached_id in reached
                 and ((reached[h.reached_id] - h.ticket) & (1 << 63)) == 0),
                key=lambda item: item[:2])
            host_funcs = [self._host_funcs.pop(c) for _, _, c in lost]
        for host_func in host_funcs:
            self._callbacks.put(host_func)
        if host_funcs:
            self.recovered_host_funcs += len(host_funcs)

    def _on_notification(self, notification: Any) -> None:
        if notification.id:
            self._handled_id = notification.id
        kind = notification.WhichOneof("kind")
        if kind == "host_func_reached":
            callback_id = notification.host_func_reached.callback_id
            with self._mu:
                host_func = self._host_funcs.pop(callback_id, None)
            if host_func is not None:
                self._callbacks.put(host_func)
        elif kind == "notifications_dropped":
            # The daemon could not keep or send them (nobody read for too
            # long, or a resume reached back past what it keeps). The
            # host functions among the dropped notifications are found from
            # their queues' reached flags; the others were informational
            # (queue errors also come from synchronize): nothing the client
            # relies on is lost.
            self.dropped_notifications += (
                notification.notifications_dropped.count)
            self._start_recovery()

    def _callback_loop(self) -> None:
        while True:
            host_func = self._callbacks.get()
            if host_func is _STOP:
                return
            try:
                host_func.fn()
            except Exception as error:  # Reported, and the queue goes on.
                self.file_error(host_func.queue_id, Error(
                    grpc.StatusCode.UNKNOWN,
                    f"host function {getattr(host_func.fn, '__name__', '?')} "
                    f"on {queue_name(host_func.queue_id)} raised "
                    f"{type(error).__name__}: {error}"))
            flag_id, ticket = host_func.flag_id, host_func.ticket

            def fill(command: Any) -> None:
                signal = command.signal_flag
                signal.flag_id = flag_id
                signal.value = ticket

            try:
                self.enqueue(None, "signal_flag",
                             f"{flag_id} = {ticket} (host function of queue "
                             f"{host_func.queue_id})", fill)
            except Error:
                pass  # The session is closed or broken: nothing to release.


    # ------------------------------------------------------------------
    # Closing (called by ``close`` only, once ``_stopping`` is set).

    def _stop_host_funcs(self) -> None:
        """Cancels the notification stream and ends the host-function
        thread once the host functions handed to it have run."""
        with self._mu:
            watch_call = self._watch_call
        if watch_call is not None:
            watch_call.cancel()
        if self._callbacks is not None:
            self._callbacks.put(_STOP)

    def _host_func_threads(self) -> List[Optional[threading.Thread]]:
        """The threads to join on close (None: never started)."""
        with self._mu:
            recoveries = list(self._recoveries)
        return [self._watcher, self._callback_thread, *recoveries]
