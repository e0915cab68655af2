// Tile-configuration choice for the Hopper kernel. Plain C++, tested on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gemm_kernels {

// k128x256, k128x128 and k128x64: both consumer warpgroups share each tile
// ("cooperative"). k128x128PingPong: the consumers take alternate tiles.
// k128x64 doubles the CTAs of problems whose 128x128 tiles leave SMs idle
// (1000^3: 64 tiles on 132 SMs; cuBLAS runs it on 128 CTAs of 128x64).
// k192x192: three cooperative consumer warpgroups of 64 rows (cuBLAS's tile
// on 3072^3 and 4224^3); dense launches only.
enum class Sm90Tile { k128x256, k128x128, k128x128PingPong, k128x64, k192x192 };

struct Sm90TileShape {
  int bm;
  int bn;
};

Sm90TileShape ShapeOf(Sm90Tile tile);

// Output tiles of an m x n problem with `batch` members on `tile`.
int64_t TileCount(Sm90Tile tile, int64_t m, int64_t n, int64_t batch);

// Estimated time of one k-block of `tile` relative to one of the 128x256
// tile (its area times its per-element cost): 1.0 (128x256), 0.52 (128x128),
// 0.45 (128x64) and 1.136 (192x192).
double TileCostScale(Sm90Tile tile);

// Picks the tile with the lowest estimated time: whole waves of tiles over the
// SMs (a partial last wave costs a full one) times the work of one tile,
// weighted by how efficiently each tile shape feeds the tensor cores. 128x64
// only without a k-tail (K a multiple of 64; measured slower with one).
Sm90Tile ChooseSm90Tile(int64_t m, int64_t n, int64_t k, int64_t batch, int num_sms);

// One member of a grouped launch, as the grouped tile choice sees it.
struct GroupedMemberShape {
  int64_t m, n, k;
};

// The tile for a grouped launch (the grouped kernel has 128x256 and 128x128):
// the lower estimated time, in 128x256 k-block iterations, where each tile
// costs its k-loop plus a fixed per-tile cost (epilogue, pipeline restart),
// and the time is bound below by the tile-iterations spread over the SMs,
// the longest tile, and the most tiles one CTA runs (ceil(tiles / SMs))
// times the cheapest tile.
Sm90Tile ChooseSm90GroupedTile(const std::vector<GroupedMemberShape>& members, int num_sms);

// How the tiles of a launch are scheduled (see kernels/scheduler/).
enum class Sm90Schedule { kDataParallel, kStreamK, kSplitK };

// Words per CTA of Sm90LaunchChoice::cta_clock: %globaltimer (ns) at kernel
// entry (0), when the producer has issued its last load (1), when consumer 0
// and consumer 1 have finished (2, 3); the SM id (4); then, for the first
// unit, %globaltimer when the grid dependency wait returned (5), when the
// producer issued the first load (6) and when the first stage landed (7);
// then, for each of consumer 0's first kCtaClockUnits units u (cooperative
// kernels), four words from CtaClockUnitWord(u, 0): the unit's start, its
// k-loop's end, the end of its fixup (a finalizer's partials added, a
// partial stored; where the epilogue is staged, or the unit is grouped, its
// staging buffer free and parameters in shared memory; the k-loop's end
// otherwise) and its end (after the epilogue; for a partial, the store).
constexpr int kCtaClockUnits = 4;
constexpr int kCtaClockWords = 8 + 4 * kCtaClockUnits;
constexpr int CtaClockUnitWord(int unit, int which) { return 8 + 4 * unit + which; }

