// Turns a gemm.v1 request into validated problem descriptions that point into
// the request's own bytes (no copy), and sizes the response's result buffers
// so that backends write results in place.
#ifndef GEMM_SERVICE_REQUEST_VALIDATION_H_
#define GEMM_SERVICE_REQUEST_VALIDATION_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/gemm_problem.h"
#include "gemm/v1/gemm.pb.h"
#include "service/limits.h"

namespace gemm {

// Checks one problem against the API's rules and `limits`. Errors are
// INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for a size limit) with a message
// that names the field, e.g. "problems[2].a.data: expected 96 bytes, got 95".
absl::StatusOr<GemmProblemRef> ValidateProblem(const v1::GemmProblem& p, int index,
                                               const ServiceLimits& limits);

// Validates every problem of `request`. On success the returned problems point
// into `request` (which must outlive them) and into `response`, whose results
// are resized to hold each output (the `d` pointers).
absl::StatusOr<std::vector<GemmProblemRef>> ValidateRequest(const v1::GemmRequest& request,
                                                            const ServiceLimits& limits,
                                                            v1::GemmResponse* response);

// Bytes a validated request holds while in flight: operands plus results.
uint64_t InflightBytes(const std::vector<GemmProblemRef>& problems);

}  // namespace gemm

#endif  // GEMM_SERVICE_REQUEST_VALIDATION_H_
