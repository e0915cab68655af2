#include "client/matrix_view.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/fp8.h"
#include "common/reference_gemm.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

std::vector<float> Iota(size_t n, float start = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

std::vector<uint16_t> Convert(DType t, const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  FromFloat(t, v.data(), out.data(), v.size());
  return out;
}

TEST(MatrixViewTest, ShapesFromTransposes) {
  const std::vector<float> a = Iota(6), b = Iota(12);
  // op(A) = A^T is 3x2 from a stored 2x3; op(B) = B^T is 2x6 from a stored 6x2.
  ProblemOptions o;
  o.transpose_a = true;
  o.transpose_b = true;
  absl::StatusOr<v1::GemmProblem> p =
      MakeProblem(MatrixView(a.data(), 2, 3), MatrixView(b.data(), 6, 2), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->m(), 3u);
  EXPECT_EQ(p->k(), 2u);
  EXPECT_EQ(p->n(), 6u);
  EXPECT_TRUE(p->transpose_a());
  EXPECT_TRUE(p->transpose_b());
}

TEST(MatrixViewTest, BytesAreTheCallersBytesVerbatim) {
  const std::vector<float> a = Iota(6), b = Iota(12, -3.5f);
  ProblemOptions o;
  o.alpha = 0.5;
  o.output_layout = Layout::kColMajor;
  o.allow_tf32 = true;
  absl::StatusOr<v1::GemmProblem> p = MakeProblem(
      MatrixView(a.data(), 2, 3, Layout::kColMajor), MatrixView(b.data(), 3, 4), o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->a().data().size(), a.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(p->a().data().data(), a.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(p->b().data().data(), b.data(), b.size() * sizeof(float)), 0);
  EXPECT_EQ(p->a().layout(), v1::LAYOUT_COL_MAJOR);
  EXPECT_EQ(p->b().layout(), v1::LAYOUT_ROW_MAJOR);
  EXPECT_EQ(p->input_dtype(), v1::DATA_TYPE_FP32);
  EXPECT_EQ(p->output_dtype(), v1::DATA_TYPE_FP32);
  EXPECT_EQ(p->output_layout(), v1::LAYOUT_COL_MAJOR);
  EXPECT_TRUE(p->allow_tf32());
  EXPECT_DOUBLE_EQ(p->alpha(), 0.5);
  EXPECT_TRUE(p->has_beta());
  EXPECT_EQ(p->beta(), 0.0);
  EXPECT_FALSE(p->has_c());
}

TEST(MatrixViewTest, HalfTypesAndC) {
  const std::vector<uint16_t> a = Convert(DType::kBf16, Iota(4)), b = Convert(DType::kBf16, Iota(4));
  const std::vector<float> c = Iota(4);
  ProblemOptions o;
  o.output_dtype = DType::kFp32;
  o.beta = 2.0;
  o.c = MatrixView(c.data(), 2, 2);
  v1::GemmRequest request;
  ASSERT_TRUE(AddProblem(&request, MatrixView(a.data(), 2, 2, DType::kBf16),
                         MatrixView(b.data(), 2, 2, DType::kBf16), o)
                  .ok());
  ASSERT_EQ(request.problems_size(), 1);
  const v1::GemmProblem& p = request.problems(0);
  EXPECT_EQ(p.input_dtype(), v1::DATA_TYPE_BF16);
  EXPECT_EQ(p.output_dtype(), v1::DATA_TYPE_FP32);
  EXPECT_EQ(p.a().data().size(), 8u);
  EXPECT_EQ(p.c().data().size(), 16u);
}

TEST(MatrixViewTest, ValidationNamesTheOperand) {
  const std::vector<float> f = Iota(12);
  const std::vector<uint16_t> h(12);
  auto error = [](const absl::StatusOr<v1::GemmProblem>& p) {
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(p.status().message());
  };
  EXPECT_THAT(error(MakeProblem(MatrixView(static_cast<const float*>(nullptr), 2, 2),
                                MatrixView(f.data(), 2, 2))),
              HasSubstr("a: data is null"));
  EXPECT_THAT(error(MakeProblem(MatrixView(f.data(), 2, 2), MatrixView(f.data(), 0, 2))),
              HasSubstr("b: dimensions"));
  EXPECT_THAT(error(MakeProblem(MatrixView(f.data(), 1ull << 40, 1ull << 40),
                                MatrixView(f.data(), 2, 2))),
              HasSubstr("overflows"));
  EXPECT_THAT(error(MakeProblem(MatrixView(f.data(), 2, 3), MatrixView(f.data(), 2, 3))),
              HasSubstr("inner dimensions"));
  EXPECT_THAT(error(MakeProblem(MatrixView(f.data(), 2, 2),
                                MatrixView(h.data(), 2, 2, DType::kFp16))),
              HasSubstr("a is fp"));
  EXPECT_THAT(error(MakeProblem(MatrixView(h.data(), 2, 2, DType::kFp32),
                                MatrixView(h.data(), 2, 2, DType::kFp32))),
              HasSubstr("uint16_t"));

  ProblemOptions o;
  o.beta = 1.0;
  EXPECT_THAT(error(MakeProblem(MatrixView(f.data(), 2, 2), MatrixView(f.data(), 2, 3), o)),
              HasSubstr("c is required"));
  o.c = MatrixView(f.data(), 3, 2);
  EXPECT_THAT(error(MakeProblem(MatrixView(f.data(), 2, 2), MatrixView(f.data(), 2, 3), o)),
              HasSubstr("c is 3x2, expected 2x3"));
  o.c = MatrixView(h.data(), 2, 3, DType::kFp16);
  EXPECT_THAT(error(MakeProblem(MatrixView(f.data(), 2, 2), MatrixView(f.data(), 2, 3), o)),
              HasSubstr("output type"));
}

// Builds a problem from views, views it back and checks the reference
// product against a hand-computed one, covering layouts and transposes.
TEST(MatrixViewTest, ViewProblemRoundTrip) {
  // A (stored col-major 2x2) = [[1, 3], [2, 4]]; B^T stored row-major 2x2
  // [[5, 6], [7, 8]] so op(B) = [[5, 7], [6, 8]].
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, c = {1, 1, 1, 1};
  ProblemOptions o;
  o.transpose_b = true;
  o.alpha = 2.0;
  o.beta = -1.0;
  o.c = MatrixView(c.data(), 2, 2);
  absl::StatusOr<v1::GemmProblem> p = MakeProblem(
      MatrixView(a.data(), 2, 2, Layout::kColMajor), MatrixView(b.data(), 2, 2), o);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<GemmProblemRef> ref = ViewProblem(*p);
  ASSERT_TRUE(ref.ok()) << ref.status();
  // op(A) op(B) = [[1*5+3*6, 1*7+3*8], [2*5+4*6, 2*7+4*8]] = [[23, 31], [34, 46]].
  const std::vector<double> d = ReferenceGemm(*ref);
  EXPECT_EQ(d, (std::vector<double>{45, 61, 67, 91}));
}

TEST(MatrixViewTest, ViewProblemChecksBytes) {
  const std::vector<float> a = Iota(4);
  absl::StatusOr<v1::GemmProblem> p = MakeProblem(MatrixView(a.data(), 2, 2), MatrixView(a.data(), 2, 2));
  ASSERT_TRUE(p.ok());
  p->mutable_b()->mutable_data()->pop_back();
  EXPECT_THAT(std::string(ViewProblem(*p).status().message()), HasSubstr("b.data has 15 bytes"));
  p->set_input_dtype(v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_FALSE(ViewProblem(*p).ok());
}

v1::GemmResult MakeResult(DType t, Layout layout, uint64_t rows, uint64_t cols,
                          const std::vector<float>& values) {
  v1::GemmResult r;
  r.set_dtype(ToProto(t));
  r.set_layout(ToProto(layout));
  r.set_rows(rows);
  r.set_cols(cols);
  std::string bytes(values.size() * SizeOf(t), '\0');
  FromFloat(t, values.data(), bytes.data(), values.size());
  r.set_data(bytes);
  return r;
}

class ReadResultTest : public ::testing::TestWithParam<DType> {};

TEST_P(ReadResultTest, AllLayouts) {
  // Small integers are exact in every dtype.
  const std::vector<float> row_major = {1, 2, 3, 4, 5, 6};  // 2x3
  const std::vector<float> col_major = {1, 4, 2, 5, 3, 6};
  for (Layout stored : {Layout::kRowMajor, Layout::kColMajor}) {
    const v1::GemmResult r =
        MakeResult(GetParam(), stored, 2, 3, stored == Layout::kRowMajor ? row_major : col_major);
    absl::StatusOr<std::vector<float>> rm = ReadResult(r, Layout::kRowMajor);
    ASSERT_TRUE(rm.ok()) << rm.status();
    EXPECT_EQ(*rm, row_major);
    std::vector<float> cm(6);
    ASSERT_TRUE(ReadResult(r, cm.data(), cm.size(), Layout::kColMajor).ok());
    EXPECT_EQ(cm, col_major);
    std::vector<float> small(5);
    EXPECT_EQ(ReadResult(r, small.data(), small.size()).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_P(ReadResultTest, RoundsLikeTheDtype) {
  const std::vector<float> v = {1.0f / 3.0f};
  absl::StatusOr<std::vector<float>> out = ReadResult(MakeResult(GetParam(), Layout::kRowMajor, 1, 1, v));
  ASSERT_TRUE(out.ok());
  float expected = v[0];
  if (GetParam() == DType::kFp16) expected = HalfToFloat(FloatToHalf(v[0]));
  if (GetParam() == DType::kBf16) expected = Bf16ToFloat(FloatToBf16(v[0]));
  EXPECT_EQ((*out)[0], expected);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, ReadResultTest,
                         ::testing::Values(DType::kFp32, DType::kFp16, DType::kBf16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(ReadResultTest, RejectsBadResults) {
  v1::GemmResult r = MakeResult(DType::kFp16, Layout::kRowMajor, 2, 2, {1, 2, 3, 4});
  r.set_rows(3);
  EXPECT_EQ(ReadResult(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.set_rows(2);
  r.set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_EQ(ReadResult(r).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProtoEnumsTest, RoundTrip) {
  for (DType t : {DType::kFp32, DType::kFp16, DType::kBf16}) EXPECT_EQ(*FromProto(ToProto(t)), t);
  for (Layout l : {Layout::kRowMajor, Layout::kColMajor}) EXPECT_EQ(*FromProto(ToProto(l)), l);
  EXPECT_EQ(*FromProto(v1::LAYOUT_UNSPECIFIED), Layout::kRowMajor);
  EXPECT_FALSE(FromProto(v1::DATA_TYPE_UNSPECIFIED).ok());
  EXPECT_FALSE(FromProto(static_cast<v1::Layout>(7)).ok());
}


// FP8

QuantizedMatrix QuantizeOrDie(const MatrixView& v, const Fp8Quantization& how) {
  auto q = QuantizeToFp8(v, how);
  EXPECT_TRUE(q.ok()) << q.status();
  return q.ok() ? std::move(*q) : QuantizedMatrix{};
}

TEST(MatrixViewFp8Test, QuantizeToFp8FollowsTheServersRule) {
  const std::vector<float> x = {-896.0f, 1.0f, 0.5f, 448.0f};  // amax 896: scale 2
  auto q = QuantizeToFp8(MatrixView(x.data(), 2, 2),
                         {DType::kFp8E4m3, ScaleMode::kTensor, OperandRole::kA, false});
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->scales.size(), 1u);
  EXPECT_EQ(q->scales[0], 2.0f);
  EXPECT_EQ(q->codes[0], 0xfe);  // -448 * 2
  EXPECT_EQ(Fp8ToFloat(q->codes[1], DType::kFp8E4m3), 0.5f);
  EXPECT_EQ(Fp8ToFloat(q->codes[3], DType::kFp8E4m3), 224.0f);
  // bf16 sources quantize the same values.
  const std::vector<uint16_t> x16 = Convert(DType::kBf16, x);
  auto q16 = QuantizeToFp8(MatrixView(x16.data(), 2, 2, DType::kBf16),
                           {DType::kFp8E4m3, ScaleMode::kTensor, OperandRole::kA, false});
  ASSERT_TRUE(q16.ok());
  EXPECT_EQ(q16->codes, q->codes);
}

TEST(MatrixViewFp8Test, QuantizeToFp8RefusesNonFiniteAndNonFp8Formats) {
  std::vector<float> x(4 * 128, 1.0f);
  x[9] = std::numeric_limits<float>::infinity();
  auto q = QuantizeToFp8(MatrixView(x.data(), 4, 128),
                         {DType::kFp8E5m2, ScaleMode::kChannel, OperandRole::kA, false});
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(q.status().message()), HasSubstr("element 9"));
  x[9] = 1.0f;
  q = QuantizeToFp8(MatrixView(x.data(), 4, 128),
                    {DType::kBf16, ScaleMode::kTensor, OperandRole::kA, false});
  EXPECT_THAT(std::string(q.status().message()), HasSubstr("format"));
}

TEST(MatrixViewFp8Test, BlockScalesTakeAnyKWithAPartialLastBlock) {
  // A: 2 x 1000 (K = 1000): 2 x 8 scales, the eighth block 104 wide. B:
  // 1000 x 3: 8 x 1. As B, a 4 x 128 matrix has K = 4: one block.
  std::vector<float> a(2 * 1000, 1.0f), b(1000 * 3, 0.5f);
  a[999] = 4.0f;  // the partial block's amax in row 0
  const QuantizedMatrix qa = QuantizeOrDie(
      MatrixView(a.data(), 2, 1000), {DType::kFp8E4m3, ScaleMode::kBlock, OperandRole::kA, false});
  ASSERT_EQ(qa.scales.size(), 2u * 8);
  EXPECT_EQ(qa.scales[7], 4.0f / 448.0f);
  EXPECT_EQ(qa.scales[6], 1.0f / 448.0f);
  EXPECT_EQ(qa.scales[15], 1.0f / 448.0f);
  const QuantizedMatrix qb = QuantizeOrDie(
      MatrixView(b.data(), 1000, 3), {DType::kFp8E5m2, ScaleMode::kBlock, OperandRole::kB, false});
  EXPECT_EQ(qb.scales.size(), 8u);
  const std::vector<float> x(4 * 128, 1.0f);
  const QuantizedMatrix qx = QuantizeOrDie(
      MatrixView(x.data(), 4, 128), {DType::kFp8E5m2, ScaleMode::kBlock, OperandRole::kB, false});
  EXPECT_EQ(qx.scales.size(), 1u);

  ProblemOptions o;
  o.output_dtype = DType::kFp32;
  auto p = MakeProblem(qa.view(), qb.view(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->k(), 1000u);
  EXPECT_EQ(p->a().scales().data().size(), 2u * 8 * sizeof(float));
  EXPECT_EQ(p->b().scales().data().size(), 8u * sizeof(float));
  auto ref = ViewProblem(*p);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<double> d = ReferenceGemm(*ref);
  EXPECT_NEAR(d[0], (999 + 4) * 0.5, 1e-3);  // row 0 of A: 999 ones and a 4
  EXPECT_NEAR(d[3], 1000 * 0.5, 1e-3);
}

TEST(MatrixViewFp8Test, AddProblemCarriesScalesTypesAndTheOptIn) {
  const std::vector<float> a(8 * 128, 1.0f), b(128 * 3, 2.0f);
  const QuantizedMatrix qa = QuantizeOrDie(
      MatrixView(a.data(), 8, 128), {DType::kFp8E4m3, ScaleMode::kBlock, OperandRole::kA, false});
  const QuantizedMatrix qb = QuantizeOrDie(
      MatrixView(b.data(), 128, 3), {DType::kFp8E5m2, ScaleMode::kChannel, OperandRole::kB, false});
  ProblemOptions o;
  o.output_dtype = DType::kBf16;
  auto p = MakeProblem(qa.view(), qb.view(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->input_dtype(), v1::DATA_TYPE_FP8_E4M3);
  EXPECT_EQ(p->b_dtype(), v1::DATA_TYPE_FP8_E5M2);
  EXPECT_EQ(p->a().scales().mode(), v1::SCALE_MODE_BLOCK);
  EXPECT_EQ(p->a().scales().data().size(), 8u * 1 * sizeof(float));
  EXPECT_EQ(p->b().scales().data().size(), 3u * sizeof(float));
  EXPECT_EQ(p->a().data().size(), 8u * 128);
  // ViewProblem reads it back, scales included, and the reference is the
  // dequantized product: about 128 * 1 * 2 per element (scales are amax / FMT_MAX in fp32).
  auto ref = ViewProblem(*p);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<double> d = ReferenceGemm(*ref);
  EXPECT_NEAR(d[0], 256.0, 1e-3);

  // Output type required; the scale layout must fit the slot.
  o.output_dtype.reset();
  EXPECT_THAT(std::string(MakeProblem(qa.view(), qb.view(), o).status().message()),
              HasSubstr("output_dtype"));
  o.output_dtype = DType::kFp32;
  o.transpose_b = true;  // qb's channels are for B as stored, not transposed
  const std::vector<float> bt(3 * 128, 1.0f);
  const QuantizedMatrix qbt = QuantizeOrDie(
      MatrixView(bt.data(), 3, 128), {DType::kFp8E5m2, ScaleMode::kChannel, OperandRole::kB, false});
  EXPECT_THAT(std::string(MakeProblem(qa.view(), qbt.view(), o).status().message()),
              HasSubstr("laid out for operand b"));
  o.transpose_b = false;

  // A bf16 partner needs quantize_partner.
  const std::vector<uint16_t> b16 = Convert(DType::kBf16, b);
  const MatrixView vb16(b16.data(), 128, 3, DType::kBf16);
  EXPECT_THAT(std::string(MakeProblem(qa.view(), vb16, o).status().message()),
              HasSubstr("quantize_partner"));
  o.quantize_partner = true;
  auto partner = MakeProblem(qa.view(), vb16, o);
  ASSERT_TRUE(partner.ok()) << partner.status();
  EXPECT_TRUE(partner->quantize_partner());
  EXPECT_EQ(partner->b_dtype(), v1::DATA_TYPE_BF16);
  EXPECT_FALSE(partner->b().has_scales());
}

}  // namespace
}  // namespace gemm
