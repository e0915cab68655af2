// GPU correctness test of the launch API against a float64 CPU reference.
//
// Every case draws fresh random inputs, poisons D (and the padding around it)
// with 0xFF bytes, which decode to NaN in bf16, fp16 and fp32, and checks
//   ||D - ref||_F / ||ref||_F  <=  tolerance
// over every written element, that no element is NaN, and that no byte outside
// the logical matrices changed. Large cases check a random subset of rows
// (with every batch member) to bound the reference's CPU time.
//
// Without a usable CUDA device every test skips with the reason.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm.h"
#include "kernels/testing/host_types.h"
#include "kernels/testing/gpu_skip.h"

namespace gemm_kernels {
namespace {

using gemm_kernels::testing::DecodeElement;
using gemm_kernels::testing::EncodeElement;
using testing::Bf16ToFloat;
using testing::FloatToBf16;
using testing::FloatToHalf;
using testing::HalfToFloat;

bool IsHopper() {
  cudaDeviceProp prop;
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
}

#define CUDA_OK(expr)                                                        \
  do {                                                                       \
    const cudaError_t e_ = (expr);                                           \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);   \
  } while (0)

// Host image of one operand in its storage dtype, plus the decoded values.
struct HostMatrix {
  DataType dtype;
  Layout layout;
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0, batch = 1;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // decoded, same indexing as bytes

