// GPU tests of the reducing schedules (stream-K, split-K) and of grouped
// launches.
//
// Inputs come from two large random device buffers (bf16 and fp16 images of
// the same uniform [-1, 1) values), each case taking its operands at random
// 16-byte-aligned offsets with random padded leading dimensions, so every case
// sees fresh data without a host fill per case. Outputs are poisoned with
// 0xFF (NaN in every output dtype) before each run.
//
// Checks: a reducing schedule against the data-parallel schedule of the same
// tile on the same inputs (fp32 outputs: only the summation order differs),
// a float64 CPU reference on sampled rows for a share of the cases,
// bit-identical outputs across repeated stream-K runs, and grouped launches
// bit-identical to one data-parallel Gemm per problem with the same tile.
// Every synchronization has a watchdog: a kernel still running after
// kWatchdogSeconds fails the test and ends the process (a hung persistent
// kernel would otherwise stall CI); the kernel's own flag waits trap after
// about 10 s.
//
// Without a usable CUDA device, or on a non-Hopper one (where no reducing
// schedule or grouped kernel exists), every test skips with the reason.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "kernels/kernel_plan.h"
#include "kernels/problem.h"
#include "kernels/sm90/sm90_gemm.h"
#include "kernels/testing/host_types.h"
#include "kernels/testing/gpu_skip.h"

namespace gemm_kernels {
namespace {

using gemm_kernels::testing::DecodeElement;
constexpr double kWatchdogSeconds = 30;
constexpr int64_t kPoolElems = int64_t(48) << 20;  // per input dtype
constexpr size_t kWorkspaceBytes = size_t(96) << 20;

// Waits for the device; a kernel still running after the deadline is a hang.
void SyncWithWatchdog(const std::string& what) {
  cudaEvent_t ev;
  if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return;
  cudaEventRecord(ev, nullptr);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kWatchdogSeconds);
  while (cudaEventQuery(ev) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "WATCHDOG: %s still running after %.0f s: hang\n", what.c_str(),
                   kWatchdogSeconds);
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  cudaEventDestroy(ev);
}

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// The shared random operand pools (device) and their host images.
struct Pools {
  void* dev[2] = {nullptr, nullptr};  // bf16, fp16
  std::vector<float> values[2];       // decoded, per element
};

Pools* GetPools() {
  static Pools* pools = [] {
    auto* p = new Pools;
    std::vector<uint16_t> bits(kPoolElems);
    uint64_t s = 0x243F6A8885A308D3ull;
    std::vector<float> raw(kPoolElems);
    for (int64_t i = 0; i < kPoolElems; ++i) {
      s ^= s >> 12;
      s ^= s << 25;
      s ^= s >> 27;
      raw[i] = float((s * 2685821657736338717ull) >> 40) / float(1 << 23) - 1.0f;
    }
    for (int t = 0; t < 2; ++t) {
      p->values[t].resize(kPoolElems);
      for (int64_t i = 0; i < kPoolElems; ++i) {
        bits[i] = t == 0 ? testing::FloatToBf16(raw[i]) : testing::FloatToHalf(raw[i]);
        p->values[t][i] = t == 0 ? testing::Bf16ToFloat(bits[i]) : testing::HalfToFloat(bits[i]);
      }
      if (cudaMalloc(&p->dev[t], kPoolElems * 2) != cudaSuccess ||
          cudaMemcpy(p->dev[t], bits.data(), kPoolElems * 2, cudaMemcpyHostToDevice) != cudaSuccess) {
        p->dev[t] = nullptr;
      }
    }
    return p;
  }();
  return pools;
}

// Multiprocessors of the current device (0 when it cannot be read; the
// tests that ask have passed NoHopperReason).
int SmCount() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 0;
  }
  return sms;
}

void* Workspace() {
  static void* ws = [] {
    void* p = nullptr;
    return cudaMalloc(&p, kWorkspaceBytes) == cudaSuccess ? p : nullptr;
  }();
  return ws;
}

// An operand view into a pool: `offset` (elements) is folded into the device
// pointer by Args(); Index() addresses the pool's host image.
struct View {
  int64_t offset = 0;  // elements
  Layout layout = Layout::kRowMajor;
  int64_t ld = 0;
  int64_t Index(int64_t i, int64_t j) const {
    return offset + (layout == Layout::kRowMajor ? i * ld + j : i + j * ld);
  }
};

View PickView(std::mt19937_64& rng, Layout layout, int64_t rows, int64_t cols) {
  View v;
  v.layout = layout;
  const int64_t min_ld = layout == Layout::kRowMajor ? cols : rows;
  v.ld = (min_ld + 7) / 8 * 8 + 8 * std::uniform_int_distribution<int>(0, 2)(rng);
  const int64_t outer = layout == Layout::kRowMajor ? rows : cols;
  const int64_t span = outer * v.ld;
  if (span + 8 > kPoolElems) {
    ADD_FAILURE() << "operand of " << span << " elements exceeds the random pool";
    return v;
  }
  v.offset = 8 * std::uniform_int_distribution<int64_t>(0, (kPoolElems - span) / 8 - 1)(rng);
  return v;
}

struct Shape {
  int64_t m, n, k;
  DataType in = DataType::kBf16;
  DataType out = DataType::kFp32;
  Layout la = Layout::kRowMajor, lb = Layout::kColMajor, ld = Layout::kRowMajor;
  float alpha = 1.0f, beta = 0.0f;
  TileHint tile = TileHint::k128x256;
  ScheduleHint schedule = ScheduleHint::kStreamK;

