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

namespace {

using gemm_kernels::CopyPricing;
using gemm_kernels::DataType;
using gemm_kernels::Gemm;
using gemm_kernels::GemmArguments;
using gemm_kernels::Layout;

constexpr gemm_bench::TimingPlan kPlan{5, 15, 8};

// Milliseconds per launch of `gemm` (median of interleaved samples, alone).
bool TimeOne(const Gemm& gemm, double* ms) {
  std::vector<double> t;
  if (!gemm_bench::TimeInterleaved({[&](int) { return gemm.Run(nullptr).ok(); }}, 1, kPlan, &t))
    return false;
  *ms = t[0];
  return true;
}

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

// A device buffer of `bytes` holding small finite values (0x3c bytes: bf16
// 0.0115, fp32 0.0115) where random data is not needed for a rate.
void* Filled(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
  cudaMemset(p, 0x3c, bytes);
  return p;
}

bool MeasurePricing(CopyPricing* pricing) {
  {  // The Hopper kernel's bf16 rate on an aligned 4096^3.
    const int64_t n = 4096;
    Buffers buf;
    buf.a = gemm_bench::RandomBf16Buffer(n * n, 1);
    buf.b = gemm_bench::RandomBf16Buffer(n * n, 2);
    CHECK_CUDA(cudaMalloc(&buf.d, n * n * 2));
    Gemm g;
    if (!g.Initialize(Square(n, DataType::kBf16, buf.a, buf.b, buf.d)).ok()) return false;
    double ms;
    if (!TimeOne(g, &ms)) return false;
    pricing->tensor_flops_per_s = 2.0 * n * n * n / (ms * 1e-3);
  }
  {  // The SIMT kernel's strict fp32 rate on 2048^3.
    const int64_t n = 2048;
    Buffers buf;
    buf.a = Filled(n * n * 4);
    buf.b = Filled(n * n * 4);
    CHECK_CUDA(cudaMalloc(&buf.d, n * n * 4));
    Gemm g;
    if (!g.Initialize(Square(n, DataType::kFp32, buf.a, buf.b, buf.d)).ok()) return false;
    double ms;
    if (!TimeOne(g, &ms)) return false;
    pricing->simt_flops_per_s = 2.0 * n * n * n / (ms * 1e-3);
  }
  {  // A device-to-device copy of 256 MiB: bytes read plus written.
    const size_t bytes = size_t(256) << 20;
    Buffers buf;
    CHECK_CUDA(cudaMalloc(&buf.a, bytes));
    CHECK_CUDA(cudaMalloc(&buf.b, bytes));
    std::vector<double> t;
    if (!gemm_bench::TimeInterleaved(
            {[&](int) {
              return cudaMemcpyAsync(buf.b, buf.a, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess;
            }},
            1, kPlan, &t))
      return false;
    pricing->device_copy_bytes_per_s = 2.0 * bytes / (t[0] * 1e-3);
  }
  {  // One small launch back to back: a 1 x 1 x 1 GEMM.
    Buffers buf;
    buf.a = Filled(256);
    buf.b = Filled(256);
    buf.d = Filled(256);
    Gemm g;
    if (!g.Initialize(Square(1, DataType::kBf16, buf.a, buf.b, buf.d)).ok()) return false;
    double ms;
    if (!TimeOne(g, &ms)) return false;
    pricing->launch_seconds = ms * 1e-3;
  }
  {  // One SIMT tile alone: strict fp32 64 x 64 x 16384, less one launch.
    const int64_t side = 64, depth = 16384;
    Buffers buf;
    buf.a = Filled(side * depth * 4);
    buf.b = Filled(side * depth * 4);
    CHECK_CUDA(cudaMalloc(&buf.d, side * side * 4));
    GemmArguments args = Square(side, DataType::kFp32, buf.a, buf.b, buf.d);
    args.k = depth;
    args.a.ld = depth;
    args.b.ld = depth;
    Gemm g;
    if (!g.Initialize(args).ok()) return false;
    double ms;
    if (!TimeOne(g, &ms)) return false;
    pricing->simt_tile_seconds_per_k = std::max(0.0, ms * 1e-3 - pricing->launch_seconds) / depth;
  }
  return true;
}

int Run(const std::vector<int64_t>& sizes) {
  CopyPricing pricing;
  if (!MeasurePricing(&pricing)) return 1;
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
