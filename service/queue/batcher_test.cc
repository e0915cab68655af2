#include "service/queue/batcher.h"

#include <algorithm>
#include <deque>
#include <thread>

#include <gtest/gtest.h>

#include "service/base/clock.h"

namespace gemm {
namespace {

// An executor that holds each batch until the test finishes it, so that the
// test decides when the backend is busy. Once told to (FinishAll), it also
// finishes every later batch as it arrives.
class FakeExecutor : public Executor {
 public:
  explicit FakeExecutor(int slots) : slots_(slots) { info_.backend = "fake"; }

  const BackendInfo& info() const override { return info_; }
  std::vector<PeakRate> peak_rates() const override { return {}; }
  int max_concurrent_batches() const override { return slots_; }
  absl::Duration PredictRunTime(const WorkItem&) const override { return predicted_; }
  void set_predicted(absl::Duration d) { predicted_ = d; }
  bool runs_batches_here() const override { return runs_here_; }
  void set_runs_here(bool runs_here) { runs_here_ = runs_here; }
  // Records the calling thread, then holds or finishes the batch as Execute.
  void ExecuteHere(Batch batch) override {
    {
      absl::MutexLock lock(&mu_);
      here_threads_.push_back(std::this_thread::get_id());
    }
    Execute(std::move(batch));
  }
  std::vector<std::thread::id> here_threads() {
    absl::MutexLock lock(&mu_);
    return here_threads_;
  }
  void Execute(Batch batch) override {
    {
      absl::MutexLock lock(&mu_);
      ++held_;
      most_held_ = std::max(most_held_, held_);
      batches_.push_back(std::move(batch));
      if (!finish_all_) return;
    }
    Finish(batch_count() - 1);
  }

  // Waits for the `n`-th batch (0-based) to arrive and returns its item count.
  size_t WaitBatch(size_t n, absl::Duration timeout = absl::Seconds(30)) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return batches_.size() > n; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout)) return 0;
    return batches_[n].items.size();
  }

  // Completes every item of batch `n` and reports the batch done; once only.
  void Finish(size_t n) {
    Batch batch;
    {
      absl::MutexLock lock(&mu_);
      if (!batches_[n].on_done) return;  // finished already
      batch.items = batches_[n].items;
      batch.on_done = std::move(batches_[n].on_done);
      batches_[n].on_done = nullptr;
      --held_;
    }
    for (auto& item : batch.items) item->Complete(absl::OkStatus());
    batch.on_done();
  }

  // Finishes every batch held now and every later one on arrival.
  void FinishAll() {
    size_t n;
    {
      absl::MutexLock lock(&mu_);
      finish_all_ = true;
      n = batches_.size();
    }
    for (size_t i = 0; i < n; ++i) Finish(i);
  }

  size_t batch_count() {
    absl::MutexLock lock(&mu_);
    return batches_.size();
  }
  const Batch& batch(size_t n) {
    absl::MutexLock lock(&mu_);
    return batches_[n];
  }
  // The most batches it ever held unfinished at once.
  int most_held() {
    absl::MutexLock lock(&mu_);
    return most_held_;
  }

 private:
  const int slots_;
  BackendInfo info_;
  absl::Duration predicted_;
  bool runs_here_ = true;
  std::vector<std::thread::id> here_threads_ ABSL_GUARDED_BY(mu_);
  absl::Mutex mu_;
  std::deque<Batch> batches_ ABSL_GUARDED_BY(mu_);
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  int most_held_ ABSL_GUARDED_BY(mu_) = 0;
  bool finish_all_ ABSL_GUARDED_BY(mu_) = false;
};

// Every wait of the batcher's queue runs on the fake clock, which moves only
// when a test advances it: a batch that lingered for the delay bound would
// never be dispatched, so a dispatch without Advance proves it did not wait,
// and no assertion depends on how fast the machine is.
class BatcherTest : public ::testing::Test {
 protected:
  void Start(BatcherOptions options, int slots) {
    executor_ = std::make_unique<FakeExecutor>(slots);
    batcher_ = std::make_unique<Batcher>(options, &queue_, executor_.get(), &metrics_);
  }

  void TearDown() override {
    // Stop() waits for the batches in flight: finish those and any later
    // one. Closing the queue ends the batcher's wait for work, which on the
    // fake clock would otherwise last until the clock moved.
    executor_->FinishAll();
    queue_.Close();
    batcher_->Stop();
  }

