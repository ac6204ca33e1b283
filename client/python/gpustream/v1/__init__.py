"""Protocol modules generated from proto/gpustream/v1/gpustream.proto.

``gpustream_pb2`` and ``gpustream_pb2_grpc`` are written here at build
time (the Bazel genrule ``//client/python:gpustream_py_proto`` or
``pip install``, both running protoc); they are never checked in.
"""
