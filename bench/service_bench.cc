// service_bench: requests/s and MB/s through the GEMM service on loopback,
// beside a plain gRPC echo service carrying the same bytes each way, in one
// run. The ratio service/echo says how much of the transport's own rate the
// service keeps; on the CPU backend large sizes are bound by the CPU's GEMM
// rate instead, which the GFLOP/s column shows. With --mix_problems it then
// sends a mixed random workload of ragged shapes and prints where its work
// ran (launches and FLOPs by kernel kind, from the server's metrics).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/kernel_path_mix.h"
#include "common/dtype.h"
#include "echo/echo_server.h"
#include "echo/v1/echo.grpc.pb.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/observe/metrics.h"
#include "service/server.h"

ABSL_FLAG(std::string, sizes, "64,128,256,512,1024", "square problem sizes");
ABSL_FLAG(std::string, concurrency, "1,4,16", "requests in flight");
ABSL_FLAG(double, seconds, 2.0, "measured time per case (after warm-up)");
ABSL_FLAG(std::string, dtype, "fp32", "fp32, fp16 or bf16");
ABSL_FLAG(int, cpu_concurrency, gemm::CpuExecutor::Options().concurrent_requests,
          "in-process server: CPU backend requests computed at once");
ABSL_FLAG(int, blas_threads, gemm::CpuExecutor::Options().blas_threads,
          "in-process server: OpenBLAS threads per GEMM (0 = one per core)");
ABSL_FLAG(std::string, backend, "auto", "in-process server: auto, cuda or cpu");
ABSL_FLAG(bool, compare_unbatched, false,
          "in-process: also run a second server that batches nothing (one request per "
          "batch) and print the batched/unbatched ratio");
ABSL_FLAG(bool, dispatch_on_arrival, gemm::BatcherOptions().dispatch_on_arrival,
          "in-process server: an idle backend gets a request from the receiving thread "
          "(gemm_server --dispatch_on_arrival)");
ABSL_FLAG(bool, stages, true,
          "in-process: after each case, the mean time per server-side stage of its Gemm "
          "requests (gemm_request_stage_seconds)");
ABSL_FLAG(int, mix_problems, 0,
          "after the size cases: this many random problems (requests of 1-4 problems, M, N, K "
          "in [1, --mix_max_size], every --mix_dtypes type, random transposes and layouts), "
          "then the launches and FLOPs of each kernel kind they made (in-process server only)");
ABSL_FLAG(int, mix_max_size, 300, "--mix_problems: largest M, N and K");
ABSL_FLAG(std::string, mix_dtypes, "bf16,fp16,tf32,fp32",
          "--mix_problems: input types drawn from (tf32 is fp32 with allow_tf32)");
ABSL_FLAG(int, mix_concurrency, 16, "--mix_problems: requests in flight");
ABSL_FLAG(bool, copy_unaligned_operands, gemm::CudaExecutor::Options().copy_unaligned_operands,
          "in-process CUDA server: gemm_server --cuda_copy_unaligned_operands");
ABSL_FLAG(std::string, target, "",
          "benchmark a running server at host:port instead of an in-process one "
          "(the echo server still runs in-process)");

