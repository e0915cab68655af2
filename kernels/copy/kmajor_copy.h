// Copies an fp32 operand into K-major order on the GPU (see KMajorCopy in
// kernels/problem.h): per batch member, element (r, kk) of a `rows` x k
// operand moves from src[kk * ld + r] to dst[r * ld_copy + kk]. Plain C++
// header; the stream is an opaque cudaStream_t.
#pragma once

#include <cstdint>
#include <string>

namespace gemm_kernels {

// Enqueues the copy of `members` batch members (source member b at
// src + b * batch_stride, destination at dst + b * rows * ld_copy, in
// elements). Returns the launch error, or an empty string.
std::string LaunchKMajorCopyF32(const float* src, int64_t ld, int64_t batch_stride, int64_t rows,
                                int64_t k, int64_t members, float* dst, int64_t ld_copy,
                                void* stream);

}  // namespace gemm_kernels
