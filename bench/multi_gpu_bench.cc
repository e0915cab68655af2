// multi_gpu_bench: requests/s of a compute-bound workload on one GPU and on
// every visible GPU, in one run, with the ratio (issue 8's target: >= 1.8x on
// two GPUs).
//
// Compute-bound through gRPC means few bytes per FLOP on the wire: operands
// are uploaded once (in chunks, one replica per shape and GPU, placed by the
// server on the device with the fewest resident bytes) and each request names
// them and carries back only its M x N result. The default workload is bf16
// on the tensor cores with a deep K (M = N of 768 and 512, K = 2^20), so that
// every request fills the GPU by itself (through the kernel's split-K /
// stream-K schedule): a GPU's rate then does not depend on how many requests
// its queue holds, and the ratio measures the placement, not batching luck.
// --dtype=fp32 gives the strict-fp32 (SIMT) workload of the first runs, whose
// 512^2 and 256^2 launches fill only part of a GPU.
//
// Per GPU, the run prints the launches and the kernel seconds the server
// recorded (its gemm_launches_total and gemm_compute_seconds_total, by gpu
// label), so an imbalance or an idle device shows.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/gemm_client.h"
#include "common/dtype.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/exec/cuda_executor.h"
#include "service/server.h"

ABSL_FLAG(std::string, dtype, "bf16", "bf16 (tensor cores, bf16 results) or fp32 (strict, SIMT)");
ABSL_FLAG(std::vector<std::string>, mn, std::vector<std::string>({"768", "512"}),
          "M = N of the request shapes (mixed: calls cycle through them)");
ABSL_FLAG(int, k, 1 << 20, "K of every request");
ABSL_FLAG(std::vector<std::string>, concurrency, std::vector<std::string>({"16", "64"}),
          "calls in flight; each value is measured on one GPU and on all of them");
ABSL_FLAG(int, channels, 16, "client channels (HTTP/2 connections) for the Gemm calls");
ABSL_FLAG(double, seconds, 5.0, "measured time per configuration");

namespace gemm {
namespace {

struct Workload {
  bool bf16 = true;
  std::vector<int> shapes;  // M = N
  int k = 0;
  size_t element_bytes() const { return bf16 ? 2 : 4; }
};

struct PerGpu {
  double launches = 0;
  double compute_seconds = 0;
};

struct Result {
  int concurrency = 0;
  double requests_per_s = 0;
  double flops_per_s = 0;
  long errors = 0;
  long bad_values = 0;
  std::map<int, PerGpu> per_gpu;  // the server's counters over the measured window
};

// Uniform values in [-1, 1): fp32 words, or bf16 pairs (the upper halves of
// two fp32 values) per word. xorshift makes gigabytes of operands in seconds
// and is random enough for a throughput test.
std::vector<uint32_t> RandomOperand(size_t elements, bool bf16, uint64_t seed) {
  std::vector<uint32_t> out(bf16 ? (elements + 1) / 2 : elements);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float f = static_cast<float>(x >> 40) / float(1 << 24) * 2.0f - 1.0f;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return bits;
  };
  for (uint32_t& word : out) word = bf16 ? (next() >> 16) | (next() & 0xffff0000u) : next();
  return out;
}

// Sums a counter of the scrape text by its gpu label.
std::map<int, double> ByGpu(const std::string& scrape, const std::string& name) {
  std::map<int, double> out;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (!absl::StartsWith(line, name + "{")) continue;
    const size_t g = line.find("gpu=\"");
    const size_t space = line.rfind(' ');
    if (g == absl::string_view::npos || space == absl::string_view::npos) continue;
    int gpu;
    double value;
    const size_t end = line.find('"', g + 5);
    if (!absl::SimpleAtoi(line.substr(g + 5, end - g - 5), &gpu) ||
        !absl::SimpleAtod(line.substr(space + 1), &value))
      continue;
    out[gpu] += value;
  }
  return out;
}

std::map<int, PerGpu> Counters(const GemmServer& server) {
  const std::string text = server.metrics()->Scrape();
  std::map<int, PerGpu> out;
  for (const auto& [gpu, v] : ByGpu(text, "gemm_launches_total")) out[gpu].launches = v;
  for (const auto& [gpu, v] : ByGpu(text, "gemm_compute_seconds_total"))
    out[gpu].compute_seconds = v;
  return out;
}

// Every result is checked for NaN and zeros at both ends, and must equal the
// first result of its shape bit for bit (the kernels are deterministic, and
// every device runs the same schedule), across devices and configurations.
struct FirstResults {
  absl::Mutex mu;
  std::map<int, std::string> by_shape;
};

