// Overload and faults on loopback, bounded in time and count, against the
// real server on the CPU backend with small limits:
//  - a burst of 10x capacity, the backend held busy until all of it is in:
//    every request gets exactly one answer, exactly capacity's worth is
//    accepted and right, rejections are RESOURCE_EXHAUSTED and fast, the
//    in-flight bytes stay under their bound and return to zero;
//  - a message over max_message_bytes is refused without being admitted;
//  - a stream whose client never reads does not stall other clients;
//  - clients that vanish mid-call (cancelled calls, a killed gemm_cli
//    process) leave no queued work and no in-flight bytes behind;
//  - shutdown under load: every call finishes or gets UNAVAILABLE.
// The overload figures are printed for the record, in one line starting
// "burst:".
//
// Usage: overload_test [<gemm_cli>] [--reject_p99_ms=<ms>] [gtest flags]
// tests/BUILD passes gemm_cli; run by hand, the binary finds gemm_cli next to
// itself or at ../client/gemm_cli (bazel-bin's layout). No runfiles or
// environment are needed; bench/gpu.sh's overload suite bundles both for
// another host.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/exec/cpu_executor.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "tests/test_executors.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

std::string g_cli_path;

constexpr uint32_t kMaxQueued = 4;
// The p99 a rejection may take (--reject_p99_ms), measured at the client
// from the start of its call. The issue asks for 10 ms. On the 2-core CI
// machine the whole burst waits for a free core (one runs the heavy GEMMs,
// and CI builds run beside it), so the default leaves room; the server's own
// part of a rejection is under 50 us (gemm_request_duration_seconds).
// Sanitizer builds run our code several times slower.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
double g_reject_p99_ms = 100;
#else
double g_reject_p99_ms = 25;
#endif
// How much longer than a GetServerInfo in the same burst a rejection may
// take, at the median (the reject path runs much more of our code, which
// sanitizer builds slow down).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr double kRejectOverInfoMs = 20;
#else
constexpr double kRejectOverInfoMs = 2;
#endif
constexpr uint64_t kInflightBound = 8 << 20;

ServerOptions OverloadOptions() {
  ServerOptions o = test::LoopbackCpuServerOptions(/*concurrent_requests=*/1);
  o.batcher.budget.max_requests = 1;  // capacity: one running, kMaxQueued waiting
  o.limits.max_message_bytes = 4 << 20;
  o.limits.max_dimension = 4096;
  o.limits.max_matrix_bytes = 2 << 20;
  o.limits.max_queued_requests = kMaxQueued;
  o.limits.max_inflight_bytes = kInflightBound;
  o.limits.max_stream_inflight = 4;
  return o;
}

