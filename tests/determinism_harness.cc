#include "tests/determinism_harness.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "common/dtype.h"
#include "service/queue/launch_plan.h"

namespace gemm {
namespace test {
namespace {

// One problem's operands, kept for the whole check; every run writes a
// fresh D.
struct Spec {
  GemmShape shape;
  double alpha = 1.0;
  double beta = 0.0;
  std::string a, b, c;
  std::string name;
};

// Uniform values in [-1, 1) from one draw of `rng` and a xorshift stream:
// the GPU test fills gigabytes of operands, which the distribution objects
// would take minutes for.
std::string RandomBytes(DType t, uint64_t n, std::mt19937_64* rng) {
  uint64_t x = (*rng)() | 1;
  std::vector<float> values(n);
  for (float& v : values) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
  std::string out(n * SizeOf(t), '\0');
  FromFloat(t, values.data(), out.data(), n);
  return out;
}

const char* LayoutLetter(Layout l) { return l == Layout::kRowMajor ? "r" : "c"; }

std::string Describe(const Spec& s) {
  const GemmShape& g = s.shape;
  return absl::StrCat(g.m, "x", g.n, "x", g.k, " ", DTypeName(g.input_dtype), "->",
                      DTypeName(g.output_dtype), " ta=", g.transpose_a, " tb=", g.transpose_b,
                      " a", LayoutLetter(g.layout_a), " b", LayoutLetter(g.layout_b), " d",
                      LayoutLetter(g.layout_d), " alpha=", s.alpha, " beta=", s.beta);
}

// A problem of the same shape, alpha and beta as `like` with new data (a
// strided-batch partner), or a new random problem when `like` is null.
Spec MakeSpec(const DeterminismOptions& o, const Spec* like, std::mt19937_64* rng) {
  Spec s;
  if (like != nullptr) {
    s.shape = like->shape;
    s.alpha = like->alpha;
    s.beta = like->beta;
  } else {
    std::uniform_int_distribution<int> coin(0, 1), quarter(0, 3);
    std::uniform_int_distribution<size_t> dtype(0, o.dtypes.size() - 1);
    std::uniform_int_distribution<uint64_t> dim(1, o.max_dim), skinny(1, o.max_skinny),
        deep(o.deep_k_min, o.deep_k_max);
    GemmShape& g = s.shape;
    const bool k_heavy = quarter(*rng) == 0;
    g.m = k_heavy ? skinny(*rng) : dim(*rng);
    g.n = k_heavy ? skinny(*rng) : dim(*rng);
    g.k = k_heavy ? deep(*rng) : dim(*rng);
    g.input_dtype = o.dtypes[dtype(*rng)];
    const DType outs[] = {g.input_dtype, DType::kFp32};
    g.output_dtype = outs[coin(*rng)];
    g.allow_tf32 = g.input_dtype == DType::kFp32 && o.allow_tf32 && coin(*rng);
    g.transpose_a = coin(*rng);
    g.transpose_b = coin(*rng);
    g.layout_a = coin(*rng) ? Layout::kRowMajor : Layout::kColMajor;
    g.layout_b = coin(*rng) ? Layout::kRowMajor : Layout::kColMajor;
    g.layout_d = quarter(*rng) == 0 ? Layout::kColMajor : Layout::kRowMajor;
    g.layout_c = g.layout_d;
    const double alphas[] = {1.0, 0.5, -1.25};
    s.alpha = alphas[std::uniform_int_distribution<int>(0, 2)(*rng)];
    s.beta = quarter(*rng) == 0 ? 0.75 : 0.0;
  }
  s.a = RandomBytes(s.shape.input_dtype, s.shape.m * s.shape.k, rng);
  s.b = RandomBytes(s.shape.input_dtype, s.shape.k * s.shape.n, rng);
  if (s.beta != 0.0) s.c = RandomBytes(s.shape.output_dtype, s.shape.m * s.shape.n, rng);
  s.name = Describe(s);
  return s;
}

// One run of one problem: its item and the D it writes.
struct Run {
  const Spec* spec = nullptr;
  int index = -1;  // the problem's index, or -1 for a partner
  std::shared_ptr<WorkItem> item;
  std::shared_ptr<std::string> d;
  absl::Status status;
};

Run MakeRun(const Spec& s, int index, bool deterministic) {
  Run r;
  r.spec = &s;
  r.index = index;
  r.d = std::make_shared<std::string>(s.shape.m * s.shape.n * SizeOf(s.shape.output_dtype),
                                      '\xff');
  GemmProblemRef p;
  p.shape = s.shape;
  p.alpha = s.alpha;
  p.beta = s.beta;
  p.a = MatrixA(s.shape, s.a.data());
  p.b = MatrixB(s.shape, s.b.data());
  if (s.beta != 0.0) p.c = MatrixC(s.shape, s.c.data());
  p.d = r.d->data();
  r.item = std::make_shared<WorkItem>();
  r.item->problems.push_back(p);
  r.item->deterministic = deterministic;
  return r;
}

uint64_t Fnv1a(const std::string& bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

class Checker {
 public:
  Checker(Executor* executor, const DeterminismOptions& options)
      : executor_(executor), options_(options) {
    plan_.grouped_supported = options.grouped_supported;
  }

  // Runs `runs` as one batch (the plan decides its launches) and waits.
  void RunBatch(std::vector<Run>* runs, bool as_singles) {
    std::vector<std::shared_ptr<WorkItem>> items;
    for (Run& r : *runs) items.push_back(r.item);
    absl::BlockingCounter done(static_cast<int>(runs->size()));
    for (Run& r : *runs) {
      r.item->done = [&done, status = &r.status](const absl::Status& s, const ExecutionReport&) {
        *status = s;
        done.DecrementCount();
      };
    }
    Batch batch = as_singles ? SingleLaunchBatch(items) : Batch();
    if (!as_singles) {
      batch.launches = PlanLaunches(items, plan_);
      batch.items = std::move(items);
    }
    {
      absl::MutexLock lock(&mu_);
      for (const LaunchGroup& l : batch.launches) ++launch_kinds_[LaunchKindName(l.kind)];
    }
    executor_->Execute(std::move(batch));
    done.Wait();
  }

  // Compares each problem run of `runs` with its lone result.
  void Compare(const std::vector<Run>& runs, const std::string& phase,
               const std::vector<std::string>& alone, DeterminismResult* result) {
    absl::MutexLock lock(&mu_);
    for (const Run& r : runs) {
      if (r.index < 0) continue;
      ++result->compared;
      const bool same = r.status.ok() && *r.d == alone[r.index];
      if (same) continue;
      ++result->mismatched;
      if (!r.status.ok()) ++result->errors;
      ++mismatches_[phase];
      if (result->examples.size() < 20) {
        result->examples.push_back(absl::StrCat(
            phase, ": ", r.spec->name,
            r.status.ok() ? " (bits differ)" : absl::StrCat(" (", r.status.ToString(), ")")));
      }
    }
  }

  void Finish(DeterminismResult* result) {
    absl::MutexLock lock(&mu_);
    for (const char* phase : {"strided", "grouped", "concurrent"})
      result->by_phase.emplace_back(phase, mismatches_[phase]);
    for (const auto& [kind, count] : launch_kinds_) result->launch_kinds.emplace_back(kind, count);
  }

 private:
  Executor* const executor_;
  const DeterminismOptions options_;
  LaunchPlanOptions plan_;
  absl::Mutex mu_;
  std::map<std::string, int> mismatches_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> launch_kinds_ ABSL_GUARDED_BY(mu_);
};

// Appends problem `i` and up to max_strided_partners partners of its shape
// (at least one, so that it forms a strided batch) in random order.
void AddWithPartners(const std::vector<Spec>& specs, int i, const DeterminismOptions& o,
                     std::vector<std::unique_ptr<Spec>>* partners, std::mt19937_64* rng,
                     std::vector<Run>* runs) {
  std::uniform_int_distribution<int> count(1, std::max(1, o.max_strided_partners));
  std::vector<Run> mine = {MakeRun(specs[i], i, o.deterministic)};
  for (int p = count(*rng); p > 0; --p) {
    partners->push_back(std::make_unique<Spec>(MakeSpec(o, &specs[i], rng)));
    mine.push_back(MakeRun(*partners->back(), -1, o.deterministic));
  }
  std::shuffle(mine.begin(), mine.end(), *rng);
  for (Run& r : mine) runs->push_back(std::move(r));
}

}  // namespace

DeterminismResult RunDeterminismCheck(Executor* executor, const DeterminismOptions& o) {
  DeterminismResult result;
  Checker checker(executor, o);
  std::mt19937_64 rng(o.seed);
  std::vector<Spec> specs;
  specs.reserve(o.problems);
  for (int i = 0; i < o.problems; ++i) specs.push_back(MakeSpec(o, nullptr, &rng));

  // Alone: one problem per batch, one launch.
  std::vector<std::string> alone(specs.size());
  result.digest = 1469598103934665603ull;
  for (int i = 0; i < o.problems; ++i) {
    std::vector<Run> runs = {MakeRun(specs[i], i, o.deterministic)};
    checker.RunBatch(&runs, true);
    alone[i] = runs[0].status.ok() ? *runs[0].d : std::string();
    if (!runs[0].status.ok()) {
      ++result.errors;
      result.examples.push_back(
          absl::StrCat("alone: ", specs[i].name, " (", runs[0].status.ToString(), ")"));
    }
    result.problem_names.push_back(specs[i].name);
    result.problem_digests.push_back(Fnv1a(alone[i]));
    result.digest = Fnv1a(alone[i], result.digest);
  }

  std::vector<std::unique_ptr<Spec>> partners;
  // Strided: each problem beside partners of its shape, several problems'
  // batches in one executor batch.
  for (int i = 0; i < o.problems;) {
    std::vector<Run> runs;
    for (int j = 0; j < 4 && i < o.problems; ++j, ++i)
      AddWithPartners(specs, i, o, &partners, &rng, &runs);
    checker.RunBatch(&runs, false);
    checker.Compare(runs, "strided", alone, &result);
  }
  partners.clear();

  // Grouped: random lists of distinct problems, so mixed shapes of one
  // dtype meet in grouped launches.
  std::vector<int> order(specs.size());
  for (int i = 0; i < o.problems; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> group(2, std::max(2, o.max_group));
  for (size_t next = 0; next < order.size();) {
    std::vector<Run> runs;
    for (int n = group(rng); n > 0 && next < order.size(); --n, ++next)
      runs.push_back(MakeRun(specs[order[next]], order[next], o.deterministic));
    checker.RunBatch(&runs, false);
    checker.Compare(runs, "grouped", alone, &result);
  }

  // Concurrent: threads submit mixed batches (strided partners and grouped
  // lists together) at once, filling the executor's slots.
  const int threads = std::max(1, std::min(o.threads, executor->max_concurrent_batches()));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 local(o.seed * 1000 + t);
      std::vector<std::unique_ptr<Spec>> own_partners;
      for (int i = t; i < o.problems;) {
        std::vector<Run> runs;
        for (int j = 0; j < 6 && i < o.problems; ++j, i += threads) {
          if (j % 2 == 0) {
            AddWithPartners(specs, i, o, &own_partners, &local, &runs);
          } else {
            runs.push_back(MakeRun(specs[i], i, o.deterministic));
          }
        }
        std::shuffle(runs.begin(), runs.end(), local);
        checker.RunBatch(&runs, false);
        checker.Compare(runs, "concurrent", alone, &result);
        own_partners.clear();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  checker.Finish(&result);
  return result;
}

bool WriteDigests(const DeterminismResult& result, const std::string& path) {
  std::ofstream out(path);
  if (!out) return false;
  for (size_t i = 0; i < result.problem_digests.size(); ++i)
    out << absl::StrCat(absl::Hex(result.problem_digests[i], absl::kZeroPad16)) << " "
        << result.problem_names[i] << "\n";
  out << "total " << absl::StrCat(absl::Hex(result.digest, absl::kZeroPad16)) << "\n";
  return static_cast<bool>(out);
}

}  // namespace test
}  // namespace gemm
