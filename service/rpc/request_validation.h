// Turns a gemm.v1 request into validated problem descriptions that point into
// the request's own bytes (no copy), and sizes the response's result buffers
// so that backends write results in place.
#ifndef GEMM_SERVICE_RPC_REQUEST_VALIDATION_H_
#define GEMM_SERVICE_RPC_REQUEST_VALIDATION_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/gemm_problem.h"
#include "gemm/v1/gemm.pb.h"
#include "service/base/limits.h"
#include "service/store/resident_matrix.h"
#include "service/store/shared_memory_region.h"

namespace gemm {

// How operands named by handle (Matrix.handle) are found: `resolve` looks a
// handle up for the calling client (ResidentStore::Lookup: NOT_FOUND,
// PERMISSION_DENIED); every matrix it returns is appended to `held`, which
// the caller keeps until the request is done. Without one, a handle is
// INVALID_ARGUMENT.
struct ResidentOperands {
  std::function<absl::StatusOr<std::shared_ptr<const ResidentMatrix>>(absl::string_view handle)>
      resolve;
  std::vector<std::shared_ptr<const ResidentMatrix>> held;
  // Shared-memory regions (Matrix.shared, GemmProblem.output), by region id:
  // absent where the server has none. What the problems point into is held.
  std::function<absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>>(
      absl::string_view region)>
      resolve_shared;
  std::vector<std::shared_ptr<const SharedMemoryRegion>> held_shared;
};

// What the executor behind the service runs, where the API's rules depend
// on it.
struct BackendFeatures {
  // FP8 problems whose inputs arrive as FP8 codes with their scales (in the
  // request, or a resident FP8 matrix): the CPU backend, and the CUDA
  // backend on Hopper (sm_90) GPUs.
  bool fp8 = true;
  // The server quantizing a matrix to FP8 when it is registered or uploaded
  // with `quantize` (RegisterMatrix / BeginUpload): the CPU backend and
  // the CUDA backend where it runs FP8.
  bool fp8_quantize_matrices = true;
  // The server quantizing an operand per problem
  // (GemmProblem.quantize_partner): the CPU backend and the CUDA backend
  // where it runs FP8.
  bool fp8_quantize_partner = true;
  // FP8 block scales with a column-major output (the CUDA kernel computes a
  // column-major D as D^T = B^T A^T, where A's 1 x 128 blocks do not fit).
  bool fp8_block_scales_column_major_output = true;
  // The backend's name, for those refusals.
  std::string backend = "cpu";
};

// Checks one problem against the API's rules and `limits`. Errors are
// INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for a size limit) with a message
// that names the field, e.g. "problems[2].a.data: expected 96 bytes, got 95".
// An operand given by handle must match the problem's dtype and stored shape
// (and its layout field, when set); a resident C must be stored in the
// output layout. Its MatrixRef is the resident matrix's view. An operand in
// shared memory (and an output there, which sets `d`) must lie inside its
// region; its MatrixRef points into the region.
// FP8 problems (either input FP8): both inputs FP8 (or one of them bf16/fp32
// under quantize_partner), outputs not FP8 and set explicitly, each FP8
// operand's scales present exactly once (Matrix.scales, or kept by a
// resident matrix the server quantized) with the count its mode needs, all
// finite and > 0 (block scales: ceil(K/128) blocks along K); scales nowhere
// else.
// A problem that passes every rule but needs what the backend lacks is
// UNIMPLEMENTED naming the field: an FP8 input without features.fp8 (its
// dtype field), quantize_partner without features.fp8_quantize_partner, block scales
// with a column-major output without its feature (output_layout).
absl::StatusOr<GemmProblemRef> ValidateProblem(const v1::GemmProblem& p, int index,
                                               const ServiceLimits& limits,
                                               ResidentOperands* residents = nullptr,
                                               const BackendFeatures& features = {});

// Validates every problem of `request`. On success the returned problems point
// into `request` (which must outlive them) and into `response`, whose results
// are resized to hold each output (the `d` pointers).
absl::StatusOr<std::vector<GemmProblemRef>> ValidateRequest(const v1::GemmRequest& request,
                                                            const ServiceLimits& limits,
                                                            v1::GemmResponse* response,
                                                            ResidentOperands* residents = nullptr,
                                                            const BackendFeatures& features = {});

// ValidateRequest in two steps, for callers that decide admission in between
// (sizing results of hundreds of MiB is not free): the problems with `d`
// unset, then the response's result buffers sized and the `d` pointers set.
absl::StatusOr<std::vector<GemmProblemRef>> ValidateProblems(const v1::GemmRequest& request,
                                                             const ServiceLimits& limits,
                                                             ResidentOperands* residents = nullptr,
                                                             const BackendFeatures& features = {});
// Also fills each FP8 problem's GemmResult.a_precision / b_precision.
void AttachResults(const v1::GemmRequest& request, std::vector<GemmProblemRef>* problems,
                   v1::GemmResponse* response);

// Bytes a validated request holds while in flight: operands carried in the
// request (resident ones are counted by their store) plus results.
uint64_t InflightBytes(const std::vector<GemmProblemRef>& problems);

// Checks a RegisterMatrix request against the API and `limits` and returns
// a view of its bytes (pointing into `request`). INVALID_ARGUMENT names the
// field; RESOURCE_EXHAUSTED for max_matrix_bytes.
absl::StatusOr<MatrixRef> ValidateRegisterMatrix(const v1::RegisterMatrixRequest& request,
                                                 const ServiceLimits& limits);

// Checks a BeginUpload request (dtype, dimensions, label, max_matrix_bytes)
// and returns the matrix's shape (data unset). Errors as above.
absl::StatusOr<MatrixRef> ValidateBeginUpload(const v1::BeginUploadRequest& request,
                                              const ServiceLimits& limits);

// The Quantization of a RegisterMatrix or BeginUpload request for a matrix
// of `shape` (as ValidateRegisterMatrix / ValidateBeginUpload returned it):
// nullopt when the request has none. INVALID_ARGUMENT names the field
// ("quantize.mode", "dtype", ...); a valid quantization without
// features.fp8_quantize_matrices is UNIMPLEMENTED naming "quantize". An FP8 dtype
// without quantization is accepted only with features.fp8 (UNIMPLEMENTED
// naming "dtype" otherwise).
absl::StatusOr<std::optional<Fp8Quantization>> ValidateQuantization(
    bool has_quantize, const v1::Quantization& quantize, const MatrixRef& shape,
    const BackendFeatures& features);

}  // namespace gemm

#endif  // GEMM_SERVICE_RPC_REQUEST_VALIDATION_H_