struct Sm90LaunchChoice {
  Sm90Tile tile = Sm90Tile::k128x256;
  Sm90Schedule schedule = Sm90Schedule::kDataParallel;
  // Tiles left to stream-K (the last ones in tile order). kStreamK: the
  // hybrid split (HybridStreamKTiles); kSplitK: all tiles.
  int64_t sk_tiles = 0;
  // kSplitK: k-ranges per tile. NOTES: split-K with tiles x splits <= SMs is
  // stream-K over exactly tiles x splits CTAs (CTA t * splits + s gets the
  // same balanced k-range as SplitKScheduler's split s of tile t), so the
  // kernel runs it through the stream-K walker and its fixup; the persistent
  // multi-wave SplitKScheduler is not launched.
  int splits = 1;
  // kSplitK: every split stores its partial and a second kernel reduces
  // them over all SMs (scheduler/split_k_reduce.h); otherwise the holder of
  // each tile's last split reduces the others in the GEMM kernel.
  bool separate_reduction = false;
  // kSplitK with separate_reduction: the GEMM grid sums the partials itself
  // once every CTA has stored its own (a grid-wide count in the workspace),
  // instead of a second kernel (GridSummedSplitKLaunch). Like the in-kernel
  // fixup it needs every CTA resident at once (grid <= SMs).
  bool reduce_in_grid = false;
  // kSplitK with 2 splits, reduced in the kernel, 128x128 tile only: the two
  // CTAs of each tile run as one 2-CTA cluster and the finalizer reads the
  // other's partial from its shared memory (distributed shared memory), so
  // the launch needs no workspace and no flags (PairedSplitKLaunch).
  bool cluster_pairs = false;
  // kDataParallel on a cooperative tile (192x192 with K-major A only):
  // 2-CTA clusters take neighbouring n-tiles of one m-tile and multicast A,
  // each CTA loading half of every A k-block (MulticastDataParallelLaunch);
  // grid even.
  bool multicast_a = false;
  // Launch with programmatic dependent launch (the kernel's setup overlaps
  // the previous kernel's tail). false only in experiments
  // (bench/schedule_sweep).
  bool programmatic_launch = true;
  // L2 promotion of the operand tensor maps in bytes (0 none, 128, 256), or
  // -1: the plan's default (MakeSm90Plan: 128 for split-K with stored
  // partials, 256 otherwise). Experiments only (bench/power_probe).
  int l2_promotion = -1;
  // Experiments only (bench/schedule_sweep "clock"): device memory of grid x
  // kCtaClockWords words that each launch fills with per-CTA %globaltimer
  // stamps and the SM id; nullptr otherwise. Needs a build with
  // --define=gemm_kernel_stamps=1 (Sm90KernelStamps); other builds refuse it.
  unsigned long long* cta_clock = nullptr;
  int grid = 1;          // persistent CTAs, <= num_sms (one CTA per SM)
  int64_t workspace_slots = 0;  // partial tiles the schedule may store
};

// The stream-K decision, in one place (the heuristic's candidate and a
// forced MakeSm90Launch both take it): for `tiles` tiles of `k_blocks`
// k-blocks on `sms` SMs, the tiles left to stream-K (the last ones in tile
// order) and the CTAs sharing them; sk_tiles 0 where stream-K does not
// apply. The hybrid split (HybridStreamKTiles: the last partial wave plus
// one full wave, over every SM) where each CTA's range holds at least one
// k-block; with `forced`, where fewer tiles than SMs leave more CTAs than
// iterations, all tiles over as many CTAs as iterations. A tile needs
// kMinStreamKKBlocks k-blocks to be shared at all.
constexpr int64_t kMinStreamKKBlocks = 2;
struct StreamKSplit {
  int64_t sk_tiles = 0;
  int grid = 0;
};
StreamKSplit ChooseStreamKSplit(int64_t tiles, int64_t k_blocks, int sms, bool forced);

// Where the operands' rows start against the L2's 32-byte sectors (see
// ChooseSm90Launch). TMA needs 16-byte aligned rows; a row that starts at
// an odd multiple of 16 bytes (packed 16-bit rows with K % 16 == 8: K =
// 1000, 3000, 5000) is "off the sector grid", and each 128-byte box row of
// it straddles one sector more. RowAlignmentOf (kernels/gemm.cc) derives it
// from each operand's leading dimension, batch stride and base address.
struct Sm90RowAlignment {
  bool a_off_sector = false;  // A's rows start off the 32-byte grid
  bool b_off_sector = false;  // the same for B
  bool a_k_major = true;      // A multicast on 192x192 tiles needs K-major A
};

