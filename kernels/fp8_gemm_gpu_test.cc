// GPU correctness test of FP8 GEMMs through the launch API against a float64
// reference of the dequantized operands.
//
// Each case draws random data, quantizes it per the FP8 contract (per group
// of its scale mode: amax / max, round to nearest even), poisons D and the
// padding around it with 0xFF bytes (NaN in every output dtype), runs the
// GEMM and checks ||D - ref||_F / ||ref||_F against a tolerance, that no
// written element is NaN, and that no padding byte changed. Large cases
// check a random subset of rows. Without a Hopper GPU every test skips with
// the reason.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm.h"
#include "kernels/testing/fp8_host.h"
#include "kernels/testing/host_types.h"
#include "kernels/testing/gpu_skip.h"

namespace gemm_kernels {
namespace {

using gemm_kernels::testing::DecodeElement;
using gemm_kernels::testing::EncodeElement;
using testing::Bf16ToFloat;
using testing::FloatToBf16;
using testing::FloatToFp8;
using testing::FloatToHalf;
using testing::Fp8Max;
using testing::Fp8Scale;
using testing::Fp8ToFloat;
using testing::HalfToFloat;

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

struct Case {
  int64_t m = 256, n = 256, k = 256, batch = 1;
  DataType a = DataType::kFp8E4m3, b = DataType::kFp8E4m3;
  ScaleMode sa = ScaleMode::kTensor, sb = ScaleMode::kTensor;
  DataType out = DataType::kBf16;
  Layout d_layout = Layout::kRowMajor;
  // Row pitch of A and B along K in elements (bytes): 0 is k; a larger one
  // puts K off TMA's 16-byte grid (K = 1000, 129, 1) on it, the padding
  // filled with NaN codes that must not be read.
  int64_t ld_k = 0;
  // Stored layouts of A and B: K-major (row-major A, column-major B) runs in
  // place; the others, and K off the 16-byte grid, run from K-major copies.
  Layout a_layout = Layout::kRowMajor, b_layout = Layout::kColMajor;
  float alpha = 1.0f, beta = 0.0f;
  TileHint hint = TileHint::kAuto;
  int check_rows = 0;  // 0: every row
};

std::string Describe(const Case& c) {
  std::ostringstream os;
  os << c.m << "x" << c.n << "x" << c.k << " batch " << c.batch << " " << DataTypeName(c.a) << "x"
     << DataTypeName(c.b) << " scales " << ScaleModeName(c.sa) << "/" << ScaleModeName(c.sb)
     << " out " << DataTypeName(c.out) << (c.d_layout == Layout::kColMajor ? " colmajor-D" : "")
     << " beta " << c.beta << (c.a_layout == Layout::kColMajor ? " colmajor-A" : "")
     << (c.b_layout == Layout::kRowMajor ? " rowmajor-B" : "");
  return os.str();
}

// The group an element of an operand belongs to under `mode` (for one batch
// member): its index in the scale layout of gemm.h (ceil(k / 128) blocks
// along K, the last one partial).
int64_t GroupOf(ScaleMode mode, bool is_a, int64_t i_or_j, int64_t kk, int64_t k, int64_t n) {
  const int64_t kb = kk / 128, k_blocks = (k + 127) / 128, n_blocks = (n + 127) / 128;
  switch (mode) {
    case ScaleMode::kTensor:
      return 0;
    case ScaleMode::kChannel:
      return i_or_j;
    case ScaleMode::kBlock:
      return is_a ? i_or_j * k_blocks + kb : kb * n_blocks + i_or_j / 128;
    case ScaleMode::kNone:
      break;
  }
  return 0;
}

// One FP8 operand: `rows` x k (A: i x kk; B: j x kk), K contiguous (row-major
// A, column-major B), quantized per group. values[] holds the dequantized
// numbers in the same indexing.
struct Operand {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<double> values;
};

Operand Quantize(std::mt19937& rng, bool e4m3, ScaleMode mode, bool is_a, int64_t rows,
                 int64_t k, int64_t n_for_blocks, int64_t batch, int64_t groups) {
  Operand op;
  const size_t count = static_cast<size_t>(batch * rows * k);
  std::vector<float> x(count);
  // Groups of different magnitude, so a scale applied to the wrong group shows.
  std::uniform_real_distribution<float> mag(0.25f, 4.0f);
  std::vector<float> group_mag(static_cast<size_t>(batch * groups));
  for (float& g : group_mag) g = mag(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  op.scales.assign(static_cast<size_t>(batch * groups), 0.0f);
  std::vector<int64_t> group(count);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t kk = 0; kk < k; ++kk) {
        const size_t idx = static_cast<size_t>((b * rows + r) * k + kk);
        const int64_t g = b * groups + GroupOf(mode, is_a, r, kk, k, n_for_blocks);
        group[idx] = g;
        x[idx] = normal(rng) * group_mag[static_cast<size_t>(g)];
        op.scales[static_cast<size_t>(g)] =
            std::max(op.scales[static_cast<size_t>(g)], std::fabs(x[idx]));
      }
    }
  }
  for (float& s : op.scales) s = Fp8Scale(s, e4m3);
  op.codes.resize(count);
  op.values.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const float s = op.scales[static_cast<size_t>(group[i])];
    op.codes[i] = FloatToFp8(x[i] / s, e4m3);
    op.values[i] = static_cast<double>(Fp8ToFloat(op.codes[i], e4m3)) * s;
  }
  return op;
}