  std::string Describe() const {
    std::ostringstream os;
    auto L = [](Layout l) { return l == Layout::kRowMajor ? "R" : "C"; };
    os << m << "x" << n << "x" << k << " " << DataTypeName(in) << "->" << DataTypeName(out) << " A"
       << L(la) << " B" << L(lb) << " D" << L(ld) << " alpha=" << alpha << " beta=" << beta
       << " tile=" << int(tile) << " schedule=" << int(schedule);
    return os.str();
  }
};

struct Operands {
  View a, b;
  void* d = nullptr;  // m x n in `ld` layout, packed
  void* c = nullptr;
  std::vector<uint8_t> c_host;
};

GemmArguments Args(const Shape& s, const Operands& o) {
  const int pool = s.in == DataType::kBf16 ? 0 : 1;
  const size_t es = 2;
  GemmArguments g;
  g.m = s.m;
  g.n = s.n;
  g.k = s.k;
  g.a = {static_cast<uint8_t*>(GetPools()->dev[pool]) + o.a.offset * es, s.in, s.la, o.a.ld, 0};
  g.b = {static_cast<uint8_t*>(GetPools()->dev[pool]) + o.b.offset * es, s.in, s.lb, o.b.ld, 0};
  const int64_t ldd = s.ld == Layout::kRowMajor ? s.n : s.m;
  g.d = {o.d, s.out, s.ld, ldd, 0};
  g.c = {o.c, s.out, s.ld, ldd, 0};
  g.alpha = s.alpha;
  g.beta = s.beta;
  return g;
}

// fp32 outputs of two summation orders differ by roughly eps * sqrt(K).
// fp32 outputs: two fp32 accumulations of K products in different orders
// (data-parallel against split or stream-K) differ by ~eps * sqrt(K) * c;
// tensor-core accumulation gave c up to ~5 (7.68e-5 at K = 65536 with 128
// splits, H200), so the bound allows twice that.
double OutTolerance(DataType out, int64_t k = 1) {
  return out == DataType::kBf16 ? 1e-2
         : out == DataType::kFp16 ? 2e-3
                                 : std::max(1e-5, 6e-7 * std::sqrt(double(k)));
}

// ||x - y|| / ||y|| over all elements; counts non-finite values of x.
double RelDiff(DataType t, const std::vector<uint8_t>& x, const std::vector<uint8_t>& y,
               int64_t* non_finite) {
  const size_t es = DataTypeSize(t);
  double e2 = 0, r2 = 0;
  *non_finite = 0;
  for (size_t i = 0; i < x.size() / es; ++i) {
    const double u = DecodeElement(t, &x[i * es]), v = DecodeElement(t, &y[i * es]);
    if (!std::isfinite(u)) {
      ++*non_finite;
      continue;
    }
    e2 += (u - v) * (u - v);
    r2 += v * v;
  }
  return r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
}

// float64 reference of sampled rows (0, m-1 and a few random ones).
double ReferenceError(const Shape& s, const Operands& o, const std::vector<uint8_t>& d,
                      std::mt19937_64& rng) {
  const std::vector<float>& pool = GetPools()->values[s.in == DataType::kBf16 ? 0 : 1];
  const size_t es = DataTypeSize(s.out);
  const int64_t ldd = s.ld == Layout::kRowMajor ? s.n : s.m;
  auto at = [&](int64_t i, int64_t j) { return s.ld == Layout::kRowMajor ? i * ldd + j : i + j * ldd; };
  std::vector<int64_t> rows = {0, s.m - 1};
  for (int t = 0; t < 3; ++t) rows.push_back(std::uniform_int_distribution<int64_t>(0, s.m - 1)(rng));
  double e2 = 0, r2 = 0;
  for (int64_t i : rows) {
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0;
      for (int64_t kk = 0; kk < s.k; ++kk) acc += double(pool[o.a.Index(i, kk)]) * pool[o.b.Index(kk, j)];
      double ref = s.alpha * acc;
      if (s.beta != 0) ref += s.beta * double(DecodeElement(s.out, &o.c_host[at(i, j) * es]));
      const double got = DecodeElement(s.out, &d[at(i, j) * es]);
      if (!std::isfinite(got)) return INFINITY;
      e2 += (got - ref) * (got - ref);
      r2 += ref * ref;
    }
  }
  return r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
}

// A launch choice the public hints cannot ask for (A multicast), for the
// first run of RunAgainstDataParallel.
using ChoiceFor = std::function<Sm90LaunchChoice(const NormalizedProblem&)>;

