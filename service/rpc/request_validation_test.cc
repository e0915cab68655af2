#include "service/rpc/request_validation.h"

#include "common/proto_enums.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gemm {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kTwoTo40 = uint64_t{1} << 40;

// A well-formed problem: op(A) m x k, op(B) k x n, operands zero-filled.
v1::GemmProblem GoodProblem(uint64_t m = 3, uint64_t n = 5, uint64_t k = 4,
                            v1::DataType dtype = v1::DATA_TYPE_FP32) {
  const size_t elem = dtype == v1::DATA_TYPE_FP32 ? 4 : 2;
  v1::GemmProblem p;
  p.set_m(m);
  p.set_n(n);
  p.set_k(k);
  p.set_input_dtype(dtype);
  p.mutable_a()->set_data(std::string(m * k * elem, '\0'));
  p.mutable_b()->set_data(std::string(k * n * elem, '\0'));
  return p;
}

void AddC(v1::GemmProblem* p, size_t elem_size = 4) {
  p->mutable_c()->set_data(std::string(p->m() * p->n() * elem_size, '\0'));
}

absl::Status Validate(const v1::GemmProblem& p, const ServiceLimits& limits = {}) {
  return ValidateProblem(p, 0, limits).status();
}

absl::Status ValidateOne(const v1::GemmProblem& p, const ServiceLimits& limits = {}) {
  v1::GemmRequest request;
  *request.add_problems() = p;
  v1::GemmResponse response;
  return ValidateRequest(request, limits, &response).status();
}

// Expects `status` to carry `code` and a message that names `field`.
void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& field) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(field));
}

void ExpectInvalid(const absl::Status& status, const std::string& field) {
  ExpectError(status, absl::StatusCode::kInvalidArgument, field);
}

TEST(RequestValidationTest, GoodProblemPasses) {
  EXPECT_TRUE(Validate(GoodProblem()).ok());
  EXPECT_TRUE(ValidateOne(GoodProblem()).ok());
}

// Bad dimensions

TEST(RequestValidationTest, ZeroDimensionNamesIt) {
  v1::GemmProblem p = GoodProblem();
  p.set_m(0);
  ExpectInvalid(Validate(p), "problems[0].m");
  p = GoodProblem();
  p.set_n(0);
  ExpectInvalid(Validate(p), "problems[0].n");
  p = GoodProblem();
  p.set_k(0);
  ExpectInvalid(Validate(p), "problems[0].k");
}

TEST(RequestValidationTest, DimensionOverTheLimitNamesIt) {
  ServiceLimits limits;
  limits.max_dimension = 16;
  EXPECT_TRUE(Validate(GoodProblem(16, 16, 16), limits).ok());
  ExpectInvalid(Validate(GoodProblem(17, 2, 2), limits), "problems[0].m");
  ExpectInvalid(Validate(GoodProblem(2, 17, 2), limits), "problems[0].n");
  ExpectInvalid(Validate(GoodProblem(2, 2, 17), limits), "problems[0].k");
}

TEST(RequestValidationTest, NegativeDimensionSentAsUint64IsOverTheLimit) {
  // A client that puts -1 into the uint64 field sends 2^64 - 1.
  v1::GemmProblem p = GoodProblem();
  p.set_k(static_cast<uint64_t>(int64_t{-1}));
  ExpectInvalid(Validate(p), "problems[0].k");
}

TEST(RequestValidationTest, OverflowingElementCountIsInvalid) {
  ServiceLimits limits;
  limits.max_dimension = std::numeric_limits<uint64_t>::max();
  limits.max_matrix_bytes = 1 << 20;
  v1::GemmProblem p = GoodProblem();
  p.set_m(kTwoTo40);
  p.set_n(kTwoTo40);
  p.set_k(kTwoTo40);  // A holds 2^80 elements: M * K overflows uint64
  const absl::Status st = Validate(p, limits);
  ExpectInvalid(st, "problems[0].a.data");
  EXPECT_THAT(std::string(st.message()), HasSubstr("overflow"));
}

