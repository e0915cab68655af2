#include "service/exec/cuda_executor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cublas/cublas_gemm.h"
#include "kernels/tuning/tuning_table.h"
#include "service/cuda/batch_layout.h"
#include "service/cuda/calibration.h"
#include "service/cuda/cuda_status.h"
#include "service/cuda/device.h"
#include "service/cuda/device_matrix.h"
#include "service/cuda/lane.h"
#include "service/cuda/reducing_stream.h"
#include "service/exec/calibration.h"
#include "service/version.h"
#include "spdlog/spdlog.h"

namespace gemm {

struct CudaExecutor::DoneRelay {
  absl::Mutex mu;
  CudaExecutor* executor ABSL_GUARDED_BY(mu) = nullptr;
};

CudaExecutor::CudaExecutor(const Options& options)
    : options_(options), relay_(std::make_shared<DoneRelay>()) {
  absl::MutexLock lock(&relay_->mu);
  relay_->executor = this;
}

int CudaExecutor::DeviceCount() { return gpu::VisibleDeviceCount(); }

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(const Options& options) {
  if (options.streams < 1) return absl::InvalidArgumentError("streams must be at least 1");
  if (options.device < 0 || options.device >= DeviceCount())
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", options.device, " is not present (", DeviceCount(), " visible)"));
  std::unique_ptr<CudaExecutor> ex(new CudaExecutor(options));
  if (absl::Status st = ex->Init(); !st.ok()) return st;
  if (options.calibrate) {
    ex->Calibrate(ex->lanes_.front()->stream());
  } else {
    std::vector<PeakRate> rates;
    ApplyPeakOverrides(options.peak_overrides, &rates);
    ex->peaks_.Set(std::move(rates));
  }
  ex->completion_thread_ = std::thread([e = ex.get()] { e->CompletionLoop(); });
  ex->watch_thread_ = std::thread([e = ex.get()] { e->WatchLoop(); });
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
  grouped_ = options_.grouped_launches && gpu::RunsSm90aKernels(prop);
  if (grouped_) info_.kernels.push_back("sm90_tma_wgmma_grouped (bf16, fp16; mixed shapes)");
  fp8_ = gpu::RunsSm90aKernels(prop);
  if (fp8_)
    info_.kernels.push_back(
        "sm90_tma_wgmma_fp8 (e4m3, e5m2 in any pairing; tensor, channel and block scales)");
  GEMM_RETURN_IF_ERROR(gpu::KeepFreedPoolMemory(options_.device));

  GEMM_ASSIGN_OR_RETURN(reducer_, gpu::ReducingStream::Create());
  gpu::LaneOptions lane_options;
  lane_options.device = options_.device;
  lane_options.reducing_schedules = options_.reducing_schedules;
  lane_options.copy_unaligned_operands = options_.copy_unaligned_operands;
  // The lanes are the executor's and end before it.
  lane_options.copy_pricing = [this](DType in) { return CopyPricingFor(in); };
  lane_options.reducing_min_flops = options_.reducing_min_flops;
  lane_options.max_reducing_workspace_bytes = options_.max_reducing_workspace_bytes;
  lane_options.device_model = absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")");
  lane_options.before_launches = options_.before_launches;
  auto on_done = [relay = relay_](gpu::Lane* done) {
    absl::MutexLock lock(&relay->mu);
    if (relay->executor != nullptr) relay->executor->OnLaneDone(done);
  };
  for (int i = 0; i < options_.streams; ++i) {
    GEMM_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Lane> lane,
                          gpu::Lane::Create(lane_options, reducer_.get(), on_done));
    absl::MutexLock lock(&mu_);
    free_lanes_.push_back(lane.get());
    lanes_.push_back(std::move(lane));
  }
  return InitPortfolio(prop.name);
}

