#include "service/cuda/kernel_arguments.h"

#include "kernels/config/deterministic_plan.h"

namespace gemm {
namespace gpu {

namespace gk = gemm_kernels;

gk::Layout OperandLayout(Layout stored, bool transposed) {
  const bool row = (stored == Layout::kRowMajor) != transposed;
  return row ? gk::Layout::kRowMajor : gk::Layout::kColMajor;
}

const char* KernelFamily(gk::KernelKind k) {
  switch (k) {
    case gk::KernelKind::kSm90TmaWgmma:
      return "sm90_wgmma";
    case gk::KernelKind::kPortableSimt:
      return "portable_simt";
    case gk::KernelKind::kNone:
      break;
  }
  return "none";
}

ProblemReproducibility DeterministicRecord(const GemmProblemRef& p, gk::KernelKind kind,
                                           const std::string& kernel) {
  ProblemReproducibility r;
  r.kernel_family = KernelFamily(kind);
  r.kernel = kernel;
  r.splits = 1;
  const GemmShape& s = p.shape;
  if (kind == gk::KernelKind::kSm90TmaWgmma) {
    const gk::DeterministicRecipe recipe = gk::DeterministicSm90Recipe(
        s.input_dtype, static_cast<int64_t>(s.m), static_cast<int64_t>(s.n),
        static_cast<int64_t>(s.k), s.layout_d == Layout::kColMajor);
    r.tile = gk::Sm90TileName(recipe.tile);
    r.reduction_order = recipe.reduction_order;
  } else {
    r.tile = "64x64";
    r.reduction_order = "each output element summed by one thread: k ascending, fp32 fused multiply-add";
  }
  return r;
}

gk::GemmArguments KernelArguments(const GemmProblemRef& p, const Placement& pl,
                                  const Placement& pl2, int64_t count, unsigned char* dev,
                                  unsigned char* out_dev) {
  const GemmShape& s = p.shape;
  auto stride = [count](size_t first, size_t second, DType t) -> int64_t {
    return count > 1 ? static_cast<int64_t>((second - first) / SizeOf(t)) : 0;
  };
  auto operand = [dev](const MatrixRef& m, size_t offset) -> const void* {
    const void* resident = ResidentData(m);
    return resident != nullptr ? resident : dev + offset;
  };
  gk::GemmArguments args;
  args.m = static_cast<int64_t>(s.m);
  args.n = static_cast<int64_t>(s.n);
  args.k = static_cast<int64_t>(s.k);
  args.batch_count = count;
  args.a = {operand(p.a, pl.a), s.input_dtype, OperandLayout(s.layout_a, s.transpose_a),
            static_cast<int64_t>(p.a.ld()), stride(pl.a, pl2.a, s.input_dtype)};
  args.b = {operand(p.b, pl.b), s.b_dtype(), OperandLayout(s.layout_b, s.transpose_b),
            static_cast<int64_t>(p.b.ld()), stride(pl.b, pl2.b, s.b_dtype())};
  // FP8 scales are staged with the operands (members back to back); the
  // kernels index them in op(A) / op(B) terms, as the API does.
  auto scales = [dev](const MatrixRef& m, size_t offset) -> gk::ScaleDesc {
    if (m.scales.mode == ScaleMode::kNone) return {};
    return {m.scales.mode, reinterpret_cast<const float*>(dev + offset)};
  };
  args.a_scale = scales(p.a, pl.a_scales);
  args.b_scale = scales(p.b, pl.b_scales);
  const int64_t ld_d = static_cast<int64_t>(s.layout_d == Layout::kRowMajor ? s.n : s.m);
  args.d = {out_dev + pl.d, s.output_dtype, s.layout_d, ld_d,
            stride(pl.d, pl2.d, s.output_dtype)};
  args.c = args.d;
  if (pl.has_c) {
    args.c.ptr = operand(p.c, pl.c);
    args.c.batch_stride = stride(pl.c, pl2.c, s.output_dtype);
  }
  args.alpha = static_cast<float>(p.alpha);
  args.beta = pl.has_c ? static_cast<float>(p.beta) : 0.0f;
  args.allow_tf32 = s.allow_tf32;
  return args;
}

}  // namespace gpu
}  // namespace gemm
