// The bounded queue between the RPC handlers and the executors.
//
// Admission is decided at Push, at once: a full queue (in requests), a full
// in-flight byte budget, or a predicted completion past the request's
// deadline rejects with RESOURCE_EXHAUSTED rather than making the caller wait
// (or queueing work that would only expire). Items leave in priority order
// (higher first), earliest deadline first within a priority, then fairly
// across clients (each client's k-th queued request ranks with every other
// client's k-th), then first come first served. Cancelled and expired items
// are completed (CANCELLED / DEADLINE_EXCEEDED) and never handed out.
//
// With tenants (Options::tenants, tenants.h) that order holds within each
// tenant, and the queue chooses between tenants by weighted fair queueing on
// predicted device time (start-time fair queueing): each tenant has a
// virtual time that advances by an item's predicted run time over the
// tenant's weight when the item leaves, and the backlogged tenant with the
// least virtual time goes next. A tenant that becomes backlogged starts at
// the virtual time of the latest item handed out, so time spent idle earns
// no credit: its share went to the others. A tenant's limits are checked at
// Push, before the server's.
#ifndef GEMM_SERVICE_QUEUE_REQUEST_QUEUE_H_
#define GEMM_SERVICE_QUEUE_REQUEST_QUEUE_H_

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
#include "service/base/clock.h"
#include "service/queue/tenants.h"
#include "service/queue/work_item.h"

namespace gemm {

// Admission by predicted completion. A request with a deadline is refused at
// Push when `safety_factor` x (the predicted run time of the work running and
// queued ahead of it, plus its own) reaches past its deadline. "Ahead" is
// queue order: higher priorities, then earlier deadlines; lower priorities
// never count against a request.
struct AdmissionOptions {
  // Off: requests are queued whatever their deadline and expire there
  // (DEADLINE_EXCEEDED) if it passes first.
  bool reject_predicted_late = true;
  // Multiplies every prediction before it is compared with the deadline.
  // Predictions come from peak rates measured at start-up, so they are
  // optimistic for small problems: above 1 refuses earlier, below 1 later.
  double safety_factor = 1.0;

