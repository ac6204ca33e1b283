"""The generated protocol modules, with a clear error when they are missing."""

try:
    from gpustream.v1 import gpustream_pb2 as pb
    from gpustream.v1 import gpustream_pb2_grpc as pb_grpc
except ImportError as error:  # pragma: no cover - depends on the install.
    raise ImportError(
        "gpustream: the generated modules gpustream.v1.gpustream_pb2 and "
        "gpustream_pb2_grpc are missing. Build the package with Bazel "
        "(//client/python:gpustream) or install it with pip, which run "
        "protoc and grpc_python_plugin on proto/gpustream/v1/gpustream.proto "
        "(Debian: apt-get install protobuf-compiler protobuf-compiler-grpc)"
    ) from error

__all__ = ["pb", "pb_grpc"]
