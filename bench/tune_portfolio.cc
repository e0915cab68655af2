// The kernel portfolio's tuner and its benchmark (one GPU).
//
//   tune_portfolio tune  [--shapes=FILE] --table=OUT [options]
//     For each shape of FILE (bench/tuning_shapes.h; without --shapes, the
//     list DefaultTuningShapes names), times every portfolio
//     member the way a loaded server runs them (kernels/tuning/selection.h:
//     interleaved bursts, then the finalists alone, back to back, for
//     --sustained_s each, medians of rounds) and writes the choices to OUT
//     (kernels/tuning/tuning_table.h), keyed by this GPU, driver, CUDA
//     runtime, cuBLAS and build.
//   tune_portfolio bench [--shapes=FILE] --table=TABLE [options]
//     Per shape, the table's choice beside cuBLAS alone and our heuristic
//     alone, interleaved and sustained, in one run, as ratios.
//
// Options: --sustained_s=2 (each sustained run), --repeats=2 (sustained
// rounds; tune takes up to 2 more while noisy), --bursts=15 (interleaved
// rounds of 8 launches), --lt_algorithms=4 (cuBLASLt heuristic algorithms
// tried per shape), --finalists=2, --margin=0.01, --buckets_per_octave=4.
//
// The cuBLAS column is cuBLAS's own call for the class, for FP8 classes
// cuBLASLt with its heuristic's first algorithm.
//
// Method (bench/README.md): random inputs rotated over sets that exceed the
// L2 four times, outputs poisoned with 0xFF and each member's first output
// checked against cuBLAS (cuBLASLt for FP8), warm-up (each burst round and each sustained run
// starts with a burst), medians.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/portfolio_runner.h"
#include "bench/tuning_shapes.h"
#include "kernels/cublas/cublas_gemm.h"
#include "kernels/tuning/candidate.h"
#include "kernels/tuning/selection.h"
#include "kernels/tuning/tuning_table.h"

namespace {

using gemm_bench::PortfolioRunner;
using gemm_bench::TuningShape;
using gemm_kernels::tuning::CandidateFamily;
using gemm_kernels::tuning::CandidateId;
using gemm_kernels::tuning::CandidateToString;
using gemm_kernels::tuning::ClassToString;
using gemm_kernels::tuning::Median;
using gemm_kernels::tuning::ShapeClass;

struct Flags {
  std::string mode, shapes, table;
  double sustained_s = 2.0;
  int repeats = 2, bursts = 15, lt_algorithms = 4, finalists = 2, buckets_per_octave = 4;
  double margin = 0.01;
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: tune_portfolio tune|bench [--shapes=FILE] --table=PATH [--sustained_s=S]"
               " [--repeats=N] [--bursts=N] [--lt_algorithms=N] [--finalists=N] [--margin=F]"
               " [--buckets_per_octave=N]\n",
               why);
  return 2;
}

bool ParseFlags(int argc, char** argv, Flags* f, std::string* error) {
  if (argc < 2) {
    *error = "no mode";
    return false;
  }
  f->mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      *error = "bad argument " + arg;
      return false;
    }
    const std::string name = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
    bool ok = true;
    if (name == "shapes") {
      f->shapes = value;
    } else if (name == "table") {
      f->table = value;
    } else if (name == "sustained_s") {
      ok = absl::SimpleAtod(value, &f->sustained_s) && f->sustained_s > 0;
    } else if (name == "margin") {
      ok = absl::SimpleAtod(value, &f->margin);
    } else if (name == "repeats") {
      ok = absl::SimpleAtoi(value, &f->repeats) && f->repeats > 0;
    } else if (name == "bursts") {
      ok = absl::SimpleAtoi(value, &f->bursts) && f->bursts > 0;
    } else if (name == "lt_algorithms") {
      ok = absl::SimpleAtoi(value, &f->lt_algorithms) && f->lt_algorithms >= 0;
    } else if (name == "finalists") {
      ok = absl::SimpleAtoi(value, &f->finalists) && f->finalists >= 0;
    } else if (name == "buckets_per_octave") {
      ok = absl::SimpleAtoi(value, &f->buckets_per_octave) &&
           f->buckets_per_octave >= gemm_kernels::tuning::kMinBucketsPerOctave &&
           f->buckets_per_octave <= gemm_kernels::tuning::kMaxBucketsPerOctave;
    } else {
      *error = "unknown flag --" + name;
      return false;
    }
    if (!ok) {
      *error = "bad value for --" + name + ": " + value;
      return false;
    }
  }
  if (f->mode != "tune" && f->mode != "bench") {
    *error = "mode must be tune or bench";
    return false;
  }
  if (f->table.empty()) {
    *error = "--table is required";
    return false;
  }
  return true;
}

std::string CommandLine(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) absl::StrAppend(&s, i ? " " : "", argv[i]);
  return s;
}

