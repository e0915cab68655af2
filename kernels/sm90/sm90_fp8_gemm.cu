// Host side of the Hopper FP8 kernel: support checks, tensor maps of the
// 1-byte operands, the instance for a tile and format pair, launch. Kept
// apart from sm90_gemm.cu so that the FP8 instances compile on their own.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstring>
#include <memory>
#include <string>

#include "kernels/device_info.h"
#include "kernels/sm90/fp8_gemm_kernel.cuh"
#include "kernels/sm90/launch_support.h"
#include "kernels/sm90/sm90_fp8_gemm.h"
#include "kernels/sm90/tma_params.h"

namespace gemm_kernels {
namespace {

using sm90::E4m3;
using sm90::E5m2;
using sm90::Fp8KernelParams;

constexpr int kBk = 128;  // elements (bytes) of one k-block
static_assert(kBk == kFp8ScaleBlock,
              "the scaled kernel applies block scale kb to k-block kb of its k-loop");

struct Fp8KernelInfo {
  const void* func = nullptr;
  size_t smem_bytes = 0;
  int stages = 0;
  int threads = 0;
};

template <class FA, class FB, int kBN, bool kScaled>
Fp8KernelInfo InfoOf() {
  using Cfg = sm90::KernelConfigFor<sm90::Fp8In<FA, FB>, kBN, true, true, false>;
  constexpr size_t kSmem = sm90::SmemBytes<Cfg>();
  static_assert(kSmem <= 227 * 1024, "shared storage exceeds Hopper shared memory");
  return {reinterpret_cast<const void*>(&sm90::Sm90Fp8GemmKernel<FA, FB, kBN, kScaled>), kSmem,
          Cfg::kStages, Cfg::kThreads};
}

// 128x256 accumulates directly; 128x128 is the scaled (promoting) kernel.
template <class FA, class FB>
Fp8KernelInfo InfoForTile(Sm90Tile tile) {
  return tile == Sm90Tile::k128x256 ? InfoOf<FA, FB, 256, false>() : InfoOf<FA, FB, 128, true>();
}

Fp8KernelInfo InfoFor(DataType a, DataType b, Sm90Tile tile) {
  const bool a4 = a == DataType::kFp8E4m3;
  const bool b4 = b == DataType::kFp8E4m3;
  if (a4 && b4) return InfoForTile<E4m3, E4m3>(tile);
  if (a4) return InfoForTile<E4m3, E5m2>(tile);
  if (b4) return InfoForTile<E5m2, E4m3>(tile);
  return InfoForTile<E5m2, E5m2>(tile);
}

class Sm90Fp8Plan final : public KernelPlan {
 public:
  std::string Launch(void* stream) const override {
    const cudaError_t e =
        sm90_launch::LaunchKernel(info_.func, const_cast<Fp8KernelParams*>(&params_), grid_,
                                  info_.threads, info_.smem_bytes, stream);
    return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
  }
  const std::string& name() const override { return name_; }

  Fp8KernelParams params_;
  Fp8KernelInfo info_;
  int grid_ = 1;
  std::string name_;
};

sm90::EpilogueParams MakeFp8Epilogue(const NormalizedProblem& p) {
  sm90::EpilogueParams e;
  std::memset(&e, 0, sizeof(e));
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
  auto aligned16 = [&](const void* ptr, int64_t ld, int64_t bs) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (ld * os) % 16 == 0 &&
           (p.batch == 1 || (bs * os) % 16 == 0);
  };
  e.vec16_ok = aligned16(p.d, p.ldd, p.batch_stride_d) &&
               (p.c == nullptr || aligned16(p.c, p.ldc, p.batch_stride_c));
  e.tma_store = 0;  // no staging buffer in the FP8 kernels: the register path
  return e;
}

int64_t MemberValues(ScaleMode mode, int64_t rows, int64_t k_blocks, int64_t n_blocks, bool is_a) {
  switch (mode) {
    case ScaleMode::kNone:
      return 0;
    case ScaleMode::kTensor:
      return 1;
    case ScaleMode::kChannel:
      return rows;
    case ScaleMode::kBlock:
      return is_a ? rows * k_blocks : k_blocks * n_blocks;
  }
  return 0;
}

}  // namespace

Fp8Operands NormalizeFp8(const GemmArguments& args) {
  Fp8Operands f;
  const bool swap = args.d.layout == Layout::kColMajor;
  f.a_dtype = swap ? args.b.dtype : args.a.dtype;
  f.b_dtype = swap ? args.a.dtype : args.b.dtype;
  f.a_scale = swap ? args.b_scale : args.a_scale;
  f.b_scale = swap ? args.a_scale : args.b_scale;
  return f;
}

bool Sm90Fp8Supports(const NormalizedProblem& p, std::string* why) {
  if (!p.a.k_major || !p.b.k_major) {
    *why = std::string(p.a.k_major ? "B" : "A") +
           ": FP8 wgmma reads only K-major operands (row-major A, column-major B)";
    return false;
  }
  const int64_t kIntMax = (int64_t{1} << 31) - 1;
  if (p.m > kIntMax || p.n > kIntMax || p.k > kIntMax || p.batch > kIntMax) {
    *why = "extent exceeds 32-bit tile coordinates";
    return false;
  }
  TmaOperandParams tp;
  std::string sub;
  if (!MakeTmaOperandParams(p.k, p.m, p.a.ld, p.batch, p.a.batch_stride, 1, p.a.ptr, kBk, 128,
                            &tp, &sub)) {
    *why = "A: " + sub;
    return false;
  }
  if (!MakeTmaOperandParams(p.k, p.n, p.b.ld, p.batch, p.b.batch_stride, 1, p.b.ptr, kBk, 256,
                            &tp, &sub)) {
    *why = "B: " + sub;
    return false;
  }
  return true;
}

