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
#include <map>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/cuda_executor.h"
#include "service/server.h"

ABSL_FLAG(std::vector<std::string>, mn, std::vector<std::string>({"512", "256"}),
          "M = N of the request shapes (mixed: calls cycle through them)");
ABSL_FLAG(int, k, 262144, "K of every request");
ABSL_FLAG(int, concurrency, 16, "calls in flight");
ABSL_FLAG(int, channels, 8, "client channels (HTTP/2 connections)");
ABSL_FLAG(double, seconds, 5.0, "measured time per configuration");

namespace gemm {
namespace {

struct Result {
  double requests_per_s = 0;
  double flops_per_s = 0;
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

// The first result of each (shape, replica), to check that every device
// computes the same function (the strict-fp32 kernel is deterministic).
struct FirstResults {
  absl::Mutex mu;
  std::map<std::pair<int, int>, std::string> by_shape_replica;
};

Result Run(const std::vector<int>& devices, const std::vector<int>& shapes, int k,
           FirstResults* firsts) {
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
  // One replica of A (m x k) and B (k x m) per shape and GPU. The server puts
  // each new matrix on the device with the fewest resident bytes, so
  // registering each shape's A on every device in turn, then its B likewise,
  // gives replica r both operands on device r (a request whose operands sit
  // on two devices is refused).
  struct Replica {
    int m;
    std::string a, b;
  };
  std::vector<std::vector<Replica>> replicas(shapes.size());  // [shape][replica]
  for (size_t si = 0; si < shapes.size(); ++si) {
    const int m = shapes[si];
    const std::string a = RandomFp32(size_t(m) * k, 1 + si), b = RandomFp32(size_t(k) * m, 7 + si);
    replicas[si].resize(devices.size());
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
        replicas[si][r].m = m;
        (which == 0 ? replicas[si][r].a : replicas[si][r].b) = resp.handle();
      }
    }
  }

  std::atomic<long> done{0}, errors{0}, bad{0};
  std::atomic<double> flops{0};
  std::atomic<bool> measuring{false}, stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < absl::GetFlag(FLAGS_concurrency); ++t) {
    threads.emplace_back([&, t] {
      auto* stub = stubs[t % stubs.size()].get();
      for (long call = 0; !stop.load(); ++call) {
        const int si = static_cast<int>((t + call) % shapes.size());
        const int r = static_cast<int>((t / shapes.size() + call) % devices.size());
        const Replica& rep = replicas[si][r];
        v1::GemmRequest req;
        v1::GemmProblem* p = req.add_problems();
        p->set_m(rep.m);
        p->set_n(rep.m);
        p->set_k(k);
        p->set_input_dtype(v1::DATA_TYPE_FP32);
        p->mutable_a()->set_handle(rep.a);
        p->mutable_b()->set_handle(rep.b);
        grpc::ClientContext ctx;
        v1::GemmResponse resp;
        grpc::Status st = stub->Gemm(&ctx, req, &resp);
        if (!measuring.load()) continue;
        if (!st.ok()) {
          if (errors++ == 0) std::fprintf(stderr, "first error: %s\n", st.error_message().c_str());
          continue;
        }
        // No zeros, no NaN; and the same result from every device.
        const std::string& d = resp.results(0).data();
        float f0, f1;
        std::memcpy(&f0, d.data(), 4);
        std::memcpy(&f1, d.data() + d.size() - 4, 4);
        if (!std::isfinite(f0) || !std::isfinite(f1) || (f0 == 0 && f1 == 0)) ++bad;
        {
          absl::MutexLock lock(&firsts->mu);
          auto [it, inserted] = firsts->by_shape_replica.emplace(std::make_pair(si, 0), d);
          if (!inserted && it->second != d) ++bad;
        }
        double f = flops.load();
        while (!flops.compare_exchange_weak(f, f + 2.0 * rep.m * rep.m * k)) {
        }
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
  return {n / elapsed, flops.load() / elapsed, errors.load(), bad.load()};
}

int Main() {
  const int gpus = CudaExecutor::DeviceCount();
  if (gpus < 1) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  std::vector<int> shapes;
  for (const std::string& v : absl::GetFlag(FLAGS_mn)) {
    int x;
    if (!absl::SimpleAtoi(v, &x) || x < 1) {
      std::fprintf(stderr, "--mn: bad size %s\n", v.c_str());
      return 2;
    }
    shapes.push_back(x);
  }
  const int k = absl::GetFlag(FLAGS_k);
  std::vector<int> all;
  for (int d = 0; d < gpus; ++d) all.push_back(d);
  std::printf("multi_gpu_bench: fp32 (strict), M=N in {");
  for (size_t i = 0; i < shapes.size(); ++i) std::printf("%s%d", i ? ", " : "", shapes[i]);
  std::printf("}, K=%d, operands resident, %d in flight over %d channels, %.1f s\n", k,
              absl::GetFlag(FLAGS_concurrency), absl::GetFlag(FLAGS_channels),
              absl::GetFlag(FLAGS_seconds));
  FirstResults firsts;
  const Result one = Run({0}, shapes, k, &firsts);
  std::printf("1 GPU : %8.1f req/s  %7.2f TFLOP/s  errors %ld  bad values %ld\n",
              one.requests_per_s, one.flops_per_s / 1e12, one.errors, one.bad_values);
  if (gpus == 1) return 0;
  const Result many = Run(all, shapes, k, &firsts);
  std::printf("%d GPUs: %8.1f req/s  %7.2f TFLOP/s  errors %ld  bad values (incl. results that "
              "differ from GPU 0's) %ld\n",
              gpus, many.requests_per_s, many.flops_per_s / 1e12, many.errors, many.bad_values);
  std::printf("ratio %d GPUs / 1 GPU: %.2f req/s, %.2f FLOP/s\n", gpus,
              many.requests_per_s / one.requests_per_s, many.flops_per_s / one.flops_per_s);
  return one.errors + many.errors + one.bad_values + many.bad_values == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gemm::Main();
}
