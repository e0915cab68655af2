"""CUDA compilation with the toolkit's nvcc, wrapped as a plain cc_library.

Each .cu file becomes one position-independent object through a genrule; the
objects link into a cc_library whose public headers are plain C++, so no CUDA
type reaches code outside kernels/.

The same genrule keeps ptxas's resource report (-Xptxas=-v: registers, stack,
spill bytes per function and architecture) as a second output,
<object>.ptxas.log, and every cuda_library gets a test, <name>_ptxas_check,
that fails when a report holds a serialized-wgmma warning (C75xx) or a
function with non-zero spill stores or loads. -v only prints: with and
without it every cubin section is the same but .note.nv.tkinfo, the note that
records ptxas's options.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# sm_90a machine code for Hopper (wgmma, TMA, setmaxnreg), plus sm_80 machine
# code and compute_80 PTX so the portable kernels run on Ampere and newer.
CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_80,code=compute_80",
]

CUDA_COPTS = [
    "-std=c++17",
    "-O3",
    "-lineinfo",
    "--expt-relaxed-constexpr",
    "-Xcompiler=-fPIC",
    "-Xcompiler=-Wall",
    "-Xptxas=-warn-spills",
    "-Xptxas=-v",
    "-I.",
    "-I$(GENDIR)",
]

def cuda_library(name, srcs, hdrs = [], cuda_hdrs = [], deps = [], nvcc_flags = [], ptxas_allowed_spills = "", visibility = None, testonly = False):
    """Compiles `srcs` (.cu) with nvcc and exposes them as a cc_library.

    Args:
      srcs: .cu files.
      hdrs: plain C++ headers that callers include.
      cuda_hdrs: headers (.cuh/.h) the .cu files include, from any package,
        or filegroups of them.
      deps: cc_library deps of the resulting library.
      nvcc_flags: extra nvcc flags.
      ptxas_allowed_spills: an extended regex of mangled function names whose
        register spills the <name>_ptxas_check test accepts; say why beside it.
    """
    objs = []
    logs = []
    for src in srcs:
        stem = src.replace(".cu", ".pic.o")
        compiled = "_nvcc/%s/%s" % (name, stem)
        compiled_log = compiled + ".ptxas.log"
        obj = "_objs/%s/%s" % (name, stem)
        log = obj + ".ptxas.log"
        nvcc = " ".join([NVCC, "-c", "$(location %s)" % src, "-o", "$(location %s)" % compiled] +
                        CUDA_ARCH_FLAGS + CUDA_COPTS + nvcc_flags)
        rule = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_"))

        # nvcc's whole output goes to the log. A failed compile prints it all;
        # a good one prints all but ptxas's per-function info lines, so
        # warnings show in the build as before.
        native.genrule(
            name = rule,
            srcs = [src] + hdrs + cuda_hdrs,
            outs = [compiled, compiled_log],
            cmd = ("if ! %s >$(location %s) 2>&1; then cat $(location %s) >&2; exit 1; fi; " % (nvcc, compiled_log, compiled_log) +
                   "grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' $(location %s) >&2 || true" % compiled_log),
            testonly = testonly,
            # Built only as the tool below: a wildcard (//...) would build
            # it in the target configuration too, compiling it twice.
            tags = ["manual"],
        )

        # The compile runs as a tool, in the host configuration, and this
        # copies its outputs into the configuration being built. nvcc's
        # command line does not depend on the configuration (no --copt
        # reaches it), so the sanitizer builds (--config=asan|tsan) reuse the
        # one object instead of compiling every kernel again.
        native.genrule(
            name = rule + "_here",
            tools = [":" + compiled, ":" + compiled_log],
            outs = [obj, log],
            cmd = "cp $(location :%s) $(location %s) && cp $(location :%s) $(location %s)" % (
                compiled,
                obj,
                compiled_log,
                log,
            ),
            testonly = testonly,
        )
        objs.append(obj)
        logs.append(log)
    native.sh_test(
        name = name + "_ptxas_check",
        size = "small",
        srcs = ["//tools/build_defs:ptxas_check.sh"],
        args = (["--allow_spills", "'%s'" % ptxas_allowed_spills] if ptxas_allowed_spills else []) +
               ["$(location %s)" % log for log in logs],
        data = logs,
    )
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda_runtime"],
        visibility = visibility,
        testonly = testonly,
        alwayslink = True,
    )
