// Replicas as real processes: gemm_server binaries started with fork/exec on
// loopback, stopped with SIGTERM.
//  - A second server on a taken port exits non-zero at once, naming the port.
//  - SIGTERM while one large chunked request runs: its result still arrives
//    (the drain covers its download and release), new work gets UNAVAILABLE.
//  - A rolling restart under load: two replicas, each in turn SIGTERMed and
//    replaced by a new one on a fresh port, while one client keeps sending
//    mixed requests (chunked ones included): every request gets exactly one
//    answer, every answer is OK and right.
//
// Usage: replica_process_test <path to gemm_server>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/gemm_client.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

std::string g_server_path;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

// A port nothing listens on now (the OS's pick for port 0, closed again).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// One gemm_server process, its output in a log file.
class ServerProcess {
 public:
  // Starts the server on 127.0.0.1:`port` (0: the OS picks; see port()).
  static std::unique_ptr<ServerProcess> Start(int port, const std::string& name,
                                              std::vector<std::string> extra = {}) {
    auto p = std::unique_ptr<ServerProcess>(new ServerProcess);
    p->log_ = absl::StrCat(TempDir(), "/", name, ".log");
    p->port_file_ = absl::StrCat(TempDir(), "/", name, ".port");
    unlink(p->port_file_.c_str());
    std::vector<std::string> args = {g_server_path,
                                     absl::StrCat("--listen=127.0.0.1:", port),
                                     absl::StrCat("--port_file=", p->port_file_),
                                     "--backend=cpu",
                                     "--cpu_concurrency=2",
                                     "--blas_threads=1",
                                     "--metrics_listen=",
                                     "--drain_timeout=30s",
                                     "--transient_idle_timeout=60s"};
    for (std::string& e : extra) args.push_back(std::move(e));
    p->started_ = absl::Now();
    p->pid_ = fork();
    if (p->pid_ == 0) {
      const int fd = open(p->log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    return p;
  }

  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Waits for the port file; false if the process exits first or `limit`
  // passes.
  bool WaitListening(absl::Duration limit = absl::Seconds(60)) {
    const absl::Time until = absl::Now() + limit;
    while (absl::Now() < until) {
      int port;
      std::string text = ReadFile(port_file_);
      if (!text.empty() && text.back() == '\n' &&
          absl::SimpleAtoi(text.substr(0, text.size() - 1), &port)) {
        port_ = port;
        return true;
      }
      if (Exited(absl::ZeroDuration())) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // Whether the process has exited within `wait`; its status in rc().
  bool Exited(absl::Duration wait) {
    if (exited_) return true;
    const absl::Time until = absl::Now() + wait;
    do {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        rc_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        exited_at_ = absl::Now();
        return true;
      }
      absl::SleepFor(absl::Milliseconds(10));
    } while (absl::Now() < until);
    return false;
  }

  void Term() { kill(pid_, SIGTERM); }

  int port() const { return port_; }
  int rc() const { return rc_; }
  absl::Duration ran_for() const { return exited_at_ - started_; }
  std::string log() const { return ReadFile(log_); }

 private:
  ServerProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
  int rc_ = -1;
  absl::Time started_, exited_at_;
  std::string log_, port_file_;
};

std::unique_ptr<Client> Connect(const std::string& target) {
  ClientOptions o;
  o.target = target;
  o.default_timeout = absl::Seconds(120);
  o.transfer_channels = 2;
  // Enough attempts to pass every replica of the rolling-restart target.
  o.retry.max_attempts = 8;
  auto client = Client::Create(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

TEST(ReplicaProcessTest, ASecondServerOnATakenPortExitsAtOnceNamingThePort) {
  auto first = ServerProcess::Start(0, "first");
  ASSERT_TRUE(first->WaitListening()) << first->log();
  auto second = ServerProcess::Start(first->port(), "second");
  ASSERT_TRUE(second->Exited(absl::Seconds(10))) << "the second server kept running";
  EXPECT_NE(second->rc(), 0);
  EXPECT_LT(second->ran_for(), absl::Seconds(1)) << second->log();
  EXPECT_THAT(second->log(), HasSubstr(absl::StrCat("port ", first->port())));
  EXPECT_THAT(second->log(), HasSubstr("already in use"));
  // The first is unharmed and alone on its port.
  std::unique_ptr<Client> client = Connect(absl::StrCat("127.0.0.1:", first->port()));
  EXPECT_TRUE(client->GetServerInfo().ok());
  first->Term();
  ASSERT_TRUE(first->Exited(absl::Seconds(30)));
  EXPECT_EQ(first->rc(), 0);
}

// Polls `port`'s Prometheus text until `name` exceeds 0.
bool WaitMetricPositive(int port, const std::string& name, absl::Duration limit) {
  const absl::Time until = absl::Now() + limit;
  while (absl::Now() < until) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    std::string body;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      const std::string get = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
      if (write(fd, get.data(), get.size()) == static_cast<ssize_t>(get.size())) {
        char buf[65536];
        for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) body.append(buf, n);
      }
    }
    close(fd);
    if (test::MetricValue(body, name) > 0) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

// A problem whose D is cheap to check however large K is: every column of B
// is one value (B[k][j] = v[j]), so D[i][j] = v[j] * (row sum i of A).
struct CheapProblem {
  v1::GemmProblem problem;
  std::vector<double> row_sums, row_abs_sums, v;
};

CheapProblem MakeCheapProblem(uint64_t m, uint64_t n, uint64_t k, std::mt19937* rng) {
  CheapProblem c;
  std::uniform_real_distribution<float> a_dist(-1.0f, 1.0f), v_dist(0.5f, 1.5f);
  std::vector<float> a(m * k), b(k * n);
  c.row_sums.assign(m, 0);
  c.row_abs_sums.assign(m, 0);
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t j = 0; j < k; ++j) {
      const float x = a_dist(*rng);
      a[i * k + j] = x;
      c.row_sums[i] += x;
      c.row_abs_sums[i] += std::abs(x);
    }
  for (uint64_t j = 0; j < n; ++j) c.v.push_back(v_dist(*rng));
  for (uint64_t r = 0; r < k; ++r)
    for (uint64_t j = 0; j < n; ++j) b[r * n + j] = static_cast<float>(c.v[j]);
  v1::GemmProblem& p = c.problem;
  p.set_m(m);
  p.set_n(n);
  p.set_k(k);
  p.set_input_dtype(v1::DATA_TYPE_FP32);
  p.mutable_a()->set_data(reinterpret_cast<const char*>(a.data()), a.size() * 4);
  p.mutable_b()->set_data(reinterpret_cast<const char*>(b.data()), b.size() * 4);
  return c;
}

::testing::AssertionResult CheapResultMatches(const CheapProblem& c, const v1::GemmResult& r) {
  const uint64_t m = c.problem.m(), n = c.problem.n();
  if (r.rows() != m || r.cols() != n || r.data().size() != m * n * 4)
    return ::testing::AssertionFailure() << "result shape " << r.rows() << " x " << r.cols();
  const float* d = reinterpret_cast<const float*>(r.data().data());
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t j = 0; j < n; ++j) {
      const double want = c.v[j] * c.row_sums[i];
      const double tol = 1e-5 * c.v[j] * c.row_abs_sums[i] + 1e-6;
      if (std::abs(d[i * n + j] - want) > tol)
        return ::testing::AssertionFailure()
               << "D[" << i << "][" << j << "] = " << d[i * n + j] << ", want " << want;
    }
  return ::testing::AssertionSuccess();
}

TEST(ReplicaProcessTest, SigtermDuringALargeChunkedRequestStillDeliversItsResult) {
  // A drain deadline far past the request's run time on a busy machine.
  auto server = ServerProcess::Start(0, "drain",
                                     {"--metrics_listen=127.0.0.1:0", "--drain_timeout=120s"});
  ASSERT_TRUE(server->WaitListening()) << server->log();
  int metrics_port = 0;
  {
    const std::string log = server->log();
    // The start-up line's bound metrics port (a field of the line).
    const std::string marker = " metrics_port=";
    const size_t at = log.find(marker);
    ASSERT_NE(at, std::string::npos) << log;
    const size_t begin = at + marker.size();
    ASSERT_TRUE(absl::SimpleAtoi(log.substr(begin, log.find_first_of(" \n", begin) - begin),
                                 &metrics_port))
        << log;
  }
  // Operands of 16 MiB and 8 MiB and a 4.6 MiB result: everything goes in
  // chunks, and the compute (about 4 GFLOP on one core) outlasts the
  // moment the SIGTERM lands.
  std::mt19937 rng(2500);
  const CheapProblem cheap = MakeCheapProblem(1100, 1100, 3800, &rng);
  ASSERT_GE(cheap.problem.m() * cheap.problem.n() * 4, uint64_t{4} << 20);
  std::unique_ptr<Client> client = Connect(absl::StrCat("127.0.0.1:", server->port()));
  v1::GemmRequest request;
  *request.add_problems() = cheap.problem;
  GemmResult result = absl::UnknownError("not run");
  std::thread run([&] { result = client->Gemm(request); });
  // The Gemm is admitted (its bytes count in flight): now the SIGTERM.
  const bool admitted = WaitMetricPositive(metrics_port, "gemm_inflight_bytes", absl::Seconds(60));
  server->Term();
  const absl::Time term_at = absl::Now();
  // New work during the drain is refused as retryable.
  if (admitted) {
    absl::SleepFor(absl::Milliseconds(50));
    auto stub = v1::GemmService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server->port()), grpc::InsecureChannelCredentials()));
    v1::GemmRequest small;
    *small.add_problems() = MakeCheapProblem(4, 4, 4, &rng).problem;
    grpc::ClientContext ctx;
    v1::GemmResponse ignored;
    const grpc::Status st = stub->Gemm(&ctx, small, &ignored);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
      EXPECT_THAT(st.error_message(), HasSubstr("draining"));
    }
  }
  run.join();
  ASSERT_TRUE(admitted) << "the request never reached the queue";
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(CheapResultMatches(cheap, result->results(0)));
  ASSERT_TRUE(server->Exited(absl::Seconds(150))) << server->log();
  EXPECT_EQ(server->rc(), 0);
  const std::string log = server->log();
  EXPECT_THAT(log, HasSubstr("shutdown complete"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("drain deadline reached")));
  std::printf("the result arrived; the server exited %.1f s after SIGTERM\n",
              absl::ToDoubleSeconds(absl::Now() - term_at));
}

