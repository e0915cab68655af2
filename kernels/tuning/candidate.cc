#include "kernels/tuning/candidate.h"

#include <cstdlib>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gemm_kernels {
namespace tuning {
namespace {

constexpr TileHint kTiles[] = {TileHint::k128x256, TileHint::k128x128,
                               TileHint::k128x128PingPong, TileHint::k128x64,
                               TileHint::k192x192};
constexpr ScheduleHint kSchedules[] = {ScheduleHint::kDataParallel, ScheduleHint::kStreamK,
                                       ScheduleHint::kSplitK};

struct LtField {
  const char* name;
  bool is_signed;
};
constexpr LtField kLtFields[] = {{"algo", true},      {"tile", false},     {"stages", false},
                                 {"splitk", true},    {"reduction", false}, {"swizzle", false},
                                 {"custom", false},   {"inner", false},    {"cluster", false}};

auto LtTie(const LtAlgoConfig& l) {
  return std::make_tuple(l.algo_id, l.tile, l.stages, l.split_k, l.reduction, l.swizzle, l.custom,
                         l.inner_shape, l.cluster_shape);
}

absl::Status Bad(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("candidate \"", text, "\": ", why));
}

// "name=value" -> value, checking the name.
absl::StatusOr<std::string> ValueOf(const std::string& text, const std::string& part,
                                    const char* name) {
  const std::string prefix = absl::StrCat(name, "=");
  if (part.compare(0, prefix.size(), prefix) != 0) {
    return Bad(text, absl::StrCat("expected ", name, "=... where \"", part, "\" is"));
  }
  return part.substr(prefix.size());
}

absl::StatusOr<TileHint> ParseTile(const std::string& text, const std::string& v) {
  for (TileHint t : kTiles) {
    if (v == TileHintName(t)) return t;
  }
  return Bad(text, absl::StrCat("unknown tile \"", v, "\""));
}

absl::StatusOr<ScheduleHint> ParseSchedule(const std::string& text, const std::string& v) {
  for (ScheduleHint s : kSchedules) {
    if (v == ScheduleHintName(s)) return s;
  }
  return Bad(text, absl::StrCat("unknown schedule \"", v, "\""));
}

absl::StatusOr<CandidateId> ParseLt(const std::string& text,
                                    const std::vector<std::string>& parts) {
  constexpr size_t kFields = sizeof(kLtFields) / sizeof(kLtFields[0]);
  if (parts.size() != kFields + 1) {
    return Bad(text, absl::StrCat("cublaslt needs ", kFields, " fields"));
  }
  int64_t values[kFields];
  for (size_t i = 0; i < kFields; ++i) {
    absl::StatusOr<std::string> v = ValueOf(text, parts[i + 1], kLtFields[i].name);
    if (!v.ok()) return v.status();
    if (!absl::SimpleAtoi(*v, &values[i]) || values[i] > UINT32_MAX ||
        values[i] < (kLtFields[i].is_signed ? INT32_MIN : 0) ||
        (kLtFields[i].is_signed && values[i] > INT32_MAX)) {
      return Bad(text, absl::StrCat(kLtFields[i].name, " \"", *v, "\" is out of range"));
    }
  }
  CandidateId c;
  c.family = CandidateFamily::kCublasLt;
  c.lt.algo_id = static_cast<int32_t>(values[0]);
  c.lt.tile = static_cast<uint32_t>(values[1]);
  c.lt.stages = static_cast<uint32_t>(values[2]);
  c.lt.split_k = static_cast<int32_t>(values[3]);
  c.lt.reduction = static_cast<uint32_t>(values[4]);
  c.lt.swizzle = static_cast<uint32_t>(values[5]);
  c.lt.custom = static_cast<uint32_t>(values[6]);
  c.lt.inner_shape = static_cast<uint32_t>(values[7]);
  c.lt.cluster_shape = static_cast<uint32_t>(values[8]);
  return c;
}

}  // namespace

CandidateId CandidateId::Heuristic() { return CandidateId{}; }

CandidateId CandidateId::CublasLtHeuristic() {
  CandidateId c;
  c.family = CandidateFamily::kCublasLt;
  return c;
}

CandidateId CandidateId::OursGroupedHeuristic() {
  CandidateId c;
  c.family = CandidateFamily::kOursGrouped;
  return c;
}

bool CandidateId::operator==(const CandidateId& o) const {
  if (family != o.family) return false;
  switch (family) {
    case CandidateFamily::kOurs:
      return tile == o.tile && schedule == o.schedule;
    case CandidateFamily::kOursGrouped:
      return tile == o.tile;
    case CandidateFamily::kCublasLt:
      return LtTie(lt) == LtTie(o.lt);
    default:
      return true;
  }
}

CandidateId DefaultCandidate(LaunchKind kind) {
  return kind == LaunchKind::kSingle ? CandidateId::Heuristic()
                                     : CandidateId::OursGroupedHeuristic();
}

const char* TileHintName(TileHint t) {
  switch (t) {
    case TileHint::kAuto:
      return "auto";
    case TileHint::k128x256:
      return "128x256";
    case TileHint::k128x128:
      return "128x128";
    case TileHint::k128x128PingPong:
      return "128x128_pingpong";
    case TileHint::k128x64:
      return "128x64";
    case TileHint::k192x192:
      return "192x192";
  }
  return "unknown";
}

const char* ScheduleHintName(ScheduleHint s) {
  switch (s) {
    case ScheduleHint::kAuto:
      return "auto";
    case ScheduleHint::kDataParallel:
      return "data_parallel";
    case ScheduleHint::kStreamK:
      return "stream_k";
    case ScheduleHint::kSplitK:
      return "split_k";
  }
  return "unknown";
}

