"""Kernel launch arguments: Python values checked against a kernel's
declared parameter kinds before anything is sent."""

from __future__ import annotations

import math
import operator
from typing import Any, List, Optional, Sequence, Tuple

import grpc

from gpustream._errors import Error
from gpustream._proto import pb

KIND_NAMES = {
    pb.PARAM_KIND_BUFFER: "BUFFER",
    pb.PARAM_KIND_I32: "I32",
    pb.PARAM_KIND_U32: "U32",
    pb.PARAM_KIND_I64: "I64",
    pb.PARAM_KIND_U64: "U64",
    pb.PARAM_KIND_F32: "F32",
    pb.PARAM_KIND_F64: "F64",
    pb.PARAM_KIND_BYTES: "BYTES",
}

# Integer kinds: (KernelArg field, smallest, largest).
_INT_KINDS = {
    pb.PARAM_KIND_I32: ("i32", -(1 << 31), (1 << 31) - 1),
    pb.PARAM_KIND_U32: ("u32", 0, (1 << 32) - 1),
    pb.PARAM_KIND_I64: ("i64", -(1 << 63), (1 << 63) - 1),
    pb.PARAM_KIND_U64: ("u64", 0, (1 << 64) - 1),
}
_FLT_MAX = 3.4028234663852886e38

# A converted argument: (KernelArg field, value); a buffer's value is
# (buffer_id, offset).
Converted = Tuple[str, Any]


def kind_name(kind: int) -> str:
    return KIND_NAMES.get(kind, f"kind {kind}")


def convert(name: str, params: Sequence[int], args: Sequence[Any],
            core: Any) -> List[Converted]:
    """Checks ``args`` against ``params`` (the kernel ``name``'s declared
    kinds) and converts them.

    Python int → I32/U32/I64/U64 (range-checked), float (or int) →
    F32/F64, ``Buffer`` or ``(Buffer, offset)`` → BUFFER (an open buffer
    of the session of ``core``, its ``SessionCore``), bytes/bytearray/
    memoryview → BYTES. Raises ``Error``: INVALID_ARGUMENT for a wrong count
    or kind or a buffer of another session, OUT_OF_RANGE for a value outside
    its kind, FAILED_PRECONDITION for a closed buffer, naming the kernel,
    the parameter index and its kind.
    """
    if len(args) != len(params):
        kinds = ", ".join(kind_name(k) for k in params)
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    f"kernel {name} takes {len(params)} argument(s) "
                    f"({kinds}), got {len(args)}")
    out: List[Converted] = []
    for index, (kind, value) in enumerate(zip(params, args)):
        out.append(_convert_one(name, index, kind, value, core))
    return out


