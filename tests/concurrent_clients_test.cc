// Many clients at once through the CPU executor (issue 5's CPU integration
// test): eight threads, each with its own gemm::Client and GemmStream, keep
// several requests in flight: mostly identical small problems (so the batcher
// forms batches of several requests), other shapes and dtypes, bad requests,
// calls with a deadline too short to make it and calls cancelled by
// destroying their client. Every good result is checked against the float64
// reference; every bad request gets INVALID_ARGUMENT naming its field.
// Afterwards the server's metrics show batches of more than one request and
// the queue and in-flight bytes back at zero.
#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/gemm_client.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::gemm::test::MakeProblem;
using ::gemm::test::ProblemSpec;
using ::gemm::test::ResponseMatches;
using ::testing::HasSubstr;

constexpr int kClients = 8;
constexpr int kRequestsPerClient = 120;
// Requests one client keeps in flight, unary and stream together.
constexpr int kWindow = 6;

constexpr DType kDTypes[] = {DType::kFp32, DType::kFp16, DType::kBf16};
constexpr Layout kLayouts[] = {Layout::kRowMajor, Layout::kColMajor};

ServerOptions ConcurrentServerOptions() {
  ServerOptions o = test::LoopbackCpuServerOptions();
  // While both CPU slots are busy, requests wait up to 2 ms for company.
  o.batcher.max_queue_delay = absl::Milliseconds(2);
  o.limits.max_message_bytes = 16 << 20;
  o.limits.max_dimension = 8192;
  o.limits.max_matrix_bytes = 4 << 20;
  o.limits.max_problems_per_request = 64;
  o.limits.max_queued_requests = 1024;
  o.limits.max_inflight_bytes = 256 << 20;
  o.limits.max_stream_inflight = 16;
  return o;
}

std::unique_ptr<Client> ConnectClient(int port) {
  ClientOptions options;
  options.target = absl::StrCat("127.0.0.1:", port);
  options.default_timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return nullptr;
  (*client)->channel()->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  return std::move(*client);
}

// What one request of the mix is.
enum class Kind {
  kSmallSame,        // the one small shape every client sends: batched together
  kMixed,            // 1 to 3 problems of random shapes and dtypes
  kBad,              // a malformed request
  kShortDeadline,    // a 1 ms deadline on a problem that takes longer
  kCancelled,        // its client is destroyed while it is in flight
  kStreamSmallSame,  // kSmallSame over the client's GemmStream
  kStreamMixed,      // kMixed over the client's GemmStream
};

Kind KindOf(int slot) {
  switch (slot % 12) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
      return Kind::kSmallSame;
    case 5:
      return Kind::kMixed;
    case 6:
      return Kind::kBad;
    case 7:
      return Kind::kShortDeadline;
    case 8:
      return Kind::kCancelled;
    case 9:
    case 10:
      return Kind::kStreamSmallSame;
    default:
      return Kind::kStreamMixed;
  }
}

// Identical in everything the launch planner compares (shape, dtypes,
// transposes, layouts, alpha, beta), so these requests can share a
// strided-batched launch.
ProblemSpec SmallSameSpec() {
  ProblemSpec s;
  s.m = 24;
  s.n = 24;
  s.k = 24;
  s.input = DType::kFp16;
  s.output = DType::kFp32;
  s.transpose_b = true;
  s.alpha = 0.5;
  return s;
}

ProblemSpec RandomSpec(std::mt19937* rng) {
  std::uniform_int_distribution<uint64_t> dim(1, 90);
  std::uniform_int_distribution<int> pick(0, 2), coin(0, 1), four(0, 3);
  ProblemSpec s;
  s.m = dim(*rng);
  s.n = dim(*rng);
  s.k = dim(*rng);
  s.input = kDTypes[pick(*rng)];
  if (coin(*rng)) s.output = kDTypes[pick(*rng)];
  s.transpose_a = coin(*rng);
  s.transpose_b = coin(*rng);
  s.layout_a = kLayouts[coin(*rng)];
  s.layout_b = kLayouts[coin(*rng)];
  s.layout_c = kLayouts[coin(*rng)];
  s.layout_d = kLayouts[coin(*rng)];
  const int scalars = four(*rng);
  if (scalars == 1) s.alpha = -1.25;
  if (scalars >= 2) s.beta = scalars == 2 ? 0.5 : -2.0;
  return s;
}

