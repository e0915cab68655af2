#include "service/cuda/batch_layout.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "service/store/resident_matrix.h"
#include "service/store/shared_memory_region.h"
#include "service/testing/host_problems.h"

namespace gemm {
namespace gpu {
namespace {

// A resident matrix as the CUDA executor makes them: device_data() is set.
// Its address is never read here.
class FakeDeviceMatrix final : public ResidentMatrix {
 public:
  explicit FakeDeviceMatrix(const MatrixRef& view) : ResidentMatrix(view, &kDeviceCopy) {}

 private:
  static constexpr char kDeviceCopy = 0;
};

class BatchLayoutTest : public ::testing::Test {
 protected:
  unsigned char* Buffer(uint64_t bytes, unsigned char fill = 0) {
    return host_.Buffer(bytes, fill);
  }
  // D = A * B (+ C when with_c) with host operands, output of the input type.
  GemmProblemRef Problem(uint64_t m, uint64_t n, uint64_t k, DType type = DType::kFp32,
                         bool with_c = false) {
    return host_.Make(m, n, k, type, type, with_c);
  }

  // Makes `m` resident (on the device, as far as the layout can tell).
  void MakeResident(MatrixRef& m) {
    residents_.push_back(std::make_unique<FakeDeviceMatrix>(m));
    m.resident = residents_.back().get();
  }

  static std::shared_ptr<WorkItem> Item(std::vector<GemmProblemRef> problems) {
    auto item = std::make_shared<WorkItem>();
    item->problems = std::move(problems);
    return item;
  }

  static LaunchGroup Launch(LaunchGroup::Kind kind, std::vector<const GemmProblemRef*> problems) {
    LaunchGroup g;
    g.kind = kind;
    g.problems = std::move(problems);
    return g;
  }

  static BatchLayout LayOut(const Batch& batch, BatchLayoutOptions options = {}) {
    auto layout = LayOutBatch(batch, options);
    EXPECT_TRUE(layout.ok()) << layout.status();
    return layout.ok() ? *std::move(layout) : BatchLayout();
  }

