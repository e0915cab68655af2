#include "client/targets.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gemm {
namespace client_internal {
namespace {

using ::testing::ElementsAre;

TEST(TargetsTest, AnAddressListIsOneReplicaPerAddress) {
  EXPECT_THAT(SplitAddressList("ipv4:10.0.0.1:50051,10.0.0.2:50051"),
              ElementsAre("ipv4:10.0.0.1:50051", "ipv4:10.0.0.2:50051"));
  EXPECT_THAT(SplitAddressList("ipv6:[::1]:50051,,[fe80::1]:7"),
              ElementsAre("ipv6:[::1]:50051", "ipv6:[fe80::1]:7"));
  EXPECT_THAT(SplitAddressList("localhost:50051"), ElementsAre("localhost:50051"));
  EXPECT_THAT(SplitAddressList("unix:/run/gemm.sock"), ElementsAre("unix:/run/gemm.sock"));
}

TEST(TargetsTest, DnsTargetsInEveryForm) {
  std::string name, port;
  ASSERT_TRUE(ParseDnsTarget("dns:///gemm.svc:50051", &name, &port));
  EXPECT_EQ(name, "gemm.svc");
  EXPECT_EQ(port, "50051");
  ASSERT_TRUE(ParseDnsTarget("dns://8.8.8.8/gemm.svc:7", &name, &port));
  EXPECT_EQ(name, "gemm.svc");
  EXPECT_EQ(port, "7");
  ASSERT_TRUE(ParseDnsTarget("dns:gemm.svc", &name, &port));
  EXPECT_EQ(name, "gemm.svc");
  EXPECT_EQ(port, "443");
  ASSERT_TRUE(ParseDnsTarget("dns:///[::1]:9", &name, &port));
  EXPECT_EQ(name, "::1");
  EXPECT_EQ(port, "9");
  ASSERT_TRUE(ParseDnsTarget("dns:///[::1]", &name, &port));
  EXPECT_EQ(name, "::1");
  EXPECT_EQ(port, "443");
}

TEST(TargetsTest, WhatIsNotADnsTargetIsSaidSo) {
  std::string name, port;
  EXPECT_FALSE(ParseDnsTarget("localhost:50051", &name, &port));
  EXPECT_FALSE(ParseDnsTarget("dns:", &name, &port));
  EXPECT_FALSE(ParseDnsTarget("dns://authority-without-path", &name, &port));
  EXPECT_FALSE(ParseDnsTarget("dns:///:50051", &name, &port));
}

TEST(TargetsTest, LocalhostResolvesToLoopbackAndAnUnknownNameIsNamed) {
  auto found = ResolveName("localhost", "50051");
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_FALSE(found->empty());
  for (const std::string& t : *found)
    EXPECT_TRUE(t == "ipv4:127.0.0.1:50051" || t == "ipv6:[::1]:50051") << t;
  EXPECT_TRUE(std::is_sorted(found->begin(), found->end()));

  auto missing = ResolveName("no-such-host.invalid", "1");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("no-such-host.invalid"), std::string::npos);
}

TEST(TargetsTest, AHandleNamesItsServerInstance) {
  const std::string instance = "0123456789abcdef";
  const std::string handle = instance + "-" + std::string(32, 'a');
  EXPECT_EQ(HandleInstance(handle), instance);
  EXPECT_EQ(HandleInstance("h-1"), "");                               // a handle without one
  EXPECT_EQ(HandleInstance(instance + "+" + std::string(32, 'a')), "");  // no dash
  EXPECT_EQ(HandleInstance("0123456789ABCDEF-" + std::string(32, 'a')), "");  // not lower hex
}

}  // namespace
}  // namespace client_internal
}  // namespace gemm
