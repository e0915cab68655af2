#include "service/cuda/partner_quantization.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/quantize/fp8_quantize.h"
#include "service/cuda/cuda_status.h"

namespace gemm {
namespace gpu {
namespace {

namespace gk = gemm_kernels;

// Rounds up to 256 bytes, the alignment the kernels' operands keep.
uint64_t Aligned(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

absl::Status PartnerQuantization::Prepare(const GemmProblemRef& p, int64_t count,
                                          const void* values, uint64_t member_bytes,
                                          gk::GemmArguments* args, cudaStream_t stream) {
  if (p.quantize == GemmProblemRef::Quantize::kNone) return absl::OkStatus();
  const bool is_a = p.quantize == GemmProblemRef::Quantize::kA;
  const MatrixRef& m = is_a ? p.a : p.b;
  const GemmShape& s = p.shape;
  values_ = values;
  member_bytes_ = member_bytes;
  values_type_ = m.dtype;
  format_ = is_a ? s.input_dtype : s.b_dtype();
  geometry_ = Fp8Operand{m.rows,
                         m.cols,
                         m.layout,
                         is_a ? OperandRole::kA : OperandRole::kB,
                         is_a ? s.transpose_a : s.transpose_b,
                         p.quantize_mode};
  const uint64_t elements = m.elements(), scales = ScaleCount(geometry_);
  codes_ = 0;
  scales_ = Aligned(codes_ + count * elements);
  workspace_ = Aligned(scales_ + count * scales * sizeof(float));
  flags_ = Aligned(workspace_ + gk::Fp8QuantizeWorkspaceBytes(geometry_));
  GEMM_ASSIGN_OR_RETURN(memory_, PoolMemory::Allocate(flags_ + count * sizeof(uint64_t), stream));
  count_ = count;
  gk::MatrixDesc& operand = is_a ? args->a : args->b;
  operand.ptr = memory_.bytes() + codes_;
  operand.dtype = format_;
  operand.batch_stride = count > 1 ? static_cast<int64_t>(elements) : 0;
  (is_a ? args->a_scale : args->b_scale) =
      gk::ScaleDesc{p.quantize_mode, reinterpret_cast<const float*>(memory_.bytes() + scales_)};
  return absl::OkStatus();
}

std::string PartnerQuantization::KernelSuffix() const {
  return geometry_.operand == OperandRole::kA ? "+quantize_a" : "+quantize_b";
}

absl::Status PartnerQuantization::Enqueue(cudaStream_t stream, uint64_t* host_flags) const {
  const uint64_t elements = geometry_.rows * geometry_.cols, scales = ScaleCount(geometry_);
  unsigned char* base = memory_.bytes();
  for (int64_t i = 0; i < count_; ++i) {
    gk::Fp8QuantizeArgs q;
    q.values = static_cast<const unsigned char*>(values_) + i * member_bytes_;
    q.values_type = values_type_;
    q.geometry = geometry_;
    q.format = format_;
    q.codes = base + codes_ + i * elements;
    q.scales = reinterpret_cast<float*>(base + scales_) + i * scales;
    q.first_non_finite = reinterpret_cast<uint64_t*>(base + flags_) + i;
    q.workspace = base + workspace_;  // reused: the members run in stream order
    if (std::string e = gk::LaunchFp8Quantize(q, stream); !e.empty())
      return absl::InternalError(e);
  }
  return CudaStatus(cudaMemcpyAsync(host_flags, base + flags_, count_ * sizeof(uint64_t),
                                    cudaMemcpyDeviceToHost, stream),
                    "reading quantize_partner's outcome");
}

absl::Status PartnerQuantization::MemberStatus(int64_t member, int index,
                                               const uint64_t* host_flags) const {
  const uint64_t bad = host_flags[member];
  if (bad == kQuantizeOk) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "problems[", index, "].", OperandName(geometry_.operand), ".data: element ", bad,
      " (in storage order) is NaN or infinite: quantize_partner quantizes only finite values"));
}

}  // namespace gpu
}  // namespace gemm
