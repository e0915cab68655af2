// Validation of FP8 problems and of quantize-on-register requests: every
// rule of the gemm.v1 FP8 fields, each refusal naming its field.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/proto_enums.h"
#include "service/rpc/request_validation.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

std::string Floats(const std::vector<float>& v) {
  std::string s(v.size() * sizeof(float), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

void SetScales(v1::Matrix* m, v1::ScaleMode mode, uint64_t count, float value = 0.5f) {
  m->mutable_scales()->set_mode(mode);
  m->mutable_scales()->set_data(Floats(std::vector<float>(count, value)));
}

// An FP8 problem: op(A) m x k e4m3, op(B) k x n e5m2, tensor scales, fp32 out.
v1::GemmProblem Fp8Problem(uint64_t m = 3, uint64_t n = 5, uint64_t k = 128) {
  v1::GemmProblem p;
  p.set_m(m);
  p.set_n(n);
  p.set_k(k);
  p.set_input_dtype(v1::DATA_TYPE_FP8_E4M3);
  p.set_b_dtype(v1::DATA_TYPE_FP8_E5M2);
  p.set_output_dtype(v1::DATA_TYPE_FP32);
  p.mutable_a()->set_data(std::string(m * k, '\x38'));  // 1.0 in e4m3
  p.mutable_b()->set_data(std::string(k * n, '\x3c'));  // 1.0 in e5m2
  SetScales(p.mutable_a(), v1::SCALE_MODE_TENSOR, 1);
  SetScales(p.mutable_b(), v1::SCALE_MODE_TENSOR, 1);
  return p;
}

absl::StatusOr<GemmProblemRef> Validate(const v1::GemmProblem& p,
                                        const BackendFeatures& features = {}) {
  return ValidateProblem(p, 0, ServiceLimits{}, nullptr, features);
}

void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& field) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(field));
}

void ExpectInvalid(const absl::Status& status, const std::string& field) {
  ExpectError(status, absl::StatusCode::kInvalidArgument, field);
}

TEST(Fp8ValidationTest, MixedFormatsWithTensorScalesPass) {
  auto p = Validate(Fp8Problem());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->shape.input_dtype, DType::kFp8E4m3);
  EXPECT_EQ(p->shape.b_dtype(), DType::kFp8E5m2);
  EXPECT_EQ(p->a.scales.mode, ScaleMode::kTensor);
  EXPECT_EQ(p->b.scales.count, 1u);
  EXPECT_EQ(p->quantize, GemmProblemRef::Quantize::kNone);
}

TEST(Fp8ValidationTest, EveryModeAcceptsItsExactCount) {
  // M = 3, N = 300, K = 256: channel 3 / 300, block 3 x 2 / 2 x 3.
  const uint64_t m = 3, n = 300, k = 256;
  const struct {
    v1::ScaleMode mode;
    uint64_t a, b;
  } cases[] = {{v1::SCALE_MODE_TENSOR, 1, 1},
               {v1::SCALE_MODE_CHANNEL, m, n},
               {v1::SCALE_MODE_BLOCK, m * 2, 2 * 3}};
  for (const auto& c : cases) {
    for (bool ta : {false, true}) {
      v1::GemmProblem p = Fp8Problem(m, n, k);
      p.set_transpose_a(ta);
      SetScales(p.mutable_a(), c.mode, c.a);
      SetScales(p.mutable_b(), c.mode, c.b);
      EXPECT_TRUE(Validate(p).ok()) << Validate(p).status();
      SetScales(p.mutable_a(), c.mode, c.a + 1);
      ExpectInvalid(Validate(p).status(), "problems[0].a.scales.data");
      SetScales(p.mutable_a(), c.mode, c.a);
      SetScales(p.mutable_b(), c.mode, c.b - 1);
      ExpectInvalid(Validate(p).status(), "problems[0].b.scales.data");
    }
  }
}

