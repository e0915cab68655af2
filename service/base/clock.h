// An injectable clock so that queue deadlines and timing can be tested
// deterministically: both what time it is and how long a timed wait lasts
// go through it, so a FakeClock decides when a wait times out.
#ifndef GEMM_SERVICE_BASE_CLOCK_H_
#define GEMM_SERVICE_BASE_CLOCK_H_

#include <cstdint>
#include <functional>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gemm {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // Waits on `cv`, with `mu` held, until `cv` is signalled or Now() reaches
  // `deadline`; returns true when the deadline has passed (like
  // absl::CondVar::WaitWithDeadline, which the default is: right for any
  // clock whose Now() is absl::Now()). Callers re-check their condition, as
  // with any condition variable.
  virtual bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline) const {
    return cv->WaitWithDeadline(mu, deadline);
  }

  // Registers `wake`, called after every jump of the time (FakeClock::Advance)
  // so that an object whose timed waits go through this clock can signal its
  // condition variables; `wake` may lock the waiter's mutex. Returns an id for
  // RemoveWakeup, which returns only once no call of `wake` is running. The
  // real clock never jumps: the default keeps nothing.
  virtual int64_t AddWakeup(std::function<void()> wake) const { return 0; }
  virtual void RemoveWakeup(int64_t id) const {}

  // The process-wide real clock.
  static Clock* Real();
};

// A clock that moves only when told to; for tests. Its timed waits last until
// Advance() reaches their deadline, however long that takes in real time, and
// a test can wait until a thread is blocked in one (AwaitWaiter).
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1)) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  // Moves the time on, then runs every registered wake-up.
  void Advance(absl::Duration d);

  bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline) const override;
  int64_t AddWakeup(std::function<void()> wake) const override;
  void RemoveWakeup(int64_t id) const override;

  // Waits (up to `timeout` of real time) until some thread is blocked in
  // WaitWithDeadline for `deadline`, having started that wait at the current
  // time (after the latest Advance). Once it returns true, whatever the test
  // does to the waiter's object under its mutex happens while the waiter is
  // blocked. False on timeout.
  bool AwaitWaiter(absl::Time deadline, absl::Duration timeout = absl::Seconds(30)) const;
  // Threads now blocked in WaitWithDeadline.
  int waiters() const;

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);

  // Blocked waits: deadline -> the time each began. Its own mutex: a waiter
  // takes it while holding its object's mutex.
  mutable absl::Mutex waiters_mu_;
  mutable std::multimap<absl::Time, absl::Time> waiting_ ABSL_GUARDED_BY(waiters_mu_);

  // Never held together with mu_ or waiters_mu_; held while wake-ups run.
  mutable absl::Mutex wakeups_mu_;
  mutable int64_t next_wakeup_ ABSL_GUARDED_BY(wakeups_mu_) = 1;
  mutable std::map<int64_t, std::function<void()>> wakeups_ ABSL_GUARDED_BY(wakeups_mu_);
};

}  // namespace gemm

#endif  // GEMM_SERVICE_BASE_CLOCK_H_
