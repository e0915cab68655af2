// gemm_cli bench: a load generator with --concurrency requests in flight
// (unary, chunked or over one GemmStream; operands in messages, resident or
// in shared memory), optionally verified, over one shape or a --sizes sweep.
#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/bench_report.h"
#include "client/cli/commands.h"
#include "client/cli/connection.h"
#include "client/cli/flags.h"
#include "client/cli/problem.h"
#include "client/matrix_view.h"
#include "common/dtype.h"
#include "common/status_macros.h"

namespace gemm::cli {
namespace {

// `request` with each problem's B registered on the server and named by
// handle; the handles are appended to `residents`.
absl::StatusOr<v1::GemmRequest> WithResidentB(Client* client, const v1::GemmRequest& request,
                                              std::vector<ResidentHandle>* residents) {
  v1::GemmRequest sent = request;
  for (v1::GemmProblem& p : *sent.mutable_problems()) {
    GEMM_ASSIGN_OR_RETURN(const GemmProblemRef ref, ViewProblem(p));
    const MatrixRef& b = ref.b;
    // An FP8 B is registered as its codes; its scales stay in the problem.
    const MatrixView view =
        b.dtype == DType::kFp32
            ? MatrixView(static_cast<const float*>(b.data), b.rows, b.cols, b.layout)
        : IsFp8(b.dtype)
            ? MatrixView(static_cast<const uint8_t*>(b.data), b.rows, b.cols, b.dtype,
                         Fp8Scales{}, b.layout)
            : MatrixView(static_cast<const uint16_t*>(b.data), b.rows, b.cols, b.dtype, b.layout);
    GEMM_ASSIGN_OR_RETURN(ResidentHandle handle, client->RegisterMatrix(view, "gemm_cli bench"));
    residents->push_back(handle);
    p.mutable_b()->set_handle(handle.handle);
  }
  return sent;
}


// How bench sends its requests.
enum class Transport {
  kAsync,    // GemmAsync: one message per request
  kChunked,  // blocking Gemm on --concurrency threads: large operands in chunks, as `run`
  kStream,   // one GemmStream (GemmStreamSession), --concurrency requests in flight
};

const char* TransportName(Transport t) {
  switch (t) {
    case Transport::kAsync: return "unary";
    case Transport::kChunked: return "unary-chunked";
    case Transport::kStream: return "stream";
  }
  return "?";
}


class LoadGenerator {
 public:
  // `checked` is `request` with every operand's bytes (they differ when B is
  // resident); checks read its shapes and types. With `shared`, slot i sends
  // shared->request(i) instead of `request`.
  LoadGenerator(Client* client, std::shared_ptr<const v1::GemmRequest> request,
        std::shared_ptr<const v1::GemmRequest> checked,
        std::vector<std::vector<double>> references, Transport transport,
        const SharedRequests* shared = nullptr)
      : client_(client), request_(std::move(request)), checked_(std::move(checked)),
        references_(std::move(references)), transport_(transport), shared_(shared),
        request_bytes_(shared_ != nullptr ? shared_->request(0)->ByteSizeLong()
                                          : request_->ByteSizeLong()),
        flops_(RequestFlops(*request_)) {
    const int slots = absl::GetFlag(FLAGS_concurrency);
    for (int i = 0; i < slots; ++i)
      slot_requests_.push_back(shared_ != nullptr ? shared_->request(i) : request_);
  }

  Figures Main() {
    const int concurrency = absl::GetFlag(FLAGS_concurrency);
    limit_ = absl::GetFlag(FLAGS_requests);
    verify_every_ = absl::GetFlag(FLAGS_verify_every);
    max_consecutive_ = absl::GetFlag(FLAGS_max_consecutive_failures);
    start_ = absl::Now();
    end_ = start_ + absl::Seconds(absl::GetFlag(FLAGS_duration_s));
    {
      absl::MutexLock lock(&mu_);
      last_ = start_;
    }
    slots_ = concurrency;
    std::vector<std::thread> threads;
    if (transport_ == Transport::kChunked) {
      for (int i = 0; i < concurrency; ++i) threads.emplace_back([this, i] { BlockingSlot(i); });
    } else {
      if (transport_ == Transport::kStream) {
        CallOptions stream_options;
        // The stream's deadline bounds the whole run: its duration, or with
        // --requests one --deadline_ms per round of --concurrency requests.
        const absl::Duration per_call = absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms));
        stream_options.deadline =
            limit_ > 0 ? start_ + per_call * (limit_ / concurrency + 1) : end_ + per_call;
        stream_ = client_->OpenStream(stream_options);
        // The session fills in unique ids; a fixed one would collide.
        for (std::shared_ptr<const v1::GemmRequest>& r : slot_requests_) {
          auto copy = std::make_shared<v1::GemmRequest>(*r);
          copy->clear_request_id();
          r = std::move(copy);
        }
      }
      for (int i = 0; i < concurrency; ++i) Issue(i);
    }
    while (!all_done_.WaitForNotificationWithTimeout(absl::Milliseconds(500))) Progress();
    for (std::thread& t : threads) t.join();
    if (stream_ != nullptr) {
      stream_->CloseSend();
      stream_->Finish().IgnoreError();  // failures were counted per request
      stream_.reset();
    }
    Progress();
    absl::FPrintF(stderr, "\n");
    return Report();
  }

