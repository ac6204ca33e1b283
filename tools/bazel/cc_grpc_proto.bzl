"""C++ code generation from .proto files with Debian's protoc and plugin."""

def cc_grpc_proto_library(name, src, include = "", grpc = True, deps = [], proto_deps = [], visibility = None):
    """Generates and compiles the protobuf (and gRPC) C++ code of one .proto.

    Args:
      name: the cc_library to define.
      src: the .proto file, relative to this package; it is imported (and
        its generated headers included) by that path.
      include: the import root relative to this package ("" for the
        package itself).
      grpc: whether to generate gRPC service code.
      deps: cc_library deps of the generated code: for each .proto that src
        imports, the cc_grpc_proto_library generated from it.
      proto_deps: the .proto files that src imports (besides well-known
        types), resolved under the same import root; protoc reads them in
        the sandbox, so they must be inputs.
      visibility: visibility of the cc_library.
    """
    stem = src[:-len(".proto")]
    outs = [stem + ".pb.h", stem + ".pb.cc"]
    if grpc:
        outs += [stem + ".grpc.pb.h", stem + ".grpc.pb.cc"]
    root = "/".join([p for p in [native.package_name(), include] if p]) or "."
    cmd = ("$(location @system_protos//:bin/protoc) -I{root} -I/usr/include " +
           "--cpp_out=$(GENDIR)/{root}").format(root = root)
    tools = ["@system_protos//:bin/protoc"]
    if grpc:
        cmd += (" --grpc_out=$(GENDIR)/{root} --plugin=protoc-gen-grpc=" +
                "$(location @system_protos//:bin/grpc_cpp_plugin)").format(root = root)
        tools.append("@system_protos//:bin/grpc_cpp_plugin")
    cmd += " $(location {})".format(src)
    native.genrule(
        name = name + "_gen",
        srcs = [src] + proto_deps,
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
