#include "service/resident_matrix.h"

#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace gemm {
namespace {

class HostResidentMatrix final : public ResidentMatrix {
 public:
  HostResidentMatrix(const MatrixRef& view, std::unique_ptr<unsigned char[]> data)
      : ResidentMatrix(view, nullptr), data_(std::move(data)) {}

 private:
  std::unique_ptr<unsigned char[]> data_;
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
