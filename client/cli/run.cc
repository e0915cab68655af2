// gemm_cli run: one request on random data, its result checked against a
// float64 reference, with the server's timing and what each input ran as.
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/connection.h"
#include "client/cli/flags.h"
#include "client/cli/problem.h"
#include "common/dtype.h"

namespace gemm::cli {
namespace {

double Ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

int Run() {
  const uint64_t m = absl::GetFlag(FLAGS_m), n = absl::GetFlag(FLAGS_n), k = absl::GetFlag(FLAGS_k);
  absl::StatusOr<Shape> shape = FlagShape(m, n, k, /*references=*/true);
  if (!shape.ok()) return absl::FPrintF(stderr, "error: %s\n", shape.status().ToString()), kExitError;
  // Checks that need no server first, so that a zero or absurd size fails at once.
  if (absl::Status s = CheckSize(*shape, {LocalLimits(), false}); !s.ok()) {
    return absl::FPrintF(stderr, "error: %s\n", s.ToString()), kExitError;
  }
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient();
  if (!client.ok()) return absl::FPrintF(stderr, "error: %s\n", client.status().ToString()), kExitError;
  if (absl::Status s = CheckSize(*shape, FetchLimits(client->get())); !s.ok()) {
    return absl::FPrintF(stderr, "error: %s\n", s.ToString()), kExitError;
  }
  absl::StatusOr<v1::GemmRequest> request = BuildRequest(m, n, k);
  if (!request.ok()) return absl::FPrintF(stderr, "error: %s\n", request.status().ToString()), kExitError;

  const v1::GemmProblem& p0 = request->problems(0);
  absl::PrintF("problem   %dx%dx%d (MxNxK) %s -> %s, A %s%s, B %s%s, alpha %g beta %g%s, batch %d\n",
               p0.m(), p0.n(), p0.k(), Name(p0.input_dtype()), Name(p0.output_dtype()),
               absl::GetFlag(FLAGS_layout), p0.transpose_a() ? "^T" : "",
               absl::GetFlag(FLAGS_layout), p0.transpose_b() ? "^T" : "", p0.alpha(), p0.beta(),
               p0.allow_tf32() ? ", tf32 allowed" : "", request->problems_size());

  // Connect first so that the client time below is the call's alone.
  (*client)->channel()->WaitForConnected(
      absl::ToChronoTime(absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms))));
  std::unique_ptr<SharedRequests> shared = SharedOrNull(client->get(), *request, 1);
  if (shared != nullptr)
    absl::PrintF("transport shared memory, one region of %d bytes\n", shared->bytes());
  const absl::Time start = absl::Now();
  GemmResult response = (*client)->Gemm(shared != nullptr ? *shared->request(0) : *request);
  const absl::Duration wall = absl::Now() - start;
  if (!response.ok()) {
    absl::FPrintF(stderr, "error: %s\n", FlagNames(response.status()).ToString());
    return kExitRpc;
  }
  if (shared != nullptr) response = shared->WithResults(0, *response);
  if (!response.ok()) {
    absl::FPrintF(stderr, "error: %s\n", response.status().ToString());
    return kExitMismatch;
  }
  if (response->results_size() != request->problems_size()) {
    absl::FPrintF(stderr, "error: %d results for %d problems\n", response->results_size(),
                  request->problems_size());
    return kExitMismatch;
  }
  const v1::Timing& t = response->timing();
  const double flops = RequestFlops(*request);
  absl::PrintF("server    %s, backend %s, kernel %s\n", absl::GetFlag(FLAGS_target),
               response->backend(), response->kernel());
  if (response->has_reproducibility()) {
    const v1::Reproducibility& r = response->reproducibility();
    absl::PrintF("bits      fixed by %s on %s, build %s\n", r.backend(), r.device_model(),
                 r.build());
    for (int i = 0; i < r.problems_size(); ++i) {
      const v1::ProblemReproducibility& p = r.problems(i);
      absl::PrintF("          problem %d: %s tile %s, %u split(s): %s\n", i, p.kernel(),
                   p.tile().empty() ? "-" : p.tile(), p.splits(), p.reduction_order());
    }
  }
  if (response->results_size() > 0 && response->results(0).has_a_precision()) {
    const v1::GemmResult& r0 = response->results(0);
    auto precision = [](const v1::OperandPrecision& p) {
      return absl::StrCat(Name(p.dtype()), " ",
                          ScaleModeName(FromProto(p.scale_mode()).value_or(ScaleMode::kNone)),
                          " scales", p.quantized_by_server() ? " (quantized by the server)" : "");
    };
    absl::PrintF("precision A %s, B %s, accumulated in fp32\n", precision(r0.a_precision()),
                 precision(r0.b_precision()));
  }
  absl::PrintF("time      client %.3f ms | server %.3f ms = queue %.3f + transfer %.3f + compute %.3f (+ other)\n",
               absl::ToDoubleMilliseconds(wall), Ms(t.total_ns()), Ms(t.queue_ns()),
               Ms(t.transfer_ns()), Ms(t.compute_ns()));
  absl::PrintF("rate      %.2f GFLOP/s over compute, %.2f GFLOP/s over client time\n",
               t.compute_ns() > 0 ? flops / t.compute_ns() : 0.0,
               flops / absl::ToDoubleNanoseconds(wall));

  absl::StatusOr<std::vector<std::vector<double>>> refs = References(*request);
  if (!refs.ok()) return absl::FPrintF(stderr, "error: %s\n", refs.status().ToString()), kExitError;
  bool all_ok = true;
  for (int i = 0; i < request->problems_size(); ++i) {
    absl::StatusOr<Check> check = CheckResult(request->problems(i), response->results(i), (*refs)[i]);
    if (!check.ok()) {
      absl::PrintF("check [%d] FAILED: %s\n", i, check.status().ToString());
      all_ok = false;
      continue;
    }
    absl::PrintF("check [%d] relative error %.3g, tolerance %.1g: %s\n", i, check->error,
                 check->tolerance, check->ok() ? "OK" : "MISMATCH");
    all_ok = all_ok && check->ok();
  }
  return all_ok ? 0 : kExitMismatch;
}

}  // namespace gemm::cli
