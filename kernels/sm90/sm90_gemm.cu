// Host side of the Hopper kernel family: support checks, tensor maps, tile
// dispatch, launch (through launch_support.h).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <memory>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/device_info.h"
#include "kernels/sm90/gemm_kernel.cuh"
#include "kernels/sm90/launch_support.h"
#include "kernels/sm90/sm90_gemm.h"
#include "kernels/sm90/split_k_reduce.cuh"
#include "kernels/sm90/tma_params.h"

namespace gemm_kernels {
namespace {

using sm90::KernelParams;
using sm90::LaunchMode;
using sm90::LaunchModeTraits;
using sm90::TraitsOf;
using sm90_launch::EncodeTensorMap;
using sm90_launch::LaunchConfig;
using sm90_launch::LaunchKernel;
using sm90_launch::OptIntoSharedMemory;

// The mode of a dense launch choice (before MakeSm90Plan's checks of it).
LaunchMode ModeOf(const Sm90LaunchChoice& c) {
  if (c.schedule == Sm90Schedule::kDataParallel || c.sk_tiles == 0)
    return c.multicast_a ? LaunchMode::kMulticastA : LaunchMode::kDataParallel;
  if (c.schedule == Sm90Schedule::kStreamK) return LaunchMode::kStreamK;
  if (c.cluster_pairs) return LaunchMode::kSplitKPaired;
  if (c.separate_reduction)
    return c.reduce_in_grid ? LaunchMode::kSplitKGridSum : LaunchMode::kSplitKReduceKernel;
  return LaunchMode::kSplitK;
}

// The operand's TMA geometry: K-major operands are [outer = M or N][inner = K]
// boxes of BK x rows; MN-major ones are [K][MN] boxes of 64 x BK (one 128-byte
// swizzle span wide), several per stage.
bool OperandParams(const NormalizedOperand& op, int64_t mn, int64_t k, int64_t batch,
                   int elem_bytes, int tile_rows, TmaOperandParams* out, std::string* why) {
  const int bk = 128 / elem_bytes;
  if (op.k_major) {
    return MakeTmaOperandParams(k, mn, op.ld, batch, op.batch_stride, elem_bytes, op.ptr, bk,
                                tile_rows, out, why);
  }
  return MakeTmaOperandParams(mn, k, op.ld, batch, op.batch_stride, elem_bytes, op.ptr, 64, bk,
                              out, why);
}

struct KernelInfo {
  const void* func;
  size_t smem_bytes;
  int stages;
  int bk;
  bool staged_store;  // has a staging buffer: D gets a tensor map (MapOutput)
  int threads;
};

template <typename In, int kBN, bool kAK, bool kBK, bool kPP, bool kGrouped>
KernelInfo Info() {
  using Cfg = sm90::KernelConfigFor<In, kBN, kAK, kBK, kPP>;
  constexpr size_t kSmem = sm90::KernelSmemBytes<Cfg, kGrouped>();
  static_assert(kSmem <= 227 * 1024, "shared storage exceeds Hopper shared memory");
  return {reinterpret_cast<const void*>(&sm90::Sm90GemmKernel<In, kBN, kAK, kBK, kPP, kGrouped>),
          kSmem, Cfg::kStages, Cfg::kBK, Cfg::kStagedStore_, Cfg::kThreads};
}

template <typename In, int kBN, bool kPP, bool kGrouped = false>
KernelInfo InfoForLayouts(bool a_k, bool b_k) {
  if constexpr (sizeof(In) == 4) {
    return Info<In, kBN, true, true, kPP, kGrouped>();  // Sm90Supports admits only K-major tf32
  } else {
    if (a_k && b_k) return Info<In, kBN, true, true, kPP, kGrouped>();
    if (a_k) return Info<In, kBN, true, false, kPP, kGrouped>();
    if (b_k) return Info<In, kBN, false, true, kPP, kGrouped>();
    return Info<In, kBN, false, false, kPP, kGrouped>();
  }
}

// Grouped kernels: 16-bit inputs, the 128x256 and 128x128 cooperative
// tiles; none for the others.
template <typename In>
std::optional<KernelInfo> GroupedInfoFor(Sm90Tile tile, bool a_k, bool b_k) {
  switch (tile) {
    case Sm90Tile::k128x256:
      return InfoForLayouts<In, 256, false, true>(a_k, b_k);
    case Sm90Tile::k128x128:
      return InfoForLayouts<In, 128, false, true>(a_k, b_k);
    case Sm90Tile::k128x128PingPong:
    case Sm90Tile::k128x64:
    case Sm90Tile::k192x192:
      break;
  }
  return std::nullopt;
}

template <typename In>
KernelInfo InfoFor(Sm90Tile tile, bool a_k, bool b_k) {
  switch (tile) {
    case Sm90Tile::k128x256:
      return InfoForLayouts<In, 256, false>(a_k, b_k);
    case Sm90Tile::k128x128:
      return InfoForLayouts<In, 128, false>(a_k, b_k);
    case Sm90Tile::k128x64:
      return InfoForLayouts<In, 64, false>(a_k, b_k);
    case Sm90Tile::k192x192:
      return InfoForLayouts<In, 192, false>(a_k, b_k);
    case Sm90Tile::k128x128PingPong:
      break;
  }
  return InfoForLayouts<In, 128, true>(a_k, b_k);
}

class Sm90Plan final : public KernelPlan {
 public:
  std::string Launch(void* stream) const override {
    // Grouped launches read their descriptors from device memory: Initialize
    // copied them there (or its caller did, in stream order), so nothing is
    // enqueued here.
    cudaError_t e = LaunchKernel(info_.func, const_cast<KernelParams*>(&params_), grid_,
                                  info_.threads, info_.smem_bytes, stream,
                                  TraitsOf(params_.mode).cluster, pdl_);
    if (e == cudaSuccess && reduce_func_ != nullptr) {
      e = LaunchKernel(reduce_func_, const_cast<sm90::SplitKReduceParams*>(&reduce_params_),
                        reduce_blocks_, kSplitKReduceThreads, 0, stream, 1, pdl_);
    }
    return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
  }
  const std::string& name() const override { return name_; }

