// The CPU backend: OpenBLAS sgemm. fp16 and bf16 operands are widened to fp32
// and the result is rounded to the output type, so every dtype of the API is
// served exactly as the GPU serves it (fp32 accumulation), only slower. FP8
// operands are dequantized first (each element its code times its scale, in
// fp32; common/fp8.h), and a bf16/fp32 partner under quantize_partner is
// quantized to its FP8 partner's format and scale mode, then dequantized.
//
// Determinism: every problem is one sgemm call of its own, whatever launch
// the batch planned, at the executor's one BLAS thread count, so its bits
// never depend on batch partners, launch kind or load. They do depend on
// that thread count: OpenBLAS 0.3.21 partitions the work, and blocks K,
// differently with a different count (measured: most random shapes change
// bits between 1, 2, 4 and 8 threads, and between a whole product and its
// column or row slices). The count is fixed for the executor's life
// (blas_threads, or the core count) and deterministic results name it.
#ifndef GEMM_SERVICE_EXEC_CPU_EXECUTOR_H_
#define GEMM_SERVICE_EXEC_CPU_EXECUTOR_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/exec/executor.h"
#include "service/exec/peak_rate_store.h"

namespace gemm {

class CpuExecutor : public Executor {
 public:
  struct Options {
    // Requests run at once, each on one worker thread.
    int concurrent_requests = 2;
    // OpenBLAS threads per sgemm; 0 means one per core.
    int blas_threads = 0;
    // Measure the sgemm rate and memory bandwidth at start-up for
    // GetServerInfo and the roofline metrics, within calibration_budget.
    bool calibrate = true;
    // Time the sgemm measurement may take: products grow from 512^3 until
    // one takes a tenth of this (or 4096^3), best of several at each size,
    // so that the rate reached is the machine's, not a cold small product's.
    absl::Duration calibration_budget = absl::Seconds(1);
    // Peaks set by flag (service/exec/calibration.h), laid over the measured ones.
    std::vector<PeakRate> peak_overrides;
  };

  static absl::StatusOr<std::unique_ptr<CpuExecutor>> Create(const Options& options);
  // Finishes the batches already handed over, then stops the threads.
  ~CpuExecutor() override;

  const BackendInfo& info() const override { return info_; }
  std::vector<PeakRate> peak_rates() const override { return peaks_.Get(); }
  // Waits for the batches running, holds back the queued ones while it
  // measures (with every thread, as at start-up, within
  // calibration_budget), then lets them run.
  absl::Status RemeasurePeaks() override;
  int max_concurrent_batches() const override { return options_.concurrent_requests; }
  // FP8 operands are decoded with their scales and run through sgemm.
  Fp8Support fp8_support() const override { return {true, true, true, true}; }
  void Execute(Batch batch) override;
  // Runs the batch on the calling thread, counted among the running ones;
  // while the peaks are measured it is queued as by Execute.
  void ExecuteHere(Batch batch) override;
  bool runs_batches_here() const override { return true; }
  // Every dtype runs through sgemm: FLOPs over the calibrated sgemm rate,
  // plus the fp16/bf16 widening and narrowing at the calibrated memory rate.
  // Zero without calibration.
  absl::Duration PredictRunTime(const WorkItem& item) const override;
  // Requests that run side by side without sharing cores.
  int parallel_units() const override;

 private:
  CpuExecutor(const Options& options, int blas_threads, int cores)
      : options_(options), blas_threads_(blas_threads), cores_(cores) {}
  // The sgemm rate (for every dtype) and the memory bandwidth, measured.
  std::vector<PeakRate> Measure() const;
  void RunThread();
  void RunBatch(Batch& batch) const;

  const Options options_;
  const int blas_threads_;  // resolved: options_.blas_threads, or one per core
  const int cores_;
  BackendInfo info_;
  PeakRateStore peaks_;
  // What deterministic results name: the BLAS build, its core type and the
  // thread count.
  std::string device_model_;
  absl::Mutex mu_;
  std::deque<Batch> pending_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // batches the threads are running
  // While set, queued batches wait: RemeasurePeaks has the cores.
  bool measuring_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex remeasure_mu_;  // one RemeasurePeaks at a time
  std::vector<std::thread> threads_;
};

// What fixed a deterministic problem's bits on the CPU backend.
ProblemReproducibility CpuReproducibility(int blas_threads);

// Runs one problem on the calling thread. Exposed for tests and benchmarks.
// Returns the time spent converting dtypes and layouts (the CPU's "transfer"),
// or INVALID_ARGUMENT naming "a.data" / "b.data" when quantize_partner meets
// a NaN or infinity (the only failure).
absl::StatusOr<absl::Duration> RunCpuGemm(const GemmProblemRef& p);

// The kernel name RunCpuGemm's launch of `shape` reports: "openblas_sgemm",
// or "openblas_sgemm_fp8" for FP8 inputs.
const char* CpuKernelName(const GemmShape& shape);

}  // namespace gemm

#endif  // GEMM_SERVICE_EXEC_CPU_EXECUTOR_H_
