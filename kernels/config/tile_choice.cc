// The tile choice of the sm90 heuristic: the cost model of each tile and
// the pick for dense and grouped launches.
#include <algorithm>

#include "kernels/config/heuristic.h"
#include "kernels/config/tile_model.h"

namespace gemm_kernels {

Sm90TileShape ShapeOf(Sm90Tile tile) {
  switch (tile) {
    case Sm90Tile::k128x256:
      return {128, 256};
    case Sm90Tile::k128x128:
    case Sm90Tile::k128x128PingPong:
      return {128, 128};
    case Sm90Tile::k128x64:
      return {128, 64};
    case Sm90Tile::k192x192:
      return {192, 192};
  }
  return {128, 256};
}

TileModel ModelOf(Sm90Tile tile) {
  switch (tile) {
    case Sm90Tile::k128x256:
      return {1.0, 0.59};
    case Sm90Tile::k128x64:
      return {1.8, 0.29};
    case Sm90Tile::k192x192:
      return {1.01, 0.59};
    case Sm90Tile::k128x128:
    case Sm90Tile::k128x128PingPong:
      break;
  }
  return {1.04, 0.39};
}

namespace {

double EstimatedCost(Sm90Tile tile, int64_t m, int64_t n, int64_t batch, int num_sms) {
  const Sm90TileShape s = ShapeOf(tile);
  const int64_t tiles = TileCount(tile, m, n, batch);
  const int64_t waves = (tiles + num_sms - 1) / num_sms;
  return static_cast<double>(waves) * s.bm * s.bn * ModelOf(tile).per_element_cost;
}

// NOTES: L2 requests. Where the operands' rows start off the 32-byte
// sector grid (packed 16-bit rows with K = 1000, 3000, 5000, 2040: pitches
// of 16 mod 32 bytes), the k-loop runs at the pace of its L2 requests, two
// per 128-byte box row. Fitted to 3000^3 (H200, every SM
// busy in the waves that count): per k-block, 128x128 data-parallel 0.704
// us for 512 requests per CTA, 128x256 1.034 us for 768, 128x128 with A
// multicast 0.543 us for 384, 128x256 with A multicast 0.919 us for 640:
// 1.35-1.44 ns per request, 0.0018 iterations of ~0.77 us (3072^3 on
// 128x256: 111.0 us over 144 k-blocks). Rows on the sector grid but off the
// 128-byte lines (K = 4000, 6000) ran at the aligned rate, multicast or not
// (4096 x 4096 x 4000 and 2000 x 2000 x 6000), so they
// count one request per box row like aligned ones. At one request per box
// row every tile's requests stay under its MMA time (128x256: 384 x 0.0018
// = 0.69 iterations against 1.0), so the term changes no such estimate.
// 192x192 ran ~12% above its estimate (3000^3: 112.1 us against 100), 128x64
// with multicast 13%; the choices they lose are not close.
constexpr double kRequestIters = 0.0018;

}  // namespace

double RequestItersPerKBlock(Sm90Tile tile, int64_t m, int64_t n, const Sm90RowAlignment& rows,
                             bool multicast_a) {
  const Sm90TileShape s = ShapeOf(tile);
  const int64_t a_rows = std::min<int64_t>(m, multicast_a ? s.bm / 2 : s.bm);
  const int64_t b_rows = std::min<int64_t>(n, s.bn);
  return kRequestIters *
         double(a_rows * (rows.a_off_sector ? 2 : 1) + b_rows * (rows.b_off_sector ? 2 : 1));
}

int64_t TileCount(Sm90Tile tile, int64_t m, int64_t n, int64_t batch) {
  const Sm90TileShape s = ShapeOf(tile);
  return batch * ((m + s.bm - 1) / s.bm) * ((n + s.bn - 1) / s.bn);
}

double TileCostScale(Sm90Tile tile) {
  const Sm90TileShape s = ShapeOf(tile);
  return s.bm * s.bn * ModelOf(tile).per_element_cost / (128.0 * 256.0);
}

namespace {

// NOTES: per-tile fixed cost of a grouped launch, in iterations (one 128x256
// k-block, ~0.75 us under load). Per-CTA stamps (H200):
// after its k-loop a 128x256 tile took 1.5-1.9 us (epilogue), a 128x128 one
// 1.25; here 2.5 and 1.7 iterations. Without them the choice took 128x128
// for 64 x M~U[32,256] N=K=256 (204 tiles: 72 CTAs run two, one after the
// other), measured 2-5% slower than 128x256 (102 tiles, one each) in three
// runs.
double GroupedTileFixedIters(Sm90Tile tile) { return tile == Sm90Tile::k128x256 ? 2.5 : 1.7; }

}  // namespace

Sm90Tile ChooseSm90GroupedTile(const std::vector<GroupedMemberShape>& members, int num_sms) {
  if (num_sms < 1) num_sms = 1;
  double best_cost = 0;
  Sm90Tile best = Sm90Tile::k128x256;
  for (Sm90Tile tile : {Sm90Tile::k128x256, Sm90Tile::k128x128}) {
    const Sm90TileShape s = ShapeOf(tile);
    const double scale = TileCostScale(tile), fixed = GroupedTileFixedIters(tile);
    double work = 0, longest = 0, cheapest = 0;
    int64_t tiles = 0;
    for (const GroupedMemberShape& p : members) {
      if (p.m < 1 || p.n < 1) continue;
      const double one = double((std::max<int64_t>(p.k, 1) + 63) / 64) * scale + fixed;
      const int64_t t = ((p.m + s.bm - 1) / s.bm) * ((p.n + s.bn - 1) / s.bn);
      work += double(t) * one;
      longest = std::max(longest, one);
      cheapest = tiles == 0 ? one : std::min(cheapest, one);
      tiles += t;
    }
    const double per_cta = double((tiles + num_sms - 1) / num_sms) * cheapest;
    const double cost = std::max({work / num_sms, longest, per_cta});
    if (tile == Sm90Tile::k128x256 || cost < best_cost) {
      best_cost = cost;
      best = tile;
    }
  }
  return best;
}

Sm90Tile ChooseSm90Tile(int64_t m, int64_t n, int64_t k, int64_t batch, int num_sms) {
  if (num_sms < 1) num_sms = 1;
  Sm90Tile best = Sm90Tile::k128x256;
  double best_cost = EstimatedCost(best, m, n, batch, num_sms);
  for (Sm90Tile t : {Sm90Tile::k128x128, Sm90Tile::k128x64, Sm90Tile::k192x192}) {
    // NOTES: the tiles share BK, so K scales every estimate alike, except
    // that 128x64 measured faster only with whole k-blocks (H200): 1024^3
    // 8.8 against 9.6 us on 128x128, but 1000^3 13.1 against 11.3 and
    // 1000 x 1024 x 1000 13.0 against 10.6 (K = 1000: a k-tail,
    // and rows of 2000 bytes, which no 128-byte box row lines up with).
    if (t == Sm90Tile::k128x64 && k % 64 != 0) continue;
    const double c = EstimatedCost(t, m, n, batch, num_sms);
    if (c < best_cost) {
      best = t;
      best_cost = c;
    }
  }
  return best;
}

}  // namespace gemm_kernels
