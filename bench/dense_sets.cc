#include "bench/dense_sets.h"

#include <cuda_runtime.h>

#include "bench/bf16_data.h"
#include "bench/cuda_check.h"

namespace gemm_bench {

using gemm_kernels::DataType;
using gemm_kernels::Layout;

size_t DenseSetBytes(int64_t m, int64_t n, int64_t k, int64_t batch) {
  return size_t(batch * (m * k + k * n + m * n)) * 2;
}

DenseSets::DenseSets(int64_t m, int64_t n, int64_t k, const DenseSetsOptions& options)
    : m_(m), n_(n), k_(k), options_(options), buffers_(options.sets) {}

DenseSets::~DenseSets() {
  for (const Buffers& set : buffers_)
    for (void* p : {set.a, set.b, set.d, set.dref}) cudaFree(p);
}

bool DenseSets::Allocate() {
  for (int s = 0; s < sets(); ++s) {
    if (!AllocateSet(s)) return false;
  }
  return true;
}

bool DenseSets::AllocateSet(int set) {
  Buffers& buf = buffers_[set];
  buf.a = RandomBf16Buffer(batch() * m_ * k_, 11 + set);
  buf.b = RandomBf16Buffer(batch() * k_ * n_, 101 + set);
  if (!buf.a || !buf.b) return false;
  const size_t d_bytes = size_t(batch() * m_ * n_) * 2;
  CHECK_CUDA(cudaMalloc(&buf.d, d_bytes));
  CHECK_CUDA(cudaMalloc(&buf.dref, d_bytes));
  if (options_.poison_outputs) CHECK_CUDA(cudaMemset(buf.d, 0xFF, d_bytes));
  return true;
}

double DenseSets::Flops() const { return 2.0 * batch() * m_ * n_ * k_; }

gemm_kernels::GemmArguments DenseSets::Arguments(int set) const {
  const Buffers& buf = buffers_[set];
  const bool batched = batch() > 1;
  gemm_kernels::GemmArguments g;
  g.m = m_;
  g.n = n_;
  g.k = k_;
  g.batch_count = batch();
  g.a = {buf.a, DataType::kBf16, Layout::kRowMajor, k_, batched ? m_ * k_ : 0};
  g.b = {buf.b, DataType::kBf16, Layout::kColMajor, k_, batched ? k_ * n_ : 0};
  g.d = {buf.d, DataType::kBf16, Layout::kRowMajor, n_, batched ? m_ * n_ : 0};
  return g;
}

}  // namespace gemm_bench