TEST(RequestValidationTest, OverflowingByteSizeIsInvalid) {
  ServiceLimits limits;
  limits.max_dimension = std::numeric_limits<uint64_t>::max();
  limits.max_matrix_bytes = std::numeric_limits<uint64_t>::max();
  v1::GemmProblem p = GoodProblem();
  // 2^32 * 2^31 = 2^63 elements fit in uint64; times 4 bytes does not.
  p.set_m(uint64_t{1} << 32);
  p.set_k(uint64_t{1} << 31);
  const absl::Status st = Validate(p, limits);
  ExpectInvalid(st, "problems[0].a.data");
  EXPECT_THAT(std::string(st.message()), HasSubstr("overflow"));
}

TEST(RequestValidationTest, HugeDimensionsWithSmallByteLimitAreRejected) {
  ServiceLimits limits;
  limits.max_dimension = kTwoTo40;
  limits.max_matrix_bytes = 1 << 20;
  v1::GemmProblem p = GoodProblem();
  p.set_m(kTwoTo40);
  p.set_n(kTwoTo40);
  p.set_k(1);
  ExpectError(Validate(p, limits), absl::StatusCode::kResourceExhausted, "problems[0].a.data");
}

// Bad byte lengths

TEST(RequestValidationTest, OperandByteLengthMismatchNamesTheOperand) {
  v1::GemmProblem p = GoodProblem();
  p.mutable_a()->mutable_data()->pop_back();
  absl::Status st = Validate(p);
  ExpectInvalid(st, "problems[0].a.data");
  EXPECT_THAT(std::string(st.message()), HasSubstr("expected 48 bytes"));

  p = GoodProblem();
  p.mutable_b()->mutable_data()->push_back('\0');
  ExpectInvalid(Validate(p), "problems[0].b.data");

  p = GoodProblem();
  p.mutable_b()->clear_data();
  ExpectInvalid(Validate(p), "problems[0].b.data");

  p = GoodProblem();
  p.set_beta(1.0);
  AddC(&p);
  p.mutable_c()->mutable_data()->pop_back();
  ExpectInvalid(Validate(p), "problems[0].c.data");
}

TEST(RequestValidationTest, ByteLengthFollowsTheInputDtype) {
  // fp16 data sent with an fp32 dtype is half the expected length.
  v1::GemmProblem p = GoodProblem(3, 5, 4, v1::DATA_TYPE_FP16);
  EXPECT_TRUE(Validate(p).ok());
  p.set_input_dtype(v1::DATA_TYPE_FP32);
  ExpectInvalid(Validate(p), "problems[0].a.data");
}

TEST(RequestValidationTest, InnerDimensionMismatchIsCaught) {
  // A sized as 3 x 6 while K = 4: the operands disagree on K.
  v1::GemmProblem p = GoodProblem(3, 5, 4);
  p.mutable_a()->set_data(std::string(3 * 6 * 4, '\0'));
  ExpectInvalid(Validate(p), "problems[0].a.data");
  // Same for B sized for K = 6.
  p = GoodProblem(3, 5, 4);
  p.mutable_b()->set_data(std::string(6 * 5 * 4, '\0'));
  ExpectInvalid(Validate(p), "problems[0].b.data");
}

// Bad enums

TEST(RequestValidationTest, UnspecifiedInputDtypeNamesIt) {
  v1::GemmProblem p = GoodProblem();
  p.set_input_dtype(v1::DATA_TYPE_UNSPECIFIED);
  ExpectInvalid(Validate(p), "problems[0].input_dtype");
}

TEST(RequestValidationTest, UnknownDtypeNamesIt) {
  v1::GemmProblem p = GoodProblem();
  p.set_input_dtype(static_cast<v1::DataType>(42));
  ExpectInvalid(Validate(p), "problems[0].input_dtype");
  p = GoodProblem();
  p.set_output_dtype(static_cast<v1::DataType>(-3));
  ExpectInvalid(Validate(p), "problems[0].output_dtype");
}

TEST(RequestValidationTest, UnknownLayoutNamesIt) {
  v1::GemmProblem p = GoodProblem();
  p.mutable_a()->set_layout(static_cast<v1::Layout>(7));
  ExpectInvalid(Validate(p), "problems[0].a.layout");
  p = GoodProblem();
  p.mutable_b()->set_layout(static_cast<v1::Layout>(7));
  ExpectInvalid(Validate(p), "problems[0].b.layout");
  p = GoodProblem();
  p.set_beta(2.0);
  AddC(&p);
  p.mutable_c()->set_layout(static_cast<v1::Layout>(-1));
  ExpectInvalid(Validate(p), "problems[0].c.layout");
  p = GoodProblem();
  p.set_output_layout(static_cast<v1::Layout>(3));
  ExpectInvalid(Validate(p), "problems[0].output_layout");
}