bool LooksWrong(const std::string& d, bool bf16) {
  float f[2] = {0, 0};
  const size_t es = bf16 ? 2 : 4;
  if (d.size() < es) return true;
  for (int i = 0; i < 2; ++i) {
    const char* p = d.data() + (i == 0 ? 0 : d.size() - es);
    ToFloat(bf16 ? DType::kBf16 : DType::kFp32, p, &f[i], 1);
  }
  return !std::isfinite(f[0]) || !std::isfinite(f[1]) || (f[0] == 0 && f[1] == 0);
}

std::vector<Result> Run(const std::vector<int>& devices, const Workload& w,
                        const std::vector<int>& concurrencies, FirstResults* firsts) {
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.backend = "cuda";
  o.cuda_devices = devices;
  o.cuda.calibrate = false;
  o.limits.max_message_bytes = 0x7fffffff;
  o.limits.max_matrix_bytes = uint64_t{4} << 30;
  o.limits.max_resident_bytes = uint64_t{64} << 30;
  auto server = GemmServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    std::exit(1);
  }
  const std::string target = "127.0.0.1:" + std::to_string((*server)->port());

  // One replica of A (m x k, row-major) and B (k x m, column-major: both
  // K-major) per shape and GPU. The server puts each new matrix on the device
  // with the fewest resident bytes, so uploading each shape's A once per
  // device in turn, then its B likewise, gives replica r both operands on
  // device r (a request whose operands sit on two devices is refused).
  ClientOptions co;
  co.target = target;
  co.default_timeout = absl::Minutes(5);
  auto uploader = Client::Create(co);
  if (!uploader.ok()) std::exit(1);
  const DType dtype = w.bf16 ? DType::kBf16 : DType::kFp32;
  struct Replica {
    int m = 0;
    std::string a, b;
  };
  std::vector<std::vector<Replica>> replicas(w.shapes.size());  // [shape][replica]
  const absl::Time upload_start = absl::Now();
  double uploaded = 0;
  for (size_t si = 0; si < w.shapes.size(); ++si) {
    const int m = w.shapes[si];
    const size_t bytes = size_t(m) * w.k * w.element_bytes();
    replicas[si].resize(devices.size());
    for (int which = 0; which < 2; ++which) {
      const std::vector<uint32_t> words = RandomOperand(size_t(m) * w.k, w.bf16, 1 + si * 2 + which);
      const Layout layout = which == 0 ? Layout::kRowMajor : Layout::kColMajor;
      const uint64_t rows = which == 0 ? m : w.k, cols = which == 0 ? w.k : m;
      const MatrixView view =
          w.bf16 ? MatrixView(reinterpret_cast<const uint16_t*>(words.data()), rows, cols, dtype,
                              layout)
                 : MatrixView(reinterpret_cast<const float*>(words.data()), rows, cols, layout);
      for (size_t r = 0; r < devices.size(); ++r) {
        auto h = (*uploader)->UploadMatrix(view);
        if (!h.ok()) {
          std::fprintf(stderr, "UploadMatrix: %s\n", h.status().ToString().c_str());
          std::exit(1);
        }
        replicas[si][r].m = m;
        (which == 0 ? replicas[si][r].a : replicas[si][r].b) = h->handle;
        uploaded += bytes;
      }
    }
  }
  std::printf("  uploaded %.2f GB of operands in %.1f s\n", uploaded / 1e9,
              absl::ToDoubleSeconds(absl::Now() - upload_start));

  std::vector<std::unique_ptr<v1::GemmService::Stub>> stubs;
  for (int c = 0; c < absl::GetFlag(FLAGS_channels); ++c) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(0x7fffffff);
    args.SetMaxSendMessageSize(0x7fffffff);
    args.SetInt("gemm.bench.channel", c);  // distinct arguments: distinct connections
    stubs.push_back(v1::GemmService::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }

  std::vector<Result> results;
  for (const int concurrency : concurrencies) {
    std::atomic<long> done{0}, errors{0}, bad{0};
    std::atomic<double> flops{0};
    std::atomic<bool> measuring{false}, stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrency; ++t) {
      threads.emplace_back([&, t] {
        auto* stub = stubs[t % stubs.size()].get();
        for (long call = 0; !stop.load(); ++call) {
          // Shapes and replicas in turn: every device gets the same mix.
          const int si = static_cast<int>((t + call) % w.shapes.size());
          const int r = static_cast<int>((t / w.shapes.size() + call) % devices.size());
          const Replica& rep = replicas[si][r];
          v1::GemmRequest req;
          v1::GemmProblem* p = req.add_problems();
          p->set_m(rep.m);
          p->set_n(rep.m);
          p->set_k(w.k);
          p->set_input_dtype(w.bf16 ? v1::DATA_TYPE_BF16 : v1::DATA_TYPE_FP32);
          p->set_output_dtype(w.bf16 ? v1::DATA_TYPE_BF16 : v1::DATA_TYPE_FP32);
          p->mutable_a()->set_handle(rep.a);
          p->mutable_b()->set_handle(rep.b);
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
          v1::GemmResponse resp;
          grpc::Status st = stub->Gemm(&ctx, req, &resp);
          if (!measuring.load()) continue;
          if (!st.ok()) {
            if (errors++ == 0)
              std::fprintf(stderr, "first error: %s\n", st.error_message().c_str());
            continue;
          }
          const std::string& d = resp.results(0).data();
          if (LooksWrong(d, w.bf16)) ++bad;
          {
            absl::MutexLock lock(&firsts->mu);
            auto [it, inserted] = firsts->by_shape.emplace(si, d);
            if (!inserted && it->second != d) ++bad;
          }
          double f = flops.load();
          while (!flops.compare_exchange_weak(f, f + 2.0 * rep.m * rep.m * w.k)) {
          }
          ++done;
        }
      });
    }
    absl::SleepFor(absl::Seconds(1));  // warm-up
    const std::map<int, PerGpu> before = Counters(**server);
    measuring.store(true);
    const absl::Time t0 = absl::Now();
    absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
    const long n = done.load();
    const double f = flops.load();
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - t0);
    const std::map<int, PerGpu> after = Counters(**server);
    measuring.store(false);
    stop.store(true);
    for (auto& th : threads) th.join();
    Result r{concurrency, n / elapsed, f / elapsed, errors.load(), bad.load(), {}};
    for (const auto& [gpu, a] : after) {
      const auto b = before.find(gpu);
      r.per_gpu[gpu] = {a.launches - (b == before.end() ? 0 : b->second.launches),
                        (a.compute_seconds - (b == before.end() ? 0 : b->second.compute_seconds)) /
                            elapsed};
    }
    results.push_back(r);
  }
  (*server)->Shutdown(absl::Seconds(30));
  return results;
}

