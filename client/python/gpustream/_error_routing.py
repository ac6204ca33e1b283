"""Per-queue error routing: a failure nobody waits for (a pipelined
command's, a detached call's, a host function's) is filed under the queue
its command targeted, or under the session for a queue-less command, and
raised by the next ``Queue.synchronize`` that takes it. Internal to the
package."""

from __future__ import annotations

from typing import Dict, Optional

from gpustream._errors import Error


# Failures listed whole in one report; later ones are counted.
MAX_LISTED_FAILURES = 256


class ErrorSlot:
    """The unreported errors of a queue (or of the session), in the order
    they were filed: each is reported, up to ``MAX_LISTED_FAILURES``."""

    __slots__ = ("errors", "unlisted")

    def __init__(self, first: Error) -> None:
        self.errors = [first]
        self.unlisted = 0

    def add(self, error: Error) -> None:
        if len(self.errors) < MAX_LISTED_FAILURES:
            self.errors.append(error)
        else:
            self.unlisted += 1

    def take(self) -> Error:
        """One ``Error``: the first's code, every message in order."""
        first = self.errors[0]
        message = first.message
        for error in self.errors[1:]:
            message += f"; then {error.code.name}: {error.message}"
        if self.unlisted:
            message += f"; and {self.unlisted} later command failure(s)"
        return Error(first.code, message)


class ErrorRouter:
    """The unreported failures of one session, by queue.

    Not thread-safe: its owner (``SessionCore``) calls it only while
    holding the lock that guards its stream bookkeeping (``_mu``); no
    method blocks."""

    __slots__ = ("_queue_errors", "_session_error")

    def __init__(self) -> None:
        self._queue_errors: Dict[int, ErrorSlot] = {}
        # Failures of queue-less commands (create/destroy, signal).
        self._session_error: Optional[ErrorSlot] = None

    def file(self, queue_id: Optional[int], error: Error) -> None:
        """Files ``error`` for the next synchronize of ``queue_id`` (None:
        of any queue). Each is reported, in the order filed (up to
        ``MAX_LISTED_FAILURES``; later ones are counted)."""
        if queue_id is None:
            if self._session_error is None:
                self._session_error = ErrorSlot(error)
            else:
                self._session_error.add(error)
            return
        slot = self._queue_errors.get(queue_id)
        if slot is None:
            self._queue_errors[queue_id] = ErrorSlot(error)
        else:
            slot.add(error)

    def take(self, queue_id: int) -> Optional[ErrorSlot]:
        """The queue's first unreported failure, else the session's; None if
        neither. Taking it clears it."""
        slot = self._queue_errors.pop(queue_id, None)
        if slot is None:
            slot, self._session_error = self._session_error, None
        return slot
