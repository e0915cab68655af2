// The kernel portfolio's members, by name: which implementation a tuning
// table entry chooses for its shape class. Plain C++, tested on the CPU.
//
// Text forms (one token, no spaces, as a table line holds it):
//   ours                                   our launch API, the heuristic's choice
//   ours/tile=128x256/schedule=stream_k    our kernel with a forced tile and schedule
//   ours_grouped/tile=128x128              our grouped kernel with a forced tile
//   cublas_gemm_ex                         cublasGemmEx
//   cublas_strided_batched                 cublasGemmStridedBatchedEx
//   cublas_grouped                         cublasGemmGroupedBatchedEx
//   cublaslt/algo=66/tile=18/stages=21/splitk=1/reduction=0/swizzle=0/custom=0/inner=0/cluster=0
//                                          cublasLtMatmul with that algorithm configuration
// Parsing is strict: fields in this order, every one present.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gemm.h"
#include "kernels/tuning/shape_class.h"

namespace gemm_kernels {
namespace tuning {

enum class CandidateFamily {
  kOurs,
  kOursGrouped,
  kCublasGemmEx,
  kCublasStridedBatched,
  kCublasGrouped,
  kCublasLt,
};

// A cuBLASLt algorithm by its configuration attributes
// (cublasLtMatmulAlgoConfigAttributes_t): cublasLtMatmulAlgoInit with
// algo_id, then each attribute set, rebuilds the same algorithm.
struct LtAlgoConfig {
  int32_t algo_id = 0;
  uint32_t tile = 0;
  uint32_t stages = 0;
  int32_t split_k = 1;
  uint32_t reduction = 0;
  uint32_t swizzle = 0;
  uint32_t custom = 0;
  uint32_t inner_shape = 0;
  uint32_t cluster_shape = 0;
};

struct CandidateId {
  CandidateFamily family = CandidateFamily::kOurs;
  TileHint tile = TileHint::kAuto;              // kOurs, kOursGrouped
  ScheduleHint schedule = ScheduleHint::kAuto;  // kOurs
  LtAlgoConfig lt;                              // kCublasLt

  // Our launch API with the heuristic's choice: the default wherever a
  // table has no entry.
  static CandidateId Heuristic();
  static CandidateId OursGroupedHeuristic();
  // cuBLASLt with no algorithm configuration: its own heuristic's first
  // algorithm for the problem (FP8 under the cublas policy, and FP8's
  // baseline in the tuner); a table names a configured algorithm instead.
  static CandidateId CublasLtHeuristic();

  bool operator==(const CandidateId& o) const;
  bool operator!=(const CandidateId& o) const { return !(*this == o); }
};

// The default of a class: the heuristic (single) or our grouped launch
// with its own tile choice (grouped).
CandidateId DefaultCandidate(LaunchKind kind);

std::string CandidateToString(const CandidateId& c);
// InvalidArgument naming what is wrong with `text`.
absl::StatusOr<CandidateId> ParseCandidate(const std::string& text);

// The bounded label of a candidate's family for responses and metrics:
// "ours", "cublas" or "cublaslt".
const char* FamilyLabel(CandidateFamily family);

// The members a tuner tries for a class, in the stable order ties resolve
// by: the default first, then our forced configurations (each tile with
// each schedule it supports: ping-pong data-parallel only), then cuBLAS
// (strided-batched for batch > 1, GemmEx otherwise; grouped for grouped
// classes). cuBLASLt algorithms depend on the device and the library, so
// the GPU side appends them (kernels/cublas/). Our forced configurations
// apply to the Hopper kernel's 16-bit and tf32 inputs; strict fp32 runs
// only the portable kernel, so there the list holds the default and cuBLAS.
// FP8 classes hold the default alone (cuBLAS takes FP8 only through
// cuBLASLt, appended on the GPU side).
std::vector<CandidateId> BasePortfolio(const ShapeClass& c);

// The TileHint and ScheduleHint names of the text forms ("128x256",
// "pingpong", "stream_k", ...).
const char* TileHintName(TileHint t);
const char* ScheduleHintName(ScheduleHint s);

}  // namespace tuning
}  // namespace gemm_kernels
