// GPU faults contained (H200; skips where no CUDA device is visible): a
// kernel that hangs past the watchdog, and a sticky CUDA error, are injected
// through CudaExecutor::Options::before_launches with the test-only kernels
// of service/cuda/testing/ while clients keep requests in flight. Every
// request must get an answer (OK with the right result, or UNAVAILABLE),
// gemm_device_healthy must drop, and health must turn NOT_SERVING once no
// GPU is left; with two executors on one GPU, work moves to the healthy one.
//
// A sticky error leaves the process's CUDA context unusable, so the sticky
// test must run last or alone: run each test in its own process
// (--gtest_filter=GpuFaultTest.<name>), as bench/gpu.sh's fault suite does.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/cuda/testing/fault_kernels.h"
#include "service/exec/cuda_executor.h"
#include "service/exec/multi_device_executor.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using test::MakeProblem;
using test::ProblemSpec;
using test::ResponseMatches;

// What the clients saw. in_flight_at_fault is read when the fault kernel is
// enqueued: calls sent and not yet answered at that moment.
struct Tally {
  std::atomic<int> sent{0}, answered{0}, ok{0}, unavailable{0}, other{0}, wrong{0};
  std::atomic<int> in_flight_at_fault{-1};
  std::atomic<int> ok_after_fault{0};
  std::atomic<bool> faulted{false};
  void Print(const char* what) const {
    std::printf(
        "%s: sent %d, in flight at the fault %d, answered %d (OK %d of which %d after the "
        "fault, UNAVAILABLE %d, other %d), wrong %d, lost %d\n",
        what, sent.load(), in_flight_at_fault.load(), answered.load(), ok.load(),
        ok_after_fault.load(), unavailable.load(), other.load(), wrong.load(),
        sent.load() - answered.load());
  }
};

// What every fault test requires of the clients' view: the fault was
// injected, every call got an answer, none a status other than OK or
// UNAVAILABLE, and every OK result was right.
void ExpectEveryCallAnswered(const Tally& tally) {
  EXPECT_TRUE(tally.faulted.load());
  EXPECT_EQ(tally.answered.load(), tally.sent.load());
  EXPECT_EQ(tally.other.load(), 0);
  EXPECT_EQ(tally.wrong.load(), 0);
}

// A seam that injects `fault` into the `at`-th batch the executor runs
// (counting from 1), once, and records the calls in flight then.
std::function<void(void*)> FaultAt(int at, Tally* tally,
                                   std::function<std::string(void*)> fault) {
  auto batches = std::make_shared<std::atomic<int>>(0);
  return [=](void* stream) {
    if (++*batches != at) return;
    tally->in_flight_at_fault = tally->sent.load() - tally->answered.load();
    tally->faulted = true;
    const std::string error = fault(stream);
    if (!error.empty()) std::fprintf(stderr, "fault kernel launch: %s\n", error.c_str());
  };
}

CudaExecutor::Options GpuOptions() {
  CudaExecutor::Options o;
  o.device = 0;
  o.calibrate = false;  // nothing predicted: the watchdog deadline is its period
  o.streams = 4;
  return o;
}

class GpuFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaExecutor::DeviceCount() == 0)
      GTEST_SKIP() << "no CUDA device visible: GPU faults are tested on the GPU box";
  }

  void Serve(std::unique_ptr<Executor> executor) {
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.backend = "cuda";
    auto s = GemmServer::Start(o, std::move(executor));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    stub_ = v1::GemmService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  }

  // `clients` threads send 192^3 to 320^3 bf16/fp16 problems back to back
  // for `seconds`, each call with a 60 s deadline, and check every OK result.
  void Load(int clients, absl::Duration seconds, Tally* tally) {
    const absl::Time end = absl::Now() + seconds;
    std::vector<std::thread> threads;
    for (int t = 0; t < clients; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(500 + t);
        std::uniform_int_distribution<int> size(192, 320);
        int id = 0;
        while (absl::Now() < end) {
          ProblemSpec s;
          s.m = size(rng);
          s.n = size(rng);
          s.k = size(rng);
          s.input = (id % 2) ? DType::kBf16 : DType::kFp16;
          v1::GemmRequest r;
          r.set_request_id(absl::StrCat(t, "-", id++));
          *r.add_problems() = MakeProblem(s, &rng);
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
          v1::GemmResponse response;
          const bool after_fault = tally->faulted.load();
          ++tally->sent;
          const grpc::Status st = stub_->Gemm(&ctx, r, &response);
          ++tally->answered;
          if (st.ok()) {
            ++tally->ok;
            tally->ok_after_fault += after_fault;
            if (!ResponseMatches(r, response)) ++tally->wrong;
          } else if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
            ++tally->unavailable;
          } else {
            ++tally->other;
            std::fprintf(stderr, "unexpected status %d: %s\n", st.error_code(),
                         st.error_message().c_str());
          }
        }
      });
    }
    for (auto& th : threads) th.join();
  }

  int Health() {
    grpc::GenericStub generic(grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                                  grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    // HealthCheckRequest{} (the server as a whole): no bytes, but a buffer
    // (gRPC refuses to send a null one).
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                      &response, [&](grpc::Status st) {
                        status = std::move(st);
                        done.Notify();
                      });
    done.WaitForNotification();
    if (!status.ok()) return -1;
    std::vector<grpc::Slice> slices;
    if (!response.Dump(&slices).ok()) return -1;
    std::string bytes;
    for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    return bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : 0;  // 1 SERVING, 2 NOT_SERVING
  }

  // gemm_device_healthy{gpu}; -1 when the series is missing.
  double DeviceHealthy(int gpu) {
    const std::string label = absl::StrCat("gpu=\"", gpu, "\"");
    for (const test::MetricSample& s :
         test::MetricSamples(server_->metrics()->Scrape(), "gemm_device_healthy"))
      if (absl::StrContains(s.labels, label)) return s.value;
    return -1;
  }

  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(10));
  }

  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<v1::GemmService::Stub> stub_;
};