// About 14 MFLOP: many milliseconds on one BLAS thread.
ProblemSpec MediumSpec() {
  ProblemSpec s;
  s.m = 192;
  s.n = 192;
  s.k = 192;
  return s;
}

// Malformed requests: a mutation of a good 3x5x4 fp32 request and the field
// the server's message must name.
struct BadCase {
  const char* name;
  void (*mutate)(v1::GemmRequest*);
  const char* field;
};

const std::vector<BadCase>& BadCases() {
  static const std::vector<BadCase> cases = {
      {"zero m", [](v1::GemmRequest* r) { r->mutable_problems(0)->set_m(0); }, "problems[0].m"},
      {"short a",
       [](v1::GemmRequest* r) { r->mutable_problems(0)->mutable_a()->mutable_data()->pop_back(); },
       "problems[0].a.data"},
      {"unknown dtype",
       [](v1::GemmRequest* r) {
         r->mutable_problems(0)->set_input_dtype(static_cast<v1::DataType>(7));
       },
       "problems[0].input_dtype"},
      {"unknown layout",
       [](v1::GemmRequest* r) {
         r->mutable_problems(0)->mutable_b()->set_layout(static_cast<v1::Layout>(9));
       },
       "problems[0].b.layout"},
      {"beta without C", [](v1::GemmRequest* r) { r->mutable_problems(0)->set_beta(2.0); },
       "problems[0].c"},
      {"empty batch", [](v1::GemmRequest* r) { r->clear_problems(); }, "problems"},
      {"bad second problem",
       [](v1::GemmRequest* r) {
         *r->add_problems() = r->problems(0);
         r->mutable_problems(1)->set_k(0);
       },
       "problems[1].k"},
  };
  return cases;
}

// What the clients saw, summed over all of them.
struct Tally {
  std::atomic<int> good_ok{0};           // kSmallSame/kMixed and stream ones, checked
  std::atomic<int> bad_rejected{0};      // INVALID_ARGUMENT naming the field
  std::atomic<int> deadline_exceeded{0};
  std::atomic<int> deadline_made_it{0};  // finished in time after all, checked
  std::atomic<int> cancelled{0};
  std::atomic<int> cancel_too_late{0};   // finished before the cancel, checked
  std::atomic<int> bad_sent{0};
  std::atomic<int> wrong{0};             // anything else
};

// One request of the mix and where its answer comes.
struct InFlight {
  Kind kind;
  v1::GemmRequest request;
  const BadCase* bad = nullptr;
  std::future<GemmResult> answer;
};

class ConcurrentClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = GemmServer::Start(ConcurrentServerOptions());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(10));
  }

  // One client thread's whole run.
  void RunClient(int t) {
    std::mt19937 rng(7000 + t);
    std::unique_ptr<Client> client = ConnectClient(server_->port());
    ASSERT_NE(client, nullptr);
    CallOptions stream_options;
    stream_options.timeout = absl::Seconds(120);
    std::unique_ptr<GemmStreamSession> stream = client->OpenStream(stream_options);
    std::deque<InFlight> window;
    for (int i = 0; i < kRequestsPerClient; ++i) {
      const Kind kind = KindOf(i + t);
      InFlight f;
      f.kind = kind;
      f.request.set_request_id(absl::StrCat("c", t, "-", i));
      switch (kind) {
        case Kind::kSmallSame:
        case Kind::kStreamSmallSame:
          *f.request.add_problems() = MakeProblem(SmallSameSpec(), &rng);
          break;
        case Kind::kMixed:
        case Kind::kStreamMixed: {
          const int problems = 1 + i % 3;
          for (int p = 0; p < problems; ++p)
            *f.request.add_problems() = MakeProblem(RandomSpec(&rng), &rng);
          break;
        }
        case Kind::kBad: {
          ProblemSpec s;
          s.m = 3;
          s.n = 5;
          s.k = 4;
          *f.request.add_problems() = MakeProblem(s, &rng);
          f.bad = &BadCases()[(i + t) % BadCases().size()];
          f.bad->mutate(&f.request);
          tally_.bad_sent.fetch_add(1);
          break;
        }
        case Kind::kShortDeadline:
        case Kind::kCancelled:
          *f.request.add_problems() = MakeProblem(MediumSpec(), &rng);
          break;
      }
      switch (kind) {
        case Kind::kSmallSame:
        case Kind::kMixed:
        case Kind::kBad:
          f.answer = client->GemmFuture(f.request);
          break;
        case Kind::kShortDeadline: {
          CallOptions options;
          options.timeout = absl::Milliseconds(1);
          f.answer = client->GemmFuture(f.request, options);
          break;
        }
        case Kind::kCancelled:
          f.answer = SendAndCancel(f.request, &rng);
          break;
        case Kind::kStreamSmallSame:
        case Kind::kStreamMixed: {
          absl::StatusOr<std::future<GemmResult>> sent = stream->Send(f.request);
          ASSERT_TRUE(sent.ok()) << sent.status();
          f.answer = std::move(*sent);
          break;
        }
      }
      window.push_back(std::move(f));
      while (window.size() >= kWindow) {
        Settle(&window.front());
        window.pop_front();
      }
    }
    while (!window.empty()) {
      Settle(&window.front());
      window.pop_front();
    }
    stream->CloseSend();
    const absl::Status finish = stream->Finish();
    EXPECT_TRUE(finish.ok()) << "client " << t << " stream: " << finish;
  }

  // Sends `request` from a client of its own and destroys that client a
  // moment later, which cancels the call (unless it has finished by then).
  std::future<GemmResult> SendAndCancel(const v1::GemmRequest& request, std::mt19937* rng) {
    auto promise = std::make_shared<std::promise<GemmResult>>();
    std::future<GemmResult> answer = promise->get_future();
    std::unique_ptr<Client> doomed = ConnectClient(server_->port());
    if (doomed == nullptr) {
      promise->set_value(absl::InternalError("no client"));
      return answer;
    }
    doomed->GemmAsync(request, CallOptions{},
                      [promise](GemmResult r) { promise->set_value(std::move(r)); });
    absl::SleepFor(absl::Microseconds(std::uniform_int_distribution<int>(0, 3000)(*rng)));
    doomed.reset();  // cancels the call and waits for its callback
    return answer;
  }

  // Waits for one answer and checks it against what its kind allows.
  void Settle(InFlight* f) {
    ASSERT_EQ(f->answer.wait_for(std::chrono::seconds(120)), std::future_status::ready)
        << f->request.request_id() << " never answered";
    const GemmResult r = f->answer.get();
    const std::string& id = f->request.request_id();
    auto check_good = [&](std::atomic<int>* counter) {
      const ::testing::AssertionResult match = ResponseMatches(f->request, *r);
      EXPECT_TRUE(match) << id;
      if (match) {
        counter->fetch_add(1);
      } else {
        tally_.wrong.fetch_add(1);
      }
    };
    switch (f->kind) {
      case Kind::kSmallSame:
      case Kind::kMixed:
      case Kind::kStreamSmallSame:
      case Kind::kStreamMixed:
        if (!r.ok()) {
          ADD_FAILURE() << id << ": " << r.status();
          tally_.wrong.fetch_add(1);
          return;
        }
        check_good(&tally_.good_ok);
        return;
      case Kind::kBad:
        EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
            << id << " (" << f->bad->name << "): " << r.status();
        EXPECT_THAT(std::string(r.status().message()), HasSubstr(f->bad->field))
            << id << " (" << f->bad->name << ")";
        if (r.status().code() == absl::StatusCode::kInvalidArgument &&
            r.status().message().find(f->bad->field) != absl::string_view::npos) {
          tally_.bad_rejected.fetch_add(1);
        } else {
          tally_.wrong.fetch_add(1);
        }
        return;
      case Kind::kShortDeadline:
        if (r.ok()) return check_good(&tally_.deadline_made_it);
        EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << id << ": " << r.status();
        if (r.status().code() == absl::StatusCode::kDeadlineExceeded) {
          tally_.deadline_exceeded.fetch_add(1);
        } else {
          tally_.wrong.fetch_add(1);
        }
        return;
      case Kind::kCancelled:
        if (r.ok()) return check_good(&tally_.cancel_too_late);
        EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << id << ": " << r.status();
        if (r.status().code() == absl::StatusCode::kCancelled) {
          tally_.cancelled.fetch_add(1);
        } else {
          tally_.wrong.fetch_add(1);
        }
        return;
    }
  }

  // Scrapes until the queue and the in-flight bytes are back at zero: work
  // of cancelled calls that had reached the executor may still be finishing.
  std::string ScrapeWhenIdle(absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    std::string scrape = server_->metrics()->Scrape();
    while (absl::Now() < give_up &&
           (test::MetricValue(scrape, "gemm_queue_depth") != 0 ||
            test::MetricValue(scrape, "gemm_inflight_bytes") != 0)) {
      absl::SleepFor(absl::Milliseconds(20));
      scrape = server_->metrics()->Scrape();
    }
    return scrape;
  }

  std::unique_ptr<GemmServer> server_;
  Tally tally_;
};

