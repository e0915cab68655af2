// Several replicas behind one client (in-process CPU servers on loopback,
// one gemm::Client over a multi-address target): every call of a request
// goes to one replica, calls naming a handle go to the replica that issued
// it (from another client object too), a handle sent to the wrong replica
// gets a status saying so, and GetServerInfo reports the instance id that
// prefixes the server's handles.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/gemm_client.h"
#include "client/matrix_view.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

class ReplicasTest : public ::testing::Test {
 protected:
  void StartServers(int n) {
    for (int i = 0; i < n; ++i) {
      auto server = GemmServer::Start(test::LoopbackCpuServerOptions(2));
      ASSERT_TRUE(server.ok()) << server.status();
      servers_.push_back(std::move(*server));
    }
  }

  void TearDown() override {
    for (auto& s : servers_) s->Shutdown(absl::Seconds(5));
  }

  std::string Target() const {
    std::vector<std::string> addresses;
    for (const auto& s : servers_) addresses.push_back(absl::StrCat("127.0.0.1:", s->port()));
    return absl::StrCat("ipv4:", absl::StrJoin(addresses, ","));
  }

  std::unique_ptr<Client> Connect(const std::string& target) {
    ClientOptions o;
    o.target = target;
    o.default_timeout = absl::Seconds(120);
    o.transfer_channels = 2;
    auto client = Client::Create(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::unique_ptr<v1::GemmService::Stub> RawStub(const GemmServer& server) {
    return v1::GemmService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials()));
  }

  static double GemmOk(const GemmServer& server) {
    return test::MetricValue(server.metrics()->Scrape(), "gemm_requests_total",
                             {"method=\"Gemm\"", "code=\"OK\""});
  }

  std::vector<std::unique_ptr<GemmServer>> servers_;
};

// A copy of `problem` whose B is the resident matrix `handle`.
v1::GemmProblem WithResidentB(const v1::GemmProblem& problem, const std::string& handle) {
  v1::GemmProblem p = problem;
  p.mutable_b()->set_handle(handle);
  return p;
}

TEST_F(ReplicasTest, ThreeServersServeMixedRequestsWithoutFailures) {
  StartServers(3);
  std::unique_ptr<Client> client = Connect(Target());
  ASSERT_NE(client, nullptr);

  std::mt19937 rng(29);
  // Resident B: registered once (on whichever replica the client picks) and
  // named by every request of kind 2.
  test::ProblemSpec resident_spec{48, 64, 256};
  const v1::GemmProblem resident_problem = test::MakeProblem(resident_spec, &rng);
  const std::string& b_bytes = resident_problem.b().data();
  auto resident = client->RegisterMatrix(
      MatrixView(reinterpret_cast<const float*>(b_bytes.data()), 256, 64), "shared B");
  ASSERT_TRUE(resident.ok()) << resident.status();

  // The request kinds, each checked against the float64 reference:
  // 0 small, one message; 1 a 4 MiB A (chunked upload); 2 the resident B;
  // 3 keep_results, then Download and Release; 4 a 4 MiB result (kept and
  // downloaded by the client library).
  const test::ProblemSpec small{32, 32, 32};
  const test::ProblemSpec chunked_a{16, 4, 65536};
  const test::ProblemSpec kept{64, 48, 32};
  const test::ProblemSpec big_result{1024, 1024, 1};
  std::vector<v1::GemmProblem> problems;
  for (const test::ProblemSpec& s : {small, chunked_a, kept, big_result})
    problems.push_back(test::MakeProblem(s, &rng));
  ASSERT_GE(problems[1].a().data().size(), size_t{4} << 20);
  ASSERT_GE(uint64_t{1024} * 1024 * 4, uint64_t{4} << 20);

  constexpr int kThreads = 16;
  constexpr int kRequests = 300;
  std::atomic<int> next{0}, ok{0};
  std::mutex failures_mu;
  std::vector<std::string> failures;
  auto fail = [&](int i, const std::string& what) {
    std::lock_guard<std::mutex> lock(failures_mu);
    failures.push_back(absl::StrCat("request ", i, ": ", what));
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = next.fetch_add(1); i < kRequests; i = next.fetch_add(1)) {
        const int kind = i % 5;
        v1::GemmRequest request;
        request.set_request_id(absl::StrCat("r", i));
        const v1::GemmProblem& original =
            kind == 0 ? problems[0]
            : kind == 1 ? problems[1]
            : kind == 2 ? resident_problem
            : kind == 3 ? problems[2]
                        : problems[3];
        *request.add_problems() =
            kind == 2 ? WithResidentB(resident_problem, resident->handle) : original;
        request.set_keep_results(kind == 3);
        GemmResult response = client->Gemm(request);
        if (!response.ok()) {
          fail(i, response.status().ToString());
          continue;
        }
        v1::GemmResult result = response->results(0);
        if (kind == 3) {
          const std::string handle = result.handle();
          if (handle.empty()) {
            fail(i, "keep_results gave no handle");
            continue;
          }
          std::string* data = result.mutable_data();
          data->resize(result.rows() * result.cols() * 4);
          if (absl::Status s = client->DownloadMatrix(handle, data->data(), data->size());
              !s.ok()) {
            fail(i, absl::StrCat("download: ", s.ToString()));
            continue;
          }
          result.clear_handle();
          if (absl::Status s = client->ReleaseMatrix(handle); !s.ok()) {
            fail(i, absl::StrCat("release: ", s.ToString()));
            continue;
          }
        }
        if (::testing::AssertionResult m = test::ResultMatches(original, result); !m) {
          fail(i, m.message());
          continue;
        }
        ok.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(ok.load(), kRequests);
  EXPECT_TRUE(client->ReleaseMatrix(*resident).ok());

  // Every replica served a share, by its own metrics; the client's count
  // agrees on the spread.
  double total = 0;
  for (size_t i = 0; i < servers_.size(); ++i) {
    const double served = GemmOk(*servers_[i]);
    std::printf("replica %zu (instance %s): %.0f Gemm calls OK\n", i,
                servers_[i]->instance_id().c_str(), served);
    EXPECT_GT(served, 20) << "replica " << i;
    total += served;
  }
  EXPECT_EQ(total, kRequests);
  for (const Client::ReplicaStats& r : client->Replicas()) {
    std::printf("client: %s instance %s: %llu requests, %llu failed over\n", r.address.c_str(),
                r.instance_id.c_str(), static_cast<unsigned long long>(r.requests),
                static_cast<unsigned long long>(r.failed_over));
    EXPECT_GT(r.requests, 0u) << r.address;
    EXPECT_EQ(r.failed_over, 0u) << r.address;
  }
  // Nothing was left behind on any replica.
  for (const auto& s : servers_)
    EXPECT_EQ(test::MetricValue(s->metrics()->Scrape(), "gemm_resident_matrices"), 0);
}

TEST_F(ReplicasTest, GetServerInfoReportsTheInstanceThatPrefixesHandles) {
  StartServers(2);
  EXPECT_NE(servers_[0]->instance_id(), servers_[1]->instance_id());
  for (const auto& server : servers_) {
    EXPECT_EQ(server->instance_id().size(), 16u);
    std::unique_ptr<Client> client = Connect(absl::StrCat("127.0.0.1:", server->port()));
    auto info = client->GetServerInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->instance_id(), server->instance_id());
    const std::vector<float> m(16, 1.0f);
    auto h = client->RegisterMatrix(MatrixView(m.data(), 4, 4));
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->handle.substr(0, 17), server->instance_id() + "-");
    EXPECT_TRUE(client->ReleaseMatrix(*h).ok());
  }
}

