// The tuning table: per shape class, which portfolio member ran fastest at
// the sustained rate on one GPU model with one driver, CUDA runtime, cuBLAS
// and build of ours. Plain C++, tested on the CPU.
//
// File format (text, version 2; parsed strictly, line by line):
//   gemm_tuning_table 2                      first non-comment line
//   gpu NVIDIA H200                          the device name (cudaDeviceProp::name)
//   driver 13000                             cudaDriverGetVersion
//   cuda_runtime 13000                       cudaRuntimeGetVersion
//   cublas 130100                            cublasGetVersion
//   build 0.1.0                              our version (gemm::kVersion)
//   buckets_per_octave 4                     the bucket scheme of shape_class.h
//   class kind=single in=bf16 in_b=bf16 ... group=1 choice=cublas_gemm_ex sustained_us=12.5 interleaved_us=12.1 default_sustained_us=13.0
//   class ...                                one line per class, no class twice
// The header lines come in this order, each once; a header value is the rest
// of its line after one space, non-empty. Class fields are those of
// ClassToString, then choice (CandidateToString), then the chosen member's
// sustained and interleaved microseconds per launch and the default's
// sustained microseconds (0 where the default could not run), in that order.
// Lines starting with '#' and empty lines are skipped anywhere.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tuning/candidate.h"
#include "kernels/tuning/shape_class.h"

namespace gemm_kernels {
namespace tuning {

constexpr int kTableFormatVersion = 2;

// What a table's measurements depend on. A table whose key differs from the
// process's in any field is not used.
struct TableKey {
  std::string gpu;
  std::string driver;
  std::string cuda_runtime;
  std::string cublas;
  std::string build;

  bool operator==(const TableKey& o) const;
  bool operator!=(const TableKey& o) const { return !(*this == o); }
};

// The first field in which `table` differs from `current`, as
// "gpu \"A\" (this process: \"B\")"; "" when they match.
std::string KeyMismatch(const TableKey& table, const TableKey& current);

struct TableEntry {
  ShapeClass shape;
  CandidateId choice;
  double sustained_us = 0;          // the choice, back to back at the power cap
  double interleaved_us = 0;        // the choice, in short interleaved bursts
  double default_sustained_us = 0;  // the default's sustained figure; 0 when it failed
};

class TuningTable {
 public:
  // An empty table: every lookup gives the class's default.
  TuningTable(TableKey key, int buckets_per_octave);

  const TableKey& key() const { return key_; }
  int buckets_per_octave() const { return buckets_per_octave_; }
  size_t size() const { return entries_.size(); }
  // Sorted by class (ShapeClass::operator<).
  const std::vector<TableEntry>& entries() const { return entries_; }

  // Adds or replaces the entry of `entry.shape`. InvalidArgument when its
  // bucket edges are not this table's or a figure is negative or not finite.
  absl::Status Put(const TableEntry& entry);

  // The entry of `shape`, or nullptr.
  const TableEntry* Find(const ShapeClass& shape) const;

  // The table's choice for `shape`, or the class's default
  // (DefaultCandidate) where the table has no entry. Depends only on the
  // table and the class, never on timing during the run.
  CandidateId Choose(const ShapeClass& shape) const;

  // The file text; each of `notes` (e.g. the command that made the table)
  // becomes a '#' line after the header.
  std::string Serialize(const std::vector<std::string>& notes = {}) const;

  // Parses file text. InvalidArgument naming the line and field at fault.
  static absl::StatusOr<TuningTable> Parse(const std::string& text);

 private:
  TableKey key_;
  int buckets_per_octave_;
  std::vector<TableEntry> entries_;
};

// Writes Serialize(notes) to `path` (through a temporary file renamed over
// it, so a reader never sees half a table).
absl::Status SaveTuningTable(const TuningTable& table, const std::string& path,
                             const std::vector<std::string>& notes = {});

struct LoadedTable {
  TuningTable table;
  // Why the file's entries were dropped ("" when they are used).
  std::string ignored_reason;
};

// Reads and parses `path` without looking at its key (a server reads its
// table before it has a device to compare the key with). NotFound when the
// file cannot be read; InvalidArgument naming the path, line and field.
absl::StatusOr<TuningTable> ReadTuningTable(const std::string& path);

// Reads and parses `path`. A table whose key differs from `current` loads
// as an empty table under `current` (every lookup falls back to the
// default), with the reason in ignored_reason and a warning logged. A file
// that cannot be read is NotFound; a malformed one InvalidArgument naming
// the path, line and field.
absl::StatusOr<LoadedTable> LoadTuningTable(const std::string& path, const TableKey& current);

}  // namespace tuning
}  // namespace gemm_kernels
