"""C++ protobuf (+ gRPC) code generation with the system protoc and grpc_cpp_plugin."""

def _cc_proto(name, srcs, deps, visibility, grpc):
    pkg = native.package_name()
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    plugin = [
        "--grpc_out=$(GENDIR)/" + pkg,
        "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin",
    ] if grpc else []
    native.genrule(
        name = name + "_codegen",
        srcs = srcs,
        outs = outs,
        cmd = " ".join(["protoc", "-I" + pkg, "--cpp_out=$(GENDIR)/" + pkg] + plugin +
                       ["$(location %s)" % s for s in srcs]),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + (["//third_party:grpc"] if grpc else []) + ["//third_party:protobuf"],
        visibility = visibility,
    )

def cc_grpc_proto_library(name, srcs, deps = [], visibility = None):
    """Generates message and service code for `srcs` and wraps it in a cc_library.

    Imports resolve relative to the calling package, so a file at
    <package>/gemm/v1/gemm.proto is included as "gemm/v1/gemm.pb.h".
    """
    _cc_proto(name, srcs, deps, visibility, grpc = True)

def cc_proto_messages(name, srcs, deps = [], visibility = None):
    """Generates message code only (no services) for `srcs`, as a cc_library.

    Imports resolve as for cc_grpc_proto_library; the well-known types
    (google/protobuf/*.proto) come from the system protobuf.
    """
    _cc_proto(name, srcs, deps, visibility, grpc = False)
