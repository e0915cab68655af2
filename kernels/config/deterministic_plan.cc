#include "kernels/config/deterministic_plan.h"

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