void Print(const char* label, const Result& r) {
  std::printf("%-7s %3d in flight: %8.1f req/s  %7.2f TFLOP/s  errors %ld  bad %ld |", label,
              r.concurrency, r.requests_per_s, r.flops_per_s / 1e12, r.errors, r.bad_values);
  for (const auto& [gpu, g] : r.per_gpu)
    std::printf("  gpu%d: %.0f launches, kernel busy %.2f", gpu, g.launches, g.compute_seconds);
  std::printf("\n");
}

int Main() {
  const int gpus = CudaExecutor::DeviceCount();
  if (gpus < 1) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  Workload w;
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype != "bf16" && dtype != "fp32") {
    std::fprintf(stderr, "--dtype: bf16 or fp32, not %s\n", dtype.c_str());
    return 2;
  }
  w.bf16 = dtype == "bf16";
  w.k = absl::GetFlag(FLAGS_k);
  auto ints = [](const std::vector<std::string>& in, const char* flag, std::vector<int>* out) {
    for (const std::string& v : in) {
      int x;
      if (!absl::SimpleAtoi(v, &x) || x < 1) {
        std::fprintf(stderr, "--%s: bad value %s\n", flag, v.c_str());
        return false;
      }
      out->push_back(x);
    }
    return !out->empty();
  };
  std::vector<int> concurrencies;
  if (!ints(absl::GetFlag(FLAGS_mn), "mn", &w.shapes) ||
      !ints(absl::GetFlag(FLAGS_concurrency), "concurrency", &concurrencies) || w.k < 1)
    return 2;
  std::vector<int> all;
  for (int d = 0; d < gpus; ++d) all.push_back(d);
  std::printf("multi_gpu_bench: %s, M=N in {", w.bf16 ? "bf16 (tensor cores)" : "fp32 (strict)");
  for (size_t i = 0; i < w.shapes.size(); ++i) std::printf("%s%d", i ? ", " : "", w.shapes[i]);
  std::printf("}, K=%d, operands resident, %d channels, %.1f s per point; kernel busy = kernel "
              "seconds the server recorded per second (lanes overlap, so it may exceed 1)\n",
              w.k, absl::GetFlag(FLAGS_channels), absl::GetFlag(FLAGS_seconds));
  FirstResults firsts;
  const std::vector<Result> one = Run({0}, w, concurrencies, &firsts);
  for (const Result& r : one) Print("1 GPU", r);
  if (gpus == 1) return 0;
  const std::vector<Result> many = Run(all, w, concurrencies, &firsts);
  long failures = 0;
  for (size_t i = 0; i < many.size(); ++i) {
    Print((std::to_string(gpus) + " GPUs").c_str(), many[i]);
    std::printf("ratio %d GPUs / 1 GPU at %d in flight: %.2f req/s, %.2f FLOP/s\n", gpus,
                many[i].concurrency, many[i].requests_per_s / one[i].requests_per_s,
                many[i].flops_per_s / one[i].flops_per_s);
    failures += one[i].errors + many[i].errors + one[i].bad_values + many[i].bad_values;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gemm::Main();
}
