#include "common/parallel_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace gemm {

namespace {

// Large copies in progress in the process. Helpers are used only by a copy
// that runs alone: with several requests in flight their copies already
// keep the cores busy, and splitting them further only oversubscribed the
// host (measured on the H200 box: service/echo at 2048^3 with 16 in flight
// fell from 0.90 to 0.71-0.78 with helpers on every copy).
std::atomic<int> g_copies{0};

}  // namespace

void ParallelCopy(void* dst, const void* src, size_t n, int max_threads) {
  constexpr size_t kMinSlice = size_t{4} << 20;
  if (max_threads <= 0)
    max_threads = static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  const size_t wanted =
      n < kParallelCopyMinBytes ? 1 : std::min<size_t>(max_threads, n / kMinSlice);
  if (wanted <= 1) {
    std::memcpy(dst, src, n);
    return;
  }
  const bool alone = g_copies.fetch_add(1) == 0;
  if (!alone) {
    g_copies.fetch_sub(1);
    std::memcpy(dst, src, n);
    return;
  }
  const size_t threads = wanted;
  // Slices on 4 KiB boundaries, the last takes the rest.
  const size_t slice = (n / threads + 4095) / 4096 * 4096;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  for (size_t i = 1; i < threads; ++i) {
    const size_t begin = std::min(n, i * slice);
    const size_t end = i + 1 == threads ? n : std::min(n, (i + 1) * slice);
    if (begin < end)
      workers.emplace_back([=] { std::memcpy(d + begin, s + begin, end - begin); });
  }
  std::memcpy(d, s, std::min(n, slice));  // the first slice on this thread
  for (std::thread& t : workers) t.join();
  g_copies.fetch_sub(1);
}

}  // namespace gemm
