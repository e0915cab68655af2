"""C++ protobuf + gRPC code generation with the system protoc and grpc_cpp_plugin."""

def cc_grpc_proto_library(name, srcs, deps = [], visibility = None):
    """Generates message and service code for `srcs` and wraps it in a cc_library.

    Imports resolve relative to the calling package, so a file at
    <package>/gemm/v1/gemm.proto is included as "gemm/v1/gemm.pb.h".
    """
    pkg = native.package_name()
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc", base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    native.genrule(
        name = name + "_codegen",
        srcs = srcs,
        outs = outs,
        cmd = " ".join([
            "protoc",
            "-I" + pkg,
            "--cpp_out=$(GENDIR)/" + pkg,
            "--grpc_out=$(GENDIR)/" + pkg,
            "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin",
        ] + ["$(location %s)" % s for s in srcs]),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + ["//third_party:grpc", "//third_party:protobuf"],
        visibility = visibility,
    )

def cc_proto_messages(name, srcs, visibility = None):
    """Generates message code only (no services) for `srcs`, as a cc_library.

    Imports resolve as for cc_grpc_proto_library; the well-known types
    (google/protobuf/*.proto) come from the system protobuf.
    """
    pkg = native.package_name()
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
    native.genrule(
        name = name + "_codegen",
        srcs = srcs,
        outs = outs,
        cmd = " ".join([
            "protoc",
            "-I" + pkg,
            "--cpp_out=$(GENDIR)/" + pkg,
        ] + ["$(location %s)" % s for s in srcs]),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = ["//third_party:protobuf"],
        visibility = visibility,
    )
