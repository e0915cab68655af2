// A matrix registered with RegisterMatrix and kept by the executor where its
// launches read it: host memory on the CPU backend, device memory on a GPU.
// Requests that name it hold a shared_ptr, so a matrix released while a
// request still uses it is freed when that request is done.
#ifndef GEMM_SERVICE_STORE_RESIDENT_MATRIX_H_
#define GEMM_SERVICE_STORE_RESIDENT_MATRIX_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/gemm_problem.h"

namespace gemm {

class ResidentMatrix {
 public:
  virtual ~ResidentMatrix() = default;
  ResidentMatrix(const ResidentMatrix&) = delete;
  ResidentMatrix& operator=(const ResidentMatrix&) = delete;

  // Shape, layout and dtype. `view().data` is the host copy, or nullptr when
  // the matrix is on a device only; `view().resident` is this matrix.
  const MatrixRef& view() const { return view_; }
  // Where a GPU executor's kernels read it; nullptr for a host matrix.
  const void* device_data() const { return device_data_; }
  // Bytes of the dense storage (FP8 codes for a quantized matrix): what
  // Write, Read and Transfer.Download address.
  uint64_t bytes() const { return view_.bytes(); }
  // What the matrix holds against max_resident_bytes: its bytes and, for a
  // matrix quantized by the server, its fp32 scales.
  uint64_t held_bytes() const { return bytes() + view_.scales.count * sizeof(float); }
  // Which of a multi-device executor's devices holds it (0 with one device);
  // requests that name it run there.
  int device() const { return device_; }
  void set_device(int device) { device_ = device; }

  // Bytes [offset, offset + n) of the dense storage, for chunked uploads
  // (Transfer.Upload) and downloads. The caller keeps them in range and does
  // not write a range while a request may read it (the store hands out a
  // matrix for requests only once its upload is complete). The host versions
  // copy to and from view().data; a device matrix overrides them.
  virtual absl::Status Write(uint64_t offset, const void* src, uint64_t n);
  virtual absl::Status Read(uint64_t offset, void* dst, uint64_t n) const;

 protected:
  // `view.data` and `device_data` as described above; both owned by the
  // subclass, which frees them in its destructor.
  ResidentMatrix(const MatrixRef& view, const void* device_data);

 private:
  MatrixRef view_;
  const void* device_data_;
  int device_ = 0;
};

// What a matrix of `shape` quantized by `q` holds: one byte per element
// plus its fp32 scales.
uint64_t QuantizedBytes(const MatrixRef& shape, const Fp8Quantization& q);

// A host matrix holding `source` (dense bf16 or fp32, as described)
// quantized by common/fp8.h's rule: FP8 codes in source's shape and layout,
// and its scales, which view().scales describes. INVALID_ARGUMENT naming
// "data" when an element is NaN or infinite. Quantizes on the calling
// thread, through an fp32 copy of the matrix.
absl::StatusOr<std::shared_ptr<ResidentMatrix>> QuantizeToHostResident(
    const MatrixRef& source, const Fp8Quantization& q);

// A resident matrix in host memory: a copy of `source` (dense, as described).
absl::StatusOr<std::shared_ptr<ResidentMatrix>> MakeHostResident(const MatrixRef& source);

// A host matrix of `shape`'s size and type whose bytes are not set yet (they
// arrive by Write); shape.data is ignored.
absl::StatusOr<std::shared_ptr<ResidentMatrix>> MakeHostResidentUninitialized(
    const MatrixRef& shape);

// A host matrix that takes over `bytes` (shape.bytes() long) without copying:
// a request's result kept on the server (GemmRequest.keep_results).
std::shared_ptr<ResidentMatrix> AdoptHostResident(const MatrixRef& shape, std::string bytes);

}  // namespace gemm

#endif  // GEMM_SERVICE_STORE_RESIDENT_MATRIX_H_
