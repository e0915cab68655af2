#include "service/queue/work_item.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "service/store/resident_matrix.h"

namespace gemm {
namespace {

// A resident matrix of 4 x 4 fp32 in host memory.
std::shared_ptr<const ResidentMatrix> SmallResident() {
  MatrixRef shape{nullptr, 4, 4, Layout::kRowMajor, DType::kFp32};
  auto made = MakeHostResidentUninitialized(shape);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? std::shared_ptr<const ResidentMatrix>(std::move(*made)) : nullptr;
}

// The operands an item holds are let go of before its answer goes out, so a
// client that releases a matrix on that answer finds it freed, however long
// the RPC layer keeps the item afterwards.
TEST(WorkItemTest, CompleteLetsGoOfOperandsBeforeAnswering) {
  auto item = std::make_shared<WorkItem>();
  std::shared_ptr<const ResidentMatrix> resident = SmallResident();
  ASSERT_NE(resident, nullptr);
  const std::weak_ptr<const ResidentMatrix> watch_resident = resident;
  item->residents.push_back(std::move(resident));
  auto copy = std::make_shared<std::string>(64, 'x');
  const std::weak_ptr<std::string> watch_copy = copy;
  item->host_copies.push_back(std::move(copy));

  int answers = 0;
  bool freed_when_answered = false;
  item->done = [&](const absl::Status& status, const ExecutionReport&) {
    ++answers;
    freed_when_answered = watch_resident.expired() && watch_copy.expired();
    EXPECT_TRUE(status.ok());
  };
  EXPECT_FALSE(item->completed());
  item->Complete(absl::OkStatus());
  EXPECT_TRUE(item->completed());
  EXPECT_EQ(answers, 1);
  EXPECT_TRUE(freed_when_answered);
  // A second completion (queue and executor racing) is ignored.
  item->Complete(absl::CancelledError("late"));
  EXPECT_EQ(answers, 1);
}

}  // namespace
}  // namespace gemm
