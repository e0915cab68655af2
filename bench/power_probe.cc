// Clock and power probe (an experiment binary, not a benchmark of record).
//
// Why: schedule_bench interleaves ours and cuBLAS sample by sample, which is
// right for ratios but mixes both within any clock or power reading. This
// binary runs one implementation alone, back to back, for a fixed wall time,
// then the next, and writes each phase's window; nvidia-smi sampling beside it
// (bench/gpu.sh run power) says what SM clock, power and throttle
// reasons each phase ran at. The question it answers: are the compute-bound
// shapes held by the card's power limit, for cuBLAS and us alike?
//
// Usage:
//   power_probe run PHASES_FILE [case-substring...]   run, write phase windows
//   power_probe join PHASES_FILE SMI_CSV              per-phase medians
//   power_probe once CASE                             two launches of cuBLAS and
//                                                     of each variant (for ncu)
// Cases "variants SHAPE" run explicit launch choices of our kernel (tiles, A
// multicast, L2 promotion) beside cuBLAS, each alone: what lowers the power
// a FLOP costs shows as a higher clock and rate at the same power.
// SMI_CSV: nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw[.instant],
//          temperature.gpu,clocks_event_reasons.active --format=csv,noheader,nounits
//
// Method as in schedule_bench: bf16 random inputs, rotating buffer sets
// (>= 4x the L2), B column-major, D row-major; each phase warms up for
// kWarmSeconds, then launches back to back for kPhaseSeconds between two
// events. Clock samples from the first kSettleSeconds of a phase are left out
// of its medians.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bf16_data.h"
#include "bench/cuda_check.h"
#include "bench/cublas_baseline.h"
#include "bench/dense_sets.h"
#include "bench/grouped_sets.h"
#include "kernels/config/heuristic.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "kernels/kernel_plan.h"
#include "kernels/problem.h"
#include "kernels/sm90/sm90_gemm.h"

namespace {

using gemm_kernels::DataType;
using gemm_kernels::Gemm;
using gemm_kernels::GroupedGemm;
using gemm_kernels::ScheduleHint;
using gemm_kernels::Sm90LaunchChoice;
using gemm_kernels::Sm90Schedule;
using gemm_kernels::Sm90Tile;
using gemm_kernels::TileHint;

constexpr double kWarmSeconds = 0.3;
constexpr double kPhaseSeconds = 1.5;
constexpr double kSettleSeconds = 0.4;


// Seconds since local midnight: nvidia-smi's timestamps are local wall time.
double LocalSecondsOfDay() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t;
  localtime_r(&ts.tv_sec, &t);
  return t.tm_hour * 3600.0 + t.tm_min * 60.0 + t.tm_sec + ts.tv_nsec * 1e-9;
}

double Monotonic() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

using Launcher = std::function<bool(int set)>;

