// Tenants end to end: a real server (in-process, CPU backend, one request
// at a time) with bearer tokens for two callers, alice of tenant "heavy" and
// bob of tenant "light", driven over gRPC on a connection of each caller's
// own.
//
// - While heavy floods with large requests up to its max_requests_in_flight,
//   light's small requests are all served, none refused, with a p99 latency
//   far below what waiting behind heavy's backlog takes (heavy's own median);
//   heavy's requests over its limit get RESOURCE_EXHAUSTED naming the tenant
//   and the limit, with a retry pushback; the per-tenant metrics count it all.
// - A tenant over its max_resident_bytes is refused RegisterMatrix naming
//   the tenant and the limit; the other tenant is not.
// - Reloading the tenants file under load loses and fails no request; a bad
//   file is refused and the configuration in force kept.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/server.h"
#include "tests/test_certs.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::gemm::test::MakeProblem;
using ::gemm::test::MetricValue;
using ::gemm::test::ProblemSpec;
using ::gemm::test::ResponseMatches;
using ::testing::HasSubstr;

constexpr char kAliceToken[] = "alice-tenants-0123456789";
constexpr char kBobToken[] = "bob-tenants-0123456789";
constexpr char kPushbackKey[] = "grpc-retry-pushback-ms";
constexpr int kHeavyInFlight = 16;

class TenantsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::TestTempDir();
    tokens_file_ = dir_ + "/tokens";
    std::ofstream(tokens_file_) << "alice " << kAliceToken << "\nbob " << kBobToken << "\n";
    tenants_file_ = dir_ + "/tenants";
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(10));
  }

  void WriteTenants(const std::string& text) { std::ofstream(tenants_file_) << text; }

  // Starts the server on the tenants file as it is now.
  void StartServer() {
    ServerOptions o = test::LoopbackCpuServerOptions(/*concurrent_requests=*/1);
    o.security.auth_tokens_file = tokens_file_;
    // One request a batch: the queue's order between tenants is the order
    // the backend runs them in.
    o.batcher.budget.max_requests = 1;
    o.limits.max_resident_bytes = 64 << 20;
    auto tenants = TenantsConfig::Load(tenants_file_);
    ASSERT_TRUE(tenants.ok()) << tenants.status();
    o.tenants = std::make_shared<const TenantsConfig>(*std::move(tenants));
    auto server = GemmServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // A connection of its own (the server binds a connection to one caller).
  std::unique_ptr<v1::GemmService::Stub> Connect() const {
    return test::LoopbackStub(server_->port(), /*own_connection=*/true);
  }

  struct Outcome {
    grpc::Status status;
    absl::Duration latency;
    std::string pushback;  // the trailer, empty when absent
    bool matches = false;  // OK and (when checked) every result right
  };

  // With `check`, the results are compared with the float64 reference.
  static Outcome Call(v1::GemmService::Stub* stub, const char* token,
                      const v1::GemmRequest& request, bool check = true) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    v1::GemmResponse response;
    Outcome out;
    const absl::Time start = absl::Now();
    out.status = stub->Gemm(&ctx, request, &response);
    out.latency = absl::Now() - start;
    const auto& trailers = ctx.GetServerTrailingMetadata();
    if (auto it = trailers.find(kPushbackKey); it != trailers.end())
      out.pushback = std::string(it->second.data(), it->second.size());
    out.matches = out.status.ok() && (!check || ResponseMatches(request, response));
    return out;
  }

  // Registers a rows x cols fp32 matrix of zeros for the caller of `token`;
  // returns its handle.
  static std::string Register(v1::GemmService::Stub* stub, const char* token, uint64_t rows,
                              uint64_t cols) {
    v1::RegisterMatrixRequest request;
    request.set_rows(rows);
    request.set_cols(cols);
    request.set_dtype(v1::DATA_TYPE_FP32);
    request.set_layout(v1::LAYOUT_ROW_MAJOR);
    request.set_data(std::string(rows * cols * 4, '\0'));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    v1::RegisterMatrixResponse response;
    const grpc::Status st = stub->RegisterMatrix(&ctx, request, &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return response.handle();
  }

  static v1::GemmRequest Request(uint64_t size, std::mt19937* rng) {
    v1::GemmRequest r;
    ProblemSpec spec;
    spec.m = spec.n = spec.k = size;
    *r.add_problems() = MakeProblem(spec, rng);
    return r;
  }

  static absl::Duration Percentile(std::vector<absl::Duration> v, double q) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
  }

  std::string Scrape() const { return server_->metrics()->Scrape(); }

  std::string dir_;
  std::string tokens_file_;
  std::string tenants_file_;
  std::unique_ptr<GemmServer> server_;
};

