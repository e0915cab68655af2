// Public launch API for the GEMM kernels: D = alpha * op(A) * op(B) + beta * C.
//
// Plain C++: no CUDA type appears here, so service/ code includes it without the
// CUDA toolkit. Streams are passed as an opaque `void*` holding a cudaStream_t
// (nullptr = the legacy default stream). All pointers are device pointers.
//
// Usage, in the CUTLASS spirit:
//   GemmArguments args = ...;
//   RETURN_IF_ERROR(Gemm::CanImplement(args));   // argument checks, no GPU needed
//   Gemm gemm;
//   RETURN_IF_ERROR(gemm.Initialize(args, workspace));  // picks a kernel for the
//                                                       // current device
//   RETURN_IF_ERROR(gemm.Run(stream));
//   gemm.kernel_name();   // which kernel/config ran, for per-response reporting
//
// A caller that also sizes the workspaces plans the launch once instead:
//   Gemm::Plan plan = Gemm::MakePlan(args);      // checks, device, heuristic
//   RETURN_IF_ERROR(plan.status());
//   ... plan.workspace_bytes(), plan.operand_copy_bytes() ...
//   RETURN_IF_ERROR(gemm.Initialize(plan, workspace, operand_copies));
//
// Implementation details follow the public declarations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/types.h"

