#include "service/request_queue.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "service/limits.h"

namespace gemm {
namespace {

using Dropped = std::vector<std::pair<std::shared_ptr<WorkItem>, absl::Status>>;

absl::Status DeadStatus(const WorkItem& item, absl::Time now) {
  if (item.deadline <= now)
    return absl::DeadlineExceededError("the deadline passed while the request was queued");
  return absl::CancelledError("the call was cancelled while the request was queued");
}

void CompleteAll(Dropped& dropped) {
  for (auto& [item, status] : dropped) item->Complete(status);
}

// Bounds of every retry hint: soon enough to be worth a timer, late enough
// not to come back into the same overload at once.
constexpr absl::Duration kMinRetryHint = absl::Milliseconds(1);
constexpr absl::Duration kMaxRetryHint = absl::Seconds(5);
// A pushback that tells clients not to retry the same request.
constexpr absl::Duration kDoNotRetry = absl::Milliseconds(-1);

// Predictions to the microsecond: finer digits would only be noise.
absl::Duration ToMicros(double seconds) { return absl::Microseconds(std::llround(seconds * 1e6)); }
std::string Readable(double seconds) { return absl::FormatDuration(ToMicros(seconds)); }

}  // namespace

absl::Status AdmissionOptions::Validate() const {
  if (!(safety_factor > 0) || !std::isfinite(safety_factor))
    return absl::InvalidArgumentError(
        absl::StrCat("admission.safety_factor must be positive and finite, got ", safety_factor));
  return absl::OkStatus();
}

RequestQueue::RequestQueue(Options options, const Clock* clock)
    : options_(options), clock_(clock), last_pop_(clock->Now()) {
  // Timed waits run on the injected clock: when it jumps, waiters re-check.
  wakeup_id_ = clock_->AddWakeup([this] {
    absl::MutexLock lock(&mu_);
    ready_.SignalAll();
  });
}

RequestQueue::~RequestQueue() {
  clock_->RemoveWakeup(wakeup_id_);
  Abandon(absl::UnavailableError("the server is shutting down"));
}

absl::Status RequestQueue::AdmitLocked(const WorkItem& item, const Entry& entry, absl::Time now,
                                       absl::Duration* retry_after) const {
  auto reject = [retry_after](absl::Status status, absl::Duration hint) {
    if (retry_after != nullptr) *retry_after = hint;
    return status;
  };
  if (closed_) return absl::UnavailableError("the server is shutting down");
  if (entries_.size() >= options_.max_queued_requests)
    return reject(WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                                "the queue is full (", options_.max_queued_requests,
                                " requests); retry later")),
                            "max_queued_requests"),
                  RetryHintLocked());
  if (inflight_bytes_ + item.bytes > options_.max_inflight_bytes) {
    if (item.bytes > options_.max_inflight_bytes)
      return reject(WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                                  "the request holds ", item.bytes,
                                  " bytes, more than the server's in-flight limit of ",
                                  options_.max_inflight_bytes)),
                              "max_inflight_bytes"),
                    kDoNotRetry);
    return reject(WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                                "the server holds ", inflight_bytes_, " of its ",
                                options_.max_inflight_bytes, " in-flight bytes; retry later")),
                            "max_inflight_bytes"),
                  RetryHintLocked());
  }
  const double predicted_s = entry.predicted_s;
  if (predicted_s > 0 && item.deadline != absl::InfiniteFuture()) {
    const double factor = options_.admission.safety_factor;
    const double left_s = absl::ToDoubleSeconds(item.deadline - now);
    if (factor * predicted_s > left_s)
      return reject(WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                                  "the request alone is predicted to take ",
                                  Readable(factor * predicted_s), ", more than the ",
                                  Readable(left_s),
                                  " left before its deadline; it needs a longer deadline")),
                              "deadline"),
                    kDoNotRetry);
    const double ahead_s = factor * BacklogAheadLocked(entry);
    if (ahead_s + factor * predicted_s > left_s)
      return reject(
          WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                        "the request is predicted to finish in ",
                        Readable(ahead_s + factor * predicted_s), " (", Readable(ahead_s),
                        " of work running or queued ahead of it at priority ", item.priority,
                        " or above), after its deadline in ", Readable(left_s), "; retry later")),
                    "deadline"),
          std::clamp(ToMicros(ahead_s), kMinRetryHint, kMaxRetryHint));
  }
  return absl::OkStatus();
}

RequestQueue::Entry RequestQueue::ProbeLocked(const WorkItem& item, double predicted_s) const {
  auto queued = queued_per_client_.find(item.client);
  return Entry{item.priority, item.deadline,
               queued == queued_per_client_.end() ? 0 : queued->second, next_seq_, nullptr,
               predicted_s};
}

