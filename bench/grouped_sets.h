// Rotating input sets of one grouped bf16 problem list, shared by the
// benchmarks that time grouped launches (schedule_bench, power_probe,
// schedule_sweep's "clock grouped"), so that all of them run the same
// members on the same data. Per set and member: A (rows_i x k, row-major),
// B (k x n, column-major) and our D (rows_i x n, row-major); optionally a
// reference D for cuBLAS and the set's plan workspaces. The object owns
// every buffer, so an early return of its user frees them too.
#ifndef GEMM_BENCH_GROUPED_SETS_H_
#define GEMM_BENCH_GROUPED_SETS_H_

#include <cstddef>
#include <vector>

#include "bench/cublas_baseline.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"

namespace gemm_bench {

// Device bytes of one set's A, B and our D: what a rotating-set rule weighs
// against the L2.
size_t GroupedSetBytes(const std::vector<int>& rows, int n, int k);

struct GroupedSetsOptions {
  // Input sets to rotate over. Each benchmark keeps its own rule (e.g.
  // RotatingSets(GroupedSetBytes(...), l2)), so the count is given here.
  int sets = 1;
  // A second D per member for cuBLAS to write, to compare ours against.
  bool reference_outputs = true;
  // Our D filled with 0xFF (a bf16 NaN) once allocated: a member that no
  // launch wrote then fails the comparison instead of passing on stale data.
  bool poison_outputs = false;
  // Plan workspaces per set (one per plan that launches on the set), each of
  // workspace_bytes, carved from one allocation per set. Each starts 256-byte
  // aligned: the grouped kernel reads tensor maps from its workspace.
  int workspaces_per_set = 0;
  size_t workspace_bytes = 0;
};

class GroupedSets {
 public:
  struct Member {
    void* a = nullptr;
    void* b = nullptr;
    void* d = nullptr;
    void* dref = nullptr;  // nullptr without reference_outputs
  };

  // `rows`: each member's M (e.g. GroupedRows). Allocates nothing.
  GroupedSets(std::vector<int> rows, int n, int k, const GroupedSetsOptions& options);
  ~GroupedSets();
  GroupedSets(const GroupedSets&) = delete;
  GroupedSets& operator=(const GroupedSets&) = delete;

  // Set by set: each member's random A (seed 1000 * set + 2 * member) and B
  // (that seed + 1), its D and reference D, then the set's workspaces. False
  // (after printing the CUDA error) on failure.
  bool Allocate();

  int sets() const { return options_.sets; }
  const std::vector<int>& rows() const { return rows_; }
  int n() const { return n_; }
  int k() const { return k_; }
  // Floating-point operations of one launch of the whole list.
  double Flops() const;

  const Member& member(int set, size_t i) const { return members_[set][i]; }
  // Workspace of plan `plan` on set `set`; nullptr (never a pointer past
  // the allocation) unless plan < workspaces_per_set and Allocate() has
  // succeeded.
  void* workspace(int set, int plan) const;

  // Member i of set `set` as a single GEMM writing our D (for plans built
  // from normalized problems).
  gemm_kernels::GemmArguments MemberArguments(int set, size_t i) const;
  // The list of set `set` for GroupedGemm, writing our D.
  gemm_kernels::GroupedGemmArguments Arguments(int set) const;
  // The same list for CublasGrouped, writing the reference D.
  std::vector<GroupedMember> CublasMembers(int set) const;

 private:
  bool AllocateMembers(int set);
  bool AllocateWorkspaces(int set);

  std::vector<int> rows_;
  int n_;
  int k_;
  GroupedSetsOptions options_;
  size_t workspace_stride_;
  std::vector<std::vector<Member>> members_;  // [set][member]
  std::vector<void*> workspaces_;             // [set]
};

}  // namespace gemm_bench

#endif  // GEMM_BENCH_GROUPED_SETS_H_
