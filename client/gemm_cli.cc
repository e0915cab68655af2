// gemm_cli: talks to a gemm.v1 server.
//
//   gemm_cli info                       server, devices, peak rates, limits
//   gemm_cli run   --m=512 --dtype=fp16  one request on random data, checked
//                                        against a float64 reference
//   gemm_cli bench --concurrency=16      load generator: requests/s, GFLOP/s,
//                                        MB/s, latency percentiles
//
// Exit status: 0 on success, 1 when a result is wrong, 2 on a usage error or
// a size over a limit (refused before anything is allocated or sent), 3 when
// a call to the server failed. Each subcommand is in client/cli/.
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "client/cli/commands.h"

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gemm_cli info|run|bench [flags]\n"
      "  info   prints the server's backend, devices, peak rates and limits\n"
      "  run    one request on random data, checked against a float64 reference\n"
      "  bench  a load generator with --concurrency requests in flight");
  // Abseil's --help lists the flags of files named after the program; the
  // CLI's are in client/cli/flags.cc.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "client/cli/");
  };
  absl::SetFlagsUsageConfig(usage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string command = args.size() >= 2 ? args[1] : "";
  if (args.size() > 2) {
    absl::FPrintF(stderr, "unexpected argument \"%s\"\n", args[2]);
    return gemm::cli::kExitError;
  }
  if (command == "info") return gemm::cli::Info();
  if (command == "run") return gemm::cli::Run();
  if (command == "bench") return gemm::cli::Bench();
  absl::FPrintF(stderr, "%s\n", absl::ProgramUsageMessage());
  return gemm::cli::kExitError;
}
