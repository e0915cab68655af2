// The Gemm hints that launch a problem's deterministic plan
// (config/deterministic_plan.h): Gemm::MakePlan(args, hints.tile,
// hints.schedule), then Initialize without a workspace, runs the plan's tile
// data-parallel, one CTA per output tile over the whole of K, for any
// batch_count and on any Hopper part. A strided-batched launch of identical
// problems with these hints runs every member as it runs alone.
#pragma once

#include "kernels/config/deterministic_plan.h"
#include "kernels/gemm.h"

namespace gemm_kernels {

struct DeterministicHints {
  TileHint tile = TileHint::k128x256;
  ScheduleHint schedule = ScheduleHint::kDataParallel;
  Sm90Tile sm90_tile = Sm90Tile::k128x256;  // the same tile, in the heuristic's terms
};

// For one member of `args` (its m, n, k and D's layout; the batch count is
// not read). FP8 problems: the 128x128 FP8 tile, whatever the shape.
DeterministicHints DeterministicHintsFor(const GemmArguments& args);

// The hint that forces `tile`.
TileHint TileHintOf(Sm90Tile tile);

}  // namespace gemm_kernels
