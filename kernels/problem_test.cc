// CPU tests of argument checking and normalization (no GPU needed).
#include "kernels/problem.h"

#include "gtest/gtest.h"
#include "kernels/gemm.h"

namespace gemm_kernels {
namespace {

const void* P(uintptr_t v) { return reinterpret_cast<const void*>(v); }

GemmArguments Valid() {
  GemmArguments a;
  a.m = 100;
  a.n = 200;
  a.k = 300;
  a.a = {P(0x1000), DataType::kBf16, Layout::kRowMajor, 300, 0};
  a.b = {P(0x2000), DataType::kBf16, Layout::kColMajor, 300, 0};
  a.d = {P(0x3000), DataType::kFp32, Layout::kRowMajor, 200, 0};
  return a;
}

TEST(CanImplement, AcceptsAValidProblem) { EXPECT_TRUE(Gemm::CanImplement(Valid()).ok()); }

TEST(CanImplement, RejectsBadFieldsByName) {
  GemmArguments a = Valid();
  a.k = 0;
  EXPECT_EQ(Gemm::CanImplement(a).code(), absl::StatusCode::kInvalidArgument);
  a = Valid();
  a.a.ld = 299;
  EXPECT_NE(Gemm::CanImplement(a).message().find("a.ld"), std::string::npos);
  a = Valid();
  a.b.dtype = DataType::kFp16;
  EXPECT_NE(Gemm::CanImplement(a).message().find("dtype"), std::string::npos);
  a = Valid();
  a.d.ptr = nullptr;
  EXPECT_NE(Gemm::CanImplement(a).message().find("d.ptr"), std::string::npos);
  a = Valid();
  a.beta = 1.0f;  // C required now
  EXPECT_FALSE(Gemm::CanImplement(a).ok());
  a.c = {P(0x4000), DataType::kBf16, Layout::kRowMajor, 200, 0};
  EXPECT_NE(Gemm::CanImplement(a).message().find("c must have"), std::string::npos);
  a.c.dtype = DataType::kFp32;
  EXPECT_TRUE(Gemm::CanImplement(a).ok());
  a = Valid();
  a.batch_count = 4;
  EXPECT_NE(Gemm::CanImplement(a).message().find("d.batch_stride"), std::string::npos);
  a.d.batch_stride = 100 * 200 - 1;
  EXPECT_NE(Gemm::CanImplement(a).message().find("overlaps"), std::string::npos);
  a.d.batch_stride = 100 * 200;
  EXPECT_TRUE(Gemm::CanImplement(a).ok());  // A and B broadcast (stride 0)
}

TEST(CanImplement, NeedsNoGpuAndWorkspaceIsZero) {
  EXPECT_EQ(Gemm::WorkspaceSize(Valid()), 0u);
}

TEST(GemmPlan, CarriesCanImplementsVerdict) {
  GemmArguments a = Valid();
  a.a.ld = 299;
  const Gemm::Plan bad = Gemm::MakePlan(a);
  EXPECT_EQ(bad.status(), Gemm::CanImplement(a));
  EXPECT_EQ(bad.workspace_bytes(), 0u);
  EXPECT_EQ(bad.operand_copy_bytes(), 0u);
  Gemm gemm;
  EXPECT_EQ(gemm.Initialize(bad), Gemm::CanImplement(a));
  EXPECT_EQ(gemm.kernel_kind(), KernelKind::kNone);
}

TEST(GemmPlan, ADefaultPlanIsRefused) {
  const Gemm::Plan none;
  EXPECT_FALSE(none.status().ok());
  Gemm gemm;
  EXPECT_FALSE(gemm.Initialize(none).ok());
}

TEST(GemmPlan, AgreesWithTheOneShotQueries) {
  // Valid arguments: on a machine without a GPU the plan holds the device
  // error and sizes nothing, as the one-shot queries do.
  const Gemm::Plan plan = Gemm::MakePlan(Valid());
  EXPECT_EQ(plan.workspace_bytes(), Gemm::WorkspaceSize(Valid()));
  EXPECT_EQ(plan.operand_copy_bytes(), Gemm::OperandCopyBytes(Valid()));
  Gemm a, b;
  EXPECT_EQ(a.Initialize(plan).code(), b.Initialize(Valid()).code());
}

TEST(Normalize, RowMajorDKeepsOperands) {
  const NormalizedProblem p = Normalize(Valid());
  EXPECT_FALSE(p.swapped);
  EXPECT_EQ(p.m, 100);
  EXPECT_EQ(p.n, 200);
  EXPECT_EQ(p.a.ptr, P(0x1000));
  EXPECT_TRUE(p.a.k_major);
  EXPECT_TRUE(p.b.k_major);
  EXPECT_EQ(p.c, nullptr);  // beta == 0: C is never read
}

TEST(Normalize, ColumnMajorDSwapsAndTransposes) {
  GemmArguments a = Valid();
  a.d.layout = Layout::kColMajor;
  a.d.ld = 100;
  a.b.layout = Layout::kRowMajor;  // B: k x n row-major, n contiguous
  a.b.ld = 200;
  const NormalizedProblem p = Normalize(a);
  EXPECT_TRUE(p.swapped);
  EXPECT_EQ(p.m, 200);
  EXPECT_EQ(p.n, 100);
  // New A = B^T (n x k): B row-major means n... k strided: not k-major.
  EXPECT_EQ(p.a.ptr, P(0x2000));
  EXPECT_FALSE(p.a.k_major);
  // New B = A^T (k x m): A row-major has k contiguous: k-major.
  EXPECT_EQ(p.b.ptr, P(0x1000));
  EXPECT_TRUE(p.b.k_major);
  EXPECT_EQ(p.ldd, 100);
}

TEST(KMajorCopies, NoneForSixteenBitOrStrictOrKMajorOperands) {
  GemmArguments a = Valid();  // bf16
  a.b.layout = Layout::kRowMajor;
  a.b.ld = 200;
  EXPECT_EQ(PlanKMajorCopies(Normalize(a)).total_bytes, 0u);
  a.a.dtype = a.b.dtype = DataType::kFp32;
  EXPECT_EQ(PlanKMajorCopies(Normalize(a)).total_bytes, 0u) << "strict fp32 is not TF32";
  a = Valid();
  a.a.dtype = a.b.dtype = DataType::kFp32;
  a.allow_tf32 = true;
  EXPECT_EQ(PlanKMajorCopies(Normalize(a)).total_bytes, 0u) << "both K-major already";
}

TEST(KMajorCopies, Tf32OperandsOffTheGridAreRepitched) {
  GemmArguments a = Valid();
  a.a.dtype = a.b.dtype = DataType::kFp32;
  a.allow_tf32 = true;
  a.a.ld = a.k + 1;  // A row-major, K-major: rows of (k + 1) * 4 bytes, off the grid
  const KMajorCopyPlan plan = PlanKMajorCopies(Normalize(a));
  EXPECT_TRUE(plan.a.needed);
  EXPECT_TRUE(plan.a.repitch);
  EXPECT_EQ(plan.a.element_bytes, 4);
  EXPECT_EQ(plan.a.ld_copy % 4, 0);
  EXPECT_FALSE(plan.b.needed) << "B is K-major on the grid";
  EXPECT_TRUE(OperandNeedsCopy(DataType::kFp32, /*k_major=*/true, /*on_grid=*/false));
  EXPECT_FALSE(OperandNeedsCopy(DataType::kFp32, /*k_major=*/true, /*on_grid=*/true));
  EXPECT_TRUE(OperandNeedsCopy(DataType::kFp32, /*k_major=*/false, /*on_grid=*/true));
}

TEST(KMajorCopies, SixteenBitOperandsOffTheGridAreCopiedWhenAsked) {
  for (DataType t : {DataType::kBf16, DataType::kFp16}) {
    GemmArguments a = Valid();  // m 100, n 200, k 300
    a.a.dtype = a.b.dtype = a.c.dtype = a.d.dtype = t;
    a.k = 77;
    a.a.ld = 77;  // A row-major, K-major: rows of 154 bytes, off the grid
    a.b.layout = Layout::kRowMajor;  // B n-major, ld 200: on the grid
    a.b.ld = 200;
    EXPECT_EQ(PlanKMajorCopies(Normalize(a)).total_bytes, 0u) << "not asked";
    a.copy_unaligned_operands = true;
    const NormalizedProblem p = Normalize(a);
    const KMajorCopyPlan plan = PlanKMajorCopies(p);
    ASSERT_TRUE(plan.a.needed);
    EXPECT_TRUE(plan.a.repitch) << "A is K-major; only its pitch moves to the grid";
    EXPECT_EQ(plan.a.element_bytes, 2);
    EXPECT_EQ(plan.a.rows, 100);
    EXPECT_EQ(plan.a.ld_copy, 80);  // 77 rounded up to 8 elements (16 bytes)
    EXPECT_EQ(plan.a.bytes, 100u * 80 * 2);
    EXPECT_FALSE(plan.b.needed) << "n-major on the grid runs as it is";
    const NormalizedProblem q = WithKMajorCopies(p, plan, reinterpret_cast<void*>(0x10000));
    EXPECT_TRUE(q.a.k_major);
    EXPECT_EQ(q.a.ld, 80);
    EXPECT_EQ(q.a.ptr, reinterpret_cast<void*>(0x10000));

    // An n-major B off the grid is transposed into K-major order; several
    // batch members, A broadcast (batch stride 0).
    a.b.ld = 203;
    a.batch_count = 3;
    a.a.batch_stride = 0;
    a.b.batch_stride = 77 * 203;
    a.d.batch_stride = 100 * 200;
    const KMajorCopyPlan both = PlanKMajorCopies(Normalize(a));
    ASSERT_TRUE(both.a.needed && both.b.needed);
    EXPECT_EQ(both.a.members, 1);
    EXPECT_FALSE(both.b.repitch);
    EXPECT_EQ(both.b.rows, 200);
    EXPECT_EQ(both.b.members, 3);
    EXPECT_EQ(both.b.ld_copy, 80);
    EXPECT_EQ(both.b.offset, (both.a.bytes + 255) / 256 * 256);
    EXPECT_EQ(both.b.offset % 256, 0u);
    EXPECT_EQ(both.total_bytes, both.b.offset + (both.b.bytes + 255) / 256 * 256);

    // On the grid in both layouts: nothing to copy.
    a = Valid();
    a.a.dtype = a.b.dtype = a.c.dtype = a.d.dtype = t;
    a.copy_unaligned_operands = true;
    a.k = a.a.ld = 304;  // 608-byte rows
    a.b.layout = Layout::kRowMajor;
    a.b.ld = 200;
    EXPECT_EQ(PlanKMajorCopies(Normalize(a)).total_bytes, 0u);
    // A base off 16 bytes is copied too (the pitch alone is fine).
    a.a.ptr = reinterpret_cast<const void*>(0x1002);
    const KMajorCopyPlan moved = PlanKMajorCopies(Normalize(a));
    EXPECT_TRUE(moved.a.needed && moved.a.repitch);
  }
}

TEST(KMajorCopies, RowMajorBIsCopiedWithPaddedStride) {
  GemmArguments a = Valid();
  a.a.dtype = a.b.dtype = DataType::kFp32;
  a.allow_tf32 = true;
  a.k = 301;  // ld of the copy rounds up to 304 elements (16 bytes)
  a.a.ld = 304;  // K-major on the grid: stays in place (at ld 301 it would be repitched)
  a.b.layout = Layout::kRowMajor;
  a.b.ld = 200;
  const NormalizedProblem p = Normalize(a);
  const KMajorCopyPlan plan = PlanKMajorCopies(p);
  EXPECT_FALSE(plan.a.needed);
  ASSERT_TRUE(plan.b.needed);
  EXPECT_EQ(plan.b.rows, 200);
  EXPECT_EQ(plan.b.ld_copy, 304);
  EXPECT_EQ(plan.b.members, 1);
  EXPECT_EQ(plan.b.bytes, 200u * 304 * 4);
  EXPECT_EQ(plan.total_bytes, (200u * 304 * 4 + 255) / 256 * 256);
  const NormalizedProblem q = WithKMajorCopies(p, plan, reinterpret_cast<void*>(0x10000));
  EXPECT_TRUE(q.b.k_major);
  EXPECT_EQ(q.b.ptr, P(0x10000));
  EXPECT_EQ(q.b.ld, 304);
  EXPECT_EQ(q.a.ptr, p.a.ptr) << "A was K-major and stays in place";
}

TEST(KMajorCopies, BothOperandsBatchedAndBroadcast) {
  GemmArguments a = Valid();
  a.a.dtype = a.b.dtype = DataType::kFp32;
  a.allow_tf32 = true;
  a.batch_count = 5;
  a.a.layout = Layout::kColMajor;  // m-major
  a.a.ld = 100;
  a.a.batch_stride = 100 * 300;
  a.b.layout = Layout::kRowMajor;  // n-major, one matrix for every member
  a.b.ld = 200;
  a.b.batch_stride = 0;
  a.d.batch_stride = 100 * 200;
  const NormalizedProblem p = Normalize(a);
  const KMajorCopyPlan plan = PlanKMajorCopies(p);
  ASSERT_TRUE(plan.a.needed && plan.b.needed);
  EXPECT_EQ(plan.a.members, 5);
  EXPECT_EQ(plan.b.members, 1);
  EXPECT_EQ(plan.a.offset, 0u);
  EXPECT_EQ(plan.b.offset % 256, 0u);
  EXPECT_GE(plan.b.offset, plan.a.bytes);
  EXPECT_EQ(plan.total_bytes, plan.b.offset + (plan.b.bytes + 255) / 256 * 256);
  const NormalizedProblem q = WithKMajorCopies(p, plan, reinterpret_cast<void*>(0x10000));
  EXPECT_EQ(q.a.batch_stride, 100 * 300);
  EXPECT_EQ(q.b.batch_stride, 0) << "the broadcast copy stays broadcast";
}

TEST(KMajorCopies, ColumnMajorDSwapsWhichOperandIsCopied) {
  GemmArguments a = Valid();
  a.a.dtype = a.b.dtype = DataType::kFp32;
  a.allow_tf32 = true;
  a.b.layout = Layout::kRowMajor;  // n-major B becomes the normalized A, m-major
  a.b.ld = 200;
  a.d.layout = Layout::kColMajor;
  a.d.ld = 100;
  const KMajorCopyPlan plan = PlanKMajorCopies(Normalize(a));
  EXPECT_TRUE(plan.a.needed);
  EXPECT_EQ(plan.a.rows, 200);
  EXPECT_FALSE(plan.b.needed);
}

TEST(KMajorCopies, Fp8OperandsOffTheGridOrNotKMajorAreCopied) {
  GemmArguments a = Valid();  // m 100, n 200, k 300
  a.a.dtype = DataType::kFp8E4m3;
  a.b.dtype = DataType::kFp8E5m2;
  a.k = 1000;  // 1000 bytes: rows off the 16-byte grid
  a.a.ld = 1000;
  a.b.layout = Layout::kRowMajor;  // n-major
  a.b.ld = 200;
  const NormalizedProblem p = Normalize(a);
  const KMajorCopyPlan plan = PlanKMajorCopies(p);
  ASSERT_TRUE(plan.a.needed);
  EXPECT_TRUE(plan.a.repitch) << "A is K-major; only its pitch moves to the grid";
  EXPECT_EQ(plan.a.element_bytes, 1);
  EXPECT_EQ(plan.a.ld_copy, 1008);
  EXPECT_EQ(plan.a.bytes, 100u * 1008);
  ASSERT_TRUE(plan.b.needed);
  EXPECT_FALSE(plan.b.repitch) << "B is n-major: transposed";
  EXPECT_EQ(plan.b.rows, 200);
  EXPECT_EQ(plan.b.ld_copy, 1008);
  EXPECT_EQ(plan.b.offset % 256, 0u);
  const NormalizedProblem q = WithKMajorCopies(p, plan, reinterpret_cast<void*>(0x10000));
  EXPECT_TRUE(q.a.k_major && q.b.k_major);
  EXPECT_EQ(q.a.ld, 1008);

  // K-major on the grid: no copy.
  a.k = a.a.ld = 1024;
  a.b.layout = Layout::kColMajor;
  a.b.ld = 1024;
  EXPECT_EQ(PlanKMajorCopies(Normalize(a)).total_bytes, 0u);
  // A batch stride off the grid is copied too.
  a.batch_count = 3;
  a.a.batch_stride = 100 * 1024 + 8;
  a.b.batch_stride = 200 * 1024;
  a.d.batch_stride = 100 * 200;
  const KMajorCopyPlan strided = PlanKMajorCopies(Normalize(a));
  EXPECT_TRUE(strided.a.needed && strided.a.repitch);
  EXPECT_EQ(strided.a.members, 3);
  EXPECT_FALSE(strided.b.needed);
}

// Rates of the order an H100's calibration measures; the tests below check
// where they put the boundary, not the figures themselves.
CopyPricing HopperLikePricing() {
  CopyPricing r;
  r.tensor_flops_per_s = 600e12;
  r.simt_flops_per_s = 25e12;
  r.device_copy_bytes_per_s = 3e12;
  r.launch_seconds = 3e-6;
  return r;
}

// bf16 m x n x k with D row-major and A, B in the given layouts at their
// tightest leading dimensions, copies of the operands off the grid asked for.
GemmArguments Bf16(int64_t m, int64_t n, int64_t k, Layout a_layout, Layout b_layout) {
  GemmArguments a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.a = {P(0x1000), DataType::kBf16, a_layout, a_layout == Layout::kRowMajor ? k : m, 0};
  a.b = {P(0x2000), DataType::kBf16, b_layout, b_layout == Layout::kRowMajor ? n : k, 0};
  a.d = {P(0x3000), DataType::kBf16, Layout::kRowMajor, n, 0};
  a.copy_unaligned_operands = true;
  return a;
}

// Whether the copies `a` plans pay off at `pricing`; the plan must copy.
bool PaysOff(const GemmArguments& a, const CopyPricing& pricing) {
  const NormalizedProblem p = Normalize(a);
  const KMajorCopyPlan copies = PlanKMajorCopies(p);
  EXPECT_GT(copies.total_bytes, 0u) << "an operand off the grid";
  return OperandCopiesPayOff(p, copies, pricing);
}

TEST(OperandCopiesPayOff, TinyProblemsStayOnTheSimtKernel) {
  // 3x5x7: A's rows are 14 bytes. The SIMT kernel's one launch beats the
  // copy's launch and the Hopper kernel's.
  EXPECT_FALSE(PaysOff(Bf16(3, 5, 7, Layout::kRowMajor, Layout::kColMajor), HopperLikePricing()));
}

TEST(OperandCopiesPayOff, LargeRaggedProblemsTakeTheCopies) {
  // The shapes kernel_bench ragged measured at 1.5-1.9x cuBLAS with copies.
  EXPECT_TRUE(
      PaysOff(Bf16(3000, 5000, 700, Layout::kColMajor, Layout::kColMajor), HopperLikePricing()));
  EXPECT_TRUE(
      PaysOff(Bf16(77, 4096, 14336, Layout::kColMajor, Layout::kColMajor), HopperLikePricing()));
  EXPECT_TRUE(
      PaysOff(Bf16(4095, 4097, 1023, Layout::kRowMajor, Layout::kColMajor), HopperLikePricing()));
}

TEST(OperandCopiesPayOff, ASimtGridThatLeavesTheGpuIdleIsPricedByItsTilesKLoop) {
  // An H100 measured (copy_pricing_bench, 2026-12-07): a bf16 ragged n^3 on
  // the SIMT kernel took 15.5 us at n = 95 and 56.8 us at 383, where copies
  // and the Hopper kernel took 14.5 and 18.6 us; one SIMT tile ran about
  // 130 ns per unit of K. By the rate alone (25 TFLOP/s) the SIMT kernel
  // looked faster up to n = 511.
  CopyPricing rates = HopperLikePricing();
  const GemmArguments n383 = Bf16(383, 383, 383, Layout::kRowMajor, Layout::kColMajor);
  const GemmArguments n255 = Bf16(255, 255, 255, Layout::kRowMajor, Layout::kColMajor);
  const GemmArguments n31 = Bf16(31, 31, 31, Layout::kRowMajor, Layout::kColMajor);
  EXPECT_FALSE(PaysOff(n383, rates)) << "the rate alone";
  rates.simt_tile_seconds_per_k = 130e-9;
  EXPECT_TRUE(PaysOff(n383, rates));
  EXPECT_TRUE(PaysOff(n255, rates));
  EXPECT_FALSE(PaysOff(n31, rates)) << "31 x 130 ns beats two copy launches";
}

TEST(OperandCopiesPayOff, UnmeasuredRatesAlwaysCopy) {
  const GemmArguments tiny = Bf16(3, 5, 7, Layout::kRowMajor, Layout::kColMajor);
  EXPECT_TRUE(PaysOff(tiny, CopyPricing{}));
  CopyPricing no_launch = HopperLikePricing();
  no_launch.launch_seconds = 0;
  EXPECT_TRUE(PaysOff(tiny, no_launch)) << "one rate missing is not a measurement";
}

TEST(OperandCopiesPayOff, TheBoundaryMovesWithTheRates) {
  // 256x256x255, only A off the grid: the tensor cores save about 1.3 us of
  // SIMT time at these rates, against one copy launch (and 0.1 us copying).
  const GemmArguments mid = Bf16(256, 256, 255, Layout::kRowMajor, Layout::kRowMajor);
  CopyPricing rates = HopperLikePricing();
  EXPECT_FALSE(PaysOff(mid, rates)) << "a 3 us launch costs more than the copies save";
  rates.launch_seconds = 0.5e-6;
  EXPECT_TRUE(PaysOff(mid, rates)) << "a 0.5 us launch costs less";

  const GemmArguments large = Bf16(3000, 5000, 700, Layout::kColMajor, Layout::kColMajor);
  rates = HopperLikePricing();
  rates.simt_flops_per_s = rates.tensor_flops_per_s;
  EXPECT_FALSE(PaysOff(large, rates)) << "a SIMT kernel as fast as the tensor cores";
  rates = HopperLikePricing();
  rates.device_copy_bytes_per_s = 1e6;
  EXPECT_FALSE(PaysOff(large, rates)) << "copies at 1 MB/s";
}

}  // namespace
}  // namespace gemm_kernels
