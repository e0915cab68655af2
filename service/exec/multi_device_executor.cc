#include "service/exec/multi_device_executor.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "service/store/resident_matrix.h"

namespace gemm {
namespace {

// Where an item runs because of its resident operands in device memory: the
// device holding most of their bytes, or -1 when it names none (matrices in
// host memory, such as transient uploads, are staged to any device).
// `foreign` tells whether some live on another device.
int ResidentDevice(const WorkItem& item, int devices, bool* foreign) {
  std::vector<uint64_t> bytes(devices, 0);
  for (const GemmProblemRef& p : item.problems) {
    for (const MatrixRef* m : {&p.a, &p.b, &p.c}) {
      const ResidentMatrix* r = m->resident;
      if (r == nullptr || r->device_data() == nullptr) continue;
      const int d = r->device();
      if (d < 0 || d >= devices) continue;
      bytes[d] += std::max<uint64_t>(r->bytes(), 1);
    }
  }
  int best = -1, holding = 0;
  for (int d = 0; d < devices; ++d) {
    if (bytes[d] == 0) continue;
    ++holding;
    if (best < 0 || bytes[d] > bytes[best]) best = d;
  }
  if (foreign != nullptr) *foreign = holding > 1;
  return best;
}

// Replaces each resident operand of `item` held on another device than `d`
// by a host copy, which the device's executor stages like inline bytes.
// NOTES: through host memory, on the dispatching thread: such requests are
// rare (a client's matrices placed on different GPUs) and this keeps them
// correct; peer copies would be faster.
absl::Status CopyForeignOperands(WorkItem* item, int d) {
  for (GemmProblemRef& p : item->problems) {
    for (MatrixRef* m : {&p.a, &p.b, &p.c}) {
      const ResidentMatrix* r = m->resident;
      if (r == nullptr || r->device_data() == nullptr || r->device() == d) continue;
      auto copy = std::make_shared<std::string>(r->bytes(), '\0');
      if (absl::Status st = r->Read(0, copy->data(), r->bytes()); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat("copying a resident matrix from GPU ",
                                                    r->device(), " to GPU ", d, ": ",
                                                    st.message()));
      }
      m->data = copy->data();
      m->resident = nullptr;
      item->host_copies.push_back(std::move(copy));
    }
  }
  return absl::OkStatus();
}

}  // namespace

MultiDeviceExecutor::MultiDeviceExecutor(std::vector<std::unique_ptr<Executor>> children,
                                         const Options& options)
    : options_(options), children_(std::move(children)) {}

absl::StatusOr<std::unique_ptr<MultiDeviceExecutor>> MultiDeviceExecutor::Create(
    std::vector<std::unique_ptr<Executor>> children, const Options& options) {
  if (children.empty()) return absl::InvalidArgumentError("children: at least one executor");
  if (!(options.link_bytes_per_second > 0))
    return absl::InvalidArgumentError("link_bytes_per_second must be positive");
  std::unique_ptr<MultiDeviceExecutor> ex(new MultiDeviceExecutor(std::move(children), options));
  BackendInfo& info = ex->info_;
  info = ex->children_.front()->info();
  info.devices.clear();
  for (size_t d = 0; d < ex->children_.size(); ++d) {
    const BackendInfo& child = ex->children_[d]->info();
    if (child.backend != info.backend)
      return absl::InvalidArgumentError(absl::StrCat(
          "children: device ", d, " is ", child.backend, ", device 0 is ", info.backend));
    info.devices.insert(info.devices.end(), child.devices.begin(), child.devices.end());
  }
  ex->outstanding_.assign(ex->children_.size(), 0.0);
  ex->resident_bytes_.assign(ex->children_.size(), 0);
  // Every slot first: a running thread reads the vector.
  for (size_t d = 0; d < ex->children_.size(); ++d)
    ex->hand_over_.push_back(std::make_unique<HandOver>());
  for (size_t d = 0; d < ex->children_.size(); ++d)
    ex->hand_over_[d]->thread =
        std::thread([raw = ex.get(), d] { raw->HandOverLoop(static_cast<int>(d)); });
  return ex;
}

