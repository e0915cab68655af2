#include "service/exec/multi_device_executor.h"

#include <atomic>
#include <cstring>
#include <deque>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

#include "service/store/resident_matrix.h"

namespace gemm {
namespace {

// A matrix "in device memory": its bytes live in host memory and also stand
// for its device data (the executor pins requests by device data).
class FakeDeviceMatrix final : public ResidentMatrix {
 public:
  static std::shared_ptr<ResidentMatrix> Of(const MatrixRef& source) {
    auto bytes = std::make_unique<std::string>(source.bytes(), '\0');
    if (source.data != nullptr) std::memcpy(bytes->data(), source.data, source.bytes());
    MatrixRef view = source;
    view.data = bytes->data();
    return std::shared_ptr<ResidentMatrix>(new FakeDeviceMatrix(view, std::move(bytes)));
  }

 private:
  FakeDeviceMatrix(const MatrixRef& view, std::unique_ptr<std::string> bytes)
      : ResidentMatrix(view, view.data), bytes_(std::move(bytes)) {}
  std::unique_ptr<std::string> bytes_;
};

// A device that holds its batches until the test finishes them, with a
// configurable bf16 rate so that devices can differ.
class FakeDevice : public Executor {
 public:
  explicit FakeDevice(double bf16_rate) {
    info_.backend = "fake";
    info_.devices.push_back({"fake gpu", "9.0", 132, 1, 0});
    if (bf16_rate > 0) rates_.push_back({"bf16", bf16_rate, "test"});
  }
  const BackendInfo& info() const override { return info_; }
  std::vector<PeakRate> peak_rates() const override {
    absl::MutexLock lock(&mu);
    return rates_;
  }
  // "Measures" twice the rate it had, and counts the calls.
  absl::Status RemeasurePeaks() override {
    absl::MutexLock lock(&mu);
    ++remeasured;
    for (PeakRate& r : rates_) {
      r.per_second *= 2;
      r.method = "remeasured";
    }
    return remeasure_status;
  }
  int max_concurrent_batches() const override { return 2; }
  bool supports_grouped() const override { return grouped; }
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> CreateResident(
      const MatrixRef& source) const override {
    return FakeDeviceMatrix::Of(source);
  }
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> AllocateResident(
      const MatrixRef& shape) const override {
    MatrixRef empty = shape;
    empty.data = nullptr;
    return FakeDeviceMatrix::Of(empty);
  }
  // Like a device with no free lane while `blocked`: Execute waits.
  void Execute(Batch batch) override {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(+[](bool* b) { return !*b; }, &blocked));
    batches.push_back(std::move(batch));
  }
  bool healthy() const override { return up.load(); }
  void SetHealthListener(HealthListener l) override { listener = std::move(l); }
  // Goes out of service like a faulted GPU: reports it to the listener.
  void Fault() {
    up = false;
    if (listener) listener(0, absl::InternalError("injected fault"));
  }
  std::atomic<bool> up{true};
  HealthListener listener;
  // Completes batch `n` and reports it done.
  void Finish(size_t n) {
    for (auto& item : batches[n].items) item->Complete(absl::OkStatus());
    batches[n].on_done();
  }
  // Read by the test after MultiDeviceExecutor::WaitHandedOver.
  std::deque<Batch> batches;
  bool grouped = true;
  mutable absl::Mutex mu;
  bool blocked ABSL_GUARDED_BY(mu) = false;
  int remeasured ABSL_GUARDED_BY(mu) = 0;
  absl::Status remeasure_status ABSL_GUARDED_BY(mu);

