// The deterministic contract on the GPU (issue 33).
//
// ExecutorContract: 2000 random problems (bf16, fp16, tf32 and strict fp32;
// ragged shapes, transposes, column-major results, C, and every fourth
// K-heavy, where the default heuristic takes split-K or stream-K) through
// the CUDA executor with GemmRequest.deterministic: each alone, inside
// strided batches with random partners, inside grouped launches of random
// lists and under concurrent batches on all lanes; every result must be
// bitwise identical to its lone run. With two or more GPUs the same problems
// run on GPU 1 too and the digests must agree. DefaultPathControl runs the
// same phases without the flag and prints how many results differ there.
//
// TileShapeReport: the same problems through the kernel API with each
// data-parallel tile forced, and with stream-K and split-K forced, printing
// in how many problems each differs bitwise from data-parallel 128x256: the
// fact behind kernels/config/deterministic_plan.h's rule.
//
// Environment (test inputs, read here only): DETERMINISM_DIGEST_OUT=PATH
// writes "digest problem" lines of the lone results, for comparing two runs
// or two machines with diff.
//
// Without a CUDA device every test skips with the reason.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "kernels/deterministic_hints.h"
#include "kernels/gemm.h"
#include "service/exec/cuda_executor.h"
#include "tests/determinism_harness.h"

