// One lane of the CUDA executor: a stream, its events, a pinned staging
// buffer (grown geometrically, then reused: no cudaMallocHost on the hot
// path) and the batch in flight on it.
//
// A batch takes one lane: operands are copied once from the requests into
// staging (batch_layout.h says where), go to the device in one H2D copy into
// memory from the device's stream-ordered pool, each planned launch runs,
// results come back in one D2H copy, and a host callback reports the lane
// done. Finish then copies the results once into the responses.
#ifndef GEMM_SERVICE_CUDA_LANE_H_
#define GEMM_SERVICE_CUDA_LANE_H_

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cublas/cublas_gemm.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "kernels/tuning/candidate.h"
#include "service/cuda/batch_layout.h"
#include "service/cuda/launch_decisions.h"
#include "service/cuda/partner_quantization.h"
#include "service/cuda/portfolio_policy.h"
#include "service/cuda/reducing_stream.h"
#include "service/cuda/resources.h"
#include "service/queue/launch_plan.h"
#include "service/queue/work_item.h"

namespace gemm {
namespace gpu {

// The launch rules (launch_decisions.h) and the lane's own settings.
struct LaneOptions : LaunchRules {
  int device = 0;
  // Test seam (CudaExecutor::Options::before_launches): called with the
  // lane's stream after the H2D copy is enqueued, before the launches.
  std::function<void(void* stream)> before_launches;
  // The device model deterministic results name ("NVIDIA H200 (sm_90)").
  std::string device_model;
};

// One planned launch of a lane's batch, from set-up to completion.
struct LaunchState {
  std::unique_ptr<gemm_kernels::Gemm> gemm;          // single and strided-batched
  std::unique_ptr<gemm_kernels::GroupedGemm> group;  // grouped
  // A cuBLAS member instead, where the policy chose one and it can run the
  // launch (then gemm and group are null).
  std::unique_ptr<gemm_kernels::cublas::CublasGemm> blas;
  std::unique_ptr<gemm_kernels::cublas::CublasGroupedGemm> blas_group;
  PoolMemory blas_pointers;  // blas_group's pointer arrays, freed after the batch
  // The member that runs (the policy's choice, or the heuristic after a
  // fallback).
  gemm_kernels::tuning::CandidateId member;
  gemm_kernels::GemmArguments args;
  // CanImplement, the device lookup and the heuristic, once per launch; kept
  // for a reducing launch's set-up.
  gemm_kernels::Gemm::Plan plan;
  bool reducing = false;             // stream-K / split-K, on the reducing stream
  bool on_reduce_stream = false;     // it ran there (it had a workspace)
  size_t reducing_workspace = 0;     // its bytes
  // TF32 operands that are not K-major are copied into K-major order here
  // (freed after the batch) so the launch takes the tensor cores; empty when
  // none is needed or the allocation failed (then the strict-fp32 kernel
  // runs).
  PoolMemory operand_copies;
  // quantize_partner: the partner's codes and scales, made on the lane's
  // stream before the launch; its members' outcomes land in the lane's
  // quantize_flags_ from index quantize_flags_at.
  PartnerQuantization quantize;
  size_t quantize_flags_at = 0;
  absl::Status status;  // set-up or launch failure: its requests fail
  std::string label;    // metrics: "<plan kind>/<kernel family>[_fp8]"
};

using Outcomes = std::vector<std::pair<std::shared_ptr<WorkItem>, absl::Status>>;

class Lane {
 public:
  // Called from a CUDA thread when the lane's work is done; it must not call
  // CUDA, only hand the lane over.
  using DoneCallback = std::function<void(Lane*)>;

  // On the current device, which is options.device. `reducer` outlives the
  // lane.
  static absl::StatusOr<std::unique_ptr<Lane>> Create(const LaneOptions& options,
                                                      ReducingStream* reducer,
                                                      DoneCallback on_done);

  // Stages `batch`, enqueues its copies and launches, then the callback. A
  // launch that fails fails its own requests only. On error nothing was
  // enqueued after the failing call: call Abandon, then answer the batch.
  absl::Status Enqueue(Batch batch);
  // After a failed Enqueue: waits for what was enqueued and frees the batch's
  // device memory.
  void Abandon();
  // After the callback: copies results out, fills the reports and returns
  // each request's outcome. A kernel fault fails the whole batch.
  Outcomes Finish();
  // Forgets the batch.
  void Reset();

