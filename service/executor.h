// The seam between the request path and the hardware. An executor runs
// batches of admitted requests and completes each one; the CPU executor runs
// them on OpenBLAS, a GPU executor on CUDA streams. The batcher decides what
// goes into a batch and how it splits into launches (launch_plan.h); the
// executor decides how each launch runs.
#ifndef GEMM_SERVICE_EXECUTOR_H_
#define GEMM_SERVICE_EXECUTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "service/launch_plan.h"
#include "service/resident_matrix.h"
#include "service/work_item.h"

namespace gemm {

struct DeviceDescription {
  std::string name;
  std::string compute_capability;  // empty on the CPU
  uint32_t multiprocessors = 0;    // SMs on a GPU
  uint64_t memory_bytes = 0;
  uint32_t threads = 0;  // CPU threads the backend uses
};

struct PeakRate {
  std::string kind;  // "fp32", "tf32", "fp16", "bf16", or "memory" (bytes/s)
  double per_second = 0;
  std::string method;
};

struct BackendInfo {
  std::string backend;  // "cpu", "cuda"
  std::vector<DeviceDescription> devices;
  std::vector<PeakRate> peak_rates;
  std::vector<std::string> kernels;
};

class Executor {
 public:
  virtual ~Executor() = default;

  virtual const BackendInfo& info() const = 0;

  // How many batches this executor can usefully run at once; the batcher
  // keeps at most this many in flight.
  virtual int max_concurrent_batches() const = 0;

  // Whether grouped launches (problems of different shapes in one launch) are
  // native; otherwise the batcher plans single launches instead.
  virtual bool supports_grouped() const { return false; }

  // Stores `source` (dense host bytes, as described) where this executor's
  // launches read it, for RegisterMatrix: problems whose MatrixRef names the
  // result (MatrixRef::resident) read it from there and copy nothing. The
  // default keeps a host copy; a GPU executor keeps device memory. Allocates
  // and copies before returning (registration is not the hot path).
  // Thread-safe.
  virtual absl::StatusOr<std::shared_ptr<ResidentMatrix>> CreateResident(
      const MatrixRef& source) const {
    return MakeHostResident(source);
  }

  // Runs every launch of `batch` and completes each item (WorkItem::Complete)
  // with its outcome, after filling item->report; then calls batch.on_done.
  // Returns without waiting for the work (it runs on the executor's threads
  // or devices). Thread-safe.
  virtual void Execute(Batch batch) = 0;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_EXECUTOR_H_