  size_t Elements() const { return bytes.size() / DataTypeSize(dtype); }
  int64_t Index(int64_t b, int64_t i, int64_t j) const {
    return b * batch_stride + (layout == Layout::kRowMajor ? i * ld + j : i + j * ld);
  }
};

// Allocation covering all batch members; `fill` random in [-1, 1] or 0xFF poison.
HostMatrix MakeMatrix(DataType dtype, Layout layout, int64_t rows, int64_t cols, int64_t pad,
                      int64_t batch, bool broadcast, bool random, std::mt19937_64& rng,
                      int64_t ld_residue = -1) {
  HostMatrix m;
  m.dtype = dtype;
  m.layout = layout;
  m.rows = rows;
  m.cols = cols;
  m.batch = batch;
  // pad > 0 (a multiple of 8) keeps every leading dimension and batch stride
  // a multiple of 16 bytes, as TMA needs; pad == 0 packs the matrix tightly.
  // ld_residue >= 0 instead sets the leading dimension to ld_residue modulo
  // 8 elements (off the 16-byte grid for 16-bit types unless 0).
  const int64_t min_ld = layout == Layout::kRowMajor ? cols : rows;
  m.ld = ld_residue >= 0 ? (min_ld + 7) / 8 * 8 + 8 + ld_residue
         : pad > 0       ? (min_ld + 7) / 8 * 8 + pad
                         : min_ld;
  const int64_t outer = layout == Layout::kRowMajor ? rows : cols;
  m.batch_stride = broadcast ? 0 : outer * m.ld + pad * 3;  // a gap between members too
  const int64_t members = broadcast ? 1 : batch;
  const int64_t elems = (members - 1) * m.batch_stride + outer * m.ld;
  const size_t es = DataTypeSize(dtype);
  m.bytes.assign(elems * es, 0xFF);
  m.values.assign(elems, NAN);
  if (random) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < elems; ++i) {
      EncodeElement(dtype, dist(rng), &m.bytes[i * es]);
      m.values[i] = DecodeElement(dtype, &m.bytes[i * es]);
    }
  }
  return m;
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(const std::vector<uint8_t>& host) {
    if (cudaMalloc(&ptr, std::max<size_t>(host.size(), 16)) == cudaSuccess)
      cudaMemcpy(ptr, host.data(), host.size(), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
};

struct Case {
  int64_t m, n, k, batch = 1;
  DataType in = DataType::kBf16, out = DataType::kBf16;
  Layout la = Layout::kRowMajor, lb = Layout::kColMajor, ld = Layout::kRowMajor;
  float alpha = 1.0f, beta = 0.0f;
  bool allow_tf32 = false;
  int64_t pad = 8;  // extra leading-dimension elements (0 = tight)
  bool broadcast_b = false;
  bool in_place = false;  // C aliases D
  TileHint hint = TileHint::kAuto;
  bool operand_copies = false;  // give Initialize its K-major copy workspace
  bool copy_unaligned = false;  // GemmArguments::copy_unaligned_operands
  int64_t ld_residue = -1;      // >= 0: every leading dimension this modulo 8

  std::string Describe() const {
    std::ostringstream os;
    auto L = [](Layout l) { return l == Layout::kRowMajor ? "R" : "C"; };
    os << m << "x" << n << "x" << k << " batch=" << batch << " " << DataTypeName(in) << "->"
       << DataTypeName(out) << " A" << L(la) << " B" << L(lb) << " D" << L(ld) << " alpha=" << alpha
       << " beta=" << beta << " tf32=" << allow_tf32 << (operand_copies ? "+copies" : "")
       << (copy_unaligned ? "+unaligned" : "") << " pad=" << pad
       << (ld_residue >= 0 ? " ld%8=" + std::to_string(ld_residue) : "")
       << (broadcast_b ? " bcastB" : "") << (in_place ? " inplace" : "")
       << (hint == TileHint::kAuto ? "" : " hint=") << (hint == TileHint::kAuto ? 0 : int(hint));
    return os.str();
  }
};

double Tolerance(const Case& c) {
  // Inputs enter the reference already rounded to their dtype, so what is left
  // is accumulation order, TF32 input truncation and output rounding.
  double tol = 1e-5;
  if (c.in != DataType::kFp32) tol = 1e-2;  // METHOD.md: bf16/fp16 operands
  if (c.in == DataType::kFp32 && c.allow_tf32) tol = 2e-3;  // wgmma truncates fp32 to tf32
  if (c.out == DataType::kBf16) tol = std::max(tol, 1e-2);
  if (c.out == DataType::kFp16) tol = std::max(tol, 2e-3);
  return tol;
}

// Which kernel family the case must reach on a Hopper GPU.
bool ExpectSm90(const Case& c, const HostMatrix& a, const HostMatrix& b) {
  const bool a_k = c.la == Layout::kRowMajor, b_k = c.lb == Layout::kColMajor;
  if (c.in == DataType::kFp32 && !(c.allow_tf32 && ((a_k && b_k) || c.operand_copies))) {
    return false;  // strict fp32, or a tf32 operand that is not K-major and no copy
  }
  const int64_t es = DataTypeSize(c.in);
  auto aligned = [&](const HostMatrix& m, bool copied) {
    return copied ||
           ((m.ld * es) % 16 == 0 && (c.batch == 1 || (m.batch_stride * es) % 16 == 0));
  };
  // TF32 operands that are not K-major or off the grid, and bf16/fp16
  // operands off the grid, are copied K-major and aligned.
  const bool copies = c.in == DataType::kFp32 && c.operand_copies;
  const bool half_copies = c.in != DataType::kFp32 && c.copy_unaligned && c.operand_copies;
  return aligned(a, copies || half_copies) && aligned(b, copies || half_copies);
}

void RunCase(const Case& c, std::mt19937_64& rng) {
  SCOPED_TRACE(c.Describe());
  HostMatrix a = MakeMatrix(c.in, c.la, c.m, c.k, c.pad, c.batch, false, true, rng, c.ld_residue);
  HostMatrix b =
      MakeMatrix(c.in, c.lb, c.k, c.n, c.pad, c.batch, c.broadcast_b, true, rng, c.ld_residue);
  HostMatrix d =
      MakeMatrix(c.out, c.ld, c.m, c.n, c.pad, c.batch, false, c.in_place, rng, c.ld_residue);
  HostMatrix cm =
      MakeMatrix(c.out, c.ld, c.m, c.n, c.pad, c.batch, false, c.beta != 0, rng, c.ld_residue);
  if (c.in_place) cm = d;
  const std::vector<uint8_t> d_before = d.bytes;

  DeviceBuffer da(a.bytes), db(b.bytes), dd(d.bytes), dc(cm.bytes);
  ASSERT_NE(da.ptr, nullptr);
  ASSERT_NE(db.ptr, nullptr);
  ASSERT_NE(dd.ptr, nullptr);
  ASSERT_NE(dc.ptr, nullptr);

  GemmArguments args;
  args.m = c.m;
  args.n = c.n;
  args.k = c.k;
  args.batch_count = c.batch;
  args.a = {da.ptr, a.dtype, a.layout, a.ld, a.batch_stride};
  args.b = {db.ptr, b.dtype, b.layout, b.ld, b.batch_stride};
  args.d = {dd.ptr, d.dtype, d.layout, d.ld, d.batch_stride};
  args.c = {c.in_place ? dd.ptr : dc.ptr, cm.dtype, cm.layout, cm.ld, cm.batch_stride};
  args.alpha = c.alpha;
  args.beta = c.beta;
  args.allow_tf32 = c.allow_tf32;
  args.copy_unaligned_operands = c.copy_unaligned;

  ASSERT_TRUE(Gemm::CanImplement(args).ok()) << Gemm::CanImplement(args);
  Gemm gemm;
  const size_t copy_bytes = c.operand_copies ? Gemm::OperandCopyBytes(args) : 0;
  DeviceBuffer copies(std::vector<uint8_t>(copy_bytes, 0xFF));  // poisoned
  const absl::Status init =
      gemm.Initialize(args, nullptr, c.hint, ScheduleHint::kAuto, copy_bytes ? copies.ptr : nullptr);
  ASSERT_TRUE(init.ok()) << init;
  if (IsHopper()) {
    EXPECT_EQ(gemm.kernel_kind() == KernelKind::kSm90TmaWgmma, ExpectSm90(c, a, b)) << gemm.kernel_name();
  }
  const absl::Status run = gemm.Run(nullptr);
  ASSERT_TRUE(run.ok()) << run;
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaMemcpy(d.bytes.data(), dd.ptr, d.bytes.size(), cudaMemcpyDeviceToHost));

  // Untouched bytes: everything outside the logical D matrices.
  const size_t es = DataTypeSize(c.out);
  std::vector<char> inside(d.Elements(), 0);
  for (int64_t bb = 0; bb < c.batch; ++bb)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) inside[d.Index(bb, i, j)] = 1;
  int64_t stray = 0;
  for (size_t e = 0; e < inside.size(); ++e) {
    if (!inside[e] && std::memcmp(&d.bytes[e * es], &d_before[e * es], es) != 0) ++stray;
  }
  EXPECT_EQ(stray, 0) << "elements outside D were written";

  // Reference rows: all when cheap, else a random subset (always rows 0 and m-1).
  const double macs = double(c.m) * c.n * c.k * c.batch;
  const double budget = 2e8;
  std::vector<int64_t> rows;
  if (macs <= budget) {
    for (int64_t i = 0; i < c.m; ++i) rows.push_back(i);
  } else {
    const int64_t want = std::max<int64_t>(2, int64_t(budget / (double(c.n) * c.k * c.batch)));
    std::uniform_int_distribution<int64_t> pick(0, c.m - 1);
    rows.push_back(0);
    rows.push_back(c.m - 1);
    for (int64_t t = 0; t < want; ++t) rows.push_back(pick(rng));
  }

  std::atomic<int64_t> nan_count{0};
  std::vector<double> err2(rows.size(), 0.0), ref2(rows.size(), 0.0);
  const int threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<double> arow(c.k);
      for (size_t r = t; r < rows.size(); r += threads) {
        const int64_t i = rows[r];
        for (int64_t bb = 0; bb < c.batch; ++bb) {
          for (int64_t kk = 0; kk < c.k; ++kk) arow[kk] = a.values[a.Index(bb, i, kk)];
          for (int64_t j = 0; j < c.n; ++j) {
            double acc = 0.0;
            for (int64_t kk = 0; kk < c.k; ++kk) acc += arow[kk] * b.values[b.Index(bb, kk, j)];
            double ref = double(c.alpha) * acc;
            if (c.beta != 0.0f) ref += double(c.beta) * cm.values[cm.Index(bb, i, j)];
            const double got = DecodeElement(c.out, &d.bytes[d.Index(bb, i, j) * es]);
            if (!std::isfinite(got)) {
              ++nan_count;
              continue;
            }
            err2[r] += (got - ref) * (got - ref);
            ref2[r] += ref * ref;
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  double e2 = 0, r2 = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    e2 += err2[r];
    r2 += ref2[r];
  }
  EXPECT_EQ(nan_count.load(), 0) << "non-finite outputs (unwritten or NaN)";
  const double rel = r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
  EXPECT_LE(rel, Tolerance(c)) << gemm.kernel_name();
  std::printf("  %-90s %-46s rel_err %.2e\n", c.Describe().c_str(), gemm.kernel_name().c_str(),
              rel);
}

class GemmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = testing::NoGpuReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
  std::mt19937_64 rng_{std::random_device{}()};
};

