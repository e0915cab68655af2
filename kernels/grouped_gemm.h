// Grouped GEMM launch API: many independent problems of different shapes,
// D_i = alpha_i * A_i * B_i + beta_i * C_i, in one launch. For the batcher.
//
// Plain C++ like gemm.h (whose DataType, Layout, MatrixDesc, TileHint and
// KernelKind it shares). Usage:
//   GroupedGemmArguments args;  args.problems = {...};
//   RETURN_IF_ERROR(GroupedGemm::CanImplement(args));
//   size_t bytes = GroupedGemm::WorkspaceSize(args);   // device bytes
//   GroupedGemm g;
//   RETURN_IF_ERROR(g.Initialize(args, workspace));    // builds descriptors,
//                                                      // copies them (blocking)
//   RETURN_IF_ERROR(g.Run(stream));                    // one launch
//
// On a Hopper GPU, when every problem has the same input dtype (bf16 or
// fp16), the same output dtype and the same layouts of A, B and D, and every
// operand suits TMA (16-byte aligned bases and leading dimensions), one
// persistent kernel walks the tiles of all problems (kernel_kind()
// kSm90TmaWgmma, kernel_name() "sm90_tma_wgmma_grouped_..."). Otherwise Run
// launches one Gemm per problem on the stream (same results; kernel_name()
// "loop_of_<n>_gemms").
//
// Implementation details follow the public declarations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/gemm.h"

namespace gemm_kernels {

// One member of a group: batch_stride fields of the MatrixDescs are ignored
// (each problem is a single matrix product).
struct GroupedProblemArguments {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  MatrixDesc a;
  MatrixDesc b;
  MatrixDesc c;  // read only when beta != 0
  MatrixDesc d;
  float alpha = 1.0f;
  float beta = 0.0f;
};

struct GroupedGemmArguments {
  std::vector<GroupedProblemArguments> problems;
  bool allow_tf32 = false;
};

class GroupedGemm {
 public:
  // Every problem through Gemm::CanImplement; InvalidArgument names the
  // problem index and field. An empty list is invalid.
  static absl::Status CanImplement(const GroupedGemmArguments& args);

  // Device bytes of workspace Initialize() needs (problem descriptors and
  // tensor maps, about 300 bytes per problem); 0 when no GPU is usable.
  static size_t WorkspaceSize(const GroupedGemmArguments& args);

  // Picks the kernel for the current device; for the grouped kernel, builds
  // every problem's tensor maps and copies them to `workspace` with a
  // blocking cudaMemcpy. The workspace must stay untouched while this object
  // runs. `hint` forces the tile (kAuto: chosen from the whole group).
  absl::Status Initialize(const GroupedGemmArguments& args, void* workspace,
                          TileHint hint = TileHint::kAuto);

  // Enqueues the group on `stream` (a cudaStream_t).
  absl::Status Run(void* stream) const;

  const std::string& kernel_name() const { return kernel_name_; }
  KernelKind kernel_kind() const { return kind_; }

  GroupedGemm();
  ~GroupedGemm();
  GroupedGemm(const GroupedGemm&) = delete;
  GroupedGemm& operator=(const GroupedGemm&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  KernelKind kind_ = KernelKind::kNone;
  std::string kernel_name_;
};

}  // namespace gemm_kernels
