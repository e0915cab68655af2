// Parameters of the TMA tensor map for one GEMM operand, computed in plain C++
// so the CPU tests check them; the .cu side only hands them to
// cuTensorMapEncodeTiled.
//
// An operand is a batch of 2-D matrices with a contiguous dimension (`inner`,
// unit stride) and a strided one (`outer`, stride `ld` elements); the batch is
// the third tensor dimension. A batch stride of 0 (broadcast) becomes a batch
// extent of 1 and the kernel reads batch coordinate 0.
#pragma once

#include <cstdint>
#include <string>

namespace gemm_kernels {

struct TmaOperandParams {
  int rank = 3;
  uint64_t dims[3] = {0, 0, 0};           // elements, innermost first
  uint64_t strides_bytes[2] = {0, 0};     // of dims 1 and 2
  uint32_t box[3] = {0, 0, 1};            // elements
  bool broadcast_batch = false;
};

// Fills `out` and returns true, or returns false with `why` set when TMA cannot
// address the operand (alignment, sizes). `box_inner` * elem_bytes must be
// <= 128 (the 128-byte swizzle span).
bool MakeTmaOperandParams(int64_t inner, int64_t outer, int64_t ld, int64_t batch,
                          int64_t batch_stride, int elem_bytes, const void* base,
                          int box_inner, int box_outer, TmaOperandParams* out,
                          std::string* why);

}  // namespace gemm_kernels