TEST_F(TenantsE2eTest, LightTenantKeepsItsLatencyWhileHeavyFloodsAndIsRefusedAtItsLimit) {
  WriteTenants(absl::StrCat("tenant heavy caller=alice max_requests_in_flight=", kHeavyInFlight,
                            "\ntenant light caller=bob\n"));
  StartServer();
  std::mt19937 rng(50);
  const v1::GemmRequest small = Request(16, &rng);
  // Heavy's large problem (2^31 FLOPs) reads operands held on the server,
  // so that its requests cost the machine compute, not parsing: a 1024 x
  // 256 result of a 1024 x 4096 and a 4096 x 256 matrix.
  v1::GemmRequest large;
  {
    auto alice = Connect();
    v1::GemmProblem* p = large.add_problems();
    p->set_m(1024);
    p->set_n(256);
    p->set_k(4096);
    p->set_input_dtype(v1::DATA_TYPE_FP32);
    p->mutable_a()->set_handle(Register(alice.get(), kAliceToken, 1024, 4096));
    p->mutable_a()->set_layout(v1::LAYOUT_ROW_MAJOR);
    p->mutable_b()->set_handle(Register(alice.get(), kAliceToken, 4096, 256));
    p->mutable_b()->set_layout(v1::LAYOUT_ROW_MAJOR);
  }

  // Heavy: more callers than its limit, each sending back to back.
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::vector<Outcome> heavy;
  std::vector<std::thread> flood;
  for (int i = 0; i < kHeavyInFlight + 2; ++i) {
    flood.emplace_back([&] {
      auto stub = Connect();
      while (!stop.load()) {
        // Not checked against the reference (the operands are zeros, and
        // 2^31 FLOPs in float64 would take the cores the server needs).
        Outcome o = Call(stub.get(), kAliceToken, large, /*check=*/false);
        if (o.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
          absl::SleepFor(absl::Milliseconds(20));  // a client's retry
        absl::MutexLock lock(&mu);
        heavy.push_back(std::move(o));
      }
    });
  }
  // Until heavy's backlog is at its limit.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (absl::Now() < give_up) {
    if (MetricValue(Scrape(), "gemm_tenant_rejections_total",
                    {"tenant=\"heavy\"", "limit=\"tenant.max_requests_in_flight\""}) > 0)
      break;
    absl::SleepFor(absl::Milliseconds(5));
  }

  // Light: small requests one after another while heavy floods.
  auto bob = Connect();
  std::vector<absl::Duration> light;
  constexpr int kLight = 150;
  for (int i = 0; i < kLight; ++i) {
    Outcome o = Call(bob.get(), kBobToken, small);
    ASSERT_TRUE(o.status.ok()) << "light request " << i << " refused: " << o.status.error_code()
                               << " " << o.status.error_message();
    ASSERT_TRUE(o.matches) << "light request " << i;
    light.push_back(o.latency);
  }
  stop.store(true);
  for (std::thread& t : flood) t.join();

  std::vector<absl::Duration> heavy_ok;
  int refused = 0;
  for (const Outcome& o : heavy) {
    if (o.status.ok()) {
      heavy_ok.push_back(o.latency);
      continue;
    }
    ASSERT_EQ(o.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << o.status.error_message();
    ++refused;
    EXPECT_THAT(o.status.error_message(),
                HasSubstr(absl::StrCat("tenant heavy has ", kHeavyInFlight,
                                       " requests in flight, its max_requests_in_flight")));
    int64_t ms = -1;
    ASSERT_TRUE(absl::SimpleAtoi(o.pushback, &ms)) << "pushback \"" << o.pushback << "\"";
    EXPECT_GE(ms, 0) << "a request refused at its tenant's limit may retry";
  }
  ASSERT_GT(refused, 0) << "heavy never reached its limit";
  ASSERT_GT(heavy_ok.size(), 10u);

  // Heavy's requests wait behind its own backlog of up to 16 large ones;
  // light's wait for about the large one running, not for that backlog
  // (first come first served would give light about heavy's latency).
  const absl::Duration heavy_p50 = Percentile(heavy_ok, 0.5);
  const absl::Duration light_p99 = Percentile(light, 0.99);
  EXPECT_LT(light_p99, heavy_p50 / 2)
      << "light p50 " << Percentile(light, 0.5) << " p99 " << light_p99 << ", heavy p50 "
      << heavy_p50;
  EXPECT_LT(light_p99, absl::Seconds(5));

  // The per-tenant metrics say the same.
  const std::string scrape = Scrape();
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_requests_total", {"tenant=\"light\"", "code=\"OK\""}),
            kLight);
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_requests_total",
                        {"tenant=\"light\"", "code=\"RESOURCE_EXHAUSTED\""}),
            0);
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_requests_total", {"tenant=\"heavy\"", "code=\"OK\""}),
            heavy_ok.size());
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_rejections_total",
                        {"tenant=\"heavy\"", "limit=\"tenant.max_requests_in_flight\""}),
            refused);
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_floating_point_operations_total",
                        {"tenant=\"light\""}),
            kLight * 2.0 * 16 * 16 * 16);
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_floating_point_operations_total",
                        {"tenant=\"heavy\""}),
            heavy_ok.size() * 2.0 * 1024 * 256 * 4096);
  EXPECT_GT(MetricValue(scrape, "gemm_tenant_device_seconds_total", {"tenant=\"heavy\""}),
            MetricValue(scrape, "gemm_tenant_device_seconds_total", {"tenant=\"light\""}));
  EXPECT_GT(MetricValue(scrape, "gemm_tenant_device_seconds_total", {"tenant=\"light\""}), 0);
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_queue_wait_seconds_count", {"tenant=\"light\""}),
            kLight);
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_weight", {"tenant=\"heavy\""}), 1);
}

