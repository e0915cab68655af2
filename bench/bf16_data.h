// Input data and checks shared by the bf16 kernel benchmarks
// (schedule_bench, schedule_sweep): random device buffers, rotating input
// sets, the relative difference of two outputs, case filters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gemm_bench {

// A device buffer (cudaMalloc, at least 8 elements) of `elems` random bf16
// values in [-1, 1), never all zero, copied from a 64M-value device pool at
// `seed`-dependent offsets (the pool is made on first use). nullptr on a
// CUDA error.
void* RandomBf16Buffer(int64_t elems, uint64_t seed);

// Input sets to rotate over so that a case whose set takes `set_bytes`
// works on at least 4x the L2 of `l2_bytes` (1 to 16).
int RotatingSets(size_t set_bytes, size_t l2_bytes);

// ||x - y|| / ||y|| over two bf16 device arrays of `elems` values; NaN when
// x holds a non-finite value.
double RelDiffBf16(const void* x, const void* y, int64_t elems);

// The M of each of `count` grouped problems, uniform in [m_lo, m_hi], drawn
// from `seed` (the grouped cases: schedule_bench times them,
// schedule_sweep "clock grouped" stamps the same lists).
std::vector<int> GroupedRows(int count, int m_lo, int m_hi, uint64_t seed);

// True when no filter arguments were given (argc < 2) or `name` contains one.
bool CaseSelected(const char* name, int argc, char** argv);

}  // namespace gemm_bench
