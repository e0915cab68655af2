// The cost of the deterministic contract (issue 33): CUDA executor throughput
// with GemmRequest.deterministic off and on, in alternating runs of the same
// request stream, on mixes of small, medium and large bf16 shapes, on the
// stream-K / split-K shapes of schedule_bench and on its grouped lists.
//
// Requests are fed the way the batcher feeds them: four threads each keep a
// batch in flight (one per lane), the batch's launches planned by
// PlanLaunches, so identical shapes become strided batches and mixed ones
// grouped launches, exactly as the server runs them. A and B are resident
// (device memory) so that the figures are not the PCIe link's; each request
// still copies its D back. Printed per case: problems/s and TFLOP/s over the
// wall time, TFLOP/s over the executor's summed launch times (the kernels
// alone), both for off and on, and the on/off ratios.
//
// Usage: determinism_bench [seconds per run, default 1.5] [rounds, default 3]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "service/exec/cuda_executor.h"
#include "service/queue/launch_plan.h"
#include "service/store/resident_matrix.h"

namespace {

using gemm::DType;

struct Shape {
  uint64_t m, n, k;
};

struct Case {
  std::string name;
  std::vector<Shape> pool;  // the shapes requests draw from
  int per_batch = 1;        // requests per batch
  // Each batch takes the whole pool in order (a grouped list) instead of
  // random draws.
  bool whole_pool = false;
};

// One pool shape's resident operands.
struct Operands {
  gemm::GemmShape shape;
  std::shared_ptr<gemm::ResidentMatrix> a, b;
};

std::vector<Shape> RandomShapes(int count, uint64_t lo, uint64_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> d(lo, hi);
  std::vector<Shape> out;
  for (int i = 0; i < count; ++i) out.push_back({d(rng), d(rng), d(rng)});
  return out;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"mix small 64-512", RandomShapes(48, 64, 512, 1), 32});
  cases.push_back({"mix medium 512-2048", RandomShapes(24, 512, 2048, 2), 8});
  cases.push_back({"mix large 2048-8192", RandomShapes(6, 2048, 8192, 3), 2});
  std::vector<Shape> all = RandomShapes(24, 64, 512, 4);
  for (const Shape& s : RandomShapes(12, 512, 2048, 5)) all.push_back(s);
  for (const Shape& s : RandomShapes(3, 2048, 8192, 6)) all.push_back(s);
  cases.push_back({"mix small/medium/large", all, 12});
  // schedule_bench's stream-K / split-K shapes, each a request of its own.
  const Shape sk[] = {{1920, 1920, 8192}, {3072, 3072, 3072}, {256, 4096, 16384},
                      {128, 128, 65536},  {4224, 4224, 4224}, {1000, 1000, 1000},
                      {7, 8192, 8192}};
  for (const Shape& s : sk)
    cases.push_back({"sk " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                         std::to_string(s.k),
                     {s}, 1});
  // schedule_bench's grouped lists: M per member uniform, N and K fixed.
  struct Grouped {
    const char* name;
    int count, m_lo, m_hi, n, k;
  };
  const Grouped grouped[] = {{"grouped 32 x M~U[16,2048] N=4096 K=2048", 32, 16, 2048, 4096, 2048},
                             {"grouped 128 x M~U[16,512] N=K=1024", 128, 16, 512, 1024, 1024},
                             {"grouped 64 x M~U[32,256] N=K=256", 64, 32, 256, 256, 256}};
  for (const Grouped& g : grouped) {
    Case c{g.name, {}, g.count, true};
    std::mt19937_64 rng(77);
    std::uniform_int_distribution<int> m(g.m_lo, g.m_hi);
    for (int i = 0; i < g.count; ++i)
      c.pool.push_back({static_cast<uint64_t>(m(rng)), static_cast<uint64_t>(g.n),
                        static_cast<uint64_t>(g.k)});
    cases.push_back(c);
  }
  return cases;
}

std::shared_ptr<gemm::ResidentMatrix> Resident(gemm::Executor* ex, const gemm::MatrixRef& shape,
                                               uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> v(-1.0f, 1.0f);
  std::vector<float> f(shape.elements());
  for (float& x : f) x = v(rng);
  std::string bytes(shape.bytes(), '\0');
  gemm::FromFloat(shape.dtype, f.data(), bytes.data(), f.size());
  gemm::MatrixRef src = shape;
  src.data = bytes.data();
  auto m = ex->CreateResident(src);
  if (!m.ok()) {
    std::fprintf(stderr, "resident matrix: %s\n", m.status().ToString().c_str());
    std::exit(1);
  }
  return *m;
}

struct Totals {
  double flops = 0, compute_s = 0, wall_s = 0;
  long problems = 0, errors = 0;
};