// Whether an operand's rows start off the 32-byte sector grid: its leading
// dimension, its batch stride (when `batch` > 1) or its base address, in
// bytes.
inline bool Sm90RowsOffSector(int64_t ld_bytes, int64_t batch_stride_bytes, int64_t batch,
                              uintptr_t base) {
  return ld_bytes % 32 != 0 || (batch > 1 && batch_stride_bytes % 32 != 0) || base % 32 != 0;
}

// Picks tile and schedule together. Estimated time, in iterations (one
// k-block of the 128x256 tile at the tensor cores' rate): a k-loop costs the
// larger of its MMA time and its streaming time (where operands come from
// DRAM: per-CTA ring latency plus all operand bytes at DRAM rate);
// data-parallel = that over its waves; stream-K = its data-parallel waves +
// the longest stream-K range (1.25x where A and B exceed what the L2 keeps)
// + a cost per partial stored and per partial reduced + a fixed cost per
// stream-K CTA; split-K = one wave of ceil(k_blocks / splits) + either the
// in-kernel reduction of splits - 1 partials by one CTA per tile, or a
// reduction kernel's launch + all partials written and read back
// (SplitKCostIters). A reducing schedule must beat the best data-parallel
// estimate by kReductionMargin (3%), so shapes that tile well stay
// data-parallel, and K must span at least kMinReductionKBlocks k-blocks.
// allow_reduction false (no workspace) rules out the schedules that need
// one; then paired split-K (cluster_pairs), which needs none, is considered
// when every tile's pair fits at once (tiles <= max_pairs, the device's
// co-resident 2-CTA clusters: Sm90MaxPairClusters; 0 = never). With a
// workspace the in-kernel split-K 2 it pairs measured faster. Constants and
// the measurements they are fitted to: heuristic.cc and
// kernels/DESIGN.md.
//
// `rows`: where A's and B's rows start (Sm90RowAlignment). A box row off
// the sector grid costs two L2 requests, and the k-loop's cost becomes the
// larger of its MMA time and its requests (kRequestIters each,
// heuristic.cc). For such A, data-parallel with A multicast
// (MulticastDataParallelLaunch: each CTA requests half of A's rows) is a
// further candidate where K spans kMinReductionKBlocks k-blocks or the
// tiles fill more than one wave, on at most max_pairs clusters (none when
// max_pairs is 0); it must beat the rest by kReductionMargin.
Sm90LaunchChoice ChooseSm90Launch(int64_t m, int64_t n, int64_t k, int64_t batch, int bk,
                                  int num_sms, bool allow_reduction, int max_pairs = 0,
                                  const Sm90RowAlignment& rows = {});

// The launch for a given tile and schedule kind (tests, forced benchmarks).
// Falls back to data-parallel where the schedule does not apply (one k-block;
// split-K when two splits of every tile exceed the SMs). Forced split-K always
// uses the separate reduction kernel (its best split count by the cost model).
Sm90LaunchChoice MakeSm90Launch(Sm90Tile tile, Sm90Schedule schedule, int64_t m, int64_t n,
                                int64_t k, int64_t batch, int bk, int num_sms);

// Split-K over `tiles` tiles of `tile`, `splits` k-ranges each: one CTA per
// (tile, split), so tiles x splits must not exceed the SMs; reduced by the
// holder of each tile's last split or, with `separate_reduction`, by the
// reduction kernel. The heuristic's own choices and forced benchmarks.
Sm90LaunchChoice SplitKLaunch(Sm90Tile tile, int64_t tiles, int splits, bool separate_reduction);

// A CTA's L2 requests per k-block of `tile` on an m x n problem, in
// iterations (the cost model's k-loop takes the larger of this and
// TileCostScale(tile)): one per box row of A (half of A's rows with
// `multicast_a`) and of B, two per box row of an operand off the sector grid.
double RequestItersPerKBlock(Sm90Tile tile, int64_t m, int64_t n, const Sm90RowAlignment& rows,
                             bool multicast_a);