// Runs `s` with its forced schedule and with data-parallel on the same
// inputs; returns the scheduled output in *out. `name` gets the kernel name.
// `with_workspace` false: the scheduled run gets none (what the heuristic
// may still pick: paired split-K). `choice`: the first run is that launch,
// planned directly (MakeSm90Plan, with the shared workspace where the
// choice needs one), instead of `s`'s hints.
void RunAgainstDataParallel(const Shape& s, std::mt19937_64& rng, bool check_reference,
                            std::string* name, bool with_workspace = true,
                            const ChoiceFor& choice = nullptr) {
  SCOPED_TRACE(s.Describe());
  Operands o;
  o.a = PickView(rng, s.la, s.m, s.k);
  o.b = PickView(rng, s.lb, s.k, s.n);
  const size_t es = DataTypeSize(s.out);
  const size_t bytes = size_t(s.m) * s.n * es;
  CUDA_OK(cudaMalloc(&o.d, bytes));
  CUDA_OK(cudaMalloc(&o.c, bytes));
  o.c_host.resize(bytes);
  if (s.beta != 0) {
    std::uniform_real_distribution<float> dist(-1, 1);
    for (size_t i = 0; i < bytes / es; ++i) {
      const float v = dist(rng);
      if (s.out == DataType::kFp32) std::memcpy(&o.c_host[i * 4], &v, 4);
      else {
        const uint16_t h = s.out == DataType::kBf16 ? testing::FloatToBf16(v) : testing::FloatToHalf(v);
        std::memcpy(&o.c_host[i * 2], &h, 2);
      }
    }
    CUDA_OK(cudaMemcpy(o.c, o.c_host.data(), bytes, cudaMemcpyHostToDevice));
  }
  const GemmArguments args = Args(s, o);
  ASSERT_TRUE(Gemm::CanImplement(args).ok()) << Gemm::CanImplement(args);
  const size_t ws_bytes = Gemm::WorkspaceSize(args, s.tile, s.schedule);
  ASSERT_LE(ws_bytes, kWorkspaceBytes);

  std::vector<uint8_t> got(bytes), want(bytes);
  for (int pass = 0; pass < 2; ++pass) {
    Gemm g;
    std::unique_ptr<KernelPlan> plan;
    std::string kernel;
    if (pass == 0 && choice) {
      const NormalizedProblem p = Normalize(args);
      const Sm90LaunchChoice c = choice(p);
      ASSERT_LE(ScheduleWorkspaceBytes(c), kWorkspaceBytes);
      std::string error;
      plan = MakeSm90Plan(p, c, ScheduleWorkspaceBytes(c) > 0 ? Workspace() : nullptr, &error);
      ASSERT_NE(plan, nullptr) << error;
      kernel = plan->name();
    } else {
      const absl::Status st =
          pass == 0 ? g.Initialize(args, with_workspace ? Workspace() : nullptr, s.tile, s.schedule)
                    : g.Initialize(args, nullptr, s.tile, ScheduleHint::kDataParallel);
      ASSERT_TRUE(st.ok()) << st;
      kernel = g.kernel_name();
    }
    if (pass == 0) *name = kernel;
    CUDA_OK(cudaMemset(o.d, 0xFF, bytes));
    if (plan) {
      ASSERT_EQ(plan->Launch(nullptr), "");
    } else {
      ASSERT_TRUE(g.Run(nullptr).ok());
    }
    SyncWithWatchdog(s.Describe() + " " + kernel);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(pass == 0 ? got.data() : want.data(), o.d, bytes, cudaMemcpyDeviceToHost));
  }
  int64_t bad = 0;
  const double rel = RelDiff(s.out, got, want, &bad);
  EXPECT_EQ(bad, 0) << *name << ": non-finite outputs (unwritten or NaN)";
  EXPECT_LE(rel, OutTolerance(s.out, s.k)) << *name << " vs data-parallel";
  if (check_reference) {
    const double ref = ReferenceError(s, o, got, rng);
    EXPECT_LE(ref, std::max(1e-2, OutTolerance(s.out))) << *name << " vs float64";
  }
  cudaFree(o.d);
  cudaFree(o.c);
}

class SchedulesGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = testing::NoHopperReason("the stream-K, split-K and grouped kernels");
    if (!reason.empty()) GTEST_SKIP() << reason;
    ASSERT_NE(GetPools()->dev[0], nullptr);
    ASSERT_NE(GetPools()->dev[1], nullptr);
    ASSERT_NE(Workspace(), nullptr);
  }
  std::mt19937_64 rng_{std::random_device{}()};
};

const Layout kLayouts[] = {Layout::kRowMajor, Layout::kColMajor};
const Sm90Tile kCooperativeTiles[] = {Sm90Tile::k128x256, Sm90Tile::k128x128, Sm90Tile::k128x64,
                                      Sm90Tile::k192x192};

// A test's own generator, from a fresh seed that is printed so a failing
// run can be replayed.
std::mt19937_64 SeededRng(std::mt19937_64& source) {
  const uint64_t seed = source();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
}

// >= 2000 random shapes: M < 64 often, K tails, single tiles, every layout,
// forced stream-K / split-K / the heuristic, every cooperative tile.
TEST_F(SchedulesGpuTest, RandomShapesAgainstDataParallel) {
  std::mt19937_64 rng = SeededRng(rng_);
  int counts[3] = {0, 0, 0};
  const int kCases = 2000;
  for (int t = 0; t < kCases; ++t) {
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    Shape s{};
    s.m = pick(0, 2) == 0 ? pick(1, 63) : pick(1, 700);
    s.n = pick(0, 3) == 0 ? pick(1, 64) : pick(1, 700);
    s.k = pick(0, 3) == 0 ? pick(1, 300) : pick(65, 6000);
    if (pick(0, 9) == 0) s.k = 64 * pick(1, 64);  // no K tail
    s.in = pick(0, 3) == 0 ? DataType::kFp16 : DataType::kBf16;
    s.out = pick(0, 4) == 0 ? s.in : DataType::kFp32;
    s.la = kLayouts[pick(0, 1)];
    s.lb = kLayouts[pick(0, 1)];
    s.ld = pick(0, 5) == 0 ? Layout::kColMajor : Layout::kRowMajor;
    const TileHint tiles[] = {TileHint::k128x256, TileHint::k128x128, TileHint::k128x64,
                              TileHint::k192x192};
    s.tile = tiles[pick(0, 3)];
    s.schedule = pick(0, 2) == 0 ? ScheduleHint::kSplitK
                 : pick(0, 4) == 0 ? ScheduleHint::kAuto
                                   : ScheduleHint::kStreamK;
    if (pick(0, 3) == 0) {
      s.alpha = std::uniform_real_distribution<float>(-2, 2)(rng);
      s.beta = pick(0, 1) ? std::uniform_real_distribution<float>(-2, 2)(rng) : 0.0f;
    }
    std::string name;
    RunAgainstDataParallel(s, rng, t % 10 == 0, &name);
    if (HasFatalFailure()) return;
    counts[name.find("_streamk") != std::string::npos ? 0
           : name.find("_splitk") != std::string::npos ? 1
                                                       : 2]++;
    if (t % 100 == 0) std::printf("  case %4d %-80s %s\n", t, s.Describe().c_str(), name.c_str());
  }
  std::printf("stream-K %d, split-K %d, data-parallel %d cases\n", counts[0], counts[1], counts[2]);
  EXPECT_GT(counts[0], kCases / 3);
  EXPECT_GT(counts[1], kCases / 10);
}

