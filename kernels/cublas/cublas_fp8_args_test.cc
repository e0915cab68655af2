// Which FP8 problems the cuBLASLt member takes (CublasGemm::CanImplement):
// checked without a GPU, on pointers that are never dereferenced.
#include <cstdint>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cublas/cublas_gemm.h"

namespace gemm_kernels {
namespace cublas {
namespace {

using ::testing::HasSubstr;

const float kScales[4] = {1, 1, 1, 1};
alignas(256) uint8_t kBytes[1 << 16];

GemmArguments Fp8(ScaleMode mode) {
  GemmArguments args;
  args.m = 64;
  args.n = 64;
  args.k = 128;
  args.a = {kBytes, DataType::kFp8E4m3, Layout::kRowMajor, 128, 0};
  args.b = {kBytes, DataType::kFp8E5m2, Layout::kColMajor, 128, 0};
  args.d = {kBytes, DataType::kBf16, Layout::kRowMajor, 64, 0};
  args.c = args.d;
  args.a_scale = {mode, kScales};
  args.b_scale = {mode, kScales};
  return args;
}

TEST(CublasFp8ArgsTest, TensorAndChannelScalesOfKMajorOperandsRunThroughCublasLt) {
  EXPECT_TRUE(CublasGemm::CanImplement(CublasMethod::kLt, Fp8(ScaleMode::kTensor)).ok());
  EXPECT_TRUE(CublasGemm::CanImplement(CublasMethod::kLt, Fp8(ScaleMode::kChannel)).ok());
  GemmArguments col_d = Fp8(ScaleMode::kTensor);
  col_d.d.layout = col_d.c.layout = Layout::kColMajor;
  EXPECT_TRUE(CublasGemm::CanImplement(CublasMethod::kLt, col_d).ok());
}

TEST(CublasFp8ArgsTest, RefusesWhatCublasLtCannotRunNamingTheField) {
  for (CublasMethod m : {CublasMethod::kGemmEx, CublasMethod::kStridedBatched}) {
    const absl::Status s = CublasGemm::CanImplement(m, Fp8(ScaleMode::kTensor));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("a.dtype"));
  }
  const absl::Status block = CublasGemm::CanImplement(CublasMethod::kLt, Fp8(ScaleMode::kBlock));
  EXPECT_EQ(block.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(block.message(), HasSubstr("a_scale.mode"));

  GemmArguments mixed = Fp8(ScaleMode::kTensor);
  mixed.b_scale.mode = ScaleMode::kChannel;
  EXPECT_THAT(CublasGemm::CanImplement(CublasMethod::kLt, mixed).message(),
              HasSubstr("a_scale.mode"));

  GemmArguments e5m2 = Fp8(ScaleMode::kTensor);
  e5m2.a.dtype = DataType::kFp8E5m2;
  EXPECT_THAT(CublasGemm::CanImplement(CublasMethod::kLt, e5m2).message(), HasSubstr("b.dtype"));

  GemmArguments ragged = Fp8(ScaleMode::kTensor);
  ragged.n = 77;
  ragged.d.ld = 77;  // 154 bytes a row
  EXPECT_THAT(CublasGemm::CanImplement(CublasMethod::kLt, ragged).message(), HasSubstr("d.ld"));
  ragged.beta = 1;
  ragged.d.ld = 80;
  ragged.c.ld = 77;
  EXPECT_THAT(CublasGemm::CanImplement(CublasMethod::kLt, ragged).message(), HasSubstr("c.ld"));

  GemmArguments batch = Fp8(ScaleMode::kTensor);
  batch.batch_count = 2;
  batch.a.batch_stride = 64 * 128;
  batch.b.batch_stride = 64 * 128;
  batch.d.batch_stride = batch.c.batch_stride = 64 * 64;
  EXPECT_THAT(CublasGemm::CanImplement(CublasMethod::kLt, batch).message(),
              HasSubstr("batch_count"));

  GemmArguments m_major = Fp8(ScaleMode::kTensor);
  m_major.a.layout = Layout::kColMajor;
  m_major.a.ld = 64;
  const absl::Status layout = CublasGemm::CanImplement(CublasMethod::kLt, m_major);
  EXPECT_EQ(layout.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(layout.message(), HasSubstr("K-major"));
}

}  // namespace
}  // namespace cublas
}  // namespace gemm_kernels