namespace gemm {
namespace {

std::string SkipReason() {
  if (CudaExecutor::DeviceCount() == 0) return "no CUDA device on this machine";
  return "";
}

bool OnHopper() {
  cudaDeviceProp prop;
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
}

std::unique_ptr<CudaExecutor> MakeExecutor(int device) {
  CudaExecutor::Options options;
  options.device = device;
  options.streams = 4;
  options.calibrate = false;
  auto ex = CudaExecutor::Create(options);
  EXPECT_TRUE(ex.ok()) << ex.status();
  return ex.ok() ? *std::move(ex) : nullptr;
}

test::DeterminismOptions GpuOptions(bool deterministic, bool grouped) {
  test::DeterminismOptions o;
  o.problems = 2000;
  o.seed = 33;
  o.max_dim = 768;
  o.max_skinny = 192;
  o.deep_k_min = 2048;
  o.deep_k_max = 12288;
  o.max_strided_partners = 3;
  o.max_group = 16;
  o.threads = 4;
  o.deterministic = deterministic;
  o.grouped_supported = grouped;
  return o;
}

void Print(const char* what, const test::DeterminismResult& r) {
  std::printf("%s: %d results compared, %d differ from their lone run, %d errors\n", what,
              r.compared, r.mismatched, r.errors);
  for (const auto& [phase, n] : r.by_phase) std::printf("  %-10s %d differ\n", phase.c_str(), n);
  for (const auto& [kind, n] : r.launch_kinds)
    std::printf("  launches %-16s %d\n", kind.c_str(), n);
  std::printf("  digest of the lone results %016llx\n",
              static_cast<unsigned long long>(r.digest));
  for (size_t i = 0; i < r.examples.size() && i < 8; ++i)
    std::printf("  e.g. %s\n", r.examples[i].c_str());
  std::fflush(stdout);
}

TEST(DeterminismGpuTest, ExecutorContract) {
  if (const std::string why = SkipReason(); !why.empty()) GTEST_SKIP() << why;
  auto ex = MakeExecutor(0);
  ASSERT_NE(ex, nullptr);
  const test::DeterminismOptions o = GpuOptions(true, ex->supports_grouped());
  const test::DeterminismResult r = test::RunDeterminismCheck(ex.get(), o);
  Print("deterministic, GPU 0", r);
  EXPECT_EQ(r.compared, 3 * o.problems);
  EXPECT_EQ(r.errors, 0);
  EXPECT_EQ(r.mismatched, 0);
  for (size_t i = 0; i < r.examples.size(); ++i) ADD_FAILURE() << r.examples[i];
  if (const char* path = std::getenv("DETERMINISM_DIGEST_OUT"); path != nullptr && *path) {
    EXPECT_TRUE(test::WriteDigests(r, path)) << path;
    std::printf("digests written to %s\n", path);
  }
  ex.reset();
  if (CudaExecutor::DeviceCount() < 2) {
    std::printf("one GPU: compare two runs' DETERMINISM_DIGEST_OUT files instead\n");
    return;
  }
  auto second = MakeExecutor(1);
  ASSERT_NE(second, nullptr);
  const test::DeterminismResult r1 = test::RunDeterminismCheck(second.get(), o);
  Print("deterministic, GPU 1", r1);
  EXPECT_EQ(r1.mismatched, 0);
  ASSERT_EQ(r1.problem_digests.size(), r.problem_digests.size());
  int differ = 0;
  for (size_t i = 0; i < r.problem_digests.size(); ++i)
    differ += r.problem_digests[i] != r1.problem_digests[i];
  EXPECT_EQ(differ, 0) << "problems whose bits differ between GPU 0 and GPU 1";
}

// Without the flag: the same phases, to show what the contract changes.
// Only errors fail it; differing bits are the default path's nature.
TEST(DeterminismGpuTest, DefaultPathControl) {
  if (const std::string why = SkipReason(); !why.empty()) GTEST_SKIP() << why;
  auto ex = MakeExecutor(0);
  ASSERT_NE(ex, nullptr);
  test::DeterminismOptions o = GpuOptions(false, ex->supports_grouped());
  o.problems = 600;
  const test::DeterminismResult r = test::RunDeterminismCheck(ex.get(), o);
  Print("default (not deterministic), GPU 0", r);
  EXPECT_EQ(r.compared, 3 * o.problems);
  EXPECT_EQ(r.errors, 0);
}

// --- TileShapeReport: the kernel API on device buffers.

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (bytes > 0 && cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Variant {
  const char* name;
  gemm_kernels::TileHint tile;
  gemm_kernels::ScheduleHint schedule;
};

constexpr Variant kVariants[] = {
    {"dp 128x256", gemm_kernels::TileHint::k128x256, gemm_kernels::ScheduleHint::kDataParallel},
    {"dp 128x128", gemm_kernels::TileHint::k128x128, gemm_kernels::ScheduleHint::kDataParallel},
    {"dp 128x128 pingpong", gemm_kernels::TileHint::k128x128PingPong,
     gemm_kernels::ScheduleHint::kDataParallel},
    {"dp 128x64", gemm_kernels::TileHint::k128x64, gemm_kernels::ScheduleHint::kDataParallel},
    {"dp 192x192", gemm_kernels::TileHint::k192x192, gemm_kernels::ScheduleHint::kDataParallel},
    {"stream-K 128x256", gemm_kernels::TileHint::k128x256, gemm_kernels::ScheduleHint::kStreamK},
    {"split-K 128x128", gemm_kernels::TileHint::k128x128, gemm_kernels::ScheduleHint::kSplitK},
    {"deterministic plan", gemm_kernels::TileHint::kAuto, gemm_kernels::ScheduleHint::kAuto},
};

// Runs one variant of `args` (device operands set) into args.d, then copies
// D out.
absl::Status RunVariant(gemm_kernels::GemmArguments args, const Variant& v, size_t d_bytes,
                        std::string* out, std::string* kernel) {
  // kAuto here stands for the deterministic plan, as the CUDA executor runs it.
  const bool deterministic = v.tile == gemm_kernels::TileHint::kAuto;
  const gemm_kernels::DeterministicHints h = gemm_kernels::DeterministicHintsFor(args);
  const gemm_kernels::TileHint tile = deterministic ? h.tile : v.tile;
  const gemm_kernels::ScheduleHint schedule = deterministic ? h.schedule : v.schedule;
  const size_t ws = deterministic ? 0 : gemm_kernels::Gemm::WorkspaceSize(args, tile, schedule);
  DeviceBuffer workspace(ws);
  if (ws > 0 && workspace.ptr == nullptr) return absl::ResourceExhaustedError("workspace");
  cudaMemset(const_cast<void*>(args.d.ptr), 0xff, d_bytes);
  gemm_kernels::Gemm gemm;
  absl::Status st = gemm.Initialize(args, workspace.ptr, tile, schedule);
  if (st.ok()) st = gemm.Run(nullptr);
  if (!st.ok()) return st;
  *kernel = gemm.kernel_name();
  out->resize(d_bytes);
  if (cudaMemcpy(out->data(), args.d.ptr, d_bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
    return absl::InternalError(cudaGetErrorString(cudaGetLastError()));
  return absl::OkStatus();
}

TEST(DeterminismGpuTest, TileShapeReport) {
  if (const std::string why = SkipReason(); !why.empty()) GTEST_SKIP() << why;
  if (!OnHopper()) GTEST_SKIP() << "the tile and schedule variants exist on compute capability 9.0";
  std::mt19937_64 rng(90);
  std::uniform_int_distribution<int64_t> dim(1, 1024), deep(2048, 8192), small(1, 256);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const DType dtypes[] = {DType::kBf16, DType::kFp16, DType::kFp32};
  constexpr int kPerDtype = 120;
  // differ[dtype][variant], runs[dtype][variant]
  std::map<std::string, std::map<std::string, std::pair<int, int>>> table;
  for (DType dt : dtypes) {
    for (int i = 0; i < kPerDtype; ++i) {
      const bool k_heavy = i % 3 == 0;
      const int64_t m = k_heavy ? small(rng) : dim(rng), n = k_heavy ? small(rng) : dim(rng);
      const int64_t k = k_heavy ? deep(rng) : dim(rng);
      const size_t es = SizeOf(dt);
      // K-major A (row-major) and B (column-major), which tf32 needs; the
      // leading dimensions padded to 16 bytes for TMA.
      const int64_t ld = (k * static_cast<int64_t>(es) + 15) / 16 * 16 / static_cast<int64_t>(es);
      std::vector<float> host(static_cast<size_t>(std::max(m, n) * ld));
      std::string a(m * ld * es, '\0'), b(n * ld * es, '\0');
      for (float& x : host) x = value(rng);
      FromFloat(dt, host.data(), a.data(), m * ld);
      for (float& x : host) x = value(rng);
      FromFloat(dt, host.data(), b.data(), n * ld);
      const size_t d_bytes = m * n * sizeof(float);
      DeviceBuffer da(a.size()), db(b.size()), dd(d_bytes);
      ASSERT_TRUE(da.ptr && db.ptr && dd.ptr);
      cudaMemcpy(da.ptr, a.data(), a.size(), cudaMemcpyHostToDevice);
      cudaMemcpy(db.ptr, b.data(), b.size(), cudaMemcpyHostToDevice);
      gemm_kernels::GemmArguments args;
      args.m = m;
      args.n = n;
      args.k = k;
      args.a = {da.ptr, dt, gemm_kernels::Layout::kRowMajor, ld, 0};
      args.b = {db.ptr, dt, gemm_kernels::Layout::kColMajor, ld, 0};
      args.d = {dd.ptr, DType::kFp32, gemm_kernels::Layout::kRowMajor, n, 0};
      args.c = args.d;
      args.allow_tf32 = dt == DType::kFp32;
      std::string base, out, kernel, again;
      ASSERT_TRUE(RunVariant(args, kVariants[0], d_bytes, &base, &kernel).ok());
      for (const Variant& v : kVariants) {
        const absl::Status st = RunVariant(args, v, d_bytes, &out, &kernel);
        ASSERT_TRUE(st.ok()) << v.name << ": " << st;
        auto& cell = table[DTypeName(dt)][v.name];
        cell.first += out != base;
        ++cell.second;
        if (v.tile == gemm_kernels::TileHint::kAuto) {
          // The deterministic plan reproduces its own bits.
          ASSERT_TRUE(RunVariant(args, v, d_bytes, &again, &kernel).ok());
          EXPECT_EQ(again, out) << m << "x" << n << "x" << k << " " << kernel;
        }
      }
    }
  }
  std::printf("Bitwise differences from data-parallel 128x256 (fp32 output, same inputs):\n");
  for (const auto& [dtype, row] : table)
    for (const auto& [variant, cell] : row)
      std::printf("  %-5s %-20s differs in %3d of %3d problems\n", dtype.c_str(),
                  variant.c_str(), cell.first, cell.second);
  std::printf("(a data-parallel tile that never differs means the tile alone does not change "
              "bits on this GPU; stream-K and split-K differ wherever they split K)\n");
  std::fflush(stdout);
}

}  // namespace
}  // namespace gemm