const Layout kLayouts[] = {Layout::kRowMajor, Layout::kColMajor};

TEST_F(GemmGpuTest, SizesLayoutsAnd16BitTypes) {
  for (int64_t s : {1, 7, 64, 127, 129, 1000}) {
    for (DataType in : {DataType::kBf16, DataType::kFp16}) {
      for (Layout la : kLayouts) {
        for (Layout lb : kLayouts) {
          for (Layout ld : kLayouts) {
            Case c{s, s, s};
            c.in = c.out = in;
            c.la = la;
            c.lb = lb;
            c.ld = ld;
            RunCase(c, rng_);
          }
        }
      }
    }
  }
}

TEST_F(GemmGpuTest, TightLeadingDimensionsFallBackToPortable) {
  for (int64_t s : {1, 7, 127, 129}) {
    for (Layout la : kLayouts) {
      for (Layout lb : kLayouts) {
        Case c{s, s + 2, s + 1};
        c.la = la;
        c.lb = lb;
        c.pad = 0;
        RunCase(c, rng_);
      }
    }
  }
}

TEST_F(GemmGpuTest, LargeRagged4097) {
  Case c{4097, 4097, 4097};
  RunCase(c, rng_);
  c.in = c.out = DataType::kFp16;
  c.la = Layout::kColMajor;
  c.lb = Layout::kRowMajor;
  RunCase(c, rng_);
  c.in = DataType::kFp32;
  c.out = DataType::kFp32;
  c.la = Layout::kRowMajor;
  c.lb = Layout::kColMajor;
  c.allow_tf32 = true;
  RunCase(c, rng_);
}