  KernelParams params_;
  KernelInfo info_{};
  int grid_ = 1;
  bool pdl_ = true;  // Sm90LaunchChoice::programmatic_launch
  // Split-K with a separate reduction: the second kernel, else nullptr.
  const void* reduce_func_ = nullptr;
  sm90::SplitKReduceParams reduce_params_{};
  int reduce_blocks_ = 0;
  std::string name_;
};

const char* InName(DataType t, bool tf32) {
  if (tf32) return "tf32";
  return t == DataType::kBf16 ? "bf16" : "f16";
}

sm90::EpilogueParams MakeEpilogue(const NormalizedProblem& p) {
  sm90::EpilogueParams e;
  e.m = static_cast<int>(p.m);
  e.n = static_cast<int>(p.n);
  e.d = p.d;
  e.c = p.c;
  e.ldd = p.ldd;
  e.ldc = p.ldc;
  e.batch_stride_d = p.batch_stride_d;
  e.batch_stride_c = p.batch_stride_c;
  e.alpha = p.alpha;
  e.beta = p.beta;
  e.out_dtype = p.out_dtype;
  const size_t os = DataTypeSize(p.out_dtype);
  auto pair_aligned = [&](const void* ptr, int64_t ld, int64_t bs) {
    return reinterpret_cast<uintptr_t>(ptr) % (2 * os) == 0 && ld % 2 == 0 &&
           (p.batch == 1 || bs % 2 == 0);
  };
  e.vec2_ok = pair_aligned(p.d, p.ldd, p.batch_stride_d) &&
              (p.c == nullptr || pair_aligned(p.c, p.ldc, p.batch_stride_c));
  // 16-byte vector stores of D, and loads of C in the same pattern.
  auto aligned16 = [&](const void* ptr, int64_t ld, int64_t bs) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (ld * os) % 16 == 0 &&
           (p.batch == 1 || (bs * os) % 16 == 0);
  };
  e.vec16_ok = aligned16(p.d, p.ldd, p.batch_stride_d) &&
               (p.c == nullptr || aligned16(p.c, p.ldc, p.batch_stride_c));
  e.tma_store = 0;  // set by MapOutput
  return e;
}

CUtensorMapDataType TmaDataType(DataType t) {
  return t == DataType::kFp32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
         : t == DataType::kBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// D's tensor map for the staged epilogue (64 x 64 boxes) and epi.tma_store,
// for kernels with a staging buffer, wherever TMA can address D and there is
// no C to read; otherwise `tma_d` becomes a copy of `tma_a` (a valid map,
// never stored through) and the kernel keeps the register path. A grouped
// plan encodes its maps per member on the host, so the others skip the
// third encode.
// NOTES: TMA stores clip a box at the tensor's last column only to 16-byte
// granularity: with N = 1 and padded rows, the 7 elements after each row's
// first were written (gemm_gpu_test's stray-write check).
// Hence N a multiple of 8 (16 bytes of 16-bit elements).
bool MapOutput(const NormalizedProblem& p, const KernelInfo& info, const CUtensorMap& tma_a,
               CUtensorMap* tma_d, sm90::EpilogueParams* epi, std::string* error) {
  TmaOperandParams td;
  const bool distinct_members = p.batch == 1 || p.batch_stride_d != 0;
  if (info.staged_store && p.c == nullptr && p.out_dtype != DataType::kFp32 && distinct_members &&
      p.n % 8 == 0 &&
      MakeTmaOperandParams(p.n, p.m, p.ldd, p.batch, p.batch_stride_d, 2, p.d, 64, 64, &td,
                           nullptr)) {
    if (!EncodeTensorMap(td, p.d, TmaDataType(p.out_dtype), tma_d, error)) return false;
    epi->tma_store = 1;
  } else {
    *tma_d = tma_a;
    epi->tma_store = 0;
  }
  return true;
}

// A launch that asks for per-CTA stamps needs a build that has them.
bool StampsAvailable(const unsigned long long* cta_clock, std::string* error) {
  if (cta_clock == nullptr || sm90::kKernelStamps) return true;
  *error = "per-CTA stamps (cta_clock) need a build with --define=gemm_kernel_stamps=1";
  return false;
}

std::string TileName(const Sm90TileShape& shape, const KernelInfo& info) {
  return std::to_string(shape.bm) + "x" + std::to_string(shape.bn) + "x" +
         std::to_string(info.bk) + "_s" + std::to_string(info.stages);
}

}  // namespace

bool Sm90Supports(const NormalizedProblem& p, std::string* why) {
  const bool tf32 = p.in_dtype == DataType::kFp32;
  if (tf32 && !p.allow_tf32) {
    *why = "fp32 inputs without allow_tf32 need strict fp32 arithmetic";
    return false;
  }
  if (tf32 && !(p.a.k_major && p.b.k_major)) {
    *why = "tf32 wgmma reads only K-major operands";
    return false;
  }
  const int64_t kIntMax = (int64_t{1} << 31) - 1;
  if (p.m > kIntMax || p.n > kIntMax || p.k > kIntMax || p.batch > kIntMax) {
    *why = "extent exceeds 32-bit tile coordinates";
    return false;
  }
  const int es = static_cast<int>(DataTypeSize(p.in_dtype));
  TmaOperandParams tp;
  std::string sub;
  if (!OperandParams(p.a, p.m, p.k, p.batch, es, 128, &tp, &sub)) {
    *why = "A: " + sub;
    return false;
  }
  if (!OperandParams(p.b, p.n, p.k, p.batch, es, 256, &tp, &sub)) {
    *why = "B: " + sub;
    return false;
  }
  return true;
}

std::unique_ptr<KernelPlan> MakeSm90Plan(const NormalizedProblem& p,
                                         const Sm90LaunchChoice& choice, void* workspace,
                                         std::string* error) {
  const Sm90Tile tile = choice.tile;
  std::string why;
  if (!Sm90Supports(p, &why)) {
    *error = why;
    return nullptr;
  }
  if (!StampsAvailable(choice.cta_clock, error)) return nullptr;
  const bool tf32 = p.in_dtype == DataType::kFp32;
  const int es = static_cast<int>(DataTypeSize(p.in_dtype));
  const Sm90TileShape shape = ShapeOf(tile);
  auto plan = std::make_unique<Sm90Plan>();
  switch (p.in_dtype) {
    case DataType::kBf16:
      plan->info_ = InfoFor<__nv_bfloat16>(tile, p.a.k_major, p.b.k_major);
      break;
    case DataType::kFp16:
      plan->info_ = InfoFor<__half>(tile, p.a.k_major, p.b.k_major);
      break;
    case DataType::kFp32:
      plan->info_ = InfoFor<float>(tile, true, true);
      break;
  }

  if (!OptIntoSharedMemory(plan->info_.func, plan->info_.smem_bytes, error)) return nullptr;
  const CUtensorMapDataType tdt = TmaDataType(p.in_dtype);
  TmaOperandParams ta, tb;
  std::string sub;
  // With A multicast each CTA loads half-tile boxes of A (LoadAHalfMulticast).
  const int a_rows = choice.multicast_a ? shape.bm / 2 : shape.bm;
  if (!OperandParams(p.a, p.m, p.k, p.batch, es, a_rows, &ta, &sub) ||
      !OperandParams(p.b, p.n, p.k, p.batch, es, shape.bn, &tb, &sub)) {
    *error = sub;
    return nullptr;
  }
  KernelParams& kp = plan->params_;
  std::memset(&kp, 0, sizeof(kp));
  // Split-K with every partial stored: the operands stream once (EncodeTensorMap).
  CUtensorMapL2promotion promotion =
      choice.schedule == Sm90Schedule::kSplitK && choice.separate_reduction
          ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
          : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  if (choice.l2_promotion == 0) promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  if (choice.l2_promotion == 128) promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  if (choice.l2_promotion == 256) promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  if (!EncodeTensorMap(ta, p.a.ptr, tdt, &kp.tma_a, error, promotion) ||
      !EncodeTensorMap(tb, p.b.ptr, tdt, &kp.tma_b, error, promotion)) {
    return nullptr;
  }
  kp.m = static_cast<int>(p.m);
  kp.n = static_cast<int>(p.n);
  kp.k = static_cast<int>(p.k);
  kp.tiles_m = static_cast<int>((p.m + shape.bm - 1) / shape.bm);
  kp.tiles_n = static_cast<int>((p.n + shape.bn - 1) / shape.bn);
  kp.batch = static_cast<int>(p.batch);
  kp.group_m = ChooseGroupM(kp.tiles_m, kp.tiles_n);
  kp.k_blocks = static_cast<int>((p.k + plan->info_.bk - 1) / plan->info_.bk);
  kp.a_batch_step = ta.broadcast_batch ? 0 : 1;
  kp.b_batch_step = tb.broadcast_batch ? 0 : 1;
  kp.epi = MakeEpilogue(p);
  if (!MapOutput(p, plan->info_, kp.tma_a, &kp.tma_d, &kp.epi, error)) return nullptr;

  const LaunchMode mode = ModeOf(choice);
  const LaunchModeTraits traits = TraitsOf(mode);
  const bool reducing = traits.k_ranges;
  const int64_t all_tiles = int64_t(kp.tiles_m) * kp.tiles_n * kp.batch;
  if (choice.cluster_pairs) {
    if (tile != Sm90Tile::k128x128 || choice.schedule != Sm90Schedule::kSplitK ||
        choice.splits != 2 || choice.separate_reduction || choice.sk_tiles != all_tiles ||
        choice.grid != 2 * all_tiles || kp.k_blocks < 2) {
      *error = "paired split-K: 128x128 tile, 2 splits reduced in the kernel, 2 CTAs per tile, "
               "2 or more k-blocks";
      return nullptr;
    }
    const int pairs = Sm90MaxPairClusters();
    if (pairs < all_tiles) {
      *error = "paired split-K: " + std::to_string(all_tiles) + " 2-CTA clusters needed at once, " +
               "the device holds " + std::to_string(pairs);
      return nullptr;
    }
  }
  if (choice.multicast_a) {
    // The 192-row tile splits A into two 96-row halves, which MN-major A
    // (64-row chunks) cannot.
    const bool rows_split = shape.bm == 128 || (shape.bm == 192 && p.a.k_major);
    if (reducing || choice.cluster_pairs || !rows_split || tile == Sm90Tile::k128x128PingPong ||
        choice.grid % 2 != 0) {
      *error =
          "A multicast: data-parallel on a cooperative tile (192x192 with K-major A only), an "
          "even grid";
      return nullptr;
    }
  }
  // Paired split-K keeps its partials in shared memory: no workspace.
  const bool uses_workspace = traits.workspace;
  if (uses_workspace && (workspace == nullptr || tile == Sm90Tile::k128x128PingPong)) {
    *error = "stream-K/split-K needs a workspace and cooperative consumers";
    return nullptr;
  }
  const bool separate = traits.partials_only;
  if (separate && (choice.grid != choice.sk_tiles * choice.splits || choice.sk_tiles != all_tiles)) {
    *error = "split-K with a separate reduction needs one CTA per (tile, split)";
    return nullptr;
  }
  // Both ways of summing stored partials size themselves by the SMs.
  int sms = 1;
  if (separate) {
    DeviceInfo dev;
    if (!CurrentDeviceInfo(&dev, error)) return nullptr;
    sms = dev.num_sms;
  }
  // Summed in the grid: every CTA waits for all the others' partials.
  const bool in_grid = traits.grid_counters;
  if (in_grid && choice.grid > sms) {
    *error = "split-K summed in the grid: " + std::to_string(choice.grid) +
             " CTAs must be resident at once, the device has " + std::to_string(sms) + " SMs";
    return nullptr;
  }
  kp.sk_tiles = reducing ? choice.sk_tiles : 0;
  kp.mode = mode;
  kp.flags = traits.flags ? static_cast<int*>(workspace) : nullptr;
  kp.grid_counters = in_grid ? static_cast<int*>(workspace) : nullptr;
  kp.partials = uses_workspace ? reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) +
                                                          ScheduleFlagBytes(choice))
                               : nullptr;
  if (traits.reduction_kernel) {
    const SplitKReducePlan rp =
        PlanSplitKReduce(choice.sk_tiles, shape.bm, shape.bn, choice.splits, sms);
    sm90::SplitKReduceParams& r = plan->reduce_params_;
    r.sums.epi = kp.epi;
    r.sums.partials = kp.partials;
    r.sums.tiles_m = kp.tiles_m;
    r.sums.tiles_n = kp.tiles_n;
    r.sums.batch = kp.batch;
    r.sums.group_m = kp.group_m;
    r.sums.splits = choice.splits;
    r.sums.quads = rp.quads;
    r.groups = rp.groups;
    r.quads_per_block = rp.quads_per_block;
    plan->reduce_blocks_ = static_cast<int>(rp.blocks);
    using sm90::SplitKReduceKernel;
    plan->reduce_func_ =
        shape.bn == 192   ? reinterpret_cast<const void*>(&SplitKReduceKernel<192, 192>)
        : shape.bn == 256 ? reinterpret_cast<const void*>(&SplitKReduceKernel<128, 256>)
        : shape.bn == 128 ? reinterpret_cast<const void*>(&SplitKReduceKernel<128, 128>)
                          : reinterpret_cast<const void*>(&SplitKReduceKernel<128, 64>);
  }
  if (uses_workspace) {
    // Flags (and the grid's counters) start at zero; every launch leaves
    // them at zero.
    const cudaError_t e = cudaMemsetAsync(workspace, 0, ScheduleFlagBytes(choice));
    if (e != cudaSuccess) {
      *error = std::string("workspace flags: ") + cudaGetErrorString(e);
      return nullptr;
    }
  }
  plan->grid_ = choice.grid;
  plan->pdl_ = choice.programmatic_launch;
  kp.cta_clock = choice.cta_clock;
  std::string schedule;
  if (reducing) {
    schedule = choice.schedule == Sm90Schedule::kSplitK
                   ? "_splitk" + std::to_string(choice.splits) +
                         (in_grid          ? "_gridsum"
                          : separate       ? "_reduce"
                          : choice.cluster_pairs ? "_pairs"
                                                 : "")
                   : "_streamk" + std::to_string(choice.sk_tiles);
  }
  plan->name_ = std::string(tile == Sm90Tile::k128x128PingPong ? "sm90_tma_wgmma_pingpong_"
                                                               : "sm90_tma_wgmma_coop_") +
                InName(p.in_dtype, tf32) + "_" + TileName(shape, plan->info_) + "_" +
                (p.a.k_major ? "k" : "m") + (p.b.k_major ? "k" : "n") + schedule +
                (choice.multicast_a ? "_mcA" : "");
  return plan;
}

