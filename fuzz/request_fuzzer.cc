// libFuzzer target: bytes -> GemmRequest (protobuf parse) -> ValidateRequest.
// Beyond crashes and sanitizer reports it checks the validator's promises on
// every accepted request: each operand lies wholly inside the request's own
// bytes with exactly the size its shape needs, each result buffer is sized for
// its output, and nothing exceeds the limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_limits.h"
#include "gemm/v1/gemm.pb.h"
#include "service/rpc/request_validation.h"

namespace gemm {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("invariant broken: %s\n", what);
    std::abort();
  }
}

// `m` must lie inside `bytes` and have exactly its size.
void CheckInside(const MatrixRef& m, const std::string& bytes, const char* what) {
  Check(m.data == bytes.data() && m.bytes() == bytes.size(), what);
}

}  // namespace
}  // namespace gemm

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemm;
  static const ServiceLimits limits = FuzzLimits();
  v1::GemmRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  v1::GemmResponse response;
  auto problems = ValidateRequest(request, limits, &response);
  if (!problems.ok()) {
    Check(!problems.status().message().empty(), "an error without a message");
    return 0;
  }
  Check(static_cast<int>(problems->size()) == request.problems_size(), "problem count");
  Check(response.results_size() == request.problems_size(), "result count");
  Check(problems->size() <= limits.max_problems_per_request, "max_problems_per_request");
  for (int i = 0; i < request.problems_size(); ++i) {
    const GemmProblemRef& p = (*problems)[i];
    const v1::GemmProblem& in = request.problems(i);
    Check(p.shape.m >= 1 && p.shape.n >= 1 && p.shape.k >= 1, "zero dimension");
    Check(p.shape.m <= limits.max_dimension && p.shape.n <= limits.max_dimension &&
              p.shape.k <= limits.max_dimension,
          "max_dimension");
    CheckInside(p.a, in.a().data(), "A outside its bytes");
    CheckInside(p.b, in.b().data(), "B outside its bytes");
    if (p.c.data != nullptr) CheckInside(p.c, in.c().data(), "C outside its bytes");
    Check(p.beta == 0 || p.c.data != nullptr, "beta without C");
    const std::string& d = response.results(i).data();
    Check(p.d == d.data() && p.d_bytes() == d.size(), "D buffer size");
  }
  (void)InflightBytes(*problems);
  return 0;
}
