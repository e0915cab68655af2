#include "kernels/config/heuristic.h"

#include <algorithm>

namespace gemm_kernels {

Sm90TileShape ShapeOf(Sm90Tile tile) {
  switch (tile) {
    case Sm90Tile::k128x256:
      return {128, 256};
    case Sm90Tile::k128x128:
    case Sm90Tile::k128x128PingPong:
      return {128, 128};
  }
  return {128, 256};
}

namespace {

// Relative cost of one output element. NOTES: a 128x128 tile loads as many A
// bytes per MMA as B bytes, a 128x256 one half as many A bytes, and its
// m64n256 wgmma keeps the tensor cores busier per instruction; measured
// throughput per tile on H100-class parts differs by roughly 10-15%.
double PerElementCost(Sm90Tile tile) { return tile == Sm90Tile::k128x256 ? 1.0 : 1.12; }

double EstimatedCost(Sm90Tile tile, int64_t m, int64_t n, int64_t batch, int num_sms) {
  const Sm90TileShape s = ShapeOf(tile);
  const int64_t tiles = batch * ((m + s.bm - 1) / s.bm) * ((n + s.bn - 1) / s.bn);
  const int64_t waves = (tiles + num_sms - 1) / num_sms;
  return static_cast<double>(waves) * s.bm * s.bn * PerElementCost(tile);
}

}  // namespace

Sm90Tile ChooseSm90Tile(int64_t m, int64_t n, int64_t k, int64_t batch, int num_sms) {
  (void)k;  // both tiles share BK; K only scales both estimates alike
  if (num_sms < 1) num_sms = 1;
  const double wide = EstimatedCost(Sm90Tile::k128x256, m, n, batch, num_sms);
  const double narrow = EstimatedCost(Sm90Tile::k128x128, m, n, batch, num_sms);
  return narrow < wide ? Sm90Tile::k128x128 : Sm90Tile::k128x256;
}

int ChooseGroupM(int64_t tiles_m, int64_t tiles_n) {
  // Groups of 8 tile-rows: 8 A panels and the B panels they meet stay in L2
  // for the large square problems; smaller grids fit in L2 anyway.
  (void)tiles_n;
  return static_cast<int>(std::min<int64_t>(8, std::max<int64_t>(1, tiles_m)));
}

int PersistentGridSize(int64_t total_tiles, int num_sms) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(total_tiles, num_sms)));
}

}  // namespace gemm_kernels