v1::GemmRequest SquareRequest(const std::string& id, uint64_t size, std::mt19937* rng) {
  test::ProblemSpec s;
  s.m = s.n = s.k = size;
  v1::GemmRequest r;
  r.set_request_id(id);
  *r.add_problems() = test::MakeProblem(s, rng);
  return r;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

class OverloadTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(/*gate_shut=*/false); }

  // The server on the CPU backend behind a gate (test_executors.h), shut
  // until gate_->Open() when `gate_shut`, else open from the start.
  void StartServer(bool gate_shut) {
    const ServerOptions options = OverloadOptions();
    auto cpu = CpuExecutor::Create(options.cpu);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto gate = std::make_unique<test::GatedExecutor>(std::move(*cpu));
    gate_ = gate.get();
    if (!gate_shut) gate_->Open();
    auto server = GemmServer::Start(options, std::move(gate));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = test::LoopbackChannel(server_->port());
    stub_ = v1::GemmService::NewStub(channel_);
  }
  void TearDown() override {
    if (!server_) return;  // a test that ended the server ended its gate too
    gate_->Open();
    server_->Shutdown(absl::Seconds(5));
  }

  double Gauge(const std::string& name) {
    return test::MetricValue(server_->metrics()->Scrape(), name);
  }

  // Waits until nothing is queued and no bytes are in flight; false on timeout.
  bool WaitIdle(absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (absl::Now() < give_up) {
      if (Gauge("gemm_queue_depth") == 0 && Gauge("gemm_inflight_bytes") == 0) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  // A small request answered right, within `timeout`.
  ::testing::AssertionResult ServesPromptly(absl::Duration timeout) {
    std::mt19937 rng(99);
    const v1::GemmRequest r = SquareRequest("probe", 8, &rng);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    v1::GemmResponse response;
    const grpc::Status st = stub_->Gemm(&ctx, r, &response);
    if (!st.ok())
      return ::testing::AssertionFailure() << "code " << st.error_code() << ": "
                                           << st.error_message();
    return test::ResponseMatches(r, response);
  }

  test::GatedExecutor* gate_ = nullptr;  // owned by server_
  std::unique_ptr<GemmServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::GemmService::Stub> stub_;
  const v1::GetServerInfoRequest info_request_;
};

struct CallRecord {
  v1::GemmResponse response;
  grpc::ClientContext ctx;
  grpc::Status status;
  absl::Time start;
  absl::Duration latency;
  std::atomic<int> answers{0};
};

// The burst runs with the gate shut until all of it has arrived.
class OverloadBurstTest : public OverloadTest {
 protected:
  void SetUp() override { StartServer(/*gate_shut=*/true); }
};

TEST_F(OverloadBurstTest, BurstOfTenTimesCapacity) {
  // Capacity is 1 running + kMaxQueued waiting. The backend is held busy by
  // the gate until every call of the burst has arrived, so what is admitted
  // does not depend on how fast this machine runs GEMMs or sends the burst.
  // Six heavy requests (2.6 MiB in flight each: the in-flight bound admits
  // three, one running and two queued) come first; sixty light ones arrive
  // at once on top: 10x capacity. Two light ones fill the queue.
  constexpr uint64_t kHeavySize = 480;
  std::mt19937 rng(1);
  const auto heavy =
      std::make_shared<v1::GemmRequest>(SquareRequest("heavy", kHeavySize, &rng));
  const auto light = std::make_shared<v1::GemmRequest>(SquareRequest("light", 4, &rng));
  constexpr int kHeavy = 6;
  constexpr int kLight = 60;
  std::vector<std::unique_ptr<CallRecord>> calls;
  // Among the light calls, every kInfoEvery-th is followed by a
  // GetServerInfo (the cheapest call there is) on the same connection: the
  // time the burst's rejections take beyond it is what the reject path costs.
  // Few, so that the burst stays as dense as without them.
  constexpr int kInfoEvery = 6;
  struct InfoRecord {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    absl::Time start;
    absl::Duration latency;
    bool ok = false;
  };
  std::vector<std::unique_ptr<InfoRecord>> infos;
  absl::Mutex mu;
  int outstanding = kHeavy + kLight + kLight / kInfoEvery;
  std::atomic<int> gemm_answered{0};

  // Every heavy request and the light burst go over connections of their
  // own: the heavy ones then arrive together (over one connection they
  // arrive one after another, and a fast core can finish each before the
  // next is in, so that the queue never backs up).
  auto connect = [this] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = v1::GemmService::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials(), args));
    // Channels connect lazily: the calls measured must not pay for it.
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    EXPECT_TRUE(stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
    return stub;
  };
  auto burst_stub = connect();
  std::vector<std::unique_ptr<v1::GemmService::Stub>> heavy_stubs;
  for (int i = 0; i < kHeavy; ++i) heavy_stubs.push_back(connect());
  auto start_call = [&](const std::shared_ptr<v1::GemmRequest>& request) {
    calls.push_back(std::make_unique<CallRecord>());
    CallRecord* c = calls.back().get();
    c->ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    c->start = absl::Now();
    v1::GemmService::Stub* stub =
        request == heavy ? heavy_stubs[calls.size() - 1].get() : burst_stub.get();
    stub->async()->Gemm(&c->ctx, request.get(), &c->response,
                        [c, &gemm_answered, &mu, &outstanding](grpc::Status st) {
                           c->latency = absl::Now() - c->start;
                           c->status = std::move(st);
                           c->answers.fetch_add(1);
                           gemm_answered.fetch_add(1);
                           absl::MutexLock lock(&mu);
                           --outstanding;
                         });
  };
  // Waits until the first `n` Gemm calls have arrived: each is answered
  // (refused), waiting at the gate, or queued. Calls still on their way are
  // none of these, so the sum reaches the count only when all are in.
  auto wait_arrived = [&](int n) {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (gemm_answered.load() + gate_->held_requests() +
                   static_cast<int>(Gauge("gemm_queue_depth")) <
               n &&
           absl::Now() < give_up)
      absl::SleepFor(absl::Microseconds(200));
  };
  for (int i = 0; i < kHeavy; ++i) start_call(heavy);
  // The burst follows once the server has taken in every heavy request:
  // admitted (held at the gate or queued behind it) or refused by the
  // in-flight bound.
  wait_arrived(kHeavy);
  auto start_info = [&] {
    infos.push_back(std::make_unique<InfoRecord>());
    InfoRecord* r = infos.back().get();
    r->ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    r->start = absl::Now();
    burst_stub->async()->GetServerInfo(&r->ctx, &info_request_, &r->info,
                                       [r, &mu, &outstanding](grpc::Status st) {
                                         r->latency = absl::Now() - r->start;
                                         r->ok = st.ok();
                                         absl::MutexLock lock(&mu);
                                         --outstanding;
                                       });
  };
  for (int i = 0; i < kLight; ++i) {
    start_call(light);
    if (i % kInfoEvery == kInfoEvery - 1) start_info();
  }
  // The gate opens once every Gemm call has arrived.
  wait_arrived(kHeavy + kLight);
  gate_->Open();
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == 0; }, &outstanding),
                                    absl::Seconds(60)))
        << outstanding << " calls unanswered";
  }
  absl::SleepFor(absl::Milliseconds(100));  // a second answer would show by now
  // Exact: the queue keeps the peak of the bytes it admitted.
  const double high_water = Gauge("gemm_inflight_bytes_high_water");

  int accepted = 0, rejected = 0, wrong = 0;
  std::vector<double> reject_ms;
  for (size_t i = 0; i < calls.size(); ++i) {
    CallRecord& c = *calls[i];
    EXPECT_EQ(c.answers.load(), 1) << "call " << i;
    const v1::GemmRequest& request = i < kHeavy ? *heavy : *light;
    if (c.status.ok()) {
      ++accepted;
      if (!test::ResponseMatches(request, c.response)) ++wrong;
    } else if (c.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++rejected;
      if (i >= kHeavy) reject_ms.push_back(absl::ToDoubleMilliseconds(c.latency));
    } else {
      ++wrong;
      ADD_FAILURE() << "call " << i << ": code " << c.status.error_code() << " "
                    << c.status.error_message();
    }
  }
  std::vector<double> info_ms;
  for (const auto& r : infos) {
    EXPECT_TRUE(r->ok);
    info_ms.push_back(absl::ToDoubleMilliseconds(r->latency));
  }
  const double p50 = Percentile(reject_ms, 0.5), p99 = Percentile(reject_ms, 0.99);
  const double info_p50 = Percentile(info_ms, 0.5);
  std::printf(
      "burst: offered %d (%d heavy 480^3 + %d light 4^3), accepted %d, rejected %d, wrong %d; "
      "light rejections p50 %.2f ms p99 %.2f ms (bound %.0f); GetServerInfo in the same burst "
      "p50 %.2f ms p99 %.2f ms; in-flight high-water %.0f bytes (bound %llu)\n",
      kHeavy + kLight, kHeavy, kLight, accepted, rejected, wrong, p50, p99, g_reject_p99_ms,
      info_p50, Percentile(info_ms, 0.99), high_water,
      static_cast<unsigned long long>(kInflightBound));
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(accepted + rejected, kHeavy + kLight);
  // The backend was held busy: one request running and a full queue were
  // admitted, every other one refused.
  EXPECT_EQ(accepted, 1 + static_cast<int>(kMaxQueued));
  EXPECT_LT(p99, g_reject_p99_ms) << "rejections must be fast";
  // What our reject path adds over the cheapest call: within noise (the
  // median of the two differs by well under a millisecond here).
  EXPECT_LT(p50, info_p50 + kRejectOverInfoMs) << "the reject path is slower than GetServerInfo";
  EXPECT_LE(high_water, kInflightBound);
  EXPECT_GT(high_water, 0);
  EXPECT_TRUE(WaitIdle(absl::Seconds(10)));
}

