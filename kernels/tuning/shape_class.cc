#include "kernels/tuning/shape_class.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/config/heuristic.h"

namespace gemm_kernels {
namespace tuning {
namespace {

// Edges of indices up to 63 octaves cover every int64 value.
constexpr int kMaxOctaves = 63;

bool RowsOnSectors(const MatrixDesc& m, int64_t batch) {
  const int64_t size = static_cast<int64_t>(DataTypeSize(m.dtype));
  return !Sm90RowsOffSector(m.ld * size, m.batch_stride * size, batch,
                            reinterpret_cast<uintptr_t>(m.ptr));
}


absl::Status FieldError(const std::string& field, const std::string& value,
                        const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": \"", value, "\" ", why));
}

absl::Status ParseDType(const std::string& field, const std::string& v, DataType* out) {
  static constexpr DataType kTypes[] = {DataType::kFp32, DataType::kFp16, DataType::kBf16,
                                        DataType::kFp8E4m3, DataType::kFp8E5m2};
  for (DataType t : kTypes) {
    if (v == DataTypeName(t)) {
      *out = t;
      return absl::OkStatus();
    }
  }
  std::string names;
  for (DataType t : kTypes) absl::StrAppend(&names, names.empty() ? "" : ", ", DataTypeName(t));
  return FieldError(field, v, absl::StrCat("is not one of ", names));
}

absl::Status ParseScales(const std::string& field, const std::string& v, ScaleMode* out) {
  for (ScaleMode s : {ScaleMode::kNone, ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock}) {
    if (v == ScaleModeName(s)) {
      *out = s;
      return absl::OkStatus();
    }
  }
  return FieldError(field, v, "is not one of none, tensor, channel, block");
}

absl::Status ParseLayout(const std::string& field, const std::string& v, Layout* out) {
  if (v == "row" || v == "col") {
    *out = v == "row" ? Layout::kRowMajor : Layout::kColMajor;
    return absl::OkStatus();
  }
  return FieldError(field, v, "is not row or col");
}

absl::Status ParseFlag(const std::string& field, const std::string& v, bool* out) {
  if (v == "0" || v == "1") {
    *out = v == "1";
    return absl::OkStatus();
  }
  return FieldError(field, v, "is not 0 or 1");
}

absl::Status ParseEdge(const std::string& field, const std::string& v, int per_octave,
                       int64_t* out) {
  int64_t x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < 1) return FieldError(field, v, "is not a positive integer");
  if (!IsBucketEdge(x, per_octave)) {
    return FieldError(field, v,
                      absl::StrCat("is not a bucket edge at ", per_octave,
                                   " buckets per octave (the nearest is ",
                                   BucketEdgeOf(x, per_octave), ")"));
  }
  *out = x;
  return absl::OkStatus();
}

auto Tie(const ShapeClass& c) {
  return std::make_tuple(c.kind, c.in_dtype, c.in_b_dtype, c.out_dtype, c.allow_tf32, c.a_scales,
                         c.b_scales, c.a_layout, c.b_layout, c.d_layout, c.sector_aligned, c.m,
                         c.n, c.k, c.batch, c.group);
}

}  // namespace

int64_t BucketUpperEdge(int index, int buckets_per_octave) {
  // 2^63 does not fit: the last bucket ends at the largest int64.
  if (index >= kMaxOctaves * buckets_per_octave) return INT64_MAX;
  return std::llround(std::exp2(static_cast<double>(index) / buckets_per_octave));
}

int BucketOf(int64_t value, int buckets_per_octave) {
  const int last = kMaxOctaves * buckets_per_octave;
  // Start one octave below the estimate so rounding of log2 cannot skip the
  // smallest qualifying index.
  const int guess = static_cast<int>(std::floor(std::log2(static_cast<double>(value)) *
                                                buckets_per_octave)) - buckets_per_octave;
  for (int i = std::max(0, guess); i < last; ++i) {
    if (BucketUpperEdge(i, buckets_per_octave) >= value) return i;
  }
  return last;
}

int64_t BucketEdgeOf(int64_t value, int buckets_per_octave) {
  return BucketUpperEdge(BucketOf(std::max<int64_t>(value, 1), buckets_per_octave),
                         buckets_per_octave);
}

bool IsBucketEdge(int64_t edge, int buckets_per_octave) {
  return edge >= 1 && BucketEdgeOf(edge, buckets_per_octave) == edge;
}

bool ShapeClass::operator==(const ShapeClass& o) const { return Tie(*this) == Tie(o); }
bool ShapeClass::operator<(const ShapeClass& o) const { return Tie(*this) < Tie(o); }

ShapeClass ClassOf(const GemmArguments& args, int buckets_per_octave) {
  ShapeClass c;
  c.kind = LaunchKind::kSingle;
  c.in_dtype = args.a.dtype;
  c.in_b_dtype = args.b.dtype;
  c.out_dtype = args.d.dtype;
  c.a_scales = args.a_scale.mode;
  c.b_scales = args.b_scale.mode;
  c.allow_tf32 = args.a.dtype == DataType::kFp32 && args.allow_tf32;
  c.a_layout = args.a.layout;
  c.b_layout = args.b.layout;
  c.d_layout = args.d.layout;
  c.sector_aligned =
      RowsOnSectors(args.a, args.batch_count) && RowsOnSectors(args.b, args.batch_count);
  c.m = BucketEdgeOf(args.m, buckets_per_octave);
  c.n = BucketEdgeOf(args.n, buckets_per_octave);
  c.k = BucketEdgeOf(args.k, buckets_per_octave);
  c.batch = BucketEdgeOf(args.batch_count, buckets_per_octave);
  c.group = 1;
  return c;
}

