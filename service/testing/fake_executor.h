// An Executor for unit tests of the service layers (gemm_service, transfer,
// server): no backend at all. Every result it writes is a fixed function of
// the problem (ExpectedElement), so a test can check the values that came
// back without a reference GEMM; it can fail every item with a chosen status,
// and hold batches until the test opens its gate, so that what is queued or
// in flight when the test acts does not depend on how fast the machine is.
#ifndef GEMM_SERVICE_TESTING_FAKE_EXECUTOR_H_
#define GEMM_SERVICE_TESTING_FAKE_EXECUTOR_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/exec/executor.h"

namespace gemm {
namespace fake {

class FakeExecutor final : public Executor {
 public:
  static constexpr char kBackend[] = "fake";
  static constexpr char kKernel[] = "fake_gemm";

  // info(): backend "fake", one device "fake-device" (2 threads, 1 GiB), an
  // fp32 peak rate of 1e12 and one kernel "fake_gemm".
  FakeExecutor();

  const BackendInfo& info() const override { return info_; }
  std::vector<PeakRate> peak_rates() const override { return {PeakRate{"fp32", 1e12, "fixed"}}; }
  int max_concurrent_batches() const override { return 1; }
  // Runs the batch now (on the calling thread), or keeps it until Open()
  // while the gate is shut.
  void Execute(Batch batch) override;

  // Element `i` (in D's storage order) of every fp32 result it writes:
  // alpha * i + k. fp16/bf16 results get byte j = (i + k) & 0xff instead.
  static float ExpectedElement(const GemmProblemRef& p, uint64_t i);

  // Items of later batches complete with `status` (OK: results are written).
  void FailWith(absl::Status status);
  // Shuts the gate: later batches wait in the executor until Open().
  void Hold();
  // Runs every held batch (on the calling thread) and lets later ones run.
  void Open();
  // Waits until at least `n` batches are held at the gate; false on timeout.
  bool WaitHeld(size_t n, absl::Duration timeout = absl::Seconds(30));
  // Batches run so far, and items completed so far.
  int batches_run() const;
  int items_run() const;

 private:
  void Run(Batch batch);

  BackendInfo info_;
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Batch> waiting_ ABSL_GUARDED_BY(mu_);
  int batches_run_ ABSL_GUARDED_BY(mu_) = 0;
  int items_run_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fake
}  // namespace gemm

#endif  // GEMM_SERVICE_TESTING_FAKE_EXECUTOR_H_
