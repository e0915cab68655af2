// Benchmark of the stream-K / split-K schedules and of grouped launches,
// beside cuBLAS in the same run (a binary, not a timed test).
//
// Sections (pick with substring filters on the case names; none = all):
//   "sk ..."       wave-quantization and K-heavy shapes: cuBLAS, our heuristic
//                  (with workspace), data-parallel alone, forced stream-K,
//                  forced split-K; geometric means at the end.
//   "skinny ..."   7 x 8192 x 8192: effective TB/s (bytes of A, B and D).
//   "grouped ..."  random M_i (seed printed): our grouped kernel (its own tile
//                  and each tile forced), cublasGemmGroupedBatchedEx, a loop
//                  of cublasGemmEx calls.
//   "ragged grouped ..."  a list whose rows are off TMA's 16-byte grid (odd K):
//                  such members never join a grouped launch in the service
//                  (launch_plan.cc), so ours is what the lane runs, one
//                  single launch per member with its operands copied aligned
//                  (GemmArguments::copy_unaligned_operands), copies timed in.
// Method as in kernel_bench: bf16 random inputs (never zeros), A row-major,
// B column-major, D row-major, rotating buffer sets so each case's working set
// is >= 4x the L2, warm-up, samples of kRunsPerSample launches timed with CUDA
// events, implementations interleaved sample by sample, median.
//
// Usage: schedule_bench [filter-substring...]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/bf16_data.h"
#include "bench/cuda_check.h"
#include "bench/cublas_baseline.h"
#include "bench/dense_sets.h"
#include "bench/grouped_sets.h"
#include "bench/interleaved_timing.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"

