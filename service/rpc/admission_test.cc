// Admission (admission.h) without gRPC: requests admitted into a real queue
// and resident store on a fake clock, taken from the queue by the test and
// run on the fake executor, so what is refused, queued and answered at each
// step is decided here.
#include "service/rpc/admission.h"

#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "service/testing/fake_executor.h"
#include "service/testing/rpc_helpers.h"

namespace gemm {
namespace {

using fake::FakeExecutor;
using ::testing::HasSubstr;

constexpr char kAlice[] = "alice";
constexpr char kBob[] = "bob";

v1::GemmRequest OneProblem(uint64_t m, uint64_t n, uint64_t k) {
  v1::GemmRequest r;
  *r.add_problems() = fake::ZeroProblem(m, n, k);
  return r;
}

// One admitted (or refused) request: its response, its answer once
// completed, and what Admit said.
struct Admitted {
  v1::GemmRequest request;
  v1::GemmResponse response;
  absl::Status admit_status;
  absl::Duration pushback = absl::ZeroDuration();
  std::shared_ptr<WorkItem> item;
  bool answered = false;
  absl::Status answer;
};

class AdmissionTest : public ::testing::Test {
 protected:
  AdmissionTest() { Build(Limits()); }
  // What is still queued is answered before the admission and the requests
  // its completions write to go.
  ~AdmissionTest() override { queue_->Abandon(absl::CancelledError("the test is over")); }

  // A request of this test; it lives as long as the test.
  Admitted& New() { return *requests_.emplace_back(std::make_unique<Admitted>()); }

  static ServiceLimits Limits() {
    ServiceLimits l;
    l.max_dimension = 64;
    l.max_matrix_bytes = 64 * 64 * 4;
    l.max_problems_per_request = 4;
    l.max_queued_requests = 4;
    l.max_resident_bytes = 4096;
    return l;
  }

  // (Re)builds the queue, store and admission for `limits`; with
  // `with_store` false there is no resident store.
  void Build(const ServiceLimits& limits, bool with_store = true) {
    if (queue_ != nullptr) queue_->Abandon(absl::CancelledError("rebuilt"));
    admission_.reset();
    RequestQueue::Options q;
    q.max_queued_requests = limits.max_queued_requests;
    q.max_inflight_bytes = limits.max_inflight_bytes;
    queue_ = std::make_unique<RequestQueue>(q, &clock_);
    residents_.reset();
    if (with_store) {
      ResidentStore::Options r;
      r.max_bytes = limits.max_resident_bytes;
      residents_ = std::make_unique<ResidentStore>(
          r, [this](const MatrixRef& m) { return executor_.CreateResident(m); },
          [this](const MatrixRef& m) { return executor_.AllocateResident(m); }, &clock_);
    }
    Admission::Parts parts;
    parts.limits = limits;
    parts.queue = queue_.get();
    parts.metrics = &metrics_;
    parts.clock = &clock_;
    parts.residents = residents_.get();
    admission_ = std::make_unique<Admission>(parts);
    admission_->set_on_queued([this] { ++queued_calls_; });
  }

  // Admits `a->request` from `caller` (peer "ipv4:10.0.0.7:5000").
  void Admit(Admitted* a, const std::string& caller = kAlice) {
    Admission::Call call;
    call.caller = caller;
    call.peer = "ipv4:10.0.0.7:5000";
    call.received = clock_.Now();
    a->admit_status = admission_->Admit(
        call, a->request, &a->response,
        [a](const absl::Status& s) {
          a->answered = true;
          a->answer = s;
        },
        &a->item, &a->pushback);
  }

  // Runs everything queued on the fake executor; returns how many items ran.
  size_t RunQueued() {
    std::vector<std::shared_ptr<WorkItem>> items = queue_->Pop(64, absl::ZeroDuration());
    const size_t n = items.size();
    if (n == 0) return 0;
    Batch batch;
    batch.items = std::move(items);
    executor_.Execute(std::move(batch));
    return n;
  }

  // Registers an m x n fp32 matrix of `caller`; returns its handle.
  std::string Register(const std::string& caller, uint64_t rows, uint64_t cols) {
    std::vector<float> data(rows * cols, 1.0f);
    MatrixRef m{data.data(), rows, cols, Layout::kRowMajor, DType::kFp32};
    auto r = residents_->Register(caller, m);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->handle : "";
  }

