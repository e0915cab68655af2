// Admission by predicted completion (RequestQueue with Options::admission),
// on an injected clock with a fake executor whose predictions are exact
// arithmetic: each 1000^3 bf16 problem is 2e9 FLOPs at 1e12 FLOP/s = 2 ms.
#include <limits>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "service/exec/executor.h"
#include "service/queue/request_queue.h"

namespace gemm {
namespace {

constexpr uint64_t kN = 1000;  // one problem of kN^3 takes 2 ms below
constexpr absl::Duration kOne = absl::Milliseconds(2);

// Predicts through Executor's default (FLOPs over the measured bf16 rate);
// runs nothing: the tests pop and complete items themselves.
class FakeExecutor : public Executor {
 public:
  FakeExecutor(double bf16_rate, int parallel) : parallel_(parallel) {
    info_.backend = "fake";
    if (bf16_rate > 0) rates_.push_back({"bf16", bf16_rate, "test"});
  }
  const BackendInfo& info() const override { return info_; }
  std::vector<PeakRate> peak_rates() const override { return rates_; }
  int max_concurrent_batches() const override { return parallel_; }
  int parallel_units() const override { return parallel_; }
  void Execute(Batch) override { ADD_FAILURE() << "the admission tests run nothing"; }

 private:
  BackendInfo info_;
  std::vector<PeakRate> rates_;
  const int parallel_;
};

class AdmissionTest : public ::testing::Test {
 protected:
  // A queue whose admission asks `executor_` (built with `rate` and
  // `parallel`), as GemmServer wires it.
  void MakeQueue(AdmissionOptions admission = {}, double rate = 1e12, int parallel = 1) {
    executor_ = std::make_unique<FakeExecutor>(rate, parallel);
    RequestQueue::Options o;
    o.admission = admission;
    o.predict_run_time = [ex = executor_.get()](const WorkItem& item) {
      return ex->PredictRunTime(item);
    };
    o.parallel_units = executor_->parallel_units();
    queue_ = std::make_unique<RequestQueue>(o, &clock_);
  }

  // An item of `problems` kN^3 bf16 problems; `deadline_in` from now
  // (infinite when zero).
  std::shared_ptr<WorkItem> Item(int priority, absl::Duration deadline_in = absl::ZeroDuration(),
                                 int problems = 1) {
    auto item = std::make_shared<WorkItem>();
    for (int i = 0; i < problems; ++i) {
      GemmProblemRef p;
      p.shape.m = p.shape.n = p.shape.k = kN;
      p.shape.input_dtype = p.shape.output_dtype = DType::kBf16;
      item->problems.push_back(p);
    }
    item->priority = priority;
    item->bytes = 1;
    if (deadline_in > absl::ZeroDuration()) item->deadline = clock_.Now() + deadline_in;
    item->done = [this](const absl::Status& s, const ExecutionReport&) { completed_.push_back(s); };
    return item;
  }

  // Pushes `n` items of one problem each that must be admitted.
  void Queue(int n, int priority, absl::Duration deadline_in = absl::ZeroDuration()) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(queue_->Push(Item(priority, deadline_in)).ok());
  }

  // Push's status, with the retry pushback it gave in *hint.
  absl::Status Push(std::shared_ptr<WorkItem> item, absl::Duration* hint) {
    *hint = absl::InfiniteDuration();
    return queue_->Push(std::move(item), hint);
  }

  FakeClock clock_;
  std::vector<absl::Status> completed_;  // declared before the queue: outlives it
  std::unique_ptr<FakeExecutor> executor_;
  std::unique_ptr<RequestQueue> queue_;
};

TEST_F(AdmissionTest, TheFakeExecutorPredictsFlopsOverItsRate) {
  MakeQueue();
  EXPECT_EQ(executor_->PredictRunTime(*Item(0, absl::ZeroDuration(), 3)), 3 * kOne);
  // A dtype without a measured rate: no prediction at all, not a partial one.
  auto mixed = Item(0);
  mixed->problems.push_back(mixed->problems.front());
  mixed->problems.back().shape.input_dtype = DType::kFp16;
  EXPECT_EQ(executor_->PredictRunTime(*mixed), absl::ZeroDuration());
}

TEST_F(AdmissionTest, ARequestThatCannotMakeItsDeadlineIsRefusedAtOnce) {
  MakeQueue();
  // 6 ms of work at the same priority with earlier deadlines: it runs first.
  Queue(3, 0, absl::Microseconds(6500));
  auto late = Item(0, absl::Milliseconds(7));  // 6 + 2 = 8 ms > 7
  absl::Duration hint;
  const absl::Status st = Push(late, &hint);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "predicted to finish in 8ms")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "deadline in 7ms")) << st;
  // The pushback is when the work ahead of it should be done.
  EXPECT_EQ(hint, absl::Milliseconds(6));
  // Refused means untouched: not queued, not completed, no bytes held.
  EXPECT_EQ(queue_->queued(), 3u);
  EXPECT_EQ(queue_->inflight_bytes(), 3u);
  EXPECT_TRUE(completed_.empty());
}

