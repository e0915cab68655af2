// The committed tuning tables parse, carry the key fields a server compares,
// and name only members the executor can run for their class's launch kind.
#include <string>

#include "gtest/gtest.h"
#include "kernels/tuning/candidate.h"
#include "kernels/tuning/tuning_table.h"

namespace gemm_kernels {
namespace tuning {
namespace {

TEST(CommittedTablesTest, H200TableParsesAndNamesRunnableMembers) {
  absl::StatusOr<TuningTable> t = ReadTuningTable("kernels/tuning/tables/nvidia_h200.table");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->key().gpu, "NVIDIA H200");
  EXPECT_FALSE(t->key().driver.empty());
  EXPECT_FALSE(t->key().cublas.empty());
  EXPECT_GT(t->size(), 0u);
  for (const TableEntry& e : t->entries()) {
    const bool grouped_member = e.choice.family == CandidateFamily::kOursGrouped ||
                                e.choice.family == CandidateFamily::kCublasGrouped;
    EXPECT_EQ(grouped_member, e.shape.kind == LaunchKind::kGrouped) << ClassToString(e.shape);
    EXPECT_GT(e.sustained_us, 0) << ClassToString(e.shape);
  }
}

}  // namespace
}  // namespace tuning
}  // namespace gemm_kernels
