#include "common/gemm_problem.h"

namespace gemm {

MatrixRef MatrixA(const GemmShape& s, const void* data) {
  return MatrixRef{data, s.a_rows(), s.a_cols(), s.layout_a, s.input_dtype};
}

MatrixRef MatrixB(const GemmShape& s, const void* data) {
  return MatrixRef{data, s.b_rows(), s.b_cols(), s.layout_b, s.b_dtype()};
}

MatrixRef MatrixC(const GemmShape& s, const void* data) {
  return MatrixRef{data, s.m, s.n, s.layout_c, s.output_dtype};
}

}  // namespace gemm