int Sm90MaxPairClusters() {
  static std::mutex mu;
  static std::vector<int> cache;  // per device; -1: not asked yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(cache.size()) <= device) cache.resize(device + 1, -1);
  if (cache[device] < 0) {
    // Every 128x128 cooperative kernel has the same shared memory and block.
    const KernelInfo info = InfoFor<__nv_bfloat16>(Sm90Tile::k128x128, true, true);
    std::string error;
    int clusters = 0;
    if (OptIntoSharedMemory(info.func, info.smem_bytes, &error)) {
      LaunchConfig lc(2, info.threads, info.smem_bytes, nullptr, 2);
      if (cudaOccupancyMaxActiveClusters(&clusters, info.func, &lc.config) != cudaSuccess) {
        cudaGetLastError();  // not sticky; leave no error for the next call
        clusters = 0;
      }
    }
    cache[device] = clusters;
  }
  return cache[device];
}

std::optional<Sm90Tile> Sm90TileOf(TileHint hint) {
  switch (hint) {
    case TileHint::kAuto:
      break;
    case TileHint::k128x256:
      return Sm90Tile::k128x256;
    case TileHint::k128x128:
      return Sm90Tile::k128x128;
    case TileHint::k128x128PingPong:
      return Sm90Tile::k128x128PingPong;
    case TileHint::k128x64:
      return Sm90Tile::k128x64;
    case TileHint::k192x192:
      return Sm90Tile::k192x192;
  }
  return std::nullopt;
}

