#include "common/parallel_copy.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace gemm {
namespace {

TEST(ParallelCopyTest, CopiesEveryByteForSizesAroundTheSlices) {
  std::mt19937 rng(1);
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, kParallelCopyMinBytes - 1,
                   kParallelCopyMinBytes, kParallelCopyMinBytes + 4097,
                   size_t{37} << 20 | 12345}) {
    std::string src(n, '\0');
    for (char& c : src) c = static_cast<char>(rng());
    for (int threads : {0, 1, 3, 16}) {
      std::string dst(n + 2, '\x5a');  // a guard byte each side
      ParallelCopy(dst.data() + 1, src.data(), n, threads);
      EXPECT_EQ(dst.front(), '\x5a');
      EXPECT_EQ(dst.back(), '\x5a');
      EXPECT_EQ(dst.substr(1, n), src) << n << " bytes, " << threads << " threads";
    }
  }
}

// Concurrent copies share the helper budget; each still copies every byte.
TEST(ParallelCopyTest, ConcurrentCopiesAreEachComplete) {
  const size_t n = size_t{24} << 20;
  std::string src(n, '\0');
  std::mt19937 rng(2);
  for (char& c : src) c = static_cast<char>(rng());
  std::vector<std::string> dst(6, std::string(n, '\0'));
  std::vector<std::thread> threads;
  for (std::string& d : dst)
    threads.emplace_back([&src, &d, n] {
      for (int i = 0; i < 3; ++i) ParallelCopy(d.data(), src.data(), n);
    });
  for (std::thread& t : threads) t.join();
  for (const std::string& d : dst) EXPECT_TRUE(d == src);
}

}  // namespace
}  // namespace gemm
