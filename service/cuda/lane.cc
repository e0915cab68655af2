#include "service/cuda/lane.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "kernels/deterministic_hints.h"
#include "service/cuda/cuda_status.h"
#include "service/cuda/kernel_arguments.h"

namespace gemm {
namespace gpu {

namespace gk = gemm_kernels;
namespace gt = gemm_kernels::tuning;
namespace gb = gemm_kernels::cublas;

absl::StatusOr<std::unique_ptr<Lane>> Lane::Create(const LaneOptions& options,
                                                   ReducingStream* reducer, DoneCallback on_done) {
  std::unique_ptr<Lane> lane(new Lane(options, reducer, std::move(on_done)));
  GEMM_ASSIGN_OR_RETURN(lane->stream_, Stream::Create(cudaStreamNonBlocking));
  GEMM_ASSIGN_OR_RETURN(lane->start_, Event::Create());
  GEMM_ASSIGN_OR_RETURN(lane->h2d_done_, Event::Create());
  GEMM_ASSIGN_OR_RETURN(lane->d2h_done_, Event::Create());
  return lane;
}

void Lane::UsePortfolio(const LaunchPolicy* policy, std::unique_ptr<gb::CublasContext> cublas) {
  policy_ = policy;
  cublas_ = std::move(cublas);
}

void CUDART_CB Lane::HostDone(void* arg) {
  // Runs on a CUDA-internal thread, which must not call CUDA: hand over.
  auto* lane = static_cast<Lane*>(arg);
  lane->on_done_(lane);
}

void Lane::Reset() {
  batch_ = Batch();
  layout_ = BatchLayout();
  launches_.clear();
  item_kernels_.clear();
  item_status_.clear();
  direct_regions_.clear();
  device_ = PoolMemory();
}

absl::Status Lane::Enqueue(Batch batch) {
  batch_ = std::move(batch);
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  item_kernels_.resize(batch_.items.size());
  item_status_.assign(batch_.items.size(), absl::OkStatus());
  BatchLayoutOptions layout_options;
  layout_options.grouped_descriptor_bytes = [](size_t problems) {
    return gk::GroupedGemm::WorkspaceSize(problems);
  };
  GEMM_ASSIGN_OR_RETURN(layout_, LayOutBatch(batch_, layout_options));
  launches_.resize(batch_.launches.size());
  GEMM_RETURN_IF_ERROR(GrowPinned(staging_, layout_.staging_bytes()));
  size_t quantized_members = 0;
  for (size_t li = 0; li < launches_.size(); ++li) {
    if (layout_.problem(li, 0).problem->quantize == GemmProblemRef::Quantize::kNone) continue;
    launches_[li].quantize_flags_at = quantized_members;
    quantized_members += layout_.launches[li].count;
  }
  GEMM_RETURN_IF_ERROR(GrowPinned(quantize_flags_, quantized_members * sizeof(uint64_t)));
  StageInputs(layout_, staging_.data());
  // The device buffer's address is needed before the launches are set up:
  // tensor maps and grouped descriptors name it.
  cudaStream_t stream = stream_.get();
  GEMM_ASSIGN_OR_RETURN(device_, PoolMemory::Allocate(layout_.staging_bytes(), stream));
  PrepareLaunches();

  // One H2D copy (operands and grouped descriptors), the launches, one D2H
  // copy, then the host callback.
  unsigned char* device = device_.bytes();
  unsigned char* staging = staging_.data();
  const size_t in = layout_.input_bytes;
  CUDA_RETURN_IF_ERROR(cudaEventRecord(start_.get(), stream));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, staging, in, cudaMemcpyHostToDevice, stream));
  // Operands in page-locked shared memory come straight from the client's
  // pages (their staging bytes, copied above, are not read).
  for (const ProblemLayout& m : layout_.problems) {
    if (!m.direct.any()) continue;
    const auto& regions = batch_.items[m.item]->shared_regions;
    direct_regions_.insert(direct_regions_.end(), regions.begin(), regions.end());
    const GemmProblemRef& p = *m.problem;
    const Placement& pl = m.placement;
    if (m.direct.a)
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device + pl.a, p.a.data, p.a.bytes(),
                                           cudaMemcpyHostToDevice, stream));
    if (m.direct.b)
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device + pl.b, p.b.data, p.b.bytes(),
                                           cudaMemcpyHostToDevice, stream));
    if (m.direct.c)
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device + pl.c, p.c.data, p.c.bytes(),
                                           cudaMemcpyHostToDevice, stream));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(h2d_done_.get(), stream));
  GEMM_RETURN_IF_ERROR(GrowLaunchEvents(launches_.size()));
  if (options_.before_launches) options_.before_launches(stream);
  for (size_t li = 0; li < launches_.size(); ++li) {
    EnqueueLaunch(li);
    CUDA_RETURN_IF_ERROR(cudaEventRecord(launch_done_[li].get(), stream));
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging + in, device + in, layout_.output_bytes,
                                       cudaMemcpyDeviceToHost, stream));
  // Results bound for page-locked shared memory go straight there
  // (CopyOutResults leaves them alone).
  for (const ProblemLayout& m : layout_.problems) {
    if (!m.direct.d) continue;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.problem->d, device + in + m.placement.d,
                                         m.problem->d_bytes(), cudaMemcpyDeviceToHost, stream));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(d2h_done_.get(), stream));
  GEMM_RETURN_IF_ERROR(device_.Free());
  FreeOperandCopies();
  CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(stream, HostDone, this));
  return absl::OkStatus();
}