 private:
  // Whether a slot should send another request.
  bool More() {
    if (stop_.load()) return false;
    return limit_ > 0 ? issued_.fetch_add(1) < limit_ : absl::Now() < end_;
  }

  void Retire() {
    if (--slots_ == 0) all_done_.Notify();
  }

  // Starts the next request of `slot`, or retires the slot. A slot sends its
  // next request only once its previous one is recorded (its shared-memory
  // outputs read).
  void Issue(int slot) {
    if (!More()) return Retire();
    const absl::Time sent = absl::Now();
    auto done = [this, sent, slot](GemmResult result) {
      Record(absl::Now() - sent, result, slot);
      Issue(slot);
    };
    if (transport_ == Transport::kAsync) {
      client_->GemmAsync(slot_requests_[slot], {}, std::move(done));
      return;
    }
    absl::Status s = stream_->Send(*slot_requests_[slot], std::move(done));
    if (!s.ok()) {
      // The stream has ended (its failure was counted per request) or
      // refused the request: this slot is done.
      Record(absl::Now() - sent, GemmResult(s), slot);
      Retire();
    }
  }

  // One --concurrency slot of the chunked transport.
  void BlockingSlot(int slot) {
    while (More()) {
      const absl::Time sent = absl::Now();
      GemmResult result = client_->Gemm(*slot_requests_[slot]);
      Record(absl::Now() - sent, result, slot);
    }
    Retire();
  }

  void Record(absl::Duration latency, const GemmResult& result, int slot) {
    int64_t n;
    {
      absl::MutexLock lock(&mu_);
      n = ++completed_;
      last_ = absl::Now();
      if (!result.ok()) {
        ++errors_[{result.status().code(), std::string(result.status().message())}];
        ++consecutive_failures_;
        if (max_consecutive_ > 0 && consecutive_failures_ >= max_consecutive_ && !stop_.load()) {
          stopped_early_ = absl::StrCat(consecutive_failures_,
                                        " consecutive failures (--max_consecutive_failures=",
                                        max_consecutive_, ")");
          stop_ = true;
        }
        return;
      }
      consecutive_failures_ = 0;
      latencies_ms_.push_back(absl::ToDoubleMilliseconds(latency));
      response_bytes_ += result->ByteSizeLong();
    }
    if (verify_every_ > 0 && n % verify_every_ == 0) Verify(*result, slot);
  }

  void Verify(const v1::GemmResponse& received, int slot) {
    // Results written into shared memory are read from there; others are
    // checked where they are, without a copy.
    GemmResult read;
    if (shared_ != nullptr) read = shared_->WithResults(slot, received);
    const v1::GemmResponse& response = shared_ != nullptr && read.ok() ? *read : received;
    bool ok = (shared_ == nullptr || read.ok()) &&
              response.results_size() == request_->problems_size();
    for (int i = 0; ok && i < response.results_size(); ++i) {
      absl::StatusOr<Check> c = CheckResult(checked_->problems(i), response.results(i), references_[i]);
      ok = c.ok() && c->ok();
    }
    absl::MutexLock lock(&mu_);
    ++verified_;
    if (!ok) ++mismatches_;
  }

  void Progress() {
    absl::MutexLock lock(&mu_);
    const double s = absl::ToDoubleSeconds(absl::Now() - start_);
    int64_t errors = 0;
    for (const auto& [code, count] : errors_) errors += count;
    absl::FPrintF(stderr, "\r[%6.1f s] %lld requests, %.1f req/s, %lld errors   ", s,
                  static_cast<long long>(completed_), s > 0 ? completed_ / s : 0.0,
                  static_cast<long long>(errors));
  }