// Data-parallel on `tile` (any cooperative tile; 192x192 needs K-major A)
// with A multicast: 2-CTA clusters over pairs of n-tiles (a phantom pair
// member past N when the tile columns are odd), at most one cluster per two
// SMs and, when `max_clusters` > 0, at most that many (the device's
// co-resident 2-CTA clusters, Sm90MaxPairClusters: a cluster beyond them
// would start only when another ends, a wave of its own).
Sm90LaunchChoice MulticastDataParallelLaunch(Sm90Tile tile, int64_t m, int64_t n, int64_t batch,
                                             int num_sms, int max_clusters = 0);

// SplitKLaunch with every split's partial stored and summed by the GEMM
// grid itself (reduce_in_grid): tiles x splits must not exceed the SMs.
Sm90LaunchChoice GridSummedSplitKLaunch(Sm90Tile tile, int64_t tiles, int splits);

// Split-K in two over `tiles` 128x128 tiles, each tile's two CTAs one
// cluster reducing through distributed shared memory (cluster_pairs). The
// caller checks that `tiles` pairs fit the device at once.
Sm90LaunchChoice PairedSplitKLaunch(int64_t tiles);

// Estimated split-K time in iterations (see ChooseSm90Launch) of an
// m x n x k problem (`batch` members, `bk` k per k-block) on `tile` with
// `splits` splits and either reduction.
double SplitKCostIters(Sm90Tile tile, int64_t m, int64_t n, int64_t k, int64_t batch, int bk,
                       int splits, bool separate_reduction);

// Workspace layout of a reducing schedule: the flag words (kFlagWordsPerSlot
// per slot, one per consumer warpgroup, padded to 256 bytes; for split-K
// with a separate reduction 256 bytes, of which a grid-summed launch uses
// its two counters at the start), then `slots` fp32 tiles of bm x bn.
// NOTES: launches of different plans may share one workspace in turn (the
// CUDA executor keeps one for all its reducing launches). Every launch
// leaves its flags or counters at zero, and no plan's partials start within
// the first 256 bytes, so the counters at the start are zero for every
// grid-summed launch (a reduction kernel's partials at offset 0 once left
// them garbage and the grid-summed launch after it wrong).
constexpr int kFlagWordsPerSlot = 3;  // one per consumer warpgroup of the 192-row tile
size_t ScheduleFlagBytes(int64_t slots);
size_t ScheduleFlagBytes(const Sm90LaunchChoice& c);
size_t ScheduleWorkspaceBytes(const Sm90LaunchChoice& c);

// Height, in tile-rows, of the L2 swizzle groups of the tile scheduler.
int ChooseGroupM(int64_t tiles_m, int64_t tiles_n);

// Persistent grid: one CTA per SM, never more CTAs than tiles.
int PersistentGridSize(int64_t total_tiles, int num_sms);

// ---- FP8 (kernels/sm90/sm90_fp8_gemm.h): k-blocks of 128 one-byte elements,
// data-parallel launches of the 128x256 kernel (fp32 accumulation in the
// wgmma accumulator) or the 128x128 one (a temporary accumulator promoted
// into fp32 registers every promote_every k-blocks).
struct Sm90Fp8Launch {
  Sm90LaunchChoice launch;  // data-parallel, tile k128x256 or k128x128
  int promote_every = 1;    // k-blocks per promotion (128x128 only)
};

// FP8 wgmma adds its products into the accumulator with fewer mantissa bits
// than fp32 (kernels/DESIGN.md, "FP8"), so the heuristic's launches promote
// every kFp8PromoteEvery k-blocks on the 128x128 kernel, with any scale
// mode. The direct 128x256 kernel runs only where a caller forces its tile
// (TileHint::k128x256): it trades that precision for the wider tile.
constexpr int kFp8PromoteEvery = 1;

// The FP8 launch for a problem. `block_scales`: either operand has block
// scales (128x128, promotion every k-block). `tile`: a forced tile (nullptr:
// the heuristic's).
Sm90Fp8Launch ChooseSm90Fp8Launch(int64_t m, int64_t n, int64_t k, int64_t batch, int num_sms,
                                  bool block_scales, const Sm90Tile* tile = nullptr);

}  // namespace gemm_kernels
