#include "common/reference_gemm.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace gemm {
namespace {

// [1 2 3; 4 5 6] * [7 8; 9 10; 11 12] = [58 64; 139 154]
TEST(ReferenceGemmTest, SmallKnownProductInEveryLayout) {
  const float a_row[] = {1, 2, 3, 4, 5, 6};
  const float a_col[] = {1, 4, 2, 5, 3, 6};
  const float at_row[] = {1, 4, 2, 5, 3, 6};  // A^T (3x2) row-major
  const float b_row[] = {7, 8, 9, 10, 11, 12};

  GemmShape s;
  s.m = 2;
  s.n = 2;
  s.k = 3;
  GemmProblemRef p;
  p.shape = s;
  p.a = MatrixA(s, a_row);
  p.b = MatrixB(s, b_row);
  const std::vector<double> want = {58, 64, 139, 154};
  EXPECT_EQ(ReferenceGemm(p), want);

  p.shape.layout_a = Layout::kColMajor;
  p.a = MatrixA(p.shape, a_col);
  EXPECT_EQ(ReferenceGemm(p), want);

  p.shape.layout_a = Layout::kRowMajor;
  p.shape.transpose_a = true;
  p.a = MatrixA(p.shape, at_row);
  EXPECT_EQ(ReferenceGemm(p), want);

  // B^T is 2x3 = [7 9 11; 8 10 12]; stored column-major that is 7 8 9 10 11 12.
  p.shape.transpose_b = true;
  p.shape.layout_b = Layout::kColMajor;
  p.b = MatrixB(p.shape, b_row);
  EXPECT_EQ(ReferenceGemm(p), want);
}

TEST(ReferenceGemmTest, AlphaBetaAndC) {
  const float a[] = {2};
  const float b[] = {3};
  const float c[] = {10};
  GemmShape s;
  s.m = s.n = s.k = 1;
  GemmProblemRef p;
  p.shape = s;
  p.a = MatrixA(s, a);
  p.b = MatrixB(s, b);
  p.c = MatrixC(s, c);
  p.alpha = 0.5;
  p.beta = -1.0;
  EXPECT_EQ(ReferenceGemm(p), std::vector<double>{-7.0});
}

TEST(ReferenceGemmTest, RelativeErrorRejectsNaN) {
  EXPECT_EQ(RelativeError({1.0, 2.0}, {1.0, 2.0}), 0.0);
  EXPECT_NEAR(RelativeError({1.0, 2.0}, {1.0, 2.0 + 1e-3}), 1e-3 / std::sqrt(5.0), 1e-6);
  EXPECT_TRUE(std::isinf(RelativeError({std::nan(""), 2.0}, {1.0, 2.0})));
  EXPECT_TRUE(std::isinf(RelativeError({1.0}, {1.0, 2.0})));
}

}  // namespace
}  // namespace gemm