constexpr int kServing = 1, kNotServing = 2;

TEST_F(GpuFaultTest, AHungKernelPastTheWatchdogTakesTheGpuOutAndEveryCallIsAnswered) {
  Tally tally;
  CudaExecutor::Options o = GpuOptions();
  o.watchdog = absl::Milliseconds(500);
  // The hung kernel runs 5 s: the watchdog must answer its batch long before.
  o.before_launches = FaultAt(40, &tally, [](void* stream) {
    return gpu_testing::EnqueueSpin(stream, int64_t{5} * 1000 * 1000 * 1000);
  });
  auto executor = CudaExecutor::Create(o);
  ASSERT_TRUE(executor.ok()) << executor.status();
  Serve(std::move(*executor));
  EXPECT_EQ(Health(), kServing);
  const absl::Time start = absl::Now();
  Load(8, absl::Seconds(3), &tally);
  tally.Print("hung kernel");
  ExpectEveryCallAnswered(tally);
  EXPECT_GT(tally.ok.load(), 0);
  EXPECT_GT(tally.unavailable.load(), 0);
  // Answered before the hung kernel ended (5 s after the fault).
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(Health(), kNotServing);
  EXPECT_EQ(DeviceHealthy(0), 0);
  EXPECT_TRUE(server_->no_device_left().HasBeenNotified());
}

TEST_F(GpuFaultTest, TwoExecutorsOnOneGpuMoveWorkToTheHealthyOne) {
  Tally tally;
  CudaExecutor::Options faulty = GpuOptions();
  faulty.watchdog = absl::Milliseconds(500);
  faulty.before_launches = FaultAt(20, &tally, [](void* stream) {
    return gpu_testing::EnqueueSpin(stream, int64_t{4} * 1000 * 1000 * 1000);
  });
  std::vector<std::unique_ptr<Executor>> children;
  for (const CudaExecutor::Options& o : {faulty, GpuOptions()}) {
    auto e = CudaExecutor::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    children.push_back(std::move(*e));
  }
  auto multi = MultiDeviceExecutor::Create(std::move(children));
  ASSERT_TRUE(multi.ok()) << multi.status();
  Serve(std::move(*multi));
  Load(8, absl::Seconds(3), &tally);
  tally.Print("two executors, one hung");
  ExpectEveryCallAnswered(tally);
  EXPECT_GT(tally.ok_after_fault.load(), 0) << "the healthy executor took no work after the fault";
  EXPECT_EQ(Health(), kServing);
  EXPECT_EQ(DeviceHealthy(0), 0);
  EXPECT_EQ(DeviceHealthy(1), 1);
  EXPECT_FALSE(server_->no_device_left().HasBeenNotified());
}

// Leaves the process's CUDA context unusable: run alone or last.
TEST_F(GpuFaultTest, AStickyErrorTakesTheGpuOutAndEveryCallIsAnswered) {
  Tally tally;
  CudaExecutor::Options o = GpuOptions();
  o.watchdog = absl::Milliseconds(500);  // looks for the sticky error every 50 ms
  o.before_launches = FaultAt(40, &tally, [](void* stream) {
    return gpu_testing::EnqueueIllegalAddress(stream);
  });
  auto executor = CudaExecutor::Create(o);
  ASSERT_TRUE(executor.ok()) << executor.status();
  Serve(std::move(*executor));
  Load(8, absl::Seconds(3), &tally);
  tally.Print("sticky error");
  ExpectEveryCallAnswered(tally);
  EXPECT_GT(tally.ok.load(), 0);
  EXPECT_GT(tally.unavailable.load(), 0);
  EXPECT_EQ(Health(), kNotServing);
  EXPECT_EQ(DeviceHealthy(0), 0);
  EXPECT_TRUE(server_->no_device_left().HasBeenNotified());
}

}  // namespace
}  // namespace gemm
