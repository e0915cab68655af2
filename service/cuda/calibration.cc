#include "service/cuda/calibration.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "kernels/gemm.h"
#include "service/cuda/kernel_arguments.h"
#include "service/cuda/resources.h"

namespace gemm {
namespace gpu {
namespace {

namespace gk = gemm_kernels;

struct GemmCase {
  const char* kind;
  DType in;
  bool tf32;
  int n;
};

// The middle element of `v` once sorted.
template <typename T>
T Median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device memory holding `host`'s bytes.
std::optional<DeviceMemory> Upload(const std::vector<unsigned char>& host, int device) {
  auto memory = DeviceMemory::Allocate(host.size(), device);
  if (!memory.ok()) return std::nullopt;
  if (cudaMemcpy(memory->get(), host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess)
    return std::nullopt;
  return *std::move(memory);
}

// Milliseconds of each of `runs` calls of `step` on the legacy default
// stream, timed by events; nullopt when any fails.
template <typename Step>
std::optional<std::vector<float>> TimeOnDefaultStream(int runs, Step step) {
  auto e0 = Event::Create();
  auto e1 = Event::Create();
  if (!e0.ok() || !e1.ok()) return std::nullopt;
  std::vector<float> ms(runs, 0.0f);
  for (int i = 0; i < runs; ++i) {
    cudaEventRecord(e0->get());
    const bool ran = step();
    cudaEventRecord(e1->get());
    if (!ran || cudaEventSynchronize(e1->get()) != cudaSuccess ||
        cudaEventElapsedTime(&ms[i], e0->get(), e1->get()) != cudaSuccess)
      return std::nullopt;
  }
  return ms;
}

// c.n^3 on random data: the median of 5 runs after 2 warm-up runs.
std::optional<PeakRate> MeasureGemm(const GemmCase& c, int device, std::mt19937& rng,
                                    std::uniform_real_distribution<float>& dist) {
  const size_t elems = size_t(c.n) * c.n;
  std::vector<float> values(elems);
  for (float& v : values) v = dist(rng);
  std::vector<unsigned char> host(elems * SizeOf(c.in));
  FromFloat(c.in, values.data(), host.data(), elems);
  std::optional<DeviceMemory> a = Upload(host, device);
  if (!a) return std::nullopt;
  std::optional<DeviceMemory> b = Upload(host, device);
  if (!b) return std::nullopt;
  auto d = DeviceMemory::Allocate(elems * 4, device);
  if (!d.ok()) return std::nullopt;

  gk::GemmArguments args;
  args.m = args.n = args.k = c.n;
  args.a = {a->get(), c.in, gk::Layout::kRowMajor, c.n, 0};
  args.b = {b->get(), c.in, gk::Layout::kColMajor, c.n, 0};
  args.d = {d->get(), gk::DataType::kFp32, gk::Layout::kRowMajor, c.n, 0};
  args.c = args.d;
  args.allow_tf32 = c.tf32;
  // FP8: codes of values in [-1, 1] (within both formats' range) with
  // tensor scales of 1.
  std::optional<DeviceMemory> scale;
  if (IsFp8(c.in)) {
    const float one = 1.0f;
    std::vector<unsigned char> bytes(sizeof one);
    std::memcpy(bytes.data(), &one, sizeof one);
    scale = Upload(bytes, device);
    if (!scale) return std::nullopt;
    const auto* s = static_cast<const float*>(scale->get());
    args.a_scale = {ScaleMode::kTensor, s};
    args.b_scale = {ScaleMode::kTensor, s};
  }
  gk::Gemm gemm;
  if (!gemm.Initialize(args).ok()) return std::nullopt;
  auto ms = TimeOnDefaultStream(7, [&gemm] { return gemm.Run(nullptr).ok(); });
  if (!ms) return std::nullopt;
  ms->erase(ms->begin(), ms->begin() + 2);  // the first runs are warm-up
  const double seconds = Median(*ms) / 1e3;
  // The method label says only how the peak was obtained ("measured" or
  // "flag"); which kernel and size are the calibration's business.
  return PeakRate{c.kind, 2.0 * c.n * double(c.n) * c.n / seconds, kPeakMethodMeasured};
}

// A 1 GiB device-to-device copy moves 2 GiB (read + write): the median of 4
// after a warm-up.
std::optional<PeakRate> MeasureMemory(int device) {
  const size_t bytes = size_t{1} << 30;
  auto src = DeviceMemory::Allocate(bytes, device);
  if (!src.ok()) return std::nullopt;
  auto dst = DeviceMemory::Allocate(bytes, device);
  if (!dst.ok() || cudaMemset(src->get(), 1, bytes) != cudaSuccess) return std::nullopt;
  auto e0 = Event::Create();
  auto e1 = Event::Create();
  if (!e0.ok() || !e1.ok()) return std::nullopt;
  std::vector<float> times;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(e0->get());
    cudaMemcpyAsync(dst->get(), src->get(), bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1->get());
    float ms = 0;
    if (cudaEventSynchronize(e1->get()) == cudaSuccess &&
        cudaEventElapsedTime(&ms, e0->get(), e1->get()) == cudaSuccess && i > 0)
      times.push_back(ms);
  }
  if (times.empty()) return std::nullopt;
  return PeakRate{"memory", 2.0 * bytes / (Median(times) / 1e3), kPeakMethodMeasured};
}

// A strict-fp32 m x n x k GEMM (the SIMT kernel) in zeroed device memory:
// A (row-major) at the start, B (column-major) after it, then D; `memory`
// holds an error when the device memory cannot be had.
struct StrictFp32Gemm {
  absl::StatusOr<DeviceMemory> memory;
  gk::GemmArguments args;
};
StrictFp32Gemm MakeStrictFp32Gemm(int64_t m, int64_t n, int64_t k, int device) {
  const size_t a_bytes = m * k * sizeof(float), b_bytes = k * n * sizeof(float);
  StrictFp32Gemm g{DeviceMemory::Allocate(a_bytes + b_bytes + m * n * sizeof(float), device), {}};
  if (!g.memory.ok() || cudaMemset(g.memory->get(), 0, a_bytes + b_bytes) != cudaSuccess) {
    g.memory = absl::InternalError("no device memory");
    return g;
  }
  const auto* base = static_cast<const unsigned char*>(g.memory->get());
  g.args.m = m;
  g.args.n = n;
  g.args.k = k;
  g.args.a = {base, gk::DataType::kFp32, gk::Layout::kRowMajor, k, 0};
  g.args.b = {base + a_bytes, gk::DataType::kFp32, gk::Layout::kColMajor, k, 0};
  g.args.d = {base + a_bytes + b_bytes, gk::DataType::kFp32, gk::Layout::kRowMajor, n, 0};
  return g;
}

// Seconds per launch of an 8x8x8 strict-fp32 GEMM (the SIMT kernel, a
// single small block), 64 back to back on the legacy default stream between
// two events: the median of 5 such rounds after a warm-up round.
double MeasureLaunch(int device) {
  constexpr int kLaunches = 64;
  const StrictFp32Gemm g = MakeStrictFp32Gemm(8, 8, 8, device);
  gk::Gemm gemm;
  if (!g.memory.ok() || !gemm.Initialize(g.args).ok()) return 0;
  auto ms = TimeOnDefaultStream(6, [&gemm] {
    for (int i = 0; i < kLaunches; ++i)
      if (!gemm.Run(nullptr).ok()) return false;
    return true;
  });
  if (!ms) return 0;
  ms->erase(ms->begin());  // the first round is warm-up
  return Median(*ms) / 1e3 / kLaunches;
}

double MedianRate(size_t bytes, const std::vector<double>& seconds) {
  if (seconds.empty()) return 0.0;
  const double s = Median(seconds);
  return s > 0 ? bytes / s : 0.0;
}

// One copy of `bytes` on `stream`, 6 times; the rate of the median of the
// last 5. 0 when a copy fails.
double AsyncCopyRate(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                     cudaStream_t stream, const Event& e0, const Event& e1) {
  std::vector<double> seconds;
  for (int i = 0; i < 6; ++i) {
    float ms = 0;
    if (cudaEventRecord(e0.get(), stream) != cudaSuccess ||
        cudaMemcpyAsync(dst, src, bytes, kind, stream) != cudaSuccess ||
        cudaEventRecord(e1.get(), stream) != cudaSuccess ||
        cudaEventSynchronize(e1.get()) != cudaSuccess ||
        cudaEventElapsedTime(&ms, e0.get(), e1.get()) != cudaSuccess)
      return 0.0;
    if (i > 0) seconds.push_back(ms / 1e3);
  }
  return MedianRate(bytes, seconds);
}

// What PredictRunTime charges for moving a request's bytes: pinned copies
// each way and the host copy into pinned staging. 64 MiB each, median of 5
// after a warm-up.
CopyRates MeasureCopies(int device, cudaStream_t stream) {
  const size_t bytes = size_t{64} << 20;
  std::vector<unsigned char> pageable(bytes);
  for (size_t i = 0; i < bytes; ++i) pageable[i] = static_cast<unsigned char>(i * 131 + (i >> 12));
  CopyRates rates;
  auto pinned = PinnedBuffer::Allocate(bytes);
  if (!pinned.ok()) return rates;
  auto dev = DeviceMemory::Allocate(bytes, device);
  if (!dev.ok()) return rates;
  auto e0 = Event::Create();
  if (!e0.ok()) return rates;
  auto e1 = Event::Create();
  if (!e1.ok()) return rates;
  std::memcpy(pinned->data(), pageable.data(), bytes);
  rates.h2d = AsyncCopyRate(dev->get(), pinned->data(), bytes, cudaMemcpyHostToDevice, stream, *e0, *e1);
  rates.d2h = AsyncCopyRate(pinned->data(), dev->get(), bytes, cudaMemcpyDeviceToHost, stream, *e0, *e1);
  std::vector<double> seconds;
  for (int i = 0; i < 5; ++i) {
    const absl::Time t0 = absl::Now();
    std::memcpy(pinned->data(), pageable.data(), bytes);
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
  }
  rates.host_copy = MedianRate(bytes, seconds);
  return rates;
}

// Seconds per unit of K of a strict-fp32 64 x 64 x 16384 GEMM, one tile of
// the SIMT kernel alone on the GPU, less one launch: the median of 4 after a
// warm-up.
double MeasureSimtTile(int device, double launch_seconds) {
  constexpr int64_t kDepth = 16384;
  const StrictFp32Gemm g = MakeStrictFp32Gemm(64, 64, kDepth, device);
  gk::Gemm gemm;
  if (!g.memory.ok() || !gemm.Initialize(g.args).ok()) return 0;
  auto ms = TimeOnDefaultStream(5, [&gemm] { return gemm.Run(nullptr).ok(); });
  if (!ms) return 0;
  ms->erase(ms->begin());  // the first run is warm-up
  return std::max(0.0, Median(*ms) / 1e3 - launch_seconds) / kDepth;
}

}  // namespace

gemm_kernels::CopyPricing CopyPricingOf(const std::vector<PeakRate>& peaks, absl::string_view kind,
                                        const Calibration& measured) {
  gemm_kernels::CopyPricing pricing;
  pricing.tensor_flops_per_s = RateOf(peaks, kind);
  pricing.simt_flops_per_s = RateOf(peaks, "fp32");
  pricing.device_copy_bytes_per_s = RateOf(peaks, "memory");
  pricing.launch_seconds = measured.launch_seconds;
  pricing.simt_tile_seconds_per_k = measured.simt_tile_seconds_per_k;
  return pricing;
}

Calibration Calibrate(int device, cudaStream_t copy_stream) {
  const GemmCase cases[] = {{"bf16", DType::kBf16, false, 4096},
                            {"fp16", DType::kFp16, false, 4096},
                            {"tf32", DType::kFp32, true, 4096},
                            {"fp8", DType::kFp8E4m3, false, 4096},
                            {"fp32", DType::kFp32, false, 2048}};
  Calibration out;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const GemmCase& c : cases) {
    if (std::optional<PeakRate> rate = MeasureGemm(c, device, rng, dist)) out.peak_rates.push_back(*rate);
    cudaGetLastError();  // a failed measurement's error is not the next one's
  }
  if (std::optional<PeakRate> rate = MeasureMemory(device)) out.peak_rates.push_back(*rate);
  cudaGetLastError();
  out.copies = MeasureCopies(device, copy_stream);
  cudaGetLastError();
  out.launch_seconds = MeasureLaunch(device);
  cudaGetLastError();
  out.simt_tile_seconds_per_k = MeasureSimtTile(device, out.launch_seconds);
  cudaGetLastError();
  return out;
}

}  // namespace gpu
}  // namespace gemm
