#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "service/store/shared_memory_region.h"
#include "service/store/shared_memory_store.h"

namespace gemm {
namespace {

constexpr char kToken[] = "0123456789abcdef0123";  // 20 bytes

// A memfd of `bytes` bytes that starts with kToken, sealed against
// shrinking unless `seal` is false. Closed by the destructor.
struct Memfd {
  explicit Memfd(uint64_t bytes, bool seal = true) {
    fd = memfd_create("gemm-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    EXPECT_EQ(pwrite(fd, kToken, std::strlen(kToken), 0), static_cast<ssize_t>(std::strlen(kToken)));
    if (seal) {
      EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    }
  }
  ~Memfd() { close(fd); }
  int fd = -1;
};

SharedMemoryStore::Options StoreOptions() {
  SharedMemoryStore::Options o;
  o.instance_id = "00112233445566aa";
  return o;
}

TEST(SameHostPeerTest, LoopbackAndUnixSocketsOnly) {
  EXPECT_TRUE(IsSameHostPeer("ipv4:127.0.0.1:5000"));
  EXPECT_TRUE(IsSameHostPeer("ipv4:127.1.2.3:5000"));
  EXPECT_TRUE(IsSameHostPeer("ipv6:[::1]:5000"));
  EXPECT_TRUE(IsSameHostPeer("ipv6:%5B::1%5D:5000"));
  EXPECT_TRUE(IsSameHostPeer("ipv6:[::ffff:127.0.0.1]:5000"));
  EXPECT_TRUE(IsSameHostPeer("unix:/run/gemm.sock"));
  EXPECT_TRUE(IsSameHostPeer("unix-abstract:gemm"));
  EXPECT_FALSE(IsSameHostPeer("ipv4:10.0.0.5:5000"));
  EXPECT_FALSE(IsSameHostPeer("ipv4:128.0.0.1:5000"));
  EXPECT_FALSE(IsSameHostPeer("ipv6:[2001:db8::1]:5000"));
  EXPECT_FALSE(IsSameHostPeer("ipv6:[::10]:5000"));
  EXPECT_FALSE(IsSameHostPeer(""));
}

TEST(SharedMemoryRegionTest, MapsASealedMemfdThatStartsWithItsToken) {
  Memfd m(4096);
  auto region = SharedMemoryRegion::Map(getpid(), m.fd, 4096, kToken, "/proc");
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->bytes(), 4096u);
  EXPECT_EQ(std::memcmp((*region)->base(), kToken, std::strlen(kToken)), 0);
  EXPECT_TRUE((*region)->OwnerAlive());
  // The mapping is shared both ways.
  (*region)->base()[100] = 42;
  char byte = 0;
  ASSERT_EQ(pread(m.fd, &byte, 1, 100), 1);
  EXPECT_EQ(byte, 42);
}

TEST(SharedMemoryRegionTest, RefusesWhatCouldFaultOrIsNotTheCallers) {
  {
    Memfd unsealed(4096, false);
    auto r = SharedMemoryRegion::Map(getpid(), unsealed.fd, 4096, kToken, "/proc");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("F_SEAL_SHRINK"), std::string::npos) << r.status();
  }
  Memfd m(4096);
  auto wrong_size = SharedMemoryRegion::Map(getpid(), m.fd, 8192, kToken, "/proc");
  EXPECT_EQ(wrong_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_size.status().message().find("bytes"), std::string::npos);
  auto wrong_token =
      SharedMemoryRegion::Map(getpid(), m.fd, 4096, "fedcba9876543210fedc", "/proc");
  EXPECT_EQ(wrong_token.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(wrong_token.status().message().find("token"), std::string::npos);
  auto short_token = SharedMemoryRegion::Map(getpid(), m.fd, 4096, "short", "/proc");
  EXPECT_EQ(short_token.status().code(), absl::StatusCode::kInvalidArgument);
  auto no_fd = SharedMemoryRegion::Map(getpid(), 100000, 4096, kToken, "/proc");
  EXPECT_EQ(no_fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_fd.status().message().find("fd"), std::string::npos);
  // A pid no process has (pid_max is at most 2^22).
  auto no_process = SharedMemoryRegion::Map(1u << 23, m.fd, 4096, kToken, "/proc");
  EXPECT_EQ(no_process.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_process.status().message().find("pid"), std::string::npos);
  // A regular file has no seals.
  char path[] = "/tmp/gemm-shm-test-XXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  ASSERT_EQ(pwrite(file, kToken, std::strlen(kToken), 0),
            static_cast<ssize_t>(std::strlen(kToken)));
  auto plain = SharedMemoryRegion::Map(getpid(), file, std::strlen(kToken), kToken, "/proc");
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kFailedPrecondition);
  close(file);
}