void Lane::Abandon() {
  cudaStreamSynchronize(stream_.get());
  device_.Free().IgnoreError();
  FreeOperandCopies();
}

absl::Status Lane::GrowPinned(PinnedBuffer& buffer, size_t bytes) {
  if (buffer.size() >= bytes) return absl::OkStatus();
  // Grow geometrically so that a lane reallocates only a few times.
  const size_t size = std::max(bytes, 2 * buffer.size());
  GEMM_ASSIGN_OR_RETURN(PinnedBuffer grown, PinnedBuffer::Allocate(size));
  // cudaFreeHost waits for the whole device: on the hot path, behind a hung
  // kernel of another lane (or executor), it would stop this lane too. The
  // outgrown buffer is kept until the lane goes; growth is geometric, so all
  // of them together are smaller than the buffer in use.
  if (buffer.size() > 0) outgrown_staging_.push_back(std::move(buffer));
  buffer = std::move(grown);
  return absl::OkStatus();
}

absl::Status Lane::GrowLaunchEvents(size_t launches) {
  for (auto* events : {&launch_done_, &reduce_start_, &reduce_end_}) {
    while (events->size() < launches) {
      GEMM_ASSIGN_OR_RETURN(Event e, Event::Create());
      events->push_back(std::move(e));
    }
  }
  return absl::OkStatus();
}

void Lane::FreeOperandCopies() {
  for (LaunchState& ls : launches_) {
    ls.operand_copies.Free().IgnoreError();
    ls.blas_pointers.Free().IgnoreError();
    ls.quantize.Free();
  }
}

void Lane::CheckPartnerQuantization() {
  const auto* flags = reinterpret_cast<const uint64_t*>(quantize_flags_.data());
  for (size_t li = 0; li < launches_.size(); ++li) {
    const LaunchState& ls = launches_[li];
    if (!ls.quantize.active() || !ls.status.ok()) continue;
    for (int64_t i = 0; i < ls.quantize.members(); ++i) {
      const ProblemLayout& q = layout_.problem(li, static_cast<size_t>(i));
      const WorkItem& item = *batch_.items[q.item];
      const int index = static_cast<int>(q.problem - item.problems.data());
      absl::Status st = ls.quantize.MemberStatus(i, index, flags + ls.quantize_flags_at);
      if (!st.ok() && item_status_[q.item].ok()) item_status_[q.item] = std::move(st);
    }
  }
}

