// Stream-K tile scheduler with a data-parallel head ("hybrid").
//
// The first `dp_tiles` tiles (a multiple of the grid) are walked data-parallel
// exactly like PersistentTileScheduler. The remaining `sk_tiles` tiles form one
// line of sk_tiles * k_blocks MAC iterations (k-blocks), cut into contiguous
// ranges of equal length (to within one; min(grid, iterations) ranges, so
// none is empty); CTA c takes range c, which may cross tile boundaries.
//
// A CTA walks its range from the END backwards, piece by piece (each piece
// in ascending k). NOTES: walked forwards, CTA c would start at k = x_c, a
// different k-offset for every CTA, so at any moment the CTAs would read A
// and B panels from all over K and the L2 would thrash (measured: 1920 x 1920
// x 8192 ran at 0.66x data-parallel). Walked backwards, CTA c first does the
// head [0, y_c) of its last tile, then the tail [x_c, k_blocks) of its first
// tile, with x_c - y_c = k_blocks - range length, the same for all CTAs: they
// sweep K together.
//
// Fixup. Only the first piece a CTA walks can end inside a tile (k_end <
// k_blocks), so each CTA produces at most one partial tile: it goes to
// workspace slot c. The CTA holding a tile's last k-block (the highest CTA
// touching the tile) finalizes it: after its own piece it reduces the
// partials of the lower CTAs touching the tile, in ascending order. Those
// pieces are the first stream-K units of their CTAs and wait on nothing, so
// no wait can form a cycle, and the order is fixed: results are bit-identical
// across runs (deterministic by design; an arrival-order mode would save
// nothing here since every partial has its own slot). Requires every CTA of
// the grid to be resident at once (grid <= SMs x occupancy), which the
// persistent launch guarantees when the kernel has the GPU to itself.
//
// __host__ __device__ so the CPU tests walk every schedule it produces.
#pragma once

#include <cstdint>

#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/scheduler/work_unit.h"

namespace gemm_kernels {

// Tiles left to stream-K by the hybrid split for `total_tiles` tiles on `grid`
// CTAs: none when the tiles fill whole waves; otherwise the partial last wave
// plus one full wave (so each CTA gets between one and two tiles of stream-K
// work), or all tiles when there are fewer than two waves.
GEMM_HOST_DEVICE int64_t HybridStreamKTiles(int64_t total_tiles, int grid) {
  const int64_t rem = total_tiles % grid;
  if (rem == 0) return 0;
  return total_tiles < 2 * int64_t(grid) ? total_tiles : rem + grid;
}

struct StreamKScheduler {
  PersistentTileScheduler order;  // tile numbering (swizzle) only
  int k_blocks;
  int grid;
  int sk_grid;  // CTAs taking stream-K ranges: min(grid, sk_iters), so none is empty
  int cta;
  int64_t dp_tiles;
  int64_t sk_iters;
  int64_t next_dp;
  int64_t iter;
  int64_t iter_end;
  bool partials_only;

  // sk_tiles: how many of the tiles (the last ones in tile order) stream-K
  // takes; 0 gives a plain data-parallel schedule. partials_only: every
  // stream-K piece is a kPartial unit into slot `cta`, nothing is finalized
  // here (split-K with a separate reduction kernel, scheduler/split_k_reduce.h).
  GEMM_HOST_DEVICE StreamKScheduler(int tiles_m, int tiles_n, int batch, int group_m,
                                    int k_blocks_, int64_t sk_tiles, int grid_, int cta_,
                                    bool partials_only_ = false)
      : order(tiles_m, tiles_n, batch, group_m, 0, 1),
        k_blocks(k_blocks_),
        grid(grid_),
        cta(cta_),
        dp_tiles(order.total_tiles - sk_tiles),
        sk_iters(sk_tiles * k_blocks_),
        next_dp(cta_),
        partials_only(partials_only_) {
    sk_grid = static_cast<int>(sk_iters < grid ? sk_iters : grid);
    iter = cta < sk_grid ? RangeBegin(cta) : 0;
    iter_end = cta < sk_grid ? RangeBegin(cta + 1) : 0;
  }

  GEMM_HOST_DEVICE int64_t RangeBegin(int c) const { return c * sk_iters / sk_grid; }

  // The CTA whose range holds stream-K iteration i.
  GEMM_HOST_DEVICE int CtaOf(int64_t i) const {
    return static_cast<int>(((i + 1) * sk_grid - 1) / sk_iters);
  }

  GEMM_HOST_DEVICE bool Next(WorkUnit* w) {
    if (next_dp < dp_tiles) {
      *w = FullTileUnit(order.TileAt(next_dp), k_blocks);
      next_dp += grid;
      return true;
    }
    if (iter_end <= iter) return false;
    const int64_t tile = (iter_end - 1) / k_blocks;
    const int64_t tile_begin = tile * k_blocks;
    const int64_t begin = iter > tile_begin ? iter : tile_begin;
    w->tile = order.TileAt(dp_tiles + tile);
    w->k_begin = static_cast<int>(begin - tile_begin);
    w->k_end = static_cast<int>(iter_end - tile_begin);
    w->slot = -1;
    w->first_peer = 0;
    w->num_peers = 0;
    if (w->k_end < k_blocks || partials_only) {
      w->role = UnitRole::kPartial;
      w->slot = cta;
    } else if (w->k_begin == 0) {
      w->role = UnitRole::kFull;
    } else {
      w->role = UnitRole::kFinalize;
      w->first_peer = CtaOf(tile_begin);
      w->num_peers = cta - w->first_peer;
    }
    iter_end = begin;
    return true;
  }

  // Workspace slots a launch may write: one per CTA.
  GEMM_HOST_DEVICE int64_t NumSlots() const { return sk_iters > 0 ? grid : 0; }
};

}  // namespace gemm_kernels