  // InvalidArgument naming the bad field, or OK.
  absl::Status Validate() const;
};

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
    AdmissionOptions admission;
    // One item's run time alone on the executor (Executor::PredictRunTime).
    // Empty, or a zero answer, means no prediction: nothing is refused for
    // lateness. Called by Push outside the queue's lock.
    std::function<absl::Duration(const WorkItem&)> predict_run_time;
    // Items the executor runs side by side (Executor::parallel_units): the
    // predicted backlog drains this many times faster than it adds up.
    int parallel_units = 1;
    // Null: no tenants (every item shares one queue, nothing is limited per
    // tenant). Otherwise an item's tenant is tenants->Resolve(item.client).
    std::shared_ptr<const TenantsConfig> tenants;
  };

  RequestQueue(Options options, const Clock* clock);
  ~RequestQueue();

  // Admits `item` (stamping item->enqueued; its bytes count against the budget
  // until it completes, by whatever path) or rejects it: RESOURCE_EXHAUSTED
  // when full or predicted to finish past its deadline, UNAVAILABLE after
  // Close(), DEADLINE_EXCEEDED when its deadline has already passed. A
  // rejected item is not completed: the caller answers. On
  // RESOURCE_EXHAUSTED, `retry_after` (if given) receives the pushback for
  // the client: when to retry, or a negative duration when retrying the same
  // request cannot help (it exceeds a limit, or alone would outlast its
  // deadline).
  absl::Status Push(std::shared_ptr<WorkItem> item, absl::Duration* retry_after = nullptr);
  // The checks Push would make now, without queueing or reserving anything:
  // lets the service refuse a request before it spends time on it (sizing
  // result buffers of hundreds of MiB takes longer than a short deadline).
  // Push checks again.
  absl::Status Precheck(const WorkItem& item, absl::Duration* retry_after = nullptr) const;

  // Timed waits (`wait`, `linger`) are measured and waited out on the
  // injected clock.
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
  // the caller may know better whether waiting for company is worth it),
  // and, when `may_take` is given, asked last whether the caller may take
  // items at all: false returns none and leaves them queued (another thread
  // took the caller's slot meanwhile). Both run under the queue's lock and
  // must not call into the queue.
  std::vector<std::shared_ptr<WorkItem>> PopBatch(const BatchBudget& budget, absl::Duration wait,
                                                  const std::function<absl::Duration()>& linger,
                                                  const std::function<bool()>& may_take = nullptr);

  // Removes `item` if still queued and completes it (CANCELLED, or
  // DEADLINE_EXCEEDED if its deadline has passed). Safe to call at any time.
  void Cancel(WorkItem* item);

  // Replaces the tenants configuration (null turns tenants off) without
  // dropping anything: queued and running items keep the tenant they were
  // admitted under and count against its new limits; new items resolve
  // through the new configuration.
  void SetTenants(std::shared_ptr<const TenantsConfig> tenants);

  // Refuses new items from now on; queued ones can still be popped.
  void Close();
  // Completes every queued item with `status` and empties the queue.
  void Abandon(const absl::Status& status);

  size_t queued() const;
  uint64_t inflight_bytes() const;
  // The most in-flight bytes admitted items held at once since the queue was
  // made: the peak of the server's working memory, exact (not sampled).
  uint64_t inflight_bytes_high_water() const;
  // A hint for clients told RESOURCE_EXHAUSTED: about how long until the
  // queue has room, from the recent service rate.
  absl::Duration RetryHint() const;

  // The tenant `client` belongs to now: "" without tenants.
  std::string TenantOf(absl::string_view client) const;

 private:
  struct Entry {
    int priority;
    absl::Time deadline;
    // Its client's round: requests of one priority and deadline are served
    // round by round, one per client a round. A client's next request takes
    // the round after its previous one, or the tenant's current round if
    // that is later, so a client that was idle or had few queued gains no
    // credit over one that kept the queue full.
    uint64_t round;
    uint64_t seq;
    std::shared_ptr<WorkItem> item;
    double predicted_s = 0;  // run time alone, from Options::predict_run_time
    // What fair queueing charges the tenant: the predicted run time, or a
    // nominal one from FLOPs and bytes where there is no prediction.
    double cost_s = 0;
    bool operator<(const Entry& o) const {
      if (priority != o.priority) return priority > o.priority;
      if (deadline != o.deadline) return deadline < o.deadline;
      if (round != o.round) return round < o.round;
      return seq < o.seq;
    }
  };
  // One tenant's queue and accounting ("" when there are no tenants).
  struct Tenant {
    std::string name;
    std::set<Entry> entries;
    double vtime = 0;  // virtual time: predicted seconds handed out / weight
    uint64_t served_round = 0;  // the round of the latest entry handed out
    uint64_t inflight_bytes = 0;
    uint32_t inflight_requests = 0;
    // FLOPs token bucket (max_flops_per_s): its level at `refilled`.
    double tokens = 0;
    absl::Time refilled = absl::InfinitePast();
  };
  // What Push needs to know about an item before taking the lock.
  struct Probe {
    double predicted_s = 0;
    double cost_s = 0;
  };

  // Removes `it` (an entry of `tenant`) and its client's count.
  std::set<Entry>::iterator EraseLocked(Tenant& tenant, std::set<Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tenant whose head entry leaves next, or null when nothing is queued.
  Tenant* NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The weight of tenant `name` under the current configuration.
  double WeightLocked(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tenant `client` belongs to and its spec (null without tenants).
  std::pair<std::string, const TenantSpec*> ResolveLocked(absl::string_view client) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tenant's token bucket level at `now`.
  double TokensLocked(const Tenant& tenant, const TenantSpec& spec, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tenant's limits for `item`; OK when within them or unlimited.
  absl::Status AdmitTenantLocked(const WorkItem& item, const std::string& name,
                                 const TenantSpec& spec, absl::Time now,
                                 absl::Duration* retry_after) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // True when the items at the head of the queue fill `budget`.
  bool BudgetFullLocked(const BatchBudget& budget) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admitted bytes return to the budget when the item completes, by any path
  // (Push wraps the item's `done` to call this); a popped item's predicted
  // time leaves the running backlog.
  void Release(const std::string& tenant, uint64_t bytes, const WorkItem* item);
  // The predicted seconds of work, per parallel unit, that runs before an
  // item ranked `entry` in tenant `tenant` would start: what is running and
  // what is queued ahead of it (in its tenant by rank, in the others by
  // virtual time).
  double BacklogAheadLocked(const std::string& tenant, const Entry& entry) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Push's admission decision for `item` whose queue entry would be `entry`
  // in tenant `tenant` (`spec` null without tenants).
  absl::Status AdmitLocked(const WorkItem& item, const std::string& tenant,
                           const TenantSpec* spec, const Entry& entry, absl::Time now,
                           absl::Duration* retry_after) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The entry `item` would have if queued now (no item attached).
  Entry ProbeLocked(const WorkItem& item, const std::string& tenant, const Probe& probe) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Predicted run time (0 when admission does not predict) and fair-queueing
  // cost, in seconds.
  Probe Predict(const WorkItem& item) const;
  // Predicted seconds, per parallel unit, that the popped and unfinished
  // items still need.
  double RunningBacklogLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration RetryHintLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes and removes dead (cancelled or expired) entries.
  void DropDeadLocked(std::vector<std::pair<std::shared_ptr<WorkItem>, absl::Status>>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Clock* clock_;
  int64_t wakeup_id_ = 0;  // Clock::AddWakeup's, for the destructor
  mutable absl::Mutex mu_;
  absl::CondVar ready_;
  std::shared_ptr<const TenantsConfig> tenants_config_ ABSL_GUARDED_BY(mu_);
  // By tenant name: at most the configured tenants of every configuration
  // the queue has had (a single "" without tenants).
  absl::flat_hash_map<std::string, Tenant> tenants_ ABSL_GUARDED_BY(mu_);
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  // The start virtual time of the latest item handed out.
  double virtual_time_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Per client with requests queued: how many, and the round its next one
  // takes at the earliest (Entry::round).
  struct ClientQueue {
    uint64_t queued = 0;
    uint64_t next_round = 0;
  };
  absl::flat_hash_map<std::string, ClientQueue> clients_ ABSL_GUARDED_BY(mu_);
  uint64_t inflight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t inflight_high_water_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Exponentially smoothed time between pops, for RetryHint.
  absl::Time last_pop_ ABSL_GUARDED_BY(mu_);
  double pop_interval_s_ ABSL_GUARDED_BY(mu_) = 1e-3;
  // Popped, unfinished items and their predicted seconds; their sum. The
  // running work is predicted to end at busy_until_ (each pop extends it by
  // what it hands out), but never later than the sum allows.
  absl::flat_hash_map<const WorkItem*, double> running_ ABSL_GUARDED_BY(mu_);
  double running_s_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time busy_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace gemm

#endif  // GEMM_SERVICE_QUEUE_REQUEST_QUEUE_H_
