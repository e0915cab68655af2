#include "kernels/cublas/column_major_call.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gemm_kernels {
namespace cublas {
namespace {

// Element (i, j) of a column-major matrix with leading dimension ld, under
// cuBLAS's op: op T reads the stored matrix transposed.
float OpAt(const ColumnMajorOperand& o, int64_t batch, int64_t i, int64_t j) {
  const float* p = static_cast<const float*>(o.ptr) + batch * o.batch_stride;
  return o.transpose ? p[j + i * o.ld] : p[i + j * o.ld];
}

// What cuBLAS computes from `call`: D (m x n, column-major) = alpha op(A)
// op(B) + beta D, after the copy of C where asked.
void EmulateCublas(const ColumnMajorCall& call) {
  for (int64_t b = 0; b < call.batch; ++b) {
    float* d = static_cast<float*>(call.d) + b * call.batch_stride_d;
    const float* c = static_cast<const float*>(call.c);
    for (int64_t j = 0; j < call.n; ++j) {
      for (int64_t i = 0; i < call.m; ++i) {
        double acc = 0;
        for (int64_t kk = 0; kk < call.k; ++kk) {
          acc += double(OpAt(call.a, b, i, kk)) * OpAt(call.b, b, kk, j);
        }
        float prior = 0;
        if (call.beta != 0) {
          prior = call.copy_c_to_d ? c[b * call.batch_stride_c + i + j * call.ldc]
                                   : d[i + j * call.ldd];
        }
        d[i + j * call.ldd] = float(call.alpha * acc + call.beta * prior);
      }
    }
  }
}

struct Matrix {
  std::vector<float> v;
  MatrixDesc desc;
  int64_t rows, cols;
  float At(int64_t b, int64_t i, int64_t j) const {
    const int64_t at = b * desc.batch_stride +
                       (desc.layout == Layout::kRowMajor ? i * desc.ld + j : i + j * desc.ld);
    return v[at];
  }
};

// A batch of rows x cols fp32 matrices in `layout`, padded leading dimension.
Matrix Make(int64_t rows, int64_t cols, int64_t batch, Layout layout, std::mt19937* rng) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  const int64_t ld = (layout == Layout::kRowMajor ? cols : rows) + 3;
  const int64_t stride = ld * (layout == Layout::kRowMajor ? rows : cols) + 5;
  m.v.resize(stride * batch);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& x : m.v) x = dist(*rng);
  m.desc = {m.v.data(), DataType::kFp32, layout, ld, stride};
  return m;
}

TEST(ColumnMajorCallTest, EveryLayoutComputesOurProduct) {
  std::mt19937 rng(7);
  const Layout layouts[] = {Layout::kRowMajor, Layout::kColMajor};
  for (Layout la : layouts) {
    for (Layout lb : layouts) {
      for (Layout ld : layouts) {
        for (float beta : {0.0f, 0.5f}) {
          const int64_t m = 5, n = 7, k = 3, batch = 2;
          Matrix a = Make(m, k, batch, la, &rng);
          Matrix b = Make(k, n, batch, lb, &rng);
          Matrix c = Make(m, n, batch, ld, &rng);
          Matrix d = Make(m, n, batch, ld, &rng);
          GemmArguments g;
          g.m = m;
          g.n = n;
          g.k = k;
          g.batch_count = batch;
          g.a = a.desc;
          g.b = b.desc;
          g.c = c.desc;
          g.d = d.desc;
          g.alpha = 1.5f;
          g.beta = beta;
          const ColumnMajorCall call = ToColumnMajor(g);
          EXPECT_EQ(call.copy_c_to_d, beta != 0);
          EmulateCublas(call);
          for (int64_t bb = 0; bb < batch; ++bb) {
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                double want = 0;
                for (int64_t kk = 0; kk < k; ++kk) want += double(a.At(bb, i, kk)) * b.At(bb, kk, j);
                want = 1.5 * want + beta * c.At(bb, i, j);
                EXPECT_NEAR(d.At(bb, i, j), want, 1e-5)
                    << "layouts " << int(la) << int(lb) << int(ld) << " beta " << beta;
              }
            }
          }
        }
      }
    }
  }
}

