#include "service/store/resident_store.h"

#include "absl/container/flat_hash_set.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "service/base/limits.h"

namespace gemm {
namespace {

bool IsHex(absl::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

absl::string_view HandleInstance(absl::string_view handle) {
  // "<instance>-<32 hex digits>", the instance 16 hex digits.
  if (handle.size() != 16 + 1 + 32 || handle[16] != '-') return {};
  if (!IsHex(handle.substr(0, 16)) || !IsHex(handle.substr(17))) return {};
  return handle.substr(0, 16);
}

namespace {

absl::Status NotOwner() {
  return absl::PermissionDeniedError("the resident matrix was registered by another caller");
}

}  // namespace

struct ResidentStore::Budget {
  absl::Mutex mu;
  uint64_t held ABSL_GUARDED_BY(mu) = 0;
  // Bytes held per tenant (only with tenants).
  absl::flat_hash_map<std::string, uint64_t> by_tenant ABSL_GUARDED_BY(mu);

  enum class Outcome { kReserved, kOverServer, kOverTenant };
  // Reserves `bytes` for `tenant` if the total stays within `max` and the
  // tenant's within `tenant_max` (0: unlimited); with `reserve` false only
  // says whether it would.
  Outcome TryReserve(uint64_t bytes, uint64_t max, const std::string& tenant,
                     uint64_t tenant_max, bool reserve = true) {
    absl::MutexLock lock(&mu);
    if (tenant_max > 0) {
      const uint64_t mine = by_tenant.contains(tenant) ? by_tenant[tenant] : 0;
      if (bytes > tenant_max || mine > tenant_max - bytes) return Outcome::kOverTenant;
    }
    if (bytes > max || held > max - bytes) return Outcome::kOverServer;
    if (!reserve) return Outcome::kReserved;
    held += bytes;
    if (!tenant.empty()) by_tenant[tenant] += bytes;
    return Outcome::kReserved;
  }
  // Adds `bytes` whatever the limits: a quantized upload's new matrix,
  // counted just before its larger reservation is freed.
  void Add(uint64_t bytes, const std::string& tenant) {
    absl::MutexLock lock(&mu);
    held += bytes;
    if (!tenant.empty()) by_tenant[tenant] += bytes;
  }
  void Free(uint64_t bytes, const std::string& tenant) {
    absl::MutexLock lock(&mu);
    held -= bytes;
    if (tenant.empty()) return;
    auto it = by_tenant.find(tenant);
    if ((it->second -= bytes) == 0) by_tenant.erase(it);
  }
  uint64_t Held() {
    absl::MutexLock lock(&mu);
    return held;
  }
  uint64_t HeldBy(absl::string_view tenant) {
    absl::MutexLock lock(&mu);
    auto it = by_tenant.find(tenant);
    return it == by_tenant.end() ? 0 : it->second;
  }
};

ResidentStore::ResidentStore(const Options& options, Allocator allocator,
                             Allocator upload_allocator, const Clock* clock,
                             Quantizer quantizer)
    : options_(options),
      allocator_(std::move(allocator)),
      upload_allocator_(std::move(upload_allocator)),
      clock_(clock),
      quantizer_(std::move(quantizer)),
      budget_(std::make_shared<Budget>()) {}

ResidentStore::~ResidentStore() = default;

absl::Status ResidentStore::NotFound(absl::string_view handle) const {
  const absl::string_view owner = HandleInstance(handle);
  // A handle another replica issued reads differently from a released one:
  // the caller sent it to the wrong server (or the one that issued it is
  // gone), and retrying here never helps.
  if (!options_.instance_id.empty() && !owner.empty() && owner != options_.instance_id)
    return absl::FailedPreconditionError(absl::StrCat(
        "handle \"", handle, "\" belongs to another server (instance ", owner,
        "; this is instance ", options_.instance_id,
        "): send the calls that name it to the replica that issued it"));
  return absl::NotFoundError(absl::StrCat("no resident matrix has handle \"", handle,
                                          "\" (never registered, or released)"));
}

void ResidentStore::SetTenants(std::shared_ptr<const TenantsConfig> tenants) {
  absl::MutexLock lock(&mu_);
  tenants_ = std::move(tenants);
}

uint64_t ResidentStore::tenant_bytes(absl::string_view tenant) const {
  return budget_->HeldBy(tenant);
}

absl::StatusOr<std::string> ResidentStore::Reserve(absl::string_view owner, uint64_t bytes,
                                                   bool reserve) const {
  std::string tenant;
  uint64_t tenant_max = 0;
  {
    absl::MutexLock lock(&mu_);
    if (tenants_ != nullptr) {
      const TenantSpec& spec = tenants_->Resolve(owner);
      tenant = spec.name;
      tenant_max = spec.limits.max_resident_bytes;
    }
  }
  switch (budget_->TryReserve(bytes, options_.max_bytes, tenant, tenant_max, reserve)) {
    case Budget::Outcome::kReserved:
      return tenant;
    case Budget::Outcome::kOverTenant:
      return WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                           "tenant ", tenant, ": max_resident_bytes: ", bytes,
                           " more bytes would pass the tenant's limit of ", tenant_max, " (",
                           budget_->HeldBy(tenant), " held); release matrices first")),
                       "tenant.max_resident_bytes");
    case Budget::Outcome::kOverServer:
      break;
  }
  return WithLimit(absl::ResourceExhaustedError(absl::StrCat(
                       "max_resident_bytes: ", bytes, " more bytes would pass the limit of ",
                       options_.max_bytes, " (", budget_->Held(),
                       " held); release matrices first")),
                   "max_resident_bytes");
}