TEST_F(TenantsE2eTest, ATenantOverItsResidentBytesIsRefusedAndTheOtherIsNot) {
  WriteTenants("tenant heavy caller=alice max_resident_bytes=100KiB\ntenant light caller=bob\n");
  StartServer();
  auto alice = Connect();
  auto bob = Connect();
  // 128 x 128 fp32: 64 KiB.
  auto register_matrix = [](v1::GemmService::Stub* stub, const char* token) {
    v1::RegisterMatrixRequest request;
    request.set_rows(128);
    request.set_cols(128);
    request.set_dtype(v1::DATA_TYPE_FP32);
    request.set_layout(v1::LAYOUT_ROW_MAJOR);
    request.set_data(std::string(128 * 128 * 4, '\0'));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    v1::RegisterMatrixResponse response;
    return stub->RegisterMatrix(&ctx, request, &response);
  };
  ASSERT_TRUE(register_matrix(alice.get(), kAliceToken).ok());
  const grpc::Status over = register_matrix(alice.get(), kAliceToken);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(over.error_message(),
              HasSubstr("tenant heavy: max_resident_bytes: 65536 more bytes would pass the "
                        "tenant's limit of 102400 (65536 held)"));
  for (int i = 0; i < 3; ++i) {
    const grpc::Status st = register_matrix(bob.get(), kBobToken);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(MetricValue(Scrape(), "gemm_tenant_rejections_total",
                        {"tenant=\"heavy\"", "limit=\"tenant.max_resident_bytes\""}),
            1);
  // Keeping a 128 x 128 fp32 result (64 KiB) would pass heavy's limit too:
  // refused before it runs; light keeps its result.
  std::mt19937 rng(52);
  v1::GemmRequest keep = Request(128, &rng);
  keep.set_keep_results(true);
  const Outcome refused = Call(alice.get(), kAliceToken, keep, /*check=*/false);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(),
              HasSubstr("keep_results: the results need 65536 bytes: tenant heavy: "
                        "max_resident_bytes"));
  EXPECT_EQ(MetricValue(Scrape(), "gemm_tenant_rejections_total",
                        {"tenant=\"heavy\"", "limit=\"tenant.max_resident_bytes\""}),
            2);
  const Outcome kept = Call(bob.get(), kBobToken, keep, /*check=*/false);
  EXPECT_TRUE(kept.status.ok()) << kept.status.error_message();
}

