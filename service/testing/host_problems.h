// GemmProblemRefs over host bytes that live as long as their HostProblems,
// for the tests of what the executors decide about a batch (its layout, its
// launches) without running it: A's bytes are 1s, B's 2s, C's 3s, D zeroed.
#ifndef GEMM_SERVICE_TESTING_HOST_PROBLEMS_H_
#define GEMM_SERVICE_TESTING_HOST_PROBLEMS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "common/gemm_problem.h"

namespace gemm {
namespace fake {

class HostProblems {
 public:
  // Host bytes that live as long as this object, each set to `fill`.
  unsigned char* Buffer(uint64_t bytes, unsigned char fill = 0) {
    buffers_.push_back(std::make_unique<std::vector<unsigned char>>(bytes, fill));
    return buffers_.back()->data();
  }

  // D = A * B (+ C with beta 1 when `with_c`), every matrix row-major.
  GemmProblemRef Make(uint64_t m, uint64_t n, uint64_t k, DType in, DType out,
                      bool with_c = false) {
    GemmProblemRef p;
    p.shape.m = m;
    p.shape.n = n;
    p.shape.k = k;
    p.shape.input_dtype = in;
    p.shape.output_dtype = out;
    p.a = MatrixA(p.shape, nullptr);
    p.a.data = Buffer(p.a.bytes(), 1);
    p.b = MatrixB(p.shape, nullptr);
    p.b.data = Buffer(p.b.bytes(), 2);
    if (with_c) {
      p.beta = 1.0;
      p.c = MatrixC(p.shape, nullptr);
      p.c.data = Buffer(p.c.bytes(), 3);
    }
    p.d = Buffer(p.d_bytes());
    return p;
  }

 private:
  std::vector<std::unique_ptr<std::vector<unsigned char>>> buffers_;
};

}  // namespace fake
}  // namespace gemm

#endif  // GEMM_SERVICE_TESTING_HOST_PROBLEMS_H_
