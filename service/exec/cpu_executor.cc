#include "service/exec/cpu_executor.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "service/exec/calibration.h"

namespace gemm {
namespace {

bool IsRowMajor(const MatrixRef& m) { return m.layout == Layout::kRowMajor; }

CBLAS_TRANSPOSE Trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

// `src` (rows x cols in its own layout and dtype) as fp32 in `layout`.
void ConvertMatrix(const MatrixRef& src, Layout layout, float* dst) {
  if (src.layout == layout) {
    ToFloat(src.dtype, src.data, dst, src.elements());
    return;
  }
  const auto* base = static_cast<const unsigned char*>(src.data);
  const MatrixRef out{nullptr, src.rows, src.cols, layout, DType::kFp32};
  for (uint64_t r = 0; r < src.rows; ++r)
    for (uint64_t c = 0; c < src.cols; ++c)
      ToFloat(src.dtype, base + src.offset(r, c), dst + out.offset(r, c) / sizeof(float), 1);
}

// A fp32 copy of an operand, or the operand itself when it already is fp32.
// An FP8 operand is dequantized: each element its code times its scale.
const float* AsFloat(const MatrixRef& m, std::vector<float>* scratch) {
  if (m.dtype == DType::kFp32) return static_cast<const float*>(m.data);
  scratch->resize(m.elements());
  if (IsFp8(m.dtype)) {
    DequantizeFp8(static_cast<const uint8_t*>(m.data), m.dtype, m.fp8_operand(), m.scales.data,
                  scratch->data());
  } else {
    ToFloat(m.dtype, m.data, scratch->data(), m.elements());
  }
  return scratch->data();
}

// quantize_partner: operand `m` (bf16 or fp32) quantized to `format` with
// `mode` scales as the problem's operand `which`, then dequantized, so that
// it enters the product exactly as an FP8 operand would.
absl::StatusOr<const float*> QuantizedAsFloat(const MatrixRef& m, DType format, ScaleMode mode,
                                              OperandRole which, bool transposed,
                                              std::vector<float>* scratch) {
  const float* values = AsFloat(m, scratch);
  const Fp8Operand g{m.rows, m.cols, m.layout, which, transposed, mode};
  std::vector<uint8_t> codes(m.elements());
  std::vector<float> scales(ScaleCount(g));
  const uint64_t bad = QuantizeFp8(values, g, format, codes.data(), scales.data());
  if (bad != kQuantizeOk)
    return absl::InvalidArgumentError(absl::StrCat(
        OperandName(which), ".data: element ", bad, " (in storage order) is ",
        std::isnan(values[bad]) ? "NaN" : "infinite",
        ": quantize_partner quantizes only finite values"));
  scratch->resize(m.elements());
  DequantizeFp8(codes.data(), format, g, scales.data(), scratch->data());
  return scratch->data();
}

absl::StatusOr<const float*> Operand32(const GemmProblemRef& p, OperandRole which,
                                       std::vector<float>* scratch) {
  const bool is_a = which == OperandRole::kA;
  const MatrixRef& m = is_a ? p.a : p.b;
  if (p.quantize == (is_a ? GemmProblemRef::Quantize::kA : GemmProblemRef::Quantize::kB))
    return QuantizedAsFloat(m, is_a ? p.shape.input_dtype : p.shape.b_dtype(), p.quantize_mode,
                            which, is_a ? p.shape.transpose_a : p.shape.transpose_b, scratch);
  return AsFloat(m, scratch);
}

}  // namespace

const char* CpuKernelName(const GemmShape& shape) {
  return shape.fp8() ? "openblas_sgemm_fp8" : "openblas_sgemm";
}

absl::StatusOr<absl::Duration> RunCpuGemm(const GemmProblemRef& p) {
  const GemmShape& s = p.shape;
  absl::Duration staging;
  absl::Time t0 = absl::Now();
  std::vector<float> a_scratch, b_scratch, d_scratch;
  absl::StatusOr<const float*> a_or = Operand32(p, OperandRole::kA, &a_scratch);
  if (!a_or.ok()) return a_or.status();
  absl::StatusOr<const float*> b_or = Operand32(p, OperandRole::kB, &b_scratch);
  if (!b_or.ok()) return b_or.status();
  const float* a = *a_or;
  const float* b = *b_or;
  float* d = static_cast<float*>(p.d);
  if (s.output_dtype != DType::kFp32) {
    d_scratch.resize(s.m * s.n);
    d = d_scratch.data();
  }
  const bool use_c = p.beta != 0.0 && p.c.data != nullptr;
  if (use_c) ConvertMatrix(p.c, s.layout_d, d);
  staging += absl::Now() - t0;

  // Column-major BLAS sees a row-major matrix as its transpose, so each
  // operand's transpose flag is its own flag xor "stored row-major". A
  // row-major D is computed as D^T = op(B)^T op(A)^T.
  const bool ta = s.transpose_a != IsRowMajor(p.a);
  const bool tb = s.transpose_b != IsRowMajor(p.b);
  const float alpha = static_cast<float>(p.alpha);
  const float beta = use_c ? static_cast<float>(p.beta) : 0.0f;
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  const int lda = static_cast<int>(p.a.ld()), ldb = static_cast<int>(p.b.ld());
  if (s.layout_d == Layout::kColMajor) {
    cblas_sgemm(CblasColMajor, Trans(ta), Trans(tb), m, n, k, alpha, a, lda, b, ldb, beta, d, m);
  } else {
    cblas_sgemm(CblasColMajor, Trans(!tb), Trans(!ta), n, m, k, alpha, b, ldb, a, lda, beta, d,
                n);
  }

  if (s.output_dtype != DType::kFp32) {
    t0 = absl::Now();
    FromFloat(s.output_dtype, d, p.d, s.m * s.n);
    staging += absl::Now() - t0;
  }
  return staging;
}

ProblemReproducibility CpuReproducibility(int blas_threads) {
  ProblemReproducibility r;
  r.kernel_family = "openblas_sgemm";
  r.kernel = "openblas_sgemm";
  r.splits = 1;
  r.reduction_order = absl::StrCat(
      "OpenBLAS sgemm in fp32 (fp16 and bf16 widened exactly, FP8 dequantized to code * "
      "scale in fp32) on ", blas_threads,
      " BLAS threads: its K blocking and thread partition follow M, N, K and the thread count");
  return r;
}

absl::StatusOr<std::unique_ptr<CpuExecutor>> CpuExecutor::Create(const Options& options) {
  if (options.concurrent_requests < 1)
    return absl::InvalidArgumentError("concurrent_requests must be at least 1");
  if (options.blas_threads < 0) return absl::InvalidArgumentError("blas_threads must be >= 0");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.blas_threads > 0 ? options.blas_threads : cores;
  std::unique_ptr<CpuExecutor> ex(new CpuExecutor(options, threads, cores));
  openblas_set_num_threads(threads);
  BackendInfo& info = ex->info_;
  info.backend = "cpu";
  info.devices.push_back(DeviceDescription{
      absl::StrCat("CPU (OpenBLAS ", openblas_get_config(), ")"), "", 0, 0,
      static_cast<uint32_t>(threads)});
  info.kernels = {"openblas_sgemm", "openblas_sgemm_fp8"};
  ex->device_model_ = absl::StrCat("CPU ", openblas_get_corename(), " (OpenBLAS ",
                                   openblas_get_config(), "), ", threads, " BLAS threads");
  std::vector<PeakRate> rates;
  if (options.calibrate) rates = ex->Measure();
  ApplyPeakOverrides(options.peak_overrides, &rates);
  ex->peaks_.Set(std::move(rates));
  for (int i = 0; i < options.concurrent_requests; ++i)
    ex->threads_.emplace_back([e = ex.get()] { e->RunThread(); });
  return ex;
}

std::vector<PeakRate> CpuExecutor::Measure() const {
  // The peak is what the executor can reach with all of its threads: the
  // concurrent requests' sgemms together use up to concurrent_requests x
  // blas_threads cores, so one sgemm on that many threads stands for them.
  // A small product on few threads (what this measured before: 512^3, best
  // of 4) reported a third of the rate requests then ran at.
  const int threads = std::max(
      blas_threads_, std::min(cores_, options_.concurrent_requests * blas_threads_));
  openblas_set_num_threads(threads);
  const double budget = absl::ToDoubleSeconds(options_.calibration_budget);
  const absl::Time give_up = absl::Now() + options_.calibration_budget;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  double flops = 0;
  for (int n = 512; n <= 4096; n *= 2) {
    std::vector<float> a(size_t{1} * n * n), b(a.size()), c(a.size());
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    double best = 1e30;
    // Best of up to 5 (the first warms the threads and caches up).
    for (int i = 0; i < 5 && (i < 2 || absl::Now() < give_up); ++i) {
      const absl::Time t0 = absl::Now();
      cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n,
                  b.data(), n, 0.0f, c.data(), n);
      best = std::min(best, absl::ToDoubleSeconds(absl::Now() - t0));
    }
    flops = std::max(flops, 2.0 * n * n * n / best);
    // Large enough once one product takes a tenth of the budget; the next
    // size takes 8x as long, so stop if it would not fit.
    if (best > budget / 10 || absl::Now() + absl::Seconds(8 * best * 2) > give_up) break;
  }
  openblas_set_num_threads(blas_threads_);
  // fp16 and bf16 run through the same sgemm after widening.
  std::vector<PeakRate> rates;
  for (const char* kind : {"fp32", "fp16", "bf16"})
    rates.push_back({kind, flops, kPeakMethodMeasured});

