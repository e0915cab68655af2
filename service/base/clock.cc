#include "service/base/clock.h"

namespace gemm {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* clock = new RealClock;
  return clock;
}

void FakeClock::Advance(absl::Duration d) {
  {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  // A waiter reads the time and blocks on its condition variable under its
  // own mutex; a wake-up takes that mutex to signal, so it runs either before
  // the waiter reads the time (and it sees the new one) or after it blocks.
  absl::MutexLock lock(&wakeups_mu_);
  for (auto& [id, wake] : wakeups_) wake();
}

bool FakeClock::WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline) const {
  const absl::Time started = Now();
  if (started >= deadline) return true;
  std::multimap<absl::Time, absl::Time>::iterator it;
  {
    absl::MutexLock lock(&waiters_mu_);
    it = waiting_.emplace(deadline, started);
  }
  cv->Wait(mu);
  {
    absl::MutexLock lock(&waiters_mu_);
    waiting_.erase(it);
  }
  return Now() >= deadline;
}

int64_t FakeClock::AddWakeup(std::function<void()> wake) const {
  absl::MutexLock lock(&wakeups_mu_);
  const int64_t id = next_wakeup_++;
  wakeups_.emplace(id, std::move(wake));
  return id;
}

void FakeClock::RemoveWakeup(int64_t id) const {
  absl::MutexLock lock(&wakeups_mu_);
  wakeups_.erase(id);
}

bool FakeClock::AwaitWaiter(absl::Time deadline, absl::Duration timeout) const {
  const absl::Time now = Now();
  absl::MutexLock lock(&waiters_mu_);
  auto blocked = [this, deadline, now]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiters_mu_) {
    auto [first, last] = waiting_.equal_range(deadline);
    for (auto it = first; it != last; ++it)
      if (it->second >= now) return true;
    return false;
  };
  return waiters_mu_.AwaitWithTimeout(absl::Condition(&blocked), timeout);
}

int FakeClock::waiters() const {
  absl::MutexLock lock(&waiters_mu_);
  return static_cast<int>(waiting_.size());
}

}  // namespace gemm
