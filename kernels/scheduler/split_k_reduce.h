// Split-K with a separate reduction kernel: the GEMM grid has one CTA per
// (tile, split), CTA c = t * splits + s computes split s of tile t (t in the
// tile scheduler's order) and stores its fp32 accumulators to workspace slot
// c; no CTA waits on another. A second kernel, launched right behind it on the
// same stream (programmatic dependent launch), sums the `splits` slots of each
// tile and runs the epilogue, spread over all SMs.
//
// NOTES: the in-kernel fixup made one CTA per tile read splits - 1 partials in
// series (128 x 128 x 65536: 20 x 64 KB through one SM while the other SMs
// idled). Here every SM reads a slice of every tile's partials. The order is
// fixed: split group g (of `groups`) sums splits [g*S/G, (g+1)*S/G) in
// ascending order, then the group sums are added in ascending g, so results
// are bit-identical across runs. Since no CTA waits on another, the GEMM grid
// needs no co-residency and may exceed the SMs.
//
// Partials are stored in the wgmma fragment order (see gemm_kernel.cuh):
// within a slot, consumer half h (64 rows), float4 i of thread t sits at
// float4 index (h * kBN / 8 + i) * 128 + t and holds rows r, r + 8 and
// columns c, c + 1 of the tile with r = 64 h + 16 (t / 32) + (t % 32) / 4 and
// c = 8 i + 2 (t % 4).
//
// __host__ __device__ so the CPU tests check the coverage.
#pragma once

#include <cstdint>

#include "kernels/scheduler/tile_scheduler.h"

namespace gemm_kernels {

// Where one float4 of a partial tile lands in the tile (fragment order).
struct FragmentQuad {
  int row;  // tile-relative; the float4 holds (row, col), (row, col + 1),
  int col;  // (row + 8, col), (row + 8, col + 1)
};

GEMM_HOST_DEVICE FragmentQuad FragmentQuadAt(int f, int bn) {
  const int per_half = 16 * bn;  // 64 x bn floats = 16 bn float4
  const int h = f / per_half;
  const int rem = f - h * per_half;
  const int i = rem / 128;
  const int t = rem % 128;
  FragmentQuad q;
  q.row = 64 * h + 16 * (t / 32) + (t % 32) / 4;
  q.col = 8 * i + 2 * (t % 4);
  return q;
}

// Threads per reduction block; each handles one float4 of one tile for one
// split group.
constexpr int kSplitKReduceThreads = 256;

// The reduction launch for `tiles` tiles of bm x bn, `splits` slots each.
struct SplitKReducePlan {
  int groups = 1;           // split groups per float4 (a power of two <= 32, <= splits)
  int quads_per_block = 0;  // float4s of output per block: kSplitKReduceThreads / groups
  int64_t quads = 0;        // float4s of output in all: tiles * bm * bn / 4
  int64_t blocks = 0;
};

// NOTES: few tiles with many splits (128 x 128 x 65536: one tile, ~100
// splits) give only 4096 float4s: one thread each would be 16 blocks reading
// ~100 values in series. Split groups multiply the threads per float4 until
// there are at least two blocks per SM (or 32 groups); each thread then
// reads about splits / groups values.
GEMM_HOST_DEVICE SplitKReducePlan PlanSplitKReduce(int64_t tiles, int bm, int bn, int splits,
                                                   int num_sms) {
  SplitKReducePlan p;
  p.quads = tiles * bm * bn / 4;
  const int64_t want_blocks = 2 * int64_t(num_sms < 1 ? 1 : num_sms);
  int g = 1;
  while (2 * g <= splits && 2 * g <= 32 &&
         (p.quads + kSplitKReduceThreads / g - 1) / (kSplitKReduceThreads / g) < want_blocks) {
    g *= 2;
  }
  p.groups = g;
  p.quads_per_block = kSplitKReduceThreads / g;
  p.blocks = (p.quads + p.quads_per_block - 1) / p.quads_per_block;
  return p;
}

// Splits [SplitGroupBegin(g), SplitGroupBegin(g + 1)) form group g.
GEMM_HOST_DEVICE int SplitGroupBegin(int g, int groups, int splits) {
  return static_cast<int>(int64_t(g) * splits / groups);
}

}  // namespace gemm_kernels