absl::Status Lane::PrepareCublas(LaunchState& ls) {
  if (cublas_ == nullptr)
    return absl::FailedPreconditionError("this lane has no cuBLAS context");
  gb::CublasMethod method;
  switch (ls.member.family) {
    case gt::CandidateFamily::kCublasGemmEx:
      method = gb::CublasMethod::kGemmEx;
      break;
    case gt::CandidateFamily::kCublasStridedBatched:
      method = gb::CublasMethod::kStridedBatched;
      break;
    case gt::CandidateFamily::kCublasLt:
      method = gb::CublasMethod::kLt;
      break;
    default:
      return absl::InvalidArgumentError("the member is not a cuBLAS form of a single launch");
  }
  auto blas = std::make_unique<gb::CublasGemm>();
  // A table names a configured cuBLASLt algorithm; the unconfigured member
  // takes cuBLASLt's own first choice.
  const bool configured = method == gb::CublasMethod::kLt &&
                          ls.member != gt::CandidateId::CublasLtHeuristic();
  GEMM_RETURN_IF_ERROR(
      blas->Initialize(cublas_.get(), method, ls.args, configured ? &ls.member.lt : nullptr));
  ls.blas = std::move(blas);
  return absl::OkStatus();
}

absl::Status Lane::PrepareCublasGrouped(LaunchState& ls, const gk::GroupedGemmArguments& args) {
  if (cublas_ == nullptr)
    return absl::FailedPreconditionError("this lane has no cuBLAS context");
  GEMM_RETURN_IF_ERROR(gb::CublasGroupedGemm::CanImplement(args));
  // Stream-ordered: the pointer arrays are copied in on this stream before
  // the launch and freed after the batch (FreeOperandCopies).
  GEMM_ASSIGN_OR_RETURN(ls.blas_pointers,
                        PoolMemory::Allocate(gb::CublasGroupedGemm::WorkspaceSize(args.problems.size()),
                                             stream_.get()));
  auto blas = std::make_unique<gb::CublasGroupedGemm>();
  GEMM_RETURN_IF_ERROR(blas->Initialize(cublas_.get(), args, ls.blas_pointers.get()));
  ls.blas_group = std::move(blas);
  return absl::OkStatus();
}

void Lane::PrepareLaunches() {
  for (size_t li = 0; li < batch_.launches.size(); ++li) {
    if (batch_.launches[li].kind == LaunchGroup::Kind::kGrouped) {
      PrepareGrouped(li);
    } else {
      PrepareGemm(li);
    }
  }
}

void Lane::PrepareGrouped(size_t li) {
  const LaunchLayout& where = layout_.launches[li];
  LaunchState& ls = launches_[li];
  unsigned char* dev = device_.bytes();
  gk::GroupedGemmArguments args;
  args.allow_tf32 = layout_.problem(li, 0).problem->shape.allow_tf32;
  args.deterministic = batch_.launches[li].deterministic;
  const std::vector<gk::GemmArguments> members = GroupedMemberArguments(layout_, li, dev);
  for (const gk::GemmArguments& m : members) args.problems.push_back(gk::GroupedMemberOf(m));
  ls.member = ChooseGroupedMember(policy_, members, args.deterministic);
  if (ls.member.family != gt::CandidateFamily::kOursGrouped) {
    absl::Status st = ls.member.family == gt::CandidateFamily::kCublasGrouped
                          ? PrepareCublasGrouped(ls, args)
                          : absl::InvalidArgumentError("the member is not a grouped form");
    if (st.ok()) return;
    cudaGetLastError();  // a failed allocation or copy: the heuristic runs instead
    policy_->CountFallback(ls.member, st);
    ls.blas_pointers.Free().IgnoreError();
    ls.member = gt::CandidateId::OursGroupedHeuristic();
  }
  ls.group = std::make_unique<gk::GroupedGemm>();
  ls.status = gk::GroupedGemm::CanImplement(args);
  if (!ls.status.ok()) return;
  // The descriptors are written into staging here and reach the device with
  // the operands: nothing blocks on the hot path.
  ls.status = where.descriptors == kNoDescriptors
                  ? ls.group->Initialize(args, nullptr, ls.member.tile)
                  : ls.group->InitializeDeferred(args, dev + where.descriptors,
                                                 staging_.data() + where.descriptors,
                                                 ls.member.tile);
}

