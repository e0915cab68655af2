// Tenants in the queue (RequestQueue with Options::tenants): weighted fair
// queueing on predicted device time and per-tenant limits, on a fake clock.
// The executor is simulated: one item at a time, each running for exactly
// its predicted time, FLOPs at 1e12 FLOP/s (a 1000 x 1000 x k problem takes
// 2k microseconds).
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/cord.h"
#include "absl/time/time.h"
#include "service/base/limits.h"
#include "service/queue/request_queue.h"
#include "service/queue/tenants.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

constexpr double kRate = 1e12;  // FLOP/s of the simulated executor

class TenantQueueTest : public ::testing::Test {
 protected:
  void MakeQueue(absl::string_view tenants, uint32_t max_queued = 100000) {
    auto config = TenantsConfig::Parse(tenants, "test");
    ASSERT_TRUE(config.ok()) << config.status();
    RequestQueue::Options o;
    o.max_queued_requests = max_queued;
    o.max_inflight_bytes = uint64_t{1} << 40;
    o.predict_run_time = [](const WorkItem& item) { return absl::Seconds(item.flops() / kRate); };
    o.tenants = std::make_shared<const TenantsConfig>(*std::move(config));
    queue_ = std::make_unique<RequestQueue>(o, &clock_);
  }

  // An item of one 1000 x 1000 x k problem from `client`: 2k us of device
  // time.
  std::shared_ptr<WorkItem> Item(const std::string& client, uint64_t k = 1000,
                                 uint64_t bytes = 1) {
    auto item = std::make_shared<WorkItem>();
    GemmProblemRef p;
    p.shape.m = p.shape.n = 1000;
    p.shape.k = k;
    p.shape.input_dtype = p.shape.output_dtype = DType::kBf16;
    item->problems.push_back(p);
    item->client = client;
    item->bytes = bytes;
    item->done = [](const absl::Status&, const ExecutionReport&) {};
    return item;
  }

  // Pushes an item that must be admitted.
  void Push(std::shared_ptr<WorkItem> item) {
    absl::Status st = queue_->Push(std::move(item));
    ASSERT_TRUE(st.ok()) << st;
  }

  // Runs the next queued item to completion: pops it, advances the clock by
  // its predicted time, completes it. Returns it (null when none is queued).
  std::shared_ptr<WorkItem> RunOne() {
    auto popped = queue_->Pop(1, absl::ZeroDuration());
    if (popped.empty()) return nullptr;
    const absl::Duration run = absl::Seconds(popped[0]->flops() / kRate);
    clock_.Advance(run);
    device_time_[queue_->TenantOf(popped[0]->client)] += run;
    popped[0]->Complete(absl::OkStatus());
    return popped[0];
  }

  // Device time each tenant had since the last call, as fractions.
  std::map<std::string, double> Shares() {
    absl::Duration total;
    for (const auto& [name, t] : device_time_) total += t;
    std::map<std::string, double> shares;
    for (const auto& [name, t] : device_time_) shares[name] = absl::FDivDuration(t, total);
    device_time_.clear();
    return shares;
  }

  // Keeps every tenant of `weights` backlogged (each of its own caller)
  // with mixed sizes while `runs` items run; returns the shares of device
  // time.
  std::map<std::string, double> Backlogged(const std::map<std::string, double>& weights,
                                           int runs) {
    static constexpr uint64_t kSizes[] = {250, 1000, 4000, 500, 2000, 8000, 125};
    std::map<std::string, int> next;  // index into kSizes, per tenant
    auto refill = [&](const std::string& name) {
      const int i = next[name]++;
      Push(Item(name, kSizes[(i + name.size()) % 7]));
    };
    for (const auto& [name, w] : weights)
      for (int i = 0; i < 4; ++i) refill(name);
    for (int i = 0; i < runs; ++i) {
      auto item = RunOne();
      if (item == nullptr) break;
      refill(item->client);
    }
    return Shares();
  }

  FakeClock clock_;
  std::unique_ptr<RequestQueue> queue_;
  std::map<std::string, absl::Duration> device_time_;
};

// Each tenant's share of device time is within 5% (relative) of its weight's.
void ExpectShares(const std::map<std::string, double>& shares,
                  const std::map<std::string, double>& weights) {
  double sum = 0;
  for (const auto& [name, w] : weights) sum += w;
  for (const auto& [name, w] : weights) {
    const double want = w / sum;
    ASSERT_TRUE(shares.count(name)) << name << " got no device time";
    EXPECT_NEAR(shares.at(name), want, 0.05 * want) << name;
  }
}

TEST_F(TenantQueueTest, TwoBackloggedTenantsShareByWeight) {
  MakeQueue("tenant a weight=3\ntenant b weight=1\n");
  ExpectShares(Backlogged({{"a", 3}, {"b", 1}}, 2000), {{"a", 3}, {"b", 1}});
}

