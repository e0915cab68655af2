#include "common/grpc_status.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace gemm {
namespace {

TEST(GrpcStatusTest, EveryCodeRoundTrips) {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status st(static_cast<absl::StatusCode>(code), code == 0 ? "" : "why");
    const grpc::Status g = ToGrpcStatus(st);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(g.error_message(), std::string(st.message()));
    EXPECT_EQ(FromGrpcStatus(g), st) << code;
  }
}

TEST(GrpcStatusTest, KeepsTheMessage) {
  const grpc::Status g = ToGrpcStatus(absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(g.error_message(), "queue full");
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "no such matrix")),
            absl::NotFoundError("no such matrix"));
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, StatusFromCode) {
  EXPECT_TRUE(StatusFromCode(0, "ignored").ok());
  EXPECT_EQ(StatusFromCode(3, "bad"), absl::InvalidArgumentError("bad"));
  EXPECT_EQ(StatusFromCode(16, "who"), absl::UnauthenticatedError("who"));
  EXPECT_EQ(StatusFromCode(17, "odd"), absl::UnknownError("odd"));
  EXPECT_EQ(StatusFromCode(-1, "odd"), absl::UnknownError("odd"));
}

TEST(PushbackTest, Parsing) {
  EXPECT_EQ(ParsePushback(std::nullopt).kind, Pushback::Kind::kAbsent);
  Pushback p = ParsePushback("250");
  EXPECT_EQ(p.kind, Pushback::Kind::kDelay);
  EXPECT_EQ(p.delay, absl::Milliseconds(250));
  p = ParsePushback(" 0 ");
  EXPECT_EQ(p.kind, Pushback::Kind::kDelay);
  EXPECT_EQ(p.delay, absl::ZeroDuration());
  EXPECT_EQ(ParsePushback("-1").kind, Pushback::Kind::kDontRetry);
  EXPECT_EQ(ParsePushback("soon").kind, Pushback::Kind::kDontRetry);
  EXPECT_EQ(ParsePushback("").kind, Pushback::Kind::kDontRetry);
  EXPECT_EQ(ParsePushback("12ms").kind, Pushback::Kind::kDontRetry);
  EXPECT_EQ(ParsePushback("99999999999999999999999").kind, Pushback::Kind::kDontRetry);
}

TEST(PushbackTest, FormatIsWhatParseReads) {
  EXPECT_EQ(FormatPushback(absl::Milliseconds(250)), "250");
  EXPECT_EQ(FormatPushback(absl::Microseconds(1999)), "1");  // truncated
  EXPECT_EQ(FormatPushback(absl::Milliseconds(-1)), "-1");
  for (absl::Duration d : {absl::ZeroDuration(), absl::Milliseconds(7), absl::Seconds(30)}) {
    const Pushback p = ParsePushback(FormatPushback(d));
    EXPECT_EQ(p.kind, Pushback::Kind::kDelay);
    EXPECT_EQ(p.delay, d);
  }
  EXPECT_EQ(ParsePushback(FormatPushback(absl::Milliseconds(-1))).kind,
            Pushback::Kind::kDontRetry);
}

TEST(PushbackTest, FromTrailers) {
  const std::string key(kRetryPushbackKey), value = "40", other = "x-other", junk = "nope";
  std::multimap<grpc::string_ref, grpc::string_ref> trailers;
  EXPECT_EQ(PushbackFromTrailers(trailers).kind, Pushback::Kind::kAbsent);
  trailers.emplace(other, junk);
  EXPECT_EQ(PushbackFromTrailers(trailers).kind, Pushback::Kind::kAbsent);
  trailers.emplace(key, value);
  const Pushback p = PushbackFromTrailers(trailers);
  EXPECT_EQ(p.kind, Pushback::Kind::kDelay);
  EXPECT_EQ(p.delay, absl::Milliseconds(40));
}

}  // namespace
}  // namespace gemm