// Runs `launch` back to back (rotating sets) for kWarmSeconds, then for
// kPhaseSeconds of wall time between two events (enqueued in batches of 8;
// the launch queue keeps the host within its depth of the GPU); appends
// "case|impl|start|end|TFLOP/s" to `phases`.
bool RunPhase(const std::string& name, const char* impl, const Launcher& launch, int sets,
              double flops, std::FILE* phases) {
  int set = 0;
  const double warm_end = Monotonic() + kWarmSeconds;
  while (Monotonic() < warm_end) {
    for (int i = 0; i < 8; ++i) {
      if (!launch(set)) return false;
      set = (set + 1) % sets;
    }
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  const double start = LocalSecondsOfDay();
  CHECK_CUDA(cudaEventRecord(e0));
  const double phase_end = Monotonic() + kPhaseSeconds;
  int launches = 0;
  while (Monotonic() < phase_end) {
    for (int i = 0; i < 8; ++i, ++launches) {
      if (!launch(set)) return false;
      set = (set + 1) % sets;
    }
  }
  CHECK_CUDA(cudaEventRecord(e1));
  CHECK_CUDA(cudaEventSynchronize(e1));
  const double end = LocalSecondsOfDay();
  CHECK_CUDA(cudaGetLastError());
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  const double tflops = flops * launches / (ms * 1e-3) / 1e12;
  std::fprintf(phases, "%s|%s|%.3f|%.3f|%.1f\n", name.c_str(), impl, start, end, tflops);
  std::fflush(phases);
  std::printf("%-40s %-8s %6d launches %8.1f TFLOP/s\n", name.c_str(), impl, launches, tflops);
  std::fflush(stdout);
  // A pause between phases, so that each phase's settle window starts from
  // the same idle state whatever ran before it.
  timespec pause{0, 300 * 1000 * 1000};
  nanosleep(&pause, nullptr);
  return true;
}

// Rotating sets over at least 4x the L2. Our D is not poisoned here:
// RunDenseImpls poisons set 0 before each check, the only output it reads.
gemm_bench::DenseSetsOptions ProbeSetsOptions(int64_t m, int64_t n, int64_t k, size_t l2) {
  gemm_bench::DenseSetsOptions options;
  options.sets = gemm_bench::RotatingSets(gemm_bench::DenseSetBytes(m, n, k), l2);
  return options;
}

// One implementation of a case; `ours` are checked against cuBLAS's output.
struct Impl {
  std::string name;
  Launcher launch;
  bool ours;
};

// Each of `impls` alone for a phase, in order (or, `once`, two launches
// each: one to warm up, one for ncu); then each of ours against `cublas`
// on set 0, our output poisoned first.
bool RunDenseImpls(const char* name, const gemm_bench::DenseSets& sets,
                   const std::vector<Impl>& impls, const Launcher& cublas, bool once,
                   std::FILE* phases) {
  bool ok = true;
  for (const Impl& impl : impls) {
    if (!ok) break;
    if (once) {
      for (int r = 0; r < 2 && ok; ++r) ok = impl.launch(r % sets.sets());
    } else {
      ok = RunPhase(name, impl.name.c_str(), impl.launch, sets.sets(), sets.Flops(), phases);
    }
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  if (!ok || once) return ok;
  ok = cublas(0);
  const gemm_bench::DenseSets::Buffers& checked = sets.buffers(0);
  for (const Impl& impl : impls) {
    if (!ok || !impl.ours) continue;
    CHECK_CUDA(cudaMemset(checked.d, 0xFF, sets.m() * sets.n() * 2));
    ok = impl.launch(0);
    CHECK_CUDA(cudaDeviceSynchronize());
    const double rel = gemm_bench::RelDiffBf16(checked.d, checked.dref, sets.m() * sets.n());
    std::printf("  %-40s rel diff vs cuBLAS %.1e\n", impl.name.c_str(), rel);
    if (!(rel < 1e-2)) ok = false;
  }
  return ok;
}

Launcher CublasLauncher(const gemm_bench::CublasBaseline& cublas,
                        const gemm_bench::DenseSets& sets) {
  return [&cublas, &sets](int s) {
    const gemm_bench::DenseSets::Buffers& buf = sets.buffers(s);
    return cublas.Gemm(DataType::kBf16, false, 1, sets.m(), sets.n(), sets.k(), buf.a, buf.b, buf.dref)
        .empty();
  };
}

// The heuristic's launch (with a workspace), then cuBLAS.
bool Dense(const char* name, int64_t m, int64_t n, int64_t k, const gemm_bench::CublasBaseline& cublas,
           size_t l2, std::FILE* phases) {
  gemm_bench::DenseSets sets(m, n, k, ProbeSetsOptions(m, n, k, l2));
  if (!sets.Allocate()) return false;
  size_t ws_bytes = 256;
  for (int s = 0; s < sets.sets(); ++s) {
    ws_bytes = std::max(ws_bytes,
                        Gemm::WorkspaceSize(sets.Arguments(s), TileHint::kAuto, ScheduleHint::kAuto));
  }
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  std::unique_ptr<void, decltype(&cudaFree)> ws_owner(ws, &cudaFree);
  std::vector<Gemm> ours(sets.sets());
  for (int s = 0; s < sets.sets(); ++s) {
    const absl::Status st =
        ours[s].Initialize(sets.Arguments(s), ws, TileHint::kAuto, ScheduleHint::kAuto);
    if (!st.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, st.ToString().c_str());
      return false;
    }
  }
  const Launcher theirs = CublasLauncher(cublas, sets);
  const std::vector<Impl> impls = {
      {"ours", [&](int s) { return ours[s].Run(nullptr).ok(); }, true},
      {"cublas", theirs, false}};
  std::printf("  (ours: %s)\n", ours[0].kernel_name().c_str());
  return RunDenseImpls(name, sets, impls, theirs, false, phases);
}

bool Grouped(const char* name, int count, int m_lo, int m_hi, int n, int k, uint64_t seed,
             const gemm_bench::CublasBaseline& cublas, size_t l2, std::FILE* phases) {
  std::vector<int> rows = gemm_bench::GroupedRows(count, m_lo, m_hi, seed);
  gemm_bench::GroupedSetsOptions options;
  options.sets = gemm_bench::RotatingSets(gemm_bench::GroupedSetBytes(rows, n, k), l2);
  options.workspaces_per_set = 1;
  options.workspace_bytes = std::max<size_t>(256, GroupedGemm::WorkspaceSize(rows.size()));
  gemm_bench::GroupedSets sets(std::move(rows), n, k, options);
  if (!sets.Allocate()) return false;
  const double flops = sets.Flops();
  std::vector<GroupedGemm> ours(sets.sets());
  std::vector<std::unique_ptr<gemm_bench::CublasGrouped>> theirs;
  for (int s = 0; s < sets.sets(); ++s) {
    const absl::Status st =
        ours[s].Initialize(sets.Arguments(s), sets.workspace(s, 0), TileHint::kAuto);
    if (!st.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, st.ToString().c_str());
      return false;
    }
    theirs.push_back(
        std::make_unique<gemm_bench::CublasGrouped>(cublas, DataType::kBf16, sets.CublasMembers(s)));
  }
  // cuBLAS both ways the issue names: cublasGemmGroupedBatchedEx, and a loop
  // of single cublasGemmEx calls over the same buffers.
  auto loop = [&](int s) {
    for (size_t i = 0; i < sets.rows().size(); ++i) {
      const gemm_bench::GroupedSets::Member& mb = sets.member(s, i);
      if (!cublas.Gemm(DataType::kBf16, false, 1, sets.rows()[i], n, k, mb.a, mb.b, mb.dref)
               .empty()) {
        return false;
      }
    }
    return true;
  };
  bool ok =
      RunPhase(name, "ours", [&](int s) { return ours[s].Run(nullptr).ok(); }, sets.sets(), flops,
               phases) &&
      RunPhase(name, "cublas", [&](int s) { return theirs[s]->Run().empty(); }, sets.sets(), flops,
               phases) &&
      RunPhase(name, "cublas loop", loop, sets.sets(), flops, phases);
  // Every member of set 0 against cuBLAS's, our outputs poisoned first.
  double worst = 0;
  ok = ok && theirs[0]->Run().empty();
  for (size_t i = 0; i < sets.rows().size() && ok; ++i) {
    ok = cudaMemset(sets.member(0, i).d, 0xFF, size_t(sets.rows()[i]) * n * 2) == cudaSuccess;
  }
  ok = ok && ours[0].Run(nullptr).ok() && cudaDeviceSynchronize() == cudaSuccess;
  for (size_t i = 0; i < sets.rows().size() && ok; ++i) {
    const gemm_bench::GroupedSets::Member& mb = sets.member(0, i);
    const double rel = gemm_bench::RelDiffBf16(mb.d, mb.dref, int64_t(sets.rows()[i]) * n);
    worst = rel < 1e-2 ? std::max(worst, rel) : NAN;
    if (!(rel < 1e-2)) ok = false;
  }
  std::printf("  (ours: %s, worst rel diff vs cuBLAS %.1e)\n", ours[0].kernel_name().c_str(), worst);
  theirs.clear();  // cuBLAS's pointer arrays before the buffers they name
  return ok;
}

