#include "service/store/shared_memory_store.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "service/store/resident_store.h"

namespace gemm {

bool IsSameHostPeer(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "unix-abstract:")) return true;
  if (absl::StartsWith(peer, "ipv4:127.")) return true;
  // gRPC writes IPv6 peers with brackets, percent-encoded in some versions.
  for (absl::string_view loopback : {"ipv6:[::1]:", "ipv6:%5B::1%5D:", "ipv6:[::ffff:127.",
                                     "ipv6:%5B::ffff:127."}) {
    if (absl::StartsWith(peer, loopback)) return true;
  }
  return false;
}

absl::StatusOr<SharedMemoryStore::Registered> SharedMemoryStore::Register(
    const std::string& caller, uint32_t pid, int fd, uint64_t bytes, absl::string_view token) {
  if (options_.max_regions == 0)
    return absl::FailedPreconditionError(
        "shared memory is off on this server (--max_shared_memory_regions=0)");
  {
    // Refused before anything is opened where the limits already say no.
    absl::MutexLock lock(&mu_);
    if (regions_.size() >= options_.max_regions)
      return absl::ResourceExhaustedError(absl::StrCat(
          "the server holds ", regions_.size(), " shared-memory regions, its limit "
          "(max_shared_memory_regions); unregister one first"));
    if (bytes > options_.max_bytes - std::min(bytes_, options_.max_bytes))
      return absl::ResourceExhaustedError(absl::StrCat(
          "bytes: ", bytes, " more bytes of shared memory pass the limit of ",
          options_.max_bytes, " (max_shared_memory_bytes; ", bytes_, " registered)"));
  }
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> region =
      SharedMemoryRegion::Map(pid, fd, bytes, token, options_.proc_root);
  if (!region.ok()) return region.status();
  if (options_.pin) (*region)->set_pin(options_.pin((*region)->base(), (*region)->bytes()));
  absl::MutexLock lock(&mu_);
  // Checked again: other registrations may have come in while mapping.
  if (regions_.size() >= options_.max_regions ||
      bytes > options_.max_bytes - std::min(bytes_, options_.max_bytes))
    return absl::ResourceExhaustedError(
        "the shared-memory limits were reached meanwhile (max_shared_memory_regions, "
        "max_shared_memory_bytes)");
  std::string id;
  do {
    id = absl::StrFormat("%s%s%016x%016x", options_.instance_id,
                         options_.instance_id.empty() ? "" : "-",
                         absl::Uniform<uint64_t>(bitgen_), absl::Uniform<uint64_t>(bitgen_));
  } while (regions_.contains(id));
  regions_[id] = Entry{caller, *std::move(region)};
  bytes_ += bytes;
  return Registered{id, bytes};
}

absl::Status SharedMemoryStore::NotFound(absl::string_view region) const {
  const absl::string_view owner = HandleInstance(region);
  if (!options_.instance_id.empty() && !owner.empty() && owner != options_.instance_id)
    return absl::FailedPreconditionError(absl::StrCat(
        "region \"", region, "\" belongs to another server (instance ", owner,
        "; this is instance ", options_.instance_id, "): register the memory with this one"));
  return absl::NotFoundError(absl::StrCat(
      "no shared-memory region \"", region,
      "\" (never registered, unregistered, or its process has ended)"));
}

absl::Status SharedMemoryStore::Unregister(absl::string_view caller, absl::string_view region) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(region);
  if (it == regions_.end()) return NotFound(region);
  if (it->second.owner != caller)
    return absl::PermissionDeniedError("the shared-memory region was registered by another caller");
  bytes_ -= it->second.region->bytes();
  regions_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> SharedMemoryStore::Lookup(
    absl::string_view caller, absl::string_view region) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(region);
  if (it == regions_.end()) return NotFound(region);
  if (it->second.owner != caller)
    return absl::PermissionDeniedError("the shared-memory region was registered by another caller");
  return std::shared_ptr<const SharedMemoryRegion>(it->second.region);
}

int SharedMemoryStore::ReapEnded() {
  std::vector<std::shared_ptr<SharedMemoryRegion>> candidates;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, entry] : regions_) candidates.push_back(entry.region);
  }
  // /proc is read without the lock.
  std::vector<const SharedMemoryRegion*> ended;
  for (const auto& r : candidates)
    if (!r->OwnerAlive()) ended.push_back(r.get());
  if (ended.empty()) return 0;
  int reaped = 0;
  absl::MutexLock lock(&mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    const bool gone =
        std::find(ended.begin(), ended.end(), it->second.region.get()) != ended.end();
    if (!gone) {
      ++it;
      continue;
    }
    bytes_ -= it->second.region->bytes();
    regions_.erase(it++);
    ++reaped;
  }
  return reaped;
}

size_t SharedMemoryStore::regions() const {
  absl::MutexLock lock(&mu_);
  return regions_.size();
}

uint64_t SharedMemoryStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace gemm
