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
// A server uses InitializeDeferred instead: the descriptors go to a host
// buffer it copies in stream order with its own operands, so nothing blocks.
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

// The member that computes the same product as `g`, a single (batch 1)
// GEMM; its batch_count and allow_tf32 are dropped (allow_tf32 is the
// group's).
GroupedProblemArguments GroupedMemberOf(const GemmArguments& g);

struct GroupedGemmArguments {
  std::vector<GroupedProblemArguments> problems;
  bool allow_tf32 = false;
  // Every member on its deterministic plan (config/deterministic_plan.h):
  // the grouped kernel runs only where all members' plans share one tile
  // (DeterministicGroupedTile), on that tile; otherwise each member runs the
  // launch it runs alone (DeterministicHintsFor, no workspace). The tile
  // hint is ignored.
  bool deterministic = false;
};

class GroupedGemm {
 public:
  // Every problem through Gemm::CanImplement; InvalidArgument names the
  // problem index and field. An empty list is invalid.
  static absl::Status CanImplement(const GroupedGemmArguments& args);

  // Device bytes of workspace Initialize() needs (problem descriptors and
  // tensor maps, about 300 bytes per problem); 0 when no GPU is usable.
  static size_t WorkspaceSize(const GroupedGemmArguments& args);
  // The same from the problem count alone (all the size depends on), for a
  // caller that places the workspace before its operands have addresses.
  static size_t WorkspaceSize(size_t num_problems);

  // Picks the kernel for the current device; for the grouped kernel, builds
  // every problem's tensor maps and copies them to `workspace` with a
  // blocking cudaMemcpy. The workspace must stay untouched while this object
  // runs. `hint` forces the tile (kAuto: chosen from the whole group); the
  // grouped kernel has the 128x256 and 128x128 cooperative tiles, so
  // ping-pong and 128x64 run as a loop of single launches on that tile.
  absl::Status Initialize(const GroupedGemmArguments& args, void* workspace,
                          TileHint hint = TileHint::kAuto);

  // Initialize without the blocking copy: the workspace's contents are
  // written to `host_image` (WorkspaceSize(args) bytes of host memory; pinned
  // for an asynchronous copy), and the caller must copy host_image to
  // `workspace` on the launch's stream before Run, with a copy (never a
  // kernel: the grouped kernel reads them before it waits on the previous
  // kernel in the stream; see MakeSm90GroupedPlanDeferred). Nothing is copied or
  // synchronized here. When the group falls back to a loop of Gemms the
  // workspace is unused and host_image is left as it was.
  absl::Status InitializeDeferred(const GroupedGemmArguments& args, void* workspace,
                                  void* host_image, TileHint hint = TileHint::kAuto);

  // Whether Run launches the grouped kernel (which reads the workspace), not
  // a loop of Gemms.
  bool uses_workspace() const;

  // Enqueues the group on `stream` (a cudaStream_t).
  absl::Status Run(void* stream) const;

  const std::string& kernel_name() const { return kernel_name_; }
  KernelKind kernel_kind() const { return kind_; }

  GroupedGemm();
  ~GroupedGemm();
  GroupedGemm(const GroupedGemm&) = delete;
  GroupedGemm& operator=(const GroupedGemm&) = delete;

 private:
  // Initialize (host_image null: blocking copy) and InitializeDeferred.
  absl::Status Init(const GroupedGemmArguments& args, void* workspace, void* host_image,
                    TileHint hint);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  KernelKind kind_ = KernelKind::kNone;
  std::string kernel_name_;
};

}  // namespace gemm_kernels
