// Peak rates set by flag instead of measured: parsing --peak_tflops and
// --peak_memory_gbps, and laying the result over what calibration measured.
// A machine whose start-up measurement is wrong (noisy neighbours, a CPU
// that boosts later, a GPU whose best kernel the probe does not reach) gets
// its roofline from the operator's figures, labelled method="flag".
#ifndef GEMM_SERVICE_EXEC_CALIBRATION_H_
#define GEMM_SERVICE_EXEC_CALIBRATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "service/exec/executor.h"

namespace gemm {

// Parses "bf16=700,fp16=700,fp32=60" (TFLOP/s per dtype; kinds fp32, tf32,
// fp16, bf16, each at most once) into per-second rates with method "flag".
// Empty text is no override. Errors name `flag_name`.
absl::StatusOr<std::vector<PeakRate>> ParsePeakTflops(absl::string_view text,
                                                      absl::string_view flag_name);
// Parses a memory bandwidth in GB/s (1e9 bytes/s, read plus written) into a
// "memory" rate with method "flag"; empty text is no override.
absl::StatusOr<std::vector<PeakRate>> ParsePeakMemoryGbps(absl::string_view text,
                                                          absl::string_view flag_name);

// Replaces (or adds) in `rates` each kind that `overrides` names.
void ApplyPeakOverrides(const std::vector<PeakRate>& overrides, std::vector<PeakRate>* rates);

}  // namespace gemm

#endif  // GEMM_SERVICE_EXEC_CALIBRATION_H_
