"""CUDA compilation with the toolkit's nvcc, wrapped as a plain cc_library.

Each .cu file becomes one position-independent object through a genrule; the
objects link into a cc_library whose public headers are plain C++, so no CUDA
type reaches code outside kernels/.
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
    "-I.",
    "-I$(GENDIR)",
]

def cuda_library(name, srcs, hdrs = [], cuda_hdrs = [], deps = [], nvcc_flags = [], visibility = None, testonly = False):
    """Compiles `srcs` (.cu) with nvcc and exposes them as a cc_library.

    Args:
      srcs: .cu files.
      hdrs: plain C++ headers that callers include.
      cuda_hdrs: headers (.cuh/.h) the .cu files include, from any package.
      deps: cc_library deps of the resulting library.
      nvcc_flags: extra nvcc flags.
    """
    objs = []
    for src in srcs:
        obj = "_objs/%s/%s" % (name, src.replace(".cu", ".pic.o"))
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs + cuda_hdrs,
            outs = [obj],
            cmd = " ".join([NVCC, "-c", "$(location %s)" % src, "-o", "$@"] +
                           CUDA_ARCH_FLAGS + CUDA_COPTS + nvcc_flags),
            testonly = testonly,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda_runtime"],
        visibility = visibility,
        testonly = testonly,
        alwayslink = True,
    )
