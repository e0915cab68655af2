#include "service/batcher.h"

#include <atomic>
#include <deque>
#include <thread>

#include <gtest/gtest.h>

#include "absl/synchronization/notification.h"

namespace gemm {
namespace {

// An executor that holds each batch until the test finishes it, so that the
// test decides when the backend is busy.
class FakeExecutor : public Executor {
 public:
  explicit FakeExecutor(int slots) : slots_(slots) { info_.backend = "fake"; }

  const BackendInfo& info() const override { return info_; }
  int max_concurrent_batches() const override { return slots_; }
  void Execute(Batch batch) override {
    absl::MutexLock lock(&mu_);
    batches_.push_back(std::move(batch));
    dispatched_at_.push_back(absl::Now());
  }

  // Waits for the `n`-th batch (0-based) to arrive and returns its item count.
  size_t WaitBatch(size_t n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return batches_.size() > n; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout)) return 0;
    return batches_[n].items.size();
  }

  // Completes every item of batch `n` and reports the batch done.
  void Finish(size_t n) {
    Batch batch;
    {
      absl::MutexLock lock(&mu_);
      batch = std::move(batches_[n]);
    }
    for (auto& item : batch.items) item->Complete(absl::OkStatus());
    batch.on_done();
  }

  size_t batch_count() {
    absl::MutexLock lock(&mu_);
    return batches_.size();
  }
  const Batch& batch(size_t n) {
    absl::MutexLock lock(&mu_);
    return batches_[n];
  }
  absl::Time dispatched_at(size_t n) {
    absl::MutexLock lock(&mu_);
    return dispatched_at_[n];
  }

 private:
  const int slots_;
  BackendInfo info_;
  absl::Mutex mu_;
  std::deque<Batch> batches_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> dispatched_at_ ABSL_GUARDED_BY(mu_);
};

class BatcherTest : public ::testing::Test {
 protected:
  void Start(BatcherOptions options, int slots) {
    executor_ = std::make_unique<FakeExecutor>(slots);
    batcher_ = std::make_unique<Batcher>(options, &queue_, executor_.get(), &metrics_);
  }

  void TearDown() override {
    // Stop() waits for the batches in flight, and the batcher may still
    // dispatch one after the test's last look (a slow build shows it): keep
    // finishing whatever arrives until Stop() returns.
    std::atomic<bool> stopped{false};
    std::thread stopper([this, &stopped] {
      batcher_->Stop();
      stopped.store(true);
    });
    while (!stopped.load()) {
      for (size_t i = 0; i < executor_->batch_count(); ++i)
        if (executor_->batch(i).on_done) executor_->Finish(i);
      absl::SleepFor(absl::Milliseconds(1));
    }
    stopper.join();
  }

  std::shared_ptr<WorkItem> Push(uint64_t n, int priority = 0, double alpha = 1.0) {
    auto item = std::make_shared<WorkItem>();
    GemmProblemRef p;
    p.shape.m = p.shape.n = p.shape.k = n;
    p.shape.input_dtype = p.shape.output_dtype = DType::kBf16;
    p.alpha = alpha;
    item->problems.push_back(p);
    item->priority = priority;
    item->bytes = 3 * n * n * 2;
    item->done = [this](const absl::Status& s, const ExecutionReport&) {
      absl::MutexLock lock(&mu_);
      statuses_.push_back(s);
    };
    EXPECT_TRUE(queue_.Push(item).ok());
    return item;
  }

  // Declared first so that they outlive the queue, whose destructor completes
  // what is left in it.
  absl::Mutex mu_;
  std::vector<absl::Status> statuses_;
  RequestQueue queue_{RequestQueue::Options{}, Clock::Real()};
  ServiceMetrics metrics_;
  std::unique_ptr<FakeExecutor> executor_;
  std::unique_ptr<Batcher> batcher_;
};

TEST_F(BatcherTest, IdleBackendGetsARequestAtOnce) {
  BatcherOptions o;
  o.max_queue_delay = absl::Seconds(5);  // would be obvious if it lingered
  Start(o, 1);
  const absl::Time t0 = absl::Now();
  Push(64);
  EXPECT_EQ(executor_->WaitBatch(0), 1u);
  EXPECT_LT(executor_->dispatched_at(0) - t0, absl::Seconds(1));
}

TEST_F(BatcherTest, RequestsArrivingWhileBusyShareTheNextBatch) {
  BatcherOptions o;
  o.max_queue_delay = absl::Milliseconds(1);
  Start(o, 1);
  Push(64);
  ASSERT_EQ(executor_->WaitBatch(0), 1u);
  for (int i = 0; i < 10; ++i) Push(64);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(executor_->batch_count(), 1u) << "the only slot is busy";
  executor_->Finish(0);
  ASSERT_EQ(executor_->WaitBatch(1), 10u);
  // Ten identical problems: one strided-batched launch.
  const Batch& b = executor_->batch(1);
  ASSERT_EQ(b.launches.size(), 1u);
  EXPECT_EQ(b.launches[0].kind, LaunchGroup::Kind::kStridedBatched);
  EXPECT_EQ(b.launches[0].problems.size(), 10u);
}

