#include "service/store/resident_store.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "service/base/limits.h"
#include "service/queue/tenants.h"

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

// Writes bytes [offset, offset + size) of upload `handle` (zeros).
void Chunk(ResidentStore& store, const std::string& handle, uint64_t offset, uint64_t size) {
  auto m = store.ClaimUpload("alice", handle, offset, size);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string zeros(size, '\0');
  ASSERT_TRUE((*m)->Write(offset, zeros.data(), size).ok());
  ASSERT_TRUE(store.FinishUploadRange(handle, offset, size, true).ok());
}

TEST_F(ResidentStoreTest, UploadWaitersRunOnceWhenTheLastByteArrives) {
  ResidentStore store(Budget(1 << 20), MakeHostResident);
  auto r = store.BeginUpload("alice", Source(), /*transient=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(store.UploadPending("alice", r->handle));
  EXPECT_FALSE(store.UploadPending("bob", r->handle));
  // Another owner's upload is not waited on.
  EXPECT_EQ(store.WhenUploaded("bob", r->handle, [](const absl::Status&) {}), 0u);
  std::vector<absl::Status> heard;
  const uint64_t ticket =
      store.WhenUploaded("alice", r->handle, [&](const absl::Status& s) { heard.push_back(s); });
  ASSERT_NE(ticket, 0u);
  const uint64_t cancelled = store.WhenUploaded(
      "alice", r->handle, [&](const absl::Status&) { ADD_FAILURE() << "cancelled waiter ran"; });
  store.CancelWait(r->handle, cancelled);
  Chunk(store, r->handle, 0, 64);
  EXPECT_TRUE(heard.empty());
  Chunk(store, r->handle, 64, 64);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_TRUE(heard[0].ok()) << heard[0];
  // Complete: nothing left to wait for.
  EXPECT_FALSE(store.UploadPending("alice", r->handle));
  EXPECT_EQ(store.WhenUploaded("alice", r->handle, [](const absl::Status&) {}), 0u);
}

TEST_F(ResidentStoreTest, UploadWaitersHearWhyAnUploadWillNotComplete) {
  ResidentStore store(Budget(1 << 20), MakeHostResident);
  std::vector<absl::Status> heard;
  auto wait = [&](const std::string& handle) {
    return store.WhenUploaded("alice", handle,
                              [&](const absl::Status& s) { heard.push_back(s); });
  };
  auto released = store.BeginUpload("alice", Source(), true);
  auto abandoned = store.BeginUpload("alice", Source(), true);
  ASSERT_TRUE(released.ok() && abandoned.ok());
  ASSERT_NE(wait(released->handle), 0u);
  ASSERT_NE(wait(abandoned->handle), 0u);
  Chunk(store, abandoned->handle, 0, 32);
  ASSERT_TRUE(store.Release("alice", released->handle).ok());
  // Another owner cannot abandon it.
  store.AbandonUpload("bob", abandoned->handle, absl::CancelledError("gone"));
  EXPECT_EQ(store.count(), 1u);
  store.AbandonUpload("alice", abandoned->handle, absl::CancelledError("the client went away"));
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_EQ(heard[0].code(), absl::StatusCode::kAborted);
  EXPECT_NE(heard[0].message().find("released before all its bytes arrived"),
            absl::string_view::npos) << heard[0];
  EXPECT_EQ(heard[1].code(), absl::StatusCode::kAborted);
  EXPECT_NE(heard[1].message().find("abandoned after 32 of 128 bytes"), absl::string_view::npos)
      << heard[1];
  EXPECT_EQ(store.count(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
}

// An upload kept as FP8: 4 x 8 fp32 (128 bytes) arriving in two chunks, quantized by
// the chunk that completes it.
TEST_F(ResidentStoreTest, AQuantizedUploadBecomesFp8WhenComplete) {
  ResidentStore store(Budget(1 << 20), MakeHostResident);
  const Fp8Quantization q{DType::kFp8E4m3, ScaleMode::kChannel, OperandRole::kA, false};
  auto r = store.BeginUpload("alice", Source(), /*transient=*/false, q);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bytes, 128u);  // the larger: 128 fp32 bytes against 32 codes + 4 scales
  const char* bytes = reinterpret_cast<const char*>(values_.data());
  for (uint64_t offset : {0u, 64u}) {
    auto m = store.ClaimUpload("alice", r->handle, offset, 64);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE((*m)->Write(offset, bytes + offset, 64).ok());
    ASSERT_TRUE(store.FinishUploadRange(r->handle, offset, 64, true).ok());
  }
  auto m = store.Lookup("alice", r->handle);
  ASSERT_TRUE(m.ok()) << m.status();
  const MatrixRef& v = (*m)->view();
  EXPECT_EQ(v.dtype, DType::kFp8E4m3);
  EXPECT_EQ(v.scales.mode, ScaleMode::kChannel);
  ASSERT_EQ(v.scales.count, 4u);
  EXPECT_EQ(ScaleAt(v.scales.data, 1), 15.0f / 448.0f);  // row 1 holds 8..15
  EXPECT_EQ(Fp8ToFloat(static_cast<const uint8_t*>(v.data)[15], DType::kFp8E4m3), 448.0f);
  EXPECT_EQ(store.bytes(), 32u + 4 * sizeof(float));
  m->reset();
  ASSERT_TRUE(store.Release("alice", r->handle).ok());
  EXPECT_EQ(store.bytes(), 0u);
}

