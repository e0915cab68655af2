#include "service/queue/request_queue.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "service/base/limits.h"

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

// Fair queueing's charge for an item without a prediction (no measured
// rates): its FLOPs and bytes at nominal rates, so that shares still follow
// the work the tenants send.
constexpr double kNominalFlopsPerS = 1e12;
constexpr double kNominalBytesPerS = 1e11;

}  // namespace

absl::Status AdmissionOptions::Validate() const {
  if (!(safety_factor > 0) || !std::isfinite(safety_factor))
    return absl::InvalidArgumentError(
        absl::StrCat("admission.safety_factor must be positive and finite, got ", safety_factor));
  return absl::OkStatus();
}

RequestQueue::RequestQueue(Options options, const Clock* clock)
    : options_(options), clock_(clock), tenants_config_(options.tenants), last_pop_(clock->Now()) {
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

std::pair<std::string, const TenantSpec*> RequestQueue::ResolveLocked(
    absl::string_view client) const {
  if (tenants_config_ == nullptr) return {"", nullptr};
  const TenantSpec& spec = tenants_config_->Resolve(client);
  return {spec.name, &spec};
}

std::string RequestQueue::TenantOf(absl::string_view client) const {
  absl::MutexLock lock(&mu_);
  return ResolveLocked(client).first;
}

double RequestQueue::WeightLocked(const std::string& name) const {
  if (tenants_config_ == nullptr) return 1;
  const TenantSpec* spec = tenants_config_->Find(name);
  return spec == nullptr ? 1 : spec->weight;
}

double RequestQueue::TokensLocked(const Tenant& tenant, const TenantSpec& spec,
                                  absl::Time now) const {
  const TenantLimits& limits = spec.limits;
  if (tenant.refilled == absl::InfinitePast()) return limits.flops_burst;  // starts full
  const double refill = limits.max_flops_per_s * absl::ToDoubleSeconds(now - tenant.refilled);
  return std::min(limits.flops_burst, tenant.tokens + std::max(0.0, refill));
}

absl::Status RequestQueue::AdmitTenantLocked(const WorkItem& item, const std::string& name,
                                             const TenantSpec& spec, absl::Time now,
                                             absl::Duration* retry_after) const {
  auto reject = [retry_after](absl::Status status, absl::Duration hint) {
    if (retry_after != nullptr) *retry_after = hint;
    return status;
  };
  const TenantLimits& limits = spec.limits;
  static const Tenant kFresh;
  auto found = tenants_.find(name);
  const Tenant& tenant = found == tenants_.end() ? kFresh : found->second;
  if (limits.max_requests_in_flight > 0 &&
      tenant.inflight_requests >= limits.max_requests_in_flight)
    return reject(WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                                "tenant ", name, " has ", tenant.inflight_requests,
                                " requests in flight, its max_requests_in_flight; retry later")),
                            "tenant.max_requests_in_flight"),
                  RetryHintLocked());
  if (limits.max_inflight_bytes > 0) {
    if (item.bytes > limits.max_inflight_bytes)
      return reject(WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                                  "the request holds ", item.bytes, " bytes, more than tenant ",
                                  name, "'s max_inflight_bytes of ", limits.max_inflight_bytes)),
                              "tenant.max_inflight_bytes"),
                    kDoNotRetry);
    if (tenant.inflight_bytes + item.bytes > limits.max_inflight_bytes)
      return reject(
          WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                        "tenant ", name, " holds ", tenant.inflight_bytes, " of its ",
                        limits.max_inflight_bytes, " max_inflight_bytes and the request needs ",
                        item.bytes, "; retry later")),
                    "tenant.max_inflight_bytes"),
          RetryHintLocked());
  }
  if (limits.max_flops_per_s > 0) {
    // A request larger than the bucket passes when the bucket is full and
    // leaves it in debt, so the sustained rate holds for every size.
    const double tokens = TokensLocked(tenant, spec, now);
    const double needed = std::min(item.flops(), limits.flops_burst);
    if (tokens < needed) {
      const double wait_s = (needed - tokens) / limits.max_flops_per_s;
      // Exact (rounded up to the microsecond): the bucket holds enough then.
      const absl::Duration wait =
          std::max(absl::Microseconds(1), absl::Microseconds(std::ceil(wait_s * 1e6)));
      return reject(
          WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                        "tenant ", name, " is at its max_flops_per_s of ",
                        limits.max_flops_per_s, " FLOP/s (burst ", limits.flops_burst,
                        " FLOPs): the request needs ", needed, " FLOPs of the bucket, which holds ",
                        std::max(0.0, tokens), "; retry in ", absl::FormatDuration(wait))),
                    "tenant.max_flops_per_s"),
          wait);
    }
  }
  return absl::OkStatus();
}