void Lane::PrepareGemm(size_t li) {
  const LaunchGroup& g = batch_.launches[li];
  LaunchState& ls = launches_[li];
  unsigned char* dev = device_.bytes();
  const ProblemLayout& first = layout_.problem(li, 0);
  const GemmProblemRef& p = *first.problem;
  ls.args = GemmLaunchArguments(g, layout_, li, dev, options_);
  const int64_t count = ls.args.batch_count;  // the members of a strided launch
  const Placement& pl2 = count > 1 ? layout_.problem(li, 1).placement : first.placement;
  if (p.quantize != GemmProblemRef::Quantize::kNone) {
    // The launch reads the partner's codes, made from its staged (or
    // resident) values.
    const bool is_a = p.quantize == GemmProblemRef::Quantize::kA;
    const MatrixRef& m = is_a ? p.a : p.b;
    const size_t at = is_a ? first.placement.a : first.placement.b;
    const size_t next = is_a ? pl2.a : pl2.b;
    const void* resident = ResidentData(m);
    ls.status = ls.quantize.Prepare(p, count, resident != nullptr ? resident : dev + at,
                                    resident == nullptr && count > 1 ? next - at : 0, &ls.args,
                                    stream_.get());
    if (!ls.status.ok()) {
      cudaGetLastError();  // reported through the launch's requests
      ls.gemm = std::make_unique<gk::Gemm>();  // names no kernel
      return;
    }
  }
  ls.member = ChooseSingleMember(policy_, ls.args, g.deterministic);
  if (ls.member.family != gt::CandidateFamily::kOurs) {
    const absl::Status st = PrepareCublas(ls);
    if (st.ok()) return;
    policy_->CountFallback(ls.member, st);
    ls.member = gt::CandidateId::Heuristic();
  }
  ls.gemm = std::make_unique<gk::Gemm>();
  if (g.deterministic) {
    // The plan's tile, data-parallel, and (below) no workspace: every member
    // of a strided batch runs as it runs alone.
    const gk::DeterministicHints h = gk::DeterministicHintsFor(ls.args);
    ls.plan = gk::Gemm::MakePlan(ls.args, h.tile, h.schedule);
  } else {
    // The heuristic's choice, or the tile and schedule the table forces.
    ls.plan = gk::Gemm::MakePlan(ls.args, ls.member.tile, ls.member.schedule);
    if (!ls.plan.status().ok() && ls.member != gt::CandidateId::Heuristic()) {
      policy_->CountFallback(ls.member, ls.plan.status());
      ls.member = gt::CandidateId::Heuristic();
      ls.plan = gk::Gemm::MakePlan(ls.args);
    }
  }
  ls.status = ls.plan.status();
  if (!ls.status.ok()) return;
  // The plan's workspace is nonzero only where the heuristic picks stream-K
  // or split-K with one (a deterministic plan never has one).
  const ReducingChoice reducing = ChooseReducing(g, p, ls.plan.workspace_bytes(), options_);
  ls.reducing = reducing.reducing;
  ls.reducing_workspace = reducing.workspace;
  if (const size_t bytes = ls.plan.operand_copy_bytes(); bytes > 0) {
    auto copies = PoolMemory::Allocate(bytes, stream_.get());
    if (copies.ok()) {
      ls.operand_copies = *std::move(copies);
    } else {
      cudaGetLastError();  // without the copies the strict-fp32 kernel runs
      // whose bits differ: a deterministic launch fails instead (retryable).
      if (g.deterministic) {
        ls.status = absl::ResourceExhaustedError(absl::StrCat(
            "deterministic problem: no device memory for its K-major operand copies (",
            bytes, " bytes); retry"));
        return;
      }
    }
  }
  // A reducing launch is set up when it is enqueued, in turn with the others.
  if (!ls.reducing)
    ls.status = ls.gemm->Initialize(ls.plan, nullptr, ls.operand_copies.get());
}

