"""gpustream: the Python client of gpustreamd, the out-of-process GPU
stream daemon.

    import gpustream
    with gpustream.connect("unix:/tmp/gpustreamd.sock") as client:
        with client.open_session() as session:
            queue = session.default_queue
            buf = session.allocate(4 * 1024)
            queue.launch("samples", "fill_u32", 4, 256, buf, 7, 1024)
            queue.synchronize()

See docs/python-client.md for the guide.
"""

from gpustream._client import MAX_VERSION, MIN_VERSION, Client, connect
from gpustream._core import CLOSE_TIMEOUT_S
from gpustream._errors import Error
from gpustream._objects import (EQUAL, GREATER_EQUAL, Buffer, Event, Flag,
                                Graph, WaitCondition)
from gpustream._queue import Queue
from gpustream._shared import SharedBuffer
from gpustream._session import Session

# The project's one version number (server/version.h): the daemon, gpustreamctl
# and the C++ client carry the same; the tests check that they agree.
__version__ = "0.1.0"

__all__ = [
    "Buffer", "CLOSE_TIMEOUT_S", "Client", "EQUAL", "Error", "Event", "Flag",
    "GREATER_EQUAL", "Graph", "MAX_VERSION", "MIN_VERSION", "Queue", "Session",
    "SharedBuffer", "WaitCondition", "connect",
]