double RequestQueue::Predict(const WorkItem& item) const {
  const bool predicting =
      options_.admission.reject_predicted_late && options_.predict_run_time != nullptr;
  return predicting ? std::max(0.0, absl::ToDoubleSeconds(options_.predict_run_time(item))) : 0.0;
}

absl::Status RequestQueue::Precheck(const WorkItem& item, absl::Duration* retry_after) const {
  const absl::Time now = clock_->Now();
  if (item.deadline <= now)
    return absl::DeadlineExceededError("the deadline passed before the request was queued");
  const double predicted_s = Predict(item);
  absl::MutexLock lock(&mu_);
  return AdmitLocked(item, ProbeLocked(item, predicted_s), now, retry_after);
}

absl::Status RequestQueue::Push(std::shared_ptr<WorkItem> item, absl::Duration* retry_after) {
  const absl::Time now = clock_->Now();
  if (item->deadline <= now)
    return absl::DeadlineExceededError("the deadline passed before the request was queued");
  // Predicted before taking the lock: it walks the request's problems.
  const double predicted_s = Predict(*item);
  absl::MutexLock lock(&mu_);
  Entry entry = ProbeLocked(*item, predicted_s);
  if (absl::Status st = AdmitLocked(*item, entry, now, retry_after); !st.ok()) return st;

  inflight_bytes_ += item->bytes;
  inflight_high_water_ = std::max(inflight_high_water_, inflight_bytes_);
  const uint64_t bytes = item->bytes;
  const WorkItem* raw = item.get();
  auto inner = std::move(item->done);
  item->done = [this, bytes, raw, inner = std::move(inner)](const absl::Status& s,
                                                            const ExecutionReport& r) {
    Release(bytes, raw);
    inner(s, r);
  };
  item->enqueued = now;
  ++queued_per_client_[item->client];
  ++next_seq_;
  entry.item = std::move(item);
  entries_.insert(std::move(entry));
  ready_.Signal();
  return absl::OkStatus();
}

double RequestQueue::RunningBacklogLocked() const {
  if (running_.empty()) return 0;
  const double parallel = std::max(1, options_.parallel_units);
  const double until_s = absl::ToDoubleSeconds(busy_until_ - clock_->Now());
  return std::clamp(until_s, 0.0, running_s_ / parallel);
}

double RequestQueue::BacklogAheadLocked(const Entry& entry) const {
  double queued_s = 0;
  for (auto it = entries_.begin(); it != entries_.end() && *it < entry; ++it)
    queued_s += it->predicted_s;
  return RunningBacklogLocked() + queued_s / std::max(1, options_.parallel_units);
}

std::set<RequestQueue::Entry>::iterator RequestQueue::EraseLocked(std::set<Entry>::iterator it) {
  auto count = queued_per_client_.find(it->item->client);
  if (count != queued_per_client_.end() && --count->second == 0) queued_per_client_.erase(count);
  return entries_.erase(it);
}