namespace gemm {
namespace {

using bench::echo::v1::EchoReply;
using bench::echo::v1::EchoRequest;
using bench::echo::v1::EchoService;

// Sum and count of gemm_request_stage_seconds per stage, from a scrape.
std::map<std::string, std::pair<double, double>> StageTotals(const std::string& scrape) {
  std::map<std::string, std::pair<double, double>> out;
  for (const char* stage : kRequestStages) {
    for (const bool sum : {true, false}) {
      const std::string key = absl::StrCat("gemm_request_stage_seconds_", sum ? "sum" : "count",
                                           "{stage=\"", stage, "\"} ");
      const size_t at = scrape.find(key);
      if (at == std::string::npos) continue;
      const double v = std::strtod(scrape.c_str() + at + key.size(), nullptr);
      (sum ? out[stage].first : out[stage].second) = v;
    }
  }
  return out;
}

// The mean microseconds per stage between two StageTotals, on one line.
std::string StageMeans(const std::map<std::string, std::pair<double, double>>& before,
                       const std::map<std::string, std::pair<double, double>>& after) {
  std::string line = "         stages, mean us:";
  for (const char* stage : kRequestStages) {
    auto a = after.find(stage);
    if (a == after.end()) continue;
    auto b = before.find(stage);
    const double sum = a->second.first - (b == before.end() ? 0 : b->second.first);
    const double count = a->second.second - (b == before.end() ? 0 : b->second.second);
    if (count > 0) absl::StrAppend(&line, " ", stage, " ", absl::StrFormat("%.0f", 1e6 * sum / count));
  }
  return line;
}

struct Result {
  double requests_per_s = 0;
  double mb_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  int errors = 0;
};

// Closed loop: `concurrency` calls in flight, each completion starts the next,
// for a warm-up and then `seconds` of measurement.
template <typename Issue>
Result RunLoop(int concurrency, double seconds, double bytes_per_call, Issue issue) {
  absl::Mutex mu;
  std::vector<double> latencies_us;
  std::atomic<int> errors{0};
  std::atomic<long> completed{0};
  std::atomic<bool> measuring{false}, stop{false};
  std::atomic<int> in_flight{0};
  absl::Notification all_done;

  std::function<void()> start_one = [&] {
    in_flight.fetch_add(1);
    const absl::Time t0 = absl::Now();
    issue([&, t0](bool ok) {
      if (measuring.load()) {
        const double us = absl::ToDoubleMicroseconds(absl::Now() - t0);
        {
          absl::MutexLock lock(&mu);
          latencies_us.push_back(us);
        }
        completed.fetch_add(1);
        if (!ok) errors.fetch_add(1);
      }
      if (!stop.load()) {
        start_one();
      }
      if (in_flight.fetch_sub(1) == 1 && stop.load()) all_done.Notify();
    });
  };
  for (int i = 0; i < concurrency; ++i) start_one();
  absl::SleepFor(absl::Seconds(std::min(0.5, seconds / 2)));  // warm-up
  measuring.store(true);
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(seconds));
  measuring.store(false);
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - t0);
  stop.store(true);
  all_done.WaitForNotification();

  Result r;
  absl::MutexLock lock(&mu);
  std::sort(latencies_us.begin(), latencies_us.end());
  const double n = static_cast<double>(completed.load());
  r.requests_per_s = n / elapsed;
  r.mb_per_s = n * bytes_per_call / elapsed / 1e6;
  if (!latencies_us.empty()) {
    r.p50_us = latencies_us[latencies_us.size() / 2];
    r.p99_us = latencies_us[latencies_us.size() * 99 / 100];
  }
  r.errors = errors.load();
  return r;
}

v1::DataType ParseDType(const std::string& s) {
  if (s == "fp16") return v1::DATA_TYPE_FP16;
  if (s == "bf16") return v1::DATA_TYPE_BF16;
  return v1::DATA_TYPE_FP32;
}

// Sends the mixed workload with --mix_concurrency requests in flight, each
// completion starting the next, and prints the work of each kernel kind it
// made. Returns the number of failed requests.
int RunMix(v1::GemmService::Stub* stub, const ServiceMetrics& metrics) {
  bench::MixOptions options;
  options.problems = absl::GetFlag(FLAGS_mix_problems);
  options.max_size = absl::GetFlag(FLAGS_mix_max_size);
  options.dtypes = absl::StrSplit(absl::GetFlag(FLAGS_mix_dtypes), ',', absl::SkipEmpty());
  for (const std::string& d : options.dtypes) {
    if (d != "bf16" && d != "fp16" && d != "tf32" && d != "fp32") {
      std::fprintf(stderr, "--mix_dtypes: unknown type \"%s\" (bf16, fp16, tf32 or fp32)\n",
                   d.c_str());
      return 1;
    }
  }
  if (options.dtypes.empty()) options.dtypes = {"fp32"};
  const std::vector<v1::GemmRequest> requests = bench::RandomMixRequests(options);
  const auto before = bench::LaunchTotalsByKind(metrics.Scrape());

  std::atomic<size_t> next{0};
  std::atomic<int> errors{0}, in_flight{0};
  absl::Notification all_done;
  std::function<void()> send = [&] {
    const size_t i = next.fetch_add(1);
    if (i >= requests.size()) {
      if (in_flight.fetch_sub(1) == 1) all_done.Notify();
      return;
    }
    auto ctx = std::make_shared<grpc::ClientContext>();
    auto reply = std::make_shared<v1::GemmResponse>();
    stub->async()->Gemm(ctx.get(), &requests[i], reply.get(),
                        [ctx, reply, &errors, &send](grpc::Status st) {
                          if (!st.ok()) errors.fetch_add(1);
                          send();
                        });
  };
  const int concurrency = std::max(1, absl::GetFlag(FLAGS_mix_concurrency));
  in_flight.store(concurrency);
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < concurrency; ++i) send();
  all_done.WaitForNotification();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);

  std::printf("\nmixed workload: %d problems in %zu requests (M, N, K in [1, %d]; %s), %d in "
              "flight, %.2f s, %d failed; copy_unaligned_operands=%s\n",
              options.problems, requests.size(), options.max_size,
              absl::GetFlag(FLAGS_mix_dtypes).c_str(), concurrency, seconds, errors.load(),
              absl::GetFlag(FLAGS_copy_unaligned_operands) ? "true" : "false");
  std::printf("%s", bench::PathTable(bench::Difference(bench::LaunchTotalsByKind(metrics.Scrape()),
                                                       before))
                        .c_str());
  std::fflush(stdout);
  return errors.load();
}

