#include "kernels/deterministic_hints.h"

namespace gemm_kernels {

TileHint TileHintOf(Sm90Tile tile) {
  switch (tile) {
    case Sm90Tile::k128x256:
      return TileHint::k128x256;
    case Sm90Tile::k128x128:
      return TileHint::k128x128;
    case Sm90Tile::k128x128PingPong:
      return TileHint::k128x128PingPong;
    case Sm90Tile::k128x64:
      return TileHint::k128x64;
    case Sm90Tile::k192x192:
      return TileHint::k192x192;
  }
  return TileHint::k128x256;
}

DeterministicHints DeterministicHintsFor(const GemmArguments& args) {
  DeterministicHints h;
  h.schedule = ScheduleHint::kDataParallel;
  if (::gemm::IsFp8(args.a.dtype)) {
    // The FP8 kernel's one tile for every scale mode: 128x128, promoting
    // into fp32 at a fixed k-block period.
    h.sm90_tile = Sm90Tile::k128x128;
    h.tile = TileHint::k128x128;
    return h;
  }
  h.sm90_tile =
      PlanDeterministicSm90ForLayout(args.m, args.n, args.k, args.d.layout == Layout::kColMajor)
          .tile;
  h.tile = TileHintOf(h.sm90_tile);
  h.schedule = ScheduleHint::kDataParallel;
  return h;
}

}  // namespace gemm_kernels
