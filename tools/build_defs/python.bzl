"""Python protobuf + gRPC code generation with the system protoc and grpc_python_plugin."""

def py_grpc_proto_library(name, srcs, proto_root, visibility = None):
    """Generates <name>'s message (_pb2) and service (_pb2_grpc) modules for `srcs`.

    `srcs` are labels of .proto files under the package `proto_root` (e.g.
    "proto"); each lands in this package at its path below that root, so
    //proto:gemm/v1/gemm.proto becomes the module `gemm.v1.gemm_pb2`, importable
    from this package's directory (the py_library adds it to the import path).
    The generated service module imports its messages by that same name.
    """
    pkg = native.package_name()
    outs = []
    for src in srcs:
        path = src.split(":")[-1]
        base = path[:-len(".proto")]
        outs += [base + "_pb2.py", base + "_pb2_grpc.py"]
    native.genrule(
        name = name + "_codegen",
        srcs = srcs,
        outs = outs,
        cmd = " ".join([
            "protoc",
            "-I" + proto_root,
            "--python_out=$(GENDIR)/" + pkg,
            "--grpc_python_out=$(GENDIR)/" + pkg,
            "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
        ] + ["$(location %s)" % s for s in srcs]),
    )
    native.py_library(
        name = name,
        srcs = outs,
        imports = ["."],
        srcs_version = "PY3",
        visibility = visibility,
    )