// Shapes with more tiles than SMs: the hybrid (data-parallel waves, then
// stream-K), with the float64 reference on sampled rows.
TEST_F(SchedulesGpuTest, HybridAndIssueShapes) {
  const Shape shapes[] = {
      {1920, 1920, 2048}, {3072, 3072, 1024}, {2200, 2100, 300}, {256, 4096, 4096},
      {128, 128, 16384},  {1000, 1000, 1000}, {7, 8192, 2048},   {4224, 2112, 512},
  };
  for (Shape s : shapes) {
    for (ScheduleHint h : {ScheduleHint::kAuto, ScheduleHint::kStreamK, ScheduleHint::kSplitK}) {
      s.schedule = h;
      s.tile = TileHint::kAuto;
      std::string name;
      RunAgainstDataParallel(s, rng_, true, &name);
      std::printf("  %-80s %s\n", s.Describe().c_str(), name.c_str());
    }
  }
}

// Split-K through the separate reduction kernel: many splits (several split
// groups per output), each output dtype, C read or not, row- and
// column-major D, ragged M and N, both tiles; against data-parallel and
// float64.
TEST_F(SchedulesGpuTest, SplitKReductionKernel) {
  // {7, 520, 3000}: a skinny M whose partials hold only 7 of 128 rows (the
  // rest is neither stored nor read).
  const Shape shapes[] = {{128, 128, 65536}, {100, 72, 20000}, {200, 390, 9000},
                          {1000, 1000, 1000}, {7, 520, 3000}};
  int i = 0;
  for (Shape s : shapes) {
    for (DataType out : {DataType::kBf16, DataType::kFp16, DataType::kFp32}) {
      ++i;
      s.in = i % 2 ? DataType::kFp16 : DataType::kBf16;
      s.out = out;
      s.ld = i % 3 == 0 ? Layout::kColMajor : Layout::kRowMajor;
      s.alpha = i % 2 ? -1.5f : 1.0f;
      s.beta = i % 4 < 2 ? 0.5f : 0.0f;
      s.tile = i % 5 == 0 ? TileHint::k128x256 : TileHint::k128x128;
      s.schedule = ScheduleHint::kSplitK;
      std::string name;
      RunAgainstDataParallel(s, rng_, true, &name);
      if (HasFatalFailure()) return;
      EXPECT_NE(name.find("_reduce"), std::string::npos) << s.Describe() << ": " << name;
      std::printf("  %-80s %s\n", s.Describe().c_str(), name.c_str());
    }
  }
}

// Split-K summed by the GEMM grid itself (no reduction kernel): the
// reduction kernel's shapes and a skinny 7 x 8192 x 4096, then random shapes
// with split counts up to what fits the SMs (M < 64, K tails, ragged N,
// every tile, layout and dtype, alpha / beta with C), against
// data-parallel and, for a share, float64. Each launch leaves the grid's
// counters at zero for the next case's launch on the same workspace.
TEST_F(SchedulesGpuTest, SplitKSummedInGrid) {
  std::mt19937_64 rng = SeededRng(rng_);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int sms = SmCount();
  ASSERT_GT(sms, 0);
  std::vector<Shape> shapes = {{128, 128, 65536}, {100, 72, 20000}, {200, 390, 9000},
                               {1000, 1000, 1000}, {7, 520, 3000}, {7, 8192, 4096}};
  for (int t = 0; t < 200; ++t) {
    Shape s{};
    s.m = pick(0, 2) == 0 ? pick(1, 63) : pick(1, 600);
    s.n = pick(0, 3) == 0 ? pick(1, 64) : pick(1, 600);
    s.k = pick(0, 3) == 0 ? pick(65, 400) : pick(400, 12000);
    shapes.push_back(s);
  }
  int case_no = 0;
  for (Shape s : shapes) {
    const bool listed = case_no < 6;
    s.in = pick(0, 2) == 0 ? DataType::kFp16 : DataType::kBf16;
    s.out = listed ? std::array{DataType::kBf16, DataType::kFp16, DataType::kFp32}[case_no % 3]
                   : (pick(0, 2) == 0 ? s.in : DataType::kFp32);
    s.la = kLayouts[pick(0, 1)];
    s.lb = kLayouts[pick(0, 1)];
    s.ld = pick(0, 4) == 0 ? Layout::kColMajor : Layout::kRowMajor;
    if (pick(0, 2) == 0) {
      s.alpha = std::uniform_real_distribution<float>(-2, 2)(rng);
      s.beta = pick(0, 1) ? std::uniform_real_distribution<float>(-2, 2)(rng) : 0.0f;
    }
    const Sm90Tile tile = kCooperativeTiles[pick(0, 3)];
    const int64_t split_pick = pick(2, 132);
    int splits_used = 0;
    const ChoiceFor summed = [&](const NormalizedProblem& p) {
      const int64_t n_tiles = TileCount(tile, p.m, p.n, p.batch);
      const int64_t kb = (p.k + 63) / 64;
      // K >= 65 gives at least two k-blocks, so at least one split.
      splits_used = int(std::min<int64_t>({split_pick, kb, std::max<int64_t>(1, sms / n_tiles)}));
      return GridSummedSplitKLaunch(tile, n_tiles, splits_used);
    };
    std::string name;
    RunAgainstDataParallel(s, rng, listed || case_no % 10 == 0, &name, true, summed);
    if (HasFatalFailure()) return;
    if (splits_used > 1) EXPECT_NE(name.find("_gridsum"), std::string::npos) << name;
    if (listed || case_no % 20 == 0) {
      std::printf("  case %3d %-80s %s\n", case_no, s.Describe().c_str(), name.c_str());
    }
    ++case_no;
  }
}

