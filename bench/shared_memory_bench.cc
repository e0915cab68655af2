// shared_memory_bench: what same-host shared memory saves against bytes on
// the wire, in one run on loopback. For each --sizes_mib, a bf16 GEMM whose
// operand A is that large (M x 4096) and whose B and D are thin (4096 x 8,
// M x 8), so that moving A dominates: end to end through gemm::Client with
// A, B and D on the wire (chunked above the client's threshold, as by
// default) beside the same problem with A, B in a registered region and D
// written into it. Prints medians of wall time, operand bytes/s, the
// server's compute time, and the ratio shared/wire; on the CUDA backend also
// one pinned cudaMemcpy of the operand bytes alone (bench/device_alone) and
// the shared-memory path's operand bytes/s over that copy's. Results are
// checked: the shared-memory D must equal the wire's bitwise.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/gemm_client.h"
#include "client/shared_memory.h"
#include "common/dtype.h"
#include "common/proto_enums.h"
#include "bench/device_alone.h"
#include "service/server.h"

ABSL_FLAG(std::string, sizes_mib, "1,16,64,256", "sizes of operand A, MiB");
ABSL_FLAG(int, repeats, 7, "requests per measurement (after one warm-up); medians");
ABSL_FLAG(std::string, backend, "auto", "in-process server: auto, cuda or cpu");
ABSL_FLAG(bool, cuda_pin_shared_memory, gemm::CudaExecutor::Options().pin_shared_memory,
          "CUDA backend: regions page-locked and copied by DMA in place "
          "(gemm_server --cuda_pin_shared_memory)");

