// One piece of a CTA's schedule: a tile and a contiguous range of its
// k-blocks, with what to do with the accumulators at the end. Shared by the
// stream-K, split-K and grouped schedulers so the kernel runs one loop for all.
#pragma once

#include <cstdint>

#include "kernels/scheduler/tile_scheduler.h"

namespace gemm_kernels {

enum class UnitRole : int {
  kFull = 0,      // all k-blocks of the tile: run the epilogue
  kPartial = 1,   // store fp32 accumulators to workspace slot `slot`, raise its flag
  kFinalize = 2,  // wait for slots [first_peer, first_peer + num_peers) in that
                  // order, add them to the accumulators, run the epilogue
};

struct WorkUnit {
  TileCoord tile;  // tile.batch is the problem index for grouped schedules
  int k_begin;     // first k-block
  int k_end;       // one past the last k-block; always > k_begin
  UnitRole role;
  int slot;        // kPartial: the workspace slot written
  int first_peer;  // kFinalize: first slot reduced
  int num_peers;   // kFinalize: slots reduced (>= 1)
};

GEMM_HOST_DEVICE WorkUnit FullTileUnit(TileCoord t, int k_blocks) {
  WorkUnit w;
  w.tile = t;
  w.k_begin = 0;
  w.k_end = k_blocks;
  w.role = UnitRole::kFull;
  w.slot = -1;
  w.first_peer = 0;
  w.num_peers = 0;
  return w;
}

}  // namespace gemm_kernels