 private:
  fake::HostProblems host_;
  std::vector<std::unique_ptr<FakeDeviceMatrix>> residents_;
};

// 3x5x7 fp32: A is 84 bytes, B 140, C and D 60; each takes one aligned slot.
TEST_F(BatchLayoutTest, SingleLaunchesStageEachOperandInItsOwnAlignedSlot) {
  Batch batch;
  batch.items = {Item({Problem(3, 5, 7)}), Item({Problem(3, 5, 7, DType::kFp32, true)})};
  batch.launches = SingleLaunchBatch(batch.items).launches;
  const BatchLayout layout = LayOut(batch);

  ASSERT_EQ(layout.problems.size(), 2u);
  const Placement& p0 = layout.problem(0, 0).placement;
  EXPECT_EQ(p0.a, 0u);
  EXPECT_EQ(p0.b, 256u);
  EXPECT_FALSE(p0.has_c);
  EXPECT_EQ(p0.d, 0u);
  const Placement& p1 = layout.problem(1, 0).placement;
  EXPECT_EQ(p1.a, 512u);
  EXPECT_EQ(p1.b, 768u);
  EXPECT_TRUE(p1.has_c);
  EXPECT_EQ(p1.c, 1024u);
  EXPECT_EQ(p1.d, 256u);
  EXPECT_EQ(layout.input_bytes, 1280u);
  EXPECT_EQ(layout.output_bytes, 512u);
  EXPECT_EQ(layout.staging_bytes(), 1792u);
}

// C is read only when beta is nonzero: a C with beta 0 takes no slot.
TEST_F(BatchLayoutTest, CWithBetaZeroIsNotStaged) {
  GemmProblemRef p = Problem(4, 4, 4, DType::kFp32, true);
  p.beta = 0.0;
  Batch batch;
  batch.items = {Item({p})};
  batch.launches = SingleLaunchBatch(batch.items).launches;
  const BatchLayout layout = LayOut(batch);
  EXPECT_FALSE(layout.problem(0, 0).placement.has_c);
  EXPECT_EQ(layout.input_bytes, 2 * kOperandAlign);
}

// 10x10x10 fp32: 400 bytes per operand, a stride of 512. All A, then all B,
// then all C; results at the same stride.
TEST_F(BatchLayoutTest, StridedMembersSitAtAFixedStridePerOperand) {
  Batch batch;
  for (int i = 0; i < 3; ++i) batch.items.push_back(Item({Problem(10, 10, 10, DType::kFp32, true)}));
  batch.launches = {Launch(LaunchGroup::Kind::kStridedBatched,
                           {&batch.items[0]->problems[0], &batch.items[1]->problems[0],
                            &batch.items[2]->problems[0]})};
  const BatchLayout layout = LayOut(batch);

  ASSERT_EQ(layout.launches.size(), 1u);
  EXPECT_EQ(layout.launches[0].count, 3u);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const ProblemLayout& m = layout.problem(0, i);
    EXPECT_EQ(m.item, i);
    EXPECT_EQ(m.placement.a, i * 512);
    EXPECT_EQ(m.placement.b, 3 * 512 + i * 512);
    EXPECT_EQ(m.placement.c, 6 * 512 + i * 512);
    EXPECT_EQ(m.placement.d, i * 512);
  }
  EXPECT_EQ(layout.input_bytes, 9u * 512);
  EXPECT_EQ(layout.output_bytes, 3u * 512);
}

TEST_F(BatchLayoutTest, ResidentOperandsAreNotStaged) {
  GemmProblemRef single = Problem(8, 8, 8);
  MakeResident(single.a);
  Batch batch;
  batch.items = {Item({single})};
  batch.launches = SingleLaunchBatch(batch.items).launches;
  const BatchLayout layout = LayOut(batch);
  EXPECT_EQ(layout.problem(0, 0).placement.b, 0u);  // B is the only staged operand
  EXPECT_EQ(layout.input_bytes, kOperandAlign);
}

// Members of a strided batch share one resident B: stride 0, nothing staged.
TEST_F(BatchLayoutTest, StridedMembersShareAResidentOperand) {
  GemmProblemRef first = Problem(8, 8, 8);
  MakeResident(first.b);
  GemmProblemRef second = Problem(8, 8, 8);
  second.b = first.b;
  Batch batch;
  batch.items = {Item({first, second})};
  batch.launches = {Launch(LaunchGroup::Kind::kStridedBatched,
                           {&batch.items[0]->problems[0], &batch.items[0]->problems[1]})};
  const BatchLayout layout = LayOut(batch);
  EXPECT_EQ(layout.problem(0, 0).placement.b, layout.problem(0, 1).placement.b);
  EXPECT_EQ(layout.problem(0, 1).placement.a, kOperandAlign);
  EXPECT_EQ(layout.input_bytes, 2 * kOperandAlign);  // the two A only
}

TEST_F(BatchLayoutTest, GroupedDescriptorsFollowTheirLaunchsOperands) {
  Batch batch;
  batch.items = {Item({Problem(3, 5, 7), Problem(4, 4, 4)}), Item({Problem(2, 2, 2)})};
  batch.launches = {
      Launch(LaunchGroup::Kind::kGrouped, {&batch.items[0]->problems[0], &batch.items[0]->problems[1]}),
      Launch(LaunchGroup::Kind::kSingle, {&batch.items[1]->problems[0]})};
  BatchLayoutOptions options;
  size_t asked = 0;
  options.grouped_descriptor_bytes = [&asked](size_t problems) {
    asked = problems;
    return 100 * problems;
  };
  const BatchLayout layout = LayOut(batch, options);
  EXPECT_EQ(asked, 2u);
  EXPECT_EQ(layout.launches[0].descriptors, 4 * kOperandAlign);  // after 2 x (A, B)
  EXPECT_EQ(layout.launches[1].descriptors, kNoDescriptors);
  // The single launch's operands come after the descriptors (200 -> 256).
  EXPECT_EQ(layout.problem(1, 0).placement.a, 5 * kOperandAlign);
  EXPECT_EQ(layout.input_bytes, 7 * kOperandAlign);

  // No descriptor bytes, or no way to ask: nothing in the input region.
  options.grouped_descriptor_bytes = [](size_t) { return size_t{0}; };
  EXPECT_EQ(LayOut(batch, options).launches[0].descriptors, kNoDescriptors);
  EXPECT_EQ(LayOut(batch).launches[0].descriptors, kNoDescriptors);
  EXPECT_EQ(LayOut(batch).input_bytes, 6 * kOperandAlign);
}

// A launch is reported on the item of its first problem.
TEST_F(BatchLayoutTest, EachProblemKnowsItsItemAndEachLaunchItsOwner) {
  Batch batch;
  batch.items = {Item({Problem(2, 2, 2)}), Item({Problem(4, 4, 4), Problem(2, 2, 2)})};
  batch.launches = {
      Launch(LaunchGroup::Kind::kSingle, {&batch.items[1]->problems[0]}),
      Launch(LaunchGroup::Kind::kStridedBatched,
             {&batch.items[1]->problems[1], &batch.items[0]->problems[0]})};
  const BatchLayout layout = LayOut(batch);
  ASSERT_EQ(layout.launches.size(), 2u);
  EXPECT_EQ(layout.launches[0].owner, 1u);
  EXPECT_EQ(layout.launches[1].owner, 1u);
  EXPECT_EQ(layout.launches[1].first, 1u);
  EXPECT_EQ(layout.problem(1, 0).problem, &batch.items[1]->problems[1]);
  EXPECT_EQ(layout.problem(1, 1).item, 0u);
}

// A shared launch's time is split among its items by FLOPs; a launch of one
// item is that item's alone.
TEST_F(BatchLayoutTest, DeviceTimeIsSharedByFlops) {
  Batch batch;
  batch.items = {Item({Problem(2, 2, 2)}), Item({Problem(4, 4, 4), Problem(2, 2, 6)}),
                 Item({Problem(8, 8, 8)})};
  batch.launches = {
      Launch(LaunchGroup::Kind::kSingle, {&batch.items[1]->problems[0]}),
      Launch(LaunchGroup::Kind::kGrouped,
             {&batch.items[1]->problems[1], &batch.items[0]->problems[0]})};
  const BatchLayout layout = LayOut(batch);
  // Launch 1: item 1's 2x2x6 (48 FLOPs) beside item 0's 2x2x2 (16 FLOPs).
  const std::vector<double> share = DeviceShareMs(layout, {10.0f, 8.0f}, batch.items.size());
  ASSERT_EQ(share.size(), 3u);
  EXPECT_DOUBLE_EQ(share[0], 2.0);
  EXPECT_DOUBLE_EQ(share[1], 10.0 + 6.0);
  EXPECT_DOUBLE_EQ(share[2], 0.0);  // none of its problems ran here
  EXPECT_DOUBLE_EQ(share[0] + share[1] + share[2], 18.0);
}

TEST_F(BatchLayoutTest, MalformedBatchesAreRefused) {
  Batch batch;
  batch.items = {Item({Problem(2, 2, 2)})};
  batch.launches = {Launch(LaunchGroup::Kind::kSingle, {})};
  EXPECT_EQ(LayOutBatch(batch, {}).status().code(), absl::StatusCode::kInvalidArgument);

  const GemmProblemRef stranger = Problem(2, 2, 2);
  batch.launches = {Launch(LaunchGroup::Kind::kSingle, {&stranger})};
  EXPECT_EQ(LayOutBatch(batch, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Whatever the mix, staged regions are aligned, disjoint and inside their
// region.
TEST_F(BatchLayoutTest, RegionsAreAlignedDisjointAndInBounds) {
  GemmProblemRef resident_a = Problem(33, 17, 9, DType::kBf16, true);
  MakeResident(resident_a.a);
  Batch batch;
  batch.items = {Item({Problem(33, 17, 9, DType::kBf16, true), Problem(33, 17, 9, DType::kBf16, true)}),
                 Item({Problem(5, 70, 3, DType::kFp16), resident_a}),
                 Item({Problem(64, 1, 130), Problem(1, 1, 1)})};
  batch.launches = {
      Launch(LaunchGroup::Kind::kStridedBatched,
             {&batch.items[0]->problems[0], &batch.items[0]->problems[1]}),
      Launch(LaunchGroup::Kind::kGrouped,
             {&batch.items[1]->problems[0], &batch.items[1]->problems[1]}),
      Launch(LaunchGroup::Kind::kSingle, {&batch.items[2]->problems[0]}),
      Launch(LaunchGroup::Kind::kSingle, {&batch.items[2]->problems[1]})};
  BatchLayoutOptions options;
  options.grouped_descriptor_bytes = [](size_t problems) { return 64 * problems; };
  const BatchLayout layout = LayOut(batch, options);

  std::vector<std::pair<size_t, size_t>> in, out;  // [begin, end)
  for (const ProblemLayout& m : layout.problems) {
    const GemmProblemRef& p = *m.problem;
    const Placement& pl = m.placement;
    if (!ResidentData(p.a)) in.emplace_back(pl.a, pl.a + p.a.bytes());
    if (!ResidentData(p.b)) in.emplace_back(pl.b, pl.b + p.b.bytes());
    if (pl.has_c && !ResidentData(p.c)) in.emplace_back(pl.c, pl.c + p.c.bytes());
    out.emplace_back(pl.d, pl.d + p.d_bytes());
  }
  for (const LaunchLayout& l : layout.launches)
    if (l.descriptors != kNoDescriptors) in.emplace_back(l.descriptors, l.descriptors + 64 * l.count);
  EXPECT_EQ(in.size(), 15u);
  EXPECT_EQ(out.size(), 6u);
  EXPECT_EQ(layout.input_bytes % kOperandAlign, 0u);
  for (auto* regions : {&in, &out}) {
    std::sort(regions->begin(), regions->end());
    const size_t limit = regions == &in ? layout.input_bytes : layout.output_bytes;
    for (size_t i = 0; i < regions->size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ((*regions)[i].first % kOperandAlign, 0u);
      EXPECT_LE((*regions)[i].second, limit);
      if (i > 0) {
        EXPECT_LE((*regions)[i - 1].second, (*regions)[i].first);
      }
    }
  }
}

TEST_F(BatchLayoutTest, StagingCopiesOperandsAndTransposesC) {
  // 2x3 fp32 D in row-major; C stored column-major.
  GemmProblemRef p = Problem(2, 3, 1, DType::kFp32, true);
  p.c.layout = Layout::kColMajor;
  const float c_col_major[6] = {0, 3, 1, 4, 2, 5};  // (r, c) holds 3r + c
  std::memcpy(const_cast<void*>(p.c.data), c_col_major, sizeof(c_col_major));
  Batch batch;
  batch.items = {Item({p})};
  batch.launches = SingleLaunchBatch(batch.items).launches;
  const BatchLayout layout = LayOut(batch);
  std::vector<unsigned char> staging(layout.staging_bytes(), 0xee);
  StageInputs(layout, staging.data());

  const ProblemLayout& m = layout.problem(0, 0);
  const GemmProblemRef& q = *m.problem;
  EXPECT_EQ(std::memcmp(staging.data() + m.placement.a, q.a.data, q.a.bytes()), 0);
  EXPECT_EQ(std::memcmp(staging.data() + m.placement.b, q.b.data, q.b.bytes()), 0);
  float staged_c[6];
  std::memcpy(staged_c, staging.data() + m.placement.c, sizeof(staged_c));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(staged_c[i], static_cast<float>(i)) << i;
}

TEST_F(BatchLayoutTest, ResultsGoOutOnlyForItemsThatSucceeded) {
  Batch batch;
  batch.items = {Item({Problem(2, 2, 2)}), Item({Problem(2, 2, 2)})};
  batch.launches = SingleLaunchBatch(batch.items).launches;
  const BatchLayout layout = LayOut(batch);
  std::vector<unsigned char> staging(layout.staging_bytes(), 0);
  for (const ProblemLayout& m : layout.problems)
    std::memset(staging.data() + layout.input_bytes + m.placement.d, 0x40 + m.item, m.problem->d_bytes());

  CopyOutResults(layout, staging.data(), {absl::OkStatus(), absl::InternalError("launch failed")});
  const auto* d0 = static_cast<const unsigned char*>(batch.items[0]->problems[0].d);
  const auto* d1 = static_cast<const unsigned char*>(batch.items[1]->problems[0].d);
  const uint64_t bytes = batch.items[0]->problems[0].d_bytes();
  EXPECT_TRUE(std::all_of(d0, d0 + bytes, [](unsigned char v) { return v == 0x40; }));
  EXPECT_TRUE(std::all_of(d1, d1 + bytes, [](unsigned char v) { return v == 0; }));
}

// A shared-memory region of this process, mapped as the server maps a
// client's; `pinned` marks it page-locked as a GPU executor would.
std::shared_ptr<SharedMemoryRegion> Region(uint64_t bytes, bool pinned) {
  constexpr char kToken[] = "0123456789abcdef0123";
  const int fd = memfd_create("gemm-layout-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  EXPECT_EQ(pwrite(fd, kToken, std::strlen(kToken), 0), static_cast<ssize_t>(std::strlen(kToken)));
  EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  auto region = SharedMemoryRegion::Map(getpid(), fd, bytes, kToken, "/proc");
  close(fd);
  EXPECT_TRUE(region.ok()) << region.status();
  if (!region.ok()) return nullptr;
  if (pinned) (*region)->set_pin(std::make_shared<int>(0));
  return *std::move(region);
}

// Operands and outputs in a page-locked region are copied by the lane
// straight between the region and the device: staging neither copies them
// in nor out. In an unpinned region, or elsewhere, they are staged as
// always; a C in another layout than D is staged (transposed) regardless.
TEST_F(BatchLayoutTest, MatricesInPinnedSharedMemoryAreNeitherStagedNorCopiedOut) {
  std::shared_ptr<SharedMemoryRegion> pinned = Region(1 << 16, true);
  std::shared_ptr<SharedMemoryRegion> unpinned = Region(1 << 16, false);
  ASSERT_NE(pinned, nullptr);
  ASSERT_NE(unpinned, nullptr);
  // Problem 0: A, C and D in the pinned region, B in ordinary memory.
  GemmProblemRef p = Problem(4, 4, 4, DType::kFp32, true);
  char* base = pinned->base();
  std::memset(base + 256, 0x11, p.a.bytes());
  p.a.data = base + 256;
  std::memset(base + 1024, 0x33, p.c.bytes());
  p.c.data = base + 1024;
  p.d = base + 2048;
  // Problem 1: A in the unpinned region; its C column-major in the pinned
  // one (D row-major): staged, transposed.
  GemmProblemRef q = Problem(4, 4, 4, DType::kFp32, true);
  std::memset(unpinned->base() + 256, 0x22, q.a.bytes());
  q.a.data = unpinned->base() + 256;
  q.c.layout = Layout::kColMajor;
  q.c.data = base + 4096;
  Batch batch;
  batch.items = {Item({p}), Item({q})};
  batch.items[0]->shared_regions = {pinned};
  batch.items[1]->shared_regions = {unpinned, pinned};
  batch.launches = SingleLaunchBatch(batch.items).launches;
  const BatchLayout layout = LayOut(batch);
  ASSERT_EQ(layout.problems.size(), 2u);
  const ProblemLayout& m0 = layout.problems[layout.problems[0].item == 0 ? 0 : 1];
  const ProblemLayout& m1 = layout.problems[layout.problems[0].item == 0 ? 1 : 0];
  EXPECT_TRUE(m0.direct.a);
  EXPECT_FALSE(m0.direct.b);
  EXPECT_TRUE(m0.direct.c);
  EXPECT_TRUE(m0.direct.d);
  EXPECT_FALSE(m1.direct.any()) << "unpinned A, transposed C, D outside any region";

  std::vector<unsigned char> staging(layout.staging_bytes(), 0xee);
  StageInputs(layout, staging.data());
  EXPECT_EQ(staging[m0.placement.a], 0xee) << "a direct A is not staged";
  EXPECT_EQ(staging[m0.placement.c], 0xee) << "a direct C is not staged";
  EXPECT_EQ(std::memcmp(staging.data() + m0.placement.b, m0.problem->b.data, p.b.bytes()), 0);
  EXPECT_EQ(staging[m1.placement.a], 0x22);

  for (const ProblemLayout& m : layout.problems)
    std::memset(staging.data() + layout.input_bytes + m.placement.d, 0x40, m.problem->d_bytes());
  std::memset(base + 2048, 0, p.d_bytes());
  CopyOutResults(layout, staging.data(), {absl::OkStatus(), absl::OkStatus()});
  EXPECT_EQ(static_cast<unsigned char>(base[2048]), 0) << "a direct D is left to the lane";
  EXPECT_EQ(*static_cast<const unsigned char*>(m1.problem->d), 0x40);

  // A matrix running past the region's end is not in it.
  EXPECT_FALSE(pinned->Contains(base + (1 << 16) - 8, 16));
  EXPECT_TRUE(pinned->Contains(base + (1 << 16) - 16, 16));
}

TEST_F(BatchLayoutTest, StagedBytesLeaveResidentOperandsOut) {
  GemmProblemRef p = Problem(4, 8, 16, DType::kFp32, true);  // A 256, B 512, C and D 128
  WorkItem item;
  item.problems = {p};
  EXPECT_EQ(StagedBytes(item).in, 256 + 512 + 128);
  EXPECT_EQ(StagedBytes(item).out, 128);
  MakeResident(item.problems[0].b);
  item.problems[0].beta = 0.0;  // C is then not read
  EXPECT_EQ(StagedBytes(item).in, 256);
  EXPECT_EQ(StagedBytes(item).out, 128);
}

// FP8 operands with scales: each problem's scales staged after its operands;
// a strided batch's scales back to back (the kernel reads member i's at
// i * ScaleCount), each operand's block aligned; their bytes staged and
// counted.
TEST_F(BatchLayoutTest, Fp8ScalesAreStagedBackToBackPerOperand) {
  auto fp8 = [this](float scale_a) {
    GemmProblemRef p = Problem(3, 5, 128, DType::kFp8E4m3);
    p.shape.input_dtype_b = DType::kFp8E5m2;
    p.shape.output_dtype = DType::kBf16;
    p.b = MatrixB(p.shape, p.b.data);
    p.d = Buffer(p.d_bytes());
    auto* sa = reinterpret_cast<float*>(Buffer(3 * sizeof(float)));
    for (int i = 0; i < 3; ++i) sa[i] = scale_a + i;
    auto* sb = reinterpret_cast<float*>(Buffer(sizeof(float)));
    sb[0] = 2 * scale_a;
    p.a.scales = Fp8Scales{ScaleMode::kChannel, OperandRole::kA, false, sa, 3};
    p.b.scales = Fp8Scales{ScaleMode::kTensor, OperandRole::kB, false, sb, 1};
    return p;
  };
  Batch batch;
  batch.items = {Item({fp8(1.0f)}), Item({fp8(10.0f)}), Item({fp8(100.0f)})};
  std::vector<const GemmProblemRef*> all;
  for (const auto& item : batch.items) all.push_back(&item->problems[0]);
  batch.launches = {Launch(LaunchGroup::Kind::kStridedBatched, all),
                    Launch(LaunchGroup::Kind::kSingle, {all[0]})};
  const BatchLayout layout = LayOut(batch);
  const Placement& first = layout.problem(0, 0).placement;
  for (size_t i = 1; i < 3; ++i) {
    const Placement& pl = layout.problem(0, i).placement;
    EXPECT_EQ(pl.a_scales, first.a_scales + i * 3 * sizeof(float));
    EXPECT_EQ(pl.b_scales, first.b_scales + i * sizeof(float));
  }
  EXPECT_EQ(first.a_scales % kOperandAlign, 0u);
  EXPECT_EQ(first.b_scales % kOperandAlign, 0u);
  EXPECT_GE(first.b_scales, first.a_scales + 3 * 3 * sizeof(float));
  const Placement& single = layout.problem(1, 0).placement;
  EXPECT_EQ(single.a_scales % kOperandAlign, 0u);
  EXPECT_GE(single.a_scales, first.b_scales + 3 * sizeof(float));
  EXPECT_LE(single.b_scales + sizeof(float), layout.input_bytes);

  std::vector<unsigned char> staging(layout.staging_bytes());
  StageInputs(layout, staging.data());
  for (size_t i = 0; i < 3; ++i) {
    const Placement& pl = layout.problem(0, i).placement;
    float a[3], b;
    std::memcpy(a, staging.data() + pl.a_scales, sizeof a);
    std::memcpy(&b, staging.data() + pl.b_scales, sizeof b);
    const float base = i == 0 ? 1.0f : i == 1 ? 10.0f : 100.0f;
    EXPECT_EQ(a[2], base + 2);
    EXPECT_EQ(b, 2 * base);
  }
  EXPECT_EQ(StagedBytes(*batch.items[0]).in, 3 * 128 + 128 * 5 + 4 * sizeof(float));
}

}  // namespace
}  // namespace gpu
}  // namespace gemm
