#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_enums.h"

namespace gemm {

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Create(uint64_t usable_bytes) {
  if (usable_bytes == 0) return absl::InvalidArgumentError("usable_bytes: must be at least 1");
  const uint64_t bytes = kFirstOffset + usable_bytes;
  const int fd = memfd_create("gemm-shared-memory", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  auto fail = [fd](absl::string_view what) {
    const int e = errno;
    close(fd);
    return absl::InternalError(absl::StrCat(what, ": ", std::strerror(e)));
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate");
  // Never shrinks (the server's mapping cannot fault) nor grows (the size
  // registered stays the size).
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return fail("fcntl F_ADD_SEALS");
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail("mmap");
  std::random_device random;
  std::string token(32, '\0');
  for (char& c : token) c = static_cast<char>(random());
  std::memcpy(base, token.data(), token.size());
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(fd, static_cast<char*>(base), bytes, std::move(token)));
}

SharedMemory::~SharedMemory() {
  munmap(base_, bytes_);
  close(fd_);
}

v1::RegisterSharedMemoryRequest SharedMemory::RegisterRequest(const std::string& label) const {
  v1::RegisterSharedMemoryRequest r;
  r.set_pid(static_cast<uint32_t>(getpid()));
  r.set_fd(fd_);
  r.set_bytes(bytes_);
  r.set_token(token_);
  if (!label.empty()) r.set_label(label);
  return r;
}

v1::Matrix SharedMatrix(const std::string& region, uint64_t offset, Layout layout) {
  v1::Matrix m;
  m.set_layout(ToProto(layout));
  m.mutable_shared()->set_region(region);
  m.mutable_shared()->set_offset(offset);
  return m;
}

v1::SharedMemoryRef SharedRef(const std::string& region, uint64_t offset) {
  v1::SharedMemoryRef r;
  r.set_region(region);
  r.set_offset(offset);
  return r;
}

}  // namespace gemm