double Tolerance(DataType out) {
  // The output's rounding (bf16 2^-9, fp16 2^-12 relative per element) over
  // fp32 accumulation of K products.
  return out == DataType::kBf16 ? 6e-3 : out == DataType::kFp16 ? 1.5e-3 : 5e-4;
}

class Fp8GemmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = testing::NoHopperReason("the FP8 kernel");
    if (!why.empty()) GTEST_SKIP() << why;
  }

  void Run(const Case& c) {
    SCOPED_TRACE(Describe(c));
    std::mt19937 rng(static_cast<uint32_t>(c.m * 131 + c.n * 31 + c.k * 7 + c.batch));
    const bool a4 = c.a == DataType::kFp8E4m3, b4 = c.b == DataType::kFp8E4m3;
    GemmArguments args;
    args.m = c.m;
    args.n = c.n;
    args.k = c.k;
    args.batch_count = c.batch;
    args.alpha = c.alpha;
    args.beta = c.beta;
    const int64_t ld = c.ld_k > 0 ? c.ld_k : c.k;  // K-major operands' row pitch
    const bool a_kmajor = c.a_layout == Layout::kRowMajor;
    const bool b_kmajor = c.b_layout == Layout::kColMajor;
    args.a = {nullptr, c.a, c.a_layout, a_kmajor ? ld : c.m, a_kmajor ? c.m * ld : c.m * c.k};
    args.b = {nullptr, c.b, c.b_layout, b_kmajor ? ld : c.n, b_kmajor ? c.n * ld : c.n * c.k};
    args.a_scale.mode = c.sa;
    args.b_scale.mode = c.sb;
    const int64_t a_groups = Gemm::ScaleCount(args, args.a_scale, true);
    const int64_t b_groups = Gemm::ScaleCount(args, args.b_scale, false);
    const Operand a = Quantize(rng, a4, c.sa, true, c.m, c.k, c.n, c.batch, a_groups);
    const Operand b = Quantize(rng, b4, c.sb, false, c.n, c.k, c.n, c.batch, b_groups);
    // D (and C) with a padded leading dimension, so stray writes show.
    const bool row_d = c.d_layout == Layout::kRowMajor;
    const int64_t inner = row_d ? c.n : c.m, outer = row_d ? c.m : c.n;
    const int64_t ldd = inner + 8;
    const int64_t d_member = outer * ldd;
    const size_t os = DataTypeSize(c.out);
    const size_t d_bytes = static_cast<size_t>(c.batch * d_member) * os;
    std::vector<uint8_t> c_host(d_bytes);
    std::uniform_real_distribution<float> cu(-2.0f, 2.0f);
    for (size_t i = 0; i < d_bytes / os; ++i) EncodeElement(c.out, cu(rng), &c_host[i * os]);

    // Codes in their stored layouts: K-major ones at row pitch ld, the
    // padding NaN (0x7f in both formats); the others with (r, kk) of member
    // bb at kk * rows + r.
    auto stored = [&c, ld](const std::vector<uint8_t>& codes, int64_t rows, bool k_major) {
      if (k_major) {
        if (ld == c.k) return codes;
        std::vector<uint8_t> out(static_cast<size_t>(c.batch * rows * ld), 0x7f);
        for (int64_t r = 0; r < c.batch * rows; ++r)
          std::memcpy(&out[static_cast<size_t>(r * ld)], &codes[static_cast<size_t>(r * c.k)],
                      static_cast<size_t>(c.k));
        return out;
      }
      std::vector<uint8_t> out(codes.size());
      for (int64_t bb = 0; bb < c.batch; ++bb)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t kk = 0; kk < c.k; ++kk)
            out[static_cast<size_t>(bb * rows * c.k + kk * rows + r)] =
                codes[static_cast<size_t>((bb * rows + r) * c.k + kk)];
      return out;
    };
    const std::vector<uint8_t> a_stored = stored(a.codes, c.m, a_kmajor);
    const std::vector<uint8_t> b_stored = stored(b.codes, c.n, b_kmajor);
    void *da, *db, *dsa, *dsb, *dd, *dc = nullptr, *copies = nullptr;
    CUDA_OK(cudaMalloc(&da, a_stored.size()));
    CUDA_OK(cudaMalloc(&db, b_stored.size()));
    CUDA_OK(cudaMalloc(&dsa, a.scales.size() * 4));
    CUDA_OK(cudaMalloc(&dsb, b.scales.size() * 4));
    CUDA_OK(cudaMalloc(&dd, d_bytes));
    CUDA_OK(cudaMemcpy(da, a_stored.data(), a_stored.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db, b_stored.data(), b_stored.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dsa, a.scales.data(), a.scales.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dsb, b.scales.data(), b.scales.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dd, 0xFF, d_bytes));
    if (c.beta != 0.0f) {
      CUDA_OK(cudaMalloc(&dc, d_bytes));
      CUDA_OK(cudaMemcpy(dc, c_host.data(), d_bytes, cudaMemcpyHostToDevice));
    }
    args.a.ptr = da;
    args.b.ptr = db;
    args.a_scale.ptr = static_cast<const float*>(dsa);
    args.b_scale.ptr = static_cast<const float*>(dsb);
    args.d = {dd, c.out, c.d_layout, ldd, d_member};
    args.c = {dc, c.out, c.d_layout, ldd, d_member};

    const size_t copy_bytes = Gemm::OperandCopyBytes(args);
    const bool off_grid = ld % 16 != 0 || (c.batch > 1 && (c.m * ld % 16 != 0 || c.n * ld % 16 != 0));
    EXPECT_EQ(copy_bytes > 0, !a_kmajor || !b_kmajor || off_grid);
    if (copy_bytes > 0) CUDA_OK(cudaMalloc(&copies, copy_bytes));
    Gemm gemm;
    const absl::Status st = gemm.Initialize(args, nullptr, c.hint, ScheduleHint::kAuto, copies);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(gemm.Run(nullptr).ok());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint8_t> d_host(d_bytes);
    CUDA_OK(cudaMemcpy(d_host.data(), dd, d_bytes, cudaMemcpyDeviceToHost));
    cudaFree(da);
    cudaFree(db);
    cudaFree(dsa);
    cudaFree(dsb);
    cudaFree(dd);
    if (dc) cudaFree(dc);
    if (copies) cudaFree(copies);

    // Padding untouched.
    for (int64_t bb = 0; bb < c.batch; ++bb)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t x = inner; x < ldd; ++x) {
          const size_t at = static_cast<size_t>(bb * d_member + o * ldd + x) * os;
          for (size_t q = 0; q < os; ++q) ASSERT_EQ(d_host[at + q], 0xFF) << "stray write";
        }
    std::vector<int64_t> rows;
    if (c.check_rows == 0 || c.check_rows >= c.m) {
      for (int64_t i = 0; i < c.m; ++i) rows.push_back(i);
    } else {
      std::uniform_int_distribution<int64_t> pick(0, c.m - 1);
      rows.push_back(0);
      rows.push_back(c.m - 1);
      while (static_cast<int>(rows.size()) < c.check_rows) rows.push_back(pick(rng));
    }
    double err2 = 0, ref2 = 0;
    for (int64_t bb = 0; bb < c.batch; ++bb) {
      for (int64_t i : rows) {
        const double* ar = &a.values[static_cast<size_t>((bb * c.m + i) * c.k)];
        for (int64_t j = 0; j < c.n; ++j) {
          const double* bc = &b.values[static_cast<size_t>((bb * c.n + j) * c.k)];
          double acc = 0;
          for (int64_t kk = 0; kk < c.k; ++kk) acc += ar[kk] * bc[kk];
          const size_t at =
              static_cast<size_t>(bb * d_member + (row_d ? i * ldd + j : j * ldd + i)) * os;
          double ref = c.alpha * acc;
          if (c.beta != 0.0f) ref += c.beta * DecodeElement(c.out, &c_host[at]);
          const float got = DecodeElement(c.out, &d_host[at]);
          ASSERT_FALSE(std::isnan(got)) << "D(" << bb << ", " << i << ", " << j << ") not written";
          err2 += (got - ref) * (got - ref);
          ref2 += ref * ref;
        }
      }
    }
    const double rel = std::sqrt(err2 / std::max(ref2, 1e-300));
    EXPECT_LE(rel, Tolerance(c.out)) << gemm.kernel_name();
    RecordProperty("kernel", gemm.kernel_name());
  }
};

