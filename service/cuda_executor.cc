#include "service/cuda_executor.h"

#include <cuda_runtime.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "common/status_macros.h"
#include "service/cuda/batch_layout.h"
#include "service/cuda/calibration.h"
#include "service/cuda/cuda_status.h"
#include "service/cuda/device.h"
#include "service/cuda/device_matrix.h"
#include "service/cuda/lane.h"
#include "service/cuda/reducing_stream.h"

namespace gemm {

CudaExecutor::CudaExecutor(const Options& options) : options_(options) {}

int CudaExecutor::DeviceCount() { return gpu::VisibleDeviceCount(); }

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(const Options& options) {
  if (options.streams < 1) return absl::InvalidArgumentError("streams must be at least 1");
  if (options.device < 0 || options.device >= DeviceCount())
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", options.device, " is not present (", DeviceCount(), " visible)"));
  std::unique_ptr<CudaExecutor> ex(new CudaExecutor(options));
  if (absl::Status st = ex->Init(); !st.ok()) return st;
  if (options.calibrate) ex->Calibrate();
  ex->completion_thread_ = std::thread([e = ex.get()] { e->CompletionLoop(); });
  return ex;
}

absl::Status CudaExecutor::Init() {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  GEMM_ASSIGN_OR_RETURN(const gpu::DeviceProperties prop, gpu::QueryDevice(options_.device));
  info_.backend = "cuda";
  info_.devices.push_back(DeviceDescription{prop.name, absl::StrCat(prop.major, ".", prop.minor),
                                            prop.multiprocessors, prop.total_memory, 0});
  info_.kernels = {"sm90_tma_wgmma (bf16, fp16, tf32; Hopper)",
                   "portable_simt (strict fp32; any sm_80+ GPU)"};
  grouped_ = options_.grouped_launches && gpu::RunsGroupedKernel(prop);
  if (grouped_) info_.kernels.push_back("sm90_tma_wgmma_grouped (bf16, fp16; mixed shapes)");
  GEMM_RETURN_IF_ERROR(gpu::KeepFreedPoolMemory(options_.device));

  GEMM_ASSIGN_OR_RETURN(reducer_, gpu::ReducingStream::Create());
  gpu::LaneOptions lane_options;
  lane_options.device = options_.device;
  lane_options.reducing_schedules = options_.reducing_schedules;
  lane_options.reducing_min_flops = options_.reducing_min_flops;
  lane_options.max_reducing_workspace_bytes = options_.max_reducing_workspace_bytes;
  lane_options.device_model = absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")");
  for (int i = 0; i < options_.streams; ++i) {
    GEMM_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Lane> lane,
                          gpu::Lane::Create(lane_options, reducer_.get(),
                                            [this](gpu::Lane* done) { OnLaneDone(done); }));
    absl::MutexLock lock(&mu_);
    free_lanes_.push_back(lane.get());
    lanes_.push_back(std::move(lane));
  }
  return absl::OkStatus();
}

void CudaExecutor::Calibrate() {
  const gpu::Calibration measured = gpu::Calibrate(options_.device, lanes_.front()->stream());
  info_.peak_rates.insert(info_.peak_rates.end(), measured.peak_rates.begin(),
                          measured.peak_rates.end());
  h2d_rate_ = measured.copies.h2d;
  d2h_rate_ = measured.copies.d2h;
  host_copy_rate_ = measured.copies.host_copy;
}

CudaExecutor::~CudaExecutor() {
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return busy_lanes_ == 0; };
    mu_.Await(absl::Condition(&idle));
    stopping_ = true;
  }
  if (completion_thread_.joinable()) completion_thread_.join();
  cudaSetDevice(options_.device);
  // The reducing workspace goes back to the pool before the pool is trimmed.
  reducer_.reset();
  // Give the pool's cached blocks back to the driver: the device is shared.
  ReleaseCachedMemory().IgnoreError();
  lanes_.clear();
}

absl::StatusOr<uint64_t> CudaExecutor::DeviceBytesInUse(int device) {
  return gpu::DeviceBytesInUse(device);
}

absl::Status CudaExecutor::ReleaseCachedMemory() { return gpu::TrimPool(options_.device); }

void CudaExecutor::SetHealthListener(HealthListener listener) {
  absl::MutexLock lock(&health_mu_);
  listener_ = std::move(listener);
}

