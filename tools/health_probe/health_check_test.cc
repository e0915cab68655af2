// CheckHealth against real servers on 127.0.0.1:0: the GemmServer (SERVING,
// then unreachable after Shutdown) and a bare gRPC server whose health
// statuses the test sets (NOT_SERVING, named services, unknown service).
#include "tools/health_probe/health_check.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <memory>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "service/server.h"

namespace gemm {
namespace {

HealthCheckOptions Options(int port, std::string service = "") {
  HealthCheckOptions o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.service = std::move(service);
  o.deadline = absl::Seconds(2);
  return o;
}

TEST(HealthCheckTest, GemmServerIsServingUntilShutdown) {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.backend = "cpu";
  options.cpu.calibrate = false;
  auto server = GemmServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  absl::StatusOr<ServingStatus> status = CheckHealth(Options(port));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);

  (*server)->Shutdown(absl::ZeroDuration());
  HealthCheckOptions after = Options(port);
  after.deadline = absl::Milliseconds(300);
  status = CheckHealth(after);
  EXPECT_FALSE(status.ok() && *status == ServingStatus::kServing)
      << "still SERVING after Shutdown";
}

class BareServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  grpc::HealthCheckServiceInterface* health() { return server_->GetHealthCheckService(); }

  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(BareServerTest, ReportsNotServing) {
  health()->SetServingStatus(false);
  absl::StatusOr<ServingStatus> status = CheckHealth(Options(port_));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kNotServing);
}

TEST_F(BareServerTest, AsksAboutANamedService) {
  health()->SetServingStatus("gemm.v1.GemmService", true);
  health()->SetServingStatus("other.Service", false);
  absl::StatusOr<ServingStatus> status = CheckHealth(Options(port_, "gemm.v1.GemmService"));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
  status = CheckHealth(Options(port_, "other.Service"));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kNotServing);
}

TEST_F(BareServerTest, UnknownServiceIsNotFound) {
  absl::StatusOr<ServingStatus> status = CheckHealth(Options(port_, "no.such.Service"));
  EXPECT_EQ(status.status().code(), absl::StatusCode::kNotFound) << status.status();
}

TEST(HealthCheckTest, NothingListeningFailsWithinTheDeadline) {
  // Port 1 on loopback: privileged and unused in the test sandbox.
  HealthCheckOptions o = Options(1);
  o.deadline = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<ServingStatus> status = CheckHealth(o);
  EXPECT_FALSE(status.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace gemm
