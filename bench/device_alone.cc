#include "bench/device_alone.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/gemm.h"

namespace gemm_bench {
namespace {

namespace gk = gemm_kernels;

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Device buffers freed on scope exit, whatever path leaves it.
struct DeviceBuffers {
  std::vector<void*> ptrs;
  ~DeviceBuffers() {
    for (void* p : ptrs) cudaFree(p);
  }
  void* Add(size_t bytes) {
    void* p = nullptr;
    if (!Ok(cudaMalloc(&p, bytes), "cudaMalloc")) return nullptr;
    ptrs.push_back(p);
    return p;
  }
};

// `elements` bf16 values uniform in [-1, 1].
std::vector<uint16_t> RandomBf16(size_t elements, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(elements);
  for (float& v : values) v = dist(rng);
  std::vector<uint16_t> out(elements);
  gemm::FromFloat(gemm::DType::kBf16, values.data(), out.data(), elements);
  return out;
}

}  // namespace

bool CopyAloneMs(size_t bytes, bool to_device, const TimingPlan& plan, double* ms) {
  void* host = nullptr;
  if (!Ok(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc")) return false;
  DeviceBuffers device;
  void* dev = device.Add(bytes);
  bool ok = dev != nullptr;
  if (ok) {
    // Random bytes: nothing on the way may take a shortcut for zeros.
    std::mt19937 rng(11);
    auto* p = static_cast<uint32_t*>(host);
    for (size_t i = 0; i < bytes / 4; ++i) p[i] = rng();
    const Launcher copy = [&](int) {
      return to_device ? cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess
                       : cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
    };
    std::vector<double> result;
    ok = TimeInterleaved({copy}, 1, plan, &result);
    if (ok) *ms = result[0];
  }
  cudaFreeHost(host);
  return ok;
}

struct KernelAlone::Sets {
  DeviceBuffers buffers;
  std::vector<gk::Gemm> gemms;
};

KernelAlone::~KernelAlone() { delete sets_; }

bool KernelAlone::Init(int64_t m, int64_t n, int64_t k) {
  delete sets_;
  sets_ = new Sets;
  int device = 0, l2 = 0;
  if (!Ok(cudaGetDevice(&device), "cudaGetDevice") ||
      !Ok(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "L2 size"))
    return false;
  const size_t a_bytes = size_t(m) * k * 2, b_bytes = size_t(k) * n * 2, d_bytes = size_t(m) * n * 2;
  const size_t set_bytes = a_bytes + b_bytes + d_bytes;
  const int sets = int(std::clamp<size_t>(2 * size_t(l2) / set_bytes + 1, 1, 16));
  sets_->gemms = std::vector<gk::Gemm>(sets);
  for (int s = 0; s < sets; ++s) {
    void* a = sets_->buffers.Add(a_bytes);
    void* b = sets_->buffers.Add(b_bytes);
    void* d = sets_->buffers.Add(d_bytes);
    if (!a || !b || !d) return false;
    const std::vector<uint16_t> ha = RandomBf16(a_bytes / 2, 2 * s + 1);
    const std::vector<uint16_t> hb = RandomBf16(b_bytes / 2, 2 * s + 2);
    if (!Ok(cudaMemcpy(a, ha.data(), a_bytes, cudaMemcpyHostToDevice), "copy A") ||
        !Ok(cudaMemcpy(b, hb.data(), b_bytes, cudaMemcpyHostToDevice), "copy B"))
      return false;
    gk::GemmArguments args;
    args.m = m;
    args.n = n;
    args.k = k;
    args.a = {a, gk::DataType::kBf16, gk::Layout::kRowMajor, k, 0};
    args.b = {b, gk::DataType::kBf16, gk::Layout::kColMajor, k, 0};
    args.d = {d, gk::DataType::kBf16, gk::Layout::kRowMajor, n, 0};
    args.c = args.d;
    const absl::Status st = sets_->gemms[s].Initialize(args);
    if (!st.ok()) {
      std::fprintf(stderr, "kernel set-up: %s\n", std::string(st.message()).c_str());
      return false;
    }
  }
  kernel_ = sets_->gemms[0].kernel_name();
  return true;
}

bool KernelAlone::Time(const TimingPlan& plan, double* ms) {
  if (sets_ == nullptr || sets_->gemms.empty()) return false;
  const Launcher launch = [this](int set) { return sets_->gemms[set].Run(nullptr).ok(); };
  std::vector<double> result;
  if (!TimeInterleaved({launch}, static_cast<int>(sets_->gemms.size()), plan, &result))
    return false;
  *ms = result[0];
  return true;
}

bool KernelAloneMs(int64_t m, int64_t n, int64_t k, const TimingPlan& plan, double* ms,
                   std::string* kernel) {
  KernelAlone alone;
  if (!alone.Init(m, n, k) || !alone.Time(plan, ms)) return false;
  *kernel = alone.kernel();
  return true;
}

}  // namespace gemm_bench
