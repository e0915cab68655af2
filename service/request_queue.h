// The bounded queue between the RPC handlers and the executors.
//
// Admission is decided at Push, at once: a full queue (in requests) or a full
// in-flight byte budget rejects with RESOURCE_EXHAUSTED rather than making the
// caller wait. Items leave in priority order (higher first), earliest deadline
// first within a priority, then fairly across clients (each client's k-th
// queued request ranks with every other client's k-th), then first come first
// served. Cancelled and expired
// items are completed (CANCELLED / DEADLINE_EXCEEDED) and never handed out.
#ifndef GEMM_SERVICE_REQUEST_QUEUE_H_
#define GEMM_SERVICE_REQUEST_QUEUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/clock.h"
#include "service/work_item.h"

namespace gemm {

// Limits of one batch taken from the queue.
struct BatchBudget {
  size_t max_requests = 256;
  double max_flops = 2.0 * 4096 * 4096 * 4096;
  uint64_t max_bytes = uint64_t{1} << 30;
};

class RequestQueue {
 public:
  struct Options {
    uint32_t max_queued_requests = 1024;
    uint64_t max_inflight_bytes = uint64_t{4} << 30;
  };

  RequestQueue(Options options, const Clock* clock);
  ~RequestQueue();

  // Admits `item` (stamping item->enqueued; its bytes count against the budget
  // until it completes, by whatever path) or rejects it: RESOURCE_EXHAUSTED
  // when full, UNAVAILABLE after Close(), DEADLINE_EXCEEDED when its deadline
  // has already passed. A rejected item is not completed: the caller answers.
  absl::Status Push(std::shared_ptr<WorkItem> item);

  // Waits up to `wait` for live items and returns up to `max_items` of them in
  // queue order (possibly none). Returns at once with none after Close() once
  // the queue is empty.
  std::vector<std::shared_ptr<WorkItem>> Pop(size_t max_items, absl::Duration wait);

  // Batch form of Pop: waits up to `wait` for a first live item; then, while
  // the queued items do not fill `budget`, waits until the oldest of them has
  // been queued for `linger`. Returns items in queue order for as long as they
  // fit the budget, and always at least one when any is live (a request larger
  // than the budget runs alone).
  std::vector<std::shared_ptr<WorkItem>> PopBatch(const BatchBudget& budget, absl::Duration wait,
                                                  absl::Duration linger);
  // The same, with the linger decided once the first item is there (by then
  // the caller may know better whether waiting for company is worth it).
  // `linger` runs under the queue's lock and must not call into the queue.
  std::vector<std::shared_ptr<WorkItem>> PopBatch(const BatchBudget& budget, absl::Duration wait,
                                                  const std::function<absl::Duration()>& linger);

  // Removes `item` if still queued and completes it (CANCELLED, or
  // DEADLINE_EXCEEDED if its deadline has passed). Safe to call at any time.
  void Cancel(WorkItem* item);

  // Refuses new items from now on; queued ones can still be popped.
  void Close();
  // Completes every queued item with `status` and empties the queue.
  void Abandon(const absl::Status& status);

  size_t queued() const;
  uint64_t inflight_bytes() const;
  // A hint for clients told RESOURCE_EXHAUSTED: about how long until the
  // queue has room, from the recent service rate.
  absl::Duration RetryHint() const;

 private:
  struct Entry {
    int priority;
    absl::Time deadline;
    uint64_t round;  // how many of its client's requests were queued before it
    uint64_t seq;
    std::shared_ptr<WorkItem> item;
    bool operator<(const Entry& o) const {
      if (priority != o.priority) return priority > o.priority;
      if (deadline != o.deadline) return deadline < o.deadline;
      if (round != o.round) return round < o.round;
      return seq < o.seq;
    }
  };
  // Removes `it` and its client's count.
  std::set<Entry>::iterator EraseLocked(std::set<Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // True when the items at the head of the queue fill `budget`.
  bool BudgetFullLocked(const BatchBudget& budget) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admitted bytes return to the budget when the item completes, by any path
  // (Push wraps the item's `done` to call this).
  void Release(uint64_t bytes);
  // Completes and removes dead (cancelled or expired) entries.
  void DropDeadLocked(std::vector<std::pair<std::shared_ptr<WorkItem>, absl::Status>>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Clock* clock_;
  mutable absl::Mutex mu_;
  absl::CondVar ready_;
  std::set<Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, uint64_t> queued_per_client_ ABSL_GUARDED_BY(mu_);
  uint64_t inflight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Exponentially smoothed time between pops, for RetryHint.
  absl::Time last_pop_ ABSL_GUARDED_BY(mu_);
  double pop_interval_s_ ABSL_GUARDED_BY(mu_) = 1e-3;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_REQUEST_QUEUE_H_
