// Internal: a kernel launch prepared by Gemm::Initialize (tile choice, tensor
// maps, grid) and replayed by Gemm::Run. Plain C++; each kernel family's .cu
// file provides a factory.
#pragma once

#include <string>

namespace gemm_kernels {

class KernelPlan {
 public:
  virtual ~KernelPlan() = default;
  // Enqueues the kernel on `stream` (a cudaStream_t). Returns "" on success,
  // otherwise the CUDA error text.
  virtual std::string Launch(void* stream) const = 0;
  virtual const std::string& name() const = 0;
};

}  // namespace gemm_kernels