  // The deadline of the batcher's wait for a first request, when it began
  // that wait at the current fake time (Batcher::Run waits 50 ms at a time).
  absl::Time PollDeadline() const { return clock_.Now() + absl::Milliseconds(50); }

  // With the executor predicting `predicted` per request and finishing every
  // batch as it arrives: `requests` requests queued one at a time, each
  // followed by DispatchIfIdle as the service calls it, and each answered
  // before the next. Returns the threads ExecuteHere ran on.
  std::vector<std::thread::id> ArriveOneByOne(absl::Duration predicted, int requests) {
    executor_->set_predicted(predicted);
    executor_->FinishAll();
    for (int i = 0; i < requests; ++i) {
      Push(16);
      batcher_->DispatchIfIdle();
      // Finished by whichever thread dispatched it.
      EXPECT_EQ(executor_->WaitBatch(i), 1u) << i;
      auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return statuses_.size() == static_cast<size_t>(i + 1);
      };
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&answered));
    }
    return executor_->here_threads();
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
  FakeClock clock_;
  RequestQueue queue_{RequestQueue::Options{}, &clock_};
  ServiceMetrics metrics_;
  std::unique_ptr<FakeExecutor> executor_;
  std::unique_ptr<Batcher> batcher_;
};

TEST_F(BatcherTest, IdleBackendGetsARequestAtOnce) {
  BatcherOptions o;
  o.max_queue_delay = absl::Seconds(5);  // never reached: the clock stays put
  Start(o, 1);
  auto item = Push(64);
  EXPECT_EQ(executor_->WaitBatch(0), 1u);
  EXPECT_EQ(item->report.queue_wait, absl::ZeroDuration());
}

TEST_F(BatcherTest, RequestsArrivingWhileBusyShareTheNextBatch) {
  BatcherOptions o;
  o.max_queue_delay = absl::Milliseconds(1);
  Start(o, 1);
  Push(64);
  ASSERT_EQ(executor_->WaitBatch(0), 1u);
  for (int i = 0; i < 10; ++i) Push(64);
  EXPECT_EQ(executor_->batch_count(), 1u) << "the only slot is busy";
  executor_->Finish(0);
  // All ten in one batch: none left while the slot was busy.
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
  // The batcher now waits for work, with one batch in flight.
  ASSERT_TRUE(clock_.AwaitWaiter(PollDeadline()));
  executor_->Finish(0);
  Push(64);
  ASSERT_EQ(executor_->WaitBatch(1), 1u);  // without the clock moving
}

TEST_F(BatcherTest, LingersUpToTheDelayBoundWhenNotDispatchingIdle) {
  BatcherOptions o;
  o.dispatch_when_idle = false;
  o.max_queue_delay = absl::Milliseconds(40);
  Start(o, 1);
  const absl::Time t0 = clock_.Now();
  auto item = Push(64);
  // Lingering: waiting until 40 ms after the request was queued.
  ASSERT_TRUE(clock_.AwaitWaiter(t0 + absl::Milliseconds(40)));
  clock_.Advance(absl::Milliseconds(39));
  // Woken by the jump, it re-checks and waits for the rest.
  ASSERT_TRUE(clock_.AwaitWaiter(t0 + absl::Milliseconds(40)));
  EXPECT_EQ(executor_->batch_count(), 0u);
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_EQ(executor_->WaitBatch(0), 1u);
  EXPECT_EQ(item->report.queue_wait, absl::Milliseconds(40));
}

TEST_F(BatcherTest, AFullBudgetEndsTheLingerEarly) {
  BatcherOptions o;
  o.dispatch_when_idle = false;
  o.max_queue_delay = absl::Seconds(2);
  o.budget.max_requests = 4;
  Start(o, 1);
  for (int i = 0; i < 6; ++i) Push(32);
  ASSERT_EQ(executor_->WaitBatch(0), 4u);  // without the clock moving
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
  EXPECT_EQ(batcher_->in_flight(), 2);
  // Each finished batch lets exactly one more in.
  for (size_t n = 0; n < 3; ++n) {
    executor_->Finish(n);
    ASSERT_EQ(executor_->WaitBatch(n + 2), 1u);
  }
  EXPECT_EQ(executor_->batch_count(), 5u);
  EXPECT_EQ(executor_->most_held(), 2) << "more batches in flight than slots";
}