absl::Status ResidentStore::CheckRoom(absl::string_view owner, uint64_t bytes) const {
  return Reserve(owner, bytes, /*reserve=*/false).status();
}

absl::StatusOr<std::shared_ptr<const ResidentMatrix>> ResidentStore::Account(
    std::shared_ptr<ResidentMatrix> made, uint64_t bytes, const std::string& tenant) {
  // The budget is given back when the matrix itself is freed, which may be
  // after Release if a request still holds it.
  const ResidentMatrix* raw = made.get();
  return std::shared_ptr<const ResidentMatrix>(
      raw, [inner = std::move(made), budget = budget_, bytes,
            tenant](const ResidentMatrix*) mutable {
        inner.reset();
        budget->Free(bytes, tenant);
      });
}

ResidentStore::Registration ResidentStore::Insert(Entry entry, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  std::string handle;
  do {
    handle = absl::StrFormat("%s%s%016x%016x", options_.instance_id,
                             options_.instance_id.empty() ? "" : "-",
                             absl::Uniform<uint64_t>(bitgen_), absl::Uniform<uint64_t>(bitgen_));
  } while (entries_.contains(handle));
  entry.last_used = clock_->Now();
  entries_[handle] = std::move(entry);
  return Registration{handle, bytes};
}

absl::StatusOr<ResidentStore::Registration> ResidentStore::Register(absl::string_view owner,
                                                                    const MatrixRef& source) {
  return Register(owner, source, allocator_, source.bytes());
}

absl::StatusOr<ResidentStore::Registration> ResidentStore::RegisterQuantized(
    absl::string_view owner, const MatrixRef& source, const Fp8Quantization& q) {
  return Register(
      owner, source, [this, &q](const MatrixRef& src) { return quantizer_(src, q); },
      QuantizedBytes(source, q));
}

absl::StatusOr<ResidentStore::Registration> ResidentStore::Register(absl::string_view owner,
                                                                    const MatrixRef& source,
                                                                    const Allocator& make,
                                                                    uint64_t bytes) {
  absl::StatusOr<std::string> tenant = Reserve(owner, bytes);
  if (!tenant.ok()) return tenant.status();
  // Allocation and the copy run outside the lock: on a GPU they take a while.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> made = make(source);
  if (!made.ok()) {
    budget_->Free(bytes, *tenant);
    return made.status();
  }
  Entry entry;
  entry.owner = std::string(owner);
  entry.tenant = *tenant;
  entry.matrix = *Account(std::move(*made), bytes, *tenant);
  return Insert(std::move(entry), bytes);
}