// Plans of different reducing schedules take turns on one workspace, as the
// CUDA executor's launches do: in-kernel split-K (flags), the reduction
// kernel (partials from byte 256) and the grid-summed launch (counters at
// byte 0) of one problem, three rounds. Every launch must match its own
// first round bit for bit (a counter left non-zero, or clobbered by another
// plan's partials, makes a grid-summed launch read partials early or spin
// until the kernel traps) and the others within rounding.
TEST_F(SchedulesGpuTest, SchedulesShareOneWorkspace) {
  const int sms = SmCount();
  ASSERT_GT(sms, 0);
  for (Shape s : {Shape{128, 128, 65536}, Shape{7, 520, 3000}, Shape{300, 260, 7000}}) {
    SCOPED_TRACE(s.Describe());
    Operands o;
    o.a = PickView(rng_, s.la, s.m, s.k);
    o.b = PickView(rng_, s.lb, s.k, s.n);
    const size_t bytes = size_t(s.m) * s.n * DataTypeSize(s.out);
    CUDA_OK(cudaMalloc(&o.d, bytes));
    const NormalizedProblem p = Normalize(Args(s, o));
    const int64_t tiles = TileCount(Sm90Tile::k128x128, p.m, p.n, p.batch);
    const int most = int(std::min<int64_t>(sms / tiles, (p.k + 63) / 64));
    const Sm90LaunchChoice choices[] = {
        SplitKLaunch(Sm90Tile::k128x128, tiles, std::min(most, 8), false),
        SplitKLaunch(Sm90Tile::k128x128, tiles, most, true),
        GridSummedSplitKLaunch(Sm90Tile::k128x128, tiles, most)};
    std::vector<std::unique_ptr<KernelPlan>> plans;
    for (const Sm90LaunchChoice& c : choices) {
      ASSERT_LE(ScheduleWorkspaceBytes(c), kWorkspaceBytes);
      std::string error;
      plans.push_back(MakeSm90Plan(p, c, Workspace(), &error));
      ASSERT_NE(plans.back(), nullptr) << error;
    }
    std::vector<std::vector<uint8_t>> first(plans.size(), std::vector<uint8_t>(bytes));
    std::vector<uint8_t> again(bytes);
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < plans.size(); ++i) {
        CUDA_OK(cudaMemset(o.d, 0xFF, bytes));
        ASSERT_EQ(plans[i]->Launch(nullptr), "");
        SyncWithWatchdog(s.Describe() + " " + plans[i]->name());
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaMemcpy(round == 0 ? first[i].data() : again.data(), o.d, bytes,
                           cudaMemcpyDeviceToHost));
        if (round > 0) {
          EXPECT_EQ(std::memcmp(first[i].data(), again.data(), bytes), 0)
              << plans[i]->name() << ": repetition " << round << " differs from the first";
        }
      }
    }
    for (size_t i = 0; i < plans.size(); ++i) {
      int64_t bad = 0;
      const double rel = RelDiff(s.out, first[i], first[0], &bad);
      EXPECT_EQ(bad, 0) << plans[i]->name();
      EXPECT_LE(rel, OutTolerance(s.out, s.k)) << plans[i]->name() << " vs " << plans[0]->name();
      std::printf("  %-60s %s: 3 rounds bit-identical, %.1e from %s\n", s.Describe().c_str(),
                  plans[i]->name().c_str(), rel, plans[0]->name().c_str());
    }
    cudaFree(o.d);
  }
}