// Requests per batch above one: the histogram's count minus its le="1" bucket.
double BatchesOfMoreThanOne(const std::string& scrape) {
  const double count = test::MetricValue(scrape, "gemm_batch_requests_count");
  for (const test::MetricSample& s : test::MetricSamples(scrape, "gemm_batch_requests_bucket")) {
    const size_t at = s.labels.find("le=\"");
    if (at == std::string::npos) continue;
    const size_t end = s.labels.find('"', at + 4);
    double le = 0;
    if (absl::SimpleAtod(s.labels.substr(at + 4, end - at - 4), &le) && le == 1.0)
      return count - s.value;
  }
  ADD_FAILURE() << "no le=\"1\" bucket of gemm_batch_requests in:\n" << scrape;
  return 0;
}

TEST_F(ConcurrentClientsTest, MixedLoadFromManyClientsIsAnsweredRightAndBatched) {
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) threads.emplace_back([this, t] { RunClient(t); });
  for (std::thread& t : threads) t.join();
  const absl::Duration took = absl::Now() - start;

  const int answered = tally_.good_ok + tally_.bad_rejected + tally_.deadline_exceeded +
                       tally_.deadline_made_it + tally_.cancelled + tally_.cancel_too_late;
  EXPECT_EQ(tally_.wrong.load(), 0);
  EXPECT_EQ(answered, kClients * kRequestsPerClient);
  EXPECT_EQ(tally_.bad_rejected.load(), tally_.bad_sent.load());
  EXPECT_GT(tally_.good_ok.load(), kClients * kRequestsPerClient / 2);
  // With 1 ms to do 14 MFLOP and move 300 KB, nearly all must miss; the
  // clock of a loaded machine may let an odd one through.
  EXPECT_GT(tally_.deadline_exceeded.load(), 0);

  const std::string scrape = ScrapeWhenIdle(absl::Seconds(30));
  EXPECT_EQ(test::MetricValue(scrape, "gemm_queue_depth"), 0) << scrape;
  EXPECT_EQ(test::MetricValue(scrape, "gemm_inflight_bytes"), 0) << scrape;
  EXPECT_GT(BatchesOfMoreThanOne(scrape), 0) << "no batch held more than one request:\n"
                                             << scrape;
  // The server's count of INVALID_ARGUMENT answers is exactly the bad
  // requests sent (none of the good ones was refused).
  EXPECT_EQ(test::MetricValue(scrape, "gemm_requests_total",
                              {"code=\"INVALID_ARGUMENT\"", "method=\"Gemm\""}),
            tally_.bad_sent.load());
  EXPECT_EQ(test::MetricValue(scrape, "gemm_requests_total",
                              {"code=\"INVALID_ARGUMENT\"", "method=\"GemmStream\""}),
            0);

  RecordProperty("good_ok", tally_.good_ok.load());
  RecordProperty("deadline_exceeded", tally_.deadline_exceeded.load());
  RecordProperty("deadline_made_it", tally_.deadline_made_it.load());
  RecordProperty("cancelled", tally_.cancelled.load());
  RecordProperty("cancel_too_late", tally_.cancel_too_late.load());
  RecordProperty("batches_over_one", static_cast<int>(BatchesOfMoreThanOne(scrape)));
  RecordProperty("milliseconds", static_cast<int>(absl::ToInt64Milliseconds(took)));
}

}  // namespace
}  // namespace gemm
