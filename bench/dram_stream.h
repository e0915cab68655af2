// A kernel that only moves bytes (see dram_stream.cu), behind a plain C++
// header: the DRAM floor of a GEMM with the same traffic.
#pragma once

#include <cstddef>
#include <string>

namespace gemm_bench {

// Enqueues one pass that reads `read_bytes` from `in` and writes
// `write_bytes` to `out` (both multiples of 16, 16-byte aligned) with
// `blocks` blocks of 512 threads. Returns "" or the CUDA error.
std::string LaunchStream(const void* in, size_t read_bytes, void* out, size_t write_bytes,
                         int blocks, void* stream);

// The same traffic with reads and writes interleaved: reads 2 x `write_bytes`
// from `in` and writes `write_bytes` to `out`.
std::string LaunchMixedStream(const void* in, void* out, size_t write_bytes, int blocks,
                              void* stream);

}  // namespace gemm_bench
