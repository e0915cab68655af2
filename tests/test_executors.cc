#include "tests/test_executors.h"

#include <utility>

namespace gemm {
namespace test {

void GatedExecutor::Execute(Batch batch) {
  const int requests = static_cast<int>(batch.items.size());
  {
    absl::MutexLock lock(&mu_);
    entered_ = true;
    held_ += requests;
    mu_.Await(absl::Condition(&open_));
    held_ -= requests;
  }
  ForwardingExecutor::Execute(std::move(batch));
}

void GatedExecutor::Open() {
  absl::MutexLock lock(&mu_);
  open_ = true;
}

bool GatedExecutor::WaitEntered(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&entered_), timeout);
}

int GatedExecutor::held_requests() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

}  // namespace test
}  // namespace gemm
