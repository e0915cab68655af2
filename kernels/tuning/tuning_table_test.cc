#include "kernels/tuning/tuning_table.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace gemm_kernels {
namespace tuning {
namespace {

TableKey H200Key() { return {"NVIDIA H200", "13000", "13000", "130100", "0.1.0"}; }

ShapeClass Dense(int64_t m, int64_t n, int64_t k) {
  ShapeClass c;
  c.b_layout = Layout::kColMajor;
  c.m = m;
  c.n = n;
  c.k = k;
  return c;
}

CandidateId Cublas() {
  CandidateId c;
  c.family = CandidateFamily::kCublasGemmEx;
  return c;
}

TuningTable TwoEntries() {
  TuningTable t(H200Key(), 4);
  EXPECT_TRUE(t.Put({Dense(4096, 4096, 4096), Cublas(), 190.25, 186.5, 196.0}).ok());
  CandidateId sk;
  sk.tile = TileHint::k192x192;
  sk.schedule = ScheduleHint::kStreamK;
  EXPECT_TRUE(t.Put({Dense(4871, 4871, 4871), sk, 300.125, 295.0, 0}).ok());
  return t;
}

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(TuningTableTest, SerializeParseRoundTrips) {
  const TuningTable t = TwoEntries();
  const std::string text = t.Serialize({"made by: tune_portfolio tune --shapes=dense"});
  EXPECT_EQ(text.rfind("gemm_tuning_table 2\ngpu NVIDIA H200\ndriver 13000\n", 0), 0u) << text;
  EXPECT_NE(text.find("\n# made by: tune_portfolio"), std::string::npos);
  absl::StatusOr<TuningTable> back = TuningTable::Parse(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->key(), H200Key());
  EXPECT_EQ(back->buckets_per_octave(), 4);
  ASSERT_EQ(back->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back->entries()[i].shape, t.entries()[i].shape);
    EXPECT_EQ(back->entries()[i].choice, t.entries()[i].choice);
    EXPECT_EQ(back->entries()[i].sustained_us, t.entries()[i].sustained_us);
    EXPECT_EQ(back->entries()[i].interleaved_us, t.entries()[i].interleaved_us);
    EXPECT_EQ(back->entries()[i].default_sustained_us, t.entries()[i].default_sustained_us);
  }
  EXPECT_EQ(back->Serialize(), t.Serialize());
}

TEST(TuningTableTest, LookupByBucketFallsBackToTheDefault) {
  const TuningTable t = TwoEntries();
  // Any problem whose class lands in the 4096 buckets takes the entry.
  GemmArguments g;
  g.m = 3500;
  g.n = 4096;
  g.k = 4000;
  const void* base = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  g.a = {base, DataType::kBf16, Layout::kRowMajor, 4000, 0};
  g.b = {base, DataType::kBf16, Layout::kColMajor, 4000, 0};
  g.d = {base, DataType::kBf16, Layout::kRowMajor, 4096, 0};
  ASSERT_EQ(ClassOf(g, 4), Dense(4096, 4096, 4096));
  EXPECT_EQ(t.Choose(ClassOf(g, 4)), Cublas());
  ASSERT_NE(t.Find(ClassOf(g, 4)), nullptr);
  // Another layout, another bucket or a grouped launch: no entry, the default.
  g.b.layout = Layout::kRowMajor;
  g.b.ld = 4096;
  EXPECT_EQ(t.Find(ClassOf(g, 4)), nullptr);
  EXPECT_EQ(t.Choose(ClassOf(g, 4)), CandidateId::Heuristic());
  EXPECT_EQ(t.Choose(Dense(8192, 4096, 4096)), CandidateId::Heuristic());
  ShapeClass grouped = Dense(4096, 4096, 4096);
  grouped.kind = LaunchKind::kGrouped;
  EXPECT_EQ(t.Choose(grouped), CandidateId::OursGroupedHeuristic());
}

TEST(TuningTableTest, PutReplacesAndChecksEdges) {
  TuningTable t = TwoEntries();
  ASSERT_TRUE(t.Put({Dense(4096, 4096, 4096), CandidateId::Heuristic(), 1, 1, 1}).ok());
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Choose(Dense(4096, 4096, 4096)), CandidateId::Heuristic());
  EXPECT_FALSE(t.Put({Dense(4000, 4096, 4096), Cublas(), 1, 1, 1}).ok());
  EXPECT_FALSE(t.Put({Dense(4096, 4096, 4096), Cublas(), -1, 1, 1}).ok());
}

