#include "service/testing/fake_executor.h"

#include <cstring>

namespace gemm {
namespace fake {

FakeExecutor::FakeExecutor() {
  info_.backend = kBackend;
  DeviceDescription device;
  device.name = "fake-device";
  device.threads = 2;
  device.memory_bytes = uint64_t{1} << 30;
  info_.devices.push_back(device);
  info_.kernels.push_back(kKernel);
}

float FakeExecutor::ExpectedElement(const GemmProblemRef& p, uint64_t i) {
  return static_cast<float>(p.alpha * static_cast<double>(i) + static_cast<double>(p.shape.k));
}

void FakeExecutor::Execute(Batch batch) {
  {
    absl::MutexLock lock(&mu_);
    if (held_) {
      waiting_.push_back(std::move(batch));
      return;
    }
  }
  Run(std::move(batch));
}

void FakeExecutor::Run(Batch batch) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = status_;
  }
  for (const auto& item : batch.items) {
    if (status.ok()) {
      for (const GemmProblemRef& p : item->problems) {
        const uint64_t elements = p.shape.m * p.shape.n;
        if (p.shape.output_dtype == DType::kFp32) {
          for (uint64_t i = 0; i < elements; ++i) {
            const float v = ExpectedElement(p, i);
            std::memcpy(static_cast<char*>(p.d) + 4 * i, &v, 4);
          }
        } else {
          for (uint64_t j = 0; j < p.d_bytes(); ++j)
            static_cast<char*>(p.d)[j] = static_cast<char>((j + p.shape.k) & 0xff);
        }
      }
    }
    item->report.backend = kBackend;
    item->report.kernel = kKernel;
    {
      absl::MutexLock lock(&mu_);
      ++items_run_;
    }
    item->Complete(status);
  }
  {
    absl::MutexLock lock(&mu_);
    ++batches_run_;
  }
  if (batch.on_done) batch.on_done();
}

void FakeExecutor::FailWith(absl::Status status) {
  absl::MutexLock lock(&mu_);
  status_ = std::move(status);
}

void FakeExecutor::Hold() {
  absl::MutexLock lock(&mu_);
  held_ = true;
}

void FakeExecutor::Open() {
  std::vector<Batch> run;
  {
    absl::MutexLock lock(&mu_);
    held_ = false;
    run.swap(waiting_);
  }
  for (Batch& b : run) Run(std::move(b));
}

bool FakeExecutor::WaitHeld(size_t n, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_.size() >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

int FakeExecutor::batches_run() const {
  absl::MutexLock lock(&mu_);
  return batches_run_;
}

int FakeExecutor::items_run() const {
  absl::MutexLock lock(&mu_);
  return items_run_;
}

}  // namespace fake
}  // namespace gemm