void RequestQueue::DropDeadLocked(Dropped* dropped) {
  const absl::Time now = clock_->Now();
  for (auto it = entries_.begin(); it != entries_.end();) {
    WorkItem& item = *it->item;
    if (item.cancelled.load() || item.deadline <= now) {
      dropped->emplace_back(it->item, DeadStatus(item, now));
      it = EraseLocked(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::shared_ptr<WorkItem>> RequestQueue::Pop(size_t max_items, absl::Duration wait) {
  BatchBudget unbounded;
  unbounded.max_requests = max_items;
  unbounded.max_flops = std::numeric_limits<double>::infinity();
  unbounded.max_bytes = std::numeric_limits<uint64_t>::max();
  return PopBatch(unbounded, wait, absl::ZeroDuration());
}

bool RequestQueue::BudgetFullLocked(const BatchBudget& budget) const {
  size_t n = 0;
  double flops = 0;
  uint64_t bytes = 0;
  for (const Entry& e : entries_) {
    flops += e.item->flops();
    bytes += e.item->bytes;
    if (++n >= budget.max_requests || flops >= budget.max_flops || bytes >= budget.max_bytes)
      return true;
  }
  return false;
}

std::vector<std::shared_ptr<WorkItem>> RequestQueue::PopBatch(const BatchBudget& budget,
                                                              absl::Duration wait,
                                                              absl::Duration linger) {
  return PopBatch(budget, wait, [linger] { return linger; });
}

std::vector<std::shared_ptr<WorkItem>> RequestQueue::PopBatch(
    const BatchBudget& budget, absl::Duration wait,
    const std::function<absl::Duration()>& linger_for) {
  std::vector<std::shared_ptr<WorkItem>> out;
  Dropped dropped;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time give_up = clock_->Now() + wait;
    while (true) {
      DropDeadLocked(&dropped);
      if (!entries_.empty() || closed_) break;
      if (clock_->WaitWithDeadline(&ready_, &mu_, give_up)) break;
    }
    // Linger for more work while the batch is not full, bounded by the age of
    // the oldest queued item (both measured and waited out on the injected
    // clock).
    const absl::Duration linger =
        entries_.empty() || closed_ ? absl::ZeroDuration() : linger_for();
    if (!entries_.empty() && !closed_ && linger > absl::ZeroDuration()) {
      absl::Time oldest = absl::InfiniteFuture();
      for (const Entry& e : entries_) oldest = std::min(oldest, e.item->enqueued);
      const absl::Time linger_until = oldest + linger;
      while (!entries_.empty() && !closed_ && !BudgetFullLocked(budget)) {
        if (clock_->WaitWithDeadline(&ready_, &mu_, linger_until)) break;
        DropDeadLocked(&dropped);
      }
    }
    DropDeadLocked(&dropped);
    const absl::Time now = clock_->Now();
    double flops = 0;
    uint64_t bytes = 0;
    double predicted_s = 0;
    while (!entries_.empty() && out.size() < budget.max_requests) {
      auto it = entries_.begin();
      const WorkItem& item = *it->item;
      if (!out.empty() &&
          (flops + item.flops() > budget.max_flops || bytes + item.bytes > budget.max_bytes))
        break;
      flops += item.flops();
      bytes += item.bytes;
      it->item->report.queue_wait = now - it->item->enqueued;
      if (it->predicted_s > 0) {
        running_.emplace(it->item.get(), it->predicted_s);
        running_s_ += it->predicted_s;
        predicted_s += it->predicted_s;
      }
      out.push_back(it->item);
      EraseLocked(it);
    }
    if (predicted_s > 0)
      busy_until_ = std::max(busy_until_, now) +
                    absl::Seconds(predicted_s / std::max(1, options_.parallel_units));
    if (!out.empty()) {
      const double interval = absl::ToDoubleSeconds(now - last_pop_) / out.size();
      pop_interval_s_ = 0.9 * pop_interval_s_ + 0.1 * interval;
      last_pop_ = now;
    }
  }
  CompleteAll(dropped);
  return out;
}

void RequestQueue::Cancel(WorkItem* item) {
  Dropped dropped;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->item.get() == item) {
        dropped.emplace_back(it->item, DeadStatus(*item, clock_->Now()));
        EraseLocked(it);
        break;
      }
    }
  }
  CompleteAll(dropped);
}

void RequestQueue::Release(uint64_t bytes, const WorkItem* item) {
  absl::MutexLock lock(&mu_);
  inflight_bytes_ -= std::min(bytes, inflight_bytes_);
  auto it = running_.find(item);
  if (it == running_.end()) return;
  running_s_ -= it->second;
  running_.erase(it);
  if (running_.empty()) running_s_ = 0;  // no rounding residue once idle
}

void RequestQueue::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  ready_.SignalAll();
}

void RequestQueue::Abandon(const absl::Status& status) {
  Dropped dropped;
  {
    absl::MutexLock lock(&mu_);
    for (const Entry& e : entries_) dropped.emplace_back(e.item, status);
    entries_.clear();
    queued_per_client_.clear();
    ready_.SignalAll();
  }
  CompleteAll(dropped);
}

size_t RequestQueue::queued() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

uint64_t RequestQueue::inflight_bytes() const {
  absl::MutexLock lock(&mu_);
  return inflight_bytes_;
}

uint64_t RequestQueue::inflight_bytes_high_water() const {
  absl::MutexLock lock(&mu_);
  return inflight_high_water_;
}

absl::Duration RequestQueue::RetryHint() const {
  absl::MutexLock lock(&mu_);
  return RetryHintLocked();
}

absl::Duration RequestQueue::RetryHintLocked() const {
  // Time for a tenth of the queue to drain at the recent rate, within bounds.
  // While nothing is being taken (a long request holds the backend), the time
  // since the last pop is the better measure of the rate.
  const double since_pop = absl::ToDoubleSeconds(clock_->Now() - last_pop_);
  const double interval = std::max(pop_interval_s_, since_pop);
  const double s = interval * std::max<size_t>(1, entries_.size() / 10);
  return std::clamp(absl::Seconds(s), kMinRetryHint, kMaxRetryHint);
}

}  // namespace gemm
