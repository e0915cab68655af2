#include "common/parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace gemm {

void ParallelCopy(void* dst, const void* src, size_t n, int max_threads) {
  constexpr size_t kMinSlice = size_t{4} << 20;
  if (max_threads <= 0)
    max_threads = static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  const size_t threads =
      n < kParallelCopyMinBytes ? 1 : std::min<size_t>(max_threads, n / kMinSlice);
  if (threads <= 1) {
    std::memcpy(dst, src, n);
    return;
  }
  // Slices on 4 KiB boundaries, the last takes the rest.
  const size_t slice = (n / threads + 4095) / 4096 * 4096;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  for (size_t i = 1; i < threads; ++i) {
    const size_t begin = std::min(n, i * slice);
    const size_t end = i + 1 == threads ? n : std::min(n, (i + 1) * slice);
    if (begin < end)
      helpers.emplace_back([=] { std::memcpy(d + begin, s + begin, end - begin); });
  }
  std::memcpy(d, s, std::min(n, slice));  // the first slice on this thread
  for (std::thread& t : helpers) t.join();
}

}  // namespace gemm