bool Sm90KernelStamps() { return sm90::kKernelStamps; }

bool Sm90GroupedHasTile(Sm90Tile tile) {
  return GroupedInfoFor<__nv_bfloat16>(tile, true, true).has_value();
}

size_t Sm90GroupedWorkspaceSize(size_t num_problems) {
  return (num_problems * sizeof(sm90::GroupedProblem) + 255) / 256 * 256 +
         num_problems * sizeof(GroupedProblemShape);
}

std::unique_ptr<KernelPlan> MakeSm90GroupedPlan(const std::vector<NormalizedProblem>& problems,
                                                Sm90Tile tile, int num_sms, void* workspace,
                                                std::string* error, unsigned long long* cta_clock) {
  std::vector<uint8_t> image(Sm90GroupedWorkspaceSize(problems.size()));
  auto plan = MakeSm90GroupedPlanDeferred(problems, tile, num_sms, workspace, image.data(), error,
                                          cta_clock);
  if (!plan) return nullptr;
  const cudaError_t e = cudaMemcpy(workspace, image.data(), image.size(), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    *error = std::string("grouped descriptors: ") + cudaGetErrorString(e);
    return nullptr;
  }
  return plan;
}

std::unique_ptr<KernelPlan> MakeSm90GroupedPlanDeferred(
    const std::vector<NormalizedProblem>& problems, Sm90Tile tile, int num_sms, void* workspace,
    void* host_image, std::string* error, unsigned long long* cta_clock) {
  if (problems.empty() || workspace == nullptr || host_image == nullptr) {
    *error = "grouped launch needs problems and a workspace";
    return nullptr;
  }
  if (!StampsAvailable(cta_clock, error)) return nullptr;
  const NormalizedProblem& first = problems[0];
  const std::optional<KernelInfo> info =
      first.in_dtype == DataType::kBf16
          ? GroupedInfoFor<__nv_bfloat16>(tile, first.a.k_major, first.b.k_major)
      : first.in_dtype == DataType::kFp16
          ? GroupedInfoFor<__half>(tile, first.a.k_major, first.b.k_major)
          : std::nullopt;
  if (!info) {
    *error = "grouped kernel: 16-bit inputs and the 128x256 or 128x128 cooperative tile";
    return nullptr;
  }
  auto plan = std::make_unique<Sm90Plan>();
  plan->info_ = *info;
  if (!OptIntoSharedMemory(plan->info_.func, plan->info_.smem_bytes, error)) return nullptr;
  const Sm90TileShape shape = ShapeOf(tile);
  const int es = static_cast<int>(DataTypeSize(first.in_dtype));
  const CUtensorMapDataType tdt = TmaDataType(first.in_dtype);
  std::vector<sm90::GroupedProblem> descs(problems.size());
  std::vector<GroupedProblemShape> shapes(problems.size());
  int64_t tiles = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    const NormalizedProblem& p = problems[i];
    std::string why;
    if (p.in_dtype != first.in_dtype || p.out_dtype != first.out_dtype ||
        p.a.k_major != first.a.k_major || p.b.k_major != first.b.k_major || p.batch != 1 ||
        !Sm90Supports(p, &why)) {
      *error = "problem " + std::to_string(i) + " does not fit the group's kernel " + why;
      return nullptr;
    }
    TmaOperandParams ta, tb;
    if (!OperandParams(p.a, p.m, p.k, 1, es, shape.bm, &ta, &why) ||
        !OperandParams(p.b, p.n, p.k, 1, es, shape.bn, &tb, &why)) {
      *error = "problem " + std::to_string(i) + ": " + why;
      return nullptr;
    }
    constexpr CUtensorMapL2promotion kPromotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    if (!EncodeTensorMap(ta, p.a.ptr, tdt, &descs[i].tma_a, error, kPromotion) ||
        !EncodeTensorMap(tb, p.b.ptr, tdt, &descs[i].tma_b, error, kPromotion)) {
      return nullptr;
    }
    descs[i].epi = MakeEpilogue(p);
    if (!MapOutput(p, plan->info_, descs[i].tma_a, &descs[i].tma_d, &descs[i].epi, error)) {
      return nullptr;
    }
    GroupedProblemShape& gs = shapes[i];
    gs.tiles_m = static_cast<int>((p.m + shape.bm - 1) / shape.bm);
    gs.tiles_n = static_cast<int>((p.n + shape.bn - 1) / shape.bn);
    gs.k_blocks = static_cast<int>((p.k + plan->info_.bk - 1) / plan->info_.bk);
    gs.group_m = ChooseGroupM(gs.tiles_m, gs.tiles_n);
    gs.tile_start = tiles;
    tiles += int64_t(gs.tiles_m) * gs.tiles_n;
  }
  const size_t desc_bytes = (descs.size() * sizeof(sm90::GroupedProblem) + 255) / 256 * 256;
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  uint8_t* image = static_cast<uint8_t*>(host_image);
  std::memset(image, 0, Sm90GroupedWorkspaceSize(problems.size()));
  std::memcpy(image, descs.data(), descs.size() * sizeof(sm90::GroupedProblem));
  std::memcpy(image + desc_bytes, shapes.data(), shapes.size() * sizeof(GroupedProblemShape));
  KernelParams& kp = plan->params_;
  std::memset(&kp, 0, sizeof(kp));
  kp.group = reinterpret_cast<const sm90::GroupedProblem*>(ws);
  kp.group_shapes = reinterpret_cast<const GroupedProblemShape*>(ws + desc_bytes);
  kp.mode = LaunchMode::kGrouped;
  kp.num_problems = static_cast<int>(problems.size());
  kp.group_tiles = tiles;
  kp.cta_clock = cta_clock;
  plan->grid_ = PersistentGridSize(tiles, num_sms);
  plan->name_ = std::string("sm90_tma_wgmma_grouped_") + InName(first.in_dtype, false) + "_" +
                TileName(shape, plan->info_) + "_" + (first.a.k_major ? "k" : "m") +
                (first.b.k_major ? "k" : "n");
  return plan;
}

}  // namespace gemm_kernels