 private:
  BackendInfo info_;
  std::vector<PeakRate> rates_ ABSL_GUARDED_BY(mu);
};

struct Fixture {
  // By default the link is fast enough that compute decides placement.
  explicit Fixture(std::vector<double> rates, double link_bytes_per_second = 1e16) {
    std::vector<std::unique_ptr<Executor>> children;
    for (double r : rates) {
      auto d = std::make_unique<FakeDevice>(r);
      devices.push_back(d.get());
      children.push_back(std::move(d));
    }
    MultiDeviceExecutor::Options options;
    options.link_bytes_per_second = link_bytes_per_second;
    auto m = MultiDeviceExecutor::Create(std::move(children), options);
    EXPECT_TRUE(m.ok()) << m.status();
    multi = std::move(*m);
  }
  std::unique_ptr<MultiDeviceExecutor> multi;
  std::vector<FakeDevice*> devices;
};

// An n x n x n bf16 problem's shape.
GemmShape Bf16Cube(uint64_t n) {
  GemmShape s;
  s.m = s.n = s.k = n;
  s.input_dtype = s.output_dtype = DType::kBf16;
  return s;
}

std::shared_ptr<WorkItem> Item(uint64_t n, const ResidentMatrix* resident_b = nullptr) {
  auto item = std::make_shared<WorkItem>();
  GemmProblemRef p;
  p.shape = Bf16Cube(n);
  p.a = MatrixA(p.shape, &p);  // any non-null pointer: placement never reads data
  p.b = MatrixB(p.shape, &p);
  if (resident_b != nullptr) p.b = resident_b->view();
  item->problems.push_back(p);
  item->done = [](const absl::Status&, const ExecutionReport&) {};
  return item;
}

Batch BatchOf(std::vector<std::shared_ptr<WorkItem>> items, int* done_count = nullptr) {
  Batch b = SingleLaunchBatch(std::move(items));
  if (done_count) b.on_done = [done_count] { ++*done_count; };
  return b;
}

TEST(MultiDeviceExecutorTest, SumsSlotsAndListsEveryDevice) {
  Fixture f({1e14, 1e14});
  EXPECT_EQ(f.multi->max_concurrent_batches(), 4);
  EXPECT_EQ(f.multi->info().devices.size(), 2u);
  const std::vector<PeakRate> rates = f.multi->peak_rates();
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_EQ(rates[0].method, "device 0: test");
  EXPECT_EQ(rates[1].method, "device 1: test");
}

TEST(MultiDeviceExecutorTest, RemeasuresEveryHealthyDeviceAndPlacesByTheNewRates) {
  Fixture f({1e14, 1e14});
  f.devices[1]->Fault();
  ASSERT_TRUE(f.multi->RemeasurePeaks().ok());
  {
    absl::MutexLock lock(&f.devices[0]->mu);
    EXPECT_EQ(f.devices[0]->remeasured, 1);
  }
  {
    absl::MutexLock lock(&f.devices[1]->mu);
    EXPECT_EQ(f.devices[1]->remeasured, 0);  // out of service: not measured
  }
  const std::vector<PeakRate> rates = f.multi->peak_rates();
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_EQ(rates[0].per_second, 2e14);
  EXPECT_EQ(rates[0].method, "device 0: remeasured");
  EXPECT_EQ(rates[1].per_second, 1e14);
  // Placement reads the rates as they are now: device 0 computes twice as
  // fast (the link time is the same on both).
  const auto item = Item(1024);
  const double flops = item->problems[0].shape.flops();
  EXPECT_NEAR(f.multi->Cost(*item, 1) - f.multi->Cost(*item, 0), flops / 1e14 - flops / 2e14,
              1e-12);
}

TEST(MultiDeviceExecutorTest, ARemeasurementThatFailsNamesTheDevice) {
  Fixture f({1e14, 1e14});
  {
    absl::MutexLock lock(&f.devices[1]->mu);
    f.devices[1]->remeasure_status = absl::InternalError("probe failed");
  }
  const absl::Status st = f.multi->RemeasurePeaks();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("device 1: probe failed"));
}

TEST(MultiDeviceExecutorTest, BalancesByPredictedFinishTime) {
  Fixture f({1e14, 1e14});
  // Four equal batches alternate between two equal devices.
  for (int i = 0; i < 4; ++i) f.multi->Execute(BatchOf({Item(1024)}));
  f.multi->WaitHandedOver();
  EXPECT_EQ(f.devices[0]->batches.size(), 2u);
  EXPECT_EQ(f.devices[1]->batches.size(), 2u);
  // Finishing device 1's work makes it the next choice again.
  f.devices[1]->Finish(0);
  f.devices[1]->Finish(1);
  f.multi->Execute(BatchOf({Item(1024)}));
  f.multi->WaitHandedOver();
  EXPECT_EQ(f.devices[1]->batches.size(), 3u);
}

