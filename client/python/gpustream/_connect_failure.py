"""What a failed connection attempt means, in words a user can act on (the
same wording as the C++ client's client/connect_failure.cc), and the target
and token from the environment."""

from __future__ import annotations

import os
from typing import Optional

import grpc

from gpustream._errors import Error

# The daemon's default address, as gpustreamd and gpustreamctl have it.
DEFAULT_TARGET = "unix:/tmp/gpustreamd.sock"


def resolve_target(target: Optional[str]) -> str:
    """``target``, else ``$GPUSTREAM_TARGET``, else ``DEFAULT_TARGET``."""
    return target or os.environ.get("GPUSTREAM_TARGET") or DEFAULT_TARGET


def resolve_token(token: Optional[str]) -> Optional[str]:
    """``token``, else ``$GPUSTREAM_TOKEN`` (None when unset or empty)."""
    return token or os.environ.get("GPUSTREAM_TOKEN") or None


def _cause(target: str, tls: bool, detail: str) -> str:
    # OpenSSL and BoringSSL word the same errors in different cases.
    detail = detail.lower()
    unix_socket = target.startswith("unix:")
    if "no such file or directory" in detail:
        return "no such socket (is gpustreamd running, and listening there?)"
    if "connection refused" in detail:
        if unix_socket:
            return ("nobody listens on this socket (a daemon that stopped "
                    "left it behind?)")
        return "connection refused: nothing listens on this port"
    if "permission denied" in detail:
        return ("permission denied: the socket is the daemon's user's and "
                "its group's (--unix_socket_group); join the group or run as "
                "that user")
    if "wrong version number" in detail or "wrong_version_number" in detail:
        return ("TLS handshake failed: the server does not speak TLS on this "
                "address (connect without TLS, or to its TLS port)")
    if ("certificate verify failed" in detail
            or "certificate_verify_failed" in detail):
        return ("TLS handshake failed: the server's certificate did not "
                "verify against the CA given")
    if "ssl handshake failed" in detail or "handshake failed" in detail:
        return "TLS handshake failed"
    if not tls and not unix_socket and "socket closed" in detail:
        return ("TLS handshake failed: the server wants TLS (give the CA "
                "that signed its certificate)")
    return ""


def explain_connect_failure(target: str, tls: bool, timeout: float,
                            error: grpc.RpcError) -> Error:
    """The ``Error`` of a version handshake that failed with ``error``:
    ``connect to TARGET: CAUSE``. No answer within ``timeout`` seconds is
    UNAVAILABLE too; other codes (UNAUTHENTICATED...) are kept."""
    prefix = f"connect to {target}: "
    code = error.code()
    detail = error.details() or ""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Error(grpc.StatusCode.UNAVAILABLE,
                     f"{prefix}no answer within {timeout} s (the address "
                     "does not answer, or the daemon is stopped or "
                     "overloaded)")
    if code != grpc.StatusCode.UNAVAILABLE:
        return Error(code, prefix + detail)
    cause = _cause(target, tls, detail)
    if not cause:
        return Error(code, prefix + detail)
    return Error(code, f"{prefix}{cause} [{detail}]")