absl::Status CudaExecutor::InitPortfolio(const std::string& gpu_name) {
  namespace gb = gemm_kernels::cublas;
  const gpu::PortfolioSettings settings = gpu::ForDevice(options_.portfolio, gpu_name);
  gemm_kernels::tuning::TableKey key;
  key.gpu = gpu_name;
  int driver = 0, runtime = 0;
  CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver));
  CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime));
  key.driver = std::to_string(driver);
  key.cuda_runtime = std::to_string(runtime);
  key.build = kVersion;
  // cuBLAS is loaded, and starts (a handle and a 32 MiB workspace per
  // lane), only where a launch may run it; its version is part of the
  // table's key. A table that names no cuBLAS member does not depend on it.
  std::vector<std::unique_ptr<gb::CublasContext>> contexts;
  std::string table_unusable;
  if (gpu::LaunchPolicy::NeedsCublas(settings, key)) {
    gb::CublasContextOptions cublas_options;
    cublas_options.library = settings.cublas_library;
    for (const auto& lane : lanes_) {
      absl::StatusOr<std::unique_ptr<gb::CublasContext>> ctx =
          gb::CublasContext::Create(lane->stream(), cublas_options);
      if (!ctx.ok()) {
        if (settings.policy == gpu::KernelPolicy::kCublas) {
          return absl::FailedPreconditionError(
              absl::StrCat("--kernel_policy=cublas: cuBLAS does not start on GPU ",
                           options_.device, ": ", ctx.status().message()));
        }
        cudaGetLastError();
        table_unusable = absl::StrCat("cuBLAS, which it chooses, does not start (",
                                      ctx.status().message(), ")");
        spdlog::warn("GPU {}: tuning table {} not used: {}; launches take the heuristic",
                     options_.device, settings.table_path, table_unusable);
        contexts.clear();
        break;
      }
      contexts.push_back(*std::move(ctx));
    }
    if (!contexts.empty()) key.cublas = std::to_string(contexts.front()->version());
  } else if (settings.table != nullptr) {
    key.cublas = settings.table->key().cublas;
  }
  policy_ = std::make_unique<gpu::LaunchPolicy>(settings, key, table_unusable);
  if (!policy_->may_use_cublas()) contexts.clear();
  for (size_t i = 0; i < lanes_.size(); ++i)
    lanes_[i]->UsePortfolio(policy_.get(), i < contexts.size() ? std::move(contexts[i]) : nullptr);
  const std::string line = policy_->Describe();
  spdlog::info("GPU {}: {}", options_.device, line);
  info_.kernels.push_back(line);
  if (policy_->may_use_cublas())
    info_.kernels.push_back("cuBLAS / cuBLASLt members of the portfolio (bf16, fp16, fp32, tf32)");
  return absl::OkStatus();
}

void CudaExecutor::Calibrate(void* stream) {
  gpu::Calibration measured = gpu::Calibrate(options_.device, static_cast<cudaStream_t>(stream));
  ApplyPeakOverrides(options_.peak_overrides, &measured.peak_rates);
  const CopyPricingByType pricing{
      gpu::CopyPricingOf(measured.peak_rates, "bf16", measured),
      gpu::CopyPricingOf(measured.peak_rates, "fp16", measured)};
  peaks_.Set(std::move(measured.peak_rates));
  spdlog::info("GPU {}: one small launch takes {:.2f} us back to back, a SIMT tile {:.1f} ns per "
               "unit of K (0: not measured); unaligned bf16/fp16 operands are copied where that "
               "is priced faster",
               options_.device, measured.launch_seconds * 1e6,
               measured.simt_tile_seconds_per_k * 1e9);
  absl::MutexLock lock(&copy_rates_mu_);
  copy_rates_ = CopyRates{measured.copies.h2d, measured.copies.d2h, measured.copies.host_copy};
  copy_pricing_ = pricing;
}

gemm_kernels::CopyPricing CudaExecutor::CopyPricingFor(DType in) const {
  absl::MutexLock lock(&copy_rates_mu_);
  if (in == DType::kBf16) return copy_pricing_.bf16;
  if (in == DType::kFp16) return copy_pricing_.fp16;
  return {};
}

absl::Status CudaExecutor::RemeasurePeaks() {
  absl::MutexLock one_at_a_time(&remeasure_mu_);
  gpu::Lane* lane = nullptr;
  {
    absl::MutexLock lock(&mu_);
    measuring_ = true;
    // Lanes the watchdog abandoned never come back, but then the device is
    // out of service and there is nothing to measure.
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return busy_lanes_ == 0 || !healthy_.load();
    };
    mu_.Await(absl::Condition(&idle));
    if (healthy_.load()) lane = free_lanes_.front();
  }
  if (lane != nullptr) {
    cudaSetDevice(options_.device);
    Calibrate(lane->stream());
    CheckForFault();
  }
  absl::MutexLock lock(&mu_);
  measuring_ = false;
  if (!healthy_.load()) return OutOfService();
  return absl::OkStatus();
}