TEST(Fp8ValidationTest, ScalesMustBeFiniteAndPositive) {
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf(""),
                    -0.0f}) {
    v1::GemmProblem p = Fp8Problem();
    SetScales(p.mutable_b(), v1::SCALE_MODE_CHANNEL, 5, 1.0f);
    std::vector<float> v(5, 1.0f);
    v[3] = bad;
    p.mutable_b()->mutable_scales()->set_data(Floats(v));
    const absl::Status st = Validate(p).status();
    ExpectInvalid(st, "problems[0].b.scales.data");
    EXPECT_THAT(std::string(st.message()), HasSubstr("scale 3"));
  }
}

TEST(Fp8ValidationTest, BlockScalesTakeAnyKWithAPartialLastBlock) {
  // ceil(K / 128) blocks along K: A M x KB, B KB x ceil(N / 128) (N = 300: 3).
  const uint64_t m = 3, n = 300;
  const uint64_t cases[][2] = {{1, 1}, {100, 1}, {129, 2}, {1000, 8}, {4000, 32}};
  for (const auto& [k, kb] : cases) {
    for (bool transposed : {false, true}) {
      v1::GemmProblem p = Fp8Problem(m, n, k);
      p.set_transpose_a(transposed);
      p.set_transpose_b(transposed);
      SetScales(p.mutable_a(), v1::SCALE_MODE_BLOCK, m * kb);
      SetScales(p.mutable_b(), v1::SCALE_MODE_BLOCK, kb * 3);
      auto ok = Validate(p);
      ASSERT_TRUE(ok.ok()) << "K " << k << ": " << ok.status();
      EXPECT_EQ(ok->a.scales.count, m * kb);
      EXPECT_EQ(ok->b.scales.count, kb * 3);
      // Block beside tensor and channel scales.
      SetScales(p.mutable_b(), v1::SCALE_MODE_CHANNEL, n);
      EXPECT_TRUE(Validate(p).ok()) << "K " << k << ": " << Validate(p).status();
      SetScales(p.mutable_a(), v1::SCALE_MODE_TENSOR, 1);
      SetScales(p.mutable_b(), v1::SCALE_MODE_BLOCK, kb * 3);
      EXPECT_TRUE(Validate(p).ok()) << "K " << k << ": " << Validate(p).status();
      // The count of whole blocks only (K / 128) is refused, naming the data.
      if (k % 128 != 0 && k > 128) {
        SetScales(p.mutable_b(), v1::SCALE_MODE_BLOCK, (k / 128) * 3);
        ExpectInvalid(Validate(p).status(), "problems[0].b.scales.data");
        SetScales(p.mutable_b(), v1::SCALE_MODE_TENSOR, 1);
        SetScales(p.mutable_a(), v1::SCALE_MODE_BLOCK, m * (k / 128));
        ExpectInvalid(Validate(p).status(), "problems[0].a.scales.data");
      }
    }
  }
}

TEST(Fp8ValidationTest, MissingOrUnspecifiedScalesNameTheField) {
  v1::GemmProblem p = Fp8Problem();
  p.mutable_a()->clear_scales();
  ExpectInvalid(Validate(p).status(), "problems[0].a.scales");
  p = Fp8Problem();
  p.mutable_b()->mutable_scales()->set_mode(v1::SCALE_MODE_UNSPECIFIED);
  ExpectInvalid(Validate(p).status(), "problems[0].b.scales.mode");
}

TEST(Fp8ValidationTest, ScalesOnANonFp8OperandOrOnCAreRefused) {
  v1::GemmProblem p;
  p.set_m(2);
  p.set_n(2);
  p.set_k(2);
  p.set_input_dtype(v1::DATA_TYPE_FP32);
  p.mutable_a()->set_data(std::string(16, '\0'));
  p.mutable_b()->set_data(std::string(16, '\0'));
  SetScales(p.mutable_a(), v1::SCALE_MODE_TENSOR, 1);
  ExpectInvalid(Validate(p).status(), "problems[0].a.scales");
  p = Fp8Problem();
  p.set_beta(1.0);
  p.mutable_c()->set_data(std::string(3 * 5 * 4, '\0'));
  SetScales(p.mutable_c(), v1::SCALE_MODE_TENSOR, 1);
  ExpectInvalid(Validate(p).status(), "problems[0].c.scales");
}

