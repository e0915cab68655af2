// The launch configuration of a deterministic problem: a pure function of
// the problem's own shape, so that its result bits do not depend on what it
// is launched with (batch partners, launch kind, workspace, load) nor on the
// SM count of the Hopper part that runs it. Plain C++, tested on the CPU.
//
// NOTES: what fixes an output element's bits on the Hopper kernel is the
// order of its k-reduction: the tile's k-blocks in ascending order within
// one CTA, each k-block's wgmma k-steps in order, fp32 accumulation, then
// the epilogue. Split-K and stream-K add partials of k-ranges whose bounds
// depend on the split count or the stream-K partition, which depend on the
// launch's total tiles and grid; so a deterministic plan never splits K.
// Whether the tile shape itself changes bits (the tiles share BK and the
// wgmma k-step) is measured by tests/determinism_gpu_test; the plan fixes
// the tile from the shape alone, so the contract holds either way.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/types.h"
#include "kernels/config/heuristic.h"

namespace gemm_kernels {

// The grid the deterministic tile choice plans for: the SM count of the
// H100 SXM and H200 the cost model was fitted on. The deterministic tile
// must not follow the running device's SM count (the same build gives the
// same bits on every Hopper part); on other SM counts only speed differs.
constexpr int kDeterministicPlanSms = 132;

struct DeterministicSm90Plan {
  // One of the two tiles both the dense and the grouped kernel have
  // (128x256, 128x128 cooperative), so a deterministic problem can share a
  // grouped launch with others of its tile and still run as it runs alone.
  Sm90Tile tile = Sm90Tile::k128x256;
  // Always data-parallel, without A multicast: one CTA reduces each output
  // tile over the whole of K.
  Sm90Schedule schedule = Sm90Schedule::kDataParallel;
  int splits = 1;
};

// The plan of one member of the normalized problem (row-major D; the
// caller swaps m and n for a column-major D, as kernels/problem.h does):
// the grouped tile choice for this member alone on kDeterministicPlanSms
// SMs. Never reads a batch count, SM count or alignment.
DeterministicSm90Plan PlanDeterministicSm90(int64_t m, int64_t n, int64_t k);

// The same for a problem stated with D's layout (d_column_major: the
// kernels run D^T = B^T A^T, so m and n swap).
DeterministicSm90Plan PlanDeterministicSm90ForLayout(int64_t m, int64_t n, int64_t k,
                                                     bool d_column_major);

// The Hopper launch of a deterministic problem of `batch` members, each
// normalized m x n x k, `bk` k per k-block, on `num_sms` SMs: the plan's
// tile, data-parallel (MakeSm90Launch). Only the grid, i.e. which CTA takes
// which tile, follows `batch` and `num_sms`; no tile's k-order does.
Sm90LaunchChoice DeterministicSm90Launch(int64_t m, int64_t n, int64_t k, int64_t batch, int bk,
                                         int num_sms);

// The tile of a grouped launch of deterministic members (normalized
// shapes): their common plan tile, or nullopt where their plans differ
// (then each member runs a launch of its own). An empty list has none.
std::optional<Sm90Tile> DeterministicGroupedTile(const std::vector<GroupedMemberShape>& members);

// The whole deterministic rule of the Hopper kernels for one problem
// with operands of `input` (A's dtype; stated with D's layout): the tile it
// runs (FP8: one tile for every shape), and the order in which each
// output element's k-reduction runs, in words, for the reproducibility
// record a response carries. The lane launches the tile, the batcher groups
// by it, and the record reports it: all three ask here. Allocates nothing
// (the batcher asks once per deterministic problem of every batch).
struct DeterministicRecipe {
  Sm90Tile tile = Sm90Tile::k128x256;
  const char* reduction_order = "";  // static text
};
DeterministicRecipe DeterministicSm90Recipe(::gemm::DType input, int64_t m, int64_t n, int64_t k,
                                            bool d_column_major);

// "128x256", "128x128", ... (the tile's rows x columns of D as the kernel
// sees it: of D^T for a column-major D).
const char* Sm90TileName(Sm90Tile tile);

}  // namespace gemm_kernels
