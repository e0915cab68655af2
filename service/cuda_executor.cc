#include "service/cuda_executor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "common/parallel_copy.h"
#include "common/status_macros.h"
#include "service/cuda/batch_layout.h"
#include "service/cuda/calibration.h"
#include "service/cuda/cuda_status.h"
#include "service/cuda/device.h"
#include "service/cuda/device_matrix.h"
#include "service/cuda/kernel_arguments.h"
#include "service/cuda/resources.h"
#include "service/resident_matrix.h"

namespace gemm {
namespace {

namespace gk = gemm_kernels;
using gpu::CudaStatus;

using gpu::KernelArguments;
using gpu::KernelFamily;
using gpu::Placement;

void CUDART_CB HostDone(void* lane);

}  // namespace

// One planned launch of a lane's batch, from set-up to completion.
struct LaunchState {
  std::unique_ptr<gk::Gemm> gemm;          // single and strided-batched launches
  std::unique_ptr<gk::GroupedGemm> group;  // grouped launches
  gk::GemmArguments args;                  // kept for a reducing launch's set-up
  bool reducing = false;                   // stream-K / split-K, on the reducing stream
  bool on_reduce_stream = false;           // it ran there (it had a workspace)
  size_t reducing_workspace = 0;           // its bytes
  // TF32 operands that are not K-major are copied into K-major order here
  // (stream-ordered pool memory, freed after the batch) so the launch takes
  // the tensor cores; null when none is needed or the allocation failed (then
  // the strict-fp32 kernel runs).
  gpu::PoolMemory operand_copies;
  absl::Status status;                     // set-up or launch failure: its requests fail
  std::string label;                       // metrics: "<plan kind>/<kernel family>"
};

struct CudaExecutor::Lane {
  CudaExecutor* owner = nullptr;
  gpu::Stream stream;
  gpu::Event start, h2d_done, d2h_done;
  std::vector<gpu::Event> launch_done;  // one per launch, grown as needed
  // Per launch too: the start and end of a launch on the reducing stream. The
  // lane's own interval for it also holds the wait behind other lanes'
  // reducing launches, which is not this launch's compute time.
  std::vector<gpu::Event> reduce_start, reduce_end;
  gpu::PinnedBuffer staging;
  gpu::PoolMemory device;  // this batch's device buffer, from the stream pool

  // The batch in flight and what Finish needs to know about it.
  Batch batch;
  gpu::BatchLayout layout;  // where its operands and results sit
  std::vector<LaunchState> launches;  // alive until the batch ends
  std::vector<std::set<std::string>> item_kernels;
  std::vector<absl::Status> item_status;

  void Reset() {
    batch = Batch();
    layout = gpu::BatchLayout();
    launches.clear();
    item_kernels.clear();
    item_status.clear();
    device = gpu::PoolMemory();
  }
};

// Every reducing launch runs here, in turn. A blocking stream: the kernel
// library zeroes the workspace's flags on the legacy default stream, which
// is then ordered between consecutive launches.
struct CudaExecutor::Reducer {
  gpu::Stream stream;
  absl::Mutex mu;
  gpu::PoolMemory workspace ABSL_GUARDED_BY(mu);  // on `stream`
};

namespace {

void CUDART_CB HostDone(void* arg) {
  // Runs on a CUDA-internal thread, which must not call CUDA: hand over.
  auto* lane = static_cast<CudaExecutor::Lane*>(arg);
  lane->owner->OnLaneDone(lane);
}

}  // namespace

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