absl::StatusOr<ResidentStore::Registration> ResidentStore::BeginUpload(
    absl::string_view owner, const MatrixRef& shape, bool transient,
    std::optional<Fp8Quantization> quantize) {
  const uint64_t bytes =
      quantize ? std::max(shape.bytes(), QuantizedBytes(shape, *quantize)) : shape.bytes();
  absl::StatusOr<std::string> tenant = Reserve(owner, bytes);
  if (!tenant.ok()) return tenant.status();
  // A transient upload feeds one request: host memory takes chunks fastest
  // (plain parallel copies, no device synchronization per chunk; measured in
  // bench/BASELINES.md, Transport) and the request's staging copies it once. A
  // kept one goes where the executor keeps resident matrices (device memory
  // on a GPU), read in place by every request that names it.
  // A quantized upload lands in host memory: the quantization reads it there.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> made =
      transient || quantize ? MakeHostResidentUninitialized(shape) : upload_allocator_(shape);
  if (!made.ok()) {
    budget_->Free(bytes, *tenant);
    return made.status();
  }
  Entry entry;
  entry.owner = std::string(owner);
  entry.tenant = *tenant;
  entry.transient = transient;
  entry.upload = std::make_unique<Upload>();
  entry.upload->writable = *made;
  entry.upload->quantize = quantize;
  entry.matrix = *Account(std::move(*made), bytes, *tenant);
  return Insert(std::move(entry), bytes);
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> ResidentStore::ClaimUpload(
    absl::string_view owner, absl::string_view handle, uint64_t offset, uint64_t size) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return NotFound(handle);
  Entry& e = it->second;
  if (e.owner != owner) return NotOwner();
  if (e.upload == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(
        "handle: \"", handle, "\" is not an unfinished upload (all its bytes have arrived, or it "
        "was registered whole)"));
  const uint64_t total = e.matrix->bytes();
  if (offset >= total || size > total - offset)
    return absl::InvalidArgumentError(absl::StrCat("offset: bytes [", offset, ", ", offset + size,
                                                   ") run past the matrix's ", total, " bytes"));
  if (size == 0) return absl::InvalidArgumentError("data: a chunk must carry at least one byte");
  std::map<uint64_t, uint64_t>& claimed = e.upload->claimed;
  // The first range starting after `offset`, and the one before it.
  auto next = claimed.upper_bound(offset);
  if ((next != claimed.end() && next->first < offset + size) ||
      (next != claimed.begin() && std::prev(next)->second > offset)) {
    const auto& clash = (next != claimed.begin() && std::prev(next)->second > offset)
                            ? *std::prev(next)
                            : *next;
    return absl::InvalidArgumentError(
        absl::StrCat("offset: bytes [", offset, ", ", offset + size, ") overlap bytes [",
                     clash.first, ", ", clash.second, ") already received (duplicate chunk)"));
  }
  claimed.emplace(offset, offset + size);
  e.last_used = clock_->Now();
  return e.upload->writable;
}

