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

}  // namespace

ResidentMatrix::ResidentMatrix(const MatrixRef& view, const void* device_data)
    : view_(view), device_data_(device_data) {
  view_.resident = this;
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> MakeHostResident(const MatrixRef& source) {
  const uint64_t bytes = source.bytes();
  std::unique_ptr<unsigned char[]> data(new (std::nothrow) unsigned char[bytes]);
  if (data == nullptr)
    return absl::ResourceExhaustedError(
        absl::StrCat("could not allocate ", bytes, " bytes of host memory"));
  std::memcpy(data.get(), source.data, bytes);
  MatrixRef view = source;
  view.data = data.get();
  return std::shared_ptr<ResidentMatrix>(new HostResidentMatrix(view, std::move(data)));
}

}  // namespace gemm
