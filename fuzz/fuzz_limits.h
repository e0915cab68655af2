// Limits the fuzzers validate against: the server's rules with tiny sizes, so
// that a valid input computes in microseconds and the fuzzer explores
// validation rather than arithmetic.
#ifndef GEMM_FUZZ_FUZZ_LIMITS_H_
#define GEMM_FUZZ_FUZZ_LIMITS_H_

#include "service/base/limits.h"

namespace gemm {

inline ServiceLimits FuzzLimits() {
  ServiceLimits l;
  l.max_message_bytes = 1 << 20;
  l.max_dimension = 64;
  l.max_matrix_bytes = 16 << 10;
  l.max_problems_per_request = 8;
  return l;
}

}  // namespace gemm

#endif  // GEMM_FUZZ_FUZZ_LIMITS_H_
