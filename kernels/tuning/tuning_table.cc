#include "kernels/tuning/tuning_table.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace gemm_kernels {
namespace tuning {
namespace {

constexpr char kMagic[] = "gemm_tuning_table";

// The header lines after the magic one, in file order.
constexpr const char* kHeaderNames[] = {"gpu", "driver", "cuda_runtime", "cublas", "build",
                                        "buckets_per_octave"};
constexpr size_t kHeaderLines = sizeof(kHeaderNames) / sizeof(kHeaderNames[0]);

// The fields of a class line after the class's own.
constexpr const char* kEntryFieldNames[] = {"choice", "sustained_us", "interleaved_us",
                                            "default_sustained_us"};
constexpr size_t kEntryFields = sizeof(kEntryFieldNames) / sizeof(kEntryFieldNames[0]);

bool ValidFigure(double x) { return std::isfinite(x) && x >= 0; }

std::string* KeyField(TableKey* key, size_t i) {
  std::string* fields[] = {&key->gpu, &key->driver, &key->cuda_runtime, &key->cublas,
                           &key->build};
  return fields[i];
}

const std::string& KeyField(const TableKey& key, size_t i) {
  return *KeyField(const_cast<TableKey*>(&key), i);
}

absl::Status LineError(int line, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", what));
}

// "name value..." with exactly one space after the name.
absl::StatusOr<std::string> HeaderValue(int line_no, const std::string& line, const char* name) {
  const std::string prefix = absl::StrCat(name, " ");
  if (line.compare(0, prefix.size(), prefix) != 0 || line.size() == prefix.size() ||
      line[prefix.size()] == ' ') {
    return LineError(line_no, absl::StrCat("expected the header line \"", name, " VALUE\""));
  }
  return line.substr(prefix.size());
}

absl::StatusOr<TableEntry> ParseEntry(const std::string& line, int per_octave) {
  std::vector<std::string> tokens = absl::StrSplit(line, ' ');
  const std::vector<std::string>& class_names = ClassFieldNames();
  const size_t want = 1 + class_names.size() + kEntryFields;
  if (tokens.size() != want || tokens[0] != "class") {
    return absl::InvalidArgumentError(
        absl::StrCat("a class line has \"class\" and ", want - 1,
                     " space-separated name=value fields; this one has ", tokens.size(),
                     " tokens"));
  }
  std::vector<std::string> values;
  for (size_t i = 1; i < tokens.size(); ++i) {
    const char* name = i <= class_names.size() ? class_names[i - 1].c_str()
                                               : kEntryFieldNames[i - 1 - class_names.size()];
    const std::string prefix = absl::StrCat(name, "=");
    if (tokens[i].compare(0, prefix.size(), prefix) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("field ", i, " must be ", name, "=..., not \"", tokens[i], "\""));
    }
    values.push_back(tokens[i].substr(prefix.size()));
  }
  TableEntry e;
  std::vector<std::string> class_values(values.begin(), values.begin() + class_names.size());
  absl::StatusOr<ShapeClass> shape = ClassFromFields(class_values, per_octave);
  if (!shape.ok()) return shape.status();
  e.shape = *shape;
  const size_t base = class_names.size();
  absl::StatusOr<CandidateId> choice = ParseCandidate(values[base]);
  if (!choice.ok()) return absl::InvalidArgumentError(absl::StrCat("choice: ", choice.status().message()));
  const bool grouped_family = choice->family == CandidateFamily::kOursGrouped ||
                              choice->family == CandidateFamily::kCublasGrouped;
  if (grouped_family != (e.shape.kind == LaunchKind::kGrouped)) {
    return absl::InvalidArgumentError(absl::StrCat("choice: \"", values[base],
                                                   "\" does not run a ",
                                                   grouped_family ? "single" : "grouped",
                                                   " launch"));
  }
  e.choice = *choice;
  double* figures[] = {&e.sustained_us, &e.interleaved_us, &e.default_sustained_us};
  for (size_t i = 0; i < 3; ++i) {
    const std::string& v = values[base + 1 + i];
    if (!absl::SimpleAtod(v, figures[i]) || !ValidFigure(*figures[i])) {
      return absl::InvalidArgumentError(absl::StrCat(kEntryFieldNames[1 + i], ": \"", v,
                                                     "\" is not a non-negative number"));
    }
  }
  if (e.sustained_us <= 0 || e.interleaved_us <= 0) {
    return absl::InvalidArgumentError("sustained_us and interleaved_us must be positive");
  }
  return e;
}

}  // namespace

