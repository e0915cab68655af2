#include "service/queue/request_queue.h"

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gemm {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Records how a test item was completed.
struct Outcome {
  absl::Mutex mu;
  int calls ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);

  int Calls() {
    absl::MutexLock lock(&mu);
    return calls;
  }
  absl::Status Status() {
    absl::MutexLock lock(&mu);
    return status;
  }
};

class RequestQueueTest : public ::testing::Test {
 protected:
  std::unique_ptr<RequestQueue> MakeQueue(uint32_t max_requests = 16,
                                          uint64_t max_bytes = 1 << 20) {
    return std::make_unique<RequestQueue>(RequestQueue::Options{max_requests, max_bytes}, &clock_);
  }

  // An item tagged by `priority` * 1000 + its serial number, so that pop
  // order can be read back.
  std::shared_ptr<WorkItem> Item(int priority = 0,
                                 absl::Time deadline = absl::InfiniteFuture(),
                                 uint64_t bytes = 0) {
    auto item = std::make_shared<WorkItem>();
    item->priority = priority;
    item->deadline = deadline;
    item->bytes = bytes;
    auto outcome = std::make_shared<Outcome>();
    outcomes_[item.get()] = outcome;
    item->done = [outcome](const absl::Status& s, const ExecutionReport&) {
      absl::MutexLock lock(&outcome->mu);
      ++outcome->calls;
      outcome->status = s;
    };
    return item;
  }

  Outcome& OutcomeOf(const std::shared_ptr<WorkItem>& item) { return *outcomes_.at(item.get()); }

  // Pops everything that is ready now, without waiting.
  std::vector<std::shared_ptr<WorkItem>> Drain(RequestQueue& q) {
    return q.Pop(1000, absl::ZeroDuration());
  }

  FakeClock clock_;
  std::map<WorkItem*, std::shared_ptr<Outcome>> outcomes_;
};

TEST_F(RequestQueueTest, HigherPriorityLeavesFirst) {
  auto q = MakeQueue();
  auto low = Item(0), high = Item(5), mid = Item(1), negative = Item(-2);
  for (auto& item : {low, high, mid, negative}) ASSERT_TRUE(q->Push(item).ok());
  EXPECT_THAT(Drain(*q), ElementsAre(high, mid, low, negative));
}

TEST_F(RequestQueueTest, EarliestDeadlineFirstWithinAPriority) {
  auto q = MakeQueue();
  const absl::Time now = clock_.Now();
  auto none = Item(0, absl::InfiniteFuture());
  auto late = Item(0, now + absl::Seconds(30));
  auto soon = Item(0, now + absl::Seconds(1));
  auto urgent_but_low = Item(-1, now + absl::Milliseconds(10));
  for (auto& item : {none, late, urgent_but_low, soon}) ASSERT_TRUE(q->Push(item).ok());
  EXPECT_THAT(Drain(*q), ElementsAre(soon, late, none, urgent_but_low));
}

TEST_F(RequestQueueTest, FirstComeFirstServedOnTies) {
  auto q = MakeQueue();
  const absl::Time deadline = clock_.Now() + absl::Seconds(5);
  std::vector<std::shared_ptr<WorkItem>> items;
  for (int i = 0; i < 6; ++i) {
    items.push_back(Item(2, deadline));
    ASSERT_TRUE(q->Push(items.back()).ok());
  }
  EXPECT_EQ(Drain(*q), items);
}

TEST_F(RequestQueueTest, PopReturnsAtMostMaxItemsInOrder) {
  auto q = MakeQueue();
  auto a = Item(3), b = Item(2), c = Item(1);
  for (auto& item : {c, a, b}) ASSERT_TRUE(q->Push(item).ok());
  EXPECT_THAT(q->Pop(2, absl::ZeroDuration()), ElementsAre(a, b));
  EXPECT_EQ(q->queued(), 1u);
  EXPECT_THAT(q->Pop(2, absl::ZeroDuration()), ElementsAre(c));
}

TEST_F(RequestQueueTest, FullQueueRejectsAtOnceWithResourceExhausted) {
  auto q = MakeQueue(/*max_requests=*/2);
  ASSERT_TRUE(q->Push(Item()).ok());
  ASSERT_TRUE(q->Push(Item()).ok());
  auto rejected = Item();
  // Push has no timed wait: it answers on the calling thread at once.
  const absl::Status st = q->Push(rejected);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  // A rejected item is answered by the caller, not completed by the queue.
  EXPECT_EQ(OutcomeOf(rejected).Calls(), 0);
  EXPECT_EQ(q->queued(), 2u);
  // Popping one makes room again.
  ASSERT_EQ(q->Pop(1, absl::ZeroDuration()).size(), 1u);
  EXPECT_TRUE(q->Push(Item()).ok());
}