MultiDeviceExecutor::~MultiDeviceExecutor() {
  for (auto& h : hand_over_) {
    absl::MutexLock lock(&h->mu);
    h->stopping = true;
  }
  for (auto& h : hand_over_) h->thread.join();
}

void MultiDeviceExecutor::HandOverLoop(int device) {
  HandOver& h = *hand_over_[device];
  for (;;) {
    Batch part;
    {
      absl::MutexLock lock(&h.mu);
      h.busy = false;
      auto ready = [&h]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(h.mu) {
        return !h.parts.empty() || h.stopping;
      };
      h.mu.Await(absl::Condition(&ready));
      if (h.parts.empty()) return;  // stopping, and nothing is left to hand over
      part = std::move(h.parts.front());
      h.parts.pop_front();
      h.busy = true;
    }
    // A device that went out of service after the part was queued for it
    // answers nothing more: its items are refused here, retryable.
    if (!children_[device]->healthy()) {
      Refuse(std::move(part), absl::UnavailableError(absl::StrCat(
                                  "GPU ", device, " is out of service after a fault; retry")));
      continue;
    }
    children_[device]->Execute(std::move(part));
  }
}

void MultiDeviceExecutor::Refuse(Batch part, const absl::Status& why) {
  for (auto& item : part.items) item->Complete(why);
  if (part.on_done) part.on_done();
}

bool MultiDeviceExecutor::healthy() const {
  for (const auto& c : children_)
    if (c->healthy()) return true;
  return false;
}

void MultiDeviceExecutor::SetHealthListener(HealthListener listener) {
  auto shared = std::make_shared<HealthListener>(std::move(listener));
  for (size_t d = 0; d < children_.size(); ++d) {
    children_[d]->SetHealthListener([shared, d](int, const absl::Status& why) {
      if (*shared) (*shared)(static_cast<int>(d), why);
    });
  }
}

void MultiDeviceExecutor::WaitHandedOver() {
  for (auto& h : hand_over_) {
    absl::MutexLock lock(&h->mu);
    auto idle = [&h]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(h->mu) {
      return h->parts.empty() && !h->busy;
    };
    h->mu.Await(absl::Condition(&idle));
  }
}

std::vector<PeakRate> MultiDeviceExecutor::peak_rates() const {
  std::vector<PeakRate> rates;
  for (size_t d = 0; d < children_.size(); ++d) {
    for (PeakRate r : children_[d]->peak_rates()) {
      r.method = absl::StrCat("device ", d, ": ", r.method);
      rates.push_back(std::move(r));
    }
  }
  return rates;
}

absl::Status MultiDeviceExecutor::RemeasurePeaks() {
  // One device at a time: the others keep serving meanwhile.
  std::vector<std::string> failed;
  for (size_t d = 0; d < children_.size(); ++d) {
    if (!children_[d]->healthy()) continue;
    if (absl::Status st = children_[d]->RemeasurePeaks(); !st.ok())
      failed.push_back(absl::StrCat("device ", d, ": ", st.message()));
  }
  if (!failed.empty())
    return absl::UnavailableError(absl::StrJoin(failed, "; "));
  return absl::OkStatus();
}

int MultiDeviceExecutor::max_concurrent_batches() const {
  int total = 0;
  for (const auto& c : children_) total += c->max_concurrent_batches();
  return total;
}

double MultiDeviceExecutor::Cost(const WorkItem& item, int d) const {
  const std::vector<PeakRate> peaks = children_[d]->peak_rates();
  double seconds = 0;
  for (const GemmProblemRef& p : item.problems) {
    double rate = RateOf(peaks, RateKind(p.shape));
    if (rate <= 0) rate = 1e12;  // no calibration: a neutral guess, same for every device
    uint64_t moved = p.d_bytes();
    for (const MatrixRef* m : {&p.a, &p.b, &p.c})
      if (m->data != nullptr && m->resident == nullptr) moved += m->bytes();
    seconds += p.shape.flops() / rate + static_cast<double>(moved) / options_.link_bytes_per_second;
  }
  return seconds;
}