// Requests queued one at a time on an idle backend, each followed by
// DispatchIfIdle as the service calls it: every one runs exactly once, those
// dispatched on arrival on the calling thread, and never more batches at
// once than the executor's slots. The batching thread, woken by each push,
// races the caller for the request; the caller, already running, nearly
// always wins, so most go the short way.
TEST_F(BatcherTest, AnIdleBackendRunsAShortRequestOnTheThreadThatQueuedIt) {
  BatcherOptions o;
  o.run_on_arrival_max = absl::Milliseconds(1);
  Start(o, 1);
  constexpr int kRequests = 50;
  const std::vector<std::thread::id> here = ArriveOneByOne(absl::Microseconds(50), kRequests);
  EXPECT_EQ(executor_->batch_count(), static_cast<size_t>(kRequests));
  EXPECT_GT(here.size(), 0u) << "no request was dispatched on arrival";
  for (const std::thread::id& t : here) EXPECT_EQ(t, std::this_thread::get_id());
  EXPECT_EQ(executor_->most_held(), 1);
  EXPECT_EQ(batcher_->in_flight(), 0);
}

TEST_F(BatcherTest, ALongRequestIsDispatchedOnArrivalButRunsOnTheExecutorsThreads) {
  BatcherOptions o;
  o.run_on_arrival_max = absl::Milliseconds(1);
  Start(o, 1);
  EXPECT_TRUE(ArriveOneByOne(absl::Milliseconds(5), 20).empty());
}

TEST_F(BatcherTest, AnUnpredictedRequestIsNotRunOnTheThreadThatQueuedIt) {
  BatcherOptions o;
  o.run_on_arrival_max = absl::Milliseconds(1);
  Start(o, 1);
  EXPECT_TRUE(ArriveOneByOne(absl::ZeroDuration() /* nothing measured */, 20).empty());
}

TEST_F(BatcherTest, DispatchOnArrivalWaitsItsTurnBehindABusyBackend) {
  BatcherOptions o;
  o.max_queue_delay = absl::Seconds(5);  // never reached: the clock stays put
  Start(o, 1);
  executor_->set_predicted(absl::Microseconds(50));
  Push(8);
  ASSERT_EQ(executor_->WaitBatch(0), 1u);  // held: the backend is busy
  Push(8);
  batcher_->DispatchIfIdle();  // not idle: leaves it queued
  EXPECT_EQ(executor_->batch_count(), 1u);
  EXPECT_EQ(queue_.queued(), 1u);
  EXPECT_TRUE(executor_->here_threads().empty());
  // With the slot back, the batching thread takes it.
  executor_->Finish(0);
  EXPECT_EQ(executor_->WaitBatch(1), 1u);
  EXPECT_EQ(executor_->most_held(), 1);
}

TEST_F(BatcherTest, DispatchOnArrivalOffLeavesEverythingToTheBatchingThread) {
  BatcherOptions o;
  o.dispatch_on_arrival = false;
  Start(o, 1);
  EXPECT_TRUE(ArriveOneByOne(absl::Microseconds(50), 10).empty());
}

// An executor whose ExecuteHere only hands the batch over (the CUDA
// backend's) is left to the batching thread, as with the option off.
TEST_F(BatcherTest, AnExecutorThatDoesNotRunBatchesHereIsLeftToTheBatchingThread) {
  BatcherOptions o;
  o.run_on_arrival_max = absl::Milliseconds(1);
  Start(o, 1);
  executor_->set_runs_here(false);
  EXPECT_TRUE(ArriveOneByOne(absl::Microseconds(50), 10).empty());
  EXPECT_EQ(executor_->batch_count(), 10u);
}

TEST(BatcherOptionsTest, ValidateNamesTheField) {
  BatcherOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.budget.max_requests = 0;
  EXPECT_NE(o.Validate().message().find("max_requests"), absl::string_view::npos);
  o = BatcherOptions();
  o.max_queue_delay = -absl::Milliseconds(1);
  EXPECT_NE(o.Validate().message().find("max_queue_delay"), absl::string_view::npos);
  o = BatcherOptions();
  o.run_on_arrival_max = -absl::Milliseconds(1);
  EXPECT_NE(o.Validate().message().find("run_on_arrival_max"), absl::string_view::npos);
}

}  // namespace
}  // namespace gemm