int Main() {
  std::vector<int> sizes, concurrencies;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty()))
    sizes.push_back(std::stoi(std::string(s)));
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_concurrency), ','))
    concurrencies.push_back(std::stoi(std::string(s)));
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const v1::DataType dtype = ParseDType(absl::GetFlag(FLAGS_dtype));
  const DType in_type = dtype == v1::DATA_TYPE_FP16   ? DType::kFp16
                        : dtype == v1::DATA_TYPE_BF16 ? DType::kBf16
                                                      : DType::kFp32;

  auto start_server = [](bool batching) -> absl::StatusOr<std::unique_ptr<GemmServer>> {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.backend = absl::GetFlag(FLAGS_backend);
    options.cpu.concurrent_requests = absl::GetFlag(FLAGS_cpu_concurrency);
    options.cpu.blas_threads = absl::GetFlag(FLAGS_blas_threads);
    if (!batching) options.batcher.budget.max_requests = 1;
    options.batcher.dispatch_on_arrival = absl::GetFlag(FLAGS_dispatch_on_arrival);
    options.cuda.copy_unaligned_operands = absl::GetFlag(FLAGS_copy_unaligned_operands);
    return GemmServer::Start(options);
  };
  std::unique_ptr<GemmServer> gemm_server, unbatched_server;
  std::string target = absl::GetFlag(FLAGS_target);
  const bool compare = absl::GetFlag(FLAGS_compare_unbatched) && target.empty();
  if (target.empty()) {
    auto s = start_server(true);
    if (!s.ok()) {
      std::fprintf(stderr, "cannot start the server: %s\n", s.status().ToString().c_str());
      return 1;
    }
    gemm_server = std::move(*s);
    target = "127.0.0.1:" + std::to_string(gemm_server->port());
  }
  if (compare) {
    auto s = start_server(false);
    if (!s.ok()) {
      std::fprintf(stderr, "cannot start the server: %s\n", s.status().ToString().c_str());
      return 1;
    }
    unbatched_server = std::move(*s);
  }

  bench::EchoServer echo_server(1 << 30);
  const int echo_port = echo_server.port();

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  auto gemm_stub = v1::GemmService::NewStub(
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  std::unique_ptr<v1::GemmService::Stub> unbatched_stub;
  if (compare)
    unbatched_stub = v1::GemmService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(unbatched_server->port()),
        grpc::InsecureChannelCredentials(), args));
  auto echo_stub = EchoService::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(echo_port), grpc::InsecureChannelCredentials(), args));

  v1::ServerInfo info;
  {
    grpc::ClientContext ctx;
    grpc::Status st = gemm_stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
    if (!st.ok()) {
      std::fprintf(stderr, "GetServerInfo failed: %s\n", st.error_message().c_str());
      return 1;
    }
  }
  std::printf("service_bench: backend %s (%s), dtype %s, %.1f s per case\n",
              info.backend().c_str(), info.devices_size() ? info.devices(0).name().c_str() : "",
              absl::GetFlag(FLAGS_dtype).c_str(), seconds);
  std::printf("%6s %5s | %10s %9s %9s %8s | %10s %9s %9s | %7s", "size", "conc", "gemm req/s",
              "MB/s", "GFLOP/s", "p50 us", "echo req/s", "MB/s", "p50 us", "ratio");
  if (compare) std::printf(" | %10s %8s %8s", "unbat. r/s", "p50 us", "bat/unb");
  std::printf("\n");

  std::mt19937 rng(42);
  int failures = 0;
  for (int n : sizes) {
    v1::GemmRequest request;
    v1::GemmProblem* p = request.add_problems();
    p->set_m(n);
    p->set_n(n);
    p->set_k(n);
    p->set_input_dtype(dtype);
    *p->mutable_a()->mutable_data() = bench::RandomBytes(size_t(n) * n, in_type, &rng);
    *p->mutable_b()->mutable_data() = bench::RandomBytes(size_t(n) * n, in_type, &rng);
    const size_t elem = dtype == v1::DATA_TYPE_FP32 ? 4 : 2;
    const size_t reply_bytes = size_t(n) * n * elem;
    const double bytes_per_call = 2.0 * n * n * elem + reply_bytes;
    EchoRequest echo_request;
    echo_request.set_payload(bench::RandomBytes(2 * size_t(n) * n, in_type, &rng));
    echo_request.set_reply_bytes(reply_bytes);

    for (int conc : concurrencies) {
      const bool stages = absl::GetFlag(FLAGS_stages) && gemm_server != nullptr;
      const auto stages_before =
          stages ? StageTotals(gemm_server->metrics()->Scrape())
                 : std::map<std::string, std::pair<double, double>>();
      Result g = RunLoop(conc, seconds, bytes_per_call, [&](std::function<void(bool)> done) {
        auto ctx = std::make_shared<grpc::ClientContext>();
        auto reply = std::make_shared<v1::GemmResponse>();
        gemm_stub->async()->Gemm(ctx.get(), &request, reply.get(),
                                 [ctx, reply, done](grpc::Status st) { done(st.ok()); });
      });
      const std::string stage_line =
          stages ? StageMeans(stages_before, StageTotals(gemm_server->metrics()->Scrape())) : "";
      Result e = RunLoop(conc, seconds, bytes_per_call, [&](std::function<void(bool)> done) {
        auto ctx = std::make_shared<grpc::ClientContext>();
        auto reply = std::make_shared<EchoReply>();
        echo_stub->async()->Echo(ctx.get(), &echo_request, reply.get(),
                                 [ctx, reply, done](grpc::Status st) { done(st.ok()); });
      });
      const double gflops = g.requests_per_s * 2.0 * n * n * n / 1e9;
      std::printf("%6d %5d | %10.0f %9.1f %9.2f %8.0f | %10.0f %9.1f %9.0f | %7.2f", n, conc,
                  g.requests_per_s, g.mb_per_s, gflops, g.p50_us, e.requests_per_s, e.mb_per_s,
                  e.p50_us, g.requests_per_s / e.requests_per_s);
      if (compare) {
        Result u = RunLoop(conc, seconds, bytes_per_call, [&](std::function<void(bool)> done) {
          auto ctx = std::make_shared<grpc::ClientContext>();
          auto reply = std::make_shared<v1::GemmResponse>();
          unbatched_stub->async()->Gemm(ctx.get(), &request, reply.get(),
                                        [ctx, reply, done](grpc::Status st) { done(st.ok()); });
        });
        std::printf(" | %10.0f %8.0f %8.2f", u.requests_per_s, u.p50_us,
                    g.requests_per_s / u.requests_per_s);
        failures += u.errors;
      }
      std::printf("%s\n", (g.errors || e.errors) ? "  (errors!)" : "");
      if (!stage_line.empty()) std::printf("%s\n", stage_line.c_str());
      std::fflush(stdout);
      failures += g.errors + e.errors;
    }
  }
  if (absl::GetFlag(FLAGS_mix_problems) > 0) {
    if (gemm_server == nullptr) {
      std::fprintf(stderr, "--mix_problems reads the in-process server's metrics: no --target\n");
      ++failures;
    } else {
      failures += RunMix(gemm_stub.get(), *gemm_server->metrics());
    }
  }
  if (gemm_server) gemm_server->Shutdown(absl::Seconds(5));
  if (unbatched_server) unbatched_server->Shutdown(absl::Seconds(5));
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gemm::Main();
}
