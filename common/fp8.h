// FP8 (OCP 8-bit floating point) on the host: exact encode and decode of
// e4m3 ("e4m3fn": bias 7, no infinities, NaN = S.1111.111, largest 448) and
// e5m2 (bias 15, IEEE-style infinities and NaNs, largest 57344), the layout
// of the fp32 scales beside an FP8 operand, and the one quantization rule the
// server and the client library share.
//
// Plain C++ with no dependency beyond common/types.h, so that the CPU
// backend, the server's quantize-on-register, the client's helper and the
// tests all run this same code.
//
// The scale contract (gemm.v1 documents it for clients): the real value of
// an FP8 element is its FP8 value times its scale, and
//   D = alpha * sum_k (qa[i,k] * sa(i,k)) * (qb[k,j] * sb(k,j)) + beta * C
// where i < M indexes rows of op(A), j < N columns of op(B), k < K.
//   kTensor:  one scale for the operand.
//   kChannel: A: M scales, one per row i of op(A); B: N, one per column j.
//   kBlock:   any K, in KB = ceil(K/128) blocks of 128 (kFp8BlockK) along
//             K, the last one partial where K % 128 != 0 (it holds only the
//             real elements: its amax is over them). A: M x KB, row-major,
//             the scale of (i, k) at i * KB + k/128 (1 x 128 blocks).
//             B: KB x ceil(N/128), row-major, the scale of (k, j) at
//             (k/128) * ceil(N/128) + j/128 (128 x 128 blocks).
//
// Quantization of a group (the tensor, a channel, a block):
//   amax = max |x| over the group; scale = fp32(amax / FMT_MAX), 1 where
//   amax is 0 (and at least the smallest positive fp32, so that a tiny
//   group's scale never underflows to 0); q = round-to-nearest-even of the
//   exact quotient x / scale, saturated to +-FMT_MAX. Finite input never
//   gives NaN or infinity; non-finite input is refused.
#ifndef GEMM_COMMON_FP8_H_
#define GEMM_COMMON_FP8_H_

#include <cstdint>

#include "common/fp8_rule.h"
#include "common/types.h"

namespace gemm {

// ---- Element codec ----------------------------------------------------

// Fp8Max and FloatToFp8 (one code from a double) are in common/fp8_rule.h.

// The value of an FP8 code (exact in fp32): NaN for e4m3's 0x7f/0xff and
// e5m2's NaN codes, +-infinity for e5m2's 0x7c/0xfc.
float Fp8ToFloat(uint8_t code, DType format);

// n codes to fp32 (`dst` may not alias `src`).
void Fp8ToFloatN(const uint8_t* src, DType format, float* dst, uint64_t n);

// ---- Scales -------------------------------------------------------------

// ScaleMode and ScaleModeName are in common/types.h; OperandRole, Fp8Operand,
// kFp8BlockK, Fp8KBlocks, ScaleCount, ScaleIndex and ScaleForAmax in
// common/fp8_rule.h.
const char* OperandName(OperandRole operand);   // "a", "b"

// How to quantize a matrix that will serve as `operand` (transposed or
// not): the gemm.v1 Quantization of RegisterMatrix / BeginUpload, and the
// client's QuantizeToFp8.
struct Fp8Quantization {
  DType format = DType::kFp8E4m3;
  ScaleMode mode = ScaleMode::kTensor;
  OperandRole operand = OperandRole::kA;
  bool transposed = false;
};

// Reads scale `i` of little-endian fp32 scales at `scales` (may be unaligned).
float ScaleAt(const void* scales, uint64_t i);

// ---- Quantization -------------------------------------------------------

// Quantizes `values` (g.rows x g.cols floats in g.layout) to `format`:
// writes the codes (same layout) to `codes` and ScaleCount(g) scales to
// `scales`. Returns the index (into `values`) of the first non-finite value,
// in which case nothing is defined, or kQuantizeOk (common/fp8_rule.h).
uint64_t QuantizeFp8(const float* values, const Fp8Operand& g, DType format, uint8_t* codes,
                     float* scales);

// Real values of an FP8 operand: code * scale, in fp32, same layout as
// `codes`. `scales` as ScaleAt reads them (ScaleCount(g) of them).
void DequantizeFp8(const uint8_t* codes, DType format, const Fp8Operand& g, const void* scales,
                   float* out);

}  // namespace gemm

#endif  // GEMM_COMMON_FP8_H_
