#include "service/cuda/resources.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "service/cuda/cuda_status.h"

namespace gemm {
namespace gpu {

absl::StatusOr<Stream> Stream::Create(unsigned int flags) {
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, flags));
  return Stream(stream);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<Event> Event::Create() {
  cudaEvent_t event = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
  return Event(event);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  void* data = nullptr;
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(&data, bytes, cudaHostAllocDefault));
  return PinnedBuffer(static_cast<unsigned char*>(data), bytes);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Free().IgnoreError();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { Free().IgnoreError(); }

absl::Status PinnedBuffer::Free() {
  if (data_ == nullptr) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaFreeHost(data_));
  data_ = nullptr;
  size_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<DeviceMemory> DeviceMemory::Allocate(size_t bytes, int device) {
  void* ptr = nullptr;
  if (cudaError_t e = cudaMalloc(&ptr, bytes); e != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "could not allocate ", bytes, " bytes of device memory: ", cudaGetErrorString(e)));
  }
  return DeviceMemory(ptr, device);
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), device_(other.device_) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    DeviceMemory old(std::move(*this));
    ptr_ = std::exchange(other.ptr_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

DeviceMemory::~DeviceMemory() {
  if (ptr_ == nullptr) return;
  cudaSetDevice(device_);
  cudaFree(ptr_);
}

absl::StatusOr<PoolMemory> PoolMemory::Allocate(size_t bytes, cudaStream_t stream) {
  void* ptr = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocAsync(&ptr, bytes, stream));
  return PoolMemory(ptr, bytes, stream);
}

PoolMemory::PoolMemory(PoolMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      stream_(other.stream_) {}

PoolMemory& PoolMemory::operator=(PoolMemory&& other) noexcept {
  if (this != &other) {
    Free().IgnoreError();
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    stream_ = other.stream_;
  }
  return *this;
}

PoolMemory::~PoolMemory() { Free().IgnoreError(); }

absl::Status PoolMemory::Free() {
  if (ptr_ == nullptr) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaFreeAsync(ptr_, stream_));
  ptr_ = nullptr;
  size_ = 0;
  return absl::OkStatus();
}

}  // namespace gpu
}  // namespace gemm
