#include "service/store/shared_memory_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gemm {

absl::StatusOr<uint64_t> ProcessStartTime(const std::string& proc_root, uint32_t pid) {
  std::ifstream in(absl::StrCat(proc_root, "/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && stat.empty()) return absl::NotFoundError(absl::StrCat("no process ", pid));
  // The command name (field 2) is in parentheses and may hold spaces and
  // parentheses: the fields after it start past the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::NotFoundError(absl::StrCat("no process ", pid));
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  // Fields 3 .. 22: state is field 3, starttime field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return absl::NotFoundError(absl::StrCat("no process ", pid));
  }
  uint64_t start = 0;
  if (!absl::SimpleAtoi(field, &start))
    return absl::NotFoundError(absl::StrCat("process ", pid, ": unreadable stat"));
  return start;
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegion::Map(
    uint32_t pid, int fd, uint64_t bytes, absl::string_view token, const std::string& proc_root) {
  if (pid == 0) return absl::InvalidArgumentError("pid: must be set");
  if (fd < 0) return absl::InvalidArgumentError("fd: must be a descriptor (>= 0)");
  if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes)
    return absl::InvalidArgumentError(absl::StrCat("token: must be ", kMinTokenBytes, " to ",
                                                   kMaxTokenBytes, " bytes, got ",
                                                   token.size()));
  if (bytes < token.size())
    return absl::InvalidArgumentError("bytes: the region must hold at least its token");
  // The start time first: a process that ends and whose pid is reused
  // before the open below reads as ended at the next OwnerAlive.
  absl::StatusOr<uint64_t> start = ProcessStartTime(proc_root, pid);
  if (!start.ok())
    return absl::FailedPreconditionError(absl::StrCat(
        "pid: no process ", pid, " is visible to the server (shared memory needs the client "
        "on the server's host, in its PID namespace)"));
  const std::string path = absl::StrCat(proc_root, "/", pid, "/fd/", fd);
  const int own = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (own < 0) {
    const int e = errno;
    if (e == EACCES || e == EPERM)
      return absl::PermissionDeniedError(absl::StrCat(
          "fd: the server may not open ", path, " (", std::strerror(e),
          "): it needs the client's user or CAP_SYS_PTRACE"));
    return absl::FailedPreconditionError(
        absl::StrCat("fd: ", path, " cannot be opened (", std::strerror(e), ")"));
  }
  auto fail = [own](absl::Status st) {
    close(own);
    return st;
  };
  struct stat st {};
  if (fstat(own, &st) != 0 || !S_ISREG(st.st_mode))
    return fail(absl::FailedPreconditionError("fd: not a memfd (memfd_create)"));
  const int seals = fcntl(own, F_GET_SEALS);
  if (seals < 0)
    return fail(absl::FailedPreconditionError(
        "fd: not a sealable memfd (memfd_create with MFD_ALLOW_SEALING)"));
  if ((seals & F_SEAL_SHRINK) == 0)
    return fail(absl::FailedPreconditionError(
        "fd: the memfd must be sealed against shrinking (fcntl F_ADD_SEALS, F_SEAL_SHRINK)"));
  if (static_cast<uint64_t>(st.st_size) != bytes)
    return fail(absl::InvalidArgumentError(
        absl::StrCat("bytes: the memfd holds ", st.st_size, " bytes, not ", bytes)));
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  const int map_errno = errno;
  close(own);  // the mapping keeps the memory
  if (base == MAP_FAILED)
    return absl::FailedPreconditionError(
        absl::StrCat("fd: the memfd cannot be mapped read/write (", std::strerror(map_errno),
                     (seals & F_SEAL_WRITE) != 0 ? "; it is sealed against writes)" : ")"));
  if (std::memcmp(base, token.data(), token.size()) != 0) {
    munmap(base, bytes);
    return absl::PermissionDeniedError("token: the region does not start with the token");
  }
  return std::shared_ptr<SharedMemoryRegion>(
      new SharedMemoryRegion(static_cast<char*>(base), bytes, pid, proc_root, *start));
}

SharedMemoryRegion::~SharedMemoryRegion() {
  pin_.reset();  // unlocked before it is unmapped
  munmap(base_, bytes_);
}

bool SharedMemoryRegion::OwnerAlive() const {
  absl::StatusOr<uint64_t> start = ProcessStartTime(proc_root_, pid_);
  return start.ok() && *start == start_time_;
}

}  // namespace gemm
