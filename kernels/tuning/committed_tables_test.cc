// The committed tuning tables parse, carry the key fields a server compares,
// and name only members the executor can run for their class's launch kind.
#include <string>

#include "gtest/gtest.h"
#include "kernels/tuning/candidate.h"
#include "kernels/tuning/tuning_table.h"

namespace gemm_kernels {
namespace tuning {
namespace {

void ExpectRunnable(const std::string& path, const std::string& gpu) {
  absl::StatusOr<TuningTable> t = ReadTuningTable(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->key().gpu, gpu);
  EXPECT_FALSE(t->key().driver.empty());
  EXPECT_FALSE(t->key().cublas.empty());
  EXPECT_GT(t->size(), 0u);
  for (const TableEntry& e : t->entries()) {
    const bool grouped_member = e.choice.family == CandidateFamily::kOursGrouped ||
                                e.choice.family == CandidateFamily::kCublasGrouped;
    EXPECT_EQ(grouped_member, e.shape.kind == LaunchKind::kGrouped) << ClassToString(e.shape);
    EXPECT_GT(e.sustained_us, 0) << ClassToString(e.shape);
    // cuBLAS takes FP8 only through cuBLASLt.
    if (::gemm::IsFp8(e.shape.in_dtype)) {
      EXPECT_TRUE(e.choice.family == CandidateFamily::kOurs ||
                  e.choice.family == CandidateFamily::kCublasLt)
          << ClassToString(e.shape);
    }
  }
}

TEST(CommittedTablesTest, H200TableParsesAndNamesRunnableMembers) {
  ExpectRunnable("kernels/tuning/tables/nvidia_h200.table", "NVIDIA H200");
}

TEST(CommittedTablesTest, H100TableParsesAndNamesRunnableMembers) {
  ExpectRunnable("kernels/tuning/tables/nvidia_h100.table", "NVIDIA H100 80GB HBM3");
}

}  // namespace
}  // namespace tuning
}  // namespace gemm_kernels
