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
  int problem;  // cursor: tiles only move forward, so searches start here

  GEMM_HOST_DEVICE GroupedTileScheduler(const GroupedProblemShape* problems_, int num_problems_,
                                        int64_t total_tiles_, int grid, int cta)
      : problems(problems_),
        num_problems(num_problems_),
        total_tiles(total_tiles_),
        current(cta),
        stride(grid),
        problem(0) {}

  // The last problem at or after the cursor whose first tile is <= tile t.
  // NOTES: one probe while t stays in the cursor's problem, else a binary
  // search over the problems left. The linear walk this replaces made one
  // dependent global load (~0.15-0.3 us from L2) per problem skipped, and a
  // CTA skips about grid / (tiles per problem) problems per tile: ~40 for 64
  // problems of ~3 tiles on 132 SMs, about half of such a launch's time.
  GEMM_HOST_DEVICE int ProblemOf(int64_t t) const {
    if (problem + 1 >= num_problems || problems[problem + 1].tile_start > t) return problem;
    int lo = problem + 1, hi = num_problems - 1;  // the answer lies in [lo, hi]
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (problems[mid].tile_start <= t) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }

  GEMM_HOST_DEVICE bool Next(WorkUnit* w) {
    if (current >= total_tiles) return false;
    problem = ProblemOf(current);
    const GroupedProblemShape& p = problems[problem];
    TileCoord t = SwizzledTile(current - p.tile_start, p.tiles_m, p.tiles_n, p.group_m);
    t.batch = problem;
    *w = FullTileUnit(t, p.k_blocks);
    current += stride;
    return true;
  }
};

}  // namespace gemm_kernels