absl::Status CudaExecutor::OutOfService() const {
  return absl::UnavailableError(
      absl::StrCat("GPU ", options_.device, " is out of service after a fault; retry"));
}

void CudaExecutor::CheckForFault() {
  const cudaError_t e = cudaPeekAtLastError();
  if (!gpu::IsStickyError(e)) return;
  absl::Status why = absl::InternalError(
      absl::StrCat("GPU ", options_.device, ": ", cudaGetErrorName(e), " (",
                   cudaGetErrorString(e), ")"));
  absl::MutexLock lock(&health_mu_);
  if (!healthy_.exchange(false)) return;  // already out
  spdlog::critical(
      "GPU {} out of service: sticky CUDA error {} ({}); its context is unusable, so "
      "requests on it are answered UNAVAILABLE from now on",
      options_.device, cudaGetErrorName(e), cudaGetErrorString(e));
  // Under the lock: SetHealthListener(nullptr) at shutdown waits for a call
  // in progress, so the listener never outlives what it reports to.
  if (listener_) listener_(0, why);
}

void CudaExecutor::Execute(Batch batch) {
  if (!healthy()) {
    for (auto& item : batch.items) item->Complete(OutOfService());
    if (batch.on_done) batch.on_done();
    return;
  }
  gpu::Lane* lane;
  {
    absl::MutexLock lock(&mu_);
    // The batcher keeps at most max_concurrent_batches() in flight, so a lane
    // is normally free at once.
    auto has_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !free_lanes_.empty(); };
    mu_.Await(absl::Condition(&has_free));
    lane = free_lanes_.front();
    free_lanes_.pop_front();
    ++busy_lanes_;
  }
  lane->Reset();
  if (absl::Status st = lane->Enqueue(std::move(batch)); !st.ok()) {
    // Wait for what was enqueued, then answer every request of the batch
    // with the error.
    lane->Abandon();
    CheckForFault();
    for (auto& item : lane->batch().items) item->Complete(healthy() ? st : OutOfService());
    ReleaseLane(lane);
  }
}

absl::Duration CudaExecutor::PredictRunTime(const WorkItem& item) const {
  const double compute = ComputeSeconds(item, info_.peak_rates);
  if (!(compute > 0)) return absl::ZeroDuration();
  // Bytes that travel: what is staged (resident operands are not) and every
  // result.
  const gpu::TransferBytes bytes = gpu::StagedBytes(item);
  double seconds = compute;
  if (host_copy_rate_ > 0) seconds += (bytes.in + bytes.out) / host_copy_rate_;
  if (h2d_rate_ > 0) seconds += bytes.in / h2d_rate_;
  if (d2h_rate_ > 0) seconds += bytes.out / d2h_rate_;
  return absl::Seconds(seconds);
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> CudaExecutor::AllocateResident(
    const MatrixRef& shape) const {
  return gpu::AllocateDeviceMatrix(shape, options_.device);
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> CudaExecutor::CreateResident(
    const MatrixRef& source) const {
  return gpu::CopyToDeviceMatrix(source, options_.device);
}

void CudaExecutor::OnLaneDone(gpu::Lane* lane) {
  absl::MutexLock lock(&mu_);
  finished_lanes_.push_back(lane);
}

void CudaExecutor::CompletionLoop() {
  while (true) {
    gpu::Lane* lane;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !finished_lanes_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (finished_lanes_.empty()) return;
      lane = finished_lanes_.front();
      finished_lanes_.pop_front();
    }
    gpu::Outcomes outcomes = lane->Finish();
    bool failed = false;
    for (const auto& outcome : outcomes) failed |= !outcome.second.ok();
    if (failed) CheckForFault();
    if (!healthy())
      for (auto& outcome : outcomes)
        if (!outcome.second.ok()) outcome.second = OutOfService();
    // The lane is free before the answers go out, so that a client's next
    // request finds the executor idle rather than just about to be.
    ReleaseLane(lane);
    for (auto& [item, status] : outcomes) item->Complete(status);
  }
}

void CudaExecutor::ReleaseLane(gpu::Lane* lane) {
  std::function<void()> on_done = std::move(lane->batch().on_done);
  lane->Reset();
  {
    absl::MutexLock lock(&mu_);
    free_lanes_.push_back(lane);
    --busy_lanes_;
  }
  if (on_done) on_done();
}

}  // namespace gemm
