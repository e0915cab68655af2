// Split-K tile scheduler: every tile's k-blocks are cut into `splits` ranges
// of equal length (to within one); unit u = tile * splits + s is walked
// persistently (CTA c takes u = c, c + grid, ...). Splits 0 .. splits-2 store
// partials to their own slot; the last split finalizes, reducing the others in
// split order (fixed: deterministic). A finalizer only waits on units with
// lower numbers, and each CTA walks its units in increasing order, so the
// lowest unfinished unit can always proceed: no deadlock while all CTAs are
// resident. For small M x N with large K, where tiles are fewer than SMs.
#pragma once

#include <cstdint>

#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/scheduler/work_unit.h"

namespace gemm_kernels {

struct SplitKScheduler {
  PersistentTileScheduler order;  // tile numbering (swizzle) only
  int k_blocks;
  int splits;  // 1 <= splits <= k_blocks
  int64_t total_units;
  int64_t current;
  int64_t stride;

  GEMM_HOST_DEVICE SplitKScheduler(int tiles_m, int tiles_n, int batch, int group_m,
                                   int k_blocks_, int splits_, int grid, int cta)
      : order(tiles_m, tiles_n, batch, group_m, 0, 1),
        k_blocks(k_blocks_),
        splits(splits_),
        total_units(order.total_tiles * splits_),
        current(cta),
        stride(grid) {}

  GEMM_HOST_DEVICE bool Next(WorkUnit* w) {
    if (current >= total_units) return false;
    const int64_t tile = current / splits;
    const int s = static_cast<int>(current - tile * splits);
    current += stride;
    w->tile = order.TileAt(tile);
    w->k_begin = static_cast<int>(int64_t(s) * k_blocks / splits);
    w->k_end = static_cast<int>(int64_t(s + 1) * k_blocks / splits);
    w->slot = -1;
    w->first_peer = 0;
    w->num_peers = 0;
    if (splits == 1) {
      w->role = UnitRole::kFull;
    } else if (s < splits - 1) {
      w->role = UnitRole::kPartial;
      w->slot = static_cast<int>(tile * (splits - 1) + s);
    } else {
      w->role = UnitRole::kFinalize;
      w->first_peer = static_cast<int>(tile * (splits - 1));
      w->num_peers = splits - 1;
    }
    return true;
  }

  GEMM_HOST_DEVICE int64_t NumSlots() const { return order.total_tiles * (splits - 1); }
};

}  // namespace gemm_kernels
