// The CUDA executor's problems in the kernel library's terms (kernels/gemm.h):
// layouts seen through transposes, and the arguments of a launch over a lane's device buffer.
#ifndef GEMM_SERVICE_CUDA_KERNEL_ARGUMENTS_H_
#define GEMM_SERVICE_CUDA_KERNEL_ARGUMENTS_H_

#include <cstdint>
#include <string>

#include "common/gemm_problem.h"
#include "kernels/gemm.h"
#include "service/cuda/batch_layout.h"
#include "service/queue/work_item.h"

namespace gemm {
namespace gpu {

// op(X) as the kernel sees it: a transposed operand is the same bytes read in
// the other layout.
gemm_kernels::Layout OperandLayout(Layout stored, bool transposed);

// The metrics' name for a kernel kind: "sm90_wgmma", "portable_simt", "none".
const char* KernelFamily(gemm_kernels::KernelKind k);

// What fixed a deterministic problem's bits when it ran on `kind`
// (`kernel` the launch's kernel name): its plan tile and k-order.
ProblemReproducibility DeterministicRecord(const GemmProblemRef& p, gemm_kernels::KernelKind kind,
                                           const std::string& kernel);

// The kernel's view of `count` problems starting with `p` at `pl` (the
// second member at `pl2` gives the batch strides) in a lane's device buffer
// `dev`, whose output region starts at `out_dev`. Resident operands are read
// where they live.
gemm_kernels::GemmArguments KernelArguments(const GemmProblemRef& p, const Placement& pl,
                                            const Placement& pl2, int64_t count,
                                            unsigned char* dev, unsigned char* out_dev);

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_KERNEL_ARGUMENTS_H_