TEST_F(Fp8GemmGpuTest, EveryFormatPair) {
  for (DataType fa : {DataType::kFp8E4m3, DataType::kFp8E5m2})
    for (DataType fb : {DataType::kFp8E4m3, DataType::kFp8E5m2})
      for (TileHint hint : {TileHint::k128x256, TileHint::k128x128}) {
        Case c;
        c.m = 200;
        c.n = 300;
        c.k = 384;
        c.a = fa;
        c.b = fb;
        c.hint = hint;
        Run(c);
      }
}

TEST_F(Fp8GemmGpuTest, EveryScaleModePair) {
  const ScaleMode modes[] = {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock};
  for (ScaleMode sa : modes)
    for (ScaleMode sb : modes) {
      Case c;
      c.m = 333;
      c.n = 271;
      c.k = 512;
      c.sa = sa;
      c.sb = sb;
      c.out = DataType::kFp32;
      Run(c);
    }
}

TEST_F(Fp8GemmGpuTest, OutputsWithBeta) {
  for (DataType out : {DataType::kBf16, DataType::kFp16, DataType::kFp32})
    for (ScaleMode s : {ScaleMode::kChannel, ScaleMode::kBlock}) {
      Case c;
      c.m = 256;
      c.n = 384;
      c.k = 640;
      c.sa = s;
      c.sb = s;
      c.out = out;
      c.alpha = 0.75f;
      c.beta = -0.5f;
      Run(c);
    }
}