std::string CandidateToString(const CandidateId& c) {
  switch (c.family) {
    case CandidateFamily::kOurs:
      if (c.tile == TileHint::kAuto && c.schedule == ScheduleHint::kAuto) return "ours";
      return absl::StrCat("ours/tile=", TileHintName(c.tile),
                          "/schedule=", ScheduleHintName(c.schedule));
    case CandidateFamily::kOursGrouped:
      if (c.tile == TileHint::kAuto) return "ours_grouped";
      return absl::StrCat("ours_grouped/tile=", TileHintName(c.tile));
    case CandidateFamily::kCublasGemmEx:
      return "cublas_gemm_ex";
    case CandidateFamily::kCublasStridedBatched:
      return "cublas_strided_batched";
    case CandidateFamily::kCublasGrouped:
      return "cublas_grouped";
    case CandidateFamily::kCublasLt:
      return absl::StrCat("cublaslt/algo=", c.lt.algo_id, "/tile=", c.lt.tile,
                          "/stages=", c.lt.stages, "/splitk=", c.lt.split_k,
                          "/reduction=", c.lt.reduction, "/swizzle=", c.lt.swizzle,
                          "/custom=", c.lt.custom, "/inner=", c.lt.inner_shape,
                          "/cluster=", c.lt.cluster_shape);
  }
  return "unknown";
}

absl::StatusOr<CandidateId> ParseCandidate(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, '/');
  const std::string& family = parts[0];
  CandidateId c;
  if (family == "ours") {
    if (parts.size() == 1) return CandidateId::Heuristic();
    if (parts.size() != 3) return Bad(text, "ours takes tile= and schedule= or nothing");
    absl::StatusOr<std::string> tile = ValueOf(text, parts[1], "tile");
    if (!tile.ok()) return tile.status();
    absl::StatusOr<std::string> schedule = ValueOf(text, parts[2], "schedule");
    if (!schedule.ok()) return schedule.status();
    absl::StatusOr<TileHint> t = ParseTile(text, *tile);
    if (!t.ok()) return t.status();
    absl::StatusOr<ScheduleHint> s = ParseSchedule(text, *schedule);
    if (!s.ok()) return s.status();
    c.family = CandidateFamily::kOurs;
    c.tile = *t;
    c.schedule = *s;
    return c;
  }
  if (family == "ours_grouped") {
    if (parts.size() == 1) return CandidateId::OursGroupedHeuristic();
    if (parts.size() != 2) return Bad(text, "ours_grouped takes tile= or nothing");
    absl::StatusOr<std::string> tile = ValueOf(text, parts[1], "tile");
    if (!tile.ok()) return tile.status();
    absl::StatusOr<TileHint> t = ParseTile(text, *tile);
    if (!t.ok()) return t.status();
    if (*t != TileHint::k128x256 && *t != TileHint::k128x128) {
      return Bad(text, "the grouped kernel has the 128x256 and 128x128 tiles");
    }
    c.family = CandidateFamily::kOursGrouped;
    c.tile = *t;
    return c;
  }
  if (family == "cublaslt") return ParseLt(text, parts);
  const struct {
    const char* name;
    CandidateFamily family;
  } plain[] = {{"cublas_gemm_ex", CandidateFamily::kCublasGemmEx},
               {"cublas_strided_batched", CandidateFamily::kCublasStridedBatched},
               {"cublas_grouped", CandidateFamily::kCublasGrouped}};
  for (const auto& p : plain) {
    if (family != p.name) continue;
    if (parts.size() != 1) return Bad(text, absl::StrCat(p.name, " takes no fields"));
    c.family = p.family;
    return c;
  }
  return Bad(text, "unknown family");
}

const char* FamilyLabel(CandidateFamily family) {
  switch (family) {
    case CandidateFamily::kOurs:
    case CandidateFamily::kOursGrouped:
      return "ours";
    case CandidateFamily::kCublasGemmEx:
    case CandidateFamily::kCublasStridedBatched:
    case CandidateFamily::kCublasGrouped:
      return "cublas";
    case CandidateFamily::kCublasLt:
      return "cublaslt";
  }
  return "unknown";
}

std::vector<CandidateId> BasePortfolio(const ShapeClass& c) {
  std::vector<CandidateId> out = {DefaultCandidate(c.kind)};
  // FP8: our FP8 kernel picks its own configuration, and cuBLAS runs FP8
  // only through cuBLASLt, whose algorithms the GPU side appends.
  if (::gemm::IsFp8(c.in_dtype)) return out;
  const bool hopper_inputs = c.in_dtype != DataType::kFp32 || c.allow_tf32;
  if (c.kind == LaunchKind::kGrouped) {
    if (c.in_dtype != DataType::kFp32) {
      for (TileHint t : {TileHint::k128x256, TileHint::k128x128}) {
        CandidateId g = CandidateId::OursGroupedHeuristic();
        g.tile = t;
        out.push_back(g);
      }
    }
    CandidateId cublas;
    cublas.family = CandidateFamily::kCublasGrouped;
    out.push_back(cublas);
    return out;
  }
  if (hopper_inputs) {
    for (TileHint t : kTiles) {
      for (ScheduleHint s : kSchedules) {
        if (t == TileHint::k128x128PingPong && s != ScheduleHint::kDataParallel) continue;
        CandidateId ours;
        ours.tile = t;
        ours.schedule = s;
        out.push_back(ours);
      }
    }
  }
  CandidateId cublas;
  cublas.family = c.batch > 1 ? CandidateFamily::kCublasStridedBatched
                              : CandidateFamily::kCublasGemmEx;
  out.push_back(cublas);
  return out;
}

}  // namespace tuning
}  // namespace gemm_kernels