TEST_F(AdmissionTest, ARequestThatCanMakeItsDeadlineIsAdmitted) {
  MakeQueue();
  Queue(3, 0, absl::Microseconds(6500));
  absl::Duration hint;
  EXPECT_TRUE(Push(Item(0, absl::Milliseconds(9)), &hint).ok());  // 8 ms <= 9
  EXPECT_EQ(queue_->queued(), 4u);
  EXPECT_EQ(hint, absl::InfiniteDuration()) << "no pushback for an admitted request";
}

TEST_F(AdmissionTest, ARequestTooSlowEvenAloneIsToldNotToRetry) {
  MakeQueue();
  auto big = Item(0, absl::Milliseconds(5), /*problems=*/3);  // 6 ms alone
  absl::Duration hint;
  const absl::Status st = Push(big, &hint);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "alone is predicted to take 6ms")) << st;
  EXPECT_LT(hint, absl::ZeroDuration()) << "retrying the same deadline cannot help";
}

TEST_F(AdmissionTest, OnlyWorkThatRunsFirstCountsAgainstARequest) {
  MakeQueue();
  Queue(5, /*priority=*/2);                              // 10 ms, runs before priorities < 2
  Queue(5, /*priority=*/0, absl::Milliseconds(100));     // 10 ms, after priority 0 deadlines < 100
  absl::Duration hint;
  // Priority 1: the priority-2 work is ahead (10 + 2 > 5), priority 0 is not.
  EXPECT_EQ(Push(Item(1, absl::Milliseconds(5)), &hint).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Push(Item(1, absl::Milliseconds(13)), &hint).ok());  // 10 + 2 <= 13
  // Priority 3 jumps everything: nothing is ahead.
  EXPECT_TRUE(Push(Item(3, absl::Milliseconds(3)), &hint).ok());
  // Priority 0 with an earlier deadline than the queued priority-0 work goes
  // before it (earliest deadline first): ahead are priorities 3, 2 and 1.
  // 2 + 10 + 2 + 2 = 16 ms.
  EXPECT_EQ(Push(Item(0, absl::Milliseconds(15)), &hint).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Push(Item(0, absl::Microseconds(16500)), &hint).ok());
  // With a later deadline the priority-0 work queued earlier counts too:
  // 16 + 10 + 2 = 28 ms.
  EXPECT_EQ(Push(Item(0, absl::Milliseconds(200)), &hint).code(), absl::StatusCode::kOk);
  EXPECT_EQ(queue_->queued(), 14u);
}

TEST_F(AdmissionTest, RunningWorkCountsUntilItIsDoneOrItsTimeHasPassed) {
  MakeQueue();
  Queue(2, 0);
  auto running = queue_->Pop(10, absl::ZeroDuration());  // 4 ms of work now running
  ASSERT_EQ(running.size(), 2u);
  absl::Duration hint;
  EXPECT_EQ(Push(Item(0, absl::Milliseconds(5)), &hint).code(),
            absl::StatusCode::kResourceExhausted);  // 4 + 2 > 5
  // Time passes: the running work is predicted to end 4 ms after it started.
  clock_.Advance(absl::Milliseconds(3));
  EXPECT_TRUE(Push(Item(0, absl::Microseconds(3500)), &hint).ok());  // 1 + 2 <= 3.5
  ASSERT_EQ(queue_->Pop(10, absl::ZeroDuration()).size(), 1u);
  // Now 1 ms of the first two and the 2 ms just popped: 3 ms running.
  EXPECT_EQ(Push(Item(0, absl::Microseconds(4500)), &hint).code(),
            absl::StatusCode::kResourceExhausted);  // 3 + 2 > 4.5
  // Work that finishes early stops counting at once: 2 ms left running.
  for (auto& item : running) item->Complete(absl::OkStatus());
  EXPECT_TRUE(Push(Item(0, absl::Microseconds(4500)), &hint).ok());
}

TEST_F(AdmissionTest, ParallelUnitsShareTheBacklog) {
  MakeQueue({}, 1e12, /*parallel=*/2);
  Queue(4, 1);  // 8 ms of work ahead of priority 0, 4 ms on each of two units
  absl::Duration hint;
  EXPECT_TRUE(Push(Item(0, absl::Microseconds(6500)), &hint).ok());  // 4 + 2
  EXPECT_EQ(Push(Item(0, absl::Microseconds(6500)), &hint).code(),   // 5 + 2
            absl::StatusCode::kResourceExhausted);
}

