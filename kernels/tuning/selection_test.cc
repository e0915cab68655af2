#include "kernels/tuning/selection.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace gemm_kernels {
namespace tuning {
namespace {

CandidateId Ours(TileHint t, ScheduleHint s) {
  CandidateId c;
  c.tile = t;
  c.schedule = s;
  return c;
}

CandidateId Cublas() {
  CandidateId c;
  c.family = CandidateFamily::kCublasGemmEx;
  return c;
}

// A fake timer: each candidate has a true time per launch for bursts and
// one for sustained runs (the sustained one may be slower: the clock drops
// at the power cap), plus multiplicative noise drawn from a seeded
// generator. Candidates can fail Prepare or fail on their n-th run.
class FakeRunner : public CandidateRunner {
 public:
  struct Behaviour {
    double burst_us = 100;
    double sustained_us = 100;
    absl::Status prepare = absl::OkStatus();
    int fail_on_run = -1;  // the run (counted over bursts and sustained) that errors
  };

  explicit FakeRunner(double noise = 0, uint32_t seed = 1) : noise_(noise), rng_(seed) {}

  void Set(const CandidateId& c, Behaviour b) { behaviour_[CandidateToString(c)] = b; }
  // Multiplies successive sustained samples of each candidate by these
  // factors in turn (instead of random noise).
  void SetPattern(std::vector<double> factors) { pattern_ = std::move(factors); }

  absl::Status Prepare(const CandidateId& c) override {
    prepared_.push_back(CandidateToString(c));
    return At(c).prepare;
  }
  absl::StatusOr<double> RunBurst(const CandidateId& c, int launches) override {
    EXPECT_GT(launches, 0);
    if (Fails(c)) return absl::InternalError("launch failed: an illegal memory access");
    return At(c).burst_us * Noise();
  }
  absl::StatusOr<double> RunSustained(const CandidateId& c, double seconds) override {
    EXPECT_GT(seconds, 0);
    sustained_runs_[CandidateToString(c)]++;
    if (Fails(c)) return absl::InternalError("launch failed: an illegal memory access");
    if (!pattern_.empty()) {
      const int i = sustained_runs_[CandidateToString(c)] - 1;
      return At(c).sustained_us * pattern_[i % pattern_.size()];
    }
    return At(c).sustained_us * Noise();
  }

  int SustainedRuns(const CandidateId& c) { return sustained_runs_[CandidateToString(c)]; }
  const std::vector<std::string>& prepared() const { return prepared_; }

 private:
  Behaviour& At(const CandidateId& c) { return behaviour_[CandidateToString(c)]; }
  bool Fails(const CandidateId& c) {
    const int run = runs_[CandidateToString(c)]++;
    return At(c).fail_on_run == run;
  }
  double Noise() {
    if (noise_ == 0) return 1;
    std::uniform_real_distribution<double> d(1 - noise_, 1 + noise_);
    return d(rng_);
  }

