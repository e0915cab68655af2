// What the service's in-process RPC tests share: small fp32 requests whose
// operand bytes are zeros (the fake executor does not read them), a unary
// Gemm in flight on the callback API, a wait for server-side state, and a
// gauge read from a metrics scrape.
#ifndef GEMM_SERVICE_TESTING_RPC_HELPERS_H_
#define GEMM_SERVICE_TESTING_RPC_HELPERS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"

namespace gemm {
namespace fake {

// An fp32 m x k times k x n problem with zero operand bytes inline.
inline v1::GemmProblem ZeroProblem(uint64_t m, uint64_t n, uint64_t k, double alpha = 1.0) {
  v1::GemmProblem p;
  p.set_m(m);
  p.set_n(n);
  p.set_k(k);
  p.set_input_dtype(v1::DATA_TYPE_FP32);
  p.set_alpha(alpha);
  p.mutable_a()->set_data(std::string(m * k * 4, '\0'));
  p.mutable_b()->set_data(std::string(k * n * 4, '\0'));
  return p;
}

// A request of one such problem, with `id` as its request_id.
inline v1::GemmRequest OneProblemRequest(const std::string& id, uint64_t m = 2, uint64_t n = 2,
                                         uint64_t k = 2) {
  v1::GemmRequest r;
  r.set_request_id(id);
  *r.add_problems() = ZeroProblem(m, n, k);
  return r;
}

// One unary Gemm on the callback API: set `request` (and `ctx`'s metadata),
// Start, then Wait for its status.
struct AsyncGemm {
  grpc::ClientContext ctx;
  v1::GemmRequest request;
  v1::GemmResponse response;
  grpc::Status status;
  absl::Notification done;

  // Sends `request` with a deadline `deadline` from now and, if given, a
  // bearer token.
  void Start(v1::GemmService::Stub* stub, absl::Duration deadline = absl::Seconds(60),
             const std::string& token = "") {
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    if (!token.empty()) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    stub->async()->Gemm(&ctx, &request, &response, [this](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
  }
  void Start(v1::GemmService::Stub* stub, v1::GemmRequest r,
             absl::Duration deadline = absl::Seconds(60), const std::string& token = "") {
    request = std::move(r);
    Start(stub, deadline, token);
  }
  const grpc::Status& Wait() {
    done.WaitForNotification();
    return status;
  }
};

// Waits up to `limit` of real time for `condition`, checking it every
// millisecond: for server-side state that signals nothing the test could
// wait on (an item reaching the queue). Nothing is asserted about timing.
template <typename F>
bool Eventually(F condition, absl::Duration limit = absl::Seconds(30)) {
  const absl::Time give_up = absl::Now() + limit;
  while (!condition()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// The value of the unlabelled gauge `name` in a Prometheus text scrape, or
// -1 when it is not there.
inline double GaugeValue(const std::string& scrape, const std::string& name) {
  const std::string line = "\n" + name + " ";
  const size_t at = scrape.find(line);
  return at == std::string::npos ? -1 : std::stod(scrape.substr(at + line.size()));
}

// Requests queued, from a scrape (gemm_queue_depth).
inline double QueueDepth(const std::string& scrape) {
  return GaugeValue(scrape, "gemm_queue_depth");
}

}  // namespace fake
}  // namespace gemm

#endif  // GEMM_SERVICE_TESTING_RPC_HELPERS_H_