TEST(Fp8ValidationTest, OutputsMustBeSetAndNotFp8) {
  v1::GemmProblem p = Fp8Problem();
  p.clear_output_dtype();
  ExpectInvalid(Validate(p).status(), "problems[0].output_dtype");
  p.set_output_dtype(v1::DATA_TYPE_FP8_E4M3);
  ExpectInvalid(Validate(p).status(), "problems[0].output_dtype");
  // Nor for other inputs.
  v1::GemmProblem q;
  q.set_m(1);
  q.set_n(1);
  q.set_k(1);
  q.set_input_dtype(v1::DATA_TYPE_BF16);
  q.set_output_dtype(v1::DATA_TYPE_FP8_E5M2);
  q.mutable_a()->set_data(std::string(2, '\0'));
  q.mutable_b()->set_data(std::string(2, '\0'));
  ExpectInvalid(Validate(q).status(), "problems[0].output_dtype");
  for (auto out : {v1::DATA_TYPE_BF16, v1::DATA_TYPE_FP16, v1::DATA_TYPE_FP32}) {
    p.set_output_dtype(out);
    EXPECT_TRUE(Validate(p).ok());
  }
}

TEST(Fp8ValidationTest, MixedFp8AndNonFp8NeedQuantizePartner) {
  v1::GemmProblem p = Fp8Problem();
  p.set_b_dtype(v1::DATA_TYPE_BF16);
  p.mutable_b()->set_data(std::string(128 * 5 * 2, '\0'));
  p.mutable_b()->clear_scales();
  ExpectInvalid(Validate(p).status(), "problems[0].quantize_partner");
  p.set_quantize_partner(true);
  auto ok = Validate(p);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->quantize, GemmProblemRef::Quantize::kB);
  EXPECT_EQ(ok->quantize_mode, ScaleMode::kTensor);
  EXPECT_EQ(ok->shape.b_dtype(), DType::kFp8E4m3);  // B runs as its partner's format
  EXPECT_EQ(ok->b.dtype, DType::kBf16);             // and arrives as sent
  // fp16 is not a partner quantize_partner takes.
  p.set_b_dtype(v1::DATA_TYPE_FP16);
  ExpectInvalid(Validate(p).status(), "problems[0].b_dtype");
  // Scales on the partner are refused: the server computes them.
  p.set_b_dtype(v1::DATA_TYPE_BF16);
  SetScales(p.mutable_b(), v1::SCALE_MODE_TENSOR, 1);
  ExpectInvalid(Validate(p).status(), "problems[0].b.scales");
}

TEST(Fp8ValidationTest, QuantizePartnerOfAnAOperandRunsAsBsFormat) {
  v1::GemmProblem p = Fp8Problem(3, 5, 256);
  p.set_input_dtype(v1::DATA_TYPE_FP32);
  p.mutable_a()->set_data(std::string(3 * 256 * 4, '\0'));
  p.mutable_a()->clear_scales();
  SetScales(p.mutable_b(), v1::SCALE_MODE_BLOCK, 2);
  p.set_quantize_partner(true);
  auto ok = Validate(p);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->quantize, GemmProblemRef::Quantize::kA);
  EXPECT_EQ(ok->quantize_mode, ScaleMode::kBlock);
  EXPECT_EQ(ok->shape.input_dtype, DType::kFp8E5m2);
  EXPECT_TRUE(ok->shape.fp8());
}

TEST(Fp8ValidationTest, QuantizePartnerWithoutAMixedPairIsRefused) {
  v1::GemmProblem p = Fp8Problem();
  p.set_quantize_partner(true);
  ExpectInvalid(Validate(p).status(), "problems[0].quantize_partner");
}

TEST(Fp8ValidationTest, NonFp8TypesMayNotDiffer) {
  v1::GemmProblem p;
  p.set_m(1);
  p.set_n(1);
  p.set_k(1);
  p.set_input_dtype(v1::DATA_TYPE_FP32);
  p.set_b_dtype(v1::DATA_TYPE_BF16);
  p.mutable_a()->set_data(std::string(4, '\0'));
  p.mutable_b()->set_data(std::string(2, '\0'));
  ExpectInvalid(Validate(p).status(), "problems[0].b_dtype");
}