  double noise_;
  std::mt19937 rng_;
  std::map<std::string, Behaviour> behaviour_;
  std::map<std::string, int> runs_;
  std::map<std::string, int> sustained_runs_;
  std::vector<std::string> prepared_;
  std::vector<double> pattern_;
};

SelectionOptions Fast() {
  SelectionOptions o;
  o.sustained_seconds = 0.01;
  return o;
}

const std::vector<CandidateId> kFour = {CandidateId::Heuristic(),
                                        Ours(TileHint::k128x128, ScheduleHint::kDataParallel),
                                        Ours(TileHint::k192x192, ScheduleHint::kStreamK),
                                        Cublas()};

TEST(SelectionTest, SustainedFiguresDecideNotBursts) {
  FakeRunner runner;
  // cuBLAS is slower in short bursts but holds a higher clock at the power
  // cap: the sustained figure must decide.
  runner.Set(kFour[0], {100, 110});
  runner.Set(kFour[1], {130, 140});
  runner.Set(kFour[2], {120, 125});
  runner.Set(kFour[3], {104, 100});
  absl::StatusOr<Selection> s = SelectCandidate(kFour, runner, Fast());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->choice, Cublas());
  EXPECT_EQ(s->choice_index, 3u);
  EXPECT_EQ(s->reason, "fastest");
  EXPECT_DOUBLE_EQ(s->records[3].sustained_median_us, 100);
  EXPECT_DOUBLE_EQ(s->records[3].burst_median_us, 104);
  EXPECT_EQ(s->records[3].burst_us.size(), static_cast<size_t>(Fast().burst_rounds));
  EXPECT_FALSE(s->noisy);
}

TEST(SelectionTest, FinalistsAreTheDefaultTheBestCublasAndTheFastestBursts) {
  FakeRunner runner;
  std::vector<CandidateId> list = kFour;
  list.push_back(Ours(TileHint::k128x256, ScheduleHint::kSplitK));
  runner.Set(list[0], {150, 150});
  runner.Set(list[1], {100, 100});
  runner.Set(list[2], {101, 101});
  runner.Set(list[3], {200, 200});
  runner.Set(list[4], {300, 300});
  SelectionOptions o = Fast();
  o.sustained_finalists = 2;
  absl::StatusOr<Selection> s = SelectCandidate(list, runner, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->records[0].finalist);   // the default
  EXPECT_TRUE(s->records[1].finalist);   // fastest burst
  EXPECT_TRUE(s->records[2].finalist);   // second fastest
  EXPECT_TRUE(s->records[3].finalist);   // best cuBLAS, though slow
  EXPECT_FALSE(s->records[4].finalist);
  EXPECT_EQ(runner.SustainedRuns(list[4]), 0);
  EXPECT_EQ(runner.SustainedRuns(list[1]), o.min_sustained_repeats);
  EXPECT_EQ(s->records[4].sustained_median_us, 0);
  EXPECT_EQ(s->choice, list[1]);
}

TEST(SelectionTest, TiesGoToTheDefaultThenToListOrder) {
  FakeRunner runner;
  for (const CandidateId& c : kFour) runner.Set(c, {100, 100});
  absl::StatusOr<Selection> s = SelectCandidate(kFour, runner, Fast());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->choice, CandidateId::Heuristic());

  // Without the default among the tied, the earliest tied one wins even if
  // a later one is a hair faster (inside tie_margin).
  FakeRunner runner2;
  runner2.Set(kFour[0], {200, 200});
  runner2.Set(kFour[1], {100, 100.2});
  runner2.Set(kFour[2], {100, 100.1});
  runner2.Set(kFour[3], {100, 100});
  s = SelectCandidate(kFour, runner2, Fast());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->choice, kFour[1]);
  EXPECT_EQ(s->reason, "tied with a faster one");
}

TEST(SelectionTest, NonDefaultMustBeatTheDefaultByTheMargin) {
  FakeRunner runner;
  runner.Set(kFour[0], {100, 100});
  runner.Set(kFour[1], {300, 300});
  runner.Set(kFour[2], {300, 300});
  runner.Set(kFour[3], {99.5, 99.5});  // 0.5% faster: inside a 1% margin
  SelectionOptions o = Fast();
  o.min_margin = 0.01;
  absl::StatusOr<Selection> s = SelectCandidate(kFour, runner, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->choice, CandidateId::Heuristic());
  EXPECT_EQ(s->reason, "within the margin of the default");

  runner.Set(kFour[3], {98, 98});  // 2% faster: past the margin
  s = SelectCandidate(kFour, runner, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->choice, Cublas());
}

TEST(SelectionTest, NoisyMeasurementsTakeMoreRoundsAndMediansHold) {
  // Samples cycling through +5%, -5% and 0 spread by 10%, past a 2% limit:
  // the tuner takes the most rounds, says the result is noisy, and the
  // medians are the true times.
  FakeRunner cycling;
  cycling.SetPattern({1.05, 0.95, 1.0});
  cycling.Set(kFour[0], {100, 110});
  cycling.Set(kFour[1], {150, 150});
  cycling.Set(kFour[2], {150, 150});
  cycling.Set(kFour[3], {100, 100});
  SelectionOptions o = Fast();
  o.min_sustained_repeats = 3;
  o.max_sustained_repeats = 7;
  absl::StatusOr<Selection> s = SelectCandidate(kFour, cycling, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->choice, Cublas());
  EXPECT_TRUE(s->noisy);
  EXPECT_EQ(cycling.SustainedRuns(kFour[3]), 7);
  EXPECT_DOUBLE_EQ(s->records[0].sustained_median_us, 110);
  // Random +-5% noise over many seeds: the medians still separate
  // candidates 10% apart.
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    FakeRunner runner(0.05, seed);
    runner.Set(kFour[0], {100, 110});
    runner.Set(kFour[1], {150, 150});
    runner.Set(kFour[2], {150, 150});
    runner.Set(kFour[3], {100, 100});
    s = SelectCandidate(kFour, runner, o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->choice, Cublas()) << "seed " << seed;
  }
  // Quiet measurements stop at the minimum.
  FakeRunner quiet(0.001, 3);
  for (const CandidateId& c : kFour) quiet.Set(c, {100, 100});
  o = Fast();
  o.max_sustained_repeats = 7;
  s = SelectCandidate(kFour, quiet, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->noisy);
  EXPECT_EQ(quiet.SustainedRuns(kFour[0]), o.min_sustained_repeats);
}