namespace {

using gemm_kernels::DataType;
using gemm_kernels::Gemm;
using gemm_kernels::GemmArguments;
using gemm_kernels::GroupedGemm;
using gemm_kernels::GroupedGemmArguments;
using gemm_kernels::ScheduleHint;
using gemm_kernels::TileHint;

constexpr int kWarmup = 5;
constexpr int kSamples = 21;
constexpr int kRunsPerSample = 8;

size_t g_l2 = 0;
int g_sms = 0;

int SetsFor(size_t set_bytes) { return gemm_bench::RotatingSets(set_bytes, g_l2); }

using gemm_bench::Launcher;

constexpr gemm_bench::TimingPlan kPlan{kWarmup, kSamples, kRunsPerSample};

bool TimeInterleaved(const std::vector<Launcher>& impls, int sets, std::vector<double>* ms) {
  return gemm_bench::TimeInterleaved(impls, sets, kPlan, ms);
}

struct DenseCase {
  const char* name;
  int64_t m, n, k;
  double cublas_ref;  // the issue's cuBLAS TFLOP/s (or TB/s for skinny)
};

// Times one dense shape; `ratios` collects (ours/cuBLAS, ours/DP).
bool RunDense(const DenseCase& dc, const gemm_bench::CublasBaseline& cublas, bool skinny,
              std::vector<std::pair<double, double>>* ratios) {
  const int64_t m = dc.m, n = dc.n, k = dc.k;
  gemm_bench::DenseSetsOptions options;
  options.sets = SetsFor(gemm_bench::DenseSetBytes(m, n, k));
  options.poison_outputs = true;
  gemm_bench::DenseSets sets(m, n, k, options);
  if (!sets.Allocate()) return false;
  // Variants: 0 heuristic with workspace, 1 data-parallel alone (no
  // workspace), 2 forced stream-K, 3 forced split-K.
  const ScheduleHint hints[4] = {ScheduleHint::kAuto, ScheduleHint::kDataParallel,
                                 ScheduleHint::kStreamK, ScheduleHint::kSplitK};
  size_t ws_bytes = 0;
  std::vector<GemmArguments> args(sets.sets());
  for (int s = 0; s < sets.sets(); ++s) {
    args[s] = sets.Arguments(s);
    for (ScheduleHint h : hints)
      ws_bytes = std::max(ws_bytes, Gemm::WorkspaceSize(args[s], TileHint::kAuto, h));
  }
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 256)));
  std::unique_ptr<void, decltype(&cudaFree)> ws_owner(ws, &cudaFree);
  std::vector<std::vector<Gemm>> gemms(4);
  for (int v = 0; v < 4; ++v) {
    gemms[v] = std::vector<Gemm>(sets.sets());
    for (int s = 0; s < sets.sets(); ++s) {
      const absl::Status st =
          gemms[v][s].Initialize(args[s], v == 1 ? nullptr : ws, TileHint::kAuto, hints[v]);
      if (!st.ok()) {
        std::fprintf(stderr, "%s: %s\n", dc.name, st.ToString().c_str());
        return false;
      }
    }
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<Launcher> impls;
  impls.push_back([&](int s) {
    const gemm_bench::DenseSets::Buffers& buf = sets.buffers(s);
    return cublas.Gemm(DataType::kBf16, false, 1, m, n, k, buf.a, buf.b, buf.dref).empty();
  });
  for (int v = 0; v < 4; ++v) impls.push_back([&, v](int s) { return gemms[v][s].Run(nullptr).ok(); });
  std::vector<double> ms;
  if (!TimeInterleaved(impls, sets.sets(), &ms)) return false;
  if (!gemms[0][0].Run(nullptr).ok()) return false;
  CHECK_CUDA(cudaDeviceSynchronize());
  const double rel = gemm_bench::RelDiffBf16(sets.buffers(0).d, sets.buffers(0).dref, m * n);
  const double flops = sets.Flops();
  auto tf = [&](double t) { return flops / (t * 1e-3) / 1e12; };
  if (skinny) {
    const double bytes = double(m * k + k * n + m * n) * 2;
    auto tbs = [&](double t) { return bytes / (t * 1e-3) / 1e12; };
    std::printf("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f us | %.3f | %.1e |\n", dc.name,
                gemms[0][0].kernel_name().c_str(), tbs(ms[1]), tbs(ms[0]), tbs(ms[2]), tbs(ms[3]),
                tbs(ms[4]), ms[1] * 1e3, ms[0] / ms[1], rel);
  } else {
    std::printf("| %s | %s | %.0f | %.0f (%.0f) | %.0f | %.0f | %.0f | %.3f | %.3f | %.1e |\n", dc.name,
                gemms[0][0].kernel_name().c_str(), tf(ms[1]), tf(ms[0]), dc.cublas_ref, tf(ms[2]),
                tf(ms[3]), tf(ms[4]), ms[0] / ms[1], ms[2] / ms[1], rel);
  }
  std::fflush(stdout);
  ratios->push_back({ms[0] / ms[1], ms[2] / ms[1]});
  return true;
}

struct GroupedCase {
  const char* name;
  int count, m_lo, m_hi, n, k;
  double cublas_grouped_ref, cublas_loop_ref;
};

// The two cuBLAS baselines of a grouped list, writing the reference D of
// each member: cublasGemmGroupedBatchedEx (`theirs`, one per set) and a loop
// of cublasGemmEx calls.
std::pair<Launcher, Launcher> CublasLaunchers(
    const gemm_bench::GroupedSets& sets, const gemm_bench::CublasBaseline& cublas,
    const std::vector<std::unique_ptr<gemm_bench::CublasGrouped>>& theirs) {
  Launcher grouped = [&theirs](int s) {
    const std::string e = theirs[s]->Run();
    if (!e.empty()) std::fprintf(stderr, "%s\n", e.c_str());
    return e.empty();
  };
  Launcher loop = [&sets, &cublas](int s) {
    for (size_t i = 0; i < sets.rows().size(); ++i) {
      const gemm_bench::GroupedSets::Member& mb = sets.member(s, i);
      if (!cublas.Gemm(DataType::kBf16, false, 1, sets.rows()[i], sets.n(), sets.k(), mb.a, mb.b,
                       mb.dref)
               .empty())
        return false;
    }
    return true;
  };
  return {grouped, loop};
}

// The largest relative difference of our D from cuBLAS's on set 0.
double WorstRelDiff(const gemm_bench::GroupedSets& sets) {
  double worst = 0;
  for (size_t i = 0; i < sets.rows().size(); ++i) {
    const gemm_bench::GroupedSets::Member& mb = sets.member(0, i);
    worst = std::max(worst, gemm_bench::RelDiffBf16(mb.d, mb.dref,
                                                    int64_t(sets.rows()[i]) * sets.n()));
  }
  return worst;
}

