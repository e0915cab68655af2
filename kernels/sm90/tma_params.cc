#include "kernels/sm90/tma_params.h"

namespace gemm_kernels {

namespace {
constexpr uint64_t kMaxStride = uint64_t{1} << 40;  // TMA global strides are < 2^40 bytes
constexpr uint64_t kMaxDim = uint64_t{1} << 32;
}  // namespace

bool MakeTmaOperandParams(int64_t inner, int64_t outer, int64_t ld, int64_t batch,
                          int64_t batch_stride, int elem_bytes, const void* base,
                          int box_inner, int box_outer, TmaOperandParams* out,
                          std::string* why) {
  auto fail = [why](const char* msg) {
    if (why) *why = msg;
    return false;
  };
  if (inner < 1 || outer < 1 || batch < 1) return fail("empty operand");
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return fail("base address not 16-byte aligned");
  if (ld < inner) return fail("leading dimension smaller than the contiguous extent");
  const uint64_t ld_bytes = uint64_t(ld) * elem_bytes;
  if (ld_bytes % 16 != 0) return fail("leading dimension not a multiple of 16 bytes");
  if (ld_bytes >= kMaxStride) return fail("leading dimension too large for TMA");
  if (uint64_t(inner) >= kMaxDim || uint64_t(outer) >= kMaxDim || uint64_t(batch) >= kMaxDim)
    return fail("extent too large for TMA");
  if (box_inner * elem_bytes > 128) return fail("box wider than the 128-byte swizzle");
  if (box_inner < 1 || box_outer < 1 || box_inner > 256 || box_outer > 256)
    return fail("box extent out of range");

  TmaOperandParams p;
  p.dims[0] = uint64_t(inner);
  p.dims[1] = uint64_t(outer);
  p.box[0] = uint32_t(box_inner);
  p.box[1] = uint32_t(box_outer);
  p.box[2] = 1;
  p.strides_bytes[0] = ld_bytes;
  p.broadcast_batch = batch_stride == 0 || batch == 1;
  if (p.broadcast_batch) {
    p.dims[2] = 1;
    p.strides_bytes[1] = ld_bytes * uint64_t(outer);  // unused, but must be valid
  } else {
    const uint64_t bs_bytes = uint64_t(batch_stride) * elem_bytes;
    if (batch_stride < 0) return fail("negative batch stride");
    if (bs_bytes % 16 != 0) return fail("batch stride not a multiple of 16 bytes");
    p.dims[2] = uint64_t(batch);
    p.strides_bytes[1] = bs_bytes;
  }
  if (p.strides_bytes[1] >= kMaxStride) return fail("batch stride too large for TMA");
  *out = p;
  return true;
}

}  // namespace gemm_kernels