TEST_F(ReplicasTest, AHandleSentToTheWrongReplicaSaysItBelongsToAnotherServer) {
  StartServers(2);
  std::unique_ptr<Client> first = Connect(absl::StrCat("127.0.0.1:", servers_[0]->port()));
  std::mt19937 rng(7);
  const v1::GemmProblem problem = test::MakeProblem(test::ProblemSpec{8, 8, 8}, &rng);
  auto h = first->RegisterMatrix(
      MatrixView(reinterpret_cast<const float*>(problem.b().data().data()), 8, 8));
  ASSERT_TRUE(h.ok()) << h.status();

  auto other = RawStub(*servers_[1]);
  v1::GemmRequest request;
  *request.add_problems() = WithResidentB(problem, h->handle);
  {
    grpc::ClientContext ctx;
    v1::GemmResponse response;
    const grpc::Status st = other->Gemm(&ctx, request, &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(st.error_message(), HasSubstr("problems[0].b.handle"));
    EXPECT_THAT(st.error_message(), HasSubstr("belongs to another server"));
    EXPECT_THAT(st.error_message(), HasSubstr(servers_[0]->instance_id()));
  }
  {
    grpc::ClientContext ctx;
    v1::ReleaseMatrixRequest release;
    release.set_handle(h->handle);
    v1::ReleaseMatrixResponse response;
    const grpc::Status st = other->ReleaseMatrix(&ctx, release, &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(st.error_message(), HasSubstr("belongs to another server"));
  }
  // Downloads say the same (a client pointed at the wrong replica alone).
  std::unique_ptr<Client> second = Connect(absl::StrCat("127.0.0.1:", servers_[1]->port()));
  std::vector<float> out(64);
  const absl::Status download = second->DownloadMatrix(h->handle, out.data(), 256);
  EXPECT_EQ(download.code(), absl::StatusCode::kFailedPrecondition) << download;
  EXPECT_THAT(std::string(download.message()), HasSubstr("belongs to another server"));
  // A released handle of the replica itself still reads as released.
  EXPECT_TRUE(first->ReleaseMatrix(*h).ok());
  const absl::Status again = first->ReleaseMatrix(*h);
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound) << again;
}

TEST_F(ReplicasTest, AnotherClientObjectFindsTheOwnerOfAHandle) {
  StartServers(3);
  std::mt19937 rng(8);
  const v1::GemmProblem problem = test::MakeProblem(test::ProblemSpec{16, 16, 16}, &rng);
  std::unique_ptr<Client> maker = Connect(Target());
  // Registrations spread over the replicas; each is then used by a fresh
  // client object that has never talked to any of them.
  std::vector<ResidentHandle> handles;
  for (int i = 0; i < 6; ++i) {
    auto h = maker->RegisterMatrix(
        MatrixView(reinterpret_cast<const float*>(problem.b().data().data()), 16, 16));
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  std::unique_ptr<Client> user = Connect(Target());
  for (const ResidentHandle& h : handles) {
    v1::GemmRequest request;
    *request.add_problems() = WithResidentB(problem, h.handle);
    GemmResult response = user->Gemm(request);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_TRUE(test::ResultMatches(problem, response->results(0)));
    // The asynchronous path routes the same way.
    GemmResult async = user->GemmFuture(request).get();
    ASSERT_TRUE(async.ok()) << async.status();
    EXPECT_TRUE(user->ReleaseMatrix(h).ok());
  }
  int served = 0;
  for (const auto& s : servers_) served += GemmOk(*s) > 0;
  EXPECT_GE(served, 2) << "the registrations all went to one replica";
}

}  // namespace
}  // namespace gemm