TEST(MultiDeviceExecutorTest, AFasterDeviceTakesMoreOfTheWork) {
  Fixture f({3e14, 1e14});
  for (int i = 0; i < 8; ++i) f.multi->Execute(BatchOf({Item(2048)}));
  f.multi->WaitHandedOver();
  EXPECT_EQ(f.devices[0]->batches.size(), 6u);
  EXPECT_EQ(f.devices[1]->batches.size(), 2u);
}

TEST(MultiDeviceExecutorTest, ResidentOperandsPinRequestsToTheirDevice) {
  Fixture f({1e14, 1e14});
  const GemmShape s = Bf16Cube(64);
  std::vector<uint16_t> bytes(64 * 64, 0x3f80);
  // Registrations spread over devices by resident bytes: first 0, then 1.
  auto r0 = f.multi->CreateResident(MatrixB(s, bytes.data()));
  auto r1 = f.multi->CreateResident(MatrixB(s, bytes.data()));
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_EQ((*r0)->device(), 0);
  EXPECT_EQ((*r1)->device(), 1);
  // Three heavy batches: devices 0, 1, 0. Requests naming r0 still go to the
  // busier device 0; the free request goes to the less loaded device 1.
  for (int i = 0; i < 3; ++i) f.multi->Execute(BatchOf({Item(4096)}));
  int done = 0;
  f.multi->Execute(BatchOf({Item(64, r1->get()), Item(64, r0->get()), Item(64)}, &done));
  f.multi->WaitHandedOver();
  ASSERT_EQ(f.devices[0]->batches.size(), 3u);
  ASSERT_EQ(f.devices[1]->batches.size(), 2u);
  const Batch& on0 = f.devices[0]->batches.back();
  ASSERT_EQ(on0.items.size(), 1u);
  EXPECT_EQ(on0.items[0]->problems[0].b.resident, r0->get());
  EXPECT_EQ(on0.items[0]->report.device, 0);
  EXPECT_EQ(on0.launches.size(), 1u);
  const Batch& on1 = f.devices[1]->batches.back();
  ASSERT_EQ(on1.items.size(), 2u);  // r1's request and the free one
  EXPECT_EQ(on1.items[0]->problems[0].b.resident, r1->get());
  EXPECT_EQ(on1.launches.size(), 2u);
  // The batch is done only when every device's part is.
  f.devices[1]->Finish(f.devices[1]->batches.size() - 1);
  EXPECT_EQ(done, 0);
  f.devices[0]->Finish(f.devices[0]->batches.size() - 1);
  EXPECT_EQ(done, 1);
}

TEST(MultiDeviceExecutorTest, ABusyDeviceHoldsUpNeitherTheCallerNorTheOthers) {
  Fixture f({1e14, 1e14});
  {
    absl::MutexLock lock(&f.devices[0]->mu);
    f.devices[0]->blocked = true;  // every lane of device 0 busy
  }
  // Device 0 gets the first and third batches, device 1 the second and
  // fourth; Execute returns at once for all four.
  for (int i = 0; i < 4; ++i) f.multi->Execute(BatchOf({Item(1024)}));
  {
    // Waits for device 1's two batches (woken by its mutex, no polling).
    FakeDevice* d1 = f.devices[1];
    absl::MutexLock lock(&d1->mu);
    auto both = [d1]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return d1->batches.size() == 2; };
    d1->mu.AwaitWithTimeout(absl::Condition(&both), absl::Seconds(30));
    EXPECT_EQ(d1->batches.size(), 2u) << "device 1 waited for device 0";
  }
  {
    absl::MutexLock lock(&f.devices[0]->mu);
    EXPECT_TRUE(f.devices[0]->batches.empty());
    f.devices[0]->blocked = false;
  }
  f.multi->WaitHandedOver();
  EXPECT_EQ(f.devices[0]->batches.size(), 2u);
}