namespace gemm_kernels {

// The service's element types and layouts (common/types.h), under the
// kernels' own names.
using DataType = ::gemm::DType;
using Layout = ::gemm::Layout;

// The short dtype names kernel names are built from: "f32", "f16", "bf16",
// "e4m3", "e5m2" (common/types.h's DTypeShortName).
constexpr const char* DataTypeName(DataType t) { return ::gemm::DTypeShortName(t); }
size_t DataTypeSize(DataType t);

// One operand (or the output) of a strided-batched GEMM. Element (i, j) of
// batch member b lives at ptr + b * batch_stride + (row-major ? i * ld + j
// : i + j * ld), in elements. batch_stride 0 broadcasts one matrix to every
// batch member (allowed for A, B and C, not for D).
struct MatrixDesc {
  const void* ptr = nullptr;
  DataType dtype = DataType::kBf16;
  Layout layout = Layout::kRowMajor;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// How an FP8 operand's elements are scaled: the real value of an element is
// its FP8 value times its scale (fp32, finite, > 0). Layouts, with i < m a
// row of op(A) and of D, j < n a column of op(B) and of D, and one block of
// values per batch member, members back to back:
//   kTensor:  one value.
//   kChannel: A: m values (row i at i); B: n values (column j at j).
//   kBlock:   any k, in kb = ceil(k / 128) blocks along K, the last one
//             partial where k % 128 != 0 (its scale covers the remaining
//             elements; the kernel zero-pads the K tail). A: 1 x 128
//             blocks, m x kb row-major, the scale of (i, kk) at i * kb +
//             kk / 128; B: 128 x 128 blocks, kb x ceil(n / 128) row-major,
//             the scale of (kk, j) at (kk / 128) * ceil(n / 128) + j / 128.
// 16-bit and fp32 operands take kNone (and FP8 operands need another mode).
// The service's ScaleMode (common/types.h), as DataType is its DType.
using ScaleMode = ::gemm::ScaleMode;
using ::gemm::ScaleModeName;  // "none", "tensor", "channel", "block"

// The scales of one operand: `ptr` is device memory of ScaleCount() fp32
// values. The kernels read them and never check them: they must be finite
// and > 0 (the service validates them before they reach the device).
struct ScaleDesc {
  ScaleMode mode = ScaleMode::kNone;
  const float* ptr = nullptr;
};

// K-blocks of the block scale layout: the granularity along K of kBlock
// scales, and the width of B's blocks along N.
constexpr int64_t kFp8ScaleBlock = 128;

// Measured rates of the device a launch runs on, by which MakePlan prices
// copying unaligned bf16/fp16 operands (GemmArguments::copy_unaligned_operands)
// against running the problem where it is on the portable SIMT kernel. 0 is
// "not measured": while any rate is 0, the operands are copied whenever
// copies would move the problem onto the Hopper kernel.
struct CopyPricing {
  double tensor_flops_per_s = 0;       // the Hopper kernel at this input type
  double simt_flops_per_s = 0;         // the portable SIMT kernel, its grid filling the GPU
  double device_copy_bytes_per_s = 0;  // bytes read plus written by a device copy
  double launch_seconds = 0;           // one small kernel launch, back to back on a stream
  // One output tile of the SIMT kernel, seconds per unit of K: its critical
  // path, which sets the kernel's time wherever its grid leaves the GPU
  // partly idle (a 383^3 problem has 36 tiles for 132 SMs, and runs about
  // 10x below simt_flops_per_s). 0: not measured, the rate alone prices it.
  double simt_tile_seconds_per_k = 0;
  bool measured() const {
    return tensor_flops_per_s > 0 && simt_flops_per_s > 0 && device_copy_bytes_per_s > 0 &&
           launch_seconds > 0;
  }
};

// The problem: for each b < batch_count, D_b (m x n) = alpha * A_b (m x k) *
// B_b (k x n) + beta * C_b. Transposes are expressed through the layouts: a
// transposed row-major operand is the same bytes read as column-major.
struct GemmArguments {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t batch_count = 1;
  MatrixDesc a;
  MatrixDesc b;
  // Read only when beta != 0; must then have d's dtype and layout (it may alias
  // d exactly for an in-place update).
  MatrixDesc c;
  MatrixDesc d;  // d.ptr is written; it is a const void* only to share the struct.
  float alpha = 1.0f;
  float beta = 0.0f;
  // FP8 operands only (a.dtype and b.dtype kFp8E4m3 or kFp8E5m2, in any
  // pairing): the scales of op(A) and op(B); D = alpha * sum_k (qa * sa) *
  // (qb * sb) + beta * C, accumulated in fp32. D (and C) bf16, fp16 or fp32.
  // The Hopper kernel reads FP8 operands only K-major (row-major A,
  // column-major B), and block scales only with a row-major D.
  ScaleDesc a_scale;
  ScaleDesc b_scale;
  // fp32 inputs: true lets the tensor cores round the inputs to TF32 (about
  // 1e-3 relative error); false (the default) keeps strict fp32 arithmetic.
  bool allow_tf32 = false;
  // bf16/fp16 inputs on Hopper: an operand whose rows (or batch members)
  // start off TMA's 16-byte grid (a leading dimension not a multiple of 8
  // elements, say) is copied into an aligned K-major workspace first
  // (operand_copies, Gemm::OperandCopyBytes) and the problem runs on the
  // tensor cores; false runs such problems on the portable SIMT kernel.
  bool copy_unaligned_operands = false;
  // With copy_unaligned_operands and measured rates: the copies are made
  // only where the copies and the Hopper kernel are predicted to finish
  // before the SIMT kernel would (OperandCopiesPayOff, kernels/problem.h).
  CopyPricing copy_pricing;
};

// Tile configuration of the Hopper kernel. kAuto lets the shape heuristic
// choose (production); the others force a tile, for benchmarks and tuning.
enum class TileHint { kAuto, k128x256, k128x128, k128x128PingPong, k128x64, k192x192 };

// How the Hopper kernel schedules its tiles. kAuto lets the heuristic choose
// (data-parallel unless stream-K or split-K is estimated clearly faster, and
// only when a workspace is given; data-parallel with A multicast over 2-CTA
// clusters where A's rows start off the 32-byte sector grid and that is
// estimated clearly faster); the others force a schedule, for tests and
// benchmarks, kDataParallel the plain one (no multicast). Stream-K and
// split-K need cooperative tiles (not ping-pong) and at least two k-blocks;
// where they do not apply the launch is data-parallel.
// Forced split-K reduces through a second kernel on the same stream (Run
// enqueues both); kAuto uses that only where many splits pay for it.
enum class ScheduleHint { kAuto, kDataParallel, kStreamK, kSplitK };

// Which kernel family an initialized Gemm launches.
enum class KernelKind {
  kNone,
  kSm90TmaWgmma,   // Hopper: TMA + wgmma, warp-specialized, persistent
  kPortableSimt,   // any sm_80+ GPU; strict fp32; unaligned operands
};

class Gemm {
 public:
  // One launch planned once: the argument checks (CanImplement), the device
  // lookup and the launch heuristic run in MakePlan, and WorkspaceSize,
  // OperandCopyBytes and Initialize read their results instead of running
  // them again. Cheap to copy; holds no device memory.
  class Plan {
   public:
    Plan();
    // CanImplement's result, or why no GPU is usable.
    const absl::Status& status() const;
    // What WorkspaceSize and OperandCopyBytes return for the same arguments
    // and hints (0 when status() is not ok).
    size_t workspace_bytes() const;
    size_t operand_copy_bytes() const;