TEST(Fp8ValidationTest, OperandBytesAreOneBytePerElement) {
  v1::GemmProblem p = Fp8Problem();
  p.mutable_a()->set_data(std::string(3 * 128 * 2, '\0'));
  ExpectInvalid(Validate(p).status(), "problems[0].a.data");
}

TEST(Fp8ValidationTest, ABackendWithoutFp8RefusesItByField) {
  BackendFeatures cuda;
  cuda.fp8 = false;
  cuda.fp8_quantize_matrices = false;
  cuda.fp8_quantize_partner = false;
  cuda.backend = "cuda";
  ExpectError(Validate(Fp8Problem(), cuda).status(), absl::StatusCode::kUnimplemented,
              "problems[0].input_dtype");
  v1::GemmProblem p = Fp8Problem();
  p.set_input_dtype(v1::DATA_TYPE_BF16);
  p.mutable_a()->set_data(std::string(3 * 128 * 2, '\0'));
  p.mutable_a()->clear_scales();
  p.set_quantize_partner(true);
  ExpectError(Validate(p, cuda).status(), absl::StatusCode::kUnimplemented, "problems[0].b_dtype");
}

TEST(Fp8ValidationTest, MalformedFp8IsInvalidOnEveryBackend) {
  // Validation first, then what the backend lacks: the same INVALID_ARGUMENT
  // naming the field whether the backend runs FP8 or not.
  BackendFeatures none;
  none.fp8 = false;
  none.fp8_quantize_matrices = false;
  none.fp8_quantize_partner = false;
  none.fp8_block_scales_column_major_output = false;
  none.backend = "cuda";
  BackendFeatures gpu = none;
  gpu.fp8 = true;
  for (const BackendFeatures& f : {BackendFeatures(), none, gpu}) {
    SCOPED_TRACE(f.backend + (f.fp8 ? " with fp8" : " without fp8"));
    v1::GemmProblem p = Fp8Problem();
    SetScales(p.mutable_a(), v1::SCALE_MODE_CHANNEL, 2);
    ExpectInvalid(Validate(p, f).status(), "problems[0].a.scales.data");
    p = Fp8Problem();
    SetScales(p.mutable_b(), v1::SCALE_MODE_TENSOR, 1, 0.0f);
    ExpectInvalid(Validate(p, f).status(), "problems[0].b.scales.data");
    p = Fp8Problem();
    SetScales(p.mutable_b(), v1::SCALE_MODE_TENSOR, 1, std::numeric_limits<float>::infinity());
    ExpectInvalid(Validate(p, f).status(), "problems[0].b.scales.data");
    p = Fp8Problem();
    p.set_output_dtype(v1::DATA_TYPE_FP8_E4M3);
    ExpectInvalid(Validate(p, f).status(), "problems[0].output_dtype");
    p = Fp8Problem();
    p.mutable_a()->clear_scales();
    ExpectInvalid(Validate(p, f).status(), "problems[0].a.scales");
  }
}

TEST(Fp8ValidationTest, ABackendThatRunsButDoesNotQuantizeRefusesQuantizePartner) {
  // The CUDA backend: it quantizes registered matrices, not per problem.
  BackendFeatures gpu;
  gpu.fp8_quantize_partner = false;
  gpu.backend = "cuda";
  EXPECT_TRUE(Validate(Fp8Problem(), gpu).ok());
  v1::GemmProblem p = Fp8Problem();
  p.set_input_dtype(v1::DATA_TYPE_BF16);
  p.mutable_a()->set_data(std::string(3 * 128 * 2, '\0'));
  p.mutable_a()->clear_scales();
  p.set_quantize_partner(true);
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).status();
  const absl::Status refused = Validate(p, gpu).status();
  ExpectError(refused, absl::StatusCode::kUnimplemented, "problems[0].quantize_partner");
  EXPECT_NE(refused.message().find("register it with `quantize`"), std::string::npos)
      << refused;
}

