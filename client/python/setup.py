"""Builds the gpustream package, generating its protocol modules.

gpustream/v1/gpustream_pb2.py and gpustream_pb2_grpc.py are generated from
the repository's proto/gpustream/v1/gpustream.proto at build time (never
checked in), with protoc and grpc_python_plugin (Debian: protobuf-compiler
and protobuf-compiler-grpc; tools/setup.sh installs both). Override their
paths with $PROTOC and $GRPC_PYTHON_PLUGIN, and the folder holding
gpustream/v1/gpustream.proto with $GPUSTREAM_PROTO_ROOT.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join("gpustream", "v1", "gpustream.proto")


def _tool(env: str, name: str) -> str:
    path = os.environ.get(env) or shutil.which(name) or f"/usr/bin/{name}"
    if not os.access(path, os.X_OK):
        raise SystemExit(
            f"gpustream: {name} not found (set ${env}); install Debian's "
            "protobuf-compiler and protobuf-compiler-grpc (tools/setup.sh)")
    return path


def generate(out_dir: str) -> None:
    """Writes gpustream/v1/gpustream_pb2{,_grpc}.py under out_dir."""
    root = os.environ.get("GPUSTREAM_PROTO_ROOT") or os.path.join(
        HERE, "..", "..", "proto")
    if not os.path.isfile(os.path.join(root, PROTO)):
        raise SystemExit(
            f"gpustream: {PROTO} not found under {root}: build from the "
            "repository's client/python folder, or set $GPUSTREAM_PROTO_ROOT")
    os.makedirs(os.path.join(out_dir, "gpustream", "v1"), exist_ok=True)
    subprocess.run(
        [_tool("PROTOC", "protoc"), f"-I{root}", f"--python_out={out_dir}",
         f"--grpc_python_out={out_dir}",
         "--plugin=protoc-gen-grpc_python="
         + _tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin"),
         os.path.join(root, PROTO)],
        check=True)


class BuildPyWithProtos(build_py):
    """build_py that also generates the protocol modules into build_lib."""

    def run(self) -> None:
        super().run()
        generate(self.build_lib)


setup(cmdclass={"build_py": BuildPyWithProtos})
