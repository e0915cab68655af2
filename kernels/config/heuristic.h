// Tile-configuration choice for the Hopper kernel. Plain C++, tested on the CPU.
#pragma once

#include <cstdint>

namespace gemm_kernels {

// k128x256 and k128x128: both consumer warpgroups share each tile
// ("cooperative"). k128x128PingPong: the consumers take alternate tiles.
enum class Sm90Tile { k128x256, k128x128, k128x128PingPong };

struct Sm90TileShape {
  int bm;
  int bn;
};

Sm90TileShape ShapeOf(Sm90Tile tile);

// Picks the tile with the lowest estimated time: whole waves of tiles over the
// SMs (a partial last wave costs a full one) times the work of one tile,
// weighted by how efficiently each tile shape feeds the tensor cores.
Sm90Tile ChooseSm90Tile(int64_t m, int64_t n, int64_t k, int64_t batch, int num_sms);

// Height, in tile-rows, of the L2 swizzle groups of the tile scheduler.
int ChooseGroupM(int64_t tiles_m, int64_t tiles_n);

// Persistent grid: one CTA per SM, never more CTAs than tiles.
int PersistentGridSize(int64_t total_tiles, int num_sms);

}  // namespace gemm_kernels