TEST(MultiDeviceExecutorTest, OperandsOnTwoDevicesRunWhereMostBytesAreWithTheRestCopied) {
  Fixture f({1e14, 1e14});
  const GemmShape s = Bf16Cube(8);
  std::vector<uint16_t> a_bytes(64, 0x3f80), b_bytes(64);
  for (size_t i = 0; i < b_bytes.size(); ++i) b_bytes[i] = static_cast<uint16_t>(0x3f00 + i);
  GemmShape wide = s;  // A of 8 x 16: more bytes than B, so the item runs by A
  wide.k = 16;
  std::vector<uint16_t> wide_bytes(128, 0x3f80);
  auto r0 = f.multi->CreateResident(MatrixA(s, a_bytes.data()));     // device 0
  auto r1 = f.multi->CreateResident(MatrixB(s, b_bytes.data()));     // device 1
  auto rw = f.multi->CreateResident(MatrixA(wide, wide_bytes.data()));  // a tie: device 0
  ASSERT_TRUE(r0.ok() && r1.ok() && rw.ok());
  ASSERT_EQ((*r0)->device(), 0);
  ASSERT_EQ((*r1)->device(), 1);
  ASSERT_EQ((*rw)->device(), 0);
  auto item = Item(8, r1->get());
  item->problems[0].a = (*rw)->view();
  item->problems[0].shape.k = 16;
  int done = 0;
  f.multi->Execute(BatchOf({item}, &done));
  f.multi->WaitHandedOver();
  ASSERT_EQ(f.devices[0]->batches.size(), 1u) << "runs where most bytes are (A's)";
  EXPECT_TRUE(f.devices[1]->batches.empty());
  EXPECT_EQ(item->report.device, 0);
  const GemmProblemRef& p = item->problems[0];
  EXPECT_EQ(p.a.resident, rw->get()) << "the local operand is read in place";
  // B lived on device 1: now a host copy of its bytes.
  EXPECT_EQ(p.b.resident, nullptr);
  ASSERT_NE(p.b.data, nullptr);
  EXPECT_EQ(std::memcmp(p.b.data, b_bytes.data(), b_bytes.size() * 2), 0);
  EXPECT_EQ(item->host_copies.size(), 1u);
  f.devices[0]->Finish(0);
  EXPECT_EQ(done, 1);
}

TEST(MultiDeviceExecutorTest, MatricesInHostMemoryPinNothing) {
  Fixture f({1e14, 1e14});
  const GemmShape s = Bf16Cube(64);
  std::vector<uint16_t> bytes(64 * 64, 0x3f80);
  // A transient upload, say: host memory, device() left at 0.
  auto host = MakeHostResident(MatrixB(s, bytes.data()));
  ASSERT_TRUE(host.ok());
  f.multi->Execute(BatchOf({Item(2048)}));  // device 0 busy
  f.multi->Execute(BatchOf({Item(64, host->get())}));
  f.multi->WaitHandedOver();
  EXPECT_EQ(f.devices[0]->batches.size(), 1u);
  EXPECT_EQ(f.devices[1]->batches.size(), 1u) << "went to the idle device";
}

TEST(MultiDeviceExecutorTest, LaunchGroupsSplitByDevice) {
  Fixture f({1e14, 1e14});
  const GemmShape s = Bf16Cube(64);
  std::vector<uint16_t> bytes(64 * 64, 0x3f80);
  auto r0 = f.multi->CreateResident(MatrixB(s, bytes.data()));  // device 0
  ASSERT_TRUE(r0.ok());
  ASSERT_EQ((*r0)->device(), 0);
  // Three identical problems in one strided launch: one pinned to device 0,
  // two free, which go to the idle device 1.
  auto pinned = Item(64, r0->get());
  auto free1 = Item(64), free2 = Item(64);
  Batch batch = BatchOf({pinned, free1, free2});
  batch.launches.clear();
  LaunchGroup strided;
  strided.kind = LaunchGroup::Kind::kStridedBatched;
  strided.problems = {&pinned->problems[0], &free1->problems[0], &free2->problems[0]};
  strided.deterministic = true;  // each part keeps it
  batch.launches.push_back(strided);
  f.multi->Execute(std::move(batch));
  f.multi->WaitHandedOver();
  ASSERT_EQ(f.devices[0]->batches.size(), 1u);
  ASSERT_EQ(f.devices[1]->batches.size(), 1u);
  const Batch& on0 = f.devices[0]->batches[0];
  const Batch& on1 = f.devices[1]->batches[0];
  ASSERT_EQ(on0.launches.size(), 1u);
  EXPECT_EQ(on0.launches[0].kind, LaunchGroup::Kind::kSingle);
  EXPECT_EQ(on0.launches[0].problems, std::vector<const GemmProblemRef*>{&pinned->problems[0]});
  ASSERT_EQ(on1.launches.size(), 1u);
  EXPECT_EQ(on1.launches[0].kind, LaunchGroup::Kind::kStridedBatched);
  EXPECT_EQ(on1.launches[0].problems,
            (std::vector<const GemmProblemRef*>{&free1->problems[0], &free2->problems[0]}));
  EXPECT_TRUE(on0.launches[0].deterministic);
  EXPECT_TRUE(on1.launches[0].deterministic);
}

