// Why a GPU test cannot run on this machine, for GTEST_SKIP(): the GPU tests
// build everywhere and skip with a reason where there is no (suitable) GPU.
#pragma once

#include <string>

namespace gemm_kernels {
namespace testing {

// "" when a CUDA device is usable; otherwise why not.
std::string NoGpuReason();

// "" when device 0 is a Hopper (sm_90) GPU; otherwise why not, ending with
// `needs`, what the test needs Hopper for (e.g. "the FP8 kernel").
std::string NoHopperReason(const std::string& needs);

}  // namespace testing
}  // namespace gemm_kernels