TEST_F(AdmissionTest, TheSafetyFactorScalesEveryPrediction) {
  AdmissionOptions cautious;
  cautious.safety_factor = 1.5;
  MakeQueue(cautious);
  Queue(1, 1);
  absl::Duration hint;
  EXPECT_EQ(Push(Item(0, absl::Milliseconds(5)), &hint).code(),  // 1.5 * (2 + 2) = 6 > 5
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(hint, absl::Milliseconds(3));
  EXPECT_TRUE(Push(Item(0, absl::Microseconds(6500)), &hint).ok());
}

TEST_F(AdmissionTest, TurnedOffLateRequestsAreQueuedAndExpire) {
  AdmissionOptions off;
  off.reject_predicted_late = false;
  MakeQueue(off);
  Queue(3, 0);
  auto late = Item(0, absl::Milliseconds(3));
  absl::Duration hint;
  ASSERT_TRUE(Push(late, &hint).ok());
  clock_.Advance(absl::Milliseconds(4));
  EXPECT_EQ(queue_->Pop(10, absl::ZeroDuration()).size(), 3u);
  ASSERT_EQ(completed_.size(), 1u);
  EXPECT_EQ(completed_[0].code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(AdmissionTest, WithoutMeasuredRatesNothingIsRefusedForLateness) {
  MakeQueue({}, /*rate=*/0);
  Queue(3, 1);
  absl::Duration hint;
  EXPECT_TRUE(Push(Item(0, absl::Milliseconds(1)), &hint).ok());
}

TEST_F(AdmissionTest, RequestsWithoutADeadlineAreAdmittedAndCountForOthers) {
  MakeQueue();
  absl::Duration hint;
  EXPECT_TRUE(Push(Item(0, absl::ZeroDuration(), /*problems=*/100), &hint).ok());  // 200 ms
  EXPECT_EQ(Push(Item(1, absl::Milliseconds(100)), &hint).ok(), true);  // jumps it
  EXPECT_EQ(Push(Item(0, absl::Milliseconds(100)), &hint).code(),
            absl::StatusCode::kOk);  // earlier deadline: ahead of the 200 ms item
  // The same priority and no deadline ranks after it; nothing to judge.
  EXPECT_TRUE(Push(Item(0), &hint).ok());
  // Priority -1 waits for all of it: 200 + 2 + 2 + 2 + 2 ms.
  EXPECT_EQ(Push(Item(-1, absl::Milliseconds(207)), &hint).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Push(Item(-1, absl::Milliseconds(209)), &hint).ok());
}

TEST_F(AdmissionTest, LimitRejectionsSayWhetherToRetry) {
  RequestQueue::Options o;
  o.max_queued_requests = 1;
  o.max_inflight_bytes = 10;
  RequestQueue q(o, &clock_);
  absl::Duration hint;
  auto huge = Item(0);
  huge->bytes = 11;
  EXPECT_EQ(q.Push(huge, &hint).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_LT(hint, absl::ZeroDuration()) << "over the whole budget: retrying cannot help";
  ASSERT_TRUE(q.Push(Item(0), &hint).ok());
  EXPECT_EQ(q.Push(Item(0), &hint).code(), absl::StatusCode::kResourceExhausted);  // full
  EXPECT_GT(hint, absl::ZeroDuration());
}

TEST(AdmissionOptionsTest, ValidateNamesTheField) {
  AdmissionOptions o;
  EXPECT_TRUE(o.Validate().ok());
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    o.safety_factor = bad;
    const absl::Status st = o.Validate();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(st.message(), "safety_factor")) << st;
  }
}

// Precheck answers as Push would, without queueing or reserving: the service
// calls it before sizing result buffers.
TEST_F(AdmissionTest, PrecheckDecidesAsPushWithoutQueueing) {
  MakeQueue();
  Queue(3, 1);  // 6 ms of work ahead (higher priority)
  absl::Duration hint;
  auto late = Item(0, absl::Milliseconds(7));  // 6 + 2 > 7
  absl::Status st = queue_->Precheck(*late, &hint);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_GT(hint, absl::ZeroDuration());
  auto alone = Item(0, absl::Milliseconds(1));  // 2 ms alone > 1 ms
  st = queue_->Precheck(*alone, &hint);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_LT(hint, absl::ZeroDuration());
  auto fine = Item(0, absl::Milliseconds(9));
  EXPECT_TRUE(queue_->Precheck(*fine, &hint).ok());
  EXPECT_TRUE(queue_->Precheck(*fine, &hint).ok());  // nothing was reserved
  EXPECT_EQ(queue_->queued(), 3u);
  auto expired = Item(0, absl::Milliseconds(1));
  clock_.Advance(absl::Milliseconds(2));
  EXPECT_EQ(queue_->Precheck(*expired).code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace gemm