std::string UtcNow() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm;
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// The cuBLAS baseline of a class: cuBLAS's own call for it, or for FP8
// cuBLASLt with its heuristic's first algorithm (a kCublasLt member with no
// configuration).
CandidateId CublasFor(const ShapeClass& c) {
  if (::gemm::IsFp8(c.in_dtype)) return CandidateId::CublasLtHeuristic();
  CandidateId id;
  id.family = c.kind == gemm_kernels::tuning::LaunchKind::kGrouped
                  ? CandidateFamily::kCublasGrouped
                  : (c.batch > 1 ? CandidateFamily::kCublasStridedBatched
                                 : CandidateFamily::kCublasGemmEx);
  return id;
}

int Tune(const Flags& f, const std::vector<TuningShape>& shapes,
         gemm_kernels::cublas::CublasContext* ctx, const gemm_kernels::tuning::TableKey& key,
         const std::string& command) {
  gemm_kernels::tuning::SelectionOptions options;
  options.burst_rounds = f.bursts;
  options.sustained_seconds = f.sustained_s;
  options.min_sustained_repeats = f.repeats;
  options.max_sustained_repeats = f.repeats + 2;
  options.sustained_finalists = f.finalists;
  options.min_margin = f.margin;
  if (absl::Status s = options.Validate(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  gemm_kernels::tuning::TuningTable table(key, f.buckets_per_octave);
  std::vector<std::string> notes = {absl::StrCat("made by: ", command),
                                    absl::StrCat("on ", UtcNow())};
  for (const TuningShape& shape : shapes) {
    absl::StatusOr<std::unique_ptr<PortfolioRunner>> runner = PortfolioRunner::Create(shape, ctx);
    if (!runner.ok()) {
      std::printf("%s: skipped: %s\n", shape.name.c_str(), std::string(runner.status().message()).c_str());
      continue;
    }
    const ShapeClass cls = (*runner)->Class(f.buckets_per_octave);
    if (table.Find(cls) != nullptr) {
      std::printf("%s: class already tuned by an earlier shape, skipped\n", shape.name.c_str());
      continue;
    }
    const std::vector<CandidateId> candidates = (*runner)->Candidates(f.lt_algorithms);
    absl::StatusOr<gemm_kernels::tuning::Selection> sel =
        gemm_kernels::tuning::SelectCandidate(candidates, **runner, options);
    std::printf("%s: class %s\n", shape.name.c_str(), ClassToString(cls).c_str());
    if (!sel.ok()) {
      std::printf("  no choice: %s\n", std::string(sel.status().message()).c_str());
      continue;
    }
    for (size_t i = 0; i < sel->records.size(); ++i) {
      const gemm_kernels::tuning::CandidateRecord& r = sel->records[i];
      if (!r.status.ok()) {
        std::printf("  %-60s skipped: %s\n", CandidateToString(r.id).c_str(),
                    std::string(r.status.message()).c_str());
        continue;
      }
      std::printf("  %-60s %-50s burst %9.2f us", CandidateToString(r.id).c_str(),
                  (*runner)->KernelName(r.id).c_str(), r.burst_median_us);
      if (r.finalist) std::printf("  sustained %9.2f us", r.sustained_median_us);
      std::printf("%s\n", i == sel->choice_index ? "  <- chosen" : "");
    }
    const gemm_kernels::tuning::CandidateRecord& chosen = sel->records[sel->choice_index];
    const gemm_kernels::tuning::CandidateRecord& def = sel->records[0];
    std::printf("  choice %s (%s)%s: %.1f TFLOP/s sustained\n", CandidateToString(sel->choice).c_str(),
                sel->reason.c_str(), sel->noisy ? ", noisy" : "",
                (*runner)->Flops() / (chosen.sustained_median_us * 1e-6) / 1e12);
    gemm_kernels::tuning::TableEntry entry;
    entry.shape = cls;
    entry.choice = sel->choice;
    entry.sustained_us = chosen.sustained_median_us;
    entry.interleaved_us = chosen.burst_median_us;
    entry.default_sustained_us = def.status.ok() ? def.sustained_median_us : 0;
    if (absl::Status s = table.Put(entry); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
    notes.push_back(absl::StrCat(shape.name, ": ", ClassToString(cls)));
  }
  if (absl::Status s = gemm_kernels::tuning::SaveTuningTable(table, f.table, notes); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %zu classes to %s\n", table.size(), f.table.c_str());
  return 0;
}

int Bench(const Flags& f, const std::vector<TuningShape>& shapes,
          gemm_kernels::cublas::CublasContext* ctx, const gemm_kernels::tuning::TableKey& key) {
  absl::StatusOr<gemm_kernels::tuning::LoadedTable> loaded =
      gemm_kernels::tuning::LoadTuningTable(f.table, key);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  if (!loaded->ignored_reason.empty()) {
    std::printf("table ignored (%s): the tuned column is the default everywhere\n",
                loaded->ignored_reason.c_str());
  }
  const gemm_kernels::tuning::TuningTable& table = loaded->table;
  std::printf("%-22s %-44s | %-9s %-9s %-9s | %-9s %-9s %-9s | %-14s %-14s\n", "shape", "tuned choice",
              "int tuned", "cublas", "ours", "sus tuned", "cublas", "ours", "vs cuBLAS i/s",
              "vs better i/s");
  double log_vs_cublas = 0, log_vs_better = 0;
  int counted = 0;
  for (const TuningShape& shape : shapes) {
    absl::StatusOr<std::unique_ptr<PortfolioRunner>> runner = PortfolioRunner::Create(shape, ctx);
    if (!runner.ok()) {
      std::printf("%s: skipped: %s\n", shape.name.c_str(), std::string(runner.status().message()).c_str());
      continue;
    }
    const ShapeClass cls = (*runner)->Class(table.buckets_per_octave());
    const CandidateId tuned = table.Choose(cls);
    const CandidateId three[] = {tuned, CublasFor(cls),
                                 gemm_kernels::tuning::DefaultCandidate(cls.kind)};
    bool ok = true;
    for (const CandidateId& c : three) {
      if (absl::Status s = (*runner)->Prepare(c); !s.ok()) {
        std::printf("%s: %s failed: %s\n", shape.name.c_str(), CandidateToString(c).c_str(),
                    std::string(s.message()).c_str());
        ok = false;
      }
    }
    if (!ok) continue;
    std::vector<double> burst[3], sustained[3];
    for (int round = 0; round < f.bursts && ok; ++round) {
      for (int i = 0; i < 3 && ok; ++i) {
        absl::StatusOr<double> t = (*runner)->RunBurst(three[i], 8);
        ok = t.ok();
        if (ok) burst[i].push_back(*t);
      }
    }
    for (int round = 0; round < f.repeats && ok; ++round) {
      for (int i = 0; i < 3 && ok; ++i) {
        absl::StatusOr<double> t = (*runner)->RunSustained(three[i], f.sustained_s);
        ok = t.ok();
        if (ok) sustained[i].push_back(*t);
      }
    }
    if (!ok) {
      std::printf("%s: a run failed\n", shape.name.c_str());
      continue;
    }
    double bi[3], su[3];
    for (int i = 0; i < 3; ++i) {
      bi[i] = Median(burst[i]);
      su[i] = Median(sustained[i]);
    }
    // Speedups of the tuned choice: cuBLAS's time over its time, and the
    // better of cuBLAS and ours over its time.
    const double vs_cublas_i = bi[1] / bi[0], vs_cublas_s = su[1] / su[0];
    const double vs_better_i = std::min(bi[1], bi[2]) / bi[0];
    const double vs_better_s = std::min(su[1], su[2]) / su[0];
    std::printf("%-22s %-44s | %9.2f %9.2f %9.2f | %9.2f %9.2f %9.2f | %6.3f %6.3f  %6.3f %6.3f\n",
                shape.name.c_str(), CandidateToString(tuned).c_str(), bi[0], bi[1], bi[2], su[0],
                su[1], su[2], vs_cublas_i, vs_cublas_s, vs_better_i, vs_better_s);
    log_vs_cublas += std::log(vs_cublas_s);
    log_vs_better += std::log(vs_better_s);
    ++counted;
  }
  if (counted > 0) {
    std::printf("geometric mean over %d shapes, sustained: tuned vs cuBLAS %.3fx, vs the better of "
                "cuBLAS and ours %.3fx\n",
                counted, std::exp(log_vs_cublas / counted), std::exp(log_vs_better / counted));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  std::string error;
  if (!ParseFlags(argc, argv, &flags, &error)) return Usage(error.c_str());
  std::string text = gemm_bench::DefaultTuningShapes();
  if (!flags.shapes.empty()) {
    std::ifstream in(flags.shapes);
    if (!in) return Usage(("cannot read " + flags.shapes).c_str());
    std::stringstream file;
    file << in.rdbuf();
    text = file.str();
  }
  absl::StatusOr<std::vector<TuningShape>> shapes = gemm_bench::ParseTuningShapes(text);
  if (!shapes.ok()) return Usage(std::string(shapes.status().message()).c_str());

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "tune_portfolio needs a CUDA GPU; none is usable here\n");
    return 1;
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    std::fprintf(stderr, "cudaStreamCreate failed\n");
    return 1;
  }
  int rc = 1;
  {
    absl::StatusOr<std::unique_ptr<gemm_kernels::cublas::CublasContext>> ctx =
        gemm_kernels::cublas::CublasContext::Create(stream, {});
    if (!ctx.ok()) {
      std::fprintf(stderr, "%s\n", std::string(ctx.status().message()).c_str());
      return 1;
    }
    absl::StatusOr<gemm_kernels::tuning::TableKey> key = gemm_bench::CurrentTableKey(**ctx);
    if (!key.ok()) {
      std::fprintf(stderr, "%s\n", std::string(key.status().message()).c_str());
      return 1;
    }
    std::printf("device %s, driver %s, CUDA runtime %s, cuBLAS %s, build %s\n", key->gpu.c_str(),
                key->driver.c_str(), key->cuda_runtime.c_str(), key->cublas.c_str(),
                key->build.c_str());
    rc = flags.mode == "tune" ? Tune(flags, *shapes, ctx->get(), *key, CommandLine(argc, argv))
                              : Bench(flags, *shapes, ctx->get(), *key);
  }
  cudaStreamDestroy(stream);
  return rc;
}