TEST_F(GemmGpuTest, OutputTypesAndAlphaBeta) {
  const std::pair<float, float> ab[] = {{1.0f, 0.0f}, {0.5f, -1.5f}, {-2.0f, 1.0f}, {0.0f, 1.0f}};
  for (DataType out : {DataType::kBf16, DataType::kFp16, DataType::kFp32}) {
    for (auto [alpha, beta] : ab) {
      Case c{200, 136, 300};
      c.out = out;
      c.alpha = alpha;
      c.beta = beta;
      c.lb = Layout::kRowMajor;
      RunCase(c, rng_);
    }
  }
  Case c{129, 257, 64};
  c.beta = 0.75f;
  c.in_place = true;
  RunCase(c, rng_);
}

TEST_F(GemmGpuTest, Tf32AndStrictFp32) {
  for (int64_t s : {1, 7, 129, 1000}) {
    for (bool tf32 : {true, false}) {
      for (Layout la : kLayouts) {
        for (Layout lb : kLayouts) {
          if (!tf32 && la != lb) continue;  // the strict path is one kernel; sample it
          Case c{s, s + 8, s};
          c.in = c.out = DataType::kFp32;
          c.allow_tf32 = tf32;
          c.la = la;
          c.lb = lb;
          c.beta = 0.5f;
          RunCase(c, rng_);
        }
      }
    }
  }
}

// TF32 with operands that are not K-major: copied into K-major order by the
// Gemm's own pass, then the Hopper kernel (every layout, ragged K, batches
// with a broadcast operand).
TEST_F(GemmGpuTest, Tf32AnyLayoutThroughOperandCopies) {
  for (int64_t s : {1, 7, 129, 1000}) {
    for (Layout la : kLayouts) {
      for (Layout lb : kLayouts) {
        for (Layout ld : kLayouts) {
          Case c{s, s + 8, s + 3};
          c.in = c.out = DataType::kFp32;
          c.allow_tf32 = true;
          c.operand_copies = true;
          c.la = la;
          c.lb = lb;
          c.ld = ld;
          c.beta = 0.5f;
          RunCase(c, rng_);
        }
      }
    }
  }
  for (bool broadcast : {false, true}) {
    Case c{65, 130, 97, 7};
    c.in = c.out = DataType::kFp32;
    c.allow_tf32 = true;
    c.operand_copies = true;
    c.la = Layout::kColMajor;
    c.lb = Layout::kRowMajor;
    c.broadcast_b = broadcast;
    RunCase(c, rng_);
  }
}

// fp32 (TF32 and strict) with every leading dimension (A, B, C and D) at
// each residue modulo 4 elements, in every layout, against the float64
// reference. TF32 operands that are not K-major or off the grid are copied
// K-major and aligned onto the Hopper kernel; strict fp32 runs on the SIMT
// kernel (RunCase checks which).
TEST_F(GemmGpuTest, Fp32AnyLeadingDimension) {
  for (bool tf32 : {true, false}) {
    for (int64_t residue = 0; residue < 4; ++residue) {
      for (Layout la : kLayouts) {
        for (Layout lb : kLayouts) {
          Case c{77, 130, 93};
          c.in = c.out = DataType::kFp32;
          c.allow_tf32 = tf32;
          c.operand_copies = true;
          c.ld_residue = residue;
          c.la = la;
          c.lb = lb;
          c.ld = (residue % 2 == 0) ? Layout::kRowMajor : Layout::kColMajor;
          c.beta = residue % 3 == 0 ? 0.5f : 0.0f;
          RunCase(c, rng_);
        }
      }
    }
  }
}