TEST(ReplicaProcessTest, RollingRestartUnderLoadLosesNothing) {
  // Four ports: the two first replicas, then their replacements. The client
  // is given all four (a DNS name's address set changing, in one list):
  // the replacements' ports refuse connections until they start.
  std::vector<int> ports;
  while (ports.size() < 4) {
    const int p = FreePort();
    if (std::find(ports.begin(), ports.end(), p) == ports.end()) ports.push_back(p);
  }
  std::vector<std::string> addresses;
  for (int p : ports) addresses.push_back(absl::StrCat("127.0.0.1:", p));
  const std::string target = absl::StrCat("ipv4:", absl::StrJoin(addresses, ","));

  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < 2; ++i) {
    servers.push_back(ServerProcess::Start(ports[i], absl::StrCat("rolling", i)));
    ASSERT_TRUE(servers.back()->WaitListening()) << servers.back()->log();
  }
  std::unique_ptr<Client> client = Connect(target);
  ASSERT_NE(client, nullptr);

  // The request kinds: small (one message), a 4 MiB A (chunked upload), a
  // 4 MiB result (kept and downloaded by the library), keep_results
  // downloaded and released by the caller.
  std::mt19937 rng(29);
  std::vector<v1::GemmProblem> problems;
  for (const test::ProblemSpec& s : {test::ProblemSpec{48, 48, 48},
                                     test::ProblemSpec{16, 4, 65536},
                                     test::ProblemSpec{1024, 1024, 1},
                                     test::ProblemSpec{64, 32, 16}})
    problems.push_back(test::MakeProblem(s, &rng));

  std::atomic<bool> stop{false};
  std::atomic<int> sent{0}, answered{0}, ok{0}, wrong{0};
  std::mutex failures_mu;
  std::vector<std::string> failures;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(failures_mu);
    failures.push_back(what);
  };
  std::vector<std::thread> load;
  for (int t = 0; t < 4; ++t) {
    load.emplace_back([&, t] {
      for (int i = t; !stop.load(); i += 4) {
        const int kind = i % 4;
        v1::GemmRequest request;
        *request.add_problems() = problems[kind];
        request.set_keep_results(kind == 3);
        sent.fetch_add(1);
        GemmResult response = client->Gemm(request);
        answered.fetch_add(1);
        if (!response.ok()) {
          fail(absl::StrCat("kind ", kind, ": ", response.status().ToString()));
          continue;
        }
        v1::GemmResult r = response->results(0);
        if (kind == 3) {
          const std::string handle = r.handle();
          r.mutable_data()->resize(r.rows() * r.cols() * 4);
          absl::Status s = client->DownloadMatrix(handle, r.mutable_data()->data(),
                                                  r.data().size());
          if (s.ok()) s = client->ReleaseMatrix(handle);
          if (!s.ok()) {
            fail(absl::StrCat("kept result: ", s.ToString()));
            continue;
          }
          r.clear_handle();
        }
        if (!test::ResultMatches(problems[kind], r)) {
          wrong.fetch_add(1);
          continue;
        }
        ok.fetch_add(1);
      }
    });
  }
  auto settle = [&](absl::Duration d) {
    const int before = ok.load();
    absl::SleepFor(d);
    EXPECT_GT(ok.load(), before) << "no request finished for " << d;
  };
  settle(absl::Seconds(3));
  for (int i = 0; i < 2; ++i) {
    std::printf("SIGTERM to replica %d (port %d) at %d requests\n", i, ports[i], sent.load());
    servers[i]->Term();
    ASSERT_TRUE(servers[i]->Exited(absl::Seconds(45))) << servers[i]->log();
    EXPECT_EQ(servers[i]->rc(), 0) << servers[i]->log();
    EXPECT_THAT(servers[i]->log(), ::testing::Not(HasSubstr("drain deadline reached")));
    servers.push_back(ServerProcess::Start(ports[2 + i], absl::StrCat("rolling", 2 + i)));
    ASSERT_TRUE(servers.back()->WaitListening()) << servers.back()->log();
    settle(absl::Seconds(3));
  }
  stop.store(true);
  for (auto& t : load) t.join();

  uint64_t failed_over = 0;
  for (const Client::ReplicaStats& r : client->Replicas()) {
    std::printf("  %s: %llu requests, %llu failed over\n", r.address.c_str(),
                static_cast<unsigned long long>(r.requests),
                static_cast<unsigned long long>(r.failed_over));
    failed_over += r.failed_over;
  }
  std::printf(
      "rolling restart: %d requests, %d answered, %d OK, %d wrong, %zu failed; %llu retries "
      "(%llu on another replica)\n",
      sent.load(), answered.load(), ok.load(), wrong.load(), failures.size(),
      static_cast<unsigned long long>(client->retries()),
      static_cast<unsigned long long>(failed_over));
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(answered.load(), sent.load());
  EXPECT_EQ(ok.load(), sent.load());
  EXPECT_EQ(wrong.load(), 0);
  // The replacements took over.
  for (const Client::ReplicaStats& r : client->Replicas()) {
    if (r.address == absl::StrCat("ipv4:", addresses[2]) ||
        r.address == absl::StrCat("ipv4:", addresses[3])) {
      EXPECT_GT(r.requests, 0u) << r.address;
    }
  }
  for (size_t i = 2; i < servers.size(); ++i) {
    servers[i]->Term();
    EXPECT_TRUE(servers[i]->Exited(absl::Seconds(45)));
    EXPECT_EQ(servers[i]->rc(), 0);
  }
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <gemm_server>\n", argv[0]);
    return 2;
  }
  gemm::g_server_path = argv[1];
  signal(SIGPIPE, SIG_IGN);
  return RUN_ALL_TESTS();
}