CudaExecutor::~CudaExecutor() {
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return busy_lanes_ == 0; };
    mu_.Await(absl::Condition(&idle));
    stopping_ = true;
  }
  if (completion_thread_.joinable()) completion_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  {
    absl::MutexLock lock(&relay_->mu);
    relay_->executor = nullptr;
  }
  // A lane whose batch the watchdog abandoned and whose host callback has
  // not come may still have a kernel running that reads and writes its
  // stream, staging and device memory: it is left allocated, not freed
  // under the kernel. Its callback, if it ever comes, reaches the relay only.
  {
    absl::MutexLock lock(&mu_);
    for (auto& lane : lanes_) {
      auto it = in_flight_.find(lane.get());
      if (it == in_flight_.end() || !it->second.abandoned) continue;
      spdlog::warn("GPU {}: a lane's batch is still running past the watchdog at shutdown; "
                   "its memory is left to the process's exit",
                   options_.device);
      lane.release();  // NOLINT(bugprone-unused-return-value): deliberately not freed
    }
  }
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
  TakeOutOfService(absl::StrCat("sticky CUDA error ", cudaGetErrorName(e), " (",
                                cudaGetErrorString(e), "); its context is unusable"));
}

void CudaExecutor::TakeOutOfService(const std::string& why) {
  {
    absl::MutexLock lock(&health_mu_);
    if (!healthy_.exchange(false)) return;  // already out
    ReportOutOfService(why);
  }
  // Waits on mu_ that look at healthy_ (Execute's wait for a lane) are
  // evaluated again when mu_ is released.
  absl::MutexLock wake(&mu_);
}

void CudaExecutor::ReportOutOfService(const std::string& why) {
  spdlog::critical("GPU {} out of service: {}; requests on it are answered UNAVAILABLE from now on",
                   options_.device, why);
  // Under the lock: SetHealthListener(nullptr) at shutdown waits for a call
  // in progress, so the listener never outlives what it reports to.
  if (listener_)
    listener_(0, absl::InternalError(absl::StrCat("GPU ", options_.device, ": ", why)));
}

void CudaExecutor::WatchLoop() {
  // A batch is answered at most a tenth of the watchdog period (at most a
  // second) after its deadline, or after a sticky error.
  const absl::Duration tick =
      options_.watchdog > absl::ZeroDuration()
          ? std::clamp(options_.watchdog / 10, absl::Milliseconds(5), absl::Seconds(1))
          : absl::Seconds(1);
  cudaSetDevice(options_.device);
  while (true) {
    cudaStream_t probe = nullptr;
    bool any_late = false;
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), tick)) return;
      const absl::Time now = absl::Now();
      for (const auto& [lane, batch] : in_flight_) {
        if (batch.finishing || batch.abandoned) continue;
        if (probe == nullptr) probe = lane->stream();
        any_late |= now >= batch.deadline;
      }
    }
    if (probe == nullptr) continue;
    // After a sticky error the device runs no more stream work, host
    // callbacks included, so no batch in flight would ever end: the query
    // of a busy lane's stream reports the error (or another thread found it).
    const cudaError_t e = cudaStreamQuery(probe);
    if (gpu::IsStickyError(e)) {
      TakeOutOfService(absl::StrCat("sticky CUDA error ", cudaGetErrorName(e), " (",
                                    cudaGetErrorString(e), "); its context is unusable"));
    }
    const bool all = !healthy();
    if (!all && !any_late) continue;
    std::vector<InFlight> ended;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      for (auto& [lane, batch] : in_flight_) {
        if (batch.finishing || batch.abandoned || (!all && now < batch.deadline)) continue;
        batch.abandoned = true;
        --busy_lanes_;
        ended.push_back(InFlight{batch.deadline, batch.items, batch.on_done});
      }
    }
    if (ended.empty()) continue;
    if (!all) {
      TakeOutOfService(absl::StrCat(ended.size(), " batch(es) still running ",
                                    absl::FormatDuration(options_.watchdog),
                                    " past their predicted end (watchdog)"));
    }
    spdlog::error("GPU {}: answering the {} request(s) of {} batch(es) that will not end",
                  options_.device,
                  std::accumulate(ended.begin(), ended.end(), size_t{0},
                                  [](size_t n, const InFlight& b) { return n + b.items.size(); }),
                  ended.size());
    for (InFlight& batch : ended) {
      for (auto& item : batch.items) item->Complete(OutOfService());
      if (batch.on_done) batch.on_done();
    }
  }
}