TEST_F(OverloadTest, MessageOverTheLimitIsRefusedUnadmitted) {
  std::mt19937 rng(2);
  // 1100^2 fp32 is 4.6 MiB of A alone: over max_message_bytes (4 MiB).
  test::ProblemSpec s;
  s.m = 1100;
  s.k = 1100;
  s.n = 1;
  v1::GemmRequest r;
  *r.add_problems() = test::MakeProblem(s, &rng);
  ASSERT_GT(r.ByteSizeLong(), size_t{4} << 20);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::GemmResponse response;
  const grpc::Status st = stub_->Gemm(&ctx, r, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  // How long gRPC takes to refuse 13 MiB and 39 MiB, for the record (README):
  // about in proportion to the size here, i.e. gRPC 1.51 reads the message
  // before its size check refuses it.
  for (uint64_t rows : {1100, 3200}) {
    test::ProblemSpec big;
    big.m = rows;
    big.k = 3200;
    big.n = 1;
    v1::GemmRequest b;
    *b.add_problems() = test::MakeProblem(big, &rng);
    grpc::ClientContext bctx;
    bctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    const absl::Time t0 = absl::Now();
    const grpc::Status bst = stub_->Gemm(&bctx, b, &response);
    std::printf("oversized message: %.1f MiB refused (code %d) in %.1f ms\n",
                b.ByteSizeLong() / 1048576.0, bst.error_code(),
                absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  // gRPC refused it below the service: no handler ran, nothing was admitted.
  const std::string scrape = server_->metrics()->Scrape();
  EXPECT_EQ(test::MetricValue(scrape, "gemm_requests_total", {"method=\"Gemm\""}), 0);
  EXPECT_EQ(test::MetricValue(scrape, "gemm_inflight_bytes"), 0);
  EXPECT_TRUE(ServesPromptly(absl::Seconds(5)));
}

TEST_F(OverloadTest, StreamThatNeverReadsDoesNotStallOthers) {
  std::mt19937 rng(3);
  grpc::ClientContext ctx;
  auto stream = stub_->GemmStream(&ctx);
  // 256 x 64 x 256 fp32 (128 KiB of operands and 256 KiB of result each),
  // never read: the responses fill the stream's flow-control window, then its
  // max_stream_inflight, then the server stops reading it.
  test::ProblemSpec spec;
  spec.m = spec.n = 256;
  spec.k = 64;
  v1::GemmRequest big_result;
  *big_result.add_problems() = test::MakeProblem(spec, &rng);
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; i < 200; ++i) {
      big_result.set_request_id(absl::StrCat("s", i));
      if (!stream->Write(big_result)) return;
      written.fetch_add(1);
    }
  });
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(ServesPromptly(absl::Seconds(2))) << i;
  const double served = test::MetricValue(server_->metrics()->Scrape(), "gemm_requests_total",
                                          {"method=\"GemmStream\""});
  std::printf(
      "slow reader: %d requests written into the unread stream, %.0f of them run; 20 other "
      "calls took %.1f ms\n",
      written.load(), served, absl::ToDoubleMilliseconds(absl::Now() - start));
  EXPECT_LT(written.load(), 200) << "the client's writes never blocked";
  EXPECT_LT(served, 50) << "the server kept serving a stream nobody reads";
  ctx.TryCancel();
  writer.join();
  stream->Finish();
  EXPECT_TRUE(WaitIdle(absl::Seconds(10)));
}

