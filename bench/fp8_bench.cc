// FP8 GEMMs: our Hopper FP8 kernel beside cuBLASLt FP8 and beside our bf16
// kernel, in the same process on the same data; and the accumulation
// precision of the FP8 kernel's variants at long K.
//
// perf: per shape, random data quantized per the FP8 contract (e4m3 x e4m3,
// bf16 D), rotating input sets (several times the L2), D poisoned with 0xFF,
// warm-up, then interleaved samples (interleaved_timing.h), median. Rows:
// per-tensor scales (ours, cuBLASLt with promoted accumulation, cuBLASLt
// with CUBLASLT_MATMUL_DESC_FAST_ACCUM), block scales (ours 1x128 / 128x128,
// cuBLASLt VEC128 / BLK128x128, or its status where it has none), and our
// bf16 kernel on the same shape.
//
// precision: m x n x K with K = 16384 and 65536, e4m3 with per-tensor
// scales and fp32 D, against a float64 reference of the dequantized
// operands: ||D - ref||_F / ||ref||_F for the direct 128x256 kernel, the
// 128x128 kernel promoting every 1, 4, 16 k-blocks and once at the end,
// block scales, cuBLASLt, and a sequential fp32 sum on the CPU.
//
// Usage: fp8_bench [perf|precision|all]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_check.h"
#include "bench/fp8_bench_cublaslt.h"
#include "bench/interleaved_timing.h"
#include "kernels/config/heuristic.h"
#include "kernels/gemm.h"
#include "kernels/problem.h"
#include "kernels/sm90/sm90_fp8_gemm.h"
#include "kernels/testing/fp8_host.h"
#include "kernels/testing/host_types.h"

namespace {

using gemm_kernels::DataType;
using gemm_kernels::Gemm;
using gemm_kernels::GemmArguments;
using gemm_kernels::Layout;
using gemm_kernels::ScaleMode;

constexpr gemm_bench::TimingPlan kPlan{5, 25, 8};

// Quantized operand: rows x k codes, K contiguous, per-group scales of
// `mode` (tensor or block) as gemm.h lays them out.
struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

Quantized Quantize(const std::vector<float>& x, int64_t rows, int64_t k, ScaleMode mode,
                   bool is_a) {
  Quantized q;
  const int64_t kb = (k + 127) / 128;
  auto group = [&](int64_t r, int64_t kk) -> int64_t {
    if (mode == ScaleMode::kTensor) return 0;
    return is_a ? r * kb + kk / 128 : (kk / 128) * ((rows + 127) / 128) + r / 128;
  };
  const int64_t groups = mode == ScaleMode::kTensor ? 1 : is_a ? rows * kb : kb * ((rows + 127) / 128);
  q.scales.assign(groups, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < k; ++kk) {
      float& s = q.scales[group(r, kk)];
      s = std::max(s, std::fabs(x[r * k + kk]));
    }
  for (float& s : q.scales) s = gemm_kernels::testing::Fp8Scale(s, true);
  q.codes.resize(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < k; ++kk)
      q.codes[r * k + kk] =
          gemm_kernels::testing::FloatToFp8(x[r * k + kk] / q.scales[group(r, kk)], true);
  return q;
}

std::vector<float> Normal(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& f : v) f = nd(rng);
  return v;
}

