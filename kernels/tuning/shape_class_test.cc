#include "kernels/tuning/shape_class.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace gemm_kernels {
namespace tuning {
namespace {

// A 16-bit problem with packed leading dimensions at a 256-byte aligned base.
GemmArguments Problem(int64_t m, int64_t n, int64_t k, int64_t batch = 1) {
  GemmArguments g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.batch_count = batch;
  const void* base = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  g.a = {base, DataType::kBf16, Layout::kRowMajor, k, m * k};
  g.b = {base, DataType::kBf16, Layout::kColMajor, k, k * n};
  g.d = {base, DataType::kBf16, Layout::kRowMajor, n, m * n};
  return g;
}

std::vector<std::string> Values(const ShapeClass& c) {
  std::vector<std::string> out;
  for (const std::string& field : std::vector<std::string>(absl::StrSplit(ClassToString(c), ' '))) {
    out.push_back(field.substr(field.find('=') + 1));
  }
  return out;
}

TEST(BucketTest, PowersOfTwoAreEdgesAndBucketsAreContiguous) {
  for (int per_octave : {1, 2, 4, 8}) {
    for (int64_t p = 1; p <= (int64_t{1} << 40); p *= 2) {
      EXPECT_TRUE(IsBucketEdge(p, per_octave)) << p << " at " << per_octave;
      EXPECT_EQ(BucketEdgeOf(p, per_octave), p);
    }
    // Every value maps to the smallest edge at or above it.
    int64_t previous_edge = 0;
    for (int64_t x = 1; x <= 20000; ++x) {
      const int64_t edge = BucketEdgeOf(x, per_octave);
      EXPECT_GE(edge, x);
      EXPECT_TRUE(IsBucketEdge(edge, per_octave));
      if (x > 1) {
        EXPECT_TRUE(edge == previous_edge || previous_edge == x - 1) << x;
      }
      previous_edge = edge;
    }
  }
}

TEST(BucketTest, QuarterOctaveEdgesSeparateNearbyShapes) {
  EXPECT_EQ(BucketEdgeOf(4096, 4), 4096);
  EXPECT_EQ(BucketEdgeOf(4097, 4), 4871);
  EXPECT_EQ(BucketEdgeOf(3000, 4), 3444);
  EXPECT_EQ(BucketEdgeOf(2048, 4), 2048);
  EXPECT_EQ(BucketEdgeOf(2049, 4), 2435);
  EXPECT_FALSE(IsBucketEdge(3000, 4));
  EXPECT_FALSE(IsBucketEdge(0, 4));
  EXPECT_EQ(BucketEdgeOf(3000, 1), 4096);
}

TEST(BucketTest, HugeValuesStayInRange) {
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(BucketEdgeOf(big, 4), big);
  EXPECT_GE(BucketEdgeOf(big + 1, 4), big + 1);
  EXPECT_EQ(BucketEdgeOf(INT64_MAX, 1), INT64_MAX);
  EXPECT_EQ(BucketEdgeOf(INT64_MAX - 5, 4), INT64_MAX);
}

TEST(ShapeClassTest, ClassOfTakesTypesLayoutsAndBuckets) {
  GemmArguments g = Problem(4000, 4096, 1000, 3);
  const ShapeClass c = ClassOf(g, 4);
  EXPECT_EQ(c.kind, LaunchKind::kSingle);
  EXPECT_EQ(c.in_dtype, DataType::kBf16);
  EXPECT_EQ(c.b_layout, Layout::kColMajor);
  EXPECT_EQ(c.m, 4096);
  EXPECT_EQ(c.n, 4096);
  EXPECT_EQ(c.k, 1024);
  EXPECT_EQ(c.batch, 3);  // 3 is an edge at 4 per octave (round(2^1.5) = 3)
  EXPECT_EQ(c.group, 1);
  // K = 1000 bf16: rows 2000 bytes apart start off the 32-byte sectors.
  EXPECT_FALSE(c.sector_aligned);
  EXPECT_TRUE(ClassOf(Problem(4096, 4096, 1024, 3), 4).sector_aligned);
}

TEST(ShapeClassTest, Tf32OnlyCountsForFp32Inputs) {
  GemmArguments g = Problem(64, 64, 64);
  g.allow_tf32 = true;
  EXPECT_FALSE(ClassOf(g, 4).allow_tf32);
  g.a.dtype = g.b.dtype = g.d.dtype = DataType::kFp32;
  EXPECT_TRUE(ClassOf(g, 4).allow_tf32);
}

TEST(ShapeClassTest, GroupedClassUsesLargestMemberAndCount) {
  std::vector<GemmArguments> members = {Problem(100, 2000, 64), Problem(900, 50, 4096),
                                        Problem(1, 1, 1)};
  absl::StatusOr<ShapeClass> c = GroupedClassOf(members, 2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, LaunchKind::kGrouped);
  EXPECT_EQ(c->m, BucketEdgeOf(900, 2));
  EXPECT_EQ(c->n, BucketEdgeOf(2000, 2));
  EXPECT_EQ(c->k, 4096);
  EXPECT_EQ(c->group, BucketEdgeOf(3, 2));
  EXPECT_EQ(c->batch, 1);
  EXPECT_FALSE(GroupedClassOf({}, 2).ok());
}

TEST(ShapeClassTest, TextRoundTrips) {
  for (int per_octave : {1, 4}) {
    ShapeClass c = ClassOf(Problem(777, 3, 12345, 9), per_octave);
    absl::StatusOr<ShapeClass> back = ClassFromFields(Values(c), per_octave);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, c);
  }
  EXPECT_EQ(ClassToString(ClassOf(Problem(4096, 4096, 4096), 4)),
            "kind=single in=bf16 in_b=bf16 out=bf16 tf32=0 sa=none sb=none a=row b=col d=row "
            "aligned=1 m=4096 n=4096 k=4096 batch=1 group=1");
}

// FP8 classes carry B's format and both operands' scale modes.
TEST(ShapeClassTest, Fp8ClassesKeepFormatsAndScales) {
  GemmArguments args = Problem(4096, 4096, 4096);
  args.a.dtype = DataType::kFp8E4m3;
  args.b.dtype = DataType::kFp8E5m2;
  args.a_scale.mode = ScaleMode::kTensor;
  args.b_scale.mode = ScaleMode::kChannel;
  const ShapeClass c = ClassOf(args, 4);
  EXPECT_EQ(c.in_dtype, DataType::kFp8E4m3);
  EXPECT_EQ(c.in_b_dtype, DataType::kFp8E5m2);
  EXPECT_EQ(c.a_scales, ScaleMode::kTensor);
  EXPECT_EQ(c.b_scales, ScaleMode::kChannel);
  EXPECT_EQ(ClassToString(c),
            "kind=single in=e4m3 in_b=e5m2 out=bf16 tf32=0 sa=tensor sb=channel a=row b=col "
            "d=row aligned=1 m=4096 n=4096 k=4096 batch=1 group=1");
  absl::StatusOr<ShapeClass> back = ClassFromFields(Values(c), 4);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
  ShapeClass same_scales = c;
  same_scales.b_scales = ScaleMode::kTensor;
  EXPECT_NE(same_scales, c);
  // FP8 without scales, and an FP8 A beside a 16-bit B, are refused.
  std::vector<std::string> v = Values(c);
  v[5] = "none";
  EXPECT_EQ(std::string(ClassFromFields(v, 4).status().message()).rfind("sa:", 0), 0u);
  v = Values(c);
  v[2] = "bf16";
  EXPECT_EQ(std::string(ClassFromFields(v, 4).status().message()).rfind("in_b:", 0), 0u);
}

TEST(ShapeClassTest, ParsingNamesTheFieldAtFault) {
  const ShapeClass c = ClassOf(Problem(4096, 4096, 4096), 4);
  struct Case {
    size_t field;
    std::string value;
    std::string names;
  } cases[] = {{0, "batched", "kind"}, {1, "int8", "in"},     {2, "f16", "in_b"},
               {2, "e4m3", "in_b"},    {3, "e4m3", "out"},     {4, "1", "tf32"},
               {5, "tensor", "sa"},    {6, "block", "sb"},     {6, "rows", "sb"},
               {7, "diag", "a"},       {10, "yes", "aligned"}, {11, "4000", "m"},
               {13, "-4", "k"},        {15, "4", "group"}};
  for (const Case& bad : cases) {
    std::vector<std::string> v = Values(c);
    v[bad.field] = bad.value;
    absl::StatusOr<ShapeClass> parsed = ClassFromFields(v, 4);
    ASSERT_FALSE(parsed.ok()) << bad.names;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(parsed.status().message()).rfind(bad.names + ":", 0), 0u)
        << parsed.status();
  }
  std::vector<std::string> short_list = Values(c);
  short_list.pop_back();
  EXPECT_FALSE(ClassFromFields(short_list, 4).ok());
}

}  // namespace
}  // namespace tuning
}  // namespace gemm_kernels
