// CPU test of which normalized problems the Hopper kernel accepts (no GPU:
// Sm90Supports only inspects shapes, layouts and alignment).
#include "gtest/gtest.h"
#include "kernels/problem.h"
#include "kernels/sm90/sm90_gemm.h"

namespace gemm_kernels {
namespace {

const void* P(uintptr_t v) { return reinterpret_cast<const void*>(v); }

GemmArguments Bf16(int64_t m, int64_t n, int64_t k) {
  GemmArguments a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.a = {P(0x10000), DataType::kBF16, Layout::kRowMajor, k, 0};
  a.b = {P(0x20000), DataType::kBF16, Layout::kColMajor, k, 0};
  a.d = {P(0x30000), DataType::kBF16, Layout::kRowMajor, n, 0};
  return a;
}

bool Supports(const GemmArguments& args, std::string* why = nullptr) {
  std::string w;
  const bool ok = Sm90Supports(Normalize(args), &w);
  if (why) *why = w;
  return ok;
}

TEST(Sm90Supports, AlignedBf16InEveryLayout) {
  for (Layout la : {Layout::kRowMajor, Layout::kColMajor}) {
    for (Layout lb : {Layout::kRowMajor, Layout::kColMajor}) {
      for (Layout ld : {Layout::kRowMajor, Layout::kColMajor}) {
        GemmArguments a = Bf16(256, 128, 64);
        a.a.layout = la;
        a.a.ld = la == Layout::kRowMajor ? 64 : 256;
        a.b.layout = lb;
        a.b.ld = lb == Layout::kRowMajor ? 128 : 64;
        a.d.layout = ld;
        a.d.ld = ld == Layout::kRowMajor ? 128 : 256;
        std::string why;
        EXPECT_TRUE(Supports(a, &why)) << why;
      }
    }
  }
}

TEST(Sm90Supports, RaggedShapesWithPaddedLeadingDimensions) {
  GemmArguments a = Bf16(127, 129, 7);
  a.a.ld = 8;    // 16 bytes
  a.b.ld = 8;
  a.d.ld = 129;  // D needs no TMA alignment
  EXPECT_TRUE(Supports(a));
}

TEST(Sm90Supports, RejectsWhatTmaCannotLoad) {
  GemmArguments a = Bf16(64, 64, 7);  // lda = 7 elements = 14 bytes
  std::string why;
  EXPECT_FALSE(Supports(a, &why));
  EXPECT_NE(why.find("A:"), std::string::npos) << why;
  a = Bf16(64, 64, 64);
  a.b.ptr = P(0x20008);  // 8-byte aligned base
  EXPECT_FALSE(Supports(a, &why));
  EXPECT_NE(why.find("B:"), std::string::npos) << why;
  a = Bf16(64, 64, 64);
  a.batch_count = 2;
  a.a.batch_stride = 64 * 64 + 4;  // 8 bytes off
  a.d.batch_stride = 64 * 64;
  EXPECT_FALSE(Supports(a));
}

TEST(Sm90Supports, Fp32NeedsTf32AndKMajorOperands) {
  GemmArguments a = Bf16(64, 64, 64);
  a.a.dtype = a.b.dtype = DataType::kF32;
  std::string why;
  EXPECT_FALSE(Supports(a, &why));  // strict fp32
  EXPECT_NE(why.find("strict"), std::string::npos) << why;
  a.allow_tf32 = true;
  EXPECT_TRUE(Supports(a, &why)) << why;
  a.b.layout = Layout::kRowMajor;  // N-major B
  EXPECT_FALSE(Supports(a, &why));
  EXPECT_NE(why.find("K-major"), std::string::npos) << why;
}

}  // namespace
}  // namespace gemm_kernels