// Runs `c` for `seconds` with the flag as given.
Totals Run(gemm::CudaExecutor* ex, const Case& c, const std::vector<Operands>& ops,
           bool deterministic, double seconds) {
  gemm::LaunchPlanOptions plan;
  plan.grouped_supported = ex->supports_grouped();
  std::atomic<long> problems{0}, errors{0};
  std::vector<double> flops(4, 0), compute(4, 0);
  const absl::Time start = absl::Now(), stop = start + absl::Seconds(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      std::uniform_int_distribution<size_t> pick(0, ops.size() - 1);
      while (absl::Now() < stop) {
        std::vector<std::shared_ptr<gemm::WorkItem>> items;
        std::vector<std::string> outputs(c.per_batch);
        for (int i = 0; i < c.per_batch; ++i) {
          const Operands& o = ops[c.whole_pool ? i % ops.size() : pick(rng)];
          auto item = std::make_shared<gemm::WorkItem>();
          gemm::GemmProblemRef p;
          p.shape = o.shape;
          p.a = o.a->view();
          p.b = o.b->view();
          outputs[i].resize(o.shape.m * o.shape.n * gemm::SizeOf(o.shape.output_dtype));
          p.d = outputs[i].data();
          item->problems.push_back(p);
          item->deterministic = deterministic;
          flops[t] += o.shape.flops();
          items.push_back(std::move(item));
        }
        absl::BlockingCounter done(static_cast<int>(items.size()));
        for (auto& item : items) {
          item->done = [&, t](const absl::Status& s, const gemm::ExecutionReport& r) {
            if (!s.ok()) errors.fetch_add(1);
            for (const auto& launch : r.launches) compute[t] += absl::ToDoubleSeconds(launch.time);
            done.DecrementCount();
          };
        }
        gemm::Batch batch;
        batch.launches = gemm::PlanLaunches(items, plan);
        batch.items = items;
        problems.fetch_add(static_cast<long>(items.size()));
        ex->Execute(std::move(batch));
        done.Wait();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  Totals out;
  out.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  for (int t = 0; t < 4; ++t) {
    out.flops += flops[t];
    out.compute_s += compute[t];
  }
  out.problems = problems.load();
  out.errors = errors.load();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.5;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  if (gemm::CudaExecutor::DeviceCount() == 0) {
    std::printf("determinism_bench: no CUDA device; nothing measured\n");
    return 0;
  }
  gemm::CudaExecutor::Options options;
  options.streams = 4;
  options.calibrate = false;
  auto ex = gemm::CudaExecutor::Create(options);
  if (!ex.ok()) {
    std::fprintf(stderr, "executor: %s\n", ex.status().ToString().c_str());
    return 1;
  }
  const gemm::DeviceDescription& dev = (*ex)->info().devices.front();
  std::printf("determinism_bench on %s (%u SMs): bf16 in, bf16 out, resident A and B; %d "
              "rounds of %.1f s off, then on\n",
              dev.name.c_str(), dev.multiprocessors, rounds, seconds);
  std::printf("%-44s %10s %10s %10s %10s | %8s %8s\n", "case", "off TF/s", "on TF/s",
              "off krnl", "on krnl", "on/off", "krnl");
  int errors = 0;
  for (const Case& c : Cases()) {
    std::vector<Operands> ops;
    uint64_t seed = 1;
    for (const Shape& s : c.pool) {
      Operands o;
      o.shape.m = s.m;
      o.shape.n = s.n;
      o.shape.k = s.k;
      o.shape.input_dtype = o.shape.output_dtype = DType::kBf16;
      o.shape.transpose_b = true;  // B stored N x K: both operands K-major
      o.a = Resident(ex->get(), gemm::MatrixA(o.shape, nullptr), seed++);
      o.b = Resident(ex->get(), gemm::MatrixB(o.shape, nullptr), seed++);
      ops.push_back(std::move(o));
    }
    Totals off, on;
    for (int r = 0; r < rounds; ++r) {
      for (bool det : {false, true}) {
        const Totals t = Run(ex->get(), c, ops, det, seconds);
        Totals& into = det ? on : off;
        into.flops += t.flops;
        into.compute_s += t.compute_s;
        into.wall_s += t.wall_s;
        into.problems += t.problems;
        into.errors += t.errors;
      }
    }
    errors += static_cast<int>(off.errors + on.errors);
    auto tf = [](double flops, double s) { return s > 0 ? flops / s / 1e12 : 0.0; };
    const double off_wall = tf(off.flops, off.wall_s), on_wall = tf(on.flops, on.wall_s);
    const double off_k = tf(off.flops, off.compute_s), on_k = tf(on.flops, on.compute_s);
    std::printf("%-44s %10.1f %10.1f %10.1f %10.1f | %8.3f %8.3f%s\n", c.name.c_str(), off_wall,
                on_wall, off_k, on_k, off_wall > 0 ? on_wall / off_wall : 0.0,
                off_k > 0 ? on_k / off_k : 0.0, off.errors + on.errors ? "  (errors)" : "");
    std::fflush(stdout);
  }
  std::printf("ratios: on/off of TFLOP/s over wall time, and over summed launch time (krnl)\n");
  return errors == 0 ? 0 : 1;
}