struct Variant {
  std::string name;
  Sm90LaunchChoice choice;
};

std::string TileName(Sm90Tile t) {
  return t == Sm90Tile::k128x256   ? "128x256"
         : t == Sm90Tile::k128x128 ? "128x128"
         : t == Sm90Tile::k128x64  ? "128x64"
         : t == Sm90Tile::k192x192 ? "192x192"
                                   : "ping-pong";
}

// Data-parallel launches of our kernel on m x n x k: each tile plain, the
// 128x256 and 192x192 tiles with A multicast, and 128x256 at each L2
// promotion.
std::vector<Variant> DenseVariants(int64_t m, int64_t n, int64_t k, int sms) {
  std::vector<Variant> v;
  const int pairs = gemm_kernels::Sm90MaxPairClusters();
  for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k192x192, Sm90Tile::k128x128}) {
    v.push_back({TileName(t) + " DP",
                 gemm_kernels::MakeSm90Launch(t, Sm90Schedule::kDataParallel, m, n, k, 1, 64, sms)});
  }
  for (Sm90Tile t : {Sm90Tile::k128x256, Sm90Tile::k192x192}) {
    v.push_back({TileName(t) + " DP A-multicast",
                 gemm_kernels::MulticastDataParallelLaunch(t, m, n, 1, sms, pairs)});
  }
  for (int promo : {0, 128}) {
    Sm90LaunchChoice c =
        gemm_kernels::MakeSm90Launch(Sm90Tile::k128x256, Sm90Schedule::kDataParallel, m, n, k, 1, 64, sms);
    c.l2_promotion = promo;
    v.push_back({"128x256 DP promotion " + std::to_string(promo), c});
  }
  return v;
}

