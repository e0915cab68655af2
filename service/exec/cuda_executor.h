// The GPU backend: batches run on CUDA streams through the kernel
// portfolio: our own kernels (kernels/gemm.h) by default, or per shape class
// the member a tuning table chose, cuBLAS and cuBLASLt included
// (Options::portfolio; service/cuda/portfolio_policy.h).
//
// Each of `streams` lanes owns a CUDA stream, a pinned host staging buffer
// (grown geometrically, then reused: no cudaMallocHost on the hot path) and
// takes device memory from the device's stream-ordered pool (cudaMallocAsync
// with the release threshold raised, so steady state allocates nothing new).
// A batch takes one lane: operands are copied once from the request into
// staging, go to the device in one H2D copy, each planned launch runs (a
// strided-batched launch for identical problems), results come back in one
// D2H copy, and a host callback hands the lane to the completion thread, which
// copies results once into the responses and completes the requests. Batches
// on different lanes overlap their copies with each other's kernels.
//
// Planned launches: strided-batched for identical problems; grouped (one
// kernel for mixed shapes of one type, kernels/grouped_gemm.h) on sm_90,
// whose descriptors travel in the batch's one H2D copy from staging; and
// stream-K / split-K for large single problems where the kernel's heuristic
// picks them. Those reducing launches spin on each other's partial tiles, so
// two at once could deadlock the device: they all run on one stream of the
// executor, one after another, with one workspace, and the lane waits for
// its launch there.
//
// The parts are in service/cuda/: batch_layout (where a batch's operands and
// results sit in a lane's buffers; plain C++), lane, reducing_stream,
// portfolio_policy (which portfolio member a launch runs; plain C++),
// calibration, device_matrix (resident matrices), device (what is asked of
// the runtime about the device) and resources (owners of streams, events,
// pinned and device memory).
#ifndef GEMM_SERVICE_EXEC_CUDA_EXECUTOR_H_
#define GEMM_SERVICE_EXEC_CUDA_EXECUTOR_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/gemm.h"
#include "service/cuda/portfolio_policy.h"
#include "service/exec/executor.h"
#include "service/exec/peak_rate_store.h"

namespace gemm {

namespace gpu {
class Lane;
class ReducingStream;
}  // namespace gpu

class CudaExecutor : public Executor {
 public:
  struct Options {
    // CUDA device ordinal (after CUDA_VISIBLE_DEVICES).
    int device = 0;
    // Lanes: batches in flight at once, each on its own stream. Two overlap
    // one batch's copies with another's kernels; more help when batches are
    // small and many.
    int streams = 4;
    // Measure the GEMM rates, memory bandwidth and host<->device copy rates
    // at start-up (about 0.2 s); they feed GetServerInfo and PredictRunTime
    // (without them there is no prediction, so no refusal for lateness).
    bool calibrate = true;
    // Peaks set by flag (service/exec/calibration.h), laid over the measured ones
    // (at start-up and at every RemeasurePeaks).
    std::vector<PeakRate> peak_overrides;
    // Grouped launches for planned groups of mixed shapes, where the grouped
    // kernel exists (sm_90). Off, or elsewhere, the batcher plans single
    // launches instead.
    bool grouped_launches = true;
    // Stream-K / split-K for single launches of at least
    // reducing_min_flops (2MNK), when the kernel's heuristic prefers them; a
    // workspace over max_reducing_workspace_bytes runs data-parallel instead.
    bool reducing_schedules = true;
    // bf16/fp16 operands whose rows start off TMA's 16-byte grid (a leading
    // dimension not a multiple of 8, say) are copied into an aligned K-major
    // workspace on the lane's stream and run on the tensor cores where that
    // is predicted faster than the portable SIMT kernel at the calibrated
    // rates (tiny problems stay there). Without a calibration, and for
    // deterministic launches (whose kernel must not depend on a
    // measurement), they are copied wherever copies apply. Off, such
    // problems run on the SIMT kernel
    // (gemm_kernels::GemmArguments::copy_unaligned_operands, copy_pricing).
    bool copy_unaligned_operands = true;
    // Same-host clients' shared-memory regions are page-locked when
    // registered, and operands and outputs in them are copied by DMA
    // straight between the region and the device (no staging copy).
    bool pin_shared_memory = true;
    // FP8 quantization on the GPU where FP8 runs (Hopper): RegisterMatrix /
    // BeginUpload with `quantize`, and quantize_partner (kernels/quantize).
    // Off, both are refused UNIMPLEMENTED by field, as on GPUs without FP8.
    bool quantize_fp8 = true;
    double reducing_min_flops = 2.0 * 2048 * 2048 * 2048;
    uint64_t max_reducing_workspace_bytes = uint64_t{256} << 20;  // 256 MiB
    // A batch still running `watchdog` after its predicted run time (or
    // after `watchdog` where nothing is predicted) takes the device out of
    // service: a kernel that never ends cannot be stopped, and a context
    // with one is no longer trusted. Its requests and every later one are
    // answered UNAVAILABLE at once. Zero turns the watchdog off.
    absl::Duration watchdog = absl::Seconds(60);
    // Which kernel portfolio member each launch runs (service/cuda/
    // portfolio_policy.h): the policy and a parsed tuning table. A table
    // whose key (GPU name, driver, CUDA runtime, cuBLAS, build) differs from
    // this process's is ignored with one WARN line naming the field. Under
    // the cublas policy cuBLAS must start, or Create fails.
    gpu::PortfolioSettings portfolio;
    // Test seam: called on a lane's stream (a cudaStream_t) after a batch's
    // operands are enqueued and before its kernels, so that a test can put
    // a kernel that faults or hangs where the batch's kernels would run
    // (service/cuda/testing/fault_kernels.h). Empty in production.
    std::function<void(void* stream)> before_launches;
  };

