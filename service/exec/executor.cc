#include "service/exec/executor.h"

#include "common/dtype.h"

namespace gemm {

std::string RateKind(const GemmShape& shape) {
  if (shape.fp8()) return "fp8";  // one peak for every pair of FP8 formats
  if (shape.input_dtype == DType::kFp32) return shape.allow_tf32 ? "tf32" : "fp32";
  return DTypeName(shape.input_dtype);
}

double RateOf(const std::vector<PeakRate>& rates, absl::string_view kind) {
  for (const PeakRate& r : rates)
    if (r.kind == kind) return r.per_second;
  return 0;
}

double ComputeSeconds(const WorkItem& item, const std::vector<PeakRate>& rates) {
  double seconds = 0;
  for (const GemmProblemRef& p : item.problems) {
    const double rate = RateOf(rates, RateKind(p.shape));
    // One unmeasured kind makes the whole prediction unknown: a partial sum
    // would look like a confident, too-small answer.
    if (!(rate > 0)) return 0;
    seconds += p.shape.flops() / rate;
  }
  return seconds;
}

absl::Duration Executor::PredictRunTime(const WorkItem& item) const {
  return absl::Seconds(ComputeSeconds(item, peak_rates()));
}

}  // namespace gemm
