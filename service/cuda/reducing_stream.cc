#include "service/cuda/reducing_stream.h"

#include <utility>

#include "service/cuda/cuda_status.h"

namespace gemm {
namespace gpu {

namespace gk = gemm_kernels;

absl::StatusOr<std::unique_ptr<ReducingStream>> ReducingStream::Create() {
  auto stream = Stream::Create(cudaStreamDefault);
  if (!stream.ok()) return stream.status();
  return std::unique_ptr<ReducingStream>(new ReducingStream(*std::move(stream)));
}

ReducingStream::~ReducingStream() {
  absl::MutexLock lock(&mu_);
  workspace_.Free().IgnoreError();
  cudaStreamSynchronize(stream_.get());
}

void ReducingStream::GrowWorkspace(size_t bytes) {
  if (workspace_.size() >= bytes) return;
  // Stream-ordered on this stream: the old workspace is freed after the last
  // launch that used it.
  workspace_ = PoolMemory();
  auto grown = PoolMemory::Allocate(bytes, stream_.get());
  if (grown.ok()) {
    workspace_ = *std::move(grown);
  } else {
    cudaGetLastError();  // out of memory: the launch runs data-parallel
  }
}

absl::Status ReducingStream::Enqueue(const ReducingLaunch& launch, bool* ran) {
  *ran = false;
  absl::MutexLock lock(&mu_);
  GrowWorkspace(launch.workspace_bytes);
  if (workspace_.get() == nullptr) return absl::OkStatus();
  cudaStream_t reduce = stream_.get();
  absl::Status st = launch.gemm->Initialize(*launch.plan, workspace_.get(), launch.operand_copies);
  if (st.ok())
    st = CudaStatus(cudaStreamWaitEvent(reduce, launch.inputs_ready, 0), "reducing launch");
  if (st.ok()) st = CudaStatus(cudaEventRecord(launch.start, reduce), "reducing launch");
  if (st.ok()) st = launch.gemm->Run(reduce);
  if (st.ok()) st = CudaStatus(cudaEventRecord(launch.end, reduce), "reducing launch");
  if (!st.ok()) return st;
  *ran = true;
  return CudaStatus(cudaStreamWaitEvent(launch.lane, launch.end, 0), "reducing launch");
}

}  // namespace gpu
}  // namespace gemm
