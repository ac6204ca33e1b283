"""C++ code generation from .proto files with Debian's protoc and plugin."""

def cc_grpc_proto_library(name, src, include, grpc = True, deps = [], visibility = None):
    """Generates and compiles the protobuf (and gRPC) C++ code of one .proto.

    Args:
      name: the cc_library to define.
      src: the .proto file label.
      include: the import root of `src`, relative to the workspace root
        (e.g. "proto" for proto/gpustream/v1/x.proto imported as
        gpustream/v1/x.proto). Generated headers are included by the same
        path, so `include` is added to the include path.
      grpc: whether to generate gRPC service code.
      deps: cc_library deps of the generated code.
      visibility: visibility of the cc_library.
    """
    stem = src.split(":")[-1][:-len(".proto")]
    rel = stem[len(include) + 1:] if stem.startswith(include + "/") else stem
    pkg = native.package_name()
    rel_in_pkg = stem
    outs = [rel_in_pkg + ".pb.h", rel_in_pkg + ".pb.cc"]
    if grpc:
        outs += [rel_in_pkg + ".grpc.pb.h", rel_in_pkg + ".grpc.pb.cc"]
    import_root = "/".join([p for p in [pkg, include] if p])
    cmd = ("$(location @system_protos//:bin/protoc) -I{root} -I/usr/include " +
           "--cpp_out=$(GENDIR)/{root}").format(root = import_root or ".")
    tools = ["@system_protos//:bin/protoc"]
    if grpc:
        cmd += (" --grpc_out=$(GENDIR)/{root} " +
                "--plugin=protoc-gen-grpc=$(location @system_protos//:bin/grpc_cpp_plugin)").format(root = import_root or ".")
        tools.append("@system_protos//:bin/grpc_cpp_plugin")
    cmd += " $(location {})".format(src)
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = outs,
        cmd = cmd,
        tools = tools,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        strip_include_prefix = include,
        deps = deps + ["@system//:protobuf"] + (["@system//:grpc++"] if grpc else []),
        visibility = visibility,
    )