  // Memory bandwidth: a 64 MiB copy, bytes read plus bytes written.
  std::vector<char> src(64 << 20, 1), dst(64 << 20);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const absl::Time t0 = absl::Now();
    std::memcpy(dst.data(), src.data(), src.size());
    best = std::min(best, absl::ToDoubleSeconds(absl::Now() - t0));
  }
  rates.push_back({"memory", 2.0 * src.size() / best, kPeakMethodMeasured});
  return rates;
}

absl::Status CpuExecutor::RemeasurePeaks() {
  absl::MutexLock one_at_a_time(&remeasure_mu_);
  {
    absl::MutexLock lock(&mu_);
    measuring_ = true;
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ == 0; };
    mu_.Await(absl::Condition(&idle));
  }
  std::vector<PeakRate> rates = Measure();
  ApplyPeakOverrides(options_.peak_overrides, &rates);
  peaks_.Set(std::move(rates));
  absl::MutexLock lock(&mu_);
  measuring_ = false;
  return absl::OkStatus();
}

absl::Duration CpuExecutor::PredictRunTime(const WorkItem& item) const {
  const std::vector<PeakRate> rates = peaks_.Get();
  const double sgemm = RateOf(rates, "fp32");
  if (!(sgemm > 0)) return absl::ZeroDuration();
  const double memory = RateOf(rates, "memory");  // bytes read + written
  double seconds = 0;
  for (const GemmProblemRef& p : item.problems) {
    seconds += p.shape.flops() / sgemm;
    if (!(memory > 0)) continue;
    // Bytes RunCpuGemm reads and writes converting to fp32 and back.
    double converted = 0;
    for (const MatrixRef* m : {&p.a, &p.b})
      if (m->dtype != DType::kFp32) converted += m->elements() * (SizeOf(m->dtype) + 4.0);
    const double d_elements = static_cast<double>(p.shape.m) * p.shape.n;
    if (p.beta != 0.0 && p.c.present()) converted += d_elements * (SizeOf(p.c.dtype) + 4.0);
    if (p.shape.output_dtype != DType::kFp32)
      converted += d_elements * (4.0 + SizeOf(p.shape.output_dtype));
    seconds += converted / memory;
  }
  return absl::Seconds(seconds);
}