// C and the scalars

TEST(RequestValidationTest, NonZeroBetaWithoutCNamesC) {
  v1::GemmProblem p = GoodProblem();
  p.set_beta(0.5);
  ExpectInvalid(Validate(p), "problems[0].c");
  // An empty C message is as good as none.
  p.mutable_c()->set_layout(v1::LAYOUT_ROW_MAJOR);
  ExpectInvalid(Validate(p), "problems[0].c");
}

TEST(RequestValidationTest, CMustBeMByNInTheOutputDtype) {
  v1::GemmProblem p = GoodProblem(3, 5, 4, v1::DATA_TYPE_BF16);
  p.set_beta(1.0);
  AddC(&p, 2);  // bf16 output by default
  EXPECT_TRUE(Validate(p).ok());
  p.set_output_dtype(v1::DATA_TYPE_FP32);  // now C must hold 4-byte elements
  ExpectInvalid(Validate(p), "problems[0].c.data");

  // N x M instead of M x N has the same byte count only when M == N.
  p = GoodProblem(3, 5, 4);
  p.set_beta(1.0);
  p.mutable_c()->set_data(std::string(3 * 4 * 4, '\0'));
  ExpectInvalid(Validate(p), "problems[0].c.data");
}

TEST(RequestValidationTest, MalformedCIsAnErrorEvenWhenBetaIsZero) {
  v1::GemmProblem p = GoodProblem();
  p.mutable_c()->set_data("abc");
  ExpectInvalid(Validate(p), "problems[0].c.data");
}

TEST(RequestValidationTest, NonFiniteScalarsNameTheField) {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    v1::GemmProblem p = GoodProblem();
    p.set_alpha(bad);
    ExpectInvalid(Validate(p), "problems[0].alpha");
    p = GoodProblem();
    AddC(&p);
    p.set_beta(bad);
    ExpectInvalid(Validate(p), "problems[0].beta");
  }
}

// Request-level rules

TEST(RequestValidationTest, EmptyBatchIsInvalid) {
  v1::GemmRequest request;
  v1::GemmResponse response;
  ExpectInvalid(ValidateRequest(request, ServiceLimits{}, &response).status(), "problems");
}

TEST(RequestValidationTest, TooManyProblemsIsResourceExhausted) {
  ServiceLimits limits;
  limits.max_problems_per_request = 3;
  v1::GemmRequest request;
  for (int i = 0; i < 3; ++i) *request.add_problems() = GoodProblem(1, 1, 1);
  v1::GemmResponse response;
  EXPECT_TRUE(ValidateRequest(request, limits, &response).ok());
  *request.add_problems() = GoodProblem(1, 1, 1);
  ExpectError(ValidateRequest(request, limits, &response).status(),
              absl::StatusCode::kResourceExhausted, "problems");
}

TEST(RequestValidationTest, ErrorNamesTheIndexOfTheBadProblem) {
  v1::GemmRequest request;
  *request.add_problems() = GoodProblem();
  *request.add_problems() = GoodProblem();
  *request.add_problems() = GoodProblem();
  request.mutable_problems(2)->mutable_b()->mutable_data()->pop_back();
  v1::GemmResponse response;
  ExpectInvalid(ValidateRequest(request, ServiceLimits{}, &response).status(),
                "problems[2].b.data");
}

TEST(RequestValidationTest, OperandOverMatrixByteLimitIsResourceExhausted) {
  ServiceLimits limits;
  limits.max_matrix_bytes = 64;
  EXPECT_TRUE(Validate(GoodProblem(4, 4, 4), limits).ok());  // 64 bytes each
  ExpectError(Validate(GoodProblem(4, 1, 5), limits), absl::StatusCode::kResourceExhausted,
              "problems[0].a.data");
  ExpectError(Validate(GoodProblem(1, 5, 4), limits), absl::StatusCode::kResourceExhausted,
              "problems[0].b.data");
}

