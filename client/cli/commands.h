// gemm_cli's subcommands and exit statuses. Each subcommand reads its flags
// (client/cli/flags.h) and returns the process's exit status.
#ifndef GEMM_CLIENT_CLI_COMMANDS_H_
#define GEMM_CLIENT_CLI_COMMANDS_H_

namespace gemm::cli {

// A result differed from its reference beyond tolerance.
constexpr int kExitMismatch = 1;
// Usage errors and sizes over a limit: nothing was sent.
constexpr int kExitError = 2;
// A call to the server failed.
constexpr int kExitRpc = 3;

// `info`: the server's backend, devices, peak rates and limits.
int Info();
// `run`: one request on random data, checked against a float64 reference.
int Run();
// `bench`: a load generator with --concurrency requests in flight.
int Bench();

}  // namespace gemm::cli

#endif  // GEMM_CLIENT_CLI_COMMANDS_H_
