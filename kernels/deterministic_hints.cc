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
  DeterministicHints h;  // data-parallel
  h.sm90_tile = DeterministicSm90Recipe(args.a.dtype, args.m, args.n,
                                        args.k, args.d.layout == Layout::kColMajor)
                    .tile;
  h.tile = TileHintOf(h.sm90_tile);
  return h;
}

}  // namespace gemm_kernels
