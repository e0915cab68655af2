// Owners of the CUDA executor's CUDA resources: streams, events, pinned host
// buffers, device allocations and stream-ordered pool allocations. Each frees
// what it owns when destroyed (errors then are ignored: there is no one left
// to tell), is movable and not copyable. Where a free's outcome matters, call
// Free() first and look at its status.
//
// cuBLAS handles are not here: where the kernel portfolio may run cuBLAS,
// each lane owns a kernels/cublas CublasContext bound to its stream.
#ifndef GEMM_SERVICE_CUDA_RESOURCES_H_
#define GEMM_SERVICE_CUDA_RESOURCES_H_

#include <cuda_runtime.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gemm {
namespace gpu {

// A CUDA stream. cudaStreamDefault makes a blocking stream (ordered with the
// legacy default stream), cudaStreamNonBlocking one that is not.
class Stream {
 public:
  Stream() = default;
  static absl::StatusOr<Stream> Create(unsigned int flags);
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  ~Stream();

  cudaStream_t get() const { return stream_; }

 private:
  explicit Stream(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t stream_ = nullptr;
};

// A CUDA event with default flags (timing enabled).
class Event {
 public:
  Event() = default;
  static absl::StatusOr<Event> Create();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  ~Event();

  cudaEvent_t get() const { return event_; }

 private:
  explicit Event(cudaEvent_t event) : event_(event) {}
  cudaEvent_t event_ = nullptr;
};

// Page-locked host memory (cudaHostAlloc), which copies reach the device
// from without an intermediate bounce.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  ~PinnedBuffer();

  // Frees the memory now; the buffer is then empty. On error it keeps it.
  absl::Status Free();

  unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  PinnedBuffer(unsigned char* data, size_t size) : data_(data), size_(size) {}
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// Device memory from cudaMalloc, for long-lived allocations outside the
// stream-ordered pool. Freed on the device it came from.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  // `bytes` on `device`, which must be the current device.
  // RESOURCE_EXHAUSTED (with the CUDA error) when the allocation fails; the
  // caller decides whether to clear CUDA's last error.
  static absl::StatusOr<DeviceMemory> Allocate(size_t bytes, int device);
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  // Makes the allocation's device current, then frees.
  ~DeviceMemory();

  void* get() const { return ptr_; }
  int device() const { return device_; }

 private:
  DeviceMemory(void* ptr, int device) : ptr_(ptr), device_(device) {}
  void* ptr_ = nullptr;
  int device_ = 0;
};

// Memory from the current device's stream-ordered pool (cudaMallocAsync),
// freed in stream order on the stream it was allocated on: the free takes
// effect after the work enqueued there before it.
class PoolMemory {
 public:
  PoolMemory() = default;
  static absl::StatusOr<PoolMemory> Allocate(size_t bytes, cudaStream_t stream);
  PoolMemory(PoolMemory&& other) noexcept;
  PoolMemory& operator=(PoolMemory&& other) noexcept;
  ~PoolMemory();

  // Enqueues the free on the allocation's stream; the owner is then empty.
  // On error it keeps the allocation.
  absl::Status Free();

  void* get() const { return ptr_; }
  unsigned char* bytes() const { return static_cast<unsigned char*>(ptr_); }
  size_t size() const { return size_; }

 private:
  PoolMemory(void* ptr, size_t size, cudaStream_t stream)
      : ptr_(ptr), size_(size), stream_(stream) {}
  void* ptr_ = nullptr;
  size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
};

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_RESOURCES_H_