TEST(SharedMemoryStoreTest, RegionsBelongToTheirCallerAndServer) {
  SharedMemoryStore store(StoreOptions());
  Memfd m(1 << 16);
  auto reg = store.Register("alice", getpid(), m.fd, 1 << 16, kToken);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->region.substr(0, 17), "00112233445566aa-");
  EXPECT_EQ(store.regions(), 1u);
  EXPECT_EQ(store.bytes(), uint64_t{1} << 16);
  auto found = store.Lookup("alice", reg->region);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(store.Lookup("bob", reg->region).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Unregister("bob", reg->region).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Lookup("alice", "00112233445566aa-00000000000000000000000000000000")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Lookup("alice", "99112233445566aa-00000000000000000000000000000000")
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store.Unregister("alice", reg->region).ok());
  EXPECT_EQ(store.regions(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_EQ(store.Lookup("alice", reg->region).status().code(), absl::StatusCode::kNotFound);
  // A request that held it still reads the mapping.
  EXPECT_EQ(std::memcmp((*found)->base(), kToken, std::strlen(kToken)), 0);
}

TEST(SharedMemoryStoreTest, LimitsAreExplicit) {
  SharedMemoryStore::Options o = StoreOptions();
  o.max_regions = 2;
  o.max_bytes = 10000;
  SharedMemoryStore store(o);
  Memfd a(1 << 12), b(1 << 12), c(1 << 13), d(1 << 12);
  ASSERT_TRUE(store.Register("alice", getpid(), a.fd, 1 << 12, kToken).ok());
  auto too_big = store.Register("alice", getpid(), c.fd, 1 << 13, kToken);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("max_shared_memory_bytes"), std::string::npos);
  ASSERT_TRUE(store.Register("alice", getpid(), b.fd, 1 << 12, kToken).ok());
  auto too_many = store.Register("alice", getpid(), d.fd, 1 << 12, kToken);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_many.status().message().find("max_shared_memory_regions"), std::string::npos);

  o.max_regions = 0;
  SharedMemoryStore off(o);
  auto refused = off.Register("alice", getpid(), d.fd, 1 << 12, kToken);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SharedMemoryStoreTest, RegionsOfAProcessThatEndedAreUnmapped) {
  // A child process makes the memfd and waits until told to exit.
  int fd_pipe[2], go_pipe[2];
  ASSERT_EQ(pipe(fd_pipe), 0);
  ASSERT_EQ(pipe(go_pipe), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = memfd_create("gemm-child", MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, 4096) != 0 ||
        pwrite(fd, kToken, std::strlen(kToken), 0) != static_cast<ssize_t>(std::strlen(kToken)) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
      _exit(1);
    if (write(fd_pipe[1], &fd, sizeof fd) != sizeof fd) _exit(1);
    char go;
    (void)!read(go_pipe[0], &go, 1);
    _exit(0);
  }
  int child_fd = -1;
  ASSERT_EQ(read(fd_pipe[0], &child_fd, sizeof child_fd), static_cast<ssize_t>(sizeof child_fd));
  SharedMemoryStore store(StoreOptions());
  Memfd mine(4096);
  auto theirs = store.Register("alice", static_cast<uint32_t>(child), child_fd, 4096, kToken);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_TRUE(store.Register("alice", getpid(), mine.fd, 4096, kToken).ok());
  EXPECT_EQ(store.ReapEnded(), 0);  // both alive

  ASSERT_EQ(write(go_pipe[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(store.ReapEnded(), 1);
  EXPECT_EQ(store.regions(), 1u);
  EXPECT_EQ(store.Lookup("alice", theirs->region).status().code(), absl::StatusCode::kNotFound);
  for (int fd : {fd_pipe[0], fd_pipe[1], go_pipe[0], go_pipe[1]}) close(fd);
}

}  // namespace
}  // namespace gemm