void Lane::EnqueueLaunch(size_t li) {
  LaunchState& ls = launches_[li];
  const LaunchGroup& g = batch_.launches[li];
  std::string suffix;  // what ran before the kernel, for its name
  if (ls.status.ok() && ls.quantize.active()) {
    ls.status = ls.quantize.Enqueue(
        stream_.get(),
        reinterpret_cast<uint64_t*>(quantize_flags_.data()) + ls.quantize_flags_at);
    suffix = ls.quantize.KernelSuffix();
  }
  if (ls.blas || ls.blas_group) {
    // cuBLAS runs on this lane's stream through its context; deterministic
    // launches never get here (portfolio_policy.h).
    if (ls.status.ok()) ls.status = ls.blas ? ls.blas->Run() : ls.blas_group->Run();
    const std::string& kernel = ls.blas ? ls.blas->kernel_name() : ls.blas_group->kernel_name();
    ls.label = CublasLaunchLabel(g.kind, ls.member.family, ls.blas && IsFp8(ls.args.a.dtype));
    RecordOutcome(li, kernel + suffix);
    return;
  }
  if (ls.status.ok()) {
    if (ls.group) {
      ls.status = ls.group->Run(stream_.get());
    } else if (ls.reducing) {
      ls.status = EnqueueReducing(li);
    } else {
      ls.status = ls.gemm->Run(stream_.get());
    }
  }
  const std::string& kernel = ls.group ? ls.group->kernel_name() : ls.gemm->kernel_name();
  const gk::KernelKind kind = ls.group ? ls.group->kernel_kind() : ls.gemm->kernel_kind();
  ls.label = OursLaunchLabel(g.kind, kind, ls.group != nullptr, ls.args.a.dtype,
                             !ls.group && ls.gemm->copies_operands());
  if (ls.status.ok() && g.deterministic) RecordDeterministic(li, kind, kernel + suffix);
  RecordOutcome(li, kernel + suffix);
}

void Lane::RecordOutcome(size_t li, const std::string& kernel) {
  LaunchState& ls = launches_[li];
  for (size_t i = 0; i < layout_.launches[li].count; ++i) {
    const size_t item = layout_.problem(li, i).item;
    // This launch's requests fail; the rest of the batch goes on.
    if (!ls.status.ok()) {
      item_status_[item] = ls.status;
    } else {
      item_kernels_[item].insert(kernel);
    }
  }
  // A failed launch leaves CUDA's last-error state set; it is reported above.
  if (!ls.status.ok()) cudaGetLastError();
}

void Lane::RecordDeterministic(size_t li, gk::KernelKind kind, const std::string& kernel) {
  for (size_t i = 0; i < layout_.launches[li].count; ++i) {
    const ProblemLayout& q = layout_.problem(li, i);
    WorkItem& item = *batch_.items[q.item];
    const size_t index = static_cast<size_t>(q.problem - item.problems.data());
    if (item.report.reproducibility.size() < item.problems.size())
      item.report.reproducibility.resize(item.problems.size());
    item.report.reproducibility[index] = DeterministicRecord(*q.problem, kind, kernel);
    item.report.device_model = options_.device_model;
  }
}

