// service_portfolio_bench: the kernel portfolio through the service under
// load. One in-process server on the CUDA backend at a time, under each
// --kernel_policy in turn (table: the tuning table's choice per shape class;
// heuristic: our kernels alone; cublas: every launch through cuBLAS), runs
// the same closed loop: --concurrency requests in flight, each one problem
// of a mixed list of shapes, A and B registered once as resident matrices
// and results kept on the server (keep_results, released as they arrive),
// so that almost no bytes cross gRPC and the GPU is the bottleneck. Each
// policy runs --seconds after --warmup_seconds (long enough for the card to
// settle at its power cap), for --rounds rounds in the order given, so slow
// drifts hit every policy alike. Prints TFLOP/s per round, the median per
// policy, the ratios to the table policy, and which kernels ran per shape.
//
// Usage: service_portfolio_bench --tuning_table=FILE [--policies=table,heuristic,cublas]
//        [--shapes=bf16:4096x4096x4096,...] [--concurrency=64] [--seconds=6]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "common/proto_enums.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/tuning/tuning_table.h"
#include "service/cuda/portfolio_policy.h"
#include "service/exec/cuda_executor.h"
#include "service/server.h"

ABSL_FLAG(std::string, tuning_table, "kernels/tuning/tables/nvidia_h200.table",
          "the table the table policy loads");
ABSL_FLAG(std::string, policies, "table,heuristic,cublas", "kernel policies, in run order");
ABSL_FLAG(std::string, shapes,
          "bf16:4096x4096x4096,fp16:4096x4096x4096,tf32:4096x4096x4096,bf16:3072x3072x3072,"
          "bf16:4224x4224x4224,bf16:1920x1920x8192,bf16:8192x8192x8192,bf16:7x8192x8192,"
          "bf16:1024x1024x1024",
          "DTYPE:MxNxK, comma-separated (bf16, fp16, fp32, tf32); A row-major, B transposed "
          "(K-major), D row-major, as the committed table's classes");
ABSL_FLAG(int, concurrency, 64, "requests in flight");
ABSL_FLAG(double, seconds, 6.0, "measured seconds per policy and round");
ABSL_FLAG(double, warmup_seconds, 2.0, "seconds of load before each measurement");
ABSL_FLAG(int, rounds, 2, "rounds over the policies");
ABSL_FLAG(int, cuda_streams, gemm::CudaExecutor::Options().streams, "the server's lanes");