absl::Status ResidentStore::FinishUploadRange(absl::string_view handle, uint64_t offset,
                                              uint64_t size, bool written) {
  std::shared_ptr<ResidentMatrix> raw;  // a complete upload to quantize
  Fp8Quantization quantize;
  std::vector<UploadWaiter> complete;  // run once the lock is released
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end() || it->second.upload == nullptr)
      return absl::OkStatus();  // released meanwhile
    Upload& up = *it->second.upload;
    if (!written) {
      up.claimed.erase(offset);
      return absl::OkStatus();
    }
    up.written += size;
    it->second.last_used = clock_->Now();
    if (up.written != it->second.matrix->bytes()) return absl::OkStatus();
    if (!up.quantize) {
      complete = TakeWaiters(it->second);
      it->second.upload.reset();
    } else {
      // Every byte is claimed, so no chunk writes it any more; the entry
      // stays an unfinished upload (Lookup refuses it) until it is quantized.
      raw = up.writable;
      quantize = *up.quantize;
    }
  }
  if (raw == nullptr) {
    RunWaiters({}, std::move(complete), absl::OkStatus());
    return absl::OkStatus();
  }
  // Outside the lock: quantizing a large matrix takes a while.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> made = quantizer_(raw->view(), quantize);
  raw.reset();
  Dropped dropped;  // freed after the lock
  absl::Status outcome;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end() || it->second.upload == nullptr) return made.status();
    dropped.push_back(std::move(it->second.matrix));
    complete = TakeWaiters(it->second);
    if (!made.ok()) {
      entries_.erase(it);
      outcome = absl::Status(made.status().code(),
                             absl::StrCat(made.status().message(), " (the upload is released)"));
    } else {
      const uint64_t bytes = (*made)->held_bytes();
      budget_->Add(bytes, it->second.tenant);
      it->second.matrix = *Account(std::move(*made), bytes, it->second.tenant);
      it->second.upload.reset();
    }
  }
  RunWaiters(std::move(dropped), std::move(complete), outcome);
  return outcome;
}

std::vector<ResidentStore::UploadWaiter> ResidentStore::TakeWaiters(Entry& entry) {
  std::vector<UploadWaiter> out;
  if (entry.upload == nullptr) return out;
  for (auto& [ticket, done] : entry.upload->waiters) out.push_back(std::move(done));
  entry.upload->waiters.clear();
  return out;
}

void ResidentStore::RunWaiters(Dropped dropped, std::vector<UploadWaiter> waiters,
                               const absl::Status& status) {
  dropped.clear();
  for (UploadWaiter& done : waiters) done(status);
}

bool ResidentStore::UploadPending(absl::string_view owner, absl::string_view handle) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  return it != entries_.end() && it->second.owner == owner && it->second.upload != nullptr;
}

uint64_t ResidentStore::WhenUploaded(absl::string_view owner, absl::string_view handle,
                                     UploadWaiter done) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end() || it->second.owner != owner || it->second.upload == nullptr)
    return 0;
  const uint64_t ticket = next_ticket_++;
  it->second.upload->waiters.emplace(ticket, std::move(done));
  return ticket;
}

void ResidentStore::CancelWait(absl::string_view handle, uint64_t ticket) {
  UploadWaiter forgotten;  // destroyed after the lock: it may hold the last reference to a call
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end() || it->second.upload == nullptr) return;
  auto w = it->second.upload->waiters.find(ticket);
  if (w == it->second.upload->waiters.end()) return;
  forgotten = std::move(w->second);
  it->second.upload->waiters.erase(w);
}

void ResidentStore::AbandonUpload(absl::string_view owner, absl::string_view handle,
                                  const absl::Status& why) {
  Dropped dropped;  // freed after the lock
  std::vector<UploadWaiter> waiters;
  uint64_t written = 0, total = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end() || it->second.owner != owner || it->second.upload == nullptr) return;
    written = it->second.upload->written;
    total = it->second.matrix->bytes();
    waiters = TakeWaiters(it->second);
    dropped.push_back(std::move(it->second.matrix));
    entries_.erase(it);
  }
  RunWaiters(std::move(dropped), std::move(waiters),
             absl::AbortedError(absl::StrCat("the upload of \"", handle, "\" was abandoned after ",
                                             written, " of ", total,
                                             " bytes: its Transfer.Upload stream ended (",
                                             why.message(), "); it is released")));
}

absl::StatusOr<ResidentStore::Registration> ResidentStore::Adopt(
    absl::string_view owner, std::shared_ptr<ResidentMatrix> matrix, bool transient) {
  const uint64_t bytes = matrix->held_bytes();
  absl::StatusOr<std::string> tenant = Reserve(owner, bytes);
  if (!tenant.ok()) return tenant.status();
  Entry entry;
  entry.owner = std::string(owner);
  entry.tenant = *tenant;
  entry.transient = transient;
  entry.matrix = *Account(std::move(matrix), bytes, *tenant);
  return Insert(std::move(entry), bytes);
}

