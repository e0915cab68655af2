#include "bench/grouped_sets.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "bench/bf16_data.h"
#include "bench/cuda_check.h"

namespace gemm_bench {

using gemm_kernels::DataType;
using gemm_kernels::Layout;

size_t GroupedSetBytes(const std::vector<int>& rows, int n, int k) {
  size_t bytes = 0;
  for (const int m : rows) bytes += (size_t(m) * k + size_t(k) * n + size_t(m) * n) * 2;
  return bytes;
}

GroupedSets::GroupedSets(std::vector<int> rows, int n, int k, const GroupedSetsOptions& options)
    : rows_(std::move(rows)),
      n_(n),
      k_(k),
      options_(options),
      workspace_stride_((options.workspace_bytes + 255) / 256 * 256),
      members_(options.sets, std::vector<Member>(rows_.size())),
      workspaces_(options.sets, nullptr) {}

GroupedSets::~GroupedSets() {
  for (const std::vector<Member>& set : members_)
    for (const Member& mb : set)
      for (void* p : {mb.a, mb.b, mb.d, mb.dref}) cudaFree(p);
  for (void* p : workspaces_) cudaFree(p);
}

bool GroupedSets::Allocate() {
  for (int s = 0; s < sets(); ++s) {
    if (!AllocateMembers(s) || !AllocateWorkspaces(s)) return false;
  }
  return true;
}

bool GroupedSets::AllocateMembers(int set) {
  for (size_t i = 0; i < rows_.size(); ++i) {
    Member& mb = members_[set][i];
    const uint64_t seed = uint64_t(1000) * set + 2 * i;
    mb.a = RandomBf16Buffer(int64_t(rows_[i]) * k_, seed);
    mb.b = RandomBf16Buffer(int64_t(k_) * n_, seed + 1);
    if (!mb.a || !mb.b) return false;
    const size_t d_bytes = size_t(rows_[i]) * n_ * 2;
    CHECK_CUDA(cudaMalloc(&mb.d, d_bytes));
    if (options_.reference_outputs) CHECK_CUDA(cudaMalloc(&mb.dref, d_bytes));
    if (options_.poison_outputs) CHECK_CUDA(cudaMemset(mb.d, 0xFF, d_bytes));
  }
  return true;
}

bool GroupedSets::AllocateWorkspaces(int set) {
  if (options_.workspaces_per_set <= 0) return true;
  CHECK_CUDA(cudaMalloc(&workspaces_[set], options_.workspaces_per_set * workspace_stride_));
  return true;
}

double GroupedSets::Flops() const {
  double flops = 0;
  for (const int m : rows_) flops += 2.0 * m * n_ * k_;
  return flops;
}

void* GroupedSets::workspace(int set, int plan) const {
  if (plan < 0 || plan >= options_.workspaces_per_set || workspaces_[set] == nullptr) return nullptr;
  return static_cast<unsigned char*>(workspaces_[set]) + plan * workspace_stride_;
}

gemm_kernels::GemmArguments GroupedSets::MemberArguments(int set, size_t i) const {
  const Member& mb = members_[set][i];
  gemm_kernels::GemmArguments g;
  g.m = rows_[i];
  g.n = n_;
  g.k = k_;
  g.a = {mb.a, DataType::kBf16, Layout::kRowMajor, k_, 0};
  g.b = {mb.b, DataType::kBf16, Layout::kColMajor, k_, 0};
  g.d = {mb.d, DataType::kBf16, Layout::kRowMajor, n_, 0};
  return g;
}

gemm_kernels::GroupedGemmArguments GroupedSets::Arguments(int set) const {
  gemm_kernels::GroupedGemmArguments args;
  for (size_t i = 0; i < rows_.size(); ++i) {
    args.problems.push_back(gemm_kernels::GroupedMemberOf(MemberArguments(set, i)));
  }
  return args;
}

std::vector<GroupedMember> GroupedSets::CublasMembers(int set) const {
  std::vector<GroupedMember> out;
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Member& mb = members_[set][i];
    out.push_back({rows_[i], n_, k_, mb.a, mb.b, mb.dref});
  }
  return out;
}

}  // namespace gemm_bench
