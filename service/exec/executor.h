// The seam between the request path and the hardware. An executor runs
// batches of admitted requests and completes each one; the CPU executor runs
// them on OpenBLAS, a GPU executor on CUDA streams. The batcher decides what
// goes into a batch and how it splits into launches (launch_plan.h); the
// executor decides how each launch runs.
#ifndef GEMM_SERVICE_EXEC_EXECUTOR_H_
#define GEMM_SERVICE_EXEC_EXECUTOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "service/queue/launch_plan.h"
#include "service/queue/work_item.h"
#include "service/store/resident_matrix.h"

namespace gemm {

struct DeviceDescription {
  std::string name;
  std::string compute_capability;  // empty on the CPU
  uint32_t multiprocessors = 0;    // SMs on a GPU
  uint64_t memory_bytes = 0;
  uint32_t threads = 0;  // CPU threads the backend uses
};

// The method label of a peak that was measured, and of one set by flag.
inline constexpr char kPeakMethodMeasured[] = "measured";
inline constexpr char kPeakMethodFlag[] = "flag";

struct PeakRate {
  std::string kind;  // "fp32", "tf32", "fp16", "bf16", "fp8", or "memory" (bytes/s)
  double per_second = 0;
  std::string method;  // kPeakMethodMeasured or kPeakMethodFlag
};

// What an executor is, fixed for its life. Its peak rates can change (they
// are measured again on request) and are asked separately: peak_rates().
struct BackendInfo {
  std::string backend;  // "cpu", "cuda"
  std::vector<DeviceDescription> devices;
  std::vector<std::string> kernels;
};

// An executor's FP8 capabilities (all false: no FP8 at all).
struct Fp8Support {
  // FP8 problems whose inputs arrive as FP8 codes with their scales.
  bool runs = false;
  // Quantizing a bf16/fp32 matrix to FP8 itself when it is registered or
  // uploaded with `quantize` (QuantizeResident).
  bool quantizes_matrices = false;
  // Quantizing a bf16/fp32 operand per problem (quantize_partner).
  bool quantizes_partner = false;
  // Block scales with a column-major output.
  bool block_scales_column_major_output = false;

  // What every one of several executors can do.
  Fp8Support And(const Fp8Support& o) const {
    return {runs && o.runs, quantizes_matrices && o.quantizes_matrices,
            quantizes_partner && o.quantizes_partner,
            block_scales_column_major_output && o.block_scales_column_major_output};
  }
};

class Executor {
 public:
  virtual ~Executor() = default;

  virtual const BackendInfo& info() const = 0;

  // The peak rates GetServerInfo, the roofline metrics and PredictRunTime
  // use: those measured at start-up or by the last RemeasurePeaks, with the
  // ones set by flag in their place. A copy, so that a re-measurement can
  // replace them while requests read them. Thread-safe.
  virtual std::vector<PeakRate> peak_rates() const = 0;

  // Measures the peak rates again (those set by flag stay) and replaces
  // them, for an operator who doubts the start-up figures (a machine that
  // was busy, or boosted later). Batches handed to Execute meanwhile wait
  // until it is done (up to a few seconds); none is lost. Unimplemented
  // where the backend measures nothing. Thread-safe; one at a time.
  virtual absl::Status RemeasurePeaks() {
    return absl::UnimplementedError("this backend measures no peak rates");
  }

  // How many batches this executor can usefully run at once; the batcher
  // keeps at most this many in flight.
  virtual int max_concurrent_batches() const = 0;

  // Whether grouped launches (problems of different shapes in one launch) are
  // native; otherwise the batcher plans single launches instead.
  virtual bool supports_grouped() const { return false; }

  // What of FP8 runs here; the service refuses the rest UNIMPLEMENTED
  // naming the field.
  virtual Fp8Support fp8_support() const { return {}; }

  // Predicted time `item` takes when it runs alone on this executor, from
  // what the executor measured; admission control weighs it against the
  // request's deadline (RequestQueue::Options::predict_run_time). Zero means
  // "no prediction" (nothing was measured), and then nothing is refused for
  // lateness. The default divides each problem's FLOPs by the peak rate
  // measured for its type (peak_rates()); executors that know
  // their copy costs add them. Thread-safe.
  virtual absl::Duration PredictRunTime(const WorkItem& item) const;