TEST_F(Fp8GemmGpuTest, OddShapesAndKTails) {
  // K tails (K % 128 != 0, multiples of 16 bytes for TMA) with tensor and
  // channel scales; single rows and columns.
  const int64_t shapes[][3] = {{1, 1, 16}, {1, 257, 48}, {129, 1, 208}, {77, 130, 1008},
                               {255, 513, 144}, {1024, 8, 4096}};
  for (const auto& s : shapes)
    for (ScaleMode mode : {ScaleMode::kTensor, ScaleMode::kChannel}) {
      Case c;
      c.m = s[0];
      c.n = s[1];
      c.k = s[2];
      c.sa = mode;
      c.sb = mode;
      c.out = DataType::kFp32;
      Run(c);
    }
}

TEST_F(Fp8GemmGpuTest, BlockScalesWithRaggedK) {
  // K % 128 != 0 with block scales: ceil(K / 128) blocks along K, the last
  // one partial (its scale from its real elements' amax, the K tail
  // zero-padded by the kernel); block on both operands and beside tensor
  // and channel scales. Rows padded to 16 bytes where K is off the grid.
  const int64_t ks[] = {1000, 1, 129, 4000};
  const std::pair<ScaleMode, ScaleMode> modes[] = {
      {ScaleMode::kBlock, ScaleMode::kBlock},   {ScaleMode::kBlock, ScaleMode::kTensor},
      {ScaleMode::kBlock, ScaleMode::kChannel}, {ScaleMode::kTensor, ScaleMode::kBlock},
      {ScaleMode::kChannel, ScaleMode::kBlock}};
  for (int64_t k : ks)
    for (const auto& [sa, sb] : modes) {
      Case c;
      c.m = 200;
      c.n = 300;
      c.k = k;
      c.ld_k = (k + 15) / 16 * 16;
      c.sa = sa;
      c.sb = sb;
      c.out = DataType::kFp32;
      Run(c);
    }
}