TEST_F(TenantsE2eTest, AReloadUnderLoadLosesNoRequestAndABadFileKeepsTheConfiguration) {
  WriteTenants("tenant heavy caller=alice weight=1\ntenant light caller=bob weight=1\n");
  StartServer();
  std::mt19937 rng(51);
  const v1::GemmRequest request = Request(96, &rng);
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0}, ok{0};
  std::vector<std::string> failures;
  absl::Mutex mu;
  std::vector<std::thread> load;
  for (const char* token : {kAliceToken, kAliceToken, kBobToken, kBobToken}) {
    load.emplace_back([&, token] {
      auto stub = Connect();
      // At least a few requests each, and on until the reloads are done.
      for (int i = 0; i < 5 || !stop.load(); ++i) {
        sent.fetch_add(1);
        Outcome o = Call(stub.get(), token, request);
        if (o.matches) {
          ok.fetch_add(1);
        } else {
          absl::MutexLock lock(&mu);
          failures.push_back(absl::StrCat(token, ": ", o.status.error_code(), " ",
                                          o.status.error_message()));
        }
      }
    });
  }
  // Reloads while the load runs: a good file (new weights, a new tenant),
  // a bad one, the good one again, ...
  const std::string good =
      "tenant heavy caller=alice weight=3\ntenant light caller=bob weight=1\ntenant extra\n";
  for (int round = 0; round < 5; ++round) {
    absl::SleepFor(absl::Milliseconds(20));
    WriteTenants(good);
    ASSERT_TRUE(server_->ReloadTenants(tenants_file_).ok());
    absl::SleepFor(absl::Milliseconds(20));
    WriteTenants("tenant heavy caller=alice weight=3\ntenant light caller=bob weight=zero\n");
    const absl::Status bad = server_->ReloadTenants(tenants_file_);
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(bad.message()),
                HasSubstr(absl::StrCat(tenants_file_, ":2: tenant light: weight")));
  }
  stop.store(true);
  for (std::thread& t : load) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, the first: " << failures[0];
  EXPECT_EQ(ok.load(), sent.load());
  EXPECT_GE(sent.load(), 20);

  // The good file is in force: its weights and its new tenant.
  const std::string scrape = Scrape();
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_weight", {"tenant=\"heavy\""}), 3);
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_weight", {"tenant=\"light\""}), 1);
  EXPECT_THAT(scrape, HasSubstr("gemm_tenant_weight{tenant=\"extra\"} 1"));
  EXPECT_EQ(MetricValue(scrape, "gemm_tenant_requests_total", {"tenant=\"heavy\"", "code=\"OK\""}) +
                MetricValue(scrape, "gemm_tenant_requests_total",
                            {"tenant=\"light\"", "code=\"OK\""}),
            sent.load());
}

}  // namespace
}  // namespace gemm