TEST(RequestValidationTest, ResultOverMatrixByteLimitIsResourceExhausted) {
  ServiceLimits limits;
  limits.max_matrix_bytes = 64;
  // A and B are 16 x 1 and 1 x 16 (64 bytes); D is 16 x 16 (1 KiB).
  ExpectError(Validate(GoodProblem(16, 16, 1), limits), absl::StatusCode::kResourceExhausted,
              "problems[0].output");
}

TEST(RequestValidationTest, ResultsOverMessageLimitAreResourceExhausted) {
  ServiceLimits limits;
  limits.max_message_bytes = 64 << 10;
  v1::GemmRequest request;
  // Each D is 64 x 64 fp32 = 16 KiB; three fit, five do not.
  for (int i = 0; i < 3; ++i) *request.add_problems() = GoodProblem(64, 64, 1);
  v1::GemmResponse response;
  EXPECT_TRUE(ValidateRequest(request, limits, &response).ok());
  for (int i = 0; i < 2; ++i) *request.add_problems() = GoodProblem(64, 64, 1);
  ExpectError(ValidateRequest(request, limits, &response).status(),
              absl::StatusCode::kResourceExhausted, "max message size");
  // Results kept on the server are not bound by the message size.
  request.set_keep_results(true);
  EXPECT_TRUE(ValidateRequest(request, limits, &response).ok());
}

// Happy paths

TEST(RequestValidationTest, ProblemsPointIntoTheRequestAndResponse) {
  v1::GemmRequest request;
  request.set_request_id("r-17");
  *request.add_problems() = GoodProblem(3, 5, 4);
  *request.add_problems() = GoodProblem(2, 7, 9, v1::DATA_TYPE_FP16);
  request.mutable_problems(1)->set_beta(-1.5);
  AddC(request.mutable_problems(1), 2);
  v1::GemmResponse response;
  auto problems = ValidateRequest(request, ServiceLimits{}, &response);
  ASSERT_TRUE(problems.ok()) << problems.status();
  ASSERT_EQ(problems->size(), 2u);
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.request_id(), "r-17");
  for (int i = 0; i < 2; ++i) {
    const GemmProblemRef& p = (*problems)[i];
    const v1::GemmProblem& q = request.problems(i);
    EXPECT_EQ(p.a.data, q.a().data().data());
    EXPECT_EQ(p.b.data, q.b().data().data());
    const v1::GemmResult& r = response.results(i);
    EXPECT_EQ(p.d, r.data().data());
    EXPECT_EQ(r.rows(), q.m());
    EXPECT_EQ(r.cols(), q.n());
    EXPECT_EQ(r.data().size(), q.m() * q.n() * SizeOf(p.shape.output_dtype));
  }
  const GemmProblemRef& p1 = (*problems)[1];
  EXPECT_EQ(p1.c.data, request.problems(1).c().data().data());
  EXPECT_EQ(p1.beta, -1.5);
  EXPECT_EQ(response.results(0).dtype(), v1::DATA_TYPE_FP32);
  EXPECT_EQ(response.results(1).dtype(), v1::DATA_TYPE_FP16);
  EXPECT_EQ(InflightBytes(*problems),
            (*problems)[0].algorithmic_bytes() + (*problems)[1].algorithmic_bytes());
  // A (3x4) + B (4x5) + D (3x5), fp32.
  EXPECT_EQ((*problems)[0].algorithmic_bytes(), (12 + 20 + 15) * 4u);
}

TEST(RequestValidationTest, ResponseResultsAreResetOnReuse) {
  v1::GemmRequest request;
  *request.add_problems() = GoodProblem(2, 2, 2);
  v1::GemmResponse response;
  response.add_results()->set_rows(99);
  response.add_results();
  ASSERT_TRUE(ValidateRequest(request, ServiceLimits{}, &response).ok());
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).rows(), 2u);
}

