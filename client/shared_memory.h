// gemm::SharedMemory: memory a client on the server's host shares with the
// server, so that requests name matrices in it (Matrix.shared) and have
// results written into it (GemmProblem.output) instead of sending bytes.
//
//   GEMM_ASSIGN_OR_RETURN(auto memory, gemm::SharedMemory::Create(bytes));
//   float* a = memory->At<float>(gemm::SharedMemory::kFirstOffset);  // fill A there
//   GEMM_ASSIGN_OR_RETURN(std::string region, client->RegisterSharedMemory(*memory));
//   *problem.mutable_a() = gemm::SharedMatrix(region, gemm::SharedMemory::kFirstOffset,
//                                             gemm::Layout::kRowMajor);
//
// The memory is a memfd sealed against shrinking and growing (so the
// server's mapping can never fault); its first kFirstOffset bytes hold a
// random token that proves to the server that the caller can read it. The
// server reaches it through /proc/PID/fd/FD: the client must run on the
// server's host in its PID namespace, as the same user (or the server with
// CAP_SYS_PTRACE), and connect over loopback or a Unix socket. Do not write
// a matrix while a request that reads it runs (its results are then
// undefined; nothing else is affected).
#ifndef GEMM_CLIENT_SHARED_MEMORY_H_
#define GEMM_CLIENT_SHARED_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/types.h"
#include "gemm/v1/gemm.pb.h"

namespace gemm {

class SharedMemory {
 public:
  // Where matrices may start: the token comes first.
  static constexpr uint64_t kFirstOffset = 64;

  // A region with `usable_bytes` bytes from kFirstOffset on, zeroed.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Create(uint64_t usable_bytes);
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  char* base() const { return base_; }
  // The whole region, token included.
  uint64_t bytes() const { return bytes_; }
  template <typename T>
  T* At(uint64_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

  // What RegisterSharedMemory sends for this region.
  v1::RegisterSharedMemoryRequest RegisterRequest(const std::string& label = "") const;

 private:
  SharedMemory(int fd, char* base, uint64_t bytes, std::string token)
      : fd_(fd), base_(base), bytes_(bytes), token_(std::move(token)) {}
  const int fd_;
  char* const base_;
  const uint64_t bytes_;
  const std::string token_;
};

// A Matrix message naming `offset` of a registered region, in `layout`.
v1::Matrix SharedMatrix(const std::string& region, uint64_t offset, Layout layout);
// A SharedMemoryRef for GemmProblem.output.
v1::SharedMemoryRef SharedRef(const std::string& region, uint64_t offset);

}  // namespace gemm

#endif  // GEMM_CLIENT_SHARED_MEMORY_H_
