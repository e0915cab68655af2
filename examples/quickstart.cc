// The README's client example as a complete program: connects to a
// gemm_server, multiplies a small fp32 problem through gemm::Client, checks
// the result against a naive loop on the host and prints it.
//
//   quickstart --target=localhost:50051
//   quickstart localhost:50051
//
// Exit status: 0 when every element matches, 1 on a mismatch or an error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/gemm_client.h"
#include "client/matrix_view.h"

ABSL_FLAG(std::string, target, "localhost:50051", "gemm_server address, host:port");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "quickstart: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string target = args.size() > 1 ? args[1] : absl::GetFlag(FLAGS_target);

  // Two row-major fp32 matrices: A is m x k, B is k x n. Small integers, so
  // the products and their sums are exact in fp32.
  const uint64_t m = 4, n = 3, k = 5;
  std::vector<float> a_data(m * k), b_data(k * n);
  for (uint64_t i = 0; i < a_data.size(); ++i) a_data[i] = static_cast<float>(i % 7) - 3.0f;
  for (uint64_t i = 0; i < b_data.size(); ++i) b_data[i] = static_cast<float>(i % 5) - 2.0f;

  // [readme-example-begin]
  gemm::ClientOptions options;
  options.target = target;  // "localhost:50051", or "dns:///gemm.example:50051" (round-robin)
  absl::StatusOr<std::unique_ptr<gemm::Client>> client = gemm::Client::Create(options);
  if (!client.ok()) return Fail(client.status());

  gemm::MatrixView a(a_data.data(), /*rows=*/m, /*cols=*/k);  // const float*: fp32, row-major
  gemm::MatrixView b(b_data.data(), k, n);
  gemm::v1::GemmRequest request;
  absl::Status added = gemm::AddProblem(&request, a, b);  // D = A * B; copies the bytes once
  if (!added.ok()) return Fail(added);

  absl::StatusOr<gemm::v1::GemmResponse> response = (*client)->Gemm(request);
  if (!response.ok()) return Fail(response.status());
  absl::StatusOr<std::vector<float>> d = gemm::ReadResult(response->results(0));  // m x n, row-major
  if (!d.ok()) return Fail(d.status());
  // [readme-example-end]

  if (d->size() != m * n) {
    std::fprintf(stderr, "quickstart: %zu result elements, want %llu\n", d->size(),
                 static_cast<unsigned long long>(m * n));
    return 1;
  }
  int mismatches = 0;
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t j = 0; j < n; ++j) {
      double want = 0;
      for (uint64_t p = 0; p < k; ++p) want += double{a_data[i * k + p]} * b_data[p * n + j];
      const float got = (*d)[i * n + j];
      if (std::fabs(got - want) > 1e-5 * (1.0 + std::fabs(want))) ++mismatches;
      std::printf("%8.1f%s", got, j + 1 == n ? "\n" : " ");
    }
  }
  std::printf("backend %s, kernel %s: %s\n", response->backend().c_str(),
              response->kernel().c_str(), mismatches == 0 ? "OK" : "MISMATCH");
  return mismatches == 0 ? 0 : 1;
}
