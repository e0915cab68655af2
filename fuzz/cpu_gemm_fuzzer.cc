// libFuzzer target: a whole request through the CPU backend. Bytes ->
// GemmRequest -> ValidateRequest -> RunCpuGemm on every problem of a valid
// request, shapes kept tiny by FuzzLimits. Sanitizers catch any read outside
// the operands or write outside the result buffers; the result must also come
// out the size the response promised.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_limits.h"
#include "gemm/v1/gemm.pb.h"
#include "service/exec/cpu_executor.h"
#include "service/rpc/request_validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gemm;
  static const ServiceLimits limits = FuzzLimits();
  v1::GemmRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  v1::GemmResponse response;
  auto problems = ValidateRequest(request, limits, &response);
  if (!problems.ok()) return 0;
  for (size_t i = 0; i < problems->size(); ++i) {
    const size_t before = response.results(static_cast<int>(i)).data().size();
    RunCpuGemm((*problems)[i]).status().IgnoreError();
    if (response.results(static_cast<int>(i)).data().size() != before) std::abort();
  }
  return 0;
}
