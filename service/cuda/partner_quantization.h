// quantize_partner on the CUDA backend: the bf16/fp32 operand of an FP8
// problem quantized on the lane's stream, right before its launch, by the
// rule of common/fp8.h (kernels/quantize: the CPU backend's codes and scales
// bit for bit), into FP8 codes and scales in pool memory that the launch
// reads in its place. Each member of a strided-batched launch has its own
// scales (amax over its own values), back to back as the kernel reads them.
// A NaN or infinity fails that member's request only, found after the batch
// from the first non-finite index each member's quantization reports.
#ifndef GEMM_SERVICE_CUDA_PARTNER_QUANTIZATION_H_
#define GEMM_SERVICE_CUDA_PARTNER_QUANTIZATION_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/fp8.h"
#include "common/gemm_problem.h"
#include "kernels/gemm.h"
#include "service/cuda/resources.h"

namespace gemm {
namespace gpu {

class PartnerQuantization {
 public:
  // For a launch of `count` members like `p` whose kernel arguments `args`
  // were built over the staged operands (KernelArguments): when p quantizes
  // a partner, allocates its codes, scales and workspace on `stream` and
  // points the partner's operand and scales in `args` at them. `values` is
  // the partner's first member as staged (or resident) and `member_bytes`
  // the distance to the next member's (0: every member reads the same).
  // Does nothing for a problem without quantize_partner. RESOURCE_EXHAUSTED
  // when the device is out of pool memory.
  absl::Status Prepare(const GemmProblemRef& p, int64_t count, const void* values,
                       uint64_t member_bytes, gemm_kernels::GemmArguments* args,
                       cudaStream_t stream);

  bool active() const { return count_ > 0; }
  // Members quantized: each reports one uint64 (see Enqueue).
  int64_t members() const { return count_; }
  // "+quantize_a" or "+quantize_b", for the launch's kernel name.
  std::string KernelSuffix() const;

  // Enqueues every member's quantization on `stream`, then copies each
  // member's first non-finite storage index (kQuantizeOk when none) into
  // host_flags[0 .. members()), page-locked memory read after the batch.
  absl::Status Enqueue(cudaStream_t stream, uint64_t* host_flags) const;

  // After the batch: OK, or INVALID_ARGUMENT naming the partner's data of
  // problem `index` ("problems[2].a.data: element 7 ...") when member
  // `member`'s flag says a value was not finite.
  absl::Status MemberStatus(int64_t member, int index, const uint64_t* host_flags) const;

  // Stream-ordered: after the launches that read the codes.
  void Free() { memory_.Free().IgnoreError(); }

 private:
  const void* values_ = nullptr;
  uint64_t member_bytes_ = 0;
  DType values_type_ = DType::kFp32;
  Fp8Operand geometry_;
  DType format_ = DType::kFp8E4m3;
  int64_t count_ = 0;
  PoolMemory memory_;
  // Offsets into memory_.
  uint64_t codes_ = 0, scales_ = 0, workspace_ = 0, flags_ = 0;
};

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_PARTNER_QUANTIZATION_H_