namespace gemm {
namespace {

struct Shape {
  std::string text;
  v1::DataType dtype = v1::DATA_TYPE_BF16;
  bool tf32 = false;
  uint64_t m = 0, n = 0, k = 0;
  double flops() const { return 2.0 * m * n * k; }
};

absl::StatusOr<std::vector<Shape>> ParseShapes(const std::string& list) {
  std::vector<Shape> out;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    std::vector<std::string> parts = absl::StrSplit(item, ':');
    if (parts.size() != 2) return absl::InvalidArgumentError("shapes: want DTYPE:MxNxK");
    Shape s;
    s.text = std::string(item);
    if (parts[0] == "bf16") {
      s.dtype = v1::DATA_TYPE_BF16;
    } else if (parts[0] == "fp16") {
      s.dtype = v1::DATA_TYPE_FP16;
    } else if (parts[0] == "fp32" || parts[0] == "tf32") {
      s.dtype = v1::DATA_TYPE_FP32;
      s.tf32 = parts[0] == "tf32";
    } else {
      return absl::InvalidArgumentError("shapes: dtype \"" + parts[0] + "\" is not one of bf16, fp16, fp32, tf32");
    }
    std::vector<std::string> dims = absl::StrSplit(parts[1], 'x');
    if (dims.size() != 3 || !absl::SimpleAtoi(dims[0], &s.m) || !absl::SimpleAtoi(dims[1], &s.n) ||
        !absl::SimpleAtoi(dims[2], &s.k) || s.m == 0 || s.n == 0 || s.k == 0)
      return absl::InvalidArgumentError("shapes: \"" + parts[1] + "\" is not MxNxK");
    out.push_back(s);
  }
  return out;
}

std::string RandomBytes(size_t elements, v1::DataType t, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(elements);
  for (float& v : values) v = dist(*rng);
  const DType type = FromProto(t).value();
  std::string out(elements * SizeOf(type), '\0');
  FromFloat(type, values.data(), out.data(), elements);
  return out;
}

absl::StatusOr<std::string> Register(v1::GemmService::Stub& stub, v1::DataType t, uint64_t rows,
                                     uint64_t cols, std::mt19937* rng) {
  v1::RegisterMatrixRequest r;
  r.set_dtype(t);
  r.set_rows(rows);
  r.set_cols(cols);
  r.set_layout(v1::LAYOUT_ROW_MAJOR);
  r.set_data(RandomBytes(rows * cols, t, rng));
  grpc::ClientContext ctx;
  v1::RegisterMatrixResponse response;
  grpc::Status st = stub.RegisterMatrix(&ctx, r, &response);
  if (!st.ok()) return absl::UnavailableError("RegisterMatrix: " + st.error_message());
  return response.handle();
}

struct RunResult {
  double tflops = 0;
  double requests_per_s = 0;
  int errors = 0;
  std::string first_error;
  std::map<std::string, std::set<std::string>> kernels;  // shape -> kernels that ran
  std::string policy_line;                               // the server's own description
};

// Closed loop over `requests` (round-robin) with `concurrency` in flight:
// each answer's kept result is released and the next request goes out.
RunResult Load(v1::GemmService::Stub& stub, const std::vector<v1::GemmRequest>& requests,
               const std::vector<Shape>& shapes, int concurrency, double warmup, double seconds) {
  RunResult r;
  absl::Mutex mu;
  std::atomic<bool> measuring{false}, stop{false};
  std::atomic<long> next{0}, in_flight{0}, releases{0};
  double flops = 0;
  long completed = 0;
  absl::Notification drained;
  std::function<void()> start_one = [&] {
    const size_t i = static_cast<size_t>(next.fetch_add(1)) % requests.size();
    in_flight.fetch_add(1);
    auto ctx = std::make_shared<grpc::ClientContext>();
    auto reply = std::make_shared<v1::GemmResponse>();
    stub.async()->Gemm(ctx.get(), &requests[i], reply.get(), [&, ctx, reply, i](grpc::Status st) {
      {
        absl::MutexLock lock(&mu);
        if (!st.ok() && r.errors++ == 0) r.first_error = st.error_message();
        if (st.ok()) r.kernels[shapes[i].text].insert(reply->kernel());
        if (st.ok() && measuring.load()) {
          flops += shapes[i].flops();
          ++completed;
        }
      }
      for (const v1::GemmResult& result : reply->results()) {
        if (result.handle().empty()) continue;
        releases.fetch_add(1);
        auto rctx = std::make_shared<grpc::ClientContext>();
        auto req = std::make_shared<v1::ReleaseMatrixRequest>();
        auto rep = std::make_shared<v1::ReleaseMatrixResponse>();
        req->set_handle(result.handle());
        stub.async()->ReleaseMatrix(rctx.get(), req.get(), rep.get(),
                                    [&, rctx, req, rep](grpc::Status) { releases.fetch_sub(1); });
      }
      if (!stop.load()) start_one();
      if (in_flight.fetch_sub(1) == 1 && stop.load()) drained.Notify();
    });
  };
  for (int i = 0; i < concurrency; ++i) start_one();
  absl::SleepFor(absl::Seconds(warmup));
  measuring.store(true);
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(seconds));
  measuring.store(false);
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - t0);
  stop.store(true);
  drained.WaitForNotification();
  while (releases.load() > 0) absl::SleepFor(absl::Milliseconds(5));
  absl::MutexLock lock(&mu);
  r.tflops = flops / elapsed / 1e12;
  r.requests_per_s = completed / elapsed;
  return r;
}

absl::StatusOr<RunResult> RunPolicy(gpu::KernelPolicy policy,
                                    std::shared_ptr<const gemm_kernels::tuning::TuningTable> table,
                                    const std::vector<Shape>& shapes) {
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.backend = "cuda";
  o.cuda.calibrate = false;
  o.cuda.streams = absl::GetFlag(FLAGS_cuda_streams);
  o.cuda.portfolio.policy = policy;
  o.cuda.portfolio.table = std::move(table);
  o.cuda.portfolio.table_path = absl::GetFlag(FLAGS_tuning_table);
  // Room for every operand and for a kept result per request in flight
  // (8192^2 bf16 is 128 MiB): the limits must not refuse the load.
  o.limits.max_resident_bytes = uint64_t{64} << 30;
  o.limits.max_inflight_bytes = uint64_t{64} << 30;
  o.limits.max_queued_requests = 4096;
  auto server = GemmServer::Start(o);
  if (!server.ok()) return server.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  auto stub = v1::GemmService::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials(), args));
  std::mt19937 rng(7);
  std::vector<v1::GemmRequest> requests;
  for (const Shape& s : shapes) {
    absl::StatusOr<std::string> a = Register(*stub, s.dtype, s.m, s.k, &rng);
    if (!a.ok()) return a.status();
    absl::StatusOr<std::string> b = Register(*stub, s.dtype, s.n, s.k, &rng);
    if (!b.ok()) return b.status();
    v1::GemmRequest request;
    request.set_keep_results(true);
    v1::GemmProblem* p = request.add_problems();
    p->set_m(s.m);
    p->set_n(s.n);
    p->set_k(s.k);
    p->set_input_dtype(s.dtype);
    p->set_allow_tf32(s.tf32);
    p->set_transpose_b(true);
    p->mutable_a()->set_handle(*a);
    p->mutable_b()->set_handle(*b);
    requests.push_back(request);
  }
  RunResult r = Load(*stub, requests, shapes, absl::GetFlag(FLAGS_concurrency),
                     absl::GetFlag(FLAGS_warmup_seconds), absl::GetFlag(FLAGS_seconds));
  for (const std::string& line : (*server)->backend().kernels)
    if (line.rfind("kernel policy", 0) == 0) r.policy_line = line;
  (*server)->Shutdown(absl::Seconds(30));
  return r;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