TEST_F(RequestQueueTest, ByteBudgetRejectsAndIsReleasedOnCompletion) {
  auto q = MakeQueue(16, /*max_bytes=*/100);
  auto first = Item(0, absl::InfiniteFuture(), 60);
  ASSERT_TRUE(q->Push(first).ok());
  EXPECT_EQ(q->inflight_bytes(), 60u);

  const absl::Status over = q->Push(Item(0, absl::InfiniteFuture(), 50));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_EQ(q->inflight_bytes(), 60u);
  ASSERT_TRUE(q->Push(Item(0, absl::InfiniteFuture(), 40)).ok());  // exactly full
  EXPECT_EQ(q->inflight_bytes(), 100u);

  // Bytes stay counted while the item runs, until it completes.
  auto popped = q->Pop(1, absl::ZeroDuration());
  ASSERT_THAT(popped, ElementsAre(first));
  EXPECT_EQ(q->inflight_bytes(), 100u);
  first->Complete(absl::OkStatus());
  EXPECT_EQ(q->inflight_bytes(), 40u);
  EXPECT_EQ(OutcomeOf(first).Calls(), 1);
  EXPECT_TRUE(OutcomeOf(first).Status().ok());
  // A second Complete neither calls `done` again nor releases twice.
  first->Complete(absl::InternalError("again"));
  EXPECT_EQ(OutcomeOf(first).Calls(), 1);
  EXPECT_EQ(q->inflight_bytes(), 40u);

  EXPECT_TRUE(q->Push(Item(0, absl::InfiniteFuture(), 50)).ok());
  EXPECT_EQ(q->inflight_bytes(), 90u);
}

TEST_F(RequestQueueTest, InflightHighWaterIsThePeakOfAdmittedBytes) {
  auto q = MakeQueue(16, /*max_bytes=*/100);
  EXPECT_EQ(q->inflight_bytes_high_water(), 0u);
  auto first = Item(0, absl::InfiniteFuture(), 60);
  ASSERT_TRUE(q->Push(first).ok());
  ASSERT_TRUE(q->Push(Item(0, absl::InfiniteFuture(), 30)).ok());
  EXPECT_FALSE(q->Push(Item(0, absl::InfiniteFuture(), 20)).ok());  // refused: not counted
  EXPECT_EQ(q->inflight_bytes_high_water(), 90u);
  ASSERT_EQ(q->Pop(1, absl::ZeroDuration()).size(), 1u);
  first->Complete(absl::OkStatus());
  EXPECT_EQ(q->inflight_bytes(), 30u);
  EXPECT_EQ(q->inflight_bytes_high_water(), 90u);  // a peak stays
  ASSERT_TRUE(q->Push(Item(0, absl::InfiniteFuture(), 70)).ok());
  EXPECT_EQ(q->inflight_bytes_high_water(), 100u);
}

TEST_F(RequestQueueTest, ItemLargerThanTheWholeBudgetIsRejected) {
  auto q = MakeQueue(16, /*max_bytes=*/100);
  const absl::Status st = q->Push(Item(0, absl::InfiniteFuture(), 101));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(q->inflight_bytes(), 0u);
}