  // The number of CUDA devices visible, 0 when there is no driver or GPU.
  static int DeviceCount();

  static absl::StatusOr<std::unique_ptr<CudaExecutor>> Create(const Options& options);

  // Device memory in use on `device` (total minus free, all processes).
  static absl::StatusOr<uint64_t> DeviceBytesInUse(int device);

  // Returns the pool's cached device memory to the driver (the pool keeps
  // freed memory for reuse otherwise). Call when idle.
  absl::Status ReleaseCachedMemory();
  // The policy the launches follow, with the table in use (if any).
  const gpu::LaunchPolicy& launch_policy() const { return *policy_; }
  // Waits for the batches in flight, then frees streams and buffers.
  ~CudaExecutor() override;

  const BackendInfo& info() const override { return info_; }
  std::vector<PeakRate> peak_rates() const override { return peaks_.Get(); }
  // Waits until no lane is busy, holds back new batches while it measures
  // (as at start-up: about 0.2 s), then lets them run. UNAVAILABLE once the
  // device is out of service.
  absl::Status RemeasurePeaks() override;
  int max_concurrent_batches() const override { return options_.streams; }
  bool supports_grouped() const override { return grouped_; }
  // FP8 codes with their scales on Hopper; the server's quantization and
  // block scales with a column-major output are not built on the GPU.
  Fp8Support fp8_support() const override {
    const bool quantizes = fp8_ && options_.quantize_fp8;
    return {fp8_, quantizes, quantizes, false};
  }
  void Execute(Batch batch) override;
  // False for good once a sticky CUDA error was seen on the device (see
  // gpu::IsStickyError) or a batch ran past the watchdog: from then on the
  // executor answers every request UNAVAILABLE (retryable) without touching
  // the device.
  bool healthy() const override { return healthy_.load(); }
  // Called with the lock that guards the listener held (clearing it waits
  // for a call in progress).
  void SetHealthListener(HealthListener listener) override;
  // Staging copies, H2D, the kernels at the calibrated peak rates, D2H.
  absl::Duration PredictRunTime(const WorkItem& item) const override;
  // Device memory holding a copy of `source` (no host copy is kept); launches
  // read it in place. RESOURCE_EXHAUSTED when the device is out of memory.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> CreateResident(
      const MatrixRef& source) const override;
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> AllocateResident(
      const MatrixRef& shape) const override;
  // On the device (kernels/quantize), codes kept there.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> QuantizeResident(
      const MatrixRef& source, const Fp8Quantization& q) const override;
  // With Options::pin_shared_memory: cudaHostRegister (portable, so every
  // device of the process reads it), unregistered when the result is
  // dropped. A failure (a mapping the driver cannot lock) logs a WARN and
  // returns null: that region is then staged like request bytes.
  std::shared_ptr<void> PinHostMemory(void* base, uint64_t bytes) const override;

 private:
  explicit CudaExecutor(const Options& options);
  absl::Status Init();
  // Measures the device (service/cuda/calibration.h) on `stream` into
  // peaks_ (with the overrides), copy_rates_ and copy_pricing_.
  void Calibrate(void* stream);
  // The rates a launch of `in` operands prices unaligned-operand copies at
  // (what LaneOptions::copy_pricing answers): all 0 but for bf16 and fp16.
  gemm_kernels::CopyPricing CopyPricingFor(DType in) const;
  // The portfolio policy, checked against this process's table key, and a
  // cuBLAS context per lane where the policy may choose cuBLAS.
  absl::Status InitPortfolio(const std::string& gpu_name);
  // Called by a lane's host callback when its work is done (on a CUDA
  // thread: it only hands the lane to the completion thread).
  void OnLaneDone(gpu::Lane* lane);
  void CompletionLoop();
  // Returns the lane to the free list and tells the batcher.
  void ReleaseLane(gpu::Lane* lane);

  // After a failure seen on this thread: if the thread's last CUDA error is
  // sticky, takes the device out of service.
  void CheckForFault();
  // Logs why and tells the listener, once.
  void TakeOutOfService(const std::string& why);
  void ReportOutOfService(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu_);
  // Until the executor stops: answers the batches in flight that will not
  // end (past the watchdog, or on a device with a sticky error, where no
  // host callback comes) and takes the device out of service.
  void WatchLoop();
  // The status requests get once the device is out of service.
  absl::Status OutOfService() const;

  const Options options_;
  BackendInfo info_;
  bool grouped_ = false;
  bool fp8_ = false;
  PeakRateStore peaks_;
  // Calibrated bytes/s: pinned H2D and D2H, and the host copy into staging;
  // 0 when not measured.
  struct CopyRates {
    double h2d = 0, d2h = 0, host_copy = 0;
  };
  mutable absl::Mutex copy_rates_mu_;
  CopyRates copy_rates_ ABSL_GUARDED_BY(copy_rates_mu_);
  // From the peaks (measured or set by flag) and the measured launch time;
  // all 0 (copy wherever copies apply) until a calibration measures them.
  struct CopyPricingByType {
    gemm_kernels::CopyPricing bf16, fp16;
  };
  CopyPricingByType copy_pricing_ ABSL_GUARDED_BY(copy_rates_mu_);
  absl::Mutex remeasure_mu_;  // one RemeasurePeaks at a time
  // Shared by the lanes (they hold a pointer): declared before them.
  std::unique_ptr<gpu::LaunchPolicy> policy_;
  // Where every reducing launch runs, in turn; the lanes hold a pointer.
  std::unique_ptr<gpu::ReducingStream> reducer_;
  std::vector<std::unique_ptr<gpu::Lane>> lanes_;

  absl::Mutex mu_;
  std::deque<gpu::Lane*> free_lanes_ ABSL_GUARDED_BY(mu_);
  std::deque<gpu::Lane*> finished_lanes_ ABSL_GUARDED_BY(mu_);
  int busy_lanes_ ABSL_GUARDED_BY(mu_) = 0;
  // While set, Execute waits for it to clear: RemeasurePeaks has the device.
  bool measuring_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread completion_thread_;

  // A batch in flight on a lane, as the watchdog sees it: its deadline, its
  // requests and the batcher's callback (wrapped to run once, whoever ends
  // the batch). An abandoned batch was answered by the watchdog; its lane is
  // never used again, and when (if) its host callback still comes, nothing
  // of it is touched.
  struct InFlight {
    absl::Time deadline = absl::InfiniteFuture();
    std::vector<std::shared_ptr<WorkItem>> items;
    std::function<void()> on_done;
    bool finishing = false;  // the completion thread has it
    bool abandoned = false;
  };
  absl::flat_hash_map<gpu::Lane*, InFlight> in_flight_ ABSL_GUARDED_BY(mu_);
  std::thread watch_thread_;
  // What the lanes' host callbacks call: it outlives the executor where a
  // hung kernel keeps an abandoned lane alive, and then calls nothing.
  struct DoneRelay;
  std::shared_ptr<DoneRelay> relay_;

  std::atomic<bool> healthy_{true};
  absl::Mutex health_mu_;
  HealthListener listener_ ABSL_GUARDED_BY(health_mu_);
};

}  // namespace gemm

#endif  // GEMM_SERVICE_EXEC_CUDA_EXECUTOR_H_