size_t ResidentStore::ExpireIdle() {
  Dropped dropped;  // freed after the lock
  std::vector<std::pair<std::string, std::vector<UploadWaiter>>> waiting;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time cutoff = clock_->Now() - options_.idle_timeout;
    // An owner whose upload is still receiving chunks is preparing a
    // request: its finished transient operands wait for it (a small operand
    // uploaded beside a large one otherwise expires while the large one is
    // still on the wire over a slow link).
    absl::flat_hash_set<std::string> uploading;
    for (const auto& [handle, e] : entries_)
      if (e.upload != nullptr && e.last_used > cutoff) uploading.insert(e.owner);
    for (auto it = entries_.begin(); it != entries_.end();) {
      const Entry& e = it->second;
      const bool waited_for = e.upload == nullptr && uploading.contains(e.owner);
      if ((e.transient || e.upload != nullptr) && e.last_used <= cutoff && !waited_for) {
        if (e.upload != nullptr && !e.upload->waiters.empty())
          waiting.emplace_back(it->first, TakeWaiters(it->second));
        dropped.push_back(e.matrix);
        entries_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  const size_t expired = dropped.size();
  // The first RunWaiters frees every expired matrix, before any waiter runs.
  for (auto& [handle, waiters] : waiting)
    RunWaiters(std::exchange(dropped, {}), std::move(waiters),
               absl::AbortedError(absl::StrCat(
                   "the upload of \"", handle, "\" was abandoned: no chunk arrived for ",
                   absl::FormatDuration(options_.idle_timeout),
                   " (the server's idle timeout); it is released")));
  return expired;
}

absl::Status ResidentStore::Release(absl::string_view owner, absl::string_view handle) {
  Dropped dropped;  // freed after the lock
  std::vector<UploadWaiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end()) return NotFound(handle);
    if (it->second.owner != owner) return NotOwner();
    waiters = TakeWaiters(it->second);
    dropped.push_back(std::move(it->second.matrix));
    entries_.erase(it);
  }
  RunWaiters(std::move(dropped), std::move(waiters),
             absl::AbortedError(absl::StrCat("the upload of \"", handle,
                                             "\" was released before all its bytes arrived")));
  return absl::OkStatus();
}

absl::StatusOr<bool> ResidentStore::CountDownloaded(absl::string_view owner,
                                                    absl::string_view handle, uint64_t bytes) {
  std::shared_ptr<const ResidentMatrix> dropped;  // freed after the lock is released
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end()) return NotFound(handle);
    Entry& e = it->second;
    if (e.owner != owner) return NotOwner();
    e.downloaded += bytes;
    e.last_used = clock_->Now();
    if (e.upload != nullptr || e.downloaded < e.matrix->bytes()) return false;
    dropped = std::move(e.matrix);
    entries_.erase(it);
  }
  return true;
}

absl::StatusOr<std::shared_ptr<const ResidentMatrix>> ResidentStore::Lookup(
    absl::string_view owner, absl::string_view handle) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end())
    return NotFound(handle);
  const Entry& e = it->second;
  if (e.owner != owner) return NotOwner();
  if (e.upload != nullptr)
    return absl::FailedPreconditionError(absl::StrCat(
        "the upload of \"", handle, "\" is unfinished: ", e.upload->written, " of ",
        e.matrix->bytes(), " bytes have arrived"));
  e.last_used = clock_->Now();
  return e.matrix;
}

uint64_t ResidentStore::bytes() const { return budget_->Held(); }

size_t ResidentStore::count() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

size_t ResidentStore::transient_count() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [handle, e] : entries_) n += e.transient || e.upload != nullptr ? 1 : 0;
  return n;
}

size_t ResidentStore::upload_waiters() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [handle, e] : entries_)
    if (e.upload != nullptr) n += e.upload->waiters.size();
  return n;
}

}  // namespace gemm