TEST(Fp8ValidationTest, BlockScalesWithAColumnMajorOutputWhereTheBackendLacksThem) {
  BackendFeatures gpu;
  gpu.fp8_block_scales_column_major_output = false;
  gpu.backend = "cuda";
  v1::GemmProblem p = Fp8Problem(3, 5, 256);
  SetScales(p.mutable_a(), v1::SCALE_MODE_BLOCK, 3 * 2);
  p.set_output_layout(v1::LAYOUT_COL_MAJOR);
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).status();
  ExpectError(Validate(p, gpu).status(), absl::StatusCode::kUnimplemented,
              "problems[0].output_layout");
  p.set_output_layout(v1::LAYOUT_ROW_MAJOR);
  EXPECT_TRUE(Validate(p, gpu).ok());
  SetScales(p.mutable_a(), v1::SCALE_MODE_CHANNEL, 3);
  p.set_output_layout(v1::LAYOUT_COL_MAJOR);
  EXPECT_TRUE(Validate(p, gpu).ok()) << "channel scales take either output layout";
}

TEST(Fp8ValidationTest, ResponseSaysWhatEachInputRanAs) {
  v1::GemmRequest request;
  *request.add_problems() = Fp8Problem();
  v1::GemmProblem partner = Fp8Problem();
  partner.set_b_dtype(v1::DATA_TYPE_FP32);
  partner.mutable_b()->set_data(std::string(128 * 5 * 4, '\0'));
  partner.mutable_b()->clear_scales();
  SetScales(partner.mutable_a(), v1::SCALE_MODE_CHANNEL, 3);
  partner.set_quantize_partner(true);
  *request.add_problems() = partner;
  v1::GemmResponse response;
  ASSERT_TRUE(ValidateRequest(request, ServiceLimits{}, &response).ok());
  const v1::GemmResult& r0 = response.results(0);
  EXPECT_EQ(r0.a_precision().dtype(), v1::DATA_TYPE_FP8_E4M3);
  EXPECT_EQ(r0.b_precision().dtype(), v1::DATA_TYPE_FP8_E5M2);
  EXPECT_EQ(r0.a_precision().scale_mode(), v1::SCALE_MODE_TENSOR);
  EXPECT_FALSE(r0.b_precision().quantized_by_server());
  const v1::GemmResult& r1 = response.results(1);
  EXPECT_EQ(r1.b_precision().dtype(), v1::DATA_TYPE_FP8_E4M3);
  EXPECT_EQ(r1.b_precision().scale_mode(), v1::SCALE_MODE_CHANNEL);
  EXPECT_TRUE(r1.b_precision().quantized_by_server());
  EXPECT_FALSE(r1.a_precision().quantized_by_server());
}

TEST(Fp8ValidationTest, NonFp8ResultsCarryNoPrecisionRecord) {
  v1::GemmRequest request;
  v1::GemmProblem* p = request.add_problems();
  p->set_m(1);
  p->set_n(1);
  p->set_k(1);
  p->set_input_dtype(v1::DATA_TYPE_FP32);
  p->mutable_a()->set_data(std::string(4, '\0'));
  p->mutable_b()->set_data(std::string(4, '\0'));
  v1::GemmResponse response;
  ASSERT_TRUE(ValidateRequest(request, ServiceLimits{}, &response).ok());
  EXPECT_FALSE(response.results(0).has_a_precision());
}

// Quantize-on-register

MatrixRef Shape(uint64_t rows, uint64_t cols, DType dtype = DType::kBf16) {
  return MatrixRef{nullptr, rows, cols, Layout::kRowMajor, dtype};
}

v1::Quantization Quantization(v1::ScaleMode mode, v1::Operand operand,
                              v1::DataType format = v1::DATA_TYPE_FP8_E4M3) {
  v1::Quantization q;
  q.set_format(format);
  q.set_mode(mode);
  q.set_operand(operand);
  return q;
}

TEST(Fp8ValidationTest, QuantizationOfARegisteredMatrix) {
  auto q = ValidateQuantization(true, Quantization(v1::SCALE_MODE_BLOCK, v1::OPERAND_B),
                                Shape(256, 70), {});
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_TRUE(q->has_value());
  EXPECT_EQ((*q)->mode, ScaleMode::kBlock);
  EXPECT_EQ((*q)->operand, OperandRole::kB);
  // Block scales take any K (a partial last block along it): as B, K is
  // the rows; as A the columns (the rows when transposed).
  EXPECT_TRUE(ValidateQuantization(true, Quantization(v1::SCALE_MODE_BLOCK, v1::OPERAND_B),
                                   Shape(100, 256), {})
                  .ok());
  v1::Quantization at = Quantization(v1::SCALE_MODE_BLOCK, v1::OPERAND_A);
  at.set_transposed(true);
  EXPECT_TRUE(ValidateQuantization(true, at, Shape(256, 70), {}).ok());
  EXPECT_TRUE(ValidateQuantization(true, at, Shape(1000, 70), {}).ok());
  EXPECT_TRUE(ValidateQuantization(true, at, Shape(70, 256), {}).ok());
}

