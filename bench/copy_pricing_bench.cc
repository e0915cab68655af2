// copy_pricing_bench: where copying ragged 16-bit operands aligned for the
// tensor cores starts to pay, measured beside what the price predicts.
//
// A bf16 operand whose rows are off TMA's 16-byte grid runs either on the
// portable SIMT kernel as it is, or on the Hopper kernel after its operands
// are copied aligned (GemmArguments::copy_unaligned_operands). With
// CopyPricing's rates the kernel library picks the one predicted to finish
// first; the server fills those rates from its start-up calibration. This
// binary measures the same rates the way the server's calibration defines
// them (the Hopper kernel's bf16 rate at 4096^3, the SIMT kernel's strict
// fp32 rate at 2048^3, a device copy's bytes read plus written per second,
// one small launch back to back, one SIMT tile's time per unit of K), then for square ragged sizes times both paths interleaved
// and prints which the price picks beside which measured faster.
//
// Usage: copy_pricing_bench [sizes, default 15,31,47,63,95,127,191,255,383,511]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bf16_data.h"
#include "bench/cuda_check.h"
#include "bench/interleaved_timing.h"
#include "kernels/gemm.h"
#include "service/cuda/calibration.h"

namespace {

using gemm_kernels::CopyPricing;
using gemm_kernels::DataType;
using gemm_kernels::Gemm;
using gemm_kernels::GemmArguments;
using gemm_kernels::Layout;

constexpr gemm_bench::TimingPlan kPlan{5, 15, 8};

// Square m = n = k, A row-major and B column-major (both K-major, leading
// dimension k), D row-major: with k odd every operand row is off the grid.
GemmArguments Square(int64_t size, DataType type, void* a, void* b, void* d) {
  GemmArguments args;
  args.m = args.n = args.k = size;
  args.a = {a, type, Layout::kRowMajor, size, 0};
  args.b = {b, type, Layout::kColMajor, size, 0};
  args.d = {d, type, Layout::kRowMajor, size, 0};
  return args;
}

struct Buffers {
  void* a = nullptr;
  void* b = nullptr;
  void* d = nullptr;
  void* copies = nullptr;
  ~Buffers() {
    for (void* p : {a, b, d, copies}) cudaFree(p);
  }
};

int Run(const std::vector<int64_t>& sizes) {
  cudaStream_t stream = nullptr;
  if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess) {
    std::fprintf(stderr, "cannot set up device 0\n");
    return 1;
  }
  const gemm::gpu::Calibration measured = gemm::gpu::Calibrate(0, stream);
  cudaStreamDestroy(stream);
  const CopyPricing pricing = gemm::gpu::CopyPricingOf(measured.peak_rates, "bf16", measured);
  if (!pricing.measured() || pricing.simt_tile_seconds_per_k <= 0) {
    std::fprintf(stderr, "the calibration measured no copy price\n");
    return 1;
  }
  std::printf("rates: Hopper bf16 %.1f TFLOP/s, SIMT fp32 %.2f TFLOP/s, device copy %.0f GB/s "
              "(read + written), small launch %.2f us, SIMT tile %.1f ns per unit of K\n",
              pricing.tensor_flops_per_s / 1e12, pricing.simt_flops_per_s / 1e12,
              pricing.device_copy_bytes_per_s / 1e9, pricing.launch_seconds * 1e6,
              pricing.simt_tile_seconds_per_k * 1e9);
  std::printf("\n| size (bf16, rows off the grid) | SIMT us | copies + Hopper us | faster measured | "
              "priced pick | priced / faster | pick by the SIMT rate alone |\n"
              "|---|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const int64_t n : sizes) {
    Buffers buf;
    buf.a = gemm_bench::RandomBf16Buffer(n * n, 3);
    buf.b = gemm_bench::RandomBf16Buffer(n * n, 4);
    CHECK_CUDA(cudaMalloc(&buf.d, n * n * 2));
    GemmArguments simt_args = Square(n, DataType::kBf16, buf.a, buf.b, buf.d);
    GemmArguments copy_args = simt_args;
    copy_args.copy_unaligned_operands = true;
    GemmArguments priced_args = copy_args;
    priced_args.copy_pricing = pricing;
    GemmArguments rate_args = priced_args;  // without the tile's K loop
    rate_args.copy_pricing.simt_tile_seconds_per_k = 0;
    if (const size_t bytes = Gemm::OperandCopyBytes(copy_args); bytes > 0)
      CHECK_CUDA(cudaMalloc(&buf.copies, bytes));
    Gemm simt, copied, priced, by_rate;
    if (!simt.Initialize(simt_args).ok() ||
        !copied.Initialize(copy_args, nullptr, gemm_kernels::TileHint::kAuto,
                           gemm_kernels::ScheduleHint::kAuto, buf.copies)
             .ok() ||
        !priced.Initialize(priced_args, nullptr, gemm_kernels::TileHint::kAuto,
                           gemm_kernels::ScheduleHint::kAuto, buf.copies)
             .ok() ||
        !by_rate.Initialize(rate_args, nullptr, gemm_kernels::TileHint::kAuto,
                            gemm_kernels::ScheduleHint::kAuto, buf.copies)
             .ok()) {
      std::printf("| %lld | FAILED to initialize |\n", static_cast<long long>(n));
      ++failures;
      continue;
    }
    std::vector<double> t;
    if (!gemm_bench::TimeInterleaved({[&](int) { return simt.Run(nullptr).ok(); },
                                      [&](int) { return copied.Run(nullptr).ok(); }},
                                     1, kPlan, &t)) {
      ++failures;
      continue;
    }
    const bool simt_faster = t[0] <= t[1];
    const bool priced_simt = priced.kernel_name() == simt.kernel_name();
    const double priced_ms = priced_simt ? t[0] : t[1];
    const bool rate_simt = by_rate.kernel_name() == simt.kernel_name();
    std::printf("| %lld | %.2f | %.2f | %s | %s | %.2f | %s |\n", static_cast<long long>(n),
                t[0] * 1e3, t[1] * 1e3, simt_faster ? "SIMT" : "copies",
                priced_simt ? "SIMT" : "copies", priced_ms / std::min(t[0], t[1]),
                rate_simt ? "SIMT" : "copies");
    std::fflush(stdout);
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {15, 31, 47, 63, 95, 127, 191, 255, 383, 511};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  std::printf("copy_pricing_bench: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  return Run(sizes);
}