absl::Status Lane::EnqueueReducing(size_t li) {
  LaunchState& ls = launches_[li];
  ReducingLaunch launch;
  launch.gemm = ls.gemm.get();
  launch.plan = &ls.plan;
  launch.operand_copies = ls.operand_copies.get();
  launch.workspace_bytes = ls.reducing_workspace;
  launch.inputs_ready = h2d_done_.get();
  launch.start = reduce_start_[li].get();
  launch.end = reduce_end_[li].get();
  launch.lane = stream_.get();
  bool ran = false;
  absl::Status st = reducer_->Enqueue(launch, &ran);
  ls.on_reduce_stream = ran;
  if (ran || !st.ok()) return st;
  // Without a workspace the launch is data-parallel, on the lane.
  st = ls.gemm->Initialize(ls.plan, nullptr, ls.operand_copies.get());
  if (st.ok()) st = ls.gemm->Run(stream_.get());
  return st;
}

Lane::Timings Lane::ReadTimings() const {
  Timings t;
  t.launch_ms.assign(launches_.size(), 0.0f);
  cudaEventElapsedTime(&t.h2d_ms, start_.get(), h2d_done_.get());
  cudaEvent_t prev = h2d_done_.get();
  for (size_t i = 0; i < launches_.size(); ++i) {
    if (launches_[i].on_reduce_stream) {
      cudaEventElapsedTime(&t.launch_ms[i], reduce_start_[i].get(), reduce_end_[i].get());
    } else {
      cudaEventElapsedTime(&t.launch_ms[i], prev, launch_done_[i].get());
    }
    prev = launch_done_[i].get();
  }
  cudaEventElapsedTime(&t.d2h_ms, prev, d2h_done_.get());
  for (float ms : t.launch_ms) t.compute_ms += ms;
  return t;
}

void Lane::FillReports(const Timings& t) {
  const std::vector<double> share_ms = DeviceShareMs(layout_, t.launch_ms, batch_.items.size());
  for (size_t i = 0; i < batch_.items.size(); ++i) {
    ExecutionReport& r = batch_.items[i]->report;
    r.backend = "cuda";
    if (r.device < 0) r.device = options_.device;
    r.kernel = absl::StrJoin(item_kernels_[i], ",");
    r.h2d = absl::Milliseconds(t.h2d_ms);
    r.d2h = absl::Milliseconds(t.d2h_ms);
    r.transfer = r.h2d + r.d2h;
    r.compute = absl::Milliseconds(t.compute_ms);
    r.device_share = absl::Milliseconds(share_ms[i]);
    if (i == 0) {
      r.h2d_bytes = layout_.input_bytes;
      r.d2h_bytes = layout_.output_bytes;
    }
    for (size_t li = 0; li < launches_.size(); ++li) {
      if (layout_.launches[li].owner != i) continue;
      double flops = 0;
      for (const GemmProblemRef* p : batch_.launches[li].problems) flops += p->shape.flops();
      r.launches.push_back({launches_[li].label, absl::Milliseconds(t.launch_ms[li]), flops});
    }
  }
}

Outcomes Lane::Finish() {
  // A kernel fault surfaces here; it fails the whole batch.
  const absl::Status batch_status = CudaStatus(cudaEventSynchronize(d2h_done_.get()), "batch");
  Timings t;
  if (batch_status.ok()) {
    t = ReadTimings();
  } else {
    t.launch_ms.assign(launches_.size(), 0.0f);
  }
  // The one host copy on the way out: staging into each response.
  if (batch_status.ok()) {
    CheckPartnerQuantization();
    CopyOutResults(layout_, staging_.data(), item_status_);
  }
  FillReports(t);
  Outcomes outcomes;
  for (size_t i = 0; i < batch_.items.size(); ++i)
    outcomes.emplace_back(batch_.items[i], !batch_status.ok() ? batch_status : item_status_[i]);
  return outcomes;
}

}  // namespace gpu
}  // namespace gemm