int CpuExecutor::parallel_units() const {
  return std::max(1, std::min(options_.concurrent_requests, cores_ / blas_threads_));
}

CpuExecutor::~CpuExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void CpuExecutor::Execute(Batch batch) {
  absl::MutexLock lock(&mu_);
  pending_.push_back(std::move(batch));
}

void CpuExecutor::ExecuteHere(Batch batch) {
  {
    absl::MutexLock lock(&mu_);
    if (measuring_) {
      pending_.push_back(std::move(batch));
      return;
    }
    ++running_;
  }
  RunBatch(batch);
  absl::MutexLock lock(&mu_);
  --running_;
}

void CpuExecutor::RunThread() {
  while (true) {
    Batch batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!pending_.empty() && !measuring_);
      };
      mu_.Await(absl::Condition(&ready));
      if (pending_.empty()) return;  // stopping, and nothing left to run
      batch = std::move(pending_.front());
      pending_.pop_front();
      ++running_;
    }
    RunBatch(batch);
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

// The CPU has no batched BLAS: every problem is one sgemm call, whatever
// launch the batch planned for it. Each request is answered as soon as it is
// done; the batch's slot is returned just before the last answer, so that a
// client's next request finds the executor idle rather than just about to be.
void CpuExecutor::RunBatch(Batch& batch) const {
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const std::shared_ptr<WorkItem>& item = batch.items[i];
    const bool last = i + 1 == batch.items.size();
    auto complete = [&](const absl::Status& status) {
      if (last && batch.on_done) std::exchange(batch.on_done, nullptr)();
      item->Complete(status);
    };
    if (item->cancelled.load()) {
      complete(absl::CancelledError("the call was cancelled before it ran"));
      continue;
    }
    absl::Duration staging, compute;
    absl::Status failed;
    bool any_fp8 = false;
    for (size_t j = 0; j < item->problems.size() && failed.ok(); ++j) {
      const GemmProblemRef& p = item->problems[j];
      const absl::Time start = absl::Now();
      const absl::StatusOr<absl::Duration> s = RunCpuGemm(p);
      if (!s.ok()) {
        failed = absl::Status(s.status().code(),
                              absl::StrCat("problems[", j, "].", s.status().message()));
        break;
      }
      const absl::Duration c = absl::Now() - start - *s;
      item->report.launches.push_back({CpuKernelName(p.shape), c, p.shape.flops()});
      any_fp8 = any_fp8 || p.shape.fp8();
      staging += *s;
      compute += c;
    }
    item->report.transfer = staging;
    item->report.compute = compute;
    item->report.device_share = compute;
    item->report.backend = "cpu";
    item->report.kernel = any_fp8 ? "openblas_sgemm_fp8" : "openblas_sgemm";
    if (item->deterministic && failed.ok()) {
      item->report.device_model = device_model_;
      for (const GemmProblemRef& p : item->problems) {
        item->report.reproducibility.push_back(CpuReproducibility(blas_threads_));
        item->report.reproducibility.back().kernel = CpuKernelName(p.shape);
      }
    }
    complete(failed);
  }
  if (batch.on_done) batch.on_done();  // an empty batch
}

}  // namespace gemm
