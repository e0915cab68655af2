#include "service/resident_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gemm {
namespace {

absl::Status NotFound(absl::string_view handle) {
  return absl::NotFoundError(
      absl::StrCat("no resident matrix has handle \"", handle, "\" (never registered, or released)"));
}

absl::Status NotOwner() {
  return absl::PermissionDeniedError("the resident matrix was registered by another caller");
}

}  // namespace

struct ResidentStore::Budget {
  absl::Mutex mu;
  uint64_t held ABSL_GUARDED_BY(mu) = 0;

  // Reserves `bytes` if the total stays within `max`.
  bool TryReserve(uint64_t bytes, uint64_t max) {
    absl::MutexLock lock(&mu);
    if (bytes > max || held > max - bytes) return false;
    held += bytes;
    return true;
  }
  void Free(uint64_t bytes) {
    absl::MutexLock lock(&mu);
    held -= bytes;
  }
  uint64_t Held() {
    absl::MutexLock lock(&mu);
    return held;
  }
};

ResidentStore::ResidentStore(const Options& options, Allocator allocator)
    : options_(options), allocator_(std::move(allocator)), budget_(std::make_shared<Budget>()) {}

ResidentStore::~ResidentStore() = default;

absl::StatusOr<ResidentStore::Registration> ResidentStore::Register(absl::string_view owner,
                                                                    const MatrixRef& source) {
  const uint64_t bytes = source.bytes();
  if (!budget_->TryReserve(bytes, options_.max_bytes))
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_resident_bytes: ", bytes, " more bytes would pass the limit of ", options_.max_bytes,
        " (", budget_->Held(), " held); release matrices first"));
  // Allocation and the copy run outside the lock: on a GPU they take a while.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> made = allocator_(source);
  if (!made.ok()) {
    budget_->Free(bytes);
    return made.status();
  }
  // The budget is given back when the matrix itself is freed, which may be
  // after Release if a request still holds it.
  std::shared_ptr<ResidentMatrix> inner = std::move(*made);
  const ResidentMatrix* raw = inner.get();
  std::shared_ptr<const ResidentMatrix> matrix(
      raw, [inner = std::move(inner), budget = budget_, bytes](const ResidentMatrix*) mutable {
        inner.reset();
        budget->Free(bytes);
      });

  absl::MutexLock lock(&mu_);
  std::string handle;
  do {
    handle = absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(bitgen_),
                             absl::Uniform<uint64_t>(bitgen_));
  } while (entries_.contains(handle));
  entries_[handle] = Entry{std::string(owner), std::move(matrix)};
  return Registration{handle, bytes};
}

absl::Status ResidentStore::Release(absl::string_view owner, absl::string_view handle) {
  std::shared_ptr<const ResidentMatrix> dropped;  // freed after the lock is released
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end()) return NotFound(handle);
    if (it->second.owner != owner) return NotOwner();
    dropped = std::move(it->second.matrix);
    entries_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ResidentMatrix>> ResidentStore::Lookup(
    absl::string_view owner, absl::string_view handle) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end())
    return NotFound(handle);
  if (it->second.owner != owner) return NotOwner();
  return it->second.matrix;
}

uint64_t ResidentStore::bytes() const { return budget_->Held(); }

size_t ResidentStore::count() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace gemm