// bf16/fp16 with every leading dimension (A, B, C and D) at each residue
// modulo 8 elements, in every layout: operands off TMA's 16-byte grid are
// copied aligned and K-major (copy_unaligned_operands) and the problem runs
// on the Hopper kernel; C and D are read and written where they are.
TEST_F(GemmGpuTest, SixteenBitAnyLeadingDimensionThroughOperandCopies) {
  for (DataType t : {DataType::kBf16, DataType::kFp16}) {
    for (int64_t residue = 0; residue < 8; ++residue) {
      for (Layout la : kLayouts) {
        for (Layout lb : kLayouts) {
          Case c{77, 130, 93};
          c.in = c.out = t;
          c.copy_unaligned = true;
          c.operand_copies = true;
          c.ld_residue = residue;
          c.la = la;
          c.lb = lb;
          c.ld = (residue % 2 == 0) ? Layout::kRowMajor : Layout::kColMajor;
          c.beta = residue % 3 == 0 ? 0.5f : 0.0f;
          RunCase(c, rng_);
        }
      }
    }
  }
  // Batches (one operand broadcast), fp32 output, and shapes from the
  // issue's list scaled down.
  for (bool broadcast : {false, true}) {
    Case c{65, 130, 97, 5};
    c.copy_unaligned = true;
    c.operand_copies = true;
    c.ld_residue = 3;
    c.la = Layout::kColMajor;
    c.lb = Layout::kRowMajor;
    c.broadcast_b = broadcast;
    c.out = DataType::kFp32;
    RunCase(c, rng_);
  }
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{300, 500, 70},
                                std::array<int64_t, 3>{77, 4096, 1433},
                                std::array<int64_t, 3>{1000, 1000, 1000}}) {
    Case c{m, n, k};
    c.copy_unaligned = true;
    c.operand_copies = true;
    c.pad = 0;  // tight: ld = the extent itself
    c.la = c.lb = Layout::kColMajor;
    RunCase(c, rng_);
  }
}

// Copies priced at measured rates on the device (OperandCopiesPayOff
// decides; problem_test covers its arithmetic): at rates of the order an
// H100's calibration measures, a tiny ragged problem keeps the SIMT kernel
// and a large one is copied; unpriced, both are copied. Plans only: the
// pointers are never read.
TEST_F(GemmGpuTest, PricedCopiesLeaveTinyProblemsOnTheSimtKernel) {
  if (!IsHopper()) GTEST_SKIP() << "operand copies apply on Hopper (sm_90) only";
  auto ragged = [](int64_t m, int64_t n, int64_t k) {
    GemmArguments a;
    a.m = m;
    a.n = n;
    a.k = k;
    a.a = {reinterpret_cast<const void*>(0x100000), DataType::kBf16, Layout::kColMajor, m, 0};
    a.b = {reinterpret_cast<const void*>(0x200000), DataType::kBf16, Layout::kColMajor, k, 0};
    a.d = {reinterpret_cast<const void*>(0x300000), DataType::kFp32, Layout::kRowMajor,
           (n + 7) / 8 * 8, 0};
    a.copy_unaligned_operands = true;
    return a;
  };
  CopyPricing h100_like;
  h100_like.tensor_flops_per_s = 600e12;
  h100_like.simt_flops_per_s = 25e12;
  h100_like.device_copy_bytes_per_s = 3e12;
  h100_like.launch_seconds = 3e-6;
  for (auto [args, copied_when_priced] :
       {std::pair{ragged(3, 5, 7), false}, std::pair{ragged(3000, 5000, 700), true}}) {
    EXPECT_GT(Gemm::MakePlan(args).operand_copy_bytes(), 0u) << args.m << " unpriced";
    args.copy_pricing = h100_like;
    EXPECT_EQ(Gemm::MakePlan(args).operand_copy_bytes() > 0, copied_when_priced) << args.m;
    EXPECT_EQ(Gemm::OperandCopyBytes(args) > 0, copied_when_priced) << args.m;
  }
}