  reducer_ = std::make_unique<Reducer>();
  GEMM_ASSIGN_OR_RETURN(reducer_->stream, gpu::Stream::Create(cudaStreamDefault));
  for (int i = 0; i < options_.streams; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->owner = this;
    GEMM_ASSIGN_OR_RETURN(lane->stream, gpu::Stream::Create(cudaStreamNonBlocking));
    GEMM_ASSIGN_OR_RETURN(lane->start, gpu::Event::Create());
    GEMM_ASSIGN_OR_RETURN(lane->h2d_done, gpu::Event::Create());
    GEMM_ASSIGN_OR_RETURN(lane->d2h_done, gpu::Event::Create());
    absl::MutexLock lock(&mu_);
    free_lanes_.push_back(lane.get());
    lanes_.push_back(std::move(lane));
  }
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
  cudaSetDevice(options_.device);
  if (reducer_ != nullptr && reducer_->stream.get() != nullptr) {
    absl::MutexLock lock(&reducer_->mu);
    reducer_->workspace.Free().IgnoreError();
    cudaStreamSynchronize(reducer_->stream.get());
  }
  reducer_.reset();
  // Give the pool's cached blocks back to the driver: the device is shared.
  ReleaseCachedMemory().IgnoreError();
  lanes_.clear();
}

absl::StatusOr<uint64_t> CudaExecutor::DeviceBytesInUse(int device) {
  return gpu::DeviceBytesInUse(device);
}

absl::Status CudaExecutor::ReleaseCachedMemory() { return gpu::TrimPool(options_.device); }

namespace {

// Stream-ordered: after every launch of the lane that reads them.
void FreeOperandCopies(CudaExecutor::Lane& lane) {
  for (LaunchState& ls : lane.launches) {
    ls.operand_copies.Free().IgnoreError();
  }
}

}  // namespace

void CudaExecutor::Execute(Batch batch) {
  Lane* lane;
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
  lane->batch = std::move(batch);
  if (absl::Status st = Enqueue(*lane); !st.ok()) {
    // Nothing was enqueued after the failing call; wait for what was, then
    // answer every request of the batch with the error.
    cudaStreamSynchronize(lane->stream.get());
    lane->device.Free().IgnoreError();
    FreeOperandCopies(*lane);
    for (auto& item : lane->batch.items) item->Complete(st);
    ReleaseLane(lane);
  }
}

absl::Status CudaExecutor::Enqueue(Lane& lane) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  const Batch& batch = lane.batch;
  lane.item_kernels.resize(batch.items.size());
  lane.item_status.assign(batch.items.size(), absl::OkStatus());
  gpu::BatchLayoutOptions layout_options;
  layout_options.grouped_descriptor_bytes = [](size_t problems) {
    return gk::GroupedGemm::WorkspaceSize(problems);
  };
  GEMM_ASSIGN_OR_RETURN(lane.layout, gpu::LayOutBatch(batch, layout_options));
  lane.launches.resize(batch.launches.size());
  GEMM_RETURN_IF_ERROR(StageInputs(lane));
  // The device buffer's address is needed before the launches are set up:
  // tensor maps and grouped descriptors name it.
  cudaStream_t stream = lane.stream.get();
  const gpu::BatchLayout& layout = lane.layout;
  GEMM_ASSIGN_OR_RETURN(lane.device, gpu::PoolMemory::Allocate(layout.staging_bytes(), stream));
  PrepareLaunches(lane);

  // One H2D copy (operands and grouped descriptors), the launches, one D2H
  // copy, then the host callback.
  unsigned char* device = lane.device.bytes();
  unsigned char* staging = lane.staging.data();
  CUDA_RETURN_IF_ERROR(cudaEventRecord(lane.start.get(), stream));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device, staging, layout.input_bytes, cudaMemcpyHostToDevice, stream));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(lane.h2d_done.get(), stream));
  for (auto* events : {&lane.launch_done, &lane.reduce_start, &lane.reduce_end}) {
    while (events->size() < lane.launches.size()) {
      GEMM_ASSIGN_OR_RETURN(gpu::Event e, gpu::Event::Create());
      events->push_back(std::move(e));
    }
  }
  for (size_t li = 0; li < lane.launches.size(); ++li) {
    if (absl::Status st = EnqueueLaunch(lane, li); !st.ok()) return st;
    CUDA_RETURN_IF_ERROR(cudaEventRecord(lane.launch_done[li].get(), stream));
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging + layout.input_bytes, device + layout.input_bytes,
                                       layout.output_bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(lane.d2h_done.get(), stream));
  GEMM_RETURN_IF_ERROR(lane.device.Free());
  FreeOperandCopies(lane);
  CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(stream, HostDone, &lane));
  return absl::OkStatus();
}