// Batched problems through the reduction kernel: tiles of every batch member
// in one launch, B and C broadcast (batch stride 0) in one variant; fp32
// output against data-parallel on all elements, and against float64 on
// rows of each member.
TEST_F(SchedulesGpuTest, SplitKReductionKernelBatched) {
  const int64_t m = 200, n = 300, k = 6000, batch = 3;
  const std::vector<float>& pool = GetPools()->values[0];
  const uint16_t* dev = static_cast<const uint16_t*>(GetPools()->dev[0]);
  for (int broadcast = 0; broadcast < 2; ++broadcast) {
    SCOPED_TRACE(broadcast ? "B and C broadcast" : "strided B");
    const int64_t a_off = 0, b_off = 8 * 1000003, a_stride = m * k;
    const int64_t b_stride = broadcast ? 0 : n * k;
    std::vector<float> c_host(size_t(broadcast ? 1 : batch) * m * n);
    std::mt19937_64 rng(broadcast);
    for (float& v : c_host) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    void *c = nullptr, *d = nullptr;
    const size_t d_bytes = size_t(batch) * m * n * 4;
    CUDA_OK(cudaMalloc(&c, c_host.size() * 4));
    CUDA_OK(cudaMalloc(&d, d_bytes));
    CUDA_OK(cudaMemcpy(c, c_host.data(), c_host.size() * 4, cudaMemcpyHostToDevice));
    GemmArguments args;
    args.m = m;
    args.n = n;
    args.k = k;
    args.batch_count = batch;
    args.a = {dev + a_off, DataType::kBf16, Layout::kRowMajor, k, a_stride};
    args.b = {dev + b_off, DataType::kBf16, Layout::kColMajor, k, b_stride};
    args.c = {c, DataType::kFp32, Layout::kRowMajor, n, broadcast ? 0 : m * n};
    args.d = {d, DataType::kFp32, Layout::kRowMajor, n, m * n};
    args.alpha = 0.75f;
    args.beta = -0.5f;
    ASSERT_LE(Gemm::WorkspaceSize(args, TileHint::k128x128, ScheduleHint::kSplitK), kWorkspaceBytes);
    std::vector<uint8_t> got(d_bytes), want(d_bytes);
    std::string name;
    for (int pass = 0; pass < 2; ++pass) {
      Gemm g;
      const absl::Status st =
          pass == 0 ? g.Initialize(args, Workspace(), TileHint::k128x128, ScheduleHint::kSplitK)
                    : g.Initialize(args, nullptr, TileHint::k128x128, ScheduleHint::kDataParallel);
      ASSERT_TRUE(st.ok()) << st;
      if (pass == 0) name = g.kernel_name();
      CUDA_OK(cudaMemset(d, 0xFF, d_bytes));
      ASSERT_TRUE(g.Run(nullptr).ok());
      SyncWithWatchdog(g.kernel_name());
      CUDA_OK(cudaGetLastError());
      CUDA_OK(cudaMemcpy(pass == 0 ? got.data() : want.data(), d, d_bytes, cudaMemcpyDeviceToHost));
    }
    EXPECT_NE(name.find("_reduce"), std::string::npos) << name;
    int64_t bad = 0;
    EXPECT_LE(RelDiff(DataType::kFp32, got, want, &bad), OutTolerance(DataType::kFp32, k)) << name;
    EXPECT_EQ(bad, 0) << name << ": non-finite outputs";
    double e2 = 0, r2 = 0;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i : {int64_t(0), m / 2, m - 1}) {
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t kk = 0; kk < k; ++kk) {
            acc += double(pool[a_off + b * a_stride + i * k + kk]) *
                   pool[b_off + b * b_stride + j * k + kk];
          }
          const double ref = args.alpha * acc +
                             args.beta * c_host[(broadcast ? 0 : b * m * n) + i * n + j];
          float v;
          std::memcpy(&v, &got[((b * m + i) * n + j) * 4], 4);
          e2 += (v - ref) * (v - ref);
          r2 += ref * ref;
        }
      }
    }
    EXPECT_LE(std::sqrt(e2 / r2), 1e-4) << name << " vs float64";
    std::printf("  batched %s: %s\n", broadcast ? "B, C broadcast" : "strided", name.c_str());
    cudaFree(c);
    cudaFree(d);
  }
}

// Paired split-K (2-CTA clusters, the partial read from the peer's shared
// memory): what the heuristic picks without a workspace for up to 66 tiles
// of 128x128 with K of 32 k-blocks or more on an H200. Random shapes within
// that range (M < 64, K tails, ragged N, every layout and dtype, alpha /
// beta with C) against data-parallel and, for a share, float64.
TEST_F(SchedulesGpuTest, PairedSplitKAgainstDataParallel) {
  std::mt19937_64 rng = SeededRng(rng_);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int kCases = 300;
  int paired = 0;
  for (int t = 0; t < kCases; ++t) {
    Shape s{};
    // At most 48 tile columns: B (up to 6400 x 6144 with padding) must fit
    // the random pool (ran past it once with N = 8398: a test bug, found
    // by its own non-finite check).
    const int64_t tiles_m = pick(1, 8), tiles_n = pick(1, std::min<int64_t>(48, 66 / tiles_m));
    s.m = pick(0, 4) == 0 ? pick(1, 63) : 128 * (tiles_m - 1) + pick(1, 128);
    s.n = 128 * (tiles_n - 1) + pick(1, 128);
    s.k = pick(0, 3) == 0 ? 64 * pick(32, 100) : pick(2049, 6400);
    s.in = pick(0, 3) == 0 ? DataType::kFp16 : DataType::kBf16;
    s.out = pick(0, 2) == 0 ? s.in : DataType::kFp32;
    s.la = kLayouts[pick(0, 1)];
    s.lb = kLayouts[pick(0, 1)];
    s.ld = pick(0, 5) == 0 ? Layout::kColMajor : Layout::kRowMajor;
    s.tile = TileHint::kAuto;
    s.schedule = ScheduleHint::kAuto;
    if (pick(0, 2) == 0) {
      s.alpha = std::uniform_real_distribution<float>(-2, 2)(rng);
      s.beta = pick(0, 1) ? std::uniform_real_distribution<float>(-2, 2)(rng) : 0.0f;
    }
    std::string name;
    RunAgainstDataParallel(s, rng, t % 10 == 0, &name, /*with_workspace=*/false);
    if (HasFatalFailure()) return;
    if (name.find("_pairs") != std::string::npos) ++paired;
    if (t % 30 == 0) std::printf("  case %4d %-80s %s\n", t, s.Describe().c_str(), name.c_str());
  }
  std::printf("paired split-K in %d of %d cases\n", paired, kCases);
  EXPECT_GT(paired, kCases / 2);
}

