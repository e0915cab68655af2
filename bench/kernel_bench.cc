// Times our GEMM kernels against cuBLAS in the same process on the same data.
//
// Each case: random inputs (never zeros), rotating input/output sets so the
// working set is several times the L2, warm-up, then samples of kRunsPerSample
// back-to-back launches timed with CUDA events; the table reports the median
// sample. Samples of cuBLAS, ours and ours with the other tile interleave, in
// two rounds, so run-to-run spread is visible. Layout: A row-major, B column-major (both
// K-major), D row-major, unless a case's name says otherwise (the ragged cases,
// whose leading dimensions are off the 16-byte grid); cuBLAS computes the same
// product as D^T = B^T A^T.
//
// Usage: kernel_bench [filter-substring]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/cuda_check.h"
#include "bench/cublas_baseline.h"
#include "bench/interleaved_timing.h"
#include "kernels/gemm.h"
#include "kernels/testing/host_types.h"

namespace {

using gemm_kernels::testing::DecodeElement;
using gemm_kernels::DataType;
using gemm_kernels::Gemm;
using gemm_kernels::GemmArguments;
using gemm_kernels::Layout;

constexpr int kWarmup = 5;
constexpr int kSamples = 25;
constexpr int kRunsPerSample = 8;

struct BenchCase {
  const char* name;
  DataType dtype;
  bool tf32;
  int64_t batch, m, n, k;
  bool b_row_major = false;  // N-major B: TF32 goes through the K-major copy
  bool a_col_major = false;  // M-major A (ld m)
  // Ragged leading dimensions: 16-bit operands off the 16-byte grid are
  // copied aligned first (GemmArguments::copy_unaligned_operands).
  bool copy_unaligned = false;
};

constexpr gemm_kernels::TileHint kForced[] = {gemm_kernels::TileHint::k128x256,
                                              gemm_kernels::TileHint::k128x128,
                                              gemm_kernels::TileHint::k128x128PingPong,
                                              gemm_kernels::TileHint::k128x64};
constexpr int kNumForced = 4;

struct Result {
  std::string kernel;
  double ours_ms[2], cublas_ms[2], forced_ms[kNumForced];
  double rel_diff;
};

uint64_t g_state = 0x9E3779B97F4A7C15ull;
float NextUniform() {  // xorshift64*, values in [-1, 1)
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  const uint64_t r = g_state * 2685821657736338717ull;
  return float(r >> 40) / float(1 << 23) - 1.0f;
}

std::vector<uint8_t> RandomBytes(DataType t, size_t elems) {
  const size_t es = gemm_kernels::DataTypeSize(t);
  std::vector<uint8_t> out(elems * es);
  for (size_t i = 0; i < elems; ++i) {
    const float v = NextUniform();
    if (t == DataType::kFp32) {
      std::memcpy(&out[i * 4], &v, 4);
    } else {
      const uint16_t h = t == DataType::kBf16 ? gemm_kernels::testing::FloatToBf16(v)
                                              : gemm_kernels::testing::FloatToHalf(v);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

using gemm_bench::Launcher;

// The method: 5 warm-up launches, 25 samples of 8 launches.
constexpr gemm_bench::TimingPlan kPlan{kWarmup, kSamples, kRunsPerSample};

bool RunCase(const BenchCase& bc, const gemm_bench::CublasBaseline& baseline, size_t l2_bytes, Result* res) {
  const DataType in = bc.dtype;
  const DataType out = bc.dtype;
  const size_t es = gemm_kernels::DataTypeSize(in);
  const int64_t a_elems = bc.m * bc.k, b_elems = bc.k * bc.n, d_elems = bc.m * bc.n;
  const size_t set_bytes = (a_elems + b_elems) * es * bc.batch + d_elems * es * bc.batch;
  const int sets = int(std::min<size_t>(16, std::max<size_t>(2, (4 * l2_bytes) / set_bytes + 1)));

  std::vector<void*> a(sets), b(sets), d_ours(sets), d_ref(sets), copies(sets, nullptr);
  const std::vector<uint8_t> ha = RandomBytes(in, a_elems * bc.batch);
  const std::vector<uint8_t> hb = RandomBytes(in, b_elems * bc.batch);
  for (int s = 0; s < sets; ++s) {
    CHECK_CUDA(cudaMalloc(&a[s], ha.size()));
    CHECK_CUDA(cudaMalloc(&b[s], hb.size()));
    CHECK_CUDA(cudaMalloc(&d_ours[s], d_elems * es * bc.batch));
    CHECK_CUDA(cudaMalloc(&d_ref[s], d_elems * es * bc.batch));
    // Same distribution, different contents per set: rotate the host image.
    const size_t shift = (size_t(s) * 7919 * es) % ha.size();
    CHECK_CUDA(cudaMemcpy(a[s], ha.data() + shift, ha.size() - shift, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(static_cast<uint8_t*>(a[s]) + (ha.size() - shift), ha.data(), shift,
                          cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(b[s], hb.data(), hb.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(d_ours[s], 0xFF, d_elems * es * bc.batch));
    CHECK_CUDA(cudaMemset(d_ref[s], 0xFF, d_elems * es * bc.batch));
  }

  // gemms: the heuristic's choice; forced[i]: each Hopper tile, to check it.
  std::vector<Gemm> gemms(sets);
  std::vector<std::vector<Gemm>> forced(kNumForced);
  for (auto& f : forced) f = std::vector<Gemm>(sets);
  for (int s = 0; s < sets; ++s) {
    GemmArguments args;
    args.m = bc.m;
    args.n = bc.n;
    args.k = bc.k;
    args.batch_count = bc.batch;
    args.a = {a[s], in, bc.a_col_major ? Layout::kColMajor : Layout::kRowMajor,
              bc.a_col_major ? bc.m : bc.k, a_elems};
    args.b = {b[s], in, bc.b_row_major ? Layout::kRowMajor : Layout::kColMajor,
              bc.b_row_major ? bc.n : bc.k, b_elems};
    args.d = {d_ours[s], out, Layout::kRowMajor, bc.n, d_elems};
    args.allow_tf32 = bc.tf32;
    args.copy_unaligned_operands = bc.copy_unaligned;
    if (const size_t bytes = Gemm::OperandCopyBytes(args); bytes > 0)
      CHECK_CUDA(cudaMalloc(&copies[s], bytes));
    const absl::Status st = gemms[s].Initialize(args, nullptr, gemm_kernels::TileHint::kAuto,
                                                gemm_kernels::ScheduleHint::kAuto, copies[s]);
    if (!st.ok()) {
      std::fprintf(stderr, "%s: Initialize: %s\n", bc.name, st.ToString().c_str());
      return false;
    }
    for (int f = 0; f < kNumForced; ++f) {
      const absl::Status sf = forced[f][s].Initialize(
          args, nullptr, kForced[f], gemm_kernels::ScheduleHint::kAuto, copies[s]);
      if (!sf.ok()) {
        std::fprintf(stderr, "%s: Initialize (forced tile): %s\n", bc.name, sf.ToString().c_str());
        return false;
      }
    }
  }
  res->kernel = gemms[0].kernel_name();

  auto cublas = [&](int s) {
    const std::string err =
        baseline.Gemm(in, bc.tf32, bc.batch, bc.m, bc.n, bc.k, a[s], b[s], d_ref[s], bc.b_row_major,
                      bc.a_col_major);
    if (!err.empty()) std::fprintf(stderr, "%s: %s\n", bc.name, err.c_str());
    return err.empty();
  };
  auto ours = [&](int s) {
    const absl::Status st = gemms[s].Run(nullptr);
    if (!st.ok()) std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return st.ok();
  };
  std::vector<Launcher> impls = {cublas, ours};
  for (int f = 0; f < kNumForced; ++f) {
    impls.push_back([&, f](int s) { return forced[f][s].Run(nullptr).ok(); });
  }

  // Two rounds show the run-to-run spread; each interleaves every variant.
  for (int round = 0; round < 2; ++round) {
    std::vector<double> ms;
    if (!gemm_bench::TimeInterleaved(impls, sets, kPlan, &ms)) return false;
    res->cublas_ms[round] = ms[0];
    res->ours_ms[round] = ms[1];
    if (round == 1)
      for (int f = 0; f < kNumForced; ++f) res->forced_ms[f] = ms[2 + f];
  }
  // Leave set 0 holding the heuristic kernel's output for the comparison below.
  if (!ours(0)) return false;
  CHECK_CUDA(cudaDeviceSynchronize());

  // Agreement with cuBLAS on set 0 (both wrote it during timing).
  std::vector<uint8_t> x(d_elems * es * bc.batch), y(x.size());
  CHECK_CUDA(cudaMemcpy(x.data(), d_ours[0], x.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(y.data(), d_ref[0], y.size(), cudaMemcpyDeviceToHost));
  double e2 = 0, r2 = 0;
  bool finite = true;
  for (size_t i = 0; i < x.size() / es; ++i) {
    const double u = DecodeElement(out, &x[i * es]), v = DecodeElement(out, &y[i * es]);
    if (!std::isfinite(u)) finite = false;
    e2 += (u - v) * (u - v);
    r2 += v * v;
  }
  res->rel_diff = finite ? std::sqrt(e2 / std::max(r2, 1e-300)) : NAN;

  for (int s = 0; s < sets; ++s) {
    cudaFree(a[s]);
    cudaFree(b[s]);
    cudaFree(d_ours[s]);
    cudaFree(d_ref[s]);
    cudaFree(copies[s]);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : nullptr;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  std::printf("device: %s, %d SMs, L2 %d MB, cc %d.%d\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, prop.major, prop.minor);
  gemm_bench::CublasBaseline baseline;
  if (!baseline.ok()) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  const int cublas_version = baseline.version();
  std::printf("cuBLAS %d; %d samples x %d runs, median; A row-major, B col-major, D row-major "
              "unless the case says otherwise\n",
              cublas_version, kSamples, kRunsPerSample);

  const BenchCase cases[] = {
      {"bf16 8192^3", DataType::kBf16, false, 1, 8192, 8192, 8192},
      {"bf16 4096^3", DataType::kBf16, false, 1, 4096, 4096, 4096},
      {"bf16 2048^3", DataType::kBf16, false, 1, 2048, 2048, 2048},
      {"fp16 8192^3", DataType::kFp16, false, 1, 8192, 8192, 8192},
      {"tf32 8192^3", DataType::kFp32, true, 1, 8192, 8192, 8192},
      {"tf32 8192^3 B row-major", DataType::kFp32, true, 1, 8192, 8192, 8192, true},
      {"bf16 1024x128^3", DataType::kBf16, false, 1024, 128, 128, 128},
      {"bf16 256x256^3", DataType::kBf16, false, 256, 256, 256, 256},
      {"bf16 64x512^3", DataType::kBf16, false, 64, 512, 512, 512},
      {"bf16 16x1024^3", DataType::kBf16, false, 16, 1024, 1024, 1024},
      // Ragged leading dimensions (issue 47), operands copied aligned first.
      {"ragged bf16 3000x5000x700 A,B col-major", DataType::kBf16, false, 1, 3000, 5000, 700,
       false, true, true},
      {"ragged fp16 3000x5000x700 A,B col-major", DataType::kFp16, false, 1, 3000, 5000, 700,
       false, true, true},
      {"ragged bf16 77x4096x14336 A col-major", DataType::kBf16, false, 1, 77, 4096, 14336,
       false, true, true},
      {"ragged fp16 77x4096x14336 A col-major", DataType::kFp16, false, 1, 77, 4096, 14336,
       false, true, true},
      {"ragged bf16 1000^3", DataType::kBf16, false, 1, 1000, 1000, 1000, false, false, true},
      {"ragged bf16 4095x4097x1023", DataType::kBf16, false, 1, 4095, 4097, 1023, false, false,
       true},
      {"ragged fp16 4095x4097x1023", DataType::kFp16, false, 1, 4095, 4097, 1023, false, false,
       true},
  };
  std::printf("\n| case | our kernel | ours TFLOP/s | cuBLAS TFLOP/s | ours/cuBLAS (1st pass) | "
              "2nd pass | forced 128x256 | forced 128x128 | forced 128x128 pingpong | forced 128x64 | "
              "rel diff vs cuBLAS |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const BenchCase& bc : cases) {
    if (filter && !std::strstr(bc.name, filter)) continue;
    Result r;
    if (!RunCase(bc, baseline, prop.l2CacheSize, &r)) {
      std::printf("| %s | FAILED | | | | | | | | | |\n", bc.name);
      ++failures;
      continue;
    }
    const double flops = 2.0 * bc.batch * bc.m * bc.n * bc.k;
    auto tflops = [&](double ms) { return flops / (ms * 1e-3) / 1e12; };
    std::printf("| %s | %s | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1e |\n",
                bc.name, r.kernel.c_str(), tflops(r.ours_ms[0]), tflops(r.cublas_ms[0]),
                r.cublas_ms[0] / r.ours_ms[0], r.cublas_ms[1] / r.ours_ms[1],
                r.cublas_ms[1] / r.forced_ms[0], r.cublas_ms[1] / r.forced_ms[1],
                r.cublas_ms[1] / r.forced_ms[2], r.cublas_ms[1] / r.forced_ms[3], r.rel_diff);
    std::fflush(stdout);
  }
  return failures ? 1 : 0;
}
