#include "kernels/tuning/selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace gemm_kernels {
namespace tuning {
namespace {

bool IsCublas(const CandidateId& c) {
  return c.family == CandidateFamily::kCublasGemmEx ||
         c.family == CandidateFamily::kCublasStridedBatched ||
         c.family == CandidateFamily::kCublasGrouped || c.family == CandidateFamily::kCublasLt;
}

double Spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double median = Median(v);
  return median > 0 ? (*hi - *lo) / median : 0;
}

bool ValidTime(const absl::StatusOr<double>& t) {
  return t.ok() && std::isfinite(*t) && *t > 0;
}

absl::Status RunError(const absl::StatusOr<double>& t, const char* what) {
  if (!t.ok()) return t.status();
  return absl::InternalError(absl::StrCat(what, " gave ", *t, " us per launch"));
}

// Indices of live candidates ordered by `key` ascending, ties by index.
template <typename Key>
std::vector<size_t> RankBy(const std::vector<CandidateRecord>& records, Key key) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].status.ok()) idx.push_back(i);
  }
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return key(records[a]) < key(records[b]); });
  return idx;
}

}  // namespace

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return (lower + upper) / 2;
}

absl::Status SelectionOptions::Validate() const {
  if (burst_rounds < 1) return absl::InvalidArgumentError("burst_rounds must be at least 1");
  if (burst_launches < 1) return absl::InvalidArgumentError("burst_launches must be at least 1");
  if (sustained_finalists < 0) {
    return absl::InvalidArgumentError("sustained_finalists must not be negative");
  }
  if (!(sustained_seconds > 0)) {
    return absl::InvalidArgumentError("sustained_seconds must be positive");
  }
  if (min_sustained_repeats < 1) {
    return absl::InvalidArgumentError("min_sustained_repeats must be at least 1");
  }
  if (max_sustained_repeats < min_sustained_repeats) {
    return absl::InvalidArgumentError(
        "max_sustained_repeats must be at least min_sustained_repeats");
  }
  if (!(noise_limit >= 0)) return absl::InvalidArgumentError("noise_limit must not be negative");
  if (!(min_margin >= 0 && min_margin < 1)) {
    return absl::InvalidArgumentError("min_margin must be in [0, 1)");
  }
  if (!(tie_margin >= 0 && tie_margin < 1)) {
    return absl::InvalidArgumentError("tie_margin must be in [0, 1)");
  }
  return absl::OkStatus();
}

absl::StatusOr<Selection> SelectCandidate(const std::vector<CandidateId>& candidates,
                                          CandidateRunner& runner,
                                          const SelectionOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (candidates.empty()) return absl::InvalidArgumentError("candidates: the list is empty");
  Selection sel;
  sel.records.resize(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    sel.records[i].id = candidates[i];
    sel.records[i].status = runner.Prepare(candidates[i]);
  }

  for (int round = 0; round < options.burst_rounds; ++round) {
    for (CandidateRecord& r : sel.records) {
      if (!r.status.ok()) continue;
      absl::StatusOr<double> t = runner.RunBurst(r.id, options.burst_launches);
      if (!ValidTime(t)) {
        r.status = RunError(t, "a burst");
        continue;
      }
      r.burst_us.push_back(*t);
    }
  }
  for (CandidateRecord& r : sel.records) {
    if (r.status.ok()) r.burst_median_us = Median(r.burst_us);
  }

  std::vector<size_t> finalists;
  auto add_finalist = [&](size_t i) {
    if (!sel.records[i].finalist) {
      sel.records[i].finalist = true;
      finalists.push_back(i);
    }
  };
  const std::vector<size_t> by_burst =
      RankBy(sel.records, [](const CandidateRecord& r) { return r.burst_median_us; });
  if (sel.records[0].status.ok()) add_finalist(0);
  for (size_t i : by_burst) {
    if (IsCublas(sel.records[i].id)) {
      add_finalist(i);
      break;
    }
  }
  for (size_t j = 0; j < by_burst.size() && j < static_cast<size_t>(options.sustained_finalists);
       ++j) {
    add_finalist(by_burst[j]);
  }
  std::sort(finalists.begin(), finalists.end());

  auto sustained_round = [&]() {
    for (size_t i : finalists) {
      CandidateRecord& r = sel.records[i];
      if (!r.status.ok()) continue;
      absl::StatusOr<double> t = runner.RunSustained(r.id, options.sustained_seconds);
      if (!ValidTime(t)) {
        r.status = RunError(t, "a sustained run");
        continue;
      }
      r.sustained_us.push_back(*t);
    }
  };
  auto any_noisy = [&]() {
    for (size_t i : finalists) {
      const CandidateRecord& r = sel.records[i];
      if (r.status.ok() && Spread(r.sustained_us) > options.noise_limit) return true;
    }
    return false;
  };
  int rounds = 0;
  for (; rounds < options.min_sustained_repeats; ++rounds) sustained_round();
  while (rounds < options.max_sustained_repeats && any_noisy()) {
    sustained_round();
    ++rounds;
  }
  sel.noisy = any_noisy();

  std::vector<size_t> ran;
  for (size_t i : finalists) {
    CandidateRecord& r = sel.records[i];
    if (!r.status.ok()) continue;
    r.sustained_median_us = Median(r.sustained_us);
    ran.push_back(i);
  }
  if (ran.empty()) {
    std::string why;
    for (const CandidateRecord& r : sel.records) {
      absl::StrAppend(&why, why.empty() ? "" : "; ", CandidateToString(r.id), ": ",
                      r.status.ok() ? "not a finalist" : r.status.message());
    }
    return absl::FailedPreconditionError(absl::StrCat("no candidate ran: ", why));
  }

  double fastest = sel.records[ran[0]].sustained_median_us;
  for (size_t i : ran) fastest = std::min(fastest, sel.records[i].sustained_median_us);
  size_t winner = ran[0];
  for (size_t i : ran) {  // `ran` is in list order: the first tied one wins
    if (sel.records[i].sustained_median_us <= fastest * (1 + options.tie_margin)) {
      winner = i;
      break;
    }
  }
  sel.reason = sel.records[winner].sustained_median_us == fastest ? "fastest"
                                                                   : "tied with a faster one";
  if (ran.size() == 1) sel.reason = "the only finalist that ran";
  const CandidateRecord& def = sel.records[0];
  if (winner != 0 && def.status.ok() && def.finalist &&
      sel.records[winner].sustained_median_us > def.sustained_median_us * (1 - options.min_margin)) {
    winner = 0;
    sel.reason = "within the margin of the default";
  }
  sel.choice_index = winner;
  sel.choice = sel.records[winner].id;
  return sel;
}

}  // namespace tuning
}  // namespace gemm_kernels
