// multi_gpu_bench: requests/s of a compute-bound workload on one GPU and on
// every visible GPU, in one run, with the ratio (issue 8's target: >= 1.8x on
// two GPUs).
//
// Compute-bound through gRPC means few bytes per FLOP on the wire: operands
// are registered once (RegisterMatrix, one replica per GPU, placed by the
// server on the device with the fewest resident bytes) and each request names
// them and carries back only an M x N result. Strict fp32 (the SIMT path)
// with a long K keeps the wire far below its limit.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/cuda_executor.h"
#include "service/server.h"

ABSL_FLAG(int, m, 512, "M = N of every request");
ABSL_FLAG(int, k, 262144, "K of every request");
ABSL_FLAG(int, concurrency, 16, "calls in flight");
ABSL_FLAG(int, channels, 8, "client channels (HTTP/2 connections)");
ABSL_FLAG(double, seconds, 5.0, "measured time per configuration");

namespace gemm {
namespace {

struct Result {
  double requests_per_s = 0;
  long errors = 0;
  long bad_values = 0;
};

std::string RandomFp32(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::string out(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    const float f = dist(rng);
    std::memcpy(&out[4 * i], &f, 4);
  }
  return out;
}

Result Run(const std::vector<int>& devices, int m, int k) {
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.backend = "cuda";
  o.cuda_devices = devices;
  o.cuda.calibrate = false;
  o.limits.max_message_bytes = 0x7fffffff;
  o.limits.max_matrix_bytes = uint64_t{2} << 30;
  auto server = GemmServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    std::exit(1);
  }
  const std::string target = "127.0.0.1:" + std::to_string((*server)->port());
  std::vector<std::unique_ptr<v1::GemmService::Stub>> stubs;
  for (int c = 0; c < absl::GetFlag(FLAGS_channels); ++c) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(0x7fffffff);
    args.SetMaxSendMessageSize(0x7fffffff);
    args.SetInt("gemm.bench.channel", c);  // distinct arguments: distinct connections
    stubs.push_back(v1::GemmService::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  // One replica of A (m x k) and B (k x m) per GPU. The server puts each new
  // matrix on the device with the fewest resident bytes, so registering every
  // A and then every B gives replica r both of its operands on device r (a
  // request whose operands sit on two devices is refused).
  const std::string a = RandomFp32(size_t(m) * k, 1), b = RandomFp32(size_t(k) * m, 2);
  std::vector<std::pair<std::string, std::string>> replicas(devices.size());
  for (int which = 0; which < 2; ++which) {
    for (size_t r = 0; r < devices.size(); ++r) {
      v1::RegisterMatrixRequest req;
      req.set_dtype(v1::DATA_TYPE_FP32);
      req.set_rows(which == 0 ? m : k);
      req.set_cols(which == 0 ? k : m);
      req.set_data(which == 0 ? a : b);
      v1::RegisterMatrixResponse resp;
      grpc::ClientContext ctx;
      grpc::Status st = stubs[0]->RegisterMatrix(&ctx, req, &resp);
      if (!st.ok()) {
        std::fprintf(stderr, "RegisterMatrix: %s\n", st.error_message().c_str());
        std::exit(1);
      }
      (which == 0 ? replicas[r].first : replicas[r].second) = resp.handle();
    }
  }

  std::atomic<long> done{0}, errors{0}, bad{0};
  std::atomic<bool> measuring{false}, stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < absl::GetFlag(FLAGS_concurrency); ++t) {
    threads.emplace_back([&, t] {
      v1::GemmRequest req;
      v1::GemmProblem* p = req.add_problems();
      p->set_m(m);
      p->set_n(m);
      p->set_k(k);
      p->set_input_dtype(v1::DATA_TYPE_FP32);
      p->mutable_a()->set_handle(replicas[t % replicas.size()].first);
      p->mutable_b()->set_handle(replicas[t % replicas.size()].second);
      auto* stub = stubs[t % stubs.size()].get();
      while (!stop.load()) {
        grpc::ClientContext ctx;
        v1::GemmResponse resp;
        grpc::Status st = stub->Gemm(&ctx, req, &resp);
        if (!measuring.load()) continue;
        if (!st.ok()) {
          if (errors++ == 0) std::fprintf(stderr, "first error: %s\n", st.error_message().c_str());
          continue;
        }
        // No zeros, no NaN: sample the result.
        const std::string& d = resp.results(0).data();
        float f0, f1;
        std::memcpy(&f0, d.data(), 4);
        std::memcpy(&f1, d.data() + d.size() - 4, 4);
        if (!std::isfinite(f0) || !std::isfinite(f1) || (f0 == 0 && f1 == 0)) ++bad;
        ++done;
      }
    });
  }
  absl::SleepFor(absl::Seconds(1));  // warm-up
  measuring.store(true);
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
  const long n = done.load();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - t0);
  measuring.store(false);
  stop.store(true);
  for (auto& th : threads) th.join();
  (*server)->Shutdown(absl::Seconds(10));
  return {n / elapsed, errors.load(), bad.load()};
}

int Main() {
  const int gpus = CudaExecutor::DeviceCount();
  if (gpus < 1) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  const int m = absl::GetFlag(FLAGS_m), k = absl::GetFlag(FLAGS_k);
  std::vector<int> all;
  for (int d = 0; d < gpus; ++d) all.push_back(d);
  std::printf("multi_gpu_bench: fp32 (strict) %dx%dx%d, operands resident, %d in flight over %d "
              "channels, %.1f s\n",
              m, m, k, absl::GetFlag(FLAGS_concurrency), absl::GetFlag(FLAGS_channels),
              absl::GetFlag(FLAGS_seconds));
  const Result one = Run({0}, m, k);
  std::printf("1 GPU : %8.1f req/s  %7.2f TFLOP/s  errors %ld  bad values %ld\n",
              one.requests_per_s, one.requests_per_s * 2.0 * m * m * k / 1e12, one.errors,
              one.bad_values);
  if (gpus == 1) return 0;
  const Result many = Run(all, m, k);
  std::printf("%d GPUs: %8.1f req/s  %7.2f TFLOP/s  errors %ld  bad values %ld\n", gpus,
              many.requests_per_s, many.requests_per_s * 2.0 * m * m * k / 1e12, many.errors,
              many.bad_values);
  std::printf("ratio %d GPUs / 1 GPU: %.2f\n", gpus, many.requests_per_s / one.requests_per_s);
  return one.errors + many.errors + one.bad_values + many.bad_values == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gemm::Main();
}
