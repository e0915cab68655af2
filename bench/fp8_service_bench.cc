// fp8_service_bench: one client, one M x N x K GEMM at a time through the
// service (in-process CUDA server on loopback, operands over the chunked
// path), FP8 e4m3 with block scales beside bf16 in the same run: the wall
// time of each request, the server's kernel time (compute_ns) and transfer
// time beside it, and the ratio FP8 / bf16. FP8 sends half of bf16's
// operand bytes; the target is FP8 <= 0.6x bf16's wall time. The client
// quantizes before the clock starts. Random data; the two kinds alternate,
// after warm-up, medians printed; a few rows of every result are checked
// against float64.
//
// Then the server's quantization: registering a --register_size square
// bf16 matrix as FP8 e4m3 with block scales (quantized by the server, on
// the GPU) beside registering it as bf16, alternating, medians; and the
// client library's QuantizeToFp8 of the same matrix on this host for
// comparison. The server's codes are downloaded once and checked against
// the client's, bit for bit.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/gemm_client.h"
#include "client/matrix_view.h"
#include "common/dtype.h"
#include "common/fp8.h"
#include "service/server.h"

ABSL_FLAG(int, size, 4096, "M = N = K");
ABSL_FLAG(int, runs, 7, "measured requests of each kind (after 2 warm-up ones)");
ABSL_FLAG(uint64_t, chunked_threshold_bytes, uint64_t{4} << 20,
          "requests larger than this go over the chunked path");
ABSL_FLAG(int, register_size, 8192,
          "rows = cols of the matrix registered as bf16 and as FP8 (0: skip that part)");

namespace gemm {
namespace {

struct Sample {
  double wall_ms, compute_ms, transfer_ms;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rows 0, M/2 and M-1 of the result against float64 of the operands as
// the server sees them (dequantized FP8, or bf16). `a` is M x K and `b`
// K x N row-major floats of those values; the result is row-major.
double SampledError(const std::vector<float>& a, const std::vector<float>& b, int n,
                    const v1::GemmResult& result) {
  auto d = ViewResult(result);
  if (!d.ok()) return 1e9;
  std::vector<float> out(static_cast<size_t>(n) * n);
  ToFloat(d->dtype, d->data, out.data(), out.size());
  double err2 = 0, ref2 = 0;
  for (int i : {0, n / 2, n - 1}) {
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int kk = 0; kk < n; ++kk)
        acc += double(a[size_t(i) * n + kk]) * double(b[size_t(kk) * n + j]);
      const double got = out[size_t(i) * n + j];
      err2 += (got - acc) * (got - acc);
      ref2 += acc * acc;
    }
  }
  return std::sqrt(err2 / std::max(ref2, 1e-300));
}

// Registering a bf16 matrix as bf16 and as FP8 (block scales, as B)
// through `client`, alternating; false when a step fails or the server's
// codes differ from QuantizeToFp8's.
bool RegisterBench(Client* client, int size, int runs) {
  const size_t elems = size_t(size) * size;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(elems);
  for (float& x : values) x = normal(rng);
  std::vector<uint16_t> bf16(elems);
  FromFloat(DType::kBf16, values.data(), bf16.data(), elems);
  const MatrixView view(bf16.data(), size, size, DType::kBf16);
  const Fp8Quantization how{DType::kFp8E4m3, ScaleMode::kBlock, OperandRole::kB, false};

  std::vector<double> plain_ms, quantized_ms, local_ms;
  bool checked = false;
  for (int r = 0; r < runs + 1; ++r) {
    absl::Time t0 = absl::Now();
    auto plain = client->RegisterMatrix(view, "bench bf16");
    const double plain_wall = absl::ToDoubleMilliseconds(absl::Now() - t0);
    if (!plain.ok()) {
      std::fprintf(stderr, "register bf16: %s\n", std::string(plain.status().message()).c_str());
      return false;
    }
    if (!client->ReleaseMatrix(*plain).ok()) return false;
    t0 = absl::Now();
    auto quantized = client->RegisterQuantized(view, how, "bench fp8");
    const double quantized_wall = absl::ToDoubleMilliseconds(absl::Now() - t0);
    if (!quantized.ok()) {
      std::fprintf(stderr, "register fp8: %s\n",
                   std::string(quantized.status().message()).c_str());
      return false;
    }
    t0 = absl::Now();
    auto local = QuantizeToFp8(view, how);
    const double local_wall = absl::ToDoubleMilliseconds(absl::Now() - t0);
    if (!local.ok()) return false;
    if (!checked) {
      std::vector<uint8_t> codes(elems);
      if (!client->DownloadMatrix(quantized->handle, codes.data(), codes.size()).ok()) return false;
      if (codes != local->codes) {
        std::printf("FAILED: the server's FP8 codes differ from QuantizeToFp8's\n");
        return false;
      }
      checked = true;
    }
    if (!client->ReleaseMatrix(*quantized).ok()) return false;
    if (r == 0) continue;  // warm-up
    plain_ms.push_back(plain_wall);
    quantized_ms.push_back(quantized_wall);
    local_ms.push_back(local_wall);
  }
  std::printf("\nregistering a %d x %d bf16 matrix (%d runs each, medians; the server's FP8 "
              "codes equal QuantizeToFp8's)\n",
              size, size, runs);
  std::printf("  as bf16:                          %9.1f ms\n", Median(plain_ms));
  std::printf("  as FP8 e4m3 block, on the server: %9.1f ms  (%.3fx bf16)\n",
              Median(quantized_ms), Median(quantized_ms) / Median(plain_ms));
  std::printf("  QuantizeToFp8 on this host alone: %9.1f ms\n", Median(local_ms));
  return true;
}

int Main() {
  const int n = absl::GetFlag(FLAGS_size);
  ServerOptions so;
  so.listen_address = "127.0.0.1:0";
  so.backend = "cuda";
  so.cuda.calibrate = false;
  so.cuda.quantize_fp8 = true;  // the registration part quantizes on the server
  auto server = GemmServer::Start(so);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  ClientOptions co;
  co.target = absl::StrCat("127.0.0.1:", (*server)->port());
  co.default_timeout = absl::Seconds(300);
  co.chunked_threshold_bytes = absl::GetFlag(FLAGS_chunked_threshold_bytes);
  auto client = Client::Create(co);
  if (!client.ok()) return 1;

  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t elems = size_t(n) * n;
  std::vector<float> a(elems), b(elems);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);