// A multicast (2-CTA clusters over pairs of n-tiles sharing each A
// k-block): random shapes with odd and even tile columns (phantom tiles),
// M < 64, K tails, every layout and dtype, alpha / beta with C, on the
// four cooperative tiles (192x192 with K-major A), against data-parallel
// and, for a share, float64.
TEST_F(SchedulesGpuTest, MulticastAAgainstDataParallel) {
  std::mt19937_64 rng = SeededRng(rng_);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int sms = SmCount();
  ASSERT_GT(sms, 0);
  const TileHint hints[] = {TileHint::k128x256, TileHint::k128x128, TileHint::k128x64,
                            TileHint::k192x192};
  const int kCases = 300;
  for (int t = 0; t < kCases; ++t) {
    Shape s{};
    s.m = pick(0, 3) == 0 ? pick(1, 63) : pick(1, 1500);
    s.n = pick(0, 3) == 0 ? pick(1, 300) : pick(1, 3000);
    s.k = pick(0, 3) == 0 ? pick(1, 200) : pick(65, 3000);
    s.in = pick(0, 3) == 0 ? DataType::kFp16 : DataType::kBf16;
    s.out = pick(0, 2) == 0 ? s.in : DataType::kFp32;
    s.la = kLayouts[pick(0, 1)];
    s.lb = kLayouts[pick(0, 1)];
    s.ld = pick(0, 5) == 0 ? Layout::kColMajor : Layout::kRowMajor;
    const int which = static_cast<int>(pick(0, 3));
    s.tile = hints[which];
    s.schedule = ScheduleHint::kDataParallel;
    if (pick(0, 2) == 0) {
      s.alpha = std::uniform_real_distribution<float>(-2, 2)(rng);
      s.beta = pick(0, 1) ? std::uniform_real_distribution<float>(-2, 2)(rng) : 0.0f;
    }
    // 192x192 splits A into 96-row halves, K-major only: with MN-major A
    // (after normalization) the 128x128 tile stands in.
    const ChoiceFor multicast = [&](const NormalizedProblem& p) {
      const Sm90Tile tile = kCooperativeTiles[which] == Sm90Tile::k192x192 && !p.a.k_major
                                ? Sm90Tile::k128x128
                                : kCooperativeTiles[which];
      return MulticastDataParallelLaunch(tile, p.m, p.n, p.batch, sms, Sm90MaxPairClusters());
    };
    std::string name;
    RunAgainstDataParallel(s, rng, t % 10 == 0, &name, false, multicast);
    if (HasFatalFailure()) return;
    ASSERT_NE(name.find("_mcA"), std::string::npos) << name;
    if (t % 30 == 0) std::printf("  case %4d %-80s %s\n", t, s.Describe().c_str(), name.c_str());
  }
}

// Stream-K and split-K reduce partials in a fixed order: repeated runs give
// the same bits.
TEST_F(SchedulesGpuTest, DeterministicAcrossRuns) {
  const Shape shapes[] = {{128, 128, 65536, DataType::kBf16, DataType::kFp32},
                          {256, 2048, 16384, DataType::kBf16, DataType::kFp32},
                          {1920, 1920, 8192, DataType::kBf16, DataType::kBf16},
                          {3072, 3072, 3072, DataType::kFp16, DataType::kFp32}};
  for (Shape s : shapes) {
    // The last variant: the heuristic without a workspace (paired split-K
    // where it applies: 256 x 2048 x 16384).
    for (int variant = 0; variant < 4; ++variant) {
      const ScheduleHint h = variant == 0   ? ScheduleHint::kStreamK
                             : variant == 1 ? ScheduleHint::kSplitK
                                            : ScheduleHint::kAuto;
      void* workspace = variant == 3 ? nullptr : Workspace();
      s.schedule = h;
      s.tile = TileHint::kAuto;
      SCOPED_TRACE(s.Describe());
      Operands o;
      o.a = PickView(rng_, s.la, s.m, s.k);
      o.b = PickView(rng_, s.lb, s.k, s.n);
      const size_t bytes = size_t(s.m) * s.n * DataTypeSize(s.out);
      CUDA_OK(cudaMalloc(&o.d, bytes));
      const GemmArguments args = Args(s, o);
      ASSERT_LE(Gemm::WorkspaceSize(args, s.tile, s.schedule), kWorkspaceBytes);
      Gemm g;
      const absl::Status init = g.Initialize(args, workspace, s.tile, s.schedule);
      ASSERT_TRUE(init.ok()) << init;
      std::vector<uint8_t> first(bytes), again(bytes);
      for (int run = 0; run < 5; ++run) {
        CUDA_OK(cudaMemset(o.d, 0xFF, bytes));
        ASSERT_TRUE(g.Run(nullptr).ok());
        SyncWithWatchdog(s.Describe());
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaMemcpy(run == 0 ? first.data() : again.data(), o.d, bytes, cudaMemcpyDeviceToHost));
        if (run > 0) {
          EXPECT_EQ(std::memcmp(first.data(), again.data(), bytes), 0)
              << g.kernel_name() << ": run " << run << " differs from run 0";
        }
      }
      int64_t bad = 0;
      RelDiff(s.out, first, first, &bad);
      EXPECT_EQ(bad, 0) << g.kernel_name();
      std::printf("  %-80s %s: 5 runs bit-identical\n", s.Describe().c_str(), g.kernel_name().c_str());
      cudaFree(o.d);
    }
  }
}

