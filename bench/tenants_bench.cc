// tenants_bench: two tenants sharing one in-process server, both backlogged
// with mixed shapes, measured with fair share (a tenants file, weights
// --weight_a : 1) and without it (no tenants file: the queue is fair per
// caller only). Prints each tenant's share of the device time (the compute
// time the responses report) against its weight's share, and each tenant's
// request latency p50 / p99, for both runs.
//
// Tenant A's callers send --shapes_a, tenant B's --shapes_b (square sizes,
// picked at random per request); each tenant keeps --concurrency requests in
// flight on a connection of its own, with its own bearer token.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/dtype.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/server.h"

ABSL_FLAG(double, weight_a, 3, "tenant A's weight (tenant B's is 1)");
ABSL_FLAG(std::string, shapes_a, "128,256,512", "tenant A's square problem sizes");
ABSL_FLAG(std::string, shapes_b, "128,256,512", "tenant B's square problem sizes");
ABSL_FLAG(int, concurrency, 8, "requests each tenant keeps in flight");
ABSL_FLAG(double, seconds, 10, "measured time per run (after a 1 s warm-up)");
ABSL_FLAG(std::string, dtype, "fp32", "operand type: fp32 or bf16 (outputs in the same type)");
ABSL_FLAG(bool, resident, false,
          "operands registered once per tenant and results kept on the server (released after "
          "each response), so the device, not the transfers, is what the tenants share");
ABSL_FLAG(std::string, backend, "cpu", "in-process server: auto, cuda or cpu");
ABSL_FLAG(int, cpu_concurrency, 1, "CPU backend: requests computed at once");
ABSL_FLAG(int, blas_threads, 1, "CPU backend: OpenBLAS threads per GEMM (0 = one per core)");
ABSL_FLAG(uint32_t, batch_max_requests, 1,
          "most requests in one batch (1: the queue's order is the order they run in)");