  Figures Report() {
    absl::MutexLock lock(&mu_);
    Figures f;
    f.seconds = std::max(1e-9, absl::ToDoubleSeconds(last_ - start_));
    f.requests = completed_;
    f.ok = static_cast<int64_t>(latencies_ms_.size());
    f.failures = errors_;
    f.stopped_early = stopped_early_;
    std::sort(latencies_ms_.begin(), latencies_ms_.end());
    auto pct = [&](double q) {
      if (latencies_ms_.empty()) return 0.0;
      const size_t i = static_cast<size_t>(q * (latencies_ms_.size() - 1) + 0.5);
      return latencies_ms_[std::min(i, latencies_ms_.size() - 1)];
    };
    const double req_mb = static_cast<double>(request_bytes_) * f.ok / 1e6;
    const double resp_mb = static_cast<double>(response_bytes_) / 1e6;
    const v1::GemmProblem& p0 = request_->problems(0);
    f.m = p0.m();
    f.n = p0.n();
    f.k = p0.k();
    f.batch = request_->problems_size();
    f.workload = absl::StrFormat("%dx%dx%d %s -> %s, batch %d, concurrency %d", p0.m(), p0.n(),
                                 p0.k(), Name(p0.input_dtype()), Name(p0.output_dtype()),
                                 request_->problems_size(), absl::GetFlag(FLAGS_concurrency));
    f.transport =
        absl::StrCat(TransportName(transport_), shared_ != nullptr ? " + shared memory" : "");
    f.requests_per_s = f.ok / f.seconds;
    f.gflops = flops_ * f.ok / f.seconds / 1e9;
    f.request_mb_per_s = req_mb / f.seconds;
    f.response_mb_per_s = resp_mb / f.seconds;
    f.mb_per_s = f.request_mb_per_s + f.response_mb_per_s;
    f.p50 = pct(0.50);
    f.p90 = pct(0.90);
    f.p99 = pct(0.99);
    f.max = latencies_ms_.empty() ? 0.0 : latencies_ms_.back();
    f.verified = verified_;
    f.mismatches = mismatches_;
    return f;
  }

  Client* const client_;
  std::shared_ptr<const v1::GemmRequest> request_;
  const std::shared_ptr<const v1::GemmRequest> checked_;
  const std::vector<std::vector<double>> references_;
  const Transport transport_;
  const SharedRequests* const shared_;
  std::vector<std::shared_ptr<const v1::GemmRequest>> slot_requests_;
  const size_t request_bytes_;
  const double flops_;
  std::unique_ptr<GemmStreamSession> stream_;
  int64_t limit_ = 0;
  int64_t verify_every_ = 0;
  int64_t max_consecutive_ = 0;
  absl::Time start_, end_;
  std::atomic<int64_t> issued_{0};
  std::atomic<int> slots_{0};
  std::atomic<bool> stop_{false};
  absl::Notification all_done_;

  absl::Mutex mu_;
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::string stopped_early_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  std::vector<double> latencies_ms_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<absl::StatusCode, std::string>, int64_t> errors_ ABSL_GUARDED_BY(mu_);
  uint64_t response_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t verified_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t mismatches_ ABSL_GUARDED_BY(mu_) = 0;
};

// The (m, n, k) of each bench run: --sizes, else the flags' one shape.
absl::StatusOr<std::vector<std::array<uint64_t, 3>>> BenchShapes() {
  const std::string sizes = absl::GetFlag(FLAGS_sizes);
  if (sizes.empty()) {
    return std::vector<std::array<uint64_t, 3>>{
        {absl::GetFlag(FLAGS_m), absl::GetFlag(FLAGS_n), absl::GetFlag(FLAGS_k)}};
  }
  std::vector<std::array<uint64_t, 3>> shapes;
  for (absl::string_view part : absl::StrSplit(sizes, ',')) {
    uint64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes: \"", part, "\" is not a size (e.g. --sizes=256,512,1024)"));
    }
    shapes.push_back({v, v, v});
  }
  return shapes;
}

