// Shape classes for the kernel portfolio's tuning table: the key under which
// one measured choice of implementation is kept. Plain C++, tested on the CPU.
//
// A class holds the element types (A's and B's, which differ only for FP8
// pairings), FP8 operands' scale modes, the operand and output layouts, whether
// every operand's rows start on the L2's 32-byte sectors (rows off the grid
// cost the Hopper kernel two L2 requests per box row; see
// config/heuristic.h), and buckets of M, N, K and the batch size, or for a
// grouped launch the member count and buckets of its largest M, N and K.
// Buckets are geometric: `buckets_per_octave` of them between consecutive
// powers of two, each named by its inclusive upper edge (an integer), so a
// table file reads "m=4096" rather than a bucket index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gemm.h"

namespace gemm_kernels {
namespace tuning {

// The finest and coarsest bucket schemes a table may use.
constexpr int kMinBucketsPerOctave = 1;
constexpr int kMaxBucketsPerOctave = 16;

// Inclusive upper edge of bucket `index` (>= 0): round(2^(index / per_octave)).
int64_t BucketUpperEdge(int index, int buckets_per_octave);

// The bucket of `value` (>= 1): the smallest index whose upper edge is at
// least `value`. Small values where several indices share an edge take the
// smallest, so every bucket a class can hold is canonical.
int BucketOf(int64_t value, int buckets_per_octave);

// The upper edge of `value`'s bucket: the value a class records.
int64_t BucketEdgeOf(int64_t value, int buckets_per_octave);

// Whether `edge` is the upper edge of some bucket (what a table may name).
bool IsBucketEdge(int64_t edge, int buckets_per_octave);

enum class LaunchKind { kSingle, kGrouped };

struct ShapeClass {
  LaunchKind kind = LaunchKind::kSingle;
  DataType in_dtype = DataType::kBf16;    // A's
  DataType in_b_dtype = DataType::kBf16;  // B's: in_dtype but for FP8 pairings
  DataType out_dtype = DataType::kBf16;
  bool allow_tf32 = false;  // fp32 inputs only; false for 16-bit inputs
  // FP8 inputs only (kNone otherwise): how op(A) and op(B) are scaled.
  ScaleMode a_scales = ScaleMode::kNone;
  ScaleMode b_scales = ScaleMode::kNone;
  Layout a_layout = Layout::kRowMajor;
  Layout b_layout = Layout::kRowMajor;
  Layout d_layout = Layout::kRowMajor;
  bool sector_aligned = true;  // every operand's rows start on 32-byte sectors
  // Bucket upper edges (BucketEdgeOf). kGrouped: of the largest member's.
  int64_t m = 1, n = 1, k = 1;
  int64_t batch = 1;  // kSingle: the batch count's bucket; kGrouped: 1
  int64_t group = 1;  // kGrouped: the member count's bucket; kSingle: 1

  bool operator==(const ShapeClass& o) const;
  bool operator!=(const ShapeClass& o) const { return !(*this == o); }
  bool operator<(const ShapeClass& o) const;  // a stable order for files
};

// The class of one (strided-batched) launch. Requires
// Gemm::CanImplement(args) to have succeeded.
ShapeClass ClassOf(const GemmArguments& args, int buckets_per_octave);

// The class of a grouped launch of `members` (each a batch-1 problem; the
// types and layouts are the first member's, which the grouped kernel needs
// every member to share). InvalidArgument for an empty list.
absl::StatusOr<ShapeClass> GroupedClassOf(const std::vector<GemmArguments>& members,
                                          int buckets_per_octave);

// The class as the fields of a table line: "kind=single in=bf16 in_b=bf16
// out=bf16 tf32=0 sa=none sb=none a=row b=col d=row aligned=1 m=4096 n=4096
// k=4096 batch=1 group=1".
std::string ClassToString(const ShapeClass& c);

// The names of the fields of ClassToString, in their order.
const std::vector<std::string>& ClassFieldNames();

// Parses ClassFieldNames' values, in order, for a table using
// `buckets_per_octave`; InvalidArgument names the field at fault (an unknown
// value, a value that is no bucket edge, tf32 with 16-bit inputs, FP8 with
// a non-FP8 partner or without scales, scales on non-FP8 inputs).
absl::StatusOr<ShapeClass> ClassFromFields(const std::vector<std::string>& values,
                                           int buckets_per_octave);

}  // namespace tuning
}  // namespace gemm_kernels