TEST_F(TenantQueueTest, ThreeBackloggedTenantsShareByWeight) {
  MakeQueue("tenant a weight=5\ntenant b weight=2\ntenant c weight=1\n");
  const std::map<std::string, double> weights = {{"a", 5}, {"b", 2}, {"c", 1}};
  ExpectShares(Backlogged(weights, 3000), weights);
}

TEST_F(TenantQueueTest, FourBackloggedTenantsShareByWeight) {
  MakeQueue(
      "tenant a weight=4\ntenant b weight=3\ntenant c weight=2\ntenant d weight=1\n"
      "default d\n");
  const std::map<std::string, double> weights = {{"a", 4}, {"b", 3}, {"c", 2}, {"d", 1}};
  ExpectShares(Backlogged(weights, 4000), weights);
}

TEST_F(TenantQueueTest, SharesHoldOverShortWindowsToo) {
  MakeQueue("tenant a weight=3\ntenant b weight=1\n");
  Backlogged({{"a", 3}, {"b", 1}}, 100);
  // Each further window of 1000 items (about 4 s of device time) is fair
  // on its own.
  for (int window = 0; window < 3; ++window) {
    auto shares = Backlogged({{"a", 3}, {"b", 1}}, 1000);
    ExpectShares(shares, {{"a", 3}, {"b", 1}});
  }
}

TEST_F(TenantQueueTest, ATenantOfManyCallersGetsItsWeightNotItsCallerCount) {
  MakeQueue(
      "tenant a weight=1 caller=a1 caller=a2 caller=a3 caller=a4 caller=a5 caller=a6\n"
      "tenant b weight=1\n");
  for (int i = 0; i < 2000; ++i) {
    for (int c = 1; c <= 6; ++c) Push(Item("a" + std::to_string(c)));
  }
  for (int i = 0; i < 2000; ++i) Push(Item("b"));
  for (int i = 0; i < 4000; ++i) RunOne();
  ExpectShares(Shares(), {{"a", 1}, {"b", 1}});
}

TEST_F(TenantQueueTest, AnIdleTenantsShareGoesToTheOthersAndEarnsNoCredit) {
  MakeQueue("tenant a weight=3\ntenant b weight=1\n");
  ExpectShares(Backlogged({{"a", 3}, {"b", 1}}, 400), {{"a", 3}, {"b", 1}});

  // b stops sending: once its queue is empty, a has the whole device and
  // the device never waits while a has work.
  for (int i = 0; i < 4; ++i) Push(Item("a"));
  const absl::Time start = clock_.Now();
  int runs = 0;
  while (RunOne() != nullptr) ++runs;
  EXPECT_GT(runs, 4);
  const absl::Duration a_time = device_time_["a"];
  EXPECT_GT(a_time, absl::ZeroDuration());
  absl::Duration busy;
  for (const auto& [name, t] : device_time_) busy += t;
  EXPECT_EQ(busy, clock_.Now() - start);  // work conserving: no idle gap
  Shares();

  // a keeps the device alone for a long while...
  for (int i = 0; i < 500; ++i) Push(Item("a"));
  for (int i = 0; i < 400; ++i) RunOne();
  EXPECT_DOUBLE_EQ(Shares()["a"], 1.0);
  // ...and b, back, gets its weight's share from then on, not a catch-up
  // burst for the time it was idle.
  for (int i = 0; i < 100; ++i) Push(Item("b"));
  for (int i = 0; i < 100; ++i) RunOne();
  auto shares = Shares();
  EXPECT_NEAR(shares["b"], 0.25, 0.0125);
  EXPECT_NEAR(shares["a"], 0.75, 0.0375);
}

// A heavy tenant floods with 8 ms items while a light one sends a 0.5 ms
// item every 10 ms: the light one waits at most for the heavy item that is
// running, never for the heavy backlog.
TEST_F(TenantQueueTest, ALightTenantsWaitIsBoundedWhileAHeavyOneFloods) {
  MakeQueue("tenant heavy weight=1\ntenant light weight=1\n");
  for (int i = 0; i < 500; ++i) Push(Item("heavy", 4000));  // 8 ms each
  const absl::Duration kHeavy = absl::Milliseconds(8), kLight = absl::Microseconds(500);
  const absl::Duration kEvery = absl::Milliseconds(10);
  absl::Time next_arrival = clock_.Now() + absl::Milliseconds(3);
  absl::Time busy_until = clock_.Now();
  std::shared_ptr<WorkItem> running;
  std::vector<absl::Duration> waits;
  while (waits.size() < 200) {
    if (running == nullptr) {
      auto popped = queue_->Pop(1, absl::ZeroDuration());
      ASSERT_FALSE(popped.empty());
      running = popped[0];
      if (running->client == "light") waits.push_back(running->report.queue_wait);
      busy_until = clock_.Now() + absl::Seconds(running->flops() / kRate);
    }
    if (next_arrival < busy_until) {
      clock_.Advance(next_arrival - clock_.Now());
      Push(Item("light", 250));  // 0.5 ms
      next_arrival += kEvery;
    } else {
      clock_.Advance(busy_until - clock_.Now());
      running->Complete(absl::OkStatus());
      running = nullptr;
    }
  }
  std::sort(waits.begin(), waits.end());
  const absl::Duration p99 = waits[waits.size() * 99 / 100];
  EXPECT_LE(p99, kHeavy) << "p99 " << p99;
  EXPECT_LE(waits.back(), kHeavy + kLight) << "max " << waits.back();
  // The heavy tenant still has all the device the light one leaves.
  EXPECT_GT(queue_->queued(), 0u);
}

