"""HOST_SHARED buffers: session memory this process maps too, fetched from
the daemon's share socket (a memfd passed for a single-use ticket).
Internal to the package; ``SharedBuffer`` is exported by ``gpustream``."""

from __future__ import annotations

import mmap
import os
import socket
import struct
from typing import Any, Tuple

import grpc

from gpustream._errors import Error
from gpustream._objects import Buffer

# The daemon's wire format (docs/api.md, "Shared host memory").
_MAGIC = b"GSSHARE1"


def fetch_mapping(socket_path: str, session_id: str,
                  ticket: bytes) -> Tuple[mmap.mmap, int]:
    """Trades ``ticket`` for the buffer's memfd on ``socket_path`` as
    ``session_id`` and maps it: (mapping, buffer size). Raises ``Error`` (PERMISSION_DENIED when the
    daemon closes the connection without an answer: a wrong, used or
    expired ticket; UNAVAILABLE when the socket cannot be reached)."""
    sid = session_id.encode()
    request = (_MAGIC + struct.pack("<H", len(sid)) + sid +
               struct.pack("<H", len(ticket)) + ticket)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            # A blocking connect bounded by SO_SNDTIMEO (a unix socket's
            # connect waits that long for room in a full backlog; Python's
            # own timeout would make it fail at once with EAGAIN).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                            struct.pack("ll", 10, 0))
            sock.connect(socket_path)
            sock.settimeout(10)
            sock.sendall(request)
            data, fds, _, _ = socket.recv_fds(sock, 8, 1,
                                              socket.MSG_CMSG_CLOEXEC)
    except OSError as e:
        raise Error(grpc.StatusCode.UNAVAILABLE,
                    f"share socket {socket_path}: {e}") from None
    try:
        if len(data) != 8 or not fds:
            raise Error(grpc.StatusCode.PERMISSION_DENIED,
                        "the share socket refused the ticket (wrong, used, "
                        "expired, or the buffer is already freed)")
        (size,) = struct.unpack("<Q", data)
        # mmap cannot map 0 bytes; a 0-byte buffer's region is one page.
        try:
            return mmap.mmap(fds[0], max(size, 1), flags=mmap.MAP_SHARED), size
        except OSError as e:
            raise Error(grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"mapping {size} shared bytes: {e}") from None
    finally:
        for fd in fds:
            os.close(fd)


class SharedBuffer(Buffer):
    """A buffer whose bytes this process reads and writes directly
    (``memory``, a writable ``memoryview``; ``array(dtype)``, a numpy array
    over it): what it writes is what a ``copy`` from the buffer or a kernel
    taking it sees, and device work's writes into it are visible once that
    work is known complete (``synchronize``, an event, a flag). The mapping
    stays valid after ``close()`` until this object goes."""

    def __init__(self, session: Any, buffer_id: int, size: int,
                 mapping: mmap.mmap) -> None:
        super().__init__(session, buffer_id, size, "host_shared")
        self._mapping = mapping
        self.memory = memoryview(mapping)[:size]

    def array(self, dtype: Any = "uint8") -> Any:
        """The bytes as a numpy array of ``dtype`` (numpy must be
        installed)."""
        import numpy  # pylint: disable=import-outside-toplevel
        return numpy.frombuffer(self.memory, dtype=dtype)