TEST(MultiDeviceExecutorTest, ReleasedResidentBytesFreeTheirDevice) {
  Fixture f({1e14, 1e14});
  GemmShape s;
  s.m = s.n = s.k = 32;
  std::vector<float> bytes(32 * 32, 1.0f);
  auto a = f.multi->CreateResident(MatrixA(s, bytes.data()));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->device(), 0);
  a->reset();
  auto b = f.multi->CreateResident(MatrixA(s, bytes.data()));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->device(), 0) << "device 0 is empty again";
}

TEST(MultiDeviceExecutorTest, PredictsWhereTheRequestWouldRun) {
  Fixture f({1e12, 4e12});  // a 1000^3 bf16 problem: 2 ms on device 0, 0.5 ms on 1
  EXPECT_EQ(f.multi->parallel_units(), 2);
  EXPECT_EQ(f.multi->PredictRunTime(*Item(1000)), absl::Microseconds(500));
  // Pinned by a resident operand to the slower device: its prediction.
  const GemmShape s = Bf16Cube(1000);
  std::vector<uint16_t> bytes(1000 * 1000, 0x3f80);
  auto on0 = f.multi->CreateResident(MatrixB(s, bytes.data()));
  ASSERT_TRUE(on0.ok());
  ASSERT_EQ((*on0)->device(), 0);
  EXPECT_EQ(f.multi->PredictRunTime(*Item(1000, on0->get())), absl::Milliseconds(2));
}

TEST(MultiDeviceExecutorTest, GroupedOnlyWhenEveryDeviceHasIt) {
  Fixture f({1e14, 1e14});
  EXPECT_TRUE(f.multi->supports_grouped());
  f.devices[1]->grouped = false;
  EXPECT_FALSE(f.multi->supports_grouped());
}

TEST(MultiDeviceExecutorTest, NoPredictionWithoutMeasuredRates) {
  Fixture f({0, 0});
  EXPECT_EQ(f.multi->PredictRunTime(*Item(1000)), absl::ZeroDuration());
}

TEST(MultiDeviceExecutorTest, CreateRejectsMixedBackends) {
  std::vector<std::unique_ptr<Executor>> none;
  EXPECT_FALSE(MultiDeviceExecutor::Create(std::move(none)).ok());
}

}  // namespace
}  // namespace gemm

namespace gemm {
namespace {

// An item that records the status it is answered with.
std::shared_ptr<WorkItem> Recorded(uint64_t n, std::vector<absl::StatusCode>* codes,
                                   absl::Mutex* mu, const ResidentMatrix* resident_b = nullptr) {
  auto item = Item(n, resident_b);
  item->done = [codes, mu](const absl::Status& st, const ExecutionReport&) {
    absl::MutexLock lock(mu);
    codes->push_back(st.code());
  };
  return item;
}

TEST(MultiDeviceExecutorFaultTest, WorkGoesOnlyToTheHealthyDevice) {
  Fixture f({1e14, 1e14});
  std::vector<std::pair<int, std::string>> heard;
  f.multi->SetHealthListener([&heard](int d, const absl::Status& why) {
    heard.emplace_back(d, std::string(why.message()));
  });
  f.devices[0]->Fault();
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].first, 0);
  EXPECT_EQ(heard[0].second, "injected fault");
  EXPECT_TRUE(f.multi->healthy());
  // Device 0 is idle and would win on load; it is out, so all goes to 1.
  for (int i = 0; i < 4; ++i) f.multi->Execute(BatchOf({Item(1024)}));
  f.multi->WaitHandedOver();
  EXPECT_EQ(f.devices[0]->batches.size(), 0u);
  EXPECT_EQ(f.devices[1]->batches.size(), 4u);
  for (size_t i = 0; i < 4; ++i) f.devices[1]->Finish(i);
}