  FakeClock clock_;
  ServiceMetrics metrics_;
  FakeExecutor executor_;
  std::unique_ptr<RequestQueue> queue_;
  std::unique_ptr<ResidentStore> residents_;
  std::unique_ptr<Admission> admission_;
  int queued_calls_ = 0;
  std::vector<std::unique_ptr<Admitted>> requests_;
};

TEST_F(AdmissionTest, AValidRequestIsQueuedAndItsCompletionFillsTheResponse) {
  Admitted& a = New();
  a.request = OneProblem(8, 4, 16);
  Admit(&a);
  ASSERT_TRUE(a.admit_status.ok()) << a.admit_status;
  ASSERT_NE(a.item, nullptr);
  EXPECT_EQ(queue_->queued(), 1u);
  EXPECT_EQ(queued_calls_, 1);
  EXPECT_EQ(admission_->admitted(), 1u);
  EXPECT_FALSE(a.answered);
  ASSERT_EQ(a.response.results_size(), 1);  // sized at admission

  clock_.Advance(absl::Milliseconds(3));
  EXPECT_EQ(RunQueued(), 1u);
  ASSERT_TRUE(a.answered);
  EXPECT_TRUE(a.answer.ok()) << a.answer;
  EXPECT_EQ(admission_->finished(), 1u);
  EXPECT_EQ(a.response.backend(), a.item->report.backend);
  EXPECT_EQ(a.response.kernel(), a.item->report.kernel);
  EXPECT_EQ(a.response.timing().total_ns(), 3'000'000u);
  const v1::GemmResult& r = a.response.results(0);
  EXPECT_EQ(r.rows(), 8u);
  EXPECT_EQ(r.cols(), 4u);
  ASSERT_EQ(r.data().size(), 8u * 4 * 4);
  EXPECT_FALSE(a.response.has_reproducibility());  // not asked for
}

TEST_F(AdmissionTest, AnInvalidRequestIsRefusedNamingTheFieldAndToldNotToRetry) {
  Admitted& a = New();
  a.request = OneProblem(8, 4, 16);
  a.request.mutable_problems(0)->mutable_b()->mutable_data()->pop_back();
  Admit(&a);
  EXPECT_EQ(a.admit_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.admit_status.message(), HasSubstr("problems[0].b"));
  EXPECT_LT(a.pushback, absl::ZeroDuration());
  EXPECT_EQ(a.item, nullptr);
  EXPECT_EQ(queue_->queued(), 0u);
  EXPECT_EQ(admission_->admitted(), 0u);
  EXPECT_EQ(queued_calls_, 0);

  Admitted& big = New();
  big.request = OneProblem(65, 4, 16);  // over max_dimension
  Admit(&big);
  EXPECT_FALSE(big.admit_status.ok());
  EXPECT_THAT(big.admit_status.message(), HasSubstr("problems[0]"));
  EXPECT_LT(big.pushback, absl::ZeroDuration());
}

TEST_F(AdmissionTest, HandlesAreResolvedForTheCallerAlone) {
  const std::string b = Register(kAlice, 16, 4);
  Admitted& mine = New();
  mine.request = OneProblem(8, 4, 16);
  mine.request.mutable_problems(0)->mutable_b()->set_handle(b);
  Admit(&mine, kAlice);
  ASSERT_TRUE(mine.admit_status.ok()) << mine.admit_status;
  EXPECT_EQ(mine.item->residents.size(), 1u);

  Admitted& theirs = New();
  theirs.request = mine.request;
  Admit(&theirs, kBob);
  EXPECT_EQ(theirs.admit_status.code(), absl::StatusCode::kPermissionDenied) << theirs.admit_status;
  EXPECT_THAT(theirs.admit_status.message(), HasSubstr("problems[0].b"));
}

TEST_F(AdmissionTest, DrainingRefusesNewWorkButNotWorkOnMatricesHeldHere) {
  const std::string b = Register(kAlice, 16, 4);
  admission_->StartDrain();
  EXPECT_TRUE(admission_->draining());

  Admitted& fresh = New();
  fresh.request = OneProblem(8, 4, 16);
  Admit(&fresh);
  EXPECT_EQ(fresh.admit_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(fresh.admit_status.message(), HasSubstr("draining"));
  EXPECT_EQ(admission_->refused_draining(), 1u);

  Admitted& held = New();
  held.request = OneProblem(8, 4, 16);
  held.request.mutable_problems(0)->mutable_b()->set_handle(b);
  Admit(&held);
  EXPECT_TRUE(held.admit_status.ok()) << held.admit_status;
  EXPECT_EQ(admission_->refused_draining(), 1u);
  EXPECT_EQ(admission_->RefuseDraining("RegisterMatrix").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(admission_->refused_draining(), 2u);
}

TEST_F(AdmissionTest, KeepResultsNeedsAStoreAndRoomBeforeAnyWorkRuns) {
  Admitted& over = New();
  over.request = OneProblem(64, 64, 1);  // a 16 KiB result against 4 KiB
  over.request.set_keep_results(true);
  Admit(&over);
  EXPECT_EQ(over.admit_status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.admit_status.message(), HasSubstr("keep_results"));
  EXPECT_EQ(queue_->queued(), 0u);

  Build(Limits(), /*with_store=*/false);
  Admitted& none = New();
  none.request = OneProblem(8, 4, 16);
  none.request.set_keep_results(true);
  Admit(&none);
  EXPECT_EQ(none.admit_status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.admit_status.message(), HasSubstr("keep_results"));
}

TEST_F(AdmissionTest, KeptResultsAndReleasedOperandsAreSettledBeforeTheAnswer) {
  const std::string b = Register(kAlice, 16, 4);
  Admitted& a = New();
  a.request = OneProblem(8, 4, 16);
  a.request.set_keep_results(true);
  a.request.mutable_problems(0)->mutable_b()->set_handle(b);
  a.request.mutable_problems(0)->mutable_b()->set_release_after_use(true);
  bool released_before_answer = false;
  Admission::Call call;
  call.caller = kAlice;
  call.received = clock_.Now();
  a.admit_status = admission_->Admit(
      call, a.request, &a.response,
      [&](const absl::Status& s) {
        a.answered = true;
        a.answer = s;
        released_before_answer = !residents_->Lookup(kAlice, b).ok();
      },
      &a.item, &a.pushback);
  ASSERT_TRUE(a.admit_status.ok()) << a.admit_status;
  a.item.reset();  // the queue's reference alone keeps the operand
  EXPECT_EQ(RunQueued(), 1u);
  ASSERT_TRUE(a.answered);
  ASSERT_TRUE(a.answer.ok()) << a.answer;
  EXPECT_TRUE(released_before_answer);
  const v1::GemmResult& r = a.response.results(0);
  EXPECT_TRUE(r.data().empty());  // moved into the store
  ASSERT_FALSE(r.handle().empty());
  auto kept = residents_->Lookup(kAlice, r.handle());
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(residents_->Lookup(kBob, r.handle()).ok());
}

TEST_F(AdmissionTest, AnAnonymousCallerIsNamedByItsPeer) {
  Admitted& named = New();
  Admitted& anonymous = New();
  named.request = anonymous.request = OneProblem(8, 4, 16);
  Admit(&named, kAlice);
  Admit(&anonymous, "");
  ASSERT_TRUE(named.admit_status.ok());
  ASSERT_TRUE(anonymous.admit_status.ok());
  EXPECT_EQ(named.item->client, kAlice);
  EXPECT_EQ(anonymous.item->client, "ipv4:10.0.0.7:5000");
}

TEST_F(AdmissionTest, DeterministicByDefaultAppliesOnlyWhereTheRequestIsSilent) {
  admission_->set_deterministic_by_default(true);
  Admitted& silent = New();
  Admitted& off = New();
  silent.request = off.request = OneProblem(8, 4, 16);
  off.request.set_deterministic(false);
  Admit(&silent);
  Admit(&off);
  ASSERT_TRUE(silent.admit_status.ok());
  ASSERT_TRUE(off.admit_status.ok());
  EXPECT_TRUE(silent.item->deterministic);
  EXPECT_FALSE(off.item->deterministic);
  EXPECT_EQ(RunQueued(), 2u);
  ASSERT_TRUE(silent.answer.ok()) << silent.answer;
  EXPECT_TRUE(silent.response.has_reproducibility());
  EXPECT_EQ(silent.response.reproducibility().backend(), silent.response.backend());
  EXPECT_FALSE(off.response.has_reproducibility());
}

TEST_F(AdmissionTest, AQueueRefusalLeavesNothingAdmitted) {
  ServiceLimits l = Limits();
  l.max_queued_requests = 1;
  Build(l);
  Admitted& first = New();
  Admitted& second = New();
  first.request = second.request = OneProblem(8, 4, 16);
  Admit(&first);
  Admit(&second);
  ASSERT_TRUE(first.admit_status.ok());
  EXPECT_EQ(second.admit_status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(second.item, nullptr);
  EXPECT_GE(second.pushback, absl::ZeroDuration());  // waiting helps
  EXPECT_EQ(admission_->admitted(), 1u);
  EXPECT_EQ(queued_calls_, 1);
  EXPECT_FALSE(second.answered);
}

TEST_F(AdmissionTest, AFailedRunIsAnsweredWithTheExecutorsStatusAndNoTiming) {
  executor_.FailWith(absl::InternalError("the device fell over"));
  Admitted& a = New();
  a.request = OneProblem(8, 4, 16);
  Admit(&a);
  ASSERT_TRUE(a.admit_status.ok());
  EXPECT_EQ(RunQueued(), 1u);
  ASSERT_TRUE(a.answered);
  EXPECT_EQ(a.answer.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(a.response.has_timing());
  EXPECT_EQ(admission_->finished(), 1u);
}

}  // namespace
}  // namespace gemm