TEST(SelectionTest, CandidateFailingCanImplementIsSkippedAndRecorded) {
  FakeRunner runner;
  runner.Set(kFour[0], {100, 100});
  runner.Set(kFour[1], {50, 50});
  runner.Set(kFour[2], {90, 90});
  runner.Set(kFour[3], {95, 95});
  FakeRunner::Behaviour refused;
  refused.prepare = absl::InvalidArgumentError("a.ld: 7 is not a multiple of 16 bytes");
  runner.Set(kFour[1], refused);
  absl::StatusOr<Selection> s = SelectCandidate(kFour, runner, Fast());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records[1].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s->records[1].burst_us.empty());
  EXPECT_FALSE(s->records[1].finalist);
  EXPECT_EQ(s->choice, kFour[2]);
  EXPECT_EQ(runner.prepared().size(), 4u);
}

TEST(SelectionTest, CandidateFailingMidRunIsDropped) {
  FakeRunner runner;
  runner.Set(kFour[0], {100, 100});
  FakeRunner::Behaviour crashes{50, 50};
  crashes.fail_on_run = 17;  // past the bursts: during the sustained runs
  runner.Set(kFour[1], crashes);
  runner.Set(kFour[2], {120, 120});
  runner.Set(kFour[3], {95, 95});
  absl::StatusOr<Selection> s = SelectCandidate(kFour, runner, Fast());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records[1].status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s->choice, Cublas());
}

TEST(SelectionTest, DefaultFailingLeavesTheBestOfTheRest) {
  FakeRunner runner;
  FakeRunner::Behaviour refused;
  refused.prepare = absl::FailedPreconditionError("no Hopper GPU");
  runner.Set(kFour[0], refused);
  runner.Set(kFour[1], {100, 100});
  runner.Set(kFour[2], {99.9, 99.9});
  runner.Set(kFour[3], {120, 120});
  absl::StatusOr<Selection> s = SelectCandidate(kFour, runner, Fast());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->choice, kFour[1]);  // tied with kFour[2], earlier in the list
}

TEST(SelectionTest, NothingRunsIsAnErrorListingWhy) {
  FakeRunner runner;
  FakeRunner::Behaviour refused;
  refused.prepare = absl::InvalidArgumentError("refused here");
  for (const CandidateId& c : kFour) runner.Set(c, refused);
  absl::StatusOr<Selection> s = SelectCandidate(kFour, runner, Fast());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.status().message()).find("cublas_gemm_ex: refused here"),
            std::string::npos)
      << s.status();
}

TEST(SelectionTest, RejectsBadOptionsAndEmptyLists) {
  FakeRunner runner;
  EXPECT_EQ(SelectCandidate({}, runner, Fast()).status().code(),
            absl::StatusCode::kInvalidArgument);
  SelectionOptions o = Fast();
  o.max_sustained_repeats = o.min_sustained_repeats - 1;
  absl::StatusOr<Selection> s = SelectCandidate(kFour, runner, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("max_sustained_repeats"), std::string::npos);
  o = Fast();
  o.sustained_seconds = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = Fast();
  o.min_margin = 1;
  EXPECT_FALSE(o.Validate().ok());
}

TEST(SelectionTest, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
}

}  // namespace
}  // namespace tuning
}  // namespace gemm_kernels