TEST(Fp8ValidationTest, QuantizationFieldsNameThemselves) {
  v1::Quantization q = Quantization(v1::SCALE_MODE_TENSOR, v1::OPERAND_UNSPECIFIED);
  EXPECT_TRUE(ValidateQuantization(true, q, Shape(3, 3), {}).ok());  // tensor: either operand
  q.set_mode(v1::SCALE_MODE_CHANNEL);
  ExpectInvalid(ValidateQuantization(true, q, Shape(3, 3), {}).status(), "quantize.operand");
  q = Quantization(v1::SCALE_MODE_UNSPECIFIED, v1::OPERAND_A);
  ExpectInvalid(ValidateQuantization(true, q, Shape(3, 3), {}).status(), "quantize.mode");
  q = Quantization(v1::SCALE_MODE_TENSOR, v1::OPERAND_A, v1::DATA_TYPE_BF16);
  ExpectInvalid(ValidateQuantization(true, q, Shape(3, 3), {}).status(), "quantize.format");
  q = Quantization(v1::SCALE_MODE_TENSOR, v1::OPERAND_A);
  ExpectInvalid(ValidateQuantization(true, q, Shape(3, 3, DType::kFp16), {}).status(), "dtype");
  EXPECT_TRUE(ValidateQuantization(true, q, Shape(3, 3, DType::kFp32), {}).ok());
  auto none = ValidateQuantization(false, v1::Quantization(), Shape(3, 3), {});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(Fp8ValidationTest, QuantizationAndFp8MatricesOnABackendWithoutFp8) {
  BackendFeatures cuda;
  cuda.fp8 = false;
  cuda.fp8_quantize_matrices = false;
  cuda.fp8_quantize_partner = false;
  cuda.backend = "cuda";
  ExpectError(ValidateQuantization(true, Quantization(v1::SCALE_MODE_TENSOR, v1::OPERAND_A),
                                   Shape(3, 3), cuda)
                  .status(),
              absl::StatusCode::kUnimplemented, "quantize");
  ExpectError(
      ValidateQuantization(false, v1::Quantization(), Shape(3, 3, DType::kFp8E4m3), cuda).status(),
      absl::StatusCode::kUnimplemented, "dtype");
  EXPECT_TRUE(ValidateQuantization(false, v1::Quantization(), Shape(3, 3), cuda).ok());
}

TEST(Fp8ValidationTest, QuantizationIsValidatedBeforeTheBackendRefusesIt) {
  BackendFeatures gpu;
  gpu.fp8_quantize_matrices = false;
  gpu.fp8_quantize_partner = false;
  gpu.backend = "cuda";
  v1::Quantization q = Quantization(v1::SCALE_MODE_CHANNEL, v1::OPERAND_A);
  q.set_format(v1::DATA_TYPE_BF16);
  ExpectInvalid(ValidateQuantization(true, q, Shape(3, 3), gpu).status(), "quantize.format");
  ExpectError(ValidateQuantization(true, Quantization(v1::SCALE_MODE_TENSOR, v1::OPERAND_A),
                                   Shape(3, 3), gpu)
                  .status(),
              absl::StatusCode::kUnimplemented, "quantize");
  EXPECT_TRUE(
      ValidateQuantization(false, v1::Quantization(), Shape(3, 3, DType::kFp8E4m3), gpu).ok())
      << "a backend that runs FP8 keeps FP8 matrices the client quantized";
}

TEST(Fp8ValidationTest, ABackendThatQuantizesMatricesOnlyTakesQuantizeOnRegistration) {
  // The CUDA backend on Hopper.
  BackendFeatures gpu;
  gpu.fp8_quantize_partner = false;
  gpu.backend = "cuda";
  EXPECT_TRUE(ValidateQuantization(true, Quantization(v1::SCALE_MODE_BLOCK, v1::OPERAND_B),
                                   Shape(3, 3), gpu)
                  .ok());
}

TEST(Fp8ValidationTest, RegisterMatrixTakesFp8Bytes) {
  v1::RegisterMatrixRequest r;
  r.set_dtype(v1::DATA_TYPE_FP8_E5M2);
  r.set_rows(4);
  r.set_cols(8);
  r.set_data(std::string(32, '\0'));
  auto m = ValidateRegisterMatrix(r, ServiceLimits{});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->bytes(), 32u);
  r.set_data(std::string(64, '\0'));
  ExpectInvalid(ValidateRegisterMatrix(r, ServiceLimits{}).status(), "data");
}