TEST_F(OverloadTest, CancelledCallsLeaveNothingBehind) {
  std::mt19937 rng(5);
  const auto request = std::make_shared<v1::GemmRequest>(SquareRequest("c", 256, &rng));
  constexpr int kCalls = 20;
  std::vector<std::unique_ptr<CallRecord>> calls;
  std::atomic<int> done{0};
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::make_unique<CallRecord>());
    CallRecord* c = calls.back().get();
    stub_->async()->Gemm(&c->ctx, request.get(), &c->response, [c, &done](grpc::Status st) {
      c->status = std::move(st);
      c->answers.fetch_add(1);
      done.fetch_add(1);
    });
  }
  absl::SleepFor(absl::Milliseconds(20));
  for (auto& c : calls) c->ctx.TryCancel();
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (done.load() < kCalls && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(done.load(), kCalls);
  for (auto& c : calls) {
    EXPECT_EQ(c->answers.load(), 1);
    const auto code = c->status.error_code();
    EXPECT_TRUE(code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::OK ||
                code == grpc::StatusCode::RESOURCE_EXHAUSTED)
        << code;
    if (c->status.ok()) {
      EXPECT_TRUE(test::ResponseMatches(*request, c->response));
    }
  }
  EXPECT_TRUE(WaitIdle(absl::Seconds(10)));
  EXPECT_TRUE(ServesPromptly(absl::Seconds(5)));
}