TEST_F(Fp8GemmGpuTest, BlockScalesWithRaggedKBatchedWithBeta) {
  for (int64_t k : {1000, 4000}) {
    Case c;
    c.m = 130;
    c.n = 260;
    c.k = k;
    c.ld_k = (k + 15) / 16 * 16;
    c.batch = 3;
    c.a = DataType::kFp8E5m2;
    c.sa = ScaleMode::kBlock;
    c.sb = ScaleMode::kBlock;
    c.out = DataType::kBf16;
    c.alpha = 0.75f;
    c.beta = -0.5f;
    Run(c);
  }
}

TEST_F(Fp8GemmGpuTest, OperandsThatAreNotKMajorOrOffTheGridRunFromCopies) {
  // Every stored layout of A and B, K on and off the 16-byte grid, batched
  // with a column-major D (which exchanges the operands), every scale mode.
  const int64_t ks[] = {1000, 256, 33};
  for (int64_t k : ks)
    for (Layout la : {Layout::kRowMajor, Layout::kColMajor})
      for (Layout lb : {Layout::kColMajor, Layout::kRowMajor}) {
        Case c;
        c.m = 197;
        c.n = 301;
        c.k = k;
        c.a_layout = la;
        c.b_layout = lb;
        c.sa = ScaleMode::kChannel;
        c.sb = ScaleMode::kTensor;
        c.out = DataType::kFp32;
        Run(c);
        c.batch = 3;
        c.d_layout = Layout::kColMajor;
        c.a = DataType::kFp8E5m2;
        c.sa = ScaleMode::kTensor;
        c.sb = ScaleMode::kChannel;
        c.out = DataType::kBf16;
        Run(c);
      }
  Case c;  // block scales with a non-K-major B and a whole number of K-blocks
  c.m = 130;
  c.n = 260;
  c.k = 512;
  c.b_layout = Layout::kRowMajor;
  c.sa = ScaleMode::kBlock;
  c.sb = ScaleMode::kBlock;
  Run(c);
}

TEST_F(Fp8GemmGpuTest, ColumnMajorDSwapsTheScales) {
  Case c;
  c.m = 300;
  c.n = 200;
  c.k = 256;
  c.a = DataType::kFp8E4m3;
  c.b = DataType::kFp8E5m2;
  c.sa = ScaleMode::kChannel;
  c.sb = ScaleMode::kTensor;
  c.d_layout = Layout::kColMajor;
  c.out = DataType::kFp16;
  Run(c);
  c.sa = ScaleMode::kTensor;
  c.sb = ScaleMode::kChannel;
  Run(c);
}

TEST_F(Fp8GemmGpuTest, Batched) {
  for (ScaleMode s : {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock}) {
    Case c;
    c.m = 130;
    c.n = 260;
    c.k = 384;
    c.batch = 3;
    c.sa = s;
    c.sb = s;
    c.out = DataType::kBf16;
    Run(c);
  }
}

TEST_F(Fp8GemmGpuTest, LargeWithLongK) {
  // The heuristic's tiles and promotion over long K; a subset of rows.
  for (ScaleMode s : {ScaleMode::kTensor, ScaleMode::kBlock}) {
    Case c;
    c.m = 2048;
    c.n = 2048;
    c.k = 8192;
    c.sa = s;
    c.sb = s;
    c.out = DataType::kFp32;
    c.check_rows = 24;
    Run(c);
  }
}

}  // namespace
}  // namespace gemm_kernels