bool RunGrouped(const GroupedCase& gc, const gemm_bench::CublasBaseline& cublas, uint64_t seed) {
  std::vector<int> rows = gemm_bench::GroupedRows(gc.count, gc.m_lo, gc.m_hi, seed);
  gemm_bench::GroupedSetsOptions options;
  options.sets = SetsFor(gemm_bench::GroupedSetBytes(rows, gc.n, gc.k));
  options.poison_outputs = true;
  options.workspaces_per_set = 3;  // ours, wide, square below
  options.workspace_bytes = std::max<size_t>(256, GroupedGemm::WorkspaceSize(rows.size()));
  gemm_bench::GroupedSets sets(std::move(rows), gc.n, gc.k, options);
  if (!sets.Allocate()) return false;
  // Ours with the tile the grouped heuristic picks, and with each tile forced.
  std::vector<GroupedGemm> ours(sets.sets()), wide(sets.sets()), square(sets.sets());
  std::vector<std::unique_ptr<gemm_bench::CublasGrouped>> theirs;
  for (int s = 0; s < sets.sets(); ++s) {
    const GroupedGemmArguments args = sets.Arguments(s);
    for (auto [g, hint, plan] : {std::tuple{&ours[s], TileHint::kAuto, 0},
                                 {&wide[s], TileHint::k128x256, 1},
                                 {&square[s], TileHint::k128x128, 2}}) {
      const absl::Status st = g->Initialize(args, sets.workspace(s, plan), hint);
      if (!st.ok()) {
        std::fprintf(stderr, "%s: %s\n", gc.name, st.ToString().c_str());
        return false;
      }
    }
    theirs.push_back(
        std::make_unique<gemm_bench::CublasGrouped>(cublas, DataType::kBf16, sets.CublasMembers(s)));
  }
  const auto [cublas_grouped, cublas_loop] = CublasLaunchers(sets, cublas, theirs);
  std::vector<Launcher> impls = {
      [&](int s) { return ours[s].Run(nullptr).ok(); },
      cublas_grouped, cublas_loop,
      [&](int s) { return wide[s].Run(nullptr).ok(); },
      [&](int s) { return square[s].Run(nullptr).ok(); }};
  std::vector<double> t;
  if (!TimeInterleaved(impls, sets.sets(), &t)) return false;
  // Agreement on set 0 with cuBLAS (the loop wrote dref last).
  if (!ours[0].Run(nullptr).ok()) return false;
  CHECK_CUDA(cudaDeviceSynchronize());
  const double worst = WorstRelDiff(sets);
  const double flops = sets.Flops();
  auto tf = [&](double ms_) { return flops / (ms_ * 1e-3) / 1e12; };
  const double best_cublas = std::min(t[1], t[2]);
  std::printf("| %s (seed %llu) | %s | %.1f | %.1f (%.1f) | %.1f (%.1f) | %.2f | %.2f | %.1f | %.1f "
              "| %.1e |\n",
              gc.name, static_cast<unsigned long long>(seed), ours[0].kernel_name().c_str(),
              tf(t[0]), tf(t[1]), gc.cublas_grouped_ref, tf(t[2]), gc.cublas_loop_ref, t[1] / t[0],
              best_cublas / t[0], tf(t[3]), tf(t[4]), worst);
  std::fflush(stdout);
  return true;
}