// A resident B (K = 256 x N = 5, bf16 ones) quantized by the server with
// block scales, and a problem that names it.
class QuantizedResidentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<uint16_t> ones(256 * 5, 0x3f80);
    const MatrixRef source{ones.data(), 256, 5, Layout::kRowMajor, DType::kBf16};
    Fp8Quantization q;
    q.format = DType::kFp8E5m2;
    q.mode = ScaleMode::kBlock;
    q.operand = OperandRole::kB;
    auto made = QuantizeToHostResident(source, q);
    ASSERT_TRUE(made.ok()) << made.status();
    resident_ = *made;
    residents_.resolve = [this](absl::string_view) -> absl::StatusOr<
                             std::shared_ptr<const ResidentMatrix>> { return resident_; };
  }

  v1::GemmProblem Problem() {
    v1::GemmProblem p = Fp8Problem(3, 5, 256);
    p.mutable_b()->set_handle("h");
    p.mutable_b()->clear_scales();
    return p;
  }

  absl::StatusOr<GemmProblemRef> Check(const v1::GemmProblem& p) {
    return ValidateProblem(p, 0, ServiceLimits{}, &residents_);
  }

  std::shared_ptr<ResidentMatrix> resident_;
  ResidentOperands residents_;
};

TEST_F(QuantizedResidentTest, ItsOwnScalesServe) {
  auto p = Check(Problem());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->b.scales.mode, ScaleMode::kBlock);
  EXPECT_EQ(p->b.scales.count, 2u);
  EXPECT_EQ(ScaleAt(p->b.scales.data, 0), 1.0f / 57344.0f);
  EXPECT_EQ(resident_->held_bytes(), 256u * 5 + 2 * sizeof(float));
}

TEST_F(QuantizedResidentTest, ScalesBesideItAreRefused) {
  v1::GemmProblem p = Problem();
  SetScales(p.mutable_b(), v1::SCALE_MODE_BLOCK, 2);
  ExpectInvalid(Check(p).status(), "problems[0].b.scales");
}

TEST_F(QuantizedResidentTest, ItServesOnlyAsTheOperandAndTransposeItWasQuantizedFor) {
  v1::GemmProblem p = Problem();
  p.set_b_dtype(v1::DATA_TYPE_FP8_E4M3);
  ExpectInvalid(Check(p).status(), "problems[0].b.handle");  // registered as e5m2
  p = Problem();
  p.set_n(256);
  p.set_k(5);  // B would be transposed; it was quantized as B not transposed
  p.set_transpose_b(true);
  p.mutable_a()->set_data(std::string(3 * 5, '\x38'));
  ExpectInvalid(Check(p).status(), "problems[0].b.handle");
}

TEST_F(QuantizedResidentTest, AsAnAOperandItIsRefused) {
  v1::GemmProblem p = Fp8Problem(5, 3, 256);
  p.set_input_dtype(v1::DATA_TYPE_FP8_E5M2);
  p.set_b_dtype(v1::DATA_TYPE_FP8_E4M3);
  p.set_transpose_a(true);  // stored 256 x 5: op(A) is 5 x 256
  p.mutable_a()->set_handle("h");
  p.mutable_a()->clear_scales();
  ExpectInvalid(Check(p).status(), "problems[0].a.handle");
}

}  // namespace
}  // namespace gemm
