#include "client/cli/size_check.h"

#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemm::cli {
namespace {

using ::testing::HasSubstr;

v1::Limits ServerLimits() {
  v1::Limits l;
  l.set_max_dimension(1048576);
  l.set_max_problem_bytes(uint64_t{1} << 30);
  l.set_max_problems_per_request(4096);
  return l;
}

Shape Square(uint64_t s) {
  Shape x;
  x.m = x.n = x.k = s;
  return x;
}

TEST(SizeCheck, AcceptsOrdinaryShapes) {
  EXPECT_TRUE(CheckShape(Square(256), ServerLimits(), uint64_t{1} << 30, true).ok());
  EXPECT_TRUE(CheckShape(Square(1), LocalLimits(), uint64_t{1} << 30, false).ok());
}

TEST(SizeCheck, ZeroDimensionAndBatchNameTheFlag) {
  Shape s = Square(8);
  s.k = 0;
  absl::Status st = CheckShape(s, ServerLimits(), 0, true);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("--k must be >= 1"));
  s = Square(8);
  s.batch = 0;
  EXPECT_THAT(CheckShape(s, ServerLimits(), 0, true).message(), HasSubstr("--batch"));
}

TEST(SizeCheck, DimensionOverTheServerLimitNamesFlagAndLimit) {
  Shape s = Square(8);
  s.k = 2000000;
  absl::Status st = CheckShape(s, ServerLimits(), 0, true);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(st.message(), HasSubstr("--k=2000000"));
  EXPECT_THAT(st.message(), HasSubstr("1048576"));
  EXPECT_THAT(st.message(), HasSubstr("server's limit"));
}

TEST(SizeCheck, HugeDimensionFailsLocallyWithoutOverflow) {
  Shape s = Square(8);
  s.m = 1000000000000;
  absl::Status st = CheckShape(s, LocalLimits(), 0, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(st.message(), HasSubstr("--m=1000000000000"));
  EXPECT_THAT(st.message(), HasSubstr("local limit"));
}

TEST(SizeCheck, BatchOverTheServerLimit) {
  Shape s = Square(256);
  s.batch = 5000;
  absl::Status st = CheckShape(s, ServerLimits(), 0, true);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(st.message(), HasSubstr("--batch=5000"));
  EXPECT_THAT(st.message(), HasSubstr("4096"));
}

TEST(SizeCheck, MatrixOverMaxProblemBytes) {
  Shape s = Square(8);
  s.m = 1048576;
  s.k = 1048576;  // A alone is 4 TiB of fp32
  absl::Status st = CheckShape(s, ServerLimits(), 0, true);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(st.message(), HasSubstr("A (m x k of --m, --n, --k and --batch)"));
  EXPECT_THAT(st.message(), HasSubstr("max_problem_bytes"));
}

TEST(SizeCheck, ClientBudget) {
  Shape s = Square(1024);  // A and B of 4 MiB each, sent twice: 16 MiB and staging
  absl::StatusOr<uint64_t> bytes = ClientBytes(s);
  ASSERT_TRUE(bytes.ok());
  EXPECT_GE(*bytes, uint64_t{16} << 20);
  absl::Status st = CheckShape(s, ServerLimits(), uint64_t{1} << 20, true);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(st.message(), HasSubstr("--max_client_bytes=1048576"));
  EXPECT_TRUE(CheckShape(s, ServerLimits(), *bytes, true).ok());
}

TEST(SizeCheck, ClientBytesOverflowIsAnError) {
  Shape s = Square(uint64_t{1} << 31);
  s.batch = int64_t{1} << 40;
  EXPECT_EQ(ClientBytes(s).status().code(), absl::StatusCode::kOutOfRange);
  s = Square(uint64_t{1} << 40);
  EXPECT_EQ(ClientBytes(s).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(SizeCheck, SweepMessagesNameSizes) {
  Shape s = Square(2000000);
  s.m_flag = s.n_flag = s.k_flag = "--sizes";
  EXPECT_THAT(CheckShape(s, ServerLimits(), 0, true).message(), HasSubstr("--sizes=2000000"));
  EXPECT_THAT(CheckShape(s, LocalLimits(), 1, false).message(), HasSubstr("--sizes and --batch"));
}

TEST(SizeCheck, DefaultBudgetIsPositive) { EXPECT_GT(DefaultClientBudget(), 0u); }

}  // namespace
}  // namespace gemm::cli