TEST(RequestValidationTest, TransposesAndLayoutsGiveStoredShapes) {
  // m=3, n=5, k=4. A^T is stored 4 x 3, B^T is stored 5 x 4.
  v1::GemmProblem p = GoodProblem(3, 5, 4);
  p.set_transpose_a(true);
  p.set_transpose_b(true);
  p.mutable_a()->set_layout(v1::LAYOUT_COL_MAJOR);
  p.mutable_b()->set_layout(v1::LAYOUT_ROW_MAJOR);
  p.set_beta(1.0);
  AddC(&p);
  p.mutable_c()->set_layout(v1::LAYOUT_COL_MAJOR);
  p.set_output_layout(v1::LAYOUT_COL_MAJOR);
  p.set_allow_tf32(true);
  auto r = ValidateProblem(p, 0, ServiceLimits{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->shape.transpose_a);
  EXPECT_TRUE(r->shape.transpose_b);
  EXPECT_TRUE(r->shape.allow_tf32);
  EXPECT_EQ(r->a.rows, 4u);
  EXPECT_EQ(r->a.cols, 3u);
  EXPECT_EQ(r->a.layout, Layout::kColMajor);
  EXPECT_EQ(r->a.ld(), 4u);
  EXPECT_EQ(r->b.rows, 5u);
  EXPECT_EQ(r->b.cols, 4u);
  EXPECT_EQ(r->b.layout, Layout::kRowMajor);
  EXPECT_EQ(r->c.rows, 3u);
  EXPECT_EQ(r->c.cols, 5u);
  EXPECT_EQ(r->c.layout, Layout::kColMajor);
  EXPECT_EQ(r->shape.layout_a, Layout::kColMajor);
  EXPECT_EQ(r->shape.layout_b, Layout::kRowMajor);
  EXPECT_EQ(r->shape.layout_c, Layout::kColMajor);
  EXPECT_EQ(r->shape.layout_d, Layout::kColMajor);

  v1::GemmRequest request;
  *request.add_problems() = p;
  v1::GemmResponse response;
  ASSERT_TRUE(ValidateRequest(request, ServiceLimits{}, &response).ok());
  EXPECT_EQ(response.results(0).layout(), v1::LAYOUT_COL_MAJOR);
}

TEST(RequestValidationTest, UnspecifiedLayoutsMeanRowMajor) {
  auto r = ValidateProblem(GoodProblem(), 0, ServiceLimits{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->a.layout, Layout::kRowMajor);
  EXPECT_EQ(r->b.layout, Layout::kRowMajor);
  EXPECT_EQ(r->shape.layout_d, Layout::kRowMajor);
  EXPECT_FALSE(r->shape.transpose_a);
  EXPECT_FALSE(r->shape.allow_tf32);
}

TEST(RequestValidationTest, OutputDtypeDefaultsToInputDtype) {
  for (v1::DataType t : {v1::DATA_TYPE_FP32, v1::DATA_TYPE_FP16, v1::DATA_TYPE_BF16}) {
    auto r = ValidateProblem(GoodProblem(2, 3, 4, t), 0, ServiceLimits{});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->shape.input_dtype, FromProto(t).value());
    EXPECT_EQ(r->shape.output_dtype, FromProto(t).value());
    EXPECT_EQ(r->a.dtype, FromProto(t).value());
  }
}

TEST(RequestValidationTest, MixedDtypesSizeResultsInTheOutputDtype) {
  v1::GemmRequest request;
  *request.add_problems() = GoodProblem(2, 3, 4, v1::DATA_TYPE_BF16);
  request.mutable_problems(0)->set_output_dtype(v1::DATA_TYPE_FP32);
  v1::GemmResponse response;
  auto r = ValidateRequest(request, ServiceLimits{}, &response);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape.input_dtype, DType::kBf16);
  EXPECT_EQ((*r)[0].shape.output_dtype, DType::kFp32);
  EXPECT_EQ(response.results(0).dtype(), v1::DATA_TYPE_FP32);
  EXPECT_EQ(response.results(0).data().size(), 2u * 3u * 4u);
}