// A grouped list with odd K (A's and B's rows off the 16-byte grid): ours as
// the service runs it (one launch per member, operands copied aligned) beside
// cublasGemmGroupedBatchedEx and a loop of cublasGemmEx on the same members.
bool RunRaggedGrouped(const GroupedCase& gc, const gemm_bench::CublasBaseline& cublas,
                      uint64_t seed) {
  std::vector<int> rows = gemm_bench::GroupedRows(gc.count, gc.m_lo, gc.m_hi, seed);
  gemm_bench::GroupedSetsOptions options;
  options.sets = SetsFor(gemm_bench::GroupedSetBytes(rows, gc.n, gc.k));
  options.poison_outputs = true;
  gemm_bench::GroupedSets sets(std::move(rows), gc.n, gc.k, options);
  if (!sets.Allocate()) return false;
  std::vector<std::vector<Gemm>> ours(sets.sets());
  for (std::vector<Gemm>& set : ours) set = std::vector<Gemm>(gc.count);
  std::vector<void*> copies;
  struct Free {
    std::vector<void*>* p;
    ~Free() {
      for (void* q : *p) cudaFree(q);
    }
  } free_copies{&copies};
  std::vector<std::unique_ptr<gemm_bench::CublasGrouped>> theirs;
  for (int s = 0; s < sets.sets(); ++s) {
    for (int i = 0; i < gc.count; ++i) {
      GemmArguments args = sets.MemberArguments(s, i);
      args.copy_unaligned_operands = true;
      void* copy = nullptr;
      if (const size_t bytes = Gemm::OperandCopyBytes(args); bytes > 0) {
        CHECK_CUDA(cudaMalloc(&copy, bytes));
        copies.push_back(copy);
      }
      const absl::Status st =
          ours[s][i].Initialize(args, nullptr, TileHint::kAuto, ScheduleHint::kAuto, copy);
      if (!st.ok()) {
        std::fprintf(stderr, "%s: member %d: %s\n", gc.name, i, st.ToString().c_str());
        return false;
      }
    }
    theirs.push_back(
        std::make_unique<gemm_bench::CublasGrouped>(cublas, DataType::kBf16, sets.CublasMembers(s)));
  }
  auto run_ours = [&](int s) {
    for (const Gemm& g : ours[s])
      if (!g.Run(nullptr).ok()) return false;
    return true;
  };
  const auto [cublas_grouped, cublas_loop] = CublasLaunchers(sets, cublas, theirs);
  std::vector<Launcher> impls = {run_ours, cublas_grouped, cublas_loop};
  std::vector<double> t;
  if (!TimeInterleaved(impls, sets.sets(), &t)) return false;
  if (!run_ours(0)) return false;
  CHECK_CUDA(cudaDeviceSynchronize());
  const double worst = WorstRelDiff(sets);
  const double flops = sets.Flops();
  auto tf = [&](double ms_) { return flops / (ms_ * 1e-3) / 1e12; };
  std::printf("| %s (seed %llu) | %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.1e |\n", gc.name,
              static_cast<unsigned long long>(seed), ours[0][0].kernel_name().c_str(), tf(t[0]),
              tf(t[1]), tf(t[2]), t[1] / t[0], std::min(t[1], t[2]) / t[0], worst);
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  g_l2 = prop.l2CacheSize;
  g_sms = prop.multiProcessorCount;
  std::printf("device: %s, %d SMs, L2 %d MB, cc %d.%d\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, prop.major, prop.minor);
  gemm_bench::CublasBaseline cublas;
  if (!cublas.ok()) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }
  std::printf("cuBLAS %d; %d samples x %d runs, median; bf16 in/out, fp32 accumulate\n",
              cublas.version(), kSamples, kRunsPerSample);
  int failures = 0;

  const DenseCase sk_cases[] = {
      {"sk 1920x1920x8192", 1920, 1920, 8192, 624}, {"sk 3072^3", 3072, 3072, 3072, 660},
      {"sk 256x4096x16384", 256, 4096, 16384, 535}, {"sk 128x128x65536", 128, 128, 65536, 90},
      {"sk 4224^3", 4224, 4224, 4224, 693},         {"sk 1000^3", 1000, 1000, 1000, 98},
      {"sk 8192^3 (tiles well)", 8192, 8192, 8192, 768},
      {"sk 4096^3 (tiles well)", 4096, 4096, 4096, 702},
      // Where 1000^3's time goes: the same tiles and k-blocks with N whole
      // (no N-ragged tile column, whose epilogue takes the element-wise
      // edge path), and with nothing ragged at all.
      {"sk 1000x1024x1000 (diagnostic: 1000^3 with N whole)", 1000, 1024, 1000, 0},
      {"sk 1024^3 (diagnostic: 1000^3 without ragged edges)", 1024, 1024, 1024, 0},
  };
  std::printf("\n| case | our kernel (heuristic, with workspace) | ours TFLOP/s | cuBLAS TFLOP/s (issue) | "
              "data-parallel | forced stream-K | forced split-K | ours/cuBLAS | ours/data-parallel | "
              "rel diff vs cuBLAS |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<double, double>> ratios;
  int issue_set = 0;
  for (const DenseCase& dc : sk_cases) {
    if (!gemm_bench::CaseSelected(dc.name, argc, argv)) continue;
    if (!RunDense(dc, cublas, false, &ratios)) {
      std::printf("| %s | FAILED |\n", dc.name);
      ++failures;
      continue;
    }
    if (!std::strstr(dc.name, "tiles well") && !std::strstr(dc.name, "diagnostic")) ++issue_set;
  }
  if (issue_set > 0) {
    double g1 = 0, g2 = 0;
    for (int i = 0; i < issue_set; ++i) {
      g1 += std::log(ratios[i].first);
      g2 += std::log(ratios[i].second);
    }
    std::printf("\ngeometric mean over the %d issue shapes: ours/cuBLAS %.3f, ours/data-parallel %.3f\n",
                issue_set, std::exp(g1 / issue_set), std::exp(g2 / issue_set));
  }

  const DenseCase skinny = {"skinny 7x8192x8192", 7, 8192, 8192, 0.99};
  if (gemm_bench::CaseSelected(skinny.name, argc, argv)) {
    std::printf("\n| case | our kernel | ours TB/s | cuBLAS TB/s | data-parallel TB/s | stream-K TB/s | "
                "split-K TB/s | ours time | ours/cuBLAS | rel diff |\n|---|---|---|---|---|---|---|---|---|---|\n");
    std::vector<std::pair<double, double>> r;
    if (!RunDense(skinny, cublas, true, &r)) ++failures;
  }

  const GroupedCase grouped[] = {
      {"grouped 32 x M~U[16,2048] N=4096 K=2048", 32, 16, 2048, 4096, 2048, 170, 179},
      {"grouped 128 x M~U[16,512] N=K=1024", 128, 16, 512, 1024, 1024, 7.9, 34},
      {"grouped 64 x M~U[32,256] N=K=256", 64, 32, 256, 256, 256, 1.8, 1.4},
  };
  bool header = false;
  uint64_t seed = 20261129;
  for (const GroupedCase& gc : grouped) {
    ++seed;
    if (!gemm_bench::CaseSelected(gc.name, argc, argv)) continue;
    if (!header) {
      std::printf("\n| case | our kernel | ours TFLOP/s | cublasGemmGroupedBatchedEx (issue) | loop of "
                  "cublasGemmEx (issue) | ours/grouped cuBLAS | ours/best cuBLAS | forced 128x256 | "
                  "forced 128x128 | max rel diff |\n"
                  "|---|---|---|---|---|---|---|---|---|---|\n");
      header = true;
    }
    if (!RunGrouped(gc, cublas, seed)) {
      std::printf("| %s | FAILED |\n", gc.name);
      ++failures;
    }
  }

  const GroupedCase ragged[] = {
      {"ragged grouped 64 x M~U[16,512] N=4096 K=1023", 64, 16, 512, 4096, 1023, 0, 0},
      {"ragged grouped 64 x M~U[32,256] N=1024 K=255", 64, 32, 256, 1024, 255, 0, 0},
  };
  header = false;
  for (const GroupedCase& gc : ragged) {
    ++seed;
    if (!gemm_bench::CaseSelected(gc.name, argc, argv)) continue;
    if (!header) {
      std::printf("\n| case | our kernel (member 0; one launch a member, operands copied) | ours "
                  "TFLOP/s | cublasGemmGroupedBatchedEx | loop of cublasGemmEx | ours/grouped "
                  "cuBLAS | ours/best cuBLAS | max rel diff |\n|---|---|---|---|---|---|---|---|\n");
      header = true;
    }
    if (!RunRaggedGrouped(gc, cublas, seed)) {
      std::printf("| %s | FAILED |\n", gc.name);
      ++failures;
    }
  }
  return failures ? 1 : 0;
}
