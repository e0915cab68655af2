#include "service/queue/tenants.h"

#include <cstdio>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gemm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<TenantsConfig> Parse(absl::string_view text) {
  return TenantsConfig::Parse(text, "tenants.txt");
}

// The error message of parsing `text`, which must fail with InvalidArgument.
std::string ErrorOf(absl::string_view text) {
  auto config = Parse(text);
  EXPECT_FALSE(config.ok()) << text;
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

TEST(TenantsConfigTest, ParsesEveryKey) {
  auto config = Parse(R"(# two teams
tenant team-a weight=3 caller=alice caller="x509:CN=build bot,O=Example" max_inflight_bytes=2GiB max_requests_in_flight=64 max_resident_bytes=512MiB max_flops_per_s=2e14 flops_burst=1e15

tenant team-b   # weight 1, no limits
default team-b
)");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->tenants().size(), 2u);
  const TenantSpec& a = config->tenants()[0];
  EXPECT_EQ(a.name, "team-a");
  EXPECT_EQ(a.line, 2);
  EXPECT_DOUBLE_EQ(a.weight, 3);
  EXPECT_THAT(a.callers, ElementsAre("alice", "x509:CN=build bot,O=Example"));
  EXPECT_EQ(a.limits.max_inflight_bytes, uint64_t{2} << 30);
  EXPECT_EQ(a.limits.max_requests_in_flight, 64u);
  EXPECT_EQ(a.limits.max_resident_bytes, uint64_t{512} << 20);
  EXPECT_DOUBLE_EQ(a.limits.max_flops_per_s, 2e14);
  EXPECT_DOUBLE_EQ(a.limits.flops_burst, 1e15);
  const TenantSpec& b = config->tenants()[1];
  EXPECT_EQ(b.name, "team-b");
  EXPECT_DOUBLE_EQ(b.weight, 1);
  EXPECT_THAT(b.callers, ElementsAre("team-b"));
  EXPECT_EQ(b.limits.max_inflight_bytes, 0u);
  EXPECT_EQ(b.limits.max_requests_in_flight, 0u);
  EXPECT_EQ(b.limits.max_resident_bytes, 0u);
  EXPECT_EQ(b.limits.max_flops_per_s, 0);

  EXPECT_EQ(config->Resolve("alice").name, "team-a");
  EXPECT_EQ(config->Resolve("x509:CN=build bot,O=Example").name, "team-a");
  EXPECT_EQ(config->Resolve("team-b").name, "team-b");
  EXPECT_EQ(config->Resolve("mallory").name, "team-b");
  EXPECT_EQ(config->Resolve("").name, "team-b");
  EXPECT_EQ(config->Resolve("ipv4:127.0.0.1:5000").name, "team-b");
  EXPECT_EQ(config->default_tenant(), "team-b");
  EXPECT_EQ(config->Find("team-a"), &a);
  EXPECT_EQ(config->Find("other"), nullptr);
}

TEST(TenantsConfigTest, UnlistedCallersFormOther) {
  auto config = Parse("tenant a\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->tenants().size(), 2u);
  EXPECT_EQ(config->tenants()[1].name, "other");
  EXPECT_DOUBLE_EQ(config->tenants()[1].weight, 1);
  EXPECT_EQ(config->Resolve("a").name, "a");
  EXPECT_EQ(config->Resolve("b").name, "other");
  EXPECT_EQ(config->Resolve("").name, "other");
}

TEST(TenantsConfigTest, OtherMayBeConfigured) {
  auto config = Parse("tenant other weight=0.5 max_requests_in_flight=4\ntenant a\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->tenants().size(), 2u);
  EXPECT_EQ(config->Resolve("zed").name, "other");
  EXPECT_DOUBLE_EQ(config->Resolve("zed").weight, 0.5);
  EXPECT_EQ(config->Resolve("zed").limits.max_requests_in_flight, 4u);
}

TEST(TenantsConfigTest, AnEmptyFileHasOnlyOther) {
  auto config = Parse("# nothing\n\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->tenants().size(), 1u);
  EXPECT_EQ(config->Resolve("anyone").name, "other");
}

TEST(TenantsConfigTest, ByteSuffixes) {
  auto config = Parse(
      "tenant a max_inflight_bytes=1000\ntenant b max_inflight_bytes=3KB\n"
      "tenant c max_inflight_bytes=5MiB\ntenant d max_inflight_bytes=1TB\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->Find("a")->limits.max_inflight_bytes, 1000u);
  EXPECT_EQ(config->Find("b")->limits.max_inflight_bytes, 3000u);
  EXPECT_EQ(config->Find("c")->limits.max_inflight_bytes, 5u << 20);
  EXPECT_EQ(config->Find("d")->limits.max_inflight_bytes, uint64_t{1000000000000});
}

TEST(TenantsConfigTest, TheBurstDefaultsToOneSecondOfTheRate) {
  auto config = Parse("tenant a max_flops_per_s=5e12\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->Find("a")->limits.flops_burst, 5e12);
}

TEST(TenantsConfigTest, ErrorsNameTheLineAndTheField) {
  EXPECT_THAT(ErrorOf("tenant a\n\ntenant b weight=-1\n"),
              HasSubstr("tenants.txt:3: tenant b: weight: expected a positive finite number, "
                        "got \"-1\""));
  EXPECT_THAT(ErrorOf("tenant a weight=nan\n"), HasSubstr("tenants.txt:1: tenant a: weight"));
  EXPECT_THAT(ErrorOf("tenant a colour=blue\n"),
              HasSubstr("tenants.txt:1: tenant a: unknown key \"colour\""));
  EXPECT_THAT(ErrorOf("tenant a weight\n"),
              HasSubstr("tenants.txt:1: tenant a: expected key=value, got \"weight\""));
  EXPECT_THAT(ErrorOf("tenant a weight=1 weight=2\n"),
              HasSubstr("tenants.txt:1: tenant a: weight given twice"));
  EXPECT_THAT(ErrorOf("tenant a max_inflight_bytes=2XB\n"),
              HasSubstr("tenants.txt:1: tenant a: max_inflight_bytes: expected a byte count"));
  EXPECT_THAT(ErrorOf("tenant a max_inflight_bytes=-5\n"),
              HasSubstr("tenants.txt:1: tenant a: max_inflight_bytes"));
  EXPECT_THAT(ErrorOf("tenant a max_inflight_bytes=99999999999TiB\n"),
              HasSubstr("tenants.txt:1: tenant a: max_inflight_bytes"));
  EXPECT_THAT(ErrorOf("tenant a max_resident_bytes=lots\n"),
              HasSubstr("tenants.txt:1: tenant a: max_resident_bytes: expected a byte count"));
  EXPECT_THAT(ErrorOf("tenant a max_resident_bytes=0\n"),
              HasSubstr("tenants.txt:1: tenant a: max_resident_bytes: must be positive"));
  EXPECT_THAT(ErrorOf("tenant a max_requests_in_flight=0\n"),
              HasSubstr("tenants.txt:1: tenant a: max_requests_in_flight: expected a positive "
                        "integer, got \"0\""));
  EXPECT_THAT(ErrorOf("tenant a flops_burst=1e9\n"),
              HasSubstr("tenants.txt:1: tenant a: flops_burst needs max_flops_per_s"));
  EXPECT_THAT(ErrorOf("tenant a caller=\n"), HasSubstr("tenants.txt:1: tenant a: caller: empty"));
  EXPECT_THAT(ErrorOf("tenant\n"), HasSubstr("tenants.txt:1: tenant: expected a name"));
  EXPECT_THAT(ErrorOf("tenant a/b\n"),
              HasSubstr("tenants.txt:1: tenant: the name \"a/b\" is not [A-Za-z0-9._@-]{1,64}"));
  EXPECT_THAT(ErrorOf(std::string("tenant ") + std::string(65, 'x') + "\n"),
              HasSubstr("tenants.txt:1: tenant: the name"));
  EXPECT_THAT(ErrorOf("tenant a\ntenant a\n"),
              HasSubstr("tenants.txt:2: tenant a is defined twice (first on line 1)"));
  EXPECT_THAT(ErrorOf("tenant a caller=x\ntenant b caller=x\n"),
              HasSubstr("tenants.txt:2: tenant b: caller \"x\" already belongs to tenant a"));
  EXPECT_THAT(ErrorOf("tenant a caller=x caller=x\n"),
              HasSubstr("tenants.txt:1: tenant a: caller \"x\" already belongs to tenant a"));
  EXPECT_THAT(ErrorOf("tenant a caller=\"x y\n"),
              HasSubstr("tenants.txt:1: unterminated double quote"));
  EXPECT_THAT(ErrorOf("tenant a\nweight a 3\n"),
              HasSubstr("tenants.txt:2: unknown directive \"weight\""));
  EXPECT_THAT(ErrorOf("tenant a\ndefault\n"),
              HasSubstr("tenants.txt:2: default: expected exactly one tenant name"));
  EXPECT_THAT(ErrorOf("tenant a\ndefault a\ndefault a\n"),
              HasSubstr("tenants.txt:3: default is given twice (first on line 2)"));
  EXPECT_THAT(ErrorOf("tenant a\n\ndefault b\ntenant c\n"),
              HasSubstr("tenants.txt:3: default: no tenant is named \"b\""));
}

TEST(TenantsConfigTest, LoadReadsAFileAndNamesItInErrors) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/tenants.txt";
  {
    std::ofstream out(path);
    out << "tenant a weight=2\ntenant b weight=zero\n";
  }
  auto bad = TenantsConfig::Load(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path + ":2: tenant b: weight"));
  {
    std::ofstream out(path);
    out << "tenant a weight=2\n";
  }
  auto good = TenantsConfig::Load(path);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_DOUBLE_EQ(good->Find("a")->weight, 2);

  auto missing = TenantsConfig::Load(path + ".absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("tenants.txt.absent"));
}

}  // namespace
}  // namespace gemm
