// cuBLAS opened on demand (cublas_library.h): linking the members maps no
// cuBLAS library; the first load maps libcublas and libcublasLt; bad
// libraries are refused by name. Needs no GPU.
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cublas/cublas_gemm.h"

namespace gemm_kernels {
namespace cublas {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string MappedFiles() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str();
}

// One test, in order: the process-wide load can happen only once.
TEST(CublasLoadTest, LoadsOnlyWhenAskedAndRefusesBadLibrariesByName) {
  EXPECT_FALSE(CublasLoaded());
  EXPECT_THAT(MappedFiles(), Not(HasSubstr("libcublas")));

  absl::Status absent = LoadCublas("libgemm_no_such_cublas.so.99");
  EXPECT_EQ(absent.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(absent.message(), HasSubstr("libgemm_no_such_cublas.so.99"));

  // A library that loads but is not cuBLAS: refused naming the first entry
  // point it lacks.
  absl::Status not_cublas = LoadCublas("libm.so.6");
  EXPECT_EQ(not_cublas.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(not_cublas.message(), HasSubstr("libm.so.6"));
  EXPECT_THAT(not_cublas.message(), HasSubstr("cublasCreate_v2"));
  EXPECT_FALSE(CublasLoaded());
  EXPECT_THAT(MappedFiles(), Not(HasSubstr("libcublas")));

  const std::string library = DefaultCublasLibrary();
  EXPECT_THAT(library, HasSubstr("libcublas.so."));
  const absl::Status loaded = LoadCublas(library);
  if (loaded.code() == absl::StatusCode::kFailedPrecondition &&
      absl::StrContains(loaded.message(), "cannot load")) {
    GTEST_SKIP() << "no cuBLAS on this machine: " << loaded.message();
  }
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_TRUE(CublasLoaded());
  const std::string maps = MappedFiles();
  EXPECT_THAT(maps, HasSubstr("libcublas.so"));
  EXPECT_THAT(maps, HasSubstr("libcublasLt.so"));

  EXPECT_TRUE(LoadCublas(library).ok());
  absl::Status other = LoadCublas("libcublas.so");
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr(library));
}

}  // namespace
}  // namespace cublas
}  // namespace gemm_kernels
