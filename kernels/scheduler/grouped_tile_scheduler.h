// Grouped tile scheduler: the tiles of many problems of different shapes,
// numbered problem after problem (tile_start is the running sum), walked by
// one persistent data-parallel schedule (CTA c takes tiles c, c + grid, ...).
// Within a problem, tiles go in the swizzled order of PersistentTileScheduler.
// WorkUnit::tile.batch is the problem index. The problem shapes live in device
// memory in the kernel, in host memory in the CPU tests.
#pragma once

#include <cstdint>

#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/scheduler/work_unit.h"

namespace gemm_kernels {

struct GroupedProblemShape {
  int tiles_m;
  int tiles_n;
  int k_blocks;
  int group_m;
  int64_t tile_start;  // tiles of all earlier problems
};

struct GroupedTileScheduler {
  const GroupedProblemShape* problems;
  int num_problems;
  int64_t total_tiles;
  int64_t current;
  int64_t stride;
  int problem;  // cursor: tiles only move forward, so the search is amortized

  GEMM_HOST_DEVICE GroupedTileScheduler(const GroupedProblemShape* problems_, int num_problems_,
                                        int64_t total_tiles_, int grid, int cta)
      : problems(problems_),
        num_problems(num_problems_),
        total_tiles(total_tiles_),
        current(cta),
        stride(grid),
        problem(0) {}

  GEMM_HOST_DEVICE bool Next(WorkUnit* w) {
    if (current >= total_tiles) return false;
    while (problem + 1 < num_problems && problems[problem + 1].tile_start <= current) ++problem;
    const GroupedProblemShape& p = problems[problem];
    TileCoord t = SwizzledTile(current - p.tile_start, p.tiles_m, p.tiles_n, p.group_m);
    t.batch = problem;
    *w = FullTileUnit(t, p.k_blocks);
    current += stride;
    return true;
  }
};

}  // namespace gemm_kernels
