// The CPU backend's FP8 semantics: every format pair and scale mode (each
// operand's mode on its own), transposes and layouts, against the float64
// product of the dequantized operands; quantize_partner against the same
// product of the partner quantized by common/fp8.h; failures by field.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/fp8.h"
#include "common/reference_gemm.h"
#include "service/exec/cpu_executor.h"

namespace gemm {
namespace {

constexpr DType kFormats[] = {DType::kFp8E4m3, DType::kFp8E5m2};
constexpr ScaleMode kModes[] = {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock};

// An operand's storage: FP8 codes and scales, or bf16/fp32 bytes.
struct OwnedOperand {
  std::string bytes;
  std::vector<float> scales;
  MatrixRef ref;
};

// Random values in +-[2^-6, 2^6), quantized to `format` as operand `role`,
// stored rows x cols in `layout`.
OwnedOperand MakeFp8(DType format, ScaleMode mode, OperandRole role, bool transposed,
                        uint64_t rows, uint64_t cols, Layout layout, std::mt19937* rng) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> octave(-6, 6);
  std::vector<float> values(rows * cols);
  for (float& v : values) v = std::ldexp(unit(*rng), octave(*rng));
  OwnedOperand o;
  o.ref = MatrixRef{nullptr, rows, cols, layout, format};
  o.ref.scales = Fp8Scales{mode, role, transposed, nullptr, 0};
  o.scales.resize(ScaleCount(o.ref.fp8_operand()));
  o.bytes.resize(rows * cols);
  EXPECT_EQ(QuantizeFp8(values.data(), o.ref.fp8_operand(), format,
                        reinterpret_cast<uint8_t*>(o.bytes.data()), o.scales.data()),
            kQuantizeOk);
  o.ref.data = o.bytes.data();
  o.ref.scales.data = o.scales.data();
  o.ref.scales.count = o.scales.size();
  return o;
}

OwnedOperand PlainOperand(DType t, uint64_t rows, uint64_t cols, Layout layout,
                          std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> values(rows * cols);
  for (float& v : values) v = dist(*rng);
  OwnedOperand o;
  o.bytes.resize(rows * cols * SizeOf(t));
  FromFloat(t, values.data(), o.bytes.data(), values.size());
  o.ref = MatrixRef{o.bytes.data(), rows, cols, layout, t};
  return o;
}

GemmShape Shape(uint64_t m, uint64_t n, uint64_t k, DType a, DType b, DType out, bool ta,
                bool tb, Layout la, Layout lb, Layout ld) {
  GemmShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.input_dtype = a;
  s.input_dtype_b = b;
  s.output_dtype = out;
  s.transpose_a = ta;
  s.transpose_b = tb;
  s.layout_a = la;
  s.layout_b = lb;
  s.layout_d = ld;
  return s;
}

// Runs `p` into a NaN-poisoned D and returns its relative error against `ref`.
double RunAndCompare(GemmProblemRef p, const GemmProblemRef& reference) {
  std::string d(p.d_bytes(), '\xff');
  p.d = d.data();
  absl::StatusOr<absl::Duration> ran = RunCpuGemm(p);
  EXPECT_TRUE(ran.ok()) << ran.status();
  const GemmShape& s = p.shape;
  return RelativeError(ReadMatrix(MatrixRef{d.data(), s.m, s.n, s.layout_d, s.output_dtype}),
                       ReferenceGemm(reference));
}

TEST(CpuFp8Test, EveryFormatPairAndScaleModeMatchesTheDequantizedProduct) {
  std::mt19937 rng(11);
  const uint64_t m = 37, n = 150, k = 256;  // N spans a partial 128-wide block
  int checked = 0;
  for (DType fa : kFormats) {
    for (DType fb : kFormats) {
      for (ScaleMode ma : kModes) {
        for (ScaleMode mb : kModes) {
          const bool ta = (checked & 1) != 0, tb = (checked & 2) != 0;
          const Layout la = checked % 3 == 0 ? Layout::kColMajor : Layout::kRowMajor;
          const Layout lb = checked % 5 == 0 ? Layout::kColMajor : Layout::kRowMajor;
          const Layout ld = checked % 7 == 0 ? Layout::kColMajor : Layout::kRowMajor;
          const GemmShape s = Shape(m, n, k, fa, fb, DType::kFp32, ta, tb, la, lb, ld);
          OwnedOperand a = MakeFp8(fa, ma, OperandRole::kA, ta, s.a_rows(), s.a_cols(), la, &rng);
          OwnedOperand b = MakeFp8(fb, mb, OperandRole::kB, tb, s.b_rows(), s.b_cols(), lb, &rng);
          GemmProblemRef p;
          p.shape = s;
          p.alpha = 0.75;
          p.a = a.ref;
          p.b = b.ref;
          const double err = RunAndCompare(p, p);
          // Only fp32 accumulation and the fp32 rounding of code * scale err.
          EXPECT_LT(err, 1e-5) << DTypeName(fa) << "/" << ScaleModeName(ma) << " x "
                               << DTypeName(fb) << "/" << ScaleModeName(mb);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 36);
}

TEST(CpuFp8Test, BlockScalesWithRaggedKMatchTheDequantizedProduct) {
  // K % 128 != 0: ceil(K / 128) blocks along K, the last one partial; block
  // on both operands and beside tensor and channel scales.
  std::mt19937 rng(16);
  int checked = 0;
  for (uint64_t k : {1, 129, 1000}) {
    for (ScaleMode ma : kModes) {
      for (ScaleMode mb : kModes) {
        if (ma != ScaleMode::kBlock && mb != ScaleMode::kBlock) continue;
        const bool ta = (checked & 1) != 0, tb = (checked & 2) != 0;
        const Layout la = checked % 3 == 0 ? Layout::kColMajor : Layout::kRowMajor;
        const Layout lb = checked % 5 == 0 ? Layout::kColMajor : Layout::kRowMajor;
        const GemmShape s = Shape(19, 150, k, DType::kFp8E4m3, DType::kFp8E5m2, DType::kFp32, ta,
                                  tb, la, lb, Layout::kRowMajor);
        OwnedOperand a =
            MakeFp8(s.input_dtype, ma, OperandRole::kA, ta, s.a_rows(), s.a_cols(), la, &rng);
        OwnedOperand b =
            MakeFp8(s.b_dtype(), mb, OperandRole::kB, tb, s.b_rows(), s.b_cols(), lb, &rng);
        GemmProblemRef p;
        p.shape = s;
        p.a = a.ref;
        p.b = b.ref;
        EXPECT_LT(RunAndCompare(p, p), 1e-5) << "K " << k << " " << ScaleModeName(ma) << " x "
                                             << ScaleModeName(mb);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 15);
}

TEST(CpuFp8Test, ThePartialLastBlockTakesItsOwnScale) {
  // A 1 x 130 of e4m3 ones with block scales {2, 3}; B 130 x 1 ones with a
  // tensor scale of 1: D = 128 * 2 + 2 * 3.
  const GemmShape s = Shape(1, 1, 130, DType::kFp8E4m3, DType::kFp8E4m3, DType::kFp32, false,
                            false, Layout::kRowMajor, Layout::kRowMajor, Layout::kRowMajor);
  const std::string ones(130, '\x38');
  const std::vector<float> sa = {2.0f, 3.0f}, sb = {1.0f};
  GemmProblemRef p;
  p.shape = s;
  p.a = MatrixRef{ones.data(), 1, 130, Layout::kRowMajor, DType::kFp8E4m3};
  p.a.scales = Fp8Scales{ScaleMode::kBlock, OperandRole::kA, false, sa.data(), sa.size()};
  p.b = MatrixRef{ones.data(), 130, 1, Layout::kRowMajor, DType::kFp8E4m3};
  p.b.scales = Fp8Scales{ScaleMode::kTensor, OperandRole::kB, false, sb.data(), sb.size()};
  ASSERT_EQ(ScaleCount(p.a.fp8_operand()), 2u);
  float d = 0.0f;
  p.d = &d;
  ASSERT_TRUE(RunCpuGemm(p).ok());
  EXPECT_EQ(d, 262.0f);
}

TEST(CpuFp8Test, Bf16AndFp16OutputsAndBetaC) {
  std::mt19937 rng(12);
  for (DType out : {DType::kBf16, DType::kFp16}) {
    const GemmShape s = Shape(20, 30, 128, DType::kFp8E4m3, DType::kFp8E5m2, out, false, true,
                              Layout::kRowMajor, Layout::kRowMajor, Layout::kRowMajor);
    OwnedOperand a = MakeFp8(s.input_dtype, ScaleMode::kBlock, OperandRole::kA, false,
                                s.a_rows(), s.a_cols(), Layout::kRowMajor, &rng);
    OwnedOperand b = MakeFp8(s.b_dtype(), ScaleMode::kChannel, OperandRole::kB, true,
                                s.b_rows(), s.b_cols(), Layout::kRowMajor, &rng);
    OwnedOperand c = PlainOperand(out, s.m, s.n, Layout::kRowMajor, &rng);
    GemmProblemRef p;
    p.shape = s;
    p.beta = -0.5;
    p.a = a.ref;
    p.b = b.ref;
    p.c = c.ref;
    EXPECT_LT(RunAndCompare(p, p), Tolerance(s.input_dtype, out, false)) << DTypeName(out);
  }
}

// The partner, quantized by the rule of common/fp8.h as the problem's
// operand `role`: what the reference multiplies.
OwnedOperand QuantizedCopy(const OwnedOperand& plain, DType format, ScaleMode mode,
                           OperandRole role, bool transposed) {
  std::vector<float> values(plain.ref.elements());
  ToFloat(plain.ref.dtype, plain.ref.data, values.data(), values.size());
  OwnedOperand q;
  q.ref = plain.ref;
  q.ref.dtype = format;
  q.ref.scales = Fp8Scales{mode, role, transposed, nullptr, 0};
  q.scales.resize(ScaleCount(q.ref.fp8_operand()));
  q.bytes.resize(values.size());
  EXPECT_EQ(QuantizeFp8(values.data(), q.ref.fp8_operand(), format,
                        reinterpret_cast<uint8_t*>(q.bytes.data()), q.scales.data()),
            kQuantizeOk);
  q.ref.data = q.bytes.data();
  q.ref.scales.data = q.scales.data();
  q.ref.scales.count = q.scales.size();
  return q;
}

TEST(CpuFp8Test, QuantizePartnerQuantizesTheOtherOperandLikeItsFp8Partner) {
  std::mt19937 rng(13);
  for (ScaleMode mode : kModes) {
    for (DType partner : {DType::kBf16, DType::kFp32}) {
      for (bool partner_is_a : {false, true}) {
        const DType format = partner_is_a ? DType::kFp8E5m2 : DType::kFp8E4m3;
        // K ragged (a partial last block along K) for fp32 partners.
        const uint64_t k = partner == DType::kFp32 ? 300 : 256;
        const GemmShape s = Shape(40, 130, k, format, format, DType::kFp32, partner_is_a,
                                  !partner_is_a, Layout::kRowMajor, Layout::kColMajor,
                                  Layout::kRowMajor);
        OwnedOperand fp8 =
            partner_is_a
                ? MakeFp8(format, mode, OperandRole::kB, s.transpose_b, s.b_rows(), s.b_cols(),
                             s.layout_b, &rng)
                : MakeFp8(format, mode, OperandRole::kA, s.transpose_a, s.a_rows(), s.a_cols(),
                             s.layout_a, &rng);
        OwnedOperand plain =
            partner_is_a ? PlainOperand(partner, s.a_rows(), s.a_cols(), s.layout_a, &rng)
                         : PlainOperand(partner, s.b_rows(), s.b_cols(), s.layout_b, &rng);
        GemmProblemRef p;
        p.shape = s;
        p.a = partner_is_a ? plain.ref : fp8.ref;
        p.b = partner_is_a ? fp8.ref : plain.ref;
        p.quantize = partner_is_a ? GemmProblemRef::Quantize::kA : GemmProblemRef::Quantize::kB;
        p.quantize_mode = mode;
        const OwnedOperand q =
            partner_is_a ? QuantizedCopy(plain, format, mode, OperandRole::kA, s.transpose_a)
                         : QuantizedCopy(plain, format, mode, OperandRole::kB, s.transpose_b);
        GemmProblemRef reference = p;
        reference.quantize = GemmProblemRef::Quantize::kNone;
        (partner_is_a ? reference.a : reference.b) = q.ref;
        EXPECT_LT(RunAndCompare(p, reference), 1e-5)
            << ScaleModeName(mode) << " " << DTypeName(partner) << (partner_is_a ? " A" : " B");
        // And it is not the unquantized product: the quantization happened.
        GemmProblemRef unquantized = p;
        unquantized.quantize = GemmProblemRef::Quantize::kNone;
        EXPECT_GT(RunAndCompare(p, unquantized), 1e-4);
      }
    }
  }
}

TEST(CpuFp8Test, QuantizePartnerRefusesANaNNamingTheOperand) {
  std::mt19937 rng(14);
  const GemmShape s = Shape(4, 4, 8, DType::kFp8E4m3, DType::kFp8E4m3, DType::kFp32, false,
                            false, Layout::kRowMajor, Layout::kRowMajor, Layout::kRowMajor);
  OwnedOperand a = MakeFp8(s.input_dtype, ScaleMode::kTensor, OperandRole::kA, false, 4, 8,
                              Layout::kRowMajor, &rng);
  std::vector<float> b(32, 1.0f);
  b[5] = std::numeric_limits<float>::quiet_NaN();
  GemmProblemRef p;
  p.shape = s;
  p.a = a.ref;
  p.b = MatrixRef{b.data(), 8, 4, Layout::kRowMajor, DType::kFp32};
  p.quantize = GemmProblemRef::Quantize::kB;
  p.quantize_mode = ScaleMode::kTensor;
  std::string d(p.d_bytes(), '\0');
  p.d = d.data();
  absl::StatusOr<absl::Duration> ran = RunCpuGemm(p);
  EXPECT_EQ(ran.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ran.status().message().find("b.data"), absl::string_view::npos) << ran.status();
}

TEST(CpuFp8Test, TheSameProblemGivesTheSameBits) {
  std::mt19937 rng(15);
  const GemmShape s = Shape(64, 64, 384, DType::kFp8E4m3, DType::kFp8E4m3, DType::kFp32, false,
                            false, Layout::kRowMajor, Layout::kRowMajor, Layout::kRowMajor);
  OwnedOperand a = MakeFp8(s.input_dtype, ScaleMode::kBlock, OperandRole::kA, false, 64, 384,
                              Layout::kRowMajor, &rng);
  OwnedOperand b = MakeFp8(s.input_dtype, ScaleMode::kBlock, OperandRole::kB, false, 384, 64,
                              Layout::kRowMajor, &rng);
  GemmProblemRef p;
  p.shape = s;
  p.a = a.ref;
  p.b = b.ref;
  std::string d1(p.d_bytes(), '\0'), d2(p.d_bytes(), '\1');
  p.d = d1.data();
  ASSERT_TRUE(RunCpuGemm(p).ok());
  p.d = d2.data();
  ASSERT_TRUE(RunCpuGemm(p).ok());
  EXPECT_EQ(d1, d2);
  EXPECT_STREQ(CpuKernelName(s), "openblas_sgemm_fp8");
}

}  // namespace
}  // namespace gemm