int Main() {
  if (CudaExecutor::DeviceCount() == 0) {
    std::fprintf(stderr, "service_portfolio_bench: no CUDA device visible\n");
    return 1;
  }
  absl::StatusOr<std::vector<Shape>> shapes = ParseShapes(absl::GetFlag(FLAGS_shapes));
  if (!shapes.ok()) {
    std::fprintf(stderr, "--%s\n", std::string(shapes.status().message()).c_str());
    return 2;
  }
  std::vector<gpu::KernelPolicy> policies;
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_policies), ',')) {
    absl::StatusOr<gpu::KernelPolicy> policy = gpu::ParseKernelPolicy(p, "--policies");
    if (!policy.ok()) {
      std::fprintf(stderr, "%s\n", std::string(policy.status().message()).c_str());
      return 2;
    }
    policies.push_back(*policy);
  }
  auto table = gemm_kernels::tuning::ReadTuningTable(absl::GetFlag(FLAGS_tuning_table));
  if (!table.ok()) {
    std::fprintf(stderr, "--tuning_table: %s\n", std::string(table.status().message()).c_str());
    return 2;
  }
  auto shared_table = std::make_shared<const gemm_kernels::tuning::TuningTable>(*std::move(table));
  std::printf("service_portfolio_bench: %zu shapes, %d in flight, %.1f s (after %.1f s) per "
              "policy, %d round(s); operands resident, results kept and released\n",
              shapes->size(), absl::GetFlag(FLAGS_concurrency), absl::GetFlag(FLAGS_seconds),
              absl::GetFlag(FLAGS_warmup_seconds), absl::GetFlag(FLAGS_rounds));
  std::printf("shapes: %s\n", absl::GetFlag(FLAGS_shapes).c_str());
  std::map<gpu::KernelPolicy, std::vector<double>> tflops;
  std::map<gpu::KernelPolicy, RunResult> last;
  int failures = 0;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (gpu::KernelPolicy p : policies) {
      absl::StatusOr<RunResult> r = RunPolicy(p, shared_table, *shapes);
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", gpu::KernelPolicyName(p), r.status().ToString().c_str());
        return 1;
      }
      std::printf("round %d %-9s %8.1f TFLOP/s %8.1f req/s %s%s\n", round + 1,
                  gpu::KernelPolicyName(p), r->tflops, r->requests_per_s,
                  r->errors ? "errors: " : "", r->errors ? r->first_error.c_str() : "");
      std::fflush(stdout);
      failures += r->errors;
      tflops[p].push_back(r->tflops);
      last[p] = *std::move(r);
    }
  }
  std::printf("\n%-10s %12s", "policy", "median TF/s");
  const bool has_table = tflops.count(gpu::KernelPolicy::kTable) > 0;
  if (has_table) std::printf(" %14s", "table / this");
  std::printf("\n");
  const double table_median = has_table ? Median(tflops[gpu::KernelPolicy::kTable]) : 0;
  for (gpu::KernelPolicy p : policies) {
    if (tflops[p].size() < static_cast<size_t>(absl::GetFlag(FLAGS_rounds))) continue;
    const double m = Median(tflops[p]);
    std::printf("%-10s %12.1f", gpu::KernelPolicyName(p), m);
    if (has_table) std::printf(" %13.3fx", m > 0 ? table_median / m : 0);
    std::printf("\n");
    tflops[p].clear();  // a policy listed twice prints once
  }
  for (const auto& [p, r] : last) {
    std::printf("\n%s: %s\n", gpu::KernelPolicyName(p), r.policy_line.c_str());
    for (const auto& [shape, kernels] : r.kernels)
      std::printf("  %-24s %s\n", shape.c_str(), absl::StrJoin(kernels, " | ").c_str());
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gemm::Main();
}
