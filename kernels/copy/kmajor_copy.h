// Copies an operand into K-major order on the GPU (see KMajorCopy in
// kernels/problem.h): per batch member, element (r, kk) of a `rows` x k
// operand moves to dst[r * ld_copy + kk]. The transposing copies read an
// operand whose rows index is contiguous (src[kk * ld + r]); the re-pitching
// copy reads one that is K-major already but whose row pitch or batch stride
// is off TMA's 16-byte grid (src[r * ld + kk]). Plain C++ header; the stream
// is an opaque cudaStream_t.
#pragma once

#include <cstdint>
#include <string>

namespace gemm_kernels {

// Each enqueues the copy of `members` batch members (source member b at
// src + b * batch_stride, destination at dst + b * rows * ld_copy, in
// elements) and returns the launch error, or an empty string.
std::string LaunchKMajorCopyF32(const float* src, int64_t ld, int64_t batch_stride, int64_t rows,
                                int64_t k, int64_t members, float* dst, int64_t ld_copy,
                                void* stream);
std::string LaunchRepitchCopyF32(const float* src, int64_t ld, int64_t batch_stride, int64_t rows,
                                 int64_t k, int64_t members, float* dst, int64_t ld_copy,
                                 void* stream);
// 1-byte elements (FP8 codes).
std::string LaunchKMajorCopyU8(const uint8_t* src, int64_t ld, int64_t batch_stride, int64_t rows,
                               int64_t k, int64_t members, uint8_t* dst, int64_t ld_copy,
                               void* stream);
std::string LaunchRepitchCopyU8(const uint8_t* src, int64_t ld, int64_t batch_stride, int64_t rows,
                                int64_t k, int64_t members, uint8_t* dst, int64_t ld_copy,
                                void* stream);
// 2-byte elements (bf16, fp16), moved as their bits.
std::string LaunchKMajorCopyU16(const uint16_t* src, int64_t ld, int64_t batch_stride,
                                int64_t rows, int64_t k, int64_t members, uint16_t* dst,
                                int64_t ld_copy, void* stream);
std::string LaunchRepitchCopyU16(const uint16_t* src, int64_t ld, int64_t batch_stride,
                                 int64_t rows, int64_t k, int64_t members, uint16_t* dst,
                                 int64_t ld_copy, void* stream);

}  // namespace gemm_kernels
