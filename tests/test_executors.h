// Executors for integration tests that wrap a real one: the server under test
// still computes every result on its backend (the CPU executor, usually),
// while the test observes what reaches the backend or holds it busy for as
// long as it needs, instead of hoping a large GEMM keeps it busy long enough.
#ifndef GEMM_TESTS_TEST_EXECUTORS_H_
#define GEMM_TESTS_TEST_EXECUTORS_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/exec/executor.h"

namespace gemm {
namespace test {

// Forwards everything to `inner`; subclasses override what they observe.
class ForwardingExecutor : public Executor {
 public:
  explicit ForwardingExecutor(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}

  const BackendInfo& info() const override { return inner_->info(); }
  std::vector<PeakRate> peak_rates() const override { return inner_->peak_rates(); }
  absl::Status RemeasurePeaks() override { return inner_->RemeasurePeaks(); }
  int max_concurrent_batches() const override { return inner_->max_concurrent_batches(); }
  bool supports_grouped() const override { return inner_->supports_grouped(); }
  Fp8Support fp8_support() const override { return inner_->fp8_support(); }
  absl::Duration PredictRunTime(const WorkItem& item) const override {
    return inner_->PredictRunTime(item);
  }
  int parallel_units() const override { return inner_->parallel_units(); }
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> CreateResident(
      const MatrixRef& source) const override {
    return inner_->CreateResident(source);
  }
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> AllocateResident(
      const MatrixRef& shape) const override {
    return inner_->AllocateResident(shape);
  }
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> QuantizeResident(
      const MatrixRef& source, const Fp8Quantization& q) const override {
    return inner_->QuantizeResident(source, q);
  }
  void Execute(Batch batch) override { inner_->Execute(std::move(batch)); }
  bool runs_batches_here() const override { return inner_->runs_batches_here(); }

 private:
  const std::unique_ptr<Executor> inner_;
};

// Holds each batch on the batcher's thread until Open(), then runs it (and
// every later one) on `inner`. While the gate is shut the backend is busy
// with one batch and the batcher takes nothing more from the queue, so what
// the server admits and refuses no longer depends on how fast the machine is.
class GatedExecutor final : public ForwardingExecutor {
 public:
  using ForwardingExecutor::ForwardingExecutor;

  void Execute(Batch batch) override;

  // Lets every held and later batch run. Idempotent.
  void Open();
  // Waits until a batch has reached the gate; false on timeout.
  bool WaitEntered(absl::Duration timeout);
  // Requests of the batch now waiting at the gate (0 once it is open).
  int held_requests() const;

 private:
  mutable absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  bool entered_ ABSL_GUARDED_BY(mu_) = false;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace test
}  // namespace gemm

#endif  // GEMM_TESTS_TEST_EXECUTORS_H_
