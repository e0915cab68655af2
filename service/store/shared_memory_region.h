// One same-host client's memory mapped into the server: a memfd the client
// created (memfd_create with MFD_ALLOW_SEALING) and sealed against shrinking
// (F_SEAL_SHRINK), opened through /proc/PID/fd/FD.
//
// Why a sealed memfd: a mapping whose file shrinks under it raises SIGBUS on
// the next access, which would crash the server in the middle of another
// client's batch. A memfd sealed against shrinking can never lose pages, so
// every access inside the region is safe whatever its owner does; a client
// that changes the bytes while a request reads them gets undefined values
// in that request's results only.
#ifndef GEMM_SERVICE_STORE_SHARED_MEMORY_REGION_H_
#define GEMM_SERVICE_STORE_SHARED_MEMORY_REGION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gemm {

class SharedMemoryRegion {
 public:
  // Token lengths RegisterSharedMemory accepts.
  static constexpr size_t kMinTokenBytes = 16;
  static constexpr size_t kMaxTokenBytes = 64;

  // Opens `proc_root`/PID/fd/FD, checks that it is a memfd sealed against
  // shrinking, of exactly `bytes` bytes, that starts with `token`, and maps
  // it read/write. Errors name the request's field: FAILED_PRECONDITION
  // where the descriptor cannot be reached or is not a sealed memfd,
  // PERMISSION_DENIED where the server may not open it or the token
  // differs, INVALID_ARGUMENT for a size or token that does not fit.
  static absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> Map(uint32_t pid, int fd,
                                                                uint64_t bytes,
                                                                absl::string_view token,
                                                                const std::string& proc_root);
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  char* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  uint32_t pid() const { return pid_; }

  // Whether the process that registered the region still runs: its
  // /proc/PID/stat start time is the one seen at registration (a pid that
  // was reused by another process reads as ended).
  bool OwnerAlive() const;

  // Keeps `pin` (a GPU executor's page-locking of the mapping,
  // Executor::PinHostMemory) for the region's life; it is dropped before
  // the mapping goes. Called once, before the region is shared.
  void set_pin(std::shared_ptr<void> pin) { pin_ = std::move(pin); }
  // Whether the mapping is page-locked: DMA reads and writes it in place.
  bool pinned() const { return pin_ != nullptr; }
  // Whether bytes [p, p + n) lie in the mapping.
  bool Contains(const void* p, uint64_t n) const {
    const char* c = static_cast<const char*>(p);
    return c >= base_ && n <= bytes_ && static_cast<uint64_t>(c - base_) <= bytes_ - n;
  }

 private:
  SharedMemoryRegion(char* base, uint64_t bytes, uint32_t pid, std::string proc_root,
                     uint64_t start_time)
      : base_(base), bytes_(bytes), pid_(pid), proc_root_(std::move(proc_root)),
        start_time_(start_time) {}

  char* const base_;
  const uint64_t bytes_;
  const uint32_t pid_;
  const std::string proc_root_;
  const uint64_t start_time_;  // field 22 of /proc/PID/stat, in clock ticks
  std::shared_ptr<void> pin_;
};

// The start time of process `pid` (field 22 of `proc_root`/PID/stat), or
// NOT_FOUND when there is no such process.
absl::StatusOr<uint64_t> ProcessStartTime(const std::string& proc_root, uint32_t pid);

}  // namespace gemm

#endif  // GEMM_SERVICE_STORE_SHARED_MEMORY_REGION_H_