absl::Duration MultiDeviceExecutor::PredictRunTime(const WorkItem& item) const {
  const int pinned = ResidentDevice(item, devices(), nullptr);
  if (pinned >= 0) return children_[pinned]->PredictRunTime(item);
  absl::Duration best = absl::ZeroDuration();
  for (const auto& child : children_) {
    const absl::Duration t = child->PredictRunTime(item);
    if (t > absl::ZeroDuration() && (best == absl::ZeroDuration() || t < best)) best = t;
  }
  return best;
}

Fp8Support MultiDeviceExecutor::fp8_support() const {
  Fp8Support all{true, true, true, true};
  for (const auto& c : children_) all = all.And(c->fp8_support());
  return all;
}

bool MultiDeviceExecutor::supports_grouped() const {
  for (const auto& c : children_)
    if (!c->supports_grouped()) return false;
  return true;
}

int MultiDeviceExecutor::parallel_units() const {
  int total = 0;
  for (const auto& c : children_) total += c->parallel_units();
  return total;
}

int MultiDeviceExecutor::LeastLoaded() const {
  return static_cast<int>(std::min_element(outstanding_.begin(), outstanding_.end()) -
                          outstanding_.begin());
}

std::vector<double> MultiDeviceExecutor::outstanding_seconds() const {
  absl::MutexLock lock(&mu_);
  return outstanding_;
}

