#include "service/resident_store.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace gemm {
namespace {

// A 4 x 8 fp32 matrix (128 bytes) with distinct values.
class ResidentStoreTest : public ::testing::Test {
 protected:
  ResidentStoreTest() : values_(32) {
    for (size_t i = 0; i < values_.size(); ++i) values_[i] = static_cast<float>(i);
  }
  MatrixRef Source() const { return MatrixRef{values_.data(), 4, 8, Layout::kRowMajor}; }
  static ResidentStore::Options Budget(uint64_t bytes) { return ResidentStore::Options{bytes}; }

  std::vector<float> values_;
};

TEST_F(ResidentStoreTest, RegisterCopiesAndLookupFindsIt) {
  ResidentStore store(Budget(1 << 20), MakeHostResident);
  auto r = store.Register("alice", Source());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bytes, 128u);
  EXPECT_EQ(r->handle.size(), 32u);
  EXPECT_EQ(r->handle.find_first_not_of("0123456789abcdef"), std::string::npos) << r->handle;
  values_[5] = -1.0f;  // the store holds its own copy

  auto m = store.Lookup("alice", r->handle);
  ASSERT_TRUE(m.ok()) << m.status();
  const MatrixRef& v = (*m)->view();
  EXPECT_EQ(v.rows, 4u);
  EXPECT_EQ(v.cols, 8u);
  EXPECT_EQ(v.dtype, DType::kFp32);
  EXPECT_EQ(v.resident, m->get());
  EXPECT_EQ(static_cast<const float*>(v.data)[5], 5.0f);
  EXPECT_EQ(store.bytes(), 128u);
  EXPECT_EQ(store.count(), 1u);
}

TEST_F(ResidentStoreTest, HandlesAreDistinct) {
  ResidentStore store(Budget(1 << 20), MakeHostResident);
  std::set<std::string> handles;
  for (int i = 0; i < 100; ++i) handles.insert(store.Register("", Source())->handle);
  EXPECT_EQ(handles.size(), 100u);
}

TEST_F(ResidentStoreTest, UnknownHandleIsNotFound) {
  ResidentStore store(Budget(1 << 20), MakeHostResident);
  EXPECT_EQ(store.Lookup("", "0123").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Release("", "0123").code(), absl::StatusCode::kNotFound);
}

TEST_F(ResidentStoreTest, HandlesAreScopedToTheirOwner) {
  ResidentStore store(Budget(1 << 20), MakeHostResident);
  const std::string handle = store.Register("alice", Source())->handle;
  EXPECT_EQ(store.Lookup("mallory", handle).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Lookup("", handle).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(store.Release("mallory", handle).code(), absl::StatusCode::kPermissionDenied);
  // The failed release left it in place.
  EXPECT_TRUE(store.Lookup("alice", handle).ok());
  EXPECT_TRUE(store.Release("alice", handle).ok());
  EXPECT_EQ(store.Lookup("alice", handle).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ResidentStoreTest, OverTheBudgetIsResourceExhaustedNamingTheLimit) {
  ResidentStore store(Budget(300), MakeHostResident);
  ASSERT_TRUE(store.Register("a", Source()).ok());
  ASSERT_TRUE(store.Register("b", Source()).ok());
  auto third = store.Register("a", Source());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("max_resident_bytes"), absl::string_view::npos)
      << third.status();
  EXPECT_EQ(store.bytes(), 256u);
  EXPECT_EQ(store.count(), 2u);
}

TEST_F(ResidentStoreTest, ReleaseGivesTheBudgetBack) {
  ResidentStore store(Budget(200), MakeHostResident);
  const std::string handle = store.Register("a", Source())->handle;
  EXPECT_FALSE(store.Register("a", Source()).ok());
  ASSERT_TRUE(store.Release("a", handle).ok());
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_EQ(store.count(), 0u);
  EXPECT_TRUE(store.Register("a", Source()).ok());
}

TEST_F(ResidentStoreTest, ReleasedWhileInUseStaysAliveAndCountedUntilDropped) {
  ResidentStore store(Budget(200), MakeHostResident);
  const std::string handle = store.Register("a", Source())->handle;
  std::shared_ptr<const ResidentMatrix> in_use = *store.Lookup("a", handle);
  ASSERT_TRUE(store.Release("a", handle).ok());
  EXPECT_EQ(store.Lookup("a", handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.count(), 0u);
  // Still readable, and still holding its memory against the budget.
  EXPECT_EQ(static_cast<const float*>(in_use->view().data)[31], 31.0f);
  EXPECT_EQ(store.bytes(), 128u);
  EXPECT_EQ(store.Register("a", Source()).status().code(), absl::StatusCode::kResourceExhausted);
  in_use.reset();
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_TRUE(store.Register("a", Source()).ok());
}

TEST_F(ResidentStoreTest, AMatrixMayOutliveTheStore) {
  std::shared_ptr<const ResidentMatrix> in_use;
  {
    ResidentStore store(Budget(200), MakeHostResident);
    in_use = *store.Lookup("a", store.Register("a", Source())->handle);
  }
  EXPECT_EQ(static_cast<const float*>(in_use->view().data)[1], 1.0f);
}

TEST_F(ResidentStoreTest, AllocatorFailureReturnsTheReservation) {
  ResidentStore store(Budget(200), [](const MatrixRef&) {
    return absl::StatusOr<std::shared_ptr<ResidentMatrix>>(
        absl::ResourceExhaustedError("device out of memory"));
  });
  auto r = store.Register("a", Source());
  EXPECT_EQ(r.status().message(), "device out of memory");
  EXPECT_EQ(store.bytes(), 0u);
}

TEST_F(ResidentStoreTest, ConcurrentRegistrationsNeverPassTheBudget) {
  ResidentStore store(Budget(128 * 10), MakeHostResident);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i)
        if (store.Register("a", Source()).ok()) ++ok;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 10);
  EXPECT_EQ(store.bytes(), 128u * 10);
}

}  // namespace
}  // namespace gemm