TEST(RequestValidationTest, AlphaDefaultsToOneAndBetaToZero) {
  auto r = ValidateProblem(GoodProblem(), 0, ServiceLimits{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->alpha, 1.0);
  EXPECT_EQ(r->beta, 0.0);
  EXPECT_EQ(r->c.data, nullptr);

  // An explicit alpha of 0 is kept, not replaced by the default.
  v1::GemmProblem p = GoodProblem();
  p.set_alpha(0.0);
  r = ValidateProblem(p, 0, ServiceLimits{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->alpha, 0.0);
}

TEST(RequestValidationTest, CIsNotReadWhenBetaIsZero) {
  v1::GemmProblem p = GoodProblem();
  AddC(&p);
  p.set_beta(0.0);
  auto r = ValidateProblem(p, 0, ServiceLimits{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->c.data, nullptr);
}

TEST(RequestValidationTest, DtypeConversionsRoundTrip) {
  for (DType t : {DType::kFp32, DType::kFp16, DType::kBf16}) EXPECT_EQ(FromProto(ToProto(t)).value(), t);
  EXPECT_EQ(ToProto(Layout::kRowMajor), v1::LAYOUT_ROW_MAJOR);
  EXPECT_EQ(ToProto(Layout::kColMajor), v1::LAYOUT_COL_MAJOR);
}

}  // namespace
}  // namespace gemm

namespace gemm {
namespace {

// Resident matrices by handle, as a ResidentStore would resolve them for one
// caller: "b" is 4 x 5 fp32 row-major (B of GoodProblem), "c" 3 x 5 fp32
// column-major, "denied" another caller's.
class ResidentOperandTest : public ::testing::Test {
 protected:
  ResidentOperandTest() : zeros_(64, 0.0f) {
    b_ = *MakeHostResident(MatrixRef{zeros_.data(), 4, 5, Layout::kRowMajor, DType::kFp32});
    c_ = *MakeHostResident(MatrixRef{zeros_.data(), 3, 5, Layout::kColMajor, DType::kFp32});
    residents_.resolve = [this](absl::string_view handle)
        -> absl::StatusOr<std::shared_ptr<const ResidentMatrix>> {
      if (handle == "b") return b_;
      if (handle == "c") return c_;
      if (handle == "denied") return absl::PermissionDeniedError("another caller's");
      return absl::NotFoundError("no such handle");
    };
  }

  absl::StatusOr<GemmProblemRef> Validate(const v1::GemmProblem& p) {
    return ValidateProblem(p, 0, ServiceLimits{}, &residents_);
  }

  std::vector<float> zeros_;
  std::shared_ptr<ResidentMatrix> b_, c_;
  ResidentOperands residents_;
};

TEST_F(ResidentOperandTest, AHandleResolvesToTheResidentMatrixAndIsHeld) {
  v1::GemmProblem p = GoodProblem();
  p.mutable_b()->set_handle("b");
  auto r = Validate(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->b.resident, b_.get());
  EXPECT_EQ(r->b.data, b_->view().data);
  EXPECT_EQ(r->a.resident, nullptr);
  ASSERT_EQ(residents_.held.size(), 1u);
  EXPECT_EQ(residents_.held[0], b_);
  // Only the bytes the request carries count as in flight.
  EXPECT_EQ(InflightBytes({*r}), (3 * 4 + 3 * 5) * 4u);
}

TEST_F(ResidentOperandTest, LookupErrorsKeepTheirCodeAndNameTheField) {
  v1::GemmProblem p = GoodProblem();
  p.mutable_b()->set_handle("gone");
  ExpectError(Validate(p).status(), absl::StatusCode::kNotFound, "problems[0].b.handle");
  p.mutable_a()->set_handle("denied");
  ExpectError(Validate(p).status(), absl::StatusCode::kPermissionDenied, "problems[0].a.handle");
}

TEST_F(ResidentOperandTest, AMismatchedHandleIsInvalidNamingTheField) {
  v1::GemmProblem p = GoodProblem();
  p.mutable_a()->set_handle("b");  // A must be 3 x 4
  ExpectInvalid(Validate(p).status(), "problems[0].a.handle");
  p = GoodProblem(3, 5, 4, v1::DATA_TYPE_BF16);
  p.mutable_b()->set_handle("b");  // fp32, the problem is bf16
  ExpectInvalid(Validate(p).status(), "problems[0].b.handle");
  p = GoodProblem();
  p.set_transpose_b(true);  // B must then be 5 x 4
  p.mutable_b()->set_handle("b");
  ExpectInvalid(Validate(p).status(), "problems[0].b.handle");
  p = GoodProblem();
  p.mutable_b()->set_handle("b");
  p.mutable_b()->set_layout(v1::LAYOUT_COL_MAJOR);  // registered row-major
  ExpectInvalid(Validate(p).status(), "problems[0].b.layout");
}

TEST_F(ResidentOperandTest, AResidentCMustBeInTheOutputLayout) {
  v1::GemmProblem p = GoodProblem();
  p.set_beta(1.0);
  p.mutable_c()->set_handle("c");  // column-major; D is row-major
  ExpectInvalid(Validate(p).status(), "problems[0].c.handle");
  p.set_output_layout(v1::LAYOUT_COL_MAJOR);
  auto r = Validate(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->c.resident, c_.get());
  EXPECT_TRUE(r->c.present());
}

TEST_F(ResidentOperandTest, WithoutAResolverAHandleIsInvalid) {
  v1::GemmProblem p = GoodProblem();
  p.mutable_b()->set_handle("b");
  ExpectInvalid(ValidateProblem(p, 0, ServiceLimits{}).status(), "problems[0].b.handle");
}

TEST(RegisterMatrixValidationTest, ChecksEveryField) {
  v1::RegisterMatrixRequest r;
  r.set_dtype(v1::DATA_TYPE_BF16);
  r.set_rows(3);
  r.set_cols(5);
  r.set_layout(v1::LAYOUT_COL_MAJOR);
  r.set_data(std::string(30, '\0'));
  auto m = ValidateRegisterMatrix(r, ServiceLimits{});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->rows, 3u);
  EXPECT_EQ(m->cols, 5u);
  EXPECT_EQ(m->dtype, DType::kBf16);
  EXPECT_EQ(m->layout, Layout::kColMajor);
  EXPECT_EQ(m->data, r.data().data());

  v1::RegisterMatrixRequest bad = r;
  bad.set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  ExpectInvalid(ValidateRegisterMatrix(bad, ServiceLimits{}).status(), "dtype");
  bad = r;
  bad.set_rows(0);
  ExpectInvalid(ValidateRegisterMatrix(bad, ServiceLimits{}).status(), "rows");
  bad = r;
  bad.set_cols(kTwoTo40);
  ExpectInvalid(ValidateRegisterMatrix(bad, ServiceLimits{}).status(), "cols");
  bad = r;
  bad.set_data(std::string(29, '\0'));
  ExpectInvalid(ValidateRegisterMatrix(bad, ServiceLimits{}).status(), "data");
  bad = r;
  bad.set_label(std::string(300, 'x'));
  ExpectInvalid(ValidateRegisterMatrix(bad, ServiceLimits{}).status(), "label");
  ServiceLimits small;
  small.max_matrix_bytes = 16;
  ExpectError(ValidateRegisterMatrix(r, small).status(), absl::StatusCode::kResourceExhausted,
              "max_matrix_bytes");
}

TEST(BeginUploadValidationTest, ChecksTheShapeWithoutData) {
  v1::BeginUploadRequest r;
  r.set_dtype(v1::DATA_TYPE_FP16);
  r.set_rows(7);
  r.set_cols(9);
  auto m = ValidateBeginUpload(r, ServiceLimits{});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->bytes(), 7u * 9 * 2);
  EXPECT_EQ(m->layout, Layout::kRowMajor);
  EXPECT_EQ(m->data, nullptr);
  v1::BeginUploadRequest bad = r;
  bad.set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  ExpectInvalid(ValidateBeginUpload(bad, ServiceLimits{}).status(), "dtype");
  bad = r;
  bad.set_cols(0);
  ExpectInvalid(ValidateBeginUpload(bad, ServiceLimits{}).status(), "cols");
  bad = r;
  bad.set_layout(static_cast<v1::Layout>(9));
  ExpectInvalid(ValidateBeginUpload(bad, ServiceLimits{}).status(), "layout");
  // Larger than a message is fine (that is what uploads are for); larger
  // than max_matrix_bytes is not, and is refused before any byte is sent.
  ServiceLimits limits;
  limits.max_message_bytes = 64;
  EXPECT_TRUE(ValidateBeginUpload(r, limits).ok());
  limits.max_matrix_bytes = 100;
  ExpectError(ValidateBeginUpload(r, limits).status(), absl::StatusCode::kResourceExhausted,
              "max_matrix_bytes");
}

}  // namespace
}  // namespace gemm