TEST_F(ResidentStoreTest, AQuantizedUploadWithANaNIsReleased) {
  ResidentStore store(Budget(1 << 20), MakeHostResident);
  values_[20] = std::nanf("");
  const Fp8Quantization q{DType::kFp8E5m2, ScaleMode::kTensor, OperandRole::kB, false};
  auto r = store.BeginUpload("alice", Source(), /*transient=*/true, q);
  ASSERT_TRUE(r.ok()) << r.status();
  auto m = store.ClaimUpload("alice", r->handle, 0, 128);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE((*m)->Write(0, values_.data(), 128).ok());
  m->reset();
  const absl::Status done = store.FinishUploadRange(r->handle, 0, 128, true);
  EXPECT_EQ(done.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(done.message().find("data: element (2, 4)"), absl::string_view::npos) << done;
  EXPECT_EQ(store.Lookup("alice", r->handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.bytes(), 0u);
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

// Uploads: a matrix filled in chunks, usable once complete.
class ResidentUploadTest : public ResidentStoreTest {
 protected:
  ResidentUploadTest()
      : store_(Options(), MakeHostResident, MakeHostResidentUninitialized, &clock_) {}
  static ResidentStore::Options Options() {
    ResidentStore::Options o;
    o.max_bytes = 1 << 20;
    o.idle_timeout = absl::Seconds(10);
    return o;
  }
  // Writes bytes [offset, offset + n) of values_ as one chunk.
  absl::Status Chunk(const std::string& owner, const std::string& handle, uint64_t offset,
                     uint64_t n) {
    auto m = store_.ClaimUpload(owner, handle, offset, n);
    if (!m.ok()) return m.status();
    absl::Status st =
        (*m)->Write(offset, reinterpret_cast<const char*>(values_.data()) + offset, n);
    store_.FinishUploadRange(handle, offset, n, st.ok()).IgnoreError();
    return st;
  }

  FakeClock clock_;
  ResidentStore store_;
};

TEST_F(ResidentUploadTest, ChunksInAnyOrderCompleteTheMatrix) {
  auto r = store_.BeginUpload("alice", Source(), /*transient=*/false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(store_.bytes(), 128u);  // reserved before any byte arrives
  ASSERT_TRUE(Chunk("alice", r->handle, 64, 64).ok());
  auto early = store_.Lookup("alice", r->handle);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(early.status().message().find("64 of 128 bytes"), std::string::npos)
      << early.status();
  ASSERT_TRUE(Chunk("alice", r->handle, 0, 10).ok());
  ASSERT_TRUE(Chunk("alice", r->handle, 10, 54).ok());
  auto m = store_.Lookup("alice", r->handle);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(std::memcmp((*m)->view().data, values_.data(), 128), 0);
  // Complete: no more chunks.
  EXPECT_EQ(Chunk("alice", r->handle, 0, 1).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ResidentUploadTest, BadChunksAreRefusedWithTheFieldNamed) {
  auto r = store_.BeginUpload("alice", Source(), false);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(Chunk("alice", r->handle, 16, 16).ok());
  absl::Status dup = Chunk("alice", r->handle, 24, 16);
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("overlap bytes [16, 32)"), std::string::npos) << dup;
  EXPECT_EQ(Chunk("alice", r->handle, 0, 17).code(), absl::StatusCode::kInvalidArgument);
  absl::Status past = Chunk("alice", r->handle, 120, 9);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("offset:"), std::string::npos) << past;
  EXPECT_EQ(Chunk("alice", r->handle, 0, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Chunk("mallory", r->handle, 0, 16).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Chunk("alice", "00", 0, 16).code(), absl::StatusCode::kNotFound);
  // A whole registration is not an upload.
  auto whole = store_.Register("alice", Source());
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(Chunk("alice", whole->handle, 0, 16).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ResidentUploadTest, AFailedWriteCanBeRetried) {
  auto r = store_.BeginUpload("alice", Source(), false);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(store_.ClaimUpload("alice", r->handle, 0, 128).ok());
  store_.FinishUploadRange(r->handle, 0, 128, /*written=*/false).IgnoreError();
  EXPECT_TRUE(Chunk("alice", r->handle, 0, 128).ok());
  EXPECT_TRUE(store_.Lookup("alice", r->handle).ok());
}

TEST_F(ResidentUploadTest, AbandonedUploadsAndIdleTransientsExpire) {
  auto abandoned = store_.BeginUpload("alice", Source(), /*transient=*/false);
  auto transient = store_.BeginUpload("alice", Source(), /*transient=*/true);
  auto kept = store_.Register("alice", Source());  // never expires
  ASSERT_TRUE(abandoned.ok() && transient.ok() && kept.ok());
  ASSERT_TRUE(Chunk("alice", abandoned->handle, 0, 64).ok());
  ASSERT_TRUE(Chunk("alice", transient->handle, 0, 128).ok());
  EXPECT_EQ(store_.bytes(), 3 * 128u);
  clock_.Advance(absl::Seconds(6));
  EXPECT_TRUE(store_.Lookup("alice", transient->handle).ok());  // use refreshes it
  EXPECT_EQ(store_.ExpireIdle(), 0u);
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(store_.ExpireIdle(), 1u);  // the abandoned upload (idle 12 s)
  EXPECT_EQ(Chunk("alice", abandoned->handle, 64, 64).code(), absl::StatusCode::kNotFound);
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(store_.ExpireIdle(), 1u);  // the transient one (idle 12 s)
  EXPECT_EQ(store_.count(), 1u);
  EXPECT_EQ(store_.bytes(), 128u);
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(store_.ExpireIdle(), 0u);
  EXPECT_TRUE(store_.Lookup("alice", kept->handle).ok());
}

// A small transient operand finished long before a large one beside it:
// kept while its owner's other upload still receives chunks, then freed
// once that stops; another owner's uploads do not keep it.
TEST_F(ResidentUploadTest, TransientsWaitWhileTheirOwnerIsStillUploading) {
  auto small = store_.BeginUpload("alice", Source(), /*transient=*/true);
  auto large = store_.BeginUpload("alice", Source(), /*transient=*/true);
  auto bobs = store_.BeginUpload("bob", Source(), /*transient=*/true);
  auto carol = store_.BeginUpload("carol", Source(), /*transient=*/true);
  ASSERT_TRUE(small.ok() && large.ok() && bobs.ok() && carol.ok());
  ASSERT_TRUE(Chunk("alice", small->handle, 0, 128).ok());
  ASSERT_TRUE(Chunk("bob", bobs->handle, 0, 128).ok());
  // No Lookup before the end: it would refresh what it finds.
  for (uint64_t offset = 0; offset < 96; offset += 16) {
    clock_.Advance(absl::Seconds(6));
    ASSERT_TRUE(Chunk("alice", large->handle, offset, 16).ok());
    ASSERT_TRUE(Chunk("carol", carol->handle, offset, 16).ok());
    store_.ExpireIdle();
    if (offset >= 16) {
      EXPECT_EQ(store_.count(), 3u)
          << "at " << 6 * (offset / 16 + 1) << " s: want alice's two and carol's";
    }
  }
  EXPECT_TRUE(store_.Lookup("alice", small->handle).ok());
  // Bob's finished upload, idle for 36 s with no upload of his own going on.
  EXPECT_EQ(store_.Lookup("bob", bobs->handle).status().code(), absl::StatusCode::kNotFound);
  clock_.Advance(absl::Seconds(11));
  // Alice's two (the large one abandoned, the small one idle again since
  // the Lookup) and carol's.
  EXPECT_EQ(store_.ExpireIdle(), 3u);
  EXPECT_EQ(store_.count(), 0u);
}

TEST_F(ResidentUploadTest, AdoptTakesAMatrixWithoutCopyingAndCountsIt) {
  std::string bytes(reinterpret_cast<const char*>(values_.data()), 128);
  const char* where = bytes.data();
  std::shared_ptr<ResidentMatrix> m = AdoptHostResident(Source(), std::move(bytes));
  EXPECT_EQ(m->view().data, static_cast<const void*>(where));
  auto r = store_.Adopt("bob", m, /*transient=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  m.reset();
  EXPECT_EQ(store_.bytes(), 128u);
  auto found = store_.Lookup("bob", r->handle);
  ASSERT_TRUE(found.ok());
  float second;
  ASSERT_TRUE((*found)->Read(4, &second, 4).ok());
  EXPECT_EQ(second, 1.0f);
  EXPECT_EQ((*found)->Read(125, &second, 4).code(), absl::StatusCode::kOutOfRange);
  found->reset();
  ASSERT_TRUE(store_.Release("bob", r->handle).ok());
  EXPECT_EQ(store_.bytes(), 0u);
  ResidentStore tiny(Budget(100), MakeHostResident);
  EXPECT_EQ(tiny.Adopt("bob", AdoptHostResident(Source(), std::string(128, '\0')), true)
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
}

// Tenant a (callers alice and ann) may hold 300 bytes; b has no limit of
// its own; the server holds at most 1000.
std::shared_ptr<const TenantsConfig> ResidentTenants(absl::string_view text) {
  auto config = TenantsConfig::Parse(text, "tenants.txt");
  EXPECT_TRUE(config.ok()) << config.status();
  return std::make_shared<const TenantsConfig>(*std::move(config));
}

// CheckRoom answers as a registration would, without holding anything.
TEST_F(ResidentStoreTest, CheckRoomAnswersAsARegistrationWouldAndReservesNothing) {
  ResidentStore store(Budget(1000), MakeHostResident);
  store.SetTenants(ResidentTenants(
      "tenant a caller=alice max_resident_bytes=300\ntenant b caller=bob\n"));
  ASSERT_TRUE(store.Register("alice", Source()).ok());  // 128 bytes for a
  EXPECT_TRUE(store.CheckRoom("alice", 172).ok());
  const absl::Status over = store.CheckRoom("alice", 173);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(over.message()),
            "tenant a: max_resident_bytes: 173 more bytes would pass the tenant's limit of 300 "
            "(128 held); release matrices first");
  EXPECT_EQ(over.GetPayload(kLimitPayloadUrl).value_or(absl::Cord("none")),
            "tenant.max_resident_bytes");
  EXPECT_TRUE(store.CheckRoom("bob", 872).ok());
  const absl::Status server = store.CheckRoom("bob", 873);
  EXPECT_EQ(server.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(server.GetPayload(kLimitPayloadUrl).value_or(absl::Cord("none")),
            "max_resident_bytes");
  EXPECT_EQ(store.bytes(), 128u);
  EXPECT_EQ(store.tenant_bytes("a"), 128u);
}

TEST_F(ResidentStoreTest, ATenantOverItsMaxResidentBytesIsRefusedNamingTenantAndLimit) {
  ResidentStore store(Budget(1000), MakeHostResident);
  store.SetTenants(ResidentTenants(
      "tenant a caller=alice caller=ann max_resident_bytes=300\ntenant b caller=bob\n"));
  auto first = store.Register("alice", Source());  // 128 bytes
  ASSERT_TRUE(first.ok()) << first.status();
  auto upload = store.BeginUpload("ann", Source(), /*transient=*/false);  // 256 for a
  ASSERT_TRUE(upload.ok()) << upload.status();
  EXPECT_EQ(store.tenant_bytes("a"), 256u);

  // A third 128 would make 384 > 300, by either caller and either path.
  for (const auto& st : {store.Register("alice", Source()).status(),
                         store.BeginUpload("ann", Source(), true).status()}) {
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(std::string(st.message()),
              "tenant a: max_resident_bytes: 128 more bytes would pass the tenant's limit of "
              "300 (256 held); release matrices first");
    EXPECT_EQ(st.GetPayload(kLimitPayloadUrl).value_or(absl::Cord("none")),
              "tenant.max_resident_bytes");
  }
  // Another tenant is not held back by a's limit, and anonymous callers
  // fall to "other".
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(store.Register("bob", Source()).ok());
  ASSERT_TRUE(store.Register("", Source()).ok());
  EXPECT_EQ(store.tenant_bytes("b"), 512u);
  EXPECT_EQ(store.tenant_bytes("other"), 128u);
  EXPECT_EQ(store.bytes(), 896u);
  // The server-wide limit still holds, named as before.
  const absl::Status full = store.Register("bob", Source()).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.GetPayload(kLimitPayloadUrl).value_or(absl::Cord("none")), "max_resident_bytes");

  // Releasing gives the tenant its bytes back.
  ASSERT_TRUE(store.Release("alice", first->handle).ok());
  EXPECT_EQ(store.tenant_bytes("a"), 128u);
  EXPECT_TRUE(store.Register("ann", Source()).ok());
  EXPECT_EQ(store.tenant_bytes("a"), 256u);
}

TEST_F(ResidentStoreTest, AReloadKeepsHeldBytesWithTheirTenantAndAppliesNewLimits) {
  ResidentStore store(Budget(1 << 20), MakeHostResident);
  store.SetTenants(ResidentTenants("tenant a caller=alice max_resident_bytes=1KiB\n"));
  auto held = store.Register("alice", Source());
  ASSERT_TRUE(held.ok()) << held.status();
  // a's limit drops below what it holds: nothing is freed, new bytes are refused.
  store.SetTenants(ResidentTenants("tenant a caller=alice max_resident_bytes=100\n"));
  EXPECT_EQ(store.tenant_bytes("a"), 128u);
  EXPECT_EQ(store.Register("alice", Source()).status().code(),
            absl::StatusCode::kResourceExhausted);
  // alice moves to tenant c: her old matrix still counts for a until freed.
  store.SetTenants(ResidentTenants("tenant a max_resident_bytes=100\ntenant c caller=alice\n"));
  ASSERT_TRUE(store.Register("alice", Source()).ok());
  EXPECT_EQ(store.tenant_bytes("a"), 128u);
  EXPECT_EQ(store.tenant_bytes("c"), 128u);
  ASSERT_TRUE(store.Release("alice", held->handle).ok());
  EXPECT_EQ(store.tenant_bytes("a"), 0u);
  // Without tenants only the server's budget applies.
  store.SetTenants(nullptr);
  EXPECT_TRUE(store.Register("alice", Source()).ok());
  EXPECT_EQ(store.bytes(), 256u);
}

}  // namespace
}  // namespace gemm
