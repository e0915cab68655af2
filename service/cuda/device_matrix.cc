#include "service/cuda/device_matrix.h"

#include <cuda_runtime.h>

#include <utility>

#include "service/cuda/cuda_status.h"
#include "service/cuda/resources.h"

namespace gemm {
namespace gpu {
namespace {

// The memory is freed when the last holder lets go: a request's kernels have
// finished before the request completes.
class DeviceMatrix final : public ResidentMatrix {
 public:
  DeviceMatrix(const MatrixRef& view, DeviceMemory memory)
      : ResidentMatrix(view, memory.get()), memory_(std::move(memory)) {}

  // Chunks of an upload, straight from gRPC's buffers to the device. A
  // pageable copy may return before its DMA is done, and the lanes' streams
  // do not wait for the legacy stream, so each write waits for it.
  absl::Status Write(uint64_t offset, const void* src, uint64_t n) override {
    if (offset > bytes() || n > bytes() - offset)
      return absl::OutOfRangeError("write past the end of a device matrix");
    CUDA_RETURN_IF_ERROR(cudaSetDevice(memory_.device()));
    absl::Status st = CudaStatus(cudaMemcpy(at(offset), src, n, cudaMemcpyHostToDevice),
                                 "writing a resident matrix");
    if (st.ok())
      st = CudaStatus(cudaStreamSynchronize(cudaStreamLegacy), "writing a resident matrix");
    return st;
  }

  absl::Status Read(uint64_t offset, void* dst, uint64_t n) const override {
    if (offset > bytes() || n > bytes() - offset)
      return absl::OutOfRangeError("read past the end of a device matrix");
    CUDA_RETURN_IF_ERROR(cudaSetDevice(memory_.device()));
    return CudaStatus(cudaMemcpy(dst, at(offset), n, cudaMemcpyDeviceToHost),
                      "reading a resident matrix");
  }

 private:
  unsigned char* at(uint64_t offset) const {
    return static_cast<unsigned char*>(memory_.get()) + offset;
  }

  DeviceMemory memory_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<ResidentMatrix>> AllocateDeviceMatrix(const MatrixRef& shape,
                                                                      int device) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  auto memory = DeviceMemory::Allocate(shape.bytes(), device);
  if (!memory.ok()) {
    cudaGetLastError();  // the failure is reported; later calls must not see it
    return memory.status();
  }
  MatrixRef view = shape;
  view.data = nullptr;
  view.resident = nullptr;
  return std::shared_ptr<ResidentMatrix>(new DeviceMatrix(view, *std::move(memory)));
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> CopyToDeviceMatrix(const MatrixRef& source,
                                                                    int device) {
  auto made = AllocateDeviceMatrix(source, device);
  if (!made.ok()) return made.status();
  if (absl::Status st = (*made)->Write(0, source.data, source.bytes()); !st.ok()) return st;
  return made;
}

}  // namespace gpu
}  // namespace gemm
