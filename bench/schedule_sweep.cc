// Tuning experiment (a binary, not a test): times explicit launch choices of
// the Hopper kernel (tile, schedule, split count, reduction kind) that the
// heuristic would not pick on its own, beside cuBLAS and the heuristic's own
// choice in one run, to calibrate kernels/config/heuristic.cc. Also times a
// kernel that only streams a GEMM's DRAM traffic (bench/dram_stream.cu) next
// to the strided-batched cases: the floor no kernel can beat.
//
// Sections (substring filters on the case names; none = all):
//   "splits ..."  K-heavy and skinny shapes: every split count and reduction.
//   "tiles ..."   wave-quantization shapes: each cooperative tile, data-parallel
//                 and stream-K.
//   "pdl ..."     wave-quantization shapes, data-parallel and stream-K, each
//                 with and without programmatic dependent launch, back to
//                 back and one launch at a time ("isolated").
//   "latency ..." 1024 x 1024 x K, K = 64 ... 4096: fixed cost against k-loop.
//   "clock ..."   per-CTA %globaltimer stamps of one launch (the last of 10
//                 back to back, and one alone): when CTAs start and end, on
//                 which SMs the slow ones ran, and how a CTA's first unit
//                 splits into phases; "clock grouped ..." and "clock dense
//                 ..." set the grouped launches beside a dense one.
//   "batched ..." strided-batched bf16 shapes: each tile, ping-pong included.
//   "floor ..."   strided-batched bf16 shapes: cuBLAS, ours, pure streaming.
// Method as in schedule_bench: bf16 random inputs, rotating buffer sets
// (>= 4x the L2), warm-up, interleaved samples, medians; every variant's
// output is compared with cuBLAS's.
//
// Usage: schedule_sweep [filter-substring...]
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/bf16_data.h"
#include "bench/cublas_baseline.h"
#include "bench/dense_sets.h"
#include "bench/dram_stream.h"
#include "bench/grouped_sets.h"
#include "bench/interleaved_timing.h"
#include "kernels/config/heuristic.h"
#include "kernels/gemm.h"
#include "kernels/kernel_plan.h"
#include "kernels/problem.h"
#include "kernels/scheduler/stream_k_scheduler.h"
#include "kernels/sm90/sm90_gemm.h"

