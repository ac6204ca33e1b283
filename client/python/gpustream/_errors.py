"""The one exception type of the gpustream Python client."""

from __future__ import annotations

import grpc


class Error(Exception):
    """A gpustream failure: a gRPC status code and a message.

    Raised by the call that failed (unary RPCs, ``allocate``, reads, waits),
    or, for a pipelined command the daemon rejected, by the next
    ``synchronize()`` of the queue it targeted. ``code`` is a
    ``grpc.StatusCode`` (the daemon's error table: NOT_FOUND, OUT_OF_RANGE,
    ...); ``message`` names the call and the ids involved.
    """

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self):  # Picklable despite the two-argument constructor.
        return (type(self), (self.code, self.message))


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def code_from_int(value: int) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` of a numeric status code (UNKNOWN if none)."""
    return _CODES.get(value, grpc.StatusCode.UNKNOWN)


def from_rpc_error(error: grpc.RpcError, context: str = "") -> Error:
    """An ``Error`` for a failed gRPC call, its message prefixed by
    ``context`` (the call that failed) when given."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details = details or code.name
    return Error(code, f"{context}: {details}" if context else details)
