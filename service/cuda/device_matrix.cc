#include "service/cuda/device_matrix.h"

#include <cuda_runtime.h>

#include <cmath>
#include <new>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "kernels/quantize/fp8_quantize.h"

#include "service/cuda/cuda_status.h"
#include "service/cuda/resources.h"

namespace gemm {
namespace gpu {
namespace {

// The memory is freed when the last holder lets go: a request's kernels have
// finished before the request completes.
class DeviceMatrix final : public ResidentMatrix {
 public:
  // `host_scales`: the scales view().scales points to, for a matrix the
  // server quantized (null otherwise).
  DeviceMatrix(const MatrixRef& view, DeviceMemory memory,
               std::unique_ptr<float[]> host_scales = nullptr)
      : ResidentMatrix(view, memory.get()),
        memory_(std::move(memory)),
        host_scales_(std::move(host_scales)) {}

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
  std::unique_ptr<float[]> host_scales_;
};

// Device memory for a step of QuantizeToDeviceMatrix, or the status.
absl::StatusOr<DeviceMemory> Scratch(uint64_t bytes, int device) {
  auto memory = DeviceMemory::Allocate(bytes > 0 ? bytes : 1, device);
  if (!memory.ok()) cudaGetLastError();  // reported; later calls must not see it
  return memory;
}

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

namespace gemm {
namespace gpu {

absl::StatusOr<std::shared_ptr<ResidentMatrix>> QuantizeToDeviceMatrix(
    const MatrixRef& source, const Fp8Quantization& q, int device) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  const Fp8Operand g{source.rows, source.cols, source.layout, q.operand, q.transposed, q.mode};
  const uint64_t n = source.elements(), count = ScaleCount(g);
  auto values = Scratch(source.bytes(), device);
  if (!values.ok()) return values.status();
  auto codes = Scratch(n, device);
  if (!codes.ok()) return codes.status();
  auto scales = Scratch(count * sizeof(float), device);
  if (!scales.ok()) return scales.status();
  auto first_bad = Scratch(sizeof(uint64_t), device);
  if (!first_bad.ok()) return first_bad.status();
  auto workspace = Scratch(gemm_kernels::Fp8QuantizeWorkspaceBytes(g), device);
  if (!workspace.ok()) return workspace.status();
  std::unique_ptr<float[]> host_scales(new (std::nothrow) float[count]);
  if (host_scales == nullptr)
    return absl::ResourceExhaustedError(
        absl::StrCat("could not allocate ", count, " scales of host memory"));

  // Its own stream: registration runs on a gRPC thread beside the lanes.
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint64_t bad = kQuantizeOk;
  absl::Status st = CudaStatus(
      cudaMemcpyAsync(values->get(), source.data, source.bytes(), cudaMemcpyHostToDevice, stream),
      "copying a matrix to quantize");
  if (st.ok()) {
    gemm_kernels::Fp8QuantizeArgs args;
    args.values = values->get();
    args.values_type = source.dtype;
    args.geometry = g;
    args.format = q.format;
    args.codes = static_cast<uint8_t*>(codes->get());
    args.scales = static_cast<float*>(scales->get());
    args.first_non_finite = static_cast<uint64_t*>(first_bad->get());
    args.workspace = workspace->get();
    if (std::string e = gemm_kernels::LaunchFp8Quantize(args, stream); !e.empty())
      st = absl::InternalError(e);
  }
  if (st.ok())
    st = CudaStatus(cudaMemcpyAsync(host_scales.get(), scales->get(), count * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream),
                    "reading quantization scales");
  if (st.ok())
    st = CudaStatus(cudaMemcpyAsync(&bad, first_bad->get(), sizeof bad, cudaMemcpyDeviceToHost,
                                    stream),
                    "reading a quantization's outcome");
  // Waits for the work even after a failed step: the scratch memory below
  // must outlive it.
  const absl::Status synced = CudaStatus(cudaStreamSynchronize(stream), "quantizing a matrix");
  cudaStreamDestroy(stream);
  if (st.ok()) st = synced;
  if (!st.ok()) return st;
  if (bad != kQuantizeOk) {
    const bool row_major = source.layout == Layout::kRowMajor;
    const uint64_t r = row_major ? bad / source.cols : bad % source.rows;
    const uint64_t c = row_major ? bad % source.cols : bad / source.rows;
    float v = 0;
    ToFloat(source.dtype, static_cast<const unsigned char*>(source.data) + bad * SizeOf(source.dtype),
            &v, 1);
    return absl::InvalidArgumentError(absl::StrCat("data: element (", r, ", ", c, ") is ",
                                                   std::isnan(v) ? "NaN" : "infinite",
                                                   ": only finite values quantize to FP8"));
  }
  MatrixRef view = source;
  view.dtype = q.format;
  view.data = nullptr;
  view.resident = nullptr;
  view.scales = Fp8Scales{q.mode, q.operand, q.transposed, host_scales.get(), count};
  return std::shared_ptr<ResidentMatrix>(
      new DeviceMatrix(view, *std::move(codes), std::move(host_scales)));
}

}  // namespace gpu
}  // namespace gemm
