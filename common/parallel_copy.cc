#include "common/parallel_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace gemm {

namespace {

// Helper threads running across all copies of the process. Concurrent copies
// share the cores instead of each taking 8 (with 16 requests in flight the
// server's copies would otherwise run 30+ threads on 16 cores next to gRPC's).
std::atomic<int> g_helpers{0};

int HelperLimit() {
  static const int limit = static_cast<int>(std::max(1u, std::thread::hardware_concurrency() / 2));
  return limit;
}

// Reserves up to `want` helpers from the shared budget; returns how many.
int TakeHelpers(int want) {
  int busy = g_helpers.load();
  while (true) {
    const int take = std::min(want, HelperLimit() - busy);
    if (take <= 0) return 0;
    if (g_helpers.compare_exchange_weak(busy, busy + take)) return take;
  }
}

}  // namespace

void ParallelCopy(void* dst, const void* src, size_t n, int max_threads) {
  constexpr size_t kMinSlice = size_t{4} << 20;
  if (max_threads <= 0)
    max_threads = static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  const size_t wanted =
      n < kParallelCopyMinBytes ? 1 : std::min<size_t>(max_threads, n / kMinSlice);
  const int helpers = wanted > 1 ? TakeHelpers(static_cast<int>(wanted) - 1) : 0;
  const size_t threads = 1 + helpers;
  if (threads <= 1) {
    std::memcpy(dst, src, n);
    return;
  }
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
  g_helpers.fetch_sub(helpers);
}

}  // namespace gemm