// cuBLAS, then each variant, alone for a phase each (or, `once`, two
// launches each for ncu).
bool DenseVariantsCase(const char* name, int64_t m, int64_t n, int64_t k,
                       const gemm_bench::CublasBaseline& cublas, size_t l2, int sms, std::FILE* phases,
                       bool once) {
  gemm_bench::DenseSets sets(m, n, k, ProbeSetsOptions(m, n, k, l2));
  if (!sets.Allocate()) return false;
  const std::vector<Variant> variants = DenseVariants(m, n, k, sms);
  std::vector<std::vector<std::unique_ptr<gemm_kernels::KernelPlan>>> plans(variants.size());
  for (size_t v = 0; v < variants.size(); ++v) {
    for (int s = 0; s < sets.sets(); ++s) {
      std::string error;
      plans[v].push_back(gemm_kernels::MakeSm90Plan(gemm_kernels::Normalize(sets.Arguments(s)),
                                                    variants[v].choice, nullptr, &error));
      if (!plans[v].back()) {
        std::fprintf(stderr, "%s %s: %s\n", name, variants[v].name.c_str(), error.c_str());
        return false;
      }
    }
  }
  const Launcher theirs = CublasLauncher(cublas, sets);
  std::vector<Impl> impls = {{"cublas", theirs, false}};
  for (size_t v = 0; v < variants.size(); ++v) {
    impls.push_back(
        {variants[v].name, [&, v](int s) { return plans[v][s]->Launch(nullptr).empty(); }, true});
  }
  return RunDenseImpls(name, sets, impls, theirs, once, phases);
}

// No filters: every case but the variants.
bool Selected(const char* name, const std::vector<std::string>& filters) {
  if (filters.empty()) return true;
  for (const std::string& f : filters)
    if (std::strstr(name, f.c_str())) return true;
  return false;
}

// The cases `filters` select (substrings of their names; "variants ..."
// cases only when a filter starts with "variants"), each phase's window
// appended to `phases_path`; `once`: only the variants, two launches each.
int Run(const std::vector<std::string>& filters, const char* phases_path, bool once) {
  std::FILE* phases = std::fopen(phases_path, "w");
  if (phases == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", phases_path);
    return 2;
  }
  gemm_bench::CublasBaseline cublas;
  if (!cublas.ok()) return 1;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 1;
  const size_t l2 = prop.l2CacheSize;
  struct DenseCase {
    const char* name;
    int64_t m, n, k;
  };
  const DenseCase dense[] = {{"8192^3", 8192, 8192, 8192},
                             {"4096^3", 4096, 4096, 4096},
                             {"3072^3", 3072, 3072, 3072},
                             {"4224^3", 4224, 4224, 4224},
                             {"1920x1920x8192", 1920, 1920, 8192},
                             {"256x4096x16384", 256, 4096, 16384},
                             {"1000^3", 1000, 1000, 1000},
                             {"128x128x65536", 128, 128, 65536},
                             // Memory-bound: its TFLOP/s times 0.1431 is TB/s over A, B and D.
                             {"skinny 7x8192x8192", 7, 8192, 8192}};
  struct GroupedCase {
    const char* name;
    int count, m_lo, m_hi, n, k;
    uint64_t seed;
  };
  const GroupedCase grouped[] = {{"grouped 32", 32, 16, 2048, 4096, 2048, 20261130},
                                 {"grouped 128", 128, 16, 512, 1024, 1024, 20261131},
                                 {"grouped 64", 64, 32, 256, 256, 256, 20261132}};
  int failures = 0;
  if (!once) {
    for (const DenseCase& c : dense) {
      if (Selected(c.name, filters) && !Dense(c.name, c.m, c.n, c.k, cublas, l2, phases)) ++failures;
    }
    for (const GroupedCase& c : grouped) {
      if (Selected(c.name, filters) &&
          !Grouped(c.name, c.count, c.m_lo, c.m_hi, c.n, c.k, c.seed, cublas, l2, phases)) {
        ++failures;
      }
    }
  }
  bool asked = false;
  for (const std::string& f : filters) asked |= f.rfind("variants", 0) == 0;
  for (const DenseCase& c : {DenseCase{"variants 4096^3", 4096, 4096, 4096},
                             DenseCase{"variants 1920x1920x8192", 1920, 1920, 8192},
                             DenseCase{"variants 4224^3", 4224, 4224, 4224}}) {
    if (!asked || !Selected(c.name, filters)) continue;
    if (!DenseVariantsCase(c.name, c.m, c.n, c.k, cublas, l2, prop.multiProcessorCount, phases,
                           once)) {
      ++failures;
    }
  }
  std::fclose(phases);
  return failures == 0 ? 0 : 1;
}

