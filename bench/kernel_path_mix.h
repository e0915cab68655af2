// A mixed random workload for the service, and where its work ran: the
// launches and FLOPs of each kernel kind, read from the server's metrics.
// service_bench --mix_problems uses it to show how much of a workload of
// real, ragged shapes leaves the tensor cores (the portable SIMT kernel).
#ifndef GEMM_BENCH_KERNEL_PATH_MIX_H_
#define GEMM_BENCH_KERNEL_PATH_MIX_H_

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gemm/v1/gemm.pb.h"

namespace gemm {
namespace bench {

// `elements` values uniform in [-1, 1) encoded as `type`, little-endian.
std::string RandomBytes(size_t elements, DType type, std::mt19937* rng);

struct MixOptions {
  int problems = 1000;
  int max_size = 300;  // M, N and K uniform in [1, max_size]
  // Input types drawn from: "bf16", "fp16", "tf32" (fp32 with allow_tf32),
  // "fp32" (strict fp32).
  std::vector<std::string> dtypes = {"bf16", "fp16", "tf32", "fp32"};
  int max_problems_per_request = 4;
  uint32_t seed = 47;
};

// Requests of 1..max_problems_per_request problems, `problems` in all, each
// with random sizes, input type, transposes, operand layouts and output
// layout, and random operand bytes (values in [-1, 1)). Matrices are packed,
// so most leading dimensions are off the 16-byte grid.
std::vector<v1::GemmRequest> RandomMixRequests(const MixOptions& options);

// Where launches ran, by kernel kind, summed over backends and GPUs.
struct PathTotals {
  double launches = 0;
  double flops = 0;
};
std::map<std::string, PathTotals> LaunchTotalsByKind(const std::string& scrape);

// after - before, kind by kind.
std::map<std::string, PathTotals> Difference(const std::map<std::string, PathTotals>& after,
                                             const std::map<std::string, PathTotals>& before);

// A markdown table: each kind's launches and FLOPs with their shares, then
// the share of launches and of FLOPs on the portable SIMT kernel.
std::string PathTable(const std::map<std::string, PathTotals>& totals);

}  // namespace bench
}  // namespace gemm

#endif  // GEMM_BENCH_KERNEL_PATH_MIX_H_