TEST_F(RequestQueueTest, CancelCompletesAQueuedItemOnceWithCancelled) {
  auto q = MakeQueue(16, 1000);
  auto keep = Item(0, absl::InfiniteFuture(), 10);
  auto cancel = Item(0, absl::InfiniteFuture(), 20);
  ASSERT_TRUE(q->Push(keep).ok());
  ASSERT_TRUE(q->Push(cancel).ok());
  cancel->cancelled.store(true);
  q->Cancel(cancel.get());
  EXPECT_EQ(OutcomeOf(cancel).Calls(), 1);
  EXPECT_EQ(OutcomeOf(cancel).Status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(q->queued(), 1u);
  EXPECT_EQ(q->inflight_bytes(), 10u);
  q->Cancel(cancel.get());  // again: nothing happens
  EXPECT_EQ(OutcomeOf(cancel).Calls(), 1);
  EXPECT_THAT(Drain(*q), ElementsAre(keep));
  EXPECT_EQ(OutcomeOf(cancel).Calls(), 1);
}

TEST_F(RequestQueueTest, CancelOfAPoppedItemLeavesItToTheExecutor) {
  auto q = MakeQueue();
  auto item = Item();
  ASSERT_TRUE(q->Push(item).ok());
  ASSERT_THAT(Drain(*q), ElementsAre(item));
  item->cancelled.store(true);
  q->Cancel(item.get());
  EXPECT_EQ(OutcomeOf(item).Calls(), 0);
}

TEST_F(RequestQueueTest, CancelledFlagAloneDropsTheItemAtPop) {
  auto q = MakeQueue();
  auto item = Item(), other = Item();
  ASSERT_TRUE(q->Push(item).ok());
  ASSERT_TRUE(q->Push(other).ok());
  item->cancelled.store(true);
  EXPECT_THAT(Drain(*q), ElementsAre(other));
  EXPECT_EQ(OutcomeOf(item).Calls(), 1);
  EXPECT_EQ(OutcomeOf(item).Status().code(), absl::StatusCode::kCancelled);
}

TEST_F(RequestQueueTest, ExpiredItemIsCompletedDeadlineExceededAndNeverPopped) {
  auto q = MakeQueue(16, 1000);
  auto expiring = Item(5, clock_.Now() + absl::Seconds(1), 30);
  auto patient = Item(0, absl::InfiniteFuture(), 5);
  ASSERT_TRUE(q->Push(expiring).ok());
  ASSERT_TRUE(q->Push(patient).ok());
  clock_.Advance(absl::Seconds(2));
  EXPECT_THAT(Drain(*q), ElementsAre(patient));
  EXPECT_EQ(OutcomeOf(expiring).Calls(), 1);
  EXPECT_EQ(OutcomeOf(expiring).Status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(q->inflight_bytes(), 5u);
  EXPECT_THAT(Drain(*q), IsEmpty());
  EXPECT_EQ(OutcomeOf(expiring).Calls(), 1);
}

TEST_F(RequestQueueTest, CancelAfterTheDeadlineReportsDeadlineExceeded) {
  auto q = MakeQueue();
  auto item = Item(0, clock_.Now() + absl::Milliseconds(100));
  ASSERT_TRUE(q->Push(item).ok());
  clock_.Advance(absl::Milliseconds(100));
  item->cancelled.store(true);
  q->Cancel(item.get());
  EXPECT_EQ(OutcomeOf(item).Status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(RequestQueueTest, PushAfterTheDeadlineIsRejected) {
  auto q = MakeQueue();
  auto item = Item(0, clock_.Now());
  const absl::Status st = q->Push(item);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_EQ(OutcomeOf(item).Calls(), 0);
  EXPECT_EQ(q->queued(), 0u);
}

TEST_F(RequestQueueTest, CloseRefusesPushesButQueuedItemsStillPop) {
  auto q = MakeQueue();
  auto a = Item(), b = Item();
  ASSERT_TRUE(q->Push(a).ok());
  ASSERT_TRUE(q->Push(b).ok());
  q->Close();
  auto late = Item();
  EXPECT_EQ(q->Push(late).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(OutcomeOf(late).Calls(), 0);
  EXPECT_THAT(q->Pop(1, absl::Seconds(10)), ElementsAre(a));
  EXPECT_THAT(q->Pop(1, absl::Seconds(10)), ElementsAre(b));
  // Closed and empty: Pop does not wait (on the fake clock, which never
  // moves here, a wait would never end).
  EXPECT_THAT(q->Pop(1, absl::Seconds(10)), IsEmpty());
  EXPECT_EQ(clock_.waiters(), 0);
}

TEST_F(RequestQueueTest, AbandonCompletesEveryQueuedItem) {
  auto q = MakeQueue(16, 1000);
  std::vector<std::shared_ptr<WorkItem>> items;
  for (int i = 0; i < 4; ++i) {
    items.push_back(Item(i, absl::InfiniteFuture(), 10));
    ASSERT_TRUE(q->Push(items.back()).ok());
  }
  q->Abandon(absl::UnavailableError("going away"));
  EXPECT_EQ(q->queued(), 0u);
  EXPECT_EQ(q->inflight_bytes(), 0u);
  for (auto& item : items) {
    EXPECT_EQ(OutcomeOf(item).Calls(), 1);
    EXPECT_EQ(OutcomeOf(item).Status().code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_THAT(Drain(*q), IsEmpty());
}

TEST_F(RequestQueueTest, DestructionAnswersWhatIsStillQueued) {
  auto q = MakeQueue();
  auto item = Item();
  ASSERT_TRUE(q->Push(item).ok());
  q.reset();
  EXPECT_EQ(OutcomeOf(item).Calls(), 1);
  EXPECT_EQ(OutcomeOf(item).Status().code(), absl::StatusCode::kUnavailable);
}

// Pop's wait runs on the injected clock: it ends when that clock reaches
// the deadline, not before.
TEST_F(RequestQueueTest, PopTimesOutEmpty) {
  auto q = MakeQueue();
  const absl::Time deadline = clock_.Now() + absl::Milliseconds(30);
  absl::Notification returned;
  std::vector<std::shared_ptr<WorkItem>> got{Item()};
  std::thread popper([&] {
    got = q->Pop(4, absl::Milliseconds(30));
    returned.Notify();
  });
  ASSERT_TRUE(clock_.AwaitWaiter(deadline));
  clock_.Advance(absl::Milliseconds(29));
  // Woken by the jump, it re-checks and waits again for the rest.
  ASSERT_TRUE(clock_.AwaitWaiter(deadline));
  EXPECT_FALSE(returned.HasBeenNotified());
  clock_.Advance(absl::Milliseconds(1));
  popper.join();
  EXPECT_THAT(got, IsEmpty());
}

TEST_F(RequestQueueTest, PopWakesWhenAnItemArrives) {
  auto q = MakeQueue();
  auto item = Item();
  std::vector<std::shared_ptr<WorkItem>> got;
  const absl::Time deadline = clock_.Now() + absl::Seconds(10);
  std::thread popper([&] { got = q->Pop(1, absl::Seconds(10)); });
  ASSERT_TRUE(clock_.AwaitWaiter(deadline));  // blocked in Pop
  ASSERT_TRUE(q->Push(item).ok());
  popper.join();  // without the clock moving
  EXPECT_THAT(got, ElementsAre(item));
}

TEST_F(RequestQueueTest, CloseWakesAWaitingPop) {
  auto q = MakeQueue();
  std::vector<std::shared_ptr<WorkItem>> got{Item()};
  const absl::Time deadline = clock_.Now() + absl::Seconds(10);
  std::thread popper([&] { got = q->Pop(1, absl::Seconds(10)); });
  ASSERT_TRUE(clock_.AwaitWaiter(deadline));
  q->Close();
  popper.join();  // without the clock moving
  EXPECT_THAT(got, IsEmpty());
}

TEST_F(RequestQueueTest, QueueWaitIsMeasuredOnTheInjectedClock) {
  auto q = MakeQueue();
  auto item = Item();
  ASSERT_TRUE(q->Push(item).ok());
  EXPECT_EQ(item->enqueued, clock_.Now());
  clock_.Advance(absl::Milliseconds(250));
  ASSERT_THAT(Drain(*q), ElementsAre(item));
  EXPECT_EQ(item->report.queue_wait, absl::Milliseconds(250));
}

TEST_F(RequestQueueTest, RetryHintStaysWithinBounds) {
  auto q = MakeQueue(64);
  auto in_bounds = [&] {
    const absl::Duration hint = q->RetryHint();
    EXPECT_GE(hint, absl::Milliseconds(1));
    EXPECT_LE(hint, absl::Seconds(5));
  };
  in_bounds();
  // A very slow service (a pop every 100 s) with a full queue: capped.
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(q->Push(Item()).ok());
  for (int i = 0; i < 40; ++i) {
    clock_.Advance(absl::Seconds(100));
    ASSERT_EQ(q->Pop(1, absl::ZeroDuration()).size(), 1u);
    ASSERT_TRUE(q->Push(Item()).ok());
    in_bounds();
  }
  EXPECT_EQ(q->RetryHint(), absl::Seconds(5));
  // A very fast one (many pops at the same instant): floored.
  q->Abandon(absl::CancelledError("reset"));
  // The rate is smoothed, so it takes a few hundred pops to forget the slow
  // past.
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(q->Push(Item()).ok());
    ASSERT_EQ(q->Pop(1, absl::ZeroDuration()).size(), 1u);
    in_bounds();
  }
  EXPECT_EQ(q->RetryHint(), absl::Milliseconds(1));
}

TEST_F(RequestQueueTest, ConcurrentPushersAndPoppersCompleteEverything) {
  auto q = MakeQueue(/*max_requests=*/1000, /*max_bytes=*/1 << 20);
  constexpr int kPushers = 4, kPerPusher = 200;
  std::vector<std::vector<std::shared_ptr<WorkItem>>> items(kPushers);
  for (int t = 0; t < kPushers; ++t)
    for (int i = 0; i < kPerPusher; ++i) items[t].push_back(Item(i % 3, absl::InfiniteFuture(), 8));
  std::atomic<int> popped{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      // An unbounded Pop returns none only once the queue is closed and empty.
      while (true) {
        auto got = q->Pop(3, absl::InfiniteDuration());
        if (got.empty()) break;
        for (auto& item : got) {
          item->Complete(absl::OkStatus());
          popped.fetch_add(1);
        }
      }
    });
  }
  std::vector<std::thread> pushers;
  for (int t = 0; t < kPushers; ++t) {
    pushers.emplace_back([&, t] {
      for (auto& item : items[t]) {
        if (item.get() == items[t][kPerPusher / 2].get()) item->cancelled.store(true);
        ASSERT_TRUE(q->Push(item).ok());
      }
    });
  }
  for (auto& t : pushers) t.join();
  q->Close();  // the poppers drain what is left, then stop
  for (auto& t : threads) t.join();
  EXPECT_EQ(q->queued(), 0u);
  int completed = 0;
  for (auto& per : items)
    for (auto& item : per) {
      EXPECT_EQ(OutcomeOf(item).Calls(), 1);
      completed += OutcomeOf(item).Calls();
    }
  EXPECT_EQ(completed, kPushers * kPerPusher);
  EXPECT_EQ(q->inflight_bytes(), 0u);
}

// A client that floods the queue does not starve another: same priority and
// deadline, the requests interleave by client.
TEST(RequestQueueFairnessTest, ClientsInterleaveWithinAPriority) {
  FakeClock clock;
  RequestQueue queue(RequestQueue::Options{}, &clock);
  std::vector<std::string> order;
  auto push = [&](const std::string& client, int n) {
    for (int i = 0; i < n; ++i) {
      auto item = std::make_shared<WorkItem>();
      item->client = client;
      item->bytes = 1;
      item->done = [](const absl::Status&, const ExecutionReport&) {};
      item->problems.emplace_back();
      ASSERT_TRUE(queue.Push(item).ok());
    }
  };
  push("flood", 5);
  push("other", 2);
  for (const auto& item : queue.Pop(10, absl::ZeroDuration())) order.push_back(item->client);
  EXPECT_EQ(order, (std::vector<std::string>{"flood", "other", "flood", "other", "flood", "flood",
                                             "flood"}));
}

// Two clients that each keep requests queued, one replacing each of its
// requests as it is taken: both are served alike, each in the order it sent.
// (A client whose queue runs short must not gain rounds over one whose
// requests were queued when it had many.)
TEST(RequestQueueFairnessTest, ClientsThatKeepTheQueueFullAreServedAlikeAndInOrder) {
  FakeClock clock;
  RequestQueue queue(RequestQueue::Options{}, &clock);
  std::map<std::string, int> sent, served;
  std::map<WorkItem*, std::pair<std::string, int>> tags;
  auto push = [&](const std::string& client) {
    auto item = std::make_shared<WorkItem>();
    item->client = client;
    item->bytes = 1;
    item->done = [](const absl::Status&, const ExecutionReport&) {};
    item->problems.emplace_back();
    tags[item.get()] = {client, sent[client]++};
    ASSERT_TRUE(queue.Push(item).ok());
  };
  // "deep" starts with 32 queued, "shallow" with 2; each pop of either is
  // replaced by a new request of the same client.
  for (int i = 0; i < 32; ++i) push("deep");
  for (int i = 0; i < 2; ++i) push("shallow");
  std::map<std::string, int> last = {{"deep", -1}, {"shallow", -1}};
  for (int i = 0; i < 2000; ++i) {
    auto popped = queue.Pop(1, absl::ZeroDuration());
    ASSERT_EQ(popped.size(), 1u);
    const auto [client, number] = tags[popped[0].get()];
    EXPECT_GT(number, last[client]) << client << " served out of order";
    last[client] = number;
    ++served[client];
    popped[0]->Complete(absl::OkStatus());
    push(client);
  }
  EXPECT_NEAR(served["deep"], 1000, 20);
  EXPECT_NEAR(served["shallow"], 1000, 20);
}

}  // namespace
}  // namespace gemm