// --------------------------------------------------------------- join

struct Sample {
  double t;
  double clock_mhz, power_w, temp_c;
  unsigned long long reasons;
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Join(const char* phases_path, const char* smi_path) {
  std::vector<Sample> samples;
  std::ifstream smi(smi_path);
  for (std::string line; std::getline(smi, line);) {
    const std::vector<std::string> f = Split(line, ',');
    if (f.size() < 5) continue;
    int y, mo, d, h, mi;
    double sec;
    if (std::sscanf(f[0].c_str(), "%d/%d/%d %d:%d:%lf", &y, &mo, &d, &h, &mi, &sec) != 6) continue;
    Sample s;
    s.t = h * 3600.0 + mi * 60.0 + sec;
    s.clock_mhz = std::atof(f[1].c_str());
    s.power_w = std::atof(f[2].c_str());
    s.temp_c = std::atof(f[3].c_str());
    s.reasons = std::strtoull(f[4].c_str(), nullptr, 16);
    samples.push_back(s);
  }
  std::printf("%zu clock samples\n\n", samples.size());
  std::printf("| case | impl | TFLOP/s | samples | SM clock MHz (median, min) | power W (median, max) | "
              "temp C | throttle reasons seen |\n|---|---|---|---|---|---|---|---|\n");
  std::ifstream phases(phases_path);
  for (std::string line; std::getline(phases, line);) {
    const std::vector<std::string> f = Split(line, '|');
    if (f.size() < 5) continue;
    const double start = std::atof(f[2].c_str()) + kSettleSeconds, end = std::atof(f[3].c_str());
    std::vector<double> clock, power, temp;
    unsigned long long reasons = 0;
    for (const Sample& s : samples) {
      if (s.t < start || s.t > end) continue;
      clock.push_back(s.clock_mhz);
      power.push_back(s.power_w);
      temp.push_back(s.temp_c);
      reasons |= s.reasons;
    }
    const double cmin = clock.empty() ? 0 : *std::min_element(clock.begin(), clock.end());
    const double pmax = power.empty() ? 0 : *std::max_element(power.begin(), power.end());
    // Bits of nvmlClocksEventReasons: 0x4 software power cap, 0x8 hardware
    // slowdown, 0x20 software thermal, 0x40 hardware thermal, 0x80 power brake.
    std::printf("| %s | %s | %s | %zu | %.0f, %.0f | %.0f, %.0f | %.0f | 0x%llx |\n", f[0].c_str(),
                f[1].c_str(), f[4].c_str(), clock.size(), Median(clock), cmin, Median(power), pmax,
                Median(temp), reasons);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "run") == 0) {
    return Run(std::vector<std::string>(argv + 3, argv + argc), argv[2], false);
  }
  if (argc == 3 && std::strcmp(argv[1], "once") == 0) return Run({argv[2]}, "/dev/null", true);
  if (argc == 4 && std::strcmp(argv[1], "join") == 0) return Join(argv[2], argv[3]);
  std::fprintf(stderr,
               "usage: power_probe run PHASES [case...] | power_probe join PHASES SMI_CSV | "
               "power_probe once CASE\n");
  return 2;
}