namespace gemm {
namespace {

constexpr const char* kTokens[2] = {"tenant-a-bench-token-0123", "tenant-b-bench-token-0123"};

struct TenantResult {
  double device_s = 0;  // compute time the responses report
  std::vector<double> latency_s;
  int errors = 0;
};

std::vector<uint64_t> Sizes(const std::string& list) {
  std::vector<uint64_t> out;
  for (absl::string_view s : absl::StrSplit(list, ',')) {
    uint64_t v = 0;
    if (absl::SimpleAtoi(s, &v) && v > 0) out.push_back(v);
  }
  return out;
}

v1::GemmRequest Request(uint64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  v1::GemmRequest r;
  v1::GemmProblem* p = r.add_problems();
  p->set_m(n);
  p->set_n(n);
  p->set_k(n);
  const bool bf16 = absl::GetFlag(FLAGS_dtype) == "bf16";
  p->set_input_dtype(bf16 ? v1::DATA_TYPE_BF16 : v1::DATA_TYPE_FP32);
  p->set_output_dtype(bf16 ? v1::DATA_TYPE_BF16 : v1::DATA_TYPE_FP32);
  const gemm::DType type = bf16 ? gemm::DType::kBf16 : gemm::DType::kFp32;
  for (v1::Matrix* m : {p->mutable_a(), p->mutable_b()}) {
    std::vector<float> v(n * n);
    for (float& x : v) x = u(*rng);
    std::string bytes(v.size() * gemm::SizeOf(type), '\0');
    gemm::FromFloat(type, v.data(), bytes.data(), v.size());
    m->set_data(std::move(bytes));
    m->set_layout(v1::LAYOUT_ROW_MAJOR);
  }
  return r;
}

std::shared_ptr<grpc::Channel> Connect(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

// Registers each request's A and B as the tenant's resident matrices and
// makes the requests name them and keep their results.
absl::Status MakeResident(const std::shared_ptr<grpc::Channel>& channel, const char* token,
                          std::vector<v1::GemmRequest>* requests) {
  auto stub = v1::GemmService::NewStub(channel);
  for (v1::GemmRequest& r : *requests) {
    v1::GemmProblem* p = r.mutable_problems(0);
    for (auto [m, rows, cols] : {std::tuple{p->mutable_a(), p->m(), p->k()},
                                 std::tuple{p->mutable_b(), p->k(), p->n()}}) {
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
      v1::RegisterMatrixRequest reg;
      reg.set_dtype(p->input_dtype());
      reg.set_rows(rows);
      reg.set_cols(cols);
      reg.set_layout(m->layout());
      reg.set_data(m->data());
      v1::RegisterMatrixResponse handle;
      if (grpc::Status st = stub->RegisterMatrix(&ctx, reg, &handle); !st.ok())
        return absl::InternalError(absl::StrCat("RegisterMatrix: ", st.error_message()));
      m->set_handle(handle.handle());
    }
    r.set_keep_results(true);
  }
  return absl::OkStatus();
}

void ReleaseResults(v1::GemmService::Stub* stub, const char* token,
                    const v1::GemmResponse& response) {
  for (const v1::GemmResult& result : response.results()) {
    if (result.handle().empty()) continue;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    v1::ReleaseMatrixRequest release;
    release.set_handle(result.handle());
    v1::ReleaseMatrixResponse released;
    stub->ReleaseMatrix(&ctx, release, &released);
  }
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// One run: a fresh server (with tenants when `fair`), both tenants
// backlogged for the warm-up and the measured seconds.
absl::Status Run(bool fair, const std::string& dir, TenantResult out[2]) {
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.backend = absl::GetFlag(FLAGS_backend);
  o.cpu.concurrent_requests = absl::GetFlag(FLAGS_cpu_concurrency);
  o.cpu.blas_threads = absl::GetFlag(FLAGS_blas_threads);
  o.batcher.budget.max_requests = absl::GetFlag(FLAGS_batch_max_requests);
  o.limits.max_queued_requests = 4096;
  o.security.auth_tokens_file = dir + "/tokens";
  std::ofstream(o.security.auth_tokens_file)
      << "alice " << kTokens[0] << "\nbob " << kTokens[1] << "\n";
  if (fair) {
    auto tenants = TenantsConfig::Parse(
        absl::StrCat("tenant a caller=alice weight=", absl::GetFlag(FLAGS_weight_a),
                     "\ntenant b caller=bob weight=1\n"),
        "bench tenants");
    if (!tenants.ok()) return tenants.status();
    o.tenants = std::make_shared<const TenantsConfig>(*std::move(tenants));
  }
  auto server = GemmServer::Start(o);
  if (!server.ok()) return server.status();

  const std::vector<uint64_t> sizes[2] = {Sizes(absl::GetFlag(FLAGS_shapes_a)),
                                          Sizes(absl::GetFlag(FLAGS_shapes_b))};
  std::vector<v1::GemmRequest> requests[2];
  std::mt19937 rng(50);
  for (int t = 0; t < 2; ++t)
    for (uint64_t n : sizes[t]) requests[t].push_back(Request(n, &rng));
  const bool resident = absl::GetFlag(FLAGS_resident);
  if (resident) {
    for (int t = 0; t < 2; ++t)
      if (absl::Status st = MakeResident(Connect((*server)->port()), kTokens[t], &requests[t]);
          !st.ok())
        return st;
  }

  const absl::Time start = absl::Now();
  const absl::Time measure_from = start + absl::Seconds(1);
  const absl::Time end = measure_from + absl::Seconds(absl::GetFlag(FLAGS_seconds));
  absl::Mutex mu;
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t) {
    std::shared_ptr<grpc::Channel> channel = Connect((*server)->port());
    for (int c = 0; c < absl::GetFlag(FLAGS_concurrency); ++c) {
      callers.emplace_back([&, t, c, channel] {
        auto stub = v1::GemmService::NewStub(channel);
        std::mt19937 pick(1000 * t + c);
        std::uniform_int_distribution<size_t> which(0, requests[t].size() - 1);
        while (absl::Now() < end) {
          grpc::ClientContext ctx;
          ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kTokens[t]));
          v1::GemmResponse response;
          const absl::Time sent = absl::Now();
          const grpc::Status st = stub->Gemm(&ctx, requests[t][which(pick)], &response);
          const absl::Time done = absl::Now();
          if (st.ok() && resident) ReleaseResults(stub.get(), kTokens[t], response);
          if (sent < measure_from || done > end) continue;
          absl::MutexLock lock(&mu);
          if (!st.ok()) {
            ++out[t].errors;
            continue;
          }
          out[t].latency_s.push_back(absl::ToDoubleSeconds(done - sent));
          out[t].device_s += response.timing().compute_ns() * 1e-9;
        }
      });
    }
  }
  for (std::thread& c : callers) c.join();
  (*server)->Shutdown(absl::Seconds(5));
  return absl::OkStatus();
}

int Main() {
  const std::string dir = std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp";
  const double wa = absl::GetFlag(FLAGS_weight_a);
  if (const std::string t = absl::GetFlag(FLAGS_dtype); t != "fp32" && t != "bf16") {
    std::fprintf(stderr, "tenants_bench: --dtype must be fp32 or bf16, not \"%s\"\n", t.c_str());
    return 2;
  }
  std::printf("tenants_bench: backend %s, %s%s, tenant A weight %g (shapes %s), tenant B weight 1 "
              "(shapes %s), %d in flight each, %g s per run\n",
              absl::GetFlag(FLAGS_backend).c_str(), absl::GetFlag(FLAGS_dtype).c_str(),
              absl::GetFlag(FLAGS_resident) ? ", resident operands, kept results" : "", wa,
              absl::GetFlag(FLAGS_shapes_a).c_str(),
              absl::GetFlag(FLAGS_shapes_b).c_str(), absl::GetFlag(FLAGS_concurrency),
              absl::GetFlag(FLAGS_seconds));
  std::printf("%-16s %-7s %10s %12s %9s %9s %9s %7s\n", "run", "tenant", "requests",
              "device_share", "target", "p50_ms", "p99_ms", "errors");
  for (bool fair : {true, false}) {
    TenantResult r[2];
    if (absl::Status st = Run(fair, dir, r); !st.ok()) {
      std::fprintf(stderr, "tenants_bench: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    const double total = r[0].device_s + r[1].device_s;
    for (int t = 0; t < 2; ++t) {
      const double target = fair ? (t == 0 ? wa : 1) / (wa + 1) : 0;
      std::printf("%-16s %-7s %10zu %11.1f%% %8s %9.2f %9.2f %7d\n",
                  fair ? "fair share" : "per caller only", t == 0 ? "A" : "B",
                  r[t].latency_s.size(), total > 0 ? 100 * r[t].device_s / total : 0,
                  fair ? absl::StrCat(static_cast<int>(100 * target + 0.5), "%").c_str() : "-",
                  1e3 * Percentile(r[t].latency_s, 0.5), 1e3 * Percentile(r[t].latency_s, 0.99),
                  r[t].errors);
    }
  }
  return 0;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gemm::Main();
}