TEST(ColumnMajorCallTest, CAliasingDNeedsNoCopy) {
  std::mt19937 rng(3);
  Matrix a = Make(4, 4, 1, Layout::kRowMajor, &rng);
  Matrix d = Make(4, 4, 1, Layout::kRowMajor, &rng);
  GemmArguments g;
  g.m = g.n = g.k = 4;
  g.a = a.desc;
  g.b = a.desc;
  g.c = d.desc;
  g.d = d.desc;
  g.beta = 1.0f;
  EXPECT_FALSE(ToColumnMajor(g).copy_c_to_d);
  g.beta = 0.0f;
  EXPECT_EQ(ToColumnMajor(g).c, nullptr);
}

TEST(ColumnMajorCallTest, TypePairs) {
  EXPECT_TRUE(CheckCublasTypes(DataType::kBf16, DataType::kBf16, false).ok());
  EXPECT_TRUE(CheckCublasTypes(DataType::kBf16, DataType::kFp32, false).ok());
  EXPECT_TRUE(CheckCublasTypes(DataType::kFp16, DataType::kFp32, false).ok());
  EXPECT_TRUE(CheckCublasTypes(DataType::kFp32, DataType::kFp32, false).ok());
  EXPECT_FALSE(CheckCublasTypes(DataType::kBf16, DataType::kFp16, false).ok());
  EXPECT_FALSE(CheckCublasTypes(DataType::kFp32, DataType::kBf16, false).ok());
  EXPECT_TRUE(CheckCublasTypes(DataType::kFp16, DataType::kFp16, true).ok());
  absl::Status s = CheckCublasTypes(DataType::kBf16, DataType::kFp32, true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(std::string(s.message()).rfind("d.dtype:", 0), 0u) << s;
}

TEST(ColumnMajorCallTest, Tf32OnlyForFp32Inputs) {
  std::mt19937 rng(1);
  Matrix a = Make(4, 4, 1, Layout::kRowMajor, &rng);
  GemmArguments g;
  g.m = g.n = g.k = 4;
  g.a = g.b = g.d = a.desc;
  g.allow_tf32 = true;
  EXPECT_TRUE(ToColumnMajor(g).tf32);
  g.allow_tf32 = false;
  EXPECT_FALSE(ToColumnMajor(g).tf32);
}

// cuBLAS's A is our B: its FP8 format and scales are B's, and A's where a
// column-major D exchanges the operands.
TEST(ColumnMajorCallTest, Fp8FormatsAndScalesFollowTheOperands) {
  static const float sa[1] = {2}, sb[1] = {3};
  static uint8_t bytes[64];
  GemmArguments g;
  g.m = g.n = 4;
  g.k = 16;
  g.a = {bytes, DataType::kFp8E4m3, Layout::kRowMajor, 16, 0};
  g.b = {bytes, DataType::kFp8E5m2, Layout::kColMajor, 16, 0};
  g.d = {bytes, DataType::kBf16, Layout::kRowMajor, 4, 0};
  g.a_scale = {ScaleMode::kTensor, sa};
  g.b_scale = {ScaleMode::kChannel, sb};
  ColumnMajorCall row = ToColumnMajor(g);
  EXPECT_EQ(row.a_dtype, DataType::kFp8E5m2);
  EXPECT_EQ(row.b_dtype, DataType::kFp8E4m3);
  EXPECT_EQ(row.a_scale.ptr, sb);
  EXPECT_EQ(row.a_scale.mode, ScaleMode::kChannel);
  EXPECT_EQ(row.b_scale.ptr, sa);
  EXPECT_TRUE(row.a.transpose);
  EXPECT_FALSE(row.b.transpose);
  g.d.layout = Layout::kColMajor;
  ColumnMajorCall col = ToColumnMajor(g);
  EXPECT_EQ(col.a_dtype, DataType::kFp8E4m3);
  EXPECT_EQ(col.b_dtype, DataType::kFp8E5m2);
  EXPECT_EQ(col.a_scale.ptr, sa);
  EXPECT_EQ(col.b_scale.ptr, sb);
  EXPECT_TRUE(col.a.transpose);
  EXPECT_FALSE(col.b.transpose);
}

}  // namespace
}  // namespace cublas
}  // namespace gemm_kernels