  // How many items this executor runs side by side, each at the speed
  // PredictRunTime assumes: queued work drains this many times faster than
  // one item alone (several GPUs; CPU workers with cores of their own).
  virtual int parallel_units() const { return 1; }

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

  // `source` (dense host bf16, fp16 or fp32, as described) quantized to
  // FP8 by `q` (common/fp8.h's rule) and kept where this executor's
  // launches read it, for RegisterMatrix and BeginUpload with `quantize`
  // (fp8_support().quantizes_matrices). The default quantizes on the
  // calling thread into host memory; a GPU executor quantizes on its device
  // and keeps the codes there. INVALID_ARGUMENT naming "data" for a NaN or
  // infinite element. Thread-safe.
  virtual absl::StatusOr<std::shared_ptr<ResidentMatrix>> QuantizeResident(
      const MatrixRef& source, const Fp8Quantization& q) const {
    return QuantizeToHostResident(source, q);
  }

  // Page-locks host memory a same-host client shares (a registered
  // shared-memory region) so that this executor's copies move it by DMA in
  // place, with no staging copy; the result unlocks it when dropped. Null:
  // not pinned (the default; the memory is then staged like request bytes).
  // Thread-safe.
  virtual std::shared_ptr<void> PinHostMemory(void* base, uint64_t bytes) const {
    (void)base;
    (void)bytes;
    return nullptr;
  }
  // An uninitialized matrix of `shape`'s size and type (shape.data is
  // ignored) kept where this executor's launches read it, filled afterwards
  // by ResidentMatrix::Write: the target of chunked uploads (BeginUpload).
  // The default is host memory; a GPU executor allocates device memory so
  // that chunks go straight to the device. Thread-safe.
  virtual absl::StatusOr<std::shared_ptr<ResidentMatrix>> AllocateResident(
      const MatrixRef& shape) const {
    return MakeHostResidentUninitialized(shape);
  }
  // Runs every launch of `batch` and completes each item (WorkItem::Complete)
  // with its outcome, after filling item->report; then calls batch.on_done.
  // Returns without waiting for the work (it runs on the executor's threads
  // or devices). Thread-safe.
  virtual void Execute(Batch batch) = 0;
  // The same, run on the calling thread where this executor can (the
  // batcher's choice for a short batch on an idle executor: the requests are
  // then answered from the thread that received them, with no hand-off).
  // Returns once the work is done where it ran here. The default hands the
  // batch over as Execute does. Thread-safe.
  virtual void ExecuteHere(Batch batch) { Execute(std::move(batch)); }
  // Whether ExecuteHere runs a batch on the calling thread (the CPU
  // backend). Where it does not, dispatching on arrival would only move the
  // hand-off to the executor onto the RPC thread; on the CUDA backend that
  // measured slower than the batching thread's hand-off (docs/performance.md),
  // so the batcher leaves those executors to its own thread.
  virtual bool runs_batches_here() const { return false; }

  // Fault containment. A device that faulted (a sticky CUDA error, which
  // leaves its context unusable) goes out of service for good: its executor answers what it holds and
  // everything later UNAVAILABLE (retryable) and reports healthy() false.
  // An executor of several devices is healthy while one of them is.
  virtual bool healthy() const { return true; }
  // Called once for each device that goes out of service: its index within
  // this executor and the reason. Set before the first Execute; called from
  // the executor's threads.
  using HealthListener = std::function<void(int device, const absl::Status& why)>;
  virtual void SetHealthListener(HealthListener listener) { (void)listener; }
};

// The peak_rates kind that serves `shape`: "bf16", "fp16", "tf32", "fp32" or
// "fp8" (either FP8 format).
std::string RateKind(const GemmShape& shape);

// The rate of `kind` in `rates`; 0 when it was not measured.
double RateOf(const std::vector<PeakRate>& rates, absl::string_view kind);

// Seconds the problems of `item` compute at the peak `rates` (FLOPs over the
// rate of each problem's kind); 0 when a kind's rate was not measured.
double ComputeSeconds(const WorkItem& item, const std::vector<PeakRate>& rates);

}  // namespace gemm

#endif  // GEMM_SERVICE_EXEC_EXECUTOR_H_
