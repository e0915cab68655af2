// Resident matrices in device memory, for the CUDA executor's
// CreateResident, AllocateResident and QuantizeResident: no host copy is
// kept, and launches read them in place. cudaMalloc and cudaFree, not the stream pool:
// registration is rare and the memory lives long.
#ifndef GEMM_SERVICE_CUDA_DEVICE_MATRIX_H_
#define GEMM_SERVICE_CUDA_DEVICE_MATRIX_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/fp8.h"
#include "common/gemm_problem.h"
#include "service/store/resident_matrix.h"

namespace gemm {
namespace gpu {

// A matrix of `shape`'s size and type on `device` (made current), its bytes
// not set yet (they arrive by Write); shape.data is ignored.
// RESOURCE_EXHAUSTED when the device is out of memory.
absl::StatusOr<std::shared_ptr<ResidentMatrix>> AllocateDeviceMatrix(const MatrixRef& shape,
                                                                      int device);

// A device copy of `source`.
absl::StatusOr<std::shared_ptr<ResidentMatrix>> CopyToDeviceMatrix(const MatrixRef& source,
                                                                    int device);

// `source` (dense host bf16, fp16 or fp32, as described) quantized on
// `device` by common/fp8.h's rule (kernels/quantize: the same codes and
// scales as QuantizeToHostResident): the FP8 codes stay in device memory,
// the scales are kept on the host beside them (view().scales), where the
// launches' staging reads every operand's scales. INVALID_ARGUMENT naming
// "data" and the element when a value is NaN or infinite, as on the host.
absl::StatusOr<std::shared_ptr<ResidentMatrix>> QuantizeToDeviceMatrix(
    const MatrixRef& source, const Fp8Quantization& q, int device);

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_DEVICE_MATRIX_H_
