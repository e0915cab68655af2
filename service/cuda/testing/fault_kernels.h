// Test-only kernels that make a GPU fail the two ways the CUDA executor must
// contain (tests/gpu_fault_test.cc): a sticky error and a kernel that runs
// past the watchdog. Tests enqueue them through
// CudaExecutor::Options::before_launches; production code never links this.
#ifndef GEMM_SERVICE_CUDA_TESTING_FAULT_KERNELS_H_
#define GEMM_SERVICE_CUDA_TESTING_FAULT_KERNELS_H_

#include <cstdint>
#include <string>

namespace gemm {
namespace gpu_testing {

// Enqueues on `stream` (a cudaStream_t) a kernel that stores through an
// unmapped device address, so the context takes cudaErrorIllegalAddress, a
// sticky error. Returns "" or the launch error's text.
std::string EnqueueIllegalAddress(void* stream);

// Enqueues on `stream` a kernel that spins for `nanoseconds` of GPU global
// time and then ends normally: to the executor it is a kernel that hangs for
// that long.
std::string EnqueueSpin(void* stream, int64_t nanoseconds);

}  // namespace gpu_testing
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_TESTING_FAULT_KERNELS_H_