    struct Data;  // gemm.cc

   private:
    friend class Gemm;
    std::shared_ptr<const Data> data_;
  };
  static Plan MakePlan(const GemmArguments& args, TileHint hint = TileHint::kAuto,
                       ScheduleHint schedule = ScheduleHint::kAuto);

  // Checks the arguments alone (shapes, strides, dtypes, pointers, FP8
  // scale modes); needs no GPU. InvalidArgument names the offending field;
  // Unimplemented names the field of a valid combination that no kernel in
  // this build runs (FP8 operands that are not K-major, block scales with a
  // column-major D).
  static absl::Status CanImplement(const GemmArguments& args);

  // Values of `scale`'s layout for one batch member of `args` (0 for kNone).
  // `is_a`: the scales of op(A) (else op(B)).
  static int64_t ScaleCount(const GemmArguments& args, const ScaleDesc& scale, bool is_a);

  // Bytes of device workspace that let Initialize() use a stream-K or
  // split-K schedule on the current device (0 where none would be chosen or
  // no GPU is usable). The same arguments and hints must go to Initialize().
  static size_t WorkspaceSize(const GemmArguments& args, TileHint hint = TileHint::kAuto,
                              ScheduleHint schedule = ScheduleHint::kAuto);

  // Bytes of device memory that let Initialize() run a problem on the Hopper
  // kernel when an operand is not in a form its TMA loads take (fp32 on TF32
  // and FP8 operands that are not K-major; 16-bit rows off the 16-byte grid,
  // where the copy pays off): each such operand is copied into aligned
  // K-major order there by every Run, before the GEMM. 0 when no operand
  // needs it, or on a device where it would not help.
  static size_t OperandCopyBytes(const GemmArguments& args);

  // Picks a kernel and configuration for the current CUDA device and
  // precomputes its launch parameters (tensor maps). Does not launch anything.
  // `hint` and `schedule` only affect the Hopper kernel. `workspace`: device
  // memory of WorkspaceSize() bytes, or nullptr (then data-parallel, or
  // split-K in two through 2-CTA clusters, which keeps its partials in shared
  // memory).
  // Initialize zeroes the workspace's flag words (cudaMemsetAsync on the
  // legacy default stream) and every launch leaves them zero; runs that share
  // one workspace must not overlap in time. `operand_copies`: device memory
  // of OperandCopyBytes() bytes, or nullptr (then an fp32 operand that is not
  // K-major takes the strict-fp32 SIMT kernel); runs that share it must not
  // overlap either.
  absl::Status Initialize(const GemmArguments& args, void* workspace = nullptr,
                          TileHint hint = TileHint::kAuto,
                          ScheduleHint schedule = ScheduleHint::kAuto,
                          void* operand_copies = nullptr);

  // Initialize from a plan (MakePlan's arguments and hints): the same launch
  // as Initialize(args, workspace, hint, schedule, operand_copies).
  absl::Status Initialize(const Plan& plan, void* workspace = nullptr,
                          void* operand_copies = nullptr);

  // Enqueues the GEMM on `stream` (a cudaStream_t). Returns an error if the
  // launch fails; asynchronous kernel faults surface at the next sync.
  absl::Status Run(void* stream) const;

  // E.g. "sm90_tma_wgmma_coop_bf16_128x256x64_s4_kk" (Hopper kernel, cooperative
  // or pingpong consumers, input type, tile MxNxK, pipeline stages, A and B
  // k-major or m/n-major; "_streamk<tiles>" or "_splitk<splits>" when the
  // schedule reduces partial tiles; "+kmajor_copy_a/b" when operands are
  // copied first) or "portable_simt_f32_f32_64x64x16".
  const std::string& kernel_name() const { return kernel_name_; }
  KernelKind kernel_kind() const { return kind_; }
  // Whether Run copies operands into operand_copies before the GEMM.
  bool copies_operands() const;

  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

 private:
  struct Impl;
  Impl* impl_ = nullptr;
  KernelKind kind_ = KernelKind::kNone;
  std::string kernel_name_;
};

}  // namespace gemm_kernels