TEST_F(OverloadTest, KilledClientProcessLeavesNothingBehind) {
  if (g_cli_path.empty())
    GTEST_SKIP() << "no gemm_cli: pass its path as the first argument";
  const std::string target = absl::StrCat("--target=127.0.0.1:", server_->port());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(g_cli_path.c_str(), g_cli_path.c_str(), "bench", target.c_str(), "--m=256", "--n=256", "--k=256",
          "--concurrency=8", "--duration_s=60", "--max_attempts=1", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill it once its calls are being served.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (test::MetricValue(server_->metrics()->Scrape(), "gemm_requests_total",
                           {"method=\"Gemm\"", "code=\"OK\""}) < 3 &&
         absl::Now() < give_up)
    absl::SleepFor(absl::Milliseconds(10));
  const double inflight_before = Gauge("gemm_inflight_bytes");
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(wstatus)) << "gemm_cli ended by itself (status " << wstatus << ")";
  std::printf("killed gemm_cli with %.0f bytes in flight\n", inflight_before);
  EXPECT_TRUE(WaitIdle(absl::Seconds(15)));
  EXPECT_TRUE(ServesPromptly(absl::Seconds(5)));
}

TEST_F(OverloadTest, ShutdownUnderLoadAnswersEveryCall) {
  std::mt19937 rng(6);
  const v1::GemmRequest request = SquareRequest("t", 128, &rng);
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0}, ok{0}, unavailable{0}, cancelled{0}, other{0}, wrong{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
        v1::GemmResponse response;
        sent.fetch_add(1);
        const grpc::Status st = stub_->Gemm(&ctx, request, &response);
        if (st.ok()) {
          ok.fetch_add(1);
          if (!test::ResponseMatches(request, response)) wrong.fetch_add(1);
        } else if (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                   st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          // RESOURCE_EXHAUSTED: refused at admission before the shutdown.
          unavailable.fetch_add(1);
          if (st.error_code() == grpc::StatusCode::UNAVAILABLE) stop.store(true);
        } else if (st.error_code() == grpc::StatusCode::CANCELLED &&
                   st.error_message() == "CANCELLED") {
          // gRPC's own answer to a call that reached the transport as the
          // server stopped, before any handler saw it (README: retry is safe).
          cancelled.fetch_add(1);
          stop.store(true);
        } else {
          other.fetch_add(1);
          ADD_FAILURE() << "code " << st.error_code() << ": " << st.error_message();
        }
      }
    });
  }
  const absl::Time load_until = absl::Now() + absl::Seconds(10);
  while (ok.load() < 20 && absl::Now() < load_until) absl::SleepFor(absl::Milliseconds(5));
  const absl::Time t0 = absl::Now();
  server_->Shutdown(absl::Seconds(5));
  const absl::Duration took = absl::Now() - t0;
  stop.store(true);
  for (auto& t : clients) t.join();
  std::printf(
      "shutdown under load: %d calls, %d OK, %d refused, %d cancelled by gRPC unseen, %d other, "
      "%d wrong; took %.0f ms\n",
      sent.load(), ok.load(), unavailable.load(), cancelled.load(), other.load(), wrong.load(),
      absl::ToDoubleMilliseconds(took));
  EXPECT_EQ(sent.load(), ok.load() + unavailable.load() + cancelled.load() + other.load());
  // Nothing admitted was lost: every request the server finished reached its client.
  EXPECT_EQ(test::MetricValue(server_->metrics()->Scrape(), "gemm_requests_total",
                              {"method=\"Gemm\"", "code=\"OK\""}),
            ok.load());
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_LT(took, absl::Seconds(7));
  server_.reset();
}

}  // namespace
}  // namespace gemm

namespace {

// gemm_cli next to this binary (bench/gpu.sh's overload bundle) or where
// bazel-bin puts it (../client/gemm_cli); "" if neither is there.
std::string CliBesideThisBinary() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  const std::string exe(self, static_cast<size_t>(n));
  const std::string dir = exe.substr(0, exe.rfind('/'));
  for (const std::string& cli : {dir + "/gemm_cli", dir + "/../client/gemm_cli"})
    if (access(cli.c_str(), X_OK) == 0) return cli;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  constexpr char kRejectFlag[] = "--reject_p99_ms=";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(kRejectFlag, 0) == 0) {
      gemm::g_reject_p99_ms = std::atof(arg.c_str() + sizeof(kRejectFlag) - 1);
      if (gemm::g_reject_p99_ms <= 0) {
        std::fprintf(stderr, "%s wants a positive number of milliseconds\n", kRejectFlag);
        return 2;
      }
    } else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return 2;
    } else {
      gemm::g_cli_path = arg;
    }
  }
  if (gemm::g_cli_path.empty()) gemm::g_cli_path = CliBesideThisBinary();
  signal(SIGPIPE, SIG_IGN);
  return RUN_ALL_TESTS();
}