bool TableKey::operator==(const TableKey& o) const { return KeyMismatch(*this, o).empty(); }

std::string KeyMismatch(const TableKey& table, const TableKey& current) {
  for (size_t i = 0; i + 1 < kHeaderLines; ++i) {
    if (KeyField(table, i) != KeyField(current, i)) {
      return absl::StrCat(kHeaderNames[i], " \"", KeyField(table, i), "\" (this process: \"",
                          KeyField(current, i), "\")");
    }
  }
  return "";
}

TuningTable::TuningTable(TableKey key, int buckets_per_octave)
    : key_(std::move(key)), buckets_per_octave_(buckets_per_octave) {}

absl::Status TuningTable::Put(const TableEntry& entry) {
  const ShapeClass& s = entry.shape;
  for (int64_t edge : {s.m, s.n, s.k, s.batch, s.group}) {
    if (!IsBucketEdge(edge, buckets_per_octave_)) {
      return absl::InvalidArgumentError(absl::StrCat("entry.shape: ", edge,
                                                     " is not a bucket edge at ",
                                                     buckets_per_octave_, " per octave"));
    }
  }
  if (!ValidFigure(entry.sustained_us) || !ValidFigure(entry.interleaved_us) ||
      !ValidFigure(entry.default_sustained_us)) {
    return absl::InvalidArgumentError("entry: figures must be finite and non-negative");
  }
  auto it = std::lower_bound(
      entries_.begin(), entries_.end(), s,
      [](const TableEntry& e, const ShapeClass& key) { return e.shape < key; });
  if (it != entries_.end() && it->shape == s) {
    *it = entry;
  } else {
    entries_.insert(it, entry);
  }
  return absl::OkStatus();
}

const TableEntry* TuningTable::Find(const ShapeClass& shape) const {
  auto it = std::lower_bound(
      entries_.begin(), entries_.end(), shape,
      [](const TableEntry& e, const ShapeClass& key) { return e.shape < key; });
  return it != entries_.end() && it->shape == shape ? &*it : nullptr;
}

CandidateId TuningTable::Choose(const ShapeClass& shape) const {
  const TableEntry* e = Find(shape);
  return e ? e->choice : DefaultCandidate(shape.kind);
}

std::string TuningTable::Serialize(const std::vector<std::string>& notes) const {
  std::ostringstream out;
  out << kMagic << " " << kTableFormatVersion << "\n";
  for (size_t i = 0; i + 1 < kHeaderLines; ++i) {
    out << kHeaderNames[i] << " " << KeyField(key_, i) << "\n";
  }
  out << kHeaderNames[kHeaderLines - 1] << " " << buckets_per_octave_ << "\n";
  for (const std::string& note : notes) {
    for (absl::string_view line : absl::StrSplit(note, '\n')) out << "# " << line << "\n";
  }
  for (const TableEntry& e : entries_) {
    // %.17g round-trips every double, so a saved table parses back equal.
    char figures[128];
    std::snprintf(figures, sizeof(figures), "sustained_us=%.17g interleaved_us=%.17g "
                  "default_sustained_us=%.17g",
                  e.sustained_us, e.interleaved_us, e.default_sustained_us);
    out << "class " << ClassToString(e.shape) << " choice=" << CandidateToString(e.choice) << " "
        << figures << "\n";
  }
  return out.str();
}