template <class T>
bool Upload(const std::vector<T>& h, void** d) {
  CHECK_CUDA(cudaMalloc(d, h.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(*d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return true;
}

GemmArguments Fp8Args(int64_t m, int64_t n, int64_t k, const void* a, const void* b, void* d,
                      DataType out, ScaleMode mode, const float* sa, const float* sb) {
  GemmArguments g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = {a, DataType::kFp8E4m3, Layout::kRowMajor, k, 0};
  g.b = {b, DataType::kFp8E4m3, Layout::kColMajor, k, 0};
  g.d = {d, out, Layout::kRowMajor, n, 0};
  g.a_scale = {mode, sa};
  g.b_scale = {mode, sb};
  return g;
}

// ---------------------------------------------------------------- perf

struct Shape {
  int64_t m, n, k;
};

bool PerfCase(const Shape& s, size_t l2_bytes) {
  const int64_t m = s.m, n = s.n, k = s.k;
  const size_t fp8_set = size_t(m * k + n * k) + size_t(m * n) * 2;
  const int sets = int(std::min<size_t>(8, std::max<size_t>(2, 4 * l2_bytes / fp8_set + 1)));
  // One quantized image per scale mode; sets rotate device copies.
  const std::vector<float> xa = Normal(size_t(m * k), 1), xb = Normal(size_t(n * k), 2);
  const Quantized qa_t = Quantize(xa, m, k, ScaleMode::kTensor, true);
  const Quantized qb_t = Quantize(xb, n, k, ScaleMode::kTensor, false);
  const Quantized qa_b = Quantize(xa, m, k, ScaleMode::kBlock, true);
  const Quantized qb_b = Quantize(xb, n, k, ScaleMode::kBlock, false);
  std::vector<uint16_t> a16(size_t(m * k)), b16(size_t(n * k));
  for (size_t i = 0; i < a16.size(); ++i) a16[i] = gemm_kernels::testing::FloatToBf16(xa[i]);
  for (size_t i = 0; i < b16.size(); ++i) b16[i] = gemm_kernels::testing::FloatToBf16(xb[i]);

  gemm_bench::CublasLtFp8 lt(m, n, k, DataType::kFp8E4m3, DataType::kFp8E4m3, DataType::kBf16,
                             false, false);
  gemm_bench::CublasLtFp8 lt_fast(m, n, k, DataType::kFp8E4m3, DataType::kFp8E4m3,
                                  DataType::kBf16, false, true);
  gemm_bench::CublasLtFp8 lt_block(m, n, k, DataType::kFp8E4m3, DataType::kFp8E4m3,
                                   DataType::kBf16, true, false);
  std::vector<float> ones(size_t(std::max(lt_block.a_scale_count(), lt_block.b_scale_count())),
                          1.0f);

  std::vector<void*> a_t(sets), b_t(sets), a_b(sets), b_b(sets), a16d(sets), b16d(sets), d(sets);
  std::vector<void*> sa_t(sets), sb_t(sets), sa_b(sets), sb_b(sets);
  void* ones_d = nullptr;
  if (!Upload(ones, &ones_d)) return false;
  for (int i = 0; i < sets; ++i) {
    if (!Upload(qa_t.codes, &a_t[i]) || !Upload(qb_t.codes, &b_t[i]) ||
        !Upload(qa_b.codes, &a_b[i]) || !Upload(qb_b.codes, &b_b[i]) || !Upload(a16, &a16d[i]) ||
        !Upload(b16, &b16d[i]) || !Upload(qa_t.scales, &sa_t[i]) ||
        !Upload(qb_t.scales, &sb_t[i]) || !Upload(qa_b.scales, &sa_b[i]) ||
        !Upload(qb_b.scales, &sb_b[i]))
      return false;
    CHECK_CUDA(cudaMalloc(&d[i], size_t(m * n) * 2));
    CHECK_CUDA(cudaMemset(d[i], 0xFF, size_t(m * n) * 2));
  }
  std::vector<Gemm> ours_t(sets), ours_b(sets), ours16(sets);
  for (int i = 0; i < sets; ++i) {
    absl::Status st = ours_t[i].Initialize(
        Fp8Args(m, n, k, a_t[i], b_t[i], d[i], DataType::kBf16, ScaleMode::kTensor,
                static_cast<const float*>(sa_t[i]), static_cast<const float*>(sb_t[i])));
    if (st.ok())
      st = ours_b[i].Initialize(Fp8Args(m, n, k, a_b[i], b_b[i], d[i], DataType::kBf16,
                                        ScaleMode::kBlock, static_cast<const float*>(sa_b[i]),
                                        static_cast<const float*>(sb_b[i])));
    GemmArguments g16;
    g16.m = m;
    g16.n = n;
    g16.k = k;
    g16.a = {a16d[i], DataType::kBf16, Layout::kRowMajor, k, 0};
    g16.b = {b16d[i], DataType::kBf16, Layout::kColMajor, k, 0};
    g16.d = {d[i], DataType::kBf16, Layout::kRowMajor, n, 0};
    if (st.ok()) st = ours16[i].Initialize(g16);
    if (!st.ok()) {
      std::fprintf(stderr, "%ldx%ldx%ld: Initialize: %s\n", long(m), long(n), long(k),
                   st.ToString().c_str());
      return false;
    }
  }
  auto gemm_launch = [](std::vector<Gemm>& g) {
    return [&g](int set) { return g[set].Run(nullptr).ok(); };
  };
  auto lt_launch = [&](const gemm_bench::CublasLtFp8& l, bool block) {
    return [&, block](int set) {
      const std::string e =
          block ? l.Run(a_b[set], b_b[set], d[set], static_cast<const float*>(ones_d),
                        static_cast<const float*>(ones_d), nullptr)
                : l.Run(a_t[set], b_t[set], d[set], static_cast<const float*>(sa_t[set]),
                        static_cast<const float*>(sb_t[set]), nullptr);
      if (!e.empty()) std::fprintf(stderr, "%s\n", e.c_str());
      return e.empty();
    };
  };
  std::vector<gemm_bench::Launcher> impls = {gemm_launch(ours_t), gemm_launch(ours_b),
                                             gemm_launch(ours16)};
  const bool have_lt = lt.error().empty(), have_fast = lt_fast.error().empty(),
             have_block = lt_block.error().empty();
  if (have_lt) impls.push_back(lt_launch(lt, false));
  if (have_fast) impls.push_back(lt_launch(lt_fast, false));
  if (have_block) impls.push_back(lt_launch(lt_block, true));
  std::vector<double> ms;
  if (!gemm_bench::TimeInterleaved(impls, sets, kPlan, &ms)) return false;
  const double flop = 2.0 * double(m) * double(n) * double(k);
  auto tf = [&](double t) { return flop / (t * 1e-3) / 1e12; };
  size_t next = 3;
  const double t_lt = have_lt ? ms[next++] : 0, t_fast = have_fast ? ms[next++] : 0,
               t_block = have_block ? ms[next++] : 0;
  std::printf("| %ldx%ldx%ld | %s | %.0f | %s | %s | %.3f | %s | %s | %.0f | %s | %.3f | %.0f | %.2f |\n",
              long(m), long(n), long(k), ours_t[0].kernel_name().c_str(), tf(ms[0]),
              have_lt ? std::to_string(int(tf(t_lt))).c_str() : "n/a",
              have_fast ? std::to_string(int(tf(t_fast))).c_str() : "n/a",
              have_lt ? t_lt / ms[0] : 0.0, have_fast ? std::to_string(t_fast / ms[0]).c_str() : "n/a",
              ours_b[0].kernel_name().c_str(), tf(ms[1]),
              have_block ? std::to_string(int(tf(t_block))).c_str() : "n/a",
              have_block ? t_block / ms[1] : 0.0, tf(ms[2]), ms[2] / ms[0]);
  if (!have_lt) std::printf("  cuBLASLt per-tensor: %s\n", lt.error().c_str());
  if (!have_fast) std::printf("  cuBLASLt fast-accum: %s\n", lt_fast.error().c_str());
  if (!have_block) std::printf("  cuBLASLt block-scaled: %s\n", lt_block.error().c_str());
  for (auto* v : {&a_t, &b_t, &a_b, &b_b, &a16d, &b16d, &d, &sa_t, &sb_t, &sa_b, &sb_b})
    for (void* p : *v) cudaFree(p);
  cudaFree(ones_d);
  return true;
}

bool Perf(size_t l2_bytes) {
  std::printf("\nperf: e4m3 x e4m3, bf16 D, A row-major, B col-major; %d samples x %d runs, median\n",
              kPlan.samples, kPlan.runs_per_sample);
  std::printf("| shape | ours (tensor) | ours TFLOP/s | cuBLASLt TFLOP/s | cuBLASLt fast-accum TFLOP/s "
              "| ours/cuBLASLt | ours/fast-accum | ours (block) | ours block TFLOP/s | cuBLASLt block "
              "TFLOP/s | ours/cuBLASLt block | ours bf16 TFLOP/s | fp8/bf16 |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const Shape shapes[] = {{2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192},
                          {4096, 7168, 16384}, {2048, 7168, 4096}};
  bool ok = true;
  for (const Shape& s : shapes) ok = PerfCase(s, l2_bytes) && ok;
  return ok;
}

// ---------------------------------------------------------------- precision

bool PrecisionCase(int64_t m, int64_t n, int64_t k) {
  const std::vector<float> xa = Normal(size_t(m * k), 11), xb = Normal(size_t(n * k), 12);
  const Quantized qa = Quantize(xa, m, k, ScaleMode::kTensor, true);
  const Quantized qb = Quantize(xb, n, k, ScaleMode::kTensor, false);
  const Quantized qa_b = Quantize(xa, m, k, ScaleMode::kBlock, true);
  const Quantized qb_b = Quantize(xb, n, k, ScaleMode::kBlock, false);
  // float64 references of the dequantized operands (tensor and block), and
  // a sequential fp32 sum of the tensor-scaled products.
  std::vector<double> ref(size_t(m * n)), ref_b(size_t(m * n));
  std::vector<float> seq32(size_t(m * n));
  {
    std::vector<float> da(size_t(m * k)), db(size_t(n * k)), da_b(size_t(m * k)),
        db_b(size_t(n * k));
    const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t kk = 0; kk < k; ++kk) {
        da[i * k + kk] = gemm_kernels::testing::Fp8ToFloat(qa.codes[i * k + kk], true) * qa.scales[0];
        da_b[i * k + kk] = gemm_kernels::testing::Fp8ToFloat(qa_b.codes[i * k + kk], true) *
                           qa_b.scales[i * kb + kk / 128];
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) {
        db[j * k + kk] = gemm_kernels::testing::Fp8ToFloat(qb.codes[j * k + kk], true) * qb.scales[0];
        db_b[j * k + kk] = gemm_kernels::testing::Fp8ToFloat(qb_b.codes[j * k + kk], true) *
                           qb_b.scales[(kk / 128) * nb + j / 128];
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, sb = 0;
        float s32 = 0;
        const float *ar = &da[i * k], *bc = &db[j * k], *arb = &da_b[i * k], *bcb = &db_b[j * k];
        for (int64_t kk = 0; kk < k; ++kk) {
          s += double(ar[kk]) * bc[kk];
          sb += double(arb[kk]) * bcb[kk];
          s32 += ar[kk] * bc[kk];
        }
        ref[i * n + j] = s;
        ref_b[i * n + j] = sb;
        seq32[i * n + j] = s32;
      }
  }
  auto rel = [&](const std::vector<float>& got, const std::vector<double>& r) {
    double e2 = 0, r2 = 0, emax = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      e2 += (got[i] - r[i]) * (got[i] - r[i]);
      r2 += r[i] * r[i];
      emax = std::max(emax, std::fabs(got[i] - r[i]));
    }
    return std::make_pair(std::sqrt(e2 / r2), emax / std::sqrt(r2 / got.size()));
  };
  void *a, *b, *ab, *bb, *sa, *sb, *sab, *sbb, *d;
  if (!Upload(qa.codes, &a) || !Upload(qb.codes, &b) || !Upload(qa_b.codes, &ab) ||
      !Upload(qb_b.codes, &bb) || !Upload(qa.scales, &sa) || !Upload(qb.scales, &sb) ||
      !Upload(qa_b.scales, &sab) || !Upload(qb_b.scales, &sbb))
    return false;
  CHECK_CUDA(cudaMalloc(&d, size_t(m * n) * 4));
  std::vector<float> out(size_t(m * n));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::string error;
  auto report = [&](const char* what, const std::pair<double, double>& e) {
    std::printf("| %ldx%ldx%ld | %s | %.3e | %.3e |\n", long(m), long(n), long(k), what, e.first,
                e.second);
  };
  // Our kernel's variants through the plan factory (the promotion interval
  // is the experiment's variable).
  struct Variant {
    const char* name;
    gemm_kernels::Sm90Tile tile;
    int promote_every;  // 0: once at the end
    bool block;
  };
  const Variant variants[] = {
      {"ours 128x256 direct (no promotion)", gemm_kernels::Sm90Tile::k128x256, 1, false},
      {"ours 128x128 promote at end only", gemm_kernels::Sm90Tile::k128x128, 0, false},
      {"ours 128x128 promote every 16 k-blocks", gemm_kernels::Sm90Tile::k128x128, 16, false},
      {"ours 128x128 promote every 4 k-blocks", gemm_kernels::Sm90Tile::k128x128, 4, false},
      {"ours 128x128 promote every k-block", gemm_kernels::Sm90Tile::k128x128, 1, false},
      {"ours block scales (promote every k-block)", gemm_kernels::Sm90Tile::k128x128, 1, true},
  };
  for (const Variant& v : variants) {
    const GemmArguments args =
        v.block ? Fp8Args(m, n, k, ab, bb, d, DataType::kFp32, ScaleMode::kBlock,
                          static_cast<const float*>(sab), static_cast<const float*>(sbb))
                : Fp8Args(m, n, k, a, b, d, DataType::kFp32, ScaleMode::kTensor,
                          static_cast<const float*>(sa), static_cast<const float*>(sb));
    const absl::Status st = Gemm::CanImplement(args);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return false;
    }
    const gemm_kernels::NormalizedProblem p = gemm_kernels::Normalize(args);
    const gemm_kernels::Sm90Fp8Launch launch =
        gemm_kernels::ChooseSm90Fp8Launch(m, n, k, 1, prop.multiProcessorCount, v.block, &v.tile);
    const int every = v.promote_every > 0 ? v.promote_every : int((k + 127) / 128);
    auto plan = gemm_kernels::MakeSm90Fp8Plan(p, gemm_kernels::NormalizeFp8(args), launch.launch,
                                              every, &error);
    if (!plan) {
      std::fprintf(stderr, "%s: %s\n", v.name, error.c_str());
      return false;
    }
    CHECK_CUDA(cudaMemset(d, 0xFF, size_t(m * n) * 4));
    const std::string le = plan->Launch(nullptr);
    if (!le.empty()) {
      std::fprintf(stderr, "%s: %s\n", v.name, le.c_str());
      return false;
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost));
    report(v.name, rel(out, v.block ? ref_b : ref));
  }
  for (bool fast : {false, true}) {
    gemm_bench::CublasLtFp8 lt(m, n, k, DataType::kFp8E4m3, DataType::kFp8E4m3, DataType::kFp32,
                               false, fast);
    const char* name = fast ? "cuBLASLt fast-accum" : "cuBLASLt (default accumulation)";
    if (!lt.error().empty()) {
      std::printf("| %ldx%ldx%ld | %s | %s | |\n", long(m), long(n), long(k), name,
                  lt.error().c_str());
      continue;
    }
    CHECK_CUDA(cudaMemset(d, 0xFF, size_t(m * n) * 4));
    const std::string le = lt.Run(a, b, d, static_cast<const float*>(sa),
                                  static_cast<const float*>(sb), nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    if (!le.empty()) {
      std::printf("| %ldx%ldx%ld | %s | %s | |\n", long(m), long(n), long(k), name, le.c_str());
      continue;
    }
    CHECK_CUDA(cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost));
    report(name, rel(out, ref));
  }
  report("CPU sequential fp32 sum", rel(seq32, ref));
  for (void* p : {a, b, ab, bb, sa, sb, sab, sbb, d}) cudaFree(p);
  return true;
}

bool Precision() {
  std::printf("\nprecision: e4m3 x e4m3 (N(0,1) data, quantized), fp32 D, vs float64 of the "
              "dequantized operands\n");
  std::printf("| shape | variant | rel. Frobenius error | max abs error / rms(ref) |\n|---|---|---|---|\n");
  return PrecisionCase(128, 256, 16384) && PrecisionCase(128, 256, 65536);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  std::printf("device: %s, %d SMs, L2 %d MB, cc %d.%d\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, prop.major, prop.minor);
  bool ok = true;
  if (mode == "precision" || mode == "all") ok = Precision() && ok;
  if (mode == "perf" || mode == "all") ok = Perf(size_t(prop.l2CacheSize)) && ok;
  return ok ? 0 : 1;
}
