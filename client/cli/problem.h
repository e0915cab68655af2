// The request the flags describe (shape, types, FP8 scales, layouts,
// transposes, alpha/beta, batch) on random data, its size checks, and the
// float64 references its results are checked against.
#ifndef GEMM_CLIENT_CLI_PROBLEM_H_
#define GEMM_CLIENT_CLI_PROBLEM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/connection.h"
#include "client/cli/size_check.h"
#include "common/dtype.h"
#include "proto/gemm/v1/gemm.pb.h"

namespace gemm::cli {

// A type's name as the flags spell it ("unspecified" for a proto value
// without one).
std::string Name(DType t);
std::string Name(v1::DataType t);

// The shape of the flags, with --m/--n/--k replaced by `m`, `n`, `k`;
// `references` when float64 references will be computed.
absl::StatusOr<Shape> FlagShape(uint64_t m, uint64_t n, uint64_t k, bool references);

// `s` against `l` and against --max_client_bytes (default: half of this
// machine's memory).
absl::Status CheckSize(const Shape& s, const CheckLimits& l);

// One request of --batch problems of the flags' shape, on uniform random data
// in [-1, 1) (FP8 operands quantized on the client with --scale scales).
absl::StatusOr<v1::GemmRequest> BuildRequest(uint64_t m, uint64_t n, uint64_t k);

// The float64 reference of every problem in `request`, row-major.
absl::StatusOr<std::vector<std::vector<double>>> References(const v1::GemmRequest& request);

// A result's relative error against its reference, and the tolerance of its
// input and output types.
struct Check {
  double error = 0.0;
  double tolerance = 0.0;
  bool ok() const { return error <= tolerance; }
};
// DATA_LOSS when the result's shape or type is not the problem's.
absl::StatusOr<Check> CheckResult(const v1::GemmProblem& problem, const v1::GemmResult& result,
                                  const std::vector<double>& reference);

// 2 * m * n * k summed over the request's problems.
double RequestFlops(const v1::GemmRequest& request);

}  // namespace gemm::cli

#endif  // GEMM_CLIENT_CLI_PROBLEM_H_