void CudaExecutor::Execute(Batch batch) {
  if (!healthy()) {
    for (auto& item : batch.items) item->Complete(OutOfService());
    if (batch.on_done) batch.on_done();
    return;
  }
  // The batcher's callback runs once, whether the batch ends normally or the
  // watchdog ends it first.
  if (batch.on_done) {
    auto callback = std::make_shared<std::function<void()>>(std::move(batch.on_done));
    auto ran = std::make_shared<std::atomic<bool>>(false);
    batch.on_done = [callback, ran] {
      if (!ran->exchange(true)) (*callback)();
    };
  }
  InFlight watched;
  watched.items = batch.items;
  watched.on_done = batch.on_done;
  if (options_.watchdog > absl::ZeroDuration()) {
    absl::Duration predicted = absl::ZeroDuration();
    for (const auto& item : batch.items) predicted += PredictRunTime(*item);
    watched.deadline = absl::Now() + predicted + options_.watchdog;
  }
  gpu::Lane* lane = nullptr;
  {
    absl::MutexLock lock(&mu_);
    // The batcher keeps at most max_concurrent_batches() in flight, so a lane
    // is normally free at once. Lanes whose batches the watchdog abandoned
    // never come back: the wait also ends when the device goes out of
    // service.
    auto has_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return (!free_lanes_.empty() && !measuring_) || !healthy_.load();
    };
    mu_.Await(absl::Condition(&has_free));
    if (healthy_.load()) {
      lane = free_lanes_.front();
      free_lanes_.pop_front();
      ++busy_lanes_;
      in_flight_[lane] = std::move(watched);
    }
  }
  if (lane == nullptr) {
    for (auto& item : watched.items) item->Complete(OutOfService());
    if (watched.on_done) watched.on_done();
    return;
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
  const double compute = ComputeSeconds(item, peaks_.Get());
  if (!(compute > 0)) return absl::ZeroDuration();
  CopyRates rates;
  {
    absl::MutexLock lock(&copy_rates_mu_);
    rates = copy_rates_;
  }
  // Bytes that travel: what is staged (resident operands are not) and every
  // result.
  const gpu::TransferBytes bytes = gpu::StagedBytes(item);
  double seconds = compute;
  if (rates.host_copy > 0) seconds += (bytes.in + bytes.out) / rates.host_copy;
  if (rates.h2d > 0) seconds += bytes.in / rates.h2d;
  if (rates.d2h > 0) seconds += bytes.out / rates.d2h;
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

absl::StatusOr<std::shared_ptr<ResidentMatrix>> CudaExecutor::QuantizeResident(
    const MatrixRef& source, const Fp8Quantization& q) const {
  return gpu::QuantizeToDeviceMatrix(source, q, options_.device);
}

std::shared_ptr<void> CudaExecutor::PinHostMemory(void* base, uint64_t bytes) const {
  if (!options_.pin_shared_memory) return nullptr;
  const cudaError_t e = cudaHostRegister(base, bytes, cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    spdlog::warn("GPU {}: a shared-memory region of {} bytes could not be page-locked ({}); "
                 "its operands and results are staged",
                 options_.device, bytes, cudaGetErrorString(e));
    return nullptr;
  }
  return std::shared_ptr<void>(base, [](void* p) { cudaHostUnregister(p); });
}

void CudaExecutor::OnLaneDone(gpu::Lane* lane) {
  absl::MutexLock lock(&mu_);
  // Done in time: from here the watchdog leaves it to the completion thread.
  if (auto it = in_flight_.find(lane); it != in_flight_.end()) it->second.finishing = true;
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
      auto it = in_flight_.find(lane);
      if (it != in_flight_.end() && it->second.abandoned) {
        // The watchdog answered it; the late kernel has ended, but the lane
        // is not used again (the device is out of service).
        in_flight_.erase(it);
        continue;
      }
      if (it != in_flight_.end()) it->second.finishing = true;
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
  {
    absl::MutexLock lock(&mu_);
    auto it = in_flight_.find(lane);
    if (it != in_flight_.end()) {
      // A failed Enqueue that the watchdog ended first (its Abandon waited
      // on the late kernel): the watchdog has answered and released it.
      const bool abandoned = it->second.abandoned;
      in_flight_.erase(it);
      if (abandoned) return;
    }
  }
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