// A request that arrives after the batch in flight finished finds the backend
// idle and goes at once, though the batcher began waiting while it was busy.
TEST_F(BatcherTest, IdlenessIsJudgedWhenTheRequestArrives) {
  BatcherOptions o;
  o.max_queue_delay = absl::Seconds(5);
  Start(o, 2);
  Push(64);
  ASSERT_EQ(executor_->WaitBatch(0), 1u);
  absl::SleepFor(absl::Milliseconds(20));  // the batcher now waits for work, busy
  executor_->Finish(0);
  const absl::Time t0 = absl::Now();
  Push(64);
  ASSERT_EQ(executor_->WaitBatch(1), 1u);
  EXPECT_LT(executor_->dispatched_at(1) - t0, absl::Seconds(1));
}

TEST_F(BatcherTest, LingersUpToTheDelayBoundWhenNotDispatchingIdle) {
  BatcherOptions o;
  o.dispatch_when_idle = false;
  o.max_queue_delay = absl::Milliseconds(40);
  Start(o, 1);
  const absl::Time t0 = absl::Now();
  Push(64);
  ASSERT_EQ(executor_->WaitBatch(0), 1u);
  const absl::Duration waited = executor_->dispatched_at(0) - t0;
  EXPECT_GE(waited, absl::Milliseconds(39));
  EXPECT_LT(waited, absl::Seconds(2));
}

TEST_F(BatcherTest, AFullBudgetEndsTheLingerEarly) {
  BatcherOptions o;
  o.dispatch_when_idle = false;
  o.max_queue_delay = absl::Seconds(2);
  o.budget.max_requests = 4;
  Start(o, 1);
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < 6; ++i) Push(32);
  ASSERT_EQ(executor_->WaitBatch(0), 4u);
  EXPECT_LT(executor_->dispatched_at(0) - t0, absl::Seconds(1));
}

TEST_F(BatcherTest, BudgetBoundsBatchSizeInRequestsAndFlops) {
  BatcherOptions o;
  o.budget.max_requests = 3;
  Start(o, 1);
  Push(8);
  ASSERT_EQ(executor_->WaitBatch(0), 1u);
  for (int i = 0; i < 7; ++i) Push(8);
  executor_->Finish(0);
  EXPECT_EQ(executor_->WaitBatch(1), 3u);
  executor_->Finish(1);
  EXPECT_EQ(executor_->WaitBatch(2), 3u);
  executor_->Finish(2);
  EXPECT_EQ(executor_->WaitBatch(3), 1u);
}

TEST_F(BatcherTest, ARequestLargerThanTheFlopBudgetStillRunsAlone) {
  BatcherOptions o;
  o.budget.max_flops = 1000;
  Start(o, 1);
  Push(256);
  EXPECT_EQ(executor_->WaitBatch(0), 1u);
}

TEST_F(BatcherTest, HigherPriorityFillsTheBatchFirst) {
  BatcherOptions o;
  o.budget.max_requests = 2;
  Start(o, 1);
  Push(8);
  ASSERT_EQ(executor_->WaitBatch(0), 1u);
  Push(8, /*priority=*/0, /*alpha=*/1);
  Push(8, 0, 2);
  Push(8, 5, 3);
  Push(8, 5, 4);
  executor_->Finish(0);
  ASSERT_EQ(executor_->WaitBatch(1), 2u);
  EXPECT_EQ(executor_->batch(1).items[0]->problems[0].alpha, 3);
  EXPECT_EQ(executor_->batch(1).items[1]->problems[0].alpha, 4);
  executor_->Finish(1);
  ASSERT_EQ(executor_->WaitBatch(2), 2u);
  EXPECT_EQ(executor_->batch(2).items[0]->problems[0].alpha, 1);
}

TEST_F(BatcherTest, CancelledRequestsNeverReachTheExecutor) {
  BatcherOptions o;
  Start(o, 1);
  Push(8);
  ASSERT_EQ(executor_->WaitBatch(0), 1u);
  auto a = Push(8, 0, 1);
  auto b = Push(8, 0, 2);
  b->cancelled.store(true);
  executor_->Finish(0);
  ASSERT_EQ(executor_->WaitBatch(1), 1u);
  EXPECT_EQ(executor_->batch(1).items[0].get(), a.get());
  absl::MutexLock lock(&mu_);
  int cancelled = 0;
  for (const absl::Status& s : statuses_) cancelled += absl::IsCancelled(s);
  EXPECT_EQ(cancelled, 1);
}

TEST_F(BatcherTest, KeepsAtMostTheExecutorsSlotsInFlight) {
  BatcherOptions o;
  o.budget.max_requests = 1;
  Start(o, 2);
  for (int i = 0; i < 5; ++i) Push(8);
  ASSERT_EQ(executor_->WaitBatch(1), 1u);
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(executor_->batch_count(), 2u);
  EXPECT_EQ(batcher_->in_flight(), 2);
  executor_->Finish(0);
  EXPECT_EQ(executor_->WaitBatch(2), 1u);
}

TEST(BatcherOptionsTest, ValidateNamesTheField) {
  BatcherOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.budget.max_requests = 0;
  EXPECT_NE(o.Validate().message().find("max_requests"), absl::string_view::npos);
  o = BatcherOptions();
  o.max_queue_delay = -absl::Milliseconds(1);
  EXPECT_NE(o.Validate().message().find("max_queue_delay"), absl::string_view::npos);
}

}  // namespace
}  // namespace gemm
