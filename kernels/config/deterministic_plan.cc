#include "kernels/config/deterministic_plan.h"

#include <string>
#include <vector>

namespace gemm_kernels {

DeterministicSm90Plan PlanDeterministicSm90(int64_t m, int64_t n, int64_t k) {
  DeterministicSm90Plan plan;
  plan.tile = ChooseSm90GroupedTile({GroupedMemberShape{m, n, k}}, kDeterministicPlanSms);
  return plan;
}

DeterministicSm90Plan PlanDeterministicSm90ForLayout(int64_t m, int64_t n, int64_t k,
                                                     bool d_column_major) {
  return d_column_major ? PlanDeterministicSm90(n, m, k) : PlanDeterministicSm90(m, n, k);
}

Sm90LaunchChoice DeterministicSm90Launch(int64_t m, int64_t n, int64_t k, int64_t batch, int bk,
                                         int num_sms) {
  return MakeSm90Launch(PlanDeterministicSm90(m, n, k).tile, Sm90Schedule::kDataParallel, m, n, k,
                        batch, bk, num_sms);
}

namespace {

// The FP8 kernel's order, naming its promotion period; built once.
const char* Fp8ReductionOrder() {
  static const std::string text =
      "one CTA per output tile: k-blocks of 128 ascending, FP8 wgmma k-steps of 32 in order into "
      "a temporary promoted into fp32 accumulators every " +
      std::to_string(kFp8PromoteEvery) +
      " k-block(s) (block scales: every k-block), scales applied at promotion (block) or in the "
      "epilogue; K never split";
  return text.c_str();
}

}  // namespace

DeterministicRecipe DeterministicSm90Recipe(::gemm::DType input, int64_t m, int64_t n, int64_t k,
                                            bool d_column_major) {
  DeterministicRecipe r;
  switch (input) {
    case ::gemm::DType::kFp8E4m3:
    case ::gemm::DType::kFp8E5m2:
      // The FP8 kernel's promoting tile, whatever the shape (heuristic.h,
      // kFp8PromoteEvery).
      r.tile = Sm90Tile::k128x128;
      r.reduction_order = Fp8ReductionOrder();
      return r;
    case ::gemm::DType::kFp32:  // on tf32 wgmma
      r.reduction_order =
          "one CTA per output tile: k-blocks of 32 ascending, tf32 wgmma k-steps of 8 in order, "
          "fp32 accumulators; K never split";
      break;
    case ::gemm::DType::kBf16:
    case ::gemm::DType::kFp16:
      r.reduction_order =
          "one CTA per output tile: k-blocks of 64 ascending, wgmma k-steps of 16 in order, fp32 "
          "accumulators; K never split";
      break;
  }
  r.tile = PlanDeterministicSm90ForLayout(m, n, k, d_column_major).tile;
  return r;
}

std::optional<Sm90Tile> DeterministicGroupedTile(const std::vector<GroupedMemberShape>& members) {
  std::optional<Sm90Tile> tile;
  for (const GroupedMemberShape& s : members) {
    const Sm90Tile t = PlanDeterministicSm90(s.m, s.n, s.k).tile;
    if (tile && *tile != t) return std::nullopt;
    tile = t;
  }
  return tile;
}

const char* Sm90TileName(Sm90Tile tile) {
  switch (tile) {
    case Sm90Tile::k128x256:
      return "128x256";
    case Sm90Tile::k128x128:
      return "128x128";
    case Sm90Tile::k128x128PingPong:
      return "128x128_pingpong";
    case Sm90Tile::k128x64:
      return "128x64";
    case Sm90Tile::k192x192:
      return "192x192";
  }
  return "?";
}

}  // namespace gemm_kernels
