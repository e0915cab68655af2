// CHECK_CUDA for the benchmark binaries' bool functions: on a CUDA error,
// prints where and what, and returns false from the enclosing function.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

#define CHECK_CUDA(expr)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (expr);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      return false;                                                                           \
    }                                                                                         \
  } while (0)