// One bench run of shape (m, n, k); nullopt (after printing why) when it
// could not start, with the exit code in `*exit_code`.
std::optional<Figures> BenchOne(Client* client, const CheckLimits& limits, uint64_t m, uint64_t n,
                                uint64_t k, int* exit_code) {
  const bool verify = absl::GetFlag(FLAGS_verify_every) > 0;
  absl::StatusOr<Shape> shape = FlagShape(m, n, k, verify);
  absl::Status checked = shape.ok() ? CheckSize(*shape, limits) : shape.status();
  if (!checked.ok()) {
    absl::FPrintF(stderr, "error: %s\n", checked.ToString());
    *exit_code = kExitError;
    return std::nullopt;
  }
  absl::StatusOr<v1::GemmRequest> request = BuildRequest(m, n, k);
  if (!request.ok()) {
    absl::FPrintF(stderr, "error: %s\n", request.status().ToString());
    *exit_code = kExitError;
    return std::nullopt;
  }
  std::vector<std::vector<double>> refs;
  if (verify) {
    absl::StatusOr<std::vector<std::vector<double>>> r = References(*request);
    if (!r.ok()) {
      absl::FPrintF(stderr, "error: %s\n", r.status().ToString());
      *exit_code = kExitError;
      return std::nullopt;
    }
    refs = std::move(*r);
  }
  auto full = std::make_shared<const v1::GemmRequest>(*std::move(request));
  auto sent = full;
  std::vector<ResidentHandle> residents;
  if (absl::GetFlag(FLAGS_resident_b)) {
    absl::StatusOr<v1::GemmRequest> r = WithResidentB(client, *full, &residents);
    if (!r.ok()) {
      absl::FPrintF(stderr, "error: %s\n", FlagNames(r.status()).ToString());
      for (const ResidentHandle& h : residents) client->ReleaseMatrix(h).IgnoreError();
      *exit_code = kExitRpc;
      return std::nullopt;
    }
    sent = std::make_shared<const v1::GemmRequest>(*std::move(r));
  }
  // The transfer path of `run`: what Client::Gemm would send in chunks goes
  // through it.
  Transport transport = absl::GetFlag(FLAGS_stream) ? Transport::kStream : Transport::kAsync;
  std::unique_ptr<SharedRequests> shared =
      SharedOrNull(client, *sent, absl::GetFlag(FLAGS_concurrency));
  if (shared == nullptr && transport == Transport::kAsync && client->NeedsChunks(*sent))
    transport = Transport::kChunked;
  LoadGenerator load(client, sent, full, std::move(refs), transport, shared.get());
  Figures f = load.Main();
  for (const ResidentHandle& h : residents) client->ReleaseMatrix(h).IgnoreError();
  return f;
}

}  // namespace

int Bench() {
  if (absl::GetFlag(FLAGS_concurrency) < 1) {
    absl::FPrintF(stderr, "error: --concurrency must be >= 1\n");
    return kExitError;
  }
  if (absl::GetFlag(FLAGS_max_consecutive_failures) < 0) {
    absl::FPrintF(stderr, "error: --max_consecutive_failures must be >= 0\n");
    return kExitError;
  }
  absl::StatusOr<std::vector<std::array<uint64_t, 3>>> shapes = BenchShapes();
  if (!shapes.ok()) return absl::FPrintF(stderr, "error: %s\n", shapes.status().ToString()), kExitError;
  const bool verify = absl::GetFlag(FLAGS_verify_every) > 0;
  // Every shape of the sweep is checked locally before any connection.
  for (const auto& [m, n, k] : *shapes) {
    absl::StatusOr<Shape> shape = FlagShape(m, n, k, verify);
    absl::Status s = shape.ok() ? CheckSize(*shape, {LocalLimits(), false}) : shape.status();
    if (!s.ok()) return absl::FPrintF(stderr, "error: %s\n", s.ToString()), kExitError;
  }
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient();
  if (!client.ok()) return absl::FPrintF(stderr, "error: %s\n", client.status().ToString()), kExitError;
  const CheckLimits limits = FetchLimits(client->get());
  for (const auto& [m, n, k] : *shapes) {
    absl::StatusOr<Shape> shape = FlagShape(m, n, k, verify);
    absl::Status s = shape.ok() ? CheckSize(*shape, limits) : shape.status();
    if (!s.ok()) return absl::FPrintF(stderr, "error: %s\n", s.ToString()), kExitError;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  std::vector<Figures> runs;
  int exit_code = 0;
  for (size_t i = 0; i < shapes->size(); ++i) {
    const auto& [m, n, k] = (*shapes)[i];
    int failed_code = 0;
    std::optional<Figures> f = BenchOne(client->get(), limits, m, n, k, &failed_code);
    if (!f.has_value()) {
      exit_code = std::max(exit_code, failed_code);
      break;
    }
    if (json) {
      runs.push_back(*f);
    } else {
      if (i > 0) absl::PrintF("\n");
      PrintText(*f, client->get());
    }
    int code = 0;
    if (f->mismatches > 0) {
      code = kExitMismatch;
    } else if (f->requests > f->ok) {
      code = kExitRpc;
    }
    // A wrong result outranks failed calls.
    if (code == kExitMismatch || (code == kExitRpc && exit_code == 0)) exit_code = code;
    if (!f->stopped_early.empty()) break;  // the next sizes would fail the same way
  }
  if (json) {
    absl::PrintF("%s\n", JsonReport(absl::GetFlag(FLAGS_target), runs, exit_code));
  }
  return exit_code;
}

}  // namespace gemm::cli