absl::Status CudaExecutor::StageInputs(Lane& lane) {
  const size_t total = lane.layout.staging_bytes();
  if (lane.staging.size() < total) {
    // Grow geometrically so that a lane reallocates only a few times.
    const size_t size = std::max(total, 2 * lane.staging.size());
    GEMM_RETURN_IF_ERROR(lane.staging.Free());
    GEMM_ASSIGN_OR_RETURN(lane.staging, gpu::PinnedBuffer::Allocate(size));
  }
  gpu::StageInputs(lane.layout, lane.staging.data());
  return absl::OkStatus();
}

void CudaExecutor::PrepareLaunches(Lane& lane) {
  const Batch& batch = lane.batch;
  unsigned char* dev = lane.device.bytes();
  const gpu::BatchLayout& layout = lane.layout;
  unsigned char* out_dev = dev + layout.input_bytes;
  for (size_t li = 0; li < batch.launches.size(); ++li) {
    const LaunchGroup& g = batch.launches[li];
    const gpu::LaunchLayout& where = layout.launches[li];
    LaunchState& ls = lane.launches[li];
    const GemmProblemRef& p = *g.problems.front();
    const Placement& pl = layout.problem(li, 0).placement;
    if (g.kind == LaunchGroup::Kind::kGrouped) {
      gk::GroupedGemmArguments args;
      args.allow_tf32 = p.shape.allow_tf32;
      for (size_t i = 0; i < where.count; ++i) {
        const gpu::ProblemLayout& q = layout.problem(li, i);
        args.problems.push_back(gk::GroupedMemberOf(
            KernelArguments(*q.problem, q.placement, q.placement, 1, dev, out_dev)));
      }
      ls.group = std::make_unique<gk::GroupedGemm>();
      ls.status = gk::GroupedGemm::CanImplement(args);
      // The descriptors are written into staging here and reach the device
      // with the operands: nothing blocks on the hot path.
      if (ls.status.ok())
        ls.status = where.descriptors == gpu::kNoDescriptors
                        ? ls.group->Initialize(args, nullptr)
                        : ls.group->InitializeDeferred(args, dev + where.descriptors,
                                                       lane.staging.data() + where.descriptors);
      continue;
    }
    const bool strided = g.kind == LaunchGroup::Kind::kStridedBatched;
    const int64_t count = strided ? static_cast<int64_t>(g.problems.size()) : 1;
    const Placement& pl2 = count > 1 ? layout.problem(li, 1).placement : pl;
    ls.args = KernelArguments(p, pl, pl2, count, dev, out_dev);
    ls.gemm = std::make_unique<gk::Gemm>();
    ls.status = gk::Gemm::CanImplement(ls.args);
    if (!ls.status.ok()) continue;
    if (g.kind == LaunchGroup::Kind::kSingle && options_.reducing_schedules &&
        p.shape.flops() >= options_.reducing_min_flops) {
      // Nonzero only where the heuristic picks stream-K or split-K with a
      // workspace. Paired split-K needs none, and its CTAs wait only on the
      // other CTA of their cluster, which the hardware schedules with them:
      // it runs on the lanes beside other kernels like data-parallel.
      ls.reducing_workspace = gk::Gemm::WorkspaceSize(ls.args);
      ls.reducing = ls.reducing_workspace > 0 &&
                    ls.reducing_workspace <= options_.max_reducing_workspace_bytes;
    }
    if (const size_t bytes = gk::Gemm::OperandCopyBytes(ls.args); bytes > 0) {
      auto copies = gpu::PoolMemory::Allocate(bytes, lane.stream.get());
      if (copies.ok()) {
        ls.operand_copies = std::move(*copies);
      } else {
        cudaGetLastError();
      }
    }
    // A reducing launch is set up when it is enqueued, in turn with the others.
    if (!ls.reducing)
      ls.status = ls.gemm->Initialize(ls.args, nullptr, gk::TileHint::kAuto,
                                      gk::ScheduleHint::kAuto, ls.operand_copies.get());
  }
}