  Batch& batch() { return batch_; }
  cudaStream_t stream() const { return stream_.get(); }

  // Gives the lane the executor's portfolio policy (it outlives the lane)
  // and, where the policy may choose cuBLAS, a cuBLAS context bound to this
  // lane's stream. Called once, before the first batch. Without it every
  // launch takes the heuristic.
  void UsePortfolio(const LaunchPolicy* policy,
                    std::unique_ptr<gemm_kernels::cublas::CublasContext> cublas);

 private:
  Lane(const LaneOptions& options, ReducingStream* reducer, DoneCallback on_done)
      : options_(options), reducer_(reducer), on_done_(std::move(on_done)) {}
  static void CUDART_CB HostDone(void* lane);

  // Grows `buffer` (staging_ or quantize_flags_) to at least `bytes`.
  absl::Status GrowPinned(PinnedBuffer& buffer, size_t bytes);
  absl::Status GrowLaunchEvents(size_t launches);
  // Each launch's kernel chosen and set up (grouped descriptors written into
  // staging), then enqueued in turn.
  void PrepareLaunches();
  void PrepareGrouped(size_t launch);
  void PrepareGemm(size_t launch);
  // Sets up ls.blas (or ls.blas_group) for ls.member; on failure the caller
  // counts a fallback and plans the heuristic.
  absl::Status PrepareCublas(LaunchState& ls);
  absl::Status PrepareCublasGrouped(LaunchState& ls, const gemm_kernels::GroupedGemmArguments& args);
  void EnqueueLaunch(size_t launch);
  // The launch's status into its items (failed) or its kernel name (ran).
  void RecordOutcome(size_t launch, const std::string& kernel);
  // A deterministic launch's reproducibility records, into its items' reports.
  void RecordDeterministic(size_t launch, gemm_kernels::KernelKind kind,
                           const std::string& kernel);
  absl::Status EnqueueReducing(size_t launch);
  // Stream-ordered: after every launch of the lane that reads them.
  void FreeOperandCopies();
  // After the batch: a member whose quantize_partner met a NaN or infinity
  // fails its request.
  void CheckPartnerQuantization();
  // Milliseconds of the H2D copy, each launch and the D2H copy.
  struct Timings {
    float h2d_ms = 0, d2h_ms = 0, compute_ms = 0;
    std::vector<float> launch_ms;
  };
  Timings ReadTimings() const;
  void FillReports(const Timings& t);

  const LaneOptions options_;
  ReducingStream* const reducer_;
  const DoneCallback on_done_;
  const LaunchPolicy* policy_ = nullptr;
  Stream stream_;
  // Declared after the stream so that it is destroyed before it.
  std::unique_ptr<gemm_kernels::cublas::CublasContext> cublas_;
  Event start_, h2d_done_, d2h_done_;
  std::vector<Event> launch_done_;  // one per launch, grown as needed
  // Per launch too: the start and end of a launch on the reducing stream. The
  // lane's own interval for it also holds the wait behind other lanes'
  // reducing launches, which is not this launch's compute time.
  std::vector<Event> reduce_start_, reduce_end_;
  PinnedBuffer staging_;
  // One uint64 per member whose partner is quantized (PartnerQuantization).
  PinnedBuffer quantize_flags_;
  std::vector<PinnedBuffer> outgrown_staging_;  // freed with the lane
  PoolMemory device_;  // this batch's device buffer

  // The batch in flight and what Finish needs to know about it.
  Batch batch_;
  BatchLayout layout_;
  std::vector<LaunchState> launches_;  // alive until the batch ends
  std::vector<std::set<std::string>> item_kernels_;
  std::vector<absl::Status> item_status_;
  // The shared-memory regions this batch's copies read or write in place,
  // held until the lane is reset: an item lets go of its regions when it
  // completes, and a batch the watchdog abandons may still be copying.
  std::vector<std::shared_ptr<const SharedMemoryRegion>> direct_regions_;
};

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_LANE_H_