absl::StatusOr<ShapeClass> GroupedClassOf(const std::vector<GemmArguments>& members,
                                          int buckets_per_octave) {
  if (members.empty()) return absl::InvalidArgumentError("members: the group is empty");
  ShapeClass c = ClassOf(members.front(), buckets_per_octave);
  c.kind = LaunchKind::kGrouped;
  int64_t m = 1, n = 1, k = 1;
  for (const GemmArguments& g : members) {
    m = std::max(m, g.m);
    n = std::max(n, g.n);
    k = std::max(k, g.k);
    c.sector_aligned = c.sector_aligned && RowsOnSectors(g.a, 1) && RowsOnSectors(g.b, 1);
  }
  c.m = BucketEdgeOf(m, buckets_per_octave);
  c.n = BucketEdgeOf(n, buckets_per_octave);
  c.k = BucketEdgeOf(k, buckets_per_octave);
  c.batch = 1;
  c.group = BucketEdgeOf(static_cast<int64_t>(members.size()), buckets_per_octave);
  return c;
}

const std::vector<std::string>& ClassFieldNames() {
  static const std::vector<std::string> names = {
      "kind", "in", "in_b",    "out", "tf32", "sa", "sb",    "a",
      "b",    "d",  "aligned", "m",   "n",    "k",  "batch", "group"};
  return names;
}

std::string ClassToString(const ShapeClass& c) {
  return absl::StrCat("kind=", c.kind == LaunchKind::kSingle ? "single" : "grouped",
                      " in=", DataTypeName(c.in_dtype), " in_b=", DataTypeName(c.in_b_dtype),
                      " out=", DataTypeName(c.out_dtype), " tf32=", c.allow_tf32 ? 1 : 0,
                      " sa=", ScaleModeName(c.a_scales), " sb=", ScaleModeName(c.b_scales),
                      " a=", LayoutName(c.a_layout),
                      " b=", LayoutName(c.b_layout), " d=", LayoutName(c.d_layout),
                      " aligned=", c.sector_aligned ? 1 : 0, " m=", c.m, " n=", c.n, " k=", c.k,
                      " batch=", c.batch, " group=", c.group);
}

absl::StatusOr<ShapeClass> ClassFromFields(const std::vector<std::string>& v,
                                           int buckets_per_octave) {
  const std::vector<std::string>& names = ClassFieldNames();
  if (v.size() != names.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("class: ", v.size(), " fields where ", names.size(), " are needed"));
  }
  ShapeClass c;
  if (v[0] != "single" && v[0] != "grouped") {
    return FieldError(names[0], v[0], "is not single or grouped");
  }
  c.kind = v[0] == "single" ? LaunchKind::kSingle : LaunchKind::kGrouped;
  absl::Status s;
  if (!(s = ParseDType(names[1], v[1], &c.in_dtype)).ok()) return s;
  if (!(s = ParseDType(names[2], v[2], &c.in_b_dtype)).ok()) return s;
  if (!(s = ParseDType(names[3], v[3], &c.out_dtype)).ok()) return s;
  if (!(s = ParseFlag(names[4], v[4], &c.allow_tf32)).ok()) return s;
  if (!(s = ParseScales(names[5], v[5], &c.a_scales)).ok()) return s;
  if (!(s = ParseScales(names[6], v[6], &c.b_scales)).ok()) return s;
  const bool fp8 = ::gemm::IsFp8(c.in_dtype);
  if (::gemm::IsFp8(c.in_b_dtype) != fp8 || (!fp8 && c.in_b_dtype != c.in_dtype)) {
    return FieldError(names[2], v[2],
                      fp8 ? "must be an FP8 type beside an FP8 A" : "must equal in (not FP8)");
  }
  if (::gemm::IsFp8(c.out_dtype)) return FieldError(names[3], v[3], "is an input type only");
  if (c.allow_tf32 && c.in_dtype != DataType::kFp32) {
    return FieldError(names[4], v[4], "applies only to fp32 inputs");
  }
  for (int i : {5, 6}) {
    const ScaleMode mode = i == 5 ? c.a_scales : c.b_scales;
    if (fp8 && mode == ScaleMode::kNone) return FieldError(names[i], v[i], "FP8 inputs have scales");
    if (!fp8 && mode != ScaleMode::kNone) return FieldError(names[i], v[i], "applies only to FP8");
  }
  if (!(s = ParseLayout(names[7], v[7], &c.a_layout)).ok()) return s;
  if (!(s = ParseLayout(names[8], v[8], &c.b_layout)).ok()) return s;
  if (!(s = ParseLayout(names[9], v[9], &c.d_layout)).ok()) return s;
  if (!(s = ParseFlag(names[10], v[10], &c.sector_aligned)).ok()) return s;
  int64_t* edges[] = {&c.m, &c.n, &c.k, &c.batch, &c.group};
  for (int i = 0; i < 5; ++i) {
    if (!(s = ParseEdge(names[11 + i], v[11 + i], buckets_per_octave, edges[i])).ok()) return s;
  }
  if (c.kind == LaunchKind::kSingle && c.group != 1) {
    return FieldError(names[15], v[15], "must be 1 for a single launch");
  }
  if (c.kind == LaunchKind::kGrouped && c.batch != 1) {
    return FieldError(names[14], v[14], "must be 1 for a grouped launch");
  }
  return c;
}

}  // namespace tuning
}  // namespace gemm_kernels
