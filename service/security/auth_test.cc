#include "service/security/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gemm {
namespace {

using ::testing::HasSubstr;

constexpr char kTokens[] = R"(# caller  token
alice   alice-token-0123456789
bob     bob-token-0123456789ab   # trailing comment

)";

TEST(TokenAuthenticatorTest, ParsesAndAuthenticates) {
  auto auth = TokenAuthenticator::FromText(kTokens);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ((*auth)->size(), 2u);
  EXPECT_EQ((*auth)->Authenticate("Bearer alice-token-0123456789").value(), "alice");
  EXPECT_EQ((*auth)->Authenticate("bearer bob-token-0123456789ab").value(), "bob");
}

TEST(TokenAuthenticatorTest, RejectsWrongMissingAndMalformed) {
  auto auth = TokenAuthenticator::FromText(kTokens).value();
  for (const char* header : {"", "Bearer", "Bearer ", "Bearer alice-token-012345678",
                             "Bearer alice-token-0123456789x", "Basic alice-token-0123456789",
                             "alice-token-0123456789", "Bearer  alice-token-0123456789"}) {
    auto caller = auth->Authenticate(header);
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated) << "'" << header << "'";
  }
}

TEST(TokenAuthenticatorTest, BadFilesNameTheLine) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"", "no tokens"},
      {"alice\n", "line 1"},
      {"alice short\n", "shorter than"},
      {"al/ice alice-token-0123456789\n", "caller names"},
      {"a alice-token-0123456789 extra\n", "line 1"},
      {"a alice-token-0123456789\nb alice-token-0123456789\n", "line 2: the token of b is listed"},
  };
  for (const Case& c : cases) {
    auto auth = TokenAuthenticator::FromText(c.text);
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(auth.status().message()), HasSubstr(c.message)) << c.text;
    // A message never repeats a token.
    EXPECT_THAT(std::string(auth.status().message()), ::testing::Not(HasSubstr("token-0123")));
  }
  EXPECT_EQ(TokenAuthenticator::FromFile("/nonexistent/tokens").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gemm