def _wrong(name: str, index: int, kind: int, value: Any, why: str = "",
           code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> Error:
    text = (f"kernel {name}: argument {index} is a {kind_name(kind)} "
            f"parameter; got {type(value).__name__} {_short_repr(value)}")
    return Error(code, f"{text}: {why}" if why else text)


def _short_repr(value: Any) -> str:
    """At most 60 characters of ``repr(value)``; an int too long to print
    (Python limits int-to-text conversions) is shown by its size."""
    try:
        return f"{value!r:.60}"
    except ValueError:
        return f"<{value.bit_length()}-bit int>"


def _convert_one(name: str, index: int, kind: int, value: Any,
                 core: Any) -> Converted:
    int_kind = _INT_KINDS.get(kind)
    if int_kind is not None:
        if isinstance(value, bool) or isinstance(value, float):
            raise _wrong(name, index, kind, value, "pass an int")
        try:
            number = operator.index(value)
        except TypeError:
            raise _wrong(name, index, kind, value) from None
        field, low, high = int_kind
        if not low <= number <= high:
            raise _wrong(name, index, kind, value,
                         f"outside [{low}, {high}]",
                         grpc.StatusCode.OUT_OF_RANGE)
        return field, number
    if kind in (pb.PARAM_KIND_F32, pb.PARAM_KIND_F64):
        if isinstance(value, bool) or not _is_real(value):
            raise _wrong(name, index, kind, value)
        try:
            number = float(value)
        except OverflowError:  # An int beyond any float.
            raise _wrong(name, index, kind, value,
                         "outside the range of a "
                         f"{32 if kind == pb.PARAM_KIND_F32 else 64}-bit "
                         "float", grpc.StatusCode.OUT_OF_RANGE) from None
        if kind == pb.PARAM_KIND_F32:
            if math.isfinite(number) and abs(number) > _FLT_MAX:
                raise _wrong(name, index, kind, value,
                             "outside the range of a 32-bit float",
                             grpc.StatusCode.OUT_OF_RANGE)
            return "f32", number
        return "f64", number
    if kind == pb.PARAM_KIND_BUFFER:
        offset = 0
        buffer = value
        if isinstance(value, tuple):
            if len(value) != 2:
                raise _wrong(name, index, kind, value,
                             "pass a Buffer or (Buffer, offset)")
            buffer, offset = value
        if not hasattr(buffer, "_buffer_arg"):
            raise _wrong(name, index, kind, value,
                         "pass a Buffer or (Buffer, offset)")
        try:
            offset = operator.index(offset)
        except TypeError:
            raise _wrong(name, index, kind, value,
                         "the offset must be an int") from None
        return "buffer", buffer._buffer_arg(core, name, index, offset)
    if kind == pb.PARAM_KIND_BYTES:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return "bytes", bytes(value)
        raise _wrong(name, index, kind, value,
                     "pass bytes, bytearray or memoryview")
    raise _wrong(name, index, kind, value,
                 "the daemon declared a parameter kind this client does not "
                 "know")


def _is_real(value: Any) -> bool:
    if type(value) in (float, int):
        return True
    import numbers
    return isinstance(value, numbers.Real)


def fill_launch(command: Any, queue_id: int, module: str, kernel: str,
                grid: Tuple[int, int, int], block: Tuple[int, int, int],
                shared_memory_bytes: int, args: List[Converted],
                cluster: Optional[Tuple[int, int, int]] = None,
                cooperative: bool = False) -> None:
    """Fills ``command`` (a Command) with the LaunchKernelRequest."""
    launch = command.launch_kernel
    launch.queue_id = queue_id
    launch.module = module
    launch.kernel = kernel
    g = launch.grid
    g.x, g.y, g.z = grid
    b = launch.block
    b.x, b.y, b.z = block
    if shared_memory_bytes:
        launch.shared_memory_bytes = shared_memory_bytes
    if cluster is not None:
        c = launch.cluster
        c.x, c.y, c.z = cluster
    if cooperative:
        launch.cooperative = True
    add = launch.args.add
    for field, value in args:
        if field == "buffer":
            arg = add().buffer
            arg.buffer_id, arg.offset = value
        else:
            add(**{field: value})


def cluster_dim3(value: Any, what: str) -> Optional[Tuple[int, int, int]]:
    """A launch's cluster: None for no clusters (None, 0 or all zeros, as
    the API's unset Dim3), else the dimensions as ``dim3`` checks them."""
    if value is None:
        return None
    if not isinstance(value, bool):
        try:
            dims = ([operator.index(v) for v in value]
                    if hasattr(value, "__iter__") else [operator.index(value)])
        except TypeError:
            dims = [1]  # Not ints: dim3 says why.
        if not any(dims):
            return None
    return dim3(value, what)


def dim3(value: Any, what: str) -> Tuple[int, int, int]:
    """Grid or block dimensions from an int or a sequence of 1 to 3 ints,
    each in [1, 2^32)."""
    if isinstance(value, bool):
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    f"{what} must be an int or (x[, y[, z]]), not a bool")
    try:
        dims = [operator.index(value)]
    except TypeError:
        try:
            dims = [operator.index(v) for v in value]
        except TypeError:
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        f"{what} must be an int or (x[, y[, z]]) of ints, not "
                        f"{value!r:.60}") from None
    if not 1 <= len(dims) <= 3:
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    f"{what} has {len(dims)} dimensions; at most 3")
    dims += [1] * (3 - len(dims))
    for d in dims:
        if not 1 <= d <= 0xFFFFFFFF:
            raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                        f"{what} {tuple(dims)}: every dimension must be in "
                        "[1, 2^32)")
    return dims[0], dims[1], dims[2]
