// Size checks of gemm_cli, made before any operand is allocated or sent: the
// flags' shape against the server's advertised limits (ServerInfo.limits)
// and against what this machine can hold. Messages name the CLI's flags.
#ifndef GEMM_CLIENT_CLI_SIZE_CHECK_H_
#define GEMM_CLIENT_CLI_SIZE_CHECK_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/gemm/v1/gemm.pb.h"

namespace gemm::cli {

// The shape the flags ask for.
struct Shape {
  uint64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  uint64_t in_bytes = 4;   // bytes per input element
  uint64_t out_bytes = 4;  // bytes per output element
  bool with_c = false;     // beta != 0: a C operand is sent too
  bool references = false; // float64 references are computed (run, --verify_every)
  // The flags that set m, n and k, for messages (a sweep sets all three
  // with --sizes).
  const char* m_flag = "--m";
  const char* n_flag = "--n";
  const char* k_flag = "--k";
};

// Used when GetServerInfo is unavailable: the widest values a gemm.v1
// server accepts at all (dimensions are int32 on the wire to the kernels).
v1::Limits LocalLimits();

// Bytes the CLI holds for `s`: the float staging of one matrix, the encoded
// operands of every problem (twice: request and its copy for checks), and
// the references. Fails with OUT_OF_RANGE when the product overflows 64 bits.
absl::StatusOr<uint64_t> ClientBytes(const Shape& s);

// OK, or INVALID_ARGUMENT (dimension 0, --batch < 1) or OUT_OF_RANGE (over
// a limit) naming the flag and the limit. `client_budget` is what this
// process may allocate (0 = unchecked). `from_server` only words the
// message: "the server's limit" or "the CLI's local limit".
absl::Status CheckShape(const Shape& s, const v1::Limits& limits, uint64_t client_budget,
                        bool from_server);

// Half of this machine's physical memory (the default client budget).
uint64_t DefaultClientBudget();

}  // namespace gemm::cli

#endif  // GEMM_CLIENT_CLI_SIZE_CHECK_H_