TEST_F(GemmGpuTest, StridedBatched) {
  struct B {
    int64_t batch, m, n, k;
  };
  for (B bt : {B{1, 128, 128, 128}, B{2, 129, 65, 200}, B{17, 64, 48, 40}, B{256, 16, 16, 16},
               B{1024, 8, 8, 8}, B{1024, 128, 128, 128}, B{64, 100, 300, 72}}) {
    for (Layout lb : kLayouts) {
      Case c{bt.m, bt.n, bt.k, bt.batch};
      c.lb = lb;
      c.beta = 0.25f;
      c.out = DataType::kFp32;
      RunCase(c, rng_);
    }
  }
  Case c{96, 80, 64, 33};
  c.broadcast_b = true;
  c.ld = Layout::kColMajor;
  RunCase(c, rng_);
}

// Every Hopper tile configuration, forced past the heuristic.
TEST_F(GemmGpuTest, ForcedTileConfigurations) {
  for (TileHint hint : {TileHint::k128x256, TileHint::k128x128, TileHint::k128x128PingPong,
                        TileHint::k128x64, TileHint::k192x192}) {
    for (DataType in : {DataType::kBf16, DataType::kFp16}) {
      for (Layout la : kLayouts) {
        for (Layout lb : kLayouts) {
          Case c{300, 200, 520, 3};
          c.in = in;
          c.out = in == DataType::kBf16 ? DataType::kFp32 : DataType::kFp16;
          c.la = la;
          c.lb = lb;
          c.hint = hint;
          RunCase(c, rng_);
          Case e{129, 7, 65};
          e.in = in;
          e.la = la;
          e.lb = lb;
          e.beta = -0.5f;
          e.hint = hint;
          RunCase(e, rng_);
        }
      }
    }
    // More tiles than SMs, so every CTA runs several tiles (both ping-pong
    // consumers, ring wrap-around across tiles).
    Case many{1024, 640, 200, 4};
    many.hint = hint;
    RunCase(many, rng_);
    Case small_k{128, 128, 64, 600};
    small_k.lb = Layout::kRowMajor;
    small_k.hint = hint;
    RunCase(small_k, rng_);
    Case t{256, 384, 1000, 5};  // full tiles: the wide-store path
    t.in = t.out = DataType::kFp32;
    t.allow_tf32 = true;
    t.hint = hint;
    RunCase(t, rng_);
    t.in = t.out = DataType::kBf16;
    t.allow_tf32 = false;
    RunCase(t, rng_);
    // beta != 0 on full, 16-byte aligned tiles: the wide path that reads C
    // (128-wide tiles; the 128 x 256 ones keep the pair path for C), every
    // output dtype, batched, and C aliasing D. M ragged by 3 rows: the row
    // predicates too.
    for (DataType out : {DataType::kBf16, DataType::kFp16, DataType::kFp32}) {
      for (bool in_place : {false, true}) {
        Case w{253, 384, 200, 3};
        w.out = out;
        w.alpha = 0.75f;
        w.beta = -1.25f;
        w.in_place = in_place;
        w.hint = hint;
        RunCase(w, rng_);
      }
    }
  }
}

TEST_F(GemmGpuTest, RandomShapes) {
  std::uniform_int_distribution<int64_t> ext(1, 700), bat(1, 6), pick(0, 1), pad(0, 3);
  const DataType types[] = {DataType::kBf16, DataType::kFp16, DataType::kFp32};
  for (int t = 0; t < 40; ++t) {
    Case c{ext(rng_), ext(rng_), ext(rng_), bat(rng_)};
    c.in = types[std::uniform_int_distribution<int>(0, 2)(rng_)];
    c.out = types[std::uniform_int_distribution<int>(0, 2)(rng_)];
    c.allow_tf32 = pick(rng_);
    c.la = kLayouts[pick(rng_)];
    c.lb = kLayouts[pick(rng_)];
    c.ld = kLayouts[pick(rng_)];
    c.pad = 8 * pad(rng_);
    c.alpha = std::uniform_real_distribution<float>(-2, 2)(rng_);
    c.beta = pick(rng_) ? std::uniform_real_distribution<float>(-2, 2)(rng_) : 0.0f;
    c.hint = static_cast<TileHint>(std::uniform_int_distribution<int>(0, 5)(rng_));
    RunCase(c, rng_);
  }
}

}  // namespace
}  // namespace gemm_kernels
