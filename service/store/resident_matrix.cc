#include "service/store/resident_matrix.h"

#include <cmath>
#include <cstring>
#include <vector>
#include <new>

#include "absl/strings/str_cat.h"

namespace gemm {
namespace {

class HostResidentMatrix final : public ResidentMatrix {
 public:
  // `scales` backs view.scales.data, when the matrix has scales.
  HostResidentMatrix(const MatrixRef& view, std::unique_ptr<unsigned char[]> data,
                     std::unique_ptr<float[]> scales = nullptr)
      : ResidentMatrix(view, nullptr), data_(std::move(data)), scales_(std::move(scales)) {}

 private:
  std::unique_ptr<unsigned char[]> data_;
  std::unique_ptr<float[]> scales_;
};

// A kept result: the response's bytes, moved in.
class AdoptedResidentMatrix final : public ResidentMatrix {
 public:
  // `view.data` points into `*bytes`, which the matrix keeps (a string held
  // by pointer: its buffer never moves).
  AdoptedResidentMatrix(const MatrixRef& view, std::unique_ptr<std::string> bytes)
      : ResidentMatrix(view, nullptr), bytes_(std::move(bytes)) {}

 private:
  std::unique_ptr<std::string> bytes_;
};

absl::Status CheckRange(uint64_t offset, uint64_t n, uint64_t size) {
  if (offset > size || n > size - offset)
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + n,
                                              ") are outside the matrix's ", size, " bytes"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<unsigned char[]>> AllocateHost(uint64_t bytes) {
  std::unique_ptr<unsigned char[]> data(new (std::nothrow) unsigned char[bytes]);
  if (data == nullptr)
    return absl::ResourceExhaustedError(
        absl::StrCat("could not allocate ", bytes, " bytes of host memory"));
  return data;
}

}  // namespace

ResidentMatrix::ResidentMatrix(const MatrixRef& view, const void* device_data)
    : view_(view), device_data_(device_data) {
  view_.resident = this;
}

absl::Status ResidentMatrix::Write(uint64_t offset, const void* src, uint64_t n) {
  if (absl::Status st = CheckRange(offset, n, bytes()); !st.ok()) return st;
  if (view_.data == nullptr) return absl::UnimplementedError("the matrix has no host copy");
  // The host copy is ours: const only so that readers cannot change it.
  std::memcpy(static_cast<unsigned char*>(const_cast<void*>(view_.data)) + offset, src, n);
  return absl::OkStatus();
}

absl::Status ResidentMatrix::Read(uint64_t offset, void* dst, uint64_t n) const {
  if (absl::Status st = CheckRange(offset, n, bytes()); !st.ok()) return st;
  if (view_.data == nullptr) return absl::UnimplementedError("the matrix has no host copy");
  std::memcpy(dst, static_cast<const unsigned char*>(view_.data) + offset, n);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> MakeHostResident(const MatrixRef& source) {
  auto data = AllocateHost(source.bytes());
  if (!data.ok()) return data.status();
  std::memcpy(data->get(), source.data, source.bytes());
  MatrixRef view = source;
  view.data = data->get();
  return std::shared_ptr<ResidentMatrix>(new HostResidentMatrix(view, std::move(*data)));
}

Fp8Operand QuantizedGeometry(const MatrixRef& shape, const Fp8Quantization& q) {
  return Fp8Operand{shape.rows, shape.cols, shape.layout, q.operand, q.transposed, q.mode};
}

uint64_t QuantizedBytes(const MatrixRef& shape, const Fp8Quantization& q) {
  return shape.elements() + ScaleCount(QuantizedGeometry(shape, q)) * sizeof(float);
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> QuantizeToHostResident(
    const MatrixRef& source, const Fp8Quantization& q) {
  const Fp8Operand g = QuantizedGeometry(source, q);
  const uint64_t n = source.elements(), count = ScaleCount(g);
  std::vector<float> values;
  const float* in = static_cast<const float*>(source.data);
  if (source.dtype != DType::kFp32) {
    values.resize(n);
    ToFloat(source.dtype, source.data, values.data(), n);
    in = values.data();
  }
  auto codes = AllocateHost(n);
  if (!codes.ok()) return codes.status();
  std::unique_ptr<float[]> scales(new (std::nothrow) float[count]);
  if (scales == nullptr)
    return absl::ResourceExhaustedError(
        absl::StrCat("could not allocate ", count, " scales of host memory"));
  const uint64_t bad = QuantizeFp8(in, g, q.format, codes->get(), scales.get());
  if (bad != kQuantizeOk) {
    const bool row_major = source.layout == Layout::kRowMajor;
    const uint64_t r = row_major ? bad / source.cols : bad % source.rows;
    const uint64_t c = row_major ? bad % source.cols : bad / source.rows;
    return absl::InvalidArgumentError(absl::StrCat(
        "data: element (", r, ", ", c, ") is ", std::isnan(in[bad]) ? "NaN" : "infinite",
        ": only finite values quantize to FP8"));
  }
  MatrixRef view = source;
  view.dtype = q.format;
  view.data = codes->get();
  view.resident = nullptr;
  view.scales = Fp8Scales{q.mode, q.operand, q.transposed, scales.get(), count};
  return std::shared_ptr<ResidentMatrix>(
      new HostResidentMatrix(view, std::move(*codes), std::move(scales)));
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> MakeHostResidentUninitialized(
    const MatrixRef& shape) {
  auto data = AllocateHost(shape.bytes());
  if (!data.ok()) return data.status();
  MatrixRef view = shape;
  view.data = data->get();
  view.resident = nullptr;
  return std::shared_ptr<ResidentMatrix>(new HostResidentMatrix(view, std::move(*data)));
}

std::shared_ptr<ResidentMatrix> AdoptHostResident(const MatrixRef& shape, std::string bytes) {
  auto owned = std::make_unique<std::string>(std::move(bytes));
  MatrixRef view = shape;
  view.data = owned->data();
  view.resident = nullptr;
  return std::shared_ptr<ResidentMatrix>(new AdoptedResidentMatrix(view, std::move(owned)));
}

}  // namespace gemm
