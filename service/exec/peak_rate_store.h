// Where an executor keeps its peak rates: read by every request (admission's
// prediction, GetServerInfo) and replaced whole when they are measured
// again, so readers get a copy taken under a lock (a handful of entries).
#ifndef GEMM_SERVICE_EXEC_PEAK_RATE_STORE_H_
#define GEMM_SERVICE_EXEC_PEAK_RATE_STORE_H_

#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "service/exec/executor.h"

namespace gemm {

class PeakRateStore {
 public:
  std::vector<PeakRate> Get() const {
    absl::MutexLock lock(&mu_);
    return rates_;
  }
  void Set(std::vector<PeakRate> rates) {
    absl::MutexLock lock(&mu_);
    rates_ = std::move(rates);
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<PeakRate> rates_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemm

#endif  // GEMM_SERVICE_EXEC_PEAK_RATE_STORE_H_
