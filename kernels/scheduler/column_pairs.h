// A multicast (2-CTA clusters that share every A k-block): the cluster walks
// a tile grid with half the tile columns, pair column j standing for n-tiles
// 2j and 2j + 1, and cluster rank r takes n-tile 2j + r. Both CTAs of a
// cluster thus hold the same m-tile and k-range at every step, which the
// shared A needs. With an odd tile count the last pair's rank 1 gets a
// phantom n-tile past N: it still loads and multicasts its half of A, its
// own B is zero-filled by TMA and every store of it lies past N.
//
// __host__ __device__ so the CPU tests walk the pairs.
#pragma once

#include "kernels/scheduler/tile_scheduler.h"

namespace gemm_kernels {

// Pair columns of a grid `tiles_n` tiles wide.
GEMM_HOST_DEVICE int PairColumns(int tiles_n) { return (tiles_n + 1) / 2; }

// The tile cluster rank `rank` (0 or 1) computes for tile `pair` of the
// halved grid.
GEMM_HOST_DEVICE TileCoord PairMember(TileCoord pair, int rank) {
  pair.n_block = 2 * pair.n_block + rank;
  return pair;
}

}  // namespace gemm_kernels