absl::StatusOr<TuningTable> TuningTable::Parse(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  TableKey key;
  int per_octave = 0;
  size_t header = 0;  // header lines read: the magic line, then kHeaderNames
  std::vector<TableEntry> entries;
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    const std::string& line = lines[i];
    if (line.empty() || line[0] == '#') continue;
    if (header == 0) {
      absl::StatusOr<std::string> v = HeaderValue(line_no, line, kMagic);
      if (!v.ok()) return LineError(line_no, "not a tuning table (no gemm_tuning_table line)");
      if (*v != std::to_string(kTableFormatVersion)) {
        return LineError(line_no, absl::StrCat("format version \"", *v, "\"; this build reads ",
                                               kTableFormatVersion));
      }
      ++header;
      continue;
    }
    if (header <= kHeaderLines) {
      const char* name = kHeaderNames[header - 1];
      absl::StatusOr<std::string> v = HeaderValue(line_no, line, name);
      if (!v.ok()) return v.status();
      if (header < kHeaderLines) {
        *KeyField(&key, header - 1) = *v;
      } else if (!absl::SimpleAtoi(*v, &per_octave) || per_octave < kMinBucketsPerOctave ||
                 per_octave > kMaxBucketsPerOctave) {
        return LineError(line_no, absl::StrCat("buckets_per_octave \"", *v, "\" is not in [",
                                               kMinBucketsPerOctave, ", ",
                                               kMaxBucketsPerOctave, "]"));
      }
      ++header;
      continue;
    }
    absl::StatusOr<TableEntry> e = ParseEntry(line, per_octave);
    if (!e.ok()) return LineError(line_no, std::string(e.status().message()));
    for (const TableEntry& seen : entries) {
      if (seen.shape == e->shape) {
        return LineError(line_no, absl::StrCat("class ", ClassToString(e->shape),
                                               " appears twice"));
      }
    }
    entries.push_back(*e);
  }
  if (header <= kHeaderLines) {
    return absl::InvalidArgumentError(
        header == 0 ? "not a tuning table (no gemm_tuning_table line)"
                    : absl::StrCat("the header ends before its \"", kHeaderNames[header - 1],
                                   "\" line"));
  }
  TuningTable table(key, per_octave);
  for (const TableEntry& e : entries) {
    absl::Status s = table.Put(e);
    if (!s.ok()) return s;
  }
  return table;
}

absl::Status SaveTuningTable(const TuningTable& table, const std::string& path,
                             const std::vector<std::string>& notes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      return absl::PermissionDeniedError(
          absl::StrCat("tuning table: cannot write ", tmp, ": ", std::strerror(errno)));
    }
    out << table.Serialize(notes);
    out.close();
    if (!out) return absl::DataLossError(absl::StrCat("tuning table: writing ", tmp, " failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("tuning table: cannot rename ", tmp, " to ", path, ": ", why));
  }
  return absl::OkStatus();
}

absl::StatusOr<TuningTable> ReadTuningTable(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("tuning table: cannot read ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<TuningTable> table = TuningTable::Parse(text.str());
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tuning table ", path, ": ", table.status().message()));
  }
  return table;
}

absl::StatusOr<LoadedTable> LoadTuningTable(const std::string& path, const TableKey& current) {
  absl::StatusOr<TuningTable> table = ReadTuningTable(path);
  if (!table.ok()) return table.status();
  const std::string mismatch = KeyMismatch(table->key(), current);
  if (mismatch.empty()) return LoadedTable{*std::move(table), ""};
  const std::string reason = absl::StrCat("made for ", mismatch);
  spdlog::warn("tuning table {} ignored: {}; every shape class uses the default choice", path,
               reason);
  return LoadedTable{TuningTable(current, table->buckets_per_octave()), reason};
}

}  // namespace tuning
}  // namespace gemm_kernels
