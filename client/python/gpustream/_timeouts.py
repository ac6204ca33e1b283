"""The timeouts of calls: how a ``timeout`` argument is checked, what it
becomes on the wire, and how long the client waits locally for the
daemon's answer. Pure functions; thread-safe. Internal to the package."""

from __future__ import annotations

import math
import numbers
import time
from typing import Any, Optional

import grpc

from gpustream._errors import Error

# A waiting call with a timeout gives the daemon this long beyond it to answer
# before the client gives up locally with DEADLINE_EXCEEDED.
ANSWER_GRACE_S = 5.0
# The longest timeout the wire can carry (timeout_ms is a uint32); longer
# ones mean no limit.
_MAX_TIMEOUT_MS = 0xFFFFFFFF


def checked_timeout(timeout: Any) -> Optional[float]:
    """A call's ``timeout`` (seconds) checked: None (no limit) for None,
    ``math.inf`` or anything of 2^32 - 1 ms or more (the longest the wire
    can carry); else the seconds as a float. Raises INVALID_ARGUMENT for a
    negative or NaN timeout or one that is not a number."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    f"timeout must be None or a number of seconds, not "
                    f"{type(timeout).__name__}")
    try:
        seconds = float(timeout)
    except OverflowError:  # An int too large for a float.
        seconds = math.inf if timeout > 0 else -math.inf
    if math.isnan(seconds) or seconds < 0:
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    f"timeout must be None or >= 0 seconds, not {seconds}")
    if seconds * 1000.0 >= _MAX_TIMEOUT_MS:
        return None
    return seconds


def timeout_ms(timeout: Optional[float]) -> int:
    """The wire ``timeout_ms`` of a timeout checked by ``checked_timeout``:
    0 (no limit) for None, else rounded up to at least 1 ms."""
    if timeout is None:
        return 0
    return max(1, min(int(math.ceil(timeout * 1000.0)), _MAX_TIMEOUT_MS))


def deadline_of(timeout: Optional[float]) -> Optional[float]:
    """The ``time.monotonic()`` deadline of a checked timeout (None: none)."""
    return None if timeout is None else time.monotonic() + timeout


def remaining(deadline: Optional[float]) -> Optional[float]:
    """Seconds left until ``deadline`` (None: no limit), at least 0."""
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


def answer_wait(deadline: Optional[float]) -> Optional[float]:
    """How long to wait locally for the answer to a command sent with
    ``deadline``: until it, plus the grace the daemon gets to answer."""
    if deadline is None:
        return None
    return max(0.0, deadline + ANSWER_GRACE_S - time.monotonic())
