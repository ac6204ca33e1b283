"""Per-queue error routing: a failure nobody waits for (a pipelined
command's, a detached call's, a host function's) is filed under the queue
its command targeted, or under the session for a queue-less command, and
raised by the next ``Queue.synchronize`` that takes it. Internal to the
package."""

from __future__ import annotations

from typing import Dict, Optional

from gpustream._errors import Error


class ErrorSlot:
    """The first unreported error of a queue (or of the session), and how
    many more came after it."""

    __slots__ = ("first", "more")

    def __init__(self, first: Error) -> None:
        self.first = first
        self.more = 0

    def take(self) -> Error:
        if self.more == 0:
            return self.first
        return Error(self.first.code,
                     f"{self.first.message} (and {self.more} later command "
                     f"failure(s))")


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
        of any queue). Only the first failure of each is kept whole; later
        ones are counted into its message."""
        if queue_id is None:
            if self._session_error is None:
                self._session_error = ErrorSlot(error)
            else:
                self._session_error.more += 1
            return
        slot = self._queue_errors.get(queue_id)
        if slot is None:
            self._queue_errors[queue_id] = ErrorSlot(error)
        else:
            slot.more += 1

    def take(self, queue_id: int) -> Optional[ErrorSlot]:
        """The queue's first unreported failure, else the session's; None if
        neither. Taking it clears it."""
        slot = self._queue_errors.pop(queue_id, None)
        if slot is None:
            slot, self._session_error = self._session_error, None
        return slot
