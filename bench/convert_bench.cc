// Host fp16/bf16 <-> fp32 conversion throughput (common/dtype.h): the scalar
// path beside the vector path (AVX2/F16C) in one run, on one core.
//
// For each direction and buffer size it prints the median over repeated
// timed runs, in GB/s of input bytes, and the vector/scalar ratio; then the
// conversion work of one 1024x1024x512 bf16 request on the CPU backend
// (widening A and B, narrowing D), in milliseconds per request.
//
// Usage: convert_bench [repetitions]   (default 21; odd, so the median is a
// run's own figure)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "common/dtype.h"

namespace {

using gemm::ConversionPath;
using gemm::DType;

// Seconds for one call of `fn`, the median over `reps` timed runs; each run
// calls it `inner` times. A warm-up call first touches every page.
double MedianSeconds(const std::function<void()>& fn, int reps, int inner) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(t1 - t0).count() / inner);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// Random finite data: uniform in [-4, 4), as fp32 or encoded as `t`.
std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Keeps the compiler from dropping conversions whose results are unused.
volatile unsigned char g_sink;

struct Case {
  const char* name;
  DType type;
  bool widen;  // 16-bit -> fp32 (else fp32 -> 16-bit)
};

void RunCase(const Case& c, size_t input_bytes, int reps) {
  const size_t n = c.widen ? input_bytes / 2 : input_bytes / 4;
  const std::vector<float> values = RandomFloats(n, 17);
  std::vector<uint16_t> codes(n);
  gemm::FromFloatVia(ConversionPath::kScalar, c.type, values.data(), codes.data(), n);
  std::vector<float> wide(n);
  std::vector<uint16_t> narrow(n);
  // About 64 MiB of input per timed run, at least one call.
  const int inner = std::max<int>(1, static_cast<int>((64u << 20) / input_bytes));
  double seconds[2];
  for (ConversionPath path : {ConversionPath::kScalar, ConversionPath::kVector}) {
    auto fn = [&] {
      if (c.widen) {
        gemm::ToFloatVia(path, c.type, codes.data(), wide.data(), n);
        g_sink = reinterpret_cast<const unsigned char*>(wide.data())[n % 7];
      } else {
        gemm::FromFloatVia(path, c.type, values.data(), narrow.data(), n);
        g_sink = reinterpret_cast<const unsigned char*>(narrow.data())[n % 7];
      }
    };
    seconds[path == ConversionPath::kVector] = MedianSeconds(fn, reps, inner);
  }
  const double scalar = input_bytes / seconds[0] / 1e9, vector = input_bytes / seconds[1] / 1e9;
  std::printf("%-12s %6zu MiB  %8.2f  %8.2f  %6.2fx\n", c.name, input_bytes >> 20, scalar, vector,
              vector / scalar);
}

// The conversions the CPU backend does for one bf16 request D = A * B with
// M = N = 1024, K = 512 and a bf16 result (service/exec/cpu_executor.cc): A and B
// widened to fp32 scratch, the fp32 product narrowed into D. Scratch is
// allocated once here; the backend's own allocation is not conversion.
void RunRequest(int reps) {
  constexpr size_t kM = 1024, kN = 1024, kK = 512;
  std::vector<uint16_t> a(kM * kK), b(kK * kN), d(kM * kN);
  const std::vector<float> fa = RandomFloats(a.size(), 1), fb = RandomFloats(b.size(), 2);
  const std::vector<float> product = RandomFloats(d.size(), 3);
  gemm::FromFloat(DType::kBf16, fa.data(), a.data(), a.size());
  gemm::FromFloat(DType::kBf16, fb.data(), b.data(), b.size());
  std::vector<float> sa(a.size()), sb(b.size());
  double ms[2];
  for (ConversionPath path : {ConversionPath::kScalar, ConversionPath::kVector}) {
    auto fn = [&] {
      gemm::ToFloatVia(path, DType::kBf16, a.data(), sa.data(), a.size());
      gemm::ToFloatVia(path, DType::kBf16, b.data(), sb.data(), b.size());
      gemm::FromFloatVia(path, DType::kBf16, product.data(), d.data(), d.size());
      g_sink = static_cast<unsigned char>(sa[1] + sb[2] + d[3]);
    };
    ms[path == ConversionPath::kVector] = MedianSeconds(fn, reps, 8) * 1e3;
  }
  std::printf("\n1024x1024x512 bf16 request, CPU backend conversions (A, B widened; D narrowed):\n");
  std::printf("  scalar %.3f ms, vector %.3f ms per request (%.2fx)\n", ms[0], ms[1],
              ms[0] / ms[1]);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 21;
  std::printf("vector path (AVX2+F16C) supported on this CPU: %s\n",
              gemm::VectorConversionsSupported() ? "yes" : "no (vector = scalar)");
  std::printf("median of %d runs, one thread, GB/s of input bytes\n\n", reps);
  std::printf("%-12s %10s  %8s  %8s  %7s\n", "conversion", "input", "scalar", "vector", "ratio");
  const Case cases[] = {{"fp16->fp32", DType::kFp16, true},
                        {"fp32->fp16", DType::kFp16, false},
                        {"bf16->fp32", DType::kBf16, true},
                        {"fp32->bf16", DType::kBf16, false}};
  for (size_t bytes : {size_t{1} << 20, size_t{64} << 20}) {
    for (const Case& c : cases) RunCase(c, bytes, reps);
  }
  RunRequest(reps);
  return 0;
}
