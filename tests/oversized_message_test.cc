// Oversized messages and the server's receive quota
// (--max_receive_buffer_bytes, service/base/limits.h), measured through a
// loopback proxy that counts the bytes the server was sent before it
// answered:
//  - without a quota gRPC 1.51 reads a message far over max_message_bytes to
//    its declared end before refusing it;
//  - with one it usually stops much earlier, but not always (the quota's
//    reclamation runs asynchronously: on loopback a message sometimes
//    arrives in full first), so several attempts are made and the median is
//    checked;
//  - another client meanwhile is served: a call of its in flight when memory
//    is reclaimed, or one started on a connection gRPC closed for it, can be
//    refused (RESOURCE_EXHAUSTED, UNAVAILABLE) and is retried once, as
//    gemm::Client would; every call ends right.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

constexpr uint64_t kMaxMessage = 4 << 20;
constexpr uint64_t kReceiveQuota = 8 << 20;

// Forwards loopback TCP connections to `target_port` and counts the bytes
// sent towards it. One thread per direction per connection; everything is
// torn down with the proxy.
class ByteCountingProxy {
 public:
  explicit ByteCountingProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = Loopback(0);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(listen_fd_, 16);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~ByteCountingProxy() {
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    accept_thread_.join();
    absl::MutexLock lock(&mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
  }

  int port() const { return port_; }
  uint64_t bytes_to_target() const { return to_target_.load(); }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    return addr;
  }

  void AcceptLoop() {
    while (true) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr = Loopback(target_port_);
      if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        close(client);
        close(server);
        continue;
      }
      absl::MutexLock lock(&mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { Pump(client, server, &to_target_); });
      pumps_.emplace_back([this, client, server] { Pump(server, client, nullptr); });
    }
  }

  static void Pump(int from, int to, std::atomic<uint64_t>* counted) {
    std::vector<char> buffer(1 << 16);
    while (true) {
      const ssize_t n = read(from, buffer.data(), buffer.size());
      if (n <= 0) break;
      if (counted != nullptr) counted->fetch_add(static_cast<uint64_t>(n));
      for (ssize_t done = 0; done < n;) {
        // MSG_NOSIGNAL: a peer that reset its end must not SIGPIPE the test.
        const ssize_t w =
            send(to, buffer.data() + done, static_cast<size_t>(n - done), MSG_NOSIGNAL);
        if (w <= 0) return;
        done += w;
      }
    }
    shutdown(to, SHUT_WR);
  }

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<uint64_t> to_target_{0};
  std::thread accept_thread_;
  absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
};

v1::GemmRequest RequestOf(uint64_t m, uint64_t n, uint64_t k, std::mt19937* rng) {
  test::ProblemSpec s;
  s.m = m;
  s.n = n;
  s.k = k;
  v1::GemmRequest r;
  *r.add_problems() = test::MakeProblem(s, rng);
  return r;
}

class OversizedMessageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o = test::LoopbackCpuServerOptions();
    o.limits.max_message_bytes = kMaxMessage;
    o.limits.max_receive_buffer_bytes = kReceiveQuota;
    o.limits.max_matrix_bytes = uint64_t{1} << 30;
    o.limits.max_inflight_bytes = uint64_t{1} << 30;
    auto server = GemmServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    proxy_ = std::make_unique<ByteCountingProxy>(server_->port());
  }
  void TearDown() override {
    proxy_.reset();
    if (server_) server_->Shutdown(absl::Seconds(5));
  }

  // One call through the proxy: its status and the bytes the server was sent
  // by the time it answered.
  struct Sent {
    grpc::Status status;
    uint64_t bytes_before = 0;  // the proxy's count when the call started
    uint64_t bytes_read = 0;    // bytes sent to the server until the answer
    absl::Duration took;
  };
  Sent SendThroughProxy(const v1::GemmRequest& request, v1::GemmResponse* response,
                        absl::Duration deadline = absl::Seconds(60)) {
    auto stub = test::LoopbackStub(proxy_->port(), /*own_connection=*/true);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    Sent sent;
    sent.bytes_before = proxy_->bytes_to_target();
    const absl::Time start = absl::Now();
    sent.status = stub->Gemm(&ctx, request, response);
    sent.took = absl::Now() - start;
    sent.bytes_read = proxy_->bytes_to_target() - sent.bytes_before;
    return sent;
  }

  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<ByteCountingProxy> proxy_;
};