absl::Status RequestQueue::AdmitLocked(const WorkItem& item, const std::string& tenant,
                                       const TenantSpec* spec, const Entry& entry, absl::Time now,
                                       absl::Duration* retry_after) const {
  auto reject = [retry_after](absl::Status status, absl::Duration hint) {
    if (retry_after != nullptr) *retry_after = hint;
    return status;
  };
  if (closed_) return absl::UnavailableError("the server is shutting down");
  if (spec != nullptr) {
    if (absl::Status st = AdmitTenantLocked(item, tenant, *spec, now, retry_after); !st.ok())
      return st;
  }
  if (queued_ >= options_.max_queued_requests)
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
    const double ahead_s = factor * BacklogAheadLocked(tenant, entry);
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

RequestQueue::Entry RequestQueue::ProbeLocked(const WorkItem& item, const std::string& tenant,
                                              const Probe& probe) const {
  auto client = clients_.find(item.client);
  auto owner = tenants_.find(tenant);
  const uint64_t round =
      std::max(client == clients_.end() ? 0 : client->second.next_round,
               owner == tenants_.end() ? 0 : owner->second.served_round);
  Entry entry{item.priority, item.deadline, round, next_seq_, nullptr, probe.predicted_s};
  entry.cost_s = probe.cost_s;
  return entry;
}

RequestQueue::Probe RequestQueue::Predict(const WorkItem& item) const {
  const double run_s =
      options_.predict_run_time == nullptr
          ? 0.0
          : std::max(0.0, absl::ToDoubleSeconds(options_.predict_run_time(item)));
  Probe probe;
  probe.predicted_s = options_.admission.reject_predicted_late ? run_s : 0.0;
  probe.cost_s = run_s > 0 ? run_s
                           : item.flops() / kNominalFlopsPerS +
                                 static_cast<double>(item.bytes) / kNominalBytesPerS;
  return probe;
}

absl::Status RequestQueue::Precheck(const WorkItem& item, absl::Duration* retry_after) const {
  const absl::Time now = clock_->Now();
  if (item.deadline <= now)
    return absl::DeadlineExceededError("the deadline passed before the request was queued");
  const Probe probe = Predict(item);
  absl::MutexLock lock(&mu_);
  auto [tenant, spec] = ResolveLocked(item.client);
  return AdmitLocked(item, tenant, spec, ProbeLocked(item, tenant, probe), now, retry_after);
}

absl::Status RequestQueue::Push(std::shared_ptr<WorkItem> item, absl::Duration* retry_after) {
  const absl::Time now = clock_->Now();
  if (item->deadline <= now)
    return absl::DeadlineExceededError("the deadline passed before the request was queued");
  // Predicted before taking the lock: it walks the request's problems.
  const Probe probe = Predict(*item);
  absl::MutexLock lock(&mu_);
  auto [name, spec] = ResolveLocked(item->client);
  Entry entry = ProbeLocked(*item, name, probe);
  if (absl::Status st = AdmitLocked(*item, name, spec, entry, now, retry_after); !st.ok())
    return st;

  Tenant& tenant = tenants_[name];
  tenant.name = name;
  if (tenant.entries.empty()) tenant.vtime = std::max(tenant.vtime, virtual_time_);
  tenant.inflight_bytes += item->bytes;
  ++tenant.inflight_requests;
  if (spec != nullptr && spec->limits.max_flops_per_s > 0) {
    tenant.tokens = TokensLocked(tenant, *spec, now) - item->flops();
    tenant.refilled = now;
  }
  inflight_bytes_ += item->bytes;
  inflight_high_water_ = std::max(inflight_high_water_, inflight_bytes_);
  const uint64_t bytes = item->bytes;
  const WorkItem* raw = item.get();
  auto inner = std::move(item->done);
  item->done = [this, name = name, bytes, raw, inner = std::move(inner)](
                   const absl::Status& s, const ExecutionReport& r) {
    Release(name, bytes, raw);
    inner(s, r);
  };
  item->enqueued = now;
  item->stamps.queued = absl::Now();
  item->tenant = name;
  ClientQueue& client = clients_[item->client];
  ++client.queued;
  client.next_round = entry.round + 1;
  ++next_seq_;
  ++queued_;
  entry.item = std::move(item);
  tenant.entries.insert(std::move(entry));
  ready_.Signal();
  return absl::OkStatus();
}

void RequestQueue::SetTenants(std::shared_ptr<const TenantsConfig> tenants) {
  absl::MutexLock lock(&mu_);
  tenants_config_ = std::move(tenants);
}

double RequestQueue::RunningBacklogLocked() const {
  if (running_.empty()) return 0;
  const double parallel = std::max(1, options_.parallel_units);
  const double until_s = absl::ToDoubleSeconds(busy_until_ - clock_->Now());
  return std::clamp(until_s, 0.0, running_s_ / parallel);
}

double RequestQueue::BacklogAheadLocked(const std::string& tenant, const Entry& entry) const {
  double queued_s = 0;
  double own_cost_s = 0;  // the tenant's queued work ahead, as fair queueing charges it
  auto own = tenants_.find(tenant);
  if (own != tenants_.end()) {
    for (auto it = own->second.entries.begin(); it != own->second.entries.end() && *it < entry;
         ++it) {
      queued_s += it->predicted_s;
      own_cost_s += it->cost_s;
    }
  }
  // Another tenant's queued items run first while their virtual start is
  // not past this item's.
  const bool idle = own == tenants_.end() || own->second.entries.empty();
  const double own_vtime = own == tenants_.end() ? 0 : own->second.vtime;
  const double start =
      (idle ? std::max(own_vtime, virtual_time_) : own_vtime) + own_cost_s / WeightLocked(tenant);
  for (const auto& [name, other] : tenants_) {
    if (name == tenant) continue;
    const double weight = WeightLocked(name);
    double tag = other.vtime;
    for (const Entry& e : other.entries) {
      if (tag > start) break;
      queued_s += e.predicted_s;
      tag += e.cost_s / weight;
    }
  }
  return RunningBacklogLocked() + queued_s / std::max(1, options_.parallel_units);
}

std::set<RequestQueue::Entry>::iterator RequestQueue::EraseLocked(Tenant& tenant,
                                                                  std::set<Entry>::iterator it) {
  auto client = clients_.find(it->item->client);
  if (client != clients_.end() && --client->second.queued == 0) clients_.erase(client);
  --queued_;
  return tenant.entries.erase(it);
}

RequestQueue::Tenant* RequestQueue::NextLocked() {
  Tenant* next = nullptr;
  for (auto& [name, tenant] : tenants_) {
    if (tenant.entries.empty()) continue;
    if (next == nullptr || tenant.vtime < next->vtime ||
        (tenant.vtime == next->vtime && tenant.entries.begin()->seq < next->entries.begin()->seq))
      next = &tenant;
  }
  return next;
}

void RequestQueue::DropDeadLocked(Dropped* dropped) {
  const absl::Time now = clock_->Now();
  for (auto& [name, tenant] : tenants_) {
    for (auto it = tenant.entries.begin(); it != tenant.entries.end();) {
      WorkItem& item = *it->item;
      if (item.cancelled.load() || item.deadline <= now) {
        dropped->emplace_back(it->item, DeadStatus(item, now));
        it = EraseLocked(tenant, it);
      } else {
        ++it;
      }
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
  for (const auto& [name, tenant] : tenants_) {
    for (const Entry& e : tenant.entries) {
      flops += e.item->flops();
      bytes += e.item->bytes;
      if (++n >= budget.max_requests || flops >= budget.max_flops || bytes >= budget.max_bytes)
        return true;
    }
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
    const std::function<absl::Duration()>& linger_for, const std::function<bool()>& may_take) {
  std::vector<std::shared_ptr<WorkItem>> out;
  Dropped dropped;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time give_up = clock_->Now() + wait;
    while (true) {
      DropDeadLocked(&dropped);
      if (queued_ > 0 || closed_) break;
      if (clock_->WaitWithDeadline(&ready_, &mu_, give_up)) break;
    }
    // Linger for more work while the batch is not full, bounded by the age of
    // the oldest queued item (both measured and waited out on the injected
    // clock).
    const absl::Duration linger = queued_ == 0 || closed_ ? absl::ZeroDuration() : linger_for();
    if (queued_ > 0 && !closed_ && linger > absl::ZeroDuration()) {
      absl::Time oldest = absl::InfiniteFuture();
      for (const auto& [name, tenant] : tenants_)
        for (const Entry& e : tenant.entries) oldest = std::min(oldest, e.item->enqueued);
      const absl::Time linger_until = oldest + linger;
      while (queued_ > 0 && !closed_ && !BudgetFullLocked(budget)) {
        if (clock_->WaitWithDeadline(&ready_, &mu_, linger_until)) break;
        DropDeadLocked(&dropped);
      }
    }
    DropDeadLocked(&dropped);
    const absl::Time now = clock_->Now();
    double flops = 0;
    uint64_t bytes = 0;
    double predicted_s = 0;
    const bool taking = queued_ > 0 && (may_take == nullptr || may_take());
    while (taking && queued_ > 0 && out.size() < budget.max_requests) {
      Tenant* tenant = NextLocked();
      auto it = tenant->entries.begin();
      const WorkItem& item = *it->item;
      if (!out.empty() &&
          (flops + item.flops() > budget.max_flops || bytes + item.bytes > budget.max_bytes))
        break;
      virtual_time_ = tenant->vtime;
      tenant->vtime += it->cost_s / WeightLocked(tenant->name);
      flops += item.flops();
      bytes += item.bytes;
      it->item->report.queue_wait = now - it->item->enqueued;
      it->item->stamps.dispatched = absl::Now();
      tenant->served_round = std::max(tenant->served_round, it->round);
      if (it->predicted_s > 0) {
        running_.emplace(it->item.get(), it->predicted_s);
        running_s_ += it->predicted_s;
        predicted_s += it->predicted_s;
      }
      out.push_back(it->item);
      EraseLocked(*tenant, it);
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
    for (auto& [name, tenant] : tenants_) {
      auto it = std::find_if(tenant.entries.begin(), tenant.entries.end(),
                             [item](const Entry& e) { return e.item.get() == item; });
      if (it == tenant.entries.end()) continue;
      dropped.emplace_back(it->item, DeadStatus(*item, clock_->Now()));
      EraseLocked(tenant, it);
      break;
    }
  }
  CompleteAll(dropped);
}

void RequestQueue::Release(const std::string& tenant_name, uint64_t bytes, const WorkItem* item) {
  absl::MutexLock lock(&mu_);
  inflight_bytes_ -= std::min(bytes, inflight_bytes_);
  Tenant& tenant = tenants_[tenant_name];
  tenant.inflight_bytes -= std::min(bytes, tenant.inflight_bytes);
  if (tenant.inflight_requests > 0) --tenant.inflight_requests;
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
    for (auto& [name, tenant] : tenants_) {
      for (const Entry& e : tenant.entries) dropped.emplace_back(e.item, status);
      tenant.entries.clear();
    }
    queued_ = 0;
    clients_.clear();
    ready_.SignalAll();
  }
  CompleteAll(dropped);
}

size_t RequestQueue::queued() const {
  absl::MutexLock lock(&mu_);
  return queued_;
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
  const double s = interval * std::max<size_t>(1, queued_ / 10);
  return std::clamp(absl::Seconds(s), kMinRetryHint, kMaxRetryHint);
}

}  // namespace gemm