namespace {

using gemm_kernels::DataType;
using gemm_kernels::Sm90LaunchChoice;
using gemm_kernels::Sm90Schedule;
using gemm_kernels::Sm90Tile;

constexpr gemm_bench::TimingPlan kPlan{5, 21, 8};
// One launch per sample after a synchronization: no launch overlaps another
// (launch latency included), where kPlan times launches back to back.
constexpr gemm_bench::TimingPlan kIsolatedPlan{5, 21, 1};

size_t g_l2 = 0;
int g_sms = 0;

struct Shape {
  int64_t batch, m, n, k;
};

// One device allocation, freed on every return path.
struct DeviceMemory {
  void* p = nullptr;
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept : p(o.p) { o.p = nullptr; }
  ~DeviceMemory() { cudaFree(p); }
  bool Allocate(size_t bytes) { return cudaMalloc(&p, bytes) == cudaSuccess; }
};

// Rotating sets of `s` over at least 4x the L2. Our D starts as NaN so that
// an output no launch wrote cannot pass a comparison with cuBLAS's.
gemm_bench::DenseSetsOptions SweepSetsOptions(const Shape& s) {
  gemm_bench::DenseSetsOptions options;
  options.sets =
      gemm_bench::RotatingSets(gemm_bench::DenseSetBytes(s.m, s.n, s.k, s.batch), g_l2);
  options.batch = s.batch;
  options.poison_outputs = true;
  return options;
}

std::string Describe(const Sm90LaunchChoice& c) {
  std::string t = c.tile == Sm90Tile::k128x256   ? "128x256"
                  : c.tile == Sm90Tile::k128x128 ? "128x128"
                  : c.tile == Sm90Tile::k128x64  ? "128x64"
                  : c.tile == Sm90Tile::k192x192 ? "192x192"
                                                 : "128x128 ping-pong";
  switch (c.schedule) {
    case Sm90Schedule::kDataParallel:
      return t + " data-parallel" + (c.multicast_a ? ", A multicast (grid " +
                                                         std::to_string(c.grid) + ")"
                                                   : "");
    case Sm90Schedule::kStreamK:
      return t + " stream-K (" + std::to_string(c.sk_tiles) + " tiles, grid " +
             std::to_string(c.grid) + ")";
    case Sm90Schedule::kSplitK:
      return t + " split-K " + std::to_string(c.splits) +
             (c.reduce_in_grid       ? " summed in the grid"
              : c.separate_reduction ? " + reduction kernel"
              : c.cluster_pairs      ? " paired (2-CTA clusters, shared-memory fixup)"
                                     : " in-kernel") +
             " (grid " +
             std::to_string(c.grid) + ")";
  }
  return t;
}

std::string DescribeLaunch(const Sm90LaunchChoice& c) {
  return Describe(c) + (c.programmatic_launch ? "" : ", no PDL");
}

// One plan of `c` per input set of `sets` into *plans; false (reported) if
// the launch choice does not fit the shape.
bool MakePlans(const char* name, const gemm_bench::DenseSets& sets, const Sm90LaunchChoice& c,
               void* ws, std::vector<std::unique_ptr<gemm_kernels::KernelPlan>>* plans) {
  for (int i = 0; i < sets.sets(); ++i) {
    std::string error;
    plans->push_back(
        gemm_kernels::MakeSm90Plan(gemm_kernels::Normalize(sets.Arguments(i)), c, ws, &error));
    if (!plans->back()) {
      std::fprintf(stderr, "%s %s: %s\n", name, DescribeLaunch(c).c_str(), error.c_str());
      return false;
    }
  }
  return true;
}

// Times cuBLAS, the heuristic's choice and `variants` on one shape.
bool RunVariants(const char* name, const Shape& s, std::vector<Sm90LaunchChoice> variants,
                 const gemm_bench::CublasBaseline& cublas,
                 const gemm_bench::TimingPlan& plan = kPlan) {
  gemm_bench::DenseSets sets(s.m, s.n, s.k, SweepSetsOptions(s));
  if (!sets.Allocate()) return false;
  // Packed bf16 rows of K elements (A row-major, B column-major), as
  // gemm.cc's RowAlignmentOf derives it for the Gemm API.
  gemm_kernels::Sm90RowAlignment rows;
  rows.a_off_sector = gemm_kernels::Sm90RowsOffSector(
      2 * s.k, 2 * s.m * s.k, s.batch, reinterpret_cast<uintptr_t>(sets.buffers(0).a));
  rows.b_off_sector = gemm_kernels::Sm90RowsOffSector(
      2 * s.k, 2 * s.k * s.n, s.batch, reinterpret_cast<uintptr_t>(sets.buffers(0).b));
  const Sm90LaunchChoice heuristic =
      gemm_kernels::ChooseSm90Launch(s.m, s.n, s.k, s.batch, 64, g_sms, true,
                                     gemm_kernels::Sm90MaxPairClusters(), rows);
  variants.insert(variants.begin(), heuristic);
  size_t ws_bytes = 256;
  for (const auto& c : variants)
    ws_bytes = std::max(ws_bytes, gemm_kernels::ScheduleWorkspaceBytes(c));
  DeviceMemory ws;
  if (!ws.Allocate(ws_bytes)) return false;
  std::vector<std::vector<std::unique_ptr<gemm_kernels::KernelPlan>>> plans(variants.size());
  for (size_t v = 0; v < variants.size(); ++v) {
    if (!MakePlans(name, sets, variants[v], ws.p, &plans[v])) return false;
  }
  cudaDeviceSynchronize();
  std::vector<gemm_bench::Launcher> impls;
  impls.push_back([&](int i) {
    const gemm_bench::DenseSets::Buffers& buf = sets.buffers(i);
    return cublas.Gemm(DataType::kBf16, false, s.batch, s.m, s.n, s.k, buf.a, buf.b, buf.dref)
        .empty();
  });
  for (size_t v = 0; v < variants.size(); ++v)
    impls.push_back([&, v](int i) { return plans[v][i]->Launch(nullptr).empty(); });
  std::vector<double> ms;
  if (!gemm_bench::TimeInterleaved(impls, sets.sets(), plan, &ms)) return false;
  const double flops = 2.0 * s.batch * s.m * s.n * s.k;
  const double bytes = 2.0 * s.batch * (s.m * s.k + s.k * s.n + s.m * s.n);
  std::printf("\n%s (cuBLAS %.1f us, %.0f TFLOP/s, %.2f TB/s)\n", name, ms[0] * 1e3,
              flops / ms[0] / 1e9, bytes / ms[0] / 1e9);
  std::printf(
      "| variant | us | TFLOP/s | TB/s | ours/cuBLAS | rel diff |\n|---|---|---|---|---|---|\n");
  const gemm_bench::DenseSets::Buffers& checked = sets.buffers(0);
  for (size_t v = 0; v < variants.size(); ++v) {
    cudaMemset(checked.d, 0xFF, s.batch * s.m * s.n * 2);
    plans[v][0]->Launch(nullptr);
    cudaDeviceSynchronize();
    const double rel = gemm_bench::RelDiffBf16(checked.d, checked.dref, s.batch * s.m * s.n);
    const double t = ms[v + 1];
    std::printf("| %s%s | %.1f | %.0f | %.2f | %.3f | %.1e |\n", v == 0 ? "heuristic: " : "",
                DescribeLaunch(variants[v]).c_str(), t * 1e3, flops / t / 1e9, bytes / t / 1e9,
                ms[0] / t,
                rel);
  }
  std::fflush(stdout);
  return cudaGetLastError() == cudaSuccess;
}

// The data-parallel launch of `s` on `tile`.
Sm90LaunchChoice DataParallel(Sm90Tile tile, const Shape& s) {
  return gemm_kernels::MakeSm90Launch(tile, Sm90Schedule::kDataParallel, s.m, s.n, s.k, s.batch, 64,
                                      g_sms);
}

int64_t Tiles(Sm90Tile tile, const Shape& s) {
  return gemm_kernels::TileCount(tile, s.m, s.n, s.batch);
}

// Every split count in `counts` that fits one wave, both reductions (the
// in-kernel one up to 32 splits).
std::vector<Sm90LaunchChoice> SplitSweep(const Shape& s, Sm90Tile tile, std::vector<int> counts) {
  std::vector<Sm90LaunchChoice> out;
  const int64_t tiles = Tiles(tile, s);
  out.push_back(DataParallel(tile, s));
  for (int n : counts) {
    if (tiles * n > g_sms) continue;
    if (n <= 32) out.push_back(gemm_kernels::SplitKLaunch(tile, tiles, n, false));
    out.push_back(gemm_kernels::SplitKLaunch(tile, tiles, n, true));
    out.push_back(gemm_kernels::GridSummedSplitKLaunch(tile, tiles, n));
  }
  return out;
}

// Per-CTA stamps (Sm90LaunchChoice::cta_clock, kCtaClockWords words per CTA
// in `stamps`) of `plans`, grid `grid`: the last of ten launches back to back
// (rotating through the plans), then one launch alone. Prints start and end
// spreads, CTA durations, the median CTA's first unit split into its phases,
// and the slowest and fastest CTAs with their SMs.
// Per unit (consumer 0's first kCtaClockUnits units of each CTA): medians
// over the CTAs that ran it of the gap since the previous unit ended, its
// k-loop, its fixup and its epilogue. `roles[u]`: what unit u is on each CTA
// (e.g. "full 120, partial 12"), or empty.
void PrintUnits(const std::vector<unsigned long long>& h, int grid,
                const std::vector<std::string>& roles) {
  constexpr int kWords = gemm_kernels::kCtaClockWords;
  std::printf("| unit | CTAs | roles | medians us: gap before / k-loop / fixup / epilogue |\n"
              "|---|---|---|---|\n");
  for (int u = 0; u < gemm_kernels::kCtaClockUnits; ++u) {
    std::vector<double> gap, loop, fixup, epi;
    for (int b = 0; b < grid; ++b) {
      const unsigned long long* w = &h[size_t(b) * kWords];
      const unsigned long long* x = w + gemm_kernels::CtaClockUnitWord(u, 0);
      if (x[0] == 0 || x[3] < x[0]) continue;
      const unsigned long long prev = u == 0 ? w[5] : x[-1];
      gap.push_back(x[0] >= prev ? (x[0] - prev) * 1e-3 : 0.0);
      loop.push_back((x[1] - x[0]) * 1e-3);
      fixup.push_back((x[2] - x[1]) * 1e-3);
      epi.push_back((x[3] - x[2]) * 1e-3);
    }
    if (gap.empty()) break;
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("| %d | %zu | %s | %.2f / %.2f / %.2f / %.2f |\n", u, gap.size(),
                u < int(roles.size()) ? roles[u].c_str() : "", median(gap), median(loop),
                median(fixup), median(epi));
  }
}

bool PrintClock(const std::vector<std::unique_ptr<gemm_kernels::KernelPlan>>& plans, int grid,
                unsigned long long* stamps, const std::vector<std::string>& roles = {}) {
  constexpr int kWords = gemm_kernels::kCtaClockWords;
  std::printf("| run | start spread us | CTA time us min / median / max | end spread us | span us | "
              "first unit, medians us: dependency wait / setup to first load / first stage "
              "lands / rest of first k-loop / after it | slowest CTAs (block@SM: us) | fastest "
              "CTAs |\n|---|---|---|---|---|---|---|---|\n");
  for (const bool alone : {false, true}) {
    cudaDeviceSynchronize();
    cudaMemset(stamps, 0, size_t(grid) * kWords * 8);
    for (int r = 0; r < (alone ? 1 : 10); ++r) plans[r % plans.size()]->Launch(nullptr);
    if (cudaDeviceSynchronize() != cudaSuccess) return false;
    std::vector<unsigned long long> h(size_t(grid) * kWords);
    cudaMemcpy(h.data(), stamps, h.size() * 8, cudaMemcpyDeviceToHost);
    unsigned long long t0 = ~0ull, s_max = 0, e_min = ~0ull, e_max = 0;
    std::vector<std::pair<double, int>> dur;  // (us, block)
    std::vector<double> phase[5];
    for (int b = 0; b < grid; ++b) {
      const unsigned long long* w = &h[size_t(b) * kWords];
      const unsigned long long end = std::max(w[2], w[3]);
      t0 = std::min(t0, w[0]);
      s_max = std::max(s_max, w[0]);
      e_min = std::min(e_min, end);
      e_max = std::max(e_max, end);
      dur.push_back({(end - w[0]) * 1e-3, b});
      // Entry, wait done, first load, first stage, first k-loop done, end;
      // the unit words stay 0 where no cooperative consumer stamps them.
      const unsigned long long loop_end = w[gemm_kernels::CtaClockUnitWord(0, 1)];
      const unsigned long long marks[6] = {w[0], w[5], w[6], w[7], loop_end ? loop_end : end, end};
      for (int i = 0; i < 5; ++i)
        phase[i].push_back(marks[i + 1] >= marks[i] ? (marks[i + 1] - marks[i]) * 1e-3 : 0.0);
    }
    std::sort(dur.begin(), dur.end());
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    auto list = [&](bool slow) {
      std::string out;
      for (int i = 0; i < 4 && i < grid; ++i) {
        const auto& d = slow ? dur[dur.size() - 1 - i] : dur[i];
        char cell[64];
        std::snprintf(cell, sizeof(cell), "%s%d@%llu: %.1f", i ? ", " : "", d.second,
                      h[size_t(d.second) * kWords + 4], d.first);
        out += cell;
      }
      return out;
    };
    std::printf("| %s | %.2f | %.1f / %.1f / %.1f | %.2f | %.1f | %.2f / %.2f / %.2f / %.2f / %.2f "
                "| %s | %s |\n",
                alone ? "alone" : "10th back to back", (s_max - t0) * 1e-3, dur.front().first,
                dur[dur.size() / 2].first, dur.back().first, (e_max - e_min) * 1e-3,
                (e_max - t0) * 1e-3, median(phase[0]), median(phase[1]), median(phase[2]),
                median(phase[3]), median(phase[4]), list(true).c_str(), list(false).c_str());
    if (alone) PrintUnits(h, grid, roles);
  }
  std::fflush(stdout);
  return cudaGetLastError() == cudaSuccess;
}

// What each CTA's unit u is under launch choice `c` on `s` (the kernel's
// dense schedule walked on the host), summarized per unit index.
std::vector<std::string> UnitRoles(const Shape& s, const Sm90LaunchChoice& c) {
  const gemm_kernels::Sm90TileShape t = gemm_kernels::ShapeOf(c.tile);
  const int tm = int((s.m + t.bm - 1) / t.bm), tn = int((s.n + t.bn - 1) / t.bn);
  const int kb = int((s.k + 63) / 64);  // bf16: 64-element k-blocks
  const bool reducing = c.schedule != Sm90Schedule::kDataParallel;
  const bool partials_only = c.schedule == Sm90Schedule::kSplitK && c.separate_reduction;
  std::vector<std::array<int, 3>> counts(gemm_kernels::kCtaClockUnits, {0, 0, 0});
  std::vector<double> kblocks(gemm_kernels::kCtaClockUnits, 0);
  for (int cta = 0; cta < c.grid; ++cta) {
    gemm_kernels::StreamKScheduler sched(tm, tn, int(s.batch), gemm_kernels::ChooseGroupM(tm, tn),
                                         kb, reducing ? c.sk_tiles : 0, c.grid, cta,
                                         partials_only);
    gemm_kernels::WorkUnit w;
    for (int u = 0; u < gemm_kernels::kCtaClockUnits && sched.Next(&w); ++u) {
      ++counts[u][int(w.role)];
      kblocks[u] += w.k_end - w.k_begin;
    }
  }
  std::vector<std::string> out;
  for (int u = 0; u < gemm_kernels::kCtaClockUnits; ++u) {
    const int n = counts[u][0] + counts[u][1] + counts[u][2];
    char cell[96];
    std::snprintf(cell, sizeof(cell), "full %d, partial %d, finalize %d; %.1f k-blocks",
                  counts[u][0], counts[u][1], counts[u][2], n ? kblocks[u] / n : 0.0);
    out.push_back(cell);
  }
  return out;
}

// PrintClock of launch choice `c` on `s`.
bool RunClock(const char* name, const Shape& s, Sm90LaunchChoice c) {
  if (!gemm_kernels::Sm90KernelStamps()) {
    std::printf("\n%s: skipped (per-CTA stamps need --define=gemm_kernel_stamps=1)\n", name);
    return true;
  }
  gemm_bench::DenseSets sets(s.m, s.n, s.k, SweepSetsOptions(s));
  if (!sets.Allocate()) return false;
  DeviceMemory stamps, ws;
  if (!stamps.Allocate(size_t(c.grid) * gemm_kernels::kCtaClockWords * 8) ||
      !ws.Allocate(std::max<size_t>(256, gemm_kernels::ScheduleWorkspaceBytes(c))))
    return false;
  c.cta_clock = static_cast<unsigned long long*>(stamps.p);
  std::vector<std::unique_ptr<gemm_kernels::KernelPlan>> plans;
  if (!MakePlans(name, sets, c, ws.p, &plans)) return false;
  std::printf("\n%s: %s, grid %d\n", name, DescribeLaunch(c).c_str(), c.grid);
  return PrintClock(plans, c.grid, c.cta_clock, UnitRoles(s, c));
}

// PrintClock of a grouped launch on `tile`: `count` problems C_i = A_i B_i,
// M_i ~ U[m_lo, m_hi] drawn by GroupedRows from `seed` (schedule_bench's lists), N and
// K fixed; bf16, A row-major, B column-major, D row-major; rotating sets.
bool RunGroupedClock(const char* name, int count, int m_lo, int m_hi, int n, int k,
                     uint64_t seed, Sm90Tile tile) {
  if (!gemm_kernels::Sm90KernelStamps()) {
    std::printf("\n%s: skipped (per-CTA stamps need --define=gemm_kernel_stamps=1)\n", name);
    return true;
  }
  std::vector<int> rows = gemm_bench::GroupedRows(count, m_lo, m_hi, seed);
  int64_t tiles = 0;
  for (const int m : rows) tiles += gemm_kernels::TileCount(tile, m, n, 1);
  const int grid = gemm_kernels::PersistentGridSize(tiles, g_sms);
  // Only the stamps are read: no cuBLAS output to compare ours with, so
  // neither a reference D nor poisoned outputs.
  gemm_bench::GroupedSetsOptions options;
  options.sets = gemm_bench::RotatingSets(gemm_bench::GroupedSetBytes(rows, n, k), g_l2);
  options.reference_outputs = false;
  options.workspaces_per_set = 1;
  options.workspace_bytes = gemm_kernels::Sm90GroupedWorkspaceSize(count);
  gemm_bench::GroupedSets sets(std::move(rows), n, k, options);
  DeviceMemory stamps;
  if (!stamps.Allocate(size_t(grid) * gemm_kernels::kCtaClockWords * 8) || !sets.Allocate())
    return false;
  std::vector<std::unique_ptr<gemm_kernels::KernelPlan>> plans;
  for (int s = 0; s < sets.sets(); ++s) {
    std::vector<gemm_kernels::NormalizedProblem> problems;
    for (size_t i = 0; i < sets.rows().size(); ++i)
      problems.push_back(gemm_kernels::Normalize(sets.MemberArguments(s, i)));
    std::string error;
    plans.push_back(gemm_kernels::MakeSm90GroupedPlan(problems, tile, g_sms, sets.workspace(s, 0),
                                                      &error,
                                                      static_cast<unsigned long long*>(stamps.p)));
    if (!plans.back()) {
      std::fprintf(stderr, "%s: %s\n", name, error.c_str());
      return false;
    }
  }
  std::printf("\n%s (seed %llu): %s, %lld tiles, grid %d\n", name,
              static_cast<unsigned long long>(seed), plans[0]->name().c_str(),
              static_cast<long long>(tiles), grid);
  return PrintClock(plans, grid, static_cast<unsigned long long*>(stamps.p));
}

// Floor of a strided-batched case: cuBLAS, our Gemm, and the streaming
// kernel moving A + B in and D out (at several grid sizes; the fastest).
bool RunFloor(const char* name, const Shape& s, const gemm_bench::CublasBaseline& cublas) {
  gemm_bench::DenseSets sets(s.m, s.n, s.k, SweepSetsOptions(s));
  if (!sets.Allocate()) return false;
  std::vector<gemm_kernels::Gemm> ours(sets.sets());
  for (int i = 0; i < sets.sets(); ++i)
    if (!ours[i].Initialize(sets.Arguments(i)).ok()) return false;
  const size_t read_bytes = size_t(s.batch * (s.m * s.k + s.k * s.n)) * 2;
  const size_t write_bytes = size_t(s.batch * s.m * s.n) * 2;
  // The stream reads A's buffer then B's as one span: give it its own
  // contiguous copies of the same size (rotating too).
  const size_t copy_bytes = (read_bytes + write_bytes) / 32 * 16;  // half, each way
  std::vector<DeviceMemory> in_mem(sets.sets()), out_mem(sets.sets());
  std::vector<void*> in(sets.sets()), out(sets.sets());
  for (int i = 0; i < sets.sets(); ++i) {
    if (!in_mem[i].Allocate(read_bytes) ||
        !out_mem[i].Allocate(std::max(write_bytes, copy_bytes)))
      return false;
    in[i] = in_mem[i].p;
    out[i] = out_mem[i].p;
    cudaMemcpy(in[i], sets.buffers(i).a, read_bytes / 2, cudaMemcpyDeviceToDevice);
  }
  const int grids[] = {g_sms, 2 * g_sms, 4 * g_sms, 8 * g_sms};
  std::vector<gemm_bench::Launcher> impls;
  impls.push_back([&](int i) {
    const gemm_bench::DenseSets::Buffers& buf = sets.buffers(i);
    return cublas.Gemm(DataType::kBf16, false, s.batch, s.m, s.n, s.k, buf.a, buf.b, buf.dref)
        .empty();
  });
  impls.push_back([&](int i) { return ours[i].Run(nullptr).ok(); });
  for (int g : grids)
    impls.push_back([&, g](int i) {
      return gemm_bench::LaunchStream(in[i], read_bytes, out[i], write_bytes, g, nullptr).empty();
    });
  // Reads and writes interleaved (A + B = 2 x D for these square shapes), and
  // the driver's device-to-device copy of half the bytes each way.
  const bool two_to_one = read_bytes == 2 * write_bytes;
  for (int g : grids)
    impls.push_back([&, g](int i) {
      return two_to_one &&
             gemm_bench::LaunchMixedStream(in[i], out[i], write_bytes, g, nullptr).empty();
    });
  impls.push_back([&](int i) {
    return cudaMemcpyAsync(out[i], in[i], copy_bytes, cudaMemcpyDeviceToDevice) == cudaSuccess;
  });
  std::vector<double> ms;
  if (!gemm_bench::TimeInterleaved(impls, sets.sets(), kPlan, &ms)) return false;
  const double floor_ms = *std::min_element(ms.begin() + 2, ms.end());
  const double bytes = double(read_bytes + write_bytes);
  std::printf("| %s | %.1f MB | %.1f | %.1f | %.1f (%.2f TB/s) | %.1f | %.2f | %.2f |\n", name,
              bytes / 1e6, ms[0] * 1e3, ms[1] * 1e3, floor_ms * 1e3, bytes / floor_ms / 1e9,
              ms[0] / 1.2 * 1e3, ms[0] / ms[1], ms[0] / floor_ms);
  std::printf(
      "|   (grid %d/%d/%d/%d: reads then writes %.1f/%.1f/%.1f/%.1f us; interleaved "
      "%.1f/%.1f/%.1f/%.1f us; cudaMemcpy of half the bytes each way %.1f us) |\n",
      grids[0], grids[1], grids[2], grids[3], ms[2] * 1e3, ms[3] * 1e3, ms[4] * 1e3, ms[5] * 1e3,
      ms[6] * 1e3, ms[7] * 1e3, ms[8] * 1e3, ms[9] * 1e3, ms[10] * 1e3);
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
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, g_sms, prop.l2CacheSize >> 20);
  gemm_bench::CublasBaseline cublas;
  if (!cublas.ok()) return 1;
  int failures = 0;
  auto run = [&](const char* name, const Shape& s, std::vector<Sm90LaunchChoice> v,
                 const gemm_bench::TimingPlan& plan = kPlan) {
    if (!gemm_bench::CaseSelected(name, argc, argv)) return;
    if (!RunVariants(name, s, std::move(v), cublas, plan)) {
      std::printf("%s FAILED\n", name);
      ++failures;
    }
  };
  const Shape skinny{1, 7, 8192, 8192}, tall_k{1, 128, 128, 65536}, wide{1, 256, 4096, 16384};
  {
    auto v = SplitSweep(skinny, Sm90Tile::k128x128, {2});
    for (auto& c : SplitSweep(skinny, Sm90Tile::k128x256, {2, 3, 4})) v.push_back(c);
    run("splits 7x8192x8192", skinny, v);
  }
  {
    auto v = SplitSweep(tall_k, Sm90Tile::k128x128, {16, 24, 32, 52, 66, 88, 110, 128, 132});
    for (auto& c : SplitSweep(tall_k, Sm90Tile::k128x64, {16, 32, 52, 66})) v.push_back(c);
    run("splits 128x128x65536", tall_k, v);
  }
  {
    auto v = SplitSweep(wide, Sm90Tile::k128x256, {2, 3, 4});
    for (auto& c : SplitSweep(wide, Sm90Tile::k128x128, {2})) v.push_back(c);
    v.push_back(gemm_kernels::PairedSplitKLaunch(Tiles(Sm90Tile::k128x128, wide)));
    v.push_back(DataParallel(Sm90Tile::k128x64, wide));
    run("splits 256x4096x16384", wide, v);
  }
  {
    // Row pitches of 2^17 and 2^15 bytes (K = 65536, 16384) against 128
    // bytes less: does a power-of-two pitch cost the K-heavy shapes? Not
    // ours (H200, 2026-12-02: 18.9 against 18.8 us, 60.2 against 60.1 us);
    // cuBLAS lost 20-25% at the power-of-two pitch of 128 x 128 x 65536.
    const Shape tall_k2{1, 128, 128, 65472}, wide2{1, 256, 4096, 16320};
    run("splits 128x128x65472", tall_k2, SplitSweep(tall_k2, Sm90Tile::k128x128, {64, 128}));
    run("splits 256x4096x16320", wide2, SplitSweep(wide2, Sm90Tile::k128x128, {2}));
  }
  {
    // The same with K % 16 == 8 (rows off the 32-byte sectors).
    const Shape off{1, 256, 4096, 16376};
    auto v = SplitSweep(off, Sm90Tile::k128x256, {2, 4});
    for (auto& c : SplitSweep(off, Sm90Tile::k128x128, {2})) v.push_back(c);
    run("splits 256x4096x16376", off, v);
  }
  for (const auto& [name, s] : {std::pair{"tiles 4224^3", Shape{1, 4224, 4224, 4224}},
                                {"tiles 3072^3", Shape{1, 3072, 3072, 3072}},
                                {"tiles 1920x1920x8192", Shape{1, 1920, 1920, 8192}},
                                {"tiles 1000^3", Shape{1, 1000, 1000, 1000}},
                                {"tiles 1000x1000x2000", Shape{1, 1000, 1000, 2000}},
                                // Choices that moved when the stream-K cost was
                                // refitted to measured launches (config/heuristic.cc).
                                {"tiles 2304x2304x4096", Shape{1, 2304, 2304, 4096}},
                                {"tiles 2560^3", Shape{1, 2560, 2560, 2560}},
                                {"tiles 2816x2816x8192", Shape{1, 2816, 2816, 8192}},
                                {"tiles 768x768x16384", Shape{1, 768, 768, 16384}},
                                {"tiles 3000^3", Shape{1, 3000, 3000, 3000}},
                                // Rows off the 128-byte lines (K % 64 != 0); of
                                // the 32-byte sectors too where K % 16 == 8
                                {"tiles 4096x4096x4000", Shape{1, 4096, 4096, 4000}},
                                {"tiles 2000x2000x6000", Shape{1, 2000, 2000, 6000}},
                                {"tiles 5000^3", Shape{1, 5000, 5000, 5000}},
                                {"tiles 8192x8192x1000", Shape{1, 8192, 8192, 1000}},
                                {"tiles 2048x2048x2040", Shape{1, 2048, 2048, 2040}},
                                {"tiles 1920x1920x8184", Shape{1, 1920, 1920, 8184}},
                                {"tiles 1000x1000x2008", Shape{1, 1000, 1000, 2008}},
                                {"tiles 4000x4000x1000", Shape{1, 4000, 4000, 1000}},
                                {"tiles 12288x1536x4096", Shape{1, 12288, 1536, 4096}},
                                // Long K: operands past the L2 (stream-K's resident-bytes term).
                                {"tiles 2304x2304x8192", Shape{1, 2304, 2304, 8192}},
                                {"tiles 2560x2560x8192", Shape{1, 2560, 2560, 8192}},
                                {"tiles 2048x2048x16384", Shape{1, 2048, 2048, 16384}},
                                {"tiles 3584x3584x8192", Shape{1, 3584, 3584, 8192}},
                                {"tiles 1536x1536x16384", Shape{1, 1536, 1536, 16384}}}) {
    std::vector<Sm90LaunchChoice> v;
    for (Sm90Tile t :
         {Sm90Tile::k128x256, Sm90Tile::k128x128, Sm90Tile::k128x64, Sm90Tile::k192x192}) {
      v.push_back(DataParallel(t, s));
      v.push_back(gemm_kernels::MulticastDataParallelLaunch(t, s.m, s.n, 1, g_sms,
                                                             gemm_kernels::Sm90MaxPairClusters()));
      v.push_back(
          gemm_kernels::MakeSm90Launch(t, Sm90Schedule::kStreamK, s.m, s.n, s.k, 1, 64, g_sms));
      // Short K with fewer tiles than SMs: two splits fill the SMs.
      if (2 * Tiles(t, s) <= g_sms) {
        v.push_back(gemm_kernels::SplitKLaunch(t, Tiles(t, s), 2, false));
        v.push_back(gemm_kernels::SplitKLaunch(t, Tiles(t, s), 2, true));
        if (t == Sm90Tile::k128x128) v.push_back(gemm_kernels::PairedSplitKLaunch(Tiles(t, s)));
      }
    }
    run(name, s, v);
  }
  // Stream-K back to back loses more to data-parallel than in isolation
  // (H200, 2026-11-29: 1920 x 1920 x 8192 on 128x256 tiles, 112 vs 93 us back
  // to back, 105 vs 101 us under ncu): each launch with and without
  // programmatic dependent launch, back to back and one at a time.
  for (const auto& [name, s] : {std::pair{"pdl 1920x1920x8192", Shape{1, 1920, 1920, 8192}},
                                {"pdl 3072^3", Shape{1, 3072, 3072, 3072}}}) {
    std::vector<Sm90LaunchChoice> v;
    for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k128x128}) {
      for (Sm90Schedule sc : {Sm90Schedule::kDataParallel, Sm90Schedule::kStreamK}) {
        Sm90LaunchChoice c = gemm_kernels::MakeSm90Launch(t, sc, s.m, s.n, s.k, 1, 64, g_sms);
        v.push_back(c);
        c.programmatic_launch = false;
        v.push_back(c);
      }
    }
    run(name, s, v);
    run((std::string(name) + " isolated").c_str(), s, v, kIsolatedPlan);
  }
  // What a launch costs besides its k-loop: 1024 x 1024 (64 tiles of 128 x
  // 128, one per CTA) from one k-block up; time against K has the fixed cost
  // (launch, pipeline fill, epilogue) as its intercept and the k-loop as its
  // slope, for cuBLAS and for each of our launches.
  for (int64_t k : {64, 256, 1024, 4096}) {
    const std::string name = "latency 1024x1024x" + std::to_string(k);
    const Shape s{1, 1024, 1024, k};
    std::vector<Sm90LaunchChoice> v;
    for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k128x128, Sm90Tile::k128x64})
      v.push_back(DataParallel(t, s));
    if (k >= 128) {
      v.push_back(gemm_kernels::SplitKLaunch(Sm90Tile::k128x128, 64, 2, false));
      v.push_back(gemm_kernels::SplitKLaunch(Sm90Tile::k128x128, 64, 2, true));
      v.push_back(gemm_kernels::PairedSplitKLaunch(64));
    }
    run(name.c_str(), s, v);
    // One at a time: no launch can start early on SMs a grid leaves free.
    run((name + " isolated").c_str(), s, v, kIsolatedPlan);
  }
  // Where a launch's time goes between its CTAs (H200, 2026-12-01: our CTAs
  // on 1920 x 1920 x 8192 end 21k cycles apart on average, cuBLAS's 8.5k).
  for (const auto& [name, s] : {std::pair{"clock 1920x1920x8192", Shape{1, 1920, 1920, 8192}},
                                {"clock 3072^3", Shape{1, 3072, 3072, 3072}}}) {
    if (!gemm_bench::CaseSelected(name, argc, argv)) continue;
    for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k128x128}) {
      for (Sm90Schedule sc : {Sm90Schedule::kDataParallel, Sm90Schedule::kStreamK}) {
        if (!RunClock(name, s, gemm_kernels::MakeSm90Launch(t, sc, s.m, s.n, s.k, 1, 64, g_sms))) {
          std::printf("%s FAILED\n", name);
          ++failures;
        }
      }
    }
  }
  // 128 x 128 x 65536 split-K takes ~18.5 us, where reading its 32 MB of
  // operands through the same TMA ring alone takes ~11.8 us (a kernel that
  // only streams them, H200, 2026-12-02): per CTA, the k-loop and
  // the partial store, and with the grid's own sums the count and the sums
  // after it; the reduction kernel's share is outside the stamps.
  if (gemm_bench::CaseSelected("clock 128x128x65536", argc, argv)) {
    const Shape s{1, 128, 128, 65536};
    for (int splits : {64, 128}) {
      for (const Sm90LaunchChoice& c :
           {gemm_kernels::SplitKLaunch(Sm90Tile::k128x128, 1, splits, true),
            gemm_kernels::GridSummedSplitKLaunch(Sm90Tile::k128x128, 1, splits)}) {
        if (!RunClock("clock 128x128x65536", s, c)) {
          std::printf("clock 128x128x65536 FAILED\n");
          ++failures;
        }
      }
    }
  }
  // 1000^3 on 128x64 tiles (128 CTAs, cuBLAS's split) ran 12.9 us against
  // 8.8 for 1024^3 (H200, 2026-11-30): where a CTA's time goes on each, beside
  // 128x128 (64 CTAs).
  for (const auto& [name, s] : {std::pair{"clock 1000^3", Shape{1, 1000, 1000, 1000}},
                                {"clock 1024^3", Shape{1, 1024, 1024, 1024}},
                                {"clock 1000x1024x1024", Shape{1, 1000, 1024, 1024}},
                                {"clock 1024x1024x1000", Shape{1, 1024, 1024, 1000}}}) {
    if (!gemm_bench::CaseSelected(name, argc, argv)) continue;
    for (Sm90Tile t : {Sm90Tile::k128x64, Sm90Tile::k128x128}) {
      if (!RunClock(name, s, DataParallel(t, s))) {
        std::printf("%s FAILED\n", name);
        ++failures;
      }
    }
  }
  // Grouped launches against a dense one of as many one-tile CTAs: where the
  // grouped kernel's extra time per CTA goes (schedule_bench's seeds).
  if (gemm_bench::CaseSelected("clock dense 1536x2048x256", argc, argv)) {
    const Shape s{1, 1536, 2048, 256};  // 96 tiles of 128x256, 4 k-blocks each
    for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k128x128}) {
      if (!RunClock("clock dense 1536x2048x256", s, DataParallel(t, s))) {
        std::printf("clock dense FAILED\n");
        ++failures;
      }
    }
  }
  struct GroupedClock {
    const char* name;
    int count, m_lo, m_hi, n, k;
    uint64_t seed;
  };
  for (const GroupedClock& g :
       {GroupedClock{"clock grouped 64 x M~U[32,256] N=K=256", 64, 32, 256, 256, 256, 20261132},
        GroupedClock{"clock grouped 128 x M~U[16,512] N=K=1024", 128, 16, 512, 1024, 1024,
                     20261131},
        GroupedClock{"clock grouped 32 x M~U[16,2048] N=4096 K=2048", 32, 16, 2048, 4096, 2048,
                     20261130}}) {
    if (!gemm_bench::CaseSelected(g.name, argc, argv)) continue;
    for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k128x128}) {
      if (!RunGroupedClock(g.name, g.count, g.m_lo, g.m_hi, g.n, g.k, g.seed, t)) {
        std::printf("%s FAILED\n", g.name);
        ++failures;
      }
    }
  }
  // Strided batches with short K (2-16 k-blocks): the epilogue is a large
  // part of each tile, which only the ping-pong consumers overlap with MMA.
  for (const auto& [name, s] : {std::pair{"batched 1024 x 128^3", Shape{1024, 128, 128, 128}},
                                {"batched 256 x 256^3", Shape{256, 256, 256, 256}},
                                {"batched 64 x 512^3", Shape{64, 512, 512, 512}},
                                {"batched 16 x 1024^3", Shape{16, 1024, 1024, 1024}}}) {
    std::vector<Sm90LaunchChoice> v;
    for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k128x128, Sm90Tile::k128x128PingPong,
                       Sm90Tile::k128x64})
      v.push_back(DataParallel(t, s));
    run(name, s, v);
  }
  bool header = false;
  for (const auto& [name, s] : {std::pair{"floor 1024 x 128^3", Shape{1024, 128, 128, 128}},
                                {"floor 256 x 256^3", Shape{256, 256, 256, 256}},
                                {"floor 64 x 512^3", Shape{64, 512, 512, 512}},
                                {"floor 16 x 1024^3", Shape{16, 1024, 1024, 1024}}}) {
    if (!gemm_bench::CaseSelected(name, argc, argv)) continue;
    if (!header) {
      std::printf(
          "\n| case | bytes | cuBLAS us | ours us | streaming floor us | 1.2x target us | "
          "ours/cuBLAS | floor/cuBLAS (speed-up bound) |\n|---|---|---|---|---|---|---|---|\n");
      header = true;
    }
    if (!RunFloor(name, s, cublas)) {
      std::printf("| %s | FAILED |\n", name);
      ++failures;
    }
  }
  return failures ? 1 : 0;
}
