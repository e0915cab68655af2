#include "kernels/config/heuristic.h"

#include <algorithm>

#include "kernels/scheduler/stream_k_scheduler.h"

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

namespace {

// NOTES: costs in k-block iterations of the tile at hand. Storing a partial
// tile (64 KB or 128 KB of fp32) is about one iteration of loads; reducing one
// means a flag wait plus reading it back from L2, counted as two. Guesses to
// be refined from measurements (bench/KERNEL_NOTES.md).
constexpr double kStoreIters = 1.0;
constexpr double kReduceIters = 2.0;
constexpr double kReductionMargin = 0.95;
// In-kernel split-K: one CTA per tile reduces splits - 1 partials in series.
constexpr int kMaxSplits = 32;
// NOTES: separate reduction kernel (scheduler/split_k_reduce.h). One
// 128x256x64 iteration is ~0.7 us on an H200 SM (4.2 MFLOP at ~6 TFLOP/s per
// SM, 790 TFLOP/s over 132 SMs); in that time DRAM moves ~3.0 MB (4.3 TB/s)
// and the L2 about 2.5 MB of partial traffic (~3.5 TB/s, written once and
// read once). The second launch, behind programmatic dependent launch, is
// counted as ~2 us. Guesses to check against bench/KERNEL_NOTES.md.
constexpr double kDramBytesPerIter = 3.0e6;
constexpr double kPartialBytesPerIter = 2.5e6;
constexpr double kReduceLaunchIters = 3.0;
// Splits of at least this many k-blocks each (pipeline fill per split).
constexpr int64_t kMinKBlocksPerSplit = 4;
// NOTES: below 32 k-blocks (K < 2048 for 16-bit inputs) the fixed costs of a
// unit (pipeline fill, epilogue) dominate and reducing schedules lost on the
// H200 (1000^3: data-parallel 75 TFLOP/s, split-K 70, stream-K 66).
constexpr int64_t kMinReductionKBlocks = 32;
// NOTES: measured on the H200 (bench/results/streamk_v2_*), the stream-K
// part of a hybrid schedule ran 1.18-1.63x longer than its iteration count
// predicts: 3072^3 647 TFLOP/s against data-parallel 561 (won), 4224^3 503
// vs 510 (3 data-parallel waves first: lost), 1920 x 1920 x 8192 489 vs 570
// (lost). The cause is not established. Until it is, stream-K is considered
// only with at most kMaxStreamKDpWaves data-parallel waves before it (where
// quantization costs most) and its part is weighted by kStreamKInefficiency,
// which reproduces all three outcomes.
constexpr double kStreamKInefficiency = 1.25;
constexpr int64_t kMaxStreamKDpWaves = 1;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Candidate {
  Sm90LaunchChoice choice;
  double cost;
};

int64_t TilesOf(Sm90Tile tile, int64_t m, int64_t n, int64_t batch) {
  const Sm90TileShape s = ShapeOf(tile);
  return batch * CeilDiv(m, s.bm) * CeilDiv(n, s.bn);
}

double TileScale(Sm90Tile tile) {
  const Sm90TileShape s = ShapeOf(tile);
  return s.bm * s.bn * PerElementCost(tile) / (128.0 * 256.0);
}

// The k-loop never runs faster than its operands come from DRAM.
double DramFloorIters(double operand_bytes) { return operand_bytes / kDramBytesPerIter; }

Candidate DataParallel(Sm90Tile tile, int64_t tiles, int64_t kb, int sms,
                       double operand_bytes = 0) {
  Candidate c;
  c.choice.tile = tile;
  c.choice.grid = PersistentGridSize(tiles, sms);
  c.cost = std::max(double(CeilDiv(tiles, sms)) * kb * TileScale(tile),
                    DramFloorIters(operand_bytes));
  return c;
}

// `forced`: a stream-K candidate whenever one exists (tests, benchmarks).
Candidate StreamK(Sm90Tile tile, int64_t tiles, int64_t kb, int sms, bool forced = false) {
  Candidate c = DataParallel(tile, tiles, kb, sms);
  const int64_t sk_tiles = HybridStreamKTiles(tiles, sms);
  if (sk_tiles == 0 || kb < 2) return c;
  const int64_t dp_waves = (tiles - sk_tiles) / sms;
  if (dp_waves > kMaxStreamKDpWaves && !forced) return c;
  const int64_t per_cta_min = sk_tiles * kb / sms;
  if (per_cta_min < 1) return c;  // more CTAs than iterations: split-K's ground
  const int64_t per_cta = CeilDiv(sk_tiles * kb, sms);
  const int64_t peers = CeilDiv(kb, per_cta_min);  // CTAs touching one tile, at most
  c.choice.schedule = Sm90Schedule::kStreamK;
  c.choice.sk_tiles = sk_tiles;
  c.choice.grid = sms;
  c.choice.workspace_slots = sms;
  c.cost = (double(dp_waves * kb) +
            kStreamKInefficiency *
                (double(per_cta) + kStoreIters + double(peers - 1) * kReduceIters)) *
           TileScale(tile);
  return c;
}

// Split-K over one wave (tiles x splits <= SMs). `in_kernel` / `separate`:
// which reductions to consider.
Candidate SplitK(Sm90Tile tile, int64_t tiles, int64_t kb, int sms, double operand_bytes,
                 bool in_kernel, bool separate) {
  Candidate best = DataParallel(tile, tiles, kb, sms, operand_bytes);
  for (int s = 2; s <= kb && tiles * s <= sms; ++s) {
    for (const bool sep : {false, true}) {
      if (sep ? !separate : (!in_kernel || s > kMaxSplits)) continue;
      if (sep && s > 2 && CeilDiv(kb, s) < kMinKBlocksPerSplit) continue;
      const double cost = SplitKCostIters(tile, tiles, kb, s, sep, operand_bytes);
      if (best.choice.schedule == Sm90Schedule::kDataParallel || cost < best.cost) {
        best.choice.schedule = Sm90Schedule::kSplitK;
        best.choice.splits = s;
        best.choice.separate_reduction = sep;
        best.choice.sk_tiles = tiles;  // launched as stream-K over tiles x splits CTAs
        best.choice.grid = static_cast<int>(tiles * s);
        best.choice.workspace_slots = tiles * s;  // one per CTA (stream-K slots)
        best.cost = cost;
      }
    }
  }
  return best;
}

// Bytes of A and B (16-bit inputs when bk == 64, fp32 when bk == 32).
double OperandBytes(int64_t m, int64_t n, int64_t k, int64_t batch, int bk) {
  const double elem = 128.0 / (bk < 1 ? 64 : bk);
  return double(batch) * double(m + n) * double(k) * elem;
}

}  // namespace

