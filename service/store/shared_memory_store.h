// SharedMemoryStore: the shared-memory regions same-host clients registered
// (RegisterSharedMemory), by region id.
//
// A region belongs to the caller identity that registered it (as resident
// handles do): another identity gets PERMISSION_DENIED, an unknown id
// NOT_FOUND, an id with another server's instance prefix FAILED_PRECONDITION.
// A region is unmapped when it is unregistered, when its client process has
// ended (ReapEnded, which the server calls about once a second), or when the
// store goes;
// requests under way hold it (Lookup's shared_ptr) until they end. Limits
// bound the regions and their bytes (address space of the server; the
// memory is the clients').
#ifndef GEMM_SERVICE_STORE_SHARED_MEMORY_STORE_H_
#define GEMM_SERVICE_STORE_SHARED_MEMORY_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/store/shared_memory_region.h"

namespace gemm {

// Whether a gRPC peer address ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000",
// "unix:/run/gemm.sock") is a client on this host: loopback or a Unix socket.
bool IsSameHostPeer(absl::string_view peer);

class SharedMemoryStore {
 public:
  struct Options {
    // Regions at once, all callers together; 0 turns shared memory off.
    uint32_t max_regions = 256;
    // Their bytes together.
    uint64_t max_bytes = uint64_t{1} << 40;  // 1 TiB of address space
    // 16 hex digits naming this server, or empty for bare 32-digit ids.
    std::string instance_id;
    // Where the processes are read from; tests may point elsewhere.
    std::string proc_root = "/proc";
    // Page-locks a new region's mapping for DMA (Executor::PinHostMemory);
    // null, or a null result: the region is used unpinned.
    std::function<std::shared_ptr<void>(void* base, uint64_t bytes)> pin;
  };

  // Regions still held by requests when the store goes stay mapped until
  // they are let go.
  explicit SharedMemoryStore(Options options) : options_(std::move(options)) {}

  struct Registered {
    std::string region;
    uint64_t bytes = 0;
  };
  // Maps the client's memfd (SharedMemoryRegion::Map) for `caller`.
  absl::StatusOr<Registered> Register(const std::string& caller, uint32_t pid, int fd,
                                      uint64_t bytes, absl::string_view token);
  // Forgets the region; requests under way keep it mapped until they end.
  absl::Status Unregister(absl::string_view caller, absl::string_view region);
  // The region, kept mapped while the result is held.
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> Lookup(absl::string_view caller,
                                                                   absl::string_view region) const;
  // Forgets every region whose process has ended; how many.
  int ReapEnded();

  size_t regions() const;
  uint64_t bytes() const;
  const Options& options() const { return options_; }

 private:
  struct Entry {
    std::string owner;
    std::shared_ptr<SharedMemoryRegion> region;
  };
  absl::Status NotFound(absl::string_view region) const;

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemm

#endif  // GEMM_SERVICE_STORE_SHARED_MEMORY_STORE_H_