absl::Status CudaExecutor::EnqueueLaunch(Lane& lane, size_t li) {
  LaunchState& ls = lane.launches[li];
  const LaunchGroup& g = lane.batch.launches[li];
  if (ls.status.ok()) {
    if (ls.group) {
      ls.status = ls.group->Run(lane.stream.get());
    } else if (ls.reducing) {
      ls.status = EnqueueReducing(lane, li);
    } else {
      ls.status = ls.gemm->Run(lane.stream.get());
    }
  }
  const std::string& kernel = ls.group ? ls.group->kernel_name() : ls.gemm->kernel_name();
  const gk::KernelKind kind = ls.group ? ls.group->kernel_kind() : ls.gemm->kernel_kind();
  ls.label = absl::StrCat(LaunchKindName(g.kind), "/", KernelFamily(kind));
  for (size_t i = 0; i < g.problems.size(); ++i) {
    const size_t item = lane.layout.problem(li, i).item;
    // This launch's requests fail; the rest of the batch goes on.
    if (!ls.status.ok()) {
      lane.item_status[item] = ls.status;
    } else {
      lane.item_kernels[item].insert(kernel);
    }
  }
  // A failed launch leaves CUDA's last-error state set; it is reported above.
  if (!ls.status.ok()) cudaGetLastError();
  return absl::OkStatus();
}

absl::Status CudaExecutor::EnqueueReducing(Lane& lane, size_t li) {
  LaunchState& ls = lane.launches[li];
  cudaStream_t reduce = reducer_->stream.get();
  {
    absl::MutexLock lock(&reducer_->mu);
    gpu::PoolMemory& workspace = reducer_->workspace;
    if (workspace.size() < ls.reducing_workspace) {
      // Stream-ordered on the reducing stream: the old workspace is freed
      // after the last launch that used it.
      workspace = gpu::PoolMemory();
      auto grown = gpu::PoolMemory::Allocate(ls.reducing_workspace, reduce);
      if (grown.ok()) {
        workspace = std::move(*grown);
      } else {
        cudaGetLastError();
      }
    }
    // Without a workspace the launch is data-parallel, on the lane.
    if (workspace.get() != nullptr) {
      absl::Status st = ls.gemm->Initialize(ls.args, workspace.get(), gk::TileHint::kAuto,
                                            gk::ScheduleHint::kAuto, ls.operand_copies.get());
      if (st.ok())
        st = CudaStatus(cudaStreamWaitEvent(reduce, lane.h2d_done.get(), 0), "reducing launch");
      if (st.ok())
        st = CudaStatus(cudaEventRecord(lane.reduce_start[li].get(), reduce), "reducing launch");
      if (st.ok()) st = ls.gemm->Run(reduce);
      if (st.ok())
        st = CudaStatus(cudaEventRecord(lane.reduce_end[li].get(), reduce), "reducing launch");
      if (!st.ok()) return st;
      ls.on_reduce_stream = true;
      return CudaStatus(cudaStreamWaitEvent(lane.stream.get(), lane.reduce_end[li].get(), 0),
                        "reducing launch");
    }
  }
  absl::Status st = ls.gemm->Initialize(ls.args, nullptr, gk::TileHint::kAuto,
                                        gk::ScheduleHint::kAuto, ls.operand_copies.get());
  if (st.ok()) st = ls.gemm->Run(lane.stream.get());
  return st;
}