namespace gemm {
namespace {

constexpr uint64_t kK = 4096;
constexpr uint64_t kN = 8;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string RandomBf16(uint64_t elements, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> f(elements);
  for (float& x : f) x = dist(*rng);
  std::string out(elements * 2, '\0');
  FromFloat(DType::kBf16, f.data(), out.data(), elements);
  return out;
}

v1::GemmProblem Problem(uint64_t m) {
  v1::GemmProblem p;
  p.set_m(m);
  p.set_n(kN);
  p.set_k(kK);
  p.set_input_dtype(v1::DATA_TYPE_BF16);
  p.set_output_dtype(v1::DATA_TYPE_FP32);
  p.mutable_a()->set_layout(v1::LAYOUT_ROW_MAJOR);
  p.mutable_b()->set_layout(v1::LAYOUT_ROW_MAJOR);
  return p;
}

struct Timing {
  double wall_s = 0, compute_s = 0, server_s = 0;  // server_s: the response's total
};

// Median wall and compute time of `repeats` calls of `request` (one warm-up
// first); the last response in `*last`.
absl::StatusOr<Timing> Measure(Client& client, const v1::GemmRequest& request, int repeats,
                               v1::GemmResponse* last) {
  std::vector<double> wall, compute, server;
  for (int i = 0; i <= repeats; ++i) {
    const absl::Time t0 = absl::Now();
    GemmResult r = client.Gemm(request);
    const double s = absl::ToDoubleSeconds(absl::Now() - t0);
    if (!r.ok()) return r.status();
    if (i == 0) continue;
    wall.push_back(s);
    compute.push_back(r->timing().compute_ns() * 1e-9);
    server.push_back(r->timing().total_ns() * 1e-9);
    *last = *std::move(r);
  }
  return Timing{Median(wall), Median(compute), Median(server)};
}

int Run() {
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.backend = absl::GetFlag(FLAGS_backend);
  options.cuda.pin_shared_memory = absl::GetFlag(FLAGS_cuda_pin_shared_memory);
  options.limits.max_matrix_bytes = uint64_t{4} << 30;
  options.limits.max_resident_bytes = uint64_t{32} << 30;
  options.limits.max_inflight_bytes = uint64_t{16} << 30;
  auto server = GemmServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  ClientOptions co;
  co.target = absl::StrCat("127.0.0.1:", (*server)->port());
  co.default_timeout = absl::Seconds(600);
  auto client = Client::Create(co);
  if (!client.ok()) {
    std::fprintf(stderr, "client: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::printf("shared_memory_bench: backend %s, loopback, %u hardware threads; bf16 A = M x %lu, "
              "B = %lu x %lu, D fp32 M x %lu; medians of %d\n",
              (*server)->backend().backend.c_str(), std::thread::hardware_concurrency(),
              static_cast<unsigned long>(kK), static_cast<unsigned long>(kK),
              static_cast<unsigned long>(kN), static_cast<unsigned long>(kN),
              absl::GetFlag(FLAGS_repeats));
  const bool cuda = (*server)->backend().backend == "cuda";
  std::printf("%7s %8s | %9s %9s %9s %9s | %9s %9s %9s %9s | %8s", "A_MiB", "M", "wire_ms",
              "wire_GB/s", "server_ms", "comp_ms", "shm_ms", "shm_GB/s", "server_ms", "comp_ms",
              "shm/wire");
  if (cuda) std::printf(" | %9s %9s %8s", "h2d_ms", "h2d_GB/s", "shm/h2d");
  std::printf("\n");
  std::mt19937 rng(1);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',')) {
    int mib = 0;
    if (!absl::SimpleAtoi(text, &mib) || mib < 1) {
      std::fprintf(stderr, "--sizes_mib: bad size \"%s\"\n", std::string(text).c_str());
      return 2;
    }
    const uint64_t m = (uint64_t{1} << 20) * mib / (kK * 2);
    const std::string a = RandomBf16(m * kK, &rng), b = RandomBf16(kK * kN, &rng);
    const uint64_t d_bytes = m * kN * 4;
    const double operand_bytes = static_cast<double>(a.size() + b.size() + d_bytes);

    v1::GemmRequest wire;
    *wire.add_problems() = Problem(m);
    wire.mutable_problems(0)->mutable_a()->set_data(a);
    wire.mutable_problems(0)->mutable_b()->set_data(b);
    v1::GemmResponse wire_response;
    absl::StatusOr<Timing> w = Measure(**client, wire, repeats, &wire_response);
    if (!w.ok()) {
      std::fprintf(stderr, "wire %d MiB: %s\n", mib, w.status().ToString().c_str());
      return 1;
    }

    const uint64_t a_at = SharedMemory::kFirstOffset;
    const uint64_t b_at = (a_at + a.size() + 63) / 64 * 64;
    const uint64_t d_at = (b_at + b.size() + 63) / 64 * 64;
    auto memory = SharedMemory::Create(d_at + d_bytes);
    if (!memory.ok()) {
      std::fprintf(stderr, "shared memory: %s\n", memory.status().ToString().c_str());
      return 1;
    }
    std::memcpy((*memory)->base() + a_at, a.data(), a.size());
    std::memcpy((*memory)->base() + b_at, b.data(), b.size());
    std::memset((*memory)->base() + d_at, 0xff, d_bytes);  // poisoned
    auto region = (*client)->RegisterSharedMemory(**memory, "shared_memory_bench");
    if (!region.ok()) {
      std::fprintf(stderr, "RegisterSharedMemory: %s\n", region.status().ToString().c_str());
      return 1;
    }
    v1::GemmRequest shared;
    *shared.add_problems() = Problem(m);
    *shared.mutable_problems(0)->mutable_a() = SharedMatrix(*region, a_at, Layout::kRowMajor);
    *shared.mutable_problems(0)->mutable_b() = SharedMatrix(*region, b_at, Layout::kRowMajor);
    *shared.mutable_problems(0)->mutable_output() = SharedRef(*region, d_at);
    v1::GemmResponse shared_response;
    absl::StatusOr<Timing> s = Measure(**client, shared, repeats, &shared_response);
    if (!s.ok()) {
      std::fprintf(stderr, "shared %d MiB: %s\n", mib, s.status().ToString().c_str());
      return 1;
    }
    const std::string& expected = wire_response.results(0).data();
    if (expected.size() != d_bytes ||
        std::memcmp((*memory)->base() + d_at, expected.data(), d_bytes) != 0) {
      std::fprintf(stderr, "%d MiB: the shared-memory result differs from the wire's\n", mib);
      return 1;
    }
    (*client)->UnregisterSharedMemory(*region).IgnoreError();
    std::printf("%7d %8lu | %9.2f %9.2f %9.2f %9.2f | %9.2f %9.2f %9.2f %9.2f | %8.3f", mib,
                static_cast<unsigned long>(m), w->wall_s * 1e3, operand_bytes / w->wall_s / 1e9,
                w->server_s * 1e3, w->compute_s * 1e3, s->wall_s * 1e3,
                operand_bytes / s->wall_s / 1e9, s->server_s * 1e3, s->compute_s * 1e3,
                s->wall_s / w->wall_s);
    // The operand bytes alone in one pinned copy to the device: the floor.
    double h2d_ms = 0;
    if (cuda && gemm_bench::CopyAloneMs(static_cast<size_t>(operand_bytes), true,
                                        gemm_bench::TimingPlan{2, 5, 1}, &h2d_ms)) {
      const double h2d_rate = operand_bytes / (h2d_ms * 1e-3);
      std::printf(" | %9.2f %9.2f %8.3f", h2d_ms, h2d_rate / 1e9,
                  (operand_bytes / s->wall_s) / h2d_rate);
    }
    std::printf("\n");
  }
  (*server)->Shutdown(absl::Seconds(10));
  return 0;
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gemm::Run();
}