double SplitKCostIters(Sm90Tile tile, int64_t tiles, int64_t kb, int splits,
                       bool separate_reduction, double operand_bytes) {
  const double scale = TileScale(tile);
  const double loop =
      std::max(double(CeilDiv(kb, splits)) * scale, DramFloorIters(operand_bytes));
  if (!separate_reduction) {
    return loop + (kStoreIters + double(splits - 1) * kReduceIters) * scale;
  }
  const Sm90TileShape s = ShapeOf(tile);
  const double partial_bytes = double(tiles) * splits * s.bm * s.bn * sizeof(float);
  return loop + kReduceLaunchIters + 2.0 * partial_bytes / kPartialBytesPerIter;
}

Sm90LaunchChoice ChooseSm90Launch(int64_t m, int64_t n, int64_t k, int64_t batch, int bk,
                                  int num_sms, bool allow_reduction) {
  if (num_sms < 1) num_sms = 1;
  const int64_t kb = CeilDiv(k, bk);
  const double operand_bytes = OperandBytes(m, n, k, batch, bk);
  const Sm90Tile dp_tile = ChooseSm90Tile(m, n, k, batch, num_sms);
  Candidate best = DataParallel(dp_tile, TilesOf(dp_tile, m, n, batch), kb, num_sms, operand_bytes);
  if (!allow_reduction || kb < kMinReductionKBlocks) return best.choice;
  const double dp_cost = best.cost;
  for (Sm90Tile tile : {Sm90Tile::k128x256, Sm90Tile::k128x128}) {
    const int64_t tiles = TilesOf(tile, m, n, batch);
    for (const Candidate& c : {StreamK(tile, tiles, kb, num_sms),
                               SplitK(tile, tiles, kb, num_sms, operand_bytes, true, true)}) {
      if (c.choice.schedule != Sm90Schedule::kDataParallel &&
          c.cost < kReductionMargin * dp_cost && c.cost < best.cost) {
        best = c;
      }
    }
  }
  return best.choice;
}

Sm90LaunchChoice MakeSm90Launch(Sm90Tile tile, Sm90Schedule schedule, int64_t m, int64_t n,
                                int64_t k, int64_t batch, int bk, int num_sms) {
  if (num_sms < 1) num_sms = 1;
  const int64_t kb = CeilDiv(k, bk);
  const int64_t tiles = TilesOf(tile, m, n, batch);
  if (tile == Sm90Tile::k128x128PingPong) schedule = Sm90Schedule::kDataParallel;
  switch (schedule) {
    case Sm90Schedule::kDataParallel:
      break;
    case Sm90Schedule::kStreamK: {
      Candidate c = StreamK(tile, tiles, kb, num_sms, /*forced=*/true);
      if (c.choice.schedule == Sm90Schedule::kDataParallel && kb >= 2 && tiles < num_sms) {
        // Fewer iterations than CTAs: stream-K over as many CTAs as iterations.
        const int grid = static_cast<int>(std::min<int64_t>(tiles * kb, num_sms));
        c.choice.schedule = Sm90Schedule::kStreamK;
        c.choice.sk_tiles = tiles;
        c.choice.grid = grid;
        c.choice.workspace_slots = grid;
      }
      return c.choice;
    }
    case Sm90Schedule::kSplitK: {
      // Data-parallel where two splits of every tile would not fit one wave.
      return SplitK(tile, tiles, kb, num_sms, OperandBytes(m, n, k, batch, bk), false, true).choice;
    }
  }
  return DataParallel(tile, tiles, kb, num_sms).choice;
}

size_t ScheduleFlagBytes(int64_t slots) {
  return static_cast<size_t>((slots * 2 * 4 + 255) / 256 * 256);
}

size_t ScheduleFlagBytes(const Sm90LaunchChoice& c) {
  if (c.schedule == Sm90Schedule::kDataParallel || c.workspace_slots == 0) return 0;
  if (c.schedule == Sm90Schedule::kSplitK && c.separate_reduction) return 0;
  return ScheduleFlagBytes(c.workspace_slots);
}

size_t ScheduleWorkspaceBytes(const Sm90LaunchChoice& c) {
  if (c.schedule == Sm90Schedule::kDataParallel || c.workspace_slots == 0) return 0;
  const Sm90TileShape s = ShapeOf(c.tile);
  return ScheduleFlagBytes(c) +
         static_cast<size_t>(c.workspace_slots) * s.bm * s.bn * sizeof(float);
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