  // bf16: the operands rounded to bf16 are what the server multiplies.
  std::vector<uint16_t> a16(elems), b16(elems);
  FromFloat(DType::kBf16, a.data(), a16.data(), elems);
  FromFloat(DType::kBf16, b.data(), b16.data(), elems);
  std::vector<float> a16f(elems), b16f(elems);
  ToFloat(DType::kBf16, a16.data(), a16f.data(), elems);
  ToFloat(DType::kBf16, b16.data(), b16f.data(), elems);
  v1::GemmRequest bf16;
  ProblemOptions o;
  o.output_dtype = DType::kBf16;
  if (!AddProblem(&bf16, MatrixView(a16.data(), n, n, DType::kBf16),
                  MatrixView(b16.data(), n, n, DType::kBf16), o)
           .ok())
    return 1;

  // FP8 e4m3, block scales, quantized here by the server's rule.
  auto qa = QuantizeToFp8(MatrixView(a.data(), n, n),
                          Fp8Quantization{DType::kFp8E4m3, ScaleMode::kBlock, OperandRole::kA,
                                          false});
  auto qb = QuantizeToFp8(MatrixView(b.data(), n, n),
                          Fp8Quantization{DType::kFp8E4m3, ScaleMode::kBlock, OperandRole::kB,
                                          false});
  if (!qa.ok() || !qb.ok()) {
    std::fprintf(stderr, "quantize failed\n");
    return 1;
  }
  std::vector<float> a8(elems), b8(elems);
  DequantizeFp8(qa->codes.data(), DType::kFp8E4m3, qa->view().ref().fp8_operand(),
                qa->scales.data(), a8.data());
  DequantizeFp8(qb->codes.data(), DType::kFp8E4m3, qb->view().ref().fp8_operand(),
                qb->scales.data(), b8.data());
  v1::GemmRequest fp8;
  if (!AddProblem(&fp8, qa->view(), qb->view(), o).ok()) return 1;

  struct Kind {
    const char* name;
    const v1::GemmRequest* request;
    const std::vector<float>*a, *b;
    std::vector<Sample> samples;
    double worst_error = 0;
    std::string kernel;
  } kinds[] = {{"bf16", &bf16, &a16f, &b16f, {}, 0, ""},
               {"fp8_e4m3_block", &fp8, &a8, &b8, {}, 0, ""}};
  const int runs = absl::GetFlag(FLAGS_runs);
  for (int r = 0; r < runs + 2; ++r) {
    for (Kind& k : kinds) {
      const absl::Time t0 = absl::Now();
      GemmResult res = (*client)->Gemm(*k.request);
      const double wall = absl::ToDoubleMilliseconds(absl::Now() - t0);
      if (!res.ok()) {
        std::fprintf(stderr, "%s: %s\n", k.name, std::string(res.status().message()).c_str());
        return 1;
      }
      k.kernel = res->kernel();
      k.worst_error = std::max(k.worst_error, SampledError(*k.a, *k.b, n, res->results(0)));
      if (r >= 2)
        k.samples.push_back({wall, res->timing().compute_ns() / 1e6,
                             res->timing().transfer_ns() / 1e6});
    }
  }
  std::printf("fp8_service_bench: %d^3, one client, chunked above %llu bytes, %d runs each "
              "(medians)\n",
              n, static_cast<unsigned long long>(co.chunked_threshold_bytes), runs);
  std::printf("%-16s %10s %10s %11s %9s %10s  %s\n", "kind", "wall_ms", "kernel_ms",
              "transfer_ms", "TFLOP/s", "rel_error", "kernel");
  double wall[2];
  for (int i = 0; i < 2; ++i) {
    Kind& k = kinds[i];
    std::vector<double> w, c, t;
    for (const Sample& s : k.samples) {
      w.push_back(s.wall_ms);
      c.push_back(s.compute_ms);
      t.push_back(s.transfer_ms);
    }
    wall[i] = Median(w);
    std::printf("%-16s %10.2f %10.3f %11.2f %9.1f %10.2e  %s\n", k.name, wall[i], Median(c),
                Median(t), 2.0 * n * double(n) * n / (Median(c) * 1e9), k.worst_error,
                k.kernel.c_str());
  }
  std::printf("ratio fp8/bf16 wall: %.3f (target <= 0.6)\n", wall[1] / wall[0]);
  const bool accurate = kinds[0].worst_error < 2e-2 && kinds[1].worst_error < 2e-2;
  if (!accurate) std::printf("FAILED: a result is off (see rel_error)\n");
  const int register_size = absl::GetFlag(FLAGS_register_size);
  const bool registered =
      register_size <= 0 || RegisterBench(client->get(), register_size, runs);
  (*server)->Shutdown(absl::Seconds(10));
  return accurate && registered ? 0 : 1;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gemm::Main();
}