std::unique_ptr<KernelPlan> MakeSm90Fp8Plan(const NormalizedProblem& p, const Fp8Operands& f,
                                            const Sm90LaunchChoice& choice, int promote_every,
                                            std::string* error) {
  if (!Sm90Fp8Supports(p, error)) return nullptr;
  const Sm90Tile tile = choice.tile;
  if (tile != Sm90Tile::k128x256 && tile != Sm90Tile::k128x128) {
    *error = "FP8 kernels exist for the 128x256 and 128x128 tiles";
    return nullptr;
  }
  if (choice.schedule != Sm90Schedule::kDataParallel || choice.multicast_a ||
      choice.cluster_pairs || choice.cta_clock != nullptr) {
    *error = "FP8 kernels launch data-parallel only";
    return nullptr;
  }
  const bool block = f.a_scale.mode == ScaleMode::kBlock || f.b_scale.mode == ScaleMode::kBlock;
  if (block && tile != Sm90Tile::k128x128) {
    *error = "block scales need the 128x128 FP8 kernel (it applies them per k-block)";
    return nullptr;
  }
  if (block && promote_every != 1) {
    *error = "block scales: promotion every k-block";
    return nullptr;
  }
  if (promote_every < 1) {
    *error = "promote_every must be >= 1";
    return nullptr;
  }
  auto plan = std::make_unique<Sm90Fp8Plan>();
  plan->info_ = InfoFor(f.a_dtype, f.b_dtype, tile);
  if (!sm90_launch::OptIntoSharedMemory(plan->info_.func, plan->info_.smem_bytes, error))
    return nullptr;
  const Sm90TileShape shape = ShapeOf(tile);
  TmaOperandParams ta, tb;
  std::string sub;
  if (!MakeTmaOperandParams(p.k, p.m, p.a.ld, p.batch, p.a.batch_stride, 1, p.a.ptr, kBk,
                            shape.bm, &ta, &sub) ||
      !MakeTmaOperandParams(p.k, p.n, p.b.ld, p.batch, p.b.batch_stride, 1, p.b.ptr, kBk,
                            shape.bn, &tb, &sub)) {
    *error = sub;
    return nullptr;
  }
  Fp8KernelParams& fp = plan->params_;
  std::memset(&fp, 0, sizeof(fp));
  sm90::KernelParams& kp = fp.base;
  constexpr CUtensorMapDataType kCodes = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  if (!sm90_launch::EncodeTensorMap(ta, p.a.ptr, kCodes, &kp.tma_a, error) ||
      !sm90_launch::EncodeTensorMap(tb, p.b.ptr, kCodes, &kp.tma_b, error)) {
    return nullptr;
  }
  kp.tma_d = kp.tma_a;  // never stored through (no staging buffer)
  kp.m = static_cast<int>(p.m);
  kp.n = static_cast<int>(p.n);
  kp.k = static_cast<int>(p.k);
  kp.tiles_m = static_cast<int>((p.m + shape.bm - 1) / shape.bm);
  kp.tiles_n = static_cast<int>((p.n + shape.bn - 1) / shape.bn);
  kp.batch = static_cast<int>(p.batch);
  kp.group_m = ChooseGroupM(kp.tiles_m, kp.tiles_n);
  kp.k_blocks = static_cast<int>((p.k + kBk - 1) / kBk);
  kp.a_batch_step = ta.broadcast_batch ? 0 : 1;
  kp.b_batch_step = tb.broadcast_batch ? 0 : 1;
  kp.epi = MakeFp8Epilogue(p);
  kp.sk_tiles = 0;
  kp.mode = sm90::LaunchMode::kDataParallel;
  sm90::Fp8Scales& s = fp.s;
  s.a = f.a_scale.ptr;
  s.b = f.b_scale.ptr;
  s.a_mode = static_cast<int>(f.a_scale.mode);
  s.b_mode = static_cast<int>(f.b_scale.mode);
  // Block scales: one per k-block, the last one partial where K % 128 != 0
  // (the same ceil as kp.k_blocks, so the k-loop's last block reads it).
  const int64_t k_blocks = (p.k + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  const int64_t n_blocks = (p.n + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  s.k_blocks = static_cast<int>(k_blocks);
  s.n_blocks = static_cast<int>(n_blocks);
  s.a_member = p.batch > 1 ? MemberValues(f.a_scale.mode, p.m, k_blocks, n_blocks, true) : 0;
  s.b_member = p.batch > 1 ? MemberValues(f.b_scale.mode, p.n, k_blocks, n_blocks, false) : 0;
  s.promote_every = promote_every;
  plan->grid_ = choice.grid;
  const bool scaled = tile == Sm90Tile::k128x128;
  plan->name_ = std::string("sm90_tma_wgmma_coop_") + DataTypeName(f.a_dtype) + "x" +
                DataTypeName(f.b_dtype) + "_" + std::to_string(shape.bm) + "x" +
                std::to_string(shape.bn) + "x128_s" + std::to_string(plan->info_.stages) +
                "_kk" + (scaled ? "_promote" + std::to_string(promote_every) : std::string()) +
                "_" + ScaleModeName(f.a_scale.mode) + "x" + ScaleModeName(f.b_scale.mode);
  return plan;
}

}  // namespace gemm_kernels