void MultiDeviceExecutor::Execute(Batch batch) {
  const int n = devices();
  std::vector<bool> up(n);
  int healthy_devices = 0;
  for (int d = 0; d < n; ++d) healthy_devices += (up[d] = children_[d]->healthy());
  if (healthy_devices == 0) {
    Refuse(std::move(batch),
           absl::UnavailableError("every GPU is out of service after a fault; retry elsewhere"));
    return;
  }
  // Requests pinned by resident operands go to their device (the one holding
  // most of their bytes, the rest copied through the host); the others stay
  // together (so their strided launches stay whole) on the least loaded one.
  std::vector<std::vector<std::shared_ptr<WorkItem>>> items(n);
  std::vector<std::shared_ptr<WorkItem>> free_items;
  for (auto& item : batch.items) {
    bool foreign = false;
    const int d = ResidentDevice(*item, n, &foreign);
    if (d < 0) {
      free_items.push_back(item);
      continue;
    }
    if (foreign) {
      if (absl::Status st = CopyForeignOperands(item.get(), d); !st.ok()) {
        item->Complete(st);
        continue;
      }
    }
    if (!up[d]) {
      // Its operands live in the memory of a device that faulted: gone.
      item->Complete(absl::UnavailableError(absl::StrCat(
          "GPU ", d, " holding this request's resident operands is out of service after a "
          "fault; register them again and retry")));
      continue;
    }
    items[d].push_back(item);
  }
  std::vector<double> cost(n, 0.0);
  {
    absl::MutexLock lock(&mu_);
    if (!free_items.empty()) {
      // Least predicted finish time, counting what this batch itself adds.
      int best = -1;
      double best_finish = 0;
      for (int d = 0; d < n; ++d) {
        if (!up[d]) continue;
        double pinned = 0, mine = 0;
        for (const auto& it : items[d]) pinned += Cost(*it, d);
        for (const auto& it : free_items) mine += Cost(*it, d);
        const double finish = outstanding_[d] + pinned + mine;
        if (best < 0 || finish < best_finish) {
          best = d;
          best_finish = finish;
        }
      }
      items[best].insert(items[best].end(), free_items.begin(), free_items.end());
    }
    for (int d = 0; d < n; ++d) {
      for (const auto& it : items[d]) cost[d] += Cost(*it, d);
      outstanding_[d] += cost[d];
    }
  }

  int busy_devices = 0;
  for (int d = 0; d < n; ++d) busy_devices += !items[d].empty();
  if (busy_devices == 0) {
    if (batch.on_done) batch.on_done();
    return;
  }
  // The batch is done when every device's part is.
  auto remaining = std::make_shared<std::atomic<int>>(busy_devices);
  auto on_done = std::make_shared<std::function<void()>>(std::move(batch.on_done));
  // Each launch group splits by device: identical problems of requests on
  // two devices make a strided launch on each (a lone member a single one).
  std::map<const GemmProblemRef*, int> device_of;
  for (int d = 0; d < n; ++d)
    for (const auto& it : items[d]) {
      it->report.device = d;
      for (const GemmProblemRef& p : it->problems) device_of[&p] = d;
    }
  std::vector<Batch> parts(n);
  for (const LaunchGroup& g : batch.launches) {
    std::vector<LaunchGroup> per(n);
    for (const GemmProblemRef* p : g.problems) {
      const auto it = device_of.find(p);
      if (it != device_of.end()) per[it->second].problems.push_back(p);  // else refused
    }
    for (int d = 0; d < n; ++d) {
      if (per[d].problems.empty()) continue;
      per[d].kind = per[d].problems.size() > 1 ? g.kind : LaunchGroup::Kind::kSingle;
      per[d].deterministic = g.deterministic;
      parts[d].launches.push_back(std::move(per[d]));
    }
  }
  for (int d = 0; d < n; ++d) {
    if (items[d].empty()) continue;
    Batch part = std::move(parts[d]);
    part.items = std::move(items[d]);
    part.on_done = [this, d, c = cost[d], remaining, on_done] {
      {
        absl::MutexLock lock(&mu_);
        outstanding_[d] = std::max(0.0, outstanding_[d] - c);
      }
      if (remaining->fetch_sub(1) == 1 && *on_done) (*on_done)();
    };
    HandOver& h = *hand_over_[d];
    absl::MutexLock lock(&h.mu);
    h.parts.push_back(std::move(part));
  }
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> MultiDeviceExecutor::PlaceResident(
    uint64_t bytes,
    const std::function<absl::StatusOr<std::shared_ptr<ResidentMatrix>>(const Executor&)>& make)
    const {
  int d;
  {
    absl::MutexLock lock(&mu_);
    d = -1;  // the healthy device holding the fewest resident bytes
    for (int i = 0; i < devices(); ++i)
      if (children_[i]->healthy() && (d < 0 || resident_bytes_[i] < resident_bytes_[d])) d = i;
    if (d < 0)
      return absl::UnavailableError("every GPU is out of service after a fault; retry elsewhere");
    resident_bytes_[d] += bytes;
  }
  auto m = make(*children_[d]);
  absl::MutexLock lock(&mu_);
  if (!m.ok()) {
    resident_bytes_[d] -= bytes;
    return m.status();
  }
  (*m)->set_device(d);
  // Count it off its device when the last holder lets go.
  ResidentMatrix* raw = m->get();
  auto* self = this;
  return std::shared_ptr<ResidentMatrix>(raw, [self, d, bytes, keep = *m](ResidentMatrix*) mutable {
    {
      absl::MutexLock lock(&self->mu_);
      self->resident_bytes_[d] -= std::min(bytes, self->resident_bytes_[d]);
    }
    keep.reset();
  });
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> MultiDeviceExecutor::CreateResident(
    const MatrixRef& source) const {
  return PlaceResident(source.bytes(),
                       [&source](const Executor& e) { return e.CreateResident(source); });
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> MultiDeviceExecutor::AllocateResident(
    const MatrixRef& shape) const {
  return PlaceResident(shape.bytes(),
                       [&shape](const Executor& e) { return e.AllocateResident(shape); });
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> MultiDeviceExecutor::QuantizeResident(
    const MatrixRef& source, const Fp8Quantization& q) const {
  return PlaceResident(QuantizedBytes(source, q), [&source, &q](const Executor& e) {
    return e.QuantizeResident(source, q);
  });
}

std::shared_ptr<void> MultiDeviceExecutor::PinHostMemory(void* base, uint64_t bytes) const {
  return children_.empty() ? nullptr : children_.front()->PinHostMemory(base, bytes);
}

}  // namespace gemm
