// Client's asynchronous-call machinery, shared by gemm_client.cc (which
// owns it) and gemm_client_async.cc (the asynchronous calls and streams).
// Private to the client library.
#ifndef GEMM_CLIENT_GEMM_CLIENT_INTERNAL_H_
#define GEMM_CLIENT_GEMM_CLIENT_INTERNAL_H_

#include <queue>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/gemm_client.h"

namespace gemm {
namespace client_internal {

// Whether a request that failed with `status` on one replica may run again,
// whole, on another.
bool FailsOver(const absl::Status& status);
// The handles a request's problems name.
std::vector<std::string> HandlesOf(const v1::GemmRequest& request);

}  // namespace client_internal

// Runs closures at given times on one thread. Used for the delays between
// asynchronous retries, so that no thread blocks per waiting call.
class Client::RetryTimer {
 public:
  RetryTimer() : thread_([this] { Loop(); }) {}

  // Runs whatever is still scheduled, at once, then joins the thread.
  ~RetryTimer() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      cv_.Signal();
    }
    thread_.join();
  }

  void Schedule(absl::Time when, std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    tasks_.push(Task{when, next_seq_++, std::move(fn)});
    cv_.Signal();
  }

  // From now on every task runs as soon as it is scheduled.
  void Flush() {
    absl::MutexLock lock(&mu_);
    flush_ = true;
    cv_.Signal();
  }

 private:
  struct Task {
    absl::Time when;
    uint64_t seq;
    std::function<void()> fn;
    // Earliest first, then in scheduling order.
    bool operator<(const Task& o) const {
      return when != o.when ? when > o.when : seq > o.seq;
    }
  };

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (tasks_.empty()) {
        if (stop_) return;
        cv_.Wait(&mu_);
        continue;
      }
      const absl::Time when = tasks_.top().when;
      if (!flush_ && !stop_ && absl::Now() < when) {
        cv_.WaitWithDeadline(&mu_, when);
        continue;
      }
      std::function<void()> fn = std::move(const_cast<Task&>(tasks_.top()).fn);
      tasks_.pop();
      mu_.Unlock();
      fn();
      mu_.Lock();
    }
  }

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::priority_queue<Task> tasks_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool flush_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// One asynchronous unary Gemm across its attempts.
class Client::AsyncCall {
 public:
  AsyncCall(std::shared_ptr<const v1::GemmRequest> request, const CallOptions& options,
            absl::Time deadline, GemmCallback done)
      : request(std::move(request)), options(options), deadline(deadline), done(std::move(done)) {}

  // Cancels the running attempt, or the next one before it starts.
  void Cancel() {
    absl::MutexLock lock(&mu);
    cancelled = true;
    if (ctx != nullptr) ctx->TryCancel();
  }

  const std::shared_ptr<const v1::GemmRequest> request;
  const CallOptions options;
  const absl::Time deadline;
  const GemmCallback done;
  // Touched by one attempt at a time; attempts never overlap.
  int attempts = 0;
  v1::GemmResponse response;
  // The handles the request names (they fix its replica), and the replica
  // of the current attempt.
  std::vector<std::string> handles;
  Route route;

  absl::Mutex mu;
  std::unique_ptr<grpc::ClientContext> ctx ABSL_GUARDED_BY(mu);
  bool cancelled ABSL_GUARDED_BY(mu) = false;
};


}  // namespace gemm

#endif  // GEMM_CLIENT_GEMM_CLIENT_INTERNAL_H_
