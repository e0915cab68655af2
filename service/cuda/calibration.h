// Start-up measurements of the CUDA executor's device: the rates of our own
// GEMM kernels per input type, the device's memory bandwidth, and the
// host<->device copy rates a batch's bytes move at, and the time of one
// small kernel launch. About 0.2 s. A failed measurement is left out rather
// than guessed.
#ifndef GEMM_SERVICE_CUDA_CALIBRATION_H_
#define GEMM_SERVICE_CUDA_CALIBRATION_H_

#include <cuda_runtime.h>

#include <vector>

#include "absl/strings/string_view.h"
#include "kernels/gemm.h"
#include "service/exec/executor.h"

namespace gemm {
namespace gpu {

// Bytes per second; 0 when not measured.
struct CopyRates {
  double h2d = 0;        // pinned host to device
  double d2h = 0;        // device to pinned host
  double host_copy = 0;  // pageable host memory into pinned staging
};

struct Calibration {
  // "bf16", "fp16", "tf32", "fp32" (GEMM FLOP/s) and "memory" (bytes/s).
  std::vector<PeakRate> peak_rates;
  CopyRates copies;
  // Seconds one small GEMM launch takes on a stream, launched back to back
  // (the launch and the kernel's shortest run); 0 when not measured. What
  // the launch API prices each extra launch at (gemm_kernels::CopyPricing).
  double launch_seconds = 0;
  // Seconds per unit of K of one output tile of the SIMT kernel (a grid of
  // one tile: its critical path); 0 when not measured.
  double simt_tile_seconds_per_k = 0;
};

// The rates launches of `kind` ("bf16", "fp16") operands price their operand
// copies at (gemm_kernels::CopyPricing): the Hopper kernel's peak at that
// type in `peaks`, the strict-fp32 peak (the SIMT kernel runs it), the
// device memory's, and `measured`'s launch and SIMT tile times. `peaks` are
// `measured.peak_rates` after any overrides.
gemm_kernels::CopyPricing CopyPricingOf(const std::vector<PeakRate>& peaks, absl::string_view kind,
                                        const Calibration& measured);

// Measures `device`, which must be current. The kernels and the device copy
// run on the legacy default stream; the host<->device copies on
// `copy_stream`, a lane's stream, as batches make them.
Calibration Calibrate(int device, cudaStream_t copy_stream);

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_CALIBRATION_H_
