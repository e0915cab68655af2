#include "bench/tuning_shapes.h"

#include "gtest/gtest.h"

namespace gemm_bench {
namespace {

using gemm_kernels::DataType;
using gemm_kernels::Layout;

TEST(TuningShapesTest, ParsesSingleAndGroupedLines) {
  absl::StatusOr<std::vector<TuningShape>> s = ParseTuningShapes(
      "# comment\n"
      "\n"
      "a single bf16 4096 4096 4096\n"
      "b   single  tf32 7 8 9 16 CRC\n"
      "c single fp16 1 2 3 RRR\n"
      "g grouped fp16 32 16 2048 4096 2048 5\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[0].m, 4096);
  EXPECT_EQ((*s)[0].batch, 1);
  EXPECT_EQ((*s)[0].b, Layout::kColMajor);
  EXPECT_EQ((*s)[1].dtype, DataType::kFp32);
  EXPECT_TRUE((*s)[1].allow_tf32);
  EXPECT_EQ((*s)[1].batch, 16);
  EXPECT_EQ((*s)[1].a, Layout::kColMajor);
  EXPECT_EQ((*s)[1].b, Layout::kRowMajor);
  EXPECT_EQ((*s)[1].d, Layout::kColMajor);
  EXPECT_EQ((*s)[2].batch, 1);
  EXPECT_EQ((*s)[2].b, Layout::kRowMajor);
  EXPECT_TRUE((*s)[3].grouped);
  EXPECT_EQ((*s)[3].count, 32);
  EXPECT_EQ((*s)[3].m_hi, 2048);
  EXPECT_EQ((*s)[3].seed, 5u);
}

TEST(TuningShapesTest, ParsesFp8Pairings) {
  absl::StatusOr<std::vector<TuningShape>> s = ParseTuningShapes(
      "t single e4m3xe4m3/tensor 4096 4096 4096\n"
      "c single e4m3xe5m2/channel 64 128 256 2 RCC\n"
      "r single e5m2xe4m3/tensor 1 2 3\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0].dtype, DataType::kFp8E4m3);
  EXPECT_EQ((*s)[0].b_dtype, DataType::kFp8E4m3);
  EXPECT_EQ((*s)[0].out_dtype, DataType::kBf16);
  EXPECT_EQ((*s)[0].scales, gemm_kernels::ScaleMode::kTensor);
  EXPECT_EQ((*s)[1].b_dtype, DataType::kFp8E5m2);
  EXPECT_EQ((*s)[1].scales, gemm_kernels::ScaleMode::kChannel);
  EXPECT_EQ((*s)[1].batch, 2);
  EXPECT_EQ((*s)[1].d, Layout::kColMajor);
  EXPECT_EQ((*s)[2].dtype, DataType::kFp8E5m2);
  // Other types keep one format and no scales.
  s = ParseTuningShapes("a single fp16 1 2 3\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)[0].b_dtype, DataType::kFp16);
  EXPECT_EQ((*s)[0].out_dtype, DataType::kFp16);
  EXPECT_EQ((*s)[0].scales, gemm_kernels::ScaleMode::kNone);
}

TEST(TuningShapesTest, ErrorsNameTheLineAndField) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"a single int8 1 1 1\n", "line 1: dtype \"int8\""},
      {"a single bf16 1 0 1\n", "line 1: N \"0\""},
      {"a single bf16 1 1\n", "line 1: expected NAME single"},
      {"a single bf16 1 1 1 2 RCX\n", "line 1: LAYOUT \"RCX\""},
      {"a single bf16 1 1 1 2 RCR 9\n", "line 1: expected NAME single"},
      {"a batched bf16 1 1 1\n", "line 1: kind \"batched\""},
      {"a single bf16 1 1 1\na single bf16 2 2 2\n", "line 2: name \"a\" used twice"},
      {"g grouped bf16 4 100 10 64 64 1\n", "M_LO is above M_HI"},
      {"g grouped tf32 4 1 10 64 64 1\n", "bf16 or fp16"},
      {"# nothing\n", "holds no shape"},
      {"f single e4m3xe5m2 1 1 1\n", "line 1: dtype \"e4m3xe5m2\""},
      {"f single e5m2xe5m2/tensor 1 1 1\n", "line 1: dtype"},
      {"f single e4m3xe4m3/block 1 1 1\n", "line 1: dtype"},
      {"f single e4m3xe4m3/tensor 1 1 1 RRR\n", "FP8 operands are K-major"},
      {"f grouped e4m3xe4m3/tensor 4 1 10 64 64 1\n", "FP8 shapes are single launches"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<TuningShape>> s = ParseTuningShapes(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(std::string(s.status().message()).find(c.expect), std::string::npos)
        << s.status() << " wanted " << c.expect;
  }
}

TEST(TuningShapesTest, TheDefaultListParsesAndCoversEachSet) {
  absl::StatusOr<std::vector<TuningShape>> s = ParseTuningShapes(DefaultTuningShapes());
  ASSERT_TRUE(s.ok()) << s.status();
  bool batched = false, grouped = false, tf32 = false, fp8_tensor = false, fp8_channel = false;
  for (const TuningShape& t : *s) {
    batched = batched || t.batch > 1;
    grouped = grouped || t.grouped;
    tf32 = tf32 || t.allow_tf32;
    fp8_tensor = fp8_tensor || t.scales == gemm_kernels::ScaleMode::kTensor;
    fp8_channel = fp8_channel || t.scales == gemm_kernels::ScaleMode::kChannel;
  }
  EXPECT_TRUE(batched && grouped && tf32 && fp8_tensor && fp8_channel);
}

}  // namespace
}  // namespace gemm_bench
