// Persistent tile scheduler: CTA `first` of `stride` walks the output tiles
// first, first + stride, ... over all batch members in one launch. Within a
// batch member, tiles go in groups of `group_m` tile-rows, column by column, so
// that CTAs running at the same time share A rows and B columns in L2.
//
// __host__ __device__ so the CPU tests walk every schedule it produces.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GEMM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GEMM_HOST_DEVICE inline
#endif

namespace gemm_kernels {

struct TileCoord {
  int m_block;
  int n_block;
  int batch;
};

// Tile r of one tiles_m x tiles_n grid in the grouped order: bands of group_m
// tile-rows, each walked column by column (batch left 0).
GEMM_HOST_DEVICE TileCoord SwizzledTile(int64_t r64, int tiles_m, int tiles_n, int group_m) {
  const int r = static_cast<int>(r64);
  const int per_group = group_m * tiles_n;
  const int group = r / per_group;
  const int first_m = group * group_m;
  const int rows_here = tiles_m - first_m < group_m ? tiles_m - first_m : group_m;
  const int local = r - group * per_group;
  TileCoord c;
  c.m_block = first_m + local % rows_here;
  c.n_block = local / rows_here;
  c.batch = 0;
  return c;
}

struct PersistentTileScheduler {
  int tiles_m;
  int tiles_n;
  int group_m;
  int64_t tiles_per_batch;
  int64_t total_tiles;
  int64_t current;
  int64_t stride;

  GEMM_HOST_DEVICE PersistentTileScheduler(int tiles_m_, int tiles_n_, int batch, int group_m_,
                                           int64_t first, int64_t stride_)
      : tiles_m(tiles_m_),
        tiles_n(tiles_n_),
        group_m(group_m_ < 1 ? 1 : group_m_),
        tiles_per_batch(int64_t(tiles_m_) * tiles_n_),
        total_tiles(int64_t(tiles_m_) * tiles_n_ * batch),
        current(first),
        stride(stride_) {}

  GEMM_HOST_DEVICE bool is_valid() const { return current < total_tiles; }

  GEMM_HOST_DEVICE TileCoord get() const { return TileAt(current); }

  GEMM_HOST_DEVICE void advance() { current += stride; }

  GEMM_HOST_DEVICE TileCoord TileAt(int64_t t) const {
    const int b = static_cast<int>(t / tiles_per_batch);
    TileCoord c = SwizzledTile(t - b * tiles_per_batch, tiles_m, tiles_n, group_m);
    c.batch = b;
    return c;
  }
};

}  // namespace gemm_kernels
