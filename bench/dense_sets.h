// Rotating input sets of one dense bf16 problem, shared by the benchmarks
// that time single (or strided-batched) GEMMs: schedule_bench, power_probe
// and schedule_sweep, so that all of them run the same shapes on the same
// data. Per set: A (m x k, row-major), B (k x n, column-major), our D
// (m x n, row-major) and a reference D for cuBLAS, `batch` members of each
// packed back to back. The object owns every buffer, so an early return of
// its user frees them too. Plan workspaces stay with the callers: each
// sizes its own from the plans it builds on these arguments.
#ifndef GEMM_BENCH_DENSE_SETS_H_
#define GEMM_BENCH_DENSE_SETS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/gemm.h"

namespace gemm_bench {

// Device bytes of one set's A, B and our D: what a rotating-set rule weighs
// against the L2.
size_t DenseSetBytes(int64_t m, int64_t n, int64_t k, int64_t batch = 1);

struct DenseSetsOptions {
  // Input sets to rotate over. Each benchmark keeps its own rule (e.g.
  // RotatingSets(DenseSetBytes(...), l2)), so the count is given here.
  int sets = 1;
  // Strided-batched members per set. With one member the batch strides are
  // 0, as a plain GEMM's arguments have them.
  int64_t batch = 1;
  // Our D filled with 0xFF (a bf16 NaN) once allocated: an output no launch
  // wrote then fails the comparison instead of passing on stale data.
  bool poison_outputs = false;
};

class DenseSets {
 public:
  struct Buffers {
    void* a = nullptr;
    void* b = nullptr;
    void* d = nullptr;
    void* dref = nullptr;
  };

  // Allocates nothing.
  DenseSets(int64_t m, int64_t n, int64_t k, const DenseSetsOptions& options);
  ~DenseSets();
  DenseSets(const DenseSets&) = delete;
  DenseSets& operator=(const DenseSets&) = delete;

  // Set by set: random A (seed 11 + set) and B (seed 101 + set), then our D
  // and the reference D. False (after printing the CUDA error) on failure.
  bool Allocate();

  int sets() const { return options_.sets; }
  int64_t m() const { return m_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t batch() const { return options_.batch; }
  // Floating-point operations of one launch (all batch members).
  double Flops() const;

  const Buffers& buffers(int set) const { return buffers_[set]; }
  // The GEMM of set `set` writing our D; cuBLAS is given buffers(set).dref.
  gemm_kernels::GemmArguments Arguments(int set) const;

 private:
  bool AllocateSet(int set);

  int64_t m_;
  int64_t n_;
  int64_t k_;
  DenseSetsOptions options_;
  std::vector<Buffers> buffers_;  // [set]
};

}  // namespace gemm_bench

#endif  // GEMM_BENCH_DENSE_SETS_H_