absl::Duration CudaExecutor::PredictRunTime(const WorkItem& item) const {
  const double compute = ComputeSeconds(item, info_.peak_rates);
  if (!(compute > 0)) return absl::ZeroDuration();
  // Bytes that travel: what is staged (resident operands are not) and every
  // result.
  const gpu::TransferBytes bytes = gpu::StagedBytes(item);
  const double in = bytes.in, out = bytes.out;
  double seconds = compute;
  if (host_copy_rate_ > 0) seconds += (in + out) / host_copy_rate_;
  if (h2d_rate_ > 0) seconds += in / h2d_rate_;
  if (d2h_rate_ > 0) seconds += out / d2h_rate_;
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

void CudaExecutor::OnLaneDone(Lane* lane) {
  absl::MutexLock lock(&mu_);
  finished_lanes_.push_back(lane);
}

void CudaExecutor::CompletionLoop() {
  while (true) {
    Lane* lane;
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
    auto outcomes = Finish(*lane);
    // The lane is free before the answers go out, so that a client's next
    // request finds the executor idle rather than just about to be.
    ReleaseLane(lane);
    for (auto& [item, status] : outcomes) item->Complete(status);
  }
}

std::vector<std::pair<std::shared_ptr<WorkItem>, absl::Status>> CudaExecutor::Finish(
    Lane& lane) {
  Batch& batch = lane.batch;
  // A kernel fault surfaces here; it fails the whole batch.
  absl::Status batch_status = CudaStatus(cudaEventSynchronize(lane.d2h_done.get()), "batch");
  float h2d_ms = 0, d2h_ms = 0;
  std::vector<float> launch_ms(lane.launches.size(), 0.0f);
  if (batch_status.ok()) {
    cudaEventElapsedTime(&h2d_ms, lane.start.get(), lane.h2d_done.get());
    cudaEvent_t prev = lane.h2d_done.get();
    for (size_t i = 0; i < lane.launches.size(); ++i) {
      if (lane.launches[i].on_reduce_stream) {
        cudaEventElapsedTime(&launch_ms[i], lane.reduce_start[i].get(), lane.reduce_end[i].get());
      } else {
        cudaEventElapsedTime(&launch_ms[i], prev, lane.launch_done[i].get());
      }
      prev = lane.launch_done[i].get();
    }
    cudaEventElapsedTime(&d2h_ms, prev, lane.d2h_done.get());
  }
  float compute_ms = 0;
  for (float ms : launch_ms) compute_ms += ms;

  // The one host copy on the way out: staging into each response.
  if (batch_status.ok()) gpu::CopyOutResults(lane.layout, lane.staging.data(), lane.item_status);
  for (size_t i = 0; i < batch.items.size(); ++i) {
    WorkItem& item = *batch.items[i];
    ExecutionReport& r = item.report;
    r.backend = "cuda";
    if (r.device < 0) r.device = options_.device;
    r.kernel = absl::StrJoin(lane.item_kernels[i], ",");
    r.h2d = absl::Milliseconds(h2d_ms);
    r.d2h = absl::Milliseconds(d2h_ms);
    r.transfer = r.h2d + r.d2h;
    r.compute = absl::Milliseconds(compute_ms);
    if (i == 0) {
      r.h2d_bytes = lane.layout.input_bytes;
      r.d2h_bytes = lane.layout.output_bytes;
    }
    for (size_t li = 0; li < lane.launches.size(); ++li)
      if (lane.layout.launches[li].owner == i)
        r.launches.emplace_back(lane.launches[li].label, absl::Milliseconds(launch_ms[li]));
  }
  std::vector<std::pair<std::shared_ptr<WorkItem>, absl::Status>> outcomes;
  for (size_t i = 0; i < batch.items.size(); ++i)
    outcomes.emplace_back(batch.items[i], !batch_status.ok() ? batch_status : lane.item_status[i]);
  return outcomes;
}

void CudaExecutor::ReleaseLane(Lane* lane) {
  std::function<void()> on_done = std::move(lane->batch.on_done);
  lane->Reset();
  {
    absl::MutexLock lock(&mu_);
    free_lanes_.push_back(lane);
    --busy_lanes_;
  }
  if (on_done) on_done();
}

void CudaExecutor::Calibrate() {
  const gpu::Calibration measured = gpu::Calibrate(options_.device, lanes_.front()->stream.get());
  info_.peak_rates.insert(info_.peak_rates.end(), measured.peak_rates.begin(),
                          measured.peak_rates.end());
  h2d_rate_ = measured.copies.h2d;
  d2h_rate_ = measured.copies.d2h;
  host_copy_rate_ = measured.copies.host_copy;
}

}  // namespace gemm