TEST_F(TenantQueueTest, PrioritiesStillOrderWithinATenant) {
  MakeQueue("tenant a\ntenant b\n");
  auto low = Item("a"), high = Item("a");
  high->priority = 5;
  Push(low);
  Push(high);
  Push(Item("b"));
  auto first = RunOne();
  EXPECT_EQ(first, high);
}

TEST_F(TenantQueueTest, AdmissionCountsOtherTenantsWorkByVirtualTime) {
  MakeQueue("tenant a\ntenant b\n");
  for (int i = 0; i < 10; ++i) Push(Item("a"));  // 2 ms each, 20 ms in all
  // b's one item runs after at most one of a's: it makes a 5 ms deadline.
  auto b = Item("b");
  b->deadline = clock_.Now() + absl::Milliseconds(5);
  EXPECT_TRUE(queue_->Push(b).ok());
  // An item of a ranked after a's backlog waits for all of it and for b's
  // item too: 20 + 2 + its own 2 ms.
  auto late = Item("a");
  late->priority = -1;
  late->deadline = clock_.Now() + absl::Milliseconds(23);
  absl::Status st = queue_->Push(late);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  auto in_time = Item("a");
  in_time->priority = -1;
  in_time->deadline = clock_.Now() + absl::Milliseconds(25);
  EXPECT_TRUE(queue_->Push(in_time).ok());
}

absl::string_view LimitOf(const absl::Status& st) {
  static std::string limit;
  auto payload = st.GetPayload(kLimitPayloadUrl);
  limit = payload.has_value() ? std::string(*payload) : "";
  return limit;
}

TEST_F(TenantQueueTest, RequestsInFlightAreLimitedPerTenant) {
  MakeQueue("tenant a max_requests_in_flight=2\ntenant b\n");
  Push(Item("a"));
  Push(Item("a"));
  absl::Duration hint;
  absl::Status st = queue_->Push(Item("a"), &hint);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("tenant a has 2 requests in flight"));
  EXPECT_THAT(st.message(), HasSubstr("max_requests_in_flight"));
  EXPECT_EQ(LimitOf(st), "tenant.max_requests_in_flight");
  EXPECT_GT(hint, absl::ZeroDuration());
  EXPECT_TRUE(queue_->Precheck(*Item("b")).ok());
  for (int i = 0; i < 5; ++i) Push(Item("b"));  // b is not limited
  // Popped but running still counts; completed does not.
  auto popped = queue_->Pop(1, absl::ZeroDuration());
  ASSERT_EQ(popped.size(), 1u);
  ASSERT_EQ(popped[0]->client, "a");
  EXPECT_EQ(queue_->Push(Item("a")).code(), absl::StatusCode::kResourceExhausted);
  popped[0]->Complete(absl::OkStatus());
  Push(Item("a"));
}

TEST_F(TenantQueueTest, InflightBytesAreLimitedPerTenant) {
  MakeQueue("tenant a max_inflight_bytes=1000\ntenant b\n");
  Push(Item("a", 1000, 600));
  absl::Duration hint;
  absl::Status st = queue_->Push(Item("a", 1000, 600), &hint);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("tenant a holds 600 of its 1000 max_inflight_bytes"));
  EXPECT_EQ(LimitOf(st), "tenant.max_inflight_bytes");
  EXPECT_GT(hint, absl::ZeroDuration());
  // Larger than the limit: retrying cannot help.
  st = queue_->Push(Item("a", 1000, 2000), &hint);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("more than tenant a's max_inflight_bytes of 1000"));
  EXPECT_LT(hint, absl::ZeroDuration());
  Push(Item("b", 1000, 5000));
  Push(Item("a", 1000, 400));  // exactly at the limit
  RunOne();                    // a's first: 600 bytes back
  Push(Item("a", 1000, 600));
}