TEST(TuningTableTest, MalformedFilesNameTheLineAndField) {
  const std::string good = TwoEntries().Serialize();
  struct Case {
    std::string from, to, expect;
  } cases[] = {
      {"gemm_tuning_table 2", "gemm_tuning_table 1", "line 1: format version"},
      {"gemm_tuning_table 2", "some other file", "line 1: not a tuning table"},
      {"driver 13000\n", "", "line 3: expected the header line \"driver VALUE\""},
      {"buckets_per_octave 4", "buckets_per_octave 0", "line 7: buckets_per_octave"},
      {"gpu NVIDIA H200", "gpu ", "line 2: expected the header line \"gpu VALUE\""},
      {"m=4096 n=4096", "m=4000 n=4096", "line 8: m: \"4000\" is not a bucket edge"},
      {"choice=cublas_gemm_ex", "choice=cublas_grouped", "line 8: choice:"},
      {"choice=cublas_gemm_ex", "choice=magic", "line 8: choice: candidate \"magic\""},
      {"sustained_us=190.25", "sustained_us=fast", "line 8: sustained_us:"},
      {"interleaved_us=186.5", "interleaved_us=0", "line 8: sustained_us and interleaved_us"},
      {"interleaved_us=186.5", "interleaved_us=186.5 extra=1", "line 8: a class line"},
      {" k=4096", " q=4096", "line 8: field 14 must be k="},
  };
  for (const Case& c : cases) {
    std::string text = good;
    const size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    absl::StatusOr<TuningTable> t = TuningTable::Parse(text);
    ASSERT_FALSE(t.ok()) << c.to;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(t.status().message()).find(c.expect), std::string::npos)
        << t.status() << " wanted " << c.expect;
  }
  // A class twice.
  const size_t line = good.find("class ");
  const std::string dup = good + good.substr(line, good.find('\n', line) - line + 1);
  absl::StatusOr<TuningTable> t = TuningTable::Parse(dup);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("appears twice"), std::string::npos);
  // A header cut short.
  EXPECT_FALSE(TuningTable::Parse("gemm_tuning_table 2\ngpu NVIDIA H200\n").ok());
  EXPECT_FALSE(TuningTable::Parse("").ok());
}

TEST(TuningTableTest, CommentsAndBlankLinesAreSkipped) {
  std::string text = "# a tuned table\n\n" + TwoEntries().Serialize() + "\n# end\n";
  absl::StatusOr<TuningTable> t = TuningTable::Parse(text);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 2u);
}

TEST(TuningTableTest, SaveAndLoadWithTheSameKey) {
  const std::string path = TempPath("same_key.table");
  ASSERT_TRUE(SaveTuningTable(TwoEntries(), path, {"note"}).ok());
  absl::StatusOr<LoadedTable> loaded = LoadTuningTable(path, H200Key());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->ignored_reason, "");
  EXPECT_EQ(loaded->table.size(), 2u);
  EXPECT_EQ(loaded->table.Choose(Dense(4096, 4096, 4096)), Cublas());
}

TEST(TuningTableTest, TableOfAnotherGpuOrLibraryIsIgnored) {
  const std::string path = TempPath("other_key.table");
  ASSERT_TRUE(SaveTuningTable(TwoEntries(), path).ok());
  struct Case {
    TableKey current;
    std::string field;
  };
  TableKey h100 = H200Key();
  h100.gpu = "NVIDIA H100 80GB HBM3";
  TableKey driver = H200Key();
  driver.driver = "13010";
  TableKey runtime = H200Key();
  runtime.cuda_runtime = "12080";
  TableKey cublas = H200Key();
  cublas.cublas = "130200";
  TableKey build = H200Key();
  build.build = "0.2.0";
  for (const Case& c : {Case{h100, "gpu"}, Case{driver, "driver"}, Case{runtime, "cuda_runtime"},
                        Case{cublas, "cublas"}, Case{build, "build"}}) {
    absl::StatusOr<LoadedTable> loaded = LoadTuningTable(path, c.current);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->ignored_reason.rfind("made for " + c.field + " \"", 0), 0u)
        << loaded->ignored_reason;
    EXPECT_EQ(loaded->table.size(), 0u);
    EXPECT_EQ(loaded->table.key(), c.current);
    EXPECT_EQ(loaded->table.Choose(Dense(4096, 4096, 4096)), CandidateId::Heuristic());
  }
}

TEST(TuningTableTest, LoadErrorsNameThePath) {
  absl::StatusOr<LoadedTable> missing = LoadTuningTable(TempPath("absent.table"), H200Key());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string path = TempPath("broken.table");
  std::ofstream(path) << "gemm_tuning_table 2\ngpu x\n";
  absl::StatusOr<LoadedTable> broken = LoadTuningTable(path, H200Key());
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(broken.status().message()).find(path), std::string::npos);
}

}  // namespace
}  // namespace tuning
}  // namespace gemm_kernels