TEST_F(OversizedMessageTest, IsCutShortWhileOtherClientsAreServed) {
  std::mt19937 rng(5);
  // A is 4096 x 4096 fp32: 64 MiB, sixteen times max_message_bytes.
  const v1::GemmRequest big = RequestOf(4096, 1, 4096, &rng);
  const uint64_t big_bytes = big.ByteSizeLong();
  ASSERT_GT(big_bytes, uint64_t{64} << 20);

  std::atomic<bool> stop{false};
  std::atomic<int> other_ok{0}, other_bad{0}, other_retried{0};
  std::thread other([&] {
    auto stub = test::LoopbackStub(server_->port(), /*own_connection=*/true);
    std::mt19937 other_rng(6);
    const v1::GemmRequest small = RequestOf(8, 8, 8, &other_rng);
    while (!stop.load()) {
      grpc::Status st;
      v1::GemmResponse response;
      for (int attempt = 0; attempt < 2; ++attempt) {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
        response.Clear();
        st = stub->Gemm(&ctx, small, &response);
        if (st.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED &&
            st.error_code() != grpc::StatusCode::UNAVAILABLE)
          break;
        if (attempt == 0) other_retried.fetch_add(1);
      }
      if (st.ok() && test::ResponseMatches(small, response)) {
        other_ok.fetch_add(1);
      } else {
        other_bad.fetch_add(1);
        ADD_FAILURE() << "the other client's call: code " << st.error_code() << " "
                      << st.error_message();
      }
    }
  });
  absl::SleepFor(absl::Milliseconds(50));  // the other client is under way

  // NOTES: the quota is loose (README): besides refusing, gRPC sometimes
  // stops reading such a message without refusing it, and the call then
  // ends at its deadline (a CI run on 2 cores stalled here until the test's
  // timeout with 60 s deadlines). Such attempts are counted, and bounded.
  constexpr int kAttempts = 7;
  std::vector<double> read_mib;
  std::string each;
  int refused = 0, stalled = 0;
  for (int i = 0; i < kAttempts; ++i) {
    v1::GemmResponse response;
    const Sent sent = SendThroughProxy(big, &response, absl::Seconds(15));
    absl::SleepFor(absl::Milliseconds(100));  // anything still in flight arrives
    const uint64_t read = proxy_->bytes_to_target() - sent.bytes_before;
    if (sent.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
    } else if (sent.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      ++stalled;
    } else {
      ADD_FAILURE() << "attempt " << i << ": code " << sent.status.error_code() << " "
                    << sent.status.error_message();
    }
    read_mib.push_back(read / 1048576.0);
    absl::StrAppend(&each, i == 0 ? "" : ", ", absl::SixDigits(read / 1048576.0));
  }
  stop.store(true);
  other.join();

  std::vector<double> sorted = read_mib;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[kAttempts / 2];
  std::printf(
      "oversized: a %.1f MiB message (limit %.0f MiB, receive quota %.0f MiB), sent %d times, "
      "%d refused and %d stalled to their deadline; the server read a median %.1f MiB (each: %s "
      "MiB); the other client's calls meanwhile: %d right (%d retried once), %d failed\n",
      big_bytes / 1048576.0, kMaxMessage / 1048576.0, kReceiveQuota / 1048576.0, kAttempts,
      refused, stalled, median, each.c_str(), other_ok.load(), other_retried.load(),
      other_bad.load());
  EXPECT_GE(refused, kAttempts / 2 + 1) << "most oversized messages are refused";
  // Much less than the message: at most half of it (about twice the quota).
  EXPECT_LT(median, big_bytes / 2 / 1048576.0);
  EXPECT_EQ(other_bad.load(), 0);
  EXPECT_GT(other_ok.load(), 0);
  // Nothing of the big requests was admitted, and nothing is left held.
  EXPECT_EQ(test::MetricValue(server_->metrics()->Scrape(), "gemm_inflight_bytes"), 0);
}

// Without a quota (the default) the same message is read to its end before
// gRPC refuses it: max_message_bytes alone does not stop it.
TEST(OversizedMessageWithoutQuotaTest, IsReadInFull) {
  ServerOptions o = test::LoopbackCpuServerOptions();
  o.limits.max_message_bytes = kMaxMessage;
  ASSERT_EQ(o.limits.max_receive_buffer_bytes, 0u);
  auto server = GemmServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ByteCountingProxy proxy((*server)->port());
  std::mt19937 rng(5);
  const v1::GemmRequest big = RequestOf(4096, 1, 4096, &rng);
  auto stub = test::LoopbackStub(proxy.port(), /*own_connection=*/true);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  v1::GemmResponse response;
  const grpc::Status st = stub->Gemm(&ctx, big, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_GE(proxy.bytes_to_target(), big.ByteSizeLong());
  (*server)->Shutdown(absl::Seconds(5));
}

TEST_F(OversizedMessageTest, MessagesUnderTheLimitStillPass) {
  std::mt19937 rng(7);
  // A is 1000 x 1000 fp32: 3.8 MiB, just under max_message_bytes.
  const v1::GemmRequest request = RequestOf(1000, 2, 1000, &rng);
  ASSERT_LT(request.ByteSizeLong(), kMaxMessage);
  for (int i = 0; i < 3; ++i) {
    v1::GemmResponse response;
    const Sent sent = SendThroughProxy(request, &response);
    ASSERT_TRUE(sent.status.ok()) << sent.status.error_message();
    EXPECT_TRUE(test::ResponseMatches(request, response));
  }
}

TEST(ReceiveQuotaTest, SmallerThanOneMessageIsRefusedAtStart) {
  ServerOptions o = test::LoopbackCpuServerOptions();
  o.limits.max_message_bytes = kMaxMessage;
  o.limits.max_receive_buffer_bytes = kMaxMessage - 1;
  const absl::Status st = GemmServer::Start(o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("max_receive_buffer_bytes"), absl::string_view::npos) << st;
}

}  // namespace
}  // namespace gemm