// Grouped lists of 1 to 700 problems (M = 1 members included): the grouped
// kernel, whose epilogue stores through TMA where D allows it, must match
// one data-parallel Gemm per problem with the same tile bit for bit; a few
// problems also against float64. Up to 512 problems the kernel schedules
// from a shared-memory copy of the shapes, beyond from global memory (700).
TEST_F(SchedulesGpuTest, GroupedMatchesSingleLaunches) {
  int case_no = 0;
  for (int count : {1, 2, 3, 17, 64, 128, 300, 512, 700}) {
    for (int variant = 0; variant < 2; ++variant, ++case_no) {
      std::mt19937_64& rng = rng_;
      auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
      const DataType in = variant ? DataType::kFp16 : DataType::kBf16;
      const DataType out = pick(0, 1) ? DataType::kFp32 : in;
      const Layout la = kLayouts[pick(0, 1)], lb = kLayouts[pick(0, 1)];
      // Both grouped kernels, whatever the heuristic would pick for the list.
      const TileHint tile = variant ? TileHint::k128x128 : TileHint::k128x256;
      std::vector<Shape> shapes(count);
      std::vector<Operands> ops(count);
      GroupedGemmArguments gargs;
      const int max_dim = count > 100 ? 300 : 900;
      for (int i = 0; i < count; ++i) {
        Shape& s = shapes[i];
        s.m = pick(0, 4) == 0 ? 1 : pick(1, max_dim);
        // Half the members have 16-byte D rows (N a multiple of 8): with a
        // 16-bit D those take the staged TMA-store epilogue, the others the
        // register path, both in one launch.
        s.n = pick(0, 1) ? 8 * pick(1, max_dim / 8) : pick(1, max_dim);
        s.k = pick(1, max_dim);
        s.in = in;
        s.out = out;
        s.la = la;
        s.lb = lb;
        s.alpha = i % 3 == 0 ? 1.0f : std::uniform_real_distribution<float>(-2, 2)(rng);
        Operands& o = ops[i];
        o.a = PickView(rng, la, s.m, s.k);
        o.b = PickView(rng, lb, s.k, s.n);
        CUDA_OK(cudaMalloc(&o.d, size_t(s.m) * s.n * DataTypeSize(out)));
        CUDA_OK(cudaMemset(o.d, 0xFF, size_t(s.m) * s.n * DataTypeSize(out)));
        gargs.problems.push_back(GroupedMemberOf(Args(s, o)));
      }
      ASSERT_TRUE(GroupedGemm::CanImplement(gargs).ok());
      ASSERT_LE(GroupedGemm::WorkspaceSize(gargs), kWorkspaceBytes);
      GroupedGemm grouped;
      ASSERT_TRUE(grouped.Initialize(gargs, Workspace(), tile).ok());
      EXPECT_NE(grouped.kernel_name().find("grouped"), std::string::npos) << grouped.kernel_name();
      const TileHint used = grouped.kernel_name().find("128x256") != std::string::npos
                                ? TileHint::k128x256
                                : TileHint::k128x128;
      ASSERT_TRUE(grouped.Run(nullptr).ok());
      SyncWithWatchdog("grouped " + std::to_string(count));
      CUDA_OK(cudaGetLastError());
      int mismatched = 0;
      for (int i = 0; i < count; ++i) {
        const Shape& s = shapes[i];
        const size_t bytes = size_t(s.m) * s.n * DataTypeSize(out);
        std::vector<uint8_t> got(bytes), want(bytes);
        CUDA_OK(cudaMemcpy(got.data(), ops[i].d, bytes, cudaMemcpyDeviceToHost));
        Gemm single;
        ASSERT_TRUE(single.Initialize(Args(s, ops[i]), nullptr, used, ScheduleHint::kDataParallel).ok());
        CUDA_OK(cudaMemset(ops[i].d, 0xFF, bytes));
        ASSERT_TRUE(single.Run(nullptr).ok());
        SyncWithWatchdog("single");
        CUDA_OK(cudaMemcpy(want.data(), ops[i].d, bytes, cudaMemcpyDeviceToHost));
        if (std::memcmp(got.data(), want.data(), bytes) != 0) {
          ++mismatched;
          int64_t bad = 0;
          ADD_FAILURE() << "problem " << i << " " << s.Describe() << " differs from a single launch, rel "
                        << RelDiff(out, got, want, &bad) << ", non-finite " << bad;
        }
        if (i < 3) {
          ops[i].c_host.assign(bytes, 0);
          EXPECT_LE(ReferenceError(s, ops[i], got, rng), OutTolerance(out) + 1e-2)
              << "problem " << i << " " << s.Describe();
        }
        cudaFree(ops[i].d);
      }
      std::printf("  grouped %3d problems %s->%s: %s, %d mismatches vs single launches\n", count,
                  DataTypeName(in), DataTypeName(out), grouped.kernel_name().c_str(), mismatched);
    }
  }
}

TEST(GroupedGemmArgs, EmptyListIsInvalid) {
  EXPECT_FALSE(GroupedGemm::CanImplement(GroupedGemmArguments{}).ok());
}

// The executor, the benchmarks and the grouped test above build members
// through GroupedMemberOf: every field of the product must carry over.
TEST(GroupedGemmArgs, MemberOfCarriesTheWholeProduct) {
  int buffers[4];
  GemmArguments g;
  g.m = 3;
  g.n = 5;
  g.k = 7;
  g.batch_count = 1;
  g.a = {&buffers[0], DataType::kFp16, Layout::kColMajor, 11, 0};
  g.b = {&buffers[1], DataType::kFp16, Layout::kRowMajor, 13, 0};
  g.c = {&buffers[2], DataType::kFp32, Layout::kRowMajor, 17, 0};
  g.d = {&buffers[3], DataType::kFp32, Layout::kRowMajor, 17, 0};
  g.alpha = -1.5f;
  g.beta = 0.25f;
  const GroupedProblemArguments p = GroupedMemberOf(g);
  EXPECT_EQ(p.m, 3);
  EXPECT_EQ(p.n, 5);
  EXPECT_EQ(p.k, 7);
  const MatrixDesc* from[] = {&g.a, &g.b, &g.c, &g.d};
  const MatrixDesc* to[] = {&p.a, &p.b, &p.c, &p.d};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(to[i]->ptr, from[i]->ptr) << "operand " << i;
    EXPECT_EQ(to[i]->dtype, from[i]->dtype) << "operand " << i;
    EXPECT_EQ(to[i]->layout, from[i]->layout) << "operand " << i;
    EXPECT_EQ(to[i]->ld, from[i]->ld) << "operand " << i;
  }
  EXPECT_EQ(p.alpha, -1.5f);
  EXPECT_EQ(p.beta, 0.25f);
}

}  // namespace
}  // namespace gemm_kernels