TEST(MultiDeviceExecutorFaultTest, UnavailableWhenNoDeviceIsLeft) {
  Fixture f({1e14, 1e14});
  int heard = 0;
  f.multi->SetHealthListener([&heard](int, const absl::Status&) { ++heard; });
  f.devices[0]->Fault();
  f.devices[1]->Fault();
  EXPECT_EQ(heard, 2);
  EXPECT_FALSE(f.multi->healthy());
  absl::Mutex mu;
  std::vector<absl::StatusCode> codes;
  int done = 0;
  f.multi->Execute(BatchOf({Recorded(64, &codes, &mu), Recorded(64, &codes, &mu)}, &done));
  f.multi->WaitHandedOver();
  EXPECT_EQ(done, 1);
  EXPECT_EQ(codes, std::vector<absl::StatusCode>(2, absl::StatusCode::kUnavailable));
  EXPECT_EQ(f.devices[0]->batches.size() + f.devices[1]->batches.size(), 0u);
  const GemmShape shape = Bf16Cube(4);
  const MatrixRef m = MatrixB(shape, nullptr);
  EXPECT_EQ(f.multi->AllocateResident(m).status().code(), absl::StatusCode::kUnavailable);
}

TEST(MultiDeviceExecutorFaultTest, PartsQueuedForADeviceThatFaultsAreAnswered) {
  Fixture f({1e14, 1e14});
  {
    absl::MutexLock lock(&f.devices[0]->mu);
    f.devices[0]->blocked = true;  // device 0's hand-over thread waits in Execute
  }
  absl::Mutex mu;
  std::vector<absl::StatusCode> codes;
  int done = 0;
  // Equal devices: the first batch goes to device 0 (blocked there), the
  // second to 1, the third to 0 again and waits in the hand-over queue.
  f.multi->Execute(BatchOf({Recorded(1024, &codes, &mu)}, &done));
  f.multi->Execute(BatchOf({Recorded(1024, &codes, &mu)}, &done));
  f.multi->Execute(BatchOf({Recorded(1024, &codes, &mu)}, &done));
  absl::SleepFor(absl::Milliseconds(50));
  f.devices[0]->Fault();
  {
    absl::MutexLock lock(&f.devices[0]->mu);
    f.devices[0]->blocked = false;
  }
  f.multi->WaitHandedOver();
  // The one device 0 had taken is its to answer (a CUDA executor fails it);
  // the one still queued was refused without reaching it.
  ASSERT_EQ(f.devices[0]->batches.size(), 1u);
  ASSERT_EQ(f.devices[1]->batches.size(), 1u);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(codes, std::vector<absl::StatusCode>{absl::StatusCode::kUnavailable});
  }
  EXPECT_EQ(done, 1);  // the refused batch; the other two are still held
  f.devices[1]->Finish(0);
  for (auto& item : f.devices[0]->batches[0].items)
    item->Complete(absl::UnavailableError("faulted"));
  f.devices[0]->batches[0].on_done();
  EXPECT_EQ(codes.size(), 3u);
  EXPECT_EQ(done, 3);
}

TEST(MultiDeviceExecutorFaultTest, RequestsPinnedToAFaultedDeviceAreUnavailable) {
  Fixture f({1e14, 1e14});
  const GemmShape shape = Bf16Cube(64);
  const MatrixRef b = MatrixB(shape, nullptr);
  auto first = f.multi->AllocateResident(b);   // device 0
  auto second = f.multi->AllocateResident(b);  // device 1
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ((*first)->device(), 0);
  f.devices[0]->Fault();
  // New resident matrices go to the healthy device only.
  auto third = f.multi->AllocateResident(b);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)->device(), 1);
  absl::Mutex mu;
  std::vector<absl::StatusCode> codes;
  f.multi->Execute(BatchOf({Recorded(64, &codes, &mu, first->get())}));
  f.multi->WaitHandedOver();
  EXPECT_EQ(codes, std::vector<absl::StatusCode>{absl::StatusCode::kUnavailable});
  EXPECT_EQ(f.devices[0]->batches.size(), 0u);
}

}  // namespace
}  // namespace gemm
