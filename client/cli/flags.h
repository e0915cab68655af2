// gemm_cli's flags, defined in flags.cc; each subcommand reads those it
// uses. `gemm_cli --helpfull` lists them with their help text.
#ifndef GEMM_CLIENT_CLI_FLAGS_H_
#define GEMM_CLIENT_CLI_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, replica_policy);
ABSL_DECLARE_FLAG(bool, tls);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, token);
ABSL_DECLARE_FLAG(std::string, token_file);
ABSL_DECLARE_FLAG(int64_t, deadline_ms);
ABSL_DECLARE_FLAG(int, max_attempts);
ABSL_DECLARE_FLAG(uint64_t, m);
ABSL_DECLARE_FLAG(uint64_t, n);
ABSL_DECLARE_FLAG(uint64_t, k);
ABSL_DECLARE_FLAG(std::string, dtype);
ABSL_DECLARE_FLAG(std::string, b_dtype);
ABSL_DECLARE_FLAG(std::string, scale);
ABSL_DECLARE_FLAG(std::string, out_dtype);
ABSL_DECLARE_FLAG(bool, transpose_a);
ABSL_DECLARE_FLAG(bool, transpose_b);
ABSL_DECLARE_FLAG(std::string, layout);
ABSL_DECLARE_FLAG(std::string, out_layout);
ABSL_DECLARE_FLAG(double, alpha);
ABSL_DECLARE_FLAG(double, beta);
ABSL_DECLARE_FLAG(bool, allow_tf32);
ABSL_DECLARE_FLAG(int, batch);
ABSL_DECLARE_FLAG(bool, deterministic);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(int, concurrency);
ABSL_DECLARE_FLAG(double, duration_s);
ABSL_DECLARE_FLAG(int64_t, requests);
ABSL_DECLARE_FLAG(bool, resident_b);
ABSL_DECLARE_FLAG(int64_t, verify_every);
ABSL_DECLARE_FLAG(int64_t, max_consecutive_failures);
ABSL_DECLARE_FLAG(bool, stream);
ABSL_DECLARE_FLAG(bool, shared_memory);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(std::string, sizes);
ABSL_DECLARE_FLAG(uint64_t, max_client_bytes);

#endif  // GEMM_CLIENT_CLI_FLAGS_H_
