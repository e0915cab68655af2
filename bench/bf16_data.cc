#include "bench/bf16_data.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/testing/host_types.h"

namespace gemm_bench {
namespace {

constexpr int64_t kPoolElems = int64_t(64) << 20;

// kPoolElems random bf16 values on the device (xorshift64*), or nullptr.
const uint16_t* Pool() {
  static const uint16_t* pool = [] {
    std::vector<uint16_t> h(kPoolElems);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (auto& v : h) {
      s ^= s >> 12;
      s ^= s << 25;
      s ^= s >> 27;
      const float f = float((s * 2685821657736338717ull) >> 40) / float(1 << 23) - 1.0f;
      v = gemm_kernels::testing::FloatToBf16(f);
    }
    void* p = nullptr;
    if (cudaMalloc(&p, kPoolElems * 2) != cudaSuccess) return static_cast<const uint16_t*>(nullptr);
    if (cudaMemcpy(p, h.data(), kPoolElems * 2, cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(p);
      return static_cast<const uint16_t*>(nullptr);
    }
    return static_cast<const uint16_t*>(p);
  }();
  return pool;
}

}  // namespace

void* RandomBf16Buffer(int64_t elems, uint64_t seed) {
  const uint16_t* pool = Pool();
  void* p = nullptr;
  if (pool == nullptr || cudaMalloc(&p, std::max<int64_t>(elems, 8) * 2) != cudaSuccess)
    return nullptr;
  std::mt19937_64 rng(seed);
  for (int64_t done = 0; done < elems;) {
    const int64_t off = 8 * std::uniform_int_distribution<int64_t>(0, kPoolElems / 16)(rng);
    const int64_t n = std::min(elems - done, kPoolElems - off);
    if (cudaMemcpy(static_cast<uint16_t*>(p) + done, pool + off, n * 2, cudaMemcpyDeviceToDevice) !=
        cudaSuccess) {
      cudaFree(p);
      return nullptr;
    }
    done += n;
  }
  return p;
}

int RotatingSets(size_t set_bytes, size_t l2_bytes) {
  return int(std::min<size_t>(
      16, std::max<size_t>(1, (4 * l2_bytes) / std::max<size_t>(set_bytes, 1) + 1)));
}

double RelDiffBf16(const void* x, const void* y, int64_t elems) {
  std::vector<uint16_t> a(elems), b(elems);
  cudaMemcpy(a.data(), x, elems * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(b.data(), y, elems * 2, cudaMemcpyDeviceToHost);
  double e2 = 0, r2 = 0;
  for (int64_t i = 0; i < elems; ++i) {
    const double u = gemm_kernels::testing::Bf16ToFloat(a[i]);
    const double v = gemm_kernels::testing::Bf16ToFloat(b[i]);
    if (!std::isfinite(u)) return NAN;
    e2 += (u - v) * (u - v);
    r2 += v * v;
  }
  return std::sqrt(e2 / std::max(r2, 1e-300));
}

bool CaseSelected(const char* name, int argc, char** argv) {
  if (argc < 2) return true;
  for (int i = 1; i < argc; ++i)
    if (std::strstr(name, argv[i])) return true;
  return false;
}

std::vector<int> GroupedRows(int count, int m_lo, int m_hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> ms(count < 0 ? 0 : count);
  for (int& m : ms) m = std::uniform_int_distribution<int>(m_lo, m_hi)(rng);
  return ms;
}

}  // namespace gemm_bench