TEST_F(TenantQueueTest, FlopsPerSecondIsATokenBucketWithExactPushback) {
  // 2e9 FLOPs per item (k = 1000); a bucket of two items, refilled at one
  // item per 2 ms.
  MakeQueue("tenant a max_flops_per_s=1e12 flops_burst=4e9\ntenant b\n");
  Push(Item("a"));
  // Precheck consumes nothing.
  EXPECT_TRUE(queue_->Precheck(*Item("a")).ok());
  Push(Item("a"));
  absl::Duration hint;
  absl::Status st = queue_->Push(Item("a"), &hint);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("tenant a is at its max_flops_per_s"));
  EXPECT_EQ(LimitOf(st), "tenant.max_flops_per_s");
  EXPECT_EQ(hint, absl::Milliseconds(2));
  EXPECT_EQ(queue_->Precheck(*Item("a"), &hint).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(hint, absl::Milliseconds(2));
  Push(Item("b"));  // b has no bucket
  clock_.Advance(absl::Milliseconds(1.5));
  EXPECT_EQ(queue_->Push(Item("a"), &hint).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(hint, absl::Microseconds(500));
  clock_.Advance(absl::Microseconds(500));
  Push(Item("a"));
  // The bucket never holds more than its burst, however long it was idle.
  clock_.Advance(absl::Seconds(10));
  Push(Item("a"));
  Push(Item("a"));
  EXPECT_EQ(queue_->Push(Item("a"), &hint).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(hint, absl::Milliseconds(2));
}

TEST_F(TenantQueueTest, ARequestLargerThanTheBurstPassesAFullBucketAndLeavesItInDebt) {
  MakeQueue("tenant a max_flops_per_s=1e12 flops_burst=4e9\n");
  Push(Item("a", 5000));  // 1e10 FLOPs: the bucket goes to -6e9
  absl::Duration hint;
  EXPECT_EQ(queue_->Push(Item("a"), &hint).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(hint, absl::Milliseconds(8));  // (2e9 + 6e9) / 1e12
  // Another large one waits for a full bucket: (4e9 + 6e9) / 1e12.
  EXPECT_EQ(queue_->Push(Item("a", 5000), &hint).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(hint, absl::Milliseconds(10));
}

TEST_F(TenantQueueTest, UnlistedCallersShareTheDefaultTenantsLimits) {
  MakeQueue("tenant a\ntenant other max_requests_in_flight=1\n");
  Push(Item("x"));
  absl::Status st = queue_->Push(Item("y"));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("tenant other has 1 requests in flight"));
  Push(Item("a"));
}

TEST_F(TenantQueueTest, SetTenantsKeepsQueuedItemsAndTheirAccounting) {
  MakeQueue("tenant a max_requests_in_flight=2\ntenant b\n");
  Push(Item("a"));
  Push(Item("a"));
  auto next = TenantsConfig::Parse("tenant a max_requests_in_flight=3 weight=2\ntenant b\n", "t");
  ASSERT_TRUE(next.ok()) << next.status();
  queue_->SetTenants(std::make_shared<const TenantsConfig>(*std::move(next)));
  Push(Item("a"));  // the third fits the new limit
  EXPECT_EQ(queue_->Push(Item("a")).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(queue_->queued(), 3u);
  while (RunOne() != nullptr) {
  }
  EXPECT_EQ(queue_->queued(), 0u);
  for (int i = 0; i < 3; ++i) Push(Item("a"));
  // Without tenants, nothing is limited per tenant and everyone is "".
  queue_->SetTenants(nullptr);
  EXPECT_EQ(queue_->TenantOf("a"), "");
  Push(Item("a"));
  while (RunOne() != nullptr) {
  }
}

// A queued item names the tenant the queue charged it to, which its metrics
// use, even after a reload maps its caller to another tenant.
TEST_F(TenantQueueTest, AQueuedItemKeepsTheTenantItWasChargedTo) {
  MakeQueue("tenant a caller=alice\ntenant b\n");
  auto item = Item("alice");
  Push(item);
  EXPECT_EQ(item->tenant, "a");
  auto next = TenantsConfig::Parse("tenant a\ntenant b caller=alice\n", "t");
  ASSERT_TRUE(next.ok()) << next.status();
  queue_->SetTenants(std::make_shared<const TenantsConfig>(*std::move(next)));
  EXPECT_EQ(queue_->TenantOf("alice"), "b");
  auto popped = queue_->Pop(1, absl::ZeroDuration());
  ASSERT_EQ(popped.size(), 1u);
  EXPECT_EQ(popped[0]->tenant, "a");
  popped[0]->Complete(absl::OkStatus());
}

TEST_F(TenantQueueTest, WithoutTenantsEveryoneIsOneTenant) {
  RequestQueue::Options o;
  RequestQueue q(o, &clock_);
  EXPECT_EQ(q.TenantOf("alice"), "");
}

}  // namespace
}  // namespace gemm
