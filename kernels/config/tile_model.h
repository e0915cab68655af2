// The per-tile cost model shared by the tile choice (tile_choice.cc) and
// the schedule choice (heuristic.cc). Private to kernels/config.
#ifndef GEMM_KERNELS_CONFIG_TILE_MODEL_H_
#define GEMM_KERNELS_CONFIG_TILE_MODEL_H_

#include "kernels/config/heuristic.h"

namespace gemm_kernels {

// What the cost model knows of a tile.
//
// per_element_cost: relative cost of one output element. NOTES: a 128x128
// tile loads as many A bytes per MMA as B bytes, a 128x256 one half as many
// A bytes, and its
// m64n256 wgmma keeps the tensor cores busier per instruction. Fitted to the
// H200 (kernels/DESIGN.md): 1.04 picks the faster data-parallel tile
// on every measured shape (8192^3 and 4096^3 wide; 4224^3 and 3072^3, where
// the square tile's waves quantize better, square). A 128x64 tile loads 1.5x
// the operand bytes per MMA of a 128x128 one, and its k-block is bound by
// the operand feed, not the MMAs: 1024 x 1024 x K on 128 CTAs of 128x64
// against 64 of 128x128 (H200) ran 0.27 against 0.30 us per
// k-block, so 1.8 per element. It then wins only where all its tiles fit one
// wave, i.e. where 128x128 tiles would leave over half the SMs idle (1024^3:
// 8.8 against 9.6 us), and loses to split-K 2 where K is long (1024 x 1024 x
// 4096: split-K 18.8 us, 128x64 22.2, 128x128 24.3). The 192x192 tile
// (three consumers) has 1.125x the area of 128x256 at 1.01 per element:
// 3072^3 data-parallel ran 86.6 us in two waves of it against 114.3 in
// three of 128x256 (H200; 0.79 us per iteration).
//
// latency_iters_per_kblock: the least a k-block costs when operands stream
// from DRAM, the ring's loaded latency over its stages (see the streaming
// NOTES below): 0.59 iterations for the 4-stage 128x256 ring, 0.39 for the
// 6-stage 128x128 one (both fitted), 0.29 for the 8-stage 128x64 one (not
// measured; the same latency over 8).
struct TileModel {
  double per_element_cost;
  double latency_iters_per_kblock;
};

TileModel ModelOf(Sm90Tile tile);

}  // namespace gemm_kernels

#endif  // GEMM_KERNELS_CONFIG_TILE_MODEL_H_
